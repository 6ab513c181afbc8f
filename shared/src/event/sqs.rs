//! [`SqsBatch`]: SQS batches, each record once, with partial batch responses.

use std::future::Future;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::function::{EventError, IdempotentFunction, Key};
use crate::context::IdempotencyContext;
use crate::error::{Error, ErrorKind};
use crate::fingerprint::{check_pointer, CanonicalJson};

/// Where a record's key comes from.
#[derive(Debug, Clone)]
enum SqsKey {
    MessageId,
    BodyPointer(String),
}

/// Processes SQS batches record by record through an [`IdempotentFunction`].
///
/// Each record runs through an [`IdempotentFunction`]: a redelivered or
/// duplicated message replays instead of running again. Records whose handler
/// failed, that are still in progress elsewhere, or that could not be claimed
/// are returned in `batchItemFailures`, so SQS redelivers only those (the event
/// source mapping needs `FunctionResponseTypes: [ReportBatchItemFailures]`).
///
/// Records run one after another, so a duplicate inside the same batch replays
/// the first one's output. On a FIFO queue the first failure also fails every
/// later record of the batch, keeping their order.
///
/// ```
/// use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
/// use lambda_idempotency::{IdempotentFunction, MemoryStore, SqsBatch};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let batch = SqsBatch::new(IdempotentFunction::new(MemoryStore::new(), "consumer"));
/// let mut message = SqsMessage::default();
/// message.message_id = Some("m1".into());
/// message.body = Some("{}".into());
/// let mut event = SqsEvent::default();
/// event.records = vec![message];
/// let response = batch
///     .process(event, |_msg, _ctx| async { Err::<(), _>("downstream down") })
///     .await
///     .expect("every record has a messageId");
/// assert_eq!(response.batch_item_failures[0].item_identifier, "m1");
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct SqsBatch {
    function: IdempotentFunction,
    key: SqsKey,
}

impl SqsBatch {
    /// Key = the record's `messageId` (stable across SQS redeliveries).
    /// `function`'s validation pointers apply to the JSON body.
    pub fn new(function: IdempotentFunction) -> Self {
        SqsBatch {
            function,
            key: SqsKey::MessageId,
        }
    }

    /// Key = the value at this JSON pointer of the record's JSON body (for
    /// producer-side ids, so two messages carrying the same event dedupe).
    ///
    /// # Panics
    ///
    /// When `pointer` is not an RFC 6901 JSON pointer (`"event_id"` for
    /// `"/event_id"`): it would match nothing. A configuration error, found
    /// at start-up.
    pub fn key_body_pointer(mut self, pointer: impl Into<String>) -> Self {
        let pointer = pointer.into();
        if let Err(e) = check_pointer(&pointer) {
            panic!("SqsBatch::key_body_pointer: {e}");
        }
        self.key = SqsKey::BodyPointer(pointer);
        self
    }

    /// Register the invocation's Lambda context for the leases.
    pub fn register_context(&mut self, context: &lambda_runtime::Context) {
        self.function.register_context(context);
    }

    /// Run `handler` once per record key and report the records to redeliver.
    ///
    /// # Errors
    ///
    /// A failed record that has no `messageId` cannot be named in the partial
    /// batch response; `process` then stops and returns an
    /// [`ErrorKind::InvalidEvent`] error: fail the invocation with it, so SQS
    /// delivers the whole batch again (the records that succeeded replay).
    pub async fn process<O, E, F, Fut>(
        &self,
        event: SqsEvent,
        handler: F,
    ) -> Result<SqsBatchResponse, Error>
    where
        O: Serialize + DeserializeOwned,
        E: std::fmt::Display,
        F: Fn(SqsMessage, Option<IdempotencyContext>) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        let mut response = SqsBatchResponse::default();
        let mut fifo_failed = false;
        for message in event.records {
            let id = message.message_id.clone().filter(|m| !m.is_empty());
            let fifo = message
                .event_source_arn
                .as_deref()
                .is_some_and(|arn| arn.ends_with(".fifo"));
            let failed = if fifo && fifo_failed {
                true
            } else {
                // Keys and validated fields are read from the body's text,
                // canonicalised once, so numbers keep every digit.
                let doc = CanonicalJson::parse(message.body.as_deref().unwrap_or_default());
                let key = match &self.key {
                    SqsKey::MessageId => id.clone().map(Key::text),
                    SqsKey::BodyPointer(pointer) => doc.as_ref().and_then(|d| body_key(d, pointer)),
                };
                let fingerprint = self.function.fingerprint_of_canonical(doc.as_ref());
                let result: Result<O, EventError<E>> = self
                    .function
                    .run_keyed(key, fingerprint, message, &handler)
                    .await;
                match result {
                    Ok(_) => false,
                    Err(err) => {
                        tracing::warn!(message_id = ?id, error_type = err.error_type(), error = %err, "SQS record failed; it will be redelivered");
                        fifo_failed = fifo;
                        true
                    }
                }
            };
            if failed {
                let Some(id) = id else {
                    return Err(Error::new(
                        ErrorKind::InvalidEvent,
                        "an SQS record without a messageId failed, and a partial batch response \
                         cannot name it; fail the invocation so SQS delivers the whole batch again \
                         (records that succeeded replay their outputs)",
                    ));
                };
                response.batch_item_failures.push(failure(id));
            }
        }
        Ok(response)
    }
}

/// The key at `pointer` of a message body: a string as it is, another value
/// as its canonical JSON (kept apart from strings: `5` is not `"5"`; numbers
/// exact), null, absent or a body that is not JSON as no key.
fn body_key(body: &CanonicalJson, pointer: &str) -> Option<Key> {
    match body.at(pointer)? {
        b"null" => None,
        value @ [b'"', ..] => serde_json::from_slice::<String>(value).ok().map(Key::text),
        value => String::from_utf8(value.to_vec()).ok().map(Key::json),
    }
}

fn failure(id: String) -> BatchItemFailure {
    let mut failure = BatchItemFailure::default();
    failure.item_identifier = id;
    failure
}
