//! An axum `Router` behind the idempotency middleware: every POST and PATCH
//! route with an `Idempotency-Key` runs once per key, tenant and route.
//!
//! Environment: `IDEMPOTENCY_TABLE` and the usual AWS variables.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use lambda_http::Error;
use lambda_idempotency::settings::Settings;
use lambda_idempotency::{DynamoStore, IdempotencyLayer, TenantSource};
use tower::Layer;

async fn create(body: String) -> (StatusCode, String) {
    (
        StatusCode::CREATED,
        format!("created from {} bytes", body.len()),
    )
}

async fn cancel(Path(id): Path<String>) -> String {
    format!("cancelled {id}")
}

async fn show(Path(id): Path<String>) -> String {
    format!("order {id}")
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // IDEMPOTENCY_TABLE, read (and checked) by the library's settings.
    let table = Settings::from_env()?.table()?.to_owned();
    let aws = aws_config::load_from_env().await;
    let store = DynamoStore::builder(aws_sdk_dynamodb::Client::new(&aws), table).open()?;
    let router = Router::new()
        .route("/orders", post(create))
        .route("/orders/{id}/cancel", post(cancel))
        .route("/orders/{id}", get(show)); // GET is not covered: passes through
    let app = IdempotencyLayer::from_env(store)?
        .tenant(TenantSource::jwt_sub())
        .layer(router);
    lambda_http::run(app).await
}
