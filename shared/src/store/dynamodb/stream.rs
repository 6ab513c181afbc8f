//! Stuck records found through the table's stream instead of an index
//! (feature `sweep-via-stream`): the hot path writes nothing for the sweeper.
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
//! answers them while records lie further on): a closed shard (it has an
//! ending sequence number) until its iterator ends, however many empty
//! pages come on the way; an open shard until
//! [`EMPTY_PAGES_AT_THE_PRESENT`] empty pages in a row say the listing has
//! reached the present. A shard that fails (throttled past the SDK's
//! retries, or an error) costs that shard, counted in `failed_reads`: what
//! was read of it before is kept, its children wait for the next listing
//! (their images come after its own), the other shards are read. A listing
//! given a deadline ([`StuckRequest::deadline_ms`](crate::store::StuckRequest::deadline_ms)) stops
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
//! or its expiry shows up in the stream. What an item carries is bounded by
//! bytes ([`MAX_CARRY_BYTES`]) and none is dropped: the place stays before
//! the first record of the stream that does not fit, and one no stream place
//! shows again (found by the catch-up scan) keeps the scan on it. A closed
//! shard read to its end hands what it carries to a child, so nothing
//! carried leaves with the shard a day later.
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
//! catch-up is done. A trimmed place with nothing newer readable (a shard
//! idle for a day) is saved as the trim horizon, so the trim is reported
//! once. So a record stuck at any time is found within a bounded number of
//! sweeps, whatever happened to the stream, as long as no lease outlives
//! the stream's retention ([`check_lease_within_stream`]).
//!
//! Reading a stream from Lambda or the SDK costs no table capacity; the
//! catch-up scan reads (and is billed for) the whole table, once per outage.
//!
//! `stream/list.rs` reads the stream (and runs the catch-up scan) into a
//! listing; `stream/settle.rs` saves the places a settled listing leaves.

mod list;
mod settle;

use std::time::Duration;

use aws_sdk_dynamodb::types::StreamViewType;
use serde::{Deserialize, Serialize};

use super::DynamoStore;
use crate::error::{Error, ErrorKind};

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
/// For [`DynamoStoreBuilder::with_stream_at`](super::DynamoStoreBuilder::with_stream_at); the sweeper and the CLI both use it.
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

/// How long DynamoDB Streams keeps a record: 24 hours.
pub const STREAM_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// Refuse a longest lease (`max_lease`, the writers'
/// [`IdempotencyConfig::max_lease`](crate::IdempotencyConfig::max_lease))
/// that, with the sweeper's `grace`, reaches [`STREAM_RETENTION`], where the
/// stream is how the sweeper finds stuck records. A record claimed with such
/// a lease is still live when the stream trims its claim: a catch-up scan
/// that passes it then skips it (live), and once its lease is over no
/// stream record and no scan shows it again. The sweeper function calls it
/// at its cold start.
///
/// # Errors
///
/// [`ErrorKind::InvalidConfig`] in one line naming both values and the
/// longest lease allowed.
pub fn check_lease_within_stream(max_lease: Duration, grace: Duration) -> Result<(), Error> {
    let covered = max_lease.saturating_add(grace);
    if covered < STREAM_RETENTION {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::InvalidConfig,
        format!(
            "a longest lease (max_lease) of {} s plus the sweeper's grace of {} s reaches the \
             stream's retention of {} s: a record whose lease outlives its claim's stream \
             record is found by no sweep once a catch-up scan passed it live; set max_lease \
             below {} s, or find stuck records through the sparse sweep index instead of the \
             stream",
            max_lease.as_secs(),
            grace.as_secs(),
            STREAM_RETENTION.as_secs(),
            STREAM_RETENTION.saturating_sub(grace).as_secs()
        ),
    ))
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
/// At most this many bytes of carried records per shard (about 1,400
/// records; they are rare: a crash after a recovery point and no retry), so
/// the position item stays within DynamoDB's 400 KB item limit with room
/// for its key and place. Beyond, none is dropped: the place stays before
/// the first that does not fit (the stream shows it again), or, for one
/// the stream no longer shows, the catch-up scan finds it again.
const MAX_CARRY_BYTES: usize = 350_000;
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
    /// The place this listing started from was trimmed: saved again, it
    /// would be refused again at every listing.
    #[serde(default)]
    start_trimmed: bool,
    /// A closed shard read to its end: the child that took over what it
    /// carried (its place is saved only once the child's is).
    #[serde(default)]
    heir: Option<String>,
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
    fn a_lease_the_stream_cannot_cover_is_refused_naming_both_values() {
        let minute = Duration::from_secs(60);
        assert!(check_lease_within_stream(Duration::from_secs(900), minute).is_ok());
        assert!(check_lease_within_stream(STREAM_RETENTION - 2 * minute, minute).is_ok());
        for max_lease in [
            STREAM_RETENTION - minute,
            STREAM_RETENTION,
            2 * STREAM_RETENTION,
        ] {
            let err = check_lease_within_stream(max_lease, minute).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            let message = err.to_string();
            assert!(
                message.contains(&format!("{} s", max_lease.as_secs()))
                    && message.contains("86400 s")
                    && message.contains("below 86340 s")
                    && !message.contains('\n'),
                "{message}"
            );
        }
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
