//! The cut-over as Powertools was configured: each key expression
//! (`event_key_jmespath`), a validation expression, both runtimes' records
//! (Python 3.37.0 and TypeScript 2.x, written by the real packages:
//! tests/powertools/write_expressions.py and
//! tests/powertools/typescript/write_expressions.mjs), the event as API
//! Gateway sent it to Powertools, and tenants kept apart.

use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use lambda_http::Request;
use lambda_idempotency::event::SqsBatch;
use lambda_idempotency::store::powertools::{
    PowertoolsCutover, PowertoolsRecords, PowertoolsRuntime,
};
use lambda_idempotency::{
    http::REPLAYED_HEADER, problem, IdempotencyLayer, IdempotentFunction, TenantSource,
};
use serde_json::{json, Value};
use tower::Layer;

use crate::fixture::{call, counting_handler, json as body_json, Runs};
use crate::powertools_writers::{powertools_wrote_expressions, Runtime, Written};

/// The HTTP cases the writers completed, one key expression each.
const HTTP_CASES: [&str; 5] = [
    "header",
    "body",
    "json_field",
    "json_fields",
    "tenant_header",
];

fn runtime_of(runtime: &Runtime) -> PowertoolsRuntime {
    match runtime {
        Runtime::Python => PowertoolsRuntime::Python,
        Runtime::TypeScript => PowertoolsRuntime::TypeScript,
    }
}

/// Who answered in Powertools' records (the writers' handlers say).
fn by(runtime: &Runtime) -> &'static str {
    match runtime {
        Runtime::Python => "powertools-python",
        Runtime::TypeScript => "powertools-typescript",
    }
}

/// The records of `case` as Powertools was configured for it, looked up
/// for the next hour.
async fn records(w: &Written, runtime: &Runtime, case: &str) -> PowertoolsRecords {
    let c = &w.printed["cases"][case];
    let text = |name: &str| c[name].as_str().map(str::to_owned);
    let mut records = PowertoolsRecords::new(
        integration_tests::client().await,
        &w.table,
        text("prefix").expect("a prefix"),
        SystemTime::now() + Duration::from_secs(3600),
    )
    .runtime(runtime_of(runtime))
    .key_jmespath(&text("expression").expect("an expression"))
    .expect("Powertools' key expression is JMESPath");
    if let Some(validation) = text("validation") {
        records = records
            .validation_jmespath(&validation)
            .expect("Powertools' validation expression is JMESPath");
    }
    records
}

/// The event Powertools was given for `case`, as `lambda_http` hands it on.
fn request(w: &Written, case: &str) -> Request {
    let event = &w.printed["cases"][case]["event"];
    lambda_http::request::from_str(&event.to_string()).expect("an API Gateway event")
}

/// `event` of `case` with its JWT `sub` claim replaced by `tenant`.
fn request_of_tenant(w: &Written, case: &str, tenant: &str) -> Request {
    let mut event = w.printed["cases"][case]["event"].clone();
    event["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] = json!(tenant);
    lambda_http::request::from_str(&event.to_string()).expect("an API Gateway event")
}

async fn every_key_expression_replays_what_powertools_stored(runtime: Runtime) {
    let w = powertools_wrote_expressions(runtime, "ptx").await;
    let f = crate::fixture::dynamodb().await;
    for case in HTTP_CASES {
        let runs = Runs::default();
        // The tenant is the `sub` claim where the key names it; the other
        // cases serve one anonymous scope.
        let tenant = match case {
            "tenant_header" => TenantSource::jwt_sub(),
            _ => TenantSource::anonymous(),
        };
        let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
            f.store.clone(),
            records(&w, &runtime, case).await,
        ))
        .tenant(tenant)
        .layer(counting_handler(runs.clone(), Duration::ZERO));
        let replay = call(&mut svc, request(&w, case)).await;
        assert_eq!(replay.status(), 201, "{case}: {:?}", body_json(&replay));
        assert_eq!(replay.headers()[REPLAYED_HEADER], "true", "{case}");
        assert_eq!(
            body_json(&replay),
            json!({"by": by(&runtime), "case": case}),
            "{case}"
        );
        assert_eq!(runs.count(), 0, "{case}: Powertools already ran it");
    }
    // One Powertools still runs: in progress, nothing run.
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        records(&w, &runtime, "running").await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    let held = call(&mut svc, request(&w, "running")).await;
    assert_eq!(held.status(), 409, "{:?}", body_json(&held));
    assert_eq!(runs.count(), 0);
}

async fn a_payload_other_than_the_one_powertools_validated_is_422(runtime: Runtime) {
    let w = powertools_wrote_expressions(runtime, "ptv").await;
    let f = crate::fixture::dynamodb().await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        records(&w, &runtime, "json_field").await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    // The same order id (the key), another amount (the validated payload).
    let mut event = w.printed["cases"]["json_field"]["event"].clone();
    let body: Value = serde_json::from_str(event["body"].as_str().expect("a body")).expect("JSON");
    let mut other = body.clone();
    other["amount"] = json!(1);
    event["body"] = json!(other.to_string());
    // A new Idempotency-Key here, so this library's own records do not
    // decide: only Powertools' validation does.
    event["headers"]["idempotency-key"] = json!("h-json_field-other");
    let req = lambda_http::request::from_str(&event.to_string()).expect("event");
    let reused = call(&mut svc, req).await;
    assert_eq!(reused.status(), 422, "{:?}", body_json(&reused));
    assert_eq!(body_json(&reused)["type"], problem::KEY_REUSED.uri);
    assert_eq!(runs.count(), 0);
}

async fn an_sqs_record_powertools_processed_is_not_processed_again(runtime: Runtime) {
    let w = powertools_wrote_expressions(runtime, "pts").await;
    let f = crate::fixture::dynamodb().await;
    let message: SqsMessage =
        serde_json::from_value(w.printed["cases"]["sqs"]["event"].clone()).expect("an SQS record");
    let mut event = SqsEvent::default();
    event.records = vec![message];
    let batch = SqsBatch::new(IdempotentFunction::new(
        PowertoolsCutover::new(f.store.clone(), records(&w, &runtime, "sqs").await),
        "consumer",
    ));
    let runs = Runs::default();
    let response = batch
        .process(event, |_message, _ctx| {
            let runs = runs.clone();
            async move {
                runs.bump();
                Ok::<Value, String>(json!({"by": "rust"}))
            }
        })
        .await
        .expect("a batch response");
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert_eq!(runs.count(), 0, "Powertools already processed m-1");
}

async fn tenant_b_never_receives_the_answer_powertools_stored_for_tenant_a(runtime: Runtime) {
    let w = powertools_wrote_expressions(runtime, "ptt").await;
    let f = crate::fixture::dynamodb().await;
    let runs = Runs::default();
    // The key names the tenant (`[sub, header]`): tenant B with tenant A's
    // Idempotency-Key finds no record of Powertools and runs.
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        records(&w, &runtime, "tenant_header").await,
    ))
    .tenant(TenantSource::jwt_sub())
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    let b = call(&mut svc, request_of_tenant(&w, "tenant_header", "tenant-b")).await;
    assert_eq!(b.status(), 201);
    assert!(b.headers().get(REPLAYED_HEADER).is_none());
    assert_ne!(body_json(&b)["by"], by(&runtime));
    assert_eq!(runs.count(), 1);
    // A key of the header alone cannot tell tenants apart: with the tenant
    // read from `sub`, every claim in the window is refused, and nothing
    // of tenant A's reaches tenant B.
    let header_only = PowertoolsRecords::new(
        integration_tests::client().await,
        &w.table,
        w.printed["cases"]["header"]["prefix"]
            .as_str()
            .expect("prefix"),
        SystemTime::now() + Duration::from_secs(3600),
    )
    .runtime(runtime_of(&runtime))
    .key_jmespath("headers.\"idempotency-key\"")
    .expect("JMESPath");
    let err = header_only
        .check_tenant(&TenantSource::jwt_sub())
        .expect_err("refused at start");
    assert!(
        err.to_string()
            .contains("IDEMPOTENCY_POWERTOOLS_SHARED_KEYS=true"),
        "{err}"
    );
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(f.store.clone(), header_only))
        .tenant(TenantSource::jwt_sub())
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let refused = call(&mut svc, request_of_tenant(&w, "header", "tenant-b")).await;
    assert_eq!(refused.status(), 503, "{:?}", body_json(&refused));
    assert_ne!(body_json(&refused)["by"], by(&runtime));
    assert_eq!(
        runs.count(),
        1,
        "not run: whether Powertools ran it is unknown"
    );
    // Declared shared, as it was under Powertools: any tenant replays it.
    let shared = records(&w, &runtime, "header").await.shared_keys(true);
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(f.store.clone(), shared))
        .tenant(TenantSource::jwt_sub())
        .layer(counting_handler(runs.clone(), Duration::ZERO));
    let replay = call(&mut svc, request_of_tenant(&w, "header", "tenant-b")).await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 1);
}

macro_rules! on_both_runtimes {
    ($($name:ident),* $(,)?) => {
        mod python {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Runtime::Python).await
                }
            )*
        }
        mod typescript {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Runtime::TypeScript).await
                }
            )*
        }
    };
}

on_both_runtimes!(
    every_key_expression_replays_what_powertools_stored,
    a_payload_other_than_the_one_powertools_validated_is_422,
    an_sqs_record_powertools_processed_is_not_processed_again,
    tenant_b_never_receives_the_answer_powertools_stored_for_tenant_a,
);
