//! The canonical form of a JSON document, with exact numbers: what
//! fingerprints hash and event keys and validated fields are read from.

use std::borrow::Cow;

use super::decimal::Decimal;

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
pub(crate) fn canonical_json(text: &str) -> Option<Vec<u8>> {
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
pub(crate) const MAX_DEPTH: usize = 127;

/// How deep containers (arrays and objects) nest in `text`, read as JSON
/// as far as its brackets go (brackets inside strings do not count; the
/// text need not be valid JSON). It tells a body refused for its depth
/// from one that is not JSON at all: both are refused by serde_json and
/// [`canonical_json`] alike, and only the first deserves an answer that
/// names the limit.
#[cfg_attr(
    not(any(feature = "http", feature = "sqs", feature = "kinesis")),
    allow(dead_code)
)]
pub(crate) fn nesting_depth(text: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical JSON of `value` (serde_json's default `Map` is ordered by
    /// key, so serialising sorts keys).
    fn write_canonical(out: &mut Vec<u8>, value: &serde_json::Value) {
        // Serialising a `Value` into a `Vec` cannot fail.
        let _ = serde_json::to_writer(out, value);
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
        // Beyond an i64 exponent a non-zero number is not canonicalised.
        assert!(canonical_json("1e99999999999999999999999").is_none());
        assert!(canonical_json("1e-99999999999999999999999").is_none());
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
                assert_eq!(nesting_depth(text.as_bytes()), depth);
                assert_eq!(parsed, depth <= MAX_DEPTH, "depth {depth} {open}");
            }
        }
    }

    #[test]
    fn nesting_depth_counts_containers_not_brackets_in_strings() {
        assert_eq!(nesting_depth(b"1"), 0);
        assert_eq!(nesting_depth(b"not json"), 0);
        assert_eq!(nesting_depth(br#"{"a":[1,{"b":[]}],"c":{}}"#), 4);
        assert_eq!(nesting_depth(br#"{"a":"[[[{{{","b":"\"[[","c":"\\"}"#), 1);
        // Unclosed or over-closed text is measured as far as it goes.
        assert_eq!(nesting_depth(b"[[[["), 4);
        assert_eq!(nesting_depth(b"]]][["), 2);
    }
}
