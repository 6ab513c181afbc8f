//! What only the PostgreSQL store has or shows: transactional completion
//! with the handler's own SQL, schema creation, an unreachable server, the
//! clean-up of expired rows and the sweeper on its partial index. The
//! behaviour suites run on it through `on_both_stores!` too.

use std::sync::Arc;
use std::time::Duration;

use integration_tests::one_write;
use lambda_http::{Body, Request, Response};
use lambda_idempotency::{
    http::REPLAYED_HEADER,
    problem,
    store::postgres::{PgType, PgWrite},
    store::{
        CheckpointRequest, ClaimOutcome, CompleteRequest, Completion, DeferredWrites, Lease,
        Resolution, Status, StoredBody, StoredResponse, StuckRequest, SweepStore,
    },
    sweeper::{SweepPolicy, Sweeper},
    ErrorKind, IdempotencyContext, IdempotencyLayer, PostgresStore, Store,
};
use tower::{Layer, ServiceExt};

use crate::fixture::{
    assert_failed_key_replays_abandoned, call, claim_lease, claim_request, claimed,
    counting_handler, json, now_ms, one_phase_handler, post, post_order, Runs,
};

/// A fresh store and an `orders` table of the application's beside it.
async fn store_with_orders() -> PostgresStore {
    let store = integration_tests::postgres_store().await;
    create_orders(&store, &store).await;
    store
}

/// Create the application's `orders` table beside `store`'s records through
/// `admin`: the store itself, or a direct connection where the store's own
/// go through a proxy. Its name: [`orders`].
pub(crate) async fn create_orders(admin: &PostgresStore, store: &PostgresStore) {
    admin
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(&format!(
            "CREATE TABLE {} (id text PRIMARY KEY, state text NOT NULL)",
            orders(store)
        ))
        .await
        .unwrap();
}

/// How many rows `table` holds, counted through `admin`.
/// Unnamed statements (`query_typed`), as the store's own: under PgBouncer's
/// transaction pooling a named statement prepared on one server connection
/// is not on the next ("prepared statement \"s14\" does not exist").
async fn row_count(admin: &PostgresStore, table: &str) -> i64 {
    let client = admin.pool().get().await.unwrap();
    client
        .query_typed(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .first()
        .expect("count(*) returns one row")
        .get(0)
}

/// The application's `orders` table beside `store`'s records, in its schema.
pub(crate) fn orders(store: &PostgresStore) -> String {
    store.table().replace("idempotency_records", "orders")
}

async fn order_state(store: &PostgresStore, id: &str) -> Option<String> {
    let client = store.pool().get().await.unwrap();
    client
        .query_typed(
            &format!("SELECT state FROM {} WHERE id = $1", orders(store)),
            &[(&id, PgType::TEXT)],
        )
        .await
        .unwrap()
        .first()
        .map(|row| row.get("state"))
}

fn insert_order(store: &PostgresStore, id: &str) -> PgWrite {
    PgWrite::new(format!(
        "INSERT INTO {} (id, state) VALUES ($1, 'created')",
        orders(store)
    ))
    .bind(id.to_owned(), PgType::TEXT)
}

/// `lease`'s completion with an empty 201 kept for a minute, and `writes`
/// in its transaction.
async fn complete_201_with(
    store: &PostgresStore,
    lease: &Lease,
    writes: DeferredWrites,
) -> Result<Completion, lambda_idempotency::Error> {
    store
        .complete(
            CompleteRequest::new(
                lease,
                &StoredResponse::new(201, vec![], StoredBody::Empty),
                now_ms() / 1000 + 60,
            )
            .with_writes(writes),
        )
        .await
}

/// A handler that writes its order row through the completion's transaction.
fn transactional_handler(
    store: &PostgresStore,
    order_id: &'static str,
    runs: Runs,
) -> impl integration_tests::Handler {
    let store = store.clone();
    tower::service_fn(move |req: Request| {
        let (store, runs) = (store.clone(), runs.clone());
        async move {
            runs.bump();
            let ctx = IdempotencyContext::of(&req).ok_or("no context")?;
            ctx.defer_write(insert_order(&store, order_id))?;
            Ok::<_, lambda_http::Error>(Response::builder().status(201).body(Body::from(order_id))?)
        }
    })
}

fn record_id(key: &str) -> String {
    lambda_idempotency::scope::RecordScope::new("POST", "/orders", key).record_id()
}

#[tokio::test]
async fn the_handlers_row_commits_with_the_completion() {
    let store = store_with_orders().await;
    let runs = Runs::default();
    let svc = IdempotencyLayer::new(store.clone()).layer(transactional_handler(
        &store,
        "o-1",
        runs.clone(),
    ));
    let before = store.round_trips();
    let first = post_order(&svc, "k1").await;
    assert_eq!(first.status(), 201);
    assert_eq!(
        store.round_trips() - before,
        5,
        "claim, then BEGIN, the fenced completion, the handler's insert, COMMIT"
    );
    assert_eq!(order_state(&store, "o-1").await.as_deref(), Some("created"));
    let record = store.get(&record_id("k1")).await.unwrap().unwrap().record;
    assert_eq!(record.status, Status::Completed);

    let replay = post_order(&svc, "k1").await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 1);
}

#[tokio::test]
async fn a_failing_statement_rolls_everything_back_and_releases_the_key() {
    let store = store_with_orders().await;
    // The order exists already: the handler's insert violates the key.
    let client = store.pool().get().await.unwrap();
    client
        .execute(
            &format!(
                "INSERT INTO {} (id, state) VALUES ('o-1', 'pre-existing')",
                orders(&store)
            ),
            &[],
        )
        .await
        .unwrap();
    let runs = Runs::default();
    let svc = IdempotencyLayer::new(store.clone()).layer(transactional_handler(
        &store,
        "o-1",
        runs.clone(),
    ));
    let res = post_order(&svc, "k1").await;
    assert_eq!(res.status(), 409);
    assert_eq!(json(&res)["type"], problem::TRANSACTION_CANCELLED.uri);
    let detail = json(&res)["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("23505"), "the unique violation: {detail}");
    assert_eq!(
        order_state(&store, "o-1").await.as_deref(),
        Some("pre-existing"),
        "no partial write"
    );
    assert!(
        store.get(&record_id("k1")).await.unwrap().is_none(),
        "the record was released, not completed"
    );
    // The next try runs again (and is cancelled again), never a 409 in progress.
    let again = post_order(&svc, "k1").await;
    assert_eq!(json(&again)["type"], problem::TRANSACTION_CANCELLED.uri);
    assert_eq!(runs.count(), 2);
}

#[tokio::test]
async fn a_write_that_changes_too_few_rows_cancels_the_completion() {
    let store = store_with_orders().await;
    let lease = claim_lease(&store, "r", "a", 60_000).await;
    let mut writes = DeferredWrites::new();
    writes.push(insert_order(&store, "o-1"));
    writes.push(
        PgWrite::new(format!(
            "UPDATE {} SET state = 'paid' WHERE id = $1",
            orders(&store)
        ))
        .bind("no-such-order".to_owned(), PgType::TEXT)
        .require_rows(1),
    );
    let err = complete_201_with(&store, &lease, writes).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TransactionCancelled);
    assert!(err.to_string().contains("changed 0 row(s)"), "{err}");
    assert_eq!(
        order_state(&store, "o-1").await,
        None,
        "the insert rolled back"
    );
    let record = store.get("r").await.unwrap().unwrap().record;
    assert_eq!(
        record.status,
        Status::InProgress,
        "the completion rolled back"
    );
}

#[tokio::test]
async fn a_statement_the_server_cannot_run_is_rejected_and_releases_the_key() {
    let store = store_with_orders().await;
    let runs = Runs::default();
    let svc = IdempotencyLayer::new(store.clone()).layer(tower::service_fn({
        let runs = runs.clone();
        move |req: Request| {
            let runs = runs.clone();
            async move {
                runs.bump();
                let ctx = IdempotencyContext::of(&req).ok_or("no context")?;
                ctx.defer_write(PgWrite::new("INSERT INTO no_such_table VALUES (1)"))?;
                Ok::<_, lambda_http::Error>(Response::builder().status(201).body(Body::Empty)?)
            }
        }
    }));
    let res = post_order(&svc, "k1").await;
    assert_eq!(json(&res)["type"], problem::TRANSACTION_REJECTED.uri);
    assert!(store.get(&record_id("k1")).await.unwrap().is_none());
    let again = post_order(&svc, "k1").await;
    assert_eq!(json(&again)["type"], problem::TRANSACTION_REJECTED.uri);
    assert_eq!(runs.count(), 2, "released: the retry ran again");
}

#[tokio::test]
async fn a_transactional_completion_by_a_stale_attempt_is_fenced_and_writes_nothing() {
    let store = store_with_orders().await;
    let stale = claim_lease(&store, "r", "a", 30).await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    let fresh = claim_lease(&store, "r", "b", 60_000).await;
    assert_eq!(fresh.attempt, 2);
    let err = complete_201_with(&store, &stale, one_write(insert_order(&store, "o-9")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    assert_eq!(order_state(&store, "o-9").await, None);
    let record = store.get("r").await.unwrap().unwrap().record;
    assert_eq!(
        (record.status, record.owner.as_str()),
        (Status::InProgress, "b")
    );
}

/// A completion, plain or transactional, that waits for the record's row
/// while an operator's session deletes it (`release --force`) says the
/// record is gone once the delete commits, as it does when the row was
/// gone before it started: not fenced (no newer attempt holds it, none will
/// replay), and nothing of it is written. Directly and through PgBouncer.
#[tokio::test]
async fn a_completion_waiting_on_a_row_deleted_meanwhile_says_the_record_is_gone() {
    let direct = PostgresStore::builder(integration_tests::postgres_url())
        .open()
        .unwrap();
    for url in [
        integration_tests::postgres_url(),
        integration_tests::postgres_pooler_url(),
    ] {
        let store = integration_tests::postgres_store_at(&url).await;
        create_orders(&direct, &store).await;
        for transactional in [false, true] {
            let id = format!("r-{transactional}");
            let lease = claim_lease(&store, &id, "a", 600_000).await;
            let deleter = direct.pool().get().await.unwrap();
            deleter.batch_execute("BEGIN").await.unwrap();
            deleter
                .execute(
                    &format!("DELETE FROM {} WHERE id = $1", store.table()),
                    &[&id],
                )
                .await
                .unwrap();
            let writes = if transactional {
                one_write(insert_order(&store, &id))
            } else {
                DeferredWrites::new()
            };
            let completion = tokio::spawn({
                let store = store.clone();
                async move { complete_201_with(&store, &lease, writes).await }
            });
            wait_for_a_lock_on(&direct, &store).await;
            deleter.batch_execute("COMMIT").await.unwrap();
            let err = completion.await.unwrap().unwrap_err();
            assert_eq!(
                err.kind(),
                ErrorKind::RecordGone,
                "{url}, transactional {transactional}: {err}"
            );
            assert_eq!(order_state(&store, &id).await, None, "nothing committed");
            assert!(store.get(&id).await.unwrap().is_none());
        }
    }
}

/// Wait until a statement on `store`'s table waits for a row lock, as seen
/// by the server (`pg_stat_activity`, read through `admin`); panics after
/// two seconds (the store's lock timeout is three).
async fn wait_for_a_lock_on(admin: &PostgresStore, store: &PostgresStore) {
    let client = admin.pool().get().await.unwrap();
    let pattern = format!("%{}%", store.table());
    for _ in 0..200 {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE $1",
                &[&pattern],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no statement on {} waited for the row lock", store.table());
}

#[tokio::test]
async fn writes_of_another_stores_kind_are_refused_before_anything_runs() {
    let store = store_with_orders().await;
    let lease = claim_lease(&store, "r", "a", 60_000).await;
    let mut writes = DeferredWrites::new();
    writes.push("INSERT INTO orders VALUES ('x', 'y')");
    let err = complete_201_with(&store, &lease, writes).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(err.to_string().contains("PgWrite"), "{err}");
}

#[tokio::test]
async fn eight_cold_starts_migrating_an_empty_database_at_once_all_succeed() {
    let url = integration_tests::postgres_fresh_database().await;
    for schema in ["public", "idempotency"] {
        let stores: Vec<PostgresStore> = (0..8)
            .map(|_| {
                PostgresStore::builder(&url)
                    .with_schema(schema)
                    .open()
                    .unwrap()
            })
            .collect();
        assert_eq!(
            stores[0].check_schema().await.unwrap_err().kind(),
            ErrorKind::InvalidConfig,
            "{schema}: empty before"
        );
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let tasks: Vec<_> = stores
            .iter()
            .cloned()
            .map(|store| {
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.migrate().await
                })
            })
            .collect();
        for task in tasks {
            task.await
                .unwrap()
                .unwrap_or_else(|e| panic!("{schema}: {e}"));
        }
        stores[0].check_schema().await.unwrap();
        let lease = claimed(
            stores[7]
                .claim(&claim_request("r", "a", 60_000))
                .await
                .unwrap(),
        );
        assert_eq!(lease.attempt, 1, "{schema}");
        // Running it again changes nothing.
        stores[3].migrate().await.unwrap();
        assert!(stores[3].get("r").await.unwrap().is_some(), "{schema}");
    }
}

#[tokio::test]
async fn a_missing_schema_fails_with_what_to_do() {
    let store = PostgresStore::builder(integration_tests::postgres_url())
        .with_schema("never_migrated")
        .open()
        .unwrap();
    let err = store.check_schema().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    let message = err.to_string();
    assert!(
        message.contains("run migrate") && message.contains("IDEMPOTENCY_CREATE_SCHEMA=1"),
        "{message}"
    );
    assert!(message.contains("never_migrated"), "{message}");
    // A request that reaches the store anyway says the same.
    let err = store
        .claim(&claim_request("r", "a", 60_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(err.to_string().contains("run migrate"), "{err}");
}

#[tokio::test]
async fn an_unreachable_server_is_503_and_the_handler_never_runs() {
    // A port nothing listens on: connection refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let store = PostgresStore::builder(format!(
        "postgres://app:hunter2@127.0.0.1:{port}/orders?sslmode=disable"
    ))
    .open()
    .unwrap();
    let err = store
        .claim(&claim_request("r", "a", 60_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
    let message = err.to_string();
    assert!(
        message.contains(&format!("127.0.0.1:{port}/orders as app")),
        "names the server: {message}"
    );
    assert!(
        !message.contains("hunter2"),
        "never the password: {message}"
    );

    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(store)
        .unavailable_retry_after(Duration::from_secs(3))
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let res = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "3");
    assert_eq!(json(&res)["type"], problem::STORE_UNAVAILABLE.uri);
    assert_eq!(runs.count(), 0, "fail closed: no claim, no execution");
}

/// Claim `count` records (`old-0`, `old-1`, ...) that expired ten seconds
/// ago; returns the clock they expired by.
async fn claim_expired(store: &PostgresStore, count: usize) -> u64 {
    let now = now_ms();
    for i in 0..count {
        let mut request = claim_request(&format!("old-{i}"), "a", 60_000);
        request.expires_at_s = now / 1000 - 10;
        claimed(store.claim(&request).await.unwrap());
    }
    now
}

#[tokio::test]
async fn expired_rows_are_deleted_in_bounded_batches_and_live_ones_kept() {
    let store = integration_tests::postgres_store().await;
    let now = claim_expired(&store, 5).await;
    let live = claim_lease(&store, "live", "a", 60_000).await;
    let response = StoredResponse::new(200, vec![], StoredBody::Empty);
    crate::fixture::complete(&store, &live, &response)
        .await
        .unwrap();
    assert_eq!(store.delete_expired(now / 1000, 2).await.unwrap(), 2);
    assert_eq!(store.delete_expired(now / 1000, 2).await.unwrap(), 2);
    assert_eq!(store.delete_expired(now / 1000, 2).await.unwrap(), 1);
    assert_eq!(store.delete_expired(now / 1000, 2).await.unwrap(), 0);
    let page = store.scan(None, 100).await.unwrap();
    let ids: Vec<_> = page.records.iter().map(|r| r.record.id.as_str()).collect();
    assert_eq!(ids, ["live"]);
}

/// The sweeper's housekeeping goes through the store contract
/// (`SweepStore::delete_expired`), so it runs without naming the engine:
/// PostgreSQL's expired rows are deleted (live ones kept), while DynamoDB
/// and Redis, which expire records themselves, are sent nothing and report
/// nothing deleted.
#[tokio::test]
async fn the_sweepers_housekeeping_deletes_expired_rows_on_postgres_and_nothing_elsewhere() {
    let store = integration_tests::postgres_store().await;
    let now = claim_expired(&store, 3).await;
    claim_lease(&store, "live", "a", 60_000).await;
    let deadline = now + 60_000;
    let on_postgres = Sweeper::new(store.clone());
    assert_eq!(on_postgres.delete_expired(Some(deadline)).await.unwrap(), 3);
    let page = store.scan(None, 100).await.unwrap();
    let ids: Vec<_> = page.records.iter().map(|r| r.record.id.as_str()).collect();
    assert_eq!(ids, ["live"]);

    let (dynamo, requests) = integration_tests::dynamo_store().await;
    let before = requests.get();
    let on_dynamo = Sweeper::new(dynamo);
    assert_eq!(on_dynamo.delete_expired(Some(deadline)).await.unwrap(), 0);
    assert_eq!(
        requests.get(),
        before,
        "DynamoDB's TTL expires records: no request"
    );
    let on_redis = Sweeper::new(integration_tests::redis_store().await);
    assert_eq!(on_redis.delete_expired(Some(deadline)).await.unwrap(), 0);
}

/// A sweep with the housekeeping on resolves the stuck records, then
/// deletes every expired row, batch after batch (501 rows: a full batch and
/// one more), and reports them; live rows stay. Off (the default), the
/// expired rows stay. On the server and through PgBouncer.
#[tokio::test]
async fn a_sweep_with_housekeeping_deletes_expired_rows_and_reports_them() {
    for url in [
        integration_tests::postgres_url(),
        integration_tests::postgres_pooler_url(),
    ] {
        let store = integration_tests::postgres_store_at(&url).await;
        claim_expired(&store, 501).await;
        claim_lease(&store, "live", "a", 60_000).await;
        claim_lease(&store, "stuck", "crashed", 1).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let deadline = Some(now_ms() + 60_000);

        let without = Sweeper::new(store.clone())
            .grace(Duration::ZERO)
            .sweep(deadline)
            .await;
        assert_eq!(
            (without.released, without.expired_deleted, without.errors),
            (1, 0, 0),
            "{url}: {without:?}"
        );
        let mut count = 0;
        let mut cursor = None;
        loop {
            let page = store.scan(cursor, 1000).await.unwrap();
            count += page.records.len();
            cursor = page.next;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(count, 502, "{url}: off, the expired rows stay");

        claim_lease(&store, "stuck-again", "crashed", 1).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let summary = Sweeper::new(store.clone())
            .grace(Duration::ZERO)
            .housekeeping(true)
            .sweep(deadline)
            .await;
        assert_eq!(
            (
                summary.found,
                summary.released,
                summary.expired_deleted,
                summary.errors
            ),
            (1, 1, 501, 0),
            "{url}: {summary:?}"
        );
        assert!(!summary.housekeeping_failed);
        let page = store.scan(None, 100).await.unwrap();
        let ids: Vec<_> = page.records.iter().map(|r| r.record.id.as_str()).collect();
        assert_eq!(ids, ["live"], "{url}");
        let emf: serde_json::Value =
            serde_json::from_str(&summary.emf("sweeper", now_ms())).unwrap();
        assert_eq!(emf["SweepExpiredDeleted"], 501, "{url}");
    }
}

/// The housekeeping keeps the sweep's deadline: a sweep with no time left
/// deletes nothing, and the expired rows wait for the next one.
#[tokio::test]
async fn a_sweep_out_of_time_leaves_expired_rows_to_the_next_housekeeping() {
    let store = integration_tests::postgres_store().await;
    claim_expired(&store, 3).await;
    let sweeper = Sweeper::new(store.clone()).housekeeping(true);
    // The deadline is within `stop_before` (2 s): no call may start.
    let late = sweeper.sweep(Some(now_ms())).await;
    assert_eq!((late.expired_deleted, late.errors), (0, 0), "{late:?}");
    assert!(!late.housekeeping_failed);
    assert_eq!(store.scan(None, 100).await.unwrap().records.len(), 3);
    let next = sweeper.sweep(Some(now_ms() + 60_000)).await;
    assert_eq!(next.expired_deleted, 3, "{next:?}");
}

/// A failed housekeeping is counted and reported, never taken for success:
/// the sweep counts an error and sets `housekeeping_failed` (the expired
/// rows stay), and the sweeper function fails its invocation, naming the
/// privilege to check, as it did when it ran the housekeeping itself.
#[tokio::test]
async fn a_failed_housekeeping_fails_the_sweep_function_and_keeps_the_rows() {
    use integration_tests::fault_store::{Fault, FaultPlan, FaultStore};

    let store = integration_tests::postgres_store().await;
    claim_expired(&store, 3).await;
    // The listings pass unnumbered and no record was claimed through the
    // fault store, so its first numbered call is the housekeeping's.
    let failing = || {
        FaultStore::new(
            store.clone(),
            FaultPlan::failing(0, Fault::Refused).without_listings(),
        )
    };
    let summary = Sweeper::new(failing())
        .housekeeping(true)
        .sweep(Some(now_ms() + 60_000))
        .await;
    assert!(summary.housekeeping_failed, "{summary:?}");
    assert_eq!((summary.errors, summary.expired_deleted), (1, 0));
    assert_eq!(store.scan(None, 100).await.unwrap().records.len(), 3);

    let config = sweeper::Config {
        engine: Default::default(),
        table: String::new(),
        policy: SweepPolicy::Release,
        grace: Duration::ZERO,
        index: false,
        streams_endpoint: None,
        full_pass: lambda_idempotency::store::dynamodb::DEFAULT_FULL_PASS,
    };
    let mut context = lambda_runtime::Context::default();
    context.deadline = now_ms() + 60_000;
    let err = sweeper::handle(
        &config.sweeper_on(failing()),
        lambda_runtime::LambdaEvent::new(serde_json::json!({}), context),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("expired") && err.contains("DELETE privilege"),
        "{err}"
    );
    assert_eq!(store.scan(None, 100).await.unwrap().records.len(), 3);
}

#[tokio::test]
async fn a_new_life_drops_the_old_recovery_point_and_a_takeover_keeps_it() {
    let store = integration_tests::postgres_store().await;
    let commit = |lease: Lease| {
        let store = store.clone();
        async move {
            let point = lambda_idempotency::store::Checkpoint {
                name: "charged".into(),
                data: serde_json::json!({"charge": "ch_1", "amount": 12.5}),
                attempt: lease.attempt,
            };
            store
                .checkpoint(CheckpointRequest::new(&lease, &point))
                .await
                .unwrap();
        }
    };
    let first = claim_lease(&store, "r", "a", 20).await;
    commit(first).await;
    tokio::time::sleep(Duration::from_millis(40)).await;
    let takeover = claim_lease(&store, "r", "b", 20).await;
    assert_eq!(takeover.attempt, 2);
    let point = takeover.recovered.expect("kept across the takeover");
    assert_eq!(
        point.data,
        serde_json::json!({"charge": "ch_1", "amount": 12.5})
    );
    assert_eq!(point.attempt, 1);
    // The record expires: the next claim starts a new life without it.
    let mut next_life = claim_request("r", "c", 60_000);
    next_life.now_ms += 7_200_000;
    match store.claim(&next_life).await.unwrap() {
        ClaimOutcome::Claimed(lease) => {
            assert_eq!(lease.attempt, 3);
            assert_eq!(lease.recovered, None);
        }
        other => panic!("{other:?}"),
    }
}

/// A row whose attempt count is at the bigint column's largest (damaged, or
/// written by another tool): neither a takeover of its abandoned attempt nor
/// a new life after it expired can hand out the next fencing token, so the
/// claim fails as a corrupt record (not as an unavailable store, which would
/// invite retries that can never succeed) and the row is left as it is. A
/// completed one still replays.
#[tokio::test]
async fn a_claim_past_the_largest_attempt_count_is_a_corrupt_record() {
    let store = integration_tests::postgres_store().await;
    let client = store.pool().get().await.unwrap();
    let set_largest_attempt = |id: &'static str| {
        let sql = format!("UPDATE {} SET attempt = $1 WHERE id = $2", store.table());
        let client = &client;
        async move { client.execute(&sql, &[&i64::MAX, &id]).await.unwrap() }
    };
    // A lease that ended (a takeover), and a record that expired (a new life).
    for (id, expires_in_s) in [("max", 3600), ("expired-max", -5)] {
        crate::fixture::claim_expiring(&store, id, expires_in_s).await;
        set_largest_attempt(id).await;
        crate::fixture::assert_no_next_attempt(&store, id).await;
        let row = client
            .query_one(
                &format!("SELECT attempt, owner FROM {} WHERE id = $1", store.table()),
                &[&id],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), i64::MAX, "{id}");
        assert_eq!(row.get::<_, String>(1), "a", "{id}");
    }
    let lease = crate::fixture::claim_expiring(&store, "done-max", 3600).await;
    let response = StoredResponse::new(200, vec![], StoredBody::Text("done".into()));
    crate::fixture::complete(&store, &lease, &response)
        .await
        .unwrap();
    set_largest_attempt("done-max").await;
    crate::fixture::assert_found_at_largest_attempt(&store, "done-max", i64::MAX as u64).await;
}

// The sweeper on PostgreSQL: stuck records come from the partial index on
// lease end (the DynamoDB suite in sweeper.rs covers its stream and index).

async fn claim(store: &PostgresStore, id: &str, lease_ms: u64) -> Lease {
    claim_lease(store, id, &format!("owner-{id}"), lease_ms).await
}

async fn status(store: &PostgresStore, id: &str) -> Option<Status> {
    store.get(id).await.unwrap().map(|r| r.record.status)
}

#[tokio::test]
async fn the_release_policy_pages_through_stuck_records_and_leaves_the_rest() {
    let store = integration_tests::postgres_store().await;
    let ids: Vec<String> = (0..23).map(|i| format!("stuck-{i:02}")).collect();
    for id in &ids {
        claim(&store, id, 1).await;
    }
    let done = claim(&store, "completed", 1).await;
    store
        .complete(CompleteRequest::new(
            &done,
            &StoredResponse::new(200, vec![], StoredBody::Empty),
            now_ms() / 1000 + 3600,
        ))
        .await
        .unwrap();
    claim(&store, "live", 600_000).await;
    tokio::time::sleep(Duration::from_millis(20)).await;

    let kept = Sweeper::new(store.clone())
        .grace(Duration::from_secs(60))
        .sweep(None)
        .await;
    assert_eq!(kept.found, 0, "the grace period keeps recent leases");

    let summary = Sweeper::new(store.clone())
        .grace(Duration::ZERO)
        .page_size(4)
        .sweep(None)
        .await;
    assert_eq!((summary.found, summary.released), (23, 23), "{summary:?}");
    assert_eq!(
        (
            summary.failed,
            summary.fenced,
            summary.resumable,
            summary.errors
        ),
        (0, 0, 0, 0)
    );
    assert!(summary.pages >= 6, "pages of four: {summary:?}");
    for id in &ids {
        assert_eq!(status(&store, id).await, None, "{id} released");
    }
    assert_eq!(status(&store, "completed").await, Some(Status::Completed));
    assert_eq!(status(&store, "live").await, Some(Status::InProgress));
    let again = Sweeper::new(store).grace(Duration::ZERO).sweep(None).await;
    assert_eq!(again.found, 0);
}

#[tokio::test]
async fn the_fail_policy_stores_a_problem_that_replays() {
    let store = integration_tests::postgres_store().await;
    integration_tests::crash_midway(store.clone(), post("/orders", Some("abandoned"), "{}")).await;
    let summary = Sweeper::new(store.clone())
        .policy(SweepPolicy::Fail)
        .grace(Duration::ZERO)
        .sweep(None)
        .await;
    assert_eq!((summary.found, summary.failed), (1, 1), "{summary:?}");
    let runs = Runs::default();
    let svc =
        IdempotencyLayer::new(store.clone()).layer(counting_handler(runs.clone(), Duration::ZERO));
    assert_failed_key_replays_abandoned(&svc, "abandoned", &runs).await;
}

/// What a listing finds once the leases of a millisecond have ended.
async fn stuck_after_their_leases(
    store: &PostgresStore,
) -> Vec<lambda_idempotency::store::StuckRecord> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    let listing = store.stuck(StuckRequest::new(now_ms(), 10)).await;
    listing.unwrap().records
}

#[tokio::test]
async fn a_recovery_point_keeps_a_stuck_record_unless_the_policy_fails_it() {
    let store = integration_tests::postgres_store().await;
    let lease = claim(&store, "resumable", 1).await;
    let listed = stuck_after_their_leases(&store).await;
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].has_checkpoint);
    // The still-running invocation commits a recovery point after the listing.
    let point = lambda_idempotency::store::Checkpoint {
        name: "charged".into(),
        data: serde_json::json!({"charge": "ch_1"}),
        attempt: lease.attempt,
    };
    store
        .checkpoint(CheckpointRequest::new(&lease, &point))
        .await
        .unwrap();
    let sweeper = Sweeper::new(store.clone()).grace(Duration::ZERO);
    assert_eq!(
        sweeper.resolve(&listed[0], now_ms()).await.unwrap(),
        Resolution::Resumable
    );
    assert_eq!(status(&store, "resumable").await, Some(Status::InProgress));
    let summary = sweeper.policy(SweepPolicy::Fail).sweep(None).await;
    assert_eq!((summary.found, summary.failed), (1, 1), "{summary:?}");
    let failed = store.get("resumable").await.unwrap().unwrap().record;
    assert_eq!(failed.status, Status::Completed);
    assert_eq!(failed.checkpoint, None);
}

#[tokio::test]
async fn a_record_reclaimed_after_the_listing_is_fenced_and_an_expired_one_deleted() {
    let store = integration_tests::postgres_store().await;
    claim(&store, "reclaimed", 1).await;
    let mut expired = claim_request("expired", "crashed", 1);
    expired.expires_at_s = expired.now_ms / 1000 - 5;
    claimed(store.claim(&expired).await.unwrap());
    let listed = stuck_after_their_leases(&store).await;
    assert_eq!(listed.len(), 2);
    let reclaimed = listed.iter().find(|r| r.id == "reclaimed").unwrap();
    let gone = listed.iter().find(|r| r.id == "expired").unwrap();

    // A retry takes "reclaimed" over before the sweeper writes.
    let retry = claim_lease(&store, "reclaimed", "retry", 1).await;
    assert_eq!(retry.attempt, 2);
    tokio::time::sleep(Duration::from_millis(20)).await;
    for policy in [SweepPolicy::Release, SweepPolicy::Fail] {
        let resolution = Sweeper::new(store.clone())
            .grace(Duration::ZERO)
            .policy(policy)
            .resolve(reclaimed, now_ms())
            .await
            .unwrap();
        assert_eq!(resolution, Resolution::Fenced, "{policy:?}");
    }
    let record = store.get("reclaimed").await.unwrap().unwrap().record;
    assert_eq!(
        (record.owner.as_str(), record.status),
        ("retry", Status::InProgress)
    );

    // Past its own expiry: absent by definition, deleted, never failed back to life.
    let resolution = Sweeper::new(store.clone())
        .grace(Duration::ZERO)
        .policy(SweepPolicy::Fail)
        .resolve(gone, now_ms())
        .await
        .unwrap();
    assert_eq!(resolution, Resolution::Released);
    assert_eq!(status(&store, "expired").await, None);
}

#[tokio::test]
async fn two_sweepers_at_once_resolve_each_record_once() {
    let store = integration_tests::postgres_store().await;
    for i in 0..40 {
        claim(&store, &format!("stuck-{i}"), 1).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let sweeper = Sweeper::new(store.clone())
        .grace(Duration::ZERO)
        .page_size(3);
    let (first, second) = (sweeper.clone(), sweeper);
    let a = tokio::spawn(async move { first.sweep(None).await });
    let b = tokio::spawn(async move { second.sweep(None).await });
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!(a.errors + b.errors, 0);
    assert_eq!(a.released + b.released, 40, "{a:?} {b:?}");
    assert_eq!(a.fenced + b.fenced, a.found + b.found - 40);
    assert!(store.scan(None, 100).await.unwrap().records.is_empty());
}

/// The test server's URL with another host and `sslmode` (and the CA of its
/// self-signed certificate, made for `localhost`, when `with_ca`).
fn tls_url(host: &str, sslmode: &str, with_ca: bool) -> String {
    let url = integration_tests::postgres_url();
    let base = url.split_once('?').map_or(url.as_str(), |(base, _)| base);
    let mut url = format!(
        "{}?sslmode={sslmode}",
        base.replace("@127.0.0.1:", &format!("@{host}:"))
    );
    if with_ca {
        let ca = std::env::var("IDEMPOTENCY_TEST_POSTGRES_CA")
            .expect("IDEMPOTENCY_TEST_POSTGRES_CA: run through scripts/postgres-local.sh");
        url.push_str(&format!("&sslrootcert={ca}"));
    }
    url
}

/// Whether the store's connection through [`tls_url`] of these arguments is
/// encrypted, as the server sees it; an error when it cannot connect.
async fn encrypted(
    host: &str,
    sslmode: &str,
    with_ca: bool,
) -> Result<bool, lambda_idempotency::Error> {
    let store = PostgresStore::builder(tls_url(host, sslmode, with_ca)).open()?;
    // Through the store first: its errors are the ones under test.
    let err = store.check_schema().await.unwrap_err();
    if err.kind() != ErrorKind::InvalidConfig {
        return Err(err);
    }
    let client = store.pool().get().await.unwrap();
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    Ok(row.get(0))
}

#[tokio::test]
async fn each_sslmode_means_what_it_means_to_libpq() {
    // The certificate is for the name `localhost` only, from a CA the system
    // does not trust.
    assert!(!encrypted("127.0.0.1", "disable", false).await.unwrap());
    assert!(
        encrypted("127.0.0.1", "prefer", false).await.unwrap(),
        "prefer: TLS when the server offers it"
    );
    assert!(
        encrypted("127.0.0.1", "require", false).await.unwrap(),
        "require: encrypted, the certificate not verified"
    );
    let untrusted = encrypted("localhost", "verify-full", false)
        .await
        .unwrap_err();
    assert_eq!(untrusted.kind(), ErrorKind::StoreUnavailable, "{untrusted}");
    let wrong_name = encrypted("127.0.0.1", "verify-full", true)
        .await
        .unwrap_err();
    assert_eq!(
        wrong_name.kind(),
        ErrorKind::StoreUnavailable,
        "{wrong_name}"
    );
    assert!(
        encrypted("localhost", "verify-full", true).await.unwrap(),
        "verify-full: trusted chain, matching name"
    );
    assert!(
        encrypted("127.0.0.1", "verify-ca", true).await.unwrap(),
        "verify-ca: trusted chain, the name not compared"
    );
}

#[tokio::test]
async fn through_a_transaction_pooler_concurrent_transactional_completions_each_commit_once() {
    // PgBouncer in transaction mode hands each transaction (or statement
    // outside one) to any of its four server connections, as RDS Proxy does.
    let pooled =
        integration_tests::postgres_store_at(&integration_tests::postgres_pooler_url()).await;
    let direct = PostgresStore::builder(integration_tests::postgres_url())
        .open()
        .unwrap();
    let table = orders(&pooled);
    let admin = direct.pool().get().await.unwrap();
    admin
        .batch_execute(&format!(
            "CREATE TABLE {table} (id text PRIMARY KEY, state text NOT NULL)"
        ))
        .await
        .unwrap();
    let runs = Runs::default();
    let svc = IdempotencyLayer::new(pooled.clone())
        .layer(order_writing_handler(table.clone(), runs.clone()));
    for round in ["first", "replay"] {
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let mut svc = svc.clone();
                let req = post("/orders", Some(&format!("k{i}")), "{}");
                tokio::spawn(async move { call(&mut svc, req).await })
            })
            .collect();
        for task in tasks {
            let res = task.await.unwrap();
            assert_eq!(res.status(), 201, "{round}");
            assert_eq!(
                res.headers().contains_key(REPLAYED_HEADER),
                round == "replay"
            );
        }
    }
    assert_eq!(runs.count(), 20);
    let rows: i64 = admin
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        rows, 20,
        "one order per key, each committed with its completion"
    );

    // A stale attempt's transaction is fenced through the pooler too.
    let stale = claim_lease(&pooled, "r", "a", 30).await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    claim_lease(&pooled, "r", "b", 60_000).await;
    let err = complete_201_with(
        &pooled,
        &stale,
        one_write(PgWrite::new(format!(
            "INSERT INTO {table} (id, state) VALUES ('stale', 'created')"
        ))),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let stale_rows: i64 = admin
        .query_one(
            &format!("SELECT count(*) FROM {table} WHERE id = 'stale'"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stale_rows, 0);
}

/// A handler that inserts its order (id: the request's derived key) into
/// `table` through the completion's transaction.
fn order_writing_handler(table: String, runs: Runs) -> impl integration_tests::Handler {
    tower::service_fn(move |req: Request| {
        let (runs, table) = (runs.clone(), table.clone());
        async move {
            runs.bump();
            let ctx = IdempotencyContext::of(&req).ok_or("no context")?;
            let order_id = ctx.derived_key("order");
            ctx.defer_write(
                PgWrite::new(format!(
                    "INSERT INTO {table} (id, state) VALUES ($1, 'created')"
                ))
                .bind(order_id.clone(), PgType::TEXT),
            )?;
            Ok::<_, lambda_http::Error>(Response::builder().status(201).body(Body::from(order_id))?)
        }
    })
}

/// A TCP proxy to the test server whose connections can be made stale: after
/// [`cut`](StaleProxy::cut), an open connection forwards nothing more and
/// closes as soon as its client sends, the way a pooled connection that died
/// while a Lambda sandbox was frozen fails on its next statement, unknown to
/// the driver until then.
struct StaleProxy {
    port: u16,
    generation: Arc<std::sync::atomic::AtomicU64>,
    /// Armed: the next `COMMIT` a client sends reaches the server, and the
    /// connection then closes without its answer (the transaction committed;
    /// the client never learns it).
    lose_commit_answer: Arc<std::sync::atomic::AtomicBool>,
}

impl StaleProxy {
    async fn start() -> StaleProxy {
        use std::sync::atomic::Ordering::SeqCst;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let url = integration_tests::postgres_url();
        let server = url
            .split_once('@')
            .and_then(|(_, rest)| rest.split_once('/'))
            .map(|(address, _)| address.to_owned())
            .expect("host:port in the test URL");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let lose_commit_answer = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let current = generation.clone();
        let lose = lose_commit_answer.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let born = current.load(SeqCst);
                let (current, server, lose) = (current.clone(), server.clone(), lose.clone());
                tokio::spawn(async move {
                    let Ok(upstream) = tokio::net::TcpStream::connect(&server).await else {
                        return;
                    };
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = upstream.into_split();
                    let (mut up, mut down) = (vec![0u8; 16_384], vec![0u8; 16_384]);
                    loop {
                        tokio::select! {
                            read = from_client.read(&mut up) => match read {
                                // Cut: the client's statement is lost and
                                // both sockets close.
                                Ok(n) if n > 0 && current.load(SeqCst) == born => {
                                    if to_server.write_all(&up[..n]).await.is_err() { return; }
                                    let commit = up[..n].windows(6).any(|w| w == b"COMMIT");
                                    if commit && lose.swap(false, SeqCst) {
                                        // Let the server commit, then drop
                                        // both sides before any answer.
                                        tokio::time::sleep(Duration::from_millis(300)).await;
                                        return;
                                    }
                                }
                                _ => return,
                            },
                            read = from_server.read(&mut down) => match read {
                                Ok(n) if n > 0 => {
                                    if to_client.write_all(&down[..n]).await.is_err() { return; }
                                }
                                _ => return,
                            },
                        }
                    }
                });
            }
        });
        StaleProxy {
            port,
            generation,
            lose_commit_answer,
        }
    }

    /// The next `COMMIT` commits, and its answer is lost with the connection.
    fn lose_next_commit_answer(&self) {
        self.lose_commit_answer
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/idempotency_test?sslmode=disable",
            self.port
        )
    }

    /// Every connection open now is dead from here on.
    fn cut(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_connection_that_died_between_invocations_is_replaced_without_failing_the_request() {
    let proxy = StaleProxy::start().await;
    let store = integration_tests::postgres_store_at(&proxy.url()).await;
    let runs = Runs::default();
    let svc =
        IdempotencyLayer::new(store.clone()).layer(counting_handler(runs.clone(), Duration::ZERO));
    let first = post_order(&svc, "k1").await;
    assert_eq!(first.status(), 201);

    proxy.cut();
    let second = post_order(&svc, "k2").await;
    assert_eq!(second.status(), 201, "{:?}", second.body());
    proxy.cut();
    let replay = post_order(&svc, "k1").await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 2);

    // A transaction whose connection is found dead at BEGIN starts again on
    // a new one.
    let direct = PostgresStore::builder(integration_tests::postgres_url())
        .open()
        .unwrap();
    create_orders(&direct, &store).await;
    let lease = claim_lease(&store, "r", "a", 60_000).await;
    proxy.cut();
    complete_201_with(&store, &lease, one_write(insert_order(&store, "o-1")))
        .await
        .unwrap();
    assert_eq!(row_count(&direct, &orders(&store)).await, 1);
}

/// Issue 25, item 1: a phase whose COMMIT reached PostgreSQL but whose answer
/// was lost. Unknown to the handler whether it committed, the record is left
/// to its lease (never released, which would delete the recovery point that
/// did commit); after the lease the retry resumes after the phase, and the
/// phase's row exists once (re-running it would break the row's key on every
/// later retry).
#[tokio::test]
async fn a_phase_whose_commit_answer_is_lost_is_resumed_never_run_twice() {
    let proxy = Arc::new(StaleProxy::start().await);
    let store = integration_tests::postgres_store_at(&proxy.url()).await;
    let direct = PostgresStore::builder(integration_tests::postgres_url())
        .open()
        .unwrap();
    create_orders(&direct, &store).await;
    let table = orders(&store);
    let rows = || row_count(&direct, &table);
    let runs = Runs::default();
    let handler = one_phase_handler(runs.clone(), {
        let (store, proxy) = (store.clone(), proxy.clone());
        move |ctx| {
            let (store, proxy) = (store.clone(), proxy.clone());
            async move {
                ctx.defer_write(insert_order(&store, "o-1"))?;
                proxy.lose_next_commit_answer();
                ctx.commit_with_writes("created", serde_json::json!({}))
                    .await?;
                Ok(Response::builder().status(201).body(Body::Empty)?)
            }
        }
    });
    let svc = IdempotencyLayer::new(store.clone())
        .max_lease(Duration::from_millis(1500))
        .layer(handler);
    let id = lambda_idempotency::scope::RecordScope::new("POST", "/orders", "k1").record_id();

    let first = svc.clone().oneshot(post("/orders", Some("k1"), "{}")).await;
    assert!(
        first.is_err(),
        "the handler returned the lost COMMIT's error"
    );
    assert_eq!(rows().await, 1, "the COMMIT reached the server");
    let record = store.get(&id).await.unwrap().expect("not released");
    assert_eq!(record.record.checkpoint.unwrap().name, "created");

    // Left to its lease: a duplicate meanwhile is told it is in progress.
    let early = post_order(&svc, "k1").await;
    assert_eq!(early.status(), 409);
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let retry = post_order(&svc, "k1").await;
    assert_eq!(retry.status(), 201, "{:?}", retry.body());
    assert_eq!(retry.body().as_ref(), b"resumed from created");
    assert_eq!(rows().await, 1, "the phase's row was written once");
    assert_eq!(runs.count(), 2);
}

/// Issue 25, item 4: a server error at COMMIT (a deferred constraint) means
/// the transaction rolled back: the completion is cancelled (nothing was
/// written, the key is free), not an unknown outcome held until the lease.
#[tokio::test]
async fn a_deferred_constraint_failing_at_commit_cancels_the_completion() {
    let store = store_with_orders().await;
    let unique = format!("{}_deferred", orders(&store));
    store
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(&format!(
            "CREATE TABLE {unique} (id text, state text NOT NULL, \
             UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)"
        ))
        .await
        .unwrap();
    let insert = || {
        PgWrite::new(format!(
            "INSERT INTO {unique} (id, state) VALUES ('o-1', 'created')"
        ))
    };
    let lease = claim_lease(&store, "r", "a", 60_000).await;
    let mut writes = DeferredWrites::new();
    writes.push(insert());
    writes.push(insert());
    let err = complete_201_with(&store, &lease, writes).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TransactionCancelled, "{err}");
    // The message names what was rolled back, in one readable sentence.
    assert!(
        err.to_string()
            .contains("and the handler's 2 write(s) at COMMIT: "),
        "{err}"
    );
    assert_eq!(row_count(&store, &unique).await, 0);
}

/// A claim blocked on a row another transaction holds locked (a stuck
/// transactional completion, an operator's session) gives up on the
/// server's lock timeout and answers `StoreUnavailable` (a 503), directly
/// and through the transaction-pooling proxy, instead of waiting until the
/// Lambda deadline.
#[tokio::test]
async fn a_claim_blocked_on_a_locked_row_answers_unavailable() {
    for url in [
        integration_tests::postgres_url(),
        integration_tests::postgres_pooler_url(),
    ] {
        let store = integration_tests::postgres_store_at(&url).await;
        let id = "d".repeat(64);
        claim_lease(&store, &id, "first", 1).await;
        let holder = store.pool().get().await.unwrap();
        holder.batch_execute("BEGIN").await.unwrap();
        holder
            .query(
                &format!("SELECT 1 FROM {} WHERE id = $1 FOR UPDATE", store.table()),
                &[&id],
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        // A takeover of the expired lease must wait for the row: it gives up.
        let blocked = tokio::time::timeout(
            Duration::from_secs(60),
            store.claim(&claim_request(&id, "second", 60_000)),
        )
        .await
        .expect("the claim gave up on the lock instead of hanging");
        let err = blocked.expect_err("the row is locked");
        assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{url}: {err}");
        assert!(err.to_string().contains("lock"), "{url}: {err}");
        holder.batch_execute("ROLLBACK").await.unwrap();
        // Unlocked, the same claim goes through on the same pool.
        claim_lease(&store, &id, "second", 60_000).await;
    }
}

/// `open()` sends nothing, so a server that is not there shows up only on
/// use; `connect()` checks one connection at once and names the server.
#[tokio::test]
async fn connect_checks_one_connection_and_open_sends_nothing() {
    PostgresStore::builder(integration_tests::postgres_url())
        .connect()
        .await
        .unwrap();
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let url = format!("postgres://app@127.0.0.1:{port}/orders?sslmode=disable");
    PostgresStore::builder(&url).open().unwrap();
    let err = PostgresStore::builder(url).connect().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
    assert!(
        err.to_string()
            .contains(&format!("127.0.0.1:{port}/orders")),
        "{err}"
    );
}
