//! The library's features as a user's own function calls them, each with a
//! DynamoDB client of its own whose calls are recorded under the feature's
//! name (integration_tests::iam_record): scripts/check-iam.py derives the
//! IAM each feature needs from these records and compares it with the
//! `## IAM` table in docs/deploy.md. (The example functions, the sweeper and the CLI
//! are recorded where their own tests run them; S3 offload in offload.rs.)

use std::time::Duration;

use lambda_idempotency::{
    event::EventError,
    store::{CompleteRequest, StoredBody, StoredResponse},
    DynamoStore, ErrorKind, IdempotentFunction, Store,
};
use serde_json::{json, Value};

use crate::fixture::{claim_lease, now_ms};

/// A DynamoStore on a fresh idempotency table whose calls are recorded as
/// `feature`'s.
async fn recorded_store(feature: &str) -> DynamoStore {
    let table = integration_tests::create_table(&integration_tests::client().await).await;
    DynamoStore::builder(
        integration_tests::iam_record::dynamodb_client(feature).await,
        table,
    )
    .open()
    .unwrap()
}

async fn ok(function: &IdempotentFunction, id: &str) -> Result<Value, EventError<String>> {
    function
        .call(json!({"id": id}), |p| async move { Ok::<_, String>(p) })
        .await
}

/// Claim, complete, replay, and release after a failed handler.
#[tokio::test]
async fn claim_complete_and_release() {
    let store = recorded_store("feature-claim-complete-release").await;
    let function = IdempotentFunction::new(store.clone(), "consumer").key_pointers(["/id"]);
    let first = ok(&function, "a").await.expect("completed");
    let again = ok(&function, "a").await.expect("replayed");
    assert_eq!(first, again);
    let failed = function
        .call(json!({"id": "b"}), |_| async move {
            Err::<Value, _>("handler failed".to_owned())
        })
        .await;
    assert!(failed.is_err(), "{failed:?}");
    // Released: the next delivery runs the handler again and completes.
    let retried = ok(&function, "b").await.expect("retried");
    assert_eq!(retried, json!({"id": "b"}));
}

/// A duplicate that waits for the first delivery (`wait_for`) and replays
/// its output.
#[tokio::test]
async fn wait_for_an_in_progress_duplicate() {
    let store = recorded_store("feature-wait-for").await;
    let function = IdempotentFunction::new(store, "consumer").key_pointers(["/id"]);
    let holder = function.clone();
    let (started, start) = tokio::sync::oneshot::channel::<()>();
    let first = tokio::spawn(async move {
        holder
            .call(json!({"id": "w"}), |_| async move {
                let _ = started.send(());
                tokio::time::sleep(Duration::from_millis(600)).await;
                Ok::<_, String>(json!({"first": true}))
            })
            .await
    });
    start.await.expect("the first delivery started");
    let waited = function
        .clone()
        .wait_for(Duration::from_secs(10))
        .call(json!({"id": "w"}), |_| async move {
            Ok::<_, String>(json!({"second": true}))
        })
        .await
        .expect("the duplicate waited");
    assert_eq!(waited, json!({"first": true}));
    assert_eq!(
        first.await.expect("joined").expect("first"),
        json!({"first": true})
    );
}

/// A transactional completion: the handler's write and the completion
/// commit together (TransactWriteItems), or neither does.
#[tokio::test]
async fn transactional_completion() {
    use integration_tests::{one_write, put_new_order};
    let store = recorded_store("feature-transactional-completion").await;
    let orders = integration_tests::orders_table(&integration_tests::client().await).await;
    let put = |id: &str| one_write(put_new_order(&orders, id));
    let response = StoredResponse::new(201, vec![], StoredBody::Text("{}".into()));
    let expires = now_ms() / 1000 + 3600;
    let lease = claim_lease(&store, "t1", "me", 60_000).await;
    store
        .complete(CompleteRequest::new(&lease, &response, expires).with_writes(put("o-1")))
        .await
        .expect("committed");
    let lease = claim_lease(&store, "t2", "me", 60_000).await;
    let err = store
        .complete(CompleteRequest::new(&lease, &response, expires).with_writes(put("o-1")))
        .await
        .expect_err("o-1 exists: cancelled");
    assert_eq!(err.kind(), ErrorKind::TransactionCancelled, "{err}");
}

/// A full pass longer than one sweep (more than its 10 pages of 1,000
/// items, the least a listing reads): the sweeper saves its place under
/// `~sweeper/full-pass` with the same conditional PutItem as its places in
/// the stream, recorded as the sweeper function's, so its role's
/// `dynamodb:LeadingKeys` condition is proved to allow it; the next sweep
/// ends the pass, which the item then says (`done:`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pass_longer_than_one_sweep_saves_its_place() {
    use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
    use futures_util::StreamExt;
    let harness = integration_tests::client().await;
    let table = integration_tests::create_table(&harness).await;
    // Items that are not records in progress: the scan reads past them.
    let batches: Vec<Vec<WriteRequest>> = (0..10_050)
        .map(|i| {
            let put = PutRequest::builder()
                .item("id", AttributeValue::S(format!("filler-{i}")))
                .build()
                .expect("an item");
            WriteRequest::builder().put_request(put).build()
        })
        .collect::<Vec<_>>()
        .chunks(25)
        .map(<[WriteRequest]>::to_vec)
        .collect();
    futures_util::stream::iter(batches)
        .for_each_concurrent(16, |batch| {
            let (harness, table) = (harness.clone(), table.clone());
            async move {
                let mut pending = Some(std::collections::HashMap::from([(table, batch)]));
                while let Some(items) = pending.take().filter(|p| !p.is_empty()) {
                    let out = harness
                        .batch_write_item()
                        .set_request_items(Some(items))
                        .send()
                        .await
                        .expect("batch write");
                    pending = out.unprocessed_items().cloned();
                }
            }
        })
        .await;
    let store = DynamoStore::builder(
        integration_tests::iam_record::dynamodb_client("sweeper").await,
        table.clone(),
    )
    .with_stream_at(
        integration_tests::iam_record::streams_config("sweeper").await,
        Some(integration_tests::iam_record::dynamodb_endpoint()),
    )
    .open()
    .unwrap();
    let sweeper = lambda_idempotency::sweeper::Sweeper::new(store).grace(Duration::ZERO);
    let place = || async {
        let key = [("id", AttributeValue::S("~sweeper/full-pass".into()))];
        integration_tests::consistent_item(&harness, &table, key)
            .await
            .and_then(|item| item.get("position").and_then(|p| p.as_s().ok()).cloned())
    };
    let first = sweeper.sweep(None).await;
    assert_eq!(first.errors, 0, "{first:?}");
    let running = place().await;
    assert!(
        running
            .as_deref()
            .is_some_and(|p| p.starts_with("catch-up:") && p.len() > 9),
        "the pass's place is saved, past the table's start: {running:?} {first:?}"
    );
    let second = sweeper.sweep(None).await;
    assert_eq!(second.errors, 0, "{second:?}");
    assert_eq!(
        place().await.as_deref(),
        Some("done:"),
        "the pass ended: {second:?}"
    );
}

/// A cut-over from Powertools (`PowertoolsRecords`): a fresh claim reads the
/// Powertools record of its key, here in the idempotency table itself (the
/// layout Powertools shares with this library's: partition key `id`). Only
/// the read is recorded as the feature's; the claim is the harness's.
#[tokio::test]
async fn a_cut_over_from_powertools_reads_its_record() {
    use lambda_idempotency::store::powertools::{PowertoolsCutover, PowertoolsRecords};
    let harness = integration_tests::client().await;
    let table = integration_tests::create_table(&harness).await;
    let records = PowertoolsRecords::new(
        integration_tests::iam_record::dynamodb_client("feature-powertools-cutover").await,
        &table,
        "orders-api.app.lambda_handler",
        std::time::SystemTime::now() + Duration::from_secs(3600),
    );
    let function = IdempotentFunction::new(
        PowertoolsCutover::new(
            DynamoStore::builder(harness, table).open().unwrap(),
            records,
        ),
        "consumer",
    )
    .key_pointers(["/id"]);
    let out = ok(&function, "never-seen-by-powertools")
        .await
        .expect("ran");
    assert_eq!(out, json!({"id": "never-seen-by-powertools"}));
}
