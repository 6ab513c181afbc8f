//! [`SqsBatch`]: SQS batches, each record once, with partial batch responses.

use std::future::Future;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::batch::{pointer_key, record_key};
use super::error::EventError;
use super::function::{IdempotentFunction, Key};
use crate::context::IdempotencyContext;
use crate::error::{Error, ErrorKind};
use crate::json::{check_pointer, CanonicalJson};

/// A key made from a whole message ([`SqsBatch::key_fn`]).
type MessageKeyFn = dyn Fn(&SqsMessage) -> Option<String> + Send + Sync;

/// Where a record's key comes from.
#[derive(Clone)]
enum SqsKey {
    MessageId,
    BodyPointer(String),
    Attribute(String),
    DeduplicationId,
    Fn(std::sync::Arc<MessageKeyFn>),
}

impl std::fmt::Debug for SqsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SqsKey::MessageId => f.write_str("MessageId"),
            SqsKey::BodyPointer(p) => f.debug_tuple("BodyPointer").field(p).finish(),
            SqsKey::Attribute(a) => f.debug_tuple("Attribute").field(a).finish(),
            SqsKey::DeduplicationId => f.write_str("DeduplicationId"),
            SqsKey::Fn(_) => f.write_str("Fn(..)"),
        }
    }
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
/// use lambda_idempotency::{IdempotentFunction, MemoryStore, event::SqsBatch};
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

    /// Key = the message attribute `name` (set by the producer, for example
    /// an order id). A `Number` attribute is another key than a `String` one
    /// with the same text (`5` is not `"5"`); a `Binary` one is keyed by its
    /// bytes. A record without it has no key: it fails (and is redelivered)
    /// unless the function passes records without a key through.
    pub fn key_message_attribute(mut self, name: impl Into<String>) -> Self {
        self.key = SqsKey::Attribute(name.into());
        self
    }

    /// Key = the message's `MessageDeduplicationId` (FIFO queues: the id SQS
    /// itself deduplicates on for five minutes; this keeps it for the
    /// record's life). A message from a standard queue has none: no key.
    pub fn key_deduplication_id(mut self) -> Self {
        self.key = SqsKey::DeduplicationId;
        self
    }

    /// Key = what `f` makes of the whole message (`None`: no key).
    pub fn key_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&SqsMessage) -> Option<String> + Send + Sync + 'static,
    {
        self.key = SqsKey::Fn(std::sync::Arc::new(f));
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
    #[must_use = "the response names the messages that failed: dropped, SQS is told the whole batch succeeded and deletes them"]
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
        // One metrics line for the whole batch (crate::metrics).
        let records = async move {
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
                    let body = message.body.as_deref();
                    let doc = CanonicalJson::parse(body.unwrap_or_default());
                    let reads_body =
                        matches!(self.key, SqsKey::BodyPointer(_)) || self.function.validates();
                    let key = record_key(body, doc.as_ref(), reads_body, |doc| match &self.key {
                        SqsKey::MessageId => id.clone().map(Key::text),
                        SqsKey::BodyPointer(pointer) => doc.and_then(|d| pointer_key(d, pointer)),
                        SqsKey::Attribute(name) => attribute_key(&message, name),
                        SqsKey::DeduplicationId => message
                            .attributes
                            .get("MessageDeduplicationId")
                            .filter(|d| !d.is_empty())
                            .cloned()
                            .map(Key::text),
                        SqsKey::Fn(f) => f(&message).map(Key::text),
                    });
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
        };
        crate::metrics::gathered(self.function.config().metrics.as_ref(), records).await
    }
}

/// The key of message attribute `name`: a string as it is, a number as JSON
/// (so `5` is not `"5"`), binary bytes as a JSON object of their hex (apart
/// from both), an absent or empty attribute as no key.
fn attribute_key(message: &SqsMessage, name: &str) -> Option<Key> {
    let attribute = message.message_attributes.get(name)?;
    let kind = attribute.data_type.as_deref().unwrap_or("String");
    // Custom types extend the base type after a dot (`Number.int`).
    let base = kind.split('.').next().unwrap_or(kind);
    match base {
        "Binary" => attribute
            .binary_value
            .as_ref()
            .filter(|b| !b.is_empty())
            .map(|b| Key::json(format!("{{\"binary\":\"{}\"}}", crate::hash::hex(b)))),
        "Number" => attribute
            .string_value
            .clone()
            .filter(|v| !v.is_empty())
            .map(|v| Key::json(format!("{{\"number\":\"{v}\"}}"))),
        _ => attribute
            .string_value
            .clone()
            .filter(|v| !v.is_empty())
            .map(Key::text),
    }
}

fn failure(id: String) -> BatchItemFailure {
    let mut failure = BatchItemFailure::default();
    failure.item_identifier = id;
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::event::sqs::SqsMessageAttribute;

    fn with(data_type: &str, text: Option<&str>, bytes: Option<&[u8]>) -> SqsMessage {
        let mut attribute = SqsMessageAttribute::default();
        attribute.data_type = Some(data_type.into());
        attribute.string_value = text.map(str::to_owned);
        attribute.binary_value = bytes.map(|b| {
            let mut data = aws_lambda_events::encodings::Base64Data::default();
            *data = b.to_vec();
            data
        });
        let mut message = SqsMessage::default();
        message.message_attributes.insert("k".into(), attribute);
        message
    }

    #[test]
    fn attribute_keys_of_different_types_never_collide() {
        let string = attribute_key(&with("String", Some("5"), None), "k").unwrap();
        let number = attribute_key(&with("Number", Some("5"), None), "k").unwrap();
        let custom = attribute_key(&with("Number.int", Some("5"), None), "k").unwrap();
        let binary = attribute_key(&with("Binary", None, Some(b"5")), "k").unwrap();
        assert_ne!(string, number);
        assert_eq!(number, custom, "a custom type keeps its base type");
        assert_ne!(binary, string);
        assert_ne!(binary, number);
        assert!(attribute_key(&with("String", Some(""), None), "k").is_none());
        assert!(attribute_key(&with("String", Some("5"), None), "other").is_none());
    }
}
