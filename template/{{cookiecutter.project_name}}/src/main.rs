//! The API function's entry point: `POST /items` behind the idempotency
//! middleware, its records in the DynamoDB table `IDEMPOTENCY_TABLE`.

use lambda_http::Error;

use {{crate_name}} as api;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config = api::Config::from_env()?;
    let aws = aws_config::load_from_env().await;
    let client = aws_sdk_dynamodb::Client::new(&aws);
    lambda_http::run(api::app(client, &config)).await
}
