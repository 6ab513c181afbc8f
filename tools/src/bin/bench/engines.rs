//! `bench engines N` (behind `make bench-engines`): every store engine
//! through the same middleware and handler.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lambda_http::{Body, Response};
use lambda_idempotency::{IdempotencyLayer, Store};
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};

use crate::handler::{body, handler, is_replayed, request, timed_call, Fresh};
use crate::stats::micros;
use crate::Result;

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
///   allowed 10 s. Added latency = a waiter's answer minus the first
///   execution's (after it completed); store requests per waiter = the
///   episode's round trips less the first execution's two, per waiter (its
///   claim and its polls).
/// - The storm: `STORM_WAITERS` duplicates started at once on one key held
///   by a first execution of 2 s, the same two figures, and its wall time.
async fn waiting_row(engine: &Engine) -> Result<Value> {
    let name = engine.name;
    let mut fresh = Fresh::default();
    let layer = IdempotencyLayer::new(engine.store.clone()).wait_for(Duration::from_secs(10));
    let mut added = Vec::new();
    let mut per_waiter = Vec::new();
    for _ in 0..WAIT_EPISODES {
        let (lags, trips, _) =
            episode(engine, &layer, &mut fresh, WAIT_FIRST, WAITERS, true).await?;
        added.extend(lags);
        per_waiter.push(trips);
    }
    let (mut storm, storm_trips, storm_held_ms) = episode(
        engine,
        &layer,
        &mut fresh,
        Duration::from_secs(2),
        STORM_WAITERS,
        false,
    )
    .await?;
    let pct = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| {
            v.get(((v.len() as f64 - 1.0) * q).round() as usize)
                .copied()
        };
        json!({"p50": at(0.5), "p99": at(0.99), "max": v.last().copied(), "samples": v.len()})
    };
    let mean = per_waiter.iter().sum::<f64>() / per_waiter.len().max(1) as f64;
    Ok(json!({
        "engine": name,
        "added_ms": pct(&mut added),
        "requests_per_waiter": mean,
        "storm": {
            "added_ms": pct(&mut storm),
            "requests_per_waiter": storm_trips,
            "held_ms_mean": storm_held_ms,
        },
    }))
}

/// One first execution of `first` and `waiters` duplicates of it (spread
/// over its run, or all at once): each waiter's answer time after the first
/// execution's (ms), the store requests per waiter, and how long a waiter
/// was held on average (ms, from its arrival to its answer).
async fn episode(
    engine: &Engine,
    layer: &IdempotencyLayer,
    fresh: &mut Fresh,
    first: Duration,
    waiters: usize,
    spread: bool,
) -> Result<(Vec<f64>, f64, f64)> {
    let name = engine.name;
    let key = fresh.key("wait");
    let svc = layer.clone().layer(handler(first));
    let before = (engine.round_trips)();
    let start = Instant::now();
    let running = tokio::spawn(svc.clone().oneshot(request(&key)));
    let mut tasks = Vec::with_capacity(waiters);
    for i in 0..waiters {
        let at = if spread {
            first.mul_f64(0.1 + 0.8 * i as f64 / waiters.max(2).saturating_sub(1) as f64)
        } else {
            Duration::from_millis(100)
        };
        let svc = svc.clone();
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
    Ok((
        lags,
        trips.saturating_sub(2) as f64 / waiters as f64,
        held_ms / waiters as f64,
    ))
}
