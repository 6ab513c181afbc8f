//! Reading the `Idempotency-Key` header.
//!
//! The IETF draft `draft-ietf-httpapi-idempotency-key-header` defines the value
//! as an RFC 9651 structured-field string (`"8e03978e-40d5"`); Stripe and most
//! clients send a bare value (`8e03978e-40d5`). Both are accepted: a value that
//! starts with `"` is parsed as an sf-string (escapes and all), anything else
//! is taken as is.

use crate::error::{Error, ErrorKind};

/// The longest key accepted, in bytes (Stripe's limit).
pub const MAX_KEY_LEN: usize = 255;

/// A validated idempotency key: 1 to 255 printable ASCII characters, from a
/// header value that is an RFC 9651 sf-string (`"order-42"`) or bare.
///
/// ```
/// use lambda_idempotency::http::IdempotencyKey;
///
/// assert_eq!(IdempotencyKey::parse("\"order-42\"").unwrap().as_str(), "order-42");
/// assert_eq!(IdempotencyKey::parse("8e03978e-40d5-43e8").unwrap().as_str(), "8e03978e-40d5-43e8");
/// assert!(IdempotencyKey::parse("").is_err());
/// assert!(IdempotencyKey::parse(&"k".repeat(256)).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Parse and validate a header value.
    pub fn parse(value: &str) -> Result<IdempotencyKey, Error> {
        parse(value)
    }

    /// Parse and validate a header value given as bytes (header values need
    /// not be UTF-8).
    pub fn parse_bytes(value: &[u8]) -> Result<IdempotencyKey, Error> {
        parse_bytes(value)
    }

    /// The key as the client sent it (after sf-string unquoting).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Parse and validate a header value as raw bytes (header values need not be UTF-8).
pub(crate) fn parse_bytes(value: &[u8]) -> Result<IdempotencyKey, Error> {
    match std::str::from_utf8(value) {
        Ok(s) => parse(s),
        Err(_) => Err(invalid(
            "the idempotency key contains bytes outside printable ASCII; \
             use letters, digits and punctuation only (a UUID works well)",
        )),
    }
}

/// Parse and validate a header value.
pub(crate) fn parse(value: &str) -> Result<IdempotencyKey, Error> {
    let trimmed = value.trim_matches(|c| c == ' ' || c == '\t');
    let key = if trimmed.starts_with('"') {
        let item: sfv::Item = sfv::Parser::new(trimmed).parse_item().map_err(|e| {
            invalid(format!(
                "the idempotency key starts with a quote but is not a valid structured-field \
                 string ({e}); send either \"key\" with a closing quote or the bare key"
            ))
        })?;
        if !item.params.is_empty() {
            return Err(invalid(
                "the idempotency key has structured-field parameters (`;name=value`); \
                 send the key alone",
            ));
        }
        match item.bare_item.as_string() {
            Some(s) => s.as_str().to_owned(),
            None => {
                return Err(invalid(
                    "the quoted idempotency key is not a structured-field string",
                ))
            }
        }
    } else {
        trimmed.to_owned()
    };
    validate(key)
}

/// The key at `pointer` of a JSON request body
/// ([`key_from_body`](crate::http::IdempotencyLayer::key_from_body)):
/// `None` when the body is not JSON or holds nothing there. A body that
/// nests deeper than JSON is read ([`crate::json::MAX_DEPTH`] levels) is
/// refused as such, not taken for a body without a key: its key cannot be
/// told, and running it unprotected (or asking for a key it may hold) would
/// not be true to the request.
pub(crate) fn from_body(body: &[u8], pointer: &str) -> Result<Option<IdempotencyKey>, Error> {
    let Ok(document) = serde_json::from_slice::<serde_json::Value>(body) else {
        let depth = crate::json::nesting_depth(body);
        if depth > crate::json::MAX_DEPTH {
            return Err(invalid(format!(
                "the request body nests {depth} levels of arrays and objects; the idempotency \
                 key at `{pointer}` is read only from a JSON body nested at most {} levels \
                 deep: send the body less deeply nested",
                crate::json::MAX_DEPTH
            )));
        }
        return Ok(None);
    };
    document.pointer(pointer).map(from_json).transpose()
}

/// A key read from a JSON body: a string as it is, an integer as its
/// decimal text, validated as a header's key is; any other value is refused.
pub(crate) fn from_json(value: &serde_json::Value) -> Result<IdempotencyKey, Error> {
    match value {
        serde_json::Value::String(s) => validate(s.clone()),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => validate(n.to_string()),
        other => {
            let kind = match other {
                serde_json::Value::Number(_) => "a number with a fraction or an exponent",
                serde_json::Value::Bool(_) => "a boolean",
                serde_json::Value::Null => "null",
                serde_json::Value::Array(_) => "an array",
                _ => "an object",
            };
            Err(invalid(format!(
                "the idempotency key in the body is {kind}; send it as a string \
                 (or an integer)"
            )))
        }
    }
}

fn validate(key: String) -> Result<IdempotencyKey, Error> {
    if key.is_empty() {
        return Err(invalid(
            "the idempotency key is empty; send a unique value such as a UUID",
        ));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(invalid(format!(
            "the idempotency key is {} bytes long; the limit is {MAX_KEY_LEN}",
            key.len()
        )));
    }
    if let Some(bad) = key.bytes().find(|b| !(0x20..=0x7e).contains(b)) {
        return Err(invalid(format!(
            "the idempotency key contains byte 0x{bad:02x}, outside printable ASCII; \
             use letters, digits and punctuation only (a UUID works well)"
        )));
    }
    Ok(IdempotencyKey(key))
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidKey, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sf_string_escapes_are_decoded() {
        assert_eq!(parse(r#""a\"b\\c""#).unwrap().as_str(), r#"a"b\c"#);
    }

    #[test]
    fn bare_and_quoted_forms_name_the_same_key() {
        assert_eq!(parse("abc-123").unwrap(), parse("\"abc-123\"").unwrap());
    }

    #[test]
    fn surrounding_whitespace_is_ignored() {
        assert_eq!(parse("  abc ").unwrap().as_str(), "abc");
    }

    #[test]
    fn rejects_empty_long_and_non_printable() {
        for bad in ["", "   ", "\"\"", "a\u{7f}b", "caf\u{e9}", "\"unterminated"] {
            let err = parse(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidKey, "{bad:?}");
        }
        assert!(parse(&"x".repeat(MAX_KEY_LEN)).is_ok());
        assert!(parse(&"x".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(parse_bytes(b"\xff\xfe").is_err());
    }

    #[test]
    fn a_body_nested_past_the_limit_is_refused_naming_the_depth_not_taken_for_no_key() {
        let nested = crate::json::nested_for_tests;
        let limit = crate::json::MAX_DEPTH;
        let at_limit = from_body(nested(limit).as_bytes(), "/id").unwrap();
        assert_eq!(at_limit.unwrap().as_str(), "k1");
        let err = from_body(nested(limit + 1).as_bytes(), "/id").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidKey);
        let message = err.to_string();
        assert!(
            message.contains(&format!("nests {} levels", limit + 1)),
            "{message}"
        );
        assert!(
            message.contains(&format!("at most {limit} levels")),
            "{message}"
        );
        assert!(message.contains("`/id`"), "{message}");
        // Not JSON, or JSON without the key: no key, as before.
        assert_eq!(from_body(b"id=k1", "/id").unwrap(), None);
        assert_eq!(from_body(b"{\"ID\":\"k1\"}", "/id").unwrap(), None);
    }

    #[test]
    fn body_keys_are_strings_or_integers_validated_as_header_keys() {
        use serde_json::json;
        assert_eq!(from_json(&json!("evt_1")).unwrap().as_str(), "evt_1");
        // No sf-string unquoting in a body: the quotes are part of the key.
        assert_eq!(from_json(&json!("\"q\"")).unwrap().as_str(), "\"q\"");
        assert_eq!(from_json(&json!(42)).unwrap().as_str(), "42");
        assert_eq!(from_json(&json!(-7)).unwrap().as_str(), "-7");
        for bad in [
            json!(""),
            json!("caf\u{e9}"),
            json!(1.5),
            json!(true),
            json!(null),
            json!([1]),
            json!({"a": 1}),
        ] {
            assert_eq!(
                from_json(&bad).unwrap_err().kind(),
                ErrorKind::InvalidKey,
                "{bad}"
            );
        }
        assert!(from_json(&json!("x".repeat(MAX_KEY_LEN + 1))).is_err());
    }

    #[test]
    fn rejects_parameters_and_non_string_items() {
        assert!(parse("\"abc\";a=1").is_err());
    }
}
