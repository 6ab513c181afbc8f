//! Phase 1, the storm: duplicate requests over few keys through the Lambda
//! Runtime API to several `orders-api` processes, every answer checked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use integration_tests::functions;
use integration_tests::runtime_api::{Outcome, RuntimeApi};
use lambda_idempotency::problem;
use serde_json::Value;

use crate::client::{order_body, parse_response, Answer};
use crate::{Result, Size, Violations};

pub(crate) struct StormReport {
    pub(crate) requests: usize,
    pub(crate) keys: usize,
    pub(crate) concurrency: usize,
    pub(crate) processes: usize,
    pub(crate) seconds: f64,
    pub(crate) originals: usize,
    pub(crate) replays: usize,
    pub(crate) conflicts: usize,
    pub(crate) keys_with_conflict: usize,
    pub(crate) keys_overlapping: usize,
    pub(crate) most_in_flight: usize,
    pub(crate) orders: usize,
    pub(crate) orders_once: usize,
    pub(crate) peak_rss_kb: Option<u64>,
}

/// The order the storm sends its requests in: each key's requests in two
/// bursts of consecutive requests. The first burst goes out together, so its
/// requests race for the claim (one wins, the others find the key in
/// progress); the second follows the next key's first burst, while the first
/// execution may still run or has just completed (409s and replays).
fn storm_schedule(keys: usize, per_key: usize) -> Vec<usize> {
    let first = per_key.div_ceil(2);
    let mut order = Vec::with_capacity(keys * per_key);
    for key in 0..=keys {
        if key < keys {
            order.extend(std::iter::repeat_n(key, first));
        }
        if key > 0 {
            order.extend(std::iter::repeat_n(key - 1, per_key - first));
        }
    }
    order
}

pub(crate) async fn storm(bin: &str, size: Size, violations: &Violations) -> Result<StormReport> {
    let (concurrency, processes) = (32, 4);
    if !size.storm_requests.is_multiple_of(size.storm_keys) {
        return Err("storm: requests must be a multiple of keys".into());
    }
    let per_key = size.storm_requests / size.storm_keys;
    let schedule = Arc::new(storm_schedule(size.storm_keys, per_key));
    let tables = functions::tables().await?;
    let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
    let env = functions::orders_env(&api, &tables, &[]);
    let children: Vec<_> = (0..processes)
        .map(|_| functions::spawn(bin, &env))
        .collect::<Result<_>>()?;
    let next = Arc::new(AtomicUsize::new(0));
    // Requests of each key sent and not yet answered, and the most at once.
    let in_flight: Arc<Vec<AtomicUsize>> =
        Arc::new((0..size.storm_keys).map(|_| AtomicUsize::new(0)).collect());
    let most: Arc<Vec<AtomicUsize>> =
        Arc::new((0..size.storm_keys).map(|_| AtomicUsize::new(0)).collect());
    let responses = Arc::new(Mutex::new(Vec::<(usize, Outcome)>::new()));
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..concurrency {
        let (api, next, responses, schedule, in_flight, most) = (
            api.clone(),
            next.clone(),
            responses.clone(),
            schedule.clone(),
            in_flight.clone(),
            most.clone(),
        );
        clients.push(tokio::spawn(async move {
            while let Some(&key) = schedule.get(next.fetch_add(1, Ordering::Relaxed)) {
                let now = in_flight[key].fetch_add(1, Ordering::SeqCst) + 1;
                most[key].fetch_max(now, Ordering::SeqCst);
                let outcome = api
                    .invoke(
                        functions::post_order_event(&format!("storm-{key}"), &order_body(key)),
                        Duration::from_secs(30),
                    )
                    .await;
                in_flight[key].fetch_sub(1, Ordering::SeqCst);
                if let Ok(mut r) = responses.lock() {
                    r.push((key, outcome));
                }
            }
        }));
    }
    for c in clients {
        c.await.map_err(|e| e.to_string())?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let peak_rss_kb = children
        .iter()
        .filter_map(|c| c.id())
        .filter_map(functions::peak_rss_kb)
        .max();
    drop(children);

    let responses = std::mem::take(&mut *responses.lock().map_err(|e| e.to_string())?);
    if responses.len() != size.storm_requests {
        violations.add(format!(
            "storm: {} answers to {} requests",
            responses.len(),
            size.storm_requests
        ));
    }
    let mut originals: HashMap<usize, Answer> = HashMap::new();
    let (mut replays, mut conflicts) = (Vec::new(), HashMap::<usize, usize>::new());
    for (key, outcome) in responses {
        let answer = match &outcome {
            Outcome::Response(bytes) => parse_response(bytes),
            _ => None,
        };
        match answer {
            Some(a) if a.status == 201 && !a.replayed => {
                if originals.insert(key, a).is_some() {
                    violations.add(format!("storm: key {key} was created twice"));
                }
            }
            Some(a) if a.status == 201 => replays.push((key, a)),
            Some(a) if a.status == 409 => {
                *conflicts.entry(key).or_default() += 1;
                let problem: Value = serde_json::from_str(&a.body).unwrap_or_default();
                let retry_after = a.headers.get("retry-after").map(|v| v.parse::<u64>());
                if problem["type"] != problem::IN_PROGRESS.uri
                    || !matches!(retry_after, Some(Ok(_)))
                {
                    violations.add(format!(
                        "storm: key {key}: a 409 without the in-progress problem or Retry-After: {a:?}"
                    ));
                }
            }
            Some(a) => violations.add(format!("storm: key {key} answered {a:?}")),
            None => violations.add(format!("storm: key {key}: {outcome:?}")),
        }
    }
    // A replay is the original answer, byte for byte: status, headers (but
    // the replay marker), body and its encoding.
    for (key, replay) in &replays {
        if !originals.get(key).is_some_and(|o| o.same_as(replay)) {
            violations.add(format!(
                "storm: a replay of key {key} differs from its original response: {replay:?} vs {:?}",
                originals.get(key)
            ));
        }
    }
    for key in 0..size.storm_keys {
        if !originals.contains_key(&key) {
            violations.add(format!("storm: key {key} never got its original 201"));
        }
    }
    let executions = functions::order_executions(&tables.1).await?;
    let orders_once = executions.values().filter(|n| **n == 1).count();
    if executions.len() != size.storm_keys || orders_once != size.storm_keys {
        violations.add(format!(
            "storm: {} orders, {orders_once} executed once, {} keys",
            executions.len(),
            size.storm_keys
        ));
    }
    let most: Vec<usize> = most.iter().map(|m| m.load(Ordering::SeqCst)).collect();
    let conflicts_total = conflicts.values().sum();
    // The storm is only a storm if duplicates met: some request must have
    // found its key in progress.
    if conflicts_total == 0 {
        violations
            .add("storm: no request found its key in progress: duplicates never raced".to_owned());
    }
    Ok(StormReport {
        requests: size.storm_requests,
        keys: size.storm_keys,
        concurrency,
        processes,
        seconds,
        originals: originals.len(),
        replays: replays.len(),
        conflicts: conflicts_total,
        keys_with_conflict: conflicts.len(),
        keys_overlapping: most.iter().filter(|m| **m > 1).count(),
        most_in_flight: most.iter().copied().max().unwrap_or(0),
        orders: executions.len(),
        orders_once,
        peak_rss_kb,
    })
}
