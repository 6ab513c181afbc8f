//! What no Powertools runtime has: recovery points, transactional completion,
//! large responses, metrics, the replay hook and the test switch.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use integration_tests::one_write;
use lambda_http::{Body, Request, Response};
use lambda_idempotency::metrics::Metrics;
use lambda_idempotency::{
    http::REPLAYED_HEADER,
    problem,
    store::{ClaimOutcome, ClaimRequest, CompleteRequest, StoredBody, StoredResponse},
    DynamoStore, ErrorKind, IdempotencyContext, IdempotencyLayer, MemoryStore, Store,
};
use serde_json::json;
use tower::{Layer, ServiceExt};

use crate::fixture::{
    claim_request, dynamo_order_state, json, now_ms, on_both_stores, post, post_order, Fixture,
    Handler, Runs,
};

on_both_stores!(
    crash_after_a_checkpoint_resumes_there_without_repeating_the_call,
    stale_invocation_cannot_commit_a_checkpoint_after_takeover,
    expired_record_does_not_hand_its_checkpoint_to_a_new_life,
    compressible_megabyte_response_round_trips,
    incompressible_megabyte_response_completes_with_the_documented_problem,
    metrics_lines_are_emf_json,
    replays_conflicts_and_releases_are_counted,
    replay_hook_adjusts_replays_only,
    replay_hook_receives_the_record_from_the_store_and_the_cache,
    disabled_switch_passes_everything_through,
);

/// The "charge" handler of the recovery tests: step 1 calls the provider
/// (counted) and commits `charged`; step 2 ("create the order") may hang,
/// simulating a crash after the checkpoint.
fn charging_handler(
    provider_calls: Runs,
    hang_after_charge: Arc<std::sync::atomic::AtomicBool>,
) -> impl Handler {
    tower::service_fn(move |req: Request| {
        let provider_calls = provider_calls.clone();
        let hang = hang_after_charge.clone();
        async move {
            let ctx = IdempotencyContext::of(&req)
                .cloned()
                .ok_or("no idempotency context")?;
            let charge_id = match ctx.recovery_point() {
                Some(point) if point.name == "charged" => point.data["charge_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                _ => {
                    let n = provider_calls.bump();
                    let charge_id = format!("ch_{n}");
                    ctx.commit("charged", json!({ "charge_id": charge_id }))
                        .await?;
                    charge_id
                }
            };
            if hang.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            let resumed = ctx.recovery_point().map(|p| p.name.clone());
            Ok(Response::builder().status(201).body(Body::from(
                json!({"charge_id": charge_id, "attempt": ctx.attempt(), "resumed_from": resumed})
                    .to_string(),
            ))?)
        }
    })
}

async fn crash_after_a_checkpoint_resumes_there_without_repeating_the_call(f: Fixture) {
    let provider_calls = Runs::default();
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let layer = IdempotencyLayer::new(f.store.clone()).max_lease(Duration::from_millis(150));
    let svc = layer.layer(charging_handler(provider_calls.clone(), hang.clone()));

    // Attempt 1 charges, commits `charged`, then "crashes" (its future is dropped).
    let crashed = tokio::spawn(svc.clone().oneshot(post("/charges", Some("k1"), "{}")));
    while provider_calls.count() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    crashed.abort();
    hang.store(false, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The retry takes over after the lease and resumes at the checkpoint.
    let resumed = svc
        .clone()
        .oneshot(post("/charges", Some("k1"), "{}"))
        .await
        .unwrap();
    assert_eq!(resumed.status(), 201);
    let body = json(&resumed);
    assert_eq!(body["attempt"], 2);
    assert_eq!(body["resumed_from"], "charged");
    assert_eq!(
        body["charge_id"], "ch_1",
        "the charge of attempt 1 is reused"
    );
    assert_eq!(
        provider_calls.count(),
        1,
        "the downstream call was not repeated"
    );
    // And the outcome replays; the checkpoint is gone with completion.
    let replay = svc
        .oneshot(post("/charges", Some("k1"), "{}"))
        .await
        .unwrap();
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(json(&replay)["charge_id"], "ch_1");
}

async fn stale_invocation_cannot_commit_a_checkpoint_after_takeover(f: Fixture) {
    let ClaimOutcome::Claimed(stale) = f.store.claim(&claim_request("r", "a", 30)).await.unwrap()
    else {
        panic!()
    };
    let store: Arc<dyn Store> = f.store.clone();
    let stale_ctx = IdempotencyContext::from_lease(store.clone(), stale.clone());
    stale_ctx.commit("step-1", json!({"n": 1})).await.unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    let ClaimOutcome::Claimed(fresh) = f
        .store
        .claim(&claim_request("r", "b", 60_000))
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(fresh.attempt, 2);
    assert_eq!(
        fresh
            .recovered
            .as_ref()
            .map(|c| (c.name.as_str(), c.attempt)),
        Some(("step-1", 1))
    );

    let err = stale_ctx
        .commit("step-2", json!({"n": 2}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let err = f
        .store
        .complete(CompleteRequest::new(
            &stale,
            &StoredResponse::new(200, vec![], StoredBody::Empty),
            now_ms() / 1000 + 60,
        ))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    // The fresh attempt still sees step-1, not the stale step-2.
    let fresh_ctx = IdempotencyContext::from_lease(store, fresh);
    assert_eq!(
        fresh_ctx.recovery_point().map(|c| c.name.as_str()),
        Some("step-1")
    );
    fresh_ctx.commit("step-2", json!({"n": 2})).await.unwrap();
}

async fn expired_record_does_not_hand_its_checkpoint_to_a_new_life(f: Fixture) {
    let ClaimOutcome::Claimed(first) = f
        .store
        .claim(&ClaimRequest {
            expires_at_s: now_ms() / 1000 + 1,
            ..claim_request("r", "a", 10)
        })
        .await
        .unwrap()
    else {
        panic!()
    };
    IdempotencyContext::from_lease(f.store.clone(), first)
        .commit("old", json!(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    // Expired: the next claim starts a new life without the old checkpoint...
    let ClaimOutcome::Claimed(second) = f.store.claim(&claim_request("r", "b", 30)).await.unwrap()
    else {
        panic!()
    };
    assert!(second.recovered.is_none());
    tokio::time::sleep(Duration::from_millis(60)).await;
    // ...and a takeover of that new life does not find it either.
    let ClaimOutcome::Claimed(third) = f
        .store
        .claim(&claim_request("r", "c", 60_000))
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(third.attempt, second.attempt + 1);
    assert!(
        third.recovered.is_none(),
        "stale checkpoint leaked: {:?}",
        third.recovered
    );
}

fn big_body_handler(body: Arc<Vec<u8>>, runs: Runs) -> impl Handler {
    tower::service_fn(move |_req: Request| {
        let body = body.clone();
        runs.bump();
        async move {
            Ok::<_, lambda_http::Error>(
                Response::builder()
                    .status(200)
                    .header("content-type", "application/octet-stream")
                    .body(Body::Binary(body.to_vec()))?,
            )
        }
    })
}

async fn compressible_megabyte_response_round_trips(f: Fixture) {
    let rows: Vec<_> = (0..30_000)
        .map(|i| json!({"id": i, "status": "shipped", "carrier": "acme"}))
        .collect();
    let body = Arc::new(serde_json::to_vec(&rows).unwrap());
    assert!(body.len() > 1_000_000);
    let runs = Runs::default();
    let svc =
        IdempotencyLayer::new(f.store.clone()).layer(big_body_handler(body.clone(), runs.clone()));
    let first = svc
        .clone()
        .oneshot(post("/export", Some("k1"), "{}"))
        .await
        .unwrap();
    let replay = svc
        .oneshot(post("/export", Some("k1"), "{}"))
        .await
        .unwrap();
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert!(
        replay.body().as_ref() == body.as_slice(),
        "1 MB replayed byte for byte (stored compressed)"
    );
    assert!(first.body().as_ref() == body.as_slice());
    assert_eq!(runs.count(), 1);
}

async fn incompressible_megabyte_response_completes_with_the_documented_problem(f: Fixture) {
    let body = Arc::new(integration_tests::noise(1_000_000, 0x2545_f491_4f6c_dd1d));
    let runs = Runs::default();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let svc = IdempotencyLayer::new(f.store.clone())
        .metrics(Metrics::new("Test").sink(move |l| sink.lock().unwrap().push(l.to_owned())))
        .layer(big_body_handler(body.clone(), runs.clone()));
    let first = svc
        .clone()
        .oneshot(post("/export", Some("k1"), "{}"))
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    assert!(
        first.body().as_ref() == body.as_slice(),
        "the first caller still gets the real response"
    );
    for _ in 0..2 {
        let replay = svc
            .clone()
            .oneshot(post("/export", Some("k1"), "{}"))
            .await
            .unwrap();
        assert_eq!(replay.status(), 500);
        assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
        assert_eq!(json(&replay)["type"], problem::RESPONSE_TOO_LARGE.uri);
        assert!(json(&replay)["detail"]
            .as_str()
            .unwrap()
            .contains("status 200"));
    }
    assert_eq!(runs.count(), 1, "the handler is never re-run");
    assert!(lines
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("\"OversizedResponse\":1")));
}

async fn metrics_lines_are_emf_json(f: Fixture) {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let runs = Runs::default();
    let svc = IdempotencyLayer::new(f.store.clone())
        .metrics(
            Metrics::new("Orders")
                .dimension("Service", "test")
                .sink(move |l| sink.lock().unwrap().push(l.to_owned())),
        )
        .local_cache(10, Duration::from_secs(60))
        .layer(crate::fixture::counting_handler(
            runs.clone(),
            Duration::ZERO,
        ));
    post_order(&svc, "k1").await;
    post_order(&svc, "k1").await;
    svc.clone()
        .oneshot(post("/orders", Some("k1"), "{\"x\":1}"))
        .await
        .unwrap();
    let lines = lines.lock().unwrap().clone();
    let mut names = Vec::new();
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("EMF line is JSON");
        let meta = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(meta["Namespace"], "Orders");
        assert_eq!(meta["Dimensions"], json!([["Service"]]));
        assert!(v["_aws"]["Timestamp"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(v["Service"], "test");
        let metric = meta["Metrics"][0]["Name"].as_str().unwrap().to_owned();
        assert_eq!(v[&metric], 1);
        assert_eq!(meta["Metrics"][0]["Unit"], "Count");
        names.push(metric);
    }
    assert_eq!(names, ["Claimed", "CacheHit", "FingerprintMismatch"]);
    assert!(
        !lines.iter().any(|l| l.contains("k1")),
        "raw keys are never in metrics"
    );
}

/// The metric names of the EMF lines captured so far, line by line.
fn metric_names(lines: &Mutex<Vec<String>>) -> Vec<Vec<String>> {
    lines
        .lock()
        .unwrap()
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("EMF line is JSON");
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .expect("a list of metrics")
                .iter()
                .map(|m| m["Name"].as_str().expect("a metric name").to_owned())
                .collect()
        })
        .collect()
}

async fn replays_conflicts_and_releases_are_counted(f: Fixture) {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let runs = Runs::default();
    let handler_runs = runs.clone();
    // 503 for a body asking for it (a retryable answer: the key is
    // released), otherwise 201 after the body's delay in milliseconds.
    let handler = tower::service_fn(move |req: Request| {
        let runs = handler_runs.clone();
        async move {
            runs.bump();
            let body: serde_json::Value = serde_json::from_slice(req.body().as_ref())?;
            let delay = body["delay_ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let status = if body["fail"] == true { 503 } else { 201 };
            Ok::<_, lambda_http::Error>(Response::builder().status(status).body(Body::from("{}"))?)
        }
    });
    let svc = IdempotencyLayer::new(f.store.clone())
        .metrics(Metrics::new("Orders").sink(move |l| sink.lock().unwrap().push(l.to_owned())))
        .layer(handler);

    let call = |key: &'static str, body: &'static str| {
        svc.clone().oneshot(post("/orders", Some(key), body))
    };
    assert_eq!(call("k1", "{}").await.unwrap().status(), 201);
    assert_eq!(call("k1", "{}").await.unwrap().status(), 201);
    assert_eq!(call("k2", r#"{"fail":true}"#).await.unwrap().status(), 503);
    // One line per request: the failed one claimed and released.
    assert_eq!(
        metric_names(&lines),
        [
            vec!["Claimed"],
            vec!["Replayed"],
            vec!["Claimed", "Released"]
        ]
    );

    // A duplicate while the first is still running.
    let slow = tokio::spawn(call("k3", r#"{"delay_ms":500}"#));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while runs.count() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slow handler never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        call("k3", r#"{"delay_ms":500}"#).await.unwrap().status(),
        409
    );
    assert_eq!(slow.await.unwrap().unwrap().status(), 201);
    assert_eq!(
        metric_names(&lines),
        [
            vec!["Claimed"],
            vec!["Replayed"],
            vec!["Claimed", "Released"],
            // The duplicate's line comes first: the slow request writes
            // its own when it ends.
            vec!["InProgressConflict"],
            vec!["Claimed"],
        ]
    );
    assert_eq!(runs.count(), 3, "the replay and the conflict ran nothing");
}

async fn replay_hook_adjusts_replays_only(f: Fixture) {
    let runs = Runs::default();
    let svc = IdempotencyLayer::new(f.store.clone())
        .replay_hook(|res| {
            res.headers_mut()
                .insert("x-cache", http::HeaderValue::from_static("replay"));
        })
        .layer(crate::fixture::counting_handler(
            runs.clone(),
            Duration::ZERO,
        ));
    let first = post_order(&svc, "k1").await;
    assert!(first.headers().get("x-cache").is_none());
    let replay = post_order(&svc, "k1").await;
    assert_eq!(replay.headers()["x-cache"], "replay");
}

async fn disabled_switch_passes_everything_through(f: Fixture) {
    let runs = Runs::default();
    let svc = IdempotencyLayer::new(f.store.clone())
        .require_key(true)
        .disabled(true)
        .layer(crate::fixture::counting_handler(
            runs.clone(),
            Duration::ZERO,
        ));
    for _ in 0..2 {
        let res = post_order(&svc, "k1").await;
        assert_eq!(res.status(), 201);
    }
    assert_eq!(runs.count(), 2);
    assert_eq!(f.requests(), 0);
}

// Transactional completion needs DynamoDB's TransactWriteItems.

async fn tables() -> (DynamoStore, String, aws_sdk_dynamodb::Client) {
    let (store, _) = integration_tests::dynamo_store().await;
    let client = store.client().clone();
    let orders = integration_tests::orders_table(&client).await;
    (store, orders, client)
}

fn put_order(table: &str, id: &str, must_be_new: bool) -> TransactWriteItem {
    let mut put = Put::builder()
        .table_name(table)
        .item("order_id", AttributeValue::S(id.into()))
        .item("state", AttributeValue::S("created".into()));
    if must_be_new {
        put = put.condition_expression("attribute_not_exists(order_id)");
    }
    TransactWriteItem::builder()
        .put(put.build().unwrap())
        .build()
}

fn transactional_handler(table: String, order_id: &'static str) -> impl Handler {
    tower::service_fn(move |req: Request| {
        let table = table.clone();
        async move {
            let ctx = IdempotencyContext::of(&req).ok_or("no context")?;
            ctx.defer_write(put_order(&table, order_id, true))?;
            Ok::<_, lambda_http::Error>(Response::builder().status(201).body(Body::from(order_id))?)
        }
    })
}

#[tokio::test]
async fn transactional_completion_commits_business_writes_with_the_response() {
    let (store, orders, client) = tables().await;
    let svc = IdempotencyLayer::new(store).layer(transactional_handler(orders.clone(), "o-1"));
    let first = post_order(&svc, "k1").await;
    assert_eq!(first.status(), 201);
    assert_eq!(
        dynamo_order_state(&client, &orders, "o-1").await.as_deref(),
        Some("created")
    );
    let replay = post_order(&svc, "k1").await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
}

#[tokio::test]
async fn cancelled_transaction_writes_nothing_and_releases_the_record() {
    let (store, orders, client) = tables().await;
    // The business condition will fail: the order exists already, with another state.
    client
        .put_item()
        .table_name(&orders)
        .item("order_id", AttributeValue::S("o-1".into()))
        .item("state", AttributeValue::S("pre-existing".into()))
        .send()
        .await
        .unwrap();
    let svc =
        IdempotencyLayer::new(store.clone()).layer(transactional_handler(orders.clone(), "o-1"));
    let res = post_order(&svc, "k1").await;
    assert_eq!(res.status(), 409);
    assert_eq!(json(&res)["type"], problem::TRANSACTION_CANCELLED.uri);
    assert!(json(&res)["detail"]
        .as_str()
        .unwrap()
        .contains("ConditionalCheckFailed"));
    assert_eq!(
        dynamo_order_state(&client, &orders, "o-1").await.as_deref(),
        Some("pre-existing"),
        "no partial write"
    );
    // Released: the next try runs again (and is cancelled again), not a 409 in-progress.
    let again = post_order(&svc, "k1").await;
    assert_eq!(json(&again)["type"], problem::TRANSACTION_CANCELLED.uri);
}

#[tokio::test]
async fn transactional_completion_by_a_stale_attempt_is_fenced_and_writes_nothing() {
    let (store, orders, client) = tables().await;
    let ClaimOutcome::Claimed(stale) = store.claim(&claim_request("r", "a", 30)).await.unwrap()
    else {
        panic!()
    };
    tokio::time::sleep(Duration::from_millis(60)).await;
    let ClaimOutcome::Claimed(_fresh) =
        store.claim(&claim_request("r", "b", 60_000)).await.unwrap()
    else {
        panic!()
    };
    let err = store
        .complete(
            CompleteRequest::new(
                &stale,
                &StoredResponse::new(201, vec![], StoredBody::Empty),
                now_ms() / 1000 + 60,
            )
            .with_writes(one_write(put_order(&orders, "o-9", false))),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    assert_eq!(dynamo_order_state(&client, &orders, "o-9").await, None);
}

#[tokio::test]
async fn memory_store_refuses_deferred_writes_clearly() {
    let store = MemoryStore::new();
    let ClaimOutcome::Claimed(lease) = store.claim(&claim_request("r", "a", 60_000)).await.unwrap()
    else {
        panic!()
    };
    let err = store
        .complete(
            CompleteRequest::new(
                &lease,
                &StoredResponse::new(201, vec![], StoredBody::Empty),
                now_ms() / 1000 + 60,
            )
            .with_writes(one_write(put_order("t", "o", false))),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(err.to_string().contains("DynamoStore"));
}

/// The record a response replays from reaches the hook, whether the replay
/// came from the store or from the local cache.
async fn replay_hook_receives_the_record_from_the_store_and_the_cache(f: Fixture) {
    let runs = Runs::default();
    let svc = IdempotencyLayer::new(f.store.clone())
        .local_cache(10, Duration::from_secs(60))
        .replay_hook_with_record(|res, record| {
            let seen = format!(
                "{} {} {}",
                record.status.as_str(),
                record.attempt,
                record.expires_at_s > now_ms() / 1000
            );
            res.headers_mut()
                .insert("x-record", http::HeaderValue::from_str(&seen).unwrap());
        })
        .layer(crate::fixture::counting_handler(
            runs.clone(),
            Duration::ZERO,
        ));
    // A record completed by another instance: this one replays it from the
    // store first, then from its cache.
    let other = IdempotencyLayer::new(f.store.clone()).layer(crate::fixture::counting_handler(
        runs.clone(),
        Duration::ZERO,
    ));
    let first = post_order(&other, "k1").await;
    assert_eq!(first.status(), 201);
    let before = f.requests();
    for source in ["store", "cache"] {
        let replay = post_order(&svc, "k1").await;
        assert_eq!(replay.headers()["x-record"], "COMPLETED 1 true", "{source}");
    }
    assert_eq!(
        f.requests() - before,
        1,
        "the second replay came from the cache"
    );
    assert_eq!(runs.count(), 1);
}
