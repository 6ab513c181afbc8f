//! What the clients of every phase send and read back: an order's body and
//! the Lambda proxy response as the client gets it.

use std::collections::BTreeMap;

use serde_json::Value;

pub(crate) fn order_body(i: usize) -> String {
    format!(
        r#"{{"customer_id":"cus_{}","amount":{},"currency":"EUR"}}"#,
        i,
        100 + i
    )
}

/// A Lambda proxy response, as the client gets it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub(crate) status: u64,
    /// `Idempotent-Replayed: true`.
    pub(crate) replayed: bool,
    /// Headers other than `Idempotent-Replayed` (lower-cased names).
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) body: String,
    base64: bool,
}

pub(crate) fn parse_response(bytes: &[u8]) -> Option<Answer> {
    let v: Value = serde_json::from_slice(bytes).ok()?;
    let mut headers: BTreeMap<String, String> = v["headers"]
        .as_object()
        .map(|h| {
            h.iter()
                .map(|(k, v)| {
                    (
                        k.to_ascii_lowercase(),
                        v.as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let replayed = headers.remove(lambda_idempotency::http::REPLAYED_HEADER) == Some("true".into());
    Some(Answer {
        status: v["statusCode"].as_u64()?,
        replayed,
        headers,
        body: v["body"].as_str().unwrap_or_default().to_owned(),
        base64: v["isBase64Encoded"].as_bool().unwrap_or(false),
    })
}

impl Answer {
    /// Byte for byte the same response, the replay marker aside.
    pub(crate) fn same_as(&self, other: &Answer) -> bool {
        (self.status, &self.headers, &self.body, self.base64)
            == (other.status, &other.headers, &other.body, other.base64)
    }
}
