//! `bench storm`: the duplicate storm against real `orders-api` processes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use integration_tests::functions;
use integration_tests::runtime_api::{Outcome, RuntimeApi};
use lambda_idempotency::http::REPLAYED_HEADER;
use serde_json::{json, Value};

use crate::Result;

/// How many invocations of each key were in flight at once (sent to the
/// Runtime API and not yet answered), at most.
#[derive(Default)]
struct InFlight {
    now: HashMap<usize, usize>,
    peak: HashMap<usize, usize>,
}

impl InFlight {
    fn enter(&mut self, key: usize) {
        let now = self.now.entry(key).or_default();
        *now += 1;
        let peak = self.peak.entry(key).or_default();
        *peak = (*peak).max(*now);
    }

    fn leave(&mut self, key: usize) {
        if let Some(now) = self.now.get_mut(&key) {
            *now -= 1;
        }
    }
}

pub(crate) async fn storm(
    bin: &str,
    requests: usize,
    keys: usize,
    concurrency: usize,
    processes: usize,
) -> Result<Value> {
    if keys == 0 || requests < keys {
        return Err(format!(
            "storm: {requests} requests over {keys} keys: need at least one request per key"
        ));
    }
    let tables = functions::tables().await?;
    let orders = tables.1.clone();
    let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
    let env = functions::orders_env(&api, &tables, &[]);
    let mut children = Vec::new();
    for _ in 0..processes {
        children.push(functions::spawn(bin, &env)?);
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let statuses = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    let in_flight = Arc::new(Mutex::new(InFlight::default()));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (api, next, statuses, in_flight) = (
            api.clone(),
            next.clone(),
            statuses.clone(),
            in_flight.clone(),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= requests {
                    break;
                }
                // Each key's duplicates are consecutive (10 per key for 10,000
                // requests over 1,000 keys), so the workers that take them
                // send them at the same moment: they race for the claim.
                let k = i * keys / requests;
                let key = format!("storm-{k}");
                let body = format!(
                    r#"{{"customer_id":"cus_{k}","amount":{},"currency":"EUR"}}"#,
                    100 + k
                );
                if let Ok(mut f) = in_flight.lock() {
                    f.enter(k);
                }
                let outcome = api
                    .invoke(
                        functions::post_order_event(&key, &body),
                        Duration::from_secs(30),
                    )
                    .await;
                if let Ok(mut f) = in_flight.lock() {
                    f.leave(k);
                }
                let label = match outcome {
                    Outcome::Response(b) => match serde_json::from_slice::<Value>(&b) {
                        Ok(v) => match v["statusCode"].as_u64() {
                            Some(s) if v["headers"][REPLAYED_HEADER].is_string() => {
                                format!("{s} replayed")
                            }
                            Some(s) => s.to_string(),
                            None => "unparsable".into(),
                        },
                        Err(_) => "unparsable".into(),
                    },
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
    let peaks: Vec<usize> = in_flight
        .lock()
        .map(|f| f.peak.values().copied().collect())
        .unwrap_or_default();
    Ok(json!({
        "requests": requests, "keys": keys, "concurrency": concurrency, "processes": processes,
        "seconds": elapsed.as_secs_f64(),
        "statuses": statuses,
        "same_key_in_flight_max": peaks.iter().max(),
        "keys_with_concurrent_duplicates": peaks.iter().filter(|p| **p >= 2).count(),
        "orders": executions.len(), "orders_executed_once": orders_once,
        "executions_ok": executions.len() == keys && orders_once == keys,
        "peak_rss_kb_per_process": rss,
        "peak_rss_kb": rss.iter().max(),
    }))
}
