//! Idempotency for event consumers: any async function

mod function;
mod layer;
#[cfg(feature = "sqs")]
mod sqs;

pub use self::function::{EventError, IdempotentFunction};
pub use self::layer::{IdempotentEvent, IdempotentEventLayer};
#[cfg(feature = "sqs")]
pub use self::sqs::SqsBatch;
