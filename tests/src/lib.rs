//! Test harness: DynamoDB Local clients, fresh tables, and SDK interceptors that
//! count requests or lose a response, so store behaviour is proven on the real
//! engine rather than on a mock of it.
//!
//! DynamoDB Local is started by `scripts/dynamodb-local.sh` (run by `make test`),
//! which exports `AWS_ENDPOINT_URL_DYNAMODB`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::ConfigBag;
use aws_sdk_dynamodb::config::{Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use lambda_idempotency::{schema, DynamoStore};

/// Counts HTTP requests sent to DynamoDB (every attempt, retries included).
#[derive(Debug, Clone, Default)]
pub struct RequestCounter(Arc<AtomicU64>);

impl RequestCounter {
    /// Requests sent so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Replaces the first `n` responses with HTTP 500 *after* DynamoDB processed
/// the request: the write happened, the client never saw it, the SDK retries.
/// This is exactly the lost-response case of DESIGN section 4, rule 3.
#[derive(Debug, Clone)]
pub struct LoseResponses(Arc<AtomicU64>);

impl LoseResponses {
    /// Lose the next `n` responses.
    pub fn new(n: u64) -> Self {
        LoseResponses(Arc::new(AtomicU64::new(n)))
    }

    /// Responses still to lose.
    pub fn remaining(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl Intercept for LoseResponses {
    fn name(&self) -> &'static str {
        "LoseResponses"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let lose = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if lose {
            let response = context.response_mut();
            *response.status_mut() = 500u16.try_into()?;
            *response.body_mut() = aws_smithy_types::body::SdkBody::from(
                r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"response lost by test"}"#,
            );
        }
        Ok(())
    }
}

/// The DynamoDB Local endpoint; panics with instructions when the harness is
/// not running (a missing engine must fail tests, not skip them).
pub fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL_DYNAMODB").unwrap_or_else(|_| {
        panic!(
            "AWS_ENDPOINT_URL_DYNAMODB is not set: these tests run against DynamoDB Local. \
             Run them with `make test` (or `scripts/dynamodb-local.sh cargo test`)."
        )
    })
}

/// An SDK config builder for DynamoDB Local with `interceptors` installed.
pub async fn client_with(interceptors: Vec<aws_sdk_dynamodb::config::SharedInterceptor>) -> Client {
    let endpoint = endpoint();
    let shared = aws_config::from_env()
        .region(aws_config::Region::new("us-east-1"))
        .load()
        .await;
    let mut builder = aws_sdk_dynamodb::config::Builder::from(&shared).endpoint_url(endpoint);
    for interceptor in interceptors {
        builder = builder.interceptor(interceptor);
    }
    Client::from_conf(builder.build())
}

/// A plain client for DynamoDB Local.
pub async fn client() -> Client {
    client_with(Vec::new()).await
}

/// A fresh, uniquely named idempotency table (same schema as template.yaml).
pub async fn create_table(client: &Client) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "idempotency-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    let attr = |name: &str, ty| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ty)
            .build()
            .expect("attribute definition")
    };
    let key = |name: &str, ty| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(ty)
            .build()
            .expect("key schema")
    };
    client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr(schema::ID, ScalarAttributeType::S))
        .attribute_definitions(attr(schema::SWEEP_SHARD, ScalarAttributeType::S))
        .attribute_definitions(attr(schema::SWEEP_AT, ScalarAttributeType::N))
        .key_schema(key(schema::ID, KeyType::Hash))
        .global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(schema::SWEEP_INDEX)
                .key_schema(key(schema::SWEEP_SHARD, KeyType::Hash))
                .key_schema(key(schema::SWEEP_AT, KeyType::Range))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::All)
                        .build(),
                )
                .build()
                .expect("index"),
        )
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "create table on DynamoDB Local: {}",
                aws_sdk_dynamodb::error::DisplayErrorContext(e)
            )
        });
    name
}

/// A [`DynamoStore`] on a fresh table, and a counter of the requests it sends.
pub async fn dynamo_store() -> (DynamoStore, RequestCounter) {
    let counter = RequestCounter::default();
    // The table is made by a plain client so only the store's requests count.
    let table = create_table(&client().await).await;
    let client = client_with(vec![aws_sdk_dynamodb::config::SharedInterceptor::new(
        counter.clone(),
    )])
    .await;
    (DynamoStore::new(client, table), counter)
}
