//! The CLI as a process against DynamoDB Local, on records made by real
//! claims (through the store and through the middleware), never by
//! hand-written items.

mod common;

use std::net::ToSocketAddrs;
use std::time::Duration;

use assert_cmd::Command;
use common::{
    assert_late_completion_is_gone, assert_live_lease_refused, assert_released, id, json_lines,
    record_ids, stderr, stdout, stuck_lines, succeeded,
};
use integration_tests::fault_proxy::{Fault, FaultPlan, FaultProxy};
use lambda_idempotency::{
    http::REPLAYED_HEADER,
    problem,
    store::{now_ms, Checkpoint, CheckpointRequest, Lease, Status, StuckRecord},
    sweeper::{SweepPolicy, Sweeper},
    DynamoStore, IdempotencyLayer, Store,
};
use serde_json::Value;
use tower::{Layer, ServiceExt};

/// A CLI command whose access key names the operator policy its command
/// needs (see `Env::cli`).
struct Cli(Command);

impl Cli {
    /// `Command::args`, and the resolving commands sign as `cli-resolve`.
    fn args<I, S>(&mut self, args: I) -> &mut Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        if args.iter().any(|a| a == "release" || a == "fail") {
            self.0.env(
                "AWS_ACCESS_KEY_ID",
                integration_tests::iam_record::access_key("cli-resolve"),
            );
        }
        self.0.args(args)
    }
}

impl std::ops::Deref for Cli {
    type Target = Command;
    fn deref(&self) -> &Command {
        &self.0
    }
}

impl std::ops::DerefMut for Cli {
    fn deref_mut(&mut self) -> &mut Command {
        &mut self.0
    }
}

struct Env {
    store: DynamoStore,
    endpoint: String,
}

impl Env {
    async fn new() -> Env {
        let (store, _) = integration_tests::dynamo_store().await;
        Env {
            store,
            endpoint: integration_tests::endpoint(),
        }
    }

    /// The CLI on this table, through `endpoint`.
    fn cli_at(&self, endpoint: &str) -> Command {
        let mut cmd = Command::cargo_bin("lambda-idempotency").expect("the CLI is built");
        cmd.env("IDEMPOTENCY_TABLE", self.store.table())
            .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "local")
            .env("AWS_SECRET_ACCESS_KEY", "local")
            .env("NO_COLOR", "1")
            .env_remove("AWS_PROFILE");
        cmd
    }

    /// The CLI on this table, its calls recorded (through
    /// `integration_tests::iam_record`) as an operator's: `cli-resolve` for
    /// `release` and `fail`, `cli-read` for the read-only commands, each
    /// proved against its managed policy by scripts/check-iam.py.
    fn cli(&self) -> Cli {
        let mut cmd = self.cli_at(&integration_tests::iam_record::dynamodb_endpoint());
        cmd.env(
            "AWS_ACCESS_KEY_ID",
            integration_tests::iam_record::access_key("cli-read"),
        );
        Cli(cmd)
    }

    /// A real claim of `key`'s record, its lease ending in `lease_ms`.
    async fn claim(&self, key: &str, owner: &str, lease_ms: u64) -> Lease {
        common::claim(&self.store, key, owner, lease_ms).await
    }

    /// A request that completed through the middleware (201, a JSON body).
    async fn completed(&self, key: &str) {
        common::completed(self.store.clone(), key).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_a_completed_record_and_its_response() {
    let env = Env::new().await;
    env.completed("order-0001").await;
    let by_key = succeeded(
        env.cli()
            .args(["inspect", "--key", "order-0001", "--path", "/orders"]),
    );
    let text = stdout(&by_key);
    assert!(text.contains(&id("order-0001")), "{text}");
    assert!(
        text.contains("COMPLETED") && text.contains("stored response: 201"),
        "{text}"
    );
    assert!(
        text.contains("\"amount\": 2500"),
        "the body pretty-printed: {text}"
    );
    // Times, ids, owners and spans vary by run: the snapshot redacts them.
    insta::with_settings!({filters => vec![
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "[time]"),
        (r"\b[0-9a-f]{64}\b", "[hash]"),
        (r"\b[0-9a-f]{32}\b", "[owner]"),
        (r"\((in [0-9][0-9a-z ]*|[0-9][0-9a-z ]* ago)\)", "([span])"),
        (r"\d+ bytes", "[n] bytes"),
        (r"[─═]+", "─"),
        (r"  +", " "),
    ]}, {
        insta::assert_snapshot!("inspect_completed_table", text);
    });

    let by_id = succeeded(env.cli().args(["--json", "inspect", &id("order-0001")]));
    let record = &json_lines(&by_id)[0];
    assert_eq!(record["record_id"], id("order-0001"));
    assert_eq!(record["status"], "COMPLETED");
    assert_eq!(record["attempt"], 1);
    assert_eq!(record["stuck"], false);
    assert_eq!(record["recovery_point"], Value::Null);
    assert_eq!(record["response_status"], 201);
    assert_eq!(record["response"]["body"]["amount"], 2500);
    let units = record["write_units"].as_u64().unwrap();
    let bytes = record["size_bytes"].as_u64().unwrap();
    assert_eq!(units, bytes.div_ceil(1024));
    for field in ["lease_expires_at", "expires_at"] {
        let text = record[field].as_str().unwrap();
        assert!(humantime::parse_rfc3339(text).is_ok(), "{field}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_stats_show_stuck_live_and_recovery_points() {
    let env = Env::new().await;
    env.claim("stuck-plain", "owner-a", 1).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let resumable = env.claim("stuck-resumable", "owner-b", 1).await;
    env.store
        .checkpoint(CheckpointRequest::new(
            &resumable,
            &Checkpoint {
                name: "charged".into(),
                data: serde_json::json!({"charge_id": "ch_1"}),
                attempt: resumable.attempt,
            },
        ))
        .await
        .unwrap();
    env.claim("live", "owner-c", 600_000).await;
    env.completed("done").await;
    tokio::time::sleep(Duration::from_millis(20)).await;

    // Oldest lease first.
    let lines = stuck_lines(&mut env.cli());
    assert_eq!(
        record_ids(&lines),
        [id("stuck-plain"), id("stuck-resumable")]
    );
    assert_eq!(lines[0]["recovery_point"], Value::Null);
    assert_eq!(lines[1]["recovery_point"], "charged");
    assert_eq!(lines[1]["response_status"], Value::Null);

    // With the default 60 s grace nothing is stuck yet; in progress, all three.
    let in_progress = env.cli().args(["--json", "list"]).output().unwrap();
    let lines = json_lines(&in_progress);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines.iter().all(|l| l["stuck"] == false));
    let older = env
        .cli()
        .args(["--json", "list", "--in-progress", "--older-than", "1h"])
        .output()
        .unwrap();
    assert_eq!(json_lines(&older).len(), 0);

    // Completed records are not in the index: only a scan finds them, with a warning.
    let refused = env.cli().args(["list", "--completed"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let completed = env
        .cli()
        .args(["--json", "list", "--completed", "--scan"])
        .output()
        .unwrap();
    assert!(stderr(&completed).contains("--scan reads every item"));
    let lines = json_lines(&completed);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["record_id"], id("done"));

    let table = env
        .cli()
        .args(["list", "--stuck", "--grace", "0s"])
        .output()
        .unwrap();
    let text = stdout(&table);
    assert!(
        text.contains("IN_PROGRESS (stuck)") && text.contains("charged"),
        "{text}"
    );
    insta::with_settings!({filters => vec![
        (r"\b[0-9a-f]{64}\b", "[hash]"),
        (r"in [0-9][0-9a-z ]*[0-9a-z]|[0-9][0-9a-z ]* ago", "[span]"),
        (r"[─═]+", "─"),
        (r"  +", " "),
    ]}, {
        // Oldest lease first: the plain record was claimed first.
        insta::assert_snapshot!("list_stuck_table", text);
    });

    let stats = succeeded(env.cli().args(["--json", "stats", "--grace", "0s"]));
    let stats = &json_lines(&stats)[0];
    assert_eq!(stats["source"], "stream");
    assert_eq!(
        (stats["in_progress"].as_u64(), stats["live"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(stats["stuck"], 2);
    assert_eq!(stats["with_recovery_point"], 1);
    assert_eq!(
        stats["completed"],
        Value::Null,
        "not counted without --scan"
    );
    assert_eq!(stats["lease_ended"]["lt_1m"], 2);
    let oldest = stats["oldest_stuck"]["record_id"].as_str().unwrap();
    assert!([id("stuck-plain"), id("stuck-resumable")].contains(&oldest.to_owned()));
    let scanned = env
        .cli()
        .args(["--json", "stats", "--scan", "--grace", "0s"])
        .output()
        .unwrap();
    let scanned = &json_lines(&scanned)[0];
    assert_eq!(
        (
            scanned["completed"].as_u64(),
            scanned["in_progress"].as_u64()
        ),
        (Some(1), Some(3))
    );
}

/// A record whose lease and expiry are past the year 9999, RFC 3339's last
/// (a lease cap of `Duration::MAX` with no deadline saturates the lease near
/// `u64::MAX` ms; a foreign writer may store anything): every view of it
/// prints, its times at RFC 3339's last second, instead of the whole listing
/// failing on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_past_the_year_9999_show_as_its_last_second() {
    let env = Env::new().await;
    let now = now_ms();
    let forever = lambda_idempotency::store::ClaimRequest {
        record_id: id("forever"),
        fingerprint: "fp".into(),
        owner: "owner-f".into(),
        now_ms: now,
        lease_expires_at_ms: u64::MAX - 1,
        expires_at_s: u64::MAX,
        origin: None,
    };
    let claimed = env.store.claim(&forever).await.unwrap();
    assert!(
        matches!(claimed, lambda_idempotency::store::ClaimOutcome::Claimed(_)),
        "the record that never expires is claimed: {claimed:?}"
    );
    env.claim("live", "owner-l", 600_000).await;
    let last = "9999-12-31T23:59:59Z";

    let listed = succeeded(env.cli().args(["--json", "list"]));
    let lines = json_lines(&listed);
    assert_eq!(lines.len(), 2, "{lines:?} {}", stderr(&listed));
    let line = lines
        .iter()
        .find(|l| l["record_id"] == id("forever"))
        .expect("listed");
    assert_eq!(line["lease_expires_at"], last);
    assert_eq!(line["expires_at"], last);

    let inspected = succeeded(env.cli().args(["--json", "inspect", &id("forever")]));
    assert_eq!(json_lines(&inspected)[0]["expires_at"], last);
    let table = succeeded(env.cli().args(["inspect", &id("forever")]));
    assert!(stdout(&table).contains(last), "{}", stdout(&table));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_refuses_a_live_lease_and_force_still_fences() {
    let env = Env::new().await;
    let holder = env.claim("busy", "owner-a", 600_000).await;
    assert_live_lease_refused(&env.cli().args(["release", &id("busy")]).output().unwrap());
    let kept = env.store.get(&id("busy")).await.unwrap().unwrap();
    assert_eq!(kept.record.status, Status::InProgress);

    // --force releases it; the invocation that held it is fenced afterwards.
    let forced = succeeded(
        env.cli()
            .args(["--json", "release", &id("busy"), "--force"]),
    );
    assert_released(&forced, true);
    assert!(env.store.get(&id("busy")).await.unwrap().is_none());
    assert_late_completion_is_gone(&env.store, &holder).await;

    // A forced resolution of what was read, after a newer attempt claimed
    // the record: the newer attempt wins, nothing is written.
    let seen = env.claim("raced", "owner-old", 1).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let newer = env.claim("raced", "owner-new", 600_000).await;
    assert_eq!(newer.attempt, seen.attempt + 1);
    let stale = StuckRecord {
        id: id("raced"),
        attempt: seen.attempt,
        owner: seen.owner.clone(),
        lease_expires_at_ms: 0,
        has_checkpoint: false,
    };
    for policy in [SweepPolicy::Release, SweepPolicy::Fail] {
        let resolution = Sweeper::new(env.store.clone())
            .policy(policy)
            .resolve_live(&stale, now_ms())
            .await
            .unwrap();
        assert_eq!(
            resolution,
            lambda_idempotency::store::Resolution::Fenced,
            "{policy:?}"
        );
    }
    let record = env.store.get(&id("raced")).await.unwrap().unwrap().record;
    assert_eq!(
        (record.owner.as_str(), record.status),
        ("owner-new", Status::InProgress)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_stores_the_problem_that_the_middleware_replays() {
    let env = Env::new().await;
    let crash = integration_tests::post("/orders", Some("crashed"), "{}");
    integration_tests::crash_midway(env.store.clone(), crash).await;
    let failed = succeeded(env.cli().args(["fail", &id("crashed"), "--grace", "0s"]));
    assert!(stdout(&failed).contains("abandoned"));
    let svc = IdempotencyLayer::new(env.store.clone()).layer(integration_tests::echo_handler());
    let res = svc
        .oneshot(integration_tests::post("/orders", Some("crashed"), "{}"))
        .await
        .unwrap();
    assert_eq!(res.status(), 500);
    assert_eq!(res.headers()[REPLAYED_HEADER], "true");
    let body: Value = serde_json::from_slice(res.body().as_ref()).unwrap();
    assert_eq!(body["type"], problem::ABANDONED.uri);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_nothing() {
    let env = Env::new().await;
    env.claim("stuck", "owner-a", 1).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let upstream = env
        .endpoint
        .trim_start_matches("http://")
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap();
    let plan = FaultPlan {
        throttle: 0,
        server_error: 0,
        delay: 0,
        drop_after_send: 0,
        lose_completion: 0,
        delay_for: Duration::ZERO,
    };
    let proxy = FaultProxy::start(upstream, plan).await.unwrap();
    let before = env.store.get(&id("stuck")).await.unwrap();
    for command in ["release", "fail"] {
        let before_requests = proxy.counts().get(Fault::Pass);
        let out = succeeded(env.cli_at(&proxy.endpoint()).args([
            "--json",
            command,
            &id("stuck"),
            "--grace",
            "0s",
            "--dry-run",
        ]));
        let line = &json_lines(&out)[0];
        assert_eq!(line["dry_run"], true);
        assert_eq!(
            proxy.counts().get(Fault::Pass) - before_requests,
            2,
            "DescribeTable and GetItem, no write"
        );
    }
    assert_eq!(env.store.get(&id("stuck")).await.unwrap(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_one_line_with_documented_exit_codes() {
    let env = Env::new().await;
    let missing = env.cli().args(["inspect", &id("nobody")]).output().unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).starts_with("error: no record"),
        "{}",
        stderr(&missing)
    );
    assert_eq!(stderr(&missing).lines().count(), 1);

    let no_table = env
        .cli()
        .args(["--table", "no-such-table", "stats"])
        .output()
        .unwrap();
    assert_eq!(no_table.status.code(), Some(3));
    let line = stderr(&no_table);
    assert!(
        line.contains("`no-such-table`") && line.contains("does not exist"),
        "{line}"
    );
    assert!(
        line.contains("IDEMPOTENCY_TABLE") && line.contains("AWS_REGION"),
        "{line}"
    );

    let unset = env
        .cli()
        .env_remove("IDEMPOTENCY_TABLE")
        .arg("stats")
        .output()
        .unwrap();
    assert_eq!(unset.status.code(), Some(2));
    assert!(
        stderr(&unset).contains("set IDEMPOTENCY_TABLE"),
        "{}",
        stderr(&unset)
    );

    // Nothing listens there: unreachable, exit 3, one line.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let unreachable = env
        .cli_at(&format!("http://127.0.0.1:{port}"))
        .arg("stats")
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(unreachable.status.code(), Some(3));
    assert!(
        stderr(&unreachable).contains("cannot reach DynamoDB"),
        "{}",
        stderr(&unreachable)
    );

    // No credentials anywhere (no keys, no profile file, no instance metadata).
    let home = std::env::temp_dir().join(integration_tests::unique_name("no-home"));
    std::fs::create_dir_all(&home).unwrap();
    let anonymous = env
        .cli()
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env("HOME", &home)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .arg("stats")
        .output()
        .unwrap();
    assert_eq!(anonymous.status.code(), Some(3));
    let line = stderr(&anonymous);
    assert!(
        line.contains("no AWS credentials") && line.contains("AWS_PROFILE"),
        "{line}"
    );
    let nowhere = env
        .cli()
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env("HOME", &home)
        .arg("stats")
        .output()
        .unwrap();
    assert_eq!(nowhere.status.code(), Some(2));
    assert!(
        stderr(&nowhere).contains("set AWS_REGION"),
        "{}",
        stderr(&nowhere)
    );

    for command in ["inspect", "list", "release", "fail", "stats"] {
        let help = env.cli().args([command, "--help"]).output().unwrap();
        assert!(help.status.success());
        assert!(
            stdout(&help).contains("Usage: lambda-idempotency"),
            "{command}"
        );
    }

    let usage = env
        .cli()
        .args(["list", "--stuck", "--in-progress"])
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
    let bare = env.cli().output().unwrap();
    assert_eq!(bare.status.code(), Some(2));
    assert!(stderr(&bare).contains("Usage"));
}

/// The stream is read where DynamoDB is, as the functions read it: with
/// only `AWS_ENDPOINT_URL_DYNAMODB` set, and with the streams variable set
/// empty (as `sam local` sets the template's declared variables).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_follows_the_dynamodb_endpoint() {
    let env = Env::new().await;
    env.claim("order-streams", "crashed", 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let unset = stuck_lines(env.cli().env_remove("AWS_ENDPOINT_URL_DYNAMODB_STREAMS"));
    assert_eq!(record_ids(&unset), [id("order-streams")]);
    let empty = stuck_lines(env.cli().env("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", ""));
    assert_eq!(record_ids(&empty), [id("order-streams")]);
}

/// A table whose only discovery is the sparse index, written by a writer
/// that never opted into it: `list` does not answer a silent "no records",
/// it says the index is empty because the writers did not opt in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_no_writer_fills_is_named_not_listed_as_empty() {
    let client = integration_tests::client().await;
    let mut definition = integration_tests::table_definition("IdempotencyTable").unwrap();
    definition.stream_specification = None;
    let table = integration_tests::unique_name("idempotency");
    integration_tests::create_table_from_definition(&client, definition, &table)
        .await
        .unwrap();
    // The writer keeps no index keys: DynamoStore without with_sweep_index.
    let env = Env {
        store: DynamoStore::builder(client, table.clone()).open().unwrap(),
        endpoint: integration_tests::endpoint(),
    };
    env.claim("order-unindexed", "writer", 60_000).await;
    for args in [
        &["list"][..],
        &["--json", "list", "--stuck", "--grace", "0s"],
        &["stats"],
    ] {
        let output = succeeded(env.cli().args(args));
        let note = stderr(&output);
        assert!(
            note.contains("`sweep` index")
                && note.contains("did not opt in")
                && note.contains(&id("order-unindexed"))
                && note.contains("--scan"),
            "{args:?}: {note}"
        );
    }
}

/// A table whose stream carries no new image (issue 25, item 3): listing
/// through the stream would show nothing, whatever is stuck. The CLI
/// refuses in one line naming the setting instead of answering "no stuck
/// records".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_new_images_is_refused_in_one_line() {
    let mut definition = integration_tests::table_definition("IdempotencyTable").unwrap();
    if let Some(stream) = definition.stream_specification.as_mut() {
        stream.stream_view_type = "KEYS_ONLY".to_owned();
    }
    let client = integration_tests::client().await;
    let table = integration_tests::unique_name("keys-only");
    integration_tests::create_table_from_definition(&client, definition, &table)
        .await
        .unwrap();
    let env = Env {
        store: DynamoStore::builder(client, table).open().unwrap(),
        endpoint: integration_tests::endpoint(),
    };
    env.claim("stuck-behind-keys-only", "crashed", 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    for args in [&["list", "--stuck", "--grace", "0s"][..], &["stats"][..]] {
        let refused = env.cli().args(args).output().unwrap();
        let line = stderr(&refused);
        assert_eq!(refused.status.code(), Some(3), "{args:?}: {line}");
        assert!(
            line.contains("StreamViewType KEYS_ONLY") && line.contains("NEW_IMAGE"),
            "{args:?}: {line}"
        );
        assert_eq!(line.lines().count(), 1, "{args:?}: {line}");
    }
}
