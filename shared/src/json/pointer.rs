//! RFC 6901 JSON pointers, checked when configured and read from
//! canonical JSON without parsing it again.

use super::canonical_json;
use crate::error::{Error, ErrorKind};

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

/// One document read at several pointers: only the event batches do that,
/// so other builds compile it for the tests alone.
#[cfg_attr(
    not(any(
        feature = "sqs",
        feature = "kinesis",
        feature = "events-dynamodb-stream"
    )),
    allow(dead_code)
)]
pub(super) mod document {
    use super::{canonical_json, select};

    /// A JSON document in canonical form, canonicalised once and read at any
    /// number of pointers (an SQS body's key and validated fields). Numbers
    /// are exact, as in the whole-body fingerprint; of duplicate keys the
    /// last wins.
    pub(crate) struct CanonicalJson(Vec<u8>);

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
}

/// The value at `pointer` in canonical JSON (no whitespace, no duplicate
/// keys, as [`canonical_json`] writes it).
pub(crate) fn select<'c>(canonical: &'c [u8], pointer: &str) -> Option<&'c [u8]> {
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

#[cfg(test)]
mod tests {
    use super::document::CanonicalJson;
    use super::*;

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
}
