//! Adopting an existing table (issue 19, item 1): single-table designs with a
//! composite key and renamed attributes (reserved words among them), shared
//! with another application's items, which nothing may list or touch. Two
//! layouts: Powertools' (a static partition, the record id in the sort key)
//! and prefixed keys (`IDEMPOTENCY#<id>`, a fixed sort key).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use lambda_http::{Body, Request, Response};
use lambda_idempotency::{
    http::REPLAYED_HEADER,
    scope::RecordScope,
    store::dynamodb::{schema, KeyValue, TableLayout},
    store::{
        Checkpoint, CheckpointRequest, ClaimOutcome, Status, StoredBody, StoredResponse,
        StuckRequest, SweepStore,
    },
    sweeper::{SweepPolicy, SweepSummary, Sweeper},
    DynamoStore, ErrorKind, IdempotencyContext, IdempotencyLayer, IdempotentEventLayer,
    IdempotentFunction, Store,
};
use lambda_runtime::LambdaEvent;
use serde_json::json;
use tower::{Layer, Service, ServiceExt};

use crate::fixture::{
    call, claim_lease, claim_request, counting_handler, json, now_ms, post, post_order,
    start_first, Handler, Runs,
};

type Item = HashMap<String, AttributeValue>;

fn s(text: &str) -> AttributeValue {
    AttributeValue::S(text.to_owned())
}

fn n(number: u64) -> AttributeValue {
    AttributeValue::N(number.to_string())
}

/// How the adopted table is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Powertools' `sort_key_attr` with `static_pk_value`, and its names.
    StaticPartition,
    /// `PK = IDEMPOTENCY#<record id>`, `SK = RECORD`.
    Prefixed,
}

/// The attribute names each shape gives the parts of a record.
struct Names {
    partition: &'static str,
    sort: &'static str,
    status: &'static str,
    expiry: &'static str,
    data: &'static str,
    response_status: &'static str,
    validation: &'static str,
    lease: &'static str,
    attempt: &'static str,
    owner: &'static str,
    checkpoint: &'static str,
    index: (&'static str, &'static str, &'static str),
}

impl Shape {
    fn names(self) -> Names {
        match self {
            // `state`, `ttl` and `data` are DynamoDB reserved words.
            Shape::StaticPartition => Names {
                partition: "pk",
                sort: "sk",
                status: "state",
                expiry: "ttl",
                data: "data",
                response_status: "result_status",
                validation: "validation",
                lease: "in_progress_expiry",
                attempt: "fence",
                owner: "holder",
                checkpoint: "resume_point",
                index: ("gsi1", "gsi1pk", "gsi1sk"),
            },
            // The status in `data`, another reserved word.
            Shape::Prefixed => Names {
                partition: "PK",
                sort: "SK",
                status: "data",
                expiry: "TTL",
                data: "body",
                response_status: "res_status",
                validation: "hash",
                lease: "lease_until",
                attempt: "version",
                owner: "lock_owner",
                checkpoint: "progress",
                index: ("GSI1", "GSI1PK", "GSI1SK"),
            },
        }
    }

    fn layout(self) -> TableLayout {
        let names = self.names();
        let layout = match self {
            Shape::StaticPartition => TableLayout::default()
                .key_attr(names.partition)
                .sort_key_attr(names.sort, "idempotency")
                .response_attrs("result_"),
            Shape::Prefixed => TableLayout::default()
                .partition_key(names.partition, KeyValue::prefixed("IDEMPOTENCY#"))
                .sort_key(names.sort, KeyValue::fixed("RECORD"))
                .response_attrs("res_"),
        };
        layout
            .status_attr(names.status)
            .expiry_attr(names.expiry)
            .data_attr(names.data)
            .validation_attr(names.validation)
            .in_progress_expiry_attr(names.lease)
            .attempt_attr(names.attempt)
            .owner_attr(names.owner)
            .checkpoint_attr(names.checkpoint)
            .sweep_index(names.index.0, names.index.1, names.index.2)
    }

    /// The other application's items: in the records' partition or key
    /// space where the shape allows it, some carrying the sweep index's
    /// attributes or looking like a stuck record under another key.
    fn foreign_items(self) -> Vec<Item> {
        let names = self.names();
        let (shard, at) = (names.index.1, names.index.2);
        let far = now_ms() / 1000 + 86_400;
        let stuck_looking = |pk: &str, sk: &str| -> Item {
            HashMap::from([
                (names.partition.to_owned(), s(pk)),
                (names.sort.to_owned(), s(sk)),
                (names.status.to_owned(), s("IN_PROGRESS")),
                (names.attempt.to_owned(), n(1)),
                (names.owner.to_owned(), s("someone")),
                (names.lease.to_owned(), n(1)),
                (names.validation.to_owned(), s("fp")),
                (names.expiry.to_owned(), n(far)),
                (shard.to_owned(), s("0")),
                (at.to_owned(), n(1)),
            ])
        };
        let plain = |pk: &str, sk: &str, extra: &[(&str, AttributeValue)]| -> Item {
            let mut item = HashMap::from([
                (names.partition.to_owned(), s(pk)),
                (names.sort.to_owned(), s(sk)),
            ]);
            for (name, value) in extra {
                item.insert((*name).to_owned(), value.clone());
            }
            item
        };
        let k1 = RecordScope::new("POST", "/orders", "k1").record_id();
        match self {
            Shape::StaticPartition => vec![
                // The records' own partition: not records (no status, or
                // another application's status), one in the sweep index.
                plain("idempotency", "order#1", &[("total", n(42))]),
                plain(
                    "idempotency",
                    "config",
                    &[
                        ("state", s("shipped")),
                        (names.attempt, n(3)),
                        (names.owner, s("ops")),
                        (shard, s("0")),
                        (at, n(1)),
                    ],
                ),
                // Another partition, under a record's id, looking stuck.
                stuck_looking("orders", &k1),
            ],
            Shape::Prefixed => vec![
                // Another prefix, the records' sort key, looking stuck.
                stuck_looking("ORDER#1", "RECORD"),
                // The records' prefix, another sort key.
                plain(&format!("IDEMPOTENCY#{k1}"), "META", &[("note", s("mine"))]),
                plain("CUSTOMER#7", "PROFILE", &[("name", s("Ada"))]),
            ],
        }
    }

    /// Foreign items a listing of the records reads and skips: those in the
    /// static partition a Query reads (a Scan's filter drops the others
    /// before they come back).
    fn foreign_items_read_by_scan(self) -> u64 {
        match self {
            Shape::StaticPartition => 2,
            Shape::Prefixed => 0,
        }
    }

    /// The key of a business item the handler writes into the same table.
    fn order_key(self, order_id: &str) -> Item {
        let names = self.names();
        let (pk, sk) = match self {
            Shape::StaticPartition => ("orders".to_owned(), order_id.to_owned()),
            Shape::Prefixed => (format!("ORDER#{order_id}"), "RECORD".to_owned()),
        };
        HashMap::from([
            (names.partition.to_owned(), s(&pk)),
            (names.sort.to_owned(), s(&sk)),
        ])
    }

    /// Is `item` one of the sweeper's stream positions, keyed as this
    /// layout keys a record?
    fn is_position(self, item: &Item) -> bool {
        let names = self.names();
        let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let (pk, sk) = (text(names.partition), text(names.sort));
        match self {
            Shape::StaticPartition => {
                pk.as_deref() == Some("idempotency")
                    && sk.is_some_and(|sk| sk.starts_with("~sweeper/stream/"))
            }
            Shape::Prefixed => {
                pk.is_some_and(|pk| pk.starts_with("IDEMPOTENCY#~sweeper/stream/"))
                    && sk.as_deref() == Some("RECORD")
            }
        }
    }
}

/// A fresh table shaped as `shape`, the other application's items in it, and
/// a store on it with the shape's layout.
async fn adopted(shape: Shape) -> (DynamoStore, Vec<Item>) {
    let client = integration_tests::client().await;
    let names = shape.names();
    let projected = [
        names.status,
        names.attempt,
        names.owner,
        names.lease,
        names.validation,
        names.expiry,
    ];
    let table = integration_tests::create_custom_table(
        &client,
        integration_tests::CustomTable {
            partition: names.partition,
            sort: Some(names.sort),
            index: Some((names.index.0, names.index.1, names.index.2, &projected)),
            ttl: names.expiry,
        },
    )
    .await;
    let foreign = shape.foreign_items();
    for item in &foreign {
        client
            .put_item()
            .table_name(&table)
            .set_item(Some(item.clone()))
            .send()
            .await
            .unwrap();
    }
    let store = DynamoStore::builder(client, table)
        .with_layout(shape.layout())
        .open()
        .unwrap();
    (store, foreign)
}

/// The table's item under `key`, as stored now.
async fn item_at(store: &DynamoStore, key: Item) -> Option<Item> {
    integration_tests::consistent_item(store.client(), store.table(), key).await
}

/// The item of record `id`.
async fn raw(store: &DynamoStore, id: &str) -> Option<Item> {
    item_at(store, store.layout().key(id)).await
}

/// Every foreign item is still there, attribute for attribute as written.
async fn foreign_untouched(store: &DynamoStore, shape: Shape, foreign: &[Item]) {
    let names = shape.names();
    for item in foreign {
        let key = HashMap::from([
            (names.partition.to_owned(), item[names.partition].clone()),
            (names.sort.to_owned(), item[names.sort].clone()),
        ]);
        assert_eq!(
            item_at(store, key).await.as_ref(),
            Some(item),
            "a foreign item changed"
        );
    }
}

/// The ids `SweepStore::scan` lists (every page), and how many items it skipped.
async fn scanned(store: &DynamoStore) -> (BTreeSet<String>, u64) {
    let mut ids = BTreeSet::new();
    let mut skipped = 0;
    let mut cursor = None;
    loop {
        // Small pages, so the cursor of a composite key is exercised.
        let page = store.scan(cursor, 2).await.unwrap();
        skipped += page.skipped;
        for record in page.records {
            assert!(ids.insert(record.record.id.clone()), "listed twice");
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return (ids, skipped),
        }
    }
}

/// A record id as the middleware makes it.
fn hashed(key: &str) -> String {
    RecordScope::new("POST", "/orders", key).record_id()
}

// Each test once per layout.
crate::fixture::test_cases!(
    2,
    [
        static_partition => super::Shape::StaticPartition,
        prefixed => super::Shape::Prefixed,
    ],
    [
        the_http_contract_and_functions_keep_to_their_layout,
        a_recovery_point_a_takeover_and_a_transactional_completion,
        the_sweeper_finds_records_through_the_stream,
        the_sweeper_finds_records_through_the_index,
    ]
);

/// 500 on its first run, 201 after.
fn failing_once(runs: Runs) -> impl Handler {
    tower::service_fn(move |_req: Request| {
        let run = runs.bump();
        async move {
            Ok(Response::builder()
                .status(if run == 1 { 500 } else { 201 })
                .body(Body::from(format!("run {run}")))?)
        }
    })
}

async fn the_http_contract_and_functions_keep_to_their_layout(shape: Shape) {
    let (store, foreign) = adopted(shape).await;
    let names = shape.names();
    let runs = Runs::default();
    let svc = IdempotencyLayer::new(store.clone())
        .layer(counting_handler(runs.clone(), Duration::from_millis(300)));

    // First execution, then a replay.
    let first = call(&mut svc.clone(), post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    assert_eq!(first.status(), 201);
    let replay = call(&mut svc.clone(), post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(json(&replay), json(&first));
    assert_eq!(runs.count(), 1);
    // The same key with another request.
    let mismatch = call(&mut svc.clone(), post("/orders", Some("k1"), r#"{"a":2}"#)).await;
    assert_eq!(mismatch.status(), 422);
    // The same key while its first request runs (counted apart, so the
    // first is known to run before the second is sent).
    let slow_runs = Runs::default();
    let slow = IdempotencyLayer::new(store.clone()).layer(counting_handler(
        slow_runs.clone(),
        Duration::from_millis(300),
    ));
    let running = start_first(&slow, post("/orders", Some("k2"), "{}"), &slow_runs).await;
    let conflict = call(&mut slow.clone(), post("/orders", Some("k2"), "{}")).await;
    assert_eq!(conflict.status(), 409);
    assert_eq!(running.await.unwrap().status(), 201);
    assert_eq!(slow_runs.count(), 1);

    // A 5xx releases the key: the retry runs again.
    let failing_runs = Runs::default();
    let failing = IdempotencyLayer::new(store.clone()).layer(failing_once(failing_runs.clone()));
    let failed = call(&mut failing.clone(), post("/orders", Some("k3"), "{}")).await;
    assert_eq!(failed.status(), 500);
    assert!(
        store.get(&hashed("k3")).await.unwrap().is_none(),
        "released"
    );
    let retried = call(&mut failing.clone(), post("/orders", Some("k3"), "{}")).await;
    assert_eq!(retried.status(), 201);
    assert!(retried.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(failing_runs.count(), 2);

    // An async function's records, in the same table.
    let function_runs = Runs::default();
    let function = IdempotentFunction::new(store.clone(), "consumer").key_pointers(["/event_id"]);
    let function_id = function.record_id("e1");
    let mut consumer = IdempotentEventLayer::new(function).layer(lambda_runtime::service_fn({
        let runs = function_runs.clone();
        move |event: LambdaEvent<serde_json::Value>| {
            let run = runs.bump();
            async move {
                Ok::<_, lambda_runtime::Error>(json!({"run": run, "order": event.payload["order"]}))
            }
        }
    }));
    let mut outputs = Vec::new();
    for request_id in ["req-1", "req-2"] {
        let mut context = lambda_runtime::Context::default();
        context.request_id = request_id.into();
        context.deadline = now_ms() + 30_000;
        let event = LambdaEvent::new(json!({"event_id": "e1", "order": "o1"}), context);
        outputs.push(consumer.ready().await.unwrap().call(event).await.unwrap());
    }
    assert_eq!(outputs[0], outputs[1], "the second delivery replays");
    assert_eq!(function_runs.count(), 1);

    // Every part of a record under the layout's names, none under the
    // defaults (so a reserved word as a name works too).
    let k1 = raw(&store, &hashed("k1")).await.expect("k1's item");
    assert_eq!(k1[names.status], s("COMPLETED"));
    assert_eq!(k1[names.response_status], n(201));
    assert!(
        k1[names.data].as_b().is_ok(),
        "the body in the data attribute"
    );
    for name in [
        names.expiry,
        names.validation,
        names.attempt,
        names.owner,
        names.lease,
    ] {
        assert!(k1.contains_key(name), "{name}");
    }
    for default in [
        schema::ID,
        schema::STATUS,
        schema::EXPIRES_AT,
        schema::FINGERPRINT,
        schema::ATTEMPT,
        schema::OWNER,
        schema::LEASE_EXPIRES_AT,
        schema::RESPONSE_BODY,
        schema::RESPONSE_STATUS,
    ] {
        assert!(!k1.contains_key(default), "{default} written");
    }

    // SweepStore::get and SweepStore::scan see the records, and only them.
    let got = store.get(&hashed("k1")).await.unwrap().expect("k1");
    assert_eq!(got.record.status, Status::Completed);
    assert_eq!(got.record.response.map(|r| r.status), Some(201));
    let function_record = store.get(&function_id).await.unwrap().expect("e1");
    assert_eq!(function_record.record.status, Status::Completed);
    let expected: BTreeSet<String> = [hashed("k1"), hashed("k2"), hashed("k3"), function_id]
        .into_iter()
        .collect();
    let (ids, skipped) = scanned(&store).await;
    assert_eq!(ids, expected);
    assert_eq!(skipped, shape.foreign_items_read_by_scan());
    foreign_untouched(&store, shape, &foreign).await;
}

/// A handler that defers one write of a business item into the same table.
fn ordering_handler(store: DynamoStore, order: Item) -> impl Handler {
    tower::service_fn(move |req: Request| {
        let (table, order) = (store.table().to_owned(), order.clone());
        let partition = store.layout().partition_key_name().to_owned();
        async move {
            let ctx = IdempotencyContext::of(&req).ok_or("no context")?;
            let mut put = Put::builder()
                .table_name(table)
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", partition)
                .item("total", n(42));
            for (name, value) in order {
                put = put.item(name, value);
            }
            ctx.defer_write(TransactWriteItem::builder().put(put.build()?).build())?;
            Ok::<_, lambda_http::Error>(
                Response::builder()
                    .status(201)
                    .body(Body::from("ordered"))?,
            )
        }
    })
}

async fn a_recovery_point_a_takeover_and_a_transactional_completion(shape: Shape) {
    let (store, foreign) = adopted(shape).await;
    let names = shape.names();

    // A recovery point, then a takeover that resumes from it.
    let id = hashed("resumable");
    let stale = claim_lease(&store, &id, "first", 1).await;
    let point = Checkpoint {
        name: "charged".into(),
        data: json!({"charge_id": "ch_1"}),
        attempt: stale.attempt,
    };
    store
        .checkpoint(CheckpointRequest::new(&stale, &point))
        .await
        .unwrap();
    assert!(raw(&store, &id)
        .await
        .unwrap()
        .contains_key(names.checkpoint));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let lease = match store
        .claim(&claim_request(&id, "retry", 60_000))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed(lease) => lease,
        other => panic!("takeover: {other:?}"),
    };
    assert_eq!(lease.attempt, 2);
    assert_eq!(
        lease.recovered.as_ref().map(|c| c.name.as_str()),
        Some("charged")
    );
    // The stale attempt is fenced out.
    let response = StoredResponse::new(200, vec![], StoredBody::Text("done".into()));
    let err = crate::fixture::complete(&store, &stale, &response)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let err = store.release(&stale).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    crate::fixture::complete(&store, &lease, &response)
        .await
        .unwrap();
    let done = raw(&store, &id).await.unwrap();
    assert_eq!(done[names.status], s("COMPLETED"));
    assert!(!done.contains_key(names.checkpoint));

    // A transactional completion writes the business item with the record.
    let order = shape.order_key("o-1");
    let svc =
        IdempotencyLayer::new(store.clone()).layer(ordering_handler(store.clone(), order.clone()));
    let first = post_order(&svc, "o-1").await;
    assert_eq!(first.status(), 201);
    let written = item_at(&store, order.clone())
        .await
        .expect("the order was written");
    assert_eq!(written["total"], n(42));
    let replay = post_order(&svc, "o-1").await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(
        raw(&store, &hashed("o-1")).await.unwrap()[names.status],
        s("COMPLETED")
    );

    // The business item is not a record either.
    let (ids, _) = scanned(&store).await;
    assert_eq!(ids, [id, hashed("o-1")].into_iter().collect());
    foreign_untouched(&store, shape, &foreign).await;
}

/// How the sweeper finds stuck records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Discovery {
    Stream,
    Index,
}

async fn the_sweeper_finds_records_through_the_stream(shape: Shape) {
    sweeps(shape, Discovery::Stream).await
}

async fn the_sweeper_finds_records_through_the_index(shape: Shape) {
    sweeps(shape, Discovery::Index).await
}

async fn sweep_now(store: &DynamoStore, policy: SweepPolicy) -> SweepSummary {
    Sweeper::new(store.clone())
        .policy(policy)
        .grace(Duration::ZERO)
        .page_size(4)
        .sweep(None)
        .await
}

/// Claim `id` with a lease of `lease_ms`.
async fn claim(store: &DynamoStore, id: &str, lease_ms: u64) -> lambda_idempotency::store::Lease {
    claim_lease(store, id, &format!("owner-{id}"), lease_ms).await
}

async fn sweeps(shape: Shape, discovery: Discovery) {
    let (store, foreign) = adopted(shape).await;
    let store = match discovery {
        Discovery::Stream => integration_tests::dynamo_builder_like(&store)
            .with_stream(integration_tests::streams_client().await)
            .open()
            .unwrap(),
        Discovery::Index => integration_tests::dynamo_builder_like(&store)
            .with_sweep_index()
            .open()
            .unwrap(),
    };
    let names = shape.names();
    let stuck: BTreeSet<String> = (0..6).map(|i| hashed(&format!("stuck-{i}"))).collect();
    for id in &stuck {
        claim(&store, id, 1).await;
    }
    let (done, live) = (hashed("completed"), hashed("live"));
    let lease = claim(&store, &done, 1).await;
    let response = StoredResponse::new(200, vec![], StoredBody::Empty);
    crate::fixture::complete(&store, &lease, &response)
        .await
        .unwrap();
    claim(&store, &live, 600_000).await;
    tokio::time::sleep(Duration::from_millis(20)).await;

    // The listing holds the stuck records and nothing else (the foreign
    // items that look stuck, or sit in the index, least of all).
    let mut listed = BTreeSet::new();
    let mut cursor = None;
    loop {
        let page = store
            .stuck(StuckRequest::new(now_ms(), 3).at(cursor))
            .await
            .unwrap();
        assert_eq!(page.failed_reads, 0);
        listed.extend(page.records.into_iter().map(|r| r.id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(listed, stuck);

    let released = sweep_now(&store, SweepPolicy::Release).await;
    assert_eq!(
        (released.found, released.released, released.errors),
        (6, 6, 0),
        "{released:?}"
    );
    for id in &stuck {
        assert!(raw(&store, id).await.is_none(), "{id} released");
    }
    assert_eq!(
        raw(&store, &done).await.unwrap()[names.status],
        s("COMPLETED")
    );
    let live_item = raw(&store, &live).await.unwrap();
    assert_eq!(live_item[names.status], s("IN_PROGRESS"));
    assert_eq!(live_item[names.owner], s(&format!("owner-{live}")));

    // A record with a recovery point is left for its retry, then failed.
    let resumable = hashed("resumable");
    let lease = claim(&store, &resumable, 1).await;
    let point = Checkpoint {
        name: "charged".into(),
        data: json!({}),
        attempt: lease.attempt,
    };
    store
        .checkpoint(CheckpointRequest::new(&lease, &point))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let kept = sweep_now(&store, SweepPolicy::Release).await;
    assert_eq!(
        (kept.found, kept.resumable, kept.released, kept.errors),
        (1, 1, 0, 0),
        "{kept:?}"
    );
    let failed = sweep_now(&store, SweepPolicy::Fail).await;
    assert_eq!(
        (failed.found, failed.failed, failed.errors),
        (1, 1, 0),
        "{failed:?}"
    );
    let failed_item = raw(&store, &resumable).await.unwrap();
    assert_eq!(failed_item[names.status], s("COMPLETED"));
    assert_eq!(failed_item[names.response_status], n(500));
    assert!(!failed_item.contains_key(names.checkpoint));
    if discovery == Discovery::Index {
        assert!(!failed_item.contains_key(names.index.1), "out of the index");
    }
    let last = sweep_now(&store, SweepPolicy::Release).await;
    assert_eq!((last.found, last.errors), (0, 0), "{last:?}");

    // The stream's positions are kept under the layout's key, and no
    // listing of records shows them.
    let items = store
        .client()
        .scan()
        .table_name(store.table())
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    let positions = items.iter().filter(|item| shape.is_position(item)).count();
    match discovery {
        Discovery::Stream => assert!(positions >= 1, "no position saved"),
        Discovery::Index => assert_eq!(positions, 0),
    }
    let (ids, _) = scanned(&store).await;
    assert_eq!(ids, [done, live, resumable].into_iter().collect());
    foreign_untouched(&store, shape, &foreign).await;
}
