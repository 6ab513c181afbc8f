//! A store of your own: records in a `Mutex<HashMap>`, implementing only the
//! hot path ([`Store`]), which is all the HTTP layer and the event function
//! need. It fences completions, releases and recovery points by the claim's
//! `attempt` and `owner`, and treats a record past its `expires_at_s` as
//! absent (its TTL). `main` runs the crate's conformance suite on it (the
//! hot-path half, `conformance::run`) and exits non-zero when a case fails;
//! `make test` runs the same suite through this example's test.
//!
//! ```text
//! cargo run -p lambda-idempotency --example custom_store --features test-util
//! ```
//!
//! A real engine does each method in one atomic round trip (a conditional
//! write, a script, a statement) where this one holds a lock. Wrap it in an
//! `Arc` and hand it to `IdempotencyLayer::new` or `IdempotentFunction::new`
//! like any store of this crate.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use lambda_idempotency::store::{
    no_transactions, CheckpointRequest, ClaimOutcome, ClaimRequest, CompleteRequest, Completion,
    Lease, Record, Status, StoredRecord,
};
use lambda_idempotency::{conformance, Error, Store};

/// Idempotency records in memory, keyed by record id.
#[derive(Debug, Default)]
struct HashMapStore {
    records: Mutex<HashMap<String, Record>>,
}

impl HashMapStore {
    /// The records, locked. A panic while the lock was held left no write
    /// half-done (every method changes the map in one statement at the end),
    /// so a poisoned lock is taken as it is.
    fn records(&self) -> MutexGuard<'_, HashMap<String, Record>> {
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Does `record` belong to `lease`: still in progress under its attempt
    /// and owner (the fence of rule 2)?
    fn held_by(record: &Record, lease: &Lease) -> bool {
        record.status == Status::InProgress
            && record.attempt == lease.attempt
            && record.owner == lease.owner
    }
}

/// The clock, epoch milliseconds: a release that keeps a recovery point
/// ends the lease now (the requests of a release carry no clock).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

#[async_trait::async_trait]
impl Store for HashMapStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
        let mut records = self.records();
        let (previous_attempt, recovered) = match records.get(&request.record_id) {
            None => (0, None),
            // Rule 1: past its expiry (TTL), the record is absent: a new
            // life, whatever request it was; its recovery point goes with it.
            Some(existing) if existing.expires_at_s < request.now_ms / 1000 => {
                (existing.attempt, None)
            }
            // Rule 1: an abandoned attempt (in progress, lease over) of the
            // same request is taken over, its recovery point inherited.
            Some(existing)
                if existing.status == Status::InProgress
                    && existing.lease_expires_at_ms < request.now_ms
                    && existing.fingerprint == request.fingerprint =>
            {
                (existing.attempt, existing.checkpoint.clone())
            }
            // Rule 3: our own claim coming back (a retried request whose
            // answer was lost) is still ours.
            Some(existing)
                if existing.status == Status::InProgress && existing.owner == request.owner =>
            {
                return Ok(ClaimOutcome::Claimed(Lease {
                    record_id: existing.id.clone(),
                    owner: existing.owner.clone(),
                    fingerprint: existing.fingerprint.clone(),
                    attempt: existing.attempt,
                    recovered: existing.checkpoint.clone(),
                }));
            }
            // Held by someone else, or completed: the record as it is.
            Some(existing) => return Ok(ClaimOutcome::Exists(existing.clone())),
        };
        // Every claim takes the next attempt: the fencing token.
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
        // No transactions here: a handler's deferred writes are refused.
        no_transactions(self, &request.writes, "a completion")?;
        let lease = request.lease;
        let mut records = self.records();
        let Some(record) = records.get_mut(&lease.record_id) else {
            // Rule 2: nothing to complete; the outcome is not stored.
            return Err(Error::record_gone(&lease.record_id, lease.attempt));
        };
        if record.status == Status::Completed
            && record.attempt == lease.attempt
            && record.owner == lease.owner
        {
            // Completed by this very lease: its own write coming back (a
            // retry after a lost answer) stands, and changes nothing.
            return Ok(Completion::Stored);
        }
        if !Self::held_by(record, lease) {
            return Err(Error::fenced(&lease.record_id, lease.attempt));
        }
        // Memory has no item limit: every response is stored as it is (a
        // store with one answers `Completion::Oversized` past it).
        record.status = Status::Completed;
        record.expires_at_s = request.expires_at_s;
        record.response = Some(request.response.clone());
        record.checkpoint = None;
        Ok(Completion::Stored)
    }

    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        let mut records = self.records();
        let Some(record) = records.get_mut(&lease.record_id) else {
            // Gone already: what a release wants.
            return Ok(());
        };
        if !Self::held_by(record, lease) {
            return Err(Error::fenced(&lease.record_id, lease.attempt));
        }
        if record.checkpoint.is_some() {
            // Rule 4: a recovery point stays for the next retry, which may
            // take the record over from now on (its lease ended a
            // millisecond ago, strictly before any later claim's clock).
            record.lease_expires_at_ms = record.lease_expires_at_ms.min(now_ms().saturating_sub(1));
        } else {
            records.remove(&lease.record_id);
        }
        Ok(())
    }

    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error> {
        no_transactions(self, &request.writes, "a recovery point")?;
        let lease = request.lease;
        match self.records().get_mut(&lease.record_id) {
            Some(record) if Self::held_by(record, lease) => {
                record.checkpoint = Some(request.checkpoint.clone());
                Ok(())
            }
            // Any refusal is a fence, a gone record included.
            _ => Err(Error::fenced(&lease.record_id, lease.attempt)),
        }
    }

    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        Ok(self
            .records()
            .get(record_id)
            .cloned()
            .map(|record| StoredRecord {
                record,
                // Memory bills nothing: no size to report.
                size_bytes: None,
                write_units: None,
            }))
    }

    fn describe(&self) -> String {
        "HashMapStore (examples/custom_store.rs)".to_owned()
    }
}

/// Run the hot-path conformance suite on a fresh `HashMapStore` per case;
/// a failing case panics, naming itself, and the process exits non-zero.
fn main() {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("custom_store: cannot start a Tokio runtime: {err}");
            std::process::exit(2);
        }
    };
    runtime.block_on(conformance::run(|| async { HashMapStore::default() }));
    println!("custom_store: HashMapStore passes the hot-path conformance suite");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `make test` runs (`cargo test --examples`): the suite, as `main`.
    #[tokio::test]
    async fn the_hash_map_store_passes_the_hot_path_conformance_suite() {
        conformance::run(|| async { HashMapStore::default() }).await;
    }
}
