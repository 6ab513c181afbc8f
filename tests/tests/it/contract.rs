//! Every row of the HTTP contract (docs/DESIGN.md section 7) through the middleware.

use std::sync::Arc;
use std::time::Duration;

use lambda_http::{Body, Request, Response};
use lambda_idempotency::{http::REPLAYED_HEADER, problem, IdempotencyLayer, TenantSource};
use tower::{Layer, Service, ServiceExt};

use crate::fixture::{
    call, counting_handler, json, on_both_stores, post, start_first, Fixture, Handler, Runs,
};

on_both_stores!(
    first_request_runs_and_costs_two_requests,
    retry_replays_stored_response_in_one_request,
    retry_while_in_progress_is_409_with_retry_after_in_one_request,
    same_key_different_body_is_422,
    different_body_while_in_progress_is_422,
    json_key_order_does_not_change_the_fingerprint,
    quoted_and_bare_keys_are_the_same_key,
    missing_key_is_400_when_required_and_passes_through_otherwise,
    malformed_keys_are_400_and_never_run_the_handler,
    uncovered_methods_pass_through,
    server_error_releases_so_a_retry_runs_again,
    server_error_can_be_stored_instead,
    handler_error_releases_so_a_retry_runs_again,
    fifty_concurrent_requests_with_one_key_run_the_handler_once,
    stale_invocation_is_fenced_after_takeover,
    expired_record_runs_again,
    tenants_never_see_each_others_responses,
    binary_body_and_headers_replay_byte_for_byte,
    derived_key_is_stable_across_attempts,
    layer_composes_with_other_tower_layers,
    layer_wraps_an_axum_router,
    local_cache_replays_with_zero_store_requests,
    local_cache_never_holds_in_progress_records,
);

fn service(
    f: &Fixture,
    runs: &Runs,
    delay: Duration,
) -> lambda_idempotency::http::Idempotency<impl Handler> {
    IdempotencyLayer::new(f.store.clone()).layer(counting_handler(runs.clone(), delay))
}

fn problem_type(response: &Response<Body>) -> String {
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    json(response)["type"].as_str().expect("type").to_owned()
}

async fn first_request_runs_and_costs_two_requests(f: Fixture) {
    let runs = Runs::default();
    let mut svc = service(&f, &runs, Duration::ZERO);
    let res = call(&mut svc, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    assert_eq!(res.status(), 201);
    assert!(res.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(json(&res)["attempt"], 1);
    assert_eq!(runs.count(), 1);
    assert_eq!(f.requests(), 2, "claim + complete");
}

async fn retry_replays_stored_response_in_one_request(f: Fixture) {
    let runs = Runs::default();
    let mut svc = service(&f, &runs, Duration::ZERO);
    let first = call(&mut svc, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    let before = f.requests();
    let retry = call(&mut svc, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    assert_eq!(f.requests() - before, 1, "a replay is one claim that lost");
    assert_eq!(runs.count(), 1);
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(retry.headers()["x-run"], first.headers()["x-run"]);
    assert_eq!(retry.body().as_ref(), first.body().as_ref());
}

async fn retry_while_in_progress_is_409_with_retry_after_in_one_request(f: Fixture) {
    let runs = Runs::default();
    let svc = service(&f, &runs, Duration::from_millis(800));
    let first = start_first(&svc, post("/orders", Some("k1"), r#"{"a":1}"#), &runs).await;
    let before = f.requests();
    let mut svc2 = svc.clone();
    let conflict = call(&mut svc2, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    assert_eq!(f.requests() - before, 1);
    assert_eq!(conflict.status(), 409);
    assert_eq!(problem_type(&conflict), problem::IN_PROGRESS.uri);
    let retry_after: u64 = conflict.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    assert_eq!(first.await.unwrap().status(), 201);
    assert_eq!(runs.count(), 1);
}

async fn same_key_different_body_is_422(f: Fixture) {
    let runs = Runs::default();
    let mut svc = service(&f, &runs, Duration::ZERO);
    call(&mut svc, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    let res = call(&mut svc, post("/orders", Some("k1"), r#"{"a":2}"#)).await;
    assert_eq!(res.status(), 422);
    assert_eq!(problem_type(&res), problem::KEY_REUSED.uri);
    assert_eq!(runs.count(), 1);
}

async fn different_body_while_in_progress_is_422(f: Fixture) {
    let runs = Runs::default();
    let svc = service(&f, &runs, Duration::from_millis(500));
    let first = start_first(&svc, post("/orders", Some("k1"), r#"{"a":1}"#), &runs).await;
    let res = call(&mut svc.clone(), post("/orders", Some("k1"), r#"{"a":2}"#)).await;
    assert_eq!(res.status(), 422);
    first.await.unwrap();
    assert_eq!(runs.count(), 1);
}

async fn json_key_order_does_not_change_the_fingerprint(f: Fixture) {
    let runs = Runs::default();
    let mut svc = service(&f, &runs, Duration::ZERO);
    call(
        &mut svc,
        post("/orders", Some("k1"), r#"{"a":1,"b":[1,2]}"#),
    )
    .await;
    let res = call(
        &mut svc,
        post("/orders", Some("k1"), "{ \"b\": [1, 2],\n \"a\": 1 }"),
    )
    .await;
    assert_eq!(res.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 1);
}

async fn quoted_and_bare_keys_are_the_same_key(f: Fixture) {
    let runs = Runs::default();
    let mut svc = service(&f, &runs, Duration::ZERO);
    call(&mut svc, post("/orders", Some("\"k-1\""), "{}")).await;
    let res = call(&mut svc, post("/orders", Some("k-1"), "{}")).await;
    assert_eq!(res.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 1);
}

async fn missing_key_is_400_when_required_and_passes_through_otherwise(f: Fixture) {
    let runs = Runs::default();
    let mut required = IdempotencyLayer::new(f.store.clone())
        .require_key(true)
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let res = call(&mut required, post("/orders", None, "{}")).await;
    assert_eq!(res.status(), 400);
    assert_eq!(problem_type(&res), problem::KEY_MISSING.uri);
    assert!(
        json(&res)["detail"]
            .as_str()
            .unwrap()
            .contains("Idempotency-Key")
            || json(&res)["detail"]
                .as_str()
                .unwrap()
                .contains("idempotency-key")
    );
    assert_eq!(runs.count(), 0);

    let mut optional = service(&f, &runs, Duration::ZERO);
    for _ in 0..2 {
        assert_eq!(
            call(&mut optional, post("/orders", None, "{}"))
                .await
                .status(),
            201
        );
    }
    assert_eq!(runs.count(), 2, "without a key every request runs");
    assert_eq!(f.requests(), 0, "and the store is not consulted");
}

async fn malformed_keys_are_400_and_never_run_the_handler(f: Fixture) {
    let runs = Runs::default();
    let mut svc = service(&f, &runs, Duration::ZERO);
    let long = "k".repeat(256);
    let bad: Vec<http::HeaderValue> = vec![
        http::HeaderValue::from_static(""),
        http::HeaderValue::from_static("\"\""),
        http::HeaderValue::from_str(&long).unwrap(),
        http::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        http::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        http::HeaderValue::from_static("\"unterminated"),
    ];
    for value in bad {
        let mut req = post("/orders", None, "{}");
        req.headers_mut().insert("idempotency-key", value.clone());
        let res = call(&mut svc, req).await;
        assert_eq!(res.status(), 400, "{value:?}");
        assert_eq!(problem_type(&res), problem::KEY_INVALID.uri);
    }
    assert_eq!(runs.count(), 0);
    assert_eq!(f.requests(), 0);
}

async fn uncovered_methods_pass_through(f: Fixture) {
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(f.store.clone())
        .require_key(true)
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    for method in [
        http::Method::GET,
        http::Method::HEAD,
        http::Method::OPTIONS,
        http::Method::PUT,
        http::Method::DELETE,
    ] {
        let req = http::Request::builder()
            .method(method.clone())
            .uri("/orders/1")
            .header("idempotency-key", "k1")
            .body(Body::Empty)
            .unwrap();
        let res = call(&mut svc, req).await;
        assert_eq!(res.status(), 201, "{method}");
        assert!(res.headers().get(REPLAYED_HEADER).is_none());
    }
    assert_eq!(runs.count(), 5);
    assert_eq!(f.requests(), 0);
    // PATCH is covered by default.
    let patch = http::Request::patch("/orders/1")
        .header("idempotency-key", "k1")
        .body(Body::from("{}"))
        .unwrap();
    call(&mut svc, patch).await;
    assert_eq!(f.requests(), 2);
}

fn failing_handler(runs: Runs, status: u16) -> impl Handler {
    tower::service_fn(move |_req: Request| {
        let run = runs.bump();
        async move {
            Ok(Response::builder()
                .status(status)
                .header("x-run", run.to_string())
                .body(Body::from("failed"))?)
        }
    })
}

async fn server_error_releases_so_a_retry_runs_again(f: Fixture) {
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(f.store.clone()).layer(failing_handler(runs.clone(), 502));
    for expected_run in 1..=2 {
        let res = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
        assert_eq!(res.status(), 502);
        assert!(res.headers().get(REPLAYED_HEADER).is_none());
        assert_eq!(res.headers()["x-run"], expected_run.to_string().as_str());
    }
    assert_eq!(f.requests(), 4, "claim + release, twice");
}

async fn server_error_can_be_stored_instead(f: Fixture) {
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(f.store.clone())
        .store_server_errors(true)
        .layer(failing_handler(runs.clone(), 500));
    call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    let res = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(res.status(), 500);
    assert_eq!(res.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 1);
}

async fn handler_error_releases_so_a_retry_runs_again(f: Fixture) {
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        tower::service_fn(move |_req: Request| {
            let run = runs.bump();
            async move {
                if run == 1 {
                    Err(lambda_http::Error::from("database timed out"))
                } else {
                    Ok(Response::builder().status(201).body(Body::from("ok"))?)
                }
            }
        })
    };
    let mut svc = IdempotencyLayer::new(f.store.clone()).layer(handler);
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(post("/orders", Some("k1"), "{}"))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "database timed out");
    assert_eq!(
        call(&mut svc, post("/orders", Some("k1"), "{}"))
            .await
            .status(),
        201
    );
    let replay = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 2);
}

async fn fifty_concurrent_requests_with_one_key_run_the_handler_once(f: Fixture) {
    let runs = Runs::default();
    let svc = service(&f, &runs, Duration::from_millis(20));
    let barrier = Arc::new(tokio::sync::Barrier::new(50));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let mut svc = svc.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            call(&mut svc, post("/orders", Some("storm"), r#"{"amount":5}"#)).await
        }));
    }
    let mut responses = Vec::new();
    for task in tasks {
        responses.push(task.await.unwrap());
    }
    assert_eq!(runs.count(), 1, "the handler body ran exactly once");
    let originals: Vec<_> = responses
        .iter()
        .filter(|r| r.status() == 201 && r.headers().get(REPLAYED_HEADER).is_none())
        .collect();
    assert_eq!(originals.len(), 1);
    let original_body = originals[0].body().as_ref().to_vec();
    for r in &responses {
        match r.status().as_u16() {
            201 => assert_eq!(
                r.body().as_ref(),
                original_body.as_slice(),
                "replays are identical"
            ),
            409 => assert!(r.headers().contains_key("retry-after")),
            other => panic!("unexpected status {other}"),
        }
    }
}

async fn stale_invocation_is_fenced_after_takeover(f: Fixture) {
    let runs = Runs::default();
    // Outside Lambda there is no deadline, so max_lease is the lease.
    let layer = IdempotencyLayer::new(f.store.clone()).max_lease(Duration::from_millis(150));
    let slow = layer.layer(counting_handler(runs.clone(), Duration::from_millis(600)));
    let fast = layer.layer(counting_handler(runs.clone(), Duration::ZERO));

    let mut slow_svc = slow.clone();
    let stale =
        tokio::spawn(async move { call(&mut slow_svc, post("/orders", Some("k1"), "{}")).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut fast_svc = fast.clone();
    let takeover = call(&mut fast_svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(takeover.status(), 201);
    assert_eq!(json(&takeover)["attempt"], 2, "the takeover is attempt 2");

    // The stale invocation finishes later; its completion must be rejected.
    let stale = stale.await.unwrap();
    assert_eq!(json(&stale)["attempt"], 1);
    let replay = call(&mut fast_svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(
        json(&replay)["attempt"],
        2,
        "the stored outcome is the newer attempt's"
    );
    assert_eq!(runs.count(), 2);
}

async fn expired_record_runs_again(f: Fixture) {
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(f.store.clone())
        .expires_after(Duration::ZERO)
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    call(&mut svc, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    // Expiry has one-second resolution (the TTL attribute is epoch seconds).
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let res = call(&mut svc, post("/orders", Some("k1"), r#"{"a":2}"#)).await;
    assert_eq!(res.status(), 201);
    assert!(res.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(json(&res)["attempt"], 2);
    assert_eq!(runs.count(), 2);
}

fn jwt_request(sub: &str, key: &str) -> Request {
    let event = serde_json::json!({
        "version": "2.0",
        "routeKey": "POST /orders",
        "rawPath": "/orders",
        "rawQueryString": "",
        "headers": {"content-type": "application/json", "idempotency-key": key},
        "requestContext": {
            "accountId": "123456789012", "apiId": "api", "domainName": "api.example.com",
            "domainPrefix": "api", "requestId": "r", "routeKey": "POST /orders", "stage": "$default",
            "time": "12/Mar/2020:19:03:58 +0000", "timeEpoch": 1583348638390u64,
            "http": {"method": "POST", "path": "/orders", "protocol": "HTTP/1.1",
                     "sourceIp": "192.0.2.1", "userAgent": "test"},
            "authorizer": {"jwt": {"claims": {"sub": sub}, "scopes": null}}
        },
        "body": "{\"amount\":5}",
        "isBase64Encoded": false
    });
    lambda_http::request::from_str(&event.to_string()).expect("valid HTTP API event")
}

async fn tenants_never_see_each_others_responses(f: Fixture) {
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        tower::service_fn(move |req: Request| {
            runs.bump();
            let tenant = TenantSource::jwt_sub().resolve(&req).unwrap_or_default();
            async move {
                Ok::<_, lambda_http::Error>(
                    Response::builder()
                        .status(201)
                        .body(Body::from(format!("order of {tenant}")))?,
                )
            }
        })
    };
    let mut svc = IdempotencyLayer::new(f.store.clone())
        .tenant(TenantSource::jwt_sub())
        .layer(handler);
    let a = call(&mut svc, jwt_request("tenant-a", "same-key")).await;
    let b = call(&mut svc, jwt_request("tenant-b", "same-key")).await;
    assert_eq!(a.body().as_ref(), b"order of tenant-a");
    assert_eq!(b.body().as_ref(), b"order of tenant-b");
    assert!(b.headers().get(REPLAYED_HEADER).is_none());
    let b_again = call(&mut svc, jwt_request("tenant-b", "same-key")).await;
    assert_eq!(b_again.body().as_ref(), b"order of tenant-b");
    assert_eq!(b_again.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 2);
}

async fn binary_body_and_headers_replay_byte_for_byte(f: Fixture) {
    let bytes: Vec<u8> = (0..=255u8).chain([0, 0xff, 0xc3, 0x28]).collect();
    let handler = {
        let bytes = bytes.clone();
        tower::service_fn(move |_req: Request| {
            let bytes = bytes.clone();
            async move {
                Ok::<_, lambda_http::Error>(
                    Response::builder()
                        .status(200)
                        .header("content-type", "application/octet-stream")
                        .header("set-cookie", "a=1")
                        .header("set-cookie", "b=2")
                        .header(
                            "x-opaque",
                            http::HeaderValue::from_bytes(b"\xe9t\xe9 \x80").unwrap(),
                        )
                        .body(Body::Binary(bytes))?,
                )
            }
        })
    };
    let mut svc = IdempotencyLayer::new(f.store.clone()).layer(handler);
    let first = call(&mut svc, post("/files", Some("k1"), "{}")).await;
    let replay = call(&mut svc, post("/files", Some("k1"), "{}")).await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(replay.status(), first.status());
    assert!(matches!(replay.body(), Body::Binary(b) if *b == bytes));
    let mut first_headers: Vec<_> = first
        .headers()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut replay_headers: Vec<_> = replay
        .headers()
        .iter()
        .filter(|(k, _)| k.as_str() != REPLAYED_HEADER)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    first_headers
        .sort_by(|a, b| (a.0.as_str(), a.1.as_bytes()).cmp(&(b.0.as_str(), b.1.as_bytes())));
    replay_headers
        .sort_by(|a, b| (a.0.as_str(), a.1.as_bytes()).cmp(&(b.0.as_str(), b.1.as_bytes())));
    assert_eq!(first_headers, replay_headers);
    assert_eq!(first_headers.len(), 4);
}

async fn derived_key_is_stable_across_attempts(f: Fixture) {
    let runs = Runs::default();
    let layer = IdempotencyLayer::new(f.store.clone()).max_lease(Duration::from_millis(100));
    let crashing = layer.layer(tower::service_fn(|_req: Request| async {
        // Simulates a crash: the invocation never returns before its lease ends.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok::<_, lambda_http::Error>(Response::new(Body::Empty))
    }));
    let crashed = tokio::spawn(crashing.clone().oneshot(post("/orders", Some("k1"), "{}")));
    tokio::time::sleep(Duration::from_millis(50)).await;
    crashed.abort();
    tokio::time::sleep(Duration::from_millis(150)).await;

    let mut svc = layer.layer(counting_handler(runs.clone(), Duration::ZERO));
    let resumed = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(json(&resumed)["attempt"], 2);
    let expected = lambda_idempotency::IdempotencyContext::new(
        lambda_idempotency::scope::RecordScope::new("POST", "/orders", "k1").record_id(),
        1,
    )
    .with_fingerprint(lambda_idempotency::Fingerprinter::new().fingerprint(
        "POST",
        "/orders",
        &[],
        b"{}",
    ))
    .derived_key("charge");
    assert_eq!(json(&resumed)["charge_key"], expected.as_str());
}

async fn layer_composes_with_other_tower_layers(f: Fixture) {
    let runs = Runs::default();
    let mut svc = tower::ServiceBuilder::new()
        .map_response(|mut res: Response<Body>| {
            res.headers_mut()
                .insert("x-outer", http::HeaderValue::from_static("1"));
            res
        })
        .layer(IdempotencyLayer::new(f.store.clone()))
        .map_request(|mut req: Request| {
            req.headers_mut()
                .insert("x-inner", http::HeaderValue::from_static("1"));
            req
        })
        .service(counting_handler(runs.clone(), Duration::ZERO));
    let first = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    let replay = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(first.headers()["x-outer"], "1");
    assert_eq!(replay.headers()["x-outer"], "1");
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 1);
}

async fn layer_wraps_an_axum_router(f: Fixture) {
    let runs = Runs::default();
    let router = {
        let runs = runs.clone();
        axum::Router::new()
            .route(
                "/orders",
                axum::routing::post(move |body: String| {
                    let run = runs.bump();
                    async move { (http::StatusCode::CREATED, format!("run {run}: {body}")) }
                }),
            )
            .route("/orders/{id}", axum::routing::get(|| async { "an order" }))
    };
    let mut svc = IdempotencyLayer::new(f.store.clone()).layer(router);
    let first = call_axum(&mut svc, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    let replay = call_axum(&mut svc, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    assert_eq!(first.status(), 201);
    assert_eq!(first.body().as_ref(), br#"run 1: {"a":1}"#);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(replay.body().as_ref(), first.body().as_ref());
    let get = http::Request::get("/orders/7").body(Body::Empty).unwrap();
    assert_eq!(call_axum(&mut svc, get).await.body().as_ref(), b"an order");
    assert_eq!(runs.count(), 1);
}

async fn call_axum(
    svc: &mut lambda_idempotency::http::Idempotency<axum::Router>,
    req: Request,
) -> Response<Body> {
    match svc.ready().await {
        Ok(ready) => match ready.call(req).await {
            Ok(response) => response,
            Err(never) => match never {},
        },
        Err(never) => match never {},
    }
}

async fn local_cache_replays_with_zero_store_requests(f: Fixture) {
    let runs = Runs::default();
    let layer = IdempotencyLayer::new(f.store.clone()).local_cache(100, Duration::from_secs(60));
    let mut svc = layer.layer(counting_handler(runs.clone(), Duration::ZERO));
    let first = call(&mut svc, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    assert_eq!(f.requests(), 2);
    let replay = call(&mut svc, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    assert_eq!(f.requests(), 2, "a cache hit costs zero store requests");
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(replay.body().as_ref(), first.body().as_ref());
    // Payload validation still applies on a hit.
    let reused = call(&mut svc, post("/orders", Some("k1"), r#"{"a":2}"#)).await;
    assert_eq!(reused.status(), 422);
    assert_eq!(f.requests(), 2);

    // Another instance (its own cache) learns the record from the store once.
    let mut other = IdempotencyLayer::new(f.store.clone())
        .local_cache(100, Duration::from_secs(60))
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    call(&mut other, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    assert_eq!(f.requests(), 3);
    let again = call(&mut other, post("/orders", Some("k1"), r#"{"a":1}"#)).await;
    assert_eq!(f.requests(), 3);
    assert_eq!(again.body().as_ref(), first.body().as_ref());
    assert_eq!(runs.count(), 1);
}

async fn local_cache_never_holds_in_progress_records(f: Fixture) {
    let runs = Runs::default();
    let layer = IdempotencyLayer::new(f.store.clone()).local_cache(100, Duration::from_secs(60));
    let svc = layer.layer(counting_handler(runs.clone(), Duration::from_millis(400)));
    let first = start_first(&svc, post("/orders", Some("k1"), "{}"), &runs).await;
    for _ in 0..2 {
        let before = f.requests();
        let conflict = call(&mut svc.clone(), post("/orders", Some("k1"), "{}")).await;
        assert_eq!(conflict.status(), 409);
        assert_eq!(
            f.requests() - before,
            1,
            "in-progress answers always come from the store"
        );
    }
    first.await.unwrap();
    assert_eq!(runs.count(), 1);
}
