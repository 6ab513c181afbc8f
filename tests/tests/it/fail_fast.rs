//! A store that cannot answer fails the request fast: 503 with
//! `Retry-After` within 0.6 s, with each engine's default timeouts and
//! retries (docs/DESIGN.md, "Failing fast"), whether its port refuses the
//! connection or accepts it and never answers. The handler never runs.
//!
//! The harness raises every store's limit for its slow emulators
//! (`IDEMPOTENCY_STORE_TIMEOUT_MS`, scripts/dynamodb-local.sh), so these
//! tests give the stores the default limits by hand, and `orders-api`'s
//! process runs without the variable.
//!
//! The bound is the product's (issue 54): what the timeouts add up to
//! (450 ms on every engine) plus the request's own work, so the test fails
//! on a policy that waits longer, such as the SDK's default backoff or a
//! connection that nothing limits.

use std::time::{Duration, Instant};

use lambda_http::{Body, Response};
use lambda_idempotency::{
    problem, DynamoStore, IdempotencyLayer, PostgresStore, RedisStore, Store,
};
use tower::Layer;

use crate::fixture::{call, counting_handler, json, post, silent_server, Runs};

/// The longest a store that cannot answer may hold a request.
const WITHIN: Duration = Duration::from_millis(600);

/// A local port nothing listens on: connections to it are refused.
fn refused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

/// One request through the middleware on `store`: it must be a 503 with
/// the store-unavailable problem and `Retry-After`, answered within
/// [`WITHIN`], and the handler must not have run.
async fn assert_fast_503(store: impl Store + 'static, what: &str) {
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(store)
        .unavailable_retry_after(Duration::from_secs(2))
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let started = Instant::now();
    let res: Response<Body> = tokio::time::timeout(
        Duration::from_secs(30),
        call(&mut svc, post("/orders", Some("k1"), "{}")),
    )
    .await
    .unwrap_or_else(|_| panic!("{what}: no answer within 30 s"));
    let took = started.elapsed();
    eprintln!("{what}: answered after {took:?}");
    assert_eq!(res.status(), 503, "{what}");
    assert_eq!(res.headers()["retry-after"], "2", "{what}");
    assert_eq!(json(&res)["type"], problem::STORE_UNAVAILABLE.uri, "{what}");
    assert_eq!(
        runs.count(),
        0,
        "{what}: fail closed, the handler never ran"
    );
    assert!(
        took < WITHIN,
        "{what}: the 503 took {took:?}, over {WITHIN:?}"
    );
}

/// A DynamoDB client as a function builds it (the SDK's defaults, as
/// `aws_config::load_from_env`), sending to `port` on this machine.
async fn dynamodb_client(port: u16) -> aws_sdk_dynamodb::Client {
    let shared = aws_config::from_env()
        .region(aws_config::Region::new("us-east-1"))
        .load()
        .await;
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&shared)
            .endpoint_url(format!("http://127.0.0.1:{port}"))
            .build(),
    )
}

fn dynamodb_store(client: aws_sdk_dynamodb::Client) -> DynamoStore {
    use lambda_idempotency::store::dynamodb::{DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CALL_TIMEOUT};
    DynamoStore::builder(client, "idempotency")
        .timeouts(DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CALL_TIMEOUT)
        .open()
        .expect("the default layout is valid")
}

#[tokio::test]
async fn dynamodb_refusing_connections_is_a_503_within_the_bound() {
    let store = dynamodb_store(dynamodb_client(refused_port()).await);
    assert_fast_503(store, "DynamoDB, connection refused").await;
}

#[tokio::test]
async fn dynamodb_that_never_answers_is_a_503_within_the_bound() {
    let (port, held) = silent_server().await;
    let store = dynamodb_store(dynamodb_client(port).await);
    assert_fast_503(store, "DynamoDB, silent").await;
    held.abort();
}

#[tokio::test]
async fn dynamodb_keeps_the_clients_own_policy_when_asked() {
    // The application's timeouts instead (none for an attempt): the silent
    // server holds the call, as it held every call before the store's
    // limits.
    let (port, held) = silent_server().await;
    let store = DynamoStore::builder(dynamodb_client(port).await, "idempotency")
        .client_timeouts()
        .open()
        .unwrap();
    let held_for = tokio::time::timeout(Duration::from_secs(2), store.warm_up()).await;
    assert!(held_for.is_err(), "no limit, so still waiting after 2 s");
    held.abort();
}

/// A Redis store on `port` with the default limits.
fn redis_builder(port: u16) -> lambda_idempotency::store::redis::RedisStoreBuilder {
    use lambda_idempotency::store::redis::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT};
    RedisStore::builder(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(DEFAULT_CONNECT_TIMEOUT)
        .response_timeout(DEFAULT_RESPONSE_TIMEOUT)
}

#[tokio::test]
async fn redis_refusing_connections_is_a_503_within_the_bound() {
    let store = redis_builder(refused_port()).open().unwrap();
    assert_fast_503(store, "Redis, connection refused").await;
}

#[tokio::test]
async fn redis_that_never_answers_is_a_503_within_the_bound() {
    let (port, held) = silent_server().await;
    let store = redis_builder(port).open().unwrap();
    assert_fast_503(store, "Redis, silent").await;
    held.abort();
}

#[tokio::test]
async fn redis_cluster_refusing_connections_is_a_503_within_the_bound() {
    let store = redis_builder(refused_port()).cluster().open().unwrap();
    assert_fast_503(store, "Redis Cluster, connection refused").await;
}

#[tokio::test]
async fn redis_cluster_that_never_answers_is_a_503_within_the_bound() {
    let (port, held) = silent_server().await;
    let store = redis_builder(port).cluster().open().unwrap();
    assert_fast_503(store, "Redis Cluster, silent").await;
    held.abort();
}

fn postgres_store(port: u16) -> PostgresStore {
    PostgresStore::builder(format!(
        "postgres://app:secret@127.0.0.1:{port}/orders?sslmode=disable"
    ))
    .connect_timeout(Duration::from_millis(
        lambda_idempotency::settings::DEFAULT_STORE_TIMEOUT_MS,
    ))
    .open()
    .unwrap()
}

#[tokio::test]
async fn postgres_refusing_connections_is_a_503_within_the_bound() {
    assert_fast_503(
        postgres_store(refused_port()),
        "PostgreSQL, connection refused",
    )
    .await;
}

#[tokio::test]
async fn postgres_that_never_answers_is_a_503_within_the_bound() {
    let (port, held) = silent_server().await;
    let store = postgres_store(port);
    assert_fast_503(store.clone(), "PostgreSQL, silent").await;
    // The message says what happened and what to change.
    let err = store.warm_up().await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("no answer within 450 ms"), "{message}");
    assert!(message.contains("connect_timeout"), "{message}");
    held.abort();
}

/// The `orders-api` binary as deployed, its DynamoDB at `port` on this
/// machine: once its init is over (the store's warm-up failed and was
/// logged), one order. Returns the function's answer and how long after
/// the invocation it came.
async fn orders_api_with_dynamodb_at(port: u16) -> (serde_json::Value, Duration) {
    use integration_tests::runtime_api::{Outcome, RuntimeApi};
    let api = RuntimeApi::start().await.expect("start the Runtime API");
    let mut env = api.function_env("orders-api");
    env.extend([
        (
            "AWS_ENDPOINT_URL_DYNAMODB".to_owned(),
            format!("http://127.0.0.1:{port}"),
        ),
        ("IDEMPOTENCY_TABLE".to_owned(), "idempotency".to_owned()),
        ("ORDERS_TABLE".to_owned(), "orders".to_owned()),
        ("IDEMPOTENCY_ALLOW_ANONYMOUS".to_owned(), "true".to_owned()),
        ("RUST_LOG".to_owned(), "error".to_owned()),
    ]);
    let _function = tokio::process::Command::new(crate::process::function_bin("orders-api"))
        .env_remove("IDEMPOTENCY_STORE_TIMEOUT_MS")
        .envs(env)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn orders-api");
    let init = Instant::now();
    while api.first_poll().is_none() {
        assert!(
            init.elapsed() < Duration::from_secs(30),
            "orders-api never asked for an invocation"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    let outcome = api
        .invoke(
            crate::process::event("k-unreachable", false),
            Duration::from_secs(30),
        )
        .await;
    let took = started.elapsed();
    let Outcome::Response(body) = outcome else {
        panic!("orders-api did not answer: {outcome:?}")
    };
    (
        serde_json::from_slice(&body).expect("an API Gateway response"),
        took,
    )
}

fn assert_orders_api_503(response: &serde_json::Value, took: Duration, what: &str) {
    eprintln!("{what}: answered after {took:?}");
    assert_eq!(response["statusCode"], 503, "{what}: {response}");
    let retry_after = &response["headers"]["retry-after"];
    assert!(
        retry_after.is_string(),
        "{what}: no Retry-After: {response}"
    );
    assert!(
        took < WITHIN,
        "{what}: the 503 took {took:?}, over {WITHIN:?}"
    );
}

#[tokio::test]
async fn orders_api_answers_503_within_the_bound_when_dynamodb_refuses() {
    let (response, took) = orders_api_with_dynamodb_at(refused_port()).await;
    assert_orders_api_503(&response, took, "orders-api, DynamoDB refusing");
}

#[tokio::test]
async fn orders_api_answers_503_within_the_bound_when_dynamodb_never_answers() {
    let (port, held) = silent_server().await;
    let (response, took) = orders_api_with_dynamodb_at(port).await;
    assert_orders_api_503(&response, took, "orders-api, DynamoDB silent");
    held.abort();
}
