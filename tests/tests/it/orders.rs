//! The example `orders-api` function on DynamoDB Local, with tables made from
//! template.yaml, fed the sample events in `events/`.

use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::client;
use lambda_http::{Body, Request, Response};
use lambda_idempotency::{http::REPLAYED_HEADER, IdempotencyContext};
use orders_api::{Config, Orders};
use tower::{Layer, Service, ServiceExt};

use crate::fixture::json;

struct App {
    client: aws_sdk_dynamodb::Client,
    /// The function's own client: its calls are recorded as orders-api's
    /// (scripts/check-iam.py); the harness reads back through `client`.
    function: aws_sdk_dynamodb::Client,
    config: Config,
}

impl App {
    async fn new(provider_latency_ms: u64) -> App {
        let client = client().await;
        let idempotency_table = integration_tests::create_table(&client).await;
        let orders_table = integration_tests::orders_table(&client).await;
        let config = Config {
            idempotency_table,
            engine: Default::default(),
            orders_table,
            provider_latency: Duration::from_millis(provider_latency_ms),
            expires_after: Duration::from_secs(3600),
            max_lease: Duration::from_secs(900),
            wait_for_result: Duration::ZERO,
            demo_crashes: false,
            metrics_namespace: None,
            // No authorizer in front of these tests: the shared anonymous
            // scope, as the template sets it without a JWT authorizer. The
            // fail-closed default has its own test.
            allow_anonymous: true,
            offload: None,
            powertools: None,
            disabled: false,
            warm_up: true,
        };
        let function = integration_tests::iam_record::dynamodb_client("orders-api").await;
        App {
            client,
            function,
            config,
        }
    }

    /// The idempotency table's store, as `orders_api::app` builds it.
    fn store(&self) -> lambda_idempotency::DynamoStore {
        lambda_idempotency::DynamoStore::builder(
            self.client.clone(),
            self.config.idempotency_table.clone(),
        )
        .open()
        .unwrap()
    }

    async fn call(&self, req: Request) -> Response<Body> {
        orders_api::app(self.function.clone(), &self.config)
            .oneshot(req)
            .await
            .expect("response")
    }

    async fn charges(&self) -> usize {
        integration_tests::scan_all(&self.client, &self.config.orders_table)
            .await
            .unwrap()
            .iter()
            .filter(|i| i["order_id"].as_s().unwrap().starts_with("charge#"))
            .count()
    }
}

fn events_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../events")
}

fn event(name: &str) -> Request {
    let path = events_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    lambda_http::request::from_str(&text)
        .unwrap_or_else(|e| panic!("{name} is not an HTTP event lambda_http accepts: {e}"))
}

fn order(key: Option<&str>, body: &str) -> Request {
    let mut b = http::Request::post("/orders").header("content-type", "application/json");
    if let Some(key) = key {
        b = b.header("idempotency-key", key);
    }
    b.body(Body::from(body.to_owned())).unwrap()
}

const BODY: &str = r#"{"customer_id":"cus_1","amount":2500,"currency":"EUR"}"#;

/// Every HTTP sample event, in the order they are played, with the status the
/// function must answer. A new file in events/ must be added here.
const HTTP_EVENTS: &[(&str, u16)] = &[
    ("http-api-post-order.json", 201),
    ("http-api-post-order-same-key-other-body.json", 422),
    ("http-api-post-order-no-key.json", 400),
    ("http-api-post-order-jwt-tenant.json", 201),
    ("http-api-get-order.json", 200),
    ("rest-api-post-order.json", 201),
    ("function-url-post-order.json", 201),
    ("alb-post-order.json", 201),
];

#[tokio::test]
async fn every_sample_event_gets_its_expected_status() {
    let mut files: Vec<String> = std::fs::read_dir(events_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    let known: Vec<&str> = HTTP_EVENTS
        .iter()
        .map(|(n, _)| *n)
        .chain(crate::NON_HTTP_EVENTS.iter().copied())
        .collect();
    for file in &files {
        assert!(
            known.contains(&file.as_str()),
            "events/{file} has no expected outcome in a test"
        );
    }

    let app = App::new(0).await;
    let mut first_order = None;
    for (name, status) in HTTP_EVENTS {
        let res = app.call(event(name)).await;
        assert_eq!(
            res.status().as_u16(),
            *status,
            "{name}: {}",
            String::from_utf8_lossy(res.body().as_ref())
        );
        if *name == "http-api-post-order.json" {
            first_order = Some(json(&res));
        }
        if *name == "http-api-post-order-jwt-tenant.json" {
            let first = first_order.as_ref().unwrap();
            assert!(
                res.headers().get(REPLAYED_HEADER).is_none(),
                "another tenant's key is its own"
            );
            assert_ne!(json(&res)["order_id"], first["order_id"]);
        }
        if *name == "http-api-get-order.json" {
            let first = first_order.as_ref().unwrap();
            assert_eq!(
                json(&res)["order_id"],
                first["order_id"],
                "the GET sample targets the first sample's order"
            );
            assert_eq!(json(&res)["executions"], 1);
        }
    }
}

#[tokio::test]
async fn create_replay_and_get_an_order() {
    let app = App::new(0).await;
    let created = app.call(order(Some("k1"), BODY)).await;
    assert_eq!(created.status(), 201);
    let body = json(&created);
    assert_eq!(body["customer_id"], "cus_1");
    assert_eq!(body["amount"], 2500);
    assert_eq!(body["currency"], "EUR");
    assert_eq!(body["executions"], 1);
    assert!(body["charge_id"].as_str().unwrap().starts_with("ch_"));
    let order_id = body["order_id"].as_str().unwrap().to_owned();
    let expected_id = IdempotencyContext::new(
        lambda_idempotency::scope::RecordScope::new("POST", "/orders", "k1").record_id(),
        1,
    )
    .with_fingerprint(lambda_idempotency::Fingerprinter::new().fingerprint(
        "POST",
        "/orders",
        &[],
        BODY.as_bytes(),
    ))
    .derived_key("order");
    assert_eq!(
        order_id, expected_id,
        "the order id is derived from the idempotency record"
    );
    assert_eq!(
        created.headers()["location"],
        format!("/orders/{order_id}").as_str()
    );

    let replay = app.call(order(Some("k1"), BODY)).await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(replay.body().as_ref(), created.body().as_ref());

    let get = http::Request::get(format!("/orders/{order_id}"))
        .body(Body::Empty)
        .unwrap();
    let fetched = app.call(get).await;
    assert_eq!(fetched.status(), 200);
    assert_eq!(json(&fetched)["executions"], 1);
    assert_eq!(app.charges().await, 1);

    let missing = http::Request::get("/orders/00000000000000000000000000000000")
        .body(Body::Empty)
        .unwrap();
    assert_eq!(app.call(missing).await.status(), 404);
    let not_an_order = http::Request::get("/orders/charge%23x")
        .body(Body::Empty)
        .unwrap();
    assert_eq!(app.call(not_an_order).await.status(), 404);
}

/// A `POST /orders` HTTP API event, with a JWT `sub` when given.
fn order_as(sub: Option<&str>, key: &str) -> Request {
    let authorizer = match sub {
        Some(sub) => serde_json::json!({"jwt": {"claims": {"sub": sub}, "scopes": null}}),
        None => serde_json::json!({}),
    };
    http_api(
        "POST",
        "POST /orders",
        "/orders",
        Some(key),
        BODY,
        authorizer,
    )
}

fn http_api(
    method: &str,
    route_key: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
    authorizer: serde_json::Value,
) -> Request {
    let mut headers = serde_json::json!({"content-type": "application/json"});
    if let Some(key) = key {
        headers["idempotency-key"] = key.into();
    }
    let event = serde_json::json!({
        "version": "2.0", "routeKey": route_key, "rawPath": path, "rawQueryString": "",
        "headers": headers, "isBase64Encoded": false, "body": body,
        "requestContext": {"accountId": "1", "apiId": "a", "domainName": "d", "domainPrefix": "d",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "1.2.3.4", "userAgent": "u"},
            "requestId": "r", "routeKey": route_key, "stage": "$default", "time": "t", "timeEpoch": 0,
            "authorizer": authorizer}
    });
    lambda_http::request::from_str(&event.to_string()).expect("HTTP API event")
}

#[tokio::test]
async fn without_a_sub_claim_orders_are_refused_and_orders_belong_to_their_tenant() {
    let mut app = App::new(0).await;
    app.config.allow_anonymous = false;
    let refused = app.call(order_as(None, "k1")).await;
    assert_eq!(refused.status(), 401);
    assert_eq!(
        json(&refused)["type"],
        lambda_idempotency::problem::TENANT_MISSING.uri
    );
    assert_eq!(app.charges().await, 0, "nothing ran");

    let created = app.call(order_as(Some("alice"), "k1")).await;
    assert_eq!(created.status(), 201);
    let order_id = json(&created)["order_id"].as_str().unwrap().to_owned();
    let get = |sub: Option<&str>| {
        let authorizer = match sub {
            Some(sub) => serde_json::json!({"jwt": {"claims": {"sub": sub}, "scopes": null}}),
            None => serde_json::json!({}),
        };
        let path = format!("/orders/{order_id}");
        http_api("GET", "GET /orders/{order_id}", &path, None, "", authorizer)
    };
    assert_eq!(app.call(get(Some("alice"))).await.status(), 200);
    assert_eq!(
        app.call(get(Some("mallory"))).await.status(),
        404,
        "another tenant's order is not found"
    );
    assert_eq!(app.call(get(None)).await.status(), 401);

    // With the anonymous scope allowed, anonymous callers still cannot read
    // a tenant's order.
    app.config.allow_anonymous = true;
    assert_eq!(app.call(get(None)).await.status(), 404);
}

#[tokio::test]
async fn a_failed_dependency_answers_503_without_its_error_text() {
    let mut app = App::new(0).await;
    app.config.orders_table = "no-such-orders-table".into();
    let res = app.call(order(Some("k1"), BODY)).await;
    assert_eq!(res.status(), 503);
    let detail = json(&res)["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains("retry with the same Idempotency-Key"),
        "{detail}"
    );
    for leak in [
        "no-such-orders-table",
        "ResourceNotFound",
        "DynamoDB",
        "arn:",
    ] {
        assert!(
            !detail.contains(leak),
            "the detail leaks {leak:?}: {detail}"
        );
    }
}

#[tokio::test]
async fn invalid_orders_and_missing_keys_are_400_problems() {
    let app = App::new(0).await;
    for (i, body) in [
        "not json",
        r#"{"customer_id":"c","amount":-1,"currency":"EUR"}"#,
        r#"{"customer_id":"c","amount":1,"currency":"euro"}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let res = app.call(order(Some(&format!("bad-{i}")), body)).await;
        assert_eq!(res.status(), 400, "{body}");
        assert_eq!(res.headers()["content-type"], "application/problem+json");
        assert_eq!(json(&res)["type"], orders_api::problems::INVALID_ORDER);
    }
    let res = app.call(order(None, BODY)).await;
    assert_eq!(res.status(), 400);
    assert_eq!(
        json(&res)["type"],
        lambda_idempotency::problem::KEY_MISSING.uri
    );
    assert_eq!(app.charges().await, 0);
}

#[tokio::test]
async fn concurrent_duplicate_is_409_while_the_provider_is_slow() {
    let app = std::sync::Arc::new(App::new(600).await);
    let first = {
        let app = app.clone();
        tokio::spawn(async move { app.call(order(Some("slow"), BODY)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let duplicate = app.call(order(Some("slow"), BODY)).await;
    assert_eq!(duplicate.status(), 409);
    assert!(duplicate.headers().contains_key("retry-after"));
    let first = first.await.unwrap();
    assert_eq!(first.status(), 201);
    assert_eq!(json(&first)["executions"], 1);
}

/// `IDEMPOTENCY_WAIT_FOR_RESULT_MS`: the duplicate waits for the first
/// order's answer and replays it (its polls are the function's consistent
/// `GetItem`s of its idempotency record, recorded for scripts/check-iam.py).
#[tokio::test]
async fn concurrent_duplicate_waits_for_the_first_answer_when_configured() {
    let mut app = App::new(600).await;
    app.config.wait_for_result = Duration::from_secs(10);
    let app = std::sync::Arc::new(app);
    let first = {
        let app = app.clone();
        tokio::spawn(async move { app.call(order(Some("slow"), BODY)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let duplicate = app.call(order(Some("slow"), BODY)).await;
    let first = first.await.unwrap();
    assert_eq!(first.status(), 201);
    assert_eq!(duplicate.status(), 201);
    assert_eq!(duplicate.headers()[REPLAYED_HEADER], "true");
    assert_eq!(duplicate.body().as_ref(), first.body().as_ref());
    assert_eq!(json(&first)["executions"], 1);
    assert_eq!(app.charges().await, 1, "charged once");
}

#[tokio::test]
async fn a_takeover_resumes_after_the_charge_without_calling_the_provider_again() {
    // Attempt 1 runs every phase but "crashes" before its completion is
    // stored; attempt 2 takes the record over and inherits the `charged`
    // recovery point.
    let app = App::new(0).await;
    let store = app.store();
    let mut orders = Orders::new(app.client.clone(), &app.config);
    let record =
        lambda_idempotency::scope::RecordScope::new("POST", "/orders", "crash").record_id();
    let claim = |owner: &str| {
        let now = crate::fixture::now_ms();
        lambda_idempotency::store::ClaimRequest {
            record_id: record.clone(),
            fingerprint: "fp".into(),
            owner: owner.into(),
            now_ms: now,
            lease_expires_at_ms: now + 50,
            expires_at_s: now / 1000 + 3600,
            origin: None,
        }
    };
    let mut responses = Vec::new();
    for owner in ["attempt-1", "attempt-2"] {
        let lease = match lambda_idempotency::Store::claim(&store, &claim(owner))
            .await
            .unwrap()
        {
            lambda_idempotency::store::ClaimOutcome::Claimed(lease) => lease,
            other => panic!("{other:?}"),
        };
        let mut req = order(Some("crash"), BODY);
        req.extensions_mut().insert(IdempotencyContext::from_lease(
            std::sync::Arc::new(store.clone()),
            lease,
        ));
        let res = orders.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(res.status(), 201);
        responses.push(json(&res));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(responses[1]["resumed_from"], "charged");
    assert_eq!(responses[0]["order_id"], responses[1]["order_id"]);
    assert_eq!(responses[0]["charge_id"], responses[1]["charge_id"]);
    assert_eq!(
        responses[1]["provider_calls"], 1,
        "the provider was not called again"
    );
    assert_eq!(
        (&responses[1]["executions"], &responses[1]["resumed_runs"]),
        (&serde_json::json!(2), &serde_json::json!(1)),
        "the body ran twice, the second time resumed (the order phase did not run again)"
    );
    assert_eq!(responses[1]["status"], "confirmed");
    assert_eq!(app.charges().await, 1);
    let item = app
        .client
        .get_item()
        .table_name(&app.config.orders_table)
        .key(
            "order_id",
            AttributeValue::S(responses[0]["order_id"].as_str().unwrap().into()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(item.item().unwrap()["executions"].as_n().unwrap(), "2");
    assert_eq!(item.item().unwrap()["resumed_runs"].as_n().unwrap(), "1");
}

/// Issue 25, item 1: the order is charged (`charged` committed), then the
/// orders table refuses the confirmation and the handler answers 503. The
/// record and its recovery point are kept (its lease ended), so the client's
/// retry resumes after the charge: the provider is not called again.
#[tokio::test]
async fn a_failed_confirmation_after_the_charge_resumes_on_retry_without_a_second_charge() {
    use aws_sdk_dynamodb::config::SharedInterceptor;
    let app = App::new(0).await;
    let fail = integration_tests::FailRequests::new(":confirmed");
    let client = integration_tests::client_with(vec![SharedInterceptor::new(fail.clone())]).await;
    let call = |req| orders_api::app(client.clone(), &app.config).oneshot(req);

    fail.arm(1);
    let first = call(order(Some("confirm-fails"), BODY)).await.unwrap();
    assert_eq!(first.status(), 503, "{:?}", first.body());
    let record =
        lambda_idempotency::scope::RecordScope::new("POST", "/orders", "confirm-fails").record_id();
    let kept = lambda_idempotency::Store::get(&app.store(), &record)
        .await
        .unwrap()
        .expect("the record is kept for the retry");
    assert_eq!(kept.record.checkpoint.unwrap().name, "charged");

    let retry = call(order(Some("confirm-fails"), BODY)).await.unwrap();
    assert_eq!(retry.status(), 201, "{:?}", retry.body());
    let body = json(&retry);
    assert_eq!(body["resumed_from"], "charged");
    assert_eq!(
        body["provider_calls"], 1,
        "the provider was not called again"
    );
    assert_eq!(body["status"], "confirmed");
    assert_eq!(app.charges().await, 1);
}

#[tokio::test]
async fn with_the_middleware_switched_off_orders_still_run_with_fresh_ids() {
    // What `IDEMPOTENCY_DISABLED` does to the deployed function: the
    // same layer, switched off, so the router sees no idempotency record.
    let app = App::new(0).await;
    let store = app.store();
    let svc = orders_api::idempotency_layer(store, &app.config)
        .disabled(true)
        .layer(Orders::new(app.client.clone(), &app.config));
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let res = svc.clone().oneshot(order(Some("k1"), BODY)).await.unwrap();
        assert_eq!(res.status(), 201, "{}", json(&res));
        assert!(res.headers().get(REPLAYED_HEADER).is_none());
        bodies.push(json(&res));
    }
    assert_ne!(
        bodies[0]["order_id"], bodies[1]["order_id"],
        "without a record a retry is a new order"
    );
    assert_ne!(bodies[0]["charge_id"], bodies[1]["charge_id"]);
    assert!(bodies
        .iter()
        .all(|b| b["executions"] == 1 && b["status"] == "confirmed"));
    assert_eq!(app.charges().await, 2);
    let records = app
        .client
        .scan()
        .table_name(&app.config.idempotency_table)
        .send()
        .await
        .unwrap();
    assert_eq!(records.count(), 0, "nothing was claimed");
}

/// The Powertools table written by Powertools for AWS Lambda (Python)
/// itself (tests/powertools/write_records.py, with the Python of
/// `IDEMPOTENCY_TEST_POWERTOOLS_PYTHON`), and the prefix of its HTTP
/// records' ids: `done-1` to `done-3` completed, `running-1` in progress.
async fn powertools_http_records() -> (String, String) {
    let wrote = crate::fixture::powertools_wrote("pt").await;
    let prefix = wrote.text("http");
    (wrote.http_table, prefix)
}

/// `payload` through the `orders-api` process polling `api`: its answer.
async fn invoke_orders_api(
    api: &integration_tests::runtime_api::RuntimeApi,
    payload: String,
) -> serde_json::Value {
    match api.invoke(payload, Duration::from_secs(20)).await {
        integration_tests::runtime_api::Outcome::Response(bytes) => {
            serde_json::from_slice(&bytes).expect("a JSON answer")
        }
        other => panic!("orders-api did not answer: {other:?}"),
    }
}

/// `orders-api` as deployed with the cut-over's variables set (the
/// template's PowertoolsTableName, PowertoolsKeyPrefix, PowertoolsUntil,
/// PowertoolsKeyJmespath, PowertoolsSharedKeys),
/// black-box: a key real Powertools completed replays Powertools' stored
/// response and no order is made; a key Powertools never saw runs; with
/// the window over, a completed Powertools key runs as a new order.
#[tokio::test]
async fn with_the_cut_over_variables_a_key_powertools_completed_replays_its_response() {
    use integration_tests::functions::{orders_env, post_order_event, spawn, tables};
    use integration_tests::runtime_api::RuntimeApi;

    let (powertools_table, prefix) = powertools_http_records().await;
    let tables = tables().await.unwrap();
    let bin = crate::process::function_bin("orders-api");
    let body = r#"{"customer_id":"cus_1","amount":2500,"currency":"EUR"}"#;
    let orders = || async {
        integration_tests::functions::order_executions(&tables.1)
            .await
            .unwrap()
            .len()
    };

    let open = RuntimeApi::start().await.unwrap();
    let env = orders_env(
        &open,
        &tables,
        &[
            ("IDEMPOTENCY_POWERTOOLS_TABLE", powertools_table.as_str()),
            ("IDEMPOTENCY_POWERTOOLS_KEY_PREFIX", prefix.as_str()),
            ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2099-01-01T00:00:00Z"),
            // How Powertools was configured (tests/powertools/write_records.py):
            // its key, the header alone, was shared across tenants.
            (
                "IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH",
                "headers.\"idempotency-key\"",
            ),
            ("IDEMPOTENCY_POWERTOOLS_SHARED_KEYS", "true"),
        ],
    );
    let _open_process = spawn(bin.to_str().expect("a UTF-8 path"), &env).unwrap();
    let replay = invoke_orders_api(&open, post_order_event("done-1", body)).await;
    assert_eq!(replay["statusCode"], 201, "{replay}");
    assert_eq!(replay["headers"]["idempotent-replayed"], "true", "{replay}");
    assert_eq!(replay["headers"]["location"], "/orders/1", "{replay}");
    let stored: serde_json::Value =
        serde_json::from_str(replay["body"].as_str().expect("a text body")).unwrap();
    assert_eq!(
        stored,
        serde_json::json!({"order": {"amount": 2500}, "by": "powertools"}),
        "Powertools' own response, not a new order"
    );
    assert_eq!(orders().await, 0, "nothing ran: no order was made");

    let fresh = invoke_orders_api(&open, post_order_event("never-seen-1", body)).await;
    assert_eq!(fresh["statusCode"], 201, "{fresh}");
    assert!(
        fresh["headers"].get("idempotent-replayed").is_none(),
        "{fresh}"
    );
    let made: serde_json::Value = serde_json::from_str(fresh["body"].as_str().unwrap()).unwrap();
    assert_eq!(made["executions"], 1, "{made}");
    assert_eq!(orders().await, 1);

    // The window over: Powertools' records are no longer read.
    let closed = RuntimeApi::start().await.unwrap();
    let env = orders_env(
        &closed,
        &tables,
        &[
            ("IDEMPOTENCY_POWERTOOLS_TABLE", powertools_table.as_str()),
            ("IDEMPOTENCY_POWERTOOLS_KEY_PREFIX", prefix.as_str()),
            ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2000-01-01T00:00:00Z"),
            ("IDEMPOTENCY_POWERTOOLS_SHARED_KEYS", "true"),
        ],
    );
    let _closed_process = spawn(bin.to_str().expect("a UTF-8 path"), &env).unwrap();
    let after = invoke_orders_api(&closed, post_order_event("done-2", body)).await;
    assert_eq!(after["statusCode"], 201, "{after}");
    assert!(
        after["headers"].get("idempotent-replayed").is_none(),
        "{after}"
    );
    assert_eq!(
        orders().await,
        2,
        "after the window, done-2 ran as a new order"
    );
}

/// A bad cut-over setting stops `orders-api` at start, in one line naming
/// the variable, before it asks for any invocation.
#[tokio::test]
async fn a_bad_cut_over_setting_stops_orders_api_at_start_naming_it() {
    use integration_tests::runtime_api::RuntimeApi;
    let tables = integration_tests::functions::tables().await.unwrap();
    let api = RuntimeApi::start().await.unwrap();
    let env = integration_tests::functions::orders_env(
        &api,
        &tables,
        &[
            ("IDEMPOTENCY_POWERTOOLS_TABLE", "powertools"),
            (
                "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX",
                "orders-api.app.lambda_handler",
            ),
            ("IDEMPOTENCY_POWERTOOLS_UNTIL", "next tuesday"),
        ],
    );
    let line = crate::process::refused_start("orders-api", &env).await;
    assert!(
        line.contains("orders-api cannot start: IDEMPOTENCY_POWERTOOLS_UNTIL=\\\"next tuesday\\\" is not an RFC 3339 time"),
        "{line}"
    );
    assert_eq!(api.first_poll(), None, "no invocation was asked for");
}

/// A cut-over whose key would not keep tenants apart stops `orders-api` at
/// start: its tenant is the JWT `sub`, so a key of the Idempotency-Key
/// alone (no key expression, or one that does not select the claim) could
/// replay tenant A's Powertools answer to tenant B. The line names both
/// settings that decide it; with either set right, the same process starts
/// and asks for its first invocation.
#[tokio::test]
async fn a_cut_over_that_could_cross_tenants_stops_orders_api_naming_both_settings() {
    use integration_tests::runtime_api::RuntimeApi;
    let tables = integration_tests::functions::tables().await.unwrap();
    let cutover = [
        ("IDEMPOTENCY_POWERTOOLS_TABLE", "powertools"),
        (
            "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX",
            "orders-api.app.lambda_handler",
        ),
        ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-12-01T00:00:00Z"),
    ];
    for extra in [
        &[][..],
        &[(
            "IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH",
            "powertools_json(body).order_id",
        )][..],
    ] {
        let api = RuntimeApi::start().await.unwrap();
        let mut pairs = cutover.to_vec();
        pairs.extend_from_slice(extra);
        let env = integration_tests::functions::orders_env(&api, &tables, &pairs);
        let line = crate::process::refused_start("orders-api", &env).await;
        assert!(
            line.contains("orders-api cannot start: the cut-over from Powertools could answer one tenant with the response Powertools stored for another")
                && line.contains("IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH")
                && line.contains("IDEMPOTENCY_POWERTOOLS_SHARED_KEYS=true"),
            "{extra:?}: {line}"
        );
        assert_eq!(api.first_poll(), None, "no invocation was asked for");
    }
    for extra in [
        ("IDEMPOTENCY_POWERTOOLS_SHARED_KEYS", "true"),
        (
            "IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH",
            "[requestContext.authorizer.jwt.claims.sub, headers.\"idempotency-key\"]",
        ),
    ] {
        let api = RuntimeApi::start().await.unwrap();
        let mut pairs = cutover.to_vec();
        pairs.push(extra);
        let env = integration_tests::functions::orders_env(&api, &tables, &pairs);
        let mut child = tokio::process::Command::new(crate::process::function_bin("orders-api"))
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn orders-api");
        let polled = tokio::time::timeout(Duration::from_secs(30), async {
            while api.first_poll().is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        let _ = child.kill().await;
        assert!(polled.is_ok(), "{extra:?}: orders-api did not start");
    }
}

/// `orders-api` on Redis with `IDEMPOTENCY_REDIS_WAIT_REPLICAS` set, on a
/// server with no replica to hold its writes: the claim cannot be made
/// durable, so the request fails closed (`503`) and no order is made;
/// without the variable the same request runs. The variable reaches the
/// store the function opens.
#[tokio::test]
async fn with_the_replica_wait_and_no_replica_orders_api_fails_closed() {
    use integration_tests::functions::{orders_env, post_order_event, spawn, tables};
    use integration_tests::runtime_api::RuntimeApi;

    let tables = tables().await.unwrap();
    let redis = integration_tests::redis_url();
    let bin = crate::process::function_bin("orders-api");
    let body = r#"{"customer_id":"cus_1","amount":700,"currency":"EUR"}"#;
    let orders = || async {
        integration_tests::functions::order_executions(&tables.1)
            .await
            .unwrap()
            .len()
    };

    let waiting = RuntimeApi::start().await.unwrap();
    let env = orders_env(
        &waiting,
        &tables,
        &[
            ("IDEMPOTENCY_STORE_URL", redis.as_str()),
            ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "1"),
            ("IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS", "100"),
        ],
    );
    let _waiting_process = spawn(bin.to_str().expect("a UTF-8 path"), &env).unwrap();
    let key = integration_tests::unique_name("wait");
    let refused = invoke_orders_api(&waiting, post_order_event(&key, body)).await;
    assert_eq!(refused["statusCode"], 503, "{refused}");
    assert_eq!(orders().await, 0, "the handler did not run");

    let plain = RuntimeApi::start().await.unwrap();
    let env = orders_env(
        &plain,
        &tables,
        &[("IDEMPOTENCY_STORE_URL", redis.as_str())],
    );
    let _plain_process = spawn(bin.to_str().expect("a UTF-8 path"), &env).unwrap();
    let ran = invoke_orders_api(&plain, post_order_event(&key, body)).await;
    assert_eq!(
        ran["statusCode"], 201,
        "the refused claim was given back: {ran}"
    );
    assert_eq!(orders().await, 1);
}
