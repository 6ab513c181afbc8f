//! What the batch processors share: a key read at a JSON pointer of a
//! record's payload, and (streams) running a shard's records in order up to
//! the first failure.

use super::function::Key;
use crate::json::CanonicalJson;

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

#[cfg(any(feature = "kinesis", feature = "dynamodb-stream-events"))]
pub(super) use self::stream::first_failure;

#[cfg(any(feature = "kinesis", feature = "dynamodb-stream-events"))]
mod stream {
    use std::future::Future;

    use serde::de::DeserializeOwned;
    use serde::Serialize;

    use super::super::error::EventError;
    use super::super::function::{IdempotentFunction, Key};
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
    /// (abandoned and failed by the sweeper, no key, a stored output gone
    /// from S3): logged and counted
    /// (`StreamRecordSkipped`) rather than stalling the shard for a day. A record that failed without a
    /// sequence number cannot be named: the whole invocation fails with an
    /// [`ErrorKind::InvalidEvent`] error, so Lambda retries the batch.
    ///
    /// `source` names the stream in logs and errors; `prepare` gives a
    /// record's sequence number, key and fingerprint.
    pub(in crate::event) async fn first_failure<R, O, E, F, Fut>(
        function: &IdempotentFunction,
        source: &str,
        records: Vec<R>,
        prepare: impl Fn(&R) -> (Option<String>, Option<Key>, String),
        handler: &F,
    ) -> Result<Option<String>, Error>
    where
        O: Serialize + DeserializeOwned,
        E: std::fmt::Display,
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
                Err(err @ (EventError::Abandoned { .. } | EventError::KeyMissing { .. })) => {
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
#[cfg(any(feature = "kinesis", feature = "dynamodb-stream-events"))]
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
