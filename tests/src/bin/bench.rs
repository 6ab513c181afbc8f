//! The end-to-end benchmark driver behind `make bench` (run it in release).
//!
//! Subcommands (DynamoDB Local must be running; `scripts/bench.sh` arranges it):
//! - `latency N R OUT`: bare round trip, first execution and replay through the
//!   HTTP middleware on `DynamoStore`, R rounds of N samples, request counts;
//! - `cpu N`: nanoseconds per request on `MemoryStore` (1 KB JSON body);
//! - `cpu-probe first|replay N`: N requests only, for instruction counting
//!   under callgrind;
//! - `cold K ORDERS_API_BIN`: process spawn to first response of `orders-api`
//!   through the Runtime API, K times;
//! - `cold-command K CMD ARGS...`: process spawn to its first stdout line
//!   (Powertools Python's import + setup + first invocation), K times;
//! - `storm ORDERS_API_BIN REQUESTS KEYS CONCURRENCY PROCESSES`: the duplicate
//!   storm against real `orders-api` processes; peak RSS and execution counts.
//!
//! Each prints one JSON object on stdout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::functions;
use integration_tests::runtime_api::{Outcome, RuntimeApi};
use lambda_http::{Body, Request, Response};
use lambda_idempotency::{DynamoStore, IdempotencyLayer, MemoryStore};
use serde_json::{json, Value};
use tower::{Layer, Service, ServiceExt};

type Result<T> = std::result::Result<T, String>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => fail(format!("tokio runtime: {e}")),
    };
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let num = |i: usize, default: u64| args.get(i).and_then(|v| v.parse().ok()).unwrap_or(default);
    let result = runtime.block_on(async {
        match arg(0).as_str() {
            "latency" => latency(num(1, 2000) as usize, num(2, 3) as usize).await,
            "cpu" => cpu(num(1, 20_000) as usize).await,
            "cpu-probe" => cpu_probe(&arg(1), num(2, 1000) as usize).await,
            "cold" => cold(num(1, 10) as usize, &arg(2)).await,
            "cold-command" => cold_command(num(1, 10) as usize, &args[2.min(args.len())..]).await,
            "storm" => {
                storm(
                    &arg(1),
                    num(2, 10_000) as usize,
                    num(3, 1000) as usize,
                    num(4, 32) as usize,
                    num(5, 4) as usize,
                )
                .await
            }
            other => Err(format!(
                "unknown subcommand {other:?}; see the doc comment of tests/src/bin/bench.rs"
            )),
        }
    });
    match result {
        Ok(value) => println!("{value}"),
        Err(e) => fail(e),
    }
}

fn fail(message: String) -> ! {
    eprintln!("bench: {message}");
    std::process::exit(1)
}

/// The payload of every benchmark: the file named by `BENCH_BODY_FILE` (the
/// exact 1,000-byte body the Powertools side sends), else a ~1 KB order.
fn body() -> String {
    if let Some(text) = std::env::var("BENCH_BODY_FILE")
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok())
    {
        return text.trim_end().to_owned();
    }
    let items: Vec<Value> = (0..12)
        .map(|i| json!({"sku": format!("SKU-{i:04}"), "quantity": i + 1, "unit_price": 1000 + i}))
        .collect();
    json!({"customer_id": "cus_42", "amount": 2500, "currency": "EUR", "items": items}).to_string()
}

fn request(key: &str, body: &str) -> Request {
    http::Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body.to_owned()))
        .expect("static request")
}

/// The handler every variant wraps: answers 201 with the body, doing no work,
/// so what is measured is the idempotency layer.
fn handler(
    delay: Duration,
) -> impl Service<Request, Response = Response<Body>, Error = lambda_http::Error, Future = impl Send>
       + Clone
       + Send
       + 'static {
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

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn latency(n: usize, rounds: usize) -> Result<Value> {
    let (store, counter) = integration_tests::dynamo_store().await;
    let svc = IdempotencyLayer::new(store.clone()).layer(handler(Duration::ZERO));
    let body = body();
    let mut seq = 0u64;
    let mut fresh = || {
        seq += 1;
        format!("bench-{seq}")
    };

    // Warm-up: connections, caches, and DynamoDB Local's JIT, which takes a
    // thousand or so calls to settle.
    for _ in 0..1000 {
        svc.clone()
            .oneshot(request(&fresh(), &body))
            .await
            .map_err(|e| e.to_string())?;
        bare_put(&store, &fresh()).await?;
    }

    let mut rounds_data = Vec::new();
    for _ in 0..rounds {
        let (mut bare, mut first, mut replay) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            let key = fresh();
            let t = Instant::now();
            bare_put(&store, &key).await?;
            bare.push(micros(t.elapsed()));
        }
        let replay_key = fresh();
        svc.clone()
            .oneshot(request(&replay_key, &body))
            .await
            .map_err(|e| e.to_string())?;
        for _ in 0..n {
            let req = request(&fresh(), &body);
            let t = Instant::now();
            let res = svc.clone().oneshot(req).await.map_err(|e| e.to_string())?;
            first.push(micros(t.elapsed()));
            if res.status() != 201 {
                return Err(format!("first execution answered {}", res.status()));
            }
            let req = request(&replay_key, &body);
            let t = Instant::now();
            let res = svc.clone().oneshot(req).await.map_err(|e| e.to_string())?;
            replay.push(micros(t.elapsed()));
            if res.headers().get("idempotent-replayed").is_none() {
                return Err("replay was not replayed".into());
            }
        }
        rounds_data.push(json!({"bare_us": bare, "first_us": first, "replay_us": replay}));
    }

    // Requests per invocation, counted by the SDK interceptor.
    let per_call = |before: u64, after: u64, calls: u64| (after - before) as f64 / calls as f64;
    let before = counter.get();
    for _ in 0..50 {
        svc.clone()
            .oneshot(request(&fresh(), &body))
            .await
            .map_err(|e| e.to_string())?;
    }
    let first_requests = per_call(before, counter.get(), 50);
    let key = fresh();
    svc.clone()
        .oneshot(request(&key, &body))
        .await
        .map_err(|e| e.to_string())?;
    let before = counter.get();
    for _ in 0..50 {
        svc.clone()
            .oneshot(request(&key, &body))
            .await
            .map_err(|e| e.to_string())?;
    }
    let replay_requests = per_call(before, counter.get(), 50);
    let slow = IdempotencyLayer::new(store.clone()).layer(handler(Duration::from_millis(500)));
    let busy = fresh();
    let running = tokio::spawn(slow.clone().oneshot(request(&busy, &body)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = counter.get();
    let res = svc
        .clone()
        .oneshot(request(&busy, &body))
        .await
        .map_err(|e| e.to_string())?;
    let in_progress_requests = per_call(before, counter.get(), 1);
    if res.status() != 409 {
        return Err(format!("in-progress answered {}", res.status()));
    }
    running
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;

    Ok(json!({
        "tool": "lambda-idempotency",
        "iterations": n,
        "rounds": rounds,
        "requests": {"first": first_requests, "replay": replay_requests, "in_progress": in_progress_requests, "cached_replay": null},
        "rounds_data": rounds_data,
    }))
}

/// The bare floor: one conditional PutItem with the same client.
async fn bare_put(store: &DynamoStore, key: &str) -> Result<()> {
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item("id", AttributeValue::S(format!("bare-{key}")))
        .item("n", AttributeValue::N("1".into()))
        .condition_expression("attribute_not_exists(id)")
        .send()
        .await
        .map(|_| ())
        .map_err(|e| {
            format!(
                "bare put: {}",
                aws_sdk_dynamodb::error::DisplayErrorContext(e)
            )
        })
}

async fn run_requests<S>(svc: &S, keys: impl Iterator<Item = String>, body: &str) -> Result<usize>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let mut count = 0;
    for key in keys {
        svc.clone()
            .oneshot(request(&key, body))
            .await
            .map_err(|e| e.to_string())?;
        count += 1;
    }
    Ok(count)
}

async fn cpu(n: usize) -> Result<Value> {
    let body = body();
    let measure = |replay: bool| {
        let body = body.clone();
        async move {
            let store = MemoryStore::new();
            let svc = IdempotencyLayer::new(store).layer(handler(Duration::ZERO));
            if replay {
                run_requests(&svc, std::iter::once("k".to_owned()), &body).await?;
            }
            let keys = (0..n).map(move |i| {
                if replay {
                    "k".to_owned()
                } else {
                    format!("k{i}")
                }
            });
            let t = Instant::now();
            run_requests(&svc, keys, &body).await?;
            Ok::<_, String>(t.elapsed().as_nanos() as f64 / n as f64)
        }
    };
    // Medians of 5 runs each.
    let mut first = Vec::new();
    let mut replay = Vec::new();
    for _ in 0..5 {
        first.push(measure(false).await?);
        replay.push(measure(true).await?);
    }
    Ok(json!({"first_ns": median(&mut first), "replay_ns": median(&mut replay)}))
}

async fn cpu_probe(kind: &str, n: usize) -> Result<Value> {
    let body = body();
    let svc = IdempotencyLayer::new(MemoryStore::new()).layer(handler(Duration::ZERO));
    let count = match kind {
        "bare" => {
            run_requests(
                &handler(Duration::ZERO),
                (0..n).map(|i| format!("k{i}")),
                &body,
            )
            .await?
        }
        "first" => run_requests(&svc, (0..n).map(|i| format!("k{i}")), &body).await?,
        "replay" => run_requests(&svc, std::iter::repeat_n("k".to_owned(), n), &body).await?,
        other => {
            return Err(format!(
                "cpu-probe kind {other:?}: use bare, first or replay"
            ))
        }
    };
    Ok(json!({"requests": count}))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

async fn cold(runs: usize, bin: &str) -> Result<Value> {
    let tables = functions::tables().await?;
    let order = r#"{"customer_id":"cus_42","amount":2500,"currency":"EUR"}"#;
    let mut samples = Vec::new();
    // Run 0 warms the disk cache and is not recorded.
    for i in 0..=runs {
        let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
        let env = functions::orders_env(&api, &tables, &[]);
        let t = Instant::now();
        let mut child = functions::spawn(bin, &env)?;
        let outcome = api
            .invoke(
                functions::post_order_event(&format!("cold-{i}"), order),
                Duration::from_secs(30),
            )
            .await;
        let elapsed = t.elapsed();
        let _ = child.kill().await;
        match outcome {
            Outcome::Response(body)
                if String::from_utf8_lossy(&body).contains("\"statusCode\":201") => {}
            other => return Err(format!("cold start {i}: unexpected {other:?}")),
        }
        if i > 0 {
            samples.push(elapsed.as_secs_f64() * 1e3);
        }
    }
    Ok(json!({"cold_start_ms": samples}))
}

async fn cold_command(runs: usize, command: &[String]) -> Result<Value> {
    use tokio::io::AsyncBufReadExt;
    let (program, args) = command
        .split_first()
        .ok_or("cold-command needs a command")?;
    let mut samples = Vec::new();
    // Run 0 warms the disk cache and is not recorded.
    for i in 0..=runs {
        let t = Instant::now();
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawn {program}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let line = tokio::io::BufReader::new(stdout)
            .lines()
            .next_line()
            .await
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        let elapsed = t.elapsed();
        let _ = child.wait().await;
        if !line.contains("\"ok\": true") && !line.contains("\"ok\":true") {
            return Err(format!("cold run {i} of {program} printed {line:?}"));
        }
        if i > 0 {
            samples.push(elapsed.as_secs_f64() * 1e3);
        }
    }
    Ok(json!({"cold_start_ms": samples}))
}

async fn storm(
    bin: &str,
    requests: usize,
    keys: usize,
    concurrency: usize,
    processes: usize,
) -> Result<Value> {
    let tables = functions::tables().await?;
    let orders = tables.1.clone();
    let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
    let env = functions::orders_env(&api, &tables, &[]);
    let mut children = Vec::new();
    for _ in 0..processes {
        children.push(functions::spawn(bin, &env)?);
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let statuses = Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
        String,
        usize,
    >::new()));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (api, next, statuses) = (api.clone(), next.clone(), statuses.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= requests {
                    break;
                }
                let key = format!("storm-{}", i % keys);
                let body = format!(
                    r#"{{"customer_id":"cus_{}","amount":{},"currency":"EUR"}}"#,
                    i % keys,
                    100 + i % keys
                );
                let outcome = api
                    .invoke(
                        functions::post_order_event(&key, &body),
                        Duration::from_secs(30),
                    )
                    .await;
                let label = match outcome {
                    Outcome::Response(b) => serde_json::from_slice::<Value>(&b)
                        .ok()
                        .and_then(|v| v["statusCode"].as_u64())
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "unparsable".into()),
                    Outcome::Error(_) => "error".into(),
                    Outcome::TimedOut => "timeout".into(),
                };
                if let Ok(mut s) = statuses.lock() {
                    *s.entry(label).or_default() += 1;
                }
            }
        }));
    }
    for w in workers {
        w.await.map_err(|e| e.to_string())?;
    }
    let elapsed = started.elapsed();
    let rss: Vec<u64> = children
        .iter()
        .filter_map(|c| c.id())
        .filter_map(functions::peak_rss_kb)
        .collect();
    for mut c in children {
        let _ = c.kill().await;
    }
    // Every order must have run exactly once.
    let executions = functions::order_executions(&orders).await?;
    let orders_once = executions.values().filter(|n| **n == 1).count();
    let statuses = statuses.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(json!({
        "requests": requests, "keys": keys, "concurrency": concurrency, "processes": processes,
        "seconds": elapsed.as_secs_f64(),
        "statuses": statuses,
        "orders": executions.len(), "orders_executed_once": orders_once,
        "executions_ok": executions.len() == keys && orders_once == keys,
        "peak_rss_kb_per_process": rss,
        "peak_rss_kb": rss.iter().max(),
    }))
}
