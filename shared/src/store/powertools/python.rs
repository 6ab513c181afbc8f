//! JSON as Python's `json.dumps(value, sort_keys=True)` writes it, the text
//! Powertools for AWS Lambda (Python) hashes into its record ids: `", "` and
//! `": "` between items, keys sorted, every character outside printable
//! ASCII escaped (`\u00e9`, surrogate pairs above U+FFFF), floats as
//! Python's `repr` (`1.0`, `1e-05`, `1e+16`).

use serde_json::Value;

/// `json.dumps(value, sort_keys=True)`.
pub(crate) fn dumps(value: &Value) -> String {
    super::json_text::write::<Python>(value)
}

/// Python's `json` module, with `sort_keys=True`.
struct Python;

impl super::json_text::Style for Python {
    const ITEM: &'static str = ", ";
    const KEY: &'static str = ": ";

    // Python sorts by code point, which is the byte order of UTF-8.
    fn order(entries: &mut Vec<(&String, &Value)>) {
        entries.sort_by(|a, b| a.0.cmp(b.0));
    }

    fn string(out: &mut String, s: &str) {
        write_string(out, s);
    }

    fn number(out: &mut String, n: &serde_json::Number) {
        match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (_, Some(u), _) => out.push_str(&u.to_string()),
            (_, _, Some(f)) => out.push_str(&float_repr(f)),
            _ => out.push_str(&n.to_string()),
        }
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
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

/// Python's `repr` of a float: the shortest digits that read back the same
/// number, positional when the decimal point falls within 16 digits of
/// them (`1e-05` below `0.0001`, `1e+16` from ten quadrillion on).
fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // Rust's `{:e}` gives the same shortest digits: `d.ddde±x`.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    // The decimal point sits after `point` digits.
    let point = exponent + 1;
    if !(-3..=16).contains(&point) {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{first}{fraction}e{exp_sign}{:02}", exponent.abs());
    }
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
    } else {
        let (whole, fraction) = digits.split_at(point as usize);
        format!("{whole}.{fraction}")
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Expected texts are what CPython 3.11 prints for
    // `json.dumps(value, sort_keys=True)`.
    #[test]
    fn strings_are_escaped_as_python_escapes_them() {
        assert_eq!(dumps(&json!("abc")), r#""abc""#);
        assert_eq!(dumps(&json!("a\"b\\c\n\t")), r#""a\"b\\c\n\t""#);
        assert_eq!(dumps(&json!("é")), r#""\u00e9""#);
        assert_eq!(dumps(&json!("😀")), r#""\ud83d\ude00""#);
        assert_eq!(dumps(&json!("\u{7f}\u{1}")), r#""\u007f\u0001""#);
    }

    #[test]
    fn containers_are_spaced_and_keys_sorted() {
        assert_eq!(
            dumps(&json!({"b": [1, "x"], "a": {"d": null, "c": true}})),
            r#"{"a": {"c": true, "d": null}, "b": [1, "x"]}"#
        );
        assert_eq!(dumps(&json!([])), "[]");
        assert_eq!(dumps(&json!({})), "{}");
    }

    #[test]
    fn floats_are_python_reprs() {
        for (f, python) in [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-2.25, "-2.25"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345e20, "1.2345e+20"),
            (123.456, "123.456"),
            (0.1, "0.1"),
        ] {
            assert_eq!(dumps(&json!(f)), python, "{f}");
        }
        assert_eq!(dumps(&json!(-7)), "-7");
        assert_eq!(dumps(&json!(u64::MAX)), "18446744073709551615");
    }
}
