//! Lambda entry point of `sweeper`.

use lambda_runtime::{service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = sweeper::Config::from_env().map_err(|e| format!("sweeper cannot start: {e}"))?;
    // The SDK's HTTPS client on rustls with ring (lambda_idempotency::init).
    let aws = lambda_idempotency::init::aws_config().await;
    // IDEMPOTENCY_STORE_URL: the records in Redis, Valkey or PostgreSQL,
    // connected and checked now, so a bad URL fails the cold start.
    let opened = idempotency_engine::open(&config.engine, &aws)
        .await
        .map_err(|e| format!("sweeper cannot start: {e}"))?;
    let sweeper = match opened {
        None => config
            .start(
                aws_sdk_dynamodb::Client::new(&aws),
                aws_sdk_dynamodbstreams::config::Builder::from(&aws),
            )
            .await
            .map_err(|e| format!("sweeper cannot start: {e}"))?,
        Some(store) => config.sweeper_on(store.into_store()),
    };
    lambda_runtime::run(service_fn(|event: LambdaEvent<serde_json::Value>| {
        let sweeper = sweeper.clone();
        async move { sweeper::handle(&sweeper, event).await }
    }))
    .await
}
