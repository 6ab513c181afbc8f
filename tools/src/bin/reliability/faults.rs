//! Phase 3, store fault injection: the middleware on DynamoDB Local behind a
//! proxy injecting throttling, 500s, delays past the SDK timeout and dropped
//! responses.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use integration_tests::fault_proxy::{Fault, FaultPlan, FaultProxy, Operation};
use lambda_http::{Body, Request, Response};
use lambda_idempotency::metrics::Metrics;
use lambda_idempotency::{problem, DynamoStore, IdempotencyContext, IdempotencyLayer};
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};

use crate::client::order_body;
use crate::{Result, Size, Violations};

pub(crate) struct FaultReport {
    pub(crate) keys: usize,
    pub(crate) seconds: u64,
    /// Faults by kind, for claims, completions, other requests.
    pub(crate) by_operation: Vec<(Fault, [u64; 3])>,
    pub(crate) responses_503: u64,
    pub(crate) responses_409: u64,
    pub(crate) executions: u64,
    pub(crate) keys_executed_twice: usize,
    pub(crate) extra_executions: u64,
    pub(crate) completions: usize,
    pub(crate) completions_acknowledged: usize,
    pub(crate) completions_stored_unacknowledged: usize,
    pub(crate) lost_completions: usize,
    pub(crate) doomed_completions: usize,
    pub(crate) store_errors: u64,
    pub(crate) fenced_writes: u64,
    pub(crate) unclaimed_runs: u64,
}

pub(crate) async fn faults(size: Size, violations: &Violations) -> Result<FaultReport> {
    let endpoint = integration_tests::endpoint();
    let upstream: std::net::SocketAddr = endpoint
        .trim_start_matches("http://")
        .parse()
        .map_err(|e| format!("endpoint {endpoint}: {e}"))?;
    let plan = FaultPlan {
        throttle: 50,
        server_error: 50,
        delay: 30,
        drop_after_send: 50,
        lose_completion: 30,
        delay_for: Duration::from_millis(900),
    };
    let proxy = FaultProxy::start(upstream, plan)
        .await
        .map_err(|e| e.to_string())?;

    let direct = integration_tests::client().await;
    let table = integration_tests::create_table(&direct).await;
    let shared = aws_config::from_env()
        .region(aws_config::Region::new("us-east-1"))
        .load()
        .await;
    let config = aws_sdk_dynamodb::config::Builder::from(&shared)
        .endpoint_url(proxy.endpoint())
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_millis(300))
                .build(),
        )
        .build();
    // The client's 300 ms attempt limit and retries, as this run was
    // calibrated with, rather than the store's limits.
    let store = DynamoStore::builder(aws_sdk_dynamodb::Client::from_conf(config), table.clone())
        .client_timeouts()
        .open()
        .map_err(|e| e.to_string())?;

    let events = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let sink = events.clone();
    let runs = Arc::new(Mutex::new(HashMap::<String, u64>::new()));
    let unclaimed = Arc::new(AtomicU64::new(0));
    let handler = {
        let (runs, unclaimed, direct, table) = (
            runs.clone(),
            unclaimed.clone(),
            direct.clone(),
            table.clone(),
        );
        tower::service_fn(move |req: Request| {
            let (runs, unclaimed, direct, table) = (
                runs.clone(),
                unclaimed.clone(),
                direct.clone(),
                table.clone(),
            );
            async move {
                let ctx = IdempotencyContext::of(&req).cloned().ok_or("no claim")?;
                // The handler must only ever run under a successful claim: the
                // record is in progress at this attempt (read past the proxy).
                let item = direct
                    .get_item()
                    .table_name(&table)
                    .key(
                        "id",
                        aws_sdk_dynamodb::types::AttributeValue::S(ctx.record_id().to_owned()),
                    )
                    .consistent_read(true)
                    .send()
                    .await?;
                let held = item.item().is_some_and(|i| {
                    i.get("status")
                        .and_then(|v| v.as_s().ok())
                        .map(String::as_str)
                        == Some("IN_PROGRESS")
                        && i.get("attempt")
                            .and_then(|v| v.as_n().ok())
                            .map(String::as_str)
                            == Some(ctx.attempt().to_string().as_str())
                });
                if !held {
                    unclaimed.fetch_add(1, Ordering::Relaxed);
                }
                if let Ok(mut r) = runs.lock() {
                    *r.entry(ctx.record_id().to_owned()).or_default() += 1;
                }
                Ok::<_, lambda_http::Error>(
                    Response::builder()
                        .status(201)
                        .body(Body::from(json!({"attempt": ctx.attempt()}).to_string()))?,
                )
            }
        })
    };
    let svc = IdempotencyLayer::new(store)
        .max_lease(Duration::from_millis(1_500))
        .metrics(Metrics::new("Reliability").sink(move |line| {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                if let Some(name) = v["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"].as_str()
                {
                    if let Ok(mut e) = sink.lock() {
                        *e.entry(name.to_owned()).or_default() += 1;
                    }
                }
            }
        }))
        .layer(handler);

    let (count_503, count_409) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let incomplete = Arc::new(AtomicUsize::new(size.fault_keys));
    let gate = Arc::new(tokio::sync::Semaphore::new(16));
    let violations_found = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for key in 0..size.fault_keys {
        let (svc, gate, c503, c409, incomplete, found) = (
            svc.clone(),
            gate.clone(),
            count_503.clone(),
            count_409.clone(),
            incomplete.clone(),
            violations_found.clone(),
        );
        clients.push(tokio::spawn(fault_client(
            svc, key, gate, c503, c409, incomplete, found,
        )));
    }
    tokio::time::sleep(Duration::from_secs(size.fault_seconds)).await;
    proxy.set_enabled(false); // faults stop: everything must now complete
    for c in clients {
        c.await.map_err(|e| e.to_string())?;
    }
    for v in violations_found
        .lock()
        .map(|v| v.clone())
        .unwrap_or_default()
    {
        violations.add(v);
    }
    let left = incomplete.load(Ordering::Relaxed);
    if left > 0 {
        violations.add(format!(
            "faults: {left} keys never completed after the faults stopped"
        ));
    }
    let runs = runs.lock().map(|r| r.clone()).unwrap_or_default();
    let executions: u64 = runs.values().sum();
    let twice = runs.values().filter(|n| **n > 1).count();
    let extra_executions: u64 = runs.values().map(|n| n.saturating_sub(1)).sum();
    // The proxy saw every completion (one per execution: the handler always
    // answers 201) and knows whether DynamoDB applied it. One never applied
    // is a lost completion: the record stays in progress, its lease runs
    // out, and a retry takes it over and runs the handler again.
    let completions = proxy.completions();
    if completions.len() as u64 != executions {
        violations.add(format!(
            "faults: the proxy saw {} completions for {executions} executions",
            completions.len()
        ));
    }
    let mut lost_by_record = HashMap::<&str, u64>::new();
    for c in completions.iter().filter(|c| !c.stored) {
        *lost_by_record.entry(c.record_id.as_str()).or_default() += 1;
    }
    for (record, n) in &runs {
        let lost = lost_by_record.get(record.as_str()).copied().unwrap_or(0);
        if n.saturating_sub(1) > lost {
            violations.add(format!(
                "faults: record {record} executed {n} times with {lost} lost completions"
            ));
        }
    }
    let unclaimed = unclaimed.load(Ordering::Relaxed);
    if unclaimed > 0 {
        violations.add(format!(
            "faults: the handler ran {unclaimed} times without holding the claim"
        ));
    }
    let events = events.lock().map(|e| e.clone()).unwrap_or_default();
    let by_operation = [
        Fault::Pass,
        Fault::Throttle,
        Fault::ServerError,
        Fault::Delay,
        Fault::DropAfterSend,
    ]
    .into_iter()
    .map(|fault| {
        let of = |op| proxy.counts_for(op).get(fault);
        (
            fault,
            [
                of(Operation::Claim),
                of(Operation::Completion),
                of(Operation::Other),
            ],
        )
    })
    .collect();
    Ok(FaultReport {
        keys: size.fault_keys,
        seconds: size.fault_seconds,
        by_operation,
        responses_503: count_503.load(Ordering::Relaxed),
        responses_409: count_409.load(Ordering::Relaxed),
        executions,
        keys_executed_twice: twice,
        extra_executions,
        completions: completions.len(),
        completions_acknowledged: completions.iter().filter(|c| c.acknowledged).count(),
        completions_stored_unacknowledged: completions
            .iter()
            .filter(|c| c.stored && !c.acknowledged)
            .count(),
        lost_completions: completions.iter().filter(|c| !c.stored).count(),
        doomed_completions: completions.iter().filter(|c| c.doomed && !c.stored).count(),
        store_errors: events.get("StoreError").copied().unwrap_or(0),
        fenced_writes: events.get("FencedWrite").copied().unwrap_or(0),
        unclaimed_runs: unclaimed,
    })
}

/// One client of the fault run: retry until created; check every answer.
async fn fault_client<S>(
    svc: S,
    key: usize,
    gate: Arc<tokio::sync::Semaphore>,
    c503: Arc<AtomicU64>,
    c409: Arc<AtomicU64>,
    incomplete: Arc<AtomicUsize>,
    found: Arc<Mutex<Vec<String>>>,
) where
    S: tower::Service<Request, Response = Response<Body>, Error = lambda_http::Error>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    // After creating its order, each client replays it twice more.
    let mut created: Option<Vec<u8>> = None;
    let mut replays_left = 2u32;
    for _ in 0..200 {
        if created.is_some() && replays_left == 0 {
            return;
        }
        let response = {
            let _permit = gate.acquire().await;
            let req = http::Request::post("/orders")
                .header("idempotency-key", format!("fault-{key}"))
                .body(Body::from(order_body(key)))
                .unwrap_or_default();
            svc.clone().oneshot(req).await
        };
        match response {
            Ok(res)
                if res.status() == 201 && res.headers().get("idempotent-replayed").is_none() =>
            {
                // A second original 201 for one key is an execution repeated
                // after a lost completion (counted in the report); the key
                // completed once for this count, and replays now answer what
                // the latest execution stored.
                if created.is_none() {
                    incomplete.fetch_sub(1, Ordering::Relaxed);
                }
                created = Some(res.body().as_ref().to_vec());
            }
            Ok(res) if res.status() == 201 => {
                // A replay: identical to what the first call answered.
                if created.as_deref().is_some_and(|c| c != res.body().as_ref()) {
                    if let Ok(mut f) = found.lock() {
                        f.push(format!("faults: key {key} replayed a different body"));
                    }
                }
                if created.is_none() {
                    // Created by an attempt whose answer this client lost.
                    incomplete.fetch_sub(1, Ordering::Relaxed);
                    created = Some(res.body().as_ref().to_vec());
                }
                replays_left = replays_left.saturating_sub(1);
            }
            Ok(res) if res.status() == 409 => {
                c409.fetch_add(1, Ordering::Relaxed);
            }
            Ok(res) if res.status() == 503 => {
                c503.fetch_add(1, Ordering::Relaxed);
                let body: Value = serde_json::from_slice(res.body().as_ref()).unwrap_or_default();
                if body["type"] != problem::STORE_UNAVAILABLE.uri
                    || !res.headers().contains_key("retry-after")
                {
                    if let Ok(mut f) = found.lock() {
                        f.push(format!("faults: a 503 without the store-unavailable problem or Retry-After: {body}"));
                    }
                }
            }
            other => {
                if let Ok(mut f) = found.lock() {
                    f.push(format!(
                        "faults: key {key} answered {:?}",
                        other.map(|r| r.status())
                    ));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}
