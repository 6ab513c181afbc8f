//! Test harness: DynamoDB Local clients, fresh tables, and SDK interceptors that
//! count requests or lose a response, so store behaviour is proven on the real
//! engine rather than on a mock of it.
//!
//! DynamoDB Local is started by `scripts/dynamodb-local.sh` (run by `make test`),
//! which exports `AWS_ENDPOINT_URL_DYNAMODB`.

pub mod capacity_proxy;
pub mod fault_proxy;
pub mod fault_store;
pub mod functions;
mod handlers;
pub mod iam_record;
pub mod runtime_api;
pub mod schedule;
pub mod streams_proxy;

pub use handlers::{crash_midway, echo_handler, noise, post, Handler};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::ConfigBag;
use aws_sdk_dynamodb::config::{Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, Projection, ProjectionType, Put, ScalarAttributeType, TransactWriteItem,
};
use aws_sdk_dynamodb::Client;
use lambda_idempotency::{store::DeferredWrites, DynamoStore};

/// Counts the HTTP requests an SDK client sends (every attempt, retries
/// included), and keeps each one's operation (the `x-amz-target` header,
/// empty for S3) and its JSON body (`null` when it is not JSON).
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    sent: Arc<AtomicU64>,
    requests: Arc<std::sync::Mutex<Vec<(String, serde_json::Value)>>>,
}

impl RequestCounter {
    /// Requests sent so far.
    pub fn get(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// The requests sent so far: operation and JSON body.
    pub fn requests(&self) -> Vec<(String, serde_json::Value)> {
        self.requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request();
        let operation = request
            .headers()
            .get("x-amz-target")
            .unwrap_or_default()
            .to_owned();
        let body = request
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(serde_json::Value::Null);
        self.requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push((operation, body));
        self.sent.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Fails, before it is sent, each of the next `n` requests whose body holds
/// `needle` (an error the SDK does not retry): one write of a function's
/// own, aimed at by what it writes, fails as a throttled or denied write
/// would.
#[derive(Debug, Clone)]
pub struct FailRequests {
    needle: &'static str,
    remaining: Arc<AtomicU64>,
}

impl FailRequests {
    /// Fail nothing yet; [`arm`](Self::arm) aims it.
    pub fn new(needle: &'static str) -> Self {
        FailRequests {
            needle,
            remaining: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Fail the next `n` requests holding the needle.
    pub fn arm(&self, n: u64) {
        self.remaining.store(n, Ordering::SeqCst);
    }
}

impl Intercept for FailRequests {
    fn name(&self) -> &'static str {
        "FailRequests"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let aimed = context.request().body().bytes().is_some_and(|body| {
            body.windows(self.needle.len())
                .any(|w| w == self.needle.as_bytes())
        });
        if aimed
            && self
                .remaining
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Err(format!("injected failure of a request holding `{}`", self.needle).into());
        }
        Ok(())
    }
}

/// Replaces the first `n` responses with HTTP 500 *after* DynamoDB processed
/// the request: the write happened, the client never saw it, the SDK retries.
/// This is exactly the lost-response case of docs/DESIGN.md section 4, rule 3.
#[derive(Debug, Clone)]
pub struct LoseResponses(Arc<AtomicU64>);

impl LoseResponses {
    /// Lose the next `n` responses.
    pub fn new(n: u64) -> Self {
        LoseResponses(Arc::new(AtomicU64::new(n)))
    }

    /// Lose the next `n` responses from now on (for a fault aimed at one
    /// operation after others went through).
    pub fn arm(&self, n: u64) {
        self.0.store(n, Ordering::SeqCst);
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

/// The proxies' front door: listen on a free loopback port and serve each
/// connection accepted there with `serve(state.clone(), connection)`, in a
/// task of its own, while the runtime runs (an error ends that connection
/// alone). Its address.
pub(crate) async fn serve_on_loopback<S, F, Fut>(
    state: S,
    serve: F,
) -> std::io::Result<std::net::SocketAddr>
where
    S: Clone + Send + 'static,
    F: Fn(S, tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(serve(state.clone(), client));
        }
    });
    Ok(addr)
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

/// A client for another endpoint than the harness's (a closed or a silent
/// port, to see how the store fails), making at most `max_attempts` attempts
/// per call.
pub async fn client_for(endpoint: String, max_attempts: u32) -> Client {
    let shared = aws_config::from_env()
        .region(aws_config::Region::new("us-east-1"))
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(max_attempts))
        .load()
        .await;
    let config = aws_sdk_dynamodb::config::Builder::from(&shared)
        .endpoint_url(endpoint)
        .build();
    Client::from_conf(config)
}

/// A DynamoDB Streams client for DynamoDB Local (it serves streams on the
/// same port).
pub async fn streams_client() -> aws_sdk_dynamodbstreams::Client {
    let config = streams_config().await.endpoint_url(endpoint()).build();
    aws_sdk_dynamodbstreams::Client::from_conf(config)
}

/// A DynamoDB Streams configuration as a function builds it from its
/// environment (region us-east-1), with no endpoint chosen yet.
pub async fn streams_config() -> aws_sdk_dynamodbstreams::config::Builder {
    let shared = aws_config::from_env()
        .region(aws_config::Region::new("us-east-1"))
        .load()
        .await;
    aws_sdk_dynamodbstreams::config::Builder::from(&shared)
}

/// A plain client for DynamoDB Local.
pub async fn client() -> Client {
    client_with(Vec::new()).await
}

/// Path of the SAM template, the one source of the tables' schema.
pub fn template_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml")
}

/// A `AWS::DynamoDB::Table` resource of the template, as far as DynamoDB Local needs it.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TableDefinition {
    /// `AttributeDefinitions`.
    pub attribute_definitions: Vec<AttrDef>,
    /// `KeySchema`.
    pub key_schema: Vec<KeyDef>,
    /// `BillingMode` (`PAY_PER_REQUEST` = on-demand).
    #[serde(default)]
    pub billing_mode: Option<String>,
    /// `GlobalSecondaryIndexes`.
    #[serde(default)]
    pub global_secondary_indexes: Vec<IndexDef>,
    /// `TimeToLiveSpecification`.
    #[serde(default)]
    pub time_to_live_specification: Option<TtlDef>,
    /// `StreamSpecification`.
    #[serde(default)]
    pub stream_specification: Option<StreamDef>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
/// Part of [`TableDefinition`].
pub struct StreamDef {
    /// `stream_view_type`.
    pub stream_view_type: String,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
/// Part of [`TableDefinition`].
pub struct AttrDef {
    /// `attribute_name`.
    pub attribute_name: String,
    /// `attribute_type`.
    pub attribute_type: String,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
/// Part of [`TableDefinition`].
pub struct KeyDef {
    /// `attribute_name`.
    pub attribute_name: String,
    /// `key_type`.
    pub key_type: String,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
/// Part of [`TableDefinition`].
pub struct IndexDef {
    /// `index_name`.
    pub index_name: String,
    /// `key_schema`.
    pub key_schema: Vec<KeyDef>,
    /// `projection`.
    pub projection: ProjectionDef,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
/// Part of [`TableDefinition`].
pub struct ProjectionDef {
    /// `projection_type`.
    pub projection_type: String,
    #[serde(default)]
    /// `non_key_attributes`.
    pub non_key_attributes: Vec<String>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
/// Part of [`TableDefinition`].
pub struct TtlDef {
    /// `attribute_name`.
    pub attribute_name: String,
    /// `enabled`.
    pub enabled: bool,
}

/// The table resource `logical_id` of template.yaml.
pub fn table_definition(logical_id: &str) -> Result<TableDefinition, String> {
    let path = template_path();
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let template: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).map_err(|e| format!("parse {}: {e}", path.display()))?;
    let resource = template
        .get("Resources")
        .and_then(|r| r.get(logical_id))
        .ok_or_else(|| format!("template.yaml has no resource {logical_id}"))?;
    let kind = resource.get("Type").and_then(|t| t.as_str());
    if kind != Some("AWS::DynamoDB::Table") {
        return Err(format!(
            "{logical_id} is a {kind:?}, not an AWS::DynamoDB::Table"
        ));
    }
    let properties = resource
        .get("Properties")
        .cloned()
        .ok_or_else(|| format!("{logical_id} has no Properties"))?;
    serde_yaml_ng::from_value(properties).map_err(|e| format!("{logical_id}: {e}"))
}

/// Create table `name` on DynamoDB Local from the template resource `logical_id`
/// (keys, attribute types, indexes, TTL), so tests run on the deployed schema.
pub async fn create_table_from_template(
    client: &Client,
    logical_id: &str,
    name: &str,
) -> Result<(), String> {
    create_table_from_definition(client, table_definition(logical_id)?, name).await
}

/// Create table `name` on DynamoDB Local as `def` describes it (keys,
/// attribute types, indexes, TTL).
pub async fn create_table_from_definition(
    client: &Client,
    def: TableDefinition,
    name: &str,
) -> Result<(), String> {
    let key = |k: &KeyDef| {
        KeySchemaElement::builder()
            .attribute_name(&k.attribute_name)
            .key_type(KeyType::from(k.key_type.as_str()))
            .build()
            .map_err(|e| e.to_string())
    };
    let mut request = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::from(
            def.billing_mode.as_deref().unwrap_or("PROVISIONED"),
        ));
    for a in &def.attribute_definitions {
        request = request.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(&a.attribute_name)
                .attribute_type(ScalarAttributeType::from(a.attribute_type.as_str()))
                .build()
                .map_err(|e| e.to_string())?,
        );
    }
    for k in &def.key_schema {
        request = request.key_schema(key(k)?);
    }
    for index in &def.global_secondary_indexes {
        let mut projection = Projection::builder().projection_type(ProjectionType::from(
            index.projection.projection_type.as_str(),
        ));
        for attribute in &index.projection.non_key_attributes {
            projection = projection.non_key_attributes(attribute);
        }
        let mut gsi = GlobalSecondaryIndex::builder()
            .index_name(&index.index_name)
            .projection(projection.build());
        for k in &index.key_schema {
            gsi = gsi.key_schema(key(k)?);
        }
        request = request.global_secondary_indexes(gsi.build().map_err(|e| e.to_string())?);
    }
    if let Some(stream) = &def.stream_specification {
        request = request.stream_specification(
            aws_sdk_dynamodb::types::StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(aws_sdk_dynamodb::types::StreamViewType::from(
                    stream.stream_view_type.as_str(),
                ))
                .build()
                .map_err(|e| e.to_string())?,
        );
    }
    request.send().await.map_err(|e| {
        format!(
            "create table {name}: {}",
            aws_sdk_dynamodb::error::DisplayErrorContext(e)
        )
    })?;
    if let Some(ttl) = def.time_to_live_specification.filter(|t| t.enabled) {
        client
            .update_time_to_live()
            .table_name(name)
            .time_to_live_specification(
                aws_sdk_dynamodb::types::TimeToLiveSpecification::builder()
                    .attribute_name(ttl.attribute_name)
                    .enabled(true)
                    .build()
                    .map_err(|e| e.to_string())?,
            )
            .send()
            .await
            .map_err(|e| {
                format!(
                    "enable TTL on {name}: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(e)
                )
            })?;
    }
    Ok(())
}

/// A unique table name for this test process.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// A fresh idempotency table, made from template.yaml's `IdempotencyTable`.
pub async fn create_table(client: &Client) -> String {
    let name = unique_name("idempotency");
    create_table_from_template(client, "IdempotencyTable", &name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    name
}

/// A fresh table of the application's orders, made from template.yaml's
/// `OrdersTable` (keyed by `order_id`); its name.
pub async fn orders_table(client: &Client) -> String {
    let name = unique_name("orders");
    create_table_from_template(client, "OrdersTable", &name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    name
}

/// An item of DynamoDB table `table`, the attributes `key` names as its key,
/// read consistently (what a write before it left); `None` when there is
/// none.
pub async fn consistent_item<K: Into<String>>(
    client: &Client,
    table: &str,
    key: impl IntoIterator<Item = (K, AttributeValue)>,
) -> Option<std::collections::HashMap<String, AttributeValue>> {
    client
        .get_item()
        .table_name(table)
        .set_key(Some(key.into_iter().map(|(k, v)| (k.into(), v)).collect()))
        .consistent_read(true)
        .send()
        .await
        .expect("DynamoDB Local answers a GetItem")
        .item
}

/// Every item of DynamoDB table `table` through `client` (a consistent
/// scan, all pages).
pub async fn scan_all(
    client: &Client,
    table: &str,
) -> Result<Vec<std::collections::HashMap<String, AttributeValue>>, String> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "scan {table}: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(e)
                )
            })?;
        items.extend(page.items().iter().cloned());
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return Ok(items);
        }
    }
}

/// The write that creates order `id` in the orders table `table`, for a
/// transactional completion: its condition cancels the transaction when the
/// order exists already.
pub fn put_new_order(table: &str, id: &str) -> TransactWriteItem {
    let put = Put::builder()
        .table_name(table)
        .item("order_id", AttributeValue::S(id.into()))
        .condition_expression("attribute_not_exists(order_id)")
        .build()
        .expect("a put with a table and an item");
    TransactWriteItem::builder().put(put).build()
}

/// `write` alone, to hand to a completion.
pub fn one_write<W: std::any::Any + Send + Sync>(write: W) -> DeferredWrites {
    let mut writes = DeferredWrites::new();
    writes.push(write);
    writes
}

/// The keys, index and TTL of a table made for another application (a
/// single-table design) that adopts the idempotency records with a
/// `TableLayout`: see [`create_custom_table`].
#[derive(Debug, Clone)]
pub struct CustomTable<'a> {
    /// Partition key attribute (S).
    pub partition: &'a str,
    /// Sort key attribute (S), if any.
    pub sort: Option<&'a str>,
    /// A global secondary index: its name, its partition (S) and sort (N)
    /// keys, and the other attributes it projects.
    pub index: Option<(&'a str, &'a str, &'a str, &'a [&'a str])>,
    /// The TTL attribute.
    pub ttl: &'a str,
}

/// Create a fresh table laid out as `table` says, with a stream (view type
/// `NEW_IMAGE`), on demand; its name.
pub async fn create_custom_table(client: &Client, table: CustomTable<'_>) -> String {
    let string = |name: &str| AttrDef {
        attribute_name: name.to_owned(),
        attribute_type: "S".to_owned(),
    };
    let key = |name: &str, kind: &str| KeyDef {
        attribute_name: name.to_owned(),
        key_type: kind.to_owned(),
    };
    let mut attribute_definitions = vec![string(table.partition)];
    let mut key_schema = vec![key(table.partition, "HASH")];
    if let Some(sort) = table.sort {
        attribute_definitions.push(string(sort));
        key_schema.push(key(sort, "RANGE"));
    }
    let mut global_secondary_indexes = Vec::new();
    if let Some((name, shard, at, projected)) = table.index {
        attribute_definitions.push(string(shard));
        attribute_definitions.push(AttrDef {
            attribute_name: at.to_owned(),
            attribute_type: "N".to_owned(),
        });
        global_secondary_indexes.push(IndexDef {
            index_name: name.to_owned(),
            key_schema: vec![key(shard, "HASH"), key(at, "RANGE")],
            projection: ProjectionDef {
                projection_type: "INCLUDE".to_owned(),
                non_key_attributes: projected.iter().map(|a| (*a).to_owned()).collect(),
            },
        });
    }
    let definition = TableDefinition {
        attribute_definitions,
        key_schema,
        billing_mode: Some("PAY_PER_REQUEST".to_owned()),
        global_secondary_indexes,
        time_to_live_specification: Some(TtlDef {
            attribute_name: table.ttl.to_owned(),
            enabled: true,
        }),
        stream_specification: Some(StreamDef {
            stream_view_type: "NEW_IMAGE".to_owned(),
        }),
    };
    let name = unique_name("single-table");
    create_table_from_definition(client, definition, &name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
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
    (DynamoStore::builder(client, table).open().unwrap(), counter)
}

/// Options of a store on `store`'s table, through its client (request
/// counter included), with its layout: for a test that sets up discovery
/// or limits on a store the harness made. Stream and sweep index are not
/// carried over (stores of the harness have neither).
pub fn dynamo_builder_like(
    store: &DynamoStore,
) -> lambda_idempotency::store::dynamodb::DynamoStoreBuilder {
    DynamoStore::builder(store.client().clone(), store.table()).with_layout(store.layout().clone())
}

/// The Redis server of the harness; panics with instructions when it is not
/// running (a missing engine must fail tests, not skip them).
pub fn redis_url() -> String {
    std::env::var("IDEMPOTENCY_TEST_REDIS_URL").unwrap_or_else(|_| {
        panic!(
            "IDEMPOTENCY_TEST_REDIS_URL is not set: these tests run against a Redis server. \
             Run them with `make test` (or `scripts/redis-local.sh cargo test`)."
        )
    })
}

/// The URL of the test database `scripts/postgres-local.sh` started (run by
/// `make test`).
pub fn postgres_url() -> String {
    std::env::var("IDEMPOTENCY_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "IDEMPOTENCY_TEST_POSTGRES_URL is not set: run the tests through \
             scripts/postgres-local.sh (make test does)"
        )
    })
}

/// A key prefix no other test uses, so every test has a store of its own on
/// the one server.
pub fn unique_redis_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "t{}-{nanos}-{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// A connected Redis store with a key prefix of its own on the harness's
/// server; its `round_trips()` count only its own operations.
pub async fn redis_store() -> lambda_idempotency::RedisStore {
    redis_store_at(redis_url()).await
}

/// [`redis_store`] through `url`: the harness's server reached another way
/// (TLS, RESP3, a proxy, a user of its own).
pub async fn redis_store_at(url: impl Into<String>) -> lambda_idempotency::RedisStore {
    lambda_idempotency::RedisStore::builder(url)
        .key_prefix(unique_redis_prefix())
        .connect()
        .await
        .expect("the harness's Redis server answers")
}

/// A connected store with a key prefix of its own on the harness's Redis
/// Cluster (three primaries).
pub async fn redis_cluster_store() -> lambda_idempotency::RedisStore {
    let url = std::env::var("IDEMPOTENCY_TEST_REDIS_CLUSTER_URL").unwrap_or_else(|_| {
        panic!(
            "IDEMPOTENCY_TEST_REDIS_CLUSTER_URL is not set: these tests run against a Redis \
             Cluster. Run them with `make test` (or `scripts/redis-local.sh cargo test`)."
        )
    });
    lambda_idempotency::RedisStore::builder(url)
        .cluster()
        .key_prefix(unique_redis_prefix())
        .connect()
        .await
        .expect("the harness's Redis Cluster answers")
}

/// A [`PostgresStore`](lambda_idempotency::PostgresStore) on a fresh table
/// in a schema of its own (so tests run in parallel on one database), made
/// by `migrate`.
pub async fn postgres_store() -> lambda_idempotency::PostgresStore {
    postgres_store_at(&postgres_url()).await
}

/// The URL of the same database through PgBouncer in transaction pooling
/// mode (RDS Proxy's way of pooling), started by `scripts/postgres-local.sh`.
pub fn postgres_pooler_url() -> String {
    std::env::var("IDEMPOTENCY_TEST_POSTGRES_POOLER_URL").unwrap_or_else(|_| {
        panic!(
            "IDEMPOTENCY_TEST_POSTGRES_POOLER_URL is not set: run the tests through \
             scripts/postgres-local.sh (make test does)"
        )
    })
}

/// [`postgres_store`] through `url` (the server, or the pooler).
pub async fn postgres_store_at(url: &str) -> lambda_idempotency::PostgresStore {
    let schema = unique_name("t").replace('-', "_");
    let store = lambda_idempotency::PostgresStore::builder(url)
        .with_schema(&schema)
        .max_connections(4)
        .open()
        .unwrap_or_else(|e| panic!("{e}"));
    store.migrate().await.unwrap_or_else(|e| panic!("{e}"));
    store
}

/// A new, empty database on the harness's PostgreSQL server, and its URL.
pub async fn postgres_fresh_database() -> String {
    let url = postgres_url();
    let name = unique_name("fresh").replace('-', "_");
    let admin = lambda_idempotency::PostgresStore::builder(&url)
        .open()
        .unwrap_or_else(|e| panic!("{e}"));
    admin
        .pool()
        .get()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (base, query) = url.split_once('?').unwrap_or((&url, ""));
    let server = &base[..base.rfind('/').unwrap_or(base.len())];
    format!("{server}/{name}?{query}")
}

/// A claim of record `id` by `owner` (fingerprint `fp`), its lease ending
/// `lease_ms` from now, its record kept an hour: the claim every suite's
/// setup makes.
pub fn claim_request(
    id: &str,
    owner: &str,
    lease_ms: u64,
) -> lambda_idempotency::store::ClaimRequest {
    let now = lambda_idempotency::store::now_ms();
    lambda_idempotency::store::ClaimRequest {
        record_id: id.into(),
        fingerprint: "fp".into(),
        owner: owner.into(),
        now_ms: now,
        lease_expires_at_ms: now + lease_ms,
        expires_at_s: now / 1000 + 3600,
        origin: None,
    }
}
