//! The tables of the latency passes and `engine-probe`: each with its
//! store, its own request counter and the middleware on it.

use std::time::Duration;

use integration_tests::RequestCounter;
use lambda_http::{Body, Request, Response};
use lambda_idempotency::{DynamoStore, IdempotencyLayer};
use serde_json::{json, Value};
use tower::{Layer, Service};

use crate::handler::handler;
use crate::timed_store::{StoreClock, TimedStore};
use crate::Result;

/// One idempotency table with its store, its own request counter, and the
/// middleware on it (over a [`TimedStore`] reading `in_store`).
pub(crate) struct Target<S> {
    pub(crate) store: DynamoStore,
    pub(crate) counter: RequestCounter,
    pub(crate) in_store: StoreClock,
    pub(crate) svc: S,
}

fn target(
    store: DynamoStore,
    counter: RequestCounter,
) -> Target<impl Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone> {
    let in_store = StoreClock::default();
    let timed = TimedStore {
        inner: store.clone(),
        clock: in_store.clone(),
    };
    let svc = IdempotencyLayer::new(timed).layer(handler(Duration::ZERO));
    Target {
        store,
        counter,
        in_store,
        svc,
    }
}

/// A [`Target`] on `table`, with a client and request counter of its own.
pub(crate) async fn target_on(
    table: String,
) -> Target<impl Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone> {
    let counter = RequestCounter::default();
    let client =
        integration_tests::client_with(vec![aws_sdk_dynamodb::config::SharedInterceptor::new(
            counter.clone(),
        )])
        .await;
    target(
        DynamoStore::builder(client, table)
            .open()
            .expect("the default table layout is valid"),
        counter,
    )
}

/// The idempotency table of template.yaml without its sparse `sweep` index
/// (and the attribute definitions only the index used), with or without its
/// stream: same key, same TTL attribute, same billing mode.
pub(crate) async fn create_table_without_gsi(stream: bool) -> Result<String> {
    let mut def = integration_tests::table_definition("IdempotencyTable")?;
    def.global_secondary_indexes.clear();
    if !stream {
        def.stream_specification = None;
    }
    let keys: Vec<String> = def
        .key_schema
        .iter()
        .map(|k| k.attribute_name.clone())
        .collect();
    def.attribute_definitions
        .retain(|a| keys.contains(&a.attribute_name));
    let name = integration_tests::unique_name(if stream {
        "idempotency-no-gsi"
    } else {
        "idempotency-plain"
    });
    integration_tests::create_table_from_definition(&integration_tests::client().await, def, &name)
        .await?;
    Ok(name)
}

pub(crate) async fn describe(store: &DynamoStore) -> Result<Value> {
    let out = integration_tests::client()
        .await
        .describe_table()
        .table_name(store.table())
        .send()
        .await
        .map_err(|e| {
            format!(
                "describe {}: {}",
                store.table(),
                aws_sdk_dynamodb::error::DisplayErrorContext(e)
            )
        })?;
    let indexes: Vec<String> = out
        .table()
        .map(|t| {
            t.global_secondary_indexes()
                .iter()
                .filter_map(|i| i.index_name().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let stream = out
        .table()
        .and_then(|t| t.stream_specification())
        .is_some_and(|s| s.stream_enabled());
    Ok(json!({"name": store.table(), "global_secondary_indexes": indexes, "stream": stream}))
}
