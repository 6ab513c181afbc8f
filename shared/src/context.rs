//! What the handler learns about its claim.
//!
//! The middleware puts an [`IdempotencyContext`] into the request extensions
//! before it calls the handler. Use [`derived_key`](IdempotencyContext::derived_key)
//! for downstream calls (a payment provider's own idempotency key): it is the
//! same on every attempt of the record, so a re-run after a crash is
//! deduplicated downstream too.
//!
//! ```
//! use lambda_idempotency::IdempotencyContext;
//!
//! let ctx = IdempotencyContext::new("3f2a", 2);
//! assert_eq!(ctx.attempt(), 2);
//! assert_eq!(ctx.derived_key("charge"), IdempotencyContext::new("3f2a", 7).derived_key("charge"));
//! assert_ne!(ctx.derived_key("charge"), ctx.derived_key("refund"));
//! ```

use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::fingerprint::hex;

/// The claim behind the current invocation, found in the request extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyContext {
    record_id: Arc<str>,
    attempt: u64,
}

impl IdempotencyContext {
    /// A context for `record_id` at `attempt` (the middleware builds these; this
    /// is public for handler unit tests).
    pub fn new(record_id: impl Into<Arc<str>>, attempt: u64) -> Self {
        IdempotencyContext {
            record_id: record_id.into(),
            attempt,
        }
    }

    /// The context of a request the middleware claimed, if any.
    pub fn of<B>(req: &http::Request<B>) -> Option<&IdempotencyContext> {
        req.extensions().get()
    }

    /// The record's stable id (hash of tenant, method, path and key). Safe to log.
    pub fn record_id(&self) -> &str {
        &self.record_id
    }

    /// The fencing token: 1 on the first execution, higher after a takeover.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// A stable key for `label`: 32 hex characters, the same on every attempt of
    /// this record, different per label and per record.
    pub fn derived_key(&self, label: &str) -> String {
        let mut h = Sha256::new();
        h.update(b"derived1\0");
        h.update(self.record_id.as_bytes());
        h.update(b"\0");
        h.update(label.as_bytes());
        hex(&h.finalize()[..16])
    }
}
