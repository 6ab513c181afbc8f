//! A `lambda_http` handler on PostgreSQL whose order row commits in the same
//! transaction as its stored response (transactional completion): either
//! both are written or neither is.
//!
//! Environment: `IDEMPOTENCY_STORE_URL`, a `postgres://` URL (through RDS
//! Proxy in production, `sslmode=verify-full&sslrootcert=...` for its CA),
//! and `IDEMPOTENCY_CREATE_SCHEMA=1` to create the table at start instead of
//! at deploy time. The application's `orders (id text primary key,
//! total_cents bigint)` table is its own.

use lambda_http::{service_fn, Body, Error, Request, Response};
use lambda_idempotency::settings::Settings;
use lambda_idempotency::{
    store::postgres::{PgType, PgWrite},
    IdempotencyContext, IdempotencyLayer, PostgresStore,
};
use tower::Layer;

async fn create_order(req: Request) -> Result<Response<Body>, Error> {
    let ctx = IdempotencyContext::of(&req).ok_or("no idempotency key")?;
    let order_id = ctx.derived_key("order");
    // Deferred: run in the completion's transaction, after the fenced update
    // of the record, so a stale attempt commits none of it.
    ctx.defer_write(
        PgWrite::new("INSERT INTO orders (id, total_cents) VALUES ($1, $2)")
            .bind(order_id.clone(), PgType::TEXT)
            .bind(1250_i64, PgType::INT8),
    )?;
    Ok(Response::builder().status(201).body(Body::from(order_id))?)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // IDEMPOTENCY_STORE_URL and IDEMPOTENCY_CREATE_SCHEMA, read (and
    // checked) by the library's settings.
    let settings = Settings::from_env()?;
    let url = settings
        .store
        .url
        .ok_or("IDEMPOTENCY_STORE_URL is not set: give it a postgres:// URL")?;
    let store = PostgresStore::builder(&url).open()?;
    // The schema is never created silently.
    if settings.store.create_schema {
        store.migrate().await?;
    } else {
        store.check_schema().await?;
    }
    lambda_http::run(IdempotencyLayer::new(store).layer(service_fn(create_order))).await
}
