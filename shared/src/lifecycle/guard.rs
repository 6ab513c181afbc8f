//! [`Guard`]: a won claim, from the handler's run to its end: the outcome
//! recorded ([`Guard::finish`]) or the key given back ([`Guard::abandon`]).

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

use crate::clock::now_ms;
use crate::config::IdempotencyConfig;
use crate::context::IdempotencyContext;
use crate::error::{Error, ErrorKind};
use crate::metrics::Event;
use crate::record::{Record, Status, StoredResponse};
use crate::store::{CompleteRequest, Completion, Lease};

/// A claim this invocation won: the handler runs under it, then it ends in
/// one of two ways, each written once here for every entry point:
/// [`finish`](Self::finish) records the outcome, [`abandon`](Self::abandon)
/// gives the key back for the next retry.
///
/// A guard dropped before either (its future cancelled, say by a timeout
/// around it) writes nothing: the record stays in progress until its lease
/// ends, then the next attempt takes it over, or the sweeper resolves it.
/// Nothing is released from `drop`, because a cancelled handler may have
/// committed part of its work, and only the lease's end is safe then; the
/// drop is logged.
///
/// That is also why a guard is `#[must_use]`: dropping one (or the one
/// [`run`](Self::run) hands back) without `finish` is a warning, since the
/// outcome it came for is then never recorded. This does not compile:
///
/// ```compile_fail
/// # #![deny(unused_must_use)]
/// use lambda_idempotency::lifecycle::{self, Begun};
/// use lambda_idempotency::{IdempotencyConfig, MemoryStore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let config = IdempotencyConfig::new(MemoryStore::new());
/// let begun = lifecycle::begin(&config, "task#42".into(), "fp".into(), None, || None).await?;
/// if let Begun::Run(guard) = begun {
///     // The guard comes back with the value, and is dropped here unfinished.
///     guard.run(async { Ok::<_, lambda_idempotency::Error>("done") }).await?;
/// }
/// # Ok::<(), lambda_idempotency::Error>(())
/// # }).unwrap();
/// ```
///
/// Finished, the same code compiles:
///
/// ```
/// # #![deny(unused_must_use)]
/// use lambda_idempotency::lifecycle::{self, Begun, Finished};
/// use lambda_idempotency::store::{StoredBody, StoredResponse};
/// use lambda_idempotency::{IdempotencyConfig, MemoryStore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let config = IdempotencyConfig::new(MemoryStore::new());
/// let begun = lifecycle::begin(&config, "task#42".into(), "fp".into(), None, || None).await?;
/// if let Begun::Run(guard) = begun {
///     let (guard, out) = guard.run(async { Ok::<_, lambda_idempotency::Error>("done") }).await?;
///     let stored = StoredResponse::new(200, vec![], StoredBody::Text(out.into()));
///     assert!(matches!(guard.finish(stored).await, Finished::Stored));
/// }
/// # Ok::<(), lambda_idempotency::Error>(())
/// # }).unwrap();
/// ```
///
/// The lint sees a guard dropped as a whole value (a statement, or a tuple
/// element of one), not one bound to `_` in a pattern:
/// `let (_, out) = guard.run(work).await?;` still compiles without a
/// warning, and only the log line of `drop` tells.
#[derive(Debug)]
#[must_use = "a Guard dropped without `finish` (or `abandon`) leaves the record in progress until its lease ends; the next retry then runs the handler again"]
pub struct Guard<'a> {
    config: &'a IdempotencyConfig,
    lease: Lease,
    /// When the claim was made (epoch milliseconds): a stored outcome
    /// tells the process how long its handler takes.
    claimed_at_ms: u64,
    context: IdempotencyContext,
    ended: bool,
}

/// How [`Guard::finish`] ended: what the store recorded, and what that means
/// for the answer. Counted and logged already; the entry point only shapes
/// its answer from it.
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "dropping `Finished` answers as if the outcome were recorded: `Lost`, `Refused` and `Unknown` mean duplicates will not replay it (a retry runs again, or waits for the lease)"]
pub enum Finished {
    /// Recorded: duplicates replay it.
    Stored,
    /// Too large to keep: the record completed with the too-large marker,
    /// and duplicates get that instead of the outcome.
    Oversized,
    /// Not recorded because the key moved on while the handler ran: a newer
    /// attempt took it over (`Fenced`) or the record is gone (`RecordGone`:
    /// released by an operator, or expired). With deferred writes
    /// (`transactional`) nothing of this attempt committed; without, its
    /// work stands and this outcome is true.
    Lost {
        /// What the store answered.
        error: Error,
        /// Whether the outcome came with deferred writes.
        transactional: bool,
    },
    /// Refused before anything committed (deferred writes cancelled or
    /// rejected as invalid): the key was given back, so a retry runs again.
    Refused(Error),
    /// The store failed: unknown whether the outcome (and the deferred
    /// writes) committed. The key frees when its lease ends, and the next
    /// attempt replays or takes over.
    Unknown {
        /// What the store answered.
        error: Error,
        /// Whether the outcome came with deferred writes.
        transactional: bool,
    },
}

impl<'a> Guard<'a> {
    pub(super) fn new(config: &'a IdempotencyConfig, lease: Lease, claimed_at_ms: u64) -> Self {
        let context = IdempotencyContext::from_lease(config.store.clone(), lease.clone());
        Guard {
            config,
            lease,
            claimed_at_ms,
            context,
            ended: false,
        }
    }

    /// What the handler sees of this claim.
    pub fn context(&self) -> &IdempotencyContext {
        &self.context
    }

    /// The lease this invocation holds.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Run the handler's `work` under this claim. An error abandons the
    /// claim and is handed back; a panic abandons it (the key is free for
    /// the retry now, not at the lease's end) and goes on unwinding, as it
    /// would have without the guard; a value comes back with the guard, to
    /// [`finish`](Self::finish) or [`abandon`](Self::abandon).
    #[must_use = "the guard handed back with the value must be finished (or abandoned): dropped, it leaves the record in progress until its lease ends and the next retry runs the handler again"]
    pub async fn run<T, E>(self, work: impl Future<Output = Result<T, E>>) -> Result<(Self, T), E> {
        match AssertUnwindSafe(work).catch_unwind().await {
            Ok(Ok(value)) => Ok((self, value)),
            Ok(Err(err)) => {
                self.abandon("the handler returned an error").await;
                Err(err)
            }
            Err(panic) => {
                self.abandon("the handler panicked").await;
                std::panic::resume_unwind(panic);
            }
        }
    }

    /// Give the claim up so the next retry runs again, saying `why` in the
    /// log; the deferred writes are dropped with it (nothing of this
    /// attempt commits). The record is released, fenced (one holding a
    /// recovery point is kept with its lease ended: see
    /// [`Store::release`](crate::Store::release)), unless a recovery
    /// point's write left unknown what committed: then it is left to its
    /// lease, so the next attempt learns from the record itself whether the
    /// point committed.
    pub async fn abandon(mut self, why: &str) {
        self.ended = true;
        drop(self.context.take_writes());
        if self.context.outcome_unknown() {
            tracing::warn!(record_id = %self.lease.record_id, attempt = self.lease.attempt, reason = why, "idempotency key left to its lease: unknown whether its last recovery point committed, so the next attempt resumes from what the record holds");
            return;
        }
        self.release(why).await;
    }

    /// Record `stored` as the outcome, with the handler's deferred writes in
    /// the same transaction, and say what came of it ([`Finished`]). A
    /// refused transaction gives the key back; every other failure leaves
    /// the record to its lease.
    pub async fn finish(mut self, stored: StoredResponse) -> Finished {
        self.ended = true;
        let (config, lease) = (self.config, &self.lease);
        let expires_at = (now_ms() / 1000).saturating_add(config.expires_after.as_secs());
        let writes = self.context.take_writes();
        let transactional = !writes.is_empty();
        let error = match config
            .store
            .complete(CompleteRequest::new(lease, &stored, expires_at).with_writes(writes))
            .await
        {
            Ok(Completion::Stored) => {
                config.progress.finished(self.claimed_at_ms);
                config.progress.settled(&lease.record_id);
                tracing::debug!(
                    attempt = lease.attempt,
                    status = stored.status,
                    transactional,
                    "idempotent outcome stored"
                );
                if let Some(cache) = &config.cache {
                    cache.put(Record {
                        id: lease.record_id.clone(),
                        status: Status::Completed,
                        fingerprint: lease.fingerprint.clone(),
                        attempt: lease.attempt,
                        owner: lease.owner.clone(),
                        lease_expires_at_ms: 0,
                        expires_at_s: expires_at,
                        response: Some(stored),
                        checkpoint: None,
                    });
                }
                return Finished::Stored;
            }
            Ok(Completion::Oversized { bytes }) => {
                config.count(Event::OversizedResponse);
                tracing::warn!(
                    attempt = lease.attempt,
                    bytes,
                    "outcome too large to store; duplicates get the response-too-large problem"
                );
                return Finished::Oversized;
            }
            Err(error) => error,
        };
        match error.kind() {
            ErrorKind::Fenced => {
                config.count(Event::FencedWrite);
                tracing::warn!(
                    attempt = lease.attempt,
                    transactional,
                    "completion fenced: a newer attempt took over this key"
                );
                Finished::Lost {
                    error,
                    transactional,
                }
            }
            ErrorKind::RecordGone => {
                // Released by an operator (or expired) while the handler
                // ran: nothing is stored, so a duplicate runs again under a
                // new claim.
                config.count(Event::FencedWrite);
                tracing::warn!(attempt = lease.attempt, error = %error, "completion not stored: the record is gone; this outcome is not replayed");
                Finished::Lost {
                    error,
                    transactional,
                }
            }
            ErrorKind::TransactionCancelled
            | ErrorKind::TransactionRejected
            | ErrorKind::InvalidConfig => {
                // Refused before anything ran: nothing committed, so the
                // key is free for a retry (which fails the same way until
                // the handler is fixed, but never sits in progress).
                tracing::warn!(attempt = lease.attempt, error = %error, "transactional completion refused; nothing written");
                self.release("its transactional completion was refused")
                    .await;
                Finished::Refused(error)
            }
            _ => {
                config.count(Event::StoreError);
                tracing::error!(attempt = lease.attempt, error = %error, "could not record the outcome; the key frees when its lease ends");
                Finished::Unknown {
                    error,
                    transactional,
                }
            }
        }
    }

    /// Release the lease (fenced), counted. A failure only delays the next
    /// retry until the lease ends, so it is logged, not raised.
    async fn release(&self, why: &str) {
        let lease = &self.lease;
        let event = match self.config.store.release(lease).await {
            Ok(()) => {
                self.config.progress.settled(&lease.record_id);
                tracing::info!(record_id = %lease.record_id, attempt = lease.attempt, reason = why, "idempotency key released");
                Event::Released
            }
            Err(err) if err.is_fenced() => {
                tracing::warn!(record_id = %lease.record_id, attempt = lease.attempt, reason = why, "release fenced: a newer attempt took over this key");
                Event::FencedWrite
            }
            Err(err) => {
                tracing::error!(record_id = %lease.record_id, attempt = lease.attempt, reason = why, error = %err, "could not release the idempotency key; it frees when its lease ends");
                Event::StoreError
            }
        };
        self.config.count(event);
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if !self.ended {
            tracing::warn!(record_id = %self.lease.record_id, attempt = self.lease.attempt, "idempotency claim dropped before it ended (cancelled); the record is left to its lease");
        }
    }
}
