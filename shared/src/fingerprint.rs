//! Request fingerprints: is a retry the *same* request as the first one?
//!
//! A fingerprint is a SHA-256 over the method, the path and the body. A JSON
//! body is canonicalised first (object keys sorted, whitespace dropped), so
//! `{"a":1,"b":2}` and `{ "b": 2, "a": 1 }` fingerprint alike; any other body
//! is hashed byte for byte. The body part can be restricted to selected fields
//! (RFC 6901 JSON pointers) and the whole extended with selected headers.
//!
//! ```
//! use lambda_idempotency::Fingerprinter;
//!
//! let fp = Fingerprinter::new();
//! let a = fp.fingerprint("POST", "/orders", &[], br#"{"amount":5,"currency":"EUR"}"#);
//! let b = fp.fingerprint("POST", "/orders", &[], br#"{ "currency": "EUR", "amount": 5 }"#);
//! assert_eq!(a, b);
//!
//! // Only `amount` matters: a changed `note` is still the same request.
//! let fp = Fingerprinter::new().fields(["/amount"]);
//! assert_eq!(
//!     fp.fingerprint("POST", "/orders", &[], br#"{"amount":5,"note":"x"}"#),
//!     fp.fingerprint("POST", "/orders", &[], br#"{"amount":5,"note":"y"}"#),
//! );
//! ```

use sha2::{Digest, Sha256};

/// Computes request fingerprints; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Fingerprinter {
    fields: Option<Vec<String>>,
    headers: Vec<http::HeaderName>,
}

impl Fingerprinter {
    /// Fingerprint method, path and the whole body.
    pub fn new() -> Self {
        Self::default()
    }

    /// Restrict the body part to these JSON pointers (`/amount`, `/items/0/sku`).
    /// A missing field counts as absent (distinct from `null`). A body that is not
    /// JSON is hashed whole.
    pub fn fields<I, S>(mut self, pointers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.fields = Some(pointers.into_iter().map(Into::into).collect());
        self
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

    /// Fingerprint a request; `headers` are the values of
    /// [`header_names`](Self::header_names), in order (`None` when absent).
    pub fn fingerprint(
        &self,
        method: &str,
        path: &str,
        headers: &[Option<&[u8]>],
        body: &[u8],
    ) -> String {
        let mut h = Sha256::new();
        // Every part is length-prefixed so no two different requests can
        // produce the same byte stream.
        put(&mut h, b"fp2");
        put(&mut h, method.as_bytes());
        put(&mut h, path.as_bytes());
        for (name, value) in self.headers.iter().zip(headers) {
            put(&mut h, name.as_str().as_bytes());
            match value {
                Some(v) => put(&mut h, v),
                None => put(&mut h, b"\0absent"),
            }
        }
        self.hash_body(&mut h, body);
        hex(&h.finalize())
    }

    fn hash_body(&self, h: &mut Sha256, body: &[u8]) {
        // serde_json refuses nesting deeper than 128 levels, so hostile input
        // falls back to raw hashing instead of overflowing the stack.
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
            put(h, b"raw");
            put(h, body);
            return;
        };
        put(h, b"json");
        match &self.fields {
            None => put_canonical(h, &value),
            Some(pointers) => {
                for pointer in pointers {
                    put(h, pointer.as_bytes());
                    match value.pointer(pointer) {
                        Some(v) => put_canonical(h, v),
                        None => put(h, b"\0absent"),
                    }
                }
            }
        }
    }
}

/// Hash the canonical JSON of `value` (serde_json's default `Map` is ordered
/// by key, so serialising sorts keys), streamed into the hasher rather than
/// built as a string, then its length: a length suffix keeps parts unambiguous
/// as the prefix does elsewhere.
fn put_canonical(h: &mut Sha256, value: &serde_json::Value) {
    struct Hashing<'a> {
        hasher: &'a mut Sha256,
        len: u64,
    }
    impl std::io::Write for Hashing<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.hasher.update(buf);
            self.len += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Hashing { hasher: h, len: 0 };
    // Serialising a `Value` into a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut out, value);
    let len = out.len;
    h.update(len.to_be_bytes());
}

fn put(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
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
}
