//! The event path's options, set through the configuration it shares with
//! the HTTP middleware: local cache, metrics, the disable switch, the replay
//! hook, and waiting for a duplicate in progress.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::metrics::Metrics;
use lambda_idempotency::{
    event::{EventError, SqsBatch},
    IdempotencyConfig, IdempotencyLayer, IdempotentEventLayer, IdempotentFunction,
};
use lambda_runtime::{service_fn, LambdaEvent};
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};

use crate::fixture::{counting_handler, now_ms, on_both_stores, post_order, Fixture, Runs};

on_both_stores!(
    one_configuration_drives_both_paths,
    event_path_metrics_count_each_outcome,
    the_local_cache_replays_events_without_the_store_and_keeps_mismatches,
    sqs_batches_use_the_functions_cache_and_metrics,
    disabled_event_path_runs_every_time_and_touches_no_store,
    the_replay_hook_sees_replayed_outputs_and_their_record,
    a_waiting_duplicate_replays_the_first_output_once_it_completes,
    a_waiting_duplicate_runs_itself_when_the_first_releases_the_key,
    a_waiting_duplicate_in_another_process_sleeps_until_the_first_calls_estimate,
    waiting_stops_at_its_bound_and_before_the_deadline,
);

/// Metrics whose lines are kept, and the names of the metrics counted (a
/// name once per count, in the order of the lines) with the number of
/// lines.
fn captured_metrics() -> (Metrics, impl Fn() -> (Vec<String>, usize)) {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let metrics = Metrics::new("Test").sink(move |l| sink.lock().unwrap().push(l.to_owned()));
    let names = move || {
        let lines = lines.lock().unwrap();
        let mut names = Vec::new();
        for line in lines.iter() {
            let v: Value = serde_json::from_str(line).expect("EMF JSON");
            let metrics = v["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .expect("a list of metrics");
            for metric in metrics {
                let name = metric["Name"].as_str().expect("a metric name");
                let count = v[name].as_u64().expect("a count");
                names.extend((0..count).map(|_| name.to_owned()));
            }
        }
        (names, lines.len())
    };
    (metrics, names)
}

/// A function that counts its runs and answers with the run number.
async fn run_counted(
    function: &IdempotentFunction,
    payload: Value,
    runs: &Runs,
) -> Result<Value, EventError<String>> {
    function
        .call(payload, |p| async move {
            Ok::<_, String>(json!({"run": runs.bump(), "id": p["id"]}))
        })
        .await
}

async fn one_configuration_drives_both_paths(f: Fixture) {
    let (metrics, names) = captured_metrics();
    let config = IdempotencyConfig::new(f.store.clone())
        .namespace("shop")
        .local_cache(100, Duration::from_secs(60))
        .metrics(metrics);
    let function =
        IdempotentFunction::with_config(config.clone(), "consumer").key_pointers(["/id"]);
    let http_runs = Runs::default();
    let svc = IdempotencyLayer::with_config(config)
        .layer(counting_handler(http_runs.clone(), Duration::ZERO));

    let runs = Runs::default();
    run_counted(&function, json!({"id": "a"}), &runs)
        .await
        .unwrap();
    let first = post_order(&svc, "k").await;
    assert_eq!(first.status(), 201);
    let before = f.requests();
    let replay = run_counted(&function, json!({"id": "a"}), &runs)
        .await
        .unwrap();
    let http_replay = post_order(&svc, "k").await;
    assert_eq!(replay["run"], 1);
    assert_eq!(http_replay.headers()["idempotent-replayed"], "true");
    assert_eq!(
        f.requests(),
        before,
        "both replays come from the one shared local cache"
    );
    assert_eq!((runs.count(), http_runs.count()), (1, 1));
    let (names, _) = names();
    assert_eq!(
        names.iter().filter(|n| *n == "Claimed").count(),
        2,
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| *n == "CacheHit").count(),
        2,
        "{names:?}"
    );
    // The namespace applies to the function's record ids.
    assert_ne!(
        function.record_id("a"),
        IdempotentFunction::new(f.store.clone(), "consumer").record_id("a")
    );
}

async fn event_path_metrics_count_each_outcome(f: Fixture) {
    let (metrics, names) = captured_metrics();
    let function = IdempotentFunction::with_config(
        IdempotencyConfig::new(f.store.clone()).metrics(metrics),
        "consumer",
    )
    .key_pointers(["/id"])
    .validate(["/amount"]);
    let runs = Runs::default();
    run_counted(&function, json!({"id": "a", "amount": 1}), &runs)
        .await
        .unwrap();
    run_counted(&function, json!({"id": "a", "amount": 1}), &runs)
        .await
        .unwrap();
    let mismatch = run_counted(&function, json!({"id": "a", "amount": 2}), &runs).await;
    assert!(matches!(mismatch, Err(EventError::PayloadMismatch { .. })));
    let failed: Result<Value, EventError<String>> = function
        .call(json!({"id": "b"}), |_| async { Err("down".to_owned()) })
        .await;
    assert!(matches!(failed, Err(EventError::Handler(_))));
    // A duplicate while the first runs.
    let (started, start) = tokio::sync::oneshot::channel();
    let (finish, finished) = tokio::sync::oneshot::channel::<()>();
    let holder = function.clone();
    let first = tokio::spawn(async move {
        holder
            .call(json!({"id": "c"}), |_| async move {
                started.send(()).unwrap();
                finished.await.unwrap();
                Ok::<_, String>(json!(1))
            })
            .await
    });
    start.await.unwrap();
    let duplicate = run_counted(&function, json!({"id": "c"}), &runs).await;
    assert!(matches!(duplicate, Err(EventError::InProgress { .. })));
    finish.send(()).unwrap();
    first.await.unwrap().unwrap();

    let (names, _) = names();
    let count = |name: &str| names.iter().filter(|n| *n == name).count();
    assert_eq!(count("Claimed"), 3, "a, b and c: {names:?}");
    assert_eq!(count("Replayed"), 1, "{names:?}");
    assert_eq!(count("FingerprintMismatch"), 1, "{names:?}");
    assert_eq!(count("Released"), 1, "b's failure: {names:?}");
    assert_eq!(count("InProgressConflict"), 1, "{names:?}");
    assert_eq!(count("StoreError"), 0, "{names:?}");
}

async fn the_local_cache_replays_events_without_the_store_and_keeps_mismatches(f: Fixture) {
    let function = IdempotentFunction::with_config(
        IdempotencyConfig::new(f.store.clone()).local_cache(10, Duration::from_secs(60)),
        "consumer",
    )
    .key_pointers(["/id"])
    .validate(["/amount"]);
    let runs = Runs::default();
    let first = run_counted(&function, json!({"id": "a", "amount": 1}), &runs)
        .await
        .unwrap();
    let before = f.requests();
    for _ in 0..3 {
        let again = run_counted(&function, json!({"id": "a", "amount": 1}), &runs)
            .await
            .unwrap();
        assert_eq!(again, first);
    }
    let err = run_counted(&function, json!({"id": "a", "amount": 9}), &runs)
        .await
        .unwrap_err();
    assert_eq!(err.error_type(), "Idempotency.PayloadMismatch");
    let existing = err.existing_record().expect("the cached record");
    assert_eq!(
        existing.status,
        lambda_idempotency::store::Status::Completed
    );
    assert_eq!(f.requests(), before, "every duplicate answered from memory");
    assert_eq!(runs.count(), 1);

    // A record found completed in the store is cached too: a second
    // function instance (another warm container) asks the store once.
    let other = IdempotentFunction::with_config(
        IdempotencyConfig::new(f.store.clone()).local_cache(10, Duration::from_secs(60)),
        "consumer",
    )
    .key_pointers(["/id"])
    .validate(["/amount"]);
    let before = f.requests();
    for _ in 0..3 {
        assert_eq!(
            run_counted(&other, json!({"id": "a", "amount": 1}), &runs)
                .await
                .unwrap(),
            first
        );
    }
    assert_eq!(f.requests() - before, 1, "one claim, then the cache");
}

fn message(id: &str, body: Value) -> SqsMessage {
    let mut message = SqsMessage::default();
    message.message_id = Some(id.into());
    message.body = Some(body.to_string());
    message
}

async fn sqs_batches_use_the_functions_cache_and_metrics(f: Fixture) {
    let (metrics, names) = captured_metrics();
    let function = IdempotentFunction::with_config(
        IdempotencyConfig::new(f.store.clone())
            .local_cache(10, Duration::from_secs(60))
            .metrics(metrics),
        "consumer",
    );
    let batch = SqsBatch::new(function).key_body_pointer("/event_id");
    let mut event = SqsEvent::default();
    event.records = vec![
        message("m1", json!({"event_id": "e1"})),
        message("m2", json!({"event_id": "e1"})),
        message("m3", json!({"event_id": "e1"})),
    ];
    let runs = Runs::default();
    let response = batch
        .process(event, |_, _| {
            let runs = runs.clone();
            async move { Ok::<_, String>(runs.bump()) }
        })
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(runs.count(), 1);
    let (names, lines) = names();
    assert_eq!(
        names.iter().filter(|n| *n == "CacheHit").count(),
        2,
        "the two duplicates in the batch replay from memory: {names:?}"
    );
    assert_eq!(lines, 1, "one metrics line for the whole batch: {names:?}");
    assert_eq!(f.requests(), 2, "one claim and one completion in all");
}

async fn disabled_event_path_runs_every_time_and_touches_no_store(f: Fixture) {
    let config = IdempotencyConfig::new(f.store.clone()).disabled(true);
    assert!(config.is_disabled());
    let function = IdempotentFunction::with_config(config, "consumer").key_pointers(["/id"]);
    let runs = Runs::default();
    for expected in 1..=2 {
        let out = run_counted(&function, json!({"id": "a"}), &runs)
            .await
            .unwrap();
        assert_eq!(out["run"], expected);
    }
    // Through the typed layer and a batch as well.
    let layer_runs = runs.clone();
    let svc = IdempotentEventLayer::new(function.clone()).layer(service_fn(
        move |_: LambdaEvent<Value>| {
            let runs = layer_runs.clone();
            async move { Ok::<_, lambda_runtime::Error>(json!(runs.bump())) }
        },
    ));
    for _ in 0..2 {
        svc.clone()
            .oneshot(LambdaEvent::new(json!({"id": "a"}), Default::default()))
            .await
            .unwrap();
    }
    let mut event = SqsEvent::default();
    event.records = vec![message("m1", json!({})), message("m1", json!({}))];
    SqsBatch::new(function)
        .process(event, |_, ctx| {
            let runs = runs.clone();
            async move {
                assert!(ctx.is_none(), "no idempotency context when disabled");
                Ok::<_, String>(runs.bump())
            }
        })
        .await
        .unwrap();
    assert_eq!(runs.count(), 6);
    assert_eq!(f.requests(), 0);
}

async fn the_replay_hook_sees_replayed_outputs_and_their_record(f: Fixture) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let function = IdempotentFunction::new(f.store.clone(), "consumer")
        .key_pointers(["/id"])
        .replay_hook(move |output, record| {
            sink.lock()
                .unwrap()
                .push((record.attempt, record.expires_at_s));
            output["replayed"] = json!(true);
        });
    let runs = Runs::default();
    let first = run_counted(&function, json!({"id": "a"}), &runs)
        .await
        .unwrap();
    assert_eq!(
        first,
        json!({"run": 1, "id": "a"}),
        "the first run is untouched"
    );
    assert!(seen.lock().unwrap().is_empty());
    let again = run_counted(&function, json!({"id": "a"}), &runs)
        .await
        .unwrap();
    assert_eq!(again, json!({"run": 1, "id": "a", "replayed": true}));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, 1, "the record's attempt");
    assert!(seen[0].1 > now_ms() / 1000, "the record's expiry");
}

/// Start a call of `function` for `{"id": id}` that runs `hold` before it
/// answers `{"first": true}` (or fails), and wait until it has claimed.
async fn start_holding(
    function: &IdempotentFunction,
    id: &str,
    hold: Duration,
    fail: bool,
) -> tokio::task::JoinHandle<Result<Value, EventError<String>>> {
    let (started, start) = tokio::sync::oneshot::channel();
    let holder = function.clone();
    let payload = json!({"id": id});
    let task = tokio::spawn(async move {
        holder
            .call(payload, |_| async move {
                started.send(()).unwrap();
                tokio::time::sleep(hold).await;
                if fail {
                    Err("first failed".to_owned())
                } else {
                    Ok(json!({"first": true}))
                }
            })
            .await
    });
    start.await.unwrap();
    task
}

/// The consumer keyed by `/id` on `f`'s store, and a call of it for `a`
/// started elsewhere, holding the key for `hold` (see [`start_holding`]).
async fn held_elsewhere(
    f: &Fixture,
    hold: Duration,
    fail: bool,
) -> (
    IdempotentFunction,
    tokio::task::JoinHandle<Result<Value, EventError<String>>>,
) {
    let function = IdempotentFunction::new(f.store.clone(), "consumer").key_pointers(["/id"]);
    let first = start_holding(&function, "a", hold, fail).await;
    (function, first)
}

/// A duplicate of `a` through `function` that waits up to 10 s for the
/// first call, then replays or runs itself (counted in `runs`).
async fn wait_then_run(
    function: &IdempotentFunction,
    runs: &Runs,
) -> Result<Value, EventError<String>> {
    let waiting = function.clone().wait_for(Duration::from_secs(10));
    run_counted(&waiting, json!({"id": "a"}), runs).await
}

async fn a_waiting_duplicate_replays_the_first_output_once_it_completes(f: Fixture) {
    let (function, first) = held_elsewhere(&f, Duration::from_millis(700), false).await;
    let before = f.requests();
    let runs = Runs::default();
    let waited = wait_then_run(&function, &runs)
        .await
        .expect("the duplicate waits, then replays");
    assert_eq!(waited, json!({"first": true}));
    assert_eq!(runs.count(), 0, "the duplicate never ran");
    first.await.unwrap().unwrap();
    // One claim, then polls with no estimate (the holder's process has not
    // finished a call yet): 50 ms after the claim, half as long again each
    // time up to 250 ms, each cut by up to half. Within the first call's
    // 700 ms that is at most 8 reads (25, 62, 118, 202, 327, 452, 577,
    // 702 ms), then the read the holder's completion wakes it for (it is
    // in this process); the completion is the one other request.
    let made = f.requests() - before;
    assert!((2..=1 + 8 + 1 + 1).contains(&made), "{made} requests");
}

async fn a_waiting_duplicate_in_another_process_sleeps_until_the_first_calls_estimate(f: Fixture) {
    let hold = Duration::from_millis(700);
    let holder = IdempotentFunction::new(f.store.clone(), "consumer").key_pointers(["/id"]);
    // The holder's process has run one call as long before: its next claim
    // says when it expects to finish.
    start_holding(&holder, "earlier", hold, false)
        .await
        .await
        .unwrap()
        .unwrap();
    let first = start_holding(&holder, "a", hold, false).await;
    let before = f.requests();
    // A configuration of its own: nothing shared with the holder's
    // process but the store.
    let elsewhere = IdempotentFunction::new(f.store.clone(), "consumer").key_pointers(["/id"]);
    let runs = Runs::default();
    let waited = wait_then_run(&elsewhere, &runs)
        .await
        .expect("the duplicate waits, then replays");
    assert_eq!(waited, json!({"first": true}));
    assert_eq!(runs.count(), 0, "the duplicate never ran");
    first.await.unwrap().unwrap();
    // One claim; no read until the estimate (about 700 ms after the first
    // claim), then reads 10-20, 15-30, 22-45 ms apart until the completion
    // shows: four reads cover it finishing up to 50 ms late. Without the
    // estimate it would read at least 6 times (50, 125, 237, 405, 655 and
    // 905 ms after its claim). The completion is the one other request.
    let made = f.requests() - before;
    assert!((3..=1 + 4 + 1).contains(&made), "{made} requests");
}

async fn a_waiting_duplicate_runs_itself_when_the_first_releases_the_key(f: Fixture) {
    let (function, first) = held_elsewhere(&f, Duration::from_millis(300), true).await;
    let runs = Runs::default();
    let waited = wait_then_run(&function, &runs)
        .await
        .expect("the key freed, so the duplicate runs");
    assert_eq!(waited, json!({"run": 1, "id": "a"}));
    assert!(matches!(first.await.unwrap(), Err(EventError::Handler(_))));
    // And its output is the one that replays now.
    assert_eq!(
        run_counted(&function, json!({"id": "a"}), &runs)
            .await
            .unwrap(),
        waited
    );
    assert_eq!(runs.count(), 1);
}

async fn waiting_stops_at_its_bound_and_before_the_deadline(f: Fixture) {
    let (function, first) = held_elsewhere(&f, Duration::from_secs(4), false).await;
    let runs = Runs::default();

    // Bounded by its own wait.
    let waiting = function.clone().wait_for(Duration::from_millis(400));
    let started = Instant::now();
    let err = run_counted(&waiting, json!({"id": "a"}), &runs)
        .await
        .unwrap_err();
    assert!(matches!(err, EventError::InProgress { .. }), "{err}");
    // Its whole allowance (less the clock's millisecond rounding), however
    // fast the engine answers its polls: it once gave up after 200 ms when
    // the next full poll would have overrun the 400.
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(395),
        "it waited {waited:?} of its 400 ms"
    );

    // Bounded by the invocation's deadline, whatever the wait allows: the
    // deadline is 1.5 s away, so it gives up by then, with time to answer.
    let mut context = lambda_runtime::Context::default();
    context.deadline = now_ms() + 1_500;
    let deadline = Instant::now() + Duration::from_millis(1_500);
    let waiting = function
        .with_context(&context)
        .wait_for(Duration::from_secs(60));
    let err = run_counted(&waiting, json!({"id": "a"}), &runs)
        .await
        .unwrap_err();
    assert!(matches!(err, EventError::InProgress { .. }), "{err}");
    assert!(
        Instant::now() < deadline,
        "it never waits past its deadline"
    );
    assert_eq!(runs.count(), 0);
    first.await.unwrap().unwrap();
}
