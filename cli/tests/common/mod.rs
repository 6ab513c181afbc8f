//! Helpers both CLI test targets use: record ids, the CLI's
//! output, and real records made through a store and through the middleware.

use lambda_idempotency::{
    scope::RecordScope,
    store::{now_ms, ClaimOutcome, CompleteRequest, Lease, StoredBody, StoredResponse},
    ErrorKind, IdempotencyLayer, Store,
};
use serde_json::Value;
use tower::{Layer, ServiceExt};

/// The id the middleware gives `POST /orders` with `key`, anonymous.
pub fn id(key: &str) -> String {
    RecordScope::new("POST", "/orders", key).record_id()
}

pub fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The output of `cmd`, which must have succeeded (its stderr shown when not).
pub fn succeeded(cmd: &mut assert_cmd::Command) -> std::process::Output {
    let output = cmd.output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    output
}

pub fn json_lines(output: &std::process::Output) -> Vec<Value> {
    stdout(output)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A real claim of `key`'s record in `store`, its lease ending in `lease_ms`.
pub async fn claim(store: &(impl Store + ?Sized), key: &str, owner: &str, lease_ms: u64) -> Lease {
    let request = integration_tests::claim_request(&id(key), owner, lease_ms);
    match store.claim(&request).await.expect("claim") {
        ClaimOutcome::Claimed(lease) => lease,
        other => panic!("claim of {key}: {other:?}"),
    }
}

/// A request to `store` that completed through the middleware (201, a JSON body).
pub async fn completed(store: impl Store + 'static, key: &str) {
    let svc = IdempotencyLayer::new(store).layer(integration_tests::echo_handler());
    let res = svc
        .oneshot(integration_tests::post(
            "/orders",
            Some(key),
            r#"{"amount":2500}"#,
        ))
        .await
        .expect("response");
    assert_eq!(res.status(), 201);
}

/// The JSON lines of `list --stuck --grace 0s` through `cli`, each checked to
/// be a stuck record in progress.
pub fn stuck_lines(cli: &mut assert_cmd::Command) -> Vec<Value> {
    let lines = json_lines(&succeeded(
        cli.args(["--json", "list", "--stuck", "--grace", "0s"]),
    ));
    assert!(lines
        .iter()
        .all(|l| l["stuck"] == true && l["status"] == "IN_PROGRESS"));
    lines
}

/// `release` of a record whose lease is live, without `--force`: refused
/// with exit code 2 and one line that names the lease and `--force`.
pub fn assert_live_lease_refused(refused: &std::process::Output) {
    assert_eq!(refused.status.code(), Some(2));
    let line = stderr(refused);
    assert!(
        line.contains("live lease") && line.contains("--force"),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1, "one line: {line}");
}

/// The JSON line of a `release` that released its record, `forced` or not.
pub fn assert_released(output: &std::process::Output, forced: bool) {
    let out = &json_lines(output)[0];
    assert_eq!(
        (out["result"].as_str(), out["forced"].as_bool()),
        (Some("released"), Some(forced))
    );
}

/// The completion `lease`'s invocation tries after an operator released
/// its record: not stored, and the error says the record is gone (an
/// event would be reported failed and redelivered).
pub async fn assert_late_completion_is_gone(store: &(impl Store + ?Sized), lease: &Lease) {
    let late = store
        .complete(CompleteRequest::new(
            lease,
            &StoredResponse::new(200, vec![], StoredBody::Empty),
            now_ms() / 1000 + 60,
        ))
        .await
        .unwrap_err();
    assert_eq!(late.kind(), ErrorKind::RecordGone);
}

/// The `record_id` of each JSON line.
pub fn record_ids(lines: &[Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|l| l["record_id"].as_str().unwrap())
        .collect()
}
