//! `orders-api`: an example Lambda HTTP API made safe to retry with
//! `lambda-idempotency`.
//!
//! - `POST /orders` (`Idempotency-Key` required; tenant = JWT `sub`; a request
//!   without one is refused with a `401` unless `IDEMPOTENCY_ALLOW_ANONYMOUS`
//!   puts such requests in one shared anonymous scope) validates
//!   `{"customer_id", "amount", "currency"}`, derives the order id and the
//!   payment-provider key from the idempotency record, charges the simulated
//!   provider (itself idempotent by that key), upserts the order and answers
//!   `201`. The order's `executions` counts how often this body really ran.
//! - `GET /orders/{order_id}` answers the stored order or `404`; not covered.
//!   An order is visible only to the tenant that created it (anonymous orders
//!   to anonymous callers).
//!
//! Because the order id and charge key are derived from the record, a re-run
//! after a crash writes the same order and is deduplicated by the provider.
//!
//! Coming from Powertools for AWS Lambda (Python or TypeScript):
//! `IDEMPOTENCY_POWERTOOLS_TABLE`, `IDEMPOTENCY_POWERTOOLS_KEY_PREFIX` and
//! `IDEMPOTENCY_POWERTOOLS_UNTIL` turn on the cut-over ([`PowertoolsCutover`]),
//! the other `IDEMPOTENCY_POWERTOOLS_*` variables say how Powertools was
//! configured (its key and validation expressions, its runtime): until the
//! window ends, a key Powertools completed replays its stored response
//! instead of running again. The Redis replica wait
//! (`IDEMPOTENCY_REDIS_WAIT_REPLICAS`) is the store's
//! ([`idempotency_engine`]).

mod config;
mod order;
mod response;
mod routes;

use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use lambda_idempotency::metrics::Metrics;
use lambda_idempotency::{
    http::Idempotency, store::offload::S3Offload, DynamoStore, IdempotencyLayer, Store,
};
use tower::Layer;

pub use config::{
    Config, Offload, PowertoolsCutover, POWERTOOLS_KEY_PREFIX_ENV, POWERTOOLS_TABLE_ENV,
    POWERTOOLS_UNTIL_ENV,
};
pub use response::problems;
pub use routes::Orders;

/// The idempotency settings of this API, for callers that build their own
/// store (without the cut-over from Powertools, which needs a DynamoDB
/// client: [`with_cutover`]).
pub fn idempotency_layer(store: impl Store + 'static, config: &Config) -> IdempotencyLayer {
    // Every setting was read and checked at start (`Config`, the library's
    // variables by the library's rules); IDEMPOTENCY_DISABLED=true switches
    // the middleware off for local tests.
    let layer = IdempotencyLayer::new(store)
        .disabled(config.disabled)
        .require_key(true)
        .tenant(config.tenant_source())
        .expires_after(config.expires_after)
        .max_lease(config.max_lease)
        .wait_for(config.wait_for_result);
    match &config.metrics_namespace {
        Some(namespace) => {
            layer.metrics(Metrics::new(namespace).dimension("Service", "orders-api"))
        }
        None => layer,
    }
}

/// `store` with the cut-over from Powertools of `config` (if any) around
/// it, reading Powertools' records through `client`.
pub fn with_cutover(store: Arc<dyn Store>, client: &Client, config: &Config) -> Arc<dyn Store> {
    match &config.powertools {
        Some(cutover) => Arc::new(
            lambda_idempotency::store::powertools::PowertoolsCutover::new(
                store,
                cutover.records(client.clone()),
            ),
        ),
        None => store,
    }
}

/// The whole function: the router behind the idempotency middleware, its
/// records in the idempotency table alone (`config.offload` needs an S3
/// client: [`app_with_s3`]).
pub fn app(client: Client, config: &Config) -> Idempotency<Orders> {
    let store = DynamoStore::builder(client.clone(), config.idempotency_table.clone())
        .open()
        .expect("the default table layout is valid");
    let store = with_cutover(Arc::new(store), &client, config);
    idempotency_layer(store, config).layer(Orders::new(client, config))
}

/// The whole function as deployed: [`app`], with responses too large for the
/// table kept in `config.offload`'s bucket through `s3` when it is set.
pub fn app_with_s3(client: Client, s3: aws_sdk_s3::Client, config: &Config) -> Idempotency<Orders> {
    let store = DynamoStore::builder(client.clone(), config.idempotency_table.clone())
        .open()
        .expect("the default table layout is valid");
    app_with_store(client, Arc::new(store), s3, config)
}

/// [`app_with_s3`] with the records in `store`: the engine
/// `IDEMPOTENCY_STORE_URL` names ([`idempotency_engine::open`]); the
/// orders stay in DynamoDB.
pub fn app_with_store(
    client: Client,
    store: Arc<dyn Store>,
    s3: aws_sdk_s3::Client,
    config: &Config,
) -> Idempotency<Orders> {
    let store: Arc<dyn Store> = match &config.offload {
        Some(offload) => {
            Arc::new(S3Offload::new(store, s3, &offload.bucket).key_prefix(&offload.prefix))
        }
        None => store,
    };
    // The cut-over outermost: it reads how each request was sent, and its
    // copies of Powertools' outcomes go through the offload like any other.
    let store = with_cutover(store, &client, config);
    idempotency_layer(store, config).layer(Orders::new(client, config))
}
