//! A cut-over from Powertools for AWS Lambda (Python or TypeScript), as a
//! store layer:
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
//! [`ClaimOrigin`]: what Powertools' `event_key_jmespath` selects from the
//! event as Powertools saw it ([`PowertoolsRecords::key_jmespath`]), or
//! without one the `Idempotency-Key` header's text as sent (the body's
//! value at the key pointer) for HTTP and the key's value for events. An
//! HTTP layer that reads a tenant is answered from Powertools' records only
//! when the key expression selects the tenant, or when Powertools' keys
//! were shared across tenants and the records say so
//! ([`PowertoolsRecords::shared_keys`]); otherwise every claim inside the
//! window fails, saying so. Nothing of this library's record says what an earlier
//! attempt's lookup found, except a completed record (which replays without
//! a claim): a first attempt can end between its claim and the end of the
//! cut-over (its copy or give-back failed, its lookup failed, it died
//! during the lookup), so a takeover looks up again, and so does a claim
//! that resumes from a recovery point (docs/DESIGN.md, "Cutting over from
//! Powertools").
//!
//! A duplicate that waits ([`IdempotentFunction::wait_for`](crate::IdempotentFunction::wait_for))
//! on a key Powertools still holds polls Powertools' record alone: the
//! layer remembers the keys it answered as held by Powertools (with each
//! waiting request's fingerprint), and its [`Store::get`] reads their
//! Powertools record until it no longer says in progress; then a record of
//! this library's that only marks the key (the sweeper's `abandoned`, a
//! copy too large to keep) gives way to Powertools' outcome, and a key
//! several requests wait on is claimed again by each, so that each claim
//! decides for its own request.
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

mod expression;
mod javascript;
mod json_text;
mod python;
mod records;
mod result;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use self::records::PowertoolsRecord;
pub use self::records::{
    PowertoolsHash, PowertoolsRecords, PowertoolsRuntime, DEFAULT_MAX_TIMEOUT,
};
use self::result::{stored_response, Shape};
use super::{
    CheckpointRequest, ClaimOrigin, ClaimOutcome, ClaimRequest, CompleteRequest, Completion, Lease,
    Listing, RecordPage, Resolution, ResolveRequest, Store, StoredRecord, StuckPage, StuckRequest,
    SweepCursor, SweepStore,
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

/// A key Powertools held when claims looked it up: each request that found
/// it so (its fingerprint) and the key as Powertools hashed it for it.
#[derive(Debug, Clone, Default)]
struct Held {
    requests: Vec<(String, PowertoolsKey)>,
}

/// At most this many keys held by Powertools are remembered for waits; past
/// it the memory starts afresh (a wait then reads this library's store, finds
/// nothing, and claims again, which looks the key up again: slower, still
/// right).
const HELD_KEYS: usize = 1024;

/// At most this many requests are remembered per held key; past it the
/// oldest is forgotten (its wait claims again, which looks the key up).
const HELD_REQUESTS: usize = 16;

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

    /// Remember that Powertools holds `record_id`'s key (`key`) for the
    /// request of `fingerprint`, for waits.
    fn remember_held(&self, record_id: &str, fingerprint: &str, key: &PowertoolsKey) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.len() >= HELD_KEYS && !held.contains_key(record_id) {
            held.clear();
        }
        let entry = held.entry(record_id.to_owned()).or_default();
        entry.requests.retain(|(f, _)| f != fingerprint);
        if entry.requests.len() >= HELD_REQUESTS {
            entry.requests.remove(0);
        }
        entry.requests.push((fingerprint.to_owned(), key.clone()));
    }

    fn forget_held(&self, record_id: &str) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(record_id);
    }

    fn held(&self, record_id: &str) -> Option<Held> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(record_id).cloned()
    }
}

/// What Powertools hashed for a request: its key (what
/// `event_key_jmespath` selected) and, where validated, the payload; and
/// how its result is kept here.
#[derive(Debug, Clone)]
struct PowertoolsKey {
    key: Value,
    payload: Option<Value>,
    shape: Shape,
}

impl<S: Store> PowertoolsCutover<S> {
    /// The key of `origin` as Powertools hashed it; `None` when Powertools
    /// kept no record for such a request (its key expression found no key,
    /// or raised). An HTTP request whose tenant the key does not keep
    /// apart is refused (unless the records say keys were shared).
    fn key_of(&self, origin: &ClaimOrigin) -> Result<Option<PowertoolsKey>, Error> {
        let (origin_key, event, shape) = match origin {
            ClaimOrigin::Http {
                key, event, tenant, ..
            } => {
                self.records.check_tenant_fields(tenant)?;
                (key, event, Shape::Http)
            }
            ClaimOrigin::Event { key, event } => (key, event, Shape::Output),
        };
        let key = match self.records.key_expression() {
            None => origin_key.clone(),
            Some(expression) => match expression.search(event) {
                Ok(key) if !self.records.runtime_of().missing_key(&key) => key,
                Ok(_) => {
                    tracing::debug!(expression = expression.text(), "Powertools' key expression finds no key in this request: Powertools kept no record of it");
                    return Ok(None);
                }
                Err(why) => {
                    tracing::debug!(expression = expression.text(), error = %why, "Powertools' key expression fails on this request: Powertools kept no record of it");
                    return Ok(None);
                }
            },
        };
        let payload = match self.records.validation() {
            Some(expression) => match expression.search(event) {
                Ok(payload) => Some(payload),
                Err(why) => {
                    tracing::debug!(expression = expression.text(), error = %why, "Powertools' validation expression fails on this request: Powertools kept no record of it");
                    return Ok(None);
                }
            },
            None => None,
        };
        Ok(Some(PowertoolsKey {
            key,
            payload,
            shape,
        }))
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
                self.remember_held(&lease.record_id, &lease.fingerprint, key);
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
                match self
                    .inner
                    .complete(CompleteRequest::new(&lease, &stored, copy_expires_at_s))
                    .await
                {
                    Ok(Completion::Stored) => {}
                    // The record now holds the too-large marker, not the
                    // outcome: the key's later duplicates read Powertools'
                    // record again while the window is open (a marker
                    // decides nothing, `claim`), and Powertools' record
                    // lives no longer than the window.
                    Ok(Completion::Oversized { bytes }) => {
                        tracing::warn!(record_id = %lease.record_id, bytes, "the Powertools outcome is too large for this store; it is replayed from Powertools' record while the cut-over lasts")
                    }
                    Err(err) => {
                        // It is Powertools' outcome, so it is replayed all
                        // the same. The claim is given back so the next
                        // duplicate looks the record up again at once; if
                        // that fails too, the record stays in progress and
                        // the takeover after its lease looks it up again.
                        tracing::warn!(record_id = %lease.record_id, error = %err, "the Powertools outcome could not be copied into this record; it is replayed all the same, and the claim given back");
                        self.give_back(&lease, "the Powertools outcome could not be copied")
                            .await;
                    }
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

    /// A duplicate of a record that only marks its key, inside the window:
    /// the sweeper's `abandoned` (the attempt it failed may have ended
    /// before its lookup decided anything: it died claiming or reading), or
    /// a copy of Powertools' outcome too large to keep. Powertools'
    /// outcome is the key's true one and is replayed (not copied: a
    /// completed record is never overwritten); a key Powertools still runs
    /// answers as in progress, and is remembered as held so that a wait
    /// polls Powertools' record and not the marker; otherwise, or for
    /// another payload, the marker stands. A lookup that fails fails the
    /// request, as a claim's does: the key's outcome is unknown.
    async fn over_marker(
        &self,
        record: Record,
        key: &PowertoolsKey,
        now_ms: u64,
    ) -> Result<ClaimOutcome, Error> {
        let found = Box::pin(self.records.find(&key.key, now_ms)).await?;
        Ok(ClaimOutcome::Exists(match found {
            Some(PowertoolsRecord::InProgress { until_ms }) => {
                self.remember_held(&record.id, &record.fingerprint, key);
                Record {
                    status: Status::InProgress,
                    lease_expires_at_ms: until_ms,
                    response: None,
                    ..record
                }
            }
            Some(PowertoolsRecord::Completed {
                data,
                expires_at_s,
                validation,
            }) => self.with_powertools_outcome(record, key, &data, expires_at_s, validation)?,
            None => record,
        }))
    }

    /// `record` (a marker) answering with the outcome Powertools stored,
    /// unless Powertools validated another payload.
    fn with_powertools_outcome(
        &self,
        record: Record,
        key: &PowertoolsKey,
        data: &str,
        expires_at_s: u64,
        validation: Option<String>,
    ) -> Result<Record, Error> {
        if self.other_payload(key, validation.as_deref()).is_some() {
            return Ok(record);
        }
        let stored = stored_response(data, key.shape)?;
        tracing::info!(record_id = %record.id, "replayed the outcome Powertools stored for a key this store only marks");
        Ok(Record {
            response: Some(stored),
            expires_at_s: expires_at_s.saturating_add(1),
            ..record
        })
    }

    /// What a wait reads of `record_id`, a key Powertools held for the
    /// requests in `held`: in progress while Powertools still holds it
    /// (for one waiting request; several each claim again, so each claim
    /// decides for its own payload); then this store's record, a marker
    /// of which answers with Powertools' outcome.
    async fn get_held(
        &self,
        record_id: &str,
        held: Held,
        now_ms: u64,
    ) -> Result<Option<StoredRecord>, Error> {
        let [(fingerprint, key)] = held.requests.as_slice() else {
            return Ok(None);
        };
        let found = match self.records.open(now_ms) {
            true => Box::pin(self.records.find(&key.key, now_ms)).await?,
            false => None,
        };
        match found {
            Some(PowertoolsRecord::InProgress { until_ms }) => Ok(Some(StoredRecord {
                record: Record {
                    id: record_id.to_owned(),
                    status: Status::InProgress,
                    fingerprint: fingerprint.clone(),
                    attempt: 0,
                    owner: String::new(),
                    lease_expires_at_ms: until_ms,
                    expires_at_s: until_ms / 1000 + 1,
                    response: None,
                    checkpoint: None,
                },
                size_bytes: None,
                write_units: None,
            })),
            Some(PowertoolsRecord::Completed {
                data,
                expires_at_s,
                validation,
            }) => {
                self.forget_held(record_id);
                let Some(mut stored) = self.inner.get(record_id).await? else {
                    return Ok(None);
                };
                if stored.record.fingerprint == *fingerprint && marks_only(&stored.record) {
                    stored.record = self.with_powertools_outcome(
                        stored.record,
                        key,
                        &data,
                        expires_at_s,
                        validation,
                    )?;
                }
                Ok(Some(stored))
            }
            None => {
                self.forget_held(record_id);
                self.inner.get(record_id).await
            }
        }
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
                record.fingerprint == request.fingerprint && marks_only(record)
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
        let key = match self.key_of(origin) {
            Ok(Some(key)) => key,
            // Powertools kept no record of such a request.
            Ok(None) => return Ok(outcome),
            Err(err) => {
                if let ClaimOutcome::Claimed(lease) = &outcome {
                    self.give_back(lease, "the cut-over refused the request")
                        .await;
                }
                return Err(err);
            }
        };
        match outcome {
            ClaimOutcome::Claimed(lease) => self.after_claimed(lease, &key, request.now_ms).await,
            ClaimOutcome::Exists(record) => self.over_marker(record, &key, request.now_ms).await,
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
        match self.held(record_id) {
            Some(held) => self.get_held(record_id, held, crate::clock::now_ms()).await,
            None => self.inner.get(record_id).await,
        }
    }

    /// While the window is open.
    fn reads_origin(&self) -> bool {
        self.records.open(crate::clock::now_ms())
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
    async fn finish(&self, listing: &Listing, resolved: &[String]) -> Result<(), Error> {
        self.inner.finish(listing, resolved).await
    }
    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error> {
        self.inner.scan(cursor, limit).await
    }
    async fn delete_expired(&self, now_s: u64, limit: usize) -> Result<u64, Error> {
        self.inner.delete_expired(now_s, limit).await
    }
}

/// Whether `record` only marks its key rather than holding its outcome:
/// the `abandoned` problem the sweeper's `fail` policy stores for a record
/// stuck in progress, or the too-large marker a response that did not fit
/// completes with.
fn marks_only(record: &Record) -> bool {
    record.status == Status::Completed
        && record.response.as_ref().is_some_and(|r| {
            r.is_problem(crate::problem::ABANDONED)
                || r.is_problem(crate::problem::RESPONSE_TOO_LARGE)
        })
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
