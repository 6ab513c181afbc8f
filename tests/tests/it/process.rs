//! Real `orders-api` processes behind the Runtime API, killed mid-handler.

use std::time::Duration;

use integration_tests::runtime_api::{Outcome, RuntimeApi};
use serde_json::{json, Value};

/// The debug binary of function `name` next to this test's own (built by
/// `make test`).
pub(crate) fn function_bin(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target/debug");
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing: build it first (`cargo build -p {name}`, done by `make test`)",
        bin.display()
    );
    bin
}

/// Run function `name` with `env` and expect it to refuse to start: a
/// failed exit and exactly one non-empty line on stderr, which is returned.
pub(crate) async fn refused_start(name: &str, env: &[(String, String)]) -> String {
    let out = tokio::process::Command::new(function_bin(name))
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    assert!(!out.status.success(), "it must not start");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    lines[0].to_owned()
}

fn orders_api_bin() -> std::path::PathBuf {
    function_bin("orders-api")
}

pub(crate) fn event(key: &str, crash: bool) -> String {
    let mut headers = json!({"content-type": "application/json", "idempotency-key": key});
    if crash {
        headers["x-demo-crash"] = json!("after-charge");
    }
    json!({
        "version": "2.0", "routeKey": "POST /orders", "rawPath": "/orders", "rawQueryString": "",
        "headers": headers,
        "requestContext": {"accountId": "123456789012", "apiId": "t", "domainName": "t.local", "domainPrefix": "t",
            "http": {"method": "POST", "path": "/orders", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "t"},
            "requestId": "t", "routeKey": "POST /orders", "stage": "$default", "time": "22/Nov/2026:10:15:00 +0000", "timeEpoch": 0},
        "body": r#"{"customer_id":"cus_1","amount":700,"currency":"EUR"}"#, "isBase64Encoded": false
    })
    .to_string()
}

fn spawn(api: &RuntimeApi, tables: &(String, String)) -> tokio::process::Child {
    let mut env = api.function_env("orders-api");
    // Its AWS calls recorded as orders-api's (scripts/check-iam.py).
    env.extend(integration_tests::iam_record::process_env("orders-api"));
    env.extend([
        ("IDEMPOTENCY_TABLE".to_owned(), tables.0.clone()),
        ("ORDERS_TABLE".to_owned(), tables.1.clone()),
        ("IDEMPOTENCY_MAX_LEASE_SECONDS".to_owned(), "1".to_owned()),
        ("ORDERS_API_DEMO_CRASHES".to_owned(), "1".to_owned()),
        // No authorizer here: the shared anonymous scope.
        ("IDEMPOTENCY_ALLOW_ANONYMOUS".to_owned(), "true".to_owned()),
        ("RUST_LOG".to_owned(), "error".to_owned()),
    ]);
    tokio::process::Command::new(orders_api_bin())
        .envs(env)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn orders-api")
}

#[tokio::test]
async fn a_process_killed_after_the_charge_is_resumed_by_the_retry() {
    let client = integration_tests::client().await;
    let tables = (
        integration_tests::create_table(&client).await,
        integration_tests::orders_table(&client).await,
    );
    let api = RuntimeApi::start().await.unwrap();

    let mut first = spawn(&api, &tables);
    let outcome = api
        .invoke(event("k-crash", true), Duration::from_secs(5))
        .await;
    assert_eq!(outcome, Outcome::TimedOut, "the invocation never answered");
    let status = tokio::time::timeout(Duration::from_secs(5), first.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(137), "the process died mid-handler");

    // A fresh process (Lambda's next instance); the client retries after the lease.
    let _second = spawn(&api, &tables);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let Outcome::Response(body) = api
        .invoke(event("k-crash", false), Duration::from_secs(10))
        .await
    else {
        panic!("the retry did not answer")
    };
    let response: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(response["statusCode"], 201, "{response}");
    let order: Value = serde_json::from_str(response["body"].as_str().unwrap()).unwrap();
    assert_eq!(order["resumed_from"], "charged");
    assert_eq!(order["provider_calls"], 1);
    // Two runs of the body: the killed one and the resumed one.
    assert_eq!(
        (&order["executions"], &order["resumed_runs"]),
        (&json!(2), &json!(1))
    );
    assert_eq!(order["status"], "confirmed");
}

/// The sweeper process, configured as a new user configures it for
/// DynamoDB Local: docs/sam-local.md's variables, `AWS_ENDPOINT_URL_DYNAMODB` and
/// no streams variable (`streams: None`), or the streams variable `sam
/// local` sets empty because the template declares it. Either way the
/// stream is read where DynamoDB is, and the scheduled event's sweep
/// releases the stuck record.
async fn sweep_as_configured(streams: Option<&str>) -> Value {
    let (api, mut env) = sweeper_of_one_stuck_record('5').await;
    // AWS_ENDPOINT_URL_DYNAMODB (DynamoDB Local through the recorder), and
    // its AWS calls recorded as the sweeper's (scripts/check-iam.py).
    env.extend(integration_tests::iam_record::process_env("sweeper"));
    let mut command = tokio::process::Command::new(function_bin("sweeper"));
    command
        .env_remove("AWS_ENDPOINT_URL_DYNAMODB_STREAMS")
        .env_remove("AWS_ENDPOINT_URL")
        .envs(env)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(value) = streams {
        command.env("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", value);
    }
    let _sweeper = command.spawn().expect("spawn sweeper");
    let event = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../events/scheduled-sweep.json"
    ))
    .unwrap();
    match api.invoke(event, Duration::from_secs(30)).await {
        Outcome::Response(body) => serde_json::from_slice(&body).unwrap(),
        other => panic!("the sweep failed: {other:?}"),
    }
}

/// A fresh idempotency table holding one record stuck in progress (its id
/// 64 times `digit`, its lease over), a Runtime API, and the environment of
/// a `sweeper` process polling it that sweeps the table with no grace.
pub(crate) async fn sweeper_of_one_stuck_record(
    digit: char,
) -> (RuntimeApi, Vec<(String, String)>) {
    let client = integration_tests::client().await;
    let table = integration_tests::create_table(&client).await;
    let store = lambda_idempotency::DynamoStore::builder(client, table.clone())
        .open()
        .unwrap();
    let stuck = crate::fixture::claim_request(&digit.to_string().repeat(64), "crashed", 1);
    let claimed = lambda_idempotency::Store::claim(&store, &stuck)
        .await
        .unwrap();
    assert!(
        matches!(claimed, lambda_idempotency::store::ClaimOutcome::Claimed(_)),
        "the stuck record is claimed: {claimed:?}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let api = RuntimeApi::start().await.unwrap();
    let mut env = api.function_env("sweeper");
    env.extend([
        ("IDEMPOTENCY_TABLE".to_owned(), table),
        ("SWEEP_GRACE_SECONDS".to_owned(), "0".to_owned()),
        ("RUST_LOG".to_owned(), "error".to_owned()),
    ]);
    (api, env)
}

#[tokio::test]
async fn the_sweeper_reads_the_stream_where_dynamodb_is() {
    let summary = sweep_as_configured(None).await;
    assert_eq!(
        (&summary["found"], &summary["released"], &summary["errors"]),
        (&json!(1), &json!(1), &json!(0)),
        "{summary}"
    );
}

#[tokio::test]
async fn an_empty_streams_variable_is_not_an_endpoint() {
    let summary = sweep_as_configured(Some("")).await;
    assert_eq!(
        (&summary["found"], &summary["released"], &summary["errors"]),
        (&json!(1), &json!(1), &json!(0)),
        "{summary}"
    );
}
