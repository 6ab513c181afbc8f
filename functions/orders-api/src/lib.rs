//! `orders-api`: an example Lambda HTTP API made safe to retry with
//! `lambda-idempotency`.
//!
//! - `POST /orders` (`Idempotency-Key` required; tenant = JWT `sub`; a request
//!   without one is refused with a `401` unless `IDEMPOTENCY_ALLOW_ANONYMOUS`
//!   puts such requests in one shared anonymous scope) validates
//!   `{"customer_id", "amount", "currency"}`, derives the order id and the
//!   payment-provider key from the idempotency record, charges the simulated
//!   provider (itself idempotent by that key), upserts the order and answers
//!   `201`. The order's `executions` counts how often this body really ran.
//! - `GET /orders/{order_id}` answers the stored order or `404`; not covered.
//!   An order is visible only to the tenant that created it (anonymous orders
//!   to anonymous callers).
//!
//! Because the order id and charge key are derived from the record, a re-run
//! after a crash writes the same order and is deduplicated by the provider.
//!
//! Coming from Powertools for AWS Lambda (Python):
//! `IDEMPOTENCY_POWERTOOLS_TABLE`, `IDEMPOTENCY_POWERTOOLS_KEY_PREFIX` and
//! `IDEMPOTENCY_POWERTOOLS_UNTIL` turn on the cut-over ([`PowertoolsCutover`]):
//! until then, a key Powertools completed replays its stored response
//! instead of running again. The Redis replica wait
//! (`IDEMPOTENCY_REDIS_WAIT_REPLICAS`) is the store's
//! ([`idempotency_engine`]).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use aws_sdk_dynamodb::Client;
use http::{header, StatusCode};
use lambda_http::{Body, Request, Response};
use lambda_idempotency::metrics::Metrics;
use lambda_idempotency::{
    http::Idempotency, store::offload::S3Offload, store::powertools::PowertoolsRecords,
    DynamoStore, IdempotencyContext, IdempotencyLayer, Store, TenantSource,
};
use serde::Deserialize;
use tower::Layer;

/// Settings read from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`: where the records live unless `engine` names
    /// another store (then it may be unset, and is empty).
    pub idempotency_table: String,
    /// `IDEMPOTENCY_STORE_URL` and its companions: the records in Redis,
    /// Valkey or PostgreSQL instead ([`idempotency_engine`]).
    pub engine: idempotency_engine::Engine,
    /// `ORDERS_TABLE`.
    pub orders_table: String,
    /// `SIMULATED_PROVIDER_LATENCY_MS` (default 0).
    pub provider_latency: Duration,
    /// `IDEMPOTENCY_EXPIRES_AFTER_SECONDS` (default 86400).
    pub expires_after: Duration,
    /// `IDEMPOTENCY_MAX_LEASE_SECONDS` (default 900).
    pub max_lease: Duration,
    /// `IDEMPOTENCY_WAIT_FOR_RESULT_MS` (default 0: off): how long a retry
    /// that finds the same order still in progress waits for its response
    /// instead of answering `409` at once (at most 900,000, and never past
    /// the invocation's deadline less 1 s).
    pub wait_for_result: Duration,
    /// `ORDERS_API_DEMO_CRASHES=1`: honour the demo's `x-demo-crash:
    /// after-charge` header by exiting the process after the charge is
    /// recorded. Never set it in production.
    pub demo_crashes: bool,
    /// `IDEMPOTENCY_METRICS_NAMESPACE`: emit the middleware's EMF metrics
    /// under this CloudWatch namespace (off when unset).
    pub metrics_namespace: Option<String>,
    /// `IDEMPOTENCY_ALLOW_ANONYMOUS=true`: requests without a JWT `sub` share
    /// one anonymous scope (an API without an authorizer). Default `false`:
    /// they are refused with a `401`, so no caller can replay another's
    /// response.
    pub allow_anonymous: bool,
    /// `IDEMPOTENCY_OFFLOAD_BUCKET` (and `IDEMPOTENCY_OFFLOAD_PREFIX`, default
    /// `orders-api/`): keep responses too large for the idempotency table in
    /// this S3 bucket and replay them from there ([`app_with_s3`]). Unset:
    /// such a response completes with the `response-too-large` problem.
    pub offload: Option<Offload>,
    /// `IDEMPOTENCY_POWERTOOLS_TABLE`, `IDEMPOTENCY_POWERTOOLS_KEY_PREFIX`
    /// and `IDEMPOTENCY_POWERTOOLS_UNTIL`: the cut-over from Powertools;
    /// `None` (the table unset or empty) when there is none.
    pub powertools: Option<PowertoolsCutover>,
}

/// The variable naming the DynamoDB table Powertools kept its records in.
pub const POWERTOOLS_TABLE_ENV: &str = "IDEMPOTENCY_POWERTOOLS_TABLE";
/// The variable of the part before `#` of Powertools' record ids.
pub const POWERTOOLS_KEY_PREFIX_ENV: &str = "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX";
/// The variable of when the cut-over ends (RFC 3339).
pub const POWERTOOLS_UNTIL_ENV: &str = "IDEMPOTENCY_POWERTOOLS_UNTIL";

/// A cut-over from Powertools for AWS Lambda (Python) without running a
/// key twice (docs/powertools.md, "Cutting over"): until `until`, a key
/// this API has no record of is looked up in Powertools' table (one
/// `GetItem`); a key Powertools completed replays its stored response, one
/// it still runs answers `409`. Powertools' default layout: partition key
/// `id`, MD5 of the `Idempotency-Key` header's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowertoolsCutover {
    /// `IDEMPOTENCY_POWERTOOLS_TABLE`: the DynamoDB table (it may be the
    /// idempotency table itself).
    pub table: String,
    /// `IDEMPOTENCY_POWERTOOLS_KEY_PREFIX`: the part before `#` of the ids
    /// Powertools wrote (`<function name>.<module>.<handler>`, or its
    /// decorator's `key_prefix`).
    pub key_prefix: String,
    /// `IDEMPOTENCY_POWERTOOLS_UNTIL`: when the lookups stop; the switch
    /// plus Powertools' `expires_after_seconds` is enough.
    pub until: std::time::SystemTime,
}

impl PowertoolsCutover {
    /// The cut-over the three variables describe through `lookup`: `None`
    /// when the table is unset or empty (then the other two must be too);
    /// otherwise all three are needed, each checked, and a bad one is
    /// refused in one line naming it.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<PowertoolsCutover>, String> {
        let set = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let Some(table) = set(POWERTOOLS_TABLE_ENV) else {
            for name in [POWERTOOLS_KEY_PREFIX_ENV, POWERTOOLS_UNTIL_ENV] {
                if set(name).is_some() {
                    return Err(format!(
                        "{name} is set but {POWERTOOLS_TABLE_ENV} is not: it only applies to a \
                         cut-over from Powertools; set the table Powertools kept its records \
                         in, or unset {name}"
                    ));
                }
            }
            return Ok(None);
        };
        let table = table.trim().to_owned();
        let valid_table = (3..=255).contains(&table.len())
            && table
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !valid_table {
            return Err(format!(
                "{POWERTOOLS_TABLE_ENV}={table:?} is not a DynamoDB table name (3 to 255 \
                 letters, digits, `_`, `-` and `.`): the name of the table Powertools kept its \
                 records in"
            ));
        }
        let key_prefix = set(POWERTOOLS_KEY_PREFIX_ENV).ok_or_else(|| {
            format!(
                "{POWERTOOLS_KEY_PREFIX_ENV} is not set but {POWERTOOLS_TABLE_ENV} is: give it \
                 the part before `#` of the ids in Powertools' table, such as \
                 orders-api.app.lambda_handler"
            )
        })?;
        let key_prefix = key_prefix.trim().to_owned();
        if key_prefix.contains('#') {
            return Err(format!(
                "{POWERTOOLS_KEY_PREFIX_ENV}={key_prefix:?} holds a `#`: give only the part \
                 before `#` of the ids in Powertools' table, such as orders-api.app.lambda_handler"
            ));
        }
        let until_text = set(POWERTOOLS_UNTIL_ENV).ok_or_else(|| {
            format!(
                "{POWERTOOLS_UNTIL_ENV} is not set but {POWERTOOLS_TABLE_ENV} is: give it when \
                 the cut-over ends, an RFC 3339 time such as 2026-12-01T00:00:00Z (the switch \
                 plus Powertools' expires_after_seconds)"
            )
        })?;
        let until = rfc3339(until_text.trim()).ok_or_else(|| {
            format!(
                "{POWERTOOLS_UNTIL_ENV}={until_text:?} is not an RFC 3339 time such as \
                 2026-12-01T00:00:00Z: when the cut-over ends (the switch plus Powertools' \
                 expires_after_seconds)"
            )
        })?;
        Ok(Some(PowertoolsCutover {
            table,
            key_prefix,
            until,
        }))
    }

    /// The records this cut-over reads, through `client`.
    pub fn records(&self, client: Client) -> PowertoolsRecords {
        PowertoolsRecords::new(client, &self.table, &self.key_prefix, self.until)
    }
}

/// An RFC 3339 time (`2026-12-01T00:00:00Z`, `2026-12-01T01:00:00+01:00`,
/// with or without a fraction of a second, which is dropped), as a
/// `SystemTime`; `None` for anything else or a time before 1970 (the
/// window's end is compared as epoch milliseconds).
fn rfc3339(text: &str) -> Option<std::time::SystemTime> {
    let time =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    let epoch_s = u64::try_from(time.unix_timestamp()).ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(epoch_s))
}

/// Where responses too large for the idempotency table go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offload {
    /// The S3 bucket.
    pub bucket: String,
    /// The prefix of this function's objects (its IAM policy and the
    /// bucket's lifecycle rule are scoped to it).
    pub prefix: String,
}

impl Config {
    /// Read the settings; the error names the variable and what it must hold.
    pub fn from_env() -> Result<Config, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Read the settings through `lookup` (for tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let required = |name: &str| {
            lookup(name)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("{name} is not set: give it the DynamoDB table name"))
        };
        let number = |name: &str, default: u64| match lookup(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{name}={v:?} is not a whole non-negative number")),
        };
        let engine = idempotency_engine::Engine::from_lookup(&lookup)?;
        Ok(Config {
            idempotency_table: if engine.is_dynamodb() {
                required("IDEMPOTENCY_TABLE")?
            } else {
                lookup("IDEMPOTENCY_TABLE").unwrap_or_default()
            },
            engine,
            orders_table: required("ORDERS_TABLE")?,
            provider_latency: Duration::from_millis(number("SIMULATED_PROVIDER_LATENCY_MS", 0)?),
            expires_after: idempotency_engine::expires_after(
                &lookup,
                "set it to at least your clients' retry window",
            )?
            .unwrap_or(Duration::from_secs(86_400)),
            max_lease: Duration::from_secs(number("IDEMPOTENCY_MAX_LEASE_SECONDS", 900)?),
            wait_for_result: match number("IDEMPOTENCY_WAIT_FOR_RESULT_MS", 0)? {
                ms if ms <= 900_000 => Duration::from_millis(ms),
                ms => {
                    return Err(format!(
                        "IDEMPOTENCY_WAIT_FOR_RESULT_MS={ms} is more than 900000 (15 minutes, \
                         Lambda's longest timeout): give how long a retry waits for the \
                         response of the same order in progress, or 0 to answer 409 at once"
                    ))
                }
            },
            demo_crashes: lookup("ORDERS_API_DEMO_CRASHES").as_deref() == Some("1"),
            metrics_namespace: lookup("IDEMPOTENCY_METRICS_NAMESPACE").filter(|n| !n.is_empty()),
            allow_anonymous: match lookup("IDEMPOTENCY_ALLOW_ANONYMOUS")
                .as_deref()
                .map(str::trim)
            {
                None | Some("") | Some("false") | Some("0") => false,
                Some("true") | Some("1") => true,
                Some(other) => {
                    return Err(format!(
                        "IDEMPOTENCY_ALLOW_ANONYMOUS={other:?} is not a boolean: use true or false"
                    ))
                }
            },
            offload: lookup("IDEMPOTENCY_OFFLOAD_BUCKET")
                .filter(|b| !b.is_empty())
                .map(|bucket| Offload {
                    bucket,
                    prefix: lookup("IDEMPOTENCY_OFFLOAD_PREFIX")
                        .filter(|p| !p.is_empty())
                        .unwrap_or_else(|| "orders-api/".to_owned()),
                }),
            powertools: PowertoolsCutover::from_lookup(&lookup)?,
        })
    }
}

/// The idempotency settings of this API, for callers that build their own
/// store (without the cut-over from Powertools, which needs a DynamoDB
/// client: [`with_cutover`]).
pub fn idempotency_layer(store: impl Store + 'static, config: &Config) -> IdempotencyLayer {
    // LAMBDA_IDEMPOTENCY_DISABLED=true switches it off for local tests; the
    // other variables are this function's own (`Config`), checked at start.
    let layer = IdempotencyLayer::new(store)
        .disabled(lambda_idempotency::config::disabled_from_env())
        .require_key(true)
        .tenant(tenant_source(config))
        .expires_after(config.expires_after)
        .max_lease(config.max_lease)
        .wait_for(config.wait_for_result);
    match &config.metrics_namespace {
        Some(namespace) => {
            layer.metrics(Metrics::new(namespace).dimension("Service", "orders-api"))
        }
        None => layer,
    }
}

/// `store` with the cut-over from Powertools of `config` (if any) around
/// it, reading Powertools' records through `client`.
pub fn with_cutover(store: Arc<dyn Store>, client: &Client, config: &Config) -> Arc<dyn Store> {
    match &config.powertools {
        Some(cutover) => Arc::new(
            lambda_idempotency::store::powertools::PowertoolsCutover::new(
                store,
                cutover.records(client.clone()),
            ),
        ),
        None => store,
    }
}

/// Where a request's tenant comes from: the JWT `sub`, refusing requests
/// without one unless the configuration allows a shared anonymous scope.
fn tenant_source(config: &Config) -> TenantSource {
    if config.allow_anonymous {
        TenantSource::jwt_sub().or_anonymous()
    } else {
        TenantSource::jwt_sub()
    }
}

/// The whole function: the router behind the idempotency middleware, its
/// records in the idempotency table alone (`config.offload` needs an S3
/// client: [`app_with_s3`]).
pub fn app(client: Client, config: &Config) -> Idempotency<Orders> {
    let store = DynamoStore::builder(client.clone(), config.idempotency_table.clone())
        .open()
        .expect("the default table layout is valid");
    let store = with_cutover(Arc::new(store), &client, config);
    idempotency_layer(store, config).layer(Orders::new(client, config))
}

/// The whole function as deployed: [`app`], with responses too large for the
/// table kept in `config.offload`'s bucket through `s3` when it is set.
pub fn app_with_s3(client: Client, s3: aws_sdk_s3::Client, config: &Config) -> Idempotency<Orders> {
    let store = DynamoStore::builder(client.clone(), config.idempotency_table.clone())
        .open()
        .expect("the default table layout is valid");
    app_with_store(client, Arc::new(store), s3, config)
}

/// [`app_with_s3`] with the records in `store`: the engine
/// `IDEMPOTENCY_STORE_URL` names ([`idempotency_engine::Engine::open`]); the
/// orders stay in DynamoDB.
pub fn app_with_store(
    client: Client,
    store: Arc<dyn Store>,
    s3: aws_sdk_s3::Client,
    config: &Config,
) -> Idempotency<Orders> {
    let store: Arc<dyn Store> = match &config.offload {
        Some(offload) => {
            Arc::new(S3Offload::new(store, s3, &offload.bucket).key_prefix(&offload.prefix))
        }
        None => store,
    };
    // The cut-over outermost: it reads how each request was sent, and its
    // copies of Powertools' outcomes go through the offload like any other.
    let store = with_cutover(store, &client, config);
    idempotency_layer(store, config).layer(Orders::new(client, config))
}

/// The router and handlers.
#[derive(Clone, Debug)]
pub struct Orders {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    table: String,
    provider_latency: Duration,
    demo_crashes: bool,
    tenant: TenantSource,
    allow_anonymous: bool,
}

impl Orders {
    /// Handlers on the orders table of `config`.
    pub fn new(client: Client, config: &Config) -> Orders {
        Orders {
            inner: Arc::new(Inner {
                client,
                table: config.orders_table.clone(),
                provider_latency: config.provider_latency,
                demo_crashes: config.demo_crashes,
                tenant: tenant_source(config),
                allow_anonymous: config.allow_anonymous,
            }),
        }
    }
}

impl tower::Service<Request> for Orders {
    type Response = Response<Body>;
    type Error = lambda_http::Error;
    type Future = lambda_http::BoxFuture<'static, Result<Response<Body>, lambda_http::Error>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move { Ok(route(&inner, req).await) })
    }
}

/// Problem type URIs of this API (the middleware's own are in
/// `lambda_idempotency::problem`).
pub mod problems {
    /// The order body is not valid.
    pub const INVALID_ORDER: &str = "https://orders-api.example/problems/invalid-order";
    /// No such order.
    pub const NOT_FOUND: &str = "https://orders-api.example/problems/not-found";
    /// The method is not allowed on this path.
    pub const METHOD_NOT_ALLOWED: &str = "https://orders-api.example/problems/method-not-allowed";
    /// The orders table or the provider failed; retry with the same key.
    pub const DEPENDENCY_FAILED: &str = "https://orders-api.example/problems/dependency-failed";
}

async fn route(inner: &Inner, req: Request) -> Response<Body> {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let method = req.method().clone();
    if path.ends_with("/orders") || path == "orders" {
        return match method {
            http::Method::POST => create_order(inner, &req).await,
            _ => problem(
                StatusCode::METHOD_NOT_ALLOWED,
                problems::METHOD_NOT_ALLOWED,
                "use POST /orders to create an order",
            ),
        };
    }
    if let Some((prefix, id)) = path.rsplit_once('/') {
        if prefix.ends_with("/orders") || prefix == "orders" {
            return match method {
                http::Method::GET => get_order(inner, &req, id).await,
                _ => problem(
                    StatusCode::METHOD_NOT_ALLOWED,
                    problems::METHOD_NOT_ALLOWED,
                    "use GET /orders/{order_id}",
                ),
            };
        }
    }
    problem(
        StatusCode::NOT_FOUND,
        problems::NOT_FOUND,
        "no such route; try POST /orders or GET /orders/{order_id}",
    )
}

/// A new order as clients send it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewOrder {
    customer_id: String,
    amount: i64,
    currency: String,
}

fn parse_order(body: &[u8]) -> Result<NewOrder, String> {
    let order: NewOrder = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the body must be JSON {{\"customer_id\": string, \"amount\": integer > 0, \
             \"currency\": three uppercase letters}}: {e}"
        )
    })?;
    if order.customer_id.trim().is_empty() {
        return Err("customer_id must not be empty".into());
    }
    if order.amount <= 0 {
        return Err(format!(
            "amount must be an integer > 0 (minor units), got {}",
            order.amount
        ));
    }
    if order.currency.len() != 3 || !order.currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!(
            "currency must be three uppercase letters such as EUR, got {:?}",
            order.currency
        ));
    }
    Ok(order)
}

/// Create an order in three atomic phases separated by recovery points, so a
/// crash resumes where it stopped instead of starting over:
///
/// 1. write the order (`pending`, `executions` + 1), commit `order-created`;
/// 2. charge the provider (the one foreign call), commit `charged` with the
///    charge id;
/// 3. confirm the order with the charge id, answer `201`.
///
/// `executions` counts every run of the handler body: a fresh run adds 1 in
/// phase 1, a run resumed from a recovery point (which skips phase 1) adds 1
/// in phase 3 and to `resumed_runs` as well.
///
/// Ids come from the idempotency record (`derived_key`), so even a re-run of
/// a phase writes the same order and charges under the same provider key.
async fn create_order(inner: &Inner, req: &Request) -> Response<Body> {
    let order = match parse_order(req.body().as_ref()) {
        Ok(order) => order,
        Err(detail) => return problem(StatusCode::BAD_REQUEST, problems::INVALID_ORDER, &detail),
    };
    // The middleware requires a key on this route, so a claimed record (and
    // ids derived from it) is there whenever idempotency is on. Without one
    // (`LAMBDA_IDEMPOTENCY_DISABLED`, or the router called bare) the order
    // still runs, as a switched-off middleware promises, with fresh random
    // ids and no recovery points: a retry then makes another order.
    let run = match IdempotencyContext::of(req) {
        Some(ctx) => Run::recorded(ctx),
        None => match Run::unrecorded() {
            Ok(run) => run,
            Err(detail) => return dependency_failed(&detail),
        },
    };
    match run_phases(inner, req, &run, &order).await {
        Ok(response) => response,
        Err(detail) => dependency_failed(&detail),
    }
}

/// A `503` for a failed dependency. The cause goes to the log only: SDK
/// error text can name accounts, ARNs and tables, which clients must not see.
fn dependency_failed(cause: &str) -> Response<Body> {
    tracing::error!(cause, "a dependency failed; answering 503");
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        problems::DEPENDENCY_FAILED,
        "the order could not be processed because a dependency (the orders table or the \
         payment provider) failed; retry with the same Idempotency-Key",
    )
}

/// The phases, in order; a recovery point names the last one finished.
const PHASES: [&str; 2] = ["order-created", "charged"];

/// One run of `POST /orders`: its ids, and the idempotency record it reports
/// progress to (none when the middleware is switched off).
struct Run<'a> {
    order_id: String,
    /// The payment provider's idempotency key for this order's charge.
    charge_key: String,
    ctx: Option<&'a IdempotencyContext>,
}

impl<'a> Run<'a> {
    /// Ids derived from the claimed record, progress committed to it.
    fn recorded(ctx: &'a IdempotencyContext) -> Self {
        Run {
            order_id: ctx.derived_key("order"),
            charge_key: ctx.derived_key("charge"),
            ctx: Some(ctx),
        }
    }

    /// Fresh random ids and no record (the middleware is switched off).
    fn unrecorded() -> Result<Self, String> {
        let run = Run {
            order_id: random_hex(16)?,
            charge_key: random_hex(16)?,
            ctx: None,
        };
        tracing::warn!(
            order_id = %run.order_id,
            "POST /orders without an idempotency record (middleware disabled): \
             fresh ids, so a retry creates another order"
        );
        Ok(run)
    }

    fn recovery_point(&self) -> Option<&lambda_idempotency::store::Checkpoint> {
        self.ctx.and_then(IdempotencyContext::recovery_point)
    }

    /// Record that `phase` finished (nowhere when there is no record).
    async fn commit(&self, phase: &str, data: serde_json::Value) -> Result<(), String> {
        match self.ctx {
            Some(ctx) => ctx
                .commit(phase, data)
                .await
                .map_err(|e| format!("could not record progress: {e}")),
            None => Ok(()),
        }
    }
}

/// `bytes` random bytes in hex, for ids that nothing derives.
fn random_hex(bytes: usize) -> Result<String, String> {
    let mut random = vec![0u8; bytes];
    getrandom::fill(&mut random).map_err(|e| format!("could not draw a random id: {e}"))?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

async fn run_phases(
    inner: &Inner,
    req: &Request,
    run: &Run<'_>,
    order: &NewOrder,
) -> Result<Response<Body>, String> {
    let order_id = &run.order_id;
    let resumed_from = run.recovery_point().map(|p| p.name.clone());
    let reached = resumed_from
        .as_deref()
        .and_then(|r| PHASES.iter().position(|p| *p == r));
    let done = |phase: usize| reached.is_some_and(|r| r >= phase);

    if !done(0) {
        let tenant = inner.tenant.resolve(req);
        create_pending_order(inner, order_id, tenant.as_deref(), order).await?;
        run.commit(PHASES[0], serde_json::json!({ "order_id": order_id }))
            .await?;
    }
    let charge = match run.recovery_point() {
        Some(point) if done(1) => Charge {
            id: point.data["charge_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            provider_calls: point.data["provider_calls"].as_i64().unwrap_or_default(),
        },
        _ => {
            let charge = charge(inner, &run.charge_key, order).await?;
            run.commit(
                PHASES[1],
                serde_json::json!({ "charge_id": charge.id, "provider_calls": charge.provider_calls }),
            )
            .await?;
            charge
        }
    };
    if inner.demo_crashes
        && req
            .headers()
            .get("x-demo-crash")
            .is_some_and(|v| v == "after-charge")
    {
        // The demo's simulated crash: the process dies after the charge is
        // recorded and before the order is confirmed.
        tracing::warn!(order_id = %order_id, "x-demo-crash: exiting after the charge");
        std::process::exit(137);
    }
    let mut stored = confirm_order(inner, order_id, &charge.id, resumed_from.is_some()).await?;
    stored["provider_calls"] = charge.provider_calls.into();
    stored["resumed_from"] = resumed_from.into();
    let mut response = json_response(StatusCode::CREATED, &stored);
    if let Ok(location) = http::HeaderValue::from_str(&format!("/orders/{order_id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// A charge as the provider reports it.
struct Charge {
    id: String,
    /// How many times the provider was called for this key (deduplicated).
    provider_calls: i64,
}

/// The simulated payment provider: like a real one, it deduplicates charges by
/// the idempotency key it is given, durably (one item `charge#<key>` in the
/// orders table), counts every call it receives, and answers after a
/// configurable latency.
async fn charge(inner: &Inner, key: &str, order: &NewOrder) -> Result<Charge, String> {
    tokio::time::sleep(inner.provider_latency).await;
    let fresh_id = format!(
        "ch_{}",
        random_hex(12).map_err(|e| format!("provider {e}"))?
    );
    let output = inner
        .client
        .update_item()
        .table_name(&inner.table)
        .key("order_id", AttributeValue::S(format!("charge#{key}")))
        .update_expression(
            "SET charge_id = if_not_exists(charge_id, :id), amount = :a, currency = :c ADD calls :one",
        )
        .expression_attribute_values(":id", AttributeValue::S(fresh_id))
        .expression_attribute_values(":a", AttributeValue::N(order.amount.to_string()))
        .expression_attribute_values(":c", AttributeValue::S(order.currency.clone()))
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .map_err(|e| {
            format!(
                "the payment provider failed: {}; retry with the same Idempotency-Key",
                aws_sdk_dynamodb::error::DisplayErrorContext(&e)
            )
        })?;
    let item = output.attributes().cloned().unwrap_or_default();
    Ok(Charge {
        id: item
            .get("charge_id")
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default(),
        provider_calls: item
            .get("calls")
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or_default(),
    })
}

fn table_error(e: impl std::error::Error + 'static) -> String {
    format!(
        "the orders table could not be written: {}; retry with the same Idempotency-Key",
        aws_sdk_dynamodb::error::DisplayErrorContext(&e)
    )
}

/// Phase 1: the order exists, pending; `executions` counts how often this
/// phase, the start of the handler body, really ran.
async fn create_pending_order(
    inner: &Inner,
    order_id: &str,
    tenant: Option<&str>,
    order: &NewOrder,
) -> Result<(), String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // The tenant that may read the order back (none for anonymous orders).
    let (set_tenant, tenant_value) = match tenant {
        Some(t) => (", tenant = :t", Some(AttributeValue::S(t.to_owned()))),
        None => ("", None),
    };
    inner
        .client
        .update_item()
        .table_name(&inner.table)
        .key("order_id", AttributeValue::S(order_id.to_owned()))
        .update_expression(format!(
            "SET customer_id = :c, amount = :a, currency = :cur, \
             order_status = if_not_exists(order_status, :pending), \
             created_at = if_not_exists(created_at, :now){set_tenant} ADD executions :one"
        ))
        .set_expression_attribute_values(Some(
            tenant_value
                .map(|v| std::collections::HashMap::from([(":t".to_owned(), v)]))
                .unwrap_or_default(),
        ))
        .expression_attribute_values(":c", AttributeValue::S(order.customer_id.clone()))
        .expression_attribute_values(":a", AttributeValue::N(order.amount.to_string()))
        .expression_attribute_values(":cur", AttributeValue::S(order.currency.clone()))
        .expression_attribute_values(":pending", AttributeValue::S("pending".into()))
        .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .map(|_| ())
        .map_err(table_error)
}

/// Phase 3: the order is confirmed with its charge. A resumed run counts
/// itself here, as it skipped phase 1.
async fn confirm_order(
    inner: &Inner,
    order_id: &str,
    charge_id: &str,
    resumed: bool,
) -> Result<serde_json::Value, String> {
    let mut update = inner
        .client
        .update_item()
        .table_name(&inner.table)
        .key("order_id", AttributeValue::S(order_id.to_owned()))
        .expression_attribute_values(":ch", AttributeValue::S(charge_id.to_owned()))
        .expression_attribute_values(":confirmed", AttributeValue::S("confirmed".into()));
    update = if resumed {
        update
            .update_expression(
                "SET charge_id = :ch, order_status = :confirmed ADD executions :one, resumed_runs :one",
            )
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
    } else {
        update.update_expression("SET charge_id = :ch, order_status = :confirmed")
    };
    let output = update
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .map_err(table_error)?;
    Ok(order_json(output.attributes().cloned().unwrap_or_default()))
}

async fn get_order(inner: &Inner, req: &Request, order_id: &str) -> Response<Body> {
    let caller = inner.tenant.resolve(req);
    if caller.is_none() && !inner.allow_anonymous {
        return lambda_idempotency::problem::response(
            lambda_idempotency::problem::TENANT_MISSING,
            "orders belong to the caller that created them, and this request carries no \
             caller identity (JWT sub)",
        );
    }
    // Order ids are 32 hex characters (derived keys); anything else, including
    // the provider's `charge#...` items, is not an order.
    if order_id.len() != 32 || !order_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return problem(
            StatusCode::NOT_FOUND,
            problems::NOT_FOUND,
            "no order has this id",
        );
    }
    let result = inner
        .client
        .get_item()
        .table_name(&inner.table)
        .key("order_id", AttributeValue::S(order_id.to_owned()))
        .consistent_read(true)
        .send()
        .await;
    match result {
        Ok(output) => match output.item() {
            // Another tenant's order is answered as absent: its existence is
            // not the caller's business.
            Some(item)
                if item
                    .get("tenant")
                    .and_then(|v| v.as_s().ok())
                    .map(String::as_str)
                    == caller.as_deref() =>
            {
                json_response(StatusCode::OK, &order_json(item.clone()))
            }
            _ => problem(
                StatusCode::NOT_FOUND,
                problems::NOT_FOUND,
                "no order has this id",
            ),
        },
        Err(e) => dependency_failed(&format!(
            "the orders table could not be read: {}",
            aws_sdk_dynamodb::error::DisplayErrorContext(&e)
        )),
    }
}

fn order_json(item: std::collections::HashMap<String, AttributeValue>) -> serde_json::Value {
    let s = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    let n = |k: &str| {
        item.get(k)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<i64>().ok())
    };
    serde_json::json!({
        "order_id": s("order_id"),
        "customer_id": s("customer_id"),
        "amount": n("amount"),
        "currency": s("currency"),
        "charge_id": s("charge_id"),
        "executions": n("executions"),
        "resumed_runs": n("resumed_runs").unwrap_or(0),
        "status": s("order_status"),
        "created_at": n("created_at"),
    })
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::Text(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn problem(status: StatusCode, type_uri: &str, detail: &str) -> Response<Body> {
    let body = serde_json::json!({
        "type": type_uri,
        "title": status.canonical_reason().unwrap_or("error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut response = json_response(status, &body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/problem+json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_validation_explains_each_rule() {
        assert!(parse_order(br#"{"customer_id":"c1","amount":5,"currency":"EUR"}"#).is_ok());
        for (body, needle) in [
            (&br#"not json"#[..], "must be JSON"),
            (
                br#"{"customer_id":"","amount":5,"currency":"EUR"}"#,
                "customer_id",
            ),
            (
                br#"{"customer_id":"c","amount":0,"currency":"EUR"}"#,
                "amount",
            ),
            (
                br#"{"customer_id":"c","amount":2.5,"currency":"EUR"}"#,
                "must be JSON",
            ),
            (
                br#"{"customer_id":"c","amount":5,"currency":"eur"}"#,
                "currency",
            ),
            (
                br#"{"customer_id":"c","amount":5,"currency":"EURO"}"#,
                "currency",
            ),
            (
                br#"{"customer_id":"c","amount":5,"currency":"EUR","x":1}"#,
                "unknown field",
            ),
        ] {
            let err = parse_order(body).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }

    /// `pairs` with the two tables orders-api always needs.
    fn with_tables(pairs: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut all = vec![("IDEMPOTENCY_TABLE", "i"), ("ORDERS_TABLE", "o")];
        all.extend_from_slice(pairs);
        all
    }

    #[test]
    fn the_cut_over_is_off_unless_its_table_is_named_and_read_when_it_is() {
        let lookup = idempotency_engine::lookup_in;
        let off = Config::from_lookup(lookup(&with_tables(&[]))).unwrap();
        assert_eq!(off.powertools, None);
        let empty = Config::from_lookup(lookup(&with_tables(&[
            ("IDEMPOTENCY_POWERTOOLS_TABLE", ""),
            ("IDEMPOTENCY_POWERTOOLS_KEY_PREFIX", ""),
            ("IDEMPOTENCY_POWERTOOLS_UNTIL", ""),
        ])))
        .unwrap();
        assert_eq!(
            empty.powertools, None,
            "empty is off: the template parameters' default"
        );
        for (until, epoch_s) in [
            ("2026-12-01T00:00:00Z", 1_796_083_200),
            ("2026-12-01T01:00:00+01:00", 1_796_083_200),
            ("2026-12-01T00:00:00.500Z", 1_796_083_200),
            ("2026-11-30t19:00:00-05:00", 1_796_083_200),
            ("2000-02-29T12:00:00Z", 951_825_600),
            ("1970-01-01T00:00:00Z", 0),
        ] {
            let on = Config::from_lookup(lookup(&with_tables(&[
                ("IDEMPOTENCY_POWERTOOLS_TABLE", "IdempotencyTable"),
                (
                    "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX",
                    "orders-api.app.lambda_handler",
                ),
                ("IDEMPOTENCY_POWERTOOLS_UNTIL", until),
            ])))
            .unwrap();
            let cutover = on.powertools.expect("the cut-over is on");
            assert_eq!(cutover.table, "IdempotencyTable");
            assert_eq!(cutover.key_prefix, "orders-api.app.lambda_handler");
            assert_eq!(
                cutover
                    .until
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs(),
                epoch_s,
                "{until}"
            );
        }
    }

    #[test]
    fn each_bad_cut_over_setting_is_refused_in_one_line_naming_its_variable() {
        let table = ("IDEMPOTENCY_POWERTOOLS_TABLE", "pt-table");
        let prefix = (
            "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX",
            "orders-api.app.lambda_handler",
        );
        let until = ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-12-01T00:00:00Z");
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[prefix, until],
                "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX is set but IDEMPOTENCY_POWERTOOLS_TABLE is not",
            ),
            (
                &[until],
                "IDEMPOTENCY_POWERTOOLS_UNTIL is set but IDEMPOTENCY_POWERTOOLS_TABLE is not",
            ),
            (
                &[("IDEMPOTENCY_POWERTOOLS_TABLE", "a b"), prefix, until],
                "IDEMPOTENCY_POWERTOOLS_TABLE=\"a b\" is not a DynamoDB table name",
            ),
            (
                &[table, until],
                "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX is not set but IDEMPOTENCY_POWERTOOLS_TABLE is",
            ),
            (
                &[
                    table,
                    ("IDEMPOTENCY_POWERTOOLS_KEY_PREFIX", "orders-api.app.h#abc"),
                    until,
                ],
                "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX=\"orders-api.app.h#abc\" holds a `#`",
            ),
            (
                &[table, prefix],
                "IDEMPOTENCY_POWERTOOLS_UNTIL is not set but IDEMPOTENCY_POWERTOOLS_TABLE is",
            ),
            (
                &[
                    table,
                    prefix,
                    ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-12-01"),
                ],
                "IDEMPOTENCY_POWERTOOLS_UNTIL=\"2026-12-01\" is not an RFC 3339 time",
            ),
            (
                &[
                    table,
                    prefix,
                    ("IDEMPOTENCY_POWERTOOLS_UNTIL", "1796083200"),
                ],
                "IDEMPOTENCY_POWERTOOLS_UNTIL=\"1796083200\" is not an RFC 3339 time",
            ),
            (
                &[
                    table,
                    prefix,
                    ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-13-01T00:00:00Z"),
                ],
                "IDEMPOTENCY_POWERTOOLS_UNTIL=\"2026-13-01T00:00:00Z\" is not an RFC 3339 time",
            ),
            (
                &[
                    table,
                    prefix,
                    ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-02-29T00:00:00Z"),
                ],
                "IDEMPOTENCY_POWERTOOLS_UNTIL=\"2026-02-29T00:00:00Z\" is not an RFC 3339 time",
            ),
            (
                &[
                    table,
                    prefix,
                    ("IDEMPOTENCY_POWERTOOLS_UNTIL", "2026-12-01T00:00:00"),
                ],
                "IDEMPOTENCY_POWERTOOLS_UNTIL=\"2026-12-01T00:00:00\" is not an RFC 3339 time",
            ),
            (
                &[
                    table,
                    prefix,
                    ("IDEMPOTENCY_POWERTOOLS_UNTIL", "1969-12-31T23:59:59Z"),
                ],
                "IDEMPOTENCY_POWERTOOLS_UNTIL=\"1969-12-31T23:59:59Z\" is not an RFC 3339 time",
            ),
        ];
        for (pairs, start) in cases {
            let err = Config::from_lookup(idempotency_engine::lookup_in(&with_tables(pairs)))
                .unwrap_err();
            assert!(err.starts_with(start), "{pairs:?}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }

    #[test]
    fn the_replica_wait_is_read_for_the_store() {
        let config = Config::from_lookup(idempotency_engine::lookup_in(&with_tables(&[
            ("IDEMPOTENCY_STORE_URL", "redis://primary:6379"),
            ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "1"),
            ("IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS", "250"),
        ])))
        .unwrap();
        assert_eq!(
            config.engine.redis_wait,
            Some(idempotency_engine::RedisWait {
                replicas: 1,
                timeout: Duration::from_millis(250)
            })
        );
        let err = Config::from_lookup(idempotency_engine::lookup_in(&with_tables(&[
            ("IDEMPOTENCY_STORE_URL", "redis://primary:6379"),
            ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "-1"),
        ])))
        .unwrap_err();
        assert!(
            err.starts_with("IDEMPOTENCY_REDIS_WAIT_REPLICAS=\"-1\""),
            "{err}"
        );
    }

    #[test]
    fn config_requires_tables_and_numbers() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let err = Config::from_lookup(env(&[("ORDERS_TABLE", "o")])).unwrap_err();
        assert!(err.contains("IDEMPOTENCY_TABLE"));
        let err = Config::from_lookup(env(&[
            ("IDEMPOTENCY_TABLE", "i"),
            ("ORDERS_TABLE", "o"),
            ("SIMULATED_PROVIDER_LATENCY_MS", "fast"),
        ]))
        .unwrap_err();
        assert!(err.contains("SIMULATED_PROVIDER_LATENCY_MS"));
        let ok = Config::from_lookup(env(&[
            ("IDEMPOTENCY_TABLE", "i"),
            ("ORDERS_TABLE", "o"),
            ("SIMULATED_PROVIDER_LATENCY_MS", "25"),
        ]))
        .unwrap();
        assert_eq!(ok.provider_latency, Duration::from_millis(25));
        assert_eq!(ok.expires_after, Duration::from_secs(86_400));
        assert_eq!(ok.offload, None, "no offload unless a bucket is named");
        assert_eq!(ok.wait_for_result, Duration::ZERO, "no wait unless asked");
        let wait = Config::from_lookup(env(&[
            ("IDEMPOTENCY_TABLE", "i"),
            ("ORDERS_TABLE", "o"),
            ("IDEMPOTENCY_WAIT_FOR_RESULT_MS", "8000"),
        ]))
        .unwrap();
        assert_eq!(wait.wait_for_result, Duration::from_secs(8));
        for bad in ["8s", "-1", "900001"] {
            let err = Config::from_lookup(move |name: &str| match name {
                "IDEMPOTENCY_TABLE" | "ORDERS_TABLE" => Some("t".to_owned()),
                "IDEMPOTENCY_WAIT_FOR_RESULT_MS" => Some(bad.to_owned()),
                _ => None,
            })
            .unwrap_err();
            assert!(
                err.contains("IDEMPOTENCY_WAIT_FOR_RESULT_MS"),
                "{bad}: {err}"
            );
        }
        let with_expiry = |expiry: &'static str| {
            move |name: &str| match name {
                "IDEMPOTENCY_TABLE" => Some("i".to_owned()),
                "ORDERS_TABLE" => Some("o".to_owned()),
                "IDEMPOTENCY_EXPIRES_AFTER_SECONDS" => Some(expiry.to_owned()),
                _ => None,
            }
        };
        // A record that expires as it is written, or in centuries (an
        // expiry past what the arithmetic and TTL hold), is a typo: refused
        // at start, by name.
        for absurd in ["0", "31536001", "18446744073709551615"] {
            let err = Config::from_lookup(with_expiry(absurd)).unwrap_err();
            assert!(
                err.contains("IDEMPOTENCY_EXPIRES_AFTER_SECONDS") && err.contains("31536000"),
                "{absurd}: {err}"
            );
        }
        let year = Config::from_lookup(with_expiry("31536000")).unwrap();
        assert_eq!(year.expires_after, Duration::from_secs(31_536_000));
        let offloaded = Config::from_lookup(env(&[
            ("IDEMPOTENCY_TABLE", "i"),
            ("ORDERS_TABLE", "o"),
            ("IDEMPOTENCY_OFFLOAD_BUCKET", "large-responses"),
        ]))
        .unwrap();
        assert_eq!(
            offloaded.offload,
            Some(Offload {
                bucket: "large-responses".into(),
                prefix: "orders-api/".into()
            })
        );
    }
}
