//! The sweeper's entry point: on a schedule, resolves the keys whose
//! invocation crashed or timed out while it held them (found in the
//! idempotency table's stream).

use lambda_runtime::{service_fn, Error, LambdaEvent};

use {{crate_name}} as api;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = api::SweeperConfig::from_env()?;
    // The SDK's HTTPS client on rustls with ring, as the API function's.
    let aws = lambda_idempotency::init::aws_config().await;
    let sweeper = config
        .start(
            aws_sdk_dynamodb::Client::new(&aws),
            aws_sdk_dynamodbstreams::config::Builder::from(&aws),
        )
        .await?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<serde_json::Value>| {
        let sweeper = sweeper.clone();
        async move { api::sweep(&sweeper, event.context.deadline).await }
    }))
    .await
}
