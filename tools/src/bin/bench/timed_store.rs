//! A store wrapper that times the store calls of the middleware over it,
//! so a call's own time (outside the store) can be told apart.

use std::sync::Arc;
use std::time::Instant;

use lambda_idempotency::store::{
    CheckpointRequest, ClaimOutcome, ClaimRequest, CompleteRequest, Completion, Lease, Listing,
    RecordPage, Resolution, ResolveRequest, StoredRecord, StuckPage, StuckRequest, SweepCursor,
    SweepStore,
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
    async fn complete(&self, request: CompleteRequest<'_>) -> StoreResult<Completion> {
        let start = Instant::now();
        let out = self.inner.complete(request).await;
        self.clock.add(start);
        out
    }
    async fn release(&self, lease: &Lease) -> StoreResult<()> {
        let start = Instant::now();
        let out = self.inner.release(lease).await;
        self.clock.add(start);
        out
    }
    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> StoreResult<()> {
        let start = Instant::now();
        let out = self.inner.checkpoint(request).await;
        self.clock.add(start);
        out
    }
    async fn get(&self, record_id: &str) -> StoreResult<Option<StoredRecord>> {
        self.inner.get(record_id).await
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn reads_origin(&self) -> bool {
        self.inner.reads_origin()
    }
    async fn warm_up(&self) -> StoreResult<()> {
        self.inner.warm_up().await
    }
}

/// The sweeper's side is not timed: the benchmarks measure requests.
#[async_trait::async_trait]
impl SweepStore for TimedStore {
    async fn finish(&self, listing: &Listing, resolved: &[String]) -> StoreResult<()> {
        self.inner.finish(listing, resolved).await
    }
    async fn delete_expired(&self, now_s: u64, limit: usize) -> StoreResult<u64> {
        self.inner.delete_expired(now_s, limit).await
    }
    async fn stuck(&self, request: StuckRequest) -> StoreResult<StuckPage> {
        self.inner.stuck(request).await
    }
    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> StoreResult<Resolution> {
        self.inner.resolve_stuck(request).await
    }
    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> StoreResult<RecordPage> {
        self.inner.scan(cursor, limit).await
    }
}
