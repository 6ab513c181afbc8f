//! The HTTP contract (docs/DESIGN.md section 7) with the key read from the
//! request's JSON body (`IdempotencyLayer::key_from_body`), as webhook
//! senders send it: the same answers as with the header key, on every store.

use std::time::Duration;

use lambda_http::{Body, Request};
use lambda_idempotency::{http::REPLAYED_HEADER, problem, IdempotencyLayer};
use tower::Layer;

use crate::fixture::{
    call, counting_handler, json, on_both_stores, start_first, Fixture, Handler, Runs,
};

on_both_stores!(
    a_body_key_runs_once_and_replays,
    a_body_key_in_progress_is_409,
    a_body_key_with_another_body_is_422,
    a_missing_body_key_is_400_when_required_and_passes_through_otherwise,
    malformed_body_keys_are_400_and_never_run_the_handler,
    a_body_key_is_scoped_like_a_header_key,
    a_body_nested_too_deep_to_read_is_400_naming_the_depth,
);

/// Webhook senders put the event id in the body, here at `/data/id`.
fn service(f: &Fixture, runs: &Runs, delay: Duration) -> impl Handler {
    IdempotencyLayer::new(f.store.clone())
        .key_from_body("/data/id")
        .layer(counting_handler(runs.clone(), delay))
}

fn webhook(path: &str, body: &str) -> Request {
    http::Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request")
}

fn problem_type(response: &http::Response<Body>) -> String {
    json(response)["type"].as_str().expect("type").to_owned()
}

async fn a_body_key_runs_once_and_replays(f: Fixture) {
    let runs = Runs::default();
    let mut svc = service(&f, &runs, Duration::ZERO);
    let event = r#"{"type":"payment.succeeded","data":{"id":"evt_1","amount":5}}"#;
    let first = call(&mut svc, webhook("/hooks", event)).await;
    assert_eq!(first.status(), 201);
    assert!(first.headers().get(REPLAYED_HEADER).is_none());
    // The same event delivered again, its fields in another order.
    let again = r#"{"data":{"amount":5,"id":"evt_1"},"type":"payment.succeeded"}"#;
    let replay = call(&mut svc, webhook("/hooks", again)).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(replay.body().as_ref(), first.body().as_ref());
    // An integer id is a key too (its decimal text), another event another key.
    call(&mut svc, webhook("/hooks", r#"{"data":{"id":42}}"#)).await;
    let numeric = call(&mut svc, webhook("/hooks", r#"{"data":{"id":42}}"#)).await;
    assert_eq!(numeric.headers()[REPLAYED_HEADER], "true");
    call(&mut svc, webhook("/hooks", r#"{"data":{"id":"evt_2"}}"#)).await;
    assert_eq!(runs.count(), 3);
}

async fn a_body_key_in_progress_is_409(f: Fixture) {
    let runs = Runs::default();
    let svc = service(&f, &runs, Duration::from_millis(800));
    let event = r#"{"data":{"id":"evt_1"}}"#;
    let first = start_first(&svc, webhook("/hooks", event), &runs).await;
    let conflict = call(&mut svc.clone(), webhook("/hooks", event)).await;
    assert_eq!(conflict.status(), 409);
    assert_eq!(problem_type(&conflict), problem::IN_PROGRESS.uri);
    assert!(conflict.headers().get("retry-after").is_some());
    assert_eq!(first.await.unwrap().status(), 201);
    assert_eq!(runs.count(), 1);
}

async fn a_body_key_with_another_body_is_422(f: Fixture) {
    let runs = Runs::default();
    let mut svc = service(&f, &runs, Duration::ZERO);
    call(
        &mut svc,
        webhook("/hooks", r#"{"data":{"id":"evt_1","amount":5}}"#),
    )
    .await;
    let res = call(
        &mut svc,
        webhook("/hooks", r#"{"data":{"id":"evt_1","amount":6}}"#),
    )
    .await;
    assert_eq!(res.status(), 422);
    assert_eq!(problem_type(&res), problem::KEY_REUSED.uri);
    assert_eq!(runs.count(), 1);
}

async fn a_missing_body_key_is_400_when_required_and_passes_through_otherwise(f: Fixture) {
    let runs = Runs::default();
    let mut required = IdempotencyLayer::new(f.store.clone())
        .key_from_body("/data/id")
        .require_key(true)
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    // No `/data/id`, a body that is not JSON, no body at all; and the
    // header, which this layer does not read.
    let mut with_header = webhook("/hooks", r#"{"data":{}}"#);
    with_header
        .headers_mut()
        .insert("idempotency-key", http::HeaderValue::from_static("k1"));
    for req in [
        webhook("/hooks", r#"{"data":{"ID":"evt_1"}}"#),
        webhook("/hooks", "id=evt_1"),
        webhook("/hooks", ""),
        with_header,
    ] {
        let res = call(&mut required, req).await;
        assert_eq!(res.status(), 400);
        assert_eq!(problem_type(&res), problem::KEY_MISSING.uri);
        let detail = json(&res)["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains("/data/id"), "{detail}");
    }
    assert_eq!(runs.count(), 0);

    let mut optional = service(&f, &runs, Duration::ZERO);
    for _ in 0..2 {
        let res = call(&mut optional, webhook("/hooks", r#"{"data":{}}"#)).await;
        assert_eq!(res.status(), 201);
    }
    assert_eq!(runs.count(), 2, "without a key every request runs");
    assert_eq!(f.requests(), 0, "and the store is not consulted");
}

async fn malformed_body_keys_are_400_and_never_run_the_handler(f: Fixture) {
    let runs = Runs::default();
    let mut svc = service(&f, &runs, Duration::ZERO);
    let long = format!(r#"{{"data":{{"id":"{}"}}}}"#, "k".repeat(256));
    for body in [
        r#"{"data":{"id":""}}"#,
        r#"{"data":{"id":"caf\u00e9"}}"#,
        r#"{"data":{"id":1.5}}"#,
        r#"{"data":{"id":true}}"#,
        r#"{"data":{"id":null}}"#,
        r#"{"data":{"id":{"v":1}}}"#,
        r#"{"data":{"id":["evt_1"]}}"#,
        long.as_str(),
    ] {
        let res = call(&mut svc, webhook("/hooks", body)).await;
        assert_eq!(res.status(), 400, "{body}");
        assert_eq!(problem_type(&res), problem::KEY_INVALID.uri, "{body}");
    }
    assert_eq!(runs.count(), 0);
    assert_eq!(f.requests(), 0);
}

async fn a_body_key_is_scoped_like_a_header_key(f: Fixture) {
    let runs = Runs::default();
    let mut svc = service(&f, &runs, Duration::ZERO);
    let event = r#"{"data":{"id":"evt_1"}}"#;
    call(&mut svc, webhook("/hooks/payments", event)).await;
    // The same id on another route is another record.
    let other = call(&mut svc, webhook("/hooks/git", event)).await;
    assert!(other.headers().get(REPLAYED_HEADER).is_none());
    // A header key of the same value, on a header-keyed layer over the same
    // store, is the same record: one key, wherever it was read.
    let mut by_header = IdempotencyLayer::new(f.store.clone())
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let mut req = webhook("/hooks/git", event);
    req.headers_mut()
        .insert("idempotency-key", http::HeaderValue::from_static("evt_1"));
    let same = call(&mut by_header, req).await;
    assert_eq!(same.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 2);
}

/// A body nested deeper than JSON is read (127 levels of arrays and
/// objects) is not a body without a key: without `require_key` it would
/// run unprotected, with it the client would be told to send a key it
/// did send. Either way it is a 400 that names the depth and the limit,
/// and the handler never runs; one level less is read as usual.
async fn a_body_nested_too_deep_to_read_is_400_naming_the_depth(f: Fixture) {
    // The key is right there, beside an array nested `depth - 2` deep
    // (the outer object and `data` are two levels).
    let body = |depth: usize| {
        format!(
            r#"{{"data":{{"id":"evt_deep","items":{}1{}}}}}"#,
            "[".repeat(depth - 2),
            "]".repeat(depth - 2)
        )
    };
    let runs = Runs::default();
    let mut optional = service(&f, &runs, Duration::ZERO);
    let mut required = IdempotencyLayer::new(f.store.clone())
        .key_from_body("/data/id")
        .require_key(true)
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    for (required, res) in [
        (
            false,
            call(&mut optional, webhook("/hooks", &body(200))).await,
        ),
        (
            true,
            call(&mut required, webhook("/hooks", &body(200))).await,
        ),
    ] {
        assert_eq!(res.status(), 400, "require_key {required}");
        assert_eq!(problem_type(&res), problem::KEY_INVALID.uri);
        let detail = json(&res)["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains("nests 200 levels"), "{detail}");
        assert!(detail.contains("at most 127 levels"), "{detail}");
        assert!(detail.contains("/data/id"), "{detail}");
    }
    assert_eq!(runs.count(), 0);
    assert_eq!(f.requests(), 0, "the store is not consulted");

    // At the limit the key is read: the request runs once and replays.
    let first = call(&mut required, webhook("/hooks", &body(127))).await;
    assert_eq!(first.status(), 201);
    let again = call(&mut optional, webhook("/hooks", &body(127))).await;
    assert_eq!(again.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 1);
}
