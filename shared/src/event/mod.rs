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
//! The key comes from the argument: by default its whole canonical JSON, or the
//! values at RFC 6901 JSON pointers ([`key_pointers`](IdempotentFunction::key_pointers)),
//! or a closure. Optional validation pointers make a duplicate whose payload
//! differs at those fields a distinct error ([`EventError::PayloadMismatch`]).
//!
//! ```
//! use lambda_idempotency::{IdempotentFunction, MemoryStore};
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let charge = IdempotentFunction::new(MemoryStore::new(), "charge").key_pointers(["/payment_id"]);
//! let payment = json!({"payment_id": "p1", "amount": 5});
//! let first: String = charge.call(payment.clone(), |p| async move {
//!     Ok::<_, std::io::Error>(format!("charged {}", p["amount"]))
//! }).await.unwrap();
//! let again: String = charge.call(payment, |_| async { Ok::<_, std::io::Error>("ran twice".to_owned()) }).await.unwrap();
//! assert_eq!(first, again); // the second closure never ran
//! # });
//! ```
//!
//! For a typed handler, [`IdempotentEventLayer`] wraps a
//! `Service<LambdaEvent<T>>` and registers each event's Lambda context for the
//! lease.

mod function;
mod layer;
#[cfg(feature = "sqs")]
mod sqs;

pub use self::function::{EventError, IdempotentFunction};
pub use self::layer::{IdempotentEvent, IdempotentEventLayer};
#[cfg(feature = "sqs")]
pub use self::sqs::SqsBatch;
