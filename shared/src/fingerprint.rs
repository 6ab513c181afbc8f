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
        let Some(pointers) = &self.fields else {
            // The whole body: a borrowed canonical form, no `Value` to build.
            match serde_json::from_slice::<Canon<'_>>(body) {
                Ok(canon) => {
                    put(h, b"json");
                    put_streamed(h, |w| canon.write(w));
                }
                Err(_) => {
                    put(h, b"raw");
                    put(h, body);
                }
            }
            return;
        };
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
            put(h, b"raw");
            put(h, body);
            return;
        };
        put(h, b"json");
        for pointer in pointers {
            put(h, pointer.as_bytes());
            match value.pointer(pointer) {
                Some(v) => put_canonical(h, v),
                None => put(h, b"\0absent"),
            }
        }
    }
}

/// Hash the canonical JSON of `value` (serde_json's default `Map` is ordered
/// by key, so serialising sorts keys).
fn put_canonical(h: &mut Sha256, value: &serde_json::Value) {
    // Serialising a `Value` into a writer that never fails cannot fail.
    put_streamed(h, |w| {
        let _ = serde_json::to_writer(w, value);
    });
}

/// Feeds the hasher and counts what it was fed.
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

/// Stream a part into the hasher rather than building it as a string, then
/// its length: a length suffix keeps parts unambiguous as the prefix does.
fn put_streamed(h: &mut Sha256, write: impl FnOnce(&mut Hashing<'_>)) {
    let mut out = Hashing { hasher: h, len: 0 };
    write(&mut out);
    let len = out.len;
    h.update(len.to_be_bytes());
}

/// JSON in canonical form, borrowing keys and strings from the body where it
/// can: object entries sorted by key (the last of duplicate keys wins, as in
/// `serde_json::Value`). Written out, it is byte for byte what `Value` would
/// serialise, without building one.
enum Canon<'a> {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    Str(std::borrow::Cow<'a, str>),
    Array(Vec<Canon<'a>>),
    Object(Vec<(std::borrow::Cow<'a, str>, Canon<'a>)>),
}

impl Canon<'_> {
    fn write<W: std::io::Write>(&self, w: &mut W) {
        // Writes into the hasher cannot fail.
        match self {
            Canon::Null => drop(w.write_all(b"null")),
            Canon::Bool(true) => drop(w.write_all(b"true")),
            Canon::Bool(false) => drop(w.write_all(b"false")),
            Canon::Number(n) => drop(serde_json::to_writer(&mut *w, n)),
            Canon::Str(s) => drop(serde_json::to_writer(&mut *w, s.as_ref())),
            Canon::Array(items) => {
                let _ = w.write_all(b"[");
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        let _ = w.write_all(b",");
                    }
                    item.write(w);
                }
                let _ = w.write_all(b"]");
            }
            Canon::Object(entries) => {
                let _ = w.write_all(b"{");
                for (i, (key, value)) in entries.iter().enumerate() {
                    if i > 0 {
                        let _ = w.write_all(b",");
                    }
                    let _ = serde_json::to_writer(&mut *w, key.as_ref());
                    let _ = w.write_all(b":");
                    value.write(w);
                }
                let _ = w.write_all(b"}");
            }
        }
    }
}

impl<'de> serde::Deserialize<'de> for Canon<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CanonVisitor)
    }
}

struct CanonVisitor;

impl<'de> serde::de::Visitor<'de> for CanonVisitor {
    type Value = Canon<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Canon::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
        Ok(Canon::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Self::Value, E> {
        Ok(Canon::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Self::Value, E> {
        Ok(Canon::Number(n.into()))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Self::Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Canon::Null, Canon::Number))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Canon::Str(std::borrow::Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Canon::Str(std::borrow::Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
        Ok(Canon::Str(std::borrow::Cow::Owned(s)))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Canon::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries: Vec<(std::borrow::Cow<'de, str>, Canon<'de>)> = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            entries.push((key, map.next_value()?));
        }
        // Stable sort, then keep the last of equal keys (as a map insert would).
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut canonical: Vec<(std::borrow::Cow<'de, str>, Canon<'de>)> =
            Vec::with_capacity(entries.len());
        for entry in entries {
            match canonical.last_mut() {
                Some(last) if last.0 == entry.0 => *last = entry,
                _ => canonical.push(entry),
            }
        }
        Ok(Canon::Object(canonical))
    }
}

/// An object key, borrowed from the input when it has no escapes.
struct Key<'a>(std::borrow::Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
                Ok(Key(std::borrow::Cow::Owned(s)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
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
    fn borrowed_canonical_form_hashes_what_value_serialises() {
        // Escapes, duplicate keys (last wins), numbers, nesting, unicode.
        for body in [
            r#"{"b":1,"a":[1.5,-2,3e2,true,null],"a\"q":"x\ny","é":{"z":{},"y":[]}}"#,
            r#"{"k":1,"k":2,"j":0}"#,
            r#"[]"#,
            r#""plain""#,
            r#"123456789012345678901234567890"#,
        ] {
            let value: serde_json::Value = serde_json::from_str(body).unwrap();
            let mut via_value = Sha256::new();
            put_canonical(&mut via_value, &value);
            let canon: Canon<'_> = serde_json::from_str(body).unwrap();
            let mut via_canon = Sha256::new();
            put_streamed(&mut via_canon, |w| canon.write(w));
            assert_eq!(via_value.finalize(), via_canon.finalize(), "{body}");
        }
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
