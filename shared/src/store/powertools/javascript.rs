//! JSON as Powertools for AWS Lambda (TypeScript) hashes it into its record
//! ids: `JSON.stringify(deepSort(value))`: no spaces, object keys sorted
//! by their lowercase form (ties in the order they came), strings escaped
//! only where JSON requires it, numbers as JavaScript prints a double
//! (`1` for `1.0`, `1e+21`, `1e-7`).

use serde_json::Value;

/// `JSON.stringify(deepSort(value))`.
pub(crate) fn stringify(value: &Value) -> String {
    super::json_text::write::<JavaScript>(value)
}

/// `JSON.stringify` after Powertools' `deepSort`.
struct JavaScript;

impl super::json_text::Style for JavaScript {
    const ITEM: &'static str = ",";
    const KEY: &'static str = ":";

    // deepSort compares `a.toLowerCase() < b.toLowerCase()` (UTF-16 code
    // units); a stable sort keeps ties in the order they came.
    fn order(entries: &mut Vec<(&String, &Value)>) {
        entries
            .sort_by_cached_key(|(key, _)| key.to_lowercase().encode_utf16().collect::<Vec<u16>>());
    }

    fn string(out: &mut String, s: &str) {
        write_string(out, s);
    }

    // JavaScript reads every JSON number as a double.
    fn number(out: &mut String, n: &serde_json::Number) {
        out.push_str(&number(n.as_f64().unwrap_or(f64::NAN)));
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `String(n)` of a double: the shortest digits that read back the same
/// number, positional from 1e-7 (exclusive) up to 1e21 (exclusive),
/// otherwise `d.ddde±x`.
fn number(f: f64) -> String {
    if !f.is_finite() {
        // JSON.stringify writes NaN and the infinities as null.
        return "null".into();
    }
    if f == 0.0 {
        return "0".into();
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if f < 0.0 { "-" } else { "" };
    // ECMAScript's Number::toString: the value is 0.digits × 10^n.
    let n = exponent + 1;
    let k = digits.len() as i32;
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        let (whole, fraction) = digits.split_at(n as usize);
        format!("{whole}.{fraction}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if n - 1 < 0 { '-' } else { '+' };
        format!("{first}{fraction}e{exp_sign}{}", (n - 1).abs())
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Expected texts are what Node 20 prints for
    // `JSON.stringify(deepSort(value))` (deepSort from
    // @aws-lambda-powertools/idempotency 2.x).
    #[test]
    fn keys_sort_by_their_lowercase_form_without_spaces() {
        assert_eq!(
            stringify(&json!({"b": [1, "x"], "A": {"d": null, "C": true}, "a0": 2})),
            r#"{"A":{"C":true,"d":null},"a0":2,"b":[1,"x"]}"#
        );
    }

    #[test]
    fn strings_escape_only_what_json_requires() {
        assert_eq!(stringify(&json!("é😀\u{7f}")), "\"é😀\u{7f}\"");
        assert_eq!(stringify(&json!("a\"b\\\n\u{1}")), r#""a\"b\\\n\u0001""#);
    }

    #[test]
    fn numbers_print_as_javascript_prints_doubles() {
        for (value, js) in [
            (json!(1.0), "1"),
            (json!(-0.0), "0"),
            (json!(0.5), "0.5"),
            (json!(123.456), "123.456"),
            (json!(1e21), "1e+21"),
            (json!(1e20), "100000000000000000000"),
            (json!(0.000001), "0.000001"),
            (json!(1e-7), "1e-7"),
            (json!(1.5e-7), "1.5e-7"),
            (json!(2500), "2500"),
            (json!(9007199254740993u64), "9007199254740992"),
        ] {
            assert_eq!(stringify(&value), js, "{value}");
        }
    }
}
