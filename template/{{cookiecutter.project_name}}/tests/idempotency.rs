//! The API and the sweeper against DynamoDB Local: `make test` starts it on
//! a free port and sets `AWS_ENDPOINT_URL_DYNAMODB` (and dummy credentials).
//! Each test makes its own table, as template.yaml defines it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    StreamSpecification, StreamViewType, TimeToLiveSpecification,
};
use lambda_http::{service_fn, Body, Request, Response};
use lambda_idempotency::problem;
use lambda_idempotency::store::dynamodb::schema;
use lambda_idempotency::store::{now_ms, ClaimOutcome, ClaimRequest};
use lambda_idempotency::{DynamoStore, Store};
use tower::{Layer, ServiceExt};

use {{crate_name}} as api;

/// A DynamoDB client for the local engine; fails (rather than reaching AWS)
/// when none was started.
async fn client() -> aws_sdk_dynamodb::Client {
    assert!(
        std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_ok_and(|e| !e.is_empty()),
        "AWS_ENDPOINT_URL_DYNAMODB is not set: run `make test`, which starts DynamoDB Local"
    );
    aws_sdk_dynamodb::Client::new(&aws_config::load_from_env().await)
}

/// A new idempotency table as template.yaml defines it: partition key `id`,
/// a `NEW_IMAGE` stream (the sweeper reads it), TTL on `expires_at`.
async fn create_table(client: &aws_sdk_dynamodb::Client) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "idempotency-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(schema::ID)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("a complete attribute definition"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(schema::ID)
                .key_type(KeyType::Hash)
                .build()
                .expect("a complete key schema"),
        )
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewImage)
                .build()
                .expect("a complete stream specification"),
        )
        .send()
        .await
        .expect("create the idempotency table");
    client
        .update_time_to_live()
        .table_name(&name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name(schema::EXPIRES_AT)
                .enabled(true)
                .build()
                .expect("a complete TTL specification"),
        )
        .send()
        .await
        .expect("enable TTL");
    name
}

fn config(table: &str) -> api::Config {
    api::Config::from_lookup(|name| (name == "IDEMPOTENCY_TABLE").then(|| table.to_owned()))
        .expect("a table is all the API needs")
}

fn post(key: Option<&str>, body: &str) -> Request {
    let mut request =
        lambda_http::http::Request::post("/items").header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request
        .body(Body::from(body.to_owned()))
        .expect("a valid request")
}

fn body(response: &Response<Body>) -> Vec<u8> {
    response.body().as_ref().to_vec()
}

fn replayed(response: &Response<Body>) -> bool {
    response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// The `type` of a problem document (RFC 9457), or what the body is.
fn problem_type(response: &Response<Body>) -> String {
    serde_json::from_slice::<serde_json::Value>(&body(response))
        .ok()
        .and_then(|problem| problem["type"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body(response)).into_owned())
}

#[tokio::test]
async fn a_retried_post_runs_the_handler_once_and_replays_its_response() {
    let client = client().await;
    let table = create_table(&client).await;
    let runs = Arc::new(AtomicU64::new(0));
    let counted = {
        let runs = runs.clone();
        service_fn(move |request: Request| {
            runs.fetch_add(1, Ordering::SeqCst);
            api::create_item(request)
        })
    };
    let store = DynamoStore::builder(client, table.clone()).open().unwrap();
    let service = api::idempotency(store, &config(&table)).layer(counted);
    let call = |request| service.clone().oneshot(request);

    let first = call(post(Some("order-1"), r#"{"name": "tea", "quantity": 2}"#))
        .await
        .expect("a response");
    assert_eq!(first.status(), 201);
    assert!(!replayed(&first));
    let item: api::Item = serde_json::from_slice(&body(&first)).expect("an item");
    assert_eq!((item.name.as_str(), item.quantity), ("tea", 2));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The retry: the same key and body. The handler does not run again; the
    // stored response comes back, byte for byte.
    let retry = call(post(Some("order-1"), r#"{"name": "tea", "quantity": 2}"#))
        .await
        .expect("a response");
    assert_eq!(retry.status(), 201);
    assert!(replayed(&retry), "{:?}", retry.headers());
    assert_eq!(body(&retry), body(&first));
    assert_eq!(
        retry.headers().get("content-type"),
        first.headers().get("content-type")
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The same JSON, spaced and ordered differently: the same request.
    let respaced = call(post(Some("order-1"), r#"{ "quantity":2,"name":"tea" }"#))
        .await
        .expect("a response");
    assert!(replayed(&respaced));
    assert_eq!(body(&respaced), body(&first));

    // The same key with another body: refused, nothing run.
    let other = call(post(Some("order-1"), r#"{"name": "tea", "quantity": 3}"#))
        .await
        .expect("a response");
    assert_eq!(other.status(), 422);
    assert_eq!(problem_type(&other), problem::KEY_REUSED.uri);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // No key: refused, nothing run.
    let keyless = call(post(None, r#"{"name": "tea", "quantity": 2}"#))
        .await
        .expect("a response");
    assert_eq!(keyless.status(), 400);
    assert_eq!(problem_type(&keyless), problem::KEY_MISSING.uri);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Another key is another request: the handler runs, with another id.
    let second = call(post(Some("order-2"), r#"{"name": "tea", "quantity": 2}"#))
        .await
        .expect("a response");
    assert_eq!(second.status(), 201);
    assert!(!replayed(&second));
    let second: api::Item = serde_json::from_slice(&body(&second)).expect("an item");
    assert_ne!(second.id, item.id);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_invalid_body_is_answered_and_its_answer_replayed() {
    let client = client().await;
    let table = create_table(&client).await;
    let config = config(&table);
    let service = api::app(api::store(client, &config).expect("a store"), &config);
    let first = service
        .clone()
        .oneshot(post(Some("bad-1"), r#"{"name": "tea"}"#))
        .await
        .expect("a response");
    assert_eq!(first.status(), 400);
    let answer: serde_json::Value = serde_json::from_slice(&body(&first)).expect("a problem");
    assert_eq!(
        (answer["type"].as_str(), answer["status"].as_u64()),
        (Some("about:blank"), Some(400))
    );
    // A 400 is final for the same request: it replays too.
    let retry = service
        .oneshot(post(Some("bad-1"), r#"{"name": "tea"}"#))
        .await
        .expect("a response");
    assert!(replayed(&retry));
    assert_eq!(body(&retry), body(&first));
}

#[tokio::test]
async fn the_sample_events_get_the_answers_they_describe() {
    let client = client().await;
    let table = create_table(&client).await;
    let config = config(&table);
    let service = api::app(api::store(client, &config).expect("a store"), &config);
    let event = |file: &str| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("events")
            .join(file);
        let json = std::fs::read_to_string(&path).expect("a sample event");
        lambda_http::request::from_str(&json).expect("an API Gateway event")
    };
    let status = |response: &Response<Body>| response.status().as_u16();

    let first = service
        .clone()
        .oneshot(event("post-item.json"))
        .await
        .expect("a response");
    assert_eq!(status(&first), 201);
    let retry = service
        .clone()
        .oneshot(event("post-item.json"))
        .await
        .expect("a response");
    assert!(replayed(&retry));
    assert_eq!(body(&retry), body(&first));
    let other = service
        .clone()
        .oneshot(event("post-item-other-body.json"))
        .await
        .expect("a response");
    assert_eq!(status(&other), 422);
    assert_eq!(problem_type(&other), problem::KEY_REUSED.uri);
    let keyless = service
        .oneshot(event("post-item-no-key.json"))
        .await
        .expect("a response");
    assert_eq!(status(&keyless), 400);
    assert_eq!(problem_type(&keyless), problem::KEY_MISSING.uri);
}

#[tokio::test]
async fn the_sweeper_releases_a_key_whose_invocation_died() {
    let client = client().await;
    let table = create_table(&client).await;
    let store = DynamoStore::builder(client.clone(), table.clone())
        .open()
        .unwrap();
    // What an invocation that crashed holding its key leaves: a claim whose
    // lease ran out, never completed.
    let now = now_ms();
    let claim = ClaimRequest {
        record_id: "0123456789abcdef".to_owned(),
        fingerprint: "f".to_owned(),
        owner: "crashed-invocation".to_owned(),
        now_ms: now,
        lease_expires_at_ms: now + 200,
        expires_at_s: now / 1000 + 3600,
        origin: None,
    };
    let outcome = store.claim(&claim).await.expect("a claim");
    assert!(matches!(outcome, ClaimOutcome::Claimed(_)), "{outcome:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;

    let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").ok();
    let settings = api::SweeperConfig::from_lookup(|name| match name {
        "IDEMPOTENCY_TABLE" => Some(table.clone()),
        "SWEEP_GRACE_SECONDS" => Some("0".to_owned()),
        "AWS_ENDPOINT_URL_DYNAMODB" => endpoint.clone(),
        _ => None,
    })
    .expect("sweeper settings");
    let aws = aws_config::load_from_env().await;
    let sweeper = settings
        .start(client, aws_sdk_dynamodbstreams::config::Builder::from(&aws))
        .await
        .expect("the table has a NEW_IMAGE stream");
    let summary = api::sweep(&sweeper, now_ms() + 20_000)
        .await
        .expect("a sweep");
    assert_eq!((summary.found, summary.released), (1, 1), "{summary:?}");
    assert_eq!(summary.errors, 0, "{summary:?}");
    assert!(
        store.get(&claim.record_id).await.expect("a read").is_none(),
        "the released key's record is gone, so its retry runs"
    );
}

#[test]
fn settings_name_what_is_missing_or_wrong() {
    let err = api::Config::from_lookup(|_| None).expect_err("no table");
    assert!(err.contains("IDEMPOTENCY_TABLE"), "{err}");
    let err = api::Config::from_lookup(|name| match name {
        "IDEMPOTENCY_TABLE" => Some("t".to_owned()),
        "IDEMPOTENCY_EXPIRES_AFTER_SECONDS" => Some("a day".to_owned()),
        _ => None,
    })
    .expect_err("not a number");
    assert!(err.contains("IDEMPOTENCY_EXPIRES_AFTER_SECONDS"), "{err}");
    let err = api::SweeperConfig::from_lookup(|name| match name {
        "IDEMPOTENCY_TABLE" => Some("t".to_owned()),
        "SWEEP_POLICY" => Some("delete".to_owned()),
        _ => None,
    })
    .expect_err("no such policy");
    assert!(err.contains("SWEEP_POLICY"), "{err}");
}
