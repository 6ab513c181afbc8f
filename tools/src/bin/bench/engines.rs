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
    Ok(json!({
        "iterations": n,
        "conflicts": CONFLICTS,
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
