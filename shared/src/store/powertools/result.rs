//! What Powertools stored, as this library's record holds it: a result
//! as the response or output it was, the key and body as it hashed them.

use serde_json::Value;

use crate::error::{Error, ErrorKind};
use crate::record::{StoredBody, StoredResponse};

/// How a Powertools result is stored here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// An API Gateway response (`statusCode`, `headers`, `body`), as the
    /// HTTP layer replays it.
    Http,
    /// A function's output, as the event path replays it.
    Output,
}

/// A Powertools result (`json.dumps` of what the handler returned) as a
/// stored response of `shape`.
pub(super) fn stored_response(data: &str, shape: Shape) -> Result<StoredResponse, Error> {
    if shape == Shape::Output {
        // The event path keeps outputs as their JSON text.
        return Ok(StoredResponse::new(
            200,
            Vec::new(),
            StoredBody::Text(data.to_owned()),
        ));
    }
    let corrupt = |what: String| {
        Error::new(
            ErrorKind::CorruptRecord,
            format!("the result Powertools stored {what}, so it cannot be replayed as a response"),
        )
    };
    let value: Value =
        serde_json::from_str(data).map_err(|e| corrupt(format!("is not JSON ({e})")))?;
    let Some(result) = value.as_object().filter(|o| o.contains_key("statusCode")) else {
        // API Gateway's HTTP API answers a result without `statusCode` as a
        // 200 with the result as its JSON body.
        return Ok(StoredResponse::new(
            200,
            vec![("content-type".into(), b"application/json".to_vec())],
            StoredBody::Text(value.to_string()),
        ));
    };
    let status_code = result.get("statusCode").unwrap_or(&Value::Null);
    let status = match status_code {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .and_then(|s| u16::try_from(s).ok())
    .filter(|s| (100..=599).contains(s))
    .ok_or_else(|| corrupt(format!("has statusCode {status_code}")))?;
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(_) | Value::Bool(_) => Some(v.to_string()),
        _ => None,
    };
    let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
    if let Some(map) = result.get("headers").and_then(Value::as_object) {
        for (name, value) in map {
            if let Some(value) = text(value) {
                headers.push((name.to_ascii_lowercase(), value.into_bytes()));
            }
        }
    }
    if let Some(map) = result.get("multiValueHeaders").and_then(Value::as_object) {
        for (name, values) in map {
            let name = name.to_ascii_lowercase();
            // A name in both maps is answered by the multi-value one, as
            // API Gateway's REST API does.
            headers.retain(|(n, _)| *n != name);
            for value in values.as_array().into_iter().flatten().filter_map(text) {
                headers.push((name.clone(), value.into_bytes()));
            }
        }
    }
    for cookie in result
        .get("cookies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(text)
    {
        headers.push(("set-cookie".into(), cookie.into_bytes()));
    }
    let body = match result.get("body") {
        None | Some(Value::Null) => StoredBody::Empty,
        Some(Value::String(body)) if result.get("isBase64Encoded") == Some(&Value::Bool(true)) => {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(body)
                .map_err(|e| corrupt(format!("has a body that is not base64 ({e})")))?;
            StoredBody::Binary(bytes)
        }
        Some(Value::String(body)) if body.is_empty() => StoredBody::Empty,
        Some(Value::String(body)) => StoredBody::Text(body.clone()),
        Some(other) => StoredBody::Text(other.to_string()),
    };
    Ok(StoredResponse::new(status, headers, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_gateway_result_becomes_the_response_it_describes() {
        let stored = stored_response(
            r#"{"body": "{\"id\": 1}", "cookies": ["a=1"], "headers": {"Content-Type": "application/json", "X-Count": 2}, "statusCode": 201}"#,
            Shape::Http,
        )
        .unwrap();
        assert_eq!(stored.status, 201);
        assert_eq!(
            stored.headers,
            vec![
                ("content-type".to_owned(), b"application/json".to_vec()),
                ("x-count".to_owned(), b"2".to_vec()),
                ("set-cookie".to_owned(), b"a=1".to_vec()),
            ]
        );
        assert_eq!(stored.body, StoredBody::Text(r#"{"id": 1}"#.into()));
    }

    #[test]
    fn base64_bodies_and_multi_value_headers_are_kept() {
        let stored = stored_response(
            r#"{"body": "AAEC", "isBase64Encoded": true, "headers": {"Vary": "x"}, "multiValueHeaders": {"Vary": ["a", "b"]}, "statusCode": "200"}"#,
            Shape::Http,
        )
        .unwrap();
        assert_eq!(stored.status, 200);
        assert_eq!(stored.body, StoredBody::Binary(vec![0, 1, 2]));
        assert_eq!(
            stored.headers,
            vec![
                ("vary".to_owned(), b"a".to_vec()),
                ("vary".to_owned(), b"b".to_vec())
            ]
        );
    }

    #[test]
    fn a_result_without_status_is_a_json_200_and_outputs_are_kept_as_json() {
        let stored = stored_response(r#"{"ok": true}"#, Shape::Http).unwrap();
        assert_eq!(stored.status, 200);
        assert_eq!(stored.body, StoredBody::Text(r#"{"ok":true}"#.into()));
        let output = stored_response(r#"{"ok": true}"#, Shape::Output).unwrap();
        assert_eq!(output.body, StoredBody::Text(r#"{"ok": true}"#.into()));
    }

    #[test]
    fn a_result_that_cannot_be_a_response_is_refused_saying_why() {
        for (data, says) in [
            ("not json", "is not JSON"),
            (r#"{"statusCode": 99}"#, "statusCode 99"),
            (
                r#"{"statusCode": 200, "body": "%%", "isBase64Encoded": true}"#,
                "base64",
            ),
        ] {
            let err = stored_response(data, Shape::Http).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::CorruptRecord);
            assert!(err.to_string().contains(says), "{err}");
        }
    }
}
