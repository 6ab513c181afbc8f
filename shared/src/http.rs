//! The HTTP middleware: [`IdempotencyLayer`] and the [`Idempotency`] service.
//!
//! Wrap any `lambda_http` handler (API Gateway REST and HTTP APIs, Function
//! URLs, ALB) or a whole router. For each request with a covered method (POST
//! and PATCH by default) and an `Idempotency-Key` header, the middleware claims
//! the key with one store write, runs the handler only if the claim succeeded,
//! stores the response, and replays it for retries:
//!
//! | situation | response |
//! |---|---|
//! | first request with a key | the handler's response, stored |
//! | retry, same request, completed | the stored response + `Idempotent-Replayed: true` |
//! | retry while the first still runs | `409` [problem], `Retry-After` |
//! | same key, different request | `422` problem |
//! | key missing (when required) or malformed | `400` problem |
//! | store unreachable | `503` problem, `Retry-After`; the handler does not run |
//! | handler error, 5xx, or a client error that may change (401, 403, 404, 408, 409, 425, 429, ...) | record released so a retry runs again ([`stored_by_default`]; [`store_when`](IdempotencyLayer::store_when) changes it) |
//! | a tenant source is configured and finds no tenant | `401` problem |
//! | other methods | passed through untouched |
//!
//! ```
//! use lambda_http::{service_fn, Body, Error, Request, Response};
//! use lambda_idempotency::{IdempotencyLayer, MemoryStore};
//! use tower::{Layer, Service, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let handler = service_fn(|_req: Request| async {
//!     Ok::<_, Error>(Response::builder().status(201).body(Body::from("created")).unwrap())
//! });
//! let mut service = IdempotencyLayer::new(MemoryStore::new()).layer(handler);
//!
//! let request = || http::Request::post("/orders").header("Idempotency-Key", "k1")
//!     .body(Body::from("{}")).unwrap();
//! let first = service.ready().await?.call(request()).await?;
//! assert_eq!(first.status(), 201);
//! let retry = service.ready().await?.call(request()).await?;
//! assert_eq!(retry.status(), 201);
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! # Ok::<(), Error>(()) }).unwrap();
//! ```

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use http::{HeaderName, HeaderValue, Method, Response, StatusCode};
use lambda_http::{Body, IntoResponse, Request, RequestExt};
use tower::{Layer, Service};
use tracing::Instrument;

use crate::cache::LocalCache;
use crate::claim::{self, millis, now_ms, Found, Leases, Release};
use crate::context::IdempotencyContext;
use crate::error::{Error, ErrorKind};
use crate::fingerprint::Fingerprinter;
use crate::key;
use crate::metrics::{Event, Metrics};
use crate::problem;
use crate::record::StoredResponse;
use crate::scope::{normalize_path, record_id, route_of, Tenant, TenantSource};
use crate::store::{ClaimRequest, Completion, Lease, Store};

/// Header added to replayed responses.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// Configuration and factory of the [`Idempotency`] middleware.
#[derive(Clone, Debug)]
pub struct IdempotencyLayer {
    config: Config,
}

#[derive(Clone, Debug)]
struct Config {
    store: Arc<dyn Store>,
    methods: Vec<Method>,
    header: HeaderName,
    require_key: bool,
    tenant: TenantSource,
    fingerprinter: Fingerprinter,
    namespace: String,
    expires_after: Duration,
    leases: Leases,
    store_server_errors: bool,
    store_when: Option<StatusFn>,
    in_progress_retry_after: Duration,
    unavailable_retry_after: Duration,
    cache: Option<Arc<LocalCache>>,
    metrics: Option<Metrics>,
    replay_hook: Option<HookFn>,
    disabled: bool,
}

type ReplayHook = dyn Fn(&mut Response<Body>) + Send + Sync;

#[derive(Clone)]
struct StatusFn(Arc<dyn Fn(StatusCode) -> bool + Send + Sync>);

impl std::fmt::Debug for StatusFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreWhen")
    }
}

/// Is a response with `status` stored and replayed by default? Yes for 2xx
/// and 3xx, and for the client errors that are final for the same request:
/// 400, 405, 410, 413, 414, 415 and 422. Everything else is released so a
/// retry runs the handler again: 5xx, and client errors that depend on
/// something else than the request and may change (401, 403, 404, 408, 409,
/// 412, 425, 429, ...). Change it with
/// [`IdempotencyLayer::store_when`].
pub fn stored_by_default(status: StatusCode) -> bool {
    status.is_success()
        || status.is_redirection()
        || matches!(status.as_u16(), 400 | 405 | 410 | 413 | 414 | 415 | 422)
}

#[derive(Clone)]
struct HookFn(Arc<ReplayHook>);

impl std::fmt::Debug for HookFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplayHook")
    }
}

impl Config {
    fn count(&self, event: Event) {
        if let Some(metrics) = &self.metrics {
            metrics.emit(event);
        }
    }
}

/// Set this environment variable to `true` (or `1`, `yes`) to turn the
/// middleware off, for local tests of the handler alone. Read by
/// [`IdempotencyLayer::from_env`]; a warning is logged when it is on.
pub const DISABLED_ENV: &str = "LAMBDA_IDEMPOTENCY_DISABLED";

/// Does [`DISABLED_ENV`] turn the middleware off in this process?
pub fn disabled_from_env() -> bool {
    disabled_by(std::env::var(DISABLED_ENV).ok().as_deref())
}

/// The rule of [`DISABLED_ENV`]: `1`, `true` or `yes` in any case, spaces
/// around ignored; anything else (or unset) leaves the middleware on.
fn disabled_by(value: Option<&str>) -> bool {
    value.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

impl IdempotencyLayer {
    /// Defaults: POST and PATCH covered, header `Idempotency-Key`, key optional,
    /// anonymous tenant, whole-body fingerprint, records kept 24 hours, lease =
    /// Lambda deadline + 2 s capped at 15 minutes, 5xx responses released.
    pub fn new(store: impl Store + 'static) -> Self {
        IdempotencyLayer {
            config: Config {
                store: Arc::new(store),
                methods: vec![Method::POST, Method::PATCH],
                header: HeaderName::from_static("idempotency-key"),
                require_key: false,
                tenant: TenantSource::anonymous(),
                fingerprinter: Fingerprinter::new(),
                namespace: String::new(),
                expires_after: Duration::from_secs(24 * 3600),
                leases: Leases::default(),
                store_server_errors: false,
                store_when: None,
                in_progress_retry_after: Duration::from_secs(1),
                unavailable_retry_after: Duration::from_secs(1),
                cache: None,
                metrics: None,
                replay_hook: None,
                disabled: false,
            },
        }
    }

    /// [`new`](Self::new), switched off when the [`DISABLED_ENV`]
    /// environment variable says so (see [`disabled_from_env`]): what a
    /// function wants so that `LAMBDA_IDEMPOTENCY_DISABLED=true` turns it off
    /// for local tests.
    pub fn from_env(store: impl Store + 'static) -> Self {
        Self::new(store).disabled(disabled_from_env())
    }

    /// The methods the middleware covers; others pass through.
    pub fn methods<I: IntoIterator<Item = Method>>(mut self, methods: I) -> Self {
        self.config.methods = methods.into_iter().collect();
        self
    }

    /// The key header (default `Idempotency-Key`).
    pub fn header_name(mut self, name: HeaderName) -> Self {
        self.config.header = name;
        self
    }

    /// Answer `400` when a covered request has no key (default: pass it through
    /// unprotected).
    pub fn require_key(mut self, required: bool) -> Self {
        self.config.require_key = required;
        self
    }

    /// Where the tenant comes from (default: one anonymous scope).
    pub fn tenant(mut self, source: TenantSource) -> Self {
        self.config.tenant = source;
        self
    }

    /// How requests are fingerprinted (default: method, path, whole body).
    pub fn fingerprint(mut self, fingerprinter: Fingerprinter) -> Self {
        self.config.fingerprinter = fingerprinter;
        self
    }

    /// A namespace mixed into every record id, for sharing one table between
    /// services whose paths could collide.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.config.namespace = namespace.into();
        self
    }

    /// How long a completed record replays (default 24 hours).
    pub fn expires_after(mut self, ttl: Duration) -> Self {
        self.config.expires_after = ttl;
        self
    }

    /// Upper bound of a lease (default 15 minutes, Lambda's longest timeout).
    /// Outside Lambda, where there is no deadline, the lease is this long.
    pub fn max_lease(mut self, lease: Duration) -> Self {
        self.config.leases.max_lease = lease;
        self
    }

    /// Time added to the Lambda deadline before a lease may be taken over
    /// (default 2 s), covering clock skew and the runtime's own shutdown.
    pub fn lease_margin(mut self, margin: Duration) -> Self {
        self.config.leases.margin = margin;
        self
    }

    /// Store 5xx responses and replay them, instead of releasing the record so
    /// the next retry runs the handler again (default: release). Handler errors
    /// (`Err`) are always released: there is no response to replay.
    pub fn store_server_errors(mut self, store: bool) -> Self {
        self.config.store_server_errors = store;
        self
    }

    /// Which statuses are stored and replayed; any other is released so a
    /// retry runs the handler again (default [`stored_by_default`]; 5xx are
    /// also stored when [`store_server_errors`](Self::store_server_errors) is
    /// on). Handler errors (`Err`) are always released.
    ///
    /// ```
    /// use lambda_idempotency::{http::stored_by_default, IdempotencyLayer, MemoryStore};
    ///
    /// // This API's 409 means "already cancelled": final, so replay it.
    /// let layer = IdempotencyLayer::new(MemoryStore::new())
    ///     .store_when(|status| status == 409 || stored_by_default(status));
    /// # let _ = layer;
    /// ```
    pub fn store_when<F>(mut self, stored: F) -> Self
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.config.store_when = Some(StatusFn(Arc::new(stored)));
        self
    }

    /// Longest `Retry-After` of a `409` (default 1 s); shorter when the lease
    /// ends sooner.
    pub fn in_progress_retry_after(mut self, after: Duration) -> Self {
        self.config.in_progress_retry_after = after;
        self
    }

    /// Keep up to `entries` completed records in process memory for at most
    /// `max_age`, so a warm instance replays them without a store request
    /// (see [`cache`](crate::cache)). Off by default.
    pub fn local_cache(mut self, entries: usize, max_age: Duration) -> Self {
        self.config.cache = Some(Arc::new(LocalCache::new(
            entries,
            max_age,
            crate::cache::DEFAULT_MAX_BYTES,
        )));
        self
    }

    /// Bound the local cache by the bytes of the responses it holds (default
    /// [`DEFAULT_MAX_BYTES`](crate::cache::DEFAULT_MAX_BYTES)); least recently
    /// used entries make room, a response larger than the budget is not
    /// cached. Only has an effect after [`local_cache`](Self::local_cache).
    pub fn local_cache_max_bytes(mut self, max_bytes: usize) -> Self {
        if let Some(cache) = &self.config.cache {
            self.config.cache = Some(Arc::new(cache.with_max_bytes(max_bytes)));
        }
        self
    }

    /// Emit CloudWatch EMF metrics (claimed, replayed, conflicts, mismatches,
    /// fenced writes, releases, store errors, cache hits, oversized responses).
    /// Off by default.
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.config.metrics = Some(metrics);
        self
    }

    /// Adjust every replayed response (after `Idempotent-Replayed` is set), for
    /// example to add a header.
    pub fn replay_hook<F>(mut self, hook: F) -> Self
    where
        F: Fn(&mut Response<Body>) + Send + Sync + 'static,
    {
        self.config.replay_hook = Some(HookFn(Arc::new(hook)));
        self
    }

    /// Turn the middleware off (every request passes through), for local
    /// tests; [`from_env`](Self::from_env) sets it from [`DISABLED_ENV`].
    pub fn disabled(mut self, disabled: bool) -> Self {
        self.config.disabled = disabled;
        self
    }

    /// `Retry-After` of a `503` (default 1 s).
    pub fn unavailable_retry_after(mut self, after: Duration) -> Self {
        self.config.unavailable_retry_after = after;
        self
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = Idempotency<S>;

    fn layer(&self, inner: S) -> Idempotency<S> {
        if self.config.disabled {
            tracing::warn!("lambda-idempotency is DISABLED ({DISABLED_ENV} or .disabled(true)): retries will run the handler again");
        }
        Idempotency {
            inner,
            config: Arc::new(self.config.clone()),
        }
    }
}

/// Wrap a handler function with the default configuration: the simple case.
///
/// ```no_run
/// use lambda_http::{Body, Error, Request, Response};
/// use lambda_idempotency::{idempotent, DynamoStore};
///
/// async fn create_order(_req: Request) -> Result<Response<Body>, Error> {
///     Ok(Response::builder().status(201).body(Body::from("{}"))?)
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), Error> {
///     let config = aws_config::load_from_env().await;
///     let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&config), "idempotency");
///     lambda_http::run(idempotent(store, create_order)).await
/// }
/// ```
pub fn idempotent<F>(
    store: impl Store + 'static,
    handler: F,
) -> Idempotency<tower::util::ServiceFn<F>> {
    IdempotencyLayer::new(store).layer(tower::service_fn(handler))
}

/// The middleware service; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Idempotency<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S, R> Service<Request> for Idempotency<S>
where
    S: Service<Request, Response = R> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: IntoResponse + Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // The clone is not ready; keep the ready one for this call (tower's rule).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        Box::pin(handle(config, inner, req))
    }
}

async fn handle<S, R>(
    config: Arc<Config>,
    mut inner: S,
    mut req: Request,
) -> Result<Response<Body>, S::Error>
where
    S: Service<Request, Response = R>,
    R: IntoResponse,
{
    if config.disabled || !config.methods.contains(req.method()) {
        return Ok(inner.call(req).await?.into_response().await);
    }
    let key = match req.headers().get(&config.header) {
        None if config.require_key => {
            return Ok(problem::response(
                problem::KEY_MISSING,
                &format!(
                    "{} {} requires an `{}` header; send a unique value (a UUID) and reuse it \
                     when you retry the same request",
                    req.method(),
                    req.uri().path(),
                    config.header
                ),
            ))
        }
        None => return Ok(inner.call(req).await?.into_response().await),
        Some(value) => match key::parse_bytes(value.as_bytes()) {
            Ok(key) => key,
            Err(err) => return Ok(problem::response(problem::KEY_INVALID, &err.to_string())),
        },
    };

    let tenant = match config.tenant.scope(&req) {
        Tenant::Known(tenant) => Some(tenant),
        Tenant::Anonymous => None,
        Tenant::Missing => {
            config.count(Event::TenantMissing);
            tracing::warn!(source = ?config.tenant, "covered request without a tenant refused");
            return Ok(problem::response(
                problem::TENANT_MISSING,
                "this API scopes idempotency keys per caller, and the request carries no caller \
                 identity (no authorizer, or its claim or field is absent); send the request \
                 through the API's authorizer",
            ));
        }
    };
    let method = req.method().as_str().to_owned();
    // The scope is the route the request matched, the fingerprint the path
    // as a router reads it: `/orders/` retries `/orders`.
    let path = normalize_path(req.uri().path()).into_owned();
    let id = record_id(
        &config.namespace,
        tenant.as_deref(),
        &method,
        &route_of(&req),
        key.as_str(),
    );
    let header_values: Vec<Option<&[u8]>> = config
        .fingerprinter
        .header_names()
        .iter()
        .map(|name| req.headers().get(name).map(HeaderValue::as_bytes))
        .collect();
    let fingerprint = config.fingerprinter.fingerprint_with_query(
        &method,
        &path,
        req.uri().query(),
        &header_values,
        req.body().as_ref(),
    );
    // Every log line of this request carries the hashed record id, never the
    // raw key or body.
    let span = tracing::info_span!("idempotency", record_id = %id);

    let now = now_ms();
    if let Some((cached_fingerprint, stored)) =
        config.cache.as_ref().and_then(|c| c.get(&id, now / 1000))
    {
        return Ok(span.in_scope(|| {
            if cached_fingerprint == fingerprint {
                config.count(Event::CacheHit);
                tracing::info!("idempotent response replayed from the local cache");
                replay(&config, &stored)
            } else {
                config.count(Event::FingerprintMismatch);
                key_reused()
            }
        }));
    }
    let deadline = req.lambda_context_ref().map(|c| c.deadline);
    let (claim, capped) = match ClaimRequest::start(
        id.clone(),
        fingerprint.clone(),
        deadline,
        config.leases,
        config.expires_after,
    ) {
        Ok(started) => started,
        Err(err) => return Ok(span.in_scope(|| unavailable(&config, &err))),
    };
    if capped {
        config.count(Event::LeaseCapped);
    }
    let lease = match claim::claim(config.store.as_ref(), &claim)
        .instrument(span.clone())
        .await
    {
        Err(err) => return Ok(span.in_scope(|| unavailable(&config, &err))),
        Ok(Found::Claimed(lease)) => lease,
        Ok(found) => return Ok(span.in_scope(|| answer_existing(&config, found))),
    };
    config.count(Event::Claimed);
    span.in_scope(|| {
        tracing::info!(
            attempt = lease.attempt,
            resumes_from = lease.recovered.as_ref().map(|c| c.name.as_str()),
            "idempotency key claimed"
        )
    });

    let context = IdempotencyContext::from_lease(config.store.clone(), lease.clone());
    req.extensions_mut().insert(context.clone());
    let called = AssertUnwindSafe(async { inner.call(req).await })
        .catch_unwind()
        .instrument(span.clone())
        .await;
    let response = match called {
        Ok(Ok(response)) => response.into_response().await,
        Ok(Err(err)) => {
            release(&config, &lease, "the handler returned an error")
                .instrument(span)
                .await;
            return Err(err);
        }
        Err(panic) => {
            // Free the key for the retry now rather than at the lease's end,
            // then let the panic go on to the runtime as it would have.
            release(&config, &lease, "the handler panicked")
                .instrument(span)
                .await;
            std::panic::resume_unwind(panic);
        }
    };
    finish(&config, &lease, &context, &fingerprint, response)
        .instrument(span)
        .await
}

/// Record the handler's response: release it when it asks for a retry,
/// otherwise store it (with any deferred writes, in one transaction).
async fn finish<E>(
    config: &Config,
    lease: &Lease,
    context: &IdempotencyContext,
    fingerprint: &str,
    response: Response<Body>,
) -> Result<Response<Body>, E> {
    let status = response.status();
    let stored = match &config.store_when {
        Some(StatusFn(stored)) => stored(status),
        None => stored_by_default(status),
    } || (config.store_server_errors && status.is_server_error());
    if !stored {
        // Deferred writes are dropped with the outcome: nothing of this attempt commits.
        context.take_writes();
        release(
            config,
            lease,
            "the handler answered with a status that is not stored",
        )
        .await;
        return Ok(response);
    }
    let stored = StoredResponse::from_http(&response);
    let expires_at = now_ms() / 1000 + config.expires_after.as_secs();
    let writes = context.take_writes();
    let transactional = !writes.is_empty();
    match config
        .store
        .complete_with_writes(lease, &stored, expires_at, writes)
        .await
    {
        Ok(Completion::Stored) => {
            tracing::info!(
                attempt = lease.attempt,
                status = status.as_u16(),
                transactional,
                "idempotent response stored"
            );
            if let Some(cache) = &config.cache {
                cache.put(&lease.record_id, fingerprint, stored, expires_at);
            }
        }
        Ok(Completion::Oversized { bytes }) => {
            config.count(Event::OversizedResponse);
            tracing::warn!(
                attempt = lease.attempt,
                bytes,
                "response too large to store; replays will get the response-too-large problem"
            );
        }
        Err(err) if err.is_fenced() => {
            config.count(Event::FencedWrite);
            tracing::warn!(
                attempt = lease.attempt,
                "completion fenced: a newer attempt took over this key"
            );
            if transactional {
                // Nothing of this attempt committed, so its response is not true.
                return Ok(problem::response_retry_after(
                    problem::IN_PROGRESS,
                    "this request was taken over by a newer attempt before its writes committed; \
                     retry to get that attempt's response",
                    config.in_progress_retry_after.as_secs(),
                ));
            }
            // The work is done and this response is its true outcome, so the
            // client gets it; the newer attempt's outcome is the one that replays.
        }
        Err(err) if err.kind() == ErrorKind::TransactionCancelled => {
            tracing::warn!(attempt = lease.attempt, error = %err, "transactional completion cancelled; nothing written");
            release(config, lease, "its transactional writes were cancelled").await;
            return Ok(problem::response(
                problem::TRANSACTION_CANCELLED,
                &err.to_string(),
            ));
        }
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::TransactionRejected | ErrorKind::InvalidConfig
            ) =>
        {
            // Refused before anything ran: nothing committed, so the key is
            // free for a retry (which fails the same way until the handler
            // is fixed, but never sits in progress).
            tracing::error!(attempt = lease.attempt, error = %err, "transactional completion refused as invalid; nothing written");
            release(
                config,
                lease,
                "its transactional writes were refused as invalid",
            )
            .await;
            return Ok(problem::response(
                problem::TRANSACTION_REJECTED,
                &err.to_string(),
            ));
        }
        Err(err) => {
            config.count(Event::StoreError);
            tracing::error!(attempt = lease.attempt, error = %err, "could not store the idempotent response");
            if transactional {
                // Unknown whether the transaction committed; do not claim success.
                return Ok(unavailable(config, &err));
            }
            // Not stored: the record stays in progress until its lease ends,
            // then a retry (or the sweeper) resolves it.
        }
    }
    Ok(response)
}

/// The answer to a request whose claim found the record held or done.
fn answer_existing(config: &Config, found: Found) -> Response<Body> {
    match found {
        Found::Mismatch => {
            config.count(Event::FingerprintMismatch);
            key_reused()
        }
        Found::Completed(record) => match &record.response {
            Some(stored) => {
                if let Some(cache) = &config.cache {
                    cache.put(
                        &record.id,
                        &record.fingerprint,
                        stored.clone(),
                        record.expires_at_s,
                    );
                }
                config.count(Event::Replayed);
                tracing::info!("idempotent response replayed");
                replay(config, stored)
            }
            // A completed record always has its response (the store's
            // decoding makes sure); an in-progress answer is the safe one.
            None => in_progress(config, Duration::ZERO),
        },
        Found::InProgress { retry_after } => in_progress(config, retry_after),
        // Answered by the caller before this is called.
        Found::Claimed(_) => in_progress(config, Duration::ZERO),
    }
}

fn in_progress(config: &Config, lease_left: Duration) -> Response<Body> {
    config.count(Event::InProgressConflict);
    let after = millis(lease_left)
        .div_ceil(1000)
        .min(config.in_progress_retry_after.as_secs());
    tracing::info!("idempotency key in progress");
    problem::response_retry_after(
        problem::IN_PROGRESS,
        "a request with this Idempotency-Key is still being processed; retry after the \
         number of seconds in Retry-After to get its response",
        after,
    )
}

fn replay(config: &Config, stored: &StoredResponse) -> Response<Body> {
    let mut response = stored.to_http();
    response
        .headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    if let Some(HookFn(hook)) = &config.replay_hook {
        hook(&mut response);
    }
    response
}

fn key_reused() -> Response<Body> {
    tracing::info!("idempotency key reused with a different request");
    problem::response(
        problem::KEY_REUSED,
        "this Idempotency-Key was first used with a different request (method, path, query \
         string or body); use a new key for a new request",
    )
}

fn unavailable(config: &Config, err: &Error) -> Response<Body> {
    config.count(Event::StoreError);
    tracing::error!(error = %err, "idempotency store unavailable; request refused");
    problem::response_retry_after(
        problem::STORE_UNAVAILABLE,
        "the idempotency store could not be reached, so the request was not processed; \
         retry with the same Idempotency-Key after Retry-After seconds",
        config.unavailable_retry_after.as_secs(),
    )
}

async fn release(config: &Config, lease: &Lease, why: &str) {
    config.count(
        match claim::release(config.store.as_ref(), lease, why).await {
            Release::Done => Event::Released,
            Release::Fenced => Event::FencedWrite,
            Release::Failed => Event::StoreError,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use tower::ServiceExt;

    fn layer() -> IdempotencyLayer {
        IdempotencyLayer::new(MemoryStore::new())
    }

    #[test]
    fn service_is_clone_and_send_for_run_concurrent() {
        fn assert_bounds<T: Clone + Send + Sync + 'static>(_: &T) {}
        let svc = layer().layer(tower::service_fn(|_req: Request| async {
            Ok::<_, lambda_http::Error>(Response::new(Body::Empty))
        }));
        assert_bounds(&svc);
    }

    #[test]
    fn the_disabled_variable_turns_the_middleware_off_only_when_it_says_so() {
        for value in ["1", "true", "TRUE", " yes ", "Yes"] {
            assert!(disabled_by(Some(value)), "{value:?}");
        }
        for value in [
            None,
            Some(""),
            Some("0"),
            Some("false"),
            Some("off"),
            Some("no"),
        ] {
            assert!(!disabled_by(value), "{value:?}");
        }
    }

    #[tokio::test]
    async fn new_is_on_whatever_the_environment_and_disabled_passes_through() {
        // `new` reads no environment: this holds even where the variable is set.
        assert!(!layer().config.disabled);
        let runs = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = runs.clone();
        let store = MemoryStore::new();
        let svc = IdempotencyLayer::new(store.clone())
            .disabled(true)
            .layer(tower::service_fn(move |_req: Request| {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Ok::<_, lambda_http::Error>(Response::new(Body::from("ok"))) }
            }));
        for _ in 0..2 {
            let req = http::Request::post("/orders")
                .header("idempotency-key", "k1")
                .body(Body::from("{}"))
                .unwrap();
            assert_eq!(svc.clone().oneshot(req).await.unwrap().status(), 200);
        }
        assert_eq!(
            runs.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "both ran"
        );
        assert_eq!(store.requests(), 0, "no store request");
    }

    #[tokio::test]
    async fn uncovered_methods_pass_through_without_store_requests() {
        let store = MemoryStore::new();
        let mut svc = IdempotencyLayer::new(store.clone())
            .require_key(true)
            .layer(tower::service_fn(|_req: Request| async {
                Ok::<_, lambda_http::Error>(Response::new(Body::from("ok")))
            }));
        let req = http::Request::get("/orders/1")
            .header("idempotency-key", "k")
            .body(Body::Empty)
            .unwrap();
        let res = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(res.status(), 200);
        assert!(res.headers().get(REPLAYED_HEADER).is_none());
        assert_eq!(store.requests(), 0);
    }
}
