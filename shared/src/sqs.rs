//! SQS batches with per-record idempotency and partial batch responses.
//!
//! Each record runs through an [`IdempotentFunction`]: a redelivered or
//! duplicated message replays instead of running again. Records whose handler
//! failed, that are still in progress elsewhere, or that could not be claimed
//! are returned in `batchItemFailures`, so SQS redelivers only those (the event
//! source mapping needs `FunctionResponseTypes: [ReportBatchItemFailures]`).
//!
//! Records run one after another, so a duplicate inside the same batch replays
//! the first one's output. On a FIFO queue the first failure also fails every
//! later record of the batch, keeping their order.
//!
//! ```
//! use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
//! use lambda_idempotency::{IdempotentFunction, MemoryStore, SqsBatch};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let batch = SqsBatch::new(IdempotentFunction::new(MemoryStore::new(), "consumer"));
//! let mut message = SqsMessage::default();
//! message.message_id = Some("m1".into());
//! message.body = Some("{}".into());
//! let mut event = SqsEvent::default();
//! event.records = vec![message];
//! let response = batch
//!     .process(event, |_msg, _ctx| async { Err::<(), _>("downstream down") })
//!     .await;
//! assert_eq!(response.batch_item_failures[0].item_identifier, "m1");
//! # });
//! ```

use std::future::Future;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::context::IdempotencyContext;
use crate::function::{EventError, IdempotentFunction};

/// Where a record's key comes from.
#[derive(Debug, Clone)]
enum SqsKey {
    MessageId,
    BodyPointer(String),
}

/// Processes SQS batches record by record through an [`IdempotentFunction`].
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
    pub fn key_body_pointer(mut self, pointer: impl Into<String>) -> Self {
        self.key = SqsKey::BodyPointer(pointer.into());
        self
    }

    /// Register the invocation's Lambda context for the leases.
    pub fn register_context(&mut self, context: &lambda_runtime::Context) {
        self.function.register_context(context);
    }

    /// Run `handler` once per record key and report the records to redeliver.
    pub async fn process<O, E, F, Fut>(&self, event: SqsEvent, handler: F) -> SqsBatchResponse
    where
        O: Serialize + DeserializeOwned,
        E: std::fmt::Display,
        F: Fn(SqsMessage, Option<IdempotencyContext>) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        let mut response = SqsBatchResponse::default();
        let mut fifo_failed = false;
        for message in event.records {
            let id = message.message_id.clone().unwrap_or_default();
            let fifo = message
                .event_source_arn
                .as_deref()
                .is_some_and(|arn| arn.ends_with(".fifo"));
            if fifo && fifo_failed {
                response.batch_item_failures.push(failure(id));
                continue;
            }
            let body: serde_json::Value = message
                .body
                .as_deref()
                .and_then(|b| serde_json::from_str(b).ok())
                .unwrap_or(serde_json::Value::Null);
            let key = match &self.key {
                SqsKey::MessageId => message.message_id.clone().filter(|m| !m.is_empty()),
                SqsKey::BodyPointer(pointer) => body.pointer(pointer).and_then(|v| match v {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Null => None,
                    other => Some(other.to_string()),
                }),
            };
            let fingerprint = self.function.fingerprint_of(&body);
            let result: Result<O, EventError<E>> = self
                .function
                .run_keyed(key, fingerprint, message, &handler)
                .await;
            if let Err(err) = result {
                tracing::warn!(message_id = %id, error_type = err.error_type(), error = %err, "SQS record failed; it will be redelivered");
                response.batch_item_failures.push(failure(id));
                fifo_failed = fifo;
            }
        }
        response
    }
}

fn failure(id: String) -> BatchItemFailure {
    let mut failure = BatchItemFailure::default();
    failure.item_identifier = id;
    failure
}
