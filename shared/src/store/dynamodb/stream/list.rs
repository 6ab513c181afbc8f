//! A listing through the stream: the places the last settled listing
//! left, every shard read from there (parents first), and the catch-up
//! scan where the stream cannot tell what came before.

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodbstreams::types::{
    AttributeValue as StreamValue, OperationType, ShardIteratorType,
};

use super::super::{DynamoStore, SWEEPER_ITEM_PREFIX};
use super::{
    Candidate, CatchUp, Plan, ShardPlan, Start, CARRY, CATCH_UP_ID, CATCH_UP_PAGES,
    EMPTY_PAGES_AT_THE_PRESENT, MAX_READS_PER_LISTING, MAX_READS_PER_SHARD, POSITION,
    POSITION_PREFIX,
};
use crate::error::{Error, ErrorKind};
use crate::record::Status;
use crate::store::{Settlement, StuckPage, StuckRecord, SweepCursor, SweepStore};

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
    /// A closed shard read to its end: no next iterator.
    Ended,
    /// An open shard read to the present.
    Present,
    /// Read up to the listing's budget of reads: the rest is for the next.
    Budget,
    /// The listing's deadline came.
    OutOfTime,
}

impl DynamoStore {
    /// Where the last settled listing left `shard` (and that place as
    /// saved), and the records it carried (`None` when the item holds a
    /// carry this code cannot read: those records are then caught up).
    async fn saved_start(
        &self,
        shard: &str,
    ) -> Result<(Start, Option<String>, Option<Vec<(String, Candidate)>>), Error> {
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
        let carried = match out
            .item()
            .and_then(|i| i.get(CARRY))
            .and_then(|v| v.as_s().ok())
        {
            None => Some(Vec::new()),
            Some(text) => serde_json::from_str(text)
                .inspect_err(|err| {
                    tracing::error!(
                        shard,
                        error = %err,
                        "the records the sweeper carries in this shard cannot be read; a \
                         catch-up scan finds them again"
                    )
                })
                .ok(),
        };
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
    pub(crate) async fn stuck_from_stream(
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
        // A shard's carried records could not be read.
        let mut carry_lost = false;
        // Shards not read to where they should be: their children wait.
        let mut behind: HashSet<&str> = HashSet::new();
        // Closed shards read to their end, by id: their index in the plan.
        let mut ended: HashMap<&str, usize> = HashMap::new();
        // Per shard of the plan, the shard that takes over what it carries.
        let mut heirs: HashMap<usize, usize> = HashMap::new();
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
            // this shard's trim horizon were never seen by this sweeper. A
            // carry that cannot be read is caught up the same way.
            let unknown_place = (saved.is_none() && parent.is_none()) || carried.is_none();
            carry_lost |= carried.is_none();
            let index = plan.shards.len();
            plan.shards.push(ShardPlan {
                shard: shard_id.to_owned(),
                start: saved,
                ..ShardPlan::default()
            });
            // Carried records first: this shard's later images replace them.
            // Their images lie behind the place (perhaps trimmed by now):
            // no place is ever taken back to them.
            for (id, mut candidate) in carried.unwrap_or_default() {
                candidate.shard = index;
                candidate.sequence = String::new();
                latest.insert(id, candidate);
            }
            // A closed shard's iterator ends; only an open one's empty
            // pages can mean the present.
            let closed = shard
                .sequence_number_range()
                .and_then(|range| range.ending_sequence_number())
                .is_some();
            let mut start_trimmed = false;
            let end = self
                .read_shard(
                    streams,
                    &arn,
                    shard_id,
                    &start,
                    deadline_ms,
                    ShardReading {
                        index,
                        closed,
                        plan: &mut plan,
                        latest: &mut latest,
                        reads: &mut reads,
                        trimmed: &mut start_trimmed,
                    },
                )
                .await;
            trimmed |= start_trimmed;
            if let Some(shard) = plan.shards.get_mut(index) {
                shard.unknown_past = unknown_place || start_trimmed;
                shard.start_trimmed = start_trimmed;
            }
            unknown_before_places |= unknown_place;
            match end {
                Ok(ShardEnd::Present) => {}
                Ok(ShardEnd::Ended) => {
                    ended.insert(shard_id, index);
                }
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

        // A closed shard read to its end leaves the stream a day later, and
        // its place with it: what it carries goes to a child read in this
        // listing (its records' later images are there), so no carried
        // record leaves the listings with its shard.
        for shard in &ordered {
            let (Some(id), Some(parent)) = (shard.shard_id(), shard.parent_shard_id()) else {
                continue;
            };
            let (Some(&parent_index), Some(child_index)) = (
                ended.get(parent),
                plan.shards.iter().position(|s| s.shard == id),
            ) else {
                continue;
            };
            heirs.entry(parent_index).or_insert(child_index);
        }
        // Down a chain of ended shards, to the first that is not one.
        let heir_of = |mut index: usize| {
            let mut hops = 0;
            while let Some(&next) = heirs.get(&index) {
                index = next;
                hops += 1;
                if hops > heirs.len() {
                    break;
                }
            }
            index
        };

        let mut records = Vec::new();
        // Sorted for a stable order (the oldest lease first).
        let mut seen: Vec<(String, Candidate)> = latest.into_iter().collect();
        seen.sort_by(|a, b| (a.1.lease_expires_at_ms, &a.0).cmp(&(b.1.lease_expires_at_ms, &b.0)));
        for (id, candidate) in seen {
            let stuck = candidate.lease_expires_at_ms < cutoff_ms;
            // A stuck record with a recovery point may stay stuck for a day
            // (left for its retry under `release`): it is carried to the next
            // listing rather than holding the stream's place a day behind.
            // One carried from before stays carried even if a longer grace
            // makes it not stuck yet: its image lies behind the place.
            if candidate.has_checkpoint && (stuck || candidate.sequence.is_empty()) {
                let heir = heir_of(candidate.shard);
                let mut carried = candidate.clone();
                if heir != candidate.shard {
                    // Its sequence number is of another shard: no place
                    // in the heir.
                    carried.shard = heir;
                    carried.sequence = String::new();
                    let heir_id = plan.shards.get(heir).map(|s| s.shard.clone());
                    if let Some(parent) = plan.shards.get_mut(candidate.shard) {
                        parent.heir = heir_id;
                    }
                }
                if let Some(shard) = plan.shards.get_mut(heir) {
                    shard.carry.push((id.clone(), carried));
                }
            } else if let Some(shard) = plan.shards.get_mut(candidate.shard) {
                shard.pins.push((candidate.sequence.clone(), id.clone()));
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
        // A trim, or a carry that cannot be read, restarts the scan (records
        // stuck before it may lie behind a running scan's place); a shard
        // without a place starts one, or lets the running one go on.
        let scan_from = match (trimmed || carry_lost, unknown_before_places, running) {
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
            let found: HashSet<String> = catch_up.plan.found.iter().cloned().collect();
            if plan.shards.is_empty() {
                catch_up.plan.hold = records
                    .iter()
                    .any(|r| r.has_checkpoint && found.contains(&r.id));
            }
            let carried: HashSet<String> = plan
                .shards
                .iter()
                .flat_map(|s| s.carry.iter().map(|(id, _)| id.clone()))
                .collect();
            if let Some(first) = plan.shards.first_mut() {
                for record in records.iter().filter(|r| r.has_checkpoint) {
                    if found.contains(&record.id) && !carried.contains(&record.id) {
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
            closed,
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
                if id.starts_with(SWEEPER_ITEM_PREFIX) {
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
            // empty page is not the end: records may lie further on. An
            // open shard at the present answers empty pages forever, so
            // there a run of them is the present; a closed shard is read
            // until its iterator ends (or the budget, for the next listing).
            if records.is_empty() && !closed {
                empty_in_a_row += 1;
                if empty_in_a_row >= EMPTY_PAGES_AT_THE_PRESENT {
                    return Ok(ShardEnd::Present);
                }
            } else {
                empty_in_a_row = 0;
            }
            iterator = out.next_shard_iterator().map(str::to_owned);
        }
        Ok(ShardEnd::Ended)
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
            let Some(page) = within(deadline_ms, SweepStore::scan(self, cursor, 1000)).await else {
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
}

/// What reading one shard adds to its listing.
struct ShardReading<'a> {
    index: usize,
    /// The shard is closed (it has an ending sequence number).
    closed: bool,
    plan: &'a mut Plan,
    latest: &'a mut HashMap<String, Candidate>,
    reads: &'a mut u64,
    /// Set when the shard's saved place was trimmed.
    trimmed: &'a mut bool,
}

/// One listing's catch-up pages, and whether one failed.
struct CatchUpRun {
    plan: CatchUp,
    failed: bool,
}
