//! Request fingerprints: is a retry the *same* request as the first one?

use std::borrow::Cow;

use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind};
use crate::hash::hex;

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

    /// Like [`fields`](Self::fields), with an [`ErrorKind::InvalidConfig`]
    /// error for a pointer that is not an RFC 6901 JSON pointer.
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
            return Some(());
        }
        // serde_json validates the token and gives the form it prints (an
        // `f64` for fractions, exponents and integers past 64 bits). That
        // form is kept whenever it denotes exactly the token's value, so
        // fingerprints stay what they were; when the `f64` lost digits, the
        // exact form is written instead, or two different numbers would
        // fingerprint alike.
        let n = serde_json::from_str::<serde_json::Number>(token).ok()?;
        let exact = Decimal::parse(token.as_bytes())?;
        let at = self.out.len();
        // Writes into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut self.out, &n);
        if Decimal::parse(&self.out[at..]).as_ref() == Some(&exact) {
            return Some(());
        }
        // serde_json's float reading is not always correctly rounded (one
        // step off for some spellings): the standard library's is, so one
        // value spelt two ways still gets one form where an `f64` holds it.
        self.out.truncate(at);
        if let Some(n) = token
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            let _ = serde_json::to_writer(&mut self.out, &n);
            if Decimal::parse(&self.out[at..]).as_ref() == Some(&exact) {
                return Some(());
            }
            self.out.truncate(at);
        }
        exact.write(&mut self.out);
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

/// The exact value of a JSON number: `digits` × 10^`exponent`, the digits
/// without leading or trailing zeros (none for zero, whose sign is dropped).
#[derive(Debug)]
struct Decimal<'a> {
    negative: bool,
    digits: Vec<&'a [u8]>,
    exponent: i64,
}

impl<'a> Decimal<'a> {
    /// The value of a number as JSON writes it (`-12.50e+3`); `None` when the
    /// text is not such a number or its exponent does not fit an `i64`.
    fn parse(text: &'a [u8]) -> Option<Decimal<'a>> {
        let (negative, rest) = match text.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, text),
        };
        let mantissa_end = rest
            .iter()
            .position(|b| matches!(b, b'e' | b'E'))
            .unwrap_or(rest.len());
        let (mantissa, exponent) = rest.split_at(mantissa_end);
        let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
            Some(dot) => (&mantissa[..dot], &mantissa[dot + 1..]),
            None => (mantissa, &[][..]),
        };
        let all_digits = |part: &[u8]| part.iter().all(u8::is_ascii_digit);
        if int.is_empty() || !all_digits(int) || !all_digits(frac) {
            return None;
        }
        let exponent: i128 = match exponent.split_first() {
            None => 0,
            Some((_, e)) => {
                let (sign, e) = match e.split_first() {
                    Some((b'-', e)) => (-1, e),
                    Some((b'+', e)) => (1, e),
                    _ => (1, e),
                };
                if e.is_empty() || !all_digits(e) {
                    return None;
                }
                // Leading zeros never make an exponent overflow.
                let e = &e[e.iter().position(|&b| b != b'0').unwrap_or(e.len())..];
                // Up to 19 digits fit an i128 with room for the adjustments
                // below; more is beyond any i64 exponent.
                let e: i128 = match e.len() {
                    0 => 0,
                    1..=19 => std::str::from_utf8(e).ok()?.parse().ok()?,
                    _ => i128::MAX,
                };
                if e > i128::from(i64::MAX) {
                    // Only zero has such an exponent and a value.
                    let zero = int.iter().chain(frac).all(|&b| b == b'0');
                    return zero.then_some(Decimal::ZERO);
                }
                sign * e
            }
        };
        // The significant digits of int ++ frac, as (up to) two slices.
        let joined = [int, frac];
        let leading = int.iter().chain(frac).take_while(|&&b| b == b'0').count();
        let total = int.len() + frac.len();
        if leading == total {
            return Some(Decimal::ZERO);
        }
        let trailing = int
            .iter()
            .chain(frac)
            .rev()
            .take_while(|&&b| b == b'0')
            .count();
        let (start, end) = (leading, total - trailing);
        let mut digits = Vec::with_capacity(2);
        let mut offset = 0;
        for part in joined {
            let (from, to) = (start.max(offset), end.min(offset + part.len()));
            if from < to {
                digits.push(&part[from - offset..to - offset]);
            }
            offset += part.len();
        }
        // value = int.frac × 10^e = (significant digits) × 10^(e - frac.len() + trailing)
        let exponent = exponent - frac.len() as i128 + trailing as i128;
        Some(Decimal {
            negative,
            digits,
            exponent: i64::try_from(exponent).ok()?,
        })
    }

    const ZERO: Decimal<'static> = Decimal {
        negative: false,
        digits: Vec::new(),
        exponent: 0,
    };

    /// The exact form: `[-]<digits>e<exponent>`, unique for each value and
    /// never a form serde_json prints for a different one (it parses back to
    /// exactly this value).
    fn write(&self, out: &mut Vec<u8>) {
        if self.digits.is_empty() {
            out.push(b'0');
            return;
        }
        if self.negative {
            out.push(b'-');
        }
        for part in &self.digits {
            out.extend_from_slice(part);
        }
        out.push(b'e');
        out.extend_from_slice(self.exponent.to_string().as_bytes());
    }
}

impl PartialEq for Decimal<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.negative == other.negative
            && self.exponent == other.exponent
            && self.digits.concat() == other.digits.concat()
    }
}

impl Eq for Decimal<'_> {}

/// Is `pointer` an RFC 6901 JSON pointer: empty (the whole document) or
/// `/`-separated tokens in which `~` only starts `~0` or `~1`?
pub(crate) fn check_pointer(pointer: &str) -> Result<(), Error> {
    let mut chars = pointer.chars().peekable();
    let well_formed = (pointer.is_empty() || pointer.starts_with('/'))
        && std::iter::from_fn(|| chars.next().map(|c| (c, chars.peek().copied())))
            .all(|(c, next)| c != '~' || matches!(next, Some('0' | '1')));
    if well_formed {
        return Ok(());
    }
    let hint = if pointer.starts_with('/') {
        "escape `~` as `~0` and `/` inside a name as `~1`".to_owned()
    } else {
        format!("write {:?}", format!("/{pointer}"))
    };
    Err(Error::new(
        ErrorKind::InvalidConfig,
        format!("{pointer:?} is not a JSON pointer (RFC 6901), so it would match nothing: {hint}"),
    ))
}

/// A JSON document in canonical form, canonicalised once and read at any
/// number of pointers (an SQS body's key and validated fields). Numbers are
/// exact, as in the whole-body fingerprint; of duplicate keys the last wins.
#[cfg_attr(
    not(any(
        feature = "sqs",
        feature = "kinesis",
        feature = "dynamodb-stream-events"
    )),
    allow(dead_code)
)]
pub(crate) struct CanonicalJson(Vec<u8>);

#[cfg_attr(
    not(any(
        feature = "sqs",
        feature = "kinesis",
        feature = "dynamodb-stream-events"
    )),
    allow(dead_code)
)]
impl CanonicalJson {
    /// `None` when `text` is not JSON.
    pub(crate) fn parse(text: &str) -> Option<CanonicalJson> {
        canonical_json(text).map(CanonicalJson)
    }

    /// The canonical JSON of the value at `pointer`, `None` when absent.
    pub(crate) fn at(&self, pointer: &str) -> Option<&[u8]> {
        select(&self.0, pointer)
    }
}

/// The value at `pointer` in canonical JSON (no whitespace, no duplicate
/// keys, as [`canonical_json`] writes it).
fn select<'c>(canonical: &'c [u8], pointer: &str) -> Option<&'c [u8]> {
    let mut value = canonical;
    if pointer.is_empty() {
        return Some(value);
    }
    for token in pointer.strip_prefix('/')?.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        value = match value.first()? {
            b'{' => member(value, &token)?,
            b'[' => element(value, &token)?,
            _ => return None,
        };
    }
    Some(value)
}

/// The value of key `name` in a canonical object.
fn member<'c>(object: &'c [u8], name: &str) -> Option<&'c [u8]> {
    let mut pos = 1;
    while object.get(pos)? != &b'}' {
        let key_end = skip(object, pos)?;
        let raw = &object[pos..key_end];
        let value_end = skip(object, key_end + 1)?;
        // A key with escapes is decoded; one without is its own text.
        let matches = if raw.contains(&b'\\') {
            serde_json::from_slice::<String>(raw).ok().as_deref() == Some(name)
        } else {
            &raw[1..raw.len() - 1] == name.as_bytes()
        };
        if matches {
            return Some(&object[key_end + 1..value_end]);
        }
        pos = value_end + usize::from(object.get(value_end) == Some(&b','));
    }
    None
}

/// Element `index` (decimal, no leading zero) of a canonical array.
fn element<'c>(array: &'c [u8], index: &str) -> Option<&'c [u8]> {
    if index.is_empty()
        || !index.bytes().all(|b| b.is_ascii_digit())
        || (index.len() > 1 && index.starts_with('0'))
    {
        return None;
    }
    let index: usize = index.parse().ok()?;
    let mut pos = 1;
    let mut i = 0;
    while array.get(pos)? != &b']' {
        let end = skip(array, pos)?;
        if i == index {
            return Some(&array[pos..end]);
        }
        i += 1;
        pos = end + usize::from(array.get(end) == Some(&b','));
    }
    None
}

/// The end of the canonical value starting at `pos`.
fn skip(json: &[u8], pos: usize) -> Option<usize> {
    match json.get(pos)? {
        b'"' => {
            let mut i = pos + 1;
            loop {
                match json.get(i)? {
                    b'\\' => i += 2,
                    b'"' => return Some(i + 1),
                    _ => i += 1,
                }
            }
        }
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = pos;
            loop {
                match json.get(i)? {
                    b'"' => {
                        i = skip(json, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => Some(
            json[pos..]
                .iter()
                .position(|b| matches!(b, b',' | b']' | b'}' | b':'))
                .map_or(json.len(), |n| pos + n),
        ),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical JSON of `value` (serde_json's default `Map` is ordered by
    /// key, so serialising sorts keys).
    fn write_canonical(out: &mut Vec<u8>, value: &serde_json::Value) {
        // Serialising a `Value` into a `Vec` cannot fail.
        let _ = serde_json::to_writer(out, value);
    }

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
            r#"12345678901234567890"#,
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
            "-9223372036854775808",
            "1.5",
            "-2.25e3",
            "1E2",
            "0.1",
            "1e300",
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
            agrees_with_serde_json(&text)?;
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
            agrees_with_serde_json(&text)?;
        }

        /// Two numbers with the same canonical form have the same exact
        /// value (checked by a reference written differently), so different
        /// numbers never fingerprint alike.
        #[test]
        fn equal_canonical_numbers_have_equal_values(
            a in number_token(), b in number_token()
        ) {
            let (ca, cb) = (canonical_json(&a), canonical_json(&b));
            if let (Some(ca), Some(cb)) = (&ca, &cb) {
                if ca == cb {
                    proptest::prop_assert_eq!(reference_value(&a), reference_value(&b), "{} {}", a, b);
                }
                // Each canonical form is itself a JSON number of the same value.
                proptest::prop_assert_eq!(
                    reference_value(std::str::from_utf8(ca).unwrap()),
                    reference_value(&a)
                );
            }
        }
    }

    /// serde_json accepts exactly what the canonicaliser accepts, and the
    /// canonical form is byte for byte serde_json's except where serde_json
    /// read a number inexactly: there it holds the exact value, which reads
    /// back as the same `Value`.
    fn agrees_with_serde_json(text: &str) -> Result<(), proptest::test_runner::TestCaseError> {
        let (canon, via) = (canonical_json(text), via_value(text));
        proptest::prop_assert_eq!(canon.is_some(), via.is_some(), "{}", text);
        if let (Some(canon), Some(via)) = (canon, via) {
            if canon != via {
                let read = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).ok();
                let (exact, lossy) = (read(&canon), read(&via));
                proptest::prop_assert!(
                    matches!((&exact, &lossy), (Some(a), Some(b)) if same_within_an_ulp(a, b)),
                    "{}: {:?} vs {:?}",
                    text,
                    exact,
                    lossy
                );
                proptest::prop_assert!(
                    canon.contains(&b'e'),
                    "only exact number forms may differ: {}",
                    String::from_utf8_lossy(&canon)
                );
            }
        }
        Ok(())
    }

    /// Equal values, except that two floats may be one unit in the last
    /// place apart: serde_json's default float parser is not correctly
    /// rounded, and reads an integer with an exponent (`98446744073709551615e0`)
    /// on another path than the same integer alone, one ULP away.
    fn same_within_an_ulp(a: &serde_json::Value, b: &serde_json::Value) -> bool {
        use serde_json::Value;
        match (a, b) {
            (Value::Number(x), Value::Number(y)) if x != y => match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) if x.is_sign_negative() == y.is_sign_negative() => {
                    x.to_bits().abs_diff(y.to_bits()) <= 1
                }
                _ => false,
            },
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_within_an_ulp(x, y))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .all(|(k, v)| y.get(k).is_some_and(|w| same_within_an_ulp(v, w)))
            }
            _ => a == b,
        }
    }

    #[test]
    fn numbers_read_one_ulp_apart_by_serde_json_still_agree() {
        // Found by the damaged-JSON property: u64::MAX with its first digit
        // changed reads differently with and without `e0`.
        for text in [
            "98446744073709551615",
            "-18446744073709501615",
            "[98446744073709551615]",
        ] {
            agrees_with_serde_json(text).unwrap();
        }
        let read = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
        assert!(!same_within_an_ulp(&read("1.5"), &read("2.5")));
        assert!(!same_within_an_ulp(&read("[1]"), &read("[1,1]")));
        assert!(same_within_an_ulp(
            &read("{\"a\":[1.0]}"),
            &read("{\"a\":[1.0]}")
        ));
    }

    /// JSON number tokens: integers of any length, fractions and exponents,
    /// with the zeros and digit counts where an `f64` loses precision.
    fn number_token() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        (
            any::<bool>(),
            "(0|[1-9][0-9]{0,24})",
            proptest::option::of("[0-9]{1,22}"),
            proptest::option::of((
                prop::sample::select(vec!["e", "E"]),
                prop::sample::select(vec!["", "+", "-"]),
                "[0-9]{1,3}",
            )),
        )
            .prop_map(|(neg, int, frac, exp)| {
                let mut t = String::new();
                if neg {
                    t.push('-');
                }
                t.push_str(&int);
                if let Some(frac) = frac {
                    t.push('.');
                    t.push_str(&frac);
                }
                if let Some((e, sign, digits)) = exp {
                    t.push_str(e);
                    t.push_str(sign);
                    t.push_str(&digits);
                }
                t
            })
    }

    /// The exact value of a number token as (negative, significant digits,
    /// exponent), computed another way: the decimal point moved into the
    /// exponent on a `String` of all digits, then zeros trimmed.
    fn reference_value(token: &str) -> (bool, String, i64) {
        let negative = token.starts_with('-');
        let token = token.trim_start_matches('-').to_ascii_lowercase();
        let (mantissa, exp) = match token.split_once('e') {
            Some((m, e)) => (m.to_owned(), e.parse::<i64>().unwrap()),
            None => (token.clone(), 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((&mantissa, ""));
        let all = format!("{int}{frac}");
        let mut exp = exp - frac.len() as i64;
        let trimmed_end = all.trim_end_matches('0');
        exp += (all.len() - trimmed_end.len()) as i64;
        let digits = trimmed_end.trim_start_matches('0').to_owned();
        if digits.is_empty() {
            return (false, String::new(), 0);
        }
        (negative, digits, exp)
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
    }

    #[test]
    fn numbers_compare_by_exact_value_within_their_kind() {
        let canon = |t: &str| String::from_utf8(canonical_json(t).unwrap()).unwrap();
        // Fractions and exponents of one value are one number.
        for alike in [
            ["1.0", "1.00", "1e0", "10e-1", "0.1e1"],
            ["0.3", "0.30", "3e-1", "3E-1", "0.03e1"],
            [
                "2e19",
                "20000000000000000000.0",
                "2.0e19",
                "2E+19",
                "0.2e20",
            ],
            ["1.5e-400", "15e-401", "0.15e-399", "1.50e-400", "1.5E-400"],
        ] {
            let first = canon(alike[0]);
            for other in &alike[1..] {
                assert_eq!(canon(other), first, "{other} vs {}", alike[0]);
            }
        }
        // Spellings serde_json reads one step off still share one form.
        for (a, b) in [
            ("71.000e-20", "7.1e-19"),
            ("1.5e-300", "15e-301"),
            ("0.15e-299", "1.50e-300"),
        ] {
            assert_eq!(canon(a), canon(b), "{a} vs {b}");
        }
        // An integer is not a fraction (as serde_json reads them).
        assert_ne!(canon("1"), canon("1.0"));
        // Within an integer's kind, the digits as written.
        assert_eq!(canon("20000000000000000001"), "20000000000000000001e0");
        assert_eq!(
            canon("-0.30000000000000000001"),
            "-30000000000000000001e-20"
        );
        // What serde_json reads exactly keeps its form, and its fingerprint.
        let serde_form = |t: &str| {
            serde_json::to_string(&serde_json::from_str::<serde_json::Number>(t).unwrap()).unwrap()
        };
        for exact in ["1.5", "1e300", "-2.25e3", "18446744073709551615", "0.1"] {
            assert_eq!(canon(exact), serde_form(exact), "{exact}");
        }
        // Huge exponents neither panic nor collide.
        assert_eq!(canon("0e99999999999999999999999"), canon("0.0"));
        // Beyond an i64 exponent a non-zero number is not canonicalised: the
        // body is hashed as it is, which never equals a canonical one.
        assert!(canonical_json("1e99999999999999999999999").is_none());
        assert!(canonical_json("1e-99999999999999999999999").is_none());
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
    fn pointers_must_be_json_pointers() {
        for ok in ["", "/amount", "/items/0/sku", "/a~1b", "/m~0n", "/"] {
            assert!(check_pointer(ok).is_ok(), "{ok}");
        }
        for bad in ["amount", "items/0", "/a~2", "/a~"] {
            let err = check_pointer(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            assert!(err.to_string().contains("not a JSON pointer"), "{err}");
        }
        assert!(check_pointer("amount")
            .unwrap_err()
            .to_string()
            .contains("\"/amount\""));
        assert!(Fingerprinter::new()
            .try_fields(["/amount", "amount"])
            .is_err());
        let panic = std::panic::catch_unwind(|| Fingerprinter::new().fields(["amount"]));
        assert!(panic.is_err());
    }

    #[test]
    fn a_field_is_found_by_its_pointer_in_canonical_json() {
        let text =
            r#"{ "b": [10, {"x": "y"}], "a/c": 1, "m~n": null, "k": 1, "k": 2, "e\u0073c": 3 }"#;
        let doc = CanonicalJson::parse(text).unwrap();
        let at = |p: &str| doc.at(p).map(|v| String::from_utf8(v.to_vec()).unwrap());
        assert_eq!(at("/b/1/x").as_deref(), Some(r#""y""#));
        assert_eq!(at("/b/0").as_deref(), Some("10"));
        assert_eq!(at("/b").as_deref(), Some(r#"[10,{"x":"y"}]"#));
        assert_eq!(at("/a~1c").as_deref(), Some("1"));
        assert_eq!(at("/m~0n").as_deref(), Some("null"));
        assert_eq!(at("/k").as_deref(), Some("2"), "the last duplicate wins");
        assert_eq!(at("/esc").as_deref(), Some("3"));
        assert_eq!(at("/b/2"), None);
        assert_eq!(at("/b/01"), None);
        assert_eq!(at("/nope"), None);
        assert_eq!(at("/b/1/x/deeper"), None);
        assert!(CanonicalJson::parse("not json").is_none());
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
