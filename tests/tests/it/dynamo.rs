//! Behaviour only the network can show: an unreachable store, a lost response.

use std::time::Duration;

use aws_sdk_dynamodb::config::SharedInterceptor;
use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::{client_with, create_table, LoseResponses, RequestCounter};
use lambda_http::{Body, Response};
use lambda_idempotency::{
    http::REPLAYED_HEADER,
    problem,
    store::dynamodb::schema,
    store::{CheckpointRequest, ClaimOutcome, ClaimRequest},
    DynamoStore, IdempotencyLayer, Store,
};
use tower::Layer;

use crate::fixture::{
    call, claim_request, counting_handler, json, now_ms, post, start_first, Runs,
};

#[tokio::test]
async fn unreachable_store_is_503_and_the_handler_never_runs() {
    // A port nothing listens on: connection refused on every SDK attempt.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let client = integration_tests::client_for(format!("http://127.0.0.1:{port}"), 2).await;
    let store = DynamoStore::builder(client, "idempotency").open().unwrap();

    let runs = Runs::default();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let mut svc = IdempotencyLayer::new(store)
        .unavailable_retry_after(Duration::from_secs(3))
        .metrics(
            lambda_idempotency::metrics::Metrics::new("Orders")
                .sink(move |l| sink.lock().unwrap().push(l.to_owned())),
        )
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let res: Response<Body> = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "3");
    assert_eq!(json(&res)["type"], problem::STORE_UNAVAILABLE.uri);
    assert_eq!(runs.count(), 0, "fail closed: no claim, no execution");
    let lines = lines.lock().unwrap();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(line["StoreError"], 1, "{line}");
}

#[tokio::test]
async fn missing_table_is_503_with_a_clear_store_error() {
    let client = integration_tests::client().await;
    let store = DynamoStore::builder(client, "no-such-table")
        .open()
        .unwrap();
    let err = store
        .claim(&claim_request("r", "o", 1000))
        .await
        .unwrap_err();
    assert!(err.is_retryable());
    assert!(err.to_string().contains("no-such-table"), "{err}");
}

#[tokio::test]
async fn sdk_retry_after_a_lost_claim_response_is_recognised_as_our_claim() {
    let lose = LoseResponses::new(1);
    let counter = RequestCounter::default();
    let client = client_with(vec![
        SharedInterceptor::new(lose.clone()),
        SharedInterceptor::new(counter.clone()),
    ])
    .await;
    let table = create_table(&integration_tests::client().await).await;
    let before = counter.get();
    let store = DynamoStore::builder(client, table).open().unwrap();

    let runs = Runs::default();
    let mut svc =
        IdempotencyLayer::new(store).layer(counting_handler(runs.clone(), Duration::ZERO));
    let res = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(lose.remaining(), 0, "the claim's first response was lost");
    assert_eq!(
        counter.get() - before,
        3,
        "claim, SDK retry of the claim, complete"
    );
    assert_eq!(
        res.status(),
        201,
        "the retried claim found our own owner token"
    );
    assert_eq!(json(&res)["attempt"], 1);
    assert_eq!(runs.count(), 1);
    let replay = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
}

#[tokio::test]
async fn records_hold_hashed_ids_ttl_seconds_and_index_keys_only_when_opted_in() {
    for opted_in in [false, true] {
        let (store, _) = integration_tests::dynamo_store().await;
        let store = if opted_in {
            integration_tests::dynamo_builder_like(&store)
                .with_sweep_index()
                .open()
                .unwrap()
        } else {
            store
        };
        let client = store.client().clone();
        let table = store.table().to_owned();
        let runs = Runs::default();
        let svc = IdempotencyLayer::new(store.clone())
            .expires_after(Duration::from_secs(600))
            .layer(counting_handler(runs.clone(), Duration::from_millis(400)));
        let running = start_first(&svc, post("/orders", Some("secret-key"), "{}"), &runs).await;
        let in_progress = scan_one(&client, &table).await;
        let id = in_progress[schema::ID].as_s().unwrap().clone();
        assert_eq!(id.len(), 64);
        assert!(!id.contains("secret-key"));
        assert_eq!(in_progress[schema::STATUS].as_s().unwrap(), "IN_PROGRESS");
        let swept = client
            .query()
            .table_name(&table)
            .index_name(schema::SWEEP_INDEX)
            .key_condition_expression("#s = :s")
            .expression_attribute_names("#s", schema::SWEEP_SHARD)
            .expression_attribute_values(":s", AttributeValue::S(id[..1].to_owned()))
            .send()
            .await
            .unwrap();
        if opted_in {
            assert_eq!(in_progress[schema::SWEEP_SHARD].as_s().unwrap(), &id[..1]);
            assert_eq!(
                in_progress[schema::SWEEP_AT],
                in_progress[schema::LEASE_EXPIRES_AT]
            );
            assert_eq!(
                swept.count(),
                1,
                "in-progress records are in the sweep index"
            );
        } else {
            // The stream finds stuck records: the claim writes nothing for it.
            assert!(!in_progress.contains_key(schema::SWEEP_SHARD));
            assert!(!in_progress.contains_key(schema::SWEEP_AT));
            assert_eq!(swept.count(), 0);
        }

        running.await.unwrap();
        let completed = scan_one(&client, &table).await;
        assert_eq!(completed[schema::STATUS].as_s().unwrap(), "COMPLETED");
        assert!(!completed.contains_key(schema::SWEEP_SHARD));
        assert!(!completed.contains_key(schema::SWEEP_AT));
        let expires: u64 = completed[schema::EXPIRES_AT]
            .as_n()
            .unwrap()
            .parse()
            .unwrap();
        let now_s = now_ms() / 1000;
        assert!(
            (now_s + 590..=now_s + 610).contains(&expires),
            "TTL is epoch seconds: {expires}"
        );
        assert_eq!(completed[schema::ATTEMPT].as_n().unwrap(), "1");
    }
}

/// With the template's table and the sweeper deployed (it reads the
/// stream), a first execution of a small response costs what Powertools'
/// does: one write unit for the claim, one for the completion, none in any
/// index. Metered on DynamoDB Local.
#[tokio::test]
async fn a_first_execution_writes_two_units_and_no_index_unit() {
    let (store, proxy) = metered_store().await;
    let runs = Runs::default();
    let mut svc =
        IdempotencyLayer::new(store.clone()).layer(counting_handler(runs.clone(), Duration::ZERO));
    let before = proxy.units(store.table());
    let res = call(&mut svc, post("/orders", Some("k1"), r#"{"amount":2500}"#)).await;
    assert_eq!(res.status(), 201);
    let used = proxy.units(store.table()) - before;
    assert_eq!(
        (used.requests, used.table_write, used.index_write),
        (2, 2.0, 0.0),
        "{used:?}"
    );
}

#[tokio::test]
async fn a_foreign_item_is_a_store_error_not_a_panic() {
    let (store, _) = integration_tests::dynamo_store().await;
    let id = lambda_idempotency::scope::RecordScope::new("POST", "/orders", "k1").record_id();
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item(schema::ID, AttributeValue::S(id.clone()))
        .item(schema::STATUS, AttributeValue::S("WEIRD".into()))
        .item(
            schema::EXPIRES_AT,
            AttributeValue::N((now_ms() / 1000 + 600).to_string()),
        )
        .send()
        .await
        .unwrap();
    let now = now_ms();
    let outcome = store
        .claim(&ClaimRequest {
            record_id: id,
            fingerprint: "f".into(),
            owner: "o".into(),
            now_ms: now,
            lease_expires_at_ms: now + 1000,
            expires_at_s: now / 1000 + 60,
            origin: None,
        })
        .await;
    let err = match outcome {
        Err(err) => err,
        Ok(ClaimOutcome::Claimed(l)) => panic!("claimed a foreign item: {l:?}"),
        Ok(ClaimOutcome::Exists(r)) => panic!("decoded a foreign item: {r:?}"),
    };
    assert_eq!(err.kind(), lambda_idempotency::ErrorKind::CorruptRecord);
    assert!(err.to_string().contains("WEIRD"), "{err}");
}

async fn scan_one(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    let out = client
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let items = out.items();
    assert_eq!(items.len(), 1);
    items[0].clone()
}

#[test]
fn the_template_tables_match_the_library_schema() {
    use lambda_idempotency::store::dynamodb::schema;
    let table = integration_tests::table_definition("IdempotencyTable").unwrap();
    assert_eq!(
        table.billing_mode.as_deref(),
        Some("PAY_PER_REQUEST"),
        "on-demand"
    );
    let key: Vec<_> = table
        .key_schema
        .iter()
        .map(|k| (k.attribute_name.as_str(), k.key_type.as_str()))
        .collect();
    assert_eq!(key, [(schema::ID, "HASH")]);
    // DynamoDB Local never expires items: only this ties the TTL attribute
    // the template enables to the one the library writes (epoch seconds).
    let ttl = table.time_to_live_specification.expect("TTL enabled");
    assert!(ttl.enabled);
    assert_eq!(ttl.attribute_name, schema::EXPIRES_AT);
    let index = table
        .global_secondary_indexes
        .iter()
        .find(|i| i.index_name == schema::SWEEP_INDEX)
        .expect("the sweeper's sparse index");
    let index_key: Vec<_> = index
        .key_schema
        .iter()
        .map(|k| (k.attribute_name.as_str(), k.key_type.as_str()))
        .collect();
    assert_eq!(
        index_key,
        [(schema::SWEEP_SHARD, "HASH"), (schema::SWEEP_AT, "RANGE")]
    );
    // What the sweeper reads from the index without touching the table (its
    // fencing values)...
    for attribute in [schema::ATTEMPT, schema::OWNER] {
        assert!(
            index.projection.projection_type == "ALL"
                || index
                    .projection
                    .non_key_attributes
                    .iter()
                    .any(|a| a == attribute),
            "index projects {attribute}"
        );
    }
    // ...and not the recovery point, so committing one writes no index unit.
    assert!(
        index.projection.projection_type != "ALL"
            && !index
                .projection
                .non_key_attributes
                .iter()
                .any(|a| a == schema::CHECKPOINT),
        "the index must not hold the recovery point"
    );
    let orders = integration_tests::table_definition("OrdersTable").unwrap();
    assert_eq!(orders.billing_mode.as_deref(), Some("PAY_PER_REQUEST"));
    assert_eq!(orders.key_schema[0].attribute_name, "order_id");
}

/// A table whose requests go through a capacity proxy, and the proxy.
async fn metered_store() -> (
    DynamoStore,
    integration_tests::capacity_proxy::CapacityProxy,
) {
    use std::net::ToSocketAddrs;
    let endpoint = integration_tests::endpoint();
    let upstream = endpoint
        .trim_start_matches("http://")
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap();
    let proxy = integration_tests::capacity_proxy::CapacityProxy::start(upstream)
        .await
        .unwrap();
    let table = create_table(&integration_tests::client().await).await;
    let client = integration_tests::client_for(proxy.endpoint(), 3).await;
    (DynamoStore::builder(client, table).open().unwrap(), proxy)
}

/// A recovery point is one table write unit: the checkpoint is not one of
/// the sweep index's attributes, so committing it writes nothing there.
#[tokio::test]
async fn a_recovery_point_writes_no_index_unit() {
    let (store, proxy) = metered_store().await;
    let lease = crate::fixture::claim_lease(&store, "r", "o", 60_000).await;
    let before = proxy.units(store.table());
    let point = lambda_idempotency::store::Checkpoint {
        name: "charged".into(),
        data: serde_json::json!({"charge_id": "ch_1"}),
        attempt: lease.attempt,
    };
    store
        .checkpoint(CheckpointRequest::new(&lease, &point))
        .await
        .unwrap();
    let used = proxy.units(store.table()) - before;
    assert_eq!((used.table_write, used.index_write), (1.0, 0.0), "{used:?}");
}

/// Compression starts where it saves a write unit: a 1,000-byte JSON
/// response (half the entropy of random bytes, like typical API JSON) would
/// make a completed record of more than 1 KB, two write units; compressed it
/// fits in one. Metered on DynamoDB Local (consumed capacity) through the
/// capacity proxy.
#[tokio::test]
async fn a_compressible_kilobyte_response_completes_in_one_write_unit() {
    let (store, proxy) = metered_store().await;
    let table = store.table().to_owned();
    let hex: String = integration_tests::noise(940, 3)
        .iter()
        .map(|b| char::from_digit(u32::from(b % 16), 16).unwrap())
        .collect();
    let body = format!(r#"{{"customer_id":"cus_42","note":"{hex}"}}"#);
    assert!((950..1050).contains(&body.len()));
    let lease = crate::fixture::claim_lease(&store, "r", "o", 60_000).await;
    let before = proxy.units(&table);
    let response = lambda_idempotency::store::StoredResponse::new(
        201,
        vec![("content-type".into(), b"application/json".to_vec())],
        lambda_idempotency::store::StoredBody::Text(body.clone()),
    );
    crate::fixture::complete(&store, &lease, &response)
        .await
        .unwrap();
    let used = proxy.units(&table) - before;
    assert_eq!(used.table_write, 1.0, "{used:?}");
    // And it replays byte for byte.
    let found = store.get("r").await.unwrap().unwrap();
    assert_eq!(found.record.response, Some(response));
}

/// An item whose attempt count is at u64's largest (damaged, or written by
/// another tool): neither a takeover of its abandoned attempt nor a new life
/// after it expired can hand out the next fencing token, so the claim fails
/// as a corrupt record instead of overflowing (a panic in debug builds, a
/// token back at 0 in release ones) or storing a count no reader can parse,
/// and the item is left as it is. A completed one still replays.
#[tokio::test]
async fn a_claim_past_the_largest_attempt_count_is_a_corrupt_record() {
    let (store, _) = integration_tests::dynamo_store().await;
    // A lease that ended (a takeover), and a record that expired (a new life).
    for (id, expires_in_s) in [("max", 3600), ("expired-max", -5)] {
        crate::fixture::claim_expiring(&store, id, expires_in_s).await;
        set_largest_attempt(&store, id).await;
        crate::fixture::assert_no_next_attempt(&store, id).await;
        let item = scan_item(&store, id).await;
        assert_eq!(
            item[schema::ATTEMPT],
            AttributeValue::N(u64::MAX.to_string()),
            "{id}"
        );
        assert_eq!(item[schema::OWNER], AttributeValue::S("a".into()), "{id}");
    }
    let lease = crate::fixture::claim_expiring(&store, "done-max", 3600).await;
    let response = lambda_idempotency::store::StoredResponse::new(
        200,
        vec![],
        lambda_idempotency::store::StoredBody::Text("done".into()),
    );
    crate::fixture::complete(&store, &lease, &response)
        .await
        .unwrap();
    set_largest_attempt(&store, "done-max").await;
    crate::fixture::assert_found_at_largest_attempt(&store, "done-max", u64::MAX).await;
}

async fn set_largest_attempt(store: &DynamoStore, id: &str) {
    store
        .client()
        .update_item()
        .table_name(store.table())
        .key(schema::ID, AttributeValue::S(id.into()))
        .update_expression("SET #attempt = :max")
        .expression_attribute_names("#attempt", schema::ATTEMPT)
        .expression_attribute_values(":max", AttributeValue::N(u64::MAX.to_string()))
        .send()
        .await
        .unwrap();
}

/// The item `id` as stored, read without decoding it.
async fn scan_item(
    store: &DynamoStore,
    id: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    store
        .client()
        .get_item()
        .table_name(store.table())
        .key(schema::ID, AttributeValue::S(id.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the item is kept")
}
