//! The `http_handler` example with its records in Redis or Valkey
//! (ElastiCache, MemoryDB, Valkey): the same contract, one script per claim
//! and one per completion.
//!
//! Environment, as the example functions read it: `IDEMPOTENCY_STORE_URL`
//! (`redis://` or `rediss://` for TLS, credentials and database number as
//! written) and `IDEMPOTENCY_REDIS_CLUSTER=true` for a cluster (cluster mode
//! enabled, ElastiCache Serverless). The function fails at start, naming
//! the server, when it cannot reach it.

use lambda_http::http::StatusCode;
use lambda_http::{service_fn, Body, Error, IntoResponse, Request, Response};
use lambda_idempotency::settings::{Settings, StoreSettings};
use lambda_idempotency::{IdempotencyContext, IdempotencyLayer, RedisStore, TenantSource};
use tower::Layer;

async fn create_order(req: Request) -> Result<Response<Body>, Error> {
    let charge_key = IdempotencyContext::of(&req).map(|ctx| ctx.derived_key("charge"));
    // ... charge with `charge_key`, write the order ...
    let created = serde_json::json!({ "charge_key": charge_key });
    // A JSON body: `content-type: application/json`.
    Ok((StatusCode::CREATED, created).into_response().await)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // The library's settings read and check every IDEMPOTENCY_* variable.
    let store = match Settings::from_env()?.store {
        StoreSettings {
            url: Some(url),
            redis_cluster,
            ..
        } => {
            let builder = RedisStore::builder(url).key_prefix("orders:");
            if redis_cluster {
                builder.cluster()
            } else {
                builder
            }
        }
        _ => return Err("IDEMPOTENCY_STORE_URL is not set: give it a redis:// URL".into()),
    };
    let store = store.connect().await?;
    let idempotency = IdempotencyLayer::from_env(store)?
        .require_key(true)
        .tenant(TenantSource::jwt_sub());
    lambda_http::run(idempotency.layer(service_fn(create_order))).await
}
