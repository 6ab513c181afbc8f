//! Idempotency for event consumers: any async function
//! ([`IdempotentFunction`]), typed `lambda_runtime` handlers
//! ([`IdempotentEventLayer`]) and, with the `sqs` feature, SQS batches
//! (`SqsBatch`).
//!
//! Lambda's asynchronous invocations and event sources deliver at least
//! once: each event runs once per key, its output is stored and replayed to
//! duplicates, and an outcome that could not be recorded fails the event so
//! the source delivers it again.
//!
//! For a typed handler, [`IdempotentEventLayer`] wraps a
//! `Service<LambdaEvent<T>>` and registers each event's Lambda context for the
//! lease.

#[cfg(any(
    feature = "sqs",
    feature = "kinesis",
    feature = "events-dynamodb-stream"
))]
mod batch;
#[cfg(feature = "events-dynamodb-stream")]
mod dynamodb_stream;
mod error;
mod function;
mod future;
#[cfg(feature = "kinesis")]
mod kinesis;
mod layer;
mod service;
#[cfg(feature = "sqs")]
mod sqs;

#[cfg(feature = "events-dynamodb-stream")]
pub use self::dynamodb_stream::DynamoDbStreamBatch;
pub use self::error::EventError;
pub use self::function::IdempotentFunction;
pub use self::future::ResponseFuture;
#[cfg(feature = "kinesis")]
pub use self::kinesis::KinesisBatch;
pub use self::layer::IdempotentEventLayer;
pub use self::service::IdempotentEvent;
#[cfg(feature = "sqs")]
pub use self::sqs::SqsBatch;
