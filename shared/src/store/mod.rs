//! Where records live: the [`Store`] trait and its two implementations.
//!
//! - [`DynamoStore`](crate::DynamoStore): the product. One conditional write per
//!   claim, fenced completes and releases, TTL expiry.
//! - [`MemoryStore`](crate::MemoryStore): the same semantics in a `HashMap`, for
//!   users' unit tests and property tests.
//!
//! Both obey these rules (DESIGN section 4):
//!
//! 1. [`Store::claim`] succeeds when the record is absent, expired
//!    (`expires_at` in the past), or in progress with an expired lease and the
//!    same fingerprint (takeover). A successful claim increments `attempt`.
//!    Otherwise it returns the existing record in the same round trip.
//! 2. [`Store::complete`] and [`Store::release`] succeed only while the record
//!    is in progress under the same `attempt` and `owner`; otherwise they fail
//!    with [`ErrorKind::Fenced`](crate::ErrorKind::Fenced) and write nothing.
//! 3. A claim that finds the record held by its own `owner` (the SDK retried a
//!    write whose response was lost) counts as claimed.
//!
//! ```
//! use lambda_idempotency::{ClaimOutcome, ClaimRequest, MemoryStore, Store, StoredBody, StoredResponse};
//!
//! # tokio_test_block_on(async {
//! let store = MemoryStore::new();
//! let request = ClaimRequest {
//!     record_id: "r1".into(), fingerprint: "fp".into(), owner: "me".into(),
//!     now_ms: 1_000, lease_expires_at_ms: 31_000, expires_at_s: 3_600,
//! };
//! let ClaimOutcome::Claimed(lease) = store.claim(&request).await? else { unreachable!() };
//! assert_eq!(lease.attempt, 1);
//! store.complete(&lease, &StoredResponse::new(200, vec![], StoredBody::Empty), 3_600).await?;
//!
//! let again = ClaimRequest { owner: "someone else".into(), ..request };
//! assert!(matches!(store.claim(&again).await?, ClaimOutcome::Exists(_)));
//! # Ok::<(), lambda_idempotency::Error>(()) });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f) }
//! ```

pub(crate) mod dynamodb;
pub(crate) mod memory;

use crate::error::Error;
use crate::record::{Record, StoredResponse};

/// Everything a claim writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// The record's id (hash of the scope).
    pub record_id: String,
    /// Fingerprint of this request.
    pub fingerprint: String,
    /// Random token of this invocation.
    pub owner: String,
    /// The caller's clock, epoch milliseconds; conditions compare against it.
    pub now_ms: u64,
    /// End of the lease this claim takes, epoch milliseconds.
    pub lease_expires_at_ms: u64,
    /// TTL of the in-progress record, epoch seconds.
    pub expires_at_s: u64,
}

/// Proof of a successful claim: what complete and release are fenced on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The record's id.
    pub record_id: String,
    /// The owner token written by the claim.
    pub owner: String,
    /// The fencing token this claim obtained.
    pub attempt: u64,
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This invocation holds the record now; run the handler.
    Claimed(Lease),
    /// Someone else holds it or it is completed: the record as it is.
    Exists(Record),
}

/// Storage for idempotency records. See the module docs for the rules every
/// implementation obeys.
#[async_trait::async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Try to claim a record, in one round trip.
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error>;

    /// Store the outcome and mark the record completed, if the lease is still ours.
    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at_s: u64,
    ) -> Result<(), Error>;

    /// Delete the record so the next retry runs again, if the lease is still ours.
    async fn release(&self, lease: &Lease) -> Result<(), Error>;
}

#[async_trait::async_trait]
impl<T: Store + ?Sized> Store for std::sync::Arc<T> {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
        (**self).claim(request).await
    }
    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at_s: u64,
    ) -> Result<(), Error> {
        (**self).complete(lease, response, expires_at_s).await
    }
    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        (**self).release(lease).await
    }
}

/// The claim rule, shared by every implementation that evaluates it itself:
/// may `request` claim over `existing`?
pub(crate) fn claimable(existing: &Record, request: &ClaimRequest) -> bool {
    let expired = existing.expires_at_s < request.now_ms / 1000;
    let takeover = existing.status == crate::record::Status::InProgress
        && existing.lease_expires_at_ms < request.now_ms
        && existing.fingerprint == request.fingerprint;
    expired || takeover
}

/// Rule 3: the record is in progress under our own owner token, so an earlier
/// try of this same claim succeeded.
pub(crate) fn own_claim(existing: &Record, request: &ClaimRequest) -> Option<Lease> {
    (existing.status == crate::record::Status::InProgress && existing.owner == request.owner).then(
        || Lease {
            record_id: existing.id.clone(),
            owner: existing.owner.clone(),
            attempt: existing.attempt,
        },
    )
}
