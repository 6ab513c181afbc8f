//! Request fingerprints: is a retry the *same* request as the first one?

use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::hash::hex;
use crate::json::{canonical_json, check_pointer, select};

/// Request fingerprints: is a retry the *same* request as the first one?
///
/// A fingerprint is a SHA-256 over the method, the path, the query string (its
/// parameters decoded and sorted by name, a repeated name's values in the
/// order sent), any selected headers (every value, in order) and the body. A JSON
/// body is canonicalised first (object keys sorted, whitespace dropped), so
/// `{"a":1,"b":2}` and `{ "b": 2, "a": 1 }` fingerprint alike; any other body
/// is hashed byte for byte. The body part can be restricted to selected fields
/// (RFC 6901 JSON pointers) and the whole extended with selected headers.
///
/// ```
/// use lambda_idempotency::Fingerprinter;
///
/// let fp = Fingerprinter::new();
/// let a = fp.fingerprint("POST", "/orders", &[], br#"{"amount":5,"currency":"EUR"}"#);
/// let b = fp.fingerprint("POST", "/orders", &[], br#"{ "currency": "EUR", "amount": 5 }"#);
/// assert_eq!(a, b);
///
/// // Only `amount` matters: a changed `note` is still the same request.
/// let fp = Fingerprinter::new().fields(["/amount"]);
/// assert_eq!(
///     fp.fingerprint("POST", "/orders", &[], br#"{"amount":5,"note":"x"}"#),
///     fp.fingerprint("POST", "/orders", &[], br#"{"amount":5,"note":"y"}"#),
/// );
/// ```
///
/// Computes request fingerprints; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Fingerprinter {
    fields: Option<Vec<String>>,
    headers: Vec<http::HeaderName>,
}

impl Fingerprinter {
    /// Fingerprint method, path, query string and the whole body.
    pub fn new() -> Self {
        Self::default()
    }

    /// Restrict the body part to these JSON pointers (`/amount`, `/items/0/sku`).
    /// A missing field counts as absent (distinct from `null`). A body that is not
    /// JSON is hashed whole.
    ///
    /// # Panics
    ///
    /// When a pointer is not an RFC 6901 JSON pointer (`"amount"` for
    /// `"/amount"`): it would match nothing, silently. A configuration error,
    /// found when the layer is built; [`try_fields`](Self::try_fields) returns
    /// it instead.
    pub fn fields<I, S>(self, pointers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.try_fields(pointers).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`fields`](Self::fields), with an
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) error for
    /// a pointer that is not an RFC 6901 JSON pointer.
    pub fn try_fields<I, S>(mut self, pointers: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let pointers: Vec<String> = pointers.into_iter().map(Into::into).collect();
        for pointer in &pointers {
            check_pointer(pointer)?;
        }
        self.fields = Some(pointers);
        Ok(self)
    }

    /// Also include these request headers (for example `Content-Type`).
    pub fn headers<I>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = http::HeaderName>,
    {
        self.headers = names.into_iter().collect();
        self
    }

    /// The headers this fingerprinter reads.
    pub fn header_names(&self) -> &[http::HeaderName] {
        &self.headers
    }

    /// Fingerprint a request without a query string; `headers` are the
    /// values of [`header_names`](Self::header_names), in order (`None` when
    /// absent).
    pub fn fingerprint(
        &self,
        method: &str,
        path: &str,
        headers: &[Option<&[u8]>],
        body: &[u8],
    ) -> String {
        self.fingerprint_with_query(method, path, None, headers, body)
    }

    /// Fingerprint a request with its query string and every value of each
    /// selected header, in the order received (a header sent twice is not
    /// the same request as one of its values). One value, or none,
    /// fingerprints as [`fingerprint_with_query`](Self::fingerprint_with_query)
    /// does with it.
    pub fn fingerprint_request(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> String {
        let values: Vec<Vec<&[u8]>> = self
            .headers
            .iter()
            .map(|name| {
                headers
                    .get_all(name)
                    .iter()
                    .map(http::HeaderValue::as_bytes)
                    .collect()
            })
            .collect();
        self.hash(method, path, query, &values, body)
    }

    /// Fingerprint a request with its query string (what follows `?`). The
    /// parameters are read as `application/x-www-form-urlencoded` pairs
    /// (percent-decoded to bytes, `+` as a space; bytes that are not UTF-8
    /// stay apart) and sorted by name, so the order of different names does
    /// not matter but names, values, repeats and the order of a repeated
    /// name's values do; an empty query is no query.
    pub fn fingerprint_with_query(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        headers: &[Option<&[u8]>],
        body: &[u8],
    ) -> String {
        let values: Vec<Vec<&[u8]>> = headers
            .iter()
            .map(|v| v.iter().copied().collect())
            .collect();
        self.hash(method, path, query, &values, body)
    }

    /// The fingerprint, with `headers` holding every value of each selected
    /// header (none when absent).
    fn hash(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        headers: &[Vec<&[u8]>],
        body: &[u8],
    ) -> String {
        let mut h = Sha256::new();
        // Every part is length-prefixed so no two different requests can
        // produce the same byte stream.
        put(&mut h, b"fp2");
        put(&mut h, method.as_bytes());
        put(&mut h, path.as_bytes());
        for (name, values) in self.headers.iter().zip(headers) {
            put(&mut h, name.as_str().as_bytes());
            match values.as_slice() {
                [] => put(&mut h, b"\0absent"),
                [value] => put(&mut h, value),
                // A tag no header value can be (they hold no NUL), the
                // count, then each value: one value's stream is unchanged.
                many => {
                    put(&mut h, b"\0values");
                    put(&mut h, &(many.len() as u64).to_be_bytes());
                    for value in many {
                        put(&mut h, value);
                    }
                }
            }
        }
        // A query is one tagged part before the body's tag. Its tag differs
        // from both body tags (`json`, `raw`), so a stream with a query
        // cannot equal one without; without a query the stream is what it
        // was before queries counted, so older fingerprints still match.
        let mut pairs = query_pairs(query.unwrap_or_default());
        if !pairs.is_empty() {
            // By name only, and stable: names count in any order, the values
            // of a repeated name in the order sent (`a=1&a=2` is a list).
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            let mut part = Vec::new();
            for (name, value) in &pairs {
                for bytes in [name.as_slice(), value.as_slice()] {
                    part.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
                    part.extend_from_slice(bytes);
                }
            }
            put(&mut h, b"query");
            put(&mut h, &part);
        }
        self.hash_body(&mut h, body);
        hex(&h.finalize())
    }

    fn hash_body(&self, h: &mut Sha256, body: &[u8]) {
        // serde_json refuses nesting deeper than 128 levels, so hostile input
        // falls back to raw hashing instead of overflowing the stack.
        let Some(pointers) = &self.fields else {
            // The whole body, canonicalised without building a `Value`.
            // Validating UTF-8 once up front (fast, vectorised) lets serde_json
            // skip checking every string on its own.
            match std::str::from_utf8(body).ok().and_then(canonical_json) {
                Some(canonical) => {
                    put(h, b"json");
                    put_suffixed(h, &canonical);
                }
                None => {
                    put(h, b"raw");
                    put(h, body);
                }
            }
            return;
        };
        // The document is canonicalised once (exact numbers, last of
        // duplicate keys) and each field read from that.
        let Some(canonical) = std::str::from_utf8(body).ok().and_then(canonical_json) else {
            put(h, b"raw");
            put(h, body);
            return;
        };
        put(h, b"json");
        for pointer in pointers {
            put(h, pointer.as_bytes());
            match select(&canonical, pointer) {
                Some(v) => put_suffixed(h, v),
                None => put(h, b"\0absent"),
            }
        }
    }
}

/// The parameters of a query string as `(name, value)` byte pairs, decoded
/// as forms are (`+` is a space, `%XX` a byte) but never through a lossy UTF-8
/// conversion: `%FF` and `%FE` are different values. Empty parts are no pair.
fn query_pairs(query: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let decode = |part: &str| -> Vec<u8> {
        let spaced = part.replace('+', " ");
        percent_encoding::percent_decode_str(&spaced).collect()
    };
    query
        .split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            (decode(name), decode(value))
        })
        .collect()
}

/// A part followed by its length: a length suffix keeps parts unambiguous as
/// the prefix of [`put`] does. Parts are built whole before hashing because
/// one large update is several times cheaper than the many tiny writes of a
/// serialiser.
fn put_suffixed(h: &mut Sha256, part: &[u8]) {
    h.update(part);
    h.update((part.len() as u64).to_be_bytes());
}

fn put(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(body: &[u8]) -> String {
        Fingerprinter::new().fingerprint("POST", "/orders", &[], body)
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        assert_eq!(
            fp(br#"{"a":{"y":1,"x":[1,2]},"b":true}"#),
            fp(b"{ \"b\" : true,\n \"a\": {\"x\": [1, 2], \"y\": 1}}")
        );
    }

    #[test]
    fn values_array_order_method_and_path_matter() {
        let base = fp(br#"{"a":[1,2]}"#);
        assert_ne!(base, fp(br#"{"a":[2,1]}"#));
        assert_ne!(base, fp(br#"{"a":[1,3]}"#));
        let f = Fingerprinter::new();
        assert_ne!(
            base,
            f.fingerprint("PATCH", "/orders", &[], br#"{"a":[1,2]}"#)
        );
        assert_ne!(
            base,
            f.fingerprint("POST", "/order", &[], br#"{"a":[1,2]}"#)
        );
    }

    #[test]
    fn different_numbers_never_fingerprint_alike() {
        for (a, b) in [
            (
                r#"{"amount":20000000000000000001}"#,
                r#"{"amount":20000000000000000000}"#,
            ),
            (r#"{"amount":0.30000000000000000001}"#, r#"{"amount":0.3}"#),
            (r#"{"amount":1.00000000000000000001}"#, r#"{"amount":1.0}"#),
            (r#"{"amount":1e-400}"#, r#"{"amount":0.0}"#),
            (
                r#"[123456789012345678901234567890]"#,
                r#"[123456789012345678901234567891]"#,
            ),
        ] {
            assert_ne!(fp(a.as_bytes()), fp(b.as_bytes()), "{a} vs {b}");
            let fields = Fingerprinter::new().fields(["/amount", "/0"]);
            assert_ne!(
                fields.fingerprint("POST", "/", &[], a.as_bytes()),
                fields.fingerprint("POST", "/", &[], b.as_bytes()),
                "fields: {a} vs {b}"
            );
        }
        // A number beyond an i64 exponent is not canonicalised: the body is
        // hashed as it is, which never equals a canonical one.
        assert_ne!(fp(b"[1e-99999999999999999999999]"), fp(b"[0.0]"));
    }

    #[test]
    fn the_query_string_counts_in_any_order() {
        let f = Fingerprinter::new();
        let q =
            |query: Option<&str>| f.fingerprint_with_query("POST", "/orders", query, &[], b"{}");
        assert_ne!(q(Some("dry_run=true")), q(None));
        assert_eq!(q(Some("a=1&b=2")), q(Some("b=2&a=1")));
        assert_eq!(q(Some("a=%41")), q(Some("a=A")));
        assert_eq!(q(Some("a=b+c")), q(Some("a=b%20c")));
        assert_ne!(q(Some("a=1&a=1")), q(Some("a=1")));
        assert_ne!(q(Some("a=1&b=2")), q(Some("a=2&b=1")));
        assert_ne!(q(Some("a=1")), q(Some("a1=")));
        // Bytes that are not UTF-8 are not merged into one replacement character.
        assert_ne!(q(Some("a=%FF")), q(Some("a=%FE")));
        assert_ne!(q(Some("a=%FF")), q(Some("a=%EF%BF%BD")));
        // No query, an empty one, and the plain fingerprint are one request.
        assert_eq!(q(None), q(Some("")));
        assert_eq!(q(None), f.fingerprint("POST", "/orders", &[], b"{}"));
    }

    #[test]
    fn fields_must_be_json_pointers() {
        // A field that is not a JSON pointer would match nothing: refused.
        assert!(Fingerprinter::new()
            .try_fields(["/amount", "amount"])
            .is_err());
        let panic = std::panic::catch_unwind(|| Fingerprinter::new().fields(["amount"]));
        assert!(panic.is_err());
    }

    /// Stored records compare fingerprints across deployments, so the byte
    /// stream behind one must never change: rebuild it here by hand.
    #[test]
    fn fingerprint_format_is_stable() {
        fn part(h: &mut Sha256, bytes: &[u8]) {
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        }
        let canonical = br#"{"a":1,"b":[true,"x\"y"]}"#;
        let mut h = Sha256::new();
        part(&mut h, b"fp2");
        part(&mut h, b"POST");
        part(&mut h, b"/orders");
        part(&mut h, b"json");
        h.update(canonical);
        h.update((canonical.len() as u64).to_be_bytes());
        let expected = hex(&h.finalize());
        assert_eq!(fp(br#"{ "b": [true, "x\"y"], "a": 1 }"#), expected);

        let f = Fingerprinter::new()
            .fields(["/a", "/missing"])
            .headers([http::header::CONTENT_TYPE]);
        let mut h = Sha256::new();
        part(&mut h, b"fp2");
        part(&mut h, b"PUT");
        part(&mut h, b"/x");
        part(&mut h, b"content-type");
        part(&mut h, b"application/json");
        part(&mut h, b"json");
        part(&mut h, b"/a");
        h.update(b"{\"k\":2}");
        h.update(7u64.to_be_bytes());
        part(&mut h, b"/missing");
        part(&mut h, b"\0absent");
        assert_eq!(
            f.fingerprint(
                "PUT",
                "/x",
                &[Some(b"application/json")],
                br#"{"a": {"k": 2}, "b": 3}"#
            ),
            hex(&h.finalize())
        );

        let mut h = Sha256::new();
        part(&mut h, b"fp2");
        part(&mut h, b"POST");
        part(&mut h, b"/orders");
        part(&mut h, b"raw");
        part(&mut h, b"not json");
        assert_eq!(fp(b"not json"), hex(&h.finalize()));
    }

    #[test]
    fn non_json_and_deep_json_are_hashed_raw_without_panicking() {
        assert_ne!(fp(b"\xff\x00binary"), fp(b"\xff\x00binarY"));
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(fp(deep.as_bytes()), fp(deep.as_bytes()));
    }

    #[test]
    fn selected_fields_ignore_the_rest_but_not_absence() {
        let f = Fingerprinter::new().fields(["/amount"]);
        let a = f.fingerprint("POST", "/", &[], br#"{"amount":1,"x":1}"#);
        assert_eq!(a, f.fingerprint("POST", "/", &[], br#"{"amount":1,"x":2}"#));
        assert_ne!(a, f.fingerprint("POST", "/", &[], br#"{"amount":2,"x":1}"#));
        let absent = f.fingerprint("POST", "/", &[], br#"{"x":1}"#);
        assert_ne!(
            absent,
            f.fingerprint("POST", "/", &[], br#"{"amount":null}"#)
        );
    }

    #[test]
    fn selected_headers_are_included() {
        let f = Fingerprinter::new().headers([http::header::CONTENT_TYPE]);
        let json = f.fingerprint("POST", "/", &[Some(b"application/json")], b"{}");
        let text = f.fingerprint("POST", "/", &[Some(b"text/plain")], b"{}");
        let none = f.fingerprint("POST", "/", &[None], b"{}");
        assert_ne!(json, text);
        assert_ne!(json, none);
    }

    #[test]
    fn every_value_of_a_repeated_header_counts_in_order() {
        let f = Fingerprinter::new().headers([http::header::ACCEPT]);
        let with = |values: &[&str]| {
            let mut headers = http::HeaderMap::new();
            for value in values {
                headers.append(http::header::ACCEPT, value.parse().unwrap());
            }
            f.fingerprint_request("POST", "/", None, &headers, b"{}")
        };
        assert_ne!(with(&["a", "b"]), with(&["a"]));
        assert_ne!(with(&["a", "b"]), with(&["b"]));
        assert_ne!(with(&["a", "b"]), with(&["b", "a"]));
        assert_ne!(with(&["a", "b"]), with(&["a, b"]));
        // One value, or none, fingerprints as it always has.
        assert_eq!(
            with(&["a"]),
            f.fingerprint("POST", "/", &[Some(b"a")], b"{}")
        );
        assert_eq!(with(&[]), f.fingerprint("POST", "/", &[None], b"{}"));
    }

    #[test]
    fn repeated_query_values_keep_their_order() {
        let f = Fingerprinter::new();
        let q = |query: &str| f.fingerprint_with_query("POST", "/orders", Some(query), &[], b"{}");
        assert_ne!(q("a=1&a=2"), q("a=2&a=1"));
        assert_ne!(q("tag=x&tag=y&b=1"), q("b=1&tag=y&tag=x"));
        // Different names still count in any order, repeats kept as sent.
        assert_eq!(q("tag=x&b=1&tag=y"), q("b=1&tag=x&tag=y"));
    }

    #[test]
    fn a_big_integer_is_the_float_of_its_value_a_small_one_is_not() {
        // serde_json reads an integer beyond 64 bits as a float: it is the
        // same number as a float of that exact value. Up to 64 bits an
        // integer is its own kind.
        let same = [
            "[20000000000000000000]",
            "[2e19]",
            "[20000000000000000000.0]",
        ];
        for other in &same[1..] {
            assert_eq!(fp(same[0].as_bytes()), fp(other.as_bytes()), "{other}");
        }
        for (a, b) in [
            ("[100]", "[100.0]"),
            ("[18446744073709551615]", "[18446744073709551615.0]"),
            ("[-9223372036854775808]", "[-9223372036854775808.0]"),
            ("[20000000000000000001]", "[2e19]"),
        ] {
            assert_ne!(fp(a.as_bytes()), fp(b.as_bytes()), "{a} vs {b}");
        }
    }
}
