//! An SQS consumer that handles each event once: a redelivered or duplicated
//! message replays the first run's output, and only failed or in-progress
//! records are reported back (`ReportBatchItemFailures`).
//!
//! Environment: `IDEMPOTENCY_TABLE` and the usual AWS variables.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_idempotency::settings::Settings;
use lambda_idempotency::{event::SqsBatch, DynamoStore, IdempotentFunction};
use lambda_runtime::{service_fn, Error, LambdaEvent};

async fn handle(batch: &SqsBatch, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
    let mut batch = batch.clone();
    batch.register_context(&event.context); // leases end at this deadline
    let response = batch
        .process(event.payload, |message, _ctx| async move {
            let body: serde_json::Value =
                serde_json::from_str(message.body.as_deref().unwrap_or(""))
                    .map_err(|e| format!("not JSON: {e}"))?;
            // ... send the confirmation for body["order_id"] ...
            Ok::<_, String>(body["order_id"].clone())
        })
        .await?; // a failed record without a messageId fails the whole batch
    Ok(response)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // IDEMPOTENCY_TABLE, read (and checked) by the library's settings.
    let table = Settings::from_env()?.table()?.to_owned();
    let aws = aws_config::load_from_env().await;
    let store = DynamoStore::builder(aws_sdk_dynamodb::Client::new(&aws), table).open()?;
    let function = IdempotentFunction::new(store, "send-confirmation").validate(["/order_id"]);
    let batch = SqsBatch::new(function).key_body_pointer("/event_id");
    lambda_runtime::run(service_fn(|event| handle(&batch, event))).await
}
