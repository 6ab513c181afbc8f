//! [`EventError`]: why an idempotent function or event did not produce an
//! output, and what Lambda is told about it.

use std::fmt;
use std::time::Duration;

use lambda_runtime::Diagnostic;

use crate::error::Error;
use crate::record::Record;

/// Why an idempotent function or event did not produce an output.
#[derive(Debug)]
#[non_exhaustive]
pub enum EventError<E> {
    /// A call with this key is still running; retry after `retry_after`.
    InProgress {
        /// The record id (a hash; safe to log).
        record_id: String,
        /// Until the running call's lease ends.
        retry_after: Duration,
        /// The record holding the key, as the claim found it (its status,
        /// attempt, lease and expiry); `None` only when built by hand.
        existing: Option<Box<Record>>,
    },
    /// The key was first used with a payload that differs at the validation pointers.
    PayloadMismatch {
        /// The record id.
        record_id: String,
        /// The record of the key's first use, as the claim found it: its
        /// status, expiry and, once completed, its stored output (the JSON
        /// in `response`); `None` only when built by hand.
        existing: Option<Box<Record>>,
    },
    /// The key is missing and missing keys are not passed through.
    KeyMissing {
        /// The function's name.
        function: String,
    },
    /// The payload (an SQS body, Kinesis data) nests arrays and objects
    /// deeper than JSON is read (`limit` levels, serde_json's), so its key
    /// or validated fields cannot be read. Nothing ran, not even with
    /// [`pass_through_missing_key`](super::IdempotentFunction::pass_through_missing_key):
    /// the payload may hold a key, it only cannot be read.
    PayloadTooDeep {
        /// The function's name.
        function: String,
        /// How deep the payload nests.
        depth: usize,
        /// The deepest nesting read.
        limit: usize,
    },
    /// The first call never finished and the sweeper failed the key.
    Abandoned {
        /// The record id.
        record_id: String,
    },
    /// The first call's output was too large to store; it is not run again.
    OutputTooLarge {
        /// The record id.
        record_id: String,
    },
    /// The first call ran but its output could not be serialised to store
    /// it; it is not run again.
    OutputNotStored {
        /// The record id.
        record_id: String,
    },
    /// The stored output does not deserialise into the output type (the type
    /// changed since it was stored).
    CorruptOutput {
        /// The record id.
        record_id: String,
        /// What serde said.
        source: serde_json::Error,
    },
    /// The function ran but its outcome was not recorded, so the event must
    /// be delivered again. The source says why: the deferred writes were
    /// cancelled or refused (nothing committed, the key was released); a
    /// newer attempt took over before the completion (with or without
    /// deferred writes: its outcome is the one that replays); or the store did
    /// not answer (the outcome is unknown, the key frees when its lease ends
    /// and the retry replays or runs again).
    CompletionFailed {
        /// The record id.
        record_id: String,
        /// What the store or serde said.
        source: Error,
    },
    /// The argument could not be serialised to JSON (to fingerprint it);
    /// nothing ran. (An output that cannot be serialised completes the
    /// record with a marker instead: [`OutputNotStored`](EventError::OutputNotStored).)
    Serialization {
        /// What could not be serialised, and what happened because of it.
        what: String,
        /// What serde said.
        source: serde_json::Error,
    },
    /// The operating system gave no randomness for the owner token; nothing ran.
    Randomness(Error),
    /// The store failed; nothing ran.
    Store(Error),
    /// The wrapped function failed; the key was released.
    Handler(E),
}

impl<E: fmt::Display> fmt::Display for EventError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventError::InProgress {
                record_id,
                retry_after,
                ..
            } => write!(
                f,
                "idempotency record {record_id} is in progress in another invocation; retry in {}s",
                retry_after.as_secs().max(1)
            ),
            EventError::PayloadMismatch { record_id, .. } => write!(
                f,
                "idempotency record {record_id} was created by a payload that differs at the validation fields"
            ),
            EventError::KeyMissing { function } => write!(
                f,
                "no idempotency key found in the payload of `{function}`; check the key pointers or enable pass-through"
            ),
            EventError::PayloadTooDeep {
                function,
                depth,
                limit,
            } => write!(
                f,
                "the payload of `{function}` nests {depth} levels of arrays and objects; its \
                 idempotency key and validated fields are read only from JSON nested at most \
                 {limit} levels deep, so it was not run: have the producer send it less deeply \
                 nested, or key the records by an id outside the payload (the messageId or \
                 eventID)"
            ),
            EventError::Abandoned { record_id } => write!(
                f,
                "idempotency record {record_id} was abandoned by its first call and failed by the sweeper"
            ),
            EventError::OutputTooLarge { record_id } => write!(
                f,
                "the output of idempotency record {record_id} was too large to store; the call was not run again"
            ),
            EventError::OutputNotStored { record_id } => write!(
                f,
                "the output of idempotency record {record_id} could not be serialised to store it; the call was not run again"
            ),
            EventError::CorruptOutput { record_id, source } => write!(
                f,
                "the stored output of idempotency record {record_id} does not fit the output type: {source}"
            ),
            EventError::CompletionFailed { record_id, source } => write!(
                f,
                "the outcome of idempotency record {record_id} was not recorded, so the event must be retried: {source}"
            ),
            EventError::Serialization { what, source } => {
                write!(f, "cannot serialise {what}: {source}")
            }
            EventError::Randomness(e) => write!(f, "{e}; nothing ran"),
            EventError::Store(e) => write!(f, "idempotency store failed, nothing ran: {e}"),
            EventError::Handler(e) => e.fmt(f),
        }
    }
}

impl<E: fmt::Display + fmt::Debug> std::error::Error for EventError<E> {}

impl<E> EventError<E> {
    /// The record that decided an [`InProgress`](EventError::InProgress) or
    /// [`PayloadMismatch`](EventError::PayloadMismatch) error (its status,
    /// expiry and, for a completed one, its stored output), for a caller
    /// that answers from it.
    pub fn existing_record(&self) -> Option<&Record> {
        match self {
            EventError::InProgress { existing, .. }
            | EventError::PayloadMismatch { existing, .. } => existing.as_deref(),
            _ => None,
        }
    }

    /// The stable error type reported to Lambda (and in its logs).
    pub fn error_type(&self) -> &'static str {
        match self {
            EventError::InProgress { .. } => "Idempotency.InProgress",
            EventError::PayloadMismatch { .. } => "Idempotency.PayloadMismatch",
            EventError::KeyMissing { .. } => "Idempotency.KeyMissing",
            EventError::PayloadTooDeep { .. } => "Idempotency.PayloadTooDeep",
            EventError::Abandoned { .. } => "Idempotency.Abandoned",
            EventError::OutputTooLarge { .. } => "Idempotency.OutputTooLarge",
            EventError::OutputNotStored { .. } => "Idempotency.OutputNotStored",
            EventError::CorruptOutput { .. } => "Idempotency.CorruptOutput",
            EventError::CompletionFailed { .. } => "Idempotency.CompletionFailed",
            EventError::Serialization { .. } => "Idempotency.Serialization",
            EventError::Randomness(_) => "Idempotency.Randomness",
            EventError::Store(_) => "Idempotency.StoreUnavailable",
            EventError::Handler(_) => "Handler",
        }
    }
}

impl<E: Into<Diagnostic> + fmt::Display> From<EventError<E>> for Diagnostic {
    fn from(err: EventError<E>) -> Diagnostic {
        match err {
            EventError::Handler(e) => e.into(),
            other => Diagnostic {
                error_type: other.error_type().to_owned(),
                error_message: other.to_string(),
            },
        }
    }
}
