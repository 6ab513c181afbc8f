//! `bench cutover N`: what the cut-over window from Powertools costs a first
//! execution, and that it costs nothing once the window ends.
//!
//! Three middlewares over one store on DynamoDB Local (this library's table
//! without stream or index, so the engine's slowdown on stream tables does
//! not enter), one client and request counter: without a cut-over, with the
//! window open (a Powertools table beside it, holding none of these keys:
//! the common case, a key first seen after the switch) and with the window
//! over. After a warm-up, N rounds of one first execution through each, in
//! turn, so drift hits the three alike.

use std::time::{Duration, SystemTime};

use integration_tests::RequestCounter;
use lambda_idempotency::store::powertools::{PowertoolsCutover, PowertoolsRecords};
use lambda_idempotency::{DynamoStore, IdempotencyLayer};
use serde_json::{json, Value};
use tower::Layer;

use crate::handler::{handler, is_replayed, request, timed_call, Fresh};
use crate::stats::Samples;
use crate::tables::create_table_without_gsi;
use crate::Result;

const KINDS: [&str; 3] = ["no_cutover", "window_open", "window_over"];

pub(crate) async fn cutover(n: usize) -> Result<Value> {
    let counter = RequestCounter::default();
    let client =
        integration_tests::client_with(vec![aws_sdk_dynamodb::config::SharedInterceptor::new(
            counter.clone(),
        )])
        .await;
    let ours = create_table_without_gsi(false).await?;
    let theirs = integration_tests::unique_name("powertools");
    client
        .create_table()
        .table_name(&theirs)
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::S)
                .build()
                .map_err(|e| e.to_string())?,
        )
        .key_schema(
            aws_sdk_dynamodb::types::KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(aws_sdk_dynamodb::types::KeyType::Hash)
                .build()
                .map_err(|e| e.to_string())?,
        )
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(|e| format!("create the Powertools table: {e:?}"))?;
    let store = DynamoStore::builder(client.clone(), ours)
        .open()
        .map_err(|e| e.to_string())?;
    let records = |until: SystemTime| {
        PowertoolsRecords::new(
            client.clone(),
            &theirs,
            "orders-api.app.lambda_handler",
            until,
        )
    };
    let hour = Duration::from_secs(3600);
    let services = [
        IdempotencyLayer::new(store.clone()).layer(handler(Duration::ZERO)),
        IdempotencyLayer::new(PowertoolsCutover::new(
            store.clone(),
            records(SystemTime::now() + hour),
        ))
        .layer(handler(Duration::ZERO)),
        // An hour past `until`: past its longest-timeout allowance (900 s)
        // too, so nothing is read.
        IdempotencyLayer::new(PowertoolsCutover::new(
            store.clone(),
            records(SystemTime::now() - hour),
        ))
        .layer(handler(Duration::ZERO)),
    ];
    let mut fresh = Fresh::default();
    let mut samples = Samples::default();
    for round in 0..(n + 200) {
        for (kind, svc) in KINDS.iter().zip(&services) {
            let before = counter.get();
            let (us, res) = timed_call(svc, request(&fresh.key(kind))).await?;
            if res.status() != 201 || is_replayed(&res) {
                return Err(format!(
                    "cutover {kind}: a first execution answered {}",
                    res.status()
                ));
            }
            // The first 200 rounds warm the engine and the clients.
            if round >= 200 {
                samples.add(kind, us, counter.get() - before);
            }
        }
    }
    let (us, requests) = samples.into_json();
    let per_call: serde_json::Map<String, Value> = requests
        .into_iter()
        .map(|(kind, total)| {
            let total = total.as_f64().unwrap_or(f64::NAN);
            (kind, json!(total / n as f64))
        })
        .collect();
    Ok(json!({"n": n, "samples": us, "requests_per_first_execution": per_call}))
}
