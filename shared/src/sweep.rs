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
use aws_sdk_dynamodb::types::AttributeValue;
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
    pub async fn resolve(&self, record: &StuckRecord, now_ms: u64) -> Result<Resolution, Error> {
        if record.has_checkpoint && self.policy == SweepPolicy::Release {
            return Ok(Resolution::Resumable);
        }
        let condition = "#status = :in_progress AND #attempt = :attempt AND #owner = :owner AND #lease < :cutoff";
        let values = [
            (":in_progress", s(Status::InProgress.as_str())),
            (":attempt", n(record.attempt)),
            (":owner", s(&record.owner)),
            (":cutoff", n(self.cutoff(now_ms))),
        ];
        let names = [
            ("#status", STATUS),
            ("#attempt", ATTEMPT),
            ("#owner", OWNER),
            ("#lease", LEASE_EXPIRES_AT),
        ];
        let result = match self.policy {
            SweepPolicy::Release => {
                let mut req = self
                    .store
                    .client()
                    .delete_item()
                    .table_name(self.store.table())
                    .key(ID, s(&record.id))
                    .condition_expression(condition);
                for (k, v) in names {
                    req = req.expression_attribute_names(k, v);
                }
                for (k, v) in values {
                    req = req.expression_attribute_values(k, v);
                }
                fenced_write(
                    req.send().await,
                    Resolution::Released,
                    &record.id,
                    self.store.table(),
                )
            }
            SweepPolicy::Fail => {
                let problem = abandoned_response();
                let expires = now_ms / 1000 + self.failed_expires_after.as_secs();
                let mut req = self
                    .store
                    .client()
                    .update_item()
                    .table_name(self.store.table())
                    .key(ID, s(&record.id))
                    .condition_expression(condition)
                    .update_expression(
                        "SET #status = :completed, #expires_at = :expires, #rs = :rs, #rh = :rh, #rk = :rk, #rb = :rb \
                         REMOVE #shard, #at, #checkpoint",
                    )
                    .expression_attribute_names("#expires_at", EXPIRES_AT)
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
                    .expression_attribute_values(":rb", AttributeValue::B(problem.body.bytes().to_vec().into()));
                for (k, v) in names {
                    req = req.expression_attribute_names(k, v);
                }
                for (k, v) in values {
                    req = req.expression_attribute_values(k, v);
                }
                fenced_write(
                    req.send().await,
                    Resolution::Failed,
                    &record.id,
                    self.store.table(),
                )
            }
        };
        result
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
        let margin = u64::try_from(self.stop_before.as_millis()).unwrap_or(u64::MAX);
        let out_of_time =
            || deadline_ms.is_some_and(|d| crate::http::now_ms().saturating_add(margin) >= d);
        for shard in 0..SWEEP_SHARDS {
            let mut cursor: Cursor = None;
            loop {
                if out_of_time() {
                    summary.remaining = true;
                    return summary;
                }
                let now = crate::http::now_ms();
                let (page, next) = match self.stuck(shard, cursor, now).await {
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
                self.resolve_page(page, now, &mut summary).await;
                match next {
                    Some(key) => cursor = Some(key),
                    None => break,
                }
            }
        }
        summary
    }

    /// Resolve a page's records concurrently, a bounded number at a time:
    /// each is an independent fenced write.
    async fn resolve_page(&self, page: Vec<StuckRecord>, now: u64, summary: &mut SweepSummary) {
        let mut pending = page.into_iter();
        let mut running = tokio::task::JoinSet::new();
        loop {
            while running.len() < self.concurrency {
                let Some(record) = pending.next() else { break };
                let sweeper = self.clone();
                running.spawn(async move {
                    let resolution = sweeper.resolve(&record, crate::http::now_ms()).await;
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

/// A fenced write's outcome: done, fenced (its condition no longer held), or a
/// store error.
fn fenced_write<T, E, R>(
    result: Result<T, aws_sdk_dynamodb::error::SdkError<E, R>>,
    done: Resolution,
    record_id: &str,
    table: &str,
) -> Result<Resolution, Error>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(done),
        Err(err)
            if err.as_service_error().and_then(|e| e.code())
                == Some("ConditionalCheckFailedException") =>
        {
            Ok(Resolution::Fenced)
        }
        Err(err) => Err(Error::with_source(
            ErrorKind::StoreUnavailable,
            format!(
                "resolving stuck record {record_id} in table `{table}` failed: {}; \
                 the next sweep retries it",
                DisplayErrorContext(&err)
            ),
            err,
        )),
    }
}

/// The terminal response a record failed by the sweeper replays.
pub fn abandoned_response() -> StoredResponse {
    StoredResponse::from_http(&crate::problem::response(
        crate::problem::ABANDONED,
        "the first request with this Idempotency-Key did not finish and was abandoned; \
         its outcome is unknown, so check the resource before retrying with a new key",
    ))
}
