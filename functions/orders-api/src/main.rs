//! Lambda entry point of `orders-api`.

use lambda_http::Error;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config =
        orders_api::Config::from_env().map_err(|e| format!("orders-api cannot start: {e}"))?;
    let aws = aws_config::load_from_env().await;
    let client = aws_sdk_dynamodb::Client::new(&aws);
    // Concurrent when the platform asks for it (AWS_LAMBDA_MAX_CONCURRENCY),
    // sequential otherwise: the idempotent service is Clone + Send.
    let s3 = aws_sdk_s3::Client::new(&aws);
    // IDEMPOTENCY_STORE_URL: the records in Redis, Valkey or PostgreSQL,
    // connected and checked now, so a bad URL fails the cold start.
    let app = match config
        .engine
        .open(&aws)
        .await
        .map_err(|e| format!("orders-api cannot start: {e}"))?
    {
        Some(store) => orders_api::app_with_store(client, store.into_store(), s3, &config),
        None => orders_api::app_with_s3(client, s3, &config),
    };
    lambda_http::run_concurrent(app).await
}
