//! The sweeper: find in-progress records whose lease ran out long ago (the
//! invocation crashed, timed out, or its client never retried) and resolve
//! them, by releasing them or failing them for good ([`SweepPolicy`]).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, ErrorKind};
use crate::record::StoredResponse;
use crate::store::{Resolution, StuckRecord};
use crate::store::{Resolve, ResolveRequest, Store, StuckRequest, SweepCursor, SweepStore};

/// What the sweeper does with a stuck record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepPolicy {
    /// Delete it, so the next retry runs the handler again.
    Release,
    /// Store a terminal `500` problem that replays to every retry.
    Fail,
}

impl std::str::FromStr for SweepPolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "release" => Ok(SweepPolicy::Release),
            "fail" => Ok(SweepPolicy::Fail),
            other => Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("sweep policy {other:?} is unknown: use `release` or `fail`"),
            )),
        }
    }
}

/// Counts of one sweep; serialised as the sweeper Lambda's output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepSummary {
    /// Stuck records found.
    pub found: u64,
    /// Records deleted.
    pub released: u64,
    /// Records completed with the terminal problem.
    pub failed: u64,
    /// Records skipped because their condition no longer held.
    pub fenced: u64,
    /// Records left for their next retry to resume.
    pub resumable: u64,
    /// Reads of the store's listing that succeeded, as the store counts
    /// them ([`StuckPage::reads`](crate::store::StuckPage::reads)).
    pub pages: u64,
    /// Reads or writes that failed (throttling, network); each was logged,
    /// the sweep went on, and the next sweep retries what they left.
    pub errors: u64,
    /// True when records may be left unresolved for the next sweep: the sweep
    /// stopped before its deadline, or part of the listing could not be read.
    pub remaining: bool,
    /// True when the store's listing cannot keep its bound right now
    /// ([`StuckPage::behind`](crate::store::StuckPage::behind)): it found
    /// records it may have missed and is catching up on them, or it cannot
    /// cover the whole store within its period at its budget. The records
    /// are still found, later than the bound says: an alarm's cue to run
    /// the sweeper longer or more often.
    pub behind: bool,
    /// Expired records the engine's housekeeping deleted
    /// ([`Sweeper::housekeeping`]): PostgreSQL's rows; always 0 where the
    /// engine expires records itself, or with the housekeeping off.
    pub expired_deleted: u64,
    /// True when the housekeeping failed (counted in `errors`, logged with
    /// the store's error): the expired records left stay, harmless to
    /// idempotency since claims treat them as absent, until a later sweep
    /// deletes them.
    pub housekeeping_failed: bool,
}

impl SweepSummary {
    /// The counts as an EMF metric line (namespace `LambdaIdempotency`).
    pub fn emf(&self, function: &str, timestamp_ms: u64) -> String {
        crate::metrics::emf_line(
            "LambdaIdempotency",
            &[("Function", function)],
            &[
                ("SweepFound", self.found),
                ("SweepReleased", self.released),
                ("SweepFailed", self.failed),
                ("SweepFenced", self.fenced),
                ("SweepResumable", self.resumable),
                ("SweepPages", self.pages),
                ("SweepErrors", self.errors),
                ("SweepRemaining", u64::from(self.remaining)),
                ("SweepBehind", u64::from(self.behind)),
                ("SweepExpiredDeleted", self.expired_deleted),
            ],
            timestamp_ms,
        )
    }
}

/// Finds and resolves the stuck records of a [`SweepStore`].
///
/// The sweeper's policy, loop, deadline and summary are the same for every
/// store: finding and resolving stuck records are store capabilities
/// ([`SweepStore::stuck`], [`SweepStore::resolve_stuck`]), so the sweeper runs on a
/// [`MemoryStore`](crate::store::memory::MemoryStore) in unit tests as on DynamoDB. How a
/// store finds its stuck records is its own: after each sweep it is told
/// what was resolved ([`SweepStore::finish`]), and a listing that keeps its
/// place between sweeps saves it then (on DynamoDB see
/// [`DynamoStoreBuilder`](crate::store::dynamodb::DynamoStoreBuilder) for the
/// ways it lists). Each stuck
/// record is resolved with a **fenced** conditional write (same `attempt`
/// and `owner`, still in progress, lease still expired), so a record
/// re-claimed between the listing and the write is left alone and counted as
/// `fenced`, and two sweeps running at once resolve each record once.
///
/// - [`SweepPolicy::Release`] deletes the record: the next retry runs the handler.
/// - [`SweepPolicy::Fail`] stores a terminal `500` problem
///   ([`ABANDONED`](crate::problem::ABANDONED)) that replays from then on.
///
/// Records holding a recovery point are left for the next retry to resume
/// (counted as `resumable`) unless the policy is `Fail`.
///
/// ```no_run
/// use std::time::Duration;
/// use lambda_idempotency::{DynamoStore, sweeper::{SweepPolicy, Sweeper}};
///
/// # async fn f(store: DynamoStore) -> Result<(), lambda_idempotency::Error> {
/// let sweeper = Sweeper::new(store).policy(SweepPolicy::Release).grace(Duration::from_secs(60));
/// let summary = sweeper.sweep(None).await;
/// println!("found {}, released {}, errors {}", summary.found, summary.released, summary.errors);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Sweeper {
    store: Arc<dyn SweepStore>,
    policy: SweepPolicy,
    grace: Duration,
    page_size: usize,
    stop_before: Duration,
    failed_expires_after: Duration,
    concurrency: usize,
    housekeeping: bool,
}

/// Records deleted per [`SweepStore::delete_expired`] call of the
/// housekeeping: one bounded statement, short enough to leave the sweep's
/// deadline in reach.
const EXPIRED_BATCH: usize = 500;

impl Sweeper {
    /// Defaults: release, 60 s grace, pages of 100, stop 2 s before the
    /// deadline, failed records replay for 24 hours, no housekeeping.
    pub fn new(store: impl SweepStore + 'static) -> Self {
        Sweeper {
            store: Arc::new(store),
            policy: SweepPolicy::Release,
            grace: Duration::from_secs(60),
            page_size: 100,
            stop_before: Duration::from_secs(2),
            failed_expires_after: Duration::from_secs(24 * 3600),
            concurrency: 16,
            housekeeping: false,
        }
    }

    /// What this sweeper resolves records of, for messages.
    pub fn store_description(&self) -> String {
        self.store.describe()
    }

    /// The store this sweeper resolves records of.
    pub fn store(&self) -> &dyn SweepStore {
        self.store.as_ref()
    }

    /// How many records of a page are resolved at once (default 16).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// What to do with stuck records.
    pub fn policy(mut self, policy: SweepPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How long after its lease ended a record counts as stuck.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Records per listing page (1 to 1000).
    pub fn page_size(mut self, size: usize) -> Self {
        self.page_size = size.clamp(1, 1000);
        self
    }

    /// How long before the deadline the sweep stops starting new pages.
    pub fn stop_before(mut self, margin: Duration) -> Self {
        self.stop_before = margin;
        self
    }

    /// How long a record failed by the sweeper replays its problem.
    pub fn failed_expires_after(mut self, ttl: Duration) -> Self {
        self.failed_expires_after = ttl;
        self
    }

    /// Whether each sweep, once its stuck records are resolved, also runs
    /// the engine's housekeeping (default `false`): deleting the expired
    /// records an engine keeps until someone deletes them (PostgreSQL's
    /// rows; [`SweepStore::delete_expired`]), see
    /// [`delete_expired`](Self::delete_expired). Reported as
    /// [`SweepSummary::expired_deleted`] and
    /// [`SweepSummary::housekeeping_failed`]. Where the engine expires
    /// records itself (DynamoDB's TTL, Redis key expiry, the in-memory store)
    /// it costs no request.
    pub fn housekeeping(mut self, on: bool) -> Self {
        self.housekeeping = on;
        self
    }

    fn cutoff(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX))
    }

    /// Resolve one stuck record as the policy says, with one fenced write
    /// (see [`SweepStore::resolve_stuck`]): `release` deletes it unless it holds a
    /// recovery point; `fail` stores the `abandoned` problem (a 500), or deletes a
    /// record already past its own expiry (never brings it back).
    pub async fn resolve(&self, record: &StuckRecord, now_ms: u64) -> Result<Resolution, Error> {
        self.resolve_before(record, now_ms, self.cutoff(now_ms))
            .await
    }

    /// Like [`resolve`](Self::resolve), whether or not the lease is over:
    /// for an operator who knows the invocation holding `record` is gone
    /// (the CLI's `--force`). Still fenced on the attempt and owner `record`
    /// was read with, so a newer attempt, a completion or another
    /// resolution in between wins and nothing is written.
    pub async fn resolve_live(
        &self,
        record: &StuckRecord,
        now_ms: u64,
    ) -> Result<Resolution, Error> {
        self.resolve_before(record, now_ms, u64::MAX).await
    }

    async fn resolve_before(
        &self,
        record: &StuckRecord,
        now_ms: u64,
        cutoff_ms: u64,
    ) -> Result<Resolution, Error> {
        if record.has_checkpoint && self.policy == SweepPolicy::Release {
            return Ok(Resolution::Resumable);
        }
        let problem = abandoned_response();
        let how = match self.policy {
            SweepPolicy::Release => Resolve::Release,
            SweepPolicy::Fail => Resolve::Fail {
                response: &problem,
                expires_at_s: (now_ms / 1000).saturating_add(self.failed_expires_after.as_secs()),
            },
        };
        self.store
            .resolve_stuck(ResolveRequest {
                record,
                how,
                cutoff_ms,
                now_ms,
            })
            .await
    }

    /// Sweep the store's listing, page by page, until done or until `stop_before`
    /// ahead of `deadline_ms` (epoch ms; `None` = no deadline).
    ///
    /// A failed read or write does not end the sweep: it is logged and
    /// counted in [`SweepSummary::errors`] (a part of the listing that could
    /// not be read is left for the next sweep, which sets `remaining`), so one
    /// throttled request costs one record, not the whole run.
    ///
    /// With [`housekeeping`](Self::housekeeping) on, the time left after
    /// the stuck records also deletes expired records; a failure there is
    /// counted in `errors` and sets `housekeeping_failed`.
    pub async fn sweep(&self, deadline_ms: Option<u64>) -> SweepSummary {
        let mut summary = SweepSummary::default();
        let clock = self.clock(deadline_ms);
        let mut listings = Vec::new();
        let mut resolved = Vec::new();
        self.sweep_pages(&clock, &mut summary, &mut listings, &mut resolved)
            .await;
        // Listings that keep their place save it now: what was resolved is
        // not read again, what was not is.
        for listing in listings {
            let Some(left) = clock.left() else {
                // Out of time: the next listing reads this part again.
                summary.remaining = true;
                break;
            };
            match bounded(left, self.store.finish(&listing, &resolved)).await {
                Some(Ok(())) => {}
                failed => {
                    let why = match failed {
                        Some(Err(err)) => err.to_string(),
                        _ => "saving did not finish before the sweep's deadline".to_owned(),
                    };
                    tracing::error!(error = %why, "sweep: saving the listing's place failed; the next sweep reads this part again");
                    summary.errors += 1;
                    summary.remaining = true;
                }
            }
        }
        if self.housekeeping {
            let (deleted, failure) = self.delete_expired_within(&clock).await;
            summary.expired_deleted = deleted;
            if deleted > 0 {
                tracing::info!(deleted, "sweep: expired idempotency records deleted");
            }
            if let Some(err) = failure {
                tracing::error!(error = %err, "sweep: the housekeeping failed");
                summary.errors += 1;
                summary.housekeeping_failed = true;
            }
        }
        summary
    }

    /// The engine's housekeeping alone, as a sweep with
    /// [`housekeeping`](Self::housekeeping) on runs it: delete the expired
    /// records the engine keeps ([`SweepStore::delete_expired`]), 500 at a
    /// time, until none is left or `stop_before` ahead of `deadline_ms`
    /// (epoch ms; `None` = no deadline). Returns how many went; 0, with no
    /// request, where the engine expires records itself. Claims treat
    /// expired records as absent already: this only gives their space back.
    ///
    /// # Errors
    ///
    /// The store's error (or the deadline reached during a call), with how
    /// many records went before it; the rest stay until a later run.
    pub async fn delete_expired(&self, deadline_ms: Option<u64>) -> Result<u64, Error> {
        match self.delete_expired_within(&self.clock(deadline_ms)).await {
            (deleted, None) => Ok(deleted),
            (_, Some(err)) => Err(err),
        }
    }

    /// Batches of [`EXPIRED_BATCH`] until one comes back short or no call
    /// may start any more: how many records went, and the failure that
    /// stopped it, if one did.
    async fn delete_expired_within(&self, clock: &Clock) -> (u64, Option<Error>) {
        let mut deleted = 0;
        loop {
            let Some(left) = clock.left() else {
                return (deleted, None);
            };
            let now_s = crate::clock::now_ms() / 1000;
            let failure = match bounded(left, self.store.delete_expired(now_s, EXPIRED_BATCH)).await
            {
                Some(Ok(batch)) => {
                    deleted += batch;
                    if batch < EXPIRED_BATCH as u64 {
                        return (deleted, None);
                    }
                    continue;
                }
                Some(Err(err)) => err,
                None => Error::new(
                    ErrorKind::StoreUnavailable,
                    "the call did not finish before the sweep's deadline",
                ),
            };
            let err = Error::new(
                failure.kind(),
                format!(
                    "deleting the expired records of {} failed after {deleted} went: {failure}; \
                     the rest stay (claims treat them as absent, they only take space) until a \
                     later run: check the store's address and its DELETE permission on the records",
                    self.store.describe(),
                ),
            );
            return (deleted, Some(err));
        }
    }

    /// The time a sweep with this deadline has left.
    fn clock(&self, deadline_ms: Option<u64>) -> Clock {
        Clock {
            deadline_ms,
            margin_ms: u64::try_from(self.stop_before.as_millis()).unwrap_or(u64::MAX),
        }
    }

    async fn sweep_pages(
        &self,
        clock: &Clock,
        summary: &mut SweepSummary,
        listings: &mut Vec<crate::store::Listing>,
        resolved: &mut Vec<String>,
    ) {
        let mut cursor: Option<SweepCursor> = None;
        loop {
            let Some(left) = clock.left() else {
                summary.remaining = true;
                return;
            };
            let now = crate::clock::now_ms();
            let cutoff = self.cutoff(now);
            // A listing that reads for long stops halfway to the sweep's
            // end, keeping the rest for resolving and saving what it found.
            let listed = self.store.stuck(StuckRequest {
                deadline_ms: clock.listing_deadline(now),
                ..StuckRequest::new(cutoff, self.page_size).at(cursor)
            });
            let page = match bounded(left, listed).await {
                Some(Ok(page)) => page,
                failed => {
                    let why = match failed {
                        Some(Err(err)) => err.to_string(),
                        _ => "the listing did not answer before the sweep's deadline".to_owned(),
                    };
                    tracing::error!(error = %why, "sweep: listing stuck records failed; the next sweep retries");
                    summary.errors += 1;
                    summary.remaining = true;
                    return;
                }
            };
            summary.pages += page.reads;
            summary.errors += page.failed_reads;
            if page.behind && !summary.behind {
                tracing::warn!(
                    store = %self.store.describe(),
                    "sweep: the listing is behind its bound (it is catching up on records it \
                     may have missed, or cannot cover the store within its period); stuck \
                     records are found later than the bound says: run the sweeper longer or \
                     more often"
                );
            }
            summary.behind |= page.behind;
            if page.failed_reads > 0 || page.incomplete {
                summary.remaining = true;
            }
            summary.found += page.records.len() as u64;
            listings.extend(page.listing);
            self.resolve_page(page.records, now, clock, summary, resolved)
                .await;
            match page.next {
                Some(next) => cursor = Some(next),
                None => return,
            }
        }
    }

    /// Resolve a page's records concurrently, a bounded number at a time:
    /// each is an independent fenced write. No resolve starts after the
    /// sweep's time is up, and none may run past it.
    async fn resolve_page(
        &self,
        page: Vec<StuckRecord>,
        now: u64,
        clock: &Clock,
        summary: &mut SweepSummary,
        resolved: &mut Vec<String>,
    ) {
        let mut pending = page.into_iter().peekable();
        let mut running = tokio::task::JoinSet::new();
        loop {
            while running.len() < self.concurrency && pending.peek().is_some() {
                let Some(left) = clock.left() else {
                    // Out of time: what is left of the page waits for the next sweep.
                    summary.remaining = true;
                    pending.by_ref().for_each(drop);
                    break;
                };
                let Some(record) = pending.next() else { break };
                let sweeper = self.clone();
                running.spawn(async move {
                    let resolution =
                        bounded(left, sweeper.resolve(&record, crate::clock::now_ms())).await;
                    (record, resolution)
                });
            }
            let Some(joined) = running.join_next().await else {
                break;
            };
            let (record, resolution) = match joined {
                Ok(done) => done,
                Err(err) => {
                    // Only a panic inside the SDK could get here; the record
                    // stays stuck and the next sweep sees it again.
                    tracing::error!(error = %err, "sweep: a resolve task failed");
                    summary.errors += 1;
                    continue;
                }
            };
            let age_ms = now.saturating_sub(record.lease_expires_at_ms);
            let resolution = resolution.unwrap_or_else(|| {
                summary.remaining = true;
                Err(Error::new(
                    ErrorKind::StoreUnavailable,
                    format!(
                        "resolving stuck record {} did not finish before the sweep's deadline; \
                         the next sweep retries it",
                        record.id
                    ),
                ))
            });
            match resolution {
                Ok(resolution) => {
                    match resolution {
                        Resolution::Released => summary.released += 1,
                        Resolution::Failed => summary.failed += 1,
                        Resolution::Resumable => summary.resumable += 1,
                        Resolution::Fenced => summary.fenced += 1,
                    }
                    tracing::info!(
                        record_id = %record.id,
                        attempt = record.attempt,
                        age_ms,
                        resolution = ?resolution,
                        "swept stuck idempotency record"
                    );
                    resolved.push(record.id);
                }
                Err(err) => {
                    summary.errors += 1;
                    tracing::error!(
                        record_id = %record.id,
                        attempt = record.attempt,
                        age_ms,
                        error = %err,
                        "sweep: resolving a stuck record failed; the next sweep retries it"
                    );
                }
            }
        }
    }
}

/// The time a sweep has left. No call starts within `stop_before` of the
/// deadline; a call already running may use the first half of that margin,
/// so one that hangs is cut off while the sweep still has time to answer.
struct Clock {
    deadline_ms: Option<u64>,
    margin_ms: u64,
}

impl Clock {
    /// When a listing started at `now` should stop reading: halfway to the
    /// point where no call may start, so its findings can still be
    /// resolved and its place saved. `None` without a deadline.
    fn listing_deadline(&self, now: u64) -> Option<u64> {
        let stop = self.deadline_ms?.saturating_sub(self.margin_ms);
        Some(now + stop.saturating_sub(now) / 2)
    }

    /// How long a call started now may run, or `None` when no call may
    /// start any more; unbounded (`Some(None)`) without a deadline.
    fn left(&self) -> Option<Option<Duration>> {
        let Some(deadline) = self.deadline_ms else {
            return Some(None);
        };
        let now = crate::clock::now_ms();
        if deadline.saturating_sub(self.margin_ms) <= now {
            return None;
        }
        let budget = deadline
            .saturating_sub(self.margin_ms / 2)
            .saturating_sub(now);
        Some(Some(Duration::from_millis(budget)))
    }
}

/// `f`, given at most `left` (`None`: as long as it takes); `None` when the
/// time ran out first.
async fn bounded<T>(left: Option<Duration>, f: impl std::future::Future<Output = T>) -> Option<T> {
    match left {
        Some(left) => tokio::time::timeout(left, f).await.ok(),
        None => Some(f.await),
    }
}

/// The terminal response a record failed by the sweeper replays.
pub(crate) fn abandoned_response() -> StoredResponse {
    StoredResponse::problem(
        crate::problem::ABANDONED,
        "the first request with this Idempotency-Key did not finish and was abandoned; \
         its outcome is unknown, so check the resource before retrying with a new key",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Status;
    use crate::store::memory::MemoryStore;
    use crate::store::{Checkpoint, CheckpointRequest, ClaimOutcome, ClaimRequest};

    /// A claim of `id` now, its lease `lease_ms` long, kept until
    /// `expires_at_s`.
    async fn claim(
        store: &MemoryStore,
        id: &str,
        lease_ms: u64,
        expires_at_s: u64,
    ) -> crate::store::Lease {
        let now = crate::clock::now_ms();
        let request = ClaimRequest {
            record_id: id.into(),
            fingerprint: "fp".into(),
            owner: format!("owner-{id}"),
            now_ms: now,
            lease_expires_at_ms: now + lease_ms,
            expires_at_s,
            origin: None,
        };
        match store.claim(&request).await.unwrap() {
            ClaimOutcome::Claimed(lease) => lease,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_listing_gets_half_the_time_to_the_stop_point() {
        let now = 1_000_000;
        let clock = Clock {
            deadline_ms: Some(now + 10_000),
            margin_ms: 2_000,
        };
        // Stop point at now + 8 s: the listing reads until now + 4 s, the
        // rest is for resolving what it found and saving its place.
        assert_eq!(clock.listing_deadline(now), Some(now + 4_000));
        assert_eq!(clock.listing_deadline(now + 9_000), Some(now + 9_000));
        let unbounded = Clock {
            deadline_ms: None,
            margin_ms: 2_000,
        };
        assert_eq!(unbounded.listing_deadline(now), None);
    }

    #[tokio::test]
    async fn the_sweep_is_the_same_on_any_store() {
        let store = MemoryStore::new();
        let hour = crate::clock::now_ms() / 1000 + 3600;
        for i in 0..7 {
            claim(&store, &format!("stuck-{i}"), 1, hour).await;
        }
        let resumable = claim(&store, "resumable", 1, hour).await;
        store
            .checkpoint(CheckpointRequest::new(
                &resumable,
                &Checkpoint {
                    name: "charged".into(),
                    data: serde_json::json!({}),
                    attempt: resumable.attempt,
                },
            ))
            .await
            .unwrap();
        claim(&store, "live", 600_000, hour).await;
        claim(&store, "expired", 1, 1).await;
        tokio::time::sleep(Duration::from_millis(5)).await;

        let summary = Sweeper::new(store.clone())
            .grace(Duration::ZERO)
            .page_size(3)
            .sweep(None)
            .await;
        assert_eq!(
            (
                summary.found,
                summary.released,
                summary.resumable,
                summary.errors
            ),
            (9, 8, 1, 0),
            "{summary:?}"
        );
        assert_eq!(summary.pages, 3, "pages of 3 over 9 stuck records");
        assert!(!summary.remaining);
        assert!(store.get("resumable").is_some());
        assert_eq!(
            store.get("live").map(|r| r.status),
            Some(Status::InProgress)
        );

        // `fail` completes the recovery point's record with the abandoned
        // problem, and never brings an expired one back.
        claim(&store, "expired-again", 1, 1).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let summary = Sweeper::new(store.clone())
            .policy(SweepPolicy::Fail)
            .grace(Duration::ZERO)
            .sweep(None)
            .await;
        assert_eq!(
            (summary.found, summary.failed, summary.released),
            (2, 1, 1),
            "{summary:?}"
        );
        let failed = store.get("resumable").unwrap();
        assert_eq!(failed.status, Status::Completed);
        assert_eq!(failed.response.unwrap().status, 500);
        assert!(store.get("expired-again").is_none());
    }

    #[tokio::test]
    async fn housekeeping_where_the_engine_expires_records_itself_deletes_nothing() {
        let store = MemoryStore::new();
        claim(&store, "expired", 600_000, 1).await;
        let sweeper = Sweeper::new(store.clone()).housekeeping(true);
        let summary = sweeper.sweep(None).await;
        assert_eq!(
            (
                summary.expired_deleted,
                summary.errors,
                summary.housekeeping_failed
            ),
            (0, 0, false),
            "{summary:?}"
        );
        assert_eq!(sweeper.delete_expired(None).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_failed_record_life_past_the_clock_saturates() {
        let store = MemoryStore::new();
        let hour = crate::clock::now_ms() / 1000 + 3600;
        claim(&store, "stuck", 1, hour).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let summary = Sweeper::new(store.clone())
            .policy(SweepPolicy::Fail)
            .grace(Duration::ZERO)
            .failed_expires_after(Duration::MAX)
            .sweep(None)
            .await;
        assert_eq!((summary.failed, summary.errors), (1, 0), "{summary:?}");
        assert_eq!(store.get("stuck").map(|r| r.expires_at_s), Some(u64::MAX));
    }
}
