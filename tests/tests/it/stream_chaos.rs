//! The stream discovery under randomized stream faults (issue 52): a
//! streams proxy that drops, duplicates and delays record images and lists
//! the shards in another order at every call, while each seed also trims
//! the stream, closes its shard (a split: writes after it are shown by no
//! shard), lets the closed shard leave the stream, answers empty pages and
//! fails reads, at seeded moments between writes of records that crash,
//! complete, crash holding a recovery point, are taken over by a retry that
//! crashes too, or stay live. The invariant:
//! every record stuck at any time is found within its lease + grace + the
//! full-pass period + one sweep, and resolved once; no live or completed
//! record is touched.
//!
//! Seeds run sixteen at a time on one table (DynamoDB Local slows with every
//! stream table it serves), each under a key prefix of its own
//! (`TableLayout`), so each has its own records, places and full pass.
//! `IDEMPOTENCY_TEST_STREAM_CHAOS_SEEDS=N` runs N seeds (default 200 at
//! `FAULT_HARNESS_SIZE=full`, what `make reliability` runs, and 64 at `ci`,
//! what `make test` runs: 200 seeds took 340 s of CPU there, most of it
//! DynamoDB Local's);
//! `IDEMPOTENCY_TEST_STREAM_CHAOS_SEED=S` runs seed S alone. Each run
//! prints `stream chaos: N seeds, V violations` and appends the same to the
//! reliability log when `RELIABILITY_PROPERTY_LOG` names one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use futures_util::StreamExt;
use integration_tests::streams_proxy::{Chaos, StreamsProxy};
use lambda_idempotency::{
    scope::RecordScope,
    store::dynamodb::{KeyValue, TableLayout},
    store::{
        Checkpoint, CheckpointRequest, CompleteRequest, Listing, RecordPage, Resolution,
        ResolveRequest, Status, StoredBody, StoredResponse, StuckPage, StuckRequest, SweepCursor,
        SweepStore,
    },
    sweeper::Sweeper,
    DynamoStore, Error, Store,
};

use crate::fixture::{claim_lease, now_ms};

/// Seeds by default at `FAULT_HARNESS_SIZE=full`.
const FULL_SEEDS: u64 = 200;
/// Seeds by default at `FAULT_HARNESS_SIZE=ci`.
const CI_SEEDS: u64 = 64;
/// Seeds at once.
const AT_ONCE: usize = 16;
/// The full pass's period in every seed.
const PERIOD: Duration = Duration::from_millis(300);

/// What a seed writes at one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Claimed, lease over at once: stuck.
    Crashed,
    /// Claimed with a recovery point, lease over: stuck, left resumable.
    CrashedHoldingAPoint,
    /// Claimed and completed.
    Completed,
    /// Claimed with a lease longer than the test.
    Live,
    /// Claimed, its lease over, taken over by a retry that crashed too: the
    /// stream may still show the first attempt as the record's latest.
    TakenOverThenCrashed,
}

/// A seed's deterministic choices (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every effectful resolution the sweeps made: (record id, attempt) and
/// what it did, when.
type Resolutions = Arc<Mutex<Vec<Noted>>>;

/// One resolution: record id, attempt, what it did, when (epoch ms).
type Noted = (String, u64, Resolution, u64);

/// The store under the sweeper, noting what each listing found and what
/// each resolution did (a record holding a recovery point is left
/// resumable under `release` by the sweeper without a store call).
#[derive(Debug, Clone)]
struct Noting {
    inner: DynamoStore,
    resolutions: Resolutions,
    /// Every record a listing found, and when.
    listed: Arc<Mutex<Vec<(String, u64)>>>,
}

#[async_trait::async_trait]
impl Store for Noting {
    async fn claim(
        &self,
        request: &lambda_idempotency::store::ClaimRequest,
    ) -> Result<lambda_idempotency::store::ClaimOutcome, Error> {
        self.inner.claim(request).await
    }
    async fn complete(
        &self,
        request: CompleteRequest<'_>,
    ) -> Result<lambda_idempotency::store::Completion, Error> {
        self.inner.complete(request).await
    }
    async fn release(&self, lease: &lambda_idempotency::store::Lease) -> Result<(), Error> {
        self.inner.release(lease).await
    }
    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error> {
        self.inner.checkpoint(request).await
    }
    async fn get(
        &self,
        record_id: &str,
    ) -> Result<Option<lambda_idempotency::store::StoredRecord>, Error> {
        self.inner.get(record_id).await
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn reads_origin(&self) -> bool {
        self.inner.reads_origin()
    }
    async fn warm_up(&self) -> Result<(), Error> {
        self.inner.warm_up().await
    }
}

#[async_trait::async_trait]
impl SweepStore for Noting {
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
        let page = self.inner.stuck(request).await?;
        if let Ok(mut listed) = self.listed.lock() {
            let at = now_ms();
            listed.extend(page.records.iter().map(|r| (r.id.clone(), at)));
        }
        Ok(page)
    }
    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error> {
        let resolution = self.inner.resolve_stuck(request).await?;
        if let Ok(mut noted) = self.resolutions.lock() {
            noted.push((
                request.record.id.clone(),
                request.record.attempt,
                resolution,
                now_ms(),
            ));
        }
        Ok(resolution)
    }
    async fn finish(&self, listing: &Listing, resolved: &[String]) -> Result<(), Error> {
        self.inner.finish(listing, resolved).await
    }
    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error> {
        self.inner.scan(cursor, limit).await
    }
    async fn delete_expired(&self, now_s: u64, limit: usize) -> Result<u64, Error> {
        self.inner.delete_expired(now_s, limit).await
    }
}

/// One record a seed wrote.
#[derive(Debug, Clone)]
struct Written {
    id: String,
    kind: Kind,
    /// When its lease ended (epoch ms), for the stuck ones.
    stuck_at: u64,
}

/// What one seed did and the violations it found.
#[derive(Debug, Default)]
struct Outcome {
    violations: Vec<String>,
    schedule: Vec<String>,
    /// What its faults and records were, for the reliability report.
    counts: HashMap<&'static str, u64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_stuck_record_is_found_in_bounded_time_under_random_stream_faults() {
    let seeds: Vec<u64> = match std::env::var("IDEMPOTENCY_TEST_STREAM_CHAOS_SEED") {
        Ok(one) => vec![one
            .trim()
            .parse()
            .expect("IDEMPOTENCY_TEST_STREAM_CHAOS_SEED is a whole number")],
        Err(_) => {
            let n = std::env::var("IDEMPOTENCY_TEST_STREAM_CHAOS_SEEDS")
                .ok()
                .map(|n| {
                    n.trim()
                        .parse()
                        .expect("IDEMPOTENCY_TEST_STREAM_CHAOS_SEEDS is a whole number")
                })
                .unwrap_or(match crate::fault_harness::full_size() {
                    true => FULL_SEEDS,
                    false => CI_SEEDS,
                });
            (1..=n).collect()
        }
    };
    let (base, _) = integration_tests::dynamo_store().await;
    let follower = Follower::default();
    let outcomes: Vec<(u64, Outcome)> = futures_util::stream::iter(seeds.iter().copied())
        .map(|seed| {
            let (base, follower) = (base.clone(), follower.clone());
            async move { (seed, run_seed(&base, seed, &follower).await) }
        })
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|(_, outcome)| !outcome.violations.is_empty())
        .map(|(seed, outcome)| {
            format!(
                "stream chaos seed {seed} (rerun: IDEMPOTENCY_TEST_STREAM_CHAOS_SEED={seed}): \
                 {:?}; schedule {:?}",
                outcome.violations, outcome.schedule
            )
        })
        .collect();
    let violations: usize = outcomes.iter().map(|(_, o)| o.violations.len()).sum();
    let line = format!(
        "stream chaos: {} seeds, {violations} violations",
        outcomes.len()
    );
    println!("{line}");
    assert!(failed.is_empty(), "{line}:\n{}", failed.join("\n"));
    let tally = crate::fuzz::Tally::new();
    tally.add_n("cases", outcomes.len() as u64);
    for (_, outcome) in &outcomes {
        for (what, n) in &outcome.counts {
            tally.add_n(*what, *n);
        }
    }
    tally.report("stream_chaos");
}

/// One seed: its own key prefix on the shared table, its own proxy.
async fn run_seed(base: &DynamoStore, seed: u64, follower: &Follower) -> Outcome {
    let mut rng = Rng::new(seed);
    let mut outcome = Outcome::default();
    let proxy = StreamsProxy::start()
        .await
        .expect("the streams proxy starts");
    let layout =
        TableLayout::default().partition_key("id", KeyValue::prefixed(format!("c{seed}#")));
    let store = DynamoStore::builder(base.client().clone(), base.table())
        .with_layout(layout)
        .with_stream(proxy.client().await)
        .full_pass(PERIOD)
        .open()
        .expect("the seed's store opens");
    let resolutions: Resolutions = Arc::default();
    let listed: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let sweeper = Sweeper::new(Noting {
        inner: store.clone(),
        resolutions: resolutions.clone(),
        listed: listed.clone(),
    })
    .grace(Duration::ZERO);
    let chaos = Chaos {
        seed,
        drop: rng.below(300),
        duplicate: rng.below(300),
        delay: rng.below(500),
        shuffle: rng.below(2) == 0,
    };
    outcome.schedule.push(format!("{chaos:?}"));
    let mut sweeps: Vec<(u64, u64)> = Vec::new();
    // The first sweep saves the seed's places (and runs a first pass).
    timed_sweep(&sweeper, &mut sweeps).await;
    proxy.chaos(chaos);
    let mut written: Vec<Written> = Vec::new();
    for step in 0..2 {
        for i in 0..(1 + rng.below(3)) {
            let kind = match rng.below(5) {
                0 => Kind::Crashed,
                1 => Kind::CrashedHoldingAPoint,
                2 => Kind::Completed,
                3 => Kind::TakenOverThenCrashed,
                _ => Kind::Live,
            };
            let id = RecordScope::new("POST", "/chaos", &format!("{seed}-{step}-{i}")).record_id();
            *outcome
                .counts
                .entry(match kind {
                    Kind::Crashed => "records stuck",
                    Kind::CrashedHoldingAPoint => "records stuck holding a recovery point",
                    Kind::Completed => "records completed",
                    Kind::Live => "records live",
                    Kind::TakenOverThenCrashed => "records taken over, stuck again",
                })
                .or_default() += 1;
            written.push(write(&store, &id, kind).await);
        }
        let fault = rng.below(8);
        let name = match fault {
            0 => {
                proxy.trim_through(&follower.latest(store.table()).await);
                "faults: trims"
            }
            1 => {
                proxy.close_shards_at(&follower.latest(store.table()).await);
                "faults: shards closed"
            }
            2 => {
                proxy.drop_closed_shards();
                "faults: closed shards gone"
            }
            3 => {
                proxy.empty_pages(rng.below(12));
                "faults: empty pages"
            }
            4 => {
                proxy.fail_reads_after(rng.below(3), rng.below(2) == 0);
                "faults: reads failed"
            }
            5 => {
                proxy.expire_iterators();
                "faults: iterators expired"
            }
            _ => "faults: none",
        };
        outcome.schedule.push(format!("step {step}: {name}"));
        *outcome.counts.entry(name).or_default() += 1;
        timed_sweep(&sweeper, &mut sweeps).await;
        proxy.heal();
    }
    // Every stuck record's bound passes; the two sweeps after it must have
    // found them all (the first that starts after it suffices).
    let last_stuck = written.iter().map(|w| w.stuck_at).max().unwrap_or(0);
    let until = last_stuck + PERIOD.as_millis() as u64;
    tokio::time::sleep(Duration::from_millis(until.saturating_sub(now_ms()))).await;
    for _ in 0..2 {
        timed_sweep(&sweeper, &mut sweeps).await;
    }
    let noted = resolutions.lock().map(|n| n.clone()).unwrap_or_default();
    let listed = listed.lock().map(|n| n.clone()).unwrap_or_default();
    check(&store, &written, &sweeps, (&noted, &listed), &mut outcome).await;
    clean_up(base, seed).await;
    outcome
}

/// Delete the seed's items (records and places), so the full passes of
/// the seeds after it read a small table.
async fn clean_up(base: &DynamoStore, seed: u64) {
    let prefix = format!("c{seed}#");
    let mut start = None;
    loop {
        let out = base
            .client()
            .scan()
            .table_name(base.table())
            .filter_expression("begins_with(id, :prefix)")
            .expression_attribute_values(":prefix", AttributeValue::S(prefix.clone()))
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("the seed's items are listed");
        for item in out.items() {
            if let Some(id) = item.get("id") {
                base.client()
                    .delete_item()
                    .table_name(base.table())
                    .key("id", id.clone())
                    .send()
                    .await
                    .expect("the seed's item is deleted");
            }
        }
        match out.last_evaluated_key {
            Some(key) => start = Some(key),
            None => return,
        }
    }
}

/// The latest sequence number of the table's stream, read on from where
/// the last call stopped (reading the whole stream at every trim made the
/// seeds slow down as it grew). DynamoDB Local's stream of a table has one
/// shard.
#[derive(Clone, Default)]
struct Follower(Arc<tokio::sync::Mutex<Option<String>>>);

impl Follower {
    async fn latest(&self, table: &str) -> String {
        use aws_sdk_dynamodbstreams::types::ShardIteratorType;
        let mut state = self.0.lock().await;
        let streams = integration_tests::streams_client().await;
        let arn = integration_tests::client()
            .await
            .describe_table()
            .table_name(table)
            .send()
            .await
            .ok()
            .and_then(|t| {
                t.table()
                    .and_then(|t| t.latest_stream_arn())
                    .map(str::to_owned)
            })
            .expect("the table has a stream");
        let shard = streams
            .describe_stream()
            .stream_arn(&arn)
            .send()
            .await
            .ok()
            .and_then(|d| {
                d.stream_description()
                    .and_then(|d| d.shards().first())
                    .and_then(|s| s.shard_id())
                    .map(str::to_owned)
            })
            .expect("the stream has a shard");
        let (kind, from) = match &*state {
            None => (ShardIteratorType::TrimHorizon, None),
            Some(seq) => (ShardIteratorType::AfterSequenceNumber, Some(seq.clone())),
        };
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(&arn)
            .shard_id(shard)
            .shard_iterator_type(kind)
            .set_sequence_number(from)
            .send()
            .await
            .ok()
            .and_then(|o| o.shard_iterator().map(str::to_owned));
        while let Some(current) = iterator.take() {
            let Ok(page) = streams.get_records().shard_iterator(current).send().await else {
                break;
            };
            for record in page.records() {
                if let Some(seq) = record.dynamodb().and_then(|d| d.sequence_number()) {
                    *state = Some(seq.to_owned());
                }
            }
            if page.records().is_empty() {
                break;
            }
            iterator = page.next_shard_iterator().map(str::to_owned);
        }
        state.clone().unwrap_or_default()
    }
}

/// One sweep, noted in `sweeps` as (start, end).
async fn timed_sweep(sweeper: &Sweeper, sweeps: &mut Vec<(u64, u64)>) {
    let started = now_ms();
    sweeper.sweep(None).await;
    sweeps.push((started, now_ms()));
}

/// Write one record of `kind` through the store.
async fn write(store: &DynamoStore, id: &str, kind: Kind) -> Written {
    let lease_ms = if kind == Kind::Live { 600_000 } else { 1 };
    let lease = claim_lease(store, id, &format!("owner-{id}"), lease_ms).await;
    match kind {
        Kind::Completed => {
            let done = StoredResponse::new(200, vec![], StoredBody::Empty);
            store
                .complete(CompleteRequest::new(&lease, &done, now_ms() / 1000 + 3600))
                .await
                .expect("completed");
        }
        Kind::CrashedHoldingAPoint => {
            let point = Checkpoint {
                name: "charged".into(),
                data: serde_json::json!({"charge": 1}),
                attempt: lease.attempt,
            };
            store
                .checkpoint(CheckpointRequest::new(&lease, &point))
                .await
                .expect("a recovery point");
        }
        Kind::TakenOverThenCrashed => {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let retry = claim_lease(store, id, &format!("retry-{id}"), 1).await;
            assert_eq!(retry.attempt, 2, "the retry took it over");
        }
        Kind::Crashed | Kind::Live => {}
    }
    let record = store.get(id).await.expect("read back").expect("written");
    Written {
        id: id.to_owned(),
        kind,
        stuck_at: match kind {
            Kind::Crashed | Kind::CrashedHoldingAPoint | Kind::TakenOverThenCrashed => {
                record.record.lease_expires_at_ms
            }
            Kind::Completed | Kind::Live => 0,
        },
    }
}

/// The invariants over what the seed wrote, its sweeps (start, end) and
/// the resolutions they made.
async fn check(
    store: &DynamoStore,
    written: &[Written],
    sweeps: &[(u64, u64)],
    (noted, listed): (&[Noted], &[(String, u64)]),
    outcome: &mut Outcome,
) {
    let mut effects: HashMap<(&str, u64), usize> = HashMap::new();
    for (id, attempt, resolution, _) in noted {
        if matches!(resolution, Resolution::Released | Resolution::Failed) {
            *effects.entry((id.as_str(), *attempt)).or_default() += 1;
        }
    }
    for ((id, attempt), n) in &effects {
        if *n > 1 {
            outcome
                .violations
                .push(format!("{id} attempt {attempt} resolved {n} times"));
        }
    }
    let bound = PERIOD.as_millis() as u64;
    for record in written {
        let now = store.get(&record.id).await.ok().flatten();
        match record.kind {
            Kind::Completed | Kind::Live => {
                let want = if record.kind == Kind::Completed {
                    Status::Completed
                } else {
                    Status::InProgress
                };
                if now.as_ref().map(|r| r.record.status) != Some(want) {
                    outcome.violations.push(format!(
                        "{} ({:?}) was touched: {now:?}",
                        record.id, record.kind
                    ));
                }
            }
            Kind::Crashed | Kind::CrashedHoldingAPoint | Kind::TakenOverThenCrashed => {
                // The first sweep that starts a period after it got stuck
                // must have ended with it found: released (a record
                // without a recovery point), or listed and left resumable.
                let Some(&(_, by)) = sweeps
                    .iter()
                    .find(|(started, _)| *started >= record.stuck_at + bound)
                else {
                    outcome
                        .violations
                        .push(format!("{}: no sweep ran past its bound", record.id));
                    continue;
                };
                let found = match record.kind {
                    Kind::Crashed | Kind::TakenOverThenCrashed => {
                        noted.iter().any(|(id, _, resolution, at)| {
                            *id == record.id && *at <= by && *resolution == Resolution::Released
                        })
                    }
                    _ => listed
                        .iter()
                        .any(|(id, at)| *id == record.id && *at <= by && *at >= record.stuck_at),
                };
                if !found {
                    outcome.violations.push(format!(
                        "{} ({:?}) stuck at {} not found by the sweep that ended at {by}, now \
                         {now:?}",
                        record.id, record.kind, record.stuck_at
                    ));
                }
            }
        }
    }
}
