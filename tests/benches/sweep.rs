//! Sweep throughput: 10,000 stuck records (real claims with a 1 ms lease) on
//! DynamoDB Local, swept with the `release` policy; prints items per second.
//!
//! Run with `make bench-sweep` (starts DynamoDB Local; release build).
//! `SWEEP_BENCH_ITEMS` changes the count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lambda_idempotency::{
    store::ClaimOutcome,
    sweeper::{SweepPolicy, Sweeper},
    Store,
};

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for the list of benchmarks.
    }
    // `cargo bench` passes --bench: full size. `cargo test --all-targets` runs
    // this binary too: a small smoke run keeps it honest without the cost.
    let full = std::env::args().any(|a| a == "--bench");
    let items: usize = std::env::var("SWEEP_BENCH_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 10_000 } else { 200 });
    let (store, counter) = integration_tests::dynamo_store().await;
    let store = Arc::new(store);

    let started = Instant::now();
    let workers = 32;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..items).step_by(workers) {
                let record_id = lambda_idempotency::scope::RecordScope {
                    namespace: "bench",
                    ..lambda_idempotency::scope::RecordScope::new(
                        "POST",
                        "/orders",
                        &format!("key-{i}"),
                    )
                }
                .record_id();
                let request =
                    integration_tests::claim_request(&record_id, &format!("owner-{i}"), 1);
                match store.claim(&request).await {
                    Ok(ClaimOutcome::Claimed(_)) => {}
                    other => panic!("claim {i}: {other:?}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("claim worker");
    }
    let claim_time = started.elapsed();
    tokio::time::sleep(Duration::from_millis(20)).await;

    let sweeper = Sweeper::new(
        integration_tests::dynamo_builder_like(&store)
            .with_stream(integration_tests::streams_client().await)
            .open()
            .unwrap(),
    )
    .policy(SweepPolicy::Release)
    .grace(Duration::ZERO)
    .page_size(100);
    let before = counter.get();
    let started = Instant::now();
    let summary = sweeper.sweep(None).await;
    assert_eq!(summary.errors, 0, "{summary:?}");
    let sweep_time = started.elapsed();
    assert_eq!(summary.released as usize, items, "{summary:?}");
    let requests = counter.get() - before;
    println!("sweep benchmark (DynamoDB Local, in-memory, release build, one sweeper)");
    println!(
        "  stuck records made by claims: {items} in {:.2?} ({:.0} claims/s, 32 workers)",
        claim_time,
        items as f64 / claim_time.as_secs_f64()
    );
    println!(
        "  swept: {} released in {:.2?} -> {:.0} items/s",
        summary.released,
        sweep_time,
        items as f64 / sweep_time.as_secs_f64()
    );
    println!(
        "  pages: {}, DynamoDB requests: {requests} ({:.3} per item)",
        summary.pages,
        requests as f64 / items as f64
    );
}
