//! What the handler learns about its claim, and what it can do with it.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind};
use crate::hash::hex;
use crate::store::{Checkpoint, CheckpointRequest, DeferredWrites, Lease, Store};

/// How many writes [`IdempotencyContext::defer_write`] takes: a DynamoDB
/// transaction holds 100 items, and one is the record's own update (the
/// completion, or the recovery point of
/// [`commit_with_writes`](IdempotencyContext::commit_with_writes)).
pub const MAX_DEFERRED_WRITES: usize = 99;

/// What the handler learns about its claim, and what it can do with it.
///
/// The middleware puts an [`IdempotencyContext`] into the request extensions
/// (and [`IdempotentFunction`](crate::IdempotentFunction) passes one to its
/// closure) before the handler runs:
///
/// - [`derived_key`](IdempotencyContext::derived_key): a stable key for
///   downstream calls (a payment provider's own idempotency key), the same on
///   every attempt of the record, so a re-run is deduplicated downstream too;
/// - **recovery points**: [`commit`](IdempotencyContext::commit) a named step
///   with small data (fenced: a stale invocation cannot move it); after a crash
///   the attempt that takes over sees it in
///   [`recovery_point`](IdempotencyContext::recovery_point) and resumes there
///   instead of starting over. Put every foreign call between two recovery
///   points, keep every local step atomic;
/// - **transactional completion**: [`defer_write`](IdempotencyContext::defer_write)
///   hands a DynamoDB write to the completion, which commits it together with
///   the stored response in one `TransactWriteItems`, fenced on `attempt`: when
///   the work is local there is no window between doing it and recording it;
/// - **atomic phases**: [`commit_with_writes`](IdempotencyContext::commit_with_writes)
///   commits the writes deferred so far with a recovery point, in one
///   transaction, fenced: a phase's rows and the record of it being done
///   commit together or not at all.
///
/// ```
/// use lambda_idempotency::IdempotencyContext;
///
/// let ctx = IdempotencyContext::new("3f2a", 2);
/// assert_eq!(ctx.attempt(), 2);
/// assert_eq!(ctx.derived_key("charge"), IdempotencyContext::new("3f2a", 7).derived_key("charge"));
/// assert_ne!(ctx.derived_key("charge"), ctx.derived_key("refund"));
/// assert!(ctx.recovery_point().is_none());
/// ```
///
/// The claim behind the current invocation.
#[derive(Clone)]
pub struct IdempotencyContext {
    record_id: Arc<str>,
    fingerprint: Arc<str>,
    attempt: u64,
    recovered: Option<Checkpoint>,
    claim: Option<Arc<Claim>>,
}

/// What lets the context write: the store and the lease.
struct Claim {
    store: Arc<dyn Store>,
    lease: Lease,
    writes: Mutex<DeferredWrites>,
    /// A recovery point's write failed in a way that leaves unknown whether
    /// it committed (the connection lost, the store's answer never came):
    /// the record must then be left to its lease, never released, so the
    /// next attempt learns from the record itself what committed.
    outcome_unknown: AtomicBool,
}

/// Did a failed write of a recovery point leave unknown whether it
/// committed? Every kind below is an answer that nothing was written.
fn outcome_unknown(err: &Error) -> bool {
    !matches!(
        err.kind(),
        ErrorKind::Fenced
            | ErrorKind::RecordGone
            | ErrorKind::TransactionCancelled
            | ErrorKind::TransactionRejected
            | ErrorKind::InvalidConfig
    )
}

impl fmt::Debug for IdempotencyContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyContext")
            .field("record_id", &self.record_id)
            .field("attempt", &self.attempt)
            .field("recovered", &self.recovered)
            .finish()
    }
}

impl IdempotencyContext {
    /// A detached context for `record_id` at `attempt`, for handler unit tests:
    /// it derives keys but cannot commit.
    pub fn new(record_id: impl Into<Arc<str>>, attempt: u64) -> Self {
        IdempotencyContext {
            record_id: record_id.into(),
            fingerprint: Arc::from(""),
            attempt,
            recovered: None,
            claim: None,
        }
    }

    /// The same detached context for the request with this fingerprint (see
    /// [`Fingerprinter`](crate::Fingerprinter)), so it derives the keys the
    /// middleware's context of that request derives.
    pub fn with_fingerprint(mut self, fingerprint: impl Into<Arc<str>>) -> Self {
        self.fingerprint = fingerprint.into();
        self
    }

    /// The context of a claim made directly on a [`Store`] (custom
    /// integrations, tests): it commits recovery points through `store`.
    pub fn from_lease(store: Arc<dyn Store>, lease: Lease) -> Self {
        IdempotencyContext {
            record_id: lease.record_id.as_str().into(),
            fingerprint: lease.fingerprint.as_str().into(),
            attempt: lease.attempt,
            recovered: lease.recovered.clone(),
            claim: Some(Arc::new(Claim {
                store,
                lease,
                writes: Mutex::new(DeferredWrites::new()),
                outcome_unknown: AtomicBool::new(false),
            })),
        }
    }

    /// The context of a request the middleware claimed, if any.
    pub fn of<B>(req: &http::Request<B>) -> Option<&IdempotencyContext> {
        req.extensions().get()
    }

    /// The record's stable id (hash of namespace, tenant, method, route and key). Safe to log.
    pub fn record_id(&self) -> &str {
        &self.record_id
    }

    /// The fencing token: 1 on the first execution, higher after a takeover.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// A stable key for `label`: 32 hex characters, the same on every attempt of
    /// this record for the same request, different per label, per record and
    /// per request (fingerprint): after a release, a retry with another body
    /// under the same key gets new keys, so it never reuses a downstream
    /// operation (a charge) made for the first body.
    pub fn derived_key(&self, label: &str) -> String {
        let mut h = Sha256::new();
        h.update(b"derived2\0");
        h.update(self.record_id.as_bytes());
        h.update(b"\0");
        h.update(self.fingerprint.as_bytes());
        h.update(b"\0");
        h.update(label.as_bytes());
        hex(&h.finalize()[..16])
    }

    /// The last recovery point of an abandoned attempt this one took over.
    pub fn recovery_point(&self) -> Option<&Checkpoint> {
        self.recovered.as_ref()
    }

    /// The claim a recovery point is committed under; a detached context
    /// (made with [`IdempotencyContext::new`]) has none.
    fn attached_claim(&self) -> Result<&Arc<Claim>, Error> {
        self.claim.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidConfig,
                "this IdempotencyContext is detached (made with IdempotencyContext::new); \
                 only the middleware's context can commit recovery points",
            )
        })
    }

    /// Commit a recovery point: the step `name` is done, with `data` for the
    /// next one. Fenced: fails with [`ErrorKind::Fenced`] (and writes nothing)
    /// if a newer attempt took the record over. Deferred writes are left for
    /// the completion; [`commit_with_writes`](Self::commit_with_writes)
    /// commits them with the recovery point instead.
    ///
    /// Once a recovery point is committed, a failure of the handler (an
    /// error, a status that is not stored, a panic) never throws it away:
    /// the record is kept with its lease ended, and the next retry takes it
    /// over and resumes from it. When this call fails without telling
    /// whether the point committed (the store did not answer), the record is
    /// not even given up: it is left to its lease, after which the next
    /// attempt finds what committed.
    pub async fn commit(&self, name: &str, data: serde_json::Value) -> Result<(), Error> {
        self.write_recovery_point(name, data, None).await?;
        tracing::debug!(record_id = %self.record_id, attempt = self.attempt, checkpoint = name, "recovery point committed");
        Ok(())
    }

    /// Commit an **atomic phase**: the writes deferred so far (see
    /// [`defer_write`](Self::defer_write)) and the recovery point `name`
    /// (with `data` for the next phase) in one transaction, fenced like
    /// [`commit`](Self::commit): the rows a phase writes and the record of
    /// the phase being done commit together or not at all, so an attempt
    /// that takes over after a crash finds either both or neither. Without
    /// deferred writes it is [`commit`](Self::commit).
    ///
    /// The writes are taken, whatever the outcome: on success they are
    /// committed; on an error they are gone, never committed by a later
    /// phase or the completion.
    ///
    /// # Errors
    ///
    /// Nothing of the writes nor the recovery point was committed, except
    /// where said:
    ///
    /// - [`ErrorKind::Fenced`]: a newer attempt took the record over; it
    ///   owns the record now;
    /// - [`ErrorKind::RecordGone`]: the record is gone (released by an
    ///   operator, or expired) while the handler ran; a retry runs again
    ///   under a new claim;
    /// - [`ErrorKind::TransactionCancelled`]: a write broke a condition (a
    ///   unique key, a `require_rows`, a DynamoDB condition expression) or
    ///   the transaction lost a race;
    /// - [`ErrorKind::TransactionRejected`]: the store refused the writes as
    ///   invalid;
    /// - [`ErrorKind::InvalidConfig`]: the context is detached, a write is
    ///   not of the store's kind, or the store has no transactions
    ///   ([`MemoryStore`](crate::store::memory::MemoryStore), `RedisStore`);
    /// - [`ErrorKind::StoreUnavailable`] (and any other): the connection was
    ///   lost or the store failed; whether the phase committed is unknown.
    ///   The next attempt tells: it resumes after this phase if it sees
    ///   its recovery point, else it redoes the phase.
    ///
    /// In every case the handler should return the error rather than go on
    /// (its writes are lost, the next phase would build on nothing). The
    /// record is then given up without losing a recovery point (kept with
    /// its lease ended when it holds one), or, when this call could not tell
    /// whether the phase committed, left to its lease; either way the retry
    /// resumes from the last recovery point that committed.
    ///
    /// ```no_run
    /// # #[cfg(feature = "postgres")]
    /// # mod phases {
    /// use lambda_idempotency::{Error, IdempotencyContext, store::postgres::{PgType, PgWrite}};
    ///
    /// /// Seed 001's order: create it (phase 1), charge it (a foreign call,
    /// /// between two recovery points), record the charge (phase 2).
    /// pub async fn place_order(ctx: &IdempotencyContext, order_id: String) -> Result<(), Error> {
    ///     let resume_at = ctx.recovery_point().map(|p| p.name.clone());
    ///     if resume_at.is_none() {
    ///         ctx.defer_write(
    ///             PgWrite::new("INSERT INTO orders (id, state) VALUES ($1, 'created')")
    ///                 .bind(order_id.clone(), PgType::TEXT),
    ///         )?;
    ///         ctx.commit_with_writes("order_created", serde_json::json!({ "order": order_id }))
    ///             .await?;
    ///     }
    ///     if resume_at.as_deref() != Some("charged") {
    ///         let charge_id = charge(&ctx.derived_key("charge")).await;
    ///         ctx.defer_write(
    ///             PgWrite::new("UPDATE orders SET state = 'charged', charge = $2 WHERE id = $1")
    ///                 .bind(order_id.clone(), PgType::TEXT)
    ///                 .bind(charge_id, PgType::TEXT)
    ///                 .require_rows(1),
    ///         )?;
    ///         ctx.commit_with_writes("charged", serde_json::json!({})).await?;
    ///     }
    ///     Ok(())
    /// }
    /// # async fn charge(_key: &str) -> String { String::new() }
    /// # }
    /// ```
    ///
    /// A store without transactions refuses the writes and commits nothing:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lambda_idempotency::{ErrorKind, IdempotencyContext, MemoryStore, Store, store::{ClaimOutcome, ClaimRequest}};
    ///
    /// # tokio_test_block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let request = ClaimRequest {
    ///     record_id: "r1".into(), fingerprint: "fp".into(), owner: "me".into(),
    ///     now_ms: 1_000, lease_expires_at_ms: 31_000, expires_at_s: 3_600, origin: None,
    /// };
    /// let ClaimOutcome::Claimed(lease) = store.claim(&request).await? else { unreachable!() };
    /// let ctx = IdempotencyContext::from_lease(store.clone(), lease);
    ///
    /// ctx.defer_write("an order row".to_owned())?;
    /// let err = ctx.commit_with_writes("order_created", serde_json::json!({})).await.unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    /// assert!(MemoryStore::get(&store, "r1").unwrap().checkpoint.is_none());
    ///
    /// // The refused writes are gone: the same phase without them is a plain recovery point.
    /// ctx.commit_with_writes("order_created", serde_json::json!({})).await?;
    /// assert!(MemoryStore::get(&store, "r1").unwrap().checkpoint.is_some());
    /// # Ok::<(), lambda_idempotency::Error>(()) });
    /// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f) }
    /// ```
    pub async fn commit_with_writes(
        &self,
        name: &str,
        data: serde_json::Value,
    ) -> Result<(), Error> {
        // A detached context holds no writes, so taking them before the
        // claim is checked changes nothing.
        let writes = self.take_writes();
        let count = writes.len();
        self.write_recovery_point(name, data, Some(writes)).await?;
        tracing::debug!(record_id = %self.record_id, attempt = self.attempt, checkpoint = name, writes = count, "recovery point committed with its writes");
        Ok(())
    }

    /// Write this attempt's recovery point `name` under the claim: with
    /// `writes` in one transaction when given, else alone (deferred writes
    /// then stay for the completion). A failure that leaves unknown whether
    /// the point committed is noted on the claim (see [`commit`](Self::commit)).
    async fn write_recovery_point(
        &self,
        name: &str,
        data: serde_json::Value,
        writes: Option<DeferredWrites>,
    ) -> Result<(), Error> {
        let claim = self.attached_claim()?;
        let checkpoint = Checkpoint {
            name: name.to_owned(),
            data,
            attempt: self.attempt,
        };
        let written = match writes {
            None => {
                claim
                    .store
                    .checkpoint(CheckpointRequest::new(&claim.lease, &checkpoint))
                    .await
            }
            Some(writes) => {
                claim
                    .store
                    .checkpoint(
                        CheckpointRequest::new(&claim.lease, &checkpoint).with_writes(writes),
                    )
                    .await
            }
        };
        written.inspect_err(|err| claim.note_failure(err))
    }

    /// Hand a write to the completion: it commits in the same transaction as
    /// the stored response, or not at all (or with the recovery point of the
    /// next [`commit_with_writes`](Self::commit_with_writes), if one comes
    /// first). The write is of the store's own
    /// kind: for a [`DynamoStore`](crate::DynamoStore), an
    /// `aws_sdk_dynamodb::types::TransactWriteItem`; for a `PostgresStore`
    /// (feature `postgres`), a `PgWrite` (SQL and its parameters, run in the
    /// completion's transaction). A store that cannot take it fails the
    /// completion, which then writes nothing.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`] when the context is detached (made with
    /// [`new`](Self::new): there is no completion to join) or already holds
    /// [`MAX_DEFERRED_WRITES`] writes (a DynamoDB transaction takes 100 items,
    /// one of them the completion). The write is not kept.
    pub fn defer_write<W>(&self, write: W) -> Result<(), Error>
    where
        W: std::any::Any + Send + Sync,
    {
        let claim = self.claim.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidConfig,
                "this IdempotencyContext is detached (made with IdempotencyContext::new), so \
                 there is no completion for the write to commit with",
            )
        })?;
        let mut writes = claim.writes.lock().unwrap_or_else(|p| p.into_inner());
        if writes.len() >= MAX_DEFERRED_WRITES {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "at most {MAX_DEFERRED_WRITES} writes can be deferred to one completion (a \
                     DynamoDB transaction takes 100 items, one is the completion); write the rest \
                     before completing"
                ),
            ));
        }
        writes.push(write);
        Ok(())
    }

    /// True when a recovery point's write failed without saying whether it
    /// committed: the middleware then leaves the record to its lease rather
    /// than release it (see [`commit`](Self::commit)).
    pub(crate) fn outcome_unknown(&self) -> bool {
        self.claim
            .as_ref()
            .is_some_and(|c| c.outcome_unknown.load(Ordering::SeqCst))
    }

    /// The deferred writes, taken once by the completion.
    pub(crate) fn take_writes(&self) -> DeferredWrites {
        self.claim
            .as_ref()
            .map(|c| std::mem::take(&mut *c.writes.lock().unwrap_or_else(|p| p.into_inner())))
            .unwrap_or_default()
    }
}

impl Claim {
    /// Remember a failed recovery point whose outcome is unknown.
    fn note_failure(&self, err: &Error) {
        if outcome_unknown(err) {
            self.outcome_unknown.store(true, Ordering::SeqCst);
            tracing::warn!(record_id = %self.lease.record_id, attempt = self.lease.attempt, error = %err, "unknown whether the recovery point committed; the record will be left to its lease, not released");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};

    fn write(i: usize) -> TransactWriteItem {
        let put = Put::builder()
            .table_name("t")
            .item("id", AttributeValue::S(i.to_string()))
            .build()
            .expect("table and item set");
        TransactWriteItem::builder().put(put).build()
    }

    #[test]
    fn deferred_writes_need_a_claim_and_fit_one_transaction() {
        let detached = IdempotencyContext::new("r", 1);
        let err = detached.defer_write(write(0)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("detached"), "{err}");

        let lease = Lease::for_tests();
        let claimed = IdempotencyContext::from_lease(
            Arc::new(crate::store::memory::MemoryStore::new()),
            lease,
        );
        for i in 0..MAX_DEFERRED_WRITES {
            claimed.defer_write(write(i)).unwrap();
        }
        let err = claimed.defer_write(write(99)).unwrap_err();
        assert!(err.to_string().contains("at most 99"), "{err}");
        assert_eq!(claimed.take_writes().len(), MAX_DEFERRED_WRITES);
    }
}
