//! The sweeping and operating side of the store contract ([`SweepStore`]):
//! listing records stuck in progress, resolving them, listing every record,
//! the engine's housekeeping, and the types of those requests and answers.
//! Optional for a store of your own: the hot path ([`Store`]) is enough for
//! HTTP and event idempotency; the sweeper and the CLI require this side.

use super::{Store, StoredRecord, StoredResponse};
use crate::error::Error;

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

impl SweepCursor {
    /// A position in a listing, as the store that lists encodes it (a store
    /// of your own: the last id listed, an offset, a page token); the
    /// sweeper and the CLI hand it back unchanged.
    pub fn new(position: impl Into<String>) -> Self {
        Self(position.into())
    }

    /// The position as the store encoded it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A listing's own state once its pages are read, for
/// [`SweepStore::finish`]: opaque to the sweeper, made and read by the store
/// that listed (a store whose listing keeps its place between sweeps saves
/// it from this; one that keeps none leaves it empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing(pub(crate) String);

impl Listing {
    /// What a store's listing must remember until [`SweepStore::finish`],
    /// encoded as that store likes.
    pub fn new(state: impl Into<String>) -> Self {
        Self(state.into())
    }

    /// The state as the store encoded it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

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
    /// The listing stopped before the end of what it reads (its budget or
    /// its deadline): the next listing goes on from there.
    pub incomplete: bool,
    /// For listings with state of their own: hand it to
    /// [`SweepStore::finish`] when the sweep is over.
    pub listing: Option<Listing>,
    /// The listing cannot keep its bound right now: it found records it may
    /// have missed and is catching up on them, or it could not cover the
    /// whole store within its period at its budget. Reported
    /// ([`SweepSummary::behind`](crate::sweeper::SweepSummary::behind)) for
    /// an alarm; the sweep goes on.
    pub behind: bool,
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
    /// listing can read for long stops reading there and returns what it
    /// read, with [`StuckPage::incomplete`] set, so the sweep resolves that
    /// and the store keeps its progress instead of losing the whole listing
    /// to its deadline. Other stores list as they would without.
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

/// The sweeper's and operators' side of a store, optional: find records
/// stuck in progress and resolve them (the sweeper, the `lambda-idempotency`
/// command of package `lambda-idempotency-cli`), list every record
/// (`scan`), and the engine's housekeeping.
///
/// A [`Store`] alone is enough for HTTP and event idempotency; implement
/// this too for [`Sweeper`](crate::sweeper::Sweeper), the CLI, or stores
/// opened from a URL ([`open_url`](super::open_url)), which require it.
/// Every engine of this crate implements both. Call these methods with the
/// trait in scope (`use lambda_idempotency::store::SweepStore`).
///
/// Rule 5 of [`Store`] is this trait's: a resolution of a stuck record
/// ([`SweepStore::resolve_stuck`]) that completes it writes a new owner
/// ([`resolver_owner`]), so the attempt it replaced is fenced if it
/// completes late. The sweep half of the conformance suite
/// (`conformance::run_sweep`, feature `test-util`) checks a store of your
/// own against it.
#[async_trait::async_trait]
pub trait SweepStore: Store {
    /// One page of the records in progress whose lease ended before the
    /// request's cutoff, from its cursor, at most its limit. Never a scan of
    /// every record on every call: stores keep stuck records findable on
    /// their own (an index, or what the engine logs of its changes, with a
    /// budgeted pass over the whole store behind it).
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error>;

    /// Resolve the request's record as its `how` says, with one write fenced
    /// on what the listing saw (same attempt and owner, still in progress,
    /// lease ended before the cutoff); its `now_ms` tells whether the record
    /// expired.
    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error>;

    /// The sweep of a listing is over: `resolved` are the ids of the listed
    /// records it resolved (any [`Resolution`]). A store whose listing keeps
    /// its place between sweeps saves where the next listing starts, so
    /// records resolved here are not read again and those left (still live,
    /// not reached, failed) are. A listing that keeps no place (an index,
    /// memory) has nothing to save: `Ok(())`. A wrapper forwards it.
    async fn finish(&self, listing: &Listing, resolved: &[String]) -> Result<(), Error>;

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
    /// A wrapper forwards it.
    async fn delete_expired(&self, now_s: u64, limit: usize) -> Result<u64, Error>;
}

#[async_trait::async_trait]
impl<T: SweepStore + ?Sized> SweepStore for std::sync::Arc<T> {
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
        (**self).stuck(request).await
    }
    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error> {
        (**self).resolve_stuck(request).await
    }
    async fn finish(&self, listing: &Listing, resolved: &[String]) -> Result<(), Error> {
        (**self).finish(listing, resolved).await
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
