//! Stuck records found through the table's stream instead of an index
//! (feature `streams`): the hot path writes nothing for the sweeper.
//!
//! The table's stream (view type `NEW_IMAGE`, or `NEW_AND_OLD_IMAGES`; any
//! other view type is refused, since its records carry no new image) logs
//! every claim, recovery point, completion and deletion in order per record.
//! A listing reads each shard from where the last settled sweep left it
//! (parents before children, so a record's images come in order) and keeps
//! the latest image of every record: one whose latest image is in progress
//! with a lease over before the cutoff is stuck; one completed or deleted
//! afterwards drops out. Nothing is written while listing.
//!
//! Reading a shard follows `NextShardIterator` past empty pages (the service
//! answers them while records lie further on) until the shard is closed (no
//! next iterator) or, for an open shard, until
//! [`EMPTY_PAGES_AT_THE_PRESENT`] empty pages in a row say the listing has
//! reached the present. A shard that fails (throttled past the SDK's
//! retries, or an error) costs that shard, counted in `failed_reads`: what
//! was read of it before is kept, its children wait for the next listing
//! (their images come after its own), the other shards are read. A listing
//! given a deadline ([`Store::stuck_by`](crate::Store::stuck_by)) stops
//! reading there and returns what it read, `unread` set.
//!
//! [`settle`](super::DynamoStore) saves, per shard, where the next listing
//! starts: at the earliest record this listing saw in progress that the
//! sweep did not resolve (still live, not reached, or failed), else after
//! the last record read. Positions are small items in the table itself
//! (record id `~sweeper/stream/<shard id>`, keyed as the table layout keys a
//! record with that id, expiring through TTL after two days,
//! when the stream has long trimmed the shard). Each carries the time its
//! listing started (`listed_at`) and is written on the condition that no
//! later listing saved it already, so of two overlapping sweeps the older
//! never moves a place back. A stuck record holding a recovery point (left
//! for its retry under `release`, perhaps for a day) does not pin the place:
//! the item carries it to the next listing, until its retry, a `fail` sweep
//! or its expiry shows up in the stream.
//!
//! The stream keeps records 24 hours. A sweeper behind by more than that
//! (an outage) finds its saved place trimmed (`TrimmedDataAccessException`);
//! a listing that finds a shard with no saved place and no parent to come
//! from (the first listing, or places expired after two days) cannot know
//! what came before either. Both start a **catch-up**: a scan of the table
//! for records in progress with a lease over before the cutoff, at most
//! [`CATCH_UP_PAGES`] pages per listing, its place kept in the item
//! `~sweeper/catch-up` until it reaches the table's end; the scan moves on
//! only once every stuck record it found is resolved. A trim is reported
//! (`trimmed`, an error of the sweep) and the listing is `unread` until the
//! catch-up is done. So a record stuck at any time is found within a bounded
//! number of sweeps, whatever happened to the stream.
//!
//! Reading a stream from Lambda or the SDK costs no table capacity; the
//! catch-up scan reads (and is billed for) the whole table, once per outage.

use std::collections::{BTreeMap, HashMap, HashSet};

use aws_sdk_dynamodb::types::StreamViewType;
use aws_sdk_dynamodbstreams::types::{
    AttributeValue as StreamValue, OperationType, ShardIteratorType,
};
use serde::{Deserialize, Serialize};

use super::{n, s, DynamoStore};
use crate::error::{Error, ErrorKind};
use crate::record::Status;
use crate::store::{Settlement, Store, StuckPage, StuckRecord, SweepCursor};

/// The AWS SDK's variable for DynamoDB Streams' endpoint.
pub const STREAMS_ENDPOINT_ENV: &str = "AWS_ENDPOINT_URL_DYNAMODB_STREAMS";
/// The AWS SDK's variable for DynamoDB's endpoint, which the stream follows.
pub const DYNAMODB_ENDPOINT_ENV: &str = "AWS_ENDPOINT_URL_DYNAMODB";

/// Where the table's stream is read, as the environment (`lookup`) says:
/// `AWS_ENDPOINT_URL_DYNAMODB_STREAMS`, else `AWS_ENDPOINT_URL_DYNAMODB`
/// (DynamoDB Local serves its streams on the same port, so a local setup
/// needs one variable), else `AWS_ENDPOINT_URL`; `None`, the region's
/// endpoint, when none is set, or under
/// `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`. A variable set to an empty
/// string counts as unset: `sam local` sets every variable the template
/// declares, empty when not given, and the SDK panics on an empty endpoint.
/// For [`DynamoStore::with_stream_at`]; the sweeper and the CLI both use it.
pub fn streams_endpoint(lookup: impl Fn(&str) -> Option<String>) -> Option<String> {
    let set = |name: &str| {
        lookup(name)
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
    };
    if set("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return None;
    }
    set(STREAMS_ENDPOINT_ENV)
        .or_else(|| set(DYNAMODB_ENDPOINT_ENV))
        .or_else(|| set("AWS_ENDPOINT_URL"))
}

/// Id prefix of the items that keep the sweeper's place in each shard.
const POSITION_PREFIX: &str = "~sweeper/stream/";
/// Id of the item that keeps the catch-up scan's place while one runs.
const CATCH_UP_ID: &str = "~sweeper/catch-up";
/// Position attribute: `at:<seq>` (start at), `after:<seq>` (start after) or
/// `horizon:` (the trim horizon, the past covered by a catch-up); in the
/// catch-up item, `scan:<key>` (`scan:` = the table's start).
const POSITION: &str = "position";
/// The position of a shard read from its trim horizon, its past covered by
/// a catch-up scan.
const HORIZON: &str = "horizon:";
/// Stuck records kept for their recovery point, carried from listing to
/// listing (JSON), so the place need not wait for them.
const CARRY: &str = "carry";
/// When the listing that saved the item started (epoch ms): an item is only
/// replaced by a listing that started as late or later.
const LISTED_AT: &str = "listed_at";
/// At most this many carried records per shard (they are rare: a crash
/// after a recovery point and no retry); beyond, the oldest are dropped with
/// a warning.
const MAX_CARRIED: usize = 2_000;
/// GetRecords calls per listing in all, so one listing stays well inside a
/// sweep's time whatever the number of shards.
const MAX_READS_PER_LISTING: u64 = 2_000;
/// GetRecords calls per shard per listing (up to 1,000 records each): a
/// backlog larger than that is read on by the next listing.
const MAX_READS_PER_SHARD: u32 = 200;
/// Empty pages in a row after which an open shard counts as read to the
/// present. The API gives no end for an open shard and answers empty pages
/// where records lie further on (a few in a row), so one empty page is not
/// the end; an open shard at the present answers empty pages forever.
pub(crate) const EMPTY_PAGES_AT_THE_PRESENT: u32 = 8;
/// Scan pages (up to 1,000 items each) a catch-up reads per listing.
pub(crate) const CATCH_UP_PAGES: usize = 10;
/// Positions outlive the 24-hour stream with room to spare.
const POSITION_TTL_S: u64 = 2 * 24 * 3600;

/// Where a listing starts in one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Start {
    At(String),
    After(String),
    TrimHorizon,
}

/// The latest in-progress image of a record, and where it was read.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Candidate {
    attempt: u64,
    owner: String,
    lease_expires_at_ms: u64,
    has_checkpoint: bool,
    shard: usize,
    sequence: String,
}

/// What `settle` needs: per shard, the last sequence read and the records
/// that pin it (sequence, id), in the settlement's opaque text.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Plan {
    shards: Vec<ShardPlan>,
    /// When the listing started (epoch ms): the condition of every write.
    #[serde(default)]
    listed_at: u64,
    /// The catch-up scan this listing ran, if any.
    #[serde(default)]
    catch_up: Option<CatchUp>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct ShardPlan {
    shard: String,
    /// Last sequence number read (none read: keep the saved position).
    end: Option<String>,
    /// Records seen in progress here and not resumable: (sequence, id).
    pins: Vec<(String, String)>,
    /// Stuck records with a recovery point seen here: carried to the next
    /// listing instead of pinning the place (id, its latest image).
    carry: Vec<(String, Candidate)>,
    /// The place this listing started from (`at:`/`after:`), if saved.
    start: Option<String>,
    /// What came before this listing's start in the shard is unknown (its
    /// place was trimmed, or never saved): the catch-up scan covers it, so
    /// the place is only saved once the catch-up's is.
    #[serde(default)]
    unknown_past: bool,
}

/// One listing's part of a catch-up scan.
#[derive(Debug, Default, Serialize, Deserialize)]
struct CatchUp {
    /// Where this listing's scan pages started (`None`: the table's start).
    from: Option<String>,
    /// Where the next listing goes on (`None` with `done`: the end).
    next: Option<String>,
    /// The scan reached the table's end.
    done: bool,
    /// Stuck records the scan found: it moves on once all are resolved.
    found: Vec<String>,
    /// Stuck records with a recovery point were found that no position
    /// carries: the scan reads these pages again.
    #[serde(default)]
    hold: bool,
}

/// Sequence numbers are decimal strings of growing length: compare as numbers.
fn sequence_order(a: &str, b: &str) -> std::cmp::Ordering {
    let (a, b) = (a.trim_start_matches('0'), b.trim_start_matches('0'));
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn text(image: &HashMap<String, StreamValue>, name: &str) -> Option<String> {
    image.get(name).and_then(|v| v.as_s().ok()).cloned()
}

fn number(image: &HashMap<String, StreamValue>, name: &str) -> Option<u64> {
    image
        .get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

/// `f`, unless `deadline_ms` comes first (`None`: then).
async fn within<T>(deadline_ms: Option<u64>, f: impl std::future::Future<Output = T>) -> Option<T> {
    match deadline_ms {
        None => Some(f.await),
        Some(deadline) => {
            let left = deadline.saturating_sub(crate::clock::now_ms());
            tokio::time::timeout(std::time::Duration::from_millis(left), f)
                .await
                .ok()
        }
    }
}

/// Has `deadline_ms` come?
fn past(deadline_ms: Option<u64>) -> bool {
    deadline_ms.is_some_and(|d| crate::clock::now_ms() >= d)
}

/// How one shard's reading ended (a failed call is an `Err`: what was read
/// before it is kept all the same).
enum ShardEnd {
    /// Read to its end or to the present.
    Read,
    /// Read up to the listing's budget of reads: the rest is for the next.
    Budget,
    /// The listing's deadline came.
    OutOfTime,
}

impl DynamoStore {
    fn stream_error<E, R>(
        &self,
        op: &str,
        err: aws_sdk_dynamodbstreams::error::SdkError<E, R>,
    ) -> Error
    where
        E: std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        use aws_sdk_dynamodbstreams::error::SdkError;
        let endpoint = self
            .stream_endpoint
            .as_deref()
            .unwrap_or("the endpoint its client was built with");
        let detail = aws_sdk_dynamodbstreams::error::DisplayErrorContext(&err);
        // Not reached at all is a matter of where, not of permissions.
        let message = if matches!(
            err,
            SdkError::DispatchFailure(_) | SdkError::TimeoutError(_)
        ) {
            format!(
                "DynamoDB Streams {op} for the stream of table `{}` could not reach {endpoint}: \
                 {detail}; on DynamoDB Local set {DYNAMODB_ENDPOINT_ENV} (the stream follows \
                 it) or {STREAMS_ENDPOINT_ENV}, in AWS check the region (AWS_REGION) and the \
                 network",
                self.table
            )
        } else {
            format!(
                "DynamoDB Streams {op} at {endpoint} on the stream of table `{}` failed: \
                 {detail}; the sweeper needs dynamodb:DescribeStream, GetShardIterator and \
                 GetRecords on it",
                self.table
            )
        };
        Error::new(ErrorKind::StoreUnavailable, message)
    }

    /// Check that the table has a stream the sweeper can find stuck records
    /// in: enabled, with a view type that carries new images (`NEW_IMAGE`
    /// or `NEW_AND_OLD_IMAGES`). The sweeper function calls it at its cold
    /// start and the CLI before listing, so a wrong setting fails at once
    /// instead of every listing finding nothing.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`] in one line naming the setting to change,
    /// or the table's error when it cannot be described.
    pub async fn check_stream(&self) -> Result<(), Error> {
        self.stream_arn().await.map(drop)
    }

    /// The table's current stream, or a configuration error saying how to
    /// enable it (or to set its view type).
    async fn stream_arn(&self) -> Result<String, Error> {
        let described = self
            .client
            .describe_table()
            .table_name(&*self.table)
            .send()
            .await
            .map_err(|err| self.unavailable("DescribeTable (stream)", err))?;
        let table = described.table();
        let specification = table
            .and_then(|t| t.stream_specification())
            .filter(|s| s.stream_enabled());
        let arn = table
            .and_then(|t| t.latest_stream_arn())
            .filter(|_| specification.is_some());
        let Some(arn) = arn else {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "table `{}` has no stream: enable one with view type NEW_IMAGE \
                     (StreamSpecification in the template) for the sweeper to find stuck \
                     records",
                    self.table
                ),
            ));
        };
        // Keys alone, or the image before each change, cannot tell a record
        // in progress from one completed: every record would drop out.
        match specification.and_then(|s| s.stream_view_type()) {
            Some(StreamViewType::NewImage | StreamViewType::NewAndOldImages) | None => {}
            Some(other) => {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "the stream of table `{}` has StreamViewType {}: its records carry no \
                         new image, so the sweeper would find no stuck record; set \
                         StreamSpecification.StreamViewType to NEW_IMAGE (or \
                         NEW_AND_OLD_IMAGES) on the table (a stream's view type is changed by \
                         disabling it and enabling it again)",
                        self.table,
                        other.as_str()
                    ),
                ))
            }
        }
        Ok(arn.to_owned())
    }

    /// Where the last settled listing left `shard` (and that place as
    /// saved), and the records it carried.
    async fn saved_start(
        &self,
        shard: &str,
    ) -> Result<(Start, Option<String>, Vec<(String, Candidate)>), Error> {
        let out = self
            .client
            .get_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&format!("{POSITION_PREFIX}{shard}"))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| self.unavailable("GetItem (sweeper position)", err))?;
        let position = out
            .item()
            .and_then(|i| i.get(POSITION))
            .and_then(|v| v.as_s().ok());
        let carried = out
            .item()
            .and_then(|i| i.get(CARRY))
            .and_then(|v| v.as_s().ok())
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default();
        let start = match position.and_then(|p| p.split_once(':')) {
            Some(("at", seq)) => Start::At(seq.to_owned()),
            Some(("after", seq)) => Start::After(seq.to_owned()),
            _ => Start::TrimHorizon,
        };
        Ok((start, position.cloned(), carried))
    }

    /// Where a running catch-up scan goes on: `None` when none runs,
    /// `Some(None)` at the table's start.
    async fn saved_catch_up(&self) -> Result<Option<Option<String>>, Error> {
        let out = self
            .client
            .get_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(CATCH_UP_ID)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| self.unavailable("GetItem (sweeper catch-up)", err))?;
        Ok(out
            .item()
            .and_then(|i| i.get(POSITION))
            .and_then(|v| v.as_s().ok())
            .map(|p| {
                p.strip_prefix("scan:")
                    .filter(|key| !key.is_empty())
                    .map(str::to_owned)
            }))
    }

    /// Every record the stream shows in progress with its lease over before
    /// `cutoff_ms`, in one page, and the settlement that saves this
    /// listing's place once the sweep says what it resolved. With
    /// `deadline_ms`, reading stops there and the page says `unread`.
    pub(super) async fn stuck_from_stream(
        &self,
        streams: &aws_sdk_dynamodbstreams::Client,
        cutoff_ms: u64,
        deadline_ms: Option<u64>,
    ) -> Result<StuckPage, Error> {
        let listed_at = crate::clock::now_ms();
        let arn = self.stream_arn().await?;
        // Every shard the stream still holds (paged by shard id).
        let mut shards = Vec::new();
        let mut from: Option<String> = None;
        loop {
            let out = streams
                .describe_stream()
                .stream_arn(&arn)
                .set_exclusive_start_shard_id(from.clone())
                .send()
                .await
                .map_err(|err| self.stream_error("DescribeStream", err))?;
            let Some(description) = out.stream_description() else {
                break;
            };
            shards.extend(description.shards().iter().cloned());
            match description.last_evaluated_shard_id() {
                Some(last) => from = Some(last.to_owned()),
                None => break,
            }
        }
        // Parents before children: a record's images are in order across
        // the split only if the parent is read first.
        let ids: HashSet<&str> = shards.iter().filter_map(|s| s.shard_id()).collect();
        let mut ordered: Vec<&aws_sdk_dynamodbstreams::types::Shard> = Vec::new();
        let mut placed: HashSet<&str> = HashSet::new();
        while ordered.len() < shards.len() {
            let before = ordered.len();
            for shard in &shards {
                let Some(id) = shard.shard_id() else { continue };
                if placed.contains(id) {
                    continue;
                }
                let parent_ready = shard
                    .parent_shard_id()
                    .is_none_or(|p| !ids.contains(p) || placed.contains(p));
                if parent_ready {
                    placed.insert(id);
                    ordered.push(shard);
                }
            }
            if ordered.len() == before {
                // Shards without ids (never seen): nothing more to order.
                break;
            }
        }

        let mut plan = Plan {
            listed_at,
            ..Plan::default()
        };
        let mut latest: HashMap<String, Candidate> = HashMap::new();
        let mut reads = 0u64;
        let mut failed_reads = 0u64;
        let mut unread = false;
        let mut trimmed = false;
        // A place never saved with no parent to come from: what came before
        // is caught up by a scan (as after a trim).
        let mut unknown_before_places = false;
        // Shards not read to where they should be: their children wait.
        let mut behind: HashSet<&str> = HashSet::new();
        for shard in &ordered {
            let Some(shard_id) = shard.shard_id() else {
                continue;
            };
            let parent = shard.parent_shard_id().filter(|p| ids.contains(p));
            if parent.is_some_and(|p| behind.contains(p)) || past(deadline_ms) {
                behind.insert(shard_id);
                unread = true;
                continue;
            }
            let saved = match within(deadline_ms, self.saved_start(shard_id)).await {
                Some(Ok(saved)) => saved,
                Some(Err(err)) => {
                    tracing::error!(shard = shard_id, error = %err, "reading the sweeper's place in a shard failed; the next sweep reads the shard");
                    failed_reads += 1;
                    behind.insert(shard_id);
                    unread = true;
                    continue;
                }
                None => {
                    behind.insert(shard_id);
                    unread = true;
                    continue;
                }
            };
            let (start, saved, carried) = saved;
            // No place and no parent read before it: records older than
            // this shard's trim horizon were never seen by this sweeper.
            let unknown_place = saved.is_none() && parent.is_none();
            let index = plan.shards.len();
            plan.shards.push(ShardPlan {
                shard: shard_id.to_owned(),
                start: saved,
                ..ShardPlan::default()
            });
            // Carried records first: this shard's later images replace them.
            for (id, mut candidate) in carried {
                candidate.shard = index;
                latest.insert(id, candidate);
            }
            let trimmed_before = trimmed;
            let end = self
                .read_shard(
                    streams,
                    &arn,
                    shard_id,
                    &start,
                    deadline_ms,
                    ShardReading {
                        index,
                        plan: &mut plan,
                        latest: &mut latest,
                        reads: &mut reads,
                        trimmed: &mut trimmed,
                    },
                )
                .await;
            let unknown_past = unknown_place || (trimmed && !trimmed_before);
            if let Some(shard) = plan.shards.get_mut(index) {
                shard.unknown_past = unknown_past;
            }
            unknown_before_places |= unknown_place;
            match end {
                Ok(ShardEnd::Read) => {}
                // Not read to its end: its children's images come after
                // the rest of it, so they wait for the next listing too.
                Ok(ShardEnd::Budget | ShardEnd::OutOfTime) => {
                    behind.insert(shard_id);
                    unread = true;
                }
                Err(err) => {
                    tracing::error!(shard = shard_id, error = %err, "reading a shard of the stream failed; what was read of it is kept, the next sweep reads on");
                    failed_reads += 1;
                    behind.insert(shard_id);
                    unread = true;
                }
            }
        }

        let mut records = Vec::new();
        // Sorted for a stable order (the oldest lease first).
        let mut seen: Vec<(String, Candidate)> = latest.into_iter().collect();
        seen.sort_by(|a, b| (a.1.lease_expires_at_ms, &a.0).cmp(&(b.1.lease_expires_at_ms, &b.0)));
        for (id, candidate) in seen {
            let stuck = candidate.lease_expires_at_ms < cutoff_ms;
            // A stuck record with a recovery point may stay stuck for a day
            // (left for its retry under `release`): it is carried to the next
            // listing rather than holding the stream's place a day behind.
            if let Some(shard) = plan.shards.get_mut(candidate.shard) {
                if stuck && candidate.has_checkpoint {
                    shard.carry.push((id.clone(), candidate.clone()));
                } else {
                    shard.pins.push((candidate.sequence.clone(), id.clone()));
                }
            }
            if stuck {
                records.push(StuckRecord {
                    id,
                    attempt: candidate.attempt,
                    owner: candidate.owner,
                    lease_expires_at_ms: candidate.lease_expires_at_ms,
                    has_checkpoint: candidate.has_checkpoint,
                });
            }
        }

        // The catch-up scan: one starts (again) where the place is unknown,
        // one running goes on.
        let running = match within(deadline_ms, self.saved_catch_up()).await {
            Some(Ok(running)) => running,
            Some(Err(err)) => {
                tracing::error!(error = %err, "reading the sweeper's catch-up place failed; the next sweep reads it");
                failed_reads += 1;
                unread = true;
                None
            }
            None => {
                unread = true;
                None
            }
        };
        // A trim restarts the scan (records stuck before it may lie behind
        // a running scan's place); a shard without a place starts one, or
        // lets the running one go on.
        let scan_from = match (trimmed, unknown_before_places, running) {
            (true, _, _) => Some(None),
            (false, true, None) => Some(None),
            (false, _, running) => running,
        };
        if let Some(from) = scan_from {
            let catch_up = self
                .catch_up(from, cutoff_ms, deadline_ms, &mut records, &mut reads)
                .await;
            if catch_up.failed {
                failed_reads += 1;
            }
            if !catch_up.plan.done {
                unread = true;
            }
            // Stuck records with a recovery point the scan found are carried
            // like the stream's: their images may be gone from the stream.
            // With no shard read to carry them, the scan does not move on.
            let mut catch_up = catch_up;
            if plan.shards.is_empty() {
                catch_up.plan.hold = records
                    .iter()
                    .any(|r| r.has_checkpoint && catch_up.plan.found.contains(&r.id));
            }
            if let Some(first) = plan.shards.first_mut() {
                for record in records.iter().filter(|r| r.has_checkpoint) {
                    if catch_up.plan.found.contains(&record.id)
                        && !first.carry.iter().any(|(id, _)| *id == record.id)
                    {
                        first.carry.push((
                            record.id.clone(),
                            Candidate {
                                attempt: record.attempt,
                                owner: record.owner.clone(),
                                lease_expires_at_ms: record.lease_expires_at_ms,
                                has_checkpoint: true,
                                shard: 0,
                                sequence: String::new(),
                            },
                        ));
                    }
                }
            }
            plan.catch_up = Some(catch_up.plan);
        }

        let settlement = serde_json::to_string(&plan).map_err(|e| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("the stream listing's place: {e}"),
            )
        })?;
        Ok(StuckPage {
            records,
            next: None,
            reads,
            failed_reads,
            unread,
            settlement: Some(Settlement(settlement)),
            trimmed,
        })
    }

    /// Read one shard from `start` into the listing's latest images.
    async fn read_shard(
        &self,
        streams: &aws_sdk_dynamodbstreams::Client,
        arn: &str,
        shard_id: &str,
        start: &Start,
        deadline_ms: Option<u64>,
        listing: ShardReading<'_>,
    ) -> Result<ShardEnd, Error> {
        let ShardReading {
            index,
            plan,
            latest,
            reads,
            trimmed,
        } = listing;
        let iterator_at = |kind: ShardIteratorType, sequence: Option<&String>| {
            streams
                .get_shard_iterator()
                .stream_arn(arn)
                .shard_id(shard_id)
                .shard_iterator_type(kind)
                .set_sequence_number(sequence.cloned())
                .send()
        };
        let asked = match start {
            Start::At(seq) => iterator_at(ShardIteratorType::AtSequenceNumber, Some(seq)),
            Start::After(seq) => iterator_at(ShardIteratorType::AfterSequenceNumber, Some(seq)),
            Start::TrimHorizon => iterator_at(ShardIteratorType::TrimHorizon, None),
        };
        let Some(asked) = within(deadline_ms, asked).await else {
            return Ok(ShardEnd::OutOfTime);
        };
        let iterator = match asked {
            Ok(out) => out.shard_iterator().map(str::to_owned),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_trimmed_data_access_exception()) =>
            {
                // The saved place is older than the stream keeps (the
                // sweeper did not run for a day): read what is left; the
                // catch-up scan finds what was trimmed.
                tracing::warn!(
                    shard = shard_id,
                    "the stream trimmed records the sweeper had not read; a catch-up scan finds \
                     the records stuck meanwhile"
                );
                *trimmed = true;
                let asked = iterator_at(ShardIteratorType::TrimHorizon, None);
                let Some(asked) = within(deadline_ms, asked).await else {
                    return Ok(ShardEnd::OutOfTime);
                };
                asked
                    .map_err(|err| self.stream_error("GetShardIterator", err))?
                    .shard_iterator()
                    .map(str::to_owned)
            }
            Err(err) => return Err(self.stream_error("GetShardIterator", err)),
        };
        let mut iterator = iterator;
        let mut calls = 0;
        let mut empty_in_a_row = 0;
        while let Some(current) = iterator.take() {
            if calls == MAX_READS_PER_SHARD || *reads >= MAX_READS_PER_LISTING {
                return Ok(ShardEnd::Budget);
            }
            calls += 1;
            let asked = streams
                .get_records()
                .shard_iterator(current)
                .limit(1000)
                .send();
            let Some(asked) = within(deadline_ms, asked).await else {
                return Ok(ShardEnd::OutOfTime);
            };
            let out = asked.map_err(|err| self.stream_error("GetRecords", err))?;
            *reads += 1;
            let records = out.records();
            for record in records {
                let Some(change) = record.dynamodb() else {
                    continue;
                };
                let Some(sequence) = change.sequence_number() else {
                    continue;
                };
                if let Some(shard) = plan.shards.get_mut(index) {
                    shard.end = Some(sequence.to_owned());
                }
                // Images of other items of a shared table are not records.
                let Some(id) = change.keys().and_then(|k| self.layout.record_id_of(k)) else {
                    continue;
                };
                if id.starts_with(super::SWEEPER_ITEM_PREFIX) {
                    continue;
                }
                let image = change.new_image();
                let status = image.and_then(|i| text(i, &self.layout.status));
                match (record.event_name(), image, status.as_deref()) {
                    (Some(OperationType::Remove), _, _) => {
                        latest.remove(&id);
                    }
                    (_, Some(image), Some(status)) if status == Status::InProgress.as_str() => {
                        match (
                            number(image, &self.layout.attempt),
                            text(image, &self.layout.owner),
                            number(image, &self.layout.lease_expires_at),
                        ) {
                            (Some(attempt), Some(owner), Some(lease)) => {
                                latest.insert(
                                    id,
                                    Candidate {
                                        attempt,
                                        owner,
                                        lease_expires_at_ms: lease,
                                        has_checkpoint: image.contains_key(&self.layout.checkpoint),
                                        shard: index,
                                        sequence: sequence.to_owned(),
                                    },
                                );
                            }
                            _ => tracing::warn!(
                                record_id = %id,
                                "an in-progress image lacks attempt, owner or lease; skipped"
                            ),
                        }
                    }
                    _ => {
                        latest.remove(&id);
                    }
                }
            }
            // No next iterator: the shard is closed and read to its end. An
            // empty page is not the end: records may lie further on.
            if records.is_empty() {
                empty_in_a_row += 1;
                if empty_in_a_row >= EMPTY_PAGES_AT_THE_PRESENT {
                    break;
                }
            } else {
                empty_in_a_row = 0;
            }
            iterator = out.next_shard_iterator().map(str::to_owned);
        }
        Ok(ShardEnd::Read)
    }

    /// Up to [`CATCH_UP_PAGES`] pages of the catch-up scan from `from`:
    /// records in progress with a lease over before `cutoff_ms` join
    /// `records` (once: the stream may have listed them too).
    async fn catch_up(
        &self,
        from: Option<String>,
        cutoff_ms: u64,
        deadline_ms: Option<u64>,
        records: &mut Vec<StuckRecord>,
        reads: &mut u64,
    ) -> CatchUpRun {
        let mut plan = CatchUp {
            from: from.clone(),
            next: from,
            ..CatchUp::default()
        };
        let mut failed = false;
        let mut listed: HashSet<String> = records.iter().map(|r| r.id.clone()).collect();
        for _ in 0..CATCH_UP_PAGES {
            let cursor = plan.next.clone().map(SweepCursor);
            let Some(page) = within(deadline_ms, Store::scan(self, cursor, 1000)).await else {
                break;
            };
            let page = match page {
                Ok(page) => page,
                Err(err) => {
                    tracing::error!(error = %err, "a page of the sweeper's catch-up scan failed; the next sweep reads it again");
                    failed = true;
                    break;
                }
            };
            *reads += 1;
            for stored in page.records {
                let record = stored.record;
                if record.status != Status::InProgress || record.lease_expires_at_ms >= cutoff_ms {
                    continue;
                }
                plan.found.push(record.id.clone());
                if listed.insert(record.id.clone()) {
                    records.push(StuckRecord {
                        has_checkpoint: record.checkpoint.is_some(),
                        id: record.id,
                        attempt: record.attempt,
                        owner: record.owner,
                        lease_expires_at_ms: record.lease_expires_at_ms,
                    });
                }
            }
            match page.next {
                Some(next) => plan.next = Some(next.0),
                None => {
                    plan.next = None;
                    plan.done = true;
                    break;
                }
            }
        }
        CatchUpRun { plan, failed }
    }

    /// Write `item` unless a listing that started later than `listed_at`
    /// wrote it already. `Ok(false)` when it had.
    async fn put_if_newer(
        &self,
        mut item: HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
        listed_at: u64,
        what: &str,
    ) -> Result<bool, Error> {
        item.insert(LISTED_AT.to_owned(), n(listed_at));
        let written = self
            .client
            .put_item()
            .table_name(&*self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#listed_at) OR #listed_at <= :listed_at")
            .expression_attribute_names("#listed_at", LISTED_AT)
            .expression_attribute_values(":listed_at", n(listed_at))
            .send()
            .await;
        match written {
            Ok(_) => Ok(true),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                tracing::debug!(what, "a later sweep saved this place already; kept");
                Ok(false)
            }
            Err(err) => Err(self.unavailable(what, err)),
        }
    }

    /// Save where the next listing starts in each shard the settled listing
    /// read: at the earliest record it saw in progress that is not in
    /// `resolved`, else after the last record it read; and where a
    /// catch-up scan goes on. Every place is saved even when one fails;
    /// none replaces a place a later listing saved.
    pub(super) async fn settle_stream(
        &self,
        settlement: &Settlement,
        resolved: &[String],
        now_ms: u64,
    ) -> Result<(), Error> {
        let plan: Plan = serde_json::from_str(&settlement.0).map_err(|e| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("a settlement not made by a DynamoStore stream listing: {e}"),
            )
        })?;
        let resolved: HashSet<&str> = resolved.iter().map(String::as_str).collect();
        let mut positions: BTreeMap<String, (String, String, bool)> = BTreeMap::new();
        for mut shard in plan.shards {
            let pinned = shard
                .pins
                .iter()
                .filter(|(_, id)| !resolved.contains(id.as_str()))
                .map(|(seq, _)| seq.as_str())
                .min_by(|a, b| sequence_order(a, b));
            let position = match (pinned, shard.end, shard.start) {
                (Some(seq), _, _) => format!("at:{seq}"),
                (None, Some(end), _) => format!("after:{end}"),
                // Nothing read and nothing pinned: the saved place stands,
                // saved again with what it carries now.
                (None, None, Some(saved)) => saved,
                // Nothing read of a shard never saved (empty, or failing):
                // its past is known (its parent was read, or the catch-up
                // covers it), so the next listing reads it from its trim
                // horizon and, once its parent is gone from the stream, does
                // not take its past for unknown.
                (None, None, None) => HORIZON.to_owned(),
            };
            if shard.carry.len() > MAX_CARRIED {
                tracing::warn!(
                    shard = %shard.shard,
                    carried = shard.carry.len(),
                    "more stuck records with a recovery point than the sweeper carries; the \
                     oldest are no longer listed (lambda-idempotency list --stuck --scan finds them)"
                );
                shard
                    .carry
                    .sort_by_key(|(_, c)| std::cmp::Reverse(c.lease_expires_at_ms));
                shard.carry.truncate(MAX_CARRIED);
            }
            let carry = serde_json::to_string(&shard.carry).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!("the carried records: {e}"),
                )
            })?;
            positions.insert(shard.shard, (position, carry, shard.unknown_past));
        }
        let expires = n(now_ms / 1000 + POSITION_TTL_S);
        let mut failures = Vec::new();
        // The catch-up's place first: a shard whose past is unknown moves on
        // only once the scan that covers that past is saved.
        let mut past_covered = true;
        if let Some(catch_up) = plan.catch_up {
            // The scan moves on only once what it found is resolved: those
            // records' images may be gone from the stream.
            let settled = !catch_up.hold
                && catch_up
                    .found
                    .iter()
                    .all(|id| resolved.contains(id.as_str()));
            let saved = match (settled, catch_up.done) {
                (true, true) => self.end_catch_up(plan.listed_at).await,
                (settled, _) => {
                    let at = if settled {
                        catch_up.next
                    } else {
                        catch_up.from
                    };
                    let mut item = self.layout.key(CATCH_UP_ID);
                    item.insert(
                        POSITION.to_owned(),
                        s(&format!("scan:{}", at.unwrap_or_default())),
                    );
                    item.insert(self.layout.expires_at.clone(), expires.clone());
                    self.put_if_newer(item, plan.listed_at, "PutItem (sweeper catch-up)")
                        .await
                        .map(drop)
                }
            };
            if let Err(err) = saved {
                tracing::error!(error = %err, "saving the sweeper's catch-up place failed; the next sweep scans that part again");
                failures.push(err);
                past_covered = false;
            }
        }
        for (shard, (position, carry, unknown_past)) in positions {
            if unknown_past && !past_covered {
                // Saved, this place would hide that its past is unknown.
                continue;
            }
            let mut item = self.layout.key(&format!("{POSITION_PREFIX}{shard}"));
            item.insert(POSITION.to_owned(), s(&position));
            item.insert(CARRY.to_owned(), s(&carry));
            item.insert(self.layout.expires_at.clone(), expires.clone());
            if let Err(err) = self
                .put_if_newer(item, plan.listed_at, "PutItem (sweeper position)")
                .await
            {
                tracing::error!(shard, error = %err, "saving the sweeper's place in a shard failed; the next sweep reads it again");
                failures.push(err);
            }
        }
        match failures.len() {
            0 => Ok(()),
            1 => Err(failures.remove(0)),
            more => Err(Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "saving {more} of the sweeper's places failed (the next sweep reads those \
                     parts again); the first: {}",
                    failures.remove(0)
                ),
            )),
        }
    }

    /// The catch-up scan reached the table's end: its item goes, unless a
    /// later listing wrote it (then that listing ends it).
    async fn end_catch_up(&self, listed_at: u64) -> Result<(), Error> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(CATCH_UP_ID)))
            .condition_expression("attribute_not_exists(#listed_at) OR #listed_at <= :listed_at")
            .expression_attribute_names("#listed_at", LISTED_AT)
            .expression_attribute_values(":listed_at", n(listed_at))
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(()),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(err) => Err(self.unavailable("DeleteItem (sweeper catch-up)", err)),
        }
    }
}

/// What reading one shard adds to its listing.
struct ShardReading<'a> {
    index: usize,
    plan: &'a mut Plan,
    latest: &'a mut HashMap<String, Candidate>,
    reads: &'a mut u64,
    trimmed: &'a mut bool,
}

/// One listing's catch-up pages, and whether one failed.
struct CatchUpRun {
    plan: CatchUp,
    failed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_items_are_the_sweeper_items_scans_skip() {
        assert!(POSITION_PREFIX.starts_with(super::super::SWEEPER_ITEM_PREFIX));
        // The layout refuses key and expiry attributes of these names.
        assert_eq!(
            super::super::layout::POSITION_ATTRS,
            [POSITION, CARRY, LISTED_AT]
        );
        assert!(CATCH_UP_ID.starts_with(super::super::SWEEPER_ITEM_PREFIX));
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_stream_follows_dynamodb_unless_its_own_variable_is_set() {
        const LOCAL: &str = "http://127.0.0.1:8000";
        assert_eq!(streams_endpoint(env(&[])), None);
        // docs/sam-local.md's one variable for DynamoDB Local.
        assert_eq!(
            streams_endpoint(env(&[(DYNAMODB_ENDPOINT_ENV, LOCAL)])).as_deref(),
            Some(LOCAL)
        );
        // `sam local`: declared in the template, so set, and empty.
        assert_eq!(
            streams_endpoint(env(&[
                (DYNAMODB_ENDPOINT_ENV, LOCAL),
                (STREAMS_ENDPOINT_ENV, "")
            ]))
            .as_deref(),
            Some(LOCAL)
        );
        assert_eq!(
            streams_endpoint(env(&[
                (DYNAMODB_ENDPOINT_ENV, " "),
                (STREAMS_ENDPOINT_ENV, "")
            ])),
            None
        );
        assert_eq!(
            streams_endpoint(env(&[
                (DYNAMODB_ENDPOINT_ENV, LOCAL),
                (STREAMS_ENDPOINT_ENV, "http://streams:9")
            ]))
            .as_deref(),
            Some("http://streams:9")
        );
        assert_eq!(
            streams_endpoint(env(&[("AWS_ENDPOINT_URL", "http://all:1")])).as_deref(),
            Some("http://all:1")
        );
        assert_eq!(
            streams_endpoint(env(&[
                (DYNAMODB_ENDPOINT_ENV, LOCAL),
                ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
            ])),
            None
        );
    }

    #[test]
    fn the_templates_put_item_grant_covers_the_position_items() {
        // template.yaml scopes the sweeper's PutItem to these keys
        // (dynamodb:LeadingKeys): its places in the stream and the catch-up
        // scan's place; scripts/check-template.py checks the rest, and
        // scripts/check-iam.py evaluates the recorded puts against it.
        let template = include_str!("../../../../template.yaml");
        let condition =
            format!("dynamodb:LeadingKeys: [\"{POSITION_PREFIX}*\", \"{CATCH_UP_ID}\"]");
        assert!(
            template.contains(&condition),
            "template.yaml's sweeper PutItem condition must be {condition}"
        );
    }

    #[test]
    fn sequence_numbers_compare_as_numbers() {
        use std::cmp::Ordering::*;
        assert_eq!(sequence_order("9", "10"), Less);
        assert_eq!(sequence_order("000000000000000000002", "10"), Less);
        assert_eq!(sequence_order("300", "200"), Greater);
        assert_eq!(sequence_order("007", "7"), Equal);
    }
}
