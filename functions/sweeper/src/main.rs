//! Lambda entry point of `sweeper`.

use lambda_idempotency::store::UrlStore;
use lambda_runtime::{service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = sweeper::Config::from_env().map_err(|e| format!("sweeper cannot start: {e}"))?;
    let aws = aws_config::load_from_env().await;
    // IDEMPOTENCY_STORE_URL: the records in Redis, Valkey or PostgreSQL,
    // connected and checked now, so a bad URL fails the cold start.
    let opened = config
        .engine
        .open(&aws)
        .await
        .map_err(|e| format!("sweeper cannot start: {e}"))?;
    let (sweeper, postgres) = match opened {
        None => (
            config
                .start(
                    aws_sdk_dynamodb::Client::new(&aws),
                    aws_sdk_dynamodbstreams::config::Builder::from(&aws),
                )
                .await
                .map_err(|e| format!("sweeper cannot start: {e}"))?,
            None,
        ),
        Some(UrlStore::Postgres(store)) => (config.sweeper_on(store.clone()), Some(store)),
        Some(other) => (config.sweeper_on(other.into_store()), None),
    };
    lambda_runtime::run(service_fn(|event: LambdaEvent<serde_json::Value>| {
        let sweeper = sweeper.clone();
        let postgres = postgres.clone();
        async move {
            let deadline = event.context.deadline;
            let summary = sweeper::handle(&sweeper, event).await?;
            if let Some(store) = &postgres {
                let deleted = sweeper::delete_expired(store, deadline).await?;
                tracing::info!(deleted, "expired idempotency rows deleted");
            }
            Ok::<_, Error>(summary)
        }
    }))
    .await
}
