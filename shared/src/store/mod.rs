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
//!
//! The contract is in two parts: [`Store`], the hot path (claim, recovery
//! point, completion, give-back, and reading one record), is all HTTP and
//! event idempotency need; [`SweepStore`], the sweeper's and
//! operators' side (stuck records, their resolution, a listing of every
//! record, housekeeping), is optional and required only by
//! [`Sweeper`](crate::sweeper::Sweeper), the CLI and [`open_url`].
//!
//! # Implementing a store of your own
//!
//! Implement [`Store`]'s five required methods on your engine, obeying its
//! rules; report failures with [`Error`]'s public constructors
//! ([`Error::fenced`], [`Error::record_gone`], [`Error::store_unavailable`],
//! [`Error::corrupt_record`], ...). Then run the conformance suite on it
//! (`conformance::run`, feature `test-util`) in your tests: the cases every
//! engine of this crate passes. Add [`SweepStore`] (and
//! `conformance::run_sweep`) when you want the sweeper or the CLI on it.
//! `examples/custom_store.rs` of this crate is a complete one, a `Mutex`ed
//! `HashMap` with fencing by attempt and expiry by TTL, that passes the
//! suite (`cargo run -p lambda-idempotency --example custom_store
//! --features test-util`).

#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub mod dynamodb;
pub mod memory;
#[cfg(feature = "s3-offload")]
#[cfg_attr(docsrs, doc(cfg(feature = "s3-offload")))]
pub mod offload;
mod operate;
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

pub use self::operate::{
    resolver_owner, Listing, RecordPage, Resolution, Resolve, ResolveRequest, StuckPage,
    StuckRecord, StuckRequest, SweepCursor, SweepStore,
};

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
        /// The request as the Lambda event that carried it: API Gateway's
        /// (REST API or HTTP API and Function URL, payload 2.0) or the ALB's,
        /// rebuilt from what `lambda_http` kept of it.
        event: serde_json::Value,
        /// Where the request's tenant was read.
        tenant: TenantFields,
    },
    /// A call of an event function.
    Event {
        /// The value the key was taken from: a string key as a string,
        /// otherwise the JSON value (or values) the key's text is.
        key: serde_json::Value,
        /// What the function was called with, as JSON: the SQS, Kinesis or
        /// DynamoDB stream record of a batch, or the argument of a call.
        event: serde_json::Value,
    },
}

/// Where the tenant of an HTTP request was read, in the event that carried
/// it ([`ClaimOrigin::Http`]): what a layer needs to tell whether another
/// tool's keys kept tenants apart.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TenantFields {
    /// No tenant: every request shares one scope.
    None,
    /// One of these fields of the event (field names from its root), as
    /// the HTTP API and the REST API place it.
    At(Vec<Vec<String>>),
    /// Somewhere the library cannot see: a function of the application's,
    /// or Lambda's tenant id.
    Unknown,
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
#[must_use = "a `Claimed` lease dropped is never completed nor released: the record stays in progress until the lease ends"]
pub enum ClaimOutcome {
    /// This invocation holds the record now; run the handler.
    Claimed(Lease),
    /// Someone else holds it or it is completed: the record as it is.
    Exists(Record),
}

/// A record as read back ([`Store::get`], [`SweepStore::scan`]): the record
/// and what it takes in the store.
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
///    replaced is fenced if it completes late (a rule of the optional
///    [`SweepStore`] side).
///
/// This trait is all a store needs for HTTP and event idempotency. It has
/// no supertrait but `Send + Sync + Debug`: the sweeper's and operators' side
/// ([`SweepStore`]: stuck records, their resolution, a listing of every
/// record, housekeeping) is a second, optional trait, required only by the
/// sweeper, the CLI and [`open_url`].
///
/// [`Store::get`] (one record by id) is on this hot path, not the sweep
/// side, because an entry point needs it to wait: an event function whose
/// claim finds the record in progress polls it with `get` until that attempt
/// completes or its lease ends (`wait_for`), and a re-attach of an HTTP
/// request to its own attempt in progress would poll the same way. It is
/// one consistent read by key, which every engine has.
///
/// Report failures with [`Error`]'s public constructors ([`Error::fenced`],
/// [`Error::record_gone`], [`Error::store_unavailable`],
/// [`Error::corrupt_record`], [`Error::invalid_config`], ...), and check a
/// store of your own with the conformance suite (`conformance::run`, feature
/// `test-util`); `examples/custom_store.rs` is a complete one.
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
pub trait Store: Send + Sync + std::fmt::Debug {
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

    /// The record `record_id` as stored now (a strongly consistent read),
    /// `None` when absent. A record past its expiry that the store has not
    /// deleted yet is returned as it is: compare `expires_at_s` with the clock.
    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error>;

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

    /// Open the store's connection now, so the first request does not pay
    /// for it: call it once during a function's init, after the store is
    /// built and before the first invocation. On AWS the first request to
    /// DynamoDB, ElastiCache or RDS Proxy opens a TCP connection and makes
    /// a TLS handshake, which costs a first invocation far more than the
    /// request itself; made during init, it is paid while Lambda's init
    /// phase runs.
    ///
    /// What each engine sends (nothing that writes):
    /// - [`DynamoStore`](crate::DynamoStore): one eventually consistent
    ///   `GetItem` of a record id no request produces (0.5 read unit; the
    ///   function's role needs `dynamodb:GetItem` on the table, as
    ///   [`Store::get`] does), its answer ignored. The SDK keeps the
    ///   connection in its client's pool, which every clone of the client
    ///   shares;
    /// - `RedisStore` (feature `redis`): `PING` through its connection
    ///   (a store from `open()` connects on first use);
    /// - `PostgresStore` (feature `postgres`): the pool's first
    ///   connection opened and given back to the pool, no statement;
    /// - the default, for stores without a connection
    ///   ([`MemoryStore`](crate::MemoryStore)) or that keep none: nothing.
    ///
    /// A layer that wraps another store forwards the call, as it forwards
    /// [`Store::reads_origin`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::StoreUnavailable`] when the store cannot be reached
    /// (or refuses the request); a function may log it and start anyway,
    /// since its first request would then open the connection itself.
    async fn warm_up(&self) -> Result<(), Error> {
        Ok(())
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
    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        (**self).get(record_id).await
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn reads_origin(&self) -> bool {
        (**self).reads_origin()
    }
    async fn warm_up(&self) -> Result<(), Error> {
        (**self).warm_up().await
    }
}
