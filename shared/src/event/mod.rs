//! Idempotency for event consumers: any async function

#[cfg(any(
    feature = "sqs",
    feature = "kinesis",
    feature = "dynamodb-stream-events"
))]
mod batch;
#[cfg(feature = "dynamodb-stream-events")]
mod dynamodb_stream;
mod error;
mod function;
#[cfg(feature = "kinesis")]
mod kinesis;
mod layer;
#[cfg(feature = "sqs")]
mod sqs;

#[cfg(feature = "dynamodb-stream-events")]
pub use self::dynamodb_stream::DynamoDbStreamBatch;
pub use self::error::EventError;
pub use self::function::IdempotentFunction;
#[cfg(feature = "kinesis")]
pub use self::kinesis::KinesisBatch;
pub use self::layer::{IdempotentEvent, IdempotentEventLayer};
#[cfg(feature = "sqs")]
pub use self::sqs::SqsBatch;
