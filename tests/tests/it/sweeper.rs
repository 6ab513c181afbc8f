//! The sweeper on DynamoDB Local (its two ways of finding stuck records)
//! and on Redis. Stuck records are made by real claims with short leases,
//! through the store and through the middleware.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::{
    store::dynamodb::schema,
    store::{
        Checkpoint, CheckpointRequest, ClaimOutcome, CompleteRequest, Lease, Record, Resolution,
        Status, StoredBody, StoredResponse, StuckRequest, SweepStore,
    },
    sweeper::{SweepPolicy, SweepSummary, Sweeper},
    DynamoStore, IdempotencyLayer,
};
use tower::Layer;

use crate::fixture::{
    assert_failed_key_replays_abandoned, assert_sweep_keeps_its_deadline, claim_request, claimed,
    counting_handler, json, now_ms, post, post_order, silent_server, Handler, Runs,
};

/// Where stuck records are and how the sweeper finds them: the DynamoDB
/// table's stream (the product's way), its opt-in sparse index, or a Redis
/// store's index (a sorted set per hash slot), on one server or a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Discovery {
    Stream,
    Index,
    Redis,
    RedisCluster,
}

impl Discovery {
    /// `store` set up to find stuck records this way (the writers through
    /// it agree, as every writer of a table must).
    async fn on(self, store: DynamoStore) -> DynamoStore {
        match self {
            Discovery::Stream => integration_tests::dynamo_builder_like(&store)
                .with_stream(integration_tests::streams_client().await)
                .open()
                .unwrap(),
            Discovery::Index | Discovery::Redis | Discovery::RedisCluster => {
                integration_tests::dynamo_builder_like(&store)
                    .with_sweep_index()
                    .open()
                    .unwrap()
            }
        }
    }
}

/// The store under test, and the DynamoDB store behind it where there is
/// one (for checks of the item itself).
#[derive(Debug, Clone)]
struct Subject {
    store: Arc<dyn SweepStore>,
    dynamo: Option<DynamoStore>,
}

impl std::ops::Deref for Subject {
    type Target = dyn SweepStore;
    fn deref(&self) -> &Self::Target {
        &*self.store
    }
}

impl Subject {
    /// The store, to hand to a sweeper or a middleware.
    fn shared(&self) -> Arc<dyn SweepStore> {
        self.store.clone()
    }

    /// The DynamoDB store, for the tests that are about DynamoDB alone.
    fn dynamo(&self) -> &DynamoStore {
        self.dynamo
            .as_ref()
            .expect("a test of DynamoDB alone runs on DynamoDB")
    }
}

// Each sweeper test once per discovery, Redis included.
crate::fixture::test_cases!(
    2,
    [
        stream => super::Discovery::Stream,
        index => super::Discovery::Index,
        redis_server => super::Discovery::Redis,
        redis_cluster => super::Discovery::RedisCluster,
    ],
    [
        a_record_left_resumable_is_failed_by_a_later_fail_sweep,
        release_policy_deletes_stuck_records_only,
        grace_period_keeps_recently_expired_leases,
        released_key_runs_again_on_the_next_retry,
        fail_policy_stores_a_problem_that_replays,
        record_reclaimed_between_query_and_write_is_fenced,
        two_sweepers_at_once_resolve_each_record_once,
        records_with_a_recovery_point_are_resumable_unless_failing,
        sweep_stops_before_the_deadline_and_the_next_sweep_finishes,
        the_fail_policy_never_resurrects_an_expired_record,
        a_recovery_point_committed_after_the_index_was_read_keeps_the_record,
    ]
);

// The sweeper function and the DynamoDB client's failures: DynamoDB alone,
// once per DynamoDB discovery (the function reads IDEMPOTENCY_TABLE; a
// silent Redis server has its own test in `redis_store`).
mod dynamodb_only {
    use super::*;
    crate::fixture::test_cases!(
        2,
        [
            stream => super::Discovery::Stream,
            index => super::Discovery::Index,
        ],
        [
            an_unreadable_index_is_counted_and_fails_the_function,
            the_sweeper_function_handles_the_sample_event,
            a_hanging_store_does_not_keep_the_sweep_past_its_deadline,
        ]
    );
}

async fn store(mode: Discovery) -> Subject {
    match mode {
        Discovery::Redis => Subject {
            store: Arc::new(integration_tests::redis_store().await),
            dynamo: None,
        },
        Discovery::RedisCluster => Subject {
            store: Arc::new(integration_tests::redis_cluster_store().await),
            dynamo: None,
        },
        Discovery::Stream | Discovery::Index => {
            let store = mode.on(integration_tests::dynamo_store().await.0).await;
            Subject {
                store: Arc::new(store.clone()),
                dynamo: Some(store),
            }
        }
    }
}

/// A real claim whose lease ends after `lease_ms`.
async fn claim(store: &Subject, id: &str, lease_ms: u64) -> Lease {
    let request = claim_request(id, &format!("owner-{id}"), lease_ms);
    claimed(store.claim(&request).await.unwrap())
}

/// A record of `id` claimed and completed at once.
async fn complete_now(store: &Subject, id: &str) {
    let done = claim(store, id, 1).await;
    let response = StoredResponse::new(200, vec![], StoredBody::Empty);
    store
        .complete(CompleteRequest::new(
            &done,
            &response,
            now_ms() / 1000 + 3600,
        ))
        .await
        .unwrap();
}

/// A sweep now (no grace) under `policy`.
async fn sweep_now(store: &Subject, policy: SweepPolicy) -> SweepSummary {
    Sweeper::new(store.shared())
        .policy(policy)
        .grace(Duration::ZERO)
        .sweep(None)
        .await
}

/// The handler commits the recovery point "charged" under `lease`.
async fn commit_charged(store: &Subject, lease: &Lease) {
    let point = Checkpoint {
        name: "charged".into(),
        data: serde_json::json!({ "charge_id": "ch_1" }),
        attempt: lease.attempt,
    };
    store
        .checkpoint(CheckpointRequest::new(lease, &point))
        .await
        .unwrap();
}

/// A record id as the middleware makes it (a hash, so ids spread over the 16
/// index shards).
fn hashed_id(key: &str) -> String {
    lambda_idempotency::scope::RecordScope::new("POST", "/orders", key).record_id()
}

/// Ids of the completed and the live neighbour records of [`populate`].
fn completed_id() -> String {
    hashed_id("completed-record")
}
fn live_id() -> String {
    hashed_id("live-record")
}

/// `n` stuck records (lease 1 ms), plus one completed and one live record in
/// the same index shards as some stuck ones.
async fn populate(store: &Subject, n: usize) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|i| hashed_id(&format!("stuck-{i}"))).collect();
    for id in &ids {
        claim(store, id, 1).await;
    }
    complete_now(store, &completed_id()).await;
    claim(store, &live_id(), 600_000).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    ids
}

/// Every stuck record the store lists (lease over now), all pages.
async fn stuck(store: &Subject) -> Vec<lambda_idempotency::store::StuckRecord> {
    let mut found = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .stuck(StuckRequest::new(now_ms(), 100).at(cursor))
            .await
            .unwrap();
        assert_eq!(page.failed_reads, 0);
        found.extend(page.records);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return found,
        }
    }
}

/// The record `id` as stored now (a consistent read), `None` when gone.
async fn item(store: &Subject, id: &str) -> Option<Record> {
    store.get(id).await.unwrap().map(|stored| stored.record)
}

/// The DynamoDB item `id` itself, attributes the record does not show included.
async fn dynamo_item(
    store: &DynamoStore,
    id: &str,
) -> Option<std::collections::HashMap<String, AttributeValue>> {
    let key = [(schema::ID, AttributeValue::S(id.into()))];
    integration_tests::consistent_item(store.client(), store.table(), key).await
}

/// Is `id` in the store's listing of records in progress, whenever its
/// lease ends?
async fn listed_in_progress(store: &Subject, id: &str) -> bool {
    let mut cursor = None;
    loop {
        let page = store
            .stuck(StuckRequest::new(u64::MAX, 100).at(cursor))
            .await
            .unwrap();
        if page.records.iter().any(|r| r.id == id) {
            return true;
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return false,
        }
    }
}

async fn untouched_neighbours(store: &Subject, mode: Discovery) {
    let done = item(store, &completed_id())
        .await
        .expect("completed record kept");
    assert_eq!(done.status, Status::Completed);
    let live = item(store, &live_id()).await.expect("live record kept");
    assert_eq!(live.status, Status::InProgress);
    assert_eq!(live.owner, format!("owner-{}", live_id()));
    match mode {
        // The live record is in the index, in a shard the sweep read.
        Discovery::Index => {
            let live = dynamo_item(store.dynamo(), &live_id()).await.unwrap();
            assert_eq!(
                live[schema::SWEEP_SHARD].as_s().unwrap(),
                &schema::sweep_shard(&live_id()).to_string()
            )
        }
        // Nothing of the sweeper's is written on the hot path.
        Discovery::Stream => {
            let live = dynamo_item(store.dynamo(), &live_id()).await.unwrap();
            assert!(!live.contains_key(schema::SWEEP_SHARD))
        }
        // Still in the index, for a sweep once its lease is over.
        Discovery::Redis | Discovery::RedisCluster => {
            assert!(listed_in_progress(store, &live_id()).await)
        }
    }
}

async fn release_policy_deletes_stuck_records_only(mode: Discovery) {
    let store = store(mode).await;
    let ids = populate(&store, 37).await;
    let summary = Sweeper::new(store.shared())
        .grace(Duration::ZERO)
        .page_size(5)
        .sweep(None)
        .await;
    assert_eq!(summary.found, 37);
    assert_eq!(summary.released, 37);
    assert_eq!(
        (summary.failed, summary.fenced, summary.resumable),
        (0, 0, 0)
    );
    assert!(!summary.remaining);
    if mode == Discovery::Index {
        assert!(summary.pages >= 16, "one page per shard at least");
        let shards: std::collections::HashSet<char> =
            ids.iter().map(|id| schema::sweep_shard(id)).collect();
        assert!(
            shards.len() >= 10,
            "stuck records spread over shards: {shards:?}"
        );
    } else if matches!(mode, Discovery::Redis | Discovery::RedisCluster) {
        assert!(
            summary.pages >= 16,
            "one read per shard (hash slot) at least"
        );
    } else {
        assert!(summary.pages >= 1, "the stream was read");
    }
    assert_eq!(summary.errors, 0);
    for id in &ids {
        assert!(item(&store, id).await.is_none(), "{id} released");
    }
    untouched_neighbours(&store, mode).await;
    // A second sweep finds nothing.
    let again = Sweeper::new(store.shared())
        .grace(Duration::ZERO)
        .sweep(None)
        .await;
    assert_eq!(again.found, 0);
}

async fn grace_period_keeps_recently_expired_leases(mode: Discovery) {
    let store = store(mode).await;
    populate(&store, 3).await;
    let summary = Sweeper::new(store.shared())
        .grace(Duration::from_secs(60))
        .sweep(None)
        .await;
    assert_eq!(summary.found, 0);
}

fn crash_prone_service(store: &Subject, runs: &Runs) -> impl Handler {
    IdempotencyLayer::new(store.shared())
        .max_lease(Duration::from_millis(50))
        .layer(counting_handler(runs.clone(), Duration::ZERO))
}

/// A request whose invocation dies mid-handler, leaving its record in
/// progress past a 50 ms lease.
async fn crash_midway(store: &Subject, key: &str) {
    integration_tests::crash_midway(store.shared(), post("/orders", Some(key), "{}")).await;
}

async fn released_key_runs_again_on_the_next_retry(mode: Discovery) {
    let store = store(mode).await;
    crash_midway(&store, "abandoned").await;
    let summary = sweep_now(&store, SweepPolicy::Release).await;
    assert_eq!(summary.released, 1);
    let runs = Runs::default();
    let res = post_order(&crash_prone_service(&store, &runs), "abandoned").await;
    assert_eq!(res.status(), 201);
    assert_eq!(json(&res)["attempt"], 1, "released records start afresh");
    assert_eq!(runs.count(), 1);
}

async fn fail_policy_stores_a_problem_that_replays(mode: Discovery) {
    let store = store(mode).await;
    crash_midway(&store, "abandoned").await;
    let summary = sweep_now(&store, SweepPolicy::Fail).await;
    assert_eq!((summary.found, summary.failed), (1, 1));
    let runs = Runs::default();
    assert_failed_key_replays_abandoned(&crash_prone_service(&store, &runs), "abandoned", &runs)
        .await;
    let record = item(
        &store,
        &lambda_idempotency::scope::RecordScope::new("POST", "/orders", "abandoned").record_id(),
    )
    .await
    .unwrap();
    assert_eq!(record.status, Status::Completed);
    match &store.dynamo {
        Some(dynamo) => {
            let item = dynamo_item(dynamo, &record.id).await.unwrap();
            assert!(
                !item.contains_key(schema::SWEEP_SHARD),
                "failed records leave the sweep index"
            );
        }
        None => assert!(
            !listed_in_progress(&store, &record.id).await,
            "failed records leave the stuck index"
        ),
    }
}

async fn record_reclaimed_between_query_and_write_is_fenced(mode: Discovery) {
    let store = store(mode).await;
    let id = hashed_id("reclaimed");
    claim(&store, &id, 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let sweeper = Sweeper::new(store.shared()).grace(Duration::ZERO);
    let found = stuck(&store).await;
    assert_eq!(found.len(), 1);

    // A retry takes the record over before the sweeper writes.
    let takeover = claim_request(&id, "retry", 1);
    assert!(
        matches!(store.claim(&takeover).await.unwrap(), ClaimOutcome::Claimed(l) if l.attempt == 2)
    );
    tokio::time::sleep(Duration::from_millis(20)).await;

    for policy in [SweepPolicy::Release, SweepPolicy::Fail] {
        let resolution = sweeper
            .clone()
            .policy(policy)
            .resolve(&found[0], now_ms())
            .await
            .unwrap();
        assert_eq!(resolution, Resolution::Fenced, "{policy:?}");
    }
    let record = item(&store, &id).await.unwrap();
    assert_eq!(record.owner, "retry");
    assert_eq!(record.status, Status::InProgress);
}

async fn two_sweepers_at_once_resolve_each_record_once(mode: Discovery) {
    let store = store(mode).await;
    let ids = populate(&store, 60).await;
    let sweeper = Sweeper::new(store.shared())
        .grace(Duration::ZERO)
        .page_size(3);
    let (first, second) = (sweeper.clone(), sweeper.clone());
    let a = tokio::spawn(async move { first.sweep(None).await });
    let b = tokio::spawn(async move { second.sweep(None).await });
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!(a.errors + b.errors, 0);
    assert_eq!(a.released + b.released, 60, "{a:?} {b:?}");
    assert_eq!(
        a.fenced + b.fenced,
        a.found + b.found - 60,
        "every other sighting was fenced"
    );
    for id in &ids {
        assert!(item(&store, id).await.is_none());
    }
    untouched_neighbours(&store, mode).await;
}

async fn records_with_a_recovery_point_are_resumable_unless_failing(mode: Discovery) {
    let store = store(mode).await;
    let id = hashed_id("resumable");
    let lease = claim(&store, &id, 1).await;
    // The handler commits a recovery point, then its invocation dies.
    commit_charged(&store, &lease).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let summary = sweep_now(&store, SweepPolicy::Release).await;
    assert_eq!(
        (summary.found, summary.resumable, summary.released),
        (1, 1, 0)
    );
    let kept = item(&store, &id).await.expect("resumable record kept");
    assert!(kept.checkpoint.is_some());
    // The next retry takes over and resumes from the recovery point.
    let retry = claim_request(&id, "retry", 1);
    match store.claim(&retry).await.unwrap() {
        ClaimOutcome::Claimed(l) => {
            assert_eq!(l.attempt, 2);
            assert_eq!(l.recovered.map(|c| c.name), Some("charged".to_owned()));
        }
        other => panic!("takeover: {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The `fail` policy fails it even so, and drops the recovery point.
    let summary = sweep_now(&store, SweepPolicy::Fail).await;
    assert_eq!((summary.found, summary.failed), (1, 1));
    let failed = item(&store, &id).await.expect("failed record kept");
    assert_eq!(failed.status, Status::Completed);
    assert!(failed.checkpoint.is_none());
}

async fn sweep_stops_before_the_deadline_and_the_next_sweep_finishes(mode: Discovery) {
    let store = store(mode).await;
    // Enough records that one sweep cannot resolve them all in 40 ms: a
    // local Redis answers in tens of microseconds, DynamoDB Local in
    // milliseconds.
    let n = match mode {
        Discovery::Redis | Discovery::RedisCluster => 2_000,
        Discovery::Stream | Discovery::Index => 100,
    };
    let ids = populate(&store, n).await;
    let sweeper = Sweeper::new(store.shared())
        .grace(Duration::ZERO)
        .page_size(1)
        .stop_before(Duration::from_secs(2));
    // Already inside the margin: nothing is read.
    let summary = sweeper.sweep(Some(now_ms() + 1000)).await;
    assert!(summary.remaining);
    assert_eq!((summary.found, summary.pages), (0, 0));
    // 40 ms of room for n+ single-record pages: it stops partway.
    let first = sweeper.sweep(Some(now_ms() + 2040)).await;
    assert!(first.remaining, "{first:?}");
    assert!(first.released < n as u64, "{first:?}");
    let second = sweeper.sweep(Some(now_ms() + 60_000)).await;
    assert!(!second.remaining, "{second:?}");
    assert_eq!(
        first.released + second.released,
        n as u64,
        "{first:?} {second:?}"
    );
    assert_eq!(first.errors + second.errors, 0);
    for id in &ids {
        assert!(item(&store, id).await.is_none(), "{id} released");
    }
    untouched_neighbours(&store, mode).await;
}

async fn an_unreadable_index_is_counted_and_fails_the_function(mode: Discovery) {
    let store = store(mode).await;
    let missing = mode
        .on(
            DynamoStore::builder(store.dynamo().client().clone(), "no-such-table")
                .open()
                .unwrap(),
        )
        .await;
    let summary = Sweeper::new(missing.clone()).sweep(None).await;
    let failed_reads = match mode {
        Discovery::Index => 16, // one failed query per shard
        Discovery::Stream => 1, // the table's stream cannot be found
        Discovery::Redis | Discovery::RedisCluster => unreachable!("a test of DynamoDB alone"),
    };
    assert_eq!(summary.errors, failed_reads, "{summary:?}");
    assert_eq!(summary.pages, 0);
    assert!(summary.remaining, "shards left unread");
    let mut context = lambda_runtime::Context::default();
    context.deadline = now_ms() + 60_000;
    let config = sweeper::Config {
        engine: Default::default(),
        table: "no-such-table".into(),
        policy: SweepPolicy::Release,
        grace: Duration::ZERO,
        index: mode == Discovery::Index,
        streams_endpoint: Some(integration_tests::endpoint()),
        full_pass: lambda_idempotency::store::dynamodb::DEFAULT_FULL_PASS,
    };
    let err = sweeper::handle(
        &config
            .sweeper(
                store.dynamo().client().clone(),
                integration_tests::streams_config().await,
            )
            .unwrap(),
        lambda_runtime::LambdaEvent::new(serde_json::json!({}), context),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("no-such-table") && err.contains("IDEMPOTENCY_TABLE"),
        "{err}"
    );
}

async fn the_sweeper_function_handles_the_sample_event(mode: Discovery) {
    let store = store(mode).await;
    populate(&store, 4).await;
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../events/scheduled-sweep.json"
    ))
    .unwrap();
    let payload: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut context = lambda_runtime::Context::default();
    context.deadline = now_ms() + 60_000;
    // The function's calls recorded as the sweeper's, apart for its opt-in
    // index discovery (scripts/check-iam.py).
    let principal = if mode == Discovery::Index {
        "sweeper.index"
    } else {
        "sweeper"
    };
    let config = sweeper::Config {
        engine: Default::default(),
        table: store.dynamo().table().to_owned(),
        policy: SweepPolicy::Release,
        grace: Duration::ZERO,
        index: mode == Discovery::Index,
        streams_endpoint: Some(integration_tests::iam_record::dynamodb_endpoint()),
        full_pass: lambda_idempotency::store::dynamodb::DEFAULT_FULL_PASS,
    };
    let summary: sweeper::SweepOutput = sweeper::handle(
        &config
            .sweeper(
                integration_tests::iam_record::dynamodb_client(principal).await,
                integration_tests::iam_record::streams_config(principal).await,
            )
            .unwrap(),
        lambda_runtime::LambdaEvent::new(payload, context),
    )
    .await
    .unwrap();
    assert_eq!((summary.found, summary.released), (4, 4));
    let out = serde_json::to_value(&summary).unwrap();
    for field in [
        "found",
        "released",
        "failed",
        "fenced",
        "resumable",
        "pages",
        "remaining",
        "errors",
        "behind",
        "trimmed",
    ] {
        assert!(out.get(field).is_some(), "output has {field}");
    }
    let emf: serde_json::Value = serde_json::from_str(&summary.emf("sweeper", 1)).unwrap();
    assert_eq!(emf["SweepReleased"], 4);
    let metrics = emf["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .unwrap();
    assert!(metrics.iter().any(|m| m["Name"] == "SweepFenced"));
    assert!(metrics.iter().any(|m| m["Name"] == "SweepBehind"));

    // SweepPolicy=fail: the function completes stuck records with the
    // terminal problem (fenced updates, recorded as the sweeper's too).
    let stuck = [hashed_id("stuck-to-fail-0"), hashed_id("stuck-to-fail-1")];
    for id in &stuck {
        claim(&store, id, 1).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut context = lambda_runtime::Context::default();
    context.deadline = now_ms() + 60_000;
    let config = sweeper::Config {
        policy: SweepPolicy::Fail,
        ..config
    };
    let failing: sweeper::SweepOutput = sweeper::handle(
        &config
            .sweeper(
                integration_tests::iam_record::dynamodb_client(principal).await,
                integration_tests::iam_record::streams_config(principal).await,
            )
            .unwrap(),
        lambda_runtime::LambdaEvent::new(serde_json::json!({}), context),
    )
    .await
    .unwrap();
    assert_eq!((failing.found, failing.failed), (2, 2), "{failing:?}");
    for id in &stuck {
        let record = store.get(id).await.unwrap().expect("kept, completed");
        assert_eq!(record.record.status, Status::Completed);
    }
}

// Defects found by the audit (issue 14, item 9); each test failed before its fix.

async fn the_fail_policy_never_resurrects_an_expired_record(mode: Discovery) {
    let store = store(mode).await;
    let id = hashed_id("expired-and-stuck");
    // Stuck and past its own expiry (TTL deletion lags): absent by definition.
    let mut request = claim_request(&id, "crashed", 1);
    request.expires_at_s = request.now_ms / 1000 - 5;
    claimed(store.claim(&request).await.unwrap());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let summary = sweep_now(&store, SweepPolicy::Fail).await;
    assert_eq!(
        (summary.found, summary.failed, summary.errors),
        (1, 0, 0),
        "{summary:?}"
    );
    assert_eq!(
        summary.released, 1,
        "deleted, as its expiry had already made it absent"
    );
    assert!(item(&store, &id).await.is_none());
}

async fn a_recovery_point_committed_after_the_index_was_read_keeps_the_record(mode: Discovery) {
    let store = store(mode).await;
    let id = hashed_id("late-checkpoint");
    let lease = claim(&store, &id, 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let sweeper = Sweeper::new(store.shared()).grace(Duration::ZERO);
    let found = stuck(&store).await;
    assert_eq!(found.len(), 1);
    assert!(!found[0].has_checkpoint);
    // The (stale but still holding) invocation commits a recovery point
    // after the index page was read.
    commit_charged(&store, &lease).await;
    let resolution = sweeper.resolve(&found[0], now_ms()).await.unwrap();
    assert_eq!(resolution, Resolution::Resumable);
    let kept = item(&store, &id)
        .await
        .expect("the record stays for its retry");
    assert!(kept.checkpoint.is_some());
}

async fn a_hanging_store_does_not_keep_the_sweep_past_its_deadline(mode: Discovery) {
    // A server that accepts connections and never answers.
    let (port, held) = silent_server().await;
    // The SDK's default of 3 attempts per call.
    let client = integration_tests::client_for(format!("http://127.0.0.1:{port}"), 3).await;
    let store = mode
        .on(DynamoStore::builder(client, "idempotency").open().unwrap())
        .await;
    assert_sweep_keeps_its_deadline(store).await;
    held.abort();
}

// The stream discovery (issue 17): nothing on the hot path, every guarantee kept.

/// A record still live when one sweep lists it is found by a later sweep,
/// once its lease is over: the settled place keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_live_at_one_sweep_is_found_by_a_later_one() {
    let store = store(Discovery::Stream).await;
    complete_now(&store, &hashed_id("done-early")).await;
    let id = hashed_id("live-then-stuck");
    claim(&store, &id, 400).await;
    let sweeper = Sweeper::new(store.shared()).grace(Duration::ZERO);
    let first = sweeper.sweep(None).await;
    assert_eq!((first.found, first.errors), (0, 0), "{first:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = sweeper.sweep(None).await;
    assert_eq!((second.found, second.released), (1, 1), "{second:?}");
    assert!(item(&store, &id).await.is_none());
    // Resolved records are not listed again.
    let third = sweeper.sweep(None).await;
    assert_eq!(third.found, 0, "{third:?}");
}

/// 10,000 stuck records among completed and live ones, two sweepers at
/// once: each stuck record resolved once, nothing else touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_stuck_records_two_sweepers_completed_ones_untouched() {
    use futures_util::StreamExt;
    let store = store(Discovery::Stream).await;
    let ids: Vec<String> = (0..10_000)
        .map(|i| hashed_id(&format!("many-{i}")))
        .collect();
    futures_util::stream::iter(ids.iter())
        .for_each_concurrent(32, |id| {
            let store = store.clone();
            async move {
                claim(&store, id, 1).await;
            }
        })
        .await;
    populate(&store, 0).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let sweeper = Sweeper::new(store.shared())
        .grace(Duration::ZERO)
        .concurrency(32);
    let (first, second) = (sweeper.clone(), sweeper.clone());
    let a = tokio::spawn(async move { first.sweep(None).await });
    let b = tokio::spawn(async move { second.sweep(None).await });
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!(a.errors + b.errors, 0, "{a:?} {b:?}");
    assert_eq!(a.released + b.released, 10_000, "{a:?} {b:?}");
    assert_eq!(
        a.fenced + b.fenced,
        a.found + b.found - 10_000,
        "every other sighting was fenced"
    );
    let left = Sweeper::new(store.shared())
        .grace(Duration::ZERO)
        .sweep(None)
        .await;
    assert_eq!(left.found, 0, "{left:?}");
    for id in ids.iter().step_by(97) {
        assert!(item(&store, id).await.is_none(), "{id} released");
    }
    untouched_neighbours(&store, Discovery::Stream).await;
}

/// A record left for its retry by a `release` sweep (it holds a recovery
/// point) is still found by a later `fail` sweep (the operator's choice of a
/// terminal answer), however far the stream has moved on meanwhile: the
/// index, Redis and PostgreSQL list it at every sweep; the stream's place
/// has moved past it, and the next full pass of the table lists it.
async fn a_record_left_resumable_is_failed_by_a_later_fail_sweep(mode: Discovery) {
    let store = store(mode).await;
    let id = hashed_id("resumable-then-failed");
    let lease = claim(&store, &id, 1).await;
    commit_charged(&store, &lease).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let released = sweep_now(&store, SweepPolicy::Release).await;
    assert_eq!((released.found, released.resumable), (1, 1), "{released:?}");
    // Other traffic moves the stream on.
    populate(&store, 3).await;
    let again = sweep_now(&store, SweepPolicy::Release).await;
    let listed_again = u64::from(mode != Discovery::Stream);
    assert_eq!(
        (again.resumable, again.released),
        (listed_again, 3),
        "{again:?}"
    );
    let store = match mode {
        Discovery::Stream => {
            let passing = integration_tests::dynamo_builder_like(store.dynamo())
                .with_stream(integration_tests::streams_client().await)
                .full_pass(Duration::from_millis(1))
                .open()
                .unwrap();
            Subject {
                store: Arc::new(passing.clone()),
                dynamo: Some(passing),
            }
        }
        _ => store,
    };
    let failed = sweep_now(&store, SweepPolicy::Fail).await;
    assert_eq!((failed.found, failed.failed), (1, 1), "{failed:?}");
    let record = item(&store, &id).await.expect("failed record kept");
    assert_eq!(record.status, Status::Completed);
}

/// A stream the function cannot reach (a new user's DynamoDB Local setup
/// gone wrong, say) fails the invocation with an error naming the endpoint
/// it tried, not the table's permissions alone.
#[tokio::test]
async fn an_unreachable_stream_is_named_in_the_sweepers_error() {
    let client = integration_tests::client().await;
    let table = integration_tests::unique_name("idempotency");
    integration_tests::create_table_from_template(&client, "IdempotencyTable", &table)
        .await
        .unwrap();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port())
    };
    let env = [
        ("IDEMPOTENCY_TABLE", table.clone()),
        ("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", closed.clone()),
    ];
    let config = sweeper::Config::from_lookup(|name| {
        env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
    })
    .unwrap();
    let mut context = lambda_runtime::Context::default();
    context.deadline = now_ms() + 60_000;
    let err = sweeper::handle(
        &config
            .sweeper(client, integration_tests::streams_config().await)
            .unwrap(),
        lambda_runtime::LambdaEvent::new(serde_json::json!({}), context),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains(&closed) && err.contains(&table), "{err}");
    assert!(err.contains("AWS_ENDPOINT_URL_DYNAMODB"), "{err}");
}
