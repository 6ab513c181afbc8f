//! Stuck records found through the table's stream instead of an index
//! (feature `streams`): the hot path writes nothing for the sweeper.
//!
//! The table's stream (view type `NEW_IMAGE`, or `NEW_AND_OLD_IMAGES`) logs
//! every claim, recovery point, completion and deletion in order per record.
//! A listing reads each shard from where the last settled sweep left it
//! (parents before children, so a record's images come in order) and keeps
//! the latest image of every record: one whose latest image is in progress
//! with a lease over before the cutoff is stuck; one completed or deleted
//! afterwards drops out. Nothing is written while listing.
//!
//! [`settle`](super::DynamoStore) saves, per shard, where the next listing
//! starts: at the earliest record this listing saw in progress that the
//! sweep did not resolve (still live, not reached, or failed), else after
//! the last record read. Positions are small items in the table itself
//! (record id `~sweeper/stream/<shard id>`, keyed as the table layout keys a
//! record with that id, expiring through TTL after two days,
//! when the stream has long trimmed the shard). A stuck record holding a
//! recovery point (left for its retry under `release`, perhaps for a day) does
//! not pin the place: the item carries it to the next listing, until its
//! retry, a `fail` sweep or its expiry shows up in the stream.
//!
//! Reading a stream from Lambda or the SDK costs no table capacity; records
//! live 24 hours in it, so the sweeper must run well within that.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodbstreams::types::{
    AttributeValue as StreamValue, OperationType, ShardIteratorType,
};
use serde::{Deserialize, Serialize};

use super::{n, s, DynamoStore};
use crate::error::{Error, ErrorKind};
use crate::record::Status;
use crate::store::{Settlement, StuckPage, StuckRecord};

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
/// Position attribute: `at:<seq>` (start at) or `after:<seq>` (start after).
const POSITION: &str = "position";
/// Stuck records kept for their recovery point, carried from listing to
/// listing (JSON), so the place need not wait for them.
const CARRY: &str = "carry";
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

    /// The table's current stream, or a configuration error saying how to
    /// enable it.
    async fn stream_arn(&self) -> Result<String, Error> {
        let described = self
            .client
            .describe_table()
            .table_name(&*self.table)
            .send()
            .await
            .map_err(|err| self.unavailable("DescribeTable (stream)", err))?;
        described
            .table()
            .and_then(|t| t.latest_stream_arn())
            .filter(|_| {
                described
                    .table()
                    .and_then(|t| t.stream_specification())
                    .is_some_and(|s| s.stream_enabled())
            })
            .map(str::to_owned)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "table `{}` has no stream: enable one with view type NEW_IMAGE \
                         (StreamSpecification in the template) for the sweeper to find stuck \
                         records",
                        self.table
                    ),
                )
            })
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

    /// Every record the stream shows in progress with its lease over before
    /// `cutoff_ms`, in one page, and the settlement that saves this
    /// listing's place once the sweep says what it resolved.
    pub(super) async fn stuck_from_stream(
        &self,
        streams: &aws_sdk_dynamodbstreams::Client,
        cutoff_ms: u64,
    ) -> Result<StuckPage, Error> {
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
        let ids: std::collections::HashSet<&str> =
            shards.iter().filter_map(|s| s.shard_id()).collect();
        let mut ordered: Vec<&aws_sdk_dynamodbstreams::types::Shard> = Vec::new();
        let mut placed: std::collections::HashSet<&str> = std::collections::HashSet::new();
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

        let mut plan = Plan::default();
        let mut latest: HashMap<String, Candidate> = HashMap::new();
        let mut reads = 0u64;
        let mut unread = false;
        for shard in &ordered {
            let Some(shard_id) = shard.shard_id() else {
                continue;
            };
            let index = plan.shards.len();
            let (start, saved, carried) = self.saved_start(shard_id).await?;
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
            let mut request = streams
                .get_shard_iterator()
                .stream_arn(&arn)
                .shard_id(shard_id);
            request = match &start {
                Start::At(seq) => request
                    .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                    .sequence_number(seq),
                Start::After(seq) => request
                    .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                    .sequence_number(seq),
                Start::TrimHorizon => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
            };
            let iterator = match request.send().await {
                Ok(out) => out.shard_iterator().map(str::to_owned),
                Err(err)
                    if err
                        .as_service_error()
                        .is_some_and(|e| e.is_trimmed_data_access_exception()) =>
                {
                    // The saved place is older than the stream keeps (the
                    // sweeper did not run for a day): read what is left.
                    tracing::warn!(
                        shard = shard_id,
                        "the stream trimmed records the sweeper had not read: records claimed \
                         then and stuck since are not found; run the sweeper more often"
                    );
                    streams
                        .get_shard_iterator()
                        .stream_arn(&arn)
                        .shard_id(shard_id)
                        .shard_iterator_type(ShardIteratorType::TrimHorizon)
                        .send()
                        .await
                        .map_err(|err| self.stream_error("GetShardIterator", err))?
                        .shard_iterator()
                        .map(str::to_owned)
                }
                Err(err) => return Err(self.stream_error("GetShardIterator", err)),
            };
            let mut iterator = iterator;
            let mut calls = 0;
            while let Some(current) = iterator.take() {
                if calls == MAX_READS_PER_SHARD || reads >= MAX_READS_PER_LISTING {
                    unread = true;
                    break;
                }
                calls += 1;
                let out = streams
                    .get_records()
                    .shard_iterator(current)
                    .limit(1000)
                    .send()
                    .await
                    .map_err(|err| self.stream_error("GetRecords", err))?;
                reads += 1;
                let records = out.records();
                for record in records {
                    let Some(change) = record.dynamodb() else {
                        continue;
                    };
                    let Some(sequence) = change.sequence_number() else {
                        continue;
                    };
                    if let Some(last) = plan.shards.last_mut() {
                        last.end = Some(sequence.to_owned());
                    }
                    // Images of other items of a shared table are not records.
                    let Some(id) = change.keys().and_then(|k| self.layout.record_id_of(k)) else {
                        continue;
                    };
                    if id.starts_with(POSITION_PREFIX) {
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
                                            has_checkpoint: image
                                                .contains_key(&self.layout.checkpoint),
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
                // An open shard answers nothing once it is read to its end.
                if records.is_empty() {
                    break;
                }
                iterator = out.next_shard_iterator().map(str::to_owned);
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
            failed_reads: 0,
            unread,
            settlement: Some(Settlement(settlement)),
        })
    }

    /// Save where the next listing starts in each shard the settled listing
    /// read: at the earliest record it saw in progress that is not in
    /// `resolved`, else after the last record it read.
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
        let resolved: std::collections::HashSet<&str> =
            resolved.iter().map(String::as_str).collect();
        let mut positions: BTreeMap<String, (String, String)> = BTreeMap::new();
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
                (None, None, None) if shard.carry.is_empty() => continue,
                (None, None, None) => String::new(),
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
            positions.insert(shard.shard, (position, carry));
        }
        for (shard, (position, carry)) in positions {
            let mut item = self.layout.key(&format!("{POSITION_PREFIX}{shard}"));
            item.insert(POSITION.to_owned(), s(&position));
            item.insert(CARRY.to_owned(), s(&carry));
            item.insert(
                self.layout.expires_at.clone(),
                n(now_ms / 1000 + POSITION_TTL_S),
            );
            self.client
                .put_item()
                .table_name(&*self.table)
                .set_item(Some(item))
                .send()
                .await
                .map_err(|err| self.unavailable("PutItem (sweeper position)", err))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_items_are_the_sweeper_items_scans_skip() {
        assert!(POSITION_PREFIX.starts_with(super::super::SWEEPER_ITEM_PREFIX));
        // The layout refuses key and expiry attributes of these names.
        assert_eq!(super::super::layout::POSITION_ATTRS, [POSITION, CARRY]);
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
        // The README's one variable for DynamoDB Local.
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
        // (dynamodb:LeadingKeys); scripts/check-template.py checks the rest.
        let template = include_str!("../../../../template.yaml");
        assert!(
            template.contains(&format!("dynamodb:LeadingKeys: [\"{POSITION_PREFIX}*\"]")),
            "template.yaml's sweeper PutItem condition must name {POSITION_PREFIX}*"
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
