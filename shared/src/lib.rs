//! Idempotent AWS Lambda handlers in Rust.
//!
//! Lambda, API Gateway, SQS and every HTTP client retry. `lambda-idempotency`
//! makes those retries safe: each idempotency key is claimed with one DynamoDB
//! conditional write, the handler runs only for the claim's winner, its outcome
//! is stored and replayed to every retry, and a fencing token (`attempt`) stops
//! a stale invocation from overwriting a newer one.
//!
//! # Quickstart
//!
//! ```no_run
//! use lambda_http::{service_fn, Body, Error, Request, Response};
//! use lambda_idempotency::{DynamoStore, IdempotencyContext, IdempotencyLayer, TenantSource};
//! use tower::Layer;
//!
//! async fn create_order(req: Request) -> Result<Response<Body>, Error> {
//!     // Stable across retries of this key: pass it to your payment provider.
//!     let charge_key = IdempotencyContext::of(&req).map(|c| c.derived_key("charge"));
//!     Ok(Response::builder().status(201).body(Body::from(format!("{charge_key:?}")))?)
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Error> {
//!     let aws = aws_config::load_from_env().await;
//!     let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&aws), "idempotency");
//!     let layer = IdempotencyLayer::new(store).require_key(true).tenant(TenantSource::jwt_sub());
//!     lambda_http::run(layer.layer(service_fn(create_order))).await
//! }
//! ```
//!
//! # What a client sees
//!
//! The first request with a key runs the handler; a retry with the same key and
//! the same request gets the stored status, headers and body back with
//! `Idempotent-Replayed: true`; a retry while the first is still running gets a
//! `409` with `Retry-After`; the same key with a different request gets a
//! `422`; a request without a tenant where the tenant source needs one gets a
//! `401`; and if DynamoDB cannot be reached the handler does not run and the
//! client gets a `503` (fail closed). See [`IdempotencyLayer`] for the full
//! table, [`TenantSource`] and [`Fingerprinter`] for what makes two requests
//! the same, and [`problem`] for the problem documents. The design behind it
//! all is `docs/DESIGN.md` in the repository.
//!
//! # Where things happen
//!
//! | concept | the types | file (under `shared/src/`) |
//! |---|---|---|
//! | reading the key header | [`IdempotencyKey`] | `key.rs` |
//! | is a retry the same request? | [`Fingerprinter`] | `fingerprint.rs` |
//! | tenants and record ids | [`TenantSource`], [`RecordScope`] | `scope.rs` |
//! | the record and its states | [`Record`], [`StoredResponse`], [`Checkpoint`] | `record.rs` |
//! | how a claim is made and answered | (internal, shared by the middleware and the event wrappers) | `claim.rs` |
//! | claim, complete, release, list and resolve stuck records | [`Store`], [`DynamoStore`], [`MemoryStore`] | `store/` |
//! | adopting an existing table: attribute names, composite keys | [`TableLayout`], [`KeyValue`] | `store/dynamodb/layout.rs` |
//! | finding stuck records in the table's stream (feature `streams`) | `DynamoStore::with_stream`, [`Settlement`] | `store/dynamodb/stream.rs` |
//! | options both paths share (store, expiry, leases, cache, metrics, off switch) | [`IdempotencyConfig`] | `config.rs` |
//! | the middleware, replay | [`IdempotencyLayer`], [`Idempotency`] | `http/` |
//! | replay without a request | [`IdempotencyLayer::local_cache`] | `cache.rs` |
//! | what the handler sees | [`IdempotencyContext`] | `context.rs` |
//! | async functions, typed events, SQS batches (feature `sqs`), Kinesis and DynamoDB Streams batches (features `kinesis`, `dynamodb-stream-events`) | [`IdempotentFunction`], [`IdempotentEventLayer`] | `event/` |
//! | stuck in-progress records (feature `sweeper`) | `Sweeper` | `sweep.rs` |
//! | responses over the item limit in S3 (feature `s3-offload`) | `S3Offload` | `store/offload.rs` |
//! | CloudWatch EMF metrics | [`metrics`] | `metrics.rs` |
//! | errors | [`Error`], [`EventError`] | `error.rs` |
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `dynamodb` (default) | [`DynamoStore`], [`schema`], [`TableLayout`] (adopting an existing table), transactional completion |
//! | `sqs` | `SqsBatch`: SQS batches with partial batch responses |
//! | `kinesis` | `KinesisBatch`: Kinesis Data Streams batches, in shard order, with partial batch responses |
//! | `dynamodb-stream-events` | `DynamoDbStreamBatch`: DynamoDB Streams batches (a table's changes as Lambda events), in shard order, with partial batch responses |
//! | `sweeper` | `Sweeper`: resolves records stuck in progress |
//! | `postgres` | `PostgresStore`, `PgWrite`, `POSTGRES_SCHEMA`: records in PostgreSQL (through RDS Proxy too), transactional completion with the handler's own SQL |
//! | `streams` | `DynamoStore::with_stream`: stuck records found in the table's stream, nothing written for them on the hot path |
//! | `s3-offload` | `S3Offload`: responses over the store's item limit kept in S3 and replayed byte for byte (any store) |
//! | `redis` | `RedisStore`: records in Redis or Valkey (TLS and AUTH through the URL) |
//!
//! # Testing your handler
//!
//! [`MemoryStore`] has the same semantics as [`DynamoStore`] and counts its
//! requests, so handler unit tests need no DynamoDB.

#![forbid(unsafe_code)]
#![deny(missing_docs, unreachable_pub)]

mod cache;
mod claim;
mod clock;
mod config;
mod context;
mod error;
mod event;
mod fingerprint;
mod hash;
mod http;
mod key;
pub mod metrics;
pub mod problem;
mod record;
mod scope;
mod store;
#[cfg(feature = "sweeper")]
mod sweep;

pub use crate::cache::DEFAULT_MAX_BYTES as DEFAULT_LOCAL_CACHE_BYTES;
pub use crate::config::IdempotencyConfig;
pub use crate::context::{IdempotencyContext, MAX_DEFERRED_WRITES};
pub use crate::error::{Error, ErrorKind};
#[cfg(feature = "dynamodb-stream-events")]
pub use crate::event::DynamoDbStreamBatch;
#[cfg(feature = "kinesis")]
pub use crate::event::KinesisBatch;
#[cfg(feature = "sqs")]
pub use crate::event::SqsBatch;
pub use crate::event::{EventError, IdempotentEvent, IdempotentEventLayer, IdempotentFunction};
pub use crate::fingerprint::Fingerprinter;
pub use crate::http::{
    disabled_from_env, idempotent, stored_by_default, Idempotency, IdempotencyLayer,
    ResponseFuture, DISABLED_ENV, REPLAYED_HEADER,
};
pub use crate::key::{IdempotencyKey, MAX_KEY_LEN};
pub use crate::record::{
    Checkpoint, Record, Status, StoredBody, StoredResponse, MAX_BODY_BYTES, WRITE_UNIT_BYTES,
};
pub use crate::scope::{RecordScope, TenantSource};
#[cfg(feature = "dynamodb")]
pub use crate::store::dynamodb::{schema, DynamoStore, KeyValue, TableLayout};
#[cfg(feature = "streams")]
pub use crate::store::dynamodb::{streams_endpoint, DYNAMODB_ENDPOINT_ENV, STREAMS_ENDPOINT_ENV};
pub use crate::store::memory::MemoryStore;
#[cfg(feature = "s3-offload")]
pub use crate::store::offload::S3Offload;
#[cfg(feature = "postgres")]
pub use crate::store::postgres::{PgWrite, PostgresStore, POSTGRES_SCHEMA, POSTGRES_TABLE};
#[cfg(feature = "redis")]
pub use crate::store::redis::{RedisStore, RedisStoreBuilder};
pub use crate::store::url::{
    open_url, OpenOptions, UrlStore, CREATE_SCHEMA_ENV, REDIS_CLUSTER_ENV, STORE_URL_ENV,
};
pub use crate::store::{
    resolver_owner, ClaimOutcome, ClaimRequest, Completion, DeferredWrites, Lease, RecordPage,
    Resolution, Resolve, Settlement, Store, StoredRecord, StuckPage, StuckRecord, SweepCursor,
    DEFAULT_MAX_RESPONSE_BYTES,
};
#[cfg(feature = "sweeper")]
pub use crate::sweep::{SweepPolicy, SweepSummary, Sweeper};
/// PostgreSQL types of [`PgWrite`] parameters.
#[cfg(feature = "postgres")]
pub use tokio_postgres::types::Type as PgType;

// The README's quickstart is compiled with the doc tests.
// So is every Rust block of the guides it links to, one struct per file. Only
// doc tests see them: the packaged crate has none of these files at these
// paths, and only rustdoc's doc tests set `doctest`, so `cargo package` never
// expands these `include_str!`s.
#[cfg(all(
    doctest,
    feature = "dynamodb",
    feature = "sqs",
    feature = "sweeper",
    feature = "kinesis",
    feature = "dynamodb-stream-events",
    feature = "s3-offload",
    feature = "redis",
    feature = "postgres"
))]
mod readme_doctests {
    #[doc = include_str!("../../README.md")]
    struct ReadmeDoctests;
    #[doc = include_str!("../../docs/events.md")]
    struct EventsGuideDoctests;
    #[doc = include_str!("../../docs/engines.md")]
    struct EnginesGuideDoctests;
    #[doc = include_str!("../../docs/powertools.md")]
    struct PowertoolsGuideDoctests;
}
