//! {{project_name}}: an AWS Lambda HTTP API whose `POST /items` is safe to
//! retry, made so by [`lambda_idempotency`].
//!
//! A client sends an `Idempotency-Key` header with each `POST /items`. The
//! first request with a key runs [`create_item`]; a retry of it gets the
//! stored response back, byte for byte, with `Idempotent-Replayed: true`; a
//! retry while the first still runs gets `409`; the same key with another
//! body `422`; no key `400`; DynamoDB unreachable `503`, the handler not run.

use std::time::Duration;

use lambda_http::http::{Method, StatusCode};
use lambda_http::{service_fn, Body, Error, Request, Response};
use lambda_idempotency::{
    http::Idempotency,
    metrics::Metrics,
    settings::Settings,
    store::now_ms,
    sweeper::{SweepPolicy, SweepSummary, Sweeper},
    DynamoStore, IdempotencyContext, IdempotencyLayer, Store,
};
use serde::{Deserialize, Serialize};
use tower::Layer;

/// The API function's settings, read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`: the table of idempotency records.
    pub table: String,
    /// Every `IDEMPOTENCY_*` variable, read and checked by the library (its
    /// `settings` module lists them all): `IDEMPOTENCY_EXPIRES_AFTER_SECONDS`
    /// (default 86400: how long a completed request replays; it must cover
    /// your clients' retries), `IDEMPOTENCY_METRICS_NAMESPACE` (the
    /// middleware's CloudWatch metrics as EMF lines on stdout; none when
    /// unset), `IDEMPOTENCY_WAIT_FOR_RESULT_MS`, `IDEMPOTENCY_DISABLED`, ...
    pub settings: Settings,
}

impl Config {
    /// Read the settings; the error names the variable and what it must hold.
    pub fn from_env() -> Result<Config, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Read the settings through `lookup` (for tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let settings = Settings::from_lookup(lookup).map_err(|e| e.to_string())?;
        let table = settings.table().map_err(|e| e.to_string())?.to_owned();
        Ok(Config { table, settings })
    }
}

/// The idempotency middleware of this API, its records in `store`.
pub fn idempotency(store: impl Store + 'static, config: &Config) -> IdempotencyLayer {
    let layer = IdempotencyLayer::with_config(config.settings.config(store))
        // A POST without a key is refused (400), not run unprotected.
        .require_key(true);
    // Every caller shares one scope of keys. Behind a JWT authorizer, scope
    // them per caller: `.tenant(TenantSource::jwt_sub())`.
    match &config.settings.metrics_namespace {
        Some(namespace) => layer.metrics(Metrics::new(namespace).dimension("Service", "api")),
        None => layer,
    }
}

/// The idempotency records: the DynamoDB table `config.table`, through
/// `client` (with the store's limits on each call: a DynamoDB that does not
/// answer is a `503` within half a second, `IDEMPOTENCY_STORE_TIMEOUT_MS`).
pub fn store(
    client: aws_sdk_dynamodb::Client,
    config: &Config,
) -> Result<DynamoStore, lambda_idempotency::Error> {
    DynamoStore::builder(client, config.table.clone()).open()
}

/// The whole function: [`create_item`] behind the middleware, its records
/// in `store` ([`store`]).
pub fn app(store: DynamoStore, config: &Config) -> Idempotency<Handler> {
    let handler: fn(Request) -> HandlerFuture = create_item;
    idempotency(store, config).layer(service_fn(handler))
}

/// The handler as a service.
pub type Handler = tower::util::ServiceFn<fn(Request) -> HandlerFuture>;

/// What [`create_item`] returns.
pub type HandlerFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response<Body>, Error>> + Send>>;

/// The body of `POST /items`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewItem {
    /// What the item is called.
    pub name: String,
    /// How many (at least 1).
    pub quantity: u32,
}

/// The answer to `POST /items`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Item {
    /// The item's id: the same for every retry of the request.
    pub id: String,
    /// What the item is called.
    pub name: String,
    /// How many.
    pub quantity: u32,
}

/// `POST /items`: validates the body and answers `201` with the new item.
///
/// Your side effects go here (write the item, charge the card): they run
/// once per key. The item's id comes from the idempotency record, so it is
/// the same for every attempt of the request: pass such a derived key on to
/// the services you call, and a re-run after a crash is deduplicated there.
pub fn create_item(req: Request) -> HandlerFuture {
    Box::pin(async move {
        if req.method() != Method::POST {
            return problem(StatusCode::METHOD_NOT_ALLOWED, "use POST to create an item");
        }
        let item: NewItem = match serde_json::from_slice(req.body().as_ref()) {
            Ok(item) => item,
            Err(e) => {
                return problem(
                    StatusCode::BAD_REQUEST,
                    &format!("the body must be a JSON object with a name and a quantity: {e}"),
                )
            }
        };
        if item.name.trim().is_empty() || item.quantity == 0 {
            return problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "an item needs a name and a quantity of at least 1",
            );
        }
        let Some(context) = IdempotencyContext::of(&req) else {
            // Only without the middleware (require_key makes every request
            // through it carry a key).
            return problem(
                StatusCode::BAD_REQUEST,
                "an Idempotency-Key header is required",
            );
        };
        let created = Item {
            id: context.derived_key("item"),
            name: item.name,
            quantity: item.quantity,
        };
        tracing::info!(id = %created.id, "item created");
        Ok(Response::builder()
            .status(StatusCode::CREATED)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_string(&created)?))?)
    })
}

/// An RFC 9457 problem document, as the middleware answers its own errors.
fn problem(status: StatusCode, detail: &str) -> Result<Response<Body>, Error> {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    Ok(Response::builder()
        .status(status)
        .header("content-type", "application/problem+json")
        .body(Body::from(body.to_string()))?)
}

/// The sweeper function's settings, read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweeperConfig {
    /// `IDEMPOTENCY_TABLE`.
    pub table: String,
    /// `SWEEP_POLICY`: `release` (the default: the next retry runs the
    /// handler again) or `fail` (a terminal `500` replays to every retry).
    pub policy: SweepPolicy,
    /// `SWEEP_GRACE_SECONDS` (default 60): how long after its lease ended a
    /// key counts as stuck.
    pub grace: Duration,
    /// Where the table's stream is read: `AWS_ENDPOINT_URL_DYNAMODB_STREAMS`,
    /// else `AWS_ENDPOINT_URL_DYNAMODB` (DynamoDB Local serves both), else
    /// the region's endpoint.
    pub streams_endpoint: Option<String>,
}

impl SweeperConfig {
    /// Read the settings; the error names the variable and what it must hold.
    pub fn from_env() -> Result<SweeperConfig, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Read the settings through `lookup` (for tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<SweeperConfig, String> {
        let settings = Settings::from_lookup(&lookup).map_err(|e| e.to_string())?;
        let table = settings.table().map_err(|e| e.to_string())?.to_owned();
        let policy = match lookup("SWEEP_POLICY") {
            None => SweepPolicy::Release,
            Some(p) => p.parse().map_err(|e| format!("SWEEP_POLICY: {e}"))?,
        };
        let grace = match lookup("SWEEP_GRACE_SECONDS") {
            None => 60,
            Some(g) => g.trim().parse::<u64>().map_err(|_| {
                format!("SWEEP_GRACE_SECONDS={g:?} is not a whole number of seconds")
            })?,
        };
        Ok(SweeperConfig {
            table,
            policy,
            grace: Duration::from_secs(grace),
            streams_endpoint: lambda_idempotency::store::dynamodb::streams_endpoint(&lookup),
        })
    }

    /// The sweeper, once the table's stream is checked (a table without a
    /// `NEW_IMAGE` stream fails here, in one line saying what to change).
    pub async fn start(
        &self,
        client: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::config::Builder,
    ) -> Result<Sweeper, String> {
        let store = DynamoStore::builder(client, self.table.clone())
            .with_stream_at(streams, self.streams_endpoint.clone())
            .open()
            .map_err(|e| e.to_string())?;
        store.check_stream().await.map_err(|e| e.to_string())?;
        Ok(Sweeper::new(store).policy(self.policy).grace(self.grace))
    }
}

/// One scheduled sweep, until done or near `deadline_ms` (the invocation's
/// deadline). Prints the counts as one EMF line (namespace
/// `LambdaIdempotency`, dimensions `Function=sweeper` and `Stack=<the
/// stack>` from `IDEMPOTENCY_METRICS_STACK`: the template's alarms read it) and fails the invocation only when nothing could be listed at
/// all (a wrong table, a missing permission), so that shows as an error.
pub async fn sweep(sweeper: &Sweeper, deadline_ms: u64) -> Result<SweepSummary, Error> {
    let summary = sweeper.sweep(Some(deadline_ms)).await;
    println!("{}", summary.emf("sweeper", now_ms()));
    tracing::info!(?summary, "sweep finished");
    if summary.pages == 0 && summary.errors > 0 {
        return Err(format!(
            "the sweep could not list stuck records of {} ({} failed reads, see the log): check \
             IDEMPOTENCY_TABLE, its stream and the function's permissions",
            sweeper.store_description(),
            summary.errors
        )
        .into());
    }
    Ok(summary)
}
