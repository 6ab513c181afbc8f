//! The engines benchmark behind `make bench-engines` (part of `make bench`;
//! run it in release): round trips per invocation and latency of the
//! middleware on each store engine other than DynamoDB, whose figures are
//! the main report's.
//!
//! `bench_engines postgres N`: on the PostgreSQL server of
//! `IDEMPOTENCY_TEST_POSTGRES_URL` (`scripts/postgres-local.sh` starts one),
//! one call at a time, N times each, in turn per iteration so drift hits
//! every kind alike: the bare round trip (`SELECT 1` on the store's pool, the
//! floor), a first execution and a replay of its key through the HTTP
//! middleware. Statements are counted by the store itself around every timed
//! call, and per invocation kind by a probe (first, replay, duplicate in
//! progress). Prints one JSON object.
//!
//! Every request carries `scripts/bench/body.json`, the body of the main
//! benchmark.

use std::time::{Duration, Instant};

use lambda_http::{Body, Request, Response};
use lambda_idempotency::{IdempotencyLayer, PostgresStore, REPLAYED_HEADER};
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};

type Result<T> = std::result::Result<T, String>;

const BODY: &str = include_str!("../../../scripts/bench/body.json");

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iterations = args
        .get(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000usize);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(format!("tokio runtime: {e}")));
    let result = runtime.block_on(async {
        match args.first().map(String::as_str) {
            Some("postgres") => postgres(iterations).await,
            other => Err(format!(
                "unknown engine {other:?}; see the doc comment of tools/src/bin/bench_engines.rs"
            )),
        }
    });
    match result {
        Ok(value) => println!("{value}"),
        Err(e) => fail(e),
    }
}

fn fail(message: String) -> ! {
    eprintln!("bench_engines: {message}");
    std::process::exit(1)
}

fn request(key: &str) -> Request {
    http::Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(BODY.trim_end()))
        .expect("static request")
}

/// The handler: answers 201 with the body after `delay`, doing no work.
fn handler(delay: Duration) -> impl integration_tests::Handler {
    tower::service_fn(move |req: Request| async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok::<_, lambda_http::Error>(
            Response::builder()
                .status(201)
                .header("content-type", "application/json")
                .body(Body::from(req.body().as_ref().to_vec()))?,
        )
    })
}

async fn call<S: integration_tests::Handler>(svc: &S, key: &str) -> Result<Response<Body>> {
    svc.clone()
        .oneshot(request(key))
        .await
        .map_err(|e| format!("the middleware failed: {e}"))
}

/// Statements one invocation of each kind makes, averaged over `probe` calls.
async fn round_trips_per_kind(store: &PostgresStore, probe: usize) -> Result<Value> {
    let svc = IdempotencyLayer::new(store.clone()).layer(handler(Duration::ZERO));
    let (mut first, mut replay) = (0, 0);
    for i in 0..probe {
        let key = format!("probe-{i}");
        let before = store.round_trips();
        call(&svc, &key).await?;
        first += store.round_trips() - before;
        let before = store.round_trips();
        let res = call(&svc, &key).await?;
        if res.headers().get(REPLAYED_HEADER).is_none() {
            return Err("the second call of a key was not a replay".into());
        }
        replay += store.round_trips() - before;
    }
    // A duplicate while the first call's handler still runs.
    let slow = IdempotencyLayer::new(store.clone()).layer(handler(Duration::from_secs(2)));
    let mut in_progress = 0;
    for i in 0..probe.min(10) {
        let key = format!("busy-{i}");
        let first_call = tokio::spawn({
            let slow = slow.clone();
            async move { call(&slow, &key).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = store.round_trips();
        let res = call(&slow, &format!("busy-{i}")).await?;
        if res.status() != 409 {
            return Err(format!("a duplicate in progress answered {}", res.status()));
        }
        in_progress += store.round_trips() - before;
        first_call.await.map_err(|e| format!("first call: {e}"))??;
    }
    let per = |total: u64, n: usize| total as f64 / n as f64;
    Ok(json!({
        "first": per(first, probe),
        "replay": per(replay, probe),
        "in_progress": per(in_progress, probe.min(10)),
    }))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn summary(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    json!({
        "p50_us": percentile(&samples, 50.0),
        "p99_us": percentile(&samples, 99.0),
        "n": samples.len(),
    })
}

async fn postgres(iterations: usize) -> Result<Value> {
    let store = integration_tests::postgres_store().await;
    let per_kind = round_trips_per_kind(&store, 50).await?;
    let svc = IdempotencyLayer::new(store.clone()).layer(handler(Duration::ZERO));
    let client = store
        .pool()
        .get()
        .await
        .map_err(|e| format!("a connection: {e}"))?;
    let (mut bare, mut first, mut replay) = (Vec::new(), Vec::new(), Vec::new());
    let (mut first_trips, mut replay_trips) = (0, 0);
    let us = |start: Instant| start.elapsed().as_secs_f64() * 1e6;
    for i in 0..iterations {
        let start = Instant::now();
        client
            .query_typed("SELECT 1", &[])
            .await
            .map_err(|e| format!("SELECT 1: {e}"))?;
        bare.push(us(start));
        let key = format!("timed-{i}");
        let before = store.round_trips();
        let start = Instant::now();
        let res = call(&svc, &key).await?;
        first.push(us(start));
        first_trips += store.round_trips() - before;
        if res.status() != 201 {
            return Err(format!("a first execution answered {}", res.status()));
        }
        let before = store.round_trips();
        let start = Instant::now();
        call(&svc, &key).await?;
        replay.push(us(start));
        replay_trips += store.round_trips() - before;
    }
    let version = client
        .query_one("SHOW server_version", &[])
        .await
        .map_err(|e| format!("server version: {e}"))?
        .get::<_, String>(0);
    Ok(json!({
        "engine": "PostgreSQL",
        "server": format!("PostgreSQL {version} on loopback"),
        "iterations": iterations,
        "round_trips_probe": per_kind,
        "round_trips_timed": {
            "first": first_trips as f64 / iterations as f64,
            "replay": replay_trips as f64 / iterations as f64,
        },
        "latency": {
            "bare": summary(bare),
            "first": summary(first),
            "replay": summary(replay),
        },
    }))
}
