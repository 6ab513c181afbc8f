//! A listing through the stream: every shard read from its place (parents
//! first), the records whose latest image is stuck, and the full pass's
//! pages where one is due.

use std::collections::{HashMap, HashSet};

use super::super::DynamoStore;
use super::pass::{next_step, overdue, PassStep};
use super::read::{within, ShardEnd, ShardRead};
use super::shards::{parent_in, parents_first};
use super::{Candidate, Plan, ShardPlan};
use crate::clock::now_ms;
use crate::error::{Error, ErrorKind};
use crate::store::{Listing, StuckPage, StuckRecord};

/// Has `deadline_ms` come?
fn past(deadline_ms: Option<u64>) -> bool {
    deadline_ms.is_some_and(|d| now_ms() >= d)
}

/// What one listing gathers while it reads the shards.
#[derive(Default)]
struct Gathered {
    plan: Plan,
    latest: HashMap<String, Candidate>,
    reads: u64,
    failed_reads: u64,
    incomplete: bool,
}

impl DynamoStore {
    /// Every record the stream (and the full pass, where one is due) shows
    /// in progress with its lease over before `cutoff_ms`, in one page, and
    /// the listing that saves this listing's places once the sweep says
    /// what it resolved. With `deadline_ms`, reading stops there and the
    /// page says `incomplete`.
    pub(crate) async fn stuck_from_stream(
        &self,
        streams: &aws_sdk_dynamodbstreams::Client,
        cutoff_ms: u64,
        deadline_ms: Option<u64>,
    ) -> Result<StuckPage, Error> {
        let listed_at = now_ms();
        let (arn, items) = self.stream_of_table().await?;
        let shards = self.describe_shards(streams, &arn).await?;
        let mut gathered = Gathered::default();
        gathered.plan.listed_at = listed_at;
        self.read_shards(
            streams,
            &arn,
            &parents_first(&shards),
            deadline_ms,
            &mut gathered,
        )
        .await;
        let Gathered {
            mut plan,
            latest,
            mut reads,
            mut failed_reads,
            mut incomplete,
        } = gathered;
        let mut records = stuck_and_pins(latest, cutoff_ms, &mut plan.shards);
        let gap = plan.shards.iter().any(|s| s.gap);
        let mut behind = gap;
        let step = self
            .pass_step(gap, listed_at, items, deadline_ms, &mut failed_reads)
            .await;
        if let Some(step) = step {
            let catching_up = step.catching_up;
            let (pass, read) = self
                .pass_pages(step, cutoff_ms, deadline_ms, &mut records, &mut reads)
                .await;
            if let Err(err) = read {
                tracing::error!(error = %err, "a page of the sweeper's full pass failed; the next sweep reads it again");
                failed_reads += 1;
            }
            // A pass that catches up on a gap may miss records until done.
            incomplete |= catching_up && !pass.done;
            behind |= (catching_up && !pass.done) || overdue(&pass, self.full_pass, now_ms());
            plan.pass = Some(pass);
        }
        let listing = serde_json::to_string(&plan).map_err(|e| {
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
            incomplete,
            listing: Some(Listing(listing)),
            behind,
        })
    }

    /// Read every shard from its place, parents first: a shard not read to
    /// its end holds its children back to the next listing, whose images
    /// come after its own.
    async fn read_shards(
        &self,
        streams: &aws_sdk_dynamodbstreams::Client,
        arn: &str,
        ordered: &[&aws_sdk_dynamodbstreams::types::Shard],
        deadline_ms: Option<u64>,
        gathered: &mut Gathered,
    ) {
        let mut waiting: HashSet<&str> = HashSet::new();
        for shard in ordered {
            let Some(shard_id) = shard.shard_id() else {
                continue;
            };
            let parent = parent_in(shard, ordered);
            if parent.is_some_and(|p| waiting.contains(p)) || past(deadline_ms) {
                waiting.insert(shard_id);
                gathered.incomplete = true;
                continue;
            }
            let saved = match within(deadline_ms, self.saved_place(shard_id)).await {
                Some(Ok(saved)) => saved,
                failed => {
                    if let Some(Err(err)) = failed {
                        tracing::error!(shard = shard_id, error = %err, "reading the sweeper's place in a shard failed; the next sweep reads the shard");
                        gathered.failed_reads += 1;
                    }
                    waiting.insert(shard_id);
                    gathered.incomplete = true;
                    continue;
                }
            };
            let index = gathered.plan.shards.len();
            gathered.plan.shards.push(ShardPlan {
                shard: shard_id.to_owned(),
                start: saved.position.clone(),
                ..ShardPlan::default()
            });
            let Some(plan) = gathered.plan.shards.get_mut(index) else {
                continue;
            };
            let read = ShardRead {
                streams,
                arn,
                index,
                closed: shard
                    .sequence_number_range()
                    .and_then(|range| range.ending_sequence_number())
                    .is_some(),
                parent_read: parent.is_some(),
                deadline_ms,
                plan,
                latest: &mut gathered.latest,
                reads: &mut gathered.reads,
            };
            match self.read_shard(shard_id, &saved, read).await {
                Ok(ShardEnd::Present | ShardEnd::Ended) => {}
                Ok(ShardEnd::Budget | ShardEnd::OutOfTime) => {
                    waiting.insert(shard_id);
                    gathered.incomplete = true;
                }
                Err(err) => {
                    tracing::error!(shard = shard_id, error = %err, "reading a shard of the stream failed; what was read of it is kept, the next sweep reads on");
                    gathered.failed_reads += 1;
                    waiting.insert(shard_id);
                    gathered.incomplete = true;
                }
            }
        }
    }

    /// The full pass's step in this listing, if it takes one (see
    /// [`next_step`]); a pass item that cannot be read leaves the pass to the
    /// next listing unless a gap starts one over anyway.
    async fn pass_step(
        &self,
        gap: bool,
        listed_at: u64,
        items: u64,
        deadline_ms: Option<u64>,
        failed_reads: &mut u64,
    ) -> Option<PassStep> {
        let saved = match within(deadline_ms, self.saved_pass()).await {
            Some(Ok(saved)) => saved,
            Some(Err(err)) => {
                tracing::error!(error = %err, "reading the sweeper's full pass place failed; the next sweep reads it");
                *failed_reads += 1;
                if !gap {
                    return None;
                }
                Default::default()
            }
            None if gap => Default::default(),
            None => return None,
        };
        next_step(&saved, gap, self.full_pass, listed_at, items)
    }
}

/// The stuck records among the latest images, the oldest lease first; each
/// shard's pins: the records its place must wait for (live, or stuck without
/// a recovery point). A stuck record with a recovery point may stay so for a
/// day (left for its retry under `release`): it holds no place, and the
/// next full pass finds it again.
fn stuck_and_pins(
    latest: HashMap<String, Candidate>,
    cutoff_ms: u64,
    shards: &mut [ShardPlan],
) -> Vec<StuckRecord> {
    let mut seen: Vec<(String, Candidate)> = latest.into_iter().collect();
    seen.sort_by(|a, b| (a.1.lease_expires_at_ms, &a.0).cmp(&(b.1.lease_expires_at_ms, &b.0)));
    let mut records = Vec::new();
    for (id, candidate) in seen {
        let stuck = candidate.lease_expires_at_ms < cutoff_ms;
        if !(stuck && candidate.has_checkpoint) {
            if let Some(shard) = shards.get_mut(candidate.shard) {
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
    records
}
