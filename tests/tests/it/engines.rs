//! `orders-api` as a real process on each engine, chosen by
//! `IDEMPOTENCY_STORE_URL`: the records move, the orders stay in DynamoDB,
//! and a URL that cannot work fails the start with one line naming the
//! variable.

use std::time::Duration;

use integration_tests::functions::{orders_env, post_order_event};
use integration_tests::runtime_api::{Outcome, RuntimeApi};
use lambda_idempotency::store::{Status, SweepStore};
use serde_json::Value;

/// The debug binary next to this test's own (built by `make test`).
fn orders_api_bin() -> String {
    crate::process::function_bin("orders-api")
        .display()
        .to_string()
}

/// The environment of an `orders-api` on `engine_env`, its orders in a
/// fresh DynamoDB table and no idempotency table at all.
async fn env_on(api: &RuntimeApi, engine_env: &[(&str, &str)]) -> Vec<(String, String)> {
    let orders = integration_tests::orders_table(&integration_tests::client().await).await;
    let mut env = orders_env(api, &(String::new(), orders), engine_env);
    env.retain(|(k, _)| k != "IDEMPOTENCY_TABLE");
    // Its AWS calls recorded as the function of the template of its engine
    // (deploy/valkey.yaml, deploy/postgres.yaml; scripts/check-iam.py).
    let url = engine_env
        .iter()
        .find(|(k, _)| *k == "IDEMPOTENCY_STORE_URL")
        .map_or("", |(_, v)| *v);
    let principal = if url.starts_with("redis") {
        "orders-api.valkey"
    } else if url.starts_with("postgres") {
        "orders-api.postgres"
    } else {
        "orders-api.other"
    };
    env.extend(integration_tests::iam_record::process_env(principal));
    env
}

/// Post the same order twice through an `orders-api` process on
/// `engine_env`; the first answer, the second checked to replay it.
async fn replayed_order(engine_env: &[(&str, &str)]) -> Value {
    let api = RuntimeApi::start().await.unwrap();
    let env = env_on(&api, engine_env).await;
    let _process = integration_tests::functions::spawn(&orders_api_bin(), &env).unwrap();
    let key = integration_tests::unique_name("engine");
    let body = r#"{"customer_id":"cus_1","amount":700,"currency":"EUR"}"#;
    let mut answers = Vec::new();
    for _ in 0..2 {
        let Outcome::Response(bytes) = api
            .invoke(post_order_event(&key, body), Duration::from_secs(20))
            .await
        else {
            panic!("orders-api did not answer")
        };
        answers.push(serde_json::from_slice::<Value>(&bytes).unwrap());
    }
    assert_replayed(&answers[0], &answers[1]);
    answers.swap_remove(0)
}

/// The second answer replays the first.
fn assert_replayed(first: &Value, second: &Value) {
    assert_eq!(first["statusCode"], 201, "{first}");
    assert_eq!(second["statusCode"], 201, "{second}");
    assert_eq!(second["body"], first["body"], "the same order, replayed");
    assert_eq!(second["headers"]["idempotent-replayed"], "true", "{second}");
}

/// Does `store` hold a completed record whose response is `first`'s body?
async fn holds_the_response(store: &dyn SweepStore, first: &Value) -> bool {
    let body = first["body"].as_str().unwrap().as_bytes();
    let mut cursor = None;
    loop {
        let page = store.scan(cursor, 100).await.unwrap();
        if page.records.iter().any(|r| {
            r.record.status == Status::Completed
                && r.record
                    .response
                    .as_ref()
                    .is_some_and(|resp| resp.body.bytes() == body)
        }) {
            return true;
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return false,
        }
    }
}

#[tokio::test]
async fn orders_api_keeps_its_records_in_redis_when_the_url_names_it() {
    let url = integration_tests::redis_url();
    let first = replayed_order(&[("IDEMPOTENCY_STORE_URL", &url)]).await;
    let store = lambda_idempotency::RedisStore::connect(url).await.unwrap();
    assert!(holds_the_response(&store, &first).await);
}

#[tokio::test]
async fn orders_api_keeps_its_records_in_postgres_and_creates_the_schema_when_asked() {
    let url = integration_tests::postgres_fresh_database().await;
    let first = replayed_order(&[
        ("IDEMPOTENCY_STORE_URL", &url),
        ("IDEMPOTENCY_CREATE_SCHEMA", "1"),
    ])
    .await;
    let store = lambda_idempotency::PostgresStore::builder(&url)
        .open()
        .unwrap();
    assert!(holds_the_response(&store, &first).await);
}

/// With `IDEMPOTENCY_STORE_SECRET_ARN` the function reads the database
/// password from Secrets Manager at start (the local AWS server's, through
/// the recorder: scripts/check-iam.py proves deploy/postgres.yaml's grant
/// allows the call). The test server trusts local connections, so the
/// secret's password is sent and not needed.
#[tokio::test]
async fn orders_api_reads_the_database_password_from_secrets_manager() {
    let aws = std::env::var("AWS_ENDPOINT_URL_S3").unwrap_or_else(|_| {
        panic!("AWS_ENDPOINT_URL_S3 is not set: run the tests through scripts/s3-local.sh")
    });
    let shared = aws_config::from_env()
        .region(aws_config::Region::new("us-east-1"))
        .load()
        .await;
    let secrets = aws_sdk_secretsmanager::Client::from_conf(
        aws_sdk_secretsmanager::config::Builder::from(&shared)
            .endpoint_url(aws)
            .build(),
    );
    let secret = secrets
        .create_secret()
        .name(integration_tests::unique_name("database"))
        .secret_string(r#"{"username":"postgres","password":"not-needed-locally"}"#)
        .send()
        .await
        .expect("the secret is created on the local AWS server");
    let arn = secret.arn().expect("the secret's ARN").to_owned();
    let url = integration_tests::postgres_fresh_database().await;
    replayed_order(&[
        ("IDEMPOTENCY_STORE_URL", &url),
        ("IDEMPOTENCY_CREATE_SCHEMA", "1"),
        ("IDEMPOTENCY_STORE_SECRET_ARN", &arn),
    ])
    .await;
}

/// Start `orders-api` with `engine_env`; it must exit at once, and its
/// stderr is returned.
async fn failed_start(engine_env: &[(&str, &str)]) -> String {
    let api = RuntimeApi::start().await.unwrap();
    let env = env_on(&api, engine_env).await;
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(orders_api_bin())
            .envs(env)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("orders-api exits instead of waiting for requests")
    .unwrap();
    assert!(!output.status.success());
    assert_eq!(api.queued(), 0);
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn a_url_that_cannot_work_fails_the_start_naming_the_variable() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let unreachable_redis = format!("redis://:s3cret@127.0.0.1:{closed}");
    let unreachable_postgres = format!("postgres://app:s3cret@127.0.0.1:{closed}/db");
    let empty_database = integration_tests::postgres_fresh_database().await;
    for (env, expected) in [
        (
            vec![("IDEMPOTENCY_STORE_URL", "mysql://db/x")],
            "is not a store URL",
        ),
        (
            vec![("IDEMPOTENCY_STORE_URL", unreachable_redis.as_str())],
            "127.0.0.1",
        ),
        (
            vec![("IDEMPOTENCY_STORE_URL", unreachable_postgres.as_str())],
            "127.0.0.1",
        ),
        (
            vec![("IDEMPOTENCY_STORE_URL", empty_database.as_str())],
            "IDEMPOTENCY_CREATE_SCHEMA",
        ),
        (
            vec![("IDEMPOTENCY_CREATE_SCHEMA", "1")],
            "IDEMPOTENCY_CREATE_SCHEMA is set but IDEMPOTENCY_STORE_URL is not",
        ),
    ] {
        let stderr = failed_start(&env).await;
        assert!(
            stderr.contains("orders-api cannot start: IDEMPOTENCY_") && stderr.contains(expected),
            "{env:?}: {stderr}"
        );
        assert!(
            !stderr.contains("s3cret"),
            "a password in the log: {stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
}
