//! What the batch processors share: a key read at a JSON pointer of a
//! record's payload, and (streams) running a shard's records in order up to
//! the first failure.

use super::function::Key;
#[cfg(any(feature = "sqs", feature = "kinesis"))]
use super::function::TooDeep;
use crate::json::CanonicalJson;

/// `Some` when `payload`, which did not parse as JSON, was refused for
/// nesting deeper than JSON is read rather than for not being JSON: its key
/// and validated fields cannot be read, which is not the same as having
/// none.
#[cfg(any(feature = "sqs", feature = "kinesis"))]
pub(super) fn too_deep(payload: &[u8]) -> Option<TooDeep> {
    let depth = crate::json::nesting_depth(payload);
    let limit = crate::json::MAX_DEPTH;
    (depth > limit).then_some(TooDeep { depth, limit })
}

/// A record's key as `key` makes it from the record's payload, `doc` its
/// canonical JSON (`None`: the `payload` text is not JSON); but when the
/// payload must be read (`reads_payload`: the key or validated fields are
/// in it) and was refused for its depth, [`TooDeep`].
#[cfg(any(feature = "sqs", feature = "kinesis"))]
pub(super) fn record_key(
    payload: Option<&str>,
    doc: Option<&CanonicalJson>,
    reads_payload: bool,
    key: impl FnOnce(Option<&CanonicalJson>) -> Option<Key>,
) -> Result<Option<Key>, TooDeep> {
    if doc.is_none() && reads_payload {
        if let Some(too_deep) = payload.and_then(|p| too_deep(p.as_bytes())) {
            return Err(too_deep);
        }
    }
    Ok(key(doc))
}

/// The key at `pointer` of a record's JSON payload: a string as it is,
/// another value as its canonical JSON (kept apart from strings: `5` is not
/// `"5"`; numbers exact), null, an empty string, absent or a payload that is
/// not JSON as no key.
#[cfg_attr(not(any(feature = "sqs", feature = "kinesis")), allow(dead_code))]
pub(super) fn pointer_key(payload: &CanonicalJson, pointer: &str) -> Option<Key> {
    match payload.at(pointer)? {
        b"null" => None,
        value @ [b'"', ..] => text_key(serde_json::from_slice::<String>(value).ok()),
        value => String::from_utf8(value.to_vec()).ok().map(Key::json),
    }
}

/// A text key; an empty one is no key (as
/// [`IdempotentFunction`](super::IdempotentFunction)'s own key sources).
pub(super) fn text_key(value: Option<String>) -> Option<Key> {
    value.filter(|v| !v.is_empty()).map(Key::text)
}

#[cfg(any(feature = "kinesis", feature = "events-dynamodb-stream"))]
pub(super) use self::stream::first_failure;

#[cfg(any(feature = "kinesis", feature = "events-dynamodb-stream"))]
mod stream {
    use std::future::Future;

    use serde::de::DeserializeOwned;
    use serde::Serialize;

    use super::super::error::EventError;
    use super::super::function::{IdempotentFunction, Key, TooDeep};
    use crate::context::IdempotencyContext;
    use crate::error::{Error, ErrorKind};

    /// Run a stream batch's records through `function` in order and return
    /// the sequence number of the first one that failed (`None`: all
    /// succeeded), without running the records after it.
    ///
    /// Why stop there: Lambda checkpoints a shard at the lowest sequence
    /// number a partial batch response names and delivers every record from
    /// there again, so the records after a failure come back anyway. Running
    /// them now would apply their effects before the failed record's, out of
    /// the shard's order; their retry then replays instead of running in
    /// order. Reporting only the first failure names exactly the checkpoint.
    ///
    /// A duplicate of a completed record counts as processed: its replay, or
    /// a stored output that is too large to keep or no longer fits the
    /// output type (the batch discards outputs; failing it would block the
    /// shard on a record that already ran). So does a record whose outcome
    /// no redelivery can change before its idempotency record expires
    /// (abandoned and failed by the sweeper, no key, a payload nested too
    /// deep to read its key, a stored output gone from S3): logged and counted
    /// (`StreamRecordSkipped`) rather than stalling the shard for a day. A record that failed without a
    /// sequence number cannot be named: the whole invocation fails with an
    /// [`ErrorKind::InvalidEvent`] error, so Lambda retries the batch.
    ///
    /// `source` names the stream in logs and errors; `prepare` gives a
    /// record's sequence number, key (or why its payload could not be read)
    /// and fingerprint.
    pub(in crate::event) async fn first_failure<R, O, E, F, Fut>(
        function: &IdempotentFunction,
        source: &str,
        records: Vec<R>,
        prepare: impl Fn(&R) -> (Option<String>, Result<Option<Key>, TooDeep>, String),
        handler: &F,
    ) -> Result<Option<String>, Error>
    where
        O: Serialize + DeserializeOwned,
        E: std::fmt::Display,
        R: Serialize,
        F: Fn(R, Option<IdempotencyContext>) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        let total = records.len();
        for (index, record) in records.into_iter().enumerate() {
            let (sequence_number, key, fingerprint) = prepare(&record);
            let result: Result<O, EventError<E>> =
                function.run_keyed(key, fingerprint, record, handler).await;
            let err = match result {
                Ok(_) => continue,
                Err(
                    err @ (EventError::OutputTooLarge { .. }
                    | EventError::OutputNotStored { .. }
                    | EventError::CorruptOutput { .. }),
                ) => {
                    tracing::warn!(source, sequence_number = ?sequence_number, error = %err, "duplicate of a record that already completed; its output is not replayed, the record counts as processed");
                    continue;
                }
                Err(
                    err @ (EventError::Abandoned { .. }
                    | EventError::KeyMissing { .. }
                    | EventError::PayloadTooDeep { .. }),
                ) => {
                    super::skipped(function, source, sequence_number.as_deref(), &err);
                    continue;
                }
                Err(EventError::Store(e)) if e.kind() == ErrorKind::CorruptRecord => {
                    let err = EventError::<E>::Store(e);
                    super::skipped(function, source, sequence_number.as_deref(), &err);
                    continue;
                }
                Err(err) => err,
            };
            let not_run = total - index - 1;
            tracing::warn!(source, sequence_number = ?sequence_number, error_type = err.error_type(), error = %err, not_run, "stream record failed; Lambda retries the shard from it, the records after it were not run");
            return match sequence_number {
                Some(sequence_number) => Ok(Some(sequence_number)),
                None => Err(Error::new(
                    ErrorKind::InvalidEvent,
                    format!(
                        "a {source} record without a sequence number failed ({err}), and a \
                         partial batch response cannot name it; fail the invocation so Lambda \
                         retries the whole batch (records that succeeded replay their outputs)"
                    ),
                )),
            };
        }
        Ok(None)
    }
}

/// A stream record whose outcome no redelivery can change before its
/// idempotency record expires (a day by default): retrying it would hold the
/// whole shard that long, so it is logged (with everything needed to replay
/// it by hand), counted (`StreamRecordSkipped`, to alarm on) and treated as
/// processed. Transient failures (the store unreachable, a lost completion,
/// the handler's own error) still stop the batch at the record.
#[cfg(any(feature = "kinesis", feature = "events-dynamodb-stream"))]
fn skipped<E: std::fmt::Display>(
    function: &super::function::IdempotentFunction,
    source: &str,
    sequence_number: Option<&str>,
    err: &super::error::EventError<E>,
) {
    function.count(crate::metrics::Event::StreamRecordSkipped);
    tracing::error!(source, sequence_number = ?sequence_number, error_type = err.error_type(), error = %err, "stream record skipped: a redelivery cannot change its outcome before its idempotency record expires, so the shard goes on");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(payload: &str) -> Option<Key> {
        pointer_key(&CanonicalJson::parse(payload).expect("JSON"), "/id")
    }

    #[cfg(any(feature = "sqs", feature = "kinesis"))]
    #[test]
    fn a_payload_too_deep_to_read_is_told_from_one_without_a_key_and_named() {
        let nested = crate::json::nested_for_tests;
        let limit = crate::json::MAX_DEPTH;
        let read = |text: &str, reads_payload: bool| {
            let doc = CanonicalJson::parse(text);
            record_key(Some(text), doc.as_ref(), reads_payload, |doc| {
                doc.and_then(|d| pointer_key(d, "/id"))
            })
        };
        assert_eq!(read(&nested(limit), true), Ok(Some(Key::text("k1".into()))));
        let too_deep = read(&nested(limit + 1), true).unwrap_err();
        assert_eq!(
            too_deep,
            TooDeep {
                depth: limit + 1,
                limit
            }
        );
        // A payload that is not read (the key is elsewhere, nothing
        // validated) is the handler's business; one that is not JSON has no key.
        assert_eq!(read(&nested(limit + 1), false), Ok(None));
        assert_eq!(read("id=k1", true), Ok(None));

        let err = super::super::error::EventError::<String>::PayloadTooDeep {
            function: "consumer".into(),
            depth: too_deep.depth,
            limit: too_deep.limit,
        };
        assert_eq!(err.error_type(), "Idempotency.PayloadTooDeep");
        let message = err.to_string();
        for part in [
            "`consumer`".to_owned(),
            format!("nests {} levels", limit + 1),
            format!("at most {limit} levels"),
            "send it less deeply nested".to_owned(),
        ] {
            assert!(message.contains(&part), "{part:?} in {message}");
        }
    }

    #[test]
    fn pointer_keys_keep_types_apart_and_empty_or_null_is_no_key() {
        assert_eq!(key(r#"{"id":"5"}"#), Some(Key::text("5".into())));
        assert_eq!(key(r#"{"id":5}"#), Some(Key::json("5".into())));
        assert_ne!(key(r#"{"id":5}"#), key(r#"{"id":"5"}"#));
        assert_eq!(
            key(r#"{"id":{"b":1,"a":2}}"#),
            key(r#"{"id":{"a":2,"b":1}}"#)
        );
        assert_eq!(key(r#"{"id":""}"#), None);
        assert_eq!(key(r#"{"id":null}"#), None);
        assert_eq!(key(r#"{"other":1}"#), None);
    }
}
