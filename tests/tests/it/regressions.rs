//! Defects found by an audit of the state machine and the HTTP contract
//! (issue 14). Each test failed before its fix; the store ones run on
//! DynamoDB Local, through a fault interceptor where the defect needs one,
//! and on the in-memory store where it applies.

use std::time::Duration;

use aws_sdk_dynamodb::config::SharedInterceptor;
use integration_tests::{client_with, create_table, LoseResponses};
use lambda_idempotency::{
    store::{
        CheckpointRequest, ClaimRequest, CompleteRequest, Completion, Lease, StoredBody,
        StoredResponse,
    },
    DynamoStore, ErrorKind, Store,
};

use crate::fixture::{claim_request as request, claimed, now_ms};

/// A DynamoDB store whose next responses can be lost after DynamoDB applied
/// the request (the SDK then retries it).
async fn lossy_store() -> (DynamoStore, LoseResponses) {
    let lose = LoseResponses::new(0);
    let client = client_with(vec![SharedInterceptor::new(lose.clone())]).await;
    let table = create_table(&integration_tests::client().await).await;
    (DynamoStore::builder(client, table).open().unwrap(), lose)
}

// Item 2: a recovery point belongs to one life of the record.

#[tokio::test]
async fn a_retried_claim_never_hands_back_a_recovery_point_of_an_expired_life() {
    let (store, lose) = lossy_store().await;
    // An abandoned attempt whose record expired (TTL deletion lags) while it
    // held a recovery point of its own request.
    let old = claimed(
        store
            .claim(&ClaimRequest {
                expires_at_s: now_ms() / 1000 - 5,
                ..request("r", "old", 10)
            })
            .await
            .unwrap(),
    );
    IdempotencyContextExt::commit(&store, &old, "charged").await;

    // A new life of the key: the claim is applied, its response lost, the
    // SDK retries it and the retry finds our own owner token.
    lose.arm(1);
    let new = claimed(store.claim(&request("r", "new", 50)).await.unwrap());
    assert_eq!(lose.remaining(), 0, "the claim's first response was lost");
    assert_eq!(new.attempt, old.attempt + 1);
    assert_eq!(
        new.recovered, None,
        "the expired life's recovery point must not reach the new life"
    );

    // The new life crashes too; whoever takes it over must not resume from
    // the old life's step either.
    tokio::time::sleep(Duration::from_millis(120)).await;
    let takeover = claimed(store.claim(&request("r", "third", 60_000)).await.unwrap());
    assert_eq!(takeover.attempt, new.attempt + 1);
    assert_eq!(takeover.recovered, None);
}

/// Commit a recovery point straight through the store.
struct IdempotencyContextExt;

impl IdempotencyContextExt {
    async fn commit(store: &DynamoStore, lease: &Lease, name: &str) {
        store
            .checkpoint(CheckpointRequest::new(
                lease,
                &lambda_idempotency::store::Checkpoint {
                    name: name.into(),
                    data: serde_json::json!({"charge_id": "ch_old"}),
                    attempt: lease.attempt,
                },
            ))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_takeover_inherits_the_recovery_point_committed_in_its_own_life() {
    let (store, _) = lossy_store().await;
    let first = claimed(store.claim(&request("r", "a", 30)).await.unwrap());
    IdempotencyContextExt::commit(&store, &first, "charged").await;
    tokio::time::sleep(Duration::from_millis(80)).await;
    let takeover = claimed(store.claim(&request("r", "b", 60_000)).await.unwrap());
    assert_eq!(takeover.attempt, 2);
    assert_eq!(
        takeover.recovered.map(|c| c.name).as_deref(),
        Some("charged")
    );
}

// Item 8: an SDK-retried write whose first try was applied is ours, not fenced.

fn response() -> StoredResponse {
    StoredResponse::new(201, vec![], StoredBody::Text("done".into()))
}

#[tokio::test]
async fn an_sdk_retried_complete_whose_first_try_applied_succeeds() {
    let (store, lose) = lossy_store().await;
    let lease = claimed(store.claim(&request("r", "a", 60_000)).await.unwrap());
    lose.arm(1);
    let outcome = crate::fixture::complete(&store, &lease, &response()).await;
    assert_eq!(
        lose.remaining(),
        0,
        "the completion's first response was lost"
    );
    assert_eq!(outcome.unwrap(), Completion::Stored);
}

#[tokio::test]
async fn an_sdk_retried_release_whose_first_try_applied_succeeds() {
    let (store, lose) = lossy_store().await;
    let lease = claimed(store.claim(&request("r", "a", 60_000)).await.unwrap());
    lose.arm(1);
    let outcome = store.release(&lease).await;
    assert_eq!(lose.remaining(), 0, "the release's first response was lost");
    outcome.unwrap();
    // Released for real: the next claim starts a new life.
    assert_eq!(
        claimed(store.claim(&request("r", "b", 60_000)).await.unwrap()).attempt,
        1
    );
}

#[tokio::test]
async fn a_complete_fenced_by_a_newer_attempt_is_still_fenced() {
    let (store, _) = lossy_store().await;
    let stale = claimed(store.claim(&request("r", "a", 30)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(80)).await;
    let fresh = claimed(store.claim(&request("r", "b", 60_000)).await.unwrap());
    crate::fixture::complete(&store, &fresh, &response())
        .await
        .unwrap();
    let err = crate::fixture::complete(&store, &stale, &response())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let err = store.release(&stale).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
}

// Item 11: a transaction DynamoDB refuses as invalid committed nothing.

fn put_order(table: &str, id: &str) -> aws_sdk_dynamodb::types::TransactWriteItem {
    use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
    TransactWriteItem::builder()
        .put(
            Put::builder()
                .table_name(table)
                .item("order_id", AttributeValue::S(id.into()))
                .item("state", AttributeValue::S("created".into()))
                .build()
                .unwrap(),
        )
        .build()
}

#[tokio::test]
async fn a_transaction_dynamodb_refuses_as_invalid_releases_the_key() {
    use lambda_http::{Body, Request, Response};
    use lambda_idempotency::{problem, IdempotencyContext, IdempotencyLayer};
    use tower::Layer;

    let (store, _) = integration_tests::dynamo_store().await;
    let orders = integration_tests::orders_table(store.client()).await;
    let runs = crate::fixture::Runs::default();
    let counted = runs.clone();
    // Two operations on one item: DynamoDB refuses the whole transaction
    // (ValidationException) before running any of it.
    let handler = tower::service_fn(move |req: Request| {
        let orders = orders.clone();
        counted.bump();
        async move {
            let ctx = IdempotencyContext::of(&req).ok_or("no context")?;
            ctx.defer_write(put_order(&orders, "o-1"))?;
            ctx.defer_write(put_order(&orders, "o-1"))?;
            Ok::<_, lambda_http::Error>(Response::builder().status(201).body(Body::from("o-1"))?)
        }
    });
    let svc = IdempotencyLayer::new(store).layer(handler);
    let first = crate::fixture::post_order(&svc, "k1").await;
    assert_eq!(first.status(), 500);
    let body = crate::fixture::json(&first);
    assert_eq!(body["type"], problem::TRANSACTION_REJECTED.uri);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("ValidationException")
            || body["detail"].as_str().unwrap().contains("one item"),
        "{body}"
    );
    // Released: the retry runs the handler again instead of a 409.
    let again = crate::fixture::post_order(&svc, "k1").await;
    assert_eq!(again.status(), 500);
    assert_eq!(runs.count(), 2);
}

// Item 1: an event whose outcome was not recorded must not report success.

/// A handler defers a write whose condition fails: the transaction with the
/// completion is cancelled, nothing is written.
#[tokio::test]
async fn an_event_whose_transactional_completion_is_cancelled_fails_and_is_released() {
    use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
    use aws_sdk_dynamodb::types::AttributeValue;
    use lambda_idempotency::{event::SqsBatch, IdempotentFunction};

    let (store, _) = integration_tests::dynamo_store().await;
    let client = store.client().clone();
    let orders = integration_tests::orders_table(&client).await;
    let must_be_new = |id: &str| integration_tests::put_new_order(&orders, id);
    client
        .put_item()
        .table_name(&orders)
        .item("order_id", AttributeValue::S("taken".into()))
        .send()
        .await
        .unwrap();

    let function = IdempotentFunction::new(store.clone(), "consumer").key_pointers(["/id"]);
    let runs = crate::fixture::Runs::default();
    let run = |id: &'static str| {
        let runs = runs.clone();
        let write = must_be_new(id);
        function.call_with_context(serde_json::json!({"id": id}), move |_, ctx| async move {
            runs.bump();
            ctx.expect("keyed").defer_write(write).expect("deferred");
            Ok::<_, String>("done".to_owned())
        })
    };
    let err = run("taken").await.unwrap_err();
    assert_eq!(err.error_type(), "Idempotency.CompletionFailed", "{err}");
    assert!(err.to_string().contains("cancelled"), "{err}");
    // Released: the redelivery runs again rather than waiting for the lease.
    assert!(run("taken").await.is_err());
    assert_eq!(runs.count(), 2);

    // Through SqsBatch: the record is reported for redelivery.
    let batch = SqsBatch::new(function.clone()).key_body_pointer("/id");
    let mut message = SqsMessage::default();
    message.message_id = Some("m-1".into());
    message.body = Some(r#"{"id":"taken-too"}"#.into());
    let mut event = SqsEvent::default();
    event.records = vec![message];
    client
        .put_item()
        .table_name(&orders)
        .item("order_id", AttributeValue::S("taken-too".into()))
        .send()
        .await
        .unwrap();
    let write = must_be_new("taken-too");
    let response = batch
        .process(event, move |_, ctx| {
            let write = write.clone();
            async move {
                ctx.expect("keyed").defer_write(write).expect("deferred");
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    let failed: Vec<_> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, ["m-1"]);
}

/// The transaction committed but its response was lost and the SDK may not
/// retry: the outcome is unknown to the caller, so the event fails, and the
/// key is left alone (here the transaction did commit, so a duplicate replays).
#[tokio::test]
async fn an_event_whose_completion_outcome_is_unknown_fails_and_keeps_the_key() {
    use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
    use lambda_idempotency::IdempotentFunction;

    let lose = LoseResponses::new(0);
    let shared = aws_config::from_env()
        .region(aws_config::Region::new("us-east-1"))
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(1))
        .load()
        .await;
    let conf = aws_sdk_dynamodb::config::Builder::from(&shared)
        .endpoint_url(integration_tests::endpoint())
        .interceptor(lose.clone())
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(conf);
    let table = create_table(&integration_tests::client().await).await;
    let orders = integration_tests::orders_table(&client).await;
    // The client's single attempt, not the store's retries: a retried
    // transaction would learn its outcome (its client request token).
    let store = DynamoStore::builder(client, table)
        .client_timeouts()
        .open()
        .unwrap();
    let function = IdempotentFunction::new(store, "consumer").key_pointers(["/id"]);
    let runs = crate::fixture::Runs::default();
    let call = || {
        let runs = runs.clone();
        let lose = lose.clone();
        let write = TransactWriteItem::builder()
            .put(
                Put::builder()
                    .table_name(&orders)
                    .item("order_id", AttributeValue::S("o-1".into()))
                    .build()
                    .unwrap(),
            )
            .build();
        function.call_with_context(serde_json::json!({"id": "e-1"}), move |_, ctx| async move {
            runs.bump();
            ctx.expect("keyed").defer_write(write).expect("deferred");
            lose.arm(1); // the completion's response
            Ok::<_, String>("sent".to_owned())
        })
    };
    let err = call().await.unwrap_err();
    assert_eq!(err.error_type(), "Idempotency.CompletionFailed", "{err}");
    lose.arm(0);
    // Not released: the transaction did commit, so the duplicate replays.
    let again: String = call().await.unwrap();
    assert_eq!(again, "sent");
    assert_eq!(runs.count(), 1);
}

#[tokio::test]
async fn an_output_that_cannot_be_serialised_completes_with_a_marker_and_never_runs_again() {
    use lambda_idempotency::{store::Status, IdempotentFunction, MemoryStore};
    use std::collections::HashMap;

    let store = MemoryStore::new();
    let runs = crate::fixture::Runs::default();
    let function = IdempotentFunction::new(store.clone(), "consumer").key_pointers(["/id"]);
    // JSON object keys must be strings: a map keyed by tuples cannot be stored.
    let call = || {
        let runs = runs.clone();
        function.call(serde_json::json!({"id": "e-1"}), move |_| async move {
            runs.bump();
            Ok::<_, String>(HashMap::from([((1, 2), 3)]))
        })
    };
    // The call that ran gets its output: its work stands.
    let output = call().await.unwrap();
    assert_eq!(output, HashMap::from([((1, 2), 3)]));
    let record = store
        .get(&function.record_id("e-1"))
        .expect("kept, not released");
    assert_eq!(record.status, Status::Completed);
    // A redelivery does not run it again: it is told the output was not stored.
    let err = call().await.unwrap_err();
    assert_eq!(err.error_type(), "Idempotency.OutputNotStored", "{err}");
    assert!(err.to_string().contains("not run again"), "{err}");
    assert_eq!(runs.count(), 1);
}

// Item 6: keys derived from a claim bind the request, not only the record.

async fn derived_keys_bind_the_request_that_claimed(f: crate::fixture::Fixture) {
    use lambda_http::{Body, Request, Response};
    use lambda_idempotency::{IdempotencyContext, IdempotencyLayer};
    use tower::{Layer, ServiceExt};

    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let handler = tower::service_fn(move |req: Request| {
        let log = log.clone();
        async move {
            let ctx = IdempotencyContext::of(&req).expect("claimed");
            log.lock().unwrap().push(ctx.derived_key("charge"));
            // The first try fails with a 503, so the record is released.
            let status = if log.lock().unwrap().len() == 1 {
                503
            } else {
                201
            };
            Ok::<_, lambda_http::Error>(Response::builder().status(status).body(Body::Empty)?)
        }
    });
    let svc = IdempotencyLayer::new(f.store.clone()).layer(handler);
    let post = crate::fixture::post;
    let first = svc
        .clone()
        .oneshot(post("/orders", Some("k1"), r#"{"amount":5}"#))
        .await
        .unwrap();
    assert_eq!(first.status(), 503);
    let other_body = svc
        .clone()
        .oneshot(post("/orders", Some("k1"), r#"{"amount":900}"#))
        .await
        .unwrap();
    assert_eq!(other_body.status(), 201);
    let seen = seen.lock().unwrap();
    assert_ne!(
        seen[0], seen[1],
        "a different request under the same key must not reuse the first one's charge key"
    );
    // A true retry (same request) keeps its keys: a detached context of the
    // same record and fingerprint derives the same key on every attempt.
    assert_eq!(
        IdempotencyContext::new("r", 1).derived_key("charge"),
        IdempotencyContext::new("r", 2).derived_key("charge")
    );
}

// Item 10: a panicking handler does not block its key until the lease ends.

async fn a_panicking_handler_releases_its_key(f: crate::fixture::Fixture) {
    use lambda_http::{Body, Request, Response};
    use lambda_idempotency::IdempotencyLayer;
    use tower::{Layer, ServiceExt};

    let runs = crate::fixture::Runs::default();
    let counted = runs.clone();
    let handler = tower::service_fn(move |_req: Request| {
        let run = counted.bump();
        async move {
            if run == 1 {
                panic!("handler bug on the first run");
            }
            Ok::<_, lambda_http::Error>(Response::builder().status(201).body(Body::Empty)?)
        }
    });
    let svc = IdempotencyLayer::new(f.store.clone()).layer(handler);
    let first = tokio::spawn(svc.clone().oneshot(crate::fixture::post(
        "/orders",
        Some("k1"),
        "{}",
    )))
    .await;
    assert!(
        first.unwrap_err().is_panic(),
        "the panic still reaches the runtime"
    );
    let retry = crate::fixture::post_order(&svc, "k1").await;
    assert_eq!(retry.status(), 201, "released: the retry runs, no 409");
    assert_eq!(runs.count(), 2);
}

async fn a_panicking_event_handler_releases_its_key(f: crate::fixture::Fixture) {
    use lambda_idempotency::IdempotentFunction;

    let function = IdempotentFunction::new(f.store.clone(), "consumer").key_pointers(["/id"]);
    let first = {
        let function = function.clone();
        tokio::spawn(async move {
            function
                .call(serde_json::json!({"id": "e-1"}), |_| async {
                    panic!("handler bug");
                    #[allow(unreachable_code)]
                    Ok::<u8, String>(0)
                })
                .await
        })
        .await
    };
    assert!(first.unwrap_err().is_panic());
    let out: u8 = function
        .call(serde_json::json!({"id": "e-1"}), |_| async {
            Ok::<u8, String>(7)
        })
        .await
        .unwrap();
    assert_eq!(out, 7);
}

crate::fixture::on_both_stores!(
    derived_keys_bind_the_request_that_claimed,
    a_panicking_handler_releases_its_key,
    a_panicking_event_handler_releases_its_key,
    keys_of_different_json_types_never_collide,
    an_sqs_record_without_a_message_id_that_fails_fails_the_whole_batch,
    a_tenant_source_that_resolves_nothing_answers_401,
    the_query_string_is_part_of_the_request,
    every_value_of_a_repeated_fingerprinted_header_counts,
    a_trailing_slash_or_doubled_slash_is_the_same_route,
    the_matched_route_template_is_the_scope,
    transient_client_errors_are_released_not_stored,
    a_lease_capped_below_the_deadline_is_reported,
);

// Item 14: SQS and function keys.

async fn keys_of_different_json_types_never_collide(f: crate::fixture::Fixture) {
    use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
    use lambda_idempotency::{event::SqsBatch, IdempotentFunction};

    let runs = crate::fixture::Runs::default();
    let function = IdempotentFunction::new(f.store.clone(), "consumer").key_pointers(["/id"]);
    for arg in [
        serde_json::json!({"id": 5}),
        serde_json::json!({"id": "5"}),
        serde_json::json!({"id": [5]}),
        serde_json::json!({"id": "[5]"}),
    ] {
        let runs = runs.clone();
        let _: u64 = function
            .call(arg, |_| async move { Ok::<_, String>(runs.bump()) })
            .await
            .unwrap();
    }
    assert_eq!(runs.count(), 4, "four different keys, four runs");

    let batch = SqsBatch::new(IdempotentFunction::new(f.store.clone(), "sqs"))
        .key_body_pointer("/event_id");
    let mut event = SqsEvent::default();
    for (i, body) in [
        r#"{"event_id":5}"#,
        r#"{"event_id":"5"}"#,
        r#"{"event_id":20000000000000000001}"#,
        r#"{"event_id":20000000000000000000}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let mut message = SqsMessage::default();
        message.message_id = Some(format!("m-{i}"));
        message.body = Some(body.into());
        event.records.push(message);
    }
    let sqs_runs = crate::fixture::Runs::default();
    let response = batch
        .process(event, |_, _| {
            let runs = sqs_runs.clone();
            async move { Ok::<_, String>(runs.bump()) }
        })
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(sqs_runs.count(), 4, "four different event ids, four runs");
}

async fn an_sqs_record_without_a_message_id_that_fails_fails_the_whole_batch(
    f: crate::fixture::Fixture,
) {
    use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
    use lambda_idempotency::{event::SqsBatch, ErrorKind, IdempotentFunction};

    let batch = SqsBatch::new(IdempotentFunction::new(f.store.clone(), "sqs"))
        .key_body_pointer("/event_id");
    let message = |id: Option<&str>, body: &str| {
        let mut message = SqsMessage::default();
        message.message_id = id.map(str::to_owned);
        message.body = Some(body.into());
        message
    };
    let mut event = SqsEvent::default();
    event.records = vec![
        message(Some("m-1"), r#"{"event_id":"a"}"#),
        message(None, r#"{"event_id":"b"}"#),
    ];
    let err = batch
        .process(event, |m, _| async move {
            match m.message_id {
                Some(_) => Ok(()),
                None => Err("downstream down"),
            }
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidEvent);
    assert!(err.to_string().contains("messageId"), "{err}");

    // Records without an id that succeed need no report.
    let mut event = SqsEvent::default();
    event.records = vec![message(None, r#"{"event_id":"c"}"#)];
    let response = batch
        .process(event, |_, _| async { Ok::<_, String>(()) })
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
}

// HTTP contract items on every store.

/// An HTTP API v2 event with this route key, raw path and authorizer.
fn v2_request(
    route_key: &str,
    path: &str,
    key: &str,
    body: &str,
    authorizer: serde_json::Value,
) -> lambda_http::Request {
    let method = route_key.split(' ').next().unwrap_or("POST");
    let event = serde_json::json!({
        "version": "2.0", "routeKey": route_key, "rawPath": path, "rawQueryString": "",
        "headers": {"idempotency-key": key, "content-type": "application/json"},
        "isBase64Encoded": false, "body": body,
        "requestContext": {"accountId": "1", "apiId": "a", "domainName": "d", "domainPrefix": "d",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "1.2.3.4", "userAgent": "u"},
            "requestId": "r", "routeKey": route_key, "stage": "$default", "time": "t", "timeEpoch": 0,
            "authorizer": authorizer}
    });
    lambda_http::request::from_str(&event.to_string()).expect("HTTP API event")
}

fn counting_service(
    f: &crate::fixture::Fixture,
    layer: impl FnOnce(lambda_idempotency::IdempotencyLayer) -> lambda_idempotency::IdempotencyLayer,
    runs: crate::fixture::Runs,
) -> impl crate::fixture::Handler {
    use tower::Layer;
    layer(lambda_idempotency::IdempotencyLayer::new(f.store.clone()))
        .layer(crate::fixture::counting_handler(runs, Duration::ZERO))
}

async fn send<S>(svc: &S, req: lambda_http::Request) -> lambda_http::Response<lambda_http::Body>
where
    S: tower::Service<
            lambda_http::Request,
            Response = lambda_http::Response<lambda_http::Body>,
            Error = lambda_http::Error,
        > + Clone,
{
    use tower::ServiceExt;
    svc.clone().oneshot(req).await.unwrap()
}

// Item 5: a configured tenant source that resolves nothing fails closed.

async fn a_tenant_source_that_resolves_nothing_answers_401(f: crate::fixture::Fixture) {
    use lambda_idempotency::{problem, TenantSource};
    let runs = crate::fixture::Runs::default();
    let svc = counting_service(&f, |l| l.tenant(TenantSource::jwt_sub()), runs.clone());
    let no_claims = || v2_request("POST /orders", "/orders", "k1", "{}", serde_json::json!({}));
    let res = send(&svc, no_claims()).await;
    assert_eq!(res.status(), 401);
    assert_eq!(
        crate::fixture::json(&res)["type"],
        problem::TENANT_MISSING.uri
    );
    assert_eq!(runs.count(), 0, "nothing ran in a shared scope");
    assert_eq!(f.requests(), 0, "nothing was claimed");

    // With a subject, it runs in its own scope.
    let alice = serde_json::json!({"jwt": {"claims": {"sub": "alice"}, "scopes": null}});
    let res = send(
        &svc,
        v2_request("POST /orders", "/orders", "k1", "{}", alice),
    )
    .await;
    assert_eq!(res.status(), 201);

    // Opting in to a shared anonymous scope is explicit.
    let shared = counting_service(
        &f,
        |l| l.tenant(TenantSource::jwt_sub().or_anonymous()),
        runs.clone(),
    );
    assert_eq!(send(&shared, no_claims()).await.status(), 201);
    let replay = send(&shared, no_claims()).await;
    assert_eq!(
        replay.headers()[lambda_idempotency::http::REPLAYED_HEADER],
        "true"
    );
    assert_eq!(runs.count(), 2);
}

// Item 4: the query string is part of the request.

async fn the_query_string_is_part_of_the_request(f: crate::fixture::Fixture) {
    let runs = crate::fixture::Runs::default();
    let svc = counting_service(&f, |l| l, runs.clone());
    let post = crate::fixture::post;
    let dry_run = send(&svc, post("/orders?dry_run=true", Some("k1"), "{}")).await;
    assert_eq!(dry_run.status(), 201);
    let real = send(&svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(
        real.status(),
        422,
        "the dry run's response must not be replayed to the real request"
    );
    // The same parameters in another order are the same request.
    send(&svc, post("/orders?a=1&b=2", Some("k2"), "{}")).await;
    let reordered = send(&svc, post("/orders?b=2&a=1", Some("k2"), "{}")).await;
    assert_eq!(
        reordered.headers()[lambda_idempotency::http::REPLAYED_HEADER],
        "true"
    );
    // A repeated name's values are a list: their order counts.
    send(&svc, post("/orders?tag=a&tag=b", Some("k3"), "{}")).await;
    let swapped = send(&svc, post("/orders?tag=b&tag=a", Some("k3"), "{}")).await;
    assert_eq!(swapped.status(), 422, "tag=b&tag=a is another request");
    assert_eq!(runs.count(), 3);
}

// Issue 25, item 4: every value of a repeated fingerprinted header counts.

async fn every_value_of_a_repeated_fingerprinted_header_counts(f: crate::fixture::Fixture) {
    let runs = crate::fixture::Runs::default();
    let svc = counting_service(
        &f,
        |l| l.fingerprint(lambda_idempotency::Fingerprinter::new().headers([http::header::ACCEPT])),
        runs.clone(),
    );
    let with_accept = |values: &[&str]| {
        let mut req = crate::fixture::post("/orders", Some("k1"), "{}");
        for value in values {
            req.headers_mut().append(
                http::header::ACCEPT,
                http::HeaderValue::from_str(value).unwrap(),
            );
        }
        req
    };
    let first = send(&svc, with_accept(&["application/json", "text/csv"])).await;
    assert_eq!(first.status(), 201);
    let replay = send(&svc, with_accept(&["application/json", "text/csv"])).await;
    assert_eq!(
        replay.headers()[lambda_idempotency::http::REPLAYED_HEADER],
        "true"
    );
    let fewer = send(&svc, with_accept(&["application/json"])).await;
    assert_eq!(
        fewer.status(),
        422,
        "one Accept value is another request than two"
    );
    let swapped = send(&svc, with_accept(&["text/csv", "application/json"])).await;
    assert_eq!(swapped.status(), 422, "the values' order counts");
    assert_eq!(runs.count(), 1);
}

// Item 7: one route is one scope.

async fn a_trailing_slash_or_doubled_slash_is_the_same_route(f: crate::fixture::Fixture) {
    let runs = crate::fixture::Runs::default();
    let svc = counting_service(&f, |l| l, runs.clone());
    let post = crate::fixture::post;
    assert_eq!(
        send(&svc, post("/orders", Some("k1"), "{}")).await.status(),
        201
    );
    for variant in ["/orders/", "//orders", "/orders//"] {
        let res = send(&svc, post(variant, Some("k1"), "{}")).await;
        assert_eq!(res.status(), 201, "{variant}");
        assert_eq!(
            res.headers()[lambda_idempotency::http::REPLAYED_HEADER],
            "true",
            "{variant} is the same route: a replay"
        );
    }
    assert_eq!(runs.count(), 1);
}

async fn the_matched_route_template_is_the_scope(f: crate::fixture::Fixture) {
    let runs = crate::fixture::Runs::default();
    let svc = counting_service(&f, |l| l, runs.clone());
    let route = "POST /orders/{order_id}/cancel";
    let anon = serde_json::json!({});
    let first = send(
        &svc,
        v2_request(route, "/orders/1/cancel", "k1", "{}", anon.clone()),
    )
    .await;
    assert_eq!(first.status(), 201);
    let replay = send(
        &svc,
        v2_request(route, "/orders/1/cancel", "k1", "{}", anon.clone()),
    )
    .await;
    assert_eq!(
        replay.headers()[lambda_idempotency::http::REPLAYED_HEADER],
        "true"
    );
    // The same key on another order of the same route is a reused key.
    let other = send(
        &svc,
        v2_request(route, "/orders/2/cancel", "k1", "{}", anon),
    )
    .await;
    assert_eq!(other.status(), 422);
    assert_eq!(runs.count(), 1);
}

// Item 12: only statuses that are final for this request are stored.

async fn transient_client_errors_are_released_not_stored(f: crate::fixture::Fixture) {
    use lambda_http::{Body, Request, Response};
    use lambda_idempotency::IdempotencyLayer;
    use tower::Layer;

    for (status, stored) in [
        (401, false),
        (403, false),
        (409, false),
        (425, false),
        (429, false),
        (400, true),
        (404, false),
        (422, true),
        (201, true),
        (302, true),
    ] {
        let runs = crate::fixture::Runs::default();
        let counted = runs.clone();
        let handler = tower::service_fn(move |_req: Request| {
            counted.bump();
            async move {
                Ok::<_, lambda_http::Error>(Response::builder().status(status).body(Body::Empty)?)
            }
        });
        let svc = IdempotencyLayer::new(f.store.clone()).layer(handler);
        let key = format!("k-{status}");
        for _ in 0..2 {
            let res = send(&svc, crate::fixture::post("/orders", Some(&key), "{}")).await;
            assert_eq!(res.status(), status);
        }
        let expected_runs = if stored { 1 } else { 2 };
        assert_eq!(
            runs.count(),
            expected_runs,
            "status {status}: stored={stored}"
        );
    }

    // Opting in: a 409 the handler means as final is stored.
    let runs = crate::fixture::Runs::default();
    let counted = runs.clone();
    let handler = tower::service_fn(move |_req: Request| {
        counted.bump();
        async { Ok::<_, lambda_http::Error>(Response::builder().status(409).body(Body::Empty)?) }
    });
    let svc = IdempotencyLayer::new(f.store.clone())
        .store_when(|status| status == 409 || lambda_idempotency::http::stored_by_default(status))
        .layer(handler);
    for _ in 0..2 {
        send(&svc, crate::fixture::post("/orders", Some("k-opt"), "{}")).await;
    }
    assert_eq!(runs.count(), 1);
}

// Item 12: a lease shorter than the invocation is reported.

async fn a_lease_capped_below_the_deadline_is_reported(f: crate::fixture::Fixture) {
    use lambda_http::RequestExt;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let runs = crate::fixture::Runs::default();
    let svc = counting_service(
        &f,
        |l| {
            l.max_lease(Duration::from_secs(5)).metrics(
                lambda_idempotency::metrics::Metrics::new("Orders")
                    .sink(move |line| sink.lock().unwrap().push(line.to_owned())),
            )
        },
        runs,
    );
    let with_deadline = |key: &str, remaining_ms: u64| {
        let mut context = lambda_http::Context::default();
        context.deadline = now_ms() + remaining_ms;
        crate::fixture::post("/orders", Some(key), "{}").with_lambda_context(context)
    };
    send(&svc, with_deadline("short", 1_000)).await;
    send(&svc, with_deadline("long", 60_000)).await;
    let capped: Vec<serde_json::Value> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &serde_json::Value| l.get("LeaseCapped").is_some())
        .collect();
    assert_eq!(
        capped.len(),
        1,
        "only the invocation that outlives its 5 s lease is reported"
    );
}

// Item 13: a claim over an expired record never reads the old response.

#[tokio::test]
async fn a_claim_over_an_expired_record_does_not_decode_its_old_body() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use lambda_idempotency::store::dynamodb::schema;

    let (store, _) = integration_tests::dynamo_store().await;
    let lease = claimed(store.claim(&request("r", "a", 60_000)).await.unwrap());
    store
        .complete(CompleteRequest::new(
            &lease,
            &response(),
            now_ms() / 1000 - 5,
        ))
        .await
        .unwrap();
    // The expired record's body is not valid gzip (a foreign or damaged
    // item): reading it would fail, and the new life has no use for it.
    store
        .client()
        .update_item()
        .table_name(store.table())
        .key(schema::ID, AttributeValue::S("r".into()))
        .update_expression("SET #b = :b, #e = :gzip")
        .expression_attribute_names("#b", schema::RESPONSE_BODY)
        .expression_attribute_names("#e", schema::RESPONSE_ENCODING)
        .expression_attribute_values(":b", AttributeValue::B(vec![1, 2, 3].into()))
        .expression_attribute_values(":gzip", AttributeValue::S("gzip".into()))
        .send()
        .await
        .unwrap();
    let next = claimed(store.claim(&request("r", "b", 60_000)).await.unwrap());
    assert_eq!(next.attempt, 2);
}

// Item 12: a JSON pointer without its leading `/` is refused when built.

#[test]
fn a_pointer_without_its_leading_slash_is_refused_when_built() {
    use lambda_idempotency::{event::SqsBatch, Fingerprinter, IdempotentFunction, MemoryStore};
    let message = |result: std::thread::Result<()>| {
        let panic = result.expect_err("refused");
        panic.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let key = message(std::panic::catch_unwind(|| {
        IdempotentFunction::new(MemoryStore::new(), "f").key_pointers(["order_id"]);
    }));
    assert!(key.contains("\"/order_id\""), "{key}");
    let validate = message(std::panic::catch_unwind(|| {
        IdempotentFunction::new(MemoryStore::new(), "f").validate(["/ok", "amount"]);
    }));
    assert!(validate.contains("\"/amount\""), "{validate}");
    let sqs = message(std::panic::catch_unwind(|| {
        SqsBatch::new(IdempotentFunction::new(MemoryStore::new(), "f"))
            .key_body_pointer("event_id");
    }));
    assert!(sqs.contains("\"/event_id\""), "{sqs}");
    let fields = Fingerprinter::new().try_fields(["amount"]).unwrap_err();
    assert_eq!(fields.kind(), lambda_idempotency::ErrorKind::InvalidConfig);
    // Well-formed pointers build.
    IdempotentFunction::new(MemoryStore::new(), "f")
        .key_pointers(["/order_id"])
        .validate(["/amount", ""]);
}

// Issue 25, item 4: expiry arithmetic saturates. An absurd `expires_after`
// (a library user's, not validated at start like the functions' variable)
// must not overflow into a panic after the handler ran.

#[tokio::test]
async fn an_expiry_past_the_end_of_time_saturates_on_both_paths() {
    use lambda_idempotency::{store::Status, IdempotencyLayer, IdempotentFunction, MemoryStore};
    use tower::Layer;

    let forever = Duration::from_secs(u64::MAX);
    let store = MemoryStore::new();
    let runs = crate::fixture::Runs::default();
    let svc = IdempotencyLayer::new(store.clone())
        .expires_after(forever)
        .layer(crate::fixture::counting_handler(
            runs.clone(),
            Duration::ZERO,
        ));
    let first = crate::fixture::post_order(&svc, "k1").await;
    assert_eq!(first.status(), 201);
    let replay = crate::fixture::post_order(&svc, "k1").await;
    assert_eq!(replay.status(), 201);
    assert_eq!(runs.count(), 1, "stored, then replayed");

    let function = IdempotentFunction::new(store.clone(), "consumer")
        .key_pointers(["/id"])
        .expires_after(forever);
    let out: String = function
        .call(serde_json::json!({"id": "e-1"}), |_| async {
            Ok::<_, String>("done".to_owned())
        })
        .await
        .unwrap();
    assert_eq!(out, "done");
    let record = store.get(&function.record_id("e-1")).unwrap();
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.expires_at_s, u64::MAX);
}
