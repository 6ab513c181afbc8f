//! Reading one shard of the stream: from where the last finished listing
//! left it (or the iterator it stopped at, while fresh), following empty
//! pages, into the listing's latest image of every record.

use std::collections::HashMap;

use aws_sdk_dynamodbstreams::types::{
    AttributeValue as StreamValue, OperationType, Record, ShardIteratorType,
};

use super::super::{DynamoStore, SWEEPER_ITEM_PREFIX};
use super::{
    Candidate, ShardPlan, Start, EMPTY_PAGES_AT_THE_PRESENT, ITERATOR, ITERATOR_AT,
    ITERATOR_MAX_AGE_MS, MAX_READS_PER_LISTING, MAX_READS_PER_SHARD, POSITION, POSITION_PREFIX,
    STREAM_RETENTION,
};
use crate::clock::{millis, now_ms};
use crate::error::Error;
use crate::record::Status;

/// A shard's place as the last finished listing saved it.
#[derive(Debug)]
pub(super) struct SavedPlace {
    pub(super) start: Start,
    /// The position as saved (`None`: no item).
    pub(super) position: Option<String>,
    /// Where that listing stopped reading past the position, and when the
    /// iterator was handed out (epoch ms).
    pub(super) iterator: Option<(String, u64)>,
}

/// New iterators a shard's reading may ask for when the one it reads with
/// is refused as expired or trimmed, per listing.
const MAX_FALLBACKS: u32 = 2;

/// How one shard's reading ended (a failed call is an `Err`: what was read
/// before it is kept all the same).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ShardEnd {
    /// A closed shard read to its end: no next iterator.
    Ended,
    /// An open shard read to the present.
    Present,
    /// Read up to the listing's budget of reads: the rest is for the next.
    Budget,
    /// The listing's deadline came.
    OutOfTime,
}

/// One shard to read, and the listing's state it reads into.
pub(super) struct ShardRead<'a> {
    pub(super) streams: &'a aws_sdk_dynamodbstreams::Client,
    pub(super) arn: &'a str,
    pub(super) index: usize,
    /// The shard is closed (it has an ending sequence number): only an open
    /// shard's empty pages can mean the present.
    pub(super) closed: bool,
    /// Its parent was read in this listing (or earlier): a shard without a
    /// place whose parent the stream no longer holds has an unknown past.
    pub(super) parent_read: bool,
    pub(super) deadline_ms: Option<u64>,
    pub(super) plan: &'a mut ShardPlan,
    pub(super) latest: &'a mut HashMap<String, Candidate>,
    pub(super) reads: &'a mut u64,
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
pub(super) async fn within<T>(
    deadline_ms: Option<u64>,
    f: impl std::future::Future<Output = T>,
) -> Option<T> {
    match deadline_ms {
        None => Some(f.await),
        Some(deadline) => {
            let left = deadline.saturating_sub(now_ms());
            tokio::time::timeout(std::time::Duration::from_millis(left), f)
                .await
                .ok()
        }
    }
}

impl DynamoStore {
    /// Where the last finished listing left `shard`.
    pub(super) async fn saved_place(&self, shard: &str) -> Result<SavedPlace, Error> {
        let out = self
            .client
            .get_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&format!("{POSITION_PREFIX}{shard}"))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| self.unavailable("GetItem (sweeper position)", err))?;
        let item = out.item();
        let attr = |name: &str| item.and_then(|i| i.get(name));
        let position = attr(POSITION).and_then(|v| v.as_s().ok()).cloned();
        let iterator = attr(ITERATOR).and_then(|v| v.as_s().ok()).zip(
            attr(ITERATOR_AT)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok()),
        );
        Ok(SavedPlace {
            start: Start::parse(position.as_deref()),
            position,
            iterator: iterator.map(|(i, at)| (i.clone(), at)),
        })
    }

    /// Read one shard from `saved` into the listing, up to its end, the
    /// present, the budget or the deadline.
    pub(super) async fn read_shard(
        &self,
        shard_id: &str,
        saved: &SavedPlace,
        mut read: ShardRead<'_>,
    ) -> Result<ShardEnd, Error> {
        let Some(first) = self.first_iterator(shard_id, saved, &mut read).await? else {
            return Ok(ShardEnd::OutOfTime);
        };
        let (mut iterator, _) = first;
        let mut calls = 0;
        let mut empty_in_a_row = 0;
        let mut fallbacks = 0;
        while let Some(current) = iterator.take() {
            if calls == MAX_READS_PER_SHARD || *read.reads >= MAX_READS_PER_LISTING {
                return Ok(ShardEnd::Budget);
            }
            calls += 1;
            let asked = read
                .streams
                .get_records()
                .shard_iterator(&current)
                .limit(1000)
                .send();
            let Some(asked) = within(read.deadline_ms, asked).await else {
                return Ok(ShardEnd::OutOfTime);
            };
            let out = match asked {
                Ok(out) => out,
                // The iterator outlived the service's 15 minutes (one saved
                // by the last listing), or is refused as trimmed (DynamoDB
                // Local refuses some it handed out): a new one after the
                // last record read, else at the saved place, which says for
                // itself whether it was trimmed (a gap).
                Err(err)
                    if fallbacks < MAX_FALLBACKS
                        && err.as_service_error().is_some_and(|e| {
                            e.is_expired_iterator_exception()
                                || e.is_trimmed_data_access_exception()
                        }) =>
                {
                    fallbacks += 1;
                    let again = SavedPlace {
                        start: match &read.plan.end {
                            Some(end) => Start::After(end.clone()),
                            None => saved.start.clone(),
                        },
                        position: saved.position.clone(),
                        iterator: None,
                    };
                    match self.first_iterator(shard_id, &again, &mut read).await? {
                        Some((next, _)) => iterator = next,
                        None => return Ok(ShardEnd::OutOfTime),
                    }
                    continue;
                }
                Err(err) => return Err(self.stream_error("GetRecords", err)),
            };
            *read.reads += 1;
            let records = out.records();
            for record in records {
                self.take_image(record, read.index, read.plan, read.latest);
            }
            iterator = out.next_shard_iterator().map(str::to_owned);
            // Where to go on from, past this page (empty or not).
            read.plan.iterator = iterator.clone().map(|i| (i, now_ms()));
            if records.is_empty() && !read.closed {
                empty_in_a_row += 1;
                if empty_in_a_row >= EMPTY_PAGES_AT_THE_PRESENT {
                    return Ok(ShardEnd::Present);
                }
            } else {
                empty_in_a_row = 0;
            }
        }
        Ok(ShardEnd::Ended)
    }

    /// The iterator the shard's reading starts with, and whether it is the
    /// one the last listing saved; `None` when the deadline came first.
    /// Marks the shard's plan with a gap where what came before its start
    /// cannot be known.
    async fn first_iterator(
        &self,
        shard_id: &str,
        saved: &SavedPlace,
        read: &mut ShardRead<'_>,
    ) -> Result<Option<(Option<String>, bool)>, Error> {
        let listed_at = now_ms();
        if let Some((iterator, at)) = &saved.iterator {
            if listed_at.saturating_sub(*at) < ITERATOR_MAX_AGE_MS {
                return Ok(Some((Some(iterator.clone()), true)));
            }
        }
        let retention = millis(STREAM_RETENTION);
        let (kind, sequence) = match &saved.start {
            Start::At(seq) => (ShardIteratorType::AtSequenceNumber, Some(seq)),
            Start::After(seq) => (ShardIteratorType::AfterSequenceNumber, Some(seq)),
            Start::Horizon { seen_to } => {
                // Records written since `seen_to` are still in the stream
                // only within the retention.
                if seen_to.is_none_or(|seen| listed_at.saturating_sub(seen) >= retention) {
                    self.gap(
                        shard_id,
                        read.plan,
                        "its trim horizon was last read too long ago",
                    );
                }
                (ShardIteratorType::TrimHorizon, None)
            }
            Start::Unknown => {
                if !read.parent_read {
                    self.gap(
                        shard_id,
                        read.plan,
                        "it has no place and no parent to come from",
                    );
                }
                (ShardIteratorType::TrimHorizon, None)
            }
        };
        let asked = self.iterator_at(read, shard_id, kind, sequence);
        let Some(asked) = within(read.deadline_ms, asked).await else {
            return Ok(None);
        };
        match asked {
            Ok(out) => Ok(Some((out.shard_iterator().map(str::to_owned), false))),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_trimmed_data_access_exception()) =>
            {
                self.gap(
                    shard_id,
                    read.plan,
                    "the stream trimmed records the sweeper had not read",
                );
                let asked = self.iterator_at(read, shard_id, ShardIteratorType::TrimHorizon, None);
                let Some(asked) = within(read.deadline_ms, asked).await else {
                    return Ok(None);
                };
                let out = asked.map_err(|err| self.stream_error("GetShardIterator", err))?;
                Ok(Some((out.shard_iterator().map(str::to_owned), false)))
            }
            Err(err) => Err(self.stream_error("GetShardIterator", err)),
        }
    }

    async fn iterator_at(
        &self,
        read: &ShardRead<'_>,
        shard_id: &str,
        kind: ShardIteratorType,
        sequence: Option<&String>,
    ) -> Result<
        aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorOutput,
        aws_sdk_dynamodbstreams::error::SdkError<
            aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorError,
        >,
    > {
        read.streams
            .get_shard_iterator()
            .stream_arn(read.arn)
            .shard_id(shard_id)
            .shard_iterator_type(kind)
            .set_sequence_number(sequence.cloned())
            .send()
            .await
    }

    /// What came before the shard's start cannot be known: a full pass
    /// covers it, started by this listing.
    fn gap(&self, shard_id: &str, plan: &mut ShardPlan, why: &str) {
        tracing::warn!(
            shard = shard_id,
            why,
            "the stream cannot show what came before the sweeper's place in this shard; a full \
             pass of the table finds the records stuck meanwhile"
        );
        plan.gap = true;
    }

    /// One stream record into the listing: the record's latest image.
    fn take_image(
        &self,
        record: &Record,
        index: usize,
        plan: &mut ShardPlan,
        latest: &mut HashMap<String, Candidate>,
    ) {
        let Some(change) = record.dynamodb() else {
            return;
        };
        let Some(sequence) = change.sequence_number() else {
            return;
        };
        plan.end = Some(sequence.to_owned());
        // Images of other items of a shared table are not records.
        let Some(id) = change.keys().and_then(|k| self.layout.record_id_of(k)) else {
            return;
        };
        if id.starts_with(SWEEPER_ITEM_PREFIX) {
            return;
        }
        let image = change.new_image();
        let status = image.and_then(|i| text(i, &self.layout.status));
        let in_progress = match (record.event_name(), image, status.as_deref()) {
            (Some(OperationType::Remove), _, _) => None,
            (_, Some(image), Some(status)) if status == Status::InProgress.as_str() => Some(image),
            _ => None,
        };
        let Some(image) = in_progress else {
            latest.remove(&id);
            return;
        };
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
}
