//! A store wrapper that times the store calls of the middleware over it,
//! so a call's own time (outside the store) can be told apart.

use std::sync::Arc;
use std::time::Instant;

use lambda_idempotency::store::{
    Checkpoint, ClaimOutcome, ClaimRequest, Completion, Lease, StoredResponse,
};
use lambda_idempotency::{DynamoStore, Store};

/// What the library's store calls return.
type StoreResult<T> = std::result::Result<T, lambda_idempotency::Error>;

/// Nanoseconds spent inside store calls, summed.
#[derive(Clone, Debug, Default)]
pub(crate) struct StoreClock(Arc<std::sync::atomic::AtomicU64>);

impl StoreClock {
    fn add(&self, since: Instant) {
        let ns = since.elapsed().as_nanos() as u64;
        self.0.fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
    }
    pub(crate) fn micros(&self) -> f64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1000.0
    }
}

/// A store that times every call it passes on: the latency of a call
/// through the middleware minus its time inside the store is what the
/// middleware itself adds (plus the two clock reads per store call).
#[derive(Debug)]
pub(crate) struct TimedStore {
    pub(crate) inner: DynamoStore,
    pub(crate) clock: StoreClock,
}

#[async_trait::async_trait]
impl Store for TimedStore {
    async fn claim(&self, request: &ClaimRequest) -> StoreResult<ClaimOutcome> {
        let start = Instant::now();
        let out = self.inner.claim(request).await;
        self.clock.add(start);
        out
    }
    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at_s: u64,
    ) -> StoreResult<Completion> {
        let start = Instant::now();
        let out = self.inner.complete(lease, response, expires_at_s).await;
        self.clock.add(start);
        out
    }
    async fn release(&self, lease: &Lease) -> StoreResult<()> {
        let start = Instant::now();
        let out = self.inner.release(lease).await;
        self.clock.add(start);
        out
    }
    async fn checkpoint(&self, lease: &Lease, checkpoint: &Checkpoint) -> StoreResult<()> {
        let start = Instant::now();
        let out = self.inner.checkpoint(lease, checkpoint).await;
        self.clock.add(start);
        out
    }
    async fn stuck(
        &self,
        cutoff_ms: u64,
        cursor: Option<lambda_idempotency::store::SweepCursor>,
        limit: usize,
    ) -> StoreResult<lambda_idempotency::store::StuckPage> {
        self.inner.stuck(cutoff_ms, cursor, limit).await
    }
    async fn resolve_stuck(
        &self,
        record: &lambda_idempotency::store::StuckRecord,
        how: lambda_idempotency::store::Resolve<'_>,
        cutoff_ms: u64,
        now_ms: u64,
    ) -> StoreResult<lambda_idempotency::store::Resolution> {
        self.inner
            .resolve_stuck(record, how, cutoff_ms, now_ms)
            .await
    }
    async fn get(
        &self,
        record_id: &str,
    ) -> StoreResult<Option<lambda_idempotency::store::StoredRecord>> {
        self.inner.get(record_id).await
    }
    async fn scan(
        &self,
        cursor: Option<lambda_idempotency::store::SweepCursor>,
        limit: usize,
    ) -> StoreResult<lambda_idempotency::store::RecordPage> {
        self.inner.scan(cursor, limit).await
    }
}
