//! Lambda entry point of `orders-api`.

use std::sync::Arc;

use lambda_http::Error;
use lambda_idempotency::{init, DynamoStore, Store};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    // Every variable read once, here: a bad value stops the start in one
    // line naming it.
    let config =
        orders_api::Config::from_env().map_err(|e| format!("orders-api cannot start: {e}"))?;
    // The SDK's HTTPS client on rustls with ring (lambda_idempotency::init
    // says why), for DynamoDB and S3 alike.
    let aws = init::aws_config().await;
    let client = aws_sdk_dynamodb::Client::new(&aws);
    // Concurrent when the platform asks for it (AWS_LAMBDA_MAX_CONCURRENCY),
    // sequential otherwise: the idempotent service is Clone + Send.
    let s3 = aws_sdk_s3::Client::new(&aws);
    // IDEMPOTENCY_STORE_URL: the records in Redis, Valkey or PostgreSQL,
    // connected and checked now, so a bad URL fails the cold start.
    let store: Arc<dyn Store> = match idempotency_engine::open(&config.engine, &aws)
        .await
        .map_err(|e| format!("orders-api cannot start: {e}"))?
    {
        Some(store) => store.into_store(),
        None => Arc::new(
            DynamoStore::builder(client.clone(), config.idempotency_table.clone())
                .open()
                .map_err(|e| format!("orders-api cannot start: {e}"))?,
        ),
    };
    // IDEMPOTENCY_WARM_UP (default true): the store's connection opened
    // now, during init, so the first request does not pay for its TCP
    // connection and TLS handshake. On DynamoDB the connection is the
    // client's, which the orders share. A failure is logged and the
    // function starts: its first request opens the connection itself.
    init::warm_up(&*store, config.warm_up).await;
    let app = orders_api::app_with_store(client, store, s3, &config);
    lambda_http::run_concurrent(app).await
}
