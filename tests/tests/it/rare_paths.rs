//! The rare paths, on every engine: a failure after a committed recovery
//! point never throws that point away (store rule 4), and a resolution by
//! the sweeper or an operator fences the attempt it replaces (rule 5), or,
//! when it deleted the record, the late completion is "not stored".

use std::sync::Arc;
use std::time::Duration;

use lambda_http::{Body, Request, Response};
use lambda_idempotency::{
    scope::RecordScope,
    store::{CompleteRequest, Lease, Resolution, Status, StoredBody, StoredResponse, SweepStore},
    sweeper::SweepPolicy,
    ErrorKind, IdempotencyContext, IdempotencyLayer, IdempotentFunction, Store,
};
use tower::{Layer, ServiceExt};

use crate::fixture::{
    claim_lease, force_resolution, now_ms, on_both_stores, one_phase_handler, post, post_order,
    Fixture, Runs,
};
use lambda_idempotency::{problem, store::DeferredWrites, PostgresStore};

on_both_stores!(
    a_release_keeps_a_recovery_point_and_ends_the_lease_so_the_retry_resumes,
    a_release_keeps_an_inherited_recovery_point_too,
    a_release_without_a_recovery_point_still_deletes,
    a_completion_after_a_forced_release_says_the_record_is_gone,
    a_forced_failure_fences_the_live_attempt_and_its_500_is_what_replays,
    a_handler_error_after_a_recovery_point_resumes_on_retry,
    a_5xx_after_a_recovery_point_resumes_on_retry,
    an_event_whose_record_was_released_while_it_ran_is_reported_failed,
    a_forced_failure_during_an_invocation_is_what_its_own_instance_replays,
    derived_keys_repeat_in_a_new_life_of_the_same_request,
);

fn response() -> StoredResponse {
    StoredResponse::new(201, vec![], StoredBody::Text("done".into()))
}

async fn commit(store: &Arc<dyn SweepStore>, lease: &Lease, name: &str) {
    IdempotencyContext::from_lease(store.clone(), lease.clone())
        .commit(name, serde_json::json!({ "phase": name }))
        .await
        .unwrap();
}

async fn a_release_keeps_a_recovery_point_and_ends_the_lease_so_the_retry_resumes(f: Fixture) {
    let lease = claim_lease(&f.store, "r", "a", 600_000).await;
    commit(&f.store, &lease, "charged").await;

    f.store.release(&lease).await.unwrap();

    let record = f.store.get("r").await.unwrap().expect("kept").record;
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(record.checkpoint.as_ref().unwrap().name, "charged");
    assert!(
        record.lease_expires_at_ms <= now_ms(),
        "the lease ended with the release: {} > now",
        record.lease_expires_at_ms
    );
    // The retry does not wait for the old lease: it takes over and resumes.
    let retry = claim_lease(&f.store, "r", "b", 600_000).await;
    assert_eq!(retry.attempt, 2);
    assert_eq!(retry.recovered.unwrap().name, "charged");
    // The released attempt is fenced from here on.
    let err = f.store.release(&lease).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
}

async fn a_release_keeps_an_inherited_recovery_point_too(f: Fixture) {
    let first = claim_lease(&f.store, "r", "a", 50).await;
    commit(&f.store, &first, "charged").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = claim_lease(&f.store, "r", "b", 600_000).await;
    assert_eq!(second.recovered.as_ref().unwrap().name, "charged");

    // The attempt that resumed fails before committing anything of its own.
    f.store.release(&second).await.unwrap();

    let third = claim_lease(&f.store, "r", "c", 600_000).await;
    assert_eq!(third.attempt, 3);
    assert_eq!(third.recovered.unwrap().name, "charged");
}

async fn a_release_without_a_recovery_point_still_deletes(f: Fixture) {
    let lease = claim_lease(&f.store, "r", "a", 600_000).await;
    f.store.release(&lease).await.unwrap();
    assert!(f.store.get("r").await.unwrap().is_none());
}

async fn a_completion_after_a_forced_release_says_the_record_is_gone(f: Fixture) {
    let lease = claim_lease(&f.store, "r", "a", 600_000).await;
    let forced = force_resolution(&f.store, "r", lease.attempt, SweepPolicy::Release).await;
    assert_eq!(forced, Resolution::Released);

    let err = crate::fixture::complete(&f.store, &lease, &response())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RecordGone, "{err}");
    assert!(
        f.store.get("r").await.unwrap().is_none(),
        "nothing stored: a duplicate runs again"
    );
}

async fn a_forced_failure_fences_the_live_attempt_and_its_500_is_what_replays(f: Fixture) {
    let lease = claim_lease(&f.store, "r", "a", 600_000).await;
    let forced = force_resolution(&f.store, "r", lease.attempt, SweepPolicy::Fail).await;
    assert_eq!(forced, Resolution::Failed);

    // The live invocation completes late: it is told it was fenced.
    let err = crate::fixture::complete(&f.store, &lease, &response())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    let record = f.store.get("r").await.unwrap().unwrap().record;
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.response.unwrap().status, 500, "the failure replays");
    assert_ne!(record.owner, lease.owner, "the resolution took ownership");
    assert_eq!(
        record.owner,
        lambda_idempotency::store::resolver_owner(&lease.owner)
    );
}

/// A handler that commits the recovery point `charged` on its first run and
/// then fails as `fail` says; later runs resume and answer 201 with where
/// they started from. `charges` counts the work before the recovery point.
fn failing_after_a_phase(
    runs: Runs,
    charges: Runs,
    fail: fn() -> Result<Response<Body>, lambda_http::Error>,
) -> impl integration_tests::Handler {
    one_phase_handler(runs, move |ctx| {
        let charges = charges.clone();
        async move {
            charges.bump();
            ctx.commit("charged", serde_json::json!({})).await?;
            fail()
        }
    })
}

async fn a_failure_after_a_phase_resumes(
    f: Fixture,
    fail: fn() -> Result<Response<Body>, lambda_http::Error>,
) {
    let (runs, charges) = (Runs::default(), Runs::default());
    let svc = IdempotencyLayer::new(f.store.clone()).layer(failing_after_a_phase(
        runs.clone(),
        charges.clone(),
        fail,
    ));
    let id = RecordScope::new("POST", "/orders", "k1").record_id();

    let first = svc.clone().oneshot(post("/orders", Some("k1"), "{}")).await;
    assert!(
        first
            .as_ref()
            .map_or(true, |r| r.status().is_server_error()),
        "the first run failed"
    );
    let kept = f.store.get(&id).await.unwrap().expect("the record is kept");
    assert_eq!(kept.record.checkpoint.unwrap().name, "charged");

    // The client retries at once: it resumes, the charge is not made again.
    let retry = post_order(&svc, "k1").await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.body().as_ref(), b"resumed from charged");
    assert_eq!(runs.count(), 2);
    assert_eq!(
        charges.count(),
        1,
        "the work before the recovery point ran once"
    );
}

async fn a_handler_error_after_a_recovery_point_resumes_on_retry(f: Fixture) {
    a_failure_after_a_phase_resumes(f, || Err("confirm_order was throttled".into())).await
}

async fn a_5xx_after_a_recovery_point_resumes_on_retry(f: Fixture) {
    a_failure_after_a_phase_resumes(f, || {
        Ok(Response::builder().status(503).body(Body::Empty)?)
    })
    .await
}

async fn an_event_whose_record_was_released_while_it_ran_is_reported_failed(f: Fixture) {
    let function = IdempotentFunction::new(f.store.clone(), "consumer").key_pointers(["/id"]);
    let store = f.store.clone();
    let runs = Runs::default();
    let call = |runs: Runs, release: bool| {
        let store = store.clone();
        function.call_with_context(
            serde_json::json!({ "id": "e-1" }),
            move |_, ctx| async move {
                runs.bump();
                if release {
                    let ctx = ctx.expect("keyed");
                    let forced = force_resolution(
                        &store,
                        ctx.record_id(),
                        ctx.attempt(),
                        SweepPolicy::Release,
                    )
                    .await;
                    assert_eq!(forced, Resolution::Released);
                }
                Ok::<_, String>("sent".to_owned())
            },
        )
    };
    let err = call(runs.clone(), true).await.unwrap_err();
    assert_eq!(err.error_type(), "Idempotency.CompletionFailed", "{err}");
    // Redelivered: nothing was stored, so it runs again under a new claim.
    let again: String = call(runs.clone(), false).await.unwrap();
    assert_eq!(again, "sent");
    assert_eq!(runs.count(), 2);
}

/// A phase whose transaction DynamoDB applied but whose every answer was
/// lost (the SDK's retries too): unknown to the handler whether it
/// committed, the record is left to its lease, never released; after it the
/// retry resumes after the phase, and the phase's `ADD stock :-1` was
/// applied once.
#[tokio::test]
async fn dynamodb_a_phase_whose_answers_are_lost_is_resumed_and_applied_once() {
    use aws_sdk_dynamodb::config::SharedInterceptor;
    use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
    use integration_tests::LoseResponses;

    let lose = LoseResponses::new(0);
    let client = integration_tests::client_with(vec![SharedInterceptor::new(lose.clone())]).await;
    let table = integration_tests::create_table(&integration_tests::client().await).await;
    let stock = integration_tests::unique_name("stock");
    integration_tests::create_table_from_template(&client, "OrdersTable", &stock)
        .await
        .unwrap();
    let store = lambda_idempotency::DynamoStore::builder(client.clone(), table)
        .open()
        .unwrap();
    let runs = Runs::default();
    let handler = one_phase_handler(runs.clone(), {
        let (stock, lose) = (stock.clone(), lose.clone());
        move |ctx| {
            let (stock, lose) = (stock.clone(), lose.clone());
            async move {
                let take_one = Update::builder()
                    .table_name(&stock)
                    .key("order_id", AttributeValue::S("sku-1".into()))
                    .update_expression("ADD stock :minus_one")
                    .expression_attribute_values(":minus_one", AttributeValue::N("-1".into()))
                    .build()?;
                ctx.defer_write(TransactWriteItem::builder().update(take_one).build())?;
                // Every answer of the phase's transaction is lost.
                lose.arm(100);
                let committed = ctx
                    .commit_with_writes("reserved", serde_json::json!({}))
                    .await;
                lose.arm(0);
                committed?;
                Ok(Response::builder().status(201).body(Body::Empty)?)
            }
        }
    });
    let svc = IdempotencyLayer::new(store.clone())
        .max_lease(Duration::from_millis(1500))
        .layer(handler);
    let left = || async {
        let sku = [("order_id", AttributeValue::S("sku-1".into()))];
        let item = integration_tests::consistent_item(&client, &stock, sku).await;
        item.and_then(|i| i.get("stock").cloned())
    };

    let first = svc.clone().oneshot(post("/orders", Some("k1"), "{}")).await;
    assert!(
        first.is_err(),
        "the handler returned the lost answer's error"
    );
    assert_eq!(left().await, Some(AttributeValue::N("-1".into())));

    tokio::time::sleep(Duration::from_millis(1700)).await;
    let retry = post_order(&svc, "k1").await;
    assert_eq!(retry.status(), 201, "{:?}", retry.body());
    assert_eq!(retry.body().as_ref(), b"resumed from reserved");
    assert_eq!(
        left().await,
        Some(AttributeValue::N("-1".into())),
        "the phase's ADD was applied once"
    );
    assert_eq!(runs.count(), 2);
}

/// `fail --force` while the invocation runs: its completion is fenced, so
/// it neither caches nor stores its own 201; its own instance (local cache
/// on) replays the 500 like every other.
async fn a_forced_failure_during_an_invocation_is_what_its_own_instance_replays(f: Fixture) {
    let store = f.store.clone();
    let handler = tower::service_fn(move |req: Request| {
        let store = store.clone();
        async move {
            let ctx = IdempotencyContext::of(&req).ok_or("no context")?.clone();
            let forced =
                force_resolution(&store, ctx.record_id(), ctx.attempt(), SweepPolicy::Fail).await;
            assert_eq!(forced, Resolution::Failed);
            Ok::<_, lambda_http::Error>(Response::builder().status(201).body(Body::Empty)?)
        }
    });
    let svc = IdempotencyLayer::new(f.store.clone())
        .local_cache(100, Duration::from_secs(60))
        .layer(handler);
    let first = post_order(&svc, "k1").await;
    assert_eq!(
        first.status(),
        201,
        "the invocation's own client gets its answer"
    );
    let replay = post_order(&svc, "k1").await;
    assert_eq!(
        replay.status(),
        500,
        "the resolution's outcome, not a cached 201"
    );
    assert_eq!(
        replay.headers()[lambda_idempotency::http::REPLAYED_HEADER],
        "true"
    );
}

/// Derived keys repeat across lives of the same request (a day-late retry is
/// still deduplicated downstream), and differ for another request.
async fn derived_keys_repeat_in_a_new_life_of_the_same_request(f: Fixture) {
    let first = claim_lease(&f.store, "r", "a", 60_000).await;
    let old_key =
        IdempotencyContext::from_lease(f.store.clone(), first.clone()).derived_key("charge");
    // The first life completes and expires.
    f.store
        .complete(CompleteRequest::new(
            &first,
            &response(),
            now_ms() / 1000 - 1,
        ))
        .await
        .unwrap();
    let second = claim_lease(&f.store, "r", "b", 60_000).await;
    assert!(second.recovered.is_none(), "a new life");
    let new_key =
        IdempotencyContext::from_lease(f.store.clone(), second.clone()).derived_key("charge");
    assert_eq!(new_key, old_key);
    let other = Lease {
        fingerprint: "another body".into(),
        ..second
    };
    assert_ne!(
        IdempotencyContext::from_lease(f.store.clone(), other).derived_key("charge"),
        old_key
    );
}

crate::fixture::test_cases!(4, [
    dynamodb_transactions => crate::rare_paths::Transactional::dynamodb().await,
    postgres_transactions => crate::rare_paths::Transactional::postgres(&integration_tests::postgres_url()).await,
    postgres_pooled_transactions => crate::rare_paths::Transactional::postgres(&integration_tests::postgres_pooler_url()).await,
], [
    a_transactional_completion_after_a_forced_release_says_the_record_is_gone,
    a_request_whose_record_is_released_before_its_writes_commit_is_told_nothing_was_written,
    an_atomic_phase_after_a_forced_release_says_the_record_is_gone,
]);

/// A store with transactions (DynamoDB Local; PostgreSQL direct and
/// through PgBouncer) and a table of the application's orders beside it,
/// for the transactional completion's rare paths.
pub(crate) struct Transactional {
    pub(crate) store: Arc<dyn SweepStore>,
    orders: Orders,
}

/// Where the orders are, and how to look at them.
enum Orders {
    Dynamo {
        client: aws_sdk_dynamodb::Client,
        table: String,
    },
    /// `admin` is a direct connection (the store's may go through a pooler).
    Postgres { admin: PostgresStore, table: String },
}

impl Transactional {
    pub(crate) async fn dynamodb() -> Transactional {
        let (store, _) = integration_tests::dynamo_store().await;
        let client = store.client().clone();
        let table = integration_tests::orders_table(&client).await;
        Transactional {
            store: Arc::new(store),
            orders: Orders::Dynamo { client, table },
        }
    }

    pub(crate) async fn postgres(url: &str) -> Transactional {
        let store = integration_tests::postgres_store_at(url).await;
        let admin = PostgresStore::builder(integration_tests::postgres_url())
            .open()
            .unwrap();
        crate::postgres::create_orders(&admin, &store).await;
        let table = crate::postgres::orders(&store);
        Transactional {
            store: Arc::new(store),
            orders: Orders::Postgres { admin, table },
        }
    }

    /// The write that creates order `id`, alone.
    pub(crate) fn order(&self, id: &str) -> DeferredWrites {
        let mut writes = DeferredWrites::new();
        match &self.orders {
            Orders::Dynamo { table, .. } => {
                writes.push(integration_tests::put_new_order(table, id));
            }
            Orders::Postgres { table, .. } => writes.push(postgres_order(table, id)),
        }
        writes
    }

    /// Defer the write that creates order `id` on `ctx`.
    fn defer_order(
        &self,
        ctx: &IdempotencyContext,
        id: &str,
    ) -> Result<(), lambda_idempotency::Error> {
        match &self.orders {
            Orders::Dynamo { table, .. } => {
                ctx.defer_write(integration_tests::put_new_order(table, id))
            }
            Orders::Postgres { table, .. } => ctx.defer_write(postgres_order(table, id)),
        }
    }

    /// Does order `id` exist (read after every write before it)?
    pub(crate) async fn has_order(&self, id: &str) -> bool {
        match &self.orders {
            Orders::Dynamo { client, table } => {
                let key = [(
                    "order_id",
                    aws_sdk_dynamodb::types::AttributeValue::S(id.into()),
                )];
                integration_tests::consistent_item(client, table, key)
                    .await
                    .is_some()
            }
            Orders::Postgres { admin, table } => admin
                .pool()
                .get()
                .await
                .unwrap()
                .query_opt(&format!("SELECT 1 FROM {table} WHERE id = $1"), &[&id])
                .await
                .unwrap()
                .is_some(),
        }
    }
}

fn postgres_order(table: &str, id: &str) -> lambda_idempotency::store::postgres::PgWrite {
    use lambda_idempotency::store::postgres::{PgType, PgWrite};
    PgWrite::new(format!(
        "INSERT INTO {table} (id, state) VALUES ($1, 'created')"
    ))
    .bind(id.to_owned(), PgType::TEXT)
}

/// A record released by an operator while its attempt ran is gone: its
/// transactional completion says so (`RecordGone`, as the plain one does),
/// writes nothing, and is told apart from a completion fenced by a newer
/// attempt. (PostgreSQL once answered `Fenced` for both.)
async fn a_transactional_completion_after_a_forced_release_says_the_record_is_gone(
    t: Transactional,
) {
    let lease = claim_lease(&t.store, "r", "a", 600_000).await;
    let forced = force_resolution(&t.store, "r", lease.attempt, SweepPolicy::Release).await;
    assert_eq!(forced, Resolution::Released);
    let response = response();
    let expires = now_ms() / 1000 + 3600;
    let err = t
        .store
        .complete(CompleteRequest::new(&lease, &response, expires).with_writes(t.order("o-gone")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RecordGone, "{err}");
    assert!(!t.has_order("o-gone").await, "nothing of it committed");
    assert!(t.store.get("r").await.unwrap().is_none(), "nothing stored");

    // A record taken over by a newer attempt is still a fence.
    let stale = claim_lease(&t.store, "s", "a", 30).await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    claim_lease(&t.store, "s", "b", 600_000).await;
    let err = t
        .store
        .complete(CompleteRequest::new(&stale, &response, expires).with_writes(t.order("o-stale")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    assert!(!t.has_order("o-stale").await);
}

/// Through the HTTP layer: a request whose record an operator released
/// while its handler ran is told its writes were not committed
/// (`409 transaction-cancelled`, retry to run again), not that a newer
/// attempt holds it (`409 in-progress`: no attempt does, and none will
/// replay); its retry runs again and commits once.
async fn a_request_whose_record_is_released_before_its_writes_commit_is_told_nothing_was_written(
    t: Transactional,
) {
    let t = Arc::new(t);
    let runs = Runs::default();
    let handler = {
        let (t, runs) = (t.clone(), runs.clone());
        tower::service_fn(move |req: Request| {
            let (t, runs) = (t.clone(), runs.clone());
            async move {
                let first = runs.bump() == 1;
                let ctx = IdempotencyContext::of(&req).ok_or("no context")?;
                if first {
                    let forced = force_resolution(
                        &t.store,
                        ctx.record_id(),
                        ctx.attempt(),
                        SweepPolicy::Release,
                    )
                    .await;
                    assert_eq!(forced, Resolution::Released);
                }
                t.defer_order(ctx, "o-http")?;
                Ok::<_, lambda_http::Error>(
                    Response::builder().status(201).body(Body::from("o-http"))?,
                )
            }
        })
    };
    let svc = IdempotencyLayer::new(t.store.clone()).layer(handler);
    let res = post_order(&svc, "k1").await;
    assert_eq!(res.status(), 409);
    let problem_json = crate::fixture::json(&res);
    assert_eq!(
        problem_json["type"],
        problem::TRANSACTION_CANCELLED.uri,
        "{problem_json}"
    );
    assert!(!t.has_order("o-http").await, "nothing committed");

    let retry = post_order(&svc, "k1").await;
    assert_eq!(retry.status(), 201);
    assert!(t.has_order("o-http").await);
    assert_eq!(
        runs.count(),
        2,
        "the retry ran again: nothing had been stored"
    );
    let replay = post_order(&svc, "k1").await;
    assert_eq!(replay.status(), 201);
    assert_eq!(runs.count(), 2, "then it replays");
}

/// An atomic phase (a recovery point with the handler's writes, one shared
/// transactional path per engine) of a record released while its attempt
/// ran: `RecordGone` as for the completion, and none of its writes
/// committed.
async fn an_atomic_phase_after_a_forced_release_says_the_record_is_gone(t: Transactional) {
    let lease = claim_lease(&t.store, "r", "a", 600_000).await;
    let forced = force_resolution(&t.store, "r", lease.attempt, SweepPolicy::Release).await;
    assert_eq!(forced, Resolution::Released);
    let point = lambda_idempotency::store::Checkpoint {
        name: "charged".into(),
        data: serde_json::json!({ "charge_id": "ch_1" }),
        attempt: lease.attempt,
    };
    let err = t
        .store
        .checkpoint(
            lambda_idempotency::store::CheckpointRequest::new(&lease, &point)
                .with_writes(t.order("o-phase")),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RecordGone, "{err}");
    assert!(!t.has_order("o-phase").await, "nothing of it committed");
    assert!(t.store.get("r").await.unwrap().is_none());
}
