//! The one error type of the crate.

use std::error::Error as StdError;
use std::fmt;

/// What went wrong, in categories a caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The idempotency key sent by the client is empty, too long or has bytes
    /// outside printable ASCII. The client must send a different key.
    InvalidKey,
    /// A write was rejected because this invocation no longer holds the record:
    /// its lease expired and a newer attempt took it over. Nothing was written.
    Fenced,
    /// A write was rejected because the record this invocation held is gone:
    /// an operator released it (`lambda-idempotency release --force`) or it
    /// expired. Nothing was written, so the outcome is not recorded: a
    /// duplicate runs again under a new claim.
    RecordGone,
    /// The store could not be reached, throttled us past the SDK's retries, or
    /// answered with a server error. Safe to retry later.
    StoreUnavailable,
    /// An item in the store could not be decoded as an idempotency record
    /// (written by something else, or by an incompatible version).
    CorruptRecord,
    /// A transaction of the completion and the handler's own writes was
    /// cancelled by one of those writes' conditions; nothing was written.
    TransactionCancelled,
    /// DynamoDB refused a transaction of the completion and the handler's own
    /// writes as invalid before running it (more than 100 items, two
    /// operations on one item, an item too large); nothing was written.
    TransactionRejected,
    /// An event lacks what processing or reporting it needs (an SQS record
    /// without a `messageId` cannot be named in a partial batch response).
    InvalidEvent,
    /// A setting is not valid (an unknown sweep policy, say).
    InvalidConfig,
    /// The process could not produce a random owner token.
    Randomness,
}

/// The one error type of the crate.
///
/// [`Error`] is opaque: match on [`Error::kind`] rather than on variants, so new
/// causes can be added without breaking callers.
///
/// ```
/// use lambda_idempotency::{ErrorKind, http::IdempotencyKey};
///
/// let err = IdempotencyKey::parse("").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidKey);
/// assert!(err.to_string().contains("empty"));
/// ```
///
/// The error type of this crate.
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl Into<Box<dyn StdError + Send + Sync + 'static>>,
    ) -> Self {
        Error {
            kind,
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Build a [`ErrorKind::StoreUnavailable`] error; for implementors of
    /// [`Store`](crate::Store) outside this crate.
    pub fn store_unavailable(
        message: impl Into<String>,
        source: impl Into<Box<dyn StdError + Send + Sync + 'static>>,
    ) -> Self {
        Self::with_source(ErrorKind::StoreUnavailable, message, source)
    }

    /// Build a [`ErrorKind::Fenced`] error; for implementors of
    /// [`Store`](crate::Store) outside this crate.
    pub fn fenced(record_id: &str, attempt: u64) -> Self {
        Self::new(
            ErrorKind::Fenced,
            format!(
                "record {record_id} is no longer held by attempt {attempt}: its lease expired \
                 and a newer attempt took it over, so this write was rejected"
            ),
        )
    }

    /// Build a [`ErrorKind::RecordGone`] error; for implementors of
    /// [`Store`](crate::Store) outside this crate.
    pub fn record_gone(record_id: &str, attempt: u64) -> Self {
        Self::new(
            ErrorKind::RecordGone,
            format!(
                "record {record_id} is gone (released by an operator, or expired) while attempt                  {attempt} still ran, so this write was not stored; a duplicate of the request                  runs again"
            ),
        )
    }

    /// The category of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// True when the write was rejected because a newer attempt holds the record.
    pub fn is_fenced(&self) -> bool {
        self.kind == ErrorKind::Fenced
    }

    /// True when retrying the same operation later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::StoreUnavailable | ErrorKind::Randomness
        )
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The message already names the cause; `source()` carries the chain.
        f.write_str(&self.message)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}
