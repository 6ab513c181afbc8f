//! Atomic phases: a recovery point committed in one transaction
//! with the rows the phase wrote (`IdempotencyContext::commit_with_writes`,
//! `Store::checkpoint` with deferred writes), fenced. On PostgreSQL (the handler's
//! SQL) and DynamoDB Local (`TransactWriteItem`s); stores without
//! transactions refuse the writes and write nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use lambda_http::{Body, Request, Response};
use lambda_idempotency::{
    scope::RecordScope,
    store::postgres::{PgType, PgWrite},
    store::{Checkpoint, CheckpointRequest, DeferredWrites, Status},
    ErrorKind, IdempotencyContext, IdempotencyLayer, MemoryStore, PostgresStore, Store,
};
use tower::{Layer, ServiceExt};

use crate::fixture::{claim_lease, dynamo_order_state, post, post_order, Runs};

/// An application's `orders` table on one engine, and the writes a phase
/// defers to it.
trait Orders: Clone + Send + Sync + 'static {
    /// A write of the engine's own kind.
    type Write: std::any::Any + Send + Sync;

    /// Insert order `id` in state `created`; breaks a constraint (cancelling
    /// its transaction) when the order exists.
    fn create(&self, id: &str) -> Self::Write;

    /// Set the state of order `id`, which must exist (else the transaction
    /// is cancelled).
    fn set_state(&self, id: &str, state: &str) -> Self::Write;

    /// The state of order `id`, `None` when absent.
    async fn state(&self, id: &str) -> Option<String>;
}

#[derive(Clone)]
struct PgOrders {
    store: PostgresStore,
    table: String,
}

impl PgOrders {
    async fn new() -> Self {
        let store = integration_tests::postgres_store().await;
        crate::postgres::create_orders(&store, &store).await;
        let table = crate::postgres::orders(&store);
        PgOrders { store, table }
    }
}

impl Orders for PgOrders {
    type Write = PgWrite;

    fn create(&self, id: &str) -> PgWrite {
        PgWrite::new(format!(
            "INSERT INTO {} (id, state) VALUES ($1, 'created')",
            self.table
        ))
        .bind(id.to_owned(), PgType::TEXT)
    }

    fn set_state(&self, id: &str, state: &str) -> PgWrite {
        PgWrite::new(format!(
            "UPDATE {} SET state = $2 WHERE id = $1",
            self.table
        ))
        .bind(id.to_owned(), PgType::TEXT)
        .bind(state.to_owned(), PgType::TEXT)
        .require_rows(1)
    }

    async fn state(&self, id: &str) -> Option<String> {
        let client = self.store.pool().get().await.unwrap();
        client
            .query_opt(
                &format!("SELECT state FROM {} WHERE id = $1", self.table),
                &[&id],
            )
            .await
            .unwrap()
            .map(|row| row.get("state"))
    }
}

#[derive(Clone)]
struct DynamoOrders {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoOrders {
    async fn new() -> (lambda_idempotency::DynamoStore, Self) {
        let (store, _) = integration_tests::dynamo_store().await;
        let client = store.client().clone();
        let table = integration_tests::orders_table(&client).await;
        (store, DynamoOrders { client, table })
    }
}

impl Orders for DynamoOrders {
    type Write = TransactWriteItem;

    fn create(&self, id: &str) -> TransactWriteItem {
        let put = Put::builder()
            .table_name(&self.table)
            .item("order_id", AttributeValue::S(id.into()))
            .item("state", AttributeValue::S("created".into()))
            .condition_expression("attribute_not_exists(order_id)")
            .build()
            .unwrap();
        TransactWriteItem::builder().put(put).build()
    }

    fn set_state(&self, id: &str, state: &str) -> TransactWriteItem {
        let update = Update::builder()
            .table_name(&self.table)
            .key("order_id", AttributeValue::S(id.into()))
            .update_expression("SET #state = :state")
            .condition_expression("attribute_exists(order_id)")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":state", AttributeValue::S(state.into()))
            .build()
            .unwrap();
        TransactWriteItem::builder().update(update).build()
    }

    async fn state(&self, id: &str) -> Option<String> {
        dynamo_order_state(&self.client, &self.table, id).await
    }
}

/// The recovery point stored on record `id` now.
async fn recovery_point(store: &impl Store, id: &str) -> Option<Checkpoint> {
    store.get(id).await.unwrap().unwrap().record.checkpoint
}

/// A handler in two phases: "created" (the order row, committed with its
/// recovery point), then the charge, completed with the row's new state.
/// While `crash` is set, its run stops for good after the first phase (the
/// test kills it, as a timeout does). Its body says where it started from.
fn two_phase_handler<O: Orders>(
    orders: O,
    runs: Runs,
    crash: Arc<AtomicBool>,
    started: tokio::sync::mpsc::Sender<()>,
) -> impl integration_tests::Handler {
    tower::service_fn(move |req: Request| {
        let (orders, runs, crash, started) =
            (orders.clone(), runs.clone(), crash.clone(), started.clone());
        async move {
            runs.bump();
            let ctx = IdempotencyContext::of(&req).ok_or("no context")?.clone();
            let resumed = ctx.recovery_point().map(|p| p.name.clone());
            if resumed.is_none() {
                ctx.defer_write(orders.create("o-1"))?;
                ctx.commit_with_writes("created", serde_json::json!({ "order": "o-1" }))
                    .await?;
                if crash.load(Ordering::SeqCst) {
                    let _ = started.send(()).await;
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
            }
            ctx.defer_write(orders.set_state("o-1", "charged"))?;
            let body = format!("resumed from {}", resumed.as_deref().unwrap_or("nothing"));
            Ok::<_, lambda_http::Error>(Response::builder().status(201).body(Body::from(body))?)
        }
    })
}

/// (a) The first phase's row and recovery point commit together; the run
/// dies; after its lease, the retry takes over, sees the recovery point and
/// the row, and goes on from there (redoing the insert would break the
/// order's key and cancel the completion).
async fn a_phase_survives_a_crash_and_the_retry_resumes_after_it<S, O>(store: S, orders: O)
where
    S: Store + Clone + 'static,
    O: Orders,
{
    let runs = Runs::default();
    let crash = Arc::new(AtomicBool::new(true));
    let (started_tx, mut started_rx) = tokio::sync::mpsc::channel(1);
    let svc = IdempotencyLayer::new(store.clone())
        .max_lease(Duration::from_millis(50))
        .layer(two_phase_handler(
            orders.clone(),
            runs.clone(),
            crash.clone(),
            started_tx,
        ));
    let id = RecordScope::new("POST", "/orders", "k1").record_id();

    let first = tokio::spawn(svc.clone().oneshot(post("/orders", Some("k1"), "{}")));
    tokio::time::timeout(Duration::from_secs(30), started_rx.recv())
        .await
        .expect("the first phase committed")
        .expect("the first phase committed");
    first.abort();
    assert_eq!(orders.state("o-1").await.as_deref(), Some("created"));
    let point = recovery_point(&store, &id)
        .await
        .expect("the recovery point committed with the row");
    assert_eq!(point.name, "created");
    assert_eq!(point.data["order"], "o-1");
    assert_eq!(point.attempt, 1);
    tokio::time::sleep(Duration::from_millis(100)).await;

    crash.store(false, Ordering::SeqCst);
    let retry = post_order(&svc, "k1").await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.body().as_ref(), b"resumed from created");
    assert_eq!(runs.count(), 2);
    assert_eq!(orders.state("o-1").await.as_deref(), Some("charged"));
    let record = store.get(&id).await.unwrap().unwrap().record;
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.attempt, 2, "the retry took the record over");
}

/// (b) A phase of an attempt whose record a newer attempt took over is
/// fenced: none of its rows and not its recovery point commit.
async fn a_stale_phase_is_fenced_and_commits_nothing<S, O>(store: S, orders: O)
where
    S: Store + 'static,
    O: Orders,
{
    let store = Arc::new(store);
    let stale = claim_lease(&store, "r", "a", 30).await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    let fresh = claim_lease(&store, "r", "b", 60_000).await;
    assert_eq!(fresh.attempt, 2);

    let ctx = IdempotencyContext::from_lease(store.clone(), stale);
    ctx.defer_write(orders.create("o-9")).unwrap();
    ctx.defer_write(orders.create("o-10")).unwrap();
    let err = ctx
        .commit_with_writes("created", serde_json::json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    assert_eq!(orders.state("o-9").await, None);
    assert_eq!(orders.state("o-10").await, None);
    assert_eq!(recovery_point(&*store, "r").await, None);
}

/// (c) A phase whose write breaks a constraint commits neither its other
/// rows nor its recovery point; the phase before it stands.
async fn a_phase_breaking_a_constraint_commits_nothing<S, O>(store: S, orders: O)
where
    S: Store + 'static,
    O: Orders,
{
    let store = Arc::new(store);
    let lease = claim_lease(&store, "r", "a", 60_000).await;
    let ctx = IdempotencyContext::from_lease(store.clone(), lease);
    ctx.defer_write(orders.create("o-1")).unwrap();
    ctx.commit_with_writes("first", serde_json::json!({ "n": 1 }))
        .await
        .unwrap();

    ctx.defer_write(orders.create("o-2")).unwrap();
    // o-1 exists: this insert breaks its key.
    ctx.defer_write(orders.create("o-1")).unwrap();
    let err = ctx
        .commit_with_writes("second", serde_json::json!({ "n": 2 }))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TransactionCancelled, "{err}");
    assert!(err.to_string().contains("recovery point `second`"), "{err}");
    assert_eq!(orders.state("o-2").await, None, "no partial write");
    assert_eq!(orders.state("o-1").await.as_deref(), Some("created"));
    let point = recovery_point(&*store, "r").await.unwrap();
    assert_eq!(
        (point.name.as_str(), &point.data),
        ("first", &serde_json::json!({ "n": 1 })),
        "the recovery point of the cancelled phase did not commit"
    );

    // The cancelled phase's writes are gone: the next phase commits without them.
    ctx.defer_write(orders.create("o-3")).unwrap();
    ctx.commit_with_writes("third", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(orders.state("o-2").await, None);
    assert_eq!(orders.state("o-3").await.as_deref(), Some("created"));
    assert_eq!(recovery_point(&*store, "r").await.unwrap().name, "third");
}

/// (e) Issue 25, item 1: a phase commits (its row and its recovery point),
/// then the handler fails: an `Err`, then on another key a `503`. The record
/// keeps the recovery point (its lease ended), so the client's immediate
/// retry resumes after the phase; the row is written once (re-running the
/// phase would break its key and cancel every later retry).
async fn a_failure_after_a_phase_keeps_it_and_the_retry_resumes<S, O>(store: S, orders: O)
where
    S: Store + Clone + 'static,
    O: Orders,
{
    for (key, order, answer_503) in [("k-err", "o-err", false), ("k-503", "o-503", true)] {
        let runs = Runs::default();
        let handler = {
            let (orders, runs) = (orders.clone(), runs.clone());
            tower::service_fn(move |req: Request| {
                let (orders, runs) = (orders.clone(), runs.clone());
                async move {
                    runs.bump();
                    let ctx = IdempotencyContext::of(&req).ok_or("no context")?.clone();
                    if let Some(point) = ctx.recovery_point() {
                        ctx.defer_write(orders.set_state(order, "charged"))?;
                        let body = format!("resumed from {}", point.name);
                        return Ok(Response::builder().status(201).body(Body::from(body))?);
                    }
                    ctx.defer_write(orders.create(order))?;
                    ctx.commit_with_writes("created", serde_json::json!({}))
                        .await?;
                    if answer_503 {
                        return Ok(Response::builder().status(503).body(Body::Empty)?);
                    }
                    Err::<Response<Body>, lambda_http::Error>("the provider timed out".into())
                }
            })
        };
        let svc = IdempotencyLayer::new(store.clone()).layer(handler);
        let first = svc.clone().oneshot(post("/orders", Some(key), "{}")).await;
        assert!(
            first.map_or(true, |r| r.status() == 503),
            "{key}: the first run failed"
        );
        assert_eq!(orders.state(order).await.as_deref(), Some("created"));

        let retry = post_order(&svc, key).await;
        assert_eq!(retry.status(), 201, "{key}: {:?}", retry.body());
        assert_eq!(retry.body().as_ref(), b"resumed from created");
        assert_eq!(orders.state(order).await.as_deref(), Some("charged"));
        assert_eq!(runs.count(), 2);
    }
}

#[tokio::test]
async fn postgres_a_failure_after_a_phase_keeps_it_and_the_retry_resumes() {
    let orders = PgOrders::new().await;
    a_failure_after_a_phase_keeps_it_and_the_retry_resumes(orders.store.clone(), orders).await;
}

#[tokio::test]
async fn dynamodb_a_failure_after_a_phase_keeps_it_and_the_retry_resumes() {
    let (store, orders) = DynamoOrders::new().await;
    a_failure_after_a_phase_keeps_it_and_the_retry_resumes(Arc::new(store), orders).await;
}

#[tokio::test]
async fn postgres_a_phase_survives_a_crash_and_the_retry_resumes_after_it() {
    let orders = PgOrders::new().await;
    a_phase_survives_a_crash_and_the_retry_resumes_after_it(orders.store.clone(), orders).await;
}

#[tokio::test]
async fn postgres_a_stale_phase_is_fenced_and_commits_nothing() {
    let orders = PgOrders::new().await;
    a_stale_phase_is_fenced_and_commits_nothing(orders.store.clone(), orders).await;
}

#[tokio::test]
async fn postgres_a_phase_breaking_a_unique_key_commits_nothing() {
    let orders = PgOrders::new().await;
    a_phase_breaking_a_constraint_commits_nothing(orders.store.clone(), orders).await;
}

#[tokio::test]
async fn postgres_a_phase_whose_write_changes_too_few_rows_commits_nothing() {
    let orders = PgOrders::new().await;
    let store = Arc::new(orders.store.clone());
    let lease = claim_lease(&store, "r", "a", 60_000).await;
    let ctx = IdempotencyContext::from_lease(store.clone(), lease);
    ctx.defer_write(orders.create("o-1")).unwrap();
    ctx.defer_write(orders.set_state("no-such-order", "paid"))
        .unwrap();
    let err = ctx
        .commit_with_writes("created", serde_json::json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TransactionCancelled, "{err}");
    assert!(err.to_string().contains("changed 0 row(s)"), "{err}");
    assert_eq!(orders.state("o-1").await, None);
    assert_eq!(recovery_point(&*store, "r").await, None);
}

#[tokio::test]
async fn dynamodb_a_phase_survives_a_crash_and_the_retry_resumes_after_it() {
    let (store, orders) = DynamoOrders::new().await;
    a_phase_survives_a_crash_and_the_retry_resumes_after_it(Arc::new(store), orders).await;
}

#[tokio::test]
async fn dynamodb_a_stale_phase_is_fenced_and_commits_nothing() {
    let (store, orders) = DynamoOrders::new().await;
    a_stale_phase_is_fenced_and_commits_nothing(store, orders).await;
}

#[tokio::test]
async fn dynamodb_a_phase_whose_condition_fails_commits_nothing() {
    let (store, orders) = DynamoOrders::new().await;
    a_phase_breaking_a_constraint_commits_nothing(store, orders).await;
}

/// (d) A store without transactions refuses a recovery point with writes
/// and writes nothing; without writes it is a plain recovery point.
async fn a_store_without_transactions_refuses_writes(store: impl Store) {
    let lease = claim_lease(&store, "r", "a", 60_000).await;
    let point = |name: &str| Checkpoint {
        name: name.into(),
        data: serde_json::json!({}),
        attempt: lease.attempt,
    };
    let mut writes = DeferredWrites::new();
    writes.push(PgWrite::new("INSERT INTO orders VALUES ('o-1')"));
    let err = store
        .checkpoint(CheckpointRequest::new(&lease, &point("created")).with_writes(writes))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(
        err.to_string()
            .contains("use a DynamoStore or a PostgresStore"),
        "{err}"
    );
    assert_eq!(recovery_point(&store, "r").await, None);

    store
        .checkpoint(
            CheckpointRequest::new(&lease, &point("plain")).with_writes(DeferredWrites::new()),
        )
        .await
        .unwrap();
    assert_eq!(recovery_point(&store, "r").await.unwrap().name, "plain");
}

#[tokio::test]
async fn memory_store_refuses_a_recovery_point_with_writes() {
    a_store_without_transactions_refuses_writes(MemoryStore::new()).await;
}

#[tokio::test]
async fn redis_store_refuses_a_recovery_point_with_writes() {
    a_store_without_transactions_refuses_writes(integration_tests::redis_store().await).await;
}
