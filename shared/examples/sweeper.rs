//! A scheduled sweeper: resolves records stuck in progress (an invocation
//! crashed or timed out and its client never retried) before its own
//! deadline, and prints what it did as an EMF metric line.
//!
//! Environment: `IDEMPOTENCY_TABLE` (a table with a stream) and the usual
//! AWS variables.

use std::time::Duration;

use lambda_idempotency::settings::Settings;
use lambda_idempotency::{
    store::now_ms,
    sweeper::{SweepPolicy, SweepSummary, Sweeper},
    DynamoStore,
};
use lambda_runtime::{service_fn, Error, LambdaEvent};

async fn sweep(
    sweeper: &Sweeper,
    event: LambdaEvent<serde_json::Value>,
) -> Result<SweepSummary, Error> {
    let summary = sweeper.sweep(Some(event.context.deadline)).await;
    println!("{}", summary.emf("sweeper", now_ms()));
    Ok(summary)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // IDEMPOTENCY_TABLE, read (and checked) by the library's settings.
    let table = Settings::from_env()?.table()?.to_owned();
    let aws = aws_config::load_from_env().await;
    // Stuck records are found in the table's stream (view type NEW_IMAGE):
    // the hot path writes nothing for the sweeper. The stream is read where
    // AWS_ENDPOINT_URL_DYNAMODB points when its own variable is unset.
    let streams =
        lambda_idempotency::store::dynamodb::streams_endpoint(|name| std::env::var(name).ok());
    let store = DynamoStore::builder(aws_sdk_dynamodb::Client::new(&aws), table)
        .with_stream_at(
            aws_sdk_dynamodbstreams::config::Builder::from(&aws),
            streams,
        )
        .open()?;
    let sweeper = Sweeper::new(store)
        .policy(SweepPolicy::Release) // the next retry runs again
        .grace(Duration::from_secs(60));
    lambda_runtime::run(service_fn(|event| sweep(&sweeper, event))).await
}
