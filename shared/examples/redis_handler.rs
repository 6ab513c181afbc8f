//! The `http_handler` example with its records in Redis or Valkey
//! (ElastiCache, MemoryDB, Valkey): the same contract, one script per claim
//! and one per completion.
//!
//! Environment: `REDIS_URL` (`redis://` or `rediss://` for TLS, credentials
//! and database number as written) and `REDIS_CLUSTER=true` for a cluster
//! (cluster mode enabled, ElastiCache Serverless). The function fails at
//! start, naming the server, when it cannot reach it.

use lambda_http::{service_fn, Body, Error, Request, Response};
use lambda_idempotency::{IdempotencyContext, IdempotencyLayer, RedisStore, TenantSource};
use tower::Layer;

async fn create_order(req: Request) -> Result<Response<Body>, Error> {
    let charge_key = IdempotencyContext::of(&req).map(|ctx| ctx.derived_key("charge"));
    // ... charge with `charge_key`, write the order ...
    let body = serde_json::json!({ "charge_key": charge_key });
    Ok(Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))?)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").map_err(|_| "set REDIS_URL")?;
    let mut store = RedisStore::builder(url).key_prefix("orders:");
    if std::env::var("REDIS_CLUSTER").as_deref() == Ok("true") {
        store = store.cluster();
    }
    let store = store.connect().await?;
    let idempotency = IdempotencyLayer::from_env(store)?
        .require_key(true)
        .tenant(TenantSource::jwt_sub());
    lambda_http::run(idempotency.layer(service_fn(create_order))).await
}
