//! `bench engines N` (behind `make bench-engines`): every store engine
//! through the same middleware and handler.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lambda_http::{Body, Response};
use lambda_idempotency::store::{
    CheckpointRequest, ClaimOutcome, ClaimRequest, CompleteRequest, Completion, Lease, StoredRecord,
};
use lambda_idempotency::{IdempotencyLayer, Store};
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};

use crate::handler::{body, handler, is_replayed, request, timed_call, Fresh};
use crate::stats::micros;
use crate::Result;

/// What the library's store calls return.
type StoreResult<T> = std::result::Result<T, lambda_idempotency::Error>;

/// Conflicts timed per engine: each waits on one first execution still running.
const CONFLICTS: usize = 20;

/// Waiting (`wait_for`): episodes per engine, each one first execution of
/// `WAIT_FIRST` and `WAITERS` duplicates of it arriving spread over its run.
const WAIT_EPISODES: usize = 10;
const WAITERS: usize = 20;
const WAIT_FIRST: Duration = Duration::from_millis(1_000);
/// The storm: this many duplicates waiting on one key at once.
const STORM_WAITERS: usize = 1_000;

/// A store engine under test, its own counter of the round trips it sends
/// (DynamoDB: HTTP requests, counted by an SDK interceptor; Redis and
/// PostgreSQL: commands and statements, counted by the store) and the
/// server's version when the store can ask for it.
struct Engine {
    name: &'static str,
    store: Arc<dyn Store>,
    round_trips: Box<dyn Fn() -> u64 + Sync>,
    version: Option<String>,
}

impl Engine {
    fn redis(name: &'static str, store: lambda_idempotency::RedisStore) -> Self {
        let counter = store.clone();
        Engine {
            name,
            store: Arc::new(store),
            round_trips: Box::new(move || counter.round_trips()),
            version: None,
        }
    }

    async fn postgres(name: &'static str, url: &str) -> Result<Self> {
        let store = integration_tests::postgres_store_at(url).await;
        let version = store
            .pool()
            .get()
            .await
            .map_err(|e| format!("{name}: a connection: {e}"))?
            .query_one("SHOW server_version", &[])
            .await
            .map_err(|e| format!("{name}: the server's version: {e}"))?
            .try_get::<_, String>(0)
            .map_err(|e| format!("{name}: the server's version: {e}"))?;
        let counter = store.clone();
        Ok(Engine {
            name,
            store: Arc::new(store),
            round_trips: Box::new(move || counter.round_trips()),
            version: Some(format!("PostgreSQL {version}")),
        })
    }
}

/// `bench engines N`: every store engine through the same middleware and
/// handler, one after the other, one call at a time.
pub(crate) async fn engines(n: usize) -> Result<Value> {
    let load_start = load_average();
    let (dynamo, dynamo_counter) = integration_tests::dynamo_store().await;
    let all = [
        Engine {
            name: "DynamoDB Local",
            store: Arc::new(dynamo),
            round_trips: Box::new(move || dynamo_counter.get()),
            version: None,
        },
        Engine::redis("Redis", integration_tests::redis_store().await),
        Engine::redis(
            "Redis Cluster (3 primaries)",
            integration_tests::redis_cluster_store().await,
        ),
        Engine::postgres("PostgreSQL", &integration_tests::postgres_url()).await?,
        Engine::postgres(
            "PostgreSQL through PgBouncer (transaction pooling)",
            &integration_tests::postgres_pooler_url(),
        )
        .await?,
    ];
    let mut rows = Vec::new();
    for engine in &all {
        rows.push(engine_row(engine, n).await?);
    }
    let mut waiting = Vec::new();
    for engine in &all {
        waiting.push(waiting_row(engine).await?);
    }
    Ok(json!({
        "iterations": n,
        "conflicts": CONFLICTS,
        "waiting": {
            "episodes": WAIT_EPISODES,
            "waiters": WAITERS,
            "first_ms": WAIT_FIRST.as_millis() as u64,
            "storm_waiters": STORM_WAITERS,
            "engines": waiting,
        },
        "body_bytes": body().len(),
        "load_average": {"start": load_start, "end": load_average()},
        "engines": rows,
    }))
}

/// The 1-minute load average (Linux), a noise marker: the engines share the
/// machine's cores with the benchmark.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// One engine's row: round trips per kind of call and latency percentiles.
/// Each iteration times, in turn so drift hits every kind alike, the bare
/// round trip (a read of an absent record through the store: the engine's
/// floor), a first execution and a replay of its key through the middleware;
/// then `CONFLICTS` duplicates while a first execution of their key still
/// runs. Round trips are counted around every timed call.
async fn engine_row(engine: &Engine, n: usize) -> Result<Value> {
    let name = engine.name;
    let svc = IdempotencyLayer::new(engine.store.clone()).layer(handler(Duration::ZERO));
    let mut fresh = Fresh::default();
    let mut kinds: BTreeMap<&str, (Vec<f64>, u64)> = BTreeMap::new();
    let mut record = |kind, us, before: u64| {
        let entry = kinds.entry(kind).or_default();
        entry.0.push(us);
        entry.1 += (engine.round_trips)() - before;
    };
    // Round 0 warms connections and the engine, and is not recorded.
    for round in 0..2 {
        let calls = if round == 0 { n.min(300) } else { n };
        for _ in 0..calls {
            let key = fresh.key("engine");
            let before = (engine.round_trips)();
            let t = Instant::now();
            let absent = engine
                .store
                .get(&fresh.key("absent"))
                .await
                .map_err(|e| format!("{name}: a read of an absent record: {e}"))?;
            let us = micros(t.elapsed());
            if absent.is_some() {
                return Err(format!("{name}: a record never written was found"));
            }
            if round == 1 {
                record("bare", us, before);
            }
            for (kind, ok) in [
                (
                    "first",
                    (|res: &Response<Body>| res.status() == 201) as fn(&_) -> bool,
                ),
                ("replay", is_replayed),
            ] {
                let before = (engine.round_trips)();
                let (us, res) = timed_call(&svc, request(&key)).await?;
                if !ok(&res) {
                    return Err(format!("{name}: {kind} answered {}", res.status()));
                }
                if round == 1 {
                    record(kind, us, before);
                }
            }
        }
    }
    let slow = IdempotencyLayer::new(engine.store.clone()).layer(handler(Duration::from_secs(2)));
    let busy = fresh.key("busy");
    let running = tokio::spawn(slow.oneshot(request(&busy)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..CONFLICTS {
        let before = (engine.round_trips)();
        let (us, res) = timed_call(&svc, request(&busy)).await?;
        if res.status() != 409 {
            return Err(format!("{name}: in progress answered {}", res.status()));
        }
        record("in_progress", us, before);
    }
    let first = running
        .await
        .map_err(|e| format!("{name}: the running first execution: {e}"))?
        .map_err(|e| format!("{name}: the running first execution: {e}"))?;
    if first.status() != 201 {
        return Err(format!(
            "{name}: the running first execution answered {}",
            first.status()
        ));
    }
    let mut per_call = serde_json::Map::new();
    let mut latency = serde_json::Map::new();
    for (kind, (mut us, counted)) in kinds {
        per_call.insert(kind.into(), json!(counted as f64 / us.len().max(1) as f64));
        us.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| {
            us.get(((us.len() as f64 - 1.0) * q).round() as usize)
                .copied()
        };
        latency.insert(
            kind.into(),
            json!({"p50": at(0.5), "p99": at(0.99), "calls": us.len()}),
        );
    }
    Ok(json!({
        "engine": name,
        "version": engine.version,
        "round_trips": per_call,
        "latency_us": latency,
    }))
}

/// What waiting for the first answer (`wait_for`) costs on one engine.
///
/// - `WAIT_EPISODES` episodes: a first execution taking `WAIT_FIRST`, and
///   `WAITERS` duplicates arriving evenly over 10-90 % of its run, each
///   allowed 10 s and each with a configuration of its own, as if in a
///   process of its own (no read shared, no wake-up from the first
///   execution's process). The first execution's configuration is kept
///   across episodes, as a warm function's is: its first episode has no
///   estimate to write into its claim, the next ones have. Added latency =
///   a waiter's answer minus the first execution's (after it completed);
///   store requests per waiter = the episode's round trips less the first
///   execution's two, per waiter (its claim and its polls).
/// - Storms of `STORM_WAITERS` duplicates started at once on one key held
///   by a first execution of 2 s: all in the first execution's process
///   (Lambda Managed Instances, `run_concurrent`), each in a process of its
///   own (one Lambda invocation each), and the same with a first execution
///   whose estimate is a second early; the same two figures, and the most
///   reads of the record in any one second and any 100 ms.
async fn waiting_row(engine: &Engine) -> Result<Value> {
    let name = engine.name;
    let mut fresh = Fresh::default();
    let reads = ReadLog::new(engine.store.clone());
    let wait = |store: Arc<ReadLog>| IdempotencyLayer::new(store).wait_for(Duration::from_secs(10));
    let claimer = wait(reads.clone());
    let apart = || wait(reads.clone());
    let mut added = Vec::new();
    let mut per_waiter = Vec::new();
    let mut cold = None;
    for i in 0..WAIT_EPISODES {
        let ep = episode(
            engine, &reads, &claimer, &apart, &mut fresh, WAIT_FIRST, WAITERS, true,
        )
        .await?;
        if i == 0 {
            cold = Some(percentiles(&mut ep.lags.clone()));
        }
        added.extend(ep.lags);
        per_waiter.push(ep.requests_per_waiter);
    }
    // The storms' first execution runs in a process that has seen it take
    // as long before (one untimed call), or, in the last, one that learned
    // the episodes' shorter duration: its estimate is a second early.
    let storm_first = Duration::from_secs(2);
    let trained = wait(reads.clone());
    let warm = trained
        .clone()
        .layer(handler(storm_first))
        .oneshot(request(&fresh.key("train")))
        .await
        .map_err(|e| format!("{name}: the storm's untimed first call: {e}"))?;
    if warm.status() != 201 {
        return Err(format!(
            "{name}: the storm's untimed first call answered {}",
            warm.status()
        ));
    }
    let together = || trained.clone();
    let mut storms = Vec::new();
    for (process, estimate, claimer, waiters) in [
        (
            "one",
            "right",
            &trained,
            &together as &dyn Fn() -> IdempotencyLayer,
        ),
        ("own", "right", &trained, &apart),
        ("own", "early", &claimer, &apart),
    ] {
        let mut ep = episode(
            engine,
            &reads,
            claimer,
            waiters,
            &mut fresh,
            storm_first,
            STORM_WAITERS,
            false,
        )
        .await?;
        storms.push(json!({
            "process": process,
            "estimate": estimate,
            "added_ms": percentiles(&mut ep.lags),
            "requests_per_waiter": ep.requests_per_waiter,
            "held_ms_mean": ep.held_ms_mean,
            "peak_reads_per_s": ep.peak_reads_per_s,
            "peak_reads_per_100ms": ep.peak_reads_per_100ms,
        }));
    }
    let mean = per_waiter.iter().sum::<f64>() / per_waiter.len().max(1) as f64;
    Ok(json!({
        "engine": name,
        "added_ms": percentiles(&mut added),
        "first_episode_added_ms": cold,
        "requests_per_waiter": mean,
        "storms": storms,
    }))
}

/// p50, p99 and the largest of `v` (ms), and how many.
fn percentiles(v: &mut [f64]) -> Value {
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| {
        v.get(((v.len() as f64 - 1.0) * q).round() as usize)
            .copied()
    };
    json!({"p50": at(0.5), "p99": at(0.99), "max": v.last().copied(), "samples": v.len()})
}

/// What one episode measured.
struct Episode {
    /// Each waiter's answer after the first execution's (ms).
    lags: Vec<f64>,
    requests_per_waiter: f64,
    /// From a waiter's arrival to its answer, on average (ms).
    held_ms_mean: f64,
    /// The most reads of the record in any one second, and in any 100 ms.
    peak_reads_per_s: usize,
    peak_reads_per_100ms: usize,
}

/// One first execution of `first` (through `claimer`) and `waiters`
/// duplicates of it (spread over its run, or all at once), each through
/// the layer `waiter` gives it.
#[allow(clippy::too_many_arguments)]
async fn episode(
    engine: &Engine,
    reads: &ReadLog,
    claimer: &IdempotencyLayer,
    waiter: &dyn Fn() -> IdempotencyLayer,
    fresh: &mut Fresh,
    first: Duration,
    waiters: usize,
    spread: bool,
) -> Result<Episode> {
    let name = engine.name;
    let key = fresh.key("wait");
    let before = (engine.round_trips)();
    let reads_before = reads.len();
    let start = Instant::now();
    let running = tokio::spawn(claimer.clone().layer(handler(first)).oneshot(request(&key)));
    let mut tasks = Vec::with_capacity(waiters);
    for i in 0..waiters {
        let at = if spread {
            first.mul_f64(0.1 + 0.8 * i as f64 / waiters.max(2).saturating_sub(1) as f64)
        } else {
            Duration::from_millis(100)
        };
        let svc = waiter().layer(handler(first));
        let req = request(&key);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(start + at)).await;
            let arrived = Instant::now();
            let res = svc.oneshot(req).await;
            (arrived, Instant::now(), res)
        }));
    }
    let first_res = running
        .await
        .map_err(|e| format!("{name}: the first execution: {e}"))?
        .map_err(|e| format!("{name}: the first execution: {e}"))?;
    let first_done = Instant::now();
    if first_res.status() != 201 {
        return Err(format!(
            "{name}: the first execution answered {}",
            first_res.status()
        ));
    }
    let mut lags = Vec::with_capacity(waiters);
    let mut held_ms = 0.0;
    for task in tasks {
        let (arrived, done, res) = task.await.map_err(|e| format!("{name}: a waiter: {e}"))?;
        let res = res.map_err(|e| format!("{name}: a waiter: {e}"))?;
        if !is_replayed(&res) || res.body().as_ref() != first_res.body().as_ref() {
            return Err(format!(
                "{name}: a waiter answered {} without the first execution's response",
                res.status()
            ));
        }
        // A waiter can read the completed record before the first
        // execution's own answer is back: that lag counts as none.
        lags.push(done.saturating_duration_since(first_done).as_secs_f64() * 1000.0);
        held_ms += (done - arrived).as_secs_f64() * 1000.0;
    }
    let trips = (engine.round_trips)() - before;
    let episode_reads = reads.since(reads_before);
    Ok(Episode {
        lags,
        requests_per_waiter: trips.saturating_sub(2) as f64 / waiters as f64,
        held_ms_mean: held_ms / waiters as f64,
        peak_reads_per_s: peak_in(&episode_reads, Duration::from_secs(1)),
        peak_reads_per_100ms: peak_in(&episode_reads, Duration::from_millis(100)),
    })
}

/// The most of `times` (in order) within any `window`.
fn peak_in(times: &[Instant], window: Duration) -> usize {
    let mut from = 0;
    let mut peak = 0;
    for (to, t) in times.iter().enumerate() {
        while *t - times[from] >= window {
            from += 1;
        }
        peak = peak.max(to + 1 - from);
    }
    peak
}

/// A store that notes when each read (`Store::get`, a waiter's poll) was
/// sent, around an engine's.
#[derive(Debug)]
struct ReadLog {
    inner: Arc<dyn Store>,
    at: std::sync::Mutex<Vec<Instant>>,
}

impl ReadLog {
    fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(ReadLog {
            inner,
            at: std::sync::Mutex::default(),
        })
    }
    fn log(&self) -> std::sync::MutexGuard<'_, Vec<Instant>> {
        self.at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    fn len(&self) -> usize {
        self.log().len()
    }
    /// The reads sent since the `from`th, in order.
    fn since(&self, from: usize) -> Vec<Instant> {
        let mut times = self.log().get(from..).unwrap_or_default().to_vec();
        times.sort();
        times
    }
}

#[async_trait::async_trait]
impl Store for ReadLog {
    async fn claim(&self, request: &ClaimRequest) -> StoreResult<ClaimOutcome> {
        self.inner.claim(request).await
    }
    async fn complete(&self, request: CompleteRequest<'_>) -> StoreResult<Completion> {
        self.inner.complete(request).await
    }
    async fn release(&self, lease: &Lease) -> StoreResult<()> {
        self.inner.release(lease).await
    }
    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> StoreResult<()> {
        self.inner.checkpoint(request).await
    }
    async fn get(&self, record_id: &str) -> StoreResult<Option<StoredRecord>> {
        self.log().push(Instant::now());
        self.inner.get(record_id).await
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn reads_origin(&self) -> bool {
        self.inner.reads_origin()
    }
    async fn warm_up(&self) -> StoreResult<()> {
        self.inner.warm_up().await
    }
}
