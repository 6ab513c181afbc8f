//! The CLI as a process on Redis (a server and a cluster) and PostgreSQL,
//! chosen by `--store-url` / `IDEMPOTENCY_STORE_URL`, on records made by real
//! claims and a completion through the middleware; and its one-line errors
//! when the URL is wrong, the server unreachable or the schema missing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use assert_cmd::Command;
use common::{
    assert_late_completion_is_gone, assert_live_lease_refused, assert_released, id, json_lines,
    record_ids, stderr, stdout, stuck_lines, succeeded,
};
use lambda_idempotency::{
    store::{Lease, Status},
    ErrorKind, Store,
};
use serde_json::Value;

/// The CLI with no store configured but what each test passes: none of the
/// DynamoDB settings of the shell it runs in.
fn bare_cli() -> Command {
    let mut cmd = Command::cargo_bin("lambda-idempotency").expect("the CLI is built");
    cmd.env("NO_COLOR", "1")
        .env_remove("IDEMPOTENCY_TABLE")
        .env_remove("IDEMPOTENCY_STORE_URL")
        .env_remove("IDEMPOTENCY_REDIS_CLUSTER")
        .env_remove("AWS_ENDPOINT_URL_DYNAMODB")
        .timeout(Duration::from_secs(60));
    cmd
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// A store the CLI opens by URL, and the same store through the library.
struct UrlEnv {
    url: String,
    cluster: bool,
    store: Arc<dyn Store>,
    engine: &'static str,
}

impl UrlEnv {
    /// Redis database 5 of the harness's server: the CLI reads the default
    /// key prefix, and no other test of this run writes there.
    async fn redis() -> UrlEnv {
        let server = integration_tests::redis_url();
        let url = format!("{}/5", server.trim_end_matches('/'));
        let store = lambda_idempotency::RedisStore::builder(url.as_str())
            .connect()
            .await
            .expect("the harness's Redis server answers");
        UrlEnv {
            url,
            cluster: false,
            store: Arc::new(store),
            engine: "redis",
        }
    }

    /// The harness's Redis Cluster, default key prefix.
    async fn redis_cluster() -> UrlEnv {
        let url = std::env::var("IDEMPOTENCY_TEST_REDIS_CLUSTER_URL").unwrap_or_else(|_| {
            panic!(
                "IDEMPOTENCY_TEST_REDIS_CLUSTER_URL is not set: run the tests through \
                 scripts/redis-local.sh"
            )
        });
        let store = lambda_idempotency::RedisStore::builder(url.as_str())
            .cluster()
            .connect()
            .await
            .expect("the harness's Redis Cluster answers");
        UrlEnv {
            url,
            cluster: true,
            store: Arc::new(store),
            engine: "redis",
        }
    }

    /// A fresh database with the schema made by `migrate`, as an operator
    /// finds it after the functions' first start.
    async fn postgres() -> UrlEnv {
        let url = integration_tests::postgres_fresh_database().await;
        let store = lambda_idempotency::PostgresStore::builder(&url)
            .open()
            .unwrap_or_else(|e| panic!("{e}"));
        store.migrate().await.unwrap_or_else(|e| panic!("{e}"));
        UrlEnv {
            url,
            cluster: false,
            store: Arc::new(store),
            engine: "postgres",
        }
    }

    /// The CLI on this store, through the environment as the functions read it.
    fn cli(&self) -> Command {
        let mut cmd = bare_cli();
        cmd.env("IDEMPOTENCY_STORE_URL", &self.url);
        if self.cluster {
            cmd.env("IDEMPOTENCY_REDIS_CLUSTER", "true");
        }
        cmd
    }

    /// A real claim of `key`'s record, its lease ending in `lease_ms`.
    async fn claim(&self, key: &str, owner: &str, lease_ms: u64) -> Lease {
        common::claim(self.store.as_ref(), key, owner, lease_ms).await
    }

    /// A request that completed through the middleware (201, a JSON body).
    async fn completed(&self, key: &str) {
        common::completed(self.store.clone(), key).await
    }

    async fn status_of(&self, key: &str) -> Option<Status> {
        self.store
            .get(&id(key))
            .await
            .expect("get")
            .map(|f| f.record.status)
    }
}

/// Every command on one store: list, inspect, stats, release (refused live,
/// forced and fenced, stuck), fail, dry runs.
async fn every_command_on(env: UrlEnv) {
    env.claim("stuck-a", "owner-a", 1).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    env.claim("stuck-b", "owner-b", 1).await;
    let live = env.claim("live", "owner-c", 600_000).await;
    env.completed("done").await;
    tokio::time::sleep(Duration::from_millis(20)).await;

    // Stuck: oldest lease first, the live and the completed ones left out.
    let lines = stuck_lines(&mut env.cli());
    assert_eq!(record_ids(&lines), [id("stuck-a"), id("stuck-b")]);

    // With the default 60 s grace nothing is stuck; in progress, all three.
    let in_progress = succeeded(env.cli().args(["--json", "list"]));
    let lines = json_lines(&in_progress);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines.iter().all(|l| l["stuck"] == false));

    let completed = succeeded(env.cli().args(["--json", "list", "--completed", "--scan"]));
    assert!(stderr(&completed).contains("--scan reads every item"));
    let lines = json_lines(&completed);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["record_id"], id("done"));
    assert_eq!(lines[0]["response_status"], 201);

    // Inspect by id and by key; DynamoDB's write units are null here.
    let by_id = succeeded(env.cli().args(["--json", "inspect", &id("done")]));
    let record = &json_lines(&by_id)[0];
    assert_eq!(record["record_id"], id("done"));
    assert_eq!(record["status"], "COMPLETED");
    assert_eq!(record["attempt"], 1);
    assert_eq!(record["response"]["body"]["amount"], 2500);
    assert_eq!(record.get("write_units"), Some(&Value::Null));
    let by_key = succeeded(
        env.cli()
            .args(["inspect", "--key", "done", "--path", "/orders"]),
    );
    let text = stdout(&by_key);
    assert!(
        text.contains(&id("done")) && text.contains("stored response: 201"),
        "{text}"
    );
    assert!(!text.contains("write unit"), "{text}");

    // Stats: the engine named, DynamoDB's facts null.
    let stats = succeeded(env.cli().args(["--json", "stats", "--grace", "0s"]));
    let stats = &json_lines(&stats)[0];
    assert_eq!(stats["engine"], env.engine);
    assert_eq!(stats.get("source"), Some(&Value::Null));
    assert_eq!(stats.get("approximate_items"), Some(&Value::Null));
    assert_eq!(
        (
            stats["in_progress"].as_u64(),
            stats["live"].as_u64(),
            stats["stuck"].as_u64()
        ),
        (Some(3), Some(1), Some(2))
    );
    assert_eq!(
        stats["completed"],
        Value::Null,
        "not counted without --scan"
    );
    assert_eq!(stats["oldest_stuck"]["record_id"], id("stuck-a"));
    let scanned = succeeded(
        env.cli()
            .args(["--json", "stats", "--scan", "--grace", "0s"]),
    );
    let scanned = &json_lines(&scanned)[0];
    assert_eq!(scanned["source"], "scan");
    assert_eq!(
        (
            scanned["completed"].as_u64(),
            scanned["in_progress"].as_u64()
        ),
        (Some(1), Some(3))
    );
    let table = succeeded(env.cli().arg("stats"));
    let text = stdout(&table);
    assert!(
        text.lines()
            .any(|l| l.contains("DynamoDB's count") && l.contains("n/a")),
        "{text}"
    );

    // A dry run writes nothing.
    let before = env.store.get(&id("stuck-a")).await.unwrap();
    let dry = succeeded(env.cli().args([
        "--json",
        "release",
        &id("stuck-a"),
        "--grace",
        "0s",
        "--dry-run",
    ]));
    assert_eq!(json_lines(&dry)[0]["dry_run"], true);
    assert_eq!(env.store.get(&id("stuck-a")).await.unwrap(), before);

    // A live lease is refused without --force, and kept.
    assert_live_lease_refused(&env.cli().args(["release", &id("live")]).output().unwrap());
    assert_eq!(env.status_of("live").await, Some(Status::InProgress));

    // A stuck one is released: the next retry runs again.
    let released =
        succeeded(
            env.cli()
                .args(["--json", "release", &id("stuck-a"), "--grace", "0s"]),
        );
    assert_released(&released, false);
    assert_eq!(env.status_of("stuck-a").await, None);

    // Failed: completed with the `abandoned` problem.
    let failed = succeeded(env.cli().args(["fail", &id("stuck-b"), "--grace", "0s"]));
    assert!(stdout(&failed).contains("abandoned"));
    let record = env.store.get(&id("stuck-b")).await.unwrap().unwrap().record;
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.response.map(|r| r.status), Some(500));

    // --force releases the live one, and its holder is fenced afterwards.
    let forced = succeeded(
        env.cli()
            .args(["--json", "release", &id("live"), "--force"]),
    );
    assert_released(&forced, true);
    assert_eq!(env.status_of("live").await, None);
    assert_late_completion_is_gone(&*env.store, &live).await;

    // A completed record is not released.
    let done = env.cli().args(["release", &id("done")]).output().unwrap();
    assert_eq!(done.status.code(), Some(2), "{}", stderr(&done));
    assert_eq!(env.status_of("done").await, Some(Status::Completed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_works_on_redis() {
    every_command_on(UrlEnv::redis().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_works_on_a_redis_cluster() {
    every_command_on(UrlEnv::redis_cluster().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_works_on_postgres() {
    every_command_on(UrlEnv::postgres().await).await;
}

/// Exit 3 and one line naming IDEMPOTENCY_STORE_URL, never the password.
fn assert_store_error(output: &std::process::Output, words: &[&str]) {
    let line = stderr(output);
    assert_eq!(output.status.code(), Some(3), "{line}");
    assert!(line.starts_with("error: IDEMPOTENCY_STORE_URL"), "{line}");
    assert_eq!(line.lines().count(), 1, "one line: {line}");
    assert!(!line.contains("s3cret"), "the password shown: {line}");
    for word in words {
        assert!(line.contains(word), "`{word}` missing: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_errors_are_one_line_with_documented_exit_codes() {
    let redis = integration_tests::redis_url();

    // A table and a store URL: the URL wins, as it does for the functions
    // (the environment a function runs with works as it is), and a note
    // says the table is not read.
    for cmd in [
        bare_cli()
            .args(["--table", "idempotency", "--store-url", &redis, "stats"])
            .output()
            .unwrap(),
        bare_cli()
            .env("IDEMPOTENCY_TABLE", "idempotency")
            .env("IDEMPOTENCY_STORE_URL", &redis)
            .args(["--json", "stats"])
            .output()
            .unwrap(),
    ] {
        let line = stderr(&cmd);
        assert_eq!(cmd.status.code(), Some(0), "{line}");
        assert!(
            line.contains("IDEMPOTENCY_STORE_URL") && line.contains("`idempotency` is not read"),
            "{line}"
        );
        assert_eq!(line.lines().count(), 1, "one line: {line}");
    }
    let cluster_alone = bare_cli()
        .args(["--table", "idempotency", "--redis-cluster", "stats"])
        .output()
        .unwrap();
    assert_eq!(cluster_alone.status.code(), Some(2));
    assert!(stderr(&cluster_alone).contains("--store-url"));

    // Not a store URL.
    let scheme = bare_cli()
        .args(["--store-url", "mysql://app:s3cret@127.0.0.1/db", "stats"])
        .output()
        .unwrap();
    assert_store_error(&scheme, &["redis://", "postgres://"]);

    // Unreachable servers.
    let port = closed_port();
    let redis_down = bare_cli()
        .args([
            "--store-url",
            &format!("redis://app:s3cret@127.0.0.1:{port}"),
            "list",
        ])
        .output()
        .unwrap();
    assert_store_error(&redis_down, &[]);
    let postgres_down = bare_cli()
        .args([
            "--store-url",
            &format!("postgres://app:s3cret@127.0.0.1:{port}/idempotency"),
            "inspect",
            &id("anything"),
        ])
        .output()
        .unwrap();
    assert_store_error(&postgres_down, &[]);

    // A database without the schema: the operator's tool creates none.
    let fresh = integration_tests::postgres_fresh_database().await;
    let no_schema = bare_cli()
        .env("IDEMPOTENCY_STORE_URL", &fresh)
        .arg("stats")
        .output()
        .unwrap();
    assert_store_error(&no_schema, &[]);
    let admin = lambda_idempotency::PostgresStore::builder(&fresh)
        .open()
        .unwrap();
    let err = admin.check_schema().await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::InvalidConfig,
        "still no schema: {err}"
    );

    // A record that is not there: exit 1, as on DynamoDB.
    let env = UrlEnv::redis().await;
    let missing = env.cli().args(["inspect", &id("nobody")]).output().unwrap();
    assert_eq!(missing.status.code(), Some(1), "{}", stderr(&missing));
    assert!(stderr(&missing).starts_with("error: no record"));
}
