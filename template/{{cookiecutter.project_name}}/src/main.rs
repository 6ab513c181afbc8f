//! The API function's entry point: `POST /items` behind the idempotency
//! middleware, its records in the DynamoDB table `IDEMPOTENCY_TABLE`.

use lambda_http::Error;
use lambda_idempotency::init;

use {{crate_name}} as api;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config = api::Config::from_env()?;
    // The SDK's configuration with its HTTPS client on rustls with ring: a
    // faster first connection than the SDK's default (`init` says why).
    let aws = init::aws_config().await;
    let client = aws_sdk_dynamodb::Client::new(&aws);
    let store = api::store(client, &config)?;
    // IDEMPOTENCY_WARM_UP (default true): the connection opened now, during
    // init, so the first request does not pay for it. A failure is logged
    // and the function starts anyway.
    init::warm_up(&store, config.settings.warm_up).await;
    lambda_http::run(api::app(store, &config)).await
}
