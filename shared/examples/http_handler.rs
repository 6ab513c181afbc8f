//! A `lambda_http` handler made safe to retry: `POST /orders` with an
//! `Idempotency-Key` runs once per key and tenant; retries get the stored
//! response with `Idempotent-Replayed: true`.
//!
//! Environment: `IDEMPOTENCY_TABLE` (the table `template.yaml` creates) and
//! the usual AWS variables. `IDEMPOTENCY_DISABLED=true` switches the
//! middleware off for local tests (`from_env`).

use lambda_http::{service_fn, Body, Error, Request, Response};
use lambda_idempotency::settings::Settings;
use lambda_idempotency::{DynamoStore, IdempotencyContext, IdempotencyLayer, TenantSource};
use tower::Layer;

async fn create_order(req: Request) -> Result<Response<Body>, Error> {
    // The same on every attempt of this request: the order id, and the key
    // a payment provider deduplicates the charge with.
    let (order_id, charge_key) = match IdempotencyContext::of(&req) {
        Some(ctx) => (ctx.derived_key("order"), ctx.derived_key("charge")),
        None => {
            return Ok(Response::builder()
                .status(400)
                .body("no idempotency key".into())?)
        }
    };
    // ... charge with `charge_key`, write the order ...
    let body = serde_json::json!({ "order_id": order_id, "charge_key": charge_key });
    Ok(Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))?)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // IDEMPOTENCY_TABLE, read (and checked) by the library's settings.
    let table = Settings::from_env()?.table()?.to_owned();
    let aws = aws_config::load_from_env().await;
    let store = DynamoStore::builder(aws_sdk_dynamodb::Client::new(&aws), table).open()?;
    let idempotency = IdempotencyLayer::from_env(store)?
        .require_key(true)
        .tenant(TenantSource::jwt_sub());
    lambda_http::run(idempotency.layer(service_fn(create_order))).await
}
