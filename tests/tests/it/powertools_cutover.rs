//! The cut-over from Powertools for AWS Lambda (Python)
//! (`PowertoolsRecords`, docs/powertools.md "Cutting over"), against records
//! Powertools itself wrote to DynamoDB Local (tests/powertools/write_records.py,
//! run with the Python of `IDEMPOTENCY_TEST_POWERTOOLS_PYTHON`), with this
//! library's own records on every store.

use std::time::{Duration, SystemTime};

use lambda_http::{Body, Request};
use lambda_idempotency::event::{EventError, IdempotentFunction};
use lambda_idempotency::store::dynamodb::PowertoolsRecords;
use lambda_idempotency::{http::REPLAYED_HEADER, problem, IdempotencyLayer};
use serde_json::{json, Value};
use tower::Layer;

use crate::fixture::{call, counting_handler, json as body_json, on_both_stores, Fixture, Runs};

on_both_stores!(
    a_completed_powertools_record_is_replayed_and_becomes_ours,
    a_powertools_record_in_progress_is_409_and_the_key_stays_free,
    a_body_other_than_the_one_powertools_validated_is_422,
    keys_powertools_never_saw_run_and_after_the_window_nothing_is_read,
    event_outputs_powertools_stored_are_returned_without_running,
);

/// The tables Powertools wrote and the id prefixes it used.
struct Written {
    http_table: String,
    event_table: String,
    http_prefix: String,
    event_prefix: String,
    event_partition: String,
}

/// Run Powertools for AWS Lambda (Python) against DynamoDB Local: it makes
/// two tables and writes its records (tests/powertools/write_records.py).
async fn powertools_wrote() -> Written {
    let python = std::env::var("IDEMPOTENCY_TEST_POWERTOOLS_PYTHON").unwrap_or_else(|_| {
        panic!(
            "IDEMPOTENCY_TEST_POWERTOOLS_PYTHON is not set: these tests read records written by \
             Powertools for AWS Lambda (Python). Run them with `make test`, or set it to the \
             Python of .tools/bench-venv (scripts/bench-venv.sh installs it)."
        )
    });
    let http_table = integration_tests::unique_name("pt-http");
    let event_table = integration_tests::unique_name("pt-event");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/powertools/write_records.py");
    let out = tokio::process::Command::new(&python)
        .arg(script)
        .arg(&http_table)
        .arg(&event_table)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {python} {script}: {e}"));
    assert!(
        out.status.success(),
        "Powertools did not write its records: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).expect("the script prints JSON");
    let text = |name: &str| printed[name].as_str().expect("a prefix").to_owned();
    // Powertools names records `<function>.<module>.<qualified name>#<hash>`.
    assert!(
        text("http").starts_with("orders-api.__main__."),
        "{printed}"
    );
    Written {
        http_table,
        event_table,
        http_prefix: text("http"),
        event_prefix: text("event"),
        event_partition: text("event_partition"),
    }
}

/// Every record of this library's store, all pages (a cluster lists node
/// by node).
async fn our_records(f: &Fixture) -> Vec<lambda_idempotency::store::StoredRecord> {
    let mut records = Vec::new();
    let mut cursor = None;
    loop {
        let page = f.store.scan(cursor, 100).await.expect("scan");
        records.extend(page.records);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return records,
        }
    }
}

/// Looked up for the next hour.
fn open_window() -> SystemTime {
    SystemTime::now() + Duration::from_secs(3600)
}

async fn http_records(w: &Written, until: SystemTime) -> PowertoolsRecords {
    PowertoolsRecords::new(
        integration_tests::client().await,
        &w.http_table,
        &w.http_prefix,
        until,
    )
    .validate_body()
}

fn order(key: &str, body: &str) -> Request {
    http::Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body.to_owned()))
        .expect("request")
}

/// The body Powertools' handler was called with.
const BODY: &str = r#"{"amount":2500}"#;

async fn a_completed_powertools_record_is_replayed_and_becomes_ours(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(f.store.clone())
        .powertools_records(http_records(&w, open_window()).await)
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let replay = call(&mut svc, order("done-1", BODY)).await;
    assert_eq!(runs.count(), 0, "Powertools already ran it");
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(replay.headers()["location"], "/orders/1");
    assert_eq!(
        body_json(&replay),
        json!({"order": {"amount": 2500}, "by": "powertools"})
    );
    // Copied into this library's record: with the Powertools table gone,
    // the key still replays the same response.
    integration_tests::client()
        .await
        .delete_table()
        .table_name(&w.http_table)
        .send()
        .await
        .expect("delete the Powertools table");
    let again = call(&mut svc, order("done-1", BODY)).await;
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()[REPLAYED_HEADER], "true");
    assert_eq!(again.body().as_ref(), replay.body().as_ref());
    assert_eq!(runs.count(), 0);
}

async fn a_powertools_record_in_progress_is_409_and_the_key_stays_free(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(f.store.clone())
        .powertools_records(http_records(&w, open_window()).await)
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let answer = call(&mut svc, order("running-1", BODY)).await;
    assert_eq!(answer.status(), 409);
    assert_eq!(body_json(&answer)["type"], problem::IN_PROGRESS.uri);
    let retry_after: u64 = answer.headers()["retry-after"]
        .to_str()
        .expect("text")
        .parse()
        .expect("seconds");
    assert!(retry_after >= 1, "{retry_after}");
    assert_eq!(runs.count(), 0);
    // The claim was given back: nothing of this library holds the key, so
    // a retry asks Powertools' record again.
    let ours = our_records(&f).await;
    assert!(ours.is_empty(), "{ours:?}");
    assert_eq!(call(&mut svc, order("running-1", BODY)).await.status(), 409);
}

async fn a_body_other_than_the_one_powertools_validated_is_422(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(f.store.clone())
        .powertools_records(http_records(&w, open_window()).await)
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let reused = call(&mut svc, order("done-2", r#"{"amount":1}"#)).await;
    assert_eq!(reused.status(), 422);
    assert_eq!(body_json(&reused)["type"], problem::KEY_REUSED.uri);
    assert_eq!(runs.count(), 0);
    // The key is not taken by the refused request: the original body
    // still replays Powertools' outcome.
    let replay = call(&mut svc, order("done-2", BODY)).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 0);
}

async fn keys_powertools_never_saw_run_and_after_the_window_nothing_is_read(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    let mut open = IdempotencyLayer::new(f.store.clone())
        .powertools_records(http_records(&w, open_window()).await)
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let fresh = call(&mut open, order("fresh-1", BODY)).await;
    assert_eq!(fresh.status(), 201);
    assert!(fresh.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(runs.count(), 1);
    // The window over: done-3, which Powertools completed, runs here (the
    // cost of a window too short), and the Powertools table is not read,
    // which a table that no longer exists proves.
    let mut closed = IdempotencyLayer::new(f.store.clone())
        .powertools_records(
            PowertoolsRecords::new(
                integration_tests::client().await,
                "no-such-table",
                &w.http_prefix,
                SystemTime::now() - Duration::from_secs(1),
            )
            .validate_body(),
        )
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let after = call(&mut closed, order("done-3", BODY)).await;
    assert_eq!(after.status(), 201);
    assert!(after.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(runs.count(), 2);
    // And a lookup that fails is a 503 that leaves the key free.
    let mut broken = IdempotencyLayer::new(f.store.clone())
        .powertools_records(PowertoolsRecords::new(
            integration_tests::client().await,
            "no-such-table",
            &w.http_prefix,
            open_window(),
        ))
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let refused = call(&mut broken, order("fresh-2", BODY)).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(
        runs.count(),
        2,
        "not run: whether Powertools ran it is unknown"
    );
    let ours = our_records(&f).await;
    assert_eq!(ours.len(), 2, "fresh-1 and done-3 only: {ours:?}");
}

async fn event_outputs_powertools_stored_are_returned_without_running(f: Fixture) {
    let w = powertools_wrote().await;
    let records = PowertoolsRecords::new(
        integration_tests::client().await,
        &w.event_table,
        &w.event_prefix,
        open_window(),
    )
    .key_attr("pk")
    .sort_key("sk", &w.event_partition);
    let charge = IdempotentFunction::new(f.store.clone(), "charge")
        .key_pointers(["/order_id"])
        .powertools_records(records);
    let runs = Runs::default();
    let run = |order: Value| {
        let runs = runs.clone();
        charge.call(order, move |_| async move {
            runs.bump();
            Ok::<Value, String>(json!({"charged": "again"}))
        })
    };
    let out: Result<Value, EventError<String>> =
        run(json!({"order_id": "o-1", "amount": 2500})).await;
    assert_eq!(out.unwrap(), json!({"charged": 2500, "order_id": "o-1"}));
    // An integer key hashes as Powertools hashed the integer.
    let out = run(json!({"order_id": 42, "amount": 1})).await;
    assert_eq!(out.unwrap(), json!({"charged": 1}));
    assert_eq!(runs.count(), 0);
    // A string "42" is another key, which Powertools never saw.
    let out = run(json!({"order_id": "42", "amount": 1})).await;
    assert_eq!(out.unwrap(), json!({"charged": "again"}));
    assert_eq!(runs.count(), 1);
}
