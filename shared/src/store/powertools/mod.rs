//! A cut-over from Powertools for AWS Lambda (Python), as a store layer:
//! [`PowertoolsCutover`] around the store this library writes to, reading
//! the records Powertools left ([`PowertoolsRecords`]) so that no key runs
//! twice while the two overlap.
//!
//! Until the window the user set ends, every claim that would run the
//! handler (a fresh claim, a takeover, a claim that resumes from a recovery
//! point) looks up the Powertools record of the same key first. A completed
//! Powertools record becomes this library's own completed record (its
//! result as the stored response or output) and is replayed; one in
//! progress gives the claim back and answers as in progress; none lets the
//! handler run. A lookup that fails gives the claim back and fails the
//! request: whether the key already ran is unknown, so running it would
//! risk the very duplicate the window is there to prevent.
//!
//! The layer finds the key as Powertools hashed it in the claim's
//! [`ClaimOrigin`]: the `Idempotency-Key` header's text as sent (or the
//! body's value at the key pointer) and the body for HTTP, the key's value
//! for events. Nothing of this library's record says what an earlier
//! attempt's lookup found, except a completed record (which replays without
//! a claim): a first attempt can end between its claim and the end of the
//! cut-over (its copy or give-back failed, its lookup failed, it died
//! during the lookup), so a takeover looks up again, and so does a claim
//! that resumes from a recovery point (docs/DESIGN.md, "Cutting over from
//! Powertools").
//!
//! A duplicate that waits ([`IdempotentFunction::wait_for`](crate::IdempotentFunction::wait_for))
//! on a key Powertools still holds polls Powertools' record alone: the
//! layer remembers the keys it answered as held by Powertools, and its
//! [`Store::get`] reads their Powertools record until it no longer says in
//! progress; the claim is then tried again.
//!
//! The DynamoDB layout options ([`TableLayout`](crate::store::dynamodb::TableLayout),
//! `DynamoStore`'s attribute names) also read and write a table kept in
//! Powertools' own layout: its `static_pk_value` is a static partition
//! value, its `sort_key_attr` the sort key under it, its payload
//! validation hash the fingerprint attribute, its in-progress expiry the
//! lease end, its `data_attr` the response body (docs/powertools.md).
//! [`IdempotencyLayer::replay_hook_with_record`](crate::IdempotencyLayer::replay_hook_with_record)
//! and [`IdempotentFunction::replay_hook`](crate::IdempotentFunction::replay_hook)
//! are what Powertools calls its response hook, and
//! [`EventError::existing_record`](crate::event::EventError::existing_record)
//! the existing record its errors carry.

mod python;
mod records;
mod result;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use self::records::PowertoolsRecord;
pub use self::records::{PowertoolsHash, PowertoolsRecords};
use self::result::{body_as_powertools_saw_it, stored_response, Shape};
use super::{
    CheckpointRequest, ClaimOrigin, ClaimOutcome, ClaimRequest, CompleteRequest, Completion, Lease,
    RecordPage, Resolution, ResolveRequest, Settlement, Store, StoredRecord, StuckPage,
    StuckRequest, SweepCursor, SweepStore,
};
use crate::error::{Error, ErrorKind};
use crate::record::{Record, Status, StoredResponse};

/// A store that reads Powertools' records during a cut-over: `inner` holds
/// this library's records, [`PowertoolsRecords`] says where Powertools kept
/// its own and until when to read them.
///
/// ```no_run
/// # async fn run() -> Result<(), lambda_idempotency::Error> {
/// use std::time::{Duration, SystemTime};
/// use lambda_idempotency::store::powertools::{PowertoolsCutover, PowertoolsRecords};
/// use lambda_idempotency::{DynamoStore, IdempotencyLayer};
///
/// let aws = aws_config::load_from_env().await;
/// let client = aws_sdk_dynamodb::Client::new(&aws);
/// let until = SystemTime::now() + Duration::from_secs(2 * 3600);
/// let records = PowertoolsRecords::new(client.clone(), "powertools-idempotency", "orders.app.handler", until);
/// let store = PowertoolsCutover::new(DynamoStore::builder(client, "idempotency").open()?, records);
/// let layer = IdempotencyLayer::new(store);
/// # let _ = layer; Ok(()) }
/// ```
///
/// Put it outermost: the entry points describe how a request was sent
/// ([`ClaimOrigin`]) only for a store whose [`Store::reads_origin`] says
/// so, and a layer around this one must forward that answer (this crate's
/// do). A claim that reaches it without an origin while the window is open
/// is refused, rather than run without the lookup.
#[derive(Clone, Debug)]
pub struct PowertoolsCutover<S> {
    inner: S,
    records: Arc<PowertoolsRecords>,
    /// The keys this layer answered as held by Powertools, by record id, so
    /// that a duplicate waiting on one ([`Store::get`] polls) reads
    /// Powertools' record alone: this library's store has nothing of it.
    held: Arc<Mutex<HashMap<String, Held>>>,
}

/// A key Powertools held when a claim looked it up.
#[derive(Debug, Clone)]
struct Held {
    /// Its key, as Powertools hashed it.
    key: Value,
    /// The fingerprint of the request that found it held.
    fingerprint: String,
}

/// At most this many keys held by Powertools are remembered for waits; past
/// it the memory starts afresh (a wait then reads this library's store, finds
/// nothing, and claims again, which looks the key up again: slower, still
/// right).
const HELD_KEYS: usize = 1024;

impl<S> PowertoolsCutover<S> {
    /// `inner`, with the Powertools records `records` read during the
    /// cut-over: one strongly consistent `GetItem` per claim that would run
    /// the handler while the window is open, nothing after.
    pub fn new(inner: S, records: PowertoolsRecords) -> Self {
        PowertoolsCutover {
            inner,
            records: Arc::new(records),
            held: Arc::default(),
        }
    }

    /// Where Powertools' records are read, and until when.
    pub fn records(&self) -> &PowertoolsRecords {
        &self.records
    }

    /// The wrapped store.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped store, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Remember that Powertools holds the key of `lease` (`key`), for waits.
    fn remember_held(&self, lease: &Lease, key: &Value) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.len() >= HELD_KEYS {
            held.clear();
        }
        held.insert(
            lease.record_id.clone(),
            Held {
                key: key.clone(),
                fingerprint: lease.fingerprint.clone(),
            },
        );
    }

    /// While Powertools holds `record_id` (a key this layer answered as held
    /// by it): the record a wait sees, in progress until Powertools' own
    /// expiry. `None` once it no longer holds it (completed, expired or
    /// gone, or the window closed: a claim then decides), or for a key this
    /// layer never answered so.
    async fn held_by_powertools(
        &self,
        record_id: &str,
        now_ms: u64,
    ) -> Result<Option<StoredRecord>, Error> {
        let held = {
            let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            match held.get(record_id) {
                Some(found) => found.clone(),
                None => return Ok(None),
            }
        };
        let until_ms = match self.records.open(now_ms) {
            true => match Box::pin(self.records.find(&held.key, now_ms)).await? {
                Some(PowertoolsRecord::InProgress { until_ms }) => Some(until_ms),
                Some(PowertoolsRecord::Completed { .. }) | None => None,
            },
            false => None,
        };
        let Some(until_ms) = until_ms else {
            self.held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(record_id);
            return Ok(None);
        };
        Ok(Some(StoredRecord {
            record: Record {
                id: record_id.to_owned(),
                status: Status::InProgress,
                fingerprint: held.fingerprint,
                attempt: 0,
                owner: String::new(),
                lease_expires_at_ms: until_ms,
                expires_at_s: until_ms / 1000 + 1,
                response: None,
                checkpoint: None,
            },
            size_bytes: None,
            write_units: None,
        }))
    }
}

/// What Powertools hashed for a request: its key (what
/// `event_key_jmespath` selected) and, where validated, the payload; and
/// how its result is kept here.
struct PowertoolsKey {
    key: Value,
    payload: Option<Value>,
    shape: Shape,
}

impl<S: Store> PowertoolsCutover<S> {
    /// The key of `origin` as Powertools hashed it.
    fn key_of(&self, origin: &ClaimOrigin) -> PowertoolsKey {
        match origin {
            ClaimOrigin::Http { key, body } => PowertoolsKey {
                key: key.clone(),
                payload: self
                    .records
                    .validates_body()
                    .then(|| body_as_powertools_saw_it(body)),
                shape: Shape::Http,
            },
            ClaimOrigin::Event { key } => PowertoolsKey {
                key: key.clone(),
                payload: None,
                shape: Shape::Output,
            },
        }
    }

    /// Give `lease` back (fenced) so the next duplicate looks Powertools'
    /// record up again; a failure only delays that until the lease ends.
    async fn give_back(&self, lease: &Lease, why: &str) {
        match self.inner.release(lease).await {
            Ok(()) => {
                tracing::info!(record_id = %lease.record_id, reason = why, "idempotency key given back during the cut-over")
            }
            Err(err) => {
                tracing::warn!(record_id = %lease.record_id, reason = why, error = %err, "could not give the idempotency key back; it frees when its lease ends")
            }
        }
    }

    /// The claim `lease` won, decided by the Powertools record of `key`.
    async fn after_claimed(
        &self,
        lease: Lease,
        key: &PowertoolsKey,
        now_ms: u64,
    ) -> Result<ClaimOutcome, Error> {
        // Boxed: the SDK's request future is large, and held inline it would
        // grow every claim's future by as much.
        let record = match Box::pin(self.records.find(&key.key, now_ms)).await {
            Ok(record) => record,
            Err(err) => {
                self.give_back(&lease, "the Powertools record could not be read")
                    .await;
                return Err(err);
            }
        };
        match record {
            None => Ok(ClaimOutcome::Claimed(lease)),
            Some(PowertoolsRecord::InProgress { until_ms }) => {
                self.give_back(&lease, "Powertools still holds the key")
                    .await;
                self.remember_held(&lease, &key.key);
                Ok(ClaimOutcome::Exists(record_of(
                    &lease,
                    Status::InProgress,
                    until_ms,
                    None,
                )))
            }
            Some(PowertoolsRecord::Completed {
                data,
                expires_at_s,
                validation,
            }) => {
                if let Some(stored) = self.other_payload(key, validation.as_deref()) {
                    self.give_back(&lease, "the Powertools record is of another payload")
                        .await;
                    let existing = record_of(&lease, Status::Completed, 0, None);
                    return Ok(ClaimOutcome::Exists(Record {
                        fingerprint: format!("powertools:{stored}"),
                        ..existing
                    }));
                }
                let stored = match stored_response(&data, key.shape) {
                    Ok(stored) => stored,
                    Err(err) => {
                        self.give_back(&lease, "the Powertools record cannot be replayed")
                            .await;
                        return Err(err);
                    }
                };
                // Copied, so the key's later duplicates replay from this
                // library's record, kept as long as Powertools keeps its
                // own: through the second `expiration` (it expires only
                // once the clock's second is past it), so until
                // `expiration + 1`.
                let copy_expires_at_s = expires_at_s.saturating_add(1);
                if let Err(err) = self
                    .inner
                    .complete(CompleteRequest::new(&lease, &stored, copy_expires_at_s))
                    .await
                {
                    // It is Powertools' outcome, so it is replayed all the
                    // same. The claim is given back so the next duplicate
                    // looks the record up again at once; if that fails too,
                    // the record stays in progress and the takeover after
                    // its lease looks it up again.
                    tracing::warn!(record_id = %lease.record_id, error = %err, "the Powertools outcome could not be copied into this record; it is replayed all the same, and the claim given back");
                    self.give_back(&lease, "the Powertools outcome could not be copied")
                        .await;
                }
                tracing::info!(record_id = %lease.record_id, "replayed the outcome Powertools stored for this key");
                Ok(ClaimOutcome::Exists(record_of(
                    &lease,
                    Status::Completed,
                    0,
                    Some((stored, copy_expires_at_s)),
                )))
            }
        }
    }

    /// A duplicate of a record the sweeper failed, inside the window: the
    /// attempt it abandoned may have ended before its lookup decided
    /// anything (it died claiming or reading), so the sweeper's `abandoned`
    /// may stand for a key Powertools completed. Its outcome is the key's
    /// true one and is replayed (not copied: a completed record is never
    /// overwritten); one Powertools still runs answers as in progress;
    /// otherwise, or for another payload, the sweeper's answer stands. A
    /// lookup that fails fails the request, as a claim's does: the key's
    /// outcome is unknown.
    async fn over_abandoned(
        &self,
        record: Record,
        key: &PowertoolsKey,
        now_ms: u64,
    ) -> Result<ClaimOutcome, Error> {
        let found = Box::pin(self.records.find(&key.key, now_ms)).await?;
        Ok(ClaimOutcome::Exists(match found {
            Some(PowertoolsRecord::InProgress { until_ms }) => Record {
                status: Status::InProgress,
                lease_expires_at_ms: until_ms,
                response: None,
                ..record
            },
            Some(PowertoolsRecord::Completed {
                data,
                expires_at_s,
                validation,
            }) => {
                if self.other_payload(key, validation.as_deref()).is_some() {
                    return Ok(ClaimOutcome::Exists(record));
                }
                let stored = stored_response(&data, key.shape)?;
                tracing::info!(record_id = %record.id, "replayed the outcome Powertools stored for a key the sweeper had failed here");
                Record {
                    response: Some(stored),
                    expires_at_s: expires_at_s.saturating_add(1),
                    ..record
                }
            }
            None => record,
        }))
    }

    /// The payload hash Powertools validated (`validation`), when it is not
    /// the hash of this request's payload; `None` when they match or either
    /// is absent (Powertools validated nothing, or this request is not
    /// validated).
    fn other_payload<'a>(
        &self,
        key: &PowertoolsKey,
        validation: Option<&'a str>,
    ) -> Option<&'a str> {
        let stored = validation?;
        let current = self.records.hash_of(key.payload.as_ref()?);
        (stored != current).then_some(stored)
    }
}

#[async_trait::async_trait]
impl<S: Store> Store for PowertoolsCutover<S> {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
        let outcome = self.inner.claim(request).await?;
        if !self.records.open(request.now_ms) {
            return Ok(outcome);
        }
        let decides = match &outcome {
            ClaimOutcome::Claimed(_) => true,
            ClaimOutcome::Exists(record) => {
                record.fingerprint == request.fingerprint && abandoned(record)
            }
        };
        if !decides {
            return Ok(outcome);
        }
        let Some(origin) = &request.origin else {
            if let ClaimOutcome::Claimed(lease) = &outcome {
                self.give_back(lease, "the claim says nothing of how the request was sent")
                    .await;
            }
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "the cut-over from Powertools cannot look this key up: the claim carries no \
                 origin (ClaimRequest::origin); put PowertoolsCutover outermost, or make the \
                 store layers around it forward Store::reads_origin",
            ));
        };
        let key = self.key_of(origin);
        match outcome {
            ClaimOutcome::Claimed(lease) => self.after_claimed(lease, &key, request.now_ms).await,
            ClaimOutcome::Exists(record) => self.over_abandoned(record, &key, request.now_ms).await,
        }
    }

    async fn complete(&self, request: CompleteRequest<'_>) -> Result<Completion, Error> {
        self.inner.complete(request).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        self.inner.release(lease).await
    }

    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error> {
        self.inner.checkpoint(request).await
    }

    fn describe(&self) -> String {
        format!(
            "{} (cutting over from Powertools' table `{}`)",
            self.inner.describe(),
            self.records.table()
        )
    }

    /// A key Powertools holds (one this layer answered so) is read from
    /// Powertools' record alone; any other from the wrapped store.
    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        if let Some(held) = self
            .held_by_powertools(record_id, crate::clock::now_ms())
            .await?
        {
            return Ok(Some(held));
        }
        self.inner.get(record_id).await
    }

    fn reads_origin(&self) -> bool {
        true
    }

    /// The inner store's connection; Powertools' table is read through a
    /// client of the application's, usually the one the inner store uses.
    async fn warm_up(&self) -> Result<(), Error> {
        self.inner.warm_up().await
    }
}

#[async_trait::async_trait]
impl<S: SweepStore> SweepStore for PowertoolsCutover<S> {
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
        self.inner.stuck(request).await
    }
    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error> {
        self.inner.resolve_stuck(request).await
    }
    async fn settle(&self, settlement: &Settlement, resolved: &[String]) -> Result<(), Error> {
        self.inner.settle(settlement, resolved).await
    }
    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error> {
        self.inner.scan(cursor, limit).await
    }
    async fn delete_expired(&self, now_s: u64, limit: usize) -> Result<u64, Error> {
        self.inner.delete_expired(now_s, limit).await
    }
}

/// Whether `record` holds the `abandoned` problem the sweeper's `fail`
/// policy stores for a record stuck in progress.
fn abandoned(record: &Record) -> bool {
    record.status == Status::Completed
        && record
            .response
            .as_ref()
            .is_some_and(|r| r.is_problem(crate::problem::ABANDONED))
}

/// This library's record for `lease` in `status`.
fn record_of(
    lease: &Lease,
    status: Status,
    lease_expires_at_ms: u64,
    completed: Option<(StoredResponse, u64)>,
) -> Record {
    let (response, expires_at_s) = match completed {
        Some((response, expires)) => (Some(response), expires),
        None => (None, 0),
    };
    Record {
        id: lease.record_id.clone(),
        status,
        fingerprint: lease.fingerprint.clone(),
        attempt: lease.attempt,
        owner: lease.owner.clone(),
        lease_expires_at_ms,
        expires_at_s,
        response,
        checkpoint: None,
    }
}
