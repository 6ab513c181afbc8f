//! Defects found by an audit of the state machine and the HTTP contract
//! (issue 14). Each test failed before its fix; the store ones run on
//! DynamoDB Local, through a fault interceptor where the defect needs one,
//! and on the in-memory store where it applies.

use std::time::Duration;

use aws_sdk_dynamodb::config::SharedInterceptor;
use integration_tests::{client_with, create_table, LoseResponses};
use lambda_idempotency::{
    ClaimOutcome, ClaimRequest, Completion, DynamoStore, ErrorKind, Lease, Store, StoredBody,
    StoredResponse,
};

use crate::fixture::now_ms;

fn request(id: &str, owner: &str, lease_ms: u64) -> ClaimRequest {
    let now = now_ms();
    ClaimRequest {
        record_id: id.into(),
        fingerprint: "fp".into(),
        owner: owner.into(),
        now_ms: now,
        lease_expires_at_ms: now + lease_ms,
        expires_at_s: now / 1000 + 3600,
    }
}

fn claimed(outcome: ClaimOutcome) -> Lease {
    match outcome {
        ClaimOutcome::Claimed(lease) => lease,
        ClaimOutcome::Exists(record) => panic!("expected a claim, found {record:?}"),
    }
}

/// A DynamoDB store whose next responses can be lost after DynamoDB applied
/// the request (the SDK then retries it).
async fn lossy_store() -> (DynamoStore, LoseResponses) {
    let lose = LoseResponses::new(0);
    let client = client_with(vec![SharedInterceptor::new(lose.clone())]).await;
    let table = create_table(&integration_tests::client().await).await;
    (DynamoStore::new(client, table), lose)
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
            .checkpoint(
                lease,
                &lambda_idempotency::Checkpoint {
                    name: name.into(),
                    data: serde_json::json!({"charge_id": "ch_old"}),
                    attempt: lease.attempt,
                },
            )
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
    let outcome = store
        .complete(&lease, &response(), now_ms() / 1000 + 60)
        .await;
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
    store
        .complete(&fresh, &response(), now_ms() / 1000 + 60)
        .await
        .unwrap();
    let err = store
        .complete(&stale, &response(), now_ms() / 1000 + 60)
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
    use tower::{Layer, ServiceExt};

    let (store, _) = integration_tests::dynamo_store().await;
    let orders = integration_tests::unique_name("orders");
    integration_tests::create_table_from_template(store.client(), "OrdersTable", &orders)
        .await
        .unwrap();
    let runs = crate::fixture::Runs::default();
    let counted = runs.clone();
    // Two operations on one item: DynamoDB refuses the whole transaction
    // (ValidationException) before running any of it.
    let handler = tower::service_fn(move |req: Request| {
        let orders = orders.clone();
        counted.bump();
        async move {
            let ctx = IdempotencyContext::of(&req).ok_or("no context")?;
            ctx.defer_write(put_order(&orders, "o-1"));
            ctx.defer_write(put_order(&orders, "o-1"));
            Ok::<_, lambda_http::Error>(Response::builder().status(201).body(Body::from("o-1"))?)
        }
    });
    let svc = IdempotencyLayer::new(store).layer(handler);
    let first = svc
        .clone()
        .oneshot(crate::fixture::post("/orders", Some("k1"), "{}"))
        .await
        .unwrap();
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
    let again = svc
        .oneshot(crate::fixture::post("/orders", Some("k1"), "{}"))
        .await
        .unwrap();
    assert_eq!(again.status(), 500);
    assert_eq!(runs.count(), 2);
}
