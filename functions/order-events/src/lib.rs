//! `order-events`: an example event consumer made safe for at-least-once
//! delivery with `lambda-idempotency`.
//!
//! It takes `OrderPlaced` events either as SQS batches (partial batch
//! responses) or as direct asynchronous invocations, and "sends" one order
//! confirmation per event: it upserts a `notification#<id>` item in
//! `ORDERS_TABLE` whose `sent` attribute counts real sends. The key is the
//! producer's `event_id`, so a redelivered message, a duplicate message and the
//! same event sent by direct invoke all send once; a duplicate whose `order_id`
//! differs is a payload mismatch.
//!
//! Environment: `ORDERS_TABLE` (this function's own), and the library's
//! `IDEMPOTENCY_*` variables, read and checked by
//! `lambda_idempotency::settings` (docs/configuration.md lists them all):
//! `IDEMPOTENCY_TABLE`, or `IDEMPOTENCY_STORE_URL` and its companions for
//! the records in Redis, Valkey or PostgreSQL (docs/engines.md);
//! `IDEMPOTENCY_EXPIRES_AFTER_SECONDS` (how long an event's record lives,
//! default 86400): it must cover how long a message can be delivered again,
//! the queue's and the dead-letter queue's retention (the template sets all
//! three from `OrderEventsRetentionSeconds`); `IDEMPOTENCY_MAX_LEASE_SECONDS`,
//! `IDEMPOTENCY_WAIT_FOR_RESULT_MS` and `IDEMPOTENCY_DISABLED` as for every
//! `from_env`. With `IDEMPOTENCY_OFFLOAD_BUCKET`
//! set, outputs too large for the table are kept in that S3 bucket under
//! `IDEMPOTENCY_OFFLOAD_PREFIX` (default `order-events/`) and replayed from
//! there ([`S3Offload`]); unset, they complete with the too-large marker.
//! With `IDEMPOTENCY_METRICS_NAMESPACE` set, the idempotency metrics (claims,
//! replays, conflicts, mismatches, store errors) are printed as CloudWatch
//! EMF lines in that namespace with the dimension `Service=order-events`, as
//! `orders-api` prints its own with `Service=orders-api`; with
//! `IDEMPOTENCY_METRICS_STACK` set (the templates set the stack's name),
//! each line also carries `Stack=<value>`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use lambda_idempotency::metrics::Metrics;
use lambda_idempotency::settings::Settings;
use lambda_idempotency::{
    event::SqsBatch, store::offload::S3Offload, DynamoStore, IdempotencyConfig, IdempotencyContext,
    IdempotentFunction, Store,
};
use serde::{Deserialize, Serialize};

/// An order event as producers publish it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderEvent {
    /// Producer-assigned unique id: the idempotency key.
    pub event_id: String,
    /// `OrderPlaced`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The order.
    pub order_id: String,
    /// Who to confirm to.
    pub customer_id: String,
}

/// What handling one event produced (stored and replayed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirmation {
    /// Stable id of the notification, derived from the idempotency record.
    pub notification_id: String,
    /// The order confirmed.
    pub order_id: String,
    /// How many times the notification was really sent (1 unless a crash
    /// struck between sending and storing the outcome).
    pub sent: i64,
}

/// The consumer: tables and idempotency settings.
#[derive(Debug, Clone)]
pub struct Consumer {
    client: aws_sdk_dynamodb::Client,
    orders_table: String,
    function: IdempotentFunction,
}

/// The function's output: a batch response for SQS, a confirmation otherwise.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Output {
    /// For SQS: the records to redeliver.
    Batch(SqsBatchResponse),
    /// For a direct invocation.
    Confirmation(Confirmation),
}

impl Consumer {
    /// A consumer on these tables.
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        idempotency_table: &str,
        orders_table: &str,
    ) -> Self {
        let store = DynamoStore::builder(client.clone(), idempotency_table)
            .open()
            .expect("the default table layout is valid");
        Self::with_store(client, store, orders_table)
    }

    /// A consumer whose idempotency records live in `store` (an
    /// [`S3Offload`] around the table's store, say).
    pub fn with_store(
        client: aws_sdk_dynamodb::Client,
        store: impl Store + 'static,
        orders_table: &str,
    ) -> Self {
        Self::with_config(client, IdempotencyConfig::new(store), orders_table)
    }

    /// A consumer with the idempotency options of `config` (its store, the
    /// record life, leases, the wait, metrics: [`Settings::config`]).
    pub fn with_config(
        client: aws_sdk_dynamodb::Client,
        config: IdempotencyConfig,
        orders_table: &str,
    ) -> Self {
        let function = IdempotentFunction::with_config(config, "order-confirmation")
            .key_pointers(["/event_id"])
            .validate(["/order_id"]);
        Consumer {
            client,
            orders_table: orders_table.to_owned(),
            function,
        }
    }

    /// Records live `ttl` (the redelivery window of the events' queues).
    pub fn expires_after(mut self, ttl: std::time::Duration) -> Self {
        self.function = self.function.expires_after(ttl);
        self
    }

    /// Read the tables from `IDEMPOTENCY_TABLE` and `ORDERS_TABLE`, and the
    /// record life from `IDEMPOTENCY_EXPIRES_AFTER_SECONDS` when set.
    /// `IDEMPOTENCY_OFFLOAD_BUCKET` needs an S3 client:
    /// [`from_env_with_s3`](Self::from_env_with_s3).
    pub fn from_env(client: aws_sdk_dynamodb::Client) -> Result<Self, String> {
        Self::from_lookup(client, |name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env), and with `IDEMPOTENCY_OFFLOAD_BUCKET`
    /// set, outputs too large for the table kept in that bucket through `s3`.
    pub fn from_env_with_s3(
        client: aws_sdk_dynamodb::Client,
        s3: aws_sdk_s3::Client,
    ) -> Result<Self, String> {
        Self::from_lookup_with_s3(client, Some(s3), |name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) with the variables from `lookup`.
    pub fn from_lookup(
        client: aws_sdk_dynamodb::Client,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        Self::from_lookup_with_s3(client, None, lookup)
    }

    /// [`from_env_with_s3`](Self::from_env_with_s3) with the variables from
    /// `lookup`; `IDEMPOTENCY_OFFLOAD_BUCKET` without `s3` is refused.
    pub fn from_lookup_with_s3(
        client: aws_sdk_dynamodb::Client,
        s3: Option<aws_sdk_s3::Client>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        Self::from_lookup_with_store(client, s3, None, lookup)
    }

    /// [`from_lookup_with_s3`](Self::from_lookup_with_s3) with the records in
    /// `store` when given (the engine `IDEMPOTENCY_STORE_URL` names, opened
    /// by [`idempotency_engine::open`]; `IDEMPOTENCY_TABLE` is then
    /// not needed), in the table otherwise. The orders stay in DynamoDB.
    pub fn from_lookup_with_store(
        client: aws_sdk_dynamodb::Client,
        s3: Option<aws_sdk_s3::Client>,
        store: Option<std::sync::Arc<dyn Store>>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        // The IDEMPOTENCY_* variables are the library's, read and checked
        // there; ORDERS_TABLE is this function's own.
        let settings = Settings::from_lookup(&lookup).map_err(|e| e.to_string())?;
        let orders_table = lookup("ORDERS_TABLE")
            .filter(|v| !v.trim().is_empty())
            .ok_or("ORDERS_TABLE is not set: give it the DynamoDB table name")?;
        let store: std::sync::Arc<dyn Store> = match store {
            Some(store) => store,
            None => std::sync::Arc::new(
                DynamoStore::builder(client.clone(), settings.table().map_err(|e| e.to_string())?)
                    .open()
                    .map_err(|e| e.to_string())?,
            ),
        };
        let store: std::sync::Arc<dyn Store> = match &settings.offload {
            None => store,
            Some(offload) => {
                let s3 = s3.ok_or_else(|| {
                    format!(
                        "IDEMPOTENCY_OFFLOAD_BUCKET={:?} is set but no S3 client was given: \
                         build the consumer with from_env_with_s3",
                        offload.bucket
                    )
                })?;
                let prefix = offload.prefix.as_deref().unwrap_or("order-events/");
                std::sync::Arc::new(S3Offload::new(store, s3, &offload.bucket).key_prefix(prefix))
            }
        };
        let config = settings.config(store);
        let config = match &settings.metrics_namespace {
            None => config,
            Some(namespace) => {
                config.metrics(Metrics::new(namespace).dimension("Service", "order-events"))
            }
        };
        Ok(Self::with_config(client, config, &orders_table))
    }

    /// Print the idempotency metrics as CloudWatch EMF lines.
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.function = self.function.metrics(metrics);
        self
    }

    /// Handle one invocation: an SQS batch (has `Records`) or one event.
    pub async fn handle(
        &self,
        payload: serde_json::Value,
        context: &lambda_runtime::Context,
    ) -> Result<Output, lambda_runtime::Diagnostic> {
        if payload.get("Records").is_some() {
            let event: SqsEvent = serde_json::from_value(payload)
                .map_err(|e| format!("the payload has `Records` but is not an SQS event: {e}"))?;
            let mut batch = SqsBatch::new(self.function.clone()).key_body_pointer("/event_id");
            batch.register_context(context);
            let response = batch
                .process(event, |message, ctx| async move {
                    let body = message.body.unwrap_or_default();
                    let event: OrderEvent = serde_json::from_str(&body).map_err(|e| {
                        format!(
                            "message {:?} is not an order event: {e}",
                            message.message_id
                        )
                    })?;
                    self.confirm(&event, ctx).await
                })
                .await
                // A failed record without a messageId cannot be named: the
                // invocation fails so SQS delivers the whole batch again.
                .map_err(|e| lambda_runtime::Diagnostic {
                    error_type: "Idempotency.InvalidEvent".into(),
                    error_message: e.to_string(),
                })?;
            return Ok(Output::Batch(response));
        }
        let event: OrderEvent = serde_json::from_value(payload).map_err(|e| {
            format!("the payload is neither an SQS event nor an order event {{event_id, type, order_id, customer_id}}: {e}")
        })?;
        let confirmation = self
            .function
            .with_context(context)
            .call_with_context(event, |event, ctx| async move {
                self.confirm(&event, ctx).await
            })
            .await
            // The invocation fails with the error's own type as Lambda's
            // `errorType` ("Idempotency.InProgress", ...), so an in-progress
            // duplicate is retried later and shows as what it is.
            .map_err(lambda_runtime::Diagnostic::from)?;
        Ok(Output::Confirmation(confirmation))
    }

    /// "Send" the confirmation: count the send on a notification item whose id
    /// is derived from the idempotency record.
    async fn confirm(
        &self,
        event: &OrderEvent,
        ctx: Option<IdempotencyContext>,
    ) -> Result<Confirmation, String> {
        if event.kind != "OrderPlaced" {
            return Err(format!(
                "event type {:?} is not handled; only OrderPlaced",
                event.kind
            ));
        }
        let notification_id = match ctx {
            Some(ctx) => ctx.derived_key("confirmation"),
            None => format!("unkeyed-{}", event.event_id),
        };
        let output = self
            .client
            .update_item()
            .table_name(&self.orders_table)
            .key(
                "order_id",
                AttributeValue::S(format!("notification#{notification_id}")),
            )
            .update_expression("SET about_order = :o, customer_id = :c ADD sent :one")
            .expression_attribute_values(":o", AttributeValue::S(event.order_id.clone()))
            .expression_attribute_values(":c", AttributeValue::S(event.customer_id.clone()))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "sending the confirmation failed: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(e)
                )
            })?;
        let sent = output
            .attributes()
            .and_then(|a| a.get("sent"))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok(Confirmation {
            notification_id,
            order_id: event.order_id.clone(),
            sent,
        })
    }
}
