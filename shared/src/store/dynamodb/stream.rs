//! Stuck records found through the table's stream instead of an index
//! (feature `sweep-via-stream`): the hot path writes nothing for the sweeper.
//!
//! Two readers make one listing:
//!
//! - **The stream, the fast path.** The table's stream (view type
//!   `NEW_IMAGE`, or `NEW_AND_OLD_IMAGES`; any other view type is refused,
//!   since its records carry no new image) logs every claim, recovery point,
//!   completion and deletion, in order per record. A listing reads each shard
//!   from where the last finished sweep left it, parents before children (a
//!   record's images are in order only along its own lineage), and keeps the
//!   latest image of every record: one in progress with a lease over before
//!   the cutoff is stuck; one completed or deleted afterwards drops out.
//! - **The full pass, the backstop.** A scan of the table for records in
//!   progress with a lease over before the cutoff, resumable and budgeted
//!   ([`PASS_PAGES`] pages per listing), which starts every
//!   [`full_pass`](super::DynamoStoreBuilder::full_pass) period
//!   ([`DEFAULT_FULL_PASS`] by default) and at once when the stream shows a
//!   gap: a place trimmed before it was read (`TrimmedDataAccessException`),
//!   a place saved at the trim horizon longer ago than the stream's
//!   retention, a shard with no place and no parent to come from (the first
//!   listing, or places expired). Whatever the stream does, a defect of this
//!   reader included, a record stuck at any time is found within lease +
//!   grace + the period + the pass's own duration (one sweep where a pass fits
//!   one sweep's budget). A pass that outlives its period is reported
//!   (`behind`, as is a gap), so the bound is never broken in silence.
//!
//! Reading a shard follows `NextShardIterator` past empty pages (the service
//! answers them while records lie further on), at most
//! [`MAX_READS_PER_SHARD`] calls per shard and [`MAX_READS_PER_LISTING`] in
//! all; an open shard counts as read to the present after
//! [`EMPTY_PAGES_AT_THE_PRESENT`] empty pages in a row. Where the listing
//! stopped in a shard with nothing to read again, the next listing goes on
//! from the iterator it stopped at while that is fresh
//! ([`ITERATOR_MAX_AGE_MS`]), so a long run of empty pages is crossed over
//! several sweeps instead of read again from its start each time. A shard
//! that fails (throttled past the SDK's retries, or an error) costs that
//! shard, counted in `failed_reads`: what was read of it before is kept,
//! its children wait for the next listing, the other shards are read. A
//! listing given a deadline stops reading there and returns what it read,
//! `incomplete` set.
//!
//! [`finish`](crate::store::SweepStore::finish) saves, per shard, where the
//! next listing starts: at the earliest record this listing saw in progress
//! that the sweep did not resolve (still live, not reached, or failed),
//! else after the last record read. A stuck record holding a recovery point
//! (left for its retry under `release`, perhaps for a day) does not hold
//! the place: the next full pass finds it again. Places are small items in
//! the table itself (record id `~sweeper/stream/<shard id>`, the pass's
//! `~sweeper/full-pass`, keyed as the table layout keys a record with that
//! id, expiring through TTL after two days, when the stream has long trimmed
//! the shard). Each carries the time its listing started (`listed_at`) and
//! is written on the condition that no later listing saved it already, so
//! of two overlapping sweeps the older never moves a place back.
//!
//! Reading a stream from Lambda or the SDK costs no table capacity; a full
//! pass reads (and is billed for) the whole table once per period
//! (docs/SCALING.md).
//!
//! `stream/shards.rs` lists the shards in reading order, `stream/read.rs`
//! reads one shard, `stream/pass.rs` runs the full pass, `stream/list.rs`
//! makes the listing of them, and `stream/settle.rs` saves the places a
//! finished listing leaves.

mod list;
mod pass;
mod read;
mod settle;
mod shards;

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
/// a lease is still live when the stream trims its claim: once its lease is
/// over no stream record shows it again, and only the full pass (up to its
/// period later, never with the periodic pass off) finds it. The sweeper
/// function calls it at its cold start.
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
             record is shown by the stream no more, only a full pass finds it; set max_lease \
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
/// Id of the item that keeps the full pass's place and start.
const PASS_ID: &str = "~sweeper/full-pass";
/// Position attribute: `at:<seq>` (start at), `after:<seq>` (start after)
/// or `horizon:<ms>` (the trim horizon: nothing of the shard was read up to
/// that time); in the pass item, `scan:<key>` while a pass runs (`scan:` =
/// the table's start), `done:` when none does.
const POSITION: &str = "position";
/// Where a shard's reading stopped past its position (an iterator, with
/// [`ITERATOR_AT`]): the next listing goes on from there while it is fresh.
const ITERATOR: &str = "iterator";
/// When [`ITERATOR`] was handed out (epoch ms).
const ITERATOR_AT: &str = "iterator_at";
/// When the listing that saved the item started (epoch ms): an item is only
/// replaced by a listing that started as late or later.
const LISTED_AT: &str = "listed_at";
/// In the pass item: when the current (or last) pass started (epoch ms).
const STARTED_AT: &str = "started_at";
/// A position of the trim horizon.
const HORIZON: &str = "horizon";
/// The service hands out iterators valid for 15 minutes; one saved is used
/// for 10, leaving the listing time to read with it.
pub(crate) const ITERATOR_MAX_AGE_MS: u64 = 10 * 60 * 1000;
/// GetRecords calls per listing in all, so one listing stays well inside a
/// sweep's time whatever the number of shards.
pub(crate) const MAX_READS_PER_LISTING: u64 = 2_000;
/// GetRecords calls per shard per listing (up to 1,000 records each): a
/// backlog larger than that is read on by the next listing.
pub(crate) const MAX_READS_PER_SHARD: u32 = 200;
/// Empty pages in a row after which an open shard counts as read to the
/// present. The API gives no end for an open shard and answers empty pages
/// where records lie further on (a few in a row), so one empty page is not
/// the end; an open shard at the present answers empty pages forever. Where
/// the shard stopped is kept ([`ITERATOR`]): the next listing goes on.
pub(crate) const EMPTY_PAGES_AT_THE_PRESENT: u32 = 8;
/// Scan pages (up to 1,000 items each) a full pass reads per listing at
/// least; more where the table's size asks for more to finish within the
/// period (twice its share of the table per listing, at most
/// [`PASS_PAGES_MAX`]), always within the listing's deadline.
pub(crate) const PASS_PAGES: usize = 10;
/// At most this many scan pages per listing.
pub(crate) const PASS_PAGES_MAX: usize = 300;
/// How often a full pass of the table starts by default: one hour
/// (`IDEMPOTENCY_SWEEP_FULL_PASS_SECONDS`).
pub const DEFAULT_FULL_PASS: Duration = Duration::from_secs(3600);
/// Positions outlive the 24-hour stream with room to spare.
const POSITION_TTL_S: u64 = 2 * 24 * 3600;

/// Where a listing starts in one shard, as the last finished listing left it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Start {
    At(String),
    After(String),
    /// Read from the trim horizon: nothing of the shard was seen up to
    /// `seen_to` (epoch ms; `None` when not known, as in a place saved by
    /// an older version): past the retention, what came since may be gone.
    Horizon {
        seen_to: Option<u64>,
    },
    /// No place saved.
    Unknown,
}

impl Start {
    fn parse(position: Option<&str>) -> Start {
        match position.and_then(|p| p.split_once(':')) {
            Some(("at", seq)) => Start::At(seq.to_owned()),
            Some(("after", seq)) => Start::After(seq.to_owned()),
            Some((HORIZON, at)) => Start::Horizon {
                seen_to: at.parse().ok(),
            },
            _ => Start::Unknown,
        }
    }
}

/// The latest in-progress image of a record, and where it was read.
#[derive(Debug, Clone)]
struct Candidate {
    attempt: u64,
    owner: String,
    lease_expires_at_ms: u64,
    has_checkpoint: bool,
    shard: usize,
    sequence: String,
}

/// What `finish` needs, in the listing's opaque text: per shard, how far
/// it was read and the records that hold it; the full pass's part.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Plan {
    shards: Vec<ShardPlan>,
    /// When the listing started (epoch ms): the condition of every write.
    listed_at: u64,
    /// The full pass this listing ran, if any.
    pass: Option<PassPlan>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct ShardPlan {
    shard: String,
    /// Last sequence number read (none read: keep the saved position).
    end: Option<String>,
    /// Where reading stopped, to go on from while fresh, and when it was
    /// handed out (epoch ms).
    iterator: Option<(String, u64)>,
    /// Records seen in progress here that the place must wait for (live,
    /// or stuck without a recovery point): (sequence, id).
    pins: Vec<(String, String)>,
    /// The place this listing started from, as saved.
    start: Option<String>,
    /// What came before this listing's start is unknown (a gap): the full
    /// pass this listing started covers it, so the place is saved only
    /// once the pass's is.
    gap: bool,
}

/// One listing's part of a full pass.
#[derive(Debug, Default, Serialize, Deserialize)]
struct PassPlan {
    /// When the pass started (epoch ms).
    started_at: u64,
    /// Where this listing's pages started (`None`: the table's start).
    from: Option<String>,
    /// Where the next listing goes on.
    next: Option<String>,
    /// The pass reached the table's end.
    done: bool,
    /// Stuck records it found: it moves on once all are resolved.
    found: Vec<String>,
    /// A gap started it: until done, the listing may miss records.
    catching_up: bool,
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
        self.stream_of_table().await.map(|(arn, _)| arn)
    }

    /// [`stream_arn`](Self::stream_arn), and the table's item count as
    /// DescribeTable says it (updated about every six hours): what a full
    /// pass has to read.
    async fn stream_of_table(&self) -> Result<(String, u64), Error> {
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
        let items = table
            .and_then(|t| t.item_count())
            .and_then(|count| u64::try_from(count).ok())
            .unwrap_or(0);
        Ok((arn.to_owned(), items))
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
            [POSITION, ITERATOR, ITERATOR_AT, LISTED_AT, STARTED_AT]
        );
        assert!(PASS_ID.starts_with(super::super::SWEEPER_ITEM_PREFIX));
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
        // (dynamodb:LeadingKeys): its places in the stream and the full
        // pass's place; scripts/check-template.py checks the rest, and
        // scripts/check-iam.py evaluates the recorded puts against it.
        let template = include_str!("../../../../template.yaml");
        let condition = format!("dynamodb:LeadingKeys: [\"{POSITION_PREFIX}*\", \"{PASS_ID}\"]");
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
