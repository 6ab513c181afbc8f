//! JSON text as another runtime writes it, for the hashes Powertools takes
//! of it: the structure is JSON's, the separators, the order of an object's
//! keys, the escapes and the numbers are the runtime's ([`Style`]).

use serde_json::Value;

/// How a runtime writes JSON.
pub(super) trait Style {
    /// Between the items of an array or an object.
    const ITEM: &'static str;
    /// Between a key and its value.
    const KEY: &'static str;
    /// Order an object's entries as the runtime does.
    fn order(entries: &mut Vec<(&String, &Value)>);
    /// Write a string, quotes included.
    fn string(out: &mut String, s: &str);
    /// Write a number.
    fn number(out: &mut String, n: &serde_json::Number);
}

/// `value` as `S` writes it.
pub(super) fn write<S: Style>(value: &Value) -> String {
    let mut out = String::new();
    write_value::<S>(&mut out, value);
    out
}

fn write_value<S: Style>(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => S::number(out, n),
        Value::String(s) => S::string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(S::ITEM);
                }
                write_value::<S>(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            S::order(&mut entries);
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(S::ITEM);
                }
                S::string(out, key);
                out.push_str(S::KEY);
                write_value::<S>(out, item);
            }
            out.push('}');
        }
    }
}
