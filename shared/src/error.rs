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

    // The constructors below are public so that a store outside this crate
    // reports what went wrong in the same kinds the engines of this crate
    // do: the claim lifecycle decides on the kind (a fence is not an outage).

    /// A [`ErrorKind::StoreUnavailable`] error: the store could not be
    /// reached, throttled past its retries, or answered with a server error.
    /// Retryable. `message` says what failed and what to do; `source` is the
    /// engine's error.
    pub fn store_unavailable(
        message: impl Into<String>,
        source: impl Into<Box<dyn StdError + Send + Sync + 'static>>,
    ) -> Self {
        Self::with_source(ErrorKind::StoreUnavailable, message, source)
    }

    /// A [`ErrorKind::Fenced`] error: a completion, release or recovery point
    /// of attempt `attempt` of record `record_id` found the record held by
    /// another attempt or owner (rule 2 of [`Store`](crate::Store)), and
    /// wrote nothing.
    pub fn fenced(record_id: &str, attempt: u64) -> Self {
        Self::new(
            ErrorKind::Fenced,
            format!(
                "record {record_id} is no longer held by attempt {attempt}: its lease expired \
                 and a newer attempt took it over, so this write was rejected"
            ),
        )
    }

    /// A [`ErrorKind::RecordGone`] error: a completion by attempt `attempt`
    /// of record `record_id` found no record at all (released by an
    /// operator, or expired), and wrote nothing (rule 2 of
    /// [`Store`](crate::Store)).
    pub fn record_gone(record_id: &str, attempt: u64) -> Self {
        Self::new(
            ErrorKind::RecordGone,
            format!(
                "record {record_id} is gone (released by an operator, or expired) while attempt \
                 {attempt} still ran, so this write was not stored; a duplicate of the request \
                 runs again"
            ),
        )
    }

    /// A [`ErrorKind::CorruptRecord`] error: what the store holds for a
    /// record cannot be decoded as one. `message` names the record and what
    /// was wrong with it.
    ///
    /// ```
    /// use lambda_idempotency::{Error, ErrorKind};
    ///
    /// let err = Error::corrupt_record("record r1: field `attempt` is \"two\", not a number");
    /// assert_eq!(err.kind(), ErrorKind::CorruptRecord);
    /// assert!(!err.is_retryable());
    /// assert!(err.to_string().contains("attempt"));
    /// ```
    pub fn corrupt_record(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::CorruptRecord, message)
    }

    /// A [`ErrorKind::InvalidConfig`] error: the store is set up in a way it
    /// cannot work with (a missing table, a bad URL, deferred writes handed
    /// to a store without transactions). `message` says what to change.
    pub fn invalid_config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidConfig, message)
    }

    /// A [`ErrorKind::TransactionCancelled`] error: a transaction of a
    /// completion or recovery point with the handler's deferred writes was
    /// cancelled by one of those writes' conditions; nothing was written.
    pub fn transaction_cancelled(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::TransactionCancelled, message)
    }

    /// A [`ErrorKind::TransactionRejected`] error: the engine refused such a
    /// transaction as invalid before running it (too many writes, two on
    /// one item); nothing was written.
    pub fn transaction_rejected(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::TransactionRejected, message)
    }

    /// This error with `source` as its cause (the engine's error behind a
    /// [`corrupt_record`](Self::corrupt_record), say), which
    /// [`std::error::Error::source`] returns.
    ///
    /// ```
    /// use lambda_idempotency::{Error, ErrorKind};
    ///
    /// let parse = "two".parse::<u64>().unwrap_err();
    /// let err = Error::corrupt_record("record r1: `attempt` is not a number").caused_by(parse);
    /// assert_eq!(err.kind(), ErrorKind::CorruptRecord);
    /// assert!(std::error::Error::source(&err).is_some());
    /// ```
    pub fn caused_by(self, source: impl Into<Box<dyn StdError + Send + Sync + 'static>>) -> Self {
        Error {
            source: Some(source.into()),
            ..self
        }
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
