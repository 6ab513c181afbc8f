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
//! use lambda_idempotency::{DynamoStore, IdempotencyContext, IdempotencyLayer};
//! use tower::Layer;
//!
//! async fn create_order(req: Request) -> Result<Response<Body>, Error> {
//!     // None only for a request the layer let through unrecorded (IDEMPOTENCY_DISABLED,
//!     // a method it does not cover): no stable key to charge with, so refuse it.
//!     let Some(ctx) = IdempotencyContext::of(&req) else {
//!         return Ok(Response::builder().status(400).body("no idempotency record".into())?);
//!     };
//!     // The same on every retry of this request: hand it to your payment provider.
//!     let charge_key = ctx.derived_key("charge"); // 32 hex characters
//!     let body = format!(r#"{{"status":"created","charge_key":"{charge_key}"}}"#);
//!     Ok(Response::builder().status(201).header("content-type", "application/json").body(body.into())?)
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Error> {
//!     let aws = aws_config::load_from_env().await;
//!     // The table IDEMPOTENCY_TABLE names (unset: an error that says so).
//!     let store = DynamoStore::from_env(aws_sdk_dynamodb::Client::new(&aws))?;
//!     // POST and PATCH are covered; one without an Idempotency-Key gets a 400.
//!     let idempotency = IdempotencyLayer::from_env(store)?.require_key(true);
//!     lambda_http::run(idempotency.layer(service_fn(create_order))).await
//! }
//! ```
//!
//! The same program as the README's quickstart, where its table and its
//! function's IAM statement are, in SAM. [`DynamoStore::from_env`] opens the
//! table `IDEMPOTENCY_TABLE` names; [`IdempotencyLayer::from_env`] reads the
//! deployment's options (`IDEMPOTENCY_DISABLED=true` switches the layer off
//! for local tests; every variable is in [`settings`], and
//! `docs/configuration.md` in the repository lists them). The layer covers
//! `POST` and `PATCH` ([`IdempotencyLayer::methods`] names others);
//! [`require_key(true)`](IdempotencyLayer::require_key) answers a covered
//! request without a key with a `400`. Behind a JWT authorizer, add
//! `.tenant(TenantSource::jwt_sub())` so no caller replays another's
//! response. With every default, [`http::idempotent`] wraps a handler in one
//! call.
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
//! # The modules
//!
//! The root holds what a first program needs: the HTTP layer, the event
//! wrapper, the configuration, the handler's context, the [`Store`] trait and
//! the stores, the tenant source, the fingerprinter and the error. The rest
//! lives in its module:
//!
//! | module | what it holds |
//! |---|---|
//! | [`http`] | the middleware ([`IdempotencyLayer`], [`http::Idempotency`], its [`http::ResponseFuture`]), the key header ([`http::IdempotencyKey`]), the tenant ([`TenantSource`]), which responses are stored |
//! | [`event`] | async functions and typed events ([`IdempotentFunction`], [`IdempotentEventLayer`]), SQS, Kinesis and DynamoDB Streams batches |
//! | [`store`] | the [`Store`] trait, the record and its states ([`store::Record`], [`store::StoredResponse`], [`store::Checkpoint`]), stores opened from a URL; one module per engine: [`store::memory`], `store::dynamodb`, `store::redis`, `store::postgres`, and `store::offload` (responses over the item limit in S3) |
//! | [`sweeper`] | the sweeper of records stuck in progress |
//! | `conformance` | the store conformance suite (feature `test-util`) |
//! | [`config`] | [`IdempotencyConfig`], the options both paths share, and the off switch |
//! | [`context`] | [`IdempotencyContext`], what the handler sees |
//! | [`lifecycle`] | the claim lifecycle every entry point runs ([`lifecycle::begin`], [`lifecycle::Guard`]), for an entry point of your own |
//! | [`settings`] | every `IDEMPOTENCY_*` environment variable, read and validated in one place ([`settings::Settings`]) |
//! | [`scope`] | [`scope::RecordScope`]: which record a key maps to |
//! | [`fingerprint`] | [`Fingerprinter`]: what makes two requests the same |
//! | [`metrics`], [`problem`] | CloudWatch EMF metrics, the problem documents |
//!
//! Items behind a feature say so in these docs. The features
//! (`shared/Cargo.toml`), `http` and `dynamodb` on by default:
//!
//! | feature | adds |
//! |---|---|
//! | `http` (default) | the HTTP middleware (`IdempotencyLayer`, `TenantSource`, module `http`) over `lambda_http`; an event-only function leaves it out (`default-features = false`) and compiles no HTTP stack |
//! | `dynamodb` (default) | the DynamoDB store (`DynamoStore`, `store::dynamodb::schema`) and transactional completion |
//! | `sqs` | SQS batches with partial batch responses (`event::SqsBatch`) |
//! | `kinesis` | Kinesis Data Streams batches with partial batch responses (`event::KinesisBatch`) |
//! | `events-dynamodb-stream` | DynamoDB Streams batches with partial batch responses (`event::DynamoDbStreamBatch`) |
//! | `sweeper` | the sweeper of records stuck in progress (module `sweeper`) |
//! | `sweep-via-stream` | stuck records found in a DynamoDB table's stream (`DynamoStoreBuilder::with_stream`); turns on `dynamodb` |
//! | `s3-offload` | responses over the store's item limit kept in S3 (`store::offload::S3Offload`), around any store |
//! | `redis` | the Redis / Valkey store (`RedisStore`), TLS (`rediss://`) through rustls |
//! | `postgres` | the PostgreSQL store (`PostgresStore`, `store::postgres::POSTGRES_SCHEMA`) |
//! | `powertools` | a cut-over from Powertools for AWS Lambda (Python) on DynamoDB (`store::powertools::PowertoolsCutover`, a store layer); turns on `dynamodb` |
//! | `aws` | `init::aws_config`: the SDK configuration a function wants (its HTTPS client on rustls with ring) |
//! | `test-util` | for tests: the store conformance suite (module `conformance`), the cases every engine of this crate passes, for a `Store` of your own |
//!
//! # Testing your handler
//!
//! [`MemoryStore`] has the same semantics as [`DynamoStore`] and counts its
//! requests, so handler unit tests need no DynamoDB.

#![forbid(unsafe_code)]
#![deny(missing_docs, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cache;
mod clock;
pub mod config;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod conformance;
pub mod context;
mod error;
pub mod event;
pub mod fingerprint;
mod hash;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod init;
mod json;
#[cfg(feature = "http")]
mod key;
pub mod lifecycle;
pub mod metrics;
pub mod problem;
mod progress;
mod record;
pub mod scope;
pub mod settings;
pub mod store;
#[cfg(feature = "sweeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "sweeper")))]
pub mod sweeper;

pub use crate::config::IdempotencyConfig;
pub use crate::context::IdempotencyContext;
pub use crate::error::{Error, ErrorKind};
pub use crate::event::{IdempotentEventLayer, IdempotentFunction};
pub use crate::fingerprint::Fingerprinter;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use crate::http::{IdempotencyLayer, TenantSource};
#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub use crate::store::dynamodb::DynamoStore;
pub use crate::store::memory::MemoryStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use crate::store::postgres::PostgresStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use crate::store::redis::RedisStore;
pub use crate::store::Store;

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
    feature = "events-dynamodb-stream",
    feature = "s3-offload",
    feature = "redis",
    feature = "postgres",
    feature = "http",
    feature = "test-util",
    feature = "powertools"
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
