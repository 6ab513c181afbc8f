//! The cut-over from Powertools for AWS Lambda (Python): every claim that
//! would run the handler during the window the user set asks the record
//! Powertools left for the same key first
//! ([`PowertoolsRecords`](crate::store::dynamodb::PowertoolsRecords)).
//!
//! A completed Powertools record becomes this library's own completed
//! record (its result as the stored response or output) and is replayed;
//! one in progress gives the claim back and answers as in progress; none
//! lets the handler run. A lookup that fails gives the claim back and fails
//! the request: whether the key already ran is unknown, so running it would
//! risk the very duplicate the window is there to prevent.
//!
//! Nothing of this library's record says what an earlier attempt's lookup
//! found, except a completed record (which replays without a claim): a
//! first attempt can end between its claim and the end of the cut-over (its
//! copy or give-back failed, its lookup failed, it died during the lookup),
//! so a takeover looks up again, and so does a claim that resumes from a
//! recovery point (docs/DESIGN.md, "Cutting over from Powertools").

use serde_json::Value;

use crate::claim::{self, Found};
use crate::config::IdempotencyConfig;
use crate::error::Error;
#[cfg(feature = "powertools")]
use crate::error::ErrorKind;
#[cfg(feature = "powertools")]
use crate::record::{Record, Status, StoredBody, StoredResponse};
#[cfg(feature = "powertools")]
use crate::store::dynamodb::PowertoolsRecord;
use crate::store::ClaimRequest;
#[cfg(feature = "powertools")]
use crate::store::{CompleteRequest, Lease};

/// What Powertools hashed for a request: its key (what
/// `event_key_jmespath` selected) and, where validated, the payload.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "powertools"), allow(dead_code))]
pub(crate) struct PowertoolsKey {
    pub(crate) key: Value,
    pub(crate) payload: Option<Value>,
}

/// How a Powertools result is stored here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "powertools"), allow(dead_code))]
pub(crate) enum Shape {
    /// An API Gateway response (`statusCode`, `headers`, `body`), as the
    /// HTTP layer replays it.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Http,
    /// A function's output, as the event path replays it.
    Output,
}

/// Without the `powertools` feature: the plain claim.
#[cfg(not(feature = "powertools"))]
pub(crate) async fn claim(
    config: &IdempotencyConfig,
    request: &ClaimRequest,
    _shape: Shape,
    _key: impl FnOnce() -> Option<PowertoolsKey>,
) -> Result<Found, Error> {
    claim::claim(config.store.as_ref(), request).await
}

/// [`claim::claim`], with the Powertools record of `key()` looked up when
/// the claim won (a fresh claim, a takeover, a claim that resumes from a
/// recovery point) and the window is open.
#[cfg(feature = "powertools")]
pub(crate) async fn claim(
    config: &IdempotencyConfig,
    request: &ClaimRequest,
    shape: Shape,
    key: impl FnOnce() -> Option<PowertoolsKey>,
) -> Result<Found, Error> {
    let found = claim::claim(config.store.as_ref(), request).await?;
    let Some(records) = config.powertools.as_deref() else {
        return Ok(found);
    };
    if let Found::Completed(record) = &found {
        if abandoned(record) && records.open(request.now_ms) {
            if let Some(key) = key() {
                return over_abandoned(records, record, &key, shape, request.now_ms).await;
            }
        }
        return Ok(found);
    }
    let Found::Claimed(lease) = &found else {
        return Ok(found);
    };
    // Every claim that would run the handler looks up, a takeover and a
    // resumed claim included: an earlier attempt may have ended before its
    // lookup decided anything, and this record would not say so.
    if !records.open(request.now_ms) {
        return Ok(found);
    }
    let Some(key) = key() else {
        return Ok(found);
    };
    let give_back = |why: &'static str| claim::release(config.store.as_ref(), lease, why);
    // Boxed: the SDK's request future is large, and held inline it would
    // grow every claim's future (and each move of it) by as much, cut-over
    // or not.
    let record = match Box::pin(records.find(&key.key, request.now_ms)).await {
        Ok(record) => record,
        Err(err) => {
            config.count(
                give_back("the Powertools record could not be read")
                    .await
                    .event(),
            );
            return Err(err);
        }
    };
    match record {
        None => Ok(found),
        Some(PowertoolsRecord::InProgress { until_ms }) => {
            config.count(give_back("Powertools still holds the key").await.event());
            Ok(Found::InProgress {
                retry_after: std::time::Duration::from_millis(
                    until_ms.saturating_sub(request.now_ms),
                ),
                existing: Box::new(record_of(lease, Status::InProgress, until_ms, None)),
            })
        }
        Some(PowertoolsRecord::Completed {
            data,
            expires_at_s,
            validation,
        }) => {
            if let Some(stored) = other_payload(records, &key, validation.as_deref()) {
                config.count(
                    give_back("the Powertools record is of another payload")
                        .await
                        .event(),
                );
                let existing = record_of(lease, Status::Completed, 0, None);
                return Ok(Found::Mismatch(Box::new(Record {
                    fingerprint: format!("powertools:{stored}"),
                    ..existing
                })));
            }
            let stored = match stored_response(&data, shape) {
                Ok(stored) => stored,
                Err(err) => {
                    config.count(
                        give_back("the Powertools record cannot be replayed")
                            .await
                            .event(),
                    );
                    return Err(err);
                }
            };
            // Copied, so the key's later duplicates replay from this
            // library's record, kept as long as Powertools keeps its own:
            // through the second `expiration` (it expires only once the
            // clock's second is past it), so until `expiration + 1`.
            let copy_expires_at_s = expires_at_s.saturating_add(1);
            if let Err(err) = config
                .store
                .complete(CompleteRequest::new(lease, &stored, copy_expires_at_s))
                .await
            {
                // It is Powertools' outcome, so it is replayed all the same.
                // The claim is given back so the next duplicate looks the
                // record up again at once; if that fails too, the record
                // stays in progress and the takeover after its lease looks
                // it up again.
                config.count(crate::metrics::Event::StoreError);
                tracing::warn!(record_id = %lease.record_id, error = %err, "the Powertools outcome could not be copied into this record; it is replayed all the same, and the claim given back");
                config.count(
                    give_back("the Powertools outcome could not be copied")
                        .await
                        .event(),
                );
            }
            tracing::info!(record_id = %lease.record_id, "replayed the outcome Powertools stored for this key");
            Ok(Found::Completed(record_of(
                lease,
                Status::Completed,
                0,
                Some((stored, copy_expires_at_s)),
            )))
        }
    }
}

/// Is `existing`, the record of a [`Found::InProgress`] answered to
/// `request`, a Powertools record in progress? The cut-over answers one
/// with the claim it gave back, which carries `request`'s own owner token;
/// a record of this library's found in progress carries another (tokens are
/// fresh for every claim).
#[cfg(feature = "powertools")]
pub(crate) fn held_by_powertools(existing: &Record, request: &ClaimRequest) -> bool {
    existing.owner == request.owner
}

/// Without the `powertools` feature no record is Powertools'.
#[cfg(not(feature = "powertools"))]
pub(crate) fn held_by_powertools(
    _existing: &crate::record::Record,
    _request: &ClaimRequest,
) -> bool {
    false
}

/// While Powertools holds `key` in progress: until when, epoch
/// milliseconds (`None` once it completed, expired or was never there, or
/// the window closed: a claim then decides). One `GetItem`, for a wait on
/// a key Powertools holds, which then costs no claim and no give-back.
pub(crate) async fn powertools_holds_until(
    config: &IdempotencyConfig,
    key: Option<PowertoolsKey>,
    now_ms: u64,
) -> Result<Option<u64>, Error> {
    #[cfg(feature = "powertools")]
    {
        let (Some(records), Some(key)) = (config.powertools.as_deref(), key) else {
            return Ok(None);
        };
        if !records.open(now_ms) {
            return Ok(None);
        }
        Ok(match Box::pin(records.find(&key.key, now_ms)).await? {
            Some(PowertoolsRecord::InProgress { until_ms }) => Some(until_ms),
            Some(PowertoolsRecord::Completed { .. }) | None => None,
        })
    }
    #[cfg(not(feature = "powertools"))]
    {
        let _ = (config, key, now_ms);
        Ok(None)
    }
}

/// The `Idempotency-Key` header as Powertools' `headers."idempotency-key"`
/// selected it from the API Gateway event: its text as sent, quotes of the
/// structured-field form included (`"k1"` hashes as `"\"k1\""`, not as
/// `"k1"`). `None` for bytes that are not text, which no event carries.
#[cfg(all(feature = "powertools", feature = "http"))]
pub(crate) fn header_as_powertools_saw_it(value: &http::HeaderValue) -> Option<Value> {
    value
        .to_str()
        .ok()
        .map(|text| Value::String(text.to_owned()))
}

/// The request body as Powertools' `payload_validation_jmespath="body"`
/// selected it from the API Gateway event: `null` without a body, the text
/// as sent otherwise, which for an `isBase64Encoded` event is the base64
/// text (lambda_http hands the decoded bytes on as a binary body; standard
/// base64 with padding, as API Gateway writes it, gives the text back).
#[cfg(all(feature = "powertools", feature = "http"))]
pub(crate) fn body_as_powertools_saw_it(body: &lambda_http::Body) -> Value {
    use base64::Engine;
    match body {
        lambda_http::Body::Empty => Value::Null,
        lambda_http::Body::Text(text) => Value::String(text.clone()),
        lambda_http::Body::Binary(bytes) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        // A body kind added to lambda_http later: its bytes as text.
        other => Value::String(String::from_utf8_lossy(other.as_ref()).into_owned()),
    }
}

/// Whether `record` holds the `abandoned` problem the sweeper's `fail`
/// policy stores for a record stuck in progress.
#[cfg(feature = "powertools")]
fn abandoned(record: &Record) -> bool {
    record.status == Status::Completed
        && record
            .response
            .as_ref()
            .is_some_and(|r| r.is_problem(crate::problem::ABANDONED))
}

/// A duplicate of a record the sweeper failed, inside the window: the
/// attempt it abandoned may have ended before its lookup decided anything
/// (it died claiming or reading), so the sweeper's `abandoned` may stand
/// for a key Powertools completed. Its outcome is the key's true one and is
/// replayed (not copied: a completed record is never overwritten); one
/// Powertools still runs answers as in progress; otherwise, or for another
/// payload, the sweeper's answer stands. A lookup that fails fails the
/// request, as a claim's does: the key's outcome is unknown.
#[cfg(feature = "powertools")]
async fn over_abandoned(
    records: &crate::store::dynamodb::PowertoolsRecords,
    record: &Record,
    key: &PowertoolsKey,
    shape: Shape,
    now_ms: u64,
) -> Result<Found, Error> {
    let found = Box::pin(records.find(&key.key, now_ms)).await?;
    match found {
        Some(PowertoolsRecord::InProgress { until_ms }) => Ok(Found::InProgress {
            retry_after: std::time::Duration::from_millis(until_ms.saturating_sub(now_ms)),
            existing: Box::new(Record {
                status: Status::InProgress,
                lease_expires_at_ms: until_ms,
                response: None,
                ..record.clone()
            }),
        }),
        Some(PowertoolsRecord::Completed {
            data,
            expires_at_s,
            validation,
        }) => {
            if other_payload(records, key, validation.as_deref()).is_some() {
                return Ok(Found::Completed(record.clone()));
            }
            let stored = stored_response(&data, shape)?;
            tracing::info!(record_id = %record.id, "replayed the outcome Powertools stored for a key the sweeper had failed here");
            Ok(Found::Completed(Record {
                response: Some(stored),
                expires_at_s: expires_at_s.saturating_add(1),
                ..record.clone()
            }))
        }
        None => Ok(Found::Completed(record.clone())),
    }
}

/// The payload hash Powertools validated (`validation`), when it is not the
/// hash of this request's payload; `None` when they match or either is
/// absent (Powertools validated nothing, or this request is not validated).
#[cfg(feature = "powertools")]
fn other_payload<'a>(
    records: &crate::store::dynamodb::PowertoolsRecords,
    key: &PowertoolsKey,
    validation: Option<&'a str>,
) -> Option<&'a str> {
    let stored = validation?;
    let current = records.hash_of(key.payload.as_ref()?);
    (stored != current).then_some(stored)
}

/// This library's record for `lease` in `status`.
#[cfg(feature = "powertools")]
fn record_of(
    lease: &Lease,
    status: Status,
    lease_expires_at_ms: u64,
    completed: Option<(StoredResponse, u64)>,
) -> Record {
    let (response, expires_at_s) = match completed {
        Some((response, expires)) => (Some(response), expires),
        None => (None, 0),
    };
    Record {
        id: lease.record_id.clone(),
        status,
        fingerprint: lease.fingerprint.clone(),
        attempt: lease.attempt,
        owner: lease.owner.clone(),
        lease_expires_at_ms,
        expires_at_s,
        response,
        checkpoint: None,
    }
}

/// A Powertools result (`json.dumps` of what the handler returned) as a
/// stored response of `shape`.
#[cfg(feature = "powertools")]
fn stored_response(data: &str, shape: Shape) -> Result<StoredResponse, Error> {
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

#[cfg(all(test, feature = "powertools"))]
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
