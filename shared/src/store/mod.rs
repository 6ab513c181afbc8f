//! Where records live: the [`Store`] trait and its implementations, one
//! module per engine.
//!
//! - [`DynamoStore`](crate::DynamoStore): the default. One conditional write per
//!   claim (a second one for a takeover), fenced completes and releases, TTL expiry.
//! - `RedisStore` (feature `redis`): Redis or Valkey, one Lua script per
//!   operation, a Redis Cluster too.
//! - `PostgresStore` (feature `postgres`): one statement per claim, the
//!   handler's own SQL committed with the completion.
//! - [`MemoryStore`](crate::MemoryStore): the same semantics in a `HashMap`, for
//!   users' unit tests and property tests.

#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub mod dynamodb;
pub mod memory;
#[cfg(feature = "s3-offload")]
#[cfg_attr(docsrs, doc(cfg(feature = "s3-offload")))]
pub mod offload;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "powertools")]
#[cfg_attr(docsrs, doc(cfg(feature = "powertools")))]
pub mod powertools;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
pub(crate) mod rules;
mod url;

pub use self::url::{
    open_url, OpenOptions, UrlStore, CREATE_SCHEMA_ENV, REDIS_CLUSTER_ENV, STORE_URL_ENV,
};
pub use crate::clock::now_ms;
use crate::error::{Error, ErrorKind};
pub use crate::record::{
    Checkpoint, Record, Status, StoredBody, StoredResponse, MAX_BODY_BYTES, WRITE_UNIT_BYTES,
};

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
    /// How the request was sent, before it was hashed: not written, read
    /// by a store layer that migrates from another tool
    /// ([`Store::reads_origin`]). The entry points fill it only for a
    /// store that reads it; `None` otherwise.
    pub origin: Option<ClaimOrigin>,
}

/// How the request behind a claim was sent, before this library hashed it
/// into a record id and a fingerprint: what a store layer needs to find the
/// same request in another tool's records (a cut-over from another
/// idempotency library hashes the key as the caller sent it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimOrigin {
    /// An HTTP request.
    Http {
        /// The key as sent: the header's text (quotes of a structured-field
        /// string included), or the JSON value at the body's key pointer.
        key: serde_json::Value,
        /// The body as sent.
        body: StoredBody,
    },
    /// A call of an event function.
    Event {
        /// The value the key was taken from: a string key as a string,
        /// otherwise the JSON value (or values) the key's text is.
        key: serde_json::Value,
    },
}

/// Proof of a successful claim: what complete and release are fenced on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The record's id.
    pub record_id: String,
    /// The owner token written by the claim.
    pub owner: String,
    /// The fingerprint of the request that holds the claim (a takeover needs
    /// the same one); keys derived from the claim bind it.
    pub fingerprint: String,
    /// The fencing token this claim obtained.
    pub attempt: u64,
    /// The last recovery point, when this claim took over an abandoned attempt
    /// that had committed one.
    pub recovered: Option<Checkpoint>,
}

#[cfg(test)]
impl Lease {
    /// Attempt 1 of record `r` by owner `o`, for unit tests.
    pub(crate) fn for_tests() -> Self {
        Self {
            record_id: "r".into(),
            owner: "o".into(),
            fingerprint: "f".into(),
            attempt: 1,
            recovered: None,
        }
    }
}

/// What [`Store::complete`] stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The response, replayed from now on.
    Stored,
    /// The response could not fit the store's limit even compressed; the
    /// record completed with the [`RESPONSE_TOO_LARGE`](crate::problem::RESPONSE_TOO_LARGE)
    /// problem instead, which replays from now on (the handler never re-runs).
    Oversized {
        /// Size of the response as it would have been stored, in bytes.
        bytes: usize,
    },
}

/// Stores keep responses up to this many bytes (body after compression plus
/// headers) by default: DynamoDB items are limited to 400 KB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 350_000;

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This invocation holds the record now; run the handler.
    Claimed(Lease),
    /// Someone else holds it or it is completed: the record as it is.
    Exists(Record),
}

/// A record stuck in progress, as a store's listing of them shows it: what
/// the fenced resolution of it is conditioned on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckRecord {
    /// The record id (a hash; safe to log).
    pub id: String,
    /// Its fencing token when found.
    pub attempt: u64,
    /// Its owner when found.
    pub owner: String,
    /// When its lease ended, epoch ms.
    pub lease_expires_at_ms: u64,
    /// True when the listing saw a recovery point (a hint: the resolution
    /// checks again).
    pub has_checkpoint: bool,
}

/// Where a listing of stuck records goes on: opaque to the sweeper, each
/// store encodes its own position in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepCursor(pub(crate) String);

/// What a listing must remember once its sweep is over (see
/// [`SweepStore::settle`]): opaque, made by the store that listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement(pub(crate) String);

/// One page of a listing of stuck records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StuckPage {
    /// The stuck records of this page.
    pub records: Vec<StuckRecord>,
    /// Where the listing goes on; `None` when it is complete.
    pub next: Option<SweepCursor>,
    /// Reads of the store this page took that succeeded.
    pub reads: u64,
    /// Reads that failed (logged); the part of the listing they covered is
    /// skipped, for the next sweep.
    pub failed_reads: u64,
    /// The listing stopped before the end of what it reads (a stream backlog
    /// larger than one listing reads): the next listing goes on from there.
    pub unread: bool,
    /// For listings that keep their place between sweeps (DynamoDB's
    /// stream): hand it to [`SweepStore::settle`] when the sweep is over.
    pub settlement: Option<Settlement>,
    /// The listing found records trimmed before it read them (DynamoDB's
    /// stream, behind by more than its 24-hour retention): records stuck
    /// then are caught up by a bounded scan over the next sweeps.
    pub trimmed: bool,
}

/// A record as read back for an operator ([`SweepStore::get`], [`SweepStore::scan`]):
/// the record and what it takes in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// The record, decoded.
    pub record: Record,
    /// Its size as the store counts it (DynamoDB: the item size its billing
    /// uses, attribute names included), in bytes; `None` where the store has
    /// no such measure.
    pub size_bytes: Option<u64>,
    /// What one write of it costs (DynamoDB: write units, 1 per KB rounded
    /// up); `None` where the store does not bill by units.
    pub write_units: Option<u64>,
}

/// One page of a full listing of the records ([`SweepStore::scan`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordPage {
    /// The records of this page.
    pub records: Vec<StoredRecord>,
    /// Where the listing goes on; `None` when it is complete.
    pub next: Option<SweepCursor>,
    /// Items of this page that are not idempotency records (another
    /// application's items in a shared table, or corrupt ones; logged).
    pub skipped: u64,
}

/// How to resolve a stuck record.
#[derive(Debug, Clone, Copy)]
pub enum Resolve<'a> {
    /// Delete it so the next retry runs again, unless it holds a recovery
    /// point (then it is left for that retry to resume).
    Release,
    /// Complete it with `response`, kept until `expires_at_s`, under a new
    /// owner ([`resolver_owner`]) so the attempt it replaces is fenced if it
    /// completes late; a record already past its own expiry is deleted
    /// instead (it is absent by definition), never brought back.
    Fail {
        /// What every retry gets from now on.
        response: &'a StoredResponse,
        /// Until when, epoch seconds.
        expires_at_s: u64,
    },
}

/// What resolving a stuck record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// Deleted.
    Released,
    /// Completed with the terminal problem response.
    Failed,
    /// Left for the next retry to resume from its recovery point.
    Resumable,
    /// Not touched: re-claimed, completed or resolved by someone else meanwhile.
    Fenced,
}

/// Everything a completion ([`Store::complete`]) writes: the lease it is
/// fenced on, the response every duplicate replays from now on, when the
/// record expires, and the handler's deferred writes (usually none).
#[derive(Debug)]
pub struct CompleteRequest<'a> {
    /// The claim being completed: the write is fenced on it.
    pub lease: &'a Lease,
    /// The outcome to store and replay.
    pub response: &'a StoredResponse,
    /// When the completed record expires, epoch seconds.
    pub expires_at_s: u64,
    /// Writes committed in the same transaction as the completion (of the
    /// store's own kind, see [`DeferredWrites`]); stores without
    /// transactions refuse any ([`no_transactions`]).
    pub writes: DeferredWrites,
}

impl<'a> CompleteRequest<'a> {
    /// Complete `lease` with `response`, kept until `expires_at_s` (epoch
    /// seconds), with no deferred writes.
    pub fn new(lease: &'a Lease, response: &'a StoredResponse, expires_at_s: u64) -> Self {
        Self {
            lease,
            response,
            expires_at_s,
            writes: DeferredWrites::new(),
        }
    }

    /// The same completion, committing `writes` with it.
    pub fn with_writes(self, writes: DeferredWrites) -> Self {
        Self { writes, ..self }
    }
}

/// Everything a recovery point ([`Store::checkpoint`]) writes: the lease
/// it is fenced on, the recovery point, and the handler's deferred writes
/// that commit with it (usually none).
#[derive(Debug)]
pub struct CheckpointRequest<'a> {
    /// The claim the recovery point belongs to: the write is fenced on it.
    pub lease: &'a Lease,
    /// The recovery point to commit.
    pub checkpoint: &'a Checkpoint,
    /// Writes committed in the same transaction (of the store's own kind,
    /// see [`DeferredWrites`]); stores without transactions refuse any
    /// ([`no_transactions`]).
    pub writes: DeferredWrites,
}

impl<'a> CheckpointRequest<'a> {
    /// Commit `checkpoint` under `lease`, with no deferred writes.
    pub fn new(lease: &'a Lease, checkpoint: &'a Checkpoint) -> Self {
        Self {
            lease,
            checkpoint,
            writes: DeferredWrites::new(),
        }
    }

    /// The same recovery point, committing `writes` with it.
    pub fn with_writes(self, writes: DeferredWrites) -> Self {
        Self { writes, ..self }
    }
}

/// One page of a listing of stuck records ([`SweepStore::stuck`]): the
/// records in progress whose lease ended before `cutoff_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckRequest {
    /// Leases that ended before this (epoch ms) count as stuck.
    pub cutoff_ms: u64,
    /// Where the listing goes on (`None`: the start).
    pub cursor: Option<SweepCursor>,
    /// At most this many records.
    pub limit: usize,
    /// When the sweep must be done (epoch ms), if it must: a store whose one
    /// listing can read for long (DynamoDB's stream) stops reading there and
    /// returns what it read, with [`StuckPage::unread`] set, so the sweep
    /// resolves that and saves its progress instead of losing the whole
    /// listing to its deadline. Other stores list as they would without.
    pub deadline_ms: Option<u64>,
}

impl StuckRequest {
    /// The first page of at most `limit` records whose lease ended before
    /// `cutoff_ms`, with no deadline.
    pub fn new(cutoff_ms: u64, limit: usize) -> Self {
        Self {
            cutoff_ms,
            cursor: None,
            limit,
            deadline_ms: None,
        }
    }

    /// The page that starts at `cursor` (`None`: the start).
    pub fn at(self, cursor: Option<SweepCursor>) -> Self {
        Self { cursor, ..self }
    }

    /// The same listing, done by `deadline_ms` (epoch ms).
    pub fn by(self, deadline_ms: u64) -> Self {
        Self {
            deadline_ms: Some(deadline_ms),
            ..self
        }
    }
}

/// A resolution of one stuck record ([`SweepStore::resolve_stuck`]).
#[derive(Debug, Clone, Copy)]
pub struct ResolveRequest<'a> {
    /// The record as the listing saw it: the write is fenced on it (same
    /// attempt and owner, still in progress).
    pub record: &'a StuckRecord,
    /// What to do with it.
    pub how: Resolve<'a>,
    /// The listing's cutoff: the record's lease must still have ended before
    /// it (epoch ms).
    pub cutoff_ms: u64,
    /// The sweep's clock (epoch ms), which tells whether the record expired.
    pub now_ms: u64,
}

/// Storage for idempotency records: every implementation obeys these rules
/// (docs/DESIGN.md section 4):
///
/// 1. [`Store::claim`] succeeds when the record is absent, expired
///    (`expires_at` in the past), or in progress with an expired lease and the
///    same fingerprint (takeover). A successful claim increments `attempt`.
///    Otherwise it returns the existing record in the same round trip.
/// 2. [`Store::complete`] and [`Store::release`] succeed only while the record
///    is in progress under the same `attempt` and `owner`; otherwise they fail
///    with [`ErrorKind::Fenced`] and write nothing
///    (a completion that finds no record at all fails with
///    [`ErrorKind::RecordGone`]: nothing is
///    stored, a duplicate runs again).
/// 3. A claim that finds the record held by its own `owner` (the SDK retried a
///    write whose response was lost) counts as claimed.
/// 4. A release never deletes a recovery point: a record holding one is kept
///    with its lease ended, for the next retry to take over and resume.
/// 5. A resolution of a stuck record ([`SweepStore::resolve_stuck`]) that
///    completes it writes a new owner ([`resolver_owner`]), so the attempt it
///    replaced is fenced if it completes late.
///
/// A store is also a [`SweepStore`]: the sweeper's and operators' side
/// (listing stuck records, resolving them, reading records), kept in a trait
/// of its own so each engine keeps that side in a file of its own. Call
/// those methods with the trait in scope (`use lambda_idempotency::store::SweepStore`).
///
/// ```
/// use lambda_idempotency::{MemoryStore, Store, store::{ClaimOutcome, ClaimRequest, CompleteRequest, StoredBody, StoredResponse}};
///
/// # tokio_test_block_on(async {
/// let store = MemoryStore::new();
/// let request = ClaimRequest {
///     record_id: "r1".into(), fingerprint: "fp".into(), owner: "me".into(),
///     now_ms: 1_000, lease_expires_at_ms: 31_000, expires_at_s: 3_600, origin: None,
/// };
/// let ClaimOutcome::Claimed(lease) = store.claim(&request).await? else { unreachable!() };
/// assert_eq!(lease.attempt, 1);
/// let response = StoredResponse::new(200, vec![], StoredBody::Empty);
/// store.complete(CompleteRequest::new(&lease, &response, 3_600)).await?;
///
/// let again = ClaimRequest { owner: "someone else".into(), ..request };
/// assert!(matches!(store.claim(&again).await?, ClaimOutcome::Exists(_)));
/// # Ok::<(), lambda_idempotency::Error>(()) });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f) }
/// ```
#[async_trait::async_trait]
pub trait Store: SweepStore + Send + Sync + std::fmt::Debug {
    /// Try to claim a record, in one round trip.
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error>;

    /// Store the outcome and mark the record completed, if the request's
    /// lease is still ours, committing its deferred writes in the same
    /// transaction. Stores without transactions fail with
    /// [`ErrorKind::InvalidConfig`] when there are writes
    /// ([`no_transactions`]).
    async fn complete(&self, request: CompleteRequest<'_>) -> Result<Completion, Error>;

    /// Give the record up so the next retry runs, if the lease is still
    /// ours (rule 4): delete it, or, when it holds a recovery point (one
    /// this attempt committed or one it inherited), keep it with its lease
    /// ended now, so the next retry takes it over and resumes from that
    /// point instead of redoing committed work. A record already gone is
    /// released.
    async fn release(&self, lease: &Lease) -> Result<(), Error>;

    /// Commit a recovery point, if the request's lease is still ours,
    /// with its deferred writes (of this store's own kind, see
    /// [`DeferredWrites`]) in one transaction: an atomic phase. Either the
    /// writes and the recovery point commit together under this lease, or
    /// neither does. Stores without transactions fail with
    /// [`ErrorKind::InvalidConfig`] when there are writes
    /// ([`no_transactions`]).
    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error>;

    /// What this store is, for messages (`DynamoDB table `idempotency``).
    fn describe(&self) -> String {
        format!("{self:?}")
    }

    /// Does this store read [`ClaimRequest::origin`]? The entry points
    /// describe how a request was sent (which costs a copy of its body)
    /// only for a store that says so. A layer that wraps another store
    /// forwards its answer, so a layer beneath it still gets the origin.
    fn reads_origin(&self) -> bool {
        false
    }
}

/// Refuse `writes` for a store without transactions: `Ok` when there are
/// none, otherwise [`ErrorKind::InvalidConfig`] naming the store and what the
/// writes came with (`what`: "a completion", "a recovery point").
pub fn no_transactions(
    store: &(impl Store + ?Sized),
    writes: &DeferredWrites,
    what: &str,
) -> Result<(), Error> {
    if writes.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::InvalidConfig,
        format!(
            "{} cannot commit deferred writes with {what} (it has no transactions); \
             use a DynamoStore or a PostgresStore",
            store.describe()
        ),
    ))
}

/// The sweeper's and operators' side of a [`Store`]: find records stuck in
/// progress and resolve them (the sweeper, the `lambda-idempotency` command
/// of package `lambda-idempotency-cli`), read records
/// back (`get`, `scan`), and the engine's housekeeping.
#[async_trait::async_trait]
pub trait SweepStore: Send + Sync {
    /// One page of the records in progress whose lease ended before the
    /// request's cutoff, from its cursor, at most its limit. Never a scan of
    /// every record: stores keep stuck records findable on their own
    /// (DynamoDB: a sparse index, or the table's stream).
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error>;

    /// Resolve the request's record as its `how` says, with one write fenced
    /// on what the listing saw (same attempt and owner, still in progress,
    /// lease ended before the cutoff); its `now_ms` tells whether the record
    /// expired.
    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error>;

    /// The sweep of a listing is over: `resolved` are the ids of the listed
    /// records it resolved (any [`Resolution`]). A store whose listing keeps
    /// its place between sweeps (DynamoDB's stream) saves where the next
    /// listing starts, so records resolved here are not read again and those
    /// left (still live, not reached, failed) are. Listings that keep no
    /// place (an index, memory) have nothing to save.
    async fn settle(&self, settlement: &Settlement, resolved: &[String]) -> Result<(), Error> {
        let _ = (settlement, resolved);
        Ok(())
    }

    /// The record `record_id` as stored now (a strongly consistent read),
    /// `None` when absent. A record past its expiry that the store has not
    /// deleted yet is returned as it is: compare `expires_at_s` with the clock.
    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error>;

    /// One page of every record, from `cursor` (`None`: the start), at most
    /// `limit`, in no particular order. This reads the whole store
    /// (DynamoDB: a `Scan`, billed for every item read); it is for operators
    /// who ask for it, never for the sweeper.
    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error>;

    /// Housekeeping a schedule runs (the sweeper's): delete up to `limit`
    /// records expired before `now_s` (epoch seconds) that the engine keeps
    /// until someone deletes them, and say how many went; call it until it
    /// returns less than `limit`. Claims treat expired records as absent
    /// already, so this only gives their space back. Nothing to do (0) where
    /// the engine expires records itself: DynamoDB's TTL, Redis key expiry,
    /// the in-memory store's claims; PostgreSQL deletes its expired rows.
    async fn delete_expired(&self, now_s: u64, limit: usize) -> Result<u64, Error> {
        let _ = (now_s, limit);
        Ok(0)
    }
}

/// Writes a handler hands to its completion or to its next recovery point
/// ([`IdempotencyContext::defer_write`](crate::IdempotencyContext::defer_write),
/// [`IdempotencyContext::commit_with_writes`](crate::IdempotencyContext::commit_with_writes)),
/// of the kind the store commits in a transaction (for
/// [`DynamoStore`](crate::DynamoStore): `TransactWriteItem`s). Opaque, so the
/// [`Store`] trait names no engine's types.
#[derive(Default)]
pub struct DeferredWrites(Vec<Box<dyn std::any::Any + Send + Sync>>);

impl DeferredWrites {
    /// No writes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one write.
    pub fn push<W: std::any::Any + Send + Sync>(&mut self, write: W) {
        self.0.push(Box::new(write));
    }

    /// How many writes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The writes as `W`, in order; the error names the first that is not.
    pub fn into_typed<W: std::any::Any>(self) -> Result<Vec<W>, Error> {
        self.0
            .into_iter()
            .enumerate()
            .map(|(i, write)| {
                write.downcast::<W>().map(|w| *w).map_err(|_| {
                    Error::new(
                        ErrorKind::InvalidConfig,
                        format!(
                            "deferred write {i} is not a {}; this store commits only those",
                            std::any::type_name::<W>()
                        ),
                    )
                })
            })
            .collect()
    }
}

impl std::fmt::Debug for DeferredWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeferredWrites({})", self.0.len())
    }
}

#[async_trait::async_trait]
impl<T: Store + ?Sized> Store for std::sync::Arc<T> {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
        (**self).claim(request).await
    }
    async fn complete(&self, request: CompleteRequest<'_>) -> Result<Completion, Error> {
        (**self).complete(request).await
    }
    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        (**self).release(lease).await
    }
    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error> {
        (**self).checkpoint(request).await
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn reads_origin(&self) -> bool {
        (**self).reads_origin()
    }
}

#[async_trait::async_trait]
impl<T: SweepStore + ?Sized> SweepStore for std::sync::Arc<T> {
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
        (**self).stuck(request).await
    }
    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error> {
        (**self).resolve_stuck(request).await
    }
    async fn settle(&self, settlement: &Settlement, resolved: &[String]) -> Result<(), Error> {
        (**self).settle(settlement, resolved).await
    }
    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        (**self).get(record_id).await
    }
    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error> {
        (**self).scan(cursor, limit).await
    }
    async fn delete_expired(&self, now_s: u64, limit: usize) -> Result<u64, Error> {
        (**self).delete_expired(now_s, limit).await
    }
}

/// The owner a resolution writes when it completes a stuck record in place
/// of `owner` (rule 5): not `owner`, so that attempt's late completion is
/// fenced instead of taken for its own write coming back; derived, so every
/// store (a Lua script, an SQL statement) writes the same.
pub fn resolver_owner(owner: &str) -> String {
    format!("{RESOLVER_OWNER_PREFIX}{owner}")
}

/// What [`resolver_owner`] puts before the owner it replaces.
pub(crate) const RESOLVER_OWNER_PREFIX: &str = "resolved:";
