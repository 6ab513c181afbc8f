//! Lambda entry point of `order-events`.

use lambda_runtime::{service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // The SDK's HTTPS client on rustls with ring (lambda_idempotency::init).
    let aws = lambda_idempotency::init::aws_config().await;
    let cannot_start = |e: String| format!("order-events cannot start: {e}");
    // IDEMPOTENCY_STORE_URL: the records in Redis, Valkey or PostgreSQL,
    // connected and checked now, so a bad URL fails the cold start.
    let settings =
        idempotency_engine::Settings::from_env().map_err(|e| cannot_start(e.to_string()))?;
    let store = idempotency_engine::open(&settings.store, &aws)
        .await
        .map_err(cannot_start)?;
    let consumer = order_events::Consumer::from_lookup_with_store(
        aws_sdk_dynamodb::Client::new(&aws),
        Some(aws_sdk_s3::Client::new(&aws)),
        // Every engine a URL opens sweeps too; the consumer needs its hot path.
        store.map(|s| s.into_store() as std::sync::Arc<dyn lambda_idempotency::Store>),
        |name| std::env::var(name).ok(),
    )
    .map_err(cannot_start)?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<serde_json::Value>| {
        let consumer = consumer.clone();
        async move { consumer.handle(event.payload, &event.context).await }
    }))
    .await
}
