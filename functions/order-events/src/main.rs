//! Lambda entry point of `order-events`.

use lambda_runtime::{service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let aws = aws_config::load_from_env().await;
    let consumer = order_events::Consumer::from_env_with_s3(
        aws_sdk_dynamodb::Client::new(&aws),
        aws_sdk_s3::Client::new(&aws),
    )
    .map_err(|e| format!("order-events cannot start: {e}"))?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<serde_json::Value>| {
        let consumer = consumer.clone();
        async move { consumer.handle(event.payload, &event.context).await }
    }))
    .await
}
