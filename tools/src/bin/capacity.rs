//! What a request costs in DynamoDB capacity: read and write units per
//! invocation (the table's own and its indexes'), for this library and for
//! Powertools for AWS Lambda (Python) on the same DynamoDB Local, metered by
//! one proxy (`integration_tests::capacity_proxy`) that asks DynamoDB for the
//! consumed capacity of every request.
//!
//! ```text
//! scripts/dynamodb-local.sh target/release/capacity --python .tools/bench-venv/bin/python --out target/bench/capacity.json
//! ```
//!
//! Kinds, each with 200 B, 1 KB and 10 KB responses (the request body echoed,
//! as the Powertools handler does): a first execution, a replay, a duplicate
//! while the first is in progress, a replay served by the local cache. Then
//! `orders-api` as a process (two recovery points, a small response), and the
//! sweeper: one sweep of an idle table, and of 100 stuck records among 100
//! completed ones. `make bench` runs it; report.py puts it in BENCHMARKS.md.

use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::Duration;

use integration_tests::capacity_proxy::{CapacityProxy, Units};
use integration_tests::functions;
use integration_tests::runtime_api::{Outcome, RuntimeApi};
use lambda_http::Request;
use lambda_idempotency::{
    scope::RecordScope,
    store::{now_ms, CompleteRequest, SweepStore},
    sweeper::Sweeper,
    DynamoStore, IdempotencyLayer, Store,
};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::{Layer, ServiceExt};

type Result<T> = std::result::Result<T, String>;

/// Calls per measured kind; the figures are per call.
const CALLS: u64 = 20;
/// Response sizes measured, in bytes.
const SIZES: [usize; 3] = [200, 1_000, 10_000];

/// A JSON order of exactly `bytes` bytes: fixed fields, then a `note` of hex
/// digits (compressible about as well as typical API JSON: half the entropy
/// of random bytes).
fn body(bytes: usize) -> String {
    let head = r#"{"customer_id":"cus_42","amount":2500,"currency":"EUR","note":""#;
    let tail = r#""}"#;
    let fill = bytes.saturating_sub(head.len() + tail.len());
    let noise = integration_tests::noise(fill, 0x5eed_0000 + bytes as u64);
    let hex: String = noise
        .iter()
        .map(|b| char::from_digit(u32::from(b % 16), 16).unwrap_or('0'))
        .collect();
    format!("{head}{hex}{tail}")
}

/// Units per call between two readings of one table.
fn per_call(after: Units, before: Units, calls: u64) -> Value {
    let d = after - before;
    let n = calls as f64;
    json!({
        "requests": d.requests as f64 / n,
        "table_write": d.table_write / n,
        "index_write": d.index_write / n,
        "failed_write_units": d.failed_write_units / n,
        "write": d.writes() / n,
        "read": d.reads() / n,
    })
}

struct Lab {
    proxy: CapacityProxy,
    /// Through the proxy: what is measured.
    metered: DynamoStore,
    /// Straight to DynamoDB Local: set-up that must not count.
    direct: DynamoStore,
}

impl Lab {
    async fn new() -> Result<Lab> {
        let endpoint = integration_tests::endpoint();
        let upstream = endpoint
            .trim_start_matches("http://")
            .to_socket_addrs()
            .map_err(|e| format!("{endpoint}: {e}"))?
            .next()
            .ok_or("DynamoDB Local's address did not resolve")?;
        let proxy = CapacityProxy::start(upstream)
            .await
            .map_err(|e| e.to_string())?;
        let table = integration_tests::create_table(&integration_tests::client().await).await;
        let metered = DynamoStore::builder(
            integration_tests::client_for(proxy.endpoint(), 3).await,
            table.clone(),
        )
        .open()
        .map_err(|e| e.to_string())?;
        let direct = DynamoStore::builder(integration_tests::client().await, table)
            .open()
            .map_err(|e| e.to_string())?;
        Ok(Lab {
            proxy,
            metered,
            direct,
        })
    }

    fn units(&self) -> Units {
        self.proxy.units(self.metered.table())
    }
}

async fn send(layer: &IdempotencyLayer, req: Request, want: u16) -> Result<()> {
    let res = layer
        .layer(integration_tests::echo_handler())
        .oneshot(req)
        .await
        .map_err(|e| e.to_string())?;
    if res.status().as_u16() != want {
        return Err(format!("expected {want}, got {}", res.status()));
    }
    Ok(())
}

/// This library's kinds at one response size.
async fn ours(lab: &Lab, size: usize) -> Result<Value> {
    let body = body(size);
    let key = |kind: &str, i: u64| format!("{kind}-{size}-{i}");
    let layer = IdempotencyLayer::new(lab.metered.clone());
    let req = |k: &str| integration_tests::post("/orders", Some(k), &body);

    let before = lab.units();
    for i in 0..CALLS {
        send(&layer, req(&key("k", i)), 201).await?;
    }
    let first = per_call(lab.units(), before, CALLS);

    let before = lab.units();
    for i in 0..CALLS {
        send(&layer, req(&key("k", i)), 201).await?;
    }
    let replay = per_call(lab.units(), before, CALLS);

    // The first request of each key runs (unmetered) until released; the
    // duplicate goes through the metered layer meanwhile.
    let mut duplicate = Units::default();
    for i in 0..CALLS {
        let gate = Arc::new(Notify::new());
        let started = Arc::new(Notify::new());
        let (g, s) = (gate.clone(), started.clone());
        let holder = IdempotencyLayer::new(lab.direct.clone()).layer(tower::service_fn(
            move |req: Request| {
                let (g, s) = (g.clone(), s.clone());
                async move {
                    s.notify_one();
                    g.notified().await;
                    Ok::<_, lambda_http::Error>(
                        http::Response::builder()
                            .status(201)
                            .body(lambda_http::Body::from(req.body().as_ref().to_vec()))?,
                    )
                }
            },
        ));
        let first = tokio::spawn(holder.oneshot(req(&key("dup", i))));
        started.notified().await;
        let before = lab.units();
        send(&layer, req(&key("dup", i)), 409).await?;
        let after = lab.units();
        duplicate = duplicate + (after - before);
        gate.notify_one();
        first
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    let duplicate = per_call(duplicate, Units::default(), CALLS);

    let cached =
        IdempotencyLayer::new(lab.metered.clone()).local_cache(100, Duration::from_secs(60));
    send(&cached, req(&key("cached", 0)), 201).await?;
    let before = lab.units();
    for _ in 0..CALLS {
        send(&cached, req(&key("cached", 0)), 201).await?;
    }
    let cached = per_call(lab.units(), before, CALLS);
    Ok(json!({"first": first, "replay": replay, "duplicate": duplicate, "cached_replay": cached}))
}

/// `orders-api` as a process: a first execution (claim, two recovery
/// points, the order, completion) and its replay, on the idempotency table.
async fn orders_api(proxy: &CapacityProxy, bin: &str) -> Result<Value> {
    let tables = functions::tables().await?;
    let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
    let env = functions::orders_env(
        &api,
        &tables,
        &[("AWS_ENDPOINT_URL_DYNAMODB", proxy.endpoint().as_str())],
    );
    let mut child = functions::spawn(bin, &env)?;
    // Metered from the end of init (its first poll): the warm-up's read
    // (IDEMPOTENCY_WARM_UP, once per cold start) is no invocation's.
    let init_deadline = std::time::Instant::now() + Duration::from_secs(30);
    while api.first_poll().is_none() {
        if std::time::Instant::now() > init_deadline {
            return Err("orders-api did not finish its init in 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let order = r#"{"customer_id":"cus_42","amount":2500,"currency":"EUR"}"#;
    let mut out = serde_json::Map::new();
    for kind in ["first", "replay"] {
        let before = proxy.units(&tables.0);
        for i in 0..CALLS {
            let outcome = api
                .invoke(
                    functions::post_order_event(&format!("order-{i}"), order),
                    Duration::from_secs(30),
                )
                .await;
            match outcome {
                Outcome::Response(body)
                    if String::from_utf8_lossy(&body).contains("\"statusCode\":201") => {}
                other => return Err(format!("orders-api {kind} {i}: unexpected {other:?}")),
            }
        }
        out.insert(kind.into(), per_call(proxy.units(&tables.0), before, CALLS));
    }
    let _ = child.kill().await;
    Ok(Value::Object(out))
}

/// What one sweep consumes: of an idle table, and of 100 stuck records
/// among 100 completed ones.
async fn sweeper(lab: &Lab) -> Result<Value> {
    // Reading the stream costs no table capacity; the proxy meters the table.
    let store = integration_tests::dynamo_builder_like(&lab.metered)
        .with_stream(integration_tests::streams_client().await)
        .open()
        .map_err(|e| e.to_string())?;
    let sweeper = Sweeper::new(store).grace(Duration::ZERO);
    let sweep = || sweeper.sweep(None);
    // The first sweep of a table catches up what came before its stream
    // (a scan, once): the steady state is measured from the second on.
    sweep().await;
    let before = lab.units();
    sweep().await;
    let idle = per_call(lab.units(), before, 1);
    let now = now_ms();
    for i in 0..200u64 {
        let id = RecordScope::new("POST", "/orders", &format!("sweep-{i}")).record_id();
        let request = integration_tests::claim_request(&id, &format!("owner-{i}"), 1);
        let outcome = lab
            .direct
            .claim(&request)
            .await
            .map_err(|e| e.to_string())?;
        if i % 2 == 0 {
            if let lambda_idempotency::store::ClaimOutcome::Claimed(lease) = outcome {
                let done = lambda_idempotency::store::StoredResponse::new(
                    200,
                    vec![],
                    lambda_idempotency::store::StoredBody::Empty,
                );
                lab.direct
                    .complete(CompleteRequest::new(&lease, &done, now / 1000 + 3600))
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let before = lab.units();
    let summary = sweep().await;
    if summary.released != 100 {
        return Err(format!(
            "the sweep released {} of 100: {summary:?}",
            summary.released
        ));
    }
    let busy = per_call(lab.units(), before, 1);
    let full_pass = full_pass(lab, &idle).await?;
    Ok(json!({"idle_sweep": idle, "sweep_of_100_stuck": busy, "full_pass": full_pass}))
}

/// Completed records of a 1 KB response the full pass reads.
const PASS_RECORDS: u64 = 2_000;

/// What a full pass of the table (the stream's backstop) reads: one sweep
/// with a pass due at every sweep, less an idle sweep's units, over the
/// items the table holds then (`PASS_RECORDS` completed records of a 1 KB
/// response, and what the earlier measurements left).
async fn full_pass(lab: &Lab, idle: &Value) -> Result<Value> {
    let expires = now_ms() / 1000 + 3600;
    for i in 0..PASS_RECORDS {
        // 1,000 characters of hexadecimal noise: about as compressible as a
        // JSON response of that size, so the item is not unrealistically
        // small once the store compresses it.
        let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let text: String = (0..1_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from_digit((x % 16) as u32, 16).unwrap_or('0')
            })
            .collect();
        let body = lambda_idempotency::store::StoredBody::Text(text);
        let done = lambda_idempotency::store::StoredResponse::new(200, vec![], body);
        let id = RecordScope::new("POST", "/orders", &format!("kept-{i}")).record_id();
        let request = integration_tests::claim_request(&id, &format!("owner-{i}"), 60_000);
        if let lambda_idempotency::store::ClaimOutcome::Claimed(lease) = lab
            .direct
            .claim(&request)
            .await
            .map_err(|e| e.to_string())?
        {
            lab.direct
                .complete(CompleteRequest::new(&lease, &done, expires))
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    let items = count_items(&lab.direct).await?;
    // A client of its own: the harness's pooled connection to the proxy may
    // have gone idle while the records were written.
    let passing = DynamoStore::builder(
        integration_tests::client_for(lab.proxy.endpoint(), 3).await,
        lab.metered.table(),
    )
    .with_stream(integration_tests::streams_client().await)
    .full_pass(Duration::from_millis(1))
    .open()
    .map_err(|e| e.to_string())?;
    // One listing with a pass due (its place is not saved: only reads
    // count), less an idle sweep's reads (the places it reads too).
    tokio::time::sleep(Duration::from_millis(5)).await;
    let before = lab.units();
    let page = passing
        .stuck(lambda_idempotency::store::StuckRequest::new(now_ms(), 100))
        .await
        .map_err(|e| format!("the full pass's listing: {e}"))?;
    let listed = per_call(lab.units(), before, 1);
    let read = listed["read"].as_f64().unwrap_or(0.0) - idle["read"].as_f64().unwrap_or(0.0);
    if page.failed_reads > 0 || page.incomplete || read <= 0.0 {
        return Err(format!(
            "the full pass read {read} units over {items} items: {page:?}"
        ));
    }
    Ok(json!({"items": items, "read": read, "record_body_bytes": 1_000}))
}

/// The items of the table (a counting Scan, straight to DynamoDB Local).
async fn count_items(store: &DynamoStore) -> Result<u64> {
    let mut count = 0u64;
    let mut start = None;
    loop {
        let out = store
            .client()
            .scan()
            .table_name(store.table())
            .select(aws_sdk_dynamodb::types::Select::Count)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| format!("counting the table's items: {e}"))?;
        count += u64::try_from(out.count()).unwrap_or(0);
        match out.last_evaluated_key {
            Some(key) => start = Some(key),
            None => return Ok(count),
        }
    }
}

/// Powertools' kinds at one size: its script runs each phase in its own
/// process, and the proxy's readings around it are the phase's units.
async fn powertools(
    proxy: &CapacityProxy,
    python: &str,
    table: &str,
    size: usize,
) -> Result<Value> {
    let dir = std::env::temp_dir().join(integration_tests::unique_name("capacity-body"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let body_file = dir.join("body.json");
    std::fs::write(&body_file, body(size)).map_err(|e| e.to_string())?;
    let run = |phase: &str| {
        let status = std::process::Command::new(python)
            .arg("scripts/bench/capacity.py")
            .args([
                "--table",
                table,
                "--phase",
                phase,
                "--prefix",
                &format!("pt-{size}"),
            ])
            .arg("--body")
            .arg(&body_file)
            .arg("--count")
            .arg(CALLS.to_string())
            .env("AWS_ENDPOINT_URL_DYNAMODB", proxy.endpoint())
            .output();
        match status {
            Ok(out) if out.status.success() => {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            }
            Ok(out) => Err(format!(
                "capacity.py --phase {phase}: {}",
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(e) => Err(format!("{python}: {e}")),
        }
    };
    let mut out = serde_json::Map::new();
    for (phase, kind) in [
        ("first", Some("first")),
        ("replay", Some("replay")),
        ("hold", None),
        ("duplicate", Some("duplicate")),
        ("cached", Some("cached_replay")),
    ] {
        let before = proxy.units(table);
        let printed = run(phase)?;
        if let Some(kind) = kind {
            let mut units = per_call(proxy.units(table), before, CALLS);
            if kind == "cached_replay" {
                // One process: its first call (a first execution) is metered
                // too; the script counts the replays' own requests.
                let replays: Value =
                    serde_json::from_str(printed.trim()).map_err(|e| e.to_string())?;
                units = json!({"requests": replays["requests_per_replay"], "write": 0.0, "read": 0.0,
                    "note": "served from Powertools' local cache: no request, so no unit"});
                if replays["requests_per_replay"] != 0.0 {
                    return Err(format!(
                        "Powertools' cached replays made requests: {replays}"
                    ));
                }
            }
            out.insert(kind.into(), units);
        }
    }
    Ok(Value::Object(out))
}

async fn run(python: Option<String>, bin: Option<String>) -> Result<Value> {
    let lab = Lab::new().await?;
    let mut result = serde_json::Map::new();
    let mut library = serde_json::Map::new();
    for size in SIZES {
        library.insert(size.to_string(), ours(&lab, size).await?);
    }
    result.insert("lambda_idempotency".into(), Value::Object(library));
    if let Some(python) = python {
        let table = integration_tests::unique_name("powertools");
        let mut pt = serde_json::Map::new();
        for size in SIZES {
            pt.insert(
                size.to_string(),
                powertools(&lab.proxy, &python, &table, size).await?,
            );
        }
        result.insert("powertools".into(), Value::Object(pt));
    }
    if let Some(bin) = bin {
        result.insert("orders_api".into(), orders_api(&lab.proxy, &bin).await?);
    }
    result.insert("sweeper".into(), sweeper(&lab).await?);
    result.insert("calls_per_figure".into(), json!(CALLS));
    Ok(Value::Object(result))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let out = value_of("--out");
    match run(value_of("--python"), value_of("--orders-api")).await {
        Ok(result) => {
            let text = serde_json::to_string_pretty(&result).unwrap_or_default();
            match out {
                Some(path) => {
                    if let Err(e) = std::fs::write(&path, text) {
                        eprintln!("capacity: writing {path}: {e}");
                        std::process::exit(1);
                    }
                }
                None => println!("{text}"),
            }
        }
        Err(e) => {
            eprintln!("capacity: {e}");
            std::process::exit(1);
        }
    }
}
