//! The sweeper: find in-progress records whose lease ran out long ago (the
//! invocation crashed, timed out, or its client never retried) and resolve them.
//!
//! Stuck records are found through the sparse, sharded `sweep` index (its
//! attributes exist only while a record is in progress; 16 shards keep one hot
//! partition from forming), never a table scan. Each is resolved with a
//! **fenced** conditional write (same `attempt` and `owner`, still in progress,
//! lease still expired), so a record re-claimed between the query and the write
//! is left alone and counted as `fenced`, and two sweeps running at once
//! resolve each record once.
//!
//! - [`SweepPolicy::Release`] deletes the record: the next retry runs the handler.
//! - [`SweepPolicy::Fail`] stores a terminal `500` problem
//!   ([`ABANDONED`](crate::problem::ABANDONED)) that replays from then on.
//!
//! Records holding a recovery point are left for the next retry to resume
//! (counted as `resumable`) unless the policy is `Fail`.
//!
//! ```no_run
//! use std::time::Duration;
//! use lambda_idempotency::{DynamoStore, SweepPolicy, Sweeper};
//!
//! # async fn f(store: DynamoStore) -> Result<(), lambda_idempotency::Error> {
//! let sweeper = Sweeper::new(store).policy(SweepPolicy::Release).grace(Duration::from_secs(60));
//! let summary = sweeper.sweep(None).await;
//! println!("found {}, released {}, errors {}", summary.found, summary.released, summary.errors);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use serde::Serialize;

use crate::error::{Error, ErrorKind};
use crate::record::{Status, StoredResponse};
use crate::store::dynamodb::schema::*;
use crate::store::dynamodb::{n, s};
use crate::DynamoStore;

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

/// A stuck record as the index shows it.
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
    /// True when the record holds a recovery point.
    pub has_checkpoint: bool,
}

/// What [`Sweeper::resolve`] did.
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
    /// Index pages read.
    pub pages: u64,
    /// Reads or writes that failed (throttling, network); each was logged,
    /// the sweep went on, and the next sweep retries what they left.
    pub errors: u64,
    /// True when records may be left unresolved for the next sweep: the sweep
    /// stopped before its deadline, or a shard could not be read to its end.
    pub remaining: bool,
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
            ],
            timestamp_ms,
        )
    }
}

/// Finds and resolves stuck records of a [`DynamoStore`] table.
#[derive(Debug, Clone)]
pub struct Sweeper {
    store: DynamoStore,
    policy: SweepPolicy,
    grace: Duration,
    page_size: i32,
    stop_before: Duration,
    failed_expires_after: Duration,
    concurrency: usize,
}

/// Where a shard's paging stopped.
pub type Cursor = Option<HashMap<String, AttributeValue>>;

impl Sweeper {
    /// Defaults: release, 60 s grace, pages of 100, stop 2 s before the
    /// deadline, failed records replay for 24 hours.
    pub fn new(store: DynamoStore) -> Self {
        Sweeper {
            store,
            policy: SweepPolicy::Release,
            grace: Duration::from_secs(60),
            page_size: 100,
            stop_before: Duration::from_secs(2),
            failed_expires_after: Duration::from_secs(24 * 3600),
            concurrency: 16,
        }
    }

    /// The table this sweeper resolves records of.
    pub fn table(&self) -> &str {
        self.store.table()
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

    /// Items per index page (1 to 1000).
    pub fn page_size(mut self, size: i32) -> Self {
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

    fn cutoff(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX))
    }

    /// One page of stuck records of `shard` (`0`..`f`), from `cursor`.
    pub async fn stuck(
        &self,
        shard: u32,
        cursor: Cursor,
        now_ms: u64,
    ) -> Result<(Vec<StuckRecord>, Cursor), Error> {
        let shard = format!("{:x}", shard % SWEEP_SHARDS);
        let out = self
            .store
            .client()
            .query()
            .table_name(self.store.table())
            .index_name(SWEEP_INDEX)
            .key_condition_expression("#shard = :shard AND #at < :cutoff")
            .expression_attribute_names("#shard", SWEEP_SHARD)
            .expression_attribute_names("#at", SWEEP_AT)
            .expression_attribute_values(":shard", s(&shard))
            .expression_attribute_values(":cutoff", n(self.cutoff(now_ms)))
            .limit(self.page_size)
            .set_exclusive_start_key(cursor)
            .send()
            .await
            .map_err(|e| {
                Error::with_source(
                    ErrorKind::StoreUnavailable,
                    format!(
                        "querying index `{SWEEP_INDEX}` of table `{}` failed: {}",
                        self.store.table(),
                        DisplayErrorContext(&e)
                    ),
                    e,
                )
            })?;
        let mut found = Vec::new();
        for item in out.items() {
            let id = item.get(ID).and_then(|v| v.as_s().ok());
            let attempt = item
                .get(ATTEMPT)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok());
            let owner = item.get(OWNER).and_then(|v| v.as_s().ok());
            let lease = item
                .get(SWEEP_AT)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok());
            match (id, attempt, owner, lease) {
                (Some(id), Some(attempt), Some(owner), Some(lease)) => found.push(StuckRecord {
                    id: id.clone(),
                    attempt,
                    owner: owner.clone(),
                    lease_expires_at_ms: lease,
                    has_checkpoint: item.contains_key(CHECKPOINT),
                }),
                // An index entry without the fencing attributes cannot be
                // resolved safely; it is logged and left alone.
                _ => {
                    tracing::warn!(record_id = ?id, "sweep index entry lacks attempt/owner; skipped")
                }
            }
        }
        Ok((found, out.last_evaluated_key().cloned()))
    }

    /// Resolve one stuck record with a fenced conditional write.
    ///
    /// `Release` deletes it only if it still has no recovery point (the
    /// index copy may lag: one committed since is found by the condition and
    /// the record is left as `Resumable`). `Fail` completes it only if it has
    /// not expired; an expired record is absent by definition, so it is
    /// deleted instead (counted as released) rather than brought back with a
    /// fresh expiry.
    pub async fn resolve(&self, record: &StuckRecord, now_ms: u64) -> Result<Resolution, Error> {
        if record.has_checkpoint && self.policy == SweepPolicy::Release {
            return Ok(Resolution::Resumable);
        }
        let fence = "#status = :in_progress AND #attempt = :attempt AND #owner = :owner AND #lease < :cutoff";
        match self.policy {
            SweepPolicy::Release => {
                let condition = format!("{fence} AND attribute_not_exists(#checkpoint)");
                match self.delete(record, &condition, now_ms).await? {
                    Ok(()) => Ok(Resolution::Released),
                    // Still this attempt's record, now with a recovery point.
                    Err(Some(item))
                        if self.still_stuck(record, &item, now_ms)
                            && item.contains_key(CHECKPOINT) =>
                    {
                        Ok(Resolution::Resumable)
                    }
                    Err(_) => Ok(Resolution::Fenced),
                }
            }
            SweepPolicy::Fail => match self.fail(record, fence, now_ms).await? {
                Ok(()) => Ok(Resolution::Failed),
                Err(Some(item))
                    if self.still_stuck(record, &item, now_ms)
                        && number(&item, EXPIRES_AT).is_some_and(|e| e < now_ms / 1000) =>
                {
                    let condition = format!("{fence} AND #expires_at < :now_s");
                    match self.delete(record, &condition, now_ms).await? {
                        Ok(()) => Ok(Resolution::Released),
                        Err(_) => Ok(Resolution::Fenced),
                    }
                }
                Err(_) => Ok(Resolution::Fenced),
            },
        }
    }

    /// Is `item` still the stuck attempt `record` saw?
    fn still_stuck(
        &self,
        record: &StuckRecord,
        item: &HashMap<String, AttributeValue>,
        now_ms: u64,
    ) -> bool {
        item.get(STATUS)
            .and_then(|v| v.as_s().ok())
            .map(String::as_str)
            == Some(Status::InProgress.as_str())
            && number(item, ATTEMPT) == Some(record.attempt)
            && item.get(OWNER).and_then(|v| v.as_s().ok()) == Some(&record.owner)
            && number(item, LEASE_EXPIRES_AT).is_some_and(|l| l < self.cutoff(now_ms))
    }

    /// Delete `record` under `condition`; `Err(item)` when the condition
    /// failed, with the item as it was (`None` when gone).
    async fn delete(
        &self,
        record: &StuckRecord,
        condition: &str,
        now_ms: u64,
    ) -> Result<Result<(), Option<HashMap<String, AttributeValue>>>, Error> {
        let mut req = self
            .store
            .client()
            .delete_item()
            .table_name(self.store.table())
            .key(ID, s(&record.id))
            .condition_expression(condition)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (k, v) in fence_names(condition) {
            req = req.expression_attribute_names(k, v);
        }
        for (k, v) in self.fence_values(record, condition, now_ms) {
            req = req.expression_attribute_values(k, v);
        }
        match req.send().await {
            Ok(_) => Ok(Ok(())),
            Err(err) => match err.as_service_error() {
                Some(DeleteItemError::ConditionalCheckFailedException(e)) => {
                    Ok(Err(e.item().cloned().filter(|i| !i.is_empty())))
                }
                _ => Err(self.write_failed(record, err)),
            },
        }
    }

    /// Complete `record` with the terminal problem, fenced and only while it
    /// has not expired; `Err(item)` as for [`delete`](Self::delete).
    async fn fail(
        &self,
        record: &StuckRecord,
        fence: &str,
        now_ms: u64,
    ) -> Result<Result<(), Option<HashMap<String, AttributeValue>>>, Error> {
        let condition = format!("{fence} AND #expires_at >= :now_s");
        let problem = abandoned_response();
        let expires = now_ms / 1000 + self.failed_expires_after.as_secs();
        let mut req = self
            .store
            .client()
            .update_item()
            .table_name(self.store.table())
            .key(ID, s(&record.id))
            .condition_expression(&condition)
            .update_expression(
                "SET #status = :completed, #expires_at = :expires, #rs = :rs, #rh = :rh, #rk = :rk, #rb = :rb \
                 REMOVE #shard, #at, #checkpoint",
            )
            .expression_attribute_names("#rs", RESPONSE_STATUS)
            .expression_attribute_names("#rh", RESPONSE_HEADERS)
            .expression_attribute_names("#rk", RESPONSE_BODY_KIND)
            .expression_attribute_names("#rb", RESPONSE_BODY)
            .expression_attribute_names("#shard", SWEEP_SHARD)
            .expression_attribute_names("#at", SWEEP_AT)
            .expression_attribute_names("#checkpoint", CHECKPOINT)
            .expression_attribute_values(":completed", s(Status::Completed.as_str()))
            .expression_attribute_values(":expires", n(expires))
            .expression_attribute_values(":rs", n(u64::from(problem.status)))
            .expression_attribute_values(":rh", crate::store::dynamodb::headers_value(&problem.headers))
            .expression_attribute_values(":rk", s(problem.body.kind()))
            .expression_attribute_values(":rb", AttributeValue::B(problem.body.bytes().to_vec().into()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (k, v) in fence_names(&condition) {
            req = req.expression_attribute_names(k, v);
        }
        for (k, v) in self.fence_values(record, &condition, now_ms) {
            req = req.expression_attribute_values(k, v);
        }
        match req.send().await {
            Ok(_) => Ok(Ok(())),
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(e)) => {
                    Ok(Err(e.item().cloned().filter(|i| !i.is_empty())))
                }
                _ => Err(self.write_failed(record, err)),
            },
        }
    }

    /// The values a fenced condition names.
    fn fence_values(
        &self,
        record: &StuckRecord,
        condition: &str,
        now_ms: u64,
    ) -> Vec<(&'static str, AttributeValue)> {
        let mut values = vec![
            (":in_progress", s(Status::InProgress.as_str())),
            (":attempt", n(record.attempt)),
            (":owner", s(&record.owner)),
            (":cutoff", n(self.cutoff(now_ms))),
        ];
        if condition.contains(":now_s") {
            values.push((":now_s", n(now_ms / 1000)));
        }
        values
    }

    fn write_failed<E, R>(
        &self,
        record: &StuckRecord,
        err: aws_sdk_dynamodb::error::SdkError<E, R>,
    ) -> Error
    where
        E: std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        Error::with_source(
            ErrorKind::StoreUnavailable,
            format!(
                "resolving stuck record {} in table `{}` failed: {}; the next sweep retries it",
                record.id,
                self.store.table(),
                DisplayErrorContext(&err)
            ),
            err,
        )
    }

    /// Sweep every shard, page by page, until done or until `stop_before`
    /// ahead of `deadline_ms` (epoch ms; `None` = no deadline).
    ///
    /// A failed read or write does not end the sweep: it is logged and
    /// counted in [`SweepSummary::errors`] (a shard whose page could not be
    /// read is left for the next sweep, which sets `remaining`), so one
    /// throttled request costs one record, not the whole run.
    pub async fn sweep(&self, deadline_ms: Option<u64>) -> SweepSummary {
        let mut summary = SweepSummary::default();
        let clock = Clock {
            deadline_ms,
            margin_ms: u64::try_from(self.stop_before.as_millis()).unwrap_or(u64::MAX),
        };
        let first = first_shard(crate::claim::now_ms());
        for i in 0..SWEEP_SHARDS {
            let shard = (first + i) % SWEEP_SHARDS;
            let mut cursor: Cursor = None;
            loop {
                let Some(left) = clock.left() else {
                    summary.remaining = true;
                    return summary;
                };
                let now = crate::claim::now_ms();
                let page = match bounded(left, self.stuck(shard, cursor, now)).await {
                    Some(Ok(page)) => Ok(page),
                    Some(Err(err)) => Err(err.to_string()),
                    None => {
                        Err("the index query did not answer before the sweep's deadline".into())
                    }
                };
                let (page, next) = match page {
                    Ok(page) => page,
                    Err(err) => {
                        tracing::error!(shard, error = %err, "sweep: reading a shard failed; the next sweep retries it");
                        summary.errors += 1;
                        summary.remaining = true;
                        break;
                    }
                };
                summary.pages += 1;
                summary.found += page.len() as u64;
                self.resolve_page(page, now, &clock, &mut summary).await;
                match next {
                    Some(key) => cursor = Some(key),
                    None => break,
                }
            }
        }
        summary
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
                        bounded(left, sweeper.resolve(&record, crate::claim::now_ms())).await;
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
    /// How long a call started now may run, or `None` when no call may
    /// start any more; unbounded (`Some(None)`) without a deadline.
    fn left(&self) -> Option<Option<Duration>> {
        let Some(deadline) = self.deadline_ms else {
            return Some(None);
        };
        let now = crate::claim::now_ms();
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

/// The attribute names a fenced condition uses.
fn fence_names(condition: &str) -> Vec<(&'static str, &'static str)> {
    [
        ("#status", STATUS),
        ("#attempt", ATTEMPT),
        ("#owner", OWNER),
        ("#lease", LEASE_EXPIRES_AT),
        ("#checkpoint", CHECKPOINT),
        ("#expires_at", EXPIRES_AT),
    ]
    .into_iter()
    .filter(|(k, _)| condition.contains(k))
    .collect()
}

/// A number attribute of an item.
fn number(item: &HashMap<String, AttributeValue>, name: &str) -> Option<u64> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

/// The shard a sweep starting at `now_ms` reads first: drawn from a hash of
/// the second, so every shard is first as often as any other whatever the
/// schedule's period, and a backlog no single sweep finishes cannot starve
/// the shards read last.
fn first_shard(now_ms: u64) -> u32 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest((now_ms / 1000).to_be_bytes());
    u32::from(digest[0]) % SWEEP_SHARDS
}

/// The terminal response a record failed by the sweeper replays.
pub fn abandoned_response() -> StoredResponse {
    StoredResponse::from_http(&crate::problem::response(
        crate::problem::ABANDONED,
        "the first request with this Idempotency-Key did not finish and was abandoned; \
         its outcome is unknown, so check the resource before retrying with a new key",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_start_at_every_shard_in_turn() {
        // Sweeps every minute, every 5 and every 16 minutes (a period the
        // shard count divides), over 200 runs: each shard is the first one
        // read several times, so a backlog that no single sweep finishes
        // cannot starve the shards read last.
        for period_ms in [60_000u64, 300_000, 960_000] {
            let mut firsts = [0u32; SWEEP_SHARDS as usize];
            for run in 0..200u64 {
                let shard = first_shard(1_700_000_000_000 + run * period_ms);
                firsts[shard as usize] += 1;
            }
            assert!(
                firsts.iter().all(|n| *n >= 4),
                "every {period_ms} ms: {firsts:?}"
            );
        }
    }
}
