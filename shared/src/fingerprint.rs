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

use std::borrow::Cow;

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
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
            put(h, b"raw");
            put(h, body);
            return;
        };
        put(h, b"json");
        let mut out = Vec::new();
        for pointer in pointers {
            put(h, pointer.as_bytes());
            match value.pointer(pointer) {
                Some(v) => {
                    out.clear();
                    write_canonical(&mut out, v);
                    put_suffixed(h, &out);
                }
                None => put(h, b"\0absent"),
            }
        }
    }
}

/// The canonical JSON of `value` (serde_json's default `Map` is ordered by
/// key, so serialising sorts keys).
fn write_canonical(out: &mut Vec<u8>, value: &serde_json::Value) {
    // Serialising a `Value` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(out, value);
}

/// A part followed by its length: a length suffix keeps parts unambiguous as
/// the prefix of [`put`] does. Parts are built whole before hashing because
/// one large update is several times cheaper than the many tiny writes of a
/// serialiser.
fn put_suffixed(h: &mut Sha256, part: &[u8]) {
    h.update(part);
    h.update((part.len() as u64).to_be_bytes());
}

/// The canonical form of a JSON document: object entries sorted by key (the
/// last of duplicate keys wins), no whitespace, numbers and strings as
/// serde_json writes them. It is byte for byte what serialising a
/// `serde_json::Value` parsed from `text` gives, and `None` exactly when
/// serde_json refuses `text` (including nesting deeper than its 128 levels);
/// the tests hold it to both against serde_json itself.
///
/// Why not parse with serde_json: fingerprinting runs on every request, and a
/// `Value` (or a serde visitor) costs an allocation or a dispatch per token,
/// most of the library's CPU per request. This single pass copies what is
/// already canonical (unescaped strings, short integers) and hands serde_json
/// only the rare tokens it must re-encode (escaped strings, other numbers).
fn canonical_json(text: &str) -> Option<Vec<u8>> {
    let mut canon = Canonical {
        text,
        pos: 0,
        // The canonical form is at most as long as the text but for numbers
        // written in a shorter form (`1e2` becomes `100.0`): sized up front,
        // the buffers rarely grow.
        out: Vec::with_capacity(text.len()),
        entries: Vec::with_capacity(32),
        scratch: Vec::with_capacity(text.len()),
    };
    canon.value(0)?;
    canon.skip_whitespace();
    (canon.pos == text.len()).then_some(canon.out)
}

/// The bytes that end a run of ordinary string content: the closing quote,
/// a backslash, and the control characters JSON forbids raw.
const STRING_STOP: [u8; 256] = {
    let mut table = [0; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = 1;
        b += 1;
    }
    table[b'"' as usize] = 1;
    table[b'\\' as usize] = 1;
    table
};

/// Containers may nest this deep (serde_json's limit: it refuses the 128th
/// level).
const MAX_DEPTH: usize = 127;

/// The state of [`canonical_json`]. An object's values are written to `out`
/// as they are parsed and their keys and spans pushed on `entries`; when the
/// object ends, its span is moved to `scratch` and written back in key order.
struct Canonical<'a> {
    text: &'a str,
    pos: usize,
    out: Vec<u8>,
    /// `(key, start, end)` of the values in `out` of every object being parsed.
    entries: Vec<(Cow<'a, str>, usize, usize)>,
    scratch: Vec<u8>,
}

impl<'a> Canonical<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// One value; `depth` containers enclose it.
    fn value(&mut self, depth: usize) -> Option<()> {
        self.skip_whitespace();
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => {
                let s = self.string()?;
                write_str(&mut self.out, &s);
                Some(())
            }
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.pos + word.len();
        (self.text.as_bytes().get(self.pos..end)? == word.as_bytes()).then_some(())?;
        self.pos = end;
        self.out.extend_from_slice(word.as_bytes());
        Some(())
    }

    /// A string at `pos` (on its opening quote), decoded: borrowed from the
    /// text when it has no escape sequence.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let bytes = self.text.as_bytes();
        let start = self.pos + 1;
        let mut i = start;
        let mut escaped = false;
        loop {
            // One table look-up per ordinary byte rather than three compares.
            while STRING_STOP[usize::from(*bytes.get(i)?)] == 0 {
                i += 1;
            }
            match bytes[i] {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    i += 2;
                }
                // JSON forbids raw control characters in strings.
                _ => return None,
            }
        }
        self.pos = i + 1;
        if escaped {
            // Escapes are rare: serde_json decodes them, with its rules for
            // `\u` surrogate pairs.
            serde_json::from_str::<String>(&self.text[start - 1..=i])
                .ok()
                .map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(&self.text[start..i]))
        }
    }

    fn number(&mut self) -> Option<()> {
        let bytes = self.text.as_bytes();
        let start = self.pos;
        let mut end = start;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = bytes.get(end) {
            end += 1;
        }
        self.pos = end;
        let token = &self.text[start..end];
        let digits = token.strip_prefix('-').unwrap_or(token);
        // An integer of up to 18 digits without a leading zero is written
        // back as it is; `-0` is not (serde_json reads it as the float -0.0).
        let verbatim = !digits.is_empty()
            && digits.len() <= 18
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'))
            && token != "-0";
        if verbatim {
            self.out.extend_from_slice(token.as_bytes());
        } else {
            let n = serde_json::from_str::<serde_json::Number>(token).ok()?;
            // Writes into a `Vec` cannot fail.
            let _ = serde_json::to_writer(&mut self.out, &n);
        }
        Some(())
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.pos += 1;
        self.out.push(b'[');
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.out.push(b']');
            return Some(());
        }
        loop {
            self.value(depth)?;
            self.skip_whitespace();
            match self.next()? {
                b',' => self.out.push(b','),
                b']' => {
                    self.out.push(b']');
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.pos += 1;
        let start = self.out.len();
        let first = self.entries.len();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.out.extend_from_slice(b"{}");
            return Some(());
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return None;
            }
            let key = self.string()?;
            self.skip_whitespace();
            if self.next()? != b':' {
                return None;
            }
            let from = self.out.len();
            self.value(depth)?;
            self.entries.push((key, from, self.out.len()));
            self.skip_whitespace();
            match self.next()? {
                b',' => {}
                b'}' => break,
                _ => return None,
            }
        }
        self.close_object(start, first);
        Some(())
    }

    /// Rewrite `out[start..]`, the values of the object whose entries begin
    /// at `entries[first..]`, as that object in canonical form.
    fn close_object(&mut self, start: usize, first: usize) {
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.out[start..]);
        self.out.truncate(start);
        let entries = &mut self.entries[first..];
        // Stable, so the last of equal keys is the last parsed.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        self.out.push(b'{');
        let mut written = 0;
        for (i, (key, from, to)) in entries.iter().enumerate() {
            if entries.get(i + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            if written > 0 {
                self.out.push(b',');
            }
            write_str(&mut self.out, key);
            self.out.push(b':');
            self.out
                .extend_from_slice(&self.scratch[from - start..to - start]);
            written += 1;
        }
        self.out.push(b'}');
        self.entries.truncate(first);
    }
}

/// A JSON string as serde_json writes it. A string borrowed from the body
/// (`Cow::Borrowed`) had no escape sequence there, and JSON forbids raw
/// quotes, backslashes and control characters inside strings, so it needs no
/// escaping now: it is copied verbatim, skipping serde_json's escaper.
// The `Cow` is the point: borrowed means the text had no escapes.
#[allow(clippy::ptr_arg)]
fn write_str(out: &mut Vec<u8>, s: &Cow<'_, str>) {
    match s {
        Cow::Borrowed(s) => {
            out.reserve(s.len() + 2);
            out.push(b'"');
            out.extend_from_slice(s.as_bytes());
            out.push(b'"');
        }
        // Writes into a `Vec` cannot fail.
        Cow::Owned(s) => drop(serde_json::to_writer(&mut *out, s)),
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
    fn canonical_form_is_what_value_serialises() {
        // Escapes (kept, decoded, or needed again on output), duplicate keys
        // (last wins), numbers, nesting, unicode.
        for body in [
            r#"{"b":1,"a":[1.5,-2,3e2,true,null],"a\"q":"x\ny","é":{"z":{},"y":[]}}"#,
            r#"{"k":1,"k":2,"j":0}"#,
            r#"{"s":"\u00e9\/\u2028\t\\","\u0001":"\u001f","plain":"a b"}"#,
            r#"[]"#,
            r#""plain""#,
            r#"123456789012345678901234567890"#,
        ] {
            let value: serde_json::Value = serde_json::from_str(body).unwrap();
            let mut via_value = Vec::new();
            write_canonical(&mut via_value, &value);
            let via_canon = canonical_json(body).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&via_value),
                String::from_utf8_lossy(&via_canon),
                "{body}"
            );
        }
    }

    /// What serialising the `serde_json::Value` of `text` gives; `None` when
    /// serde_json refuses `text`.
    fn via_value(text: &str) -> Option<Vec<u8>> {
        let value = serde_json::from_str::<serde_json::Value>(text).ok()?;
        let mut out = Vec::new();
        write_canonical(&mut out, &value);
        Some(out)
    }

    /// JSON text with what canonicalisation must undo or keep: keys in any
    /// order and duplicated, whitespace, escapes of every kind, numbers of
    /// every shape, nesting.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let ws = prop::sample::select(vec!["", " ", "\n  ", "\t"]);
        let string = prop::collection::vec(
            prop_oneof![
                "[a-z é€😀]{1,4}".prop_map(|s| s),
                prop::sample::select(vec![
                    r#"\""#,
                    r"\\",
                    r"\/",
                    r"\n",
                    r"\t",
                    r"\u0001",
                    r"\u00e9",
                    r"\u2028",
                    r"\ud83d\ude00",
                ])
                .prop_map(str::to_owned),
            ],
            0..4,
        )
        .prop_map(|parts| format!("\"{}\"", parts.concat()));
        let number = prop::sample::select(vec![
            "0",
            "-0",
            "7",
            "-12",
            "18446744073709551615",
            "18446744073709551616",
            "1.5",
            "-2.25e3",
            "1E2",
            "0.1",
            "123456789012345678901234567890",
        ])
        .prop_map(str::to_owned);
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            number,
            string.clone(),
        ];
        leaf.prop_recursive(4, 40, 6, move |inner| {
            prop_oneof![
                (prop::collection::vec(inner.clone(), 0..6), ws.clone())
                    .prop_map(|(items, w)| format!("[{w}{}{w}]", items.join(&format!(",{w}")))),
                (
                    prop::collection::vec(
                        (
                            prop::sample::select(vec!["a", "b", "é", "a\\u0062", "\\\"k"]),
                            inner
                        ),
                        0..6
                    ),
                    ws.clone()
                )
                    .prop_map(|(entries, w)| {
                        let entries: Vec<String> = entries
                            .into_iter()
                            .map(|(k, v)| format!("\"{k}\"{w}:{w}{v}"))
                            .collect();
                        format!("{{{w}{}{w}}}", entries.join(","))
                    }),
            ]
        })
    }

    use proptest::prelude::*;

    proptest::proptest! {
        #[test]
        fn canonical_form_of_any_json_is_what_value_serialises(text in json_text()) {
            let expected = via_value(&text).unwrap();
            let via_canon = canonical_json(&text).unwrap();
            proptest::prop_assert_eq!(
                String::from_utf8_lossy(&expected),
                String::from_utf8_lossy(&via_canon)
            );
        }

        #[test]
        fn canonical_form_agrees_with_serde_json_on_any_text(
            text in "[\\[\\]{}\",: \t0-9a-fnrtu.eE+\\-\\\\/é]{0,16}"
        ) {
            proptest::prop_assert_eq!(canonical_json(&text), via_value(&text));
        }

        #[test]
        fn canonical_form_agrees_with_serde_json_on_damaged_json(
            text in json_text(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, prop::sample::select(
                vec!['"', '\\', ',', ':', '[', ']', '{', '}', '0', '-', '.', 'e', 'u', ' ', '\u{1}'],
            )), 1..4),
        ) {
            let mut chars: Vec<char> = text.chars().collect();
            for (at, op, c) in edits {
                let i = at.index(chars.len() + 1);
                match op {
                    0 if i < chars.len() => { chars.remove(i); }
                    1 if i < chars.len() => chars[i] = c,
                    _ => chars.insert(i, c),
                }
            }
            let text: String = chars.into_iter().collect();
            proptest::prop_assert_eq!(canonical_json(&text), via_value(&text));
        }
    }

    #[test]
    fn nesting_limit_is_serde_jsons() {
        // The range straddles the limit: serde_json takes the first depth
        // and refuses the last.
        assert!(serde_json::from_str::<serde_json::Value>(&format!(
            "{}{}",
            "[".repeat(120),
            "]".repeat(120)
        ))
        .is_ok());
        assert!(serde_json::from_str::<serde_json::Value>(&format!(
            "{}{}",
            "[".repeat(135),
            "]".repeat(135)
        ))
        .is_err());
        for depth in 120..=135 {
            for (open, close) in [("[", "]"), ("{\"k\":", "}")] {
                let text = format!("{}1{}", open.repeat(depth), close.repeat(depth));
                let parsed = serde_json::from_str::<serde_json::Value>(&text).is_ok();
                assert_eq!(
                    canonical_json(&text).is_some(),
                    parsed,
                    "depth {depth} {open}"
                );
            }
        }
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
}
