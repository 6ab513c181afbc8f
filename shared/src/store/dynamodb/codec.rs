//! How records are items: the one place that turns a [`Record`] and its
//! parts into DynamoDB attribute values and back.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::TableLayout;
use crate::error::Error;
use crate::record::{decode_body, Checkpoint, Record, Status, StoredBody, StoredResponse};
use crate::store::rules;

/// A number attribute of an item.
pub(super) fn number(item: &HashMap<String, AttributeValue>, name: &str) -> Option<u64> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

pub(super) fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

pub(super) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A record this engine cannot read back (see [`rules::corrupt`]).
pub(super) fn corrupt(record_id: &str, what: &str) -> Error {
    rules::corrupt("item", record_id, what)
}

/// A recovery point as stored: a map of its name, its data as JSON text, and
/// the attempt that committed it.
pub(super) fn checkpoint_value(checkpoint: &Checkpoint) -> AttributeValue {
    AttributeValue::M(HashMap::from([
        ("name".to_owned(), s(&checkpoint.name)),
        ("data".to_owned(), s(&checkpoint.data.to_string())),
        ("attempt".to_owned(), n(checkpoint.attempt)),
    ]))
}

/// Stored headers as a list of `[S name, B value]` pairs.
pub(super) fn headers_value(headers: &[(String, Vec<u8>)]) -> AttributeValue {
    AttributeValue::L(
        headers
            .iter()
            .map(|(name, value)| {
                AttributeValue::L(vec![s(name), AttributeValue::B(value.clone().into())])
            })
            .collect(),
    )
}

/// Decode an item into a [`Record`].
/// An item's size as DynamoDB bills it: every attribute's name (UTF-8
/// bytes) plus its value. Strings and binaries count their bytes; numbers
/// one byte per two significant digits plus one; booleans and nulls one;
/// lists and maps three, plus one per element, plus their elements (map keys
/// count like attribute names); sets the sum of their members.
pub(super) fn item_size(item: &HashMap<String, AttributeValue>) -> u64 {
    item.iter()
        .map(|(name, value)| name.len() as u64 + value_size(value))
        .sum()
}

fn value_size(value: &AttributeValue) -> u64 {
    match value {
        AttributeValue::S(text) => text.len() as u64,
        AttributeValue::N(number) => number_size(number),
        AttributeValue::B(bytes) => bytes.as_ref().len() as u64,
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::L(list) => 3 + list.iter().map(|v| 1 + value_size(v)).sum::<u64>(),
        AttributeValue::M(map) => 3 + item_size(map) + map.len() as u64,
        AttributeValue::Ss(set) => set.iter().map(|v| v.len() as u64).sum(),
        AttributeValue::Ns(set) => set.iter().map(|v| number_size(v)).sum(),
        AttributeValue::Bs(set) => set.iter().map(|v| v.as_ref().len() as u64).sum(),
        _ => 0,
    }
}

/// One byte per two significant digits (leading and trailing zeros
/// trimmed), plus one.
fn number_size(number: &str) -> u64 {
    let digits: String = number
        .chars()
        .take_while(|c| *c != 'e' && *c != 'E')
        .filter(char::is_ascii_digit)
        .collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len() as u64;
    significant.div_ceil(2) + 1
}

pub(super) fn decode(
    layout: &TableLayout,
    record_id: &str,
    item: &HashMap<String, AttributeValue>,
) -> Result<Record, Error> {
    let get_s = |name: &str| -> Result<String, Error> {
        item.get(name)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .ok_or_else(|| corrupt(record_id, &format!("string attribute `{name}` is missing")))
    };
    let get_n = |name: &str| -> Result<u64, Error> {
        item.get(name)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| corrupt(record_id, &format!("number attribute `{name}` is missing")))
    };
    let status_text = get_s(&layout.status)?;
    let status = Status::parse(&status_text)
        .ok_or_else(|| corrupt(record_id, &format!("unknown status `{status_text}`")))?;
    let response = match status {
        Status::InProgress => None,
        Status::Completed => Some(decode_response(layout, record_id, item)?),
    };
    let checkpoint = item
        .get(&layout.checkpoint)
        .and_then(|v| v.as_m().ok())
        .map(|m| {
            let text = |k: &str| {
                m.get(k)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default()
            };
            Checkpoint {
                name: text("name"),
                data: serde_json::from_str(&text("data")).unwrap_or(serde_json::Value::Null),
                attempt: m
                    .get("attempt")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            }
        });
    Ok(Record {
        id: record_id.to_owned(),
        status,
        fingerprint: get_s(&layout.fingerprint)?,
        attempt: get_n(&layout.attempt)?,
        owner: get_s(&layout.owner)?,
        lease_expires_at_ms: get_n(&layout.lease_expires_at)?,
        expires_at_s: get_n(&layout.expires_at)?,
        response,
        checkpoint,
    })
}

fn decode_response(
    layout: &TableLayout,
    record_id: &str,
    item: &HashMap<String, AttributeValue>,
) -> Result<StoredResponse, Error> {
    let status = item
        .get(&layout.response_status)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<u16>().ok())
        .ok_or_else(|| corrupt(record_id, "the stored response has no status"))?;
    let mut headers = Vec::new();
    if let Some(list) = item
        .get(&layout.response_headers)
        .and_then(|v| v.as_l().ok())
    {
        for pair in list {
            match pair.as_l().ok().map(Vec::as_slice) {
                Some([AttributeValue::S(name), AttributeValue::B(value)]) => {
                    headers.push((name.clone(), value.as_ref().to_vec()))
                }
                _ => {
                    return Err(corrupt(
                        record_id,
                        "a stored header is not a [name, value] pair",
                    ))
                }
            }
        }
    }
    let kind = item
        .get(&layout.response_body_kind)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        .unwrap_or("empty");
    let gzip = item
        .get(&layout.response_encoding)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        == Some("gzip");
    let raw = item
        .get(&layout.response_body)
        .and_then(|v| v.as_b().ok())
        .map(|b| b.as_ref().to_vec())
        .unwrap_or_default();
    let bytes = decode_body(raw, gzip)
        .ok_or_else(|| corrupt(record_id, "the stored body is not valid gzip"))?;
    let body = StoredBody::from_parts(kind, bytes)
        .ok_or_else(|| corrupt(record_id, &format!("unknown body kind `{kind}`")))?;
    Ok(StoredResponse::new(status, headers, body))
}
