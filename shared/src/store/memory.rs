//! [`MemoryStore`]: the store semantics in process memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::Error;
use crate::record::{Record, Status};
use crate::store::rules::{claimable, completed_by, fit, lease_ended_at, may_take_over, own_claim};
use crate::store::{
    no_transactions, resolver_owner, CheckpointRequest, ClaimOutcome, ClaimRequest,
    CompleteRequest, Completion, Lease, RecordPage, Resolution, Resolve, ResolveRequest, Store,
    StoredRecord, StuckPage, StuckRecord, StuckRequest, SweepCursor, SweepStore,
    DEFAULT_MAX_RESPONSE_BYTES,
};

/// An in-memory [`Store`] with the same semantics as the DynamoDB one, for unit
/// and property tests. Clones share the same records.
///
/// ```
/// use lambda_idempotency::{IdempotencyLayer, MemoryStore};
///
/// let store = MemoryStore::new();
/// let layer = IdempotencyLayer::new(store.clone());
/// assert_eq!(store.requests(), 0);
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    records: Mutex<HashMap<String, Record>>,
    requests: AtomicU64,
    max_response_bytes: usize,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            records: Mutex::default(),
            requests: AtomicU64::new(0),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store keeping responses up to `bytes` (as the DynamoDB store
    /// would store them: body compressed when that helps, plus headers).
    pub fn with_max_response_bytes(bytes: usize) -> Self {
        MemoryStore {
            inner: Arc::new(Inner {
                max_response_bytes: bytes,
                ..Inner::default()
            }),
        }
    }

    /// How many store operations were made (claim, complete, release,
    /// checkpoint), the
    /// in-memory counterpart of DynamoDB requests.
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// A copy of a record, for assertions.
    pub fn get(&self, record_id: &str) -> Option<Record> {
        self.records().get(record_id).cloned()
    }

    /// Number of records held.
    pub fn len(&self) -> usize {
        self.records().len()
    }

    /// True when no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn records(&self) -> MutexGuard<'_, HashMap<String, Record>> {
        // A panic while holding the lock cannot leave a record half-written
        // (every update is a single insert or remove), so poisoning is ignored.
        self.inner
            .records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn count(&self) {
        self.inner.requests.fetch_add(1, Ordering::Relaxed);
    }

    fn check_lease<'a>(
        records: &'a mut HashMap<String, Record>,
        lease: &Lease,
    ) -> Result<&'a mut Record, Error> {
        match records.get_mut(&lease.record_id) {
            Some(r)
                if r.status == Status::InProgress
                    && r.attempt == lease.attempt
                    && r.owner == lease.owner =>
            {
                Ok(r)
            }
            _ => Err(Error::fenced(&lease.record_id, lease.attempt)),
        }
    }
}

#[async_trait::async_trait]
impl Store for MemoryStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
        self.count();
        let mut records = self.records();
        let (previous_attempt, recovered) = match records.get(&request.record_id) {
            None => (0, None),
            Some(existing) if claimable(existing, request) => (
                existing.attempt,
                may_take_over(existing, request)
                    .then(|| existing.checkpoint.clone())
                    .flatten(),
            ),
            Some(existing) => {
                return Ok(match own_claim(existing, request) {
                    Some(lease) => ClaimOutcome::Claimed(lease),
                    None => ClaimOutcome::Exists(existing.clone()),
                })
            }
        };
        let attempt = previous_attempt + 1;
        records.insert(
            request.record_id.clone(),
            Record {
                id: request.record_id.clone(),
                status: Status::InProgress,
                fingerprint: request.fingerprint.clone(),
                attempt,
                owner: request.owner.clone(),
                lease_expires_at_ms: request.lease_expires_at_ms,
                expires_at_s: request.expires_at_s,
                response: None,
                checkpoint: recovered.clone(),
            },
        );
        Ok(ClaimOutcome::Claimed(Lease {
            record_id: request.record_id.clone(),
            owner: request.owner.clone(),
            fingerprint: request.fingerprint.clone(),
            attempt,
            recovered,
        }))
    }

    async fn complete(&self, request: CompleteRequest<'_>) -> Result<Completion, Error> {
        let lease = request.lease;
        no_transactions(self, &request.writes, "a completion")?;
        self.count();
        let fitted = fit(request.response, self.inner.max_response_bytes);
        let (stored, completion) = (fitted.response, fitted.completion);
        let mut records = self.records();
        if records
            .get(&lease.record_id)
            .is_some_and(|r| completed_by(r, lease))
        {
            // Our own completion again (as an SDK retry of a lost response
            // is on DynamoDB): it stands, nothing changes.
            return Ok(completion);
        }
        if !records.contains_key(&lease.record_id) {
            return Err(Error::record_gone(&lease.record_id, lease.attempt));
        }
        let record = Self::check_lease(&mut records, lease)?;
        record.status = Status::Completed;
        record.expires_at_s = request.expires_at_s;
        record.response = Some(stored.into_owned());
        record.checkpoint = None;
        Ok(completion)
    }

    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error> {
        no_transactions(self, &request.writes, "a recovery point")?;
        self.count();
        let mut records = self.records();
        Self::check_lease(&mut records, request.lease)?.checkpoint =
            Some(request.checkpoint.clone());
        Ok(())
    }

    fn describe(&self) -> String {
        "MemoryStore".to_owned()
    }

    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        self.count();
        let mut records = self.records();
        if !records.contains_key(&lease.record_id) {
            // Gone already (released, swept): what a release wants.
            return Ok(());
        }
        let record = Self::check_lease(&mut records, lease)?;
        if record.checkpoint.is_some() {
            // Rule 4: the recovery point stays for the next retry, which may
            // take the record over from now on.
            record.lease_expires_at_ms = record.lease_expires_at_ms.min(lease_ended_at());
        } else {
            records.remove(&lease.record_id);
        }
        Ok(())
    }

    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        self.count();
        Ok(self.records().get(record_id).cloned().map(unsized_record))
    }
}

#[async_trait::async_trait]
impl SweepStore for MemoryStore {
    /// Its listing keeps no place between sweeps: nothing to save.
    async fn finish(
        &self,
        _listing: &crate::store::Listing,
        _resolved: &[String],
    ) -> Result<(), Error> {
        Ok(())
    }
    /// The engine expires records itself: nothing to delete.
    async fn delete_expired(&self, _now_s: u64, _limit: usize) -> Result<u64, Error> {
        Ok(0)
    }
    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error> {
        self.count();
        let records = self.records();
        let mut page: Vec<&Record> = records
            .values()
            .filter(|r| cursor.as_ref().is_none_or(|c| r.id > c.0))
            .collect();
        page.sort_by(|a, b| a.id.cmp(&b.id));
        let more = page.len() > limit.max(1);
        page.truncate(limit.max(1));
        let next = more
            .then(|| page.last().map(|r| SweepCursor(r.id.clone())))
            .flatten();
        Ok(RecordPage {
            records: page.into_iter().cloned().map(unsized_record).collect(),
            next,
            skipped: 0,
        })
    }

    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
        self.count();
        let records = self.records();
        // In id order from the cursor (the last id of the previous page).
        let after = request.cursor.map(|c| c.0);
        let mut stuck: Vec<StuckRecord> = records
            .values()
            .filter(|r| r.status == Status::InProgress && r.lease_expires_at_ms < request.cutoff_ms)
            .filter(|r| after.as_ref().is_none_or(|a| r.id > *a))
            .map(|r| StuckRecord {
                id: r.id.clone(),
                attempt: r.attempt,
                owner: r.owner.clone(),
                lease_expires_at_ms: r.lease_expires_at_ms,
                has_checkpoint: r.checkpoint.is_some(),
            })
            .collect();
        stuck.sort_by(|a, b| a.id.cmp(&b.id));
        let more = stuck.len() > request.limit.max(1);
        stuck.truncate(request.limit.max(1));
        let next = more
            .then(|| stuck.last().map(|r| SweepCursor(r.id.clone())))
            .flatten();
        Ok(StuckPage {
            records: stuck,
            next,
            reads: 1,
            ..StuckPage::default()
        })
    }

    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error> {
        let record = request.record;
        self.count();
        let mut records = self.records();
        let Some(current) = records.get_mut(&record.id).filter(|r| {
            r.status == Status::InProgress
                && r.attempt == record.attempt
                && r.owner == record.owner
                && r.lease_expires_at_ms < request.cutoff_ms
        }) else {
            return Ok(Resolution::Fenced);
        };
        let expired = current.expires_at_s < request.now_ms / 1000;
        match request.how {
            Resolve::Release if current.checkpoint.is_some() => Ok(Resolution::Resumable),
            Resolve::Fail {
                response,
                expires_at_s,
            } if !expired => {
                let fitted = fit(response, self.inner.max_response_bytes);
                current.status = Status::Completed;
                current.owner = resolver_owner(&current.owner);
                current.expires_at_s = expires_at_s;
                current.response = Some(fitted.response.into_owned());
                current.checkpoint = None;
                Ok(Resolution::Failed)
            }
            Resolve::Release | Resolve::Fail { .. } => {
                records.remove(&record.id);
                Ok(Resolution::Released)
            }
        }
    }
}

/// A record as [`Store::get`] returns it here: memory has no billed size.
fn unsized_record(record: Record) -> StoredRecord {
    StoredRecord {
        record,
        size_bytes: None,
        write_units: None,
    }
}
