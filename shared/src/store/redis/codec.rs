//! How records are Redis hashes: the one place that turns a [`Record`] and
//! its parts into hash fields and script replies, and back.

use std::collections::HashMap;

use ::redis::Value;

use crate::error::Error;
use crate::record::{decode_body, Checkpoint, Record, Status, StoredBody, StoredResponse};
use crate::store::rules;

/// Field names of a record's hash (the Lua scripts use the same).
pub(super) mod field {
    pub(in super::super) const STATUS: &str = "status";
    pub(in super::super) const FINGERPRINT: &str = "fingerprint";
    pub(in super::super) const ATTEMPT: &str = "attempt";
    pub(in super::super) const OWNER: &str = "owner";
    pub(in super::super) const LEASE: &str = "lease";
    pub(in super::super) const EXPIRES: &str = "expires";
    pub(in super::super) const CHECKPOINT: &str = "checkpoint";
    pub(in super::super) const RESPONSE_STATUS: &str = "response_status";
    pub(in super::super) const RESPONSE_HEADERS: &str = "response_headers";
    pub(in super::super) const RESPONSE_BODY_KIND: &str = "response_body_kind";
    pub(in super::super) const RESPONSE_BODY: &str = "response_body";
    pub(in super::super) const RESPONSE_ENCODING: &str = "response_encoding";
}

/// A record this engine cannot read back (see [`rules::corrupt`]).
pub(super) fn corrupt(record_id: &str, what: &str) -> Error {
    rules::corrupt("key", record_id, what)
}

pub(super) fn parse_checkpoint(record_id: &str, bytes: &[u8]) -> Result<Checkpoint, Error> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|_| corrupt(record_id, "the recovery point is not JSON"))?;
    match (
        value.get("name").and_then(|v| v.as_str()),
        value.get("attempt").and_then(|v| v.as_u64()),
    ) {
        (Some(name), Some(attempt)) => Ok(Checkpoint {
            name: name.to_owned(),
            data: value
                .get("data")
                .cloned()
                .unwrap_or(serde_json::Value::Null),
            attempt,
        }),
        _ => Err(corrupt(
            record_id,
            "the recovery point lacks its name or attempt",
        )),
    }
}

/// Headers as one binary-safe value: for each, the name's length (4 bytes,
/// big endian), the name, the value's length, the value.
pub(super) fn encode_headers(headers: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        for part in [name.as_bytes(), value.as_slice()] {
            // A header longer than 4 GiB cannot come out of a Lambda function.
            out.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

/// Undo [`encode_headers`]; `None` when the bytes are not such a list.
pub(super) fn decode_headers(mut bytes: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    fn part<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
        let (len, rest) = bytes.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
        let (value, rest) = (rest.get(..len)?, rest.get(len..)?);
        *bytes = rest;
        Some(value)
    }
    let mut headers = Vec::new();
    while !bytes.is_empty() {
        let name = String::from_utf8(part(&mut bytes)?.to_vec()).ok()?;
        let value = part(&mut bytes)?.to_vec();
        headers.push((name, value));
    }
    Some(headers)
}

/// The bytes of a string reply; `None` for nil and non-strings.
pub(super) fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// A number reply (integer, or a string of digits).
pub(super) fn number(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => std::str::from_utf8(bytes(other)?).ok()?.parse().ok(),
    }
}

/// A string reply as text (RESP3 answers `INFO` with a verbatim string).
pub(super) fn text(value: &Value) -> Option<String> {
    match value {
        Value::VerbatimString { text, .. } => Some(text.clone()),
        other => String::from_utf8(bytes(other)?.to_vec()).ok(),
    }
}

/// A hash as `HGETALL` answers it (a flat array in RESP2, a map in RESP3).
pub(super) fn hash_fields(value: Value) -> Option<HashMap<String, Vec<u8>>> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs,
        Value::Array(flat) => {
            let mut pairs = Vec::with_capacity(flat.len() / 2);
            let mut items = flat.into_iter();
            while let Some(name) = items.next() {
                pairs.push((name, items.next()?));
            }
            pairs
        }
        Value::Nil => Vec::new(),
        _ => return None,
    };
    pairs
        .into_iter()
        .map(|(name, value)| Some((text(&name)?, bytes(&value)?.to_vec())))
        .collect()
}

/// Decode a record's hash.
pub(super) fn decode(record_id: &str, fields: &HashMap<String, Vec<u8>>) -> Result<Record, Error> {
    use field::*;
    let get_s = |name: &str| -> Result<String, Error> {
        fields
            .get(name)
            .and_then(|v| String::from_utf8(v.clone()).ok())
            .ok_or_else(|| corrupt(record_id, &format!("field `{name}` is missing")))
    };
    let get_n = |name: &str| -> Result<u64, Error> {
        get_s(name)?
            .parse()
            .map_err(|_| corrupt(record_id, &format!("field `{name}` is not a number")))
    };
    let status_text = get_s(STATUS)?;
    let status = Status::parse(&status_text)
        .ok_or_else(|| corrupt(record_id, &format!("unknown status `{status_text}`")))?;
    let response = match status {
        Status::InProgress => None,
        Status::Completed => Some(decode_response(record_id, fields)?),
    };
    let checkpoint = fields
        .get(CHECKPOINT)
        .map(|b| parse_checkpoint(record_id, b))
        .transpose()?;
    Ok(Record {
        id: record_id.to_owned(),
        status,
        fingerprint: get_s(FINGERPRINT)?,
        attempt: get_n(ATTEMPT)?,
        owner: get_s(OWNER)?,
        lease_expires_at_ms: get_n(LEASE)?,
        expires_at_s: get_n(EXPIRES)?,
        response,
        checkpoint,
    })
}

fn decode_response(
    record_id: &str,
    fields: &HashMap<String, Vec<u8>>,
) -> Result<StoredResponse, Error> {
    use field::*;
    let status = fields
        .get(RESPONSE_STATUS)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.parse::<u16>().ok())
        .ok_or_else(|| corrupt(record_id, "the stored response has no status"))?;
    let headers = decode_headers(fields.get(RESPONSE_HEADERS).map_or(&[][..], Vec::as_slice))
        .ok_or_else(|| corrupt(record_id, "the stored headers are not a list of pairs"))?;
    let kind = fields
        .get(RESPONSE_BODY_KIND)
        .and_then(|v| std::str::from_utf8(v).ok())
        .unwrap_or("empty");
    let gzip = fields.get(RESPONSE_ENCODING).map(Vec::as_slice) == Some(b"gzip");
    let raw = fields.get(RESPONSE_BODY).cloned().unwrap_or_default();
    let body_bytes = decode_body(raw, gzip)
        .ok_or_else(|| corrupt(record_id, "the stored body is not valid gzip"))?;
    let body = StoredBody::from_parts(kind, body_bytes)
        .ok_or_else(|| corrupt(record_id, &format!("unknown body kind `{kind}`")))?;
    Ok(StoredResponse::new(status, headers, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn headers_round_trip_byte_for_byte_and_garbage_is_refused() {
        let headers = vec![
            ("set-cookie".to_owned(), b"a=1".to_vec()),
            ("set-cookie".to_owned(), b"b=2".to_vec()),
            ("x-raw".to_owned(), vec![0, 0xe9, 0xff]),
            ("x-empty".to_owned(), vec![]),
        ];
        assert_eq!(
            decode_headers(&encode_headers(&headers)),
            Some(headers.clone())
        );
        assert_eq!(decode_headers(&[]), Some(vec![]));
        let encoded = encode_headers(&headers);
        assert_eq!(decode_headers(&encoded[..encoded.len() - 1]), None);
        assert_eq!(decode_headers(&[0, 0, 0, 9, b'a']), None);
    }

    #[test]
    fn a_recovery_point_round_trips_and_a_bad_one_is_corrupt() {
        let checkpoint = Checkpoint {
            name: "charged".into(),
            data: serde_json::json!({"charge_id": "ch_1", "n": [1, 2]}),
            attempt: 3,
        };
        assert_eq!(
            parse_checkpoint("r", checkpoint.to_json().as_bytes()).unwrap(),
            checkpoint
        );
        let err = parse_checkpoint("r", b"{\"name\":1}").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CorruptRecord);
    }

    #[test]
    fn hashes_read_from_resp2_arrays_and_resp3_maps() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let flat = Value::Array(vec![b("status"), b("IN_PROGRESS"), b("attempt"), b("2")]);
        let map = Value::Map(vec![
            (b("status"), b("IN_PROGRESS")),
            (b("attempt"), b("2")),
        ]);
        let expected = HashMap::from([
            ("status".to_owned(), b"IN_PROGRESS".to_vec()),
            ("attempt".to_owned(), b"2".to_vec()),
        ]);
        assert_eq!(hash_fields(flat), Some(expected.clone()));
        assert_eq!(hash_fields(map), Some(expected));
        assert_eq!(hash_fields(Value::Array(vec![b("odd")])), None);
    }
}
