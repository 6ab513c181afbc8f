//! Phase 2, crash injection: `orders-api` processes SIGKILLed (or frozen
//! past their lease) mid-handler while clients retry after the lease; then
//! the sweeper resolves what the clients that gave up left in progress.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use integration_tests::functions;
use integration_tests::runtime_api::{Outcome, RuntimeApi};
use lambda_idempotency::sweeper::{SweepPolicy, Sweeper};
use lambda_idempotency::DynamoStore;
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

use crate::client::{order_body, parse_response};
use crate::{Result, Size, Violations};

/// One client of the crash run: retry after the lease until created; every
/// fifth key's client gives up after its first failure.
async fn crash_client(
    api: RuntimeApi,
    key: usize,
    results: Arc<Mutex<HashMap<usize, Option<Value>>>>,
    gate: Arc<tokio::sync::Semaphore>,
    interrupted: Arc<AtomicU64>,
) {
    let _permit = gate.acquire().await;
    let abandoner = key % 5 == 4;
    for _ in 0..40 {
        match api
            .invoke(
                functions::post_order_event(&format!("crash-{key}"), &order_body(key)),
                Duration::from_secs(3),
            )
            .await
        {
            Outcome::Response(bytes) => match parse_response(&bytes) {
                Some(answer) if answer.status == 201 => {
                    if let Ok(mut r) = results.lock() {
                        r.insert(key, serde_json::from_str(&answer.body).ok());
                    }
                    return;
                }
                _ => tokio::time::sleep(Duration::from_millis(300)).await,
            },
            Outcome::TimedOut | Outcome::Error(_) => {
                interrupted.fetch_add(1, Ordering::Relaxed);
                if abandoner {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1_200)).await;
            }
        }
    }
}

/// Starts `orders-api` processes and counts the fenced writes their EMF
/// metric lines report.
struct Spawner {
    bin: String,
    env: Vec<(String, String)>,
    fenced: Arc<AtomicU64>,
    emf_lines: Arc<AtomicU64>,
}

impl Spawner {
    fn spawn(&self) -> Result<tokio::process::Child> {
        let mut child = functions::spawn(&self.bin, &self.env)?;
        if let Some(stdout) = child.stdout.take() {
            let (fenced, emf_lines) = (self.fenced.clone(), self.emf_lines.clone());
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.contains("\"_aws\":") {
                        emf_lines.fetch_add(1, Ordering::Relaxed);
                    }
                    if line.contains("\"FencedWrite\":1") {
                        fenced.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        Ok(child)
    }
}

pub(crate) struct CrashReport {
    pub(crate) keys: usize,
    pub(crate) kills: u64,
    pub(crate) pauses: u64,
    pub(crate) interrupted: u64,
    pub(crate) completed: usize,
    pub(crate) abandoned: usize,
    pub(crate) swept_released: u64,
    pub(crate) swept_resumable_then_failed: u64,
    pub(crate) fenced_writes: u64,
    pub(crate) emf_lines: u64,
    pub(crate) extra_orders: usize,
    pub(crate) orders_with_rerun_phase: usize,
    pub(crate) orders_resumed: usize,
    pub(crate) charges_with_repeated_call: usize,
    pub(crate) stale_completions: usize,
}

pub(crate) async fn crash(bin: &str, size: Size, violations: &Violations) -> Result<CrashReport> {
    let processes = 4;
    let tables = functions::tables().await?;
    let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
    let env = functions::orders_env(
        &api,
        &tables,
        &[
            ("IDEMPOTENCY_MAX_LEASE_SECONDS", "1"),
            ("SIMULATED_PROVIDER_LATENCY_MS", "120"),
            ("IDEMPOTENCY_METRICS_NAMESPACE", "Reliability"),
        ],
    );
    let fenced = Arc::new(AtomicU64::new(0));
    let emf_lines = Arc::new(AtomicU64::new(0));
    let spawner = Arc::new(Spawner {
        bin: bin.to_owned(),
        env,
        fenced: fenced.clone(),
        emf_lines: emf_lines.clone(),
    });
    let pool = Arc::new(tokio::sync::Mutex::new(
        (0..processes)
            .map(|_| spawner.spawn())
            .collect::<Result<Vec<_>>>()?,
    ));

    let interrupted = Arc::new(AtomicU64::new(0));
    let kills = Arc::new(AtomicU64::new(0));
    let pauses = Arc::new(AtomicU64::new(0));
    let killer = {
        let (pool, kills, interrupted, spawner) = (
            pool.clone(),
            kills.clone(),
            interrupted.clone(),
            spawner.clone(),
        );
        let pauses = pauses.clone();
        let target = size.crash_target;
        tokio::spawn(async move {
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            while interrupted.load(Ordering::Relaxed) < target {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                tokio::time::sleep(Duration::from_millis(60 + x % 120)).await;
                let mut pool = pool.lock().await;
                let victim = (x % pool.len() as u64) as usize;
                if (x >> 8).is_multiple_of(4) {
                    // Freeze a process past its lease: its client times out and
                    // retries, a new attempt takes over, and when the frozen one
                    // wakes up its writes must be fenced. It leaves the pool (a
                    // fresh process takes its place) so no kill cuts it short.
                    let Ok(fresh) = spawner.spawn() else { continue };
                    let mut frozen = std::mem::replace(&mut pool[victim], fresh);
                    if let Some(pid) = frozen.id() {
                        pauses.fetch_add(1, Ordering::Relaxed);
                        tokio::spawn(async move {
                            let signal = |sig: &str| {
                                std::process::Command::new("kill")
                                    .args([sig, &pid.to_string()])
                                    .stderr(std::process::Stdio::null())
                                    .status()
                            };
                            let _ = signal("-STOP");
                            tokio::time::sleep(Duration::from_secs(6)).await;
                            let _ = signal("-CONT");
                            // Time to finish its stale invocation, then retire.
                            tokio::time::sleep(Duration::from_secs(3)).await;
                            let _ = frozen.kill().await;
                        });
                    }
                    continue;
                }
                let _ = pool[victim].start_kill(); // SIGKILL
                kills.fetch_add(1, Ordering::Relaxed);
                match spawner.spawn() {
                    Ok(child) => pool[victim] = child,
                    Err(e) => eprintln!("reliability: respawn failed: {e}"),
                }
            }
        })
    };

    // Clients: retry after the lease until created; every fifth gives up
    // after its first failure (the sweeper must resolve those). Waves of keys
    // run until enough invocations were interrupted mid-handler.
    let results = Arc::new(Mutex::new(HashMap::<usize, Option<Value>>::new()));
    let gate = Arc::new(tokio::sync::Semaphore::new(12));
    let mut waves = 0;
    while waves == 0 || (interrupted.load(Ordering::Relaxed) < size.crash_target && waves < 6) {
        let first_key = waves * size.crash_keys;
        waves += 1;
        let mut clients = Vec::new();
        for key in first_key..first_key + size.crash_keys {
            let (api, results, gate, interrupted) = (
                api.clone(),
                results.clone(),
                gate.clone(),
                interrupted.clone(),
            );
            clients.push(tokio::spawn(crash_client(
                api,
                key,
                results,
                gate,
                interrupted,
            )));
        }
        for c in clients {
            c.await.map_err(|e| e.to_string())?;
        }
    }
    let keys = waves * size.crash_keys;
    killer.abort();
    // Invocations whose callers gave up may still be queued; let them run
    // (as Lambda would), then let every lease lapse before the sweep.
    for _ in 0..100 {
        if api.queued() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Frozen processes wake up within 6 s and retire 3 s later; let them
    // finish (and be fenced) before the sweep.
    tokio::time::sleep(Duration::from_millis(10_000)).await;
    drop(pool);

    // The sweeper resolves what the abandoned clients left in progress:
    // `release` first (records holding a recovery point are left for a retry
    // that, here, never comes), then `fail` for those.
    // A full pass at every sweep: the stream's place moves past a record
    // left resumable, and the `fail` sweep finds it through the next pass.
    let client = integration_tests::client().await;
    let store = DynamoStore::builder(client, tables.0.clone())
        .with_stream(integration_tests::streams_client().await)
        .full_pass(Duration::from_millis(1))
        .open()
        .map_err(|e| e.to_string())?;
    let sweeper = Sweeper::new(store).grace(Duration::ZERO);
    let released = sweeper
        .clone()
        .policy(SweepPolicy::Release)
        .sweep(None)
        .await;
    let failed = sweeper.policy(SweepPolicy::Fail).sweep(None).await;
    if released.errors + failed.errors > 0 {
        return Err(format!(
            "crash: the sweeps met store errors: {released:?} {failed:?}"
        ));
    }
    if failed.failed != released.resumable {
        violations.add(format!(
            "crash: {} resumable records but {} failed by the second sweep",
            released.resumable, failed.failed
        ));
    }

    let results = std::mem::take(&mut *results.lock().map_err(|e| e.to_string())?);
    let abandoned = (0..keys)
        .filter(|k| k % 5 == 4 && !results.contains_key(k))
        .count();
    for key in 0..keys {
        if key % 5 != 4 && !results.contains_key(&key) {
            violations.add(format!(
                "crash: key {key} never completed although its client retried"
            ));
        }
    }
    let items = functions::scan(&tables.1).await?;
    let orders: HashMap<String, &HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> = items
        .iter()
        .filter_map(|i| Some((i.get("order_id")?.as_s().ok()?.clone(), i)))
        .filter(|(id, _)| !id.starts_with("charge#"))
        .collect();
    let charges: Vec<_> = items
        .iter()
        .filter(|i| {
            i.get("order_id")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|id| id.starts_with("charge#"))
        })
        .collect();
    // Exactly one order per key: orders carry their key's customer.
    let mut orders_per_key = HashMap::<&str, usize>::new();
    for order in orders.values() {
        if let Some(customer) = order.get("customer_id").and_then(|v| v.as_s().ok()) {
            *orders_per_key.entry(customer.as_str()).or_default() += 1;
        }
    }
    let extra_orders = orders_per_key.values().filter(|n| **n > 1).count();
    for (customer, n) in &orders_per_key {
        if *n > 1 {
            violations.add(format!("crash: {n} orders for the key of {customer}"));
        }
    }
    let mut stale = 0;
    for (key, order) in &results {
        let Some(order) = order else { continue };
        let id = order["order_id"].as_str().unwrap_or_default();
        match orders.get(id) {
            Some(item) => {
                let stored_charge = item.get("charge_id").and_then(|v| v.as_s().ok());
                if stored_charge.map(String::as_str) != order["charge_id"].as_str() {
                    stale += 1;
                    violations.add(format!(
                        "crash: key {key}'s response names a charge the order does not have"
                    ));
                }
            }
            None => violations.add(format!("crash: key {key}'s order {id} is missing")),
        }
    }
    let number = |item: &HashMap<String, aws_sdk_dynamodb::types::AttributeValue>, name| {
        item.get(name)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // `executions` counts every run of the body, `resumed_runs` those that
    // resumed from a recovery point (skipping phase 1): the difference is
    // how often phase 1 ran.
    let reruns = orders
        .values()
        .filter(|i| number(i, "executions").saturating_sub(number(i, "resumed_runs")) > 1)
        .count();
    let resumed = orders
        .values()
        .filter(|i| number(i, "resumed_runs") > 0)
        .count();
    let repeated_calls = charges.iter().filter(|i| number(i, "calls") > 1).count();
    if charges.len() > orders.len() {
        violations.add(format!(
            "crash: {} charges for {} orders",
            charges.len(),
            orders.len()
        ));
    }
    let in_progress = functions::scan(&tables.0)
        .await?
        .iter()
        .filter(|i| {
            i.get("status")
                .and_then(|v| v.as_s().ok())
                .map(String::as_str)
                == Some("IN_PROGRESS")
        })
        .count();
    if in_progress > 0 {
        violations.add(format!(
            "crash: {in_progress} records still in progress after the sweep"
        ));
    }
    let interrupted = interrupted.load(Ordering::Relaxed);
    if interrupted < size.crash_target {
        violations.add(format!(
            "crash: only {interrupted} invocations interrupted (target {})",
            size.crash_target
        ));
    }
    Ok(CrashReport {
        keys,
        kills: kills.load(Ordering::Relaxed),
        pauses: pauses.load(Ordering::Relaxed),
        interrupted,
        completed: results.len(),
        abandoned,
        swept_released: released.released,
        swept_resumable_then_failed: failed.failed,
        fenced_writes: fenced.load(Ordering::Relaxed),
        emf_lines: emf_lines.load(Ordering::Relaxed),
        extra_orders,
        orders_with_rerun_phase: reruns,
        orders_resumed: resumed,
        charges_with_repeated_call: repeated_calls,
        stale_completions: stale,
    })
}
