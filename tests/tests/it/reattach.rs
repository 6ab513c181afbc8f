//! Re-attach on HTTP ([`IdempotencyLayer::wait_for`]): a retry that finds
//! the same request in progress waits for its response instead of a `409`,
//! on every engine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lambda_http::{Body, Error, Request, Response};
use lambda_idempotency::scope::RecordScope;
use lambda_idempotency::store::{
    CheckpointRequest, ClaimOutcome, ClaimRequest, CompleteRequest, Completion, Lease,
    StoredRecord, SweepStore,
};
use lambda_idempotency::sweeper::SweepPolicy;
use lambda_idempotency::{
    http::REPLAYED_HEADER, problem, store::Resolution, IdempotencyLayer, Store,
};
use tower::{Layer, ServiceExt};

use crate::fixture::{
    call, counting_handler, force_resolution, json, on_both_stores, post, start_first, Fixture,
    Handler, Runs,
};

on_both_stores!(
    duplicates_in_flight_answer_the_first_response,
    a_wait_shorter_than_the_first_call_answers_409,
    another_body_answers_422_without_waiting,
    a_first_call_released_meanwhile_lets_the_waiter_run,
    a_first_call_failed_meanwhile_answers_its_stored_problem,
    a_waiter_whose_deadline_comes_first_answers_409_in_time,
    a_poll_that_fails_answers_503_and_never_runs_the_handler,
);

/// The request every test sends (`POST /orders`, key `k1`).
fn order(body: &str) -> Request {
    post("/orders", Some("k1"), body)
}

/// `svc` answering `req` in a task of its own.
fn spawn_call<S: Handler>(svc: &S, req: Request) -> tokio::task::JoinHandle<Response<Body>> {
    let mut svc = svc.clone();
    tokio::spawn(async move { call(&mut svc, req).await })
}

/// The middleware on `f`'s store with `handler`, waiting up to `wait`.
fn waiting(f: &Fixture, wait: Duration, handler: impl Handler) -> impl Handler {
    IdempotencyLayer::new(f.store.clone())
        .wait_for(wait)
        .layer(handler)
}

fn retry_after(response: &Response<Body>) -> u64 {
    response.headers()["retry-after"]
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("seconds")
}

async fn duplicates_in_flight_answer_the_first_response(f: Fixture) {
    let runs = Runs::default();
    let svc = waiting(
        &f,
        Duration::from_secs(10),
        counting_handler(runs.clone(), Duration::from_millis(700)),
    );
    let first = start_first(&svc, order(r#"{"a":1}"#), &runs).await;
    let before = f.requests();
    let waiters: Vec<_> = (0..3)
        .map(|_| spawn_call(&svc, order(r#"{"a":1}"#)))
        .collect();
    let first = first.await.expect("the first call answers");
    assert_eq!(first.status(), 201);
    for waiter in waiters {
        let answer = waiter.await.expect("the waiter answers");
        assert_eq!(answer.status(), 201);
        assert_eq!(answer.headers()[REPLAYED_HEADER], "true");
        assert_eq!(answer.headers()["x-run"], first.headers()["x-run"]);
        assert_eq!(
            answer.headers()["content-type"],
            first.headers()["content-type"]
        );
        assert_eq!(
            answer.body().as_ref(),
            first.body().as_ref(),
            "byte for byte"
        );
    }
    assert_eq!(runs.count(), 1, "only the first call ran the handler");
    // Each waiter: one claim, then polls 50 ms apart doubling to 1 s (each
    // up to half shorter), which fit at most 6 times into the first call's
    // 700 ms and its completion; the completion is the one other request.
    let made = f.requests() - before;
    assert!(
        (3 * 2 + 1..=3 * (1 + 6) + 1).contains(&made),
        "{made} requests"
    );
}

async fn a_wait_shorter_than_the_first_call_answers_409(f: Fixture) {
    let runs = Runs::default();
    let handler = counting_handler(runs.clone(), Duration::from_secs(3));
    let first = start_first(
        &waiting(&f, Duration::from_secs(10), handler.clone()),
        order(r#"{"a":1}"#),
        &runs,
    )
    .await;
    let started = Instant::now();
    let conflict = call(
        &mut waiting(&f, Duration::from_millis(400), handler),
        order(r#"{"a":1}"#),
    )
    .await;
    let waited = started.elapsed();
    assert_eq!(conflict.status(), 409);
    assert_eq!(json(&conflict)["type"], problem::IN_PROGRESS.uri);
    assert!(retry_after(&conflict) >= 1);
    // It took its whole allowance (less the clock's rounding) before it
    // gave up.
    assert!(
        waited >= Duration::from_millis(395),
        "it waited {waited:?} of 400 ms"
    );
    assert_eq!(first.await.expect("the first call answers").status(), 201);
    assert_eq!(runs.count(), 1);
}

async fn another_body_answers_422_without_waiting(f: Fixture) {
    let runs = Runs::default();
    let svc = waiting(
        &f,
        Duration::from_secs(10),
        counting_handler(runs.clone(), Duration::from_millis(1_500)),
    );
    let first = start_first(&svc, order(r#"{"a":1}"#), &runs).await;
    let before = f.requests();
    let reused = call(&mut svc.clone(), order(r#"{"a":2}"#)).await;
    assert_eq!(reused.status(), 422);
    assert_eq!(json(&reused)["type"], problem::KEY_REUSED.uri);
    assert_eq!(
        f.requests() - before,
        1,
        "one claim and not a single poll: it did not wait"
    );
    assert!(
        !first.is_finished(),
        "answered while the first call still runs"
    );
    assert_eq!(first.await.expect("the first call answers").status(), 201);
    assert_eq!(runs.count(), 1);
}

/// A handler whose first run fails with a `500` after `delay` (the key is
/// released), and whose later runs answer as [`counting_handler`] at once.
fn fails_first(runs: Runs, delay: Duration) -> impl Handler {
    let later = counting_handler(runs.clone(), Duration::ZERO);
    tower::service_fn(move |req: Request| {
        let (runs, later) = (runs.clone(), later.clone());
        async move {
            if runs.count() == 0 {
                runs.bump();
                tokio::time::sleep(delay).await;
                return Ok::<_, Error>(Response::builder().status(500).body(Body::Empty)?);
            }
            later.oneshot(req).await
        }
    })
}

async fn a_first_call_released_meanwhile_lets_the_waiter_run(f: Fixture) {
    let runs = Runs::default();
    let svc = waiting(
        &f,
        Duration::from_secs(10),
        fails_first(runs.clone(), Duration::from_millis(400)),
    );
    let first = start_first(&svc, order(r#"{"a":1}"#), &runs).await;
    let waiter = spawn_call(&svc, order(r#"{"a":1}"#));
    assert_eq!(first.await.expect("the first call answers").status(), 500);
    // The key was released: the waiter claimed it and ran, as a retry would.
    let ran = waiter.await.expect("the waiter answers");
    assert_eq!(ran.status(), 201);
    assert!(ran.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(ran.headers()["x-run"], "2");
    assert_eq!(json(&ran)["attempt"], 1, "a new record, not a takeover");
    // Its response is the one that replays now.
    let retry = call(&mut svc.clone(), order(r#"{"a":1}"#)).await;
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(retry.body().as_ref(), ran.body().as_ref());
    assert_eq!(runs.count(), 2);
}

async fn a_first_call_failed_meanwhile_answers_its_stored_problem(f: Fixture) {
    let runs = Runs::default();
    // The first call's invocation is gone (its future dropped) and holds its
    // key for a minute; an operator fails the key (`fail --force`, the
    // sweeper's fenced resolution) while a retry waits.
    let handler = counting_handler(runs.clone(), Duration::from_secs(3_600));
    let first = start_first(
        &IdempotencyLayer::new(f.store.clone())
            .max_lease(Duration::from_secs(60))
            .layer(handler.clone()),
        order(r#"{"a":1}"#),
        &runs,
    )
    .await;
    first.abort();
    let svc = waiting(&f, Duration::from_secs(10), handler);
    let waiter = spawn_call(&svc, order(r#"{"a":1}"#));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the retry waits");
    let id = RecordScope::new("POST", "/orders", "k1").record_id();
    assert_eq!(
        force_resolution(&f.store, &id, 1, SweepPolicy::Fail).await,
        Resolution::Failed
    );
    let answer = waiter.await.expect("the waiter answers");
    assert_eq!(answer.status(), 500);
    assert_eq!(answer.headers()[REPLAYED_HEADER], "true");
    assert_eq!(json(&answer)["type"], problem::ABANDONED.uri);
    assert_eq!(runs.count(), 1, "the handler never ran again");
}

async fn a_waiter_whose_deadline_comes_first_answers_409_in_time(f: Fixture) {
    let runs = Runs::default();
    let handler = counting_handler(runs.clone(), Duration::from_secs(4));
    let first = start_first(
        &waiting(&f, Duration::from_secs(60), handler.clone()),
        order(r#"{"a":1}"#),
        &runs,
    )
    .await;
    // Its invocation ends in 1.6 s: the wait (up to a minute) stops 1 s
    // before, so the 409 is answered with time to spare.
    let mut context = lambda_runtime::Context::default();
    context.deadline = crate::fixture::now_ms() + 1_600;
    let deadline = Instant::now() + Duration::from_millis(1_600);
    let mut req = order(r#"{"a":1}"#);
    req.extensions_mut().insert(context);
    let conflict = call(&mut waiting(&f, Duration::from_secs(60), handler), req).await;
    assert_eq!(conflict.status(), 409);
    assert!(
        Instant::now() < deadline,
        "it never waits past its deadline"
    );
    assert!(retry_after(&conflict) >= 1);
    assert_eq!(first.await.expect("the first call answers").status(), 201);
    assert_eq!(runs.count(), 1);
}

/// `f`'s store with every read failing (the store unreachable), its writes
/// as they are: what a waiter's polls meet when the store goes away.
#[derive(Debug)]
struct ReadsFail(Arc<dyn SweepStore>);

#[async_trait::async_trait]
impl Store for ReadsFail {
    async fn claim(
        &self,
        request: &ClaimRequest,
    ) -> Result<ClaimOutcome, lambda_idempotency::Error> {
        self.0.claim(request).await
    }
    async fn complete(
        &self,
        request: CompleteRequest<'_>,
    ) -> Result<Completion, lambda_idempotency::Error> {
        self.0.complete(request).await
    }
    async fn release(&self, lease: &Lease) -> Result<(), lambda_idempotency::Error> {
        self.0.release(lease).await
    }
    async fn checkpoint(
        &self,
        request: CheckpointRequest<'_>,
    ) -> Result<(), lambda_idempotency::Error> {
        self.0.checkpoint(request).await
    }
    async fn get(&self, _: &str) -> Result<Option<StoredRecord>, lambda_idempotency::Error> {
        Err(lambda_idempotency::Error::store_unavailable(
            "the read failed on purpose",
            "injected",
        ))
    }
}

async fn a_poll_that_fails_answers_503_and_never_runs_the_handler(f: Fixture) {
    let runs = Runs::default();
    let handler = counting_handler(runs.clone(), Duration::from_millis(800));
    let first = start_first(
        &waiting(&f, Duration::from_secs(10), handler.clone()),
        order(r#"{"a":1}"#),
        &runs,
    )
    .await;
    let mut svc = IdempotencyLayer::new(ReadsFail(f.store.clone()))
        .wait_for(Duration::from_secs(10))
        .layer(handler);
    let refused = call(&mut svc, order(r#"{"a":1}"#)).await;
    // Fail closed: not the first request's answer, not a run of its own.
    assert_eq!(refused.status(), 503);
    assert_eq!(json(&refused)["type"], problem::STORE_UNAVAILABLE.uri);
    assert!(retry_after(&refused) >= 1);
    assert_eq!(first.await.expect("the first call answers").status(), 201);
    assert_eq!(runs.count(), 1);
    // The first request's record is untouched: a retry replays it.
    let retry = call(&mut svc, order(r#"{"a":1}"#)).await;
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
}
