//! [`IdempotencyLayer`]: the middleware's configuration, and its factory.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method, Response, StatusCode};
use lambda_http::Body;
use tower::Layer;

use super::Idempotency;
use super::TenantSource;
use crate::config::IdempotencyConfig;
#[cfg(doc)]
use crate::config::DISABLED_ENV;
use crate::fingerprint::Fingerprinter;
use crate::metrics::{Event, Metrics};
use crate::record::Record;
use crate::store::Store;

/// The HTTP middleware's configuration: a `tower::Layer` that wraps a
/// handler in the [`Idempotency`] service.
///
/// Wrap any `lambda_http` handler (API Gateway REST and HTTP APIs, Function
/// URLs, ALB) or a whole router. For each request with a covered method (POST
/// and PATCH by default) and an `Idempotency-Key` header, the middleware claims
/// the key with one store write, runs the handler only if the claim succeeded,
/// stores the response, and replays it for retries:
///
/// | situation | response |
/// |---|---|
/// | first request with a key | the handler's response, stored |
/// | retry, same request, completed | the stored response + `Idempotent-Replayed: true` |
/// | retry while the first still runs | `409` [problem](crate::problem), `Retry-After`; with [`wait_for`](IdempotencyLayer::wait_for), the first request's response once it completes (or `409` when the wait ends first) |
/// | same key, different request | `422` problem |
/// | key missing (when required) or malformed | `400` problem |
/// | store unreachable | `503` problem, `Retry-After`; the handler does not run |
/// | handler error, 5xx, or a client error that may change (401, 403, 404, 408, 409, 425, 429, ...) | record released so a retry runs again ([`stored_by_default`](crate::http::stored_by_default); [`store_when`](IdempotencyLayer::store_when) changes it) |
/// | a tenant source is configured and finds no tenant | `401` problem |
/// | other methods | passed through untouched |
///
/// ```
/// use lambda_http::{service_fn, Body, Error, Request, Response};
/// use lambda_idempotency::{IdempotencyLayer, MemoryStore};
/// use tower::{Layer, Service, ServiceExt};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let handler = service_fn(|_req: Request| async {
///     Ok::<_, Error>(Response::builder().status(201).body(Body::from("created")).unwrap())
/// });
/// let mut service = IdempotencyLayer::new(MemoryStore::new()).layer(handler);
///
/// let request = || http::Request::post("/orders").header("Idempotency-Key", "k1")
///     .body(Body::from("{}")).unwrap();
/// let first = service.ready().await?.call(request()).await?;
/// assert_eq!(first.status(), 201);
/// let retry = service.ready().await?.call(request()).await?;
/// assert_eq!(retry.status(), 201);
/// assert_eq!(retry.headers()["idempotent-replayed"], "true");
/// # Ok::<(), Error>(()) }).unwrap();
/// ```
///
/// [`from_env`](Self::from_env) takes the deployment's options from the
/// environment; [`crate::http::idempotent`] wraps a handler with every
/// default in one call.
#[derive(Clone, Debug)]
pub struct IdempotencyLayer {
    pub(super) config: Config,
}

#[derive(Clone, Debug)]
pub(super) struct Config {
    /// The options shared with the event path.
    pub(super) shared: IdempotencyConfig,
    pub(super) methods: Vec<Method>,
    /// Were the methods named ([`IdempotencyLayer::methods`]), or are they
    /// the default rule?
    pub(super) methods_named: bool,
    pub(super) header: HeaderName,
    /// Where the key is read when not from `header`: a JSON pointer into
    /// the request body ([`IdempotencyLayer::key_from_body`]).
    pub(super) body_key: Option<String>,
    pub(super) require_key: bool,
    pub(super) tenant: TenantSource,
    pub(super) fingerprinter: Fingerprinter,
    pub(super) store_server_errors: bool,
    pub(super) store_when: Option<StatusFn>,
    pub(super) in_progress_retry_after: Duration,
    pub(super) unavailable_retry_after: Duration,
    pub(super) replay_hook: Option<HookFn>,
}

type ReplayHook = dyn Fn(&mut Response<Body>, &Record) + Send + Sync;

#[derive(Clone)]
pub(super) struct StatusFn(pub(super) Arc<dyn Fn(StatusCode) -> bool + Send + Sync>);

impl std::fmt::Debug for StatusFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreWhen")
    }
}

#[derive(Clone)]
pub(super) struct HookFn(pub(super) Arc<ReplayHook>);

impl std::fmt::Debug for HookFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplayHook")
    }
}

impl Config {
    pub(super) fn count(&self, event: Event) {
        self.shared.count(event);
    }

    /// A request the layer lets through because its method is not covered:
    /// when it carries a key with a method that changes things (PUT,
    /// DELETE) and the methods are the default rule, whoever wrapped the
    /// handler may believe it protected. Counted every time
    /// ([`Event::UncoveredKey`]), logged once per process.
    pub(super) fn note_uncovered(&self, method: &Method, has_key: bool) {
        if self.methods_named || method.is_safe() || !has_key {
            return;
        }
        self.count(Event::UncoveredKey);
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(
                %method,
                "a {method} request carried an idempotency key, but the layer covers only POST \
                 and PATCH by default: it ran unprotected. Cover {method} with \
                 IdempotencyLayer::methods, or name the methods there if this is meant \
                 (logged once; counted as UncoveredKey)"
            );
        }
    }
}

impl IdempotencyLayer {
    /// Defaults: POST and PATCH covered, header `Idempotency-Key`, key optional,
    /// anonymous tenant, whole-body fingerprint, records kept 24 hours, lease =
    /// Lambda deadline + 2 s capped at 15 minutes, 5xx responses released.
    pub fn new(store: impl Store + 'static) -> Self {
        Self::with_config(IdempotencyConfig::new(store))
    }

    /// The middleware with the options it shares with the event path
    /// (store, namespace, expiry, leases, local cache, metrics, disable
    /// switch) taken from `config`, and the HTTP defaults for the rest.
    pub fn with_config(config: IdempotencyConfig) -> Self {
        IdempotencyLayer {
            config: Config {
                shared: config,
                methods: vec![Method::POST, Method::PATCH],
                methods_named: false,
                header: HeaderName::from_static("idempotency-key"),
                body_key: None,
                require_key: false,
                tenant: TenantSource::anonymous(),
                fingerprinter: Fingerprinter::new(),
                store_server_errors: false,
                store_when: None,
                in_progress_retry_after: Duration::from_secs(1),
                unavailable_retry_after: Duration::from_secs(1),
                replay_hook: None,
            },
        }
    }

    /// A layer with the options a deployment sets in the environment
    /// ([`IdempotencyConfig::from_env`], read the same way as
    /// [`IdempotentFunction::from_env`](crate::event::IdempotentFunction::from_env)):
    /// [`DISABLED_ENV`] (`IDEMPOTENCY_DISABLED=true`) turns it off for local
    /// tests; its former name, `LAMBDA_IDEMPOTENCY_DISABLED`, is still read
    /// when it is unset, with a warning. Every variable:
    /// [`settings`](crate::settings).
    ///
    /// # Errors
    ///
    /// A variable whose value is not what it accepts, named.
    pub fn from_env(store: impl Store + 'static) -> Result<Self, crate::error::Error> {
        Ok(Self::with_config(IdempotencyConfig::from_env(store)?))
    }

    /// The options shared with the event path.
    pub fn config(&self) -> &IdempotencyConfig {
        &self.config.shared
    }

    /// The methods the middleware covers (default `POST` and `PATCH`),
    /// replacing the default: name every one, the defaults included. Others
    /// pass through to the handler unprotected. Until they are named here,
    /// a key sent with another method that changes things (PUT, DELETE) is
    /// counted as [`Event::UncoveredKey`] and logged once.
    ///
    /// ```
    /// use lambda_http::http::Method;
    /// use lambda_idempotency::{IdempotencyLayer, MemoryStore};
    ///
    /// // PUT covered too.
    /// let layer = IdempotencyLayer::new(MemoryStore::new())
    ///     .methods([Method::POST, Method::PATCH, Method::PUT]);
    /// # let _ = layer;
    /// ```
    pub fn methods<I: IntoIterator<Item = Method>>(mut self, methods: I) -> Self {
        self.config.methods = methods.into_iter().collect();
        self.config.methods_named = true;
        self
    }

    /// The key header (default `Idempotency-Key`).
    pub fn header_name(mut self, name: HeaderName) -> Self {
        self.config.header = name;
        self.config.body_key = None;
        self
    }

    /// Read the key from the request's JSON body at `pointer` (RFC 6901:
    /// `/id`, `/data/object/id`) instead of a header, as webhook senders
    /// (payment providers, Git hosts, chat platforms) send their event id.
    /// A string is the key as it is, an integer its decimal text, validated
    /// as a header key is (`400` when malformed). A body that is not JSON,
    /// or holds nothing at `pointer`, is a request without a key: `400` with
    /// [`require_key(true)`](Self::require_key), else passed through. The
    /// scope (tenant, method, route), the fingerprint and every other answer
    /// are as with the header; [`header_name`](Self::header_name) goes back
    /// to a header.
    ///
    /// ```
    /// use lambda_idempotency::{IdempotencyLayer, MemoryStore};
    ///
    /// let layer = IdempotencyLayer::new(MemoryStore::new())
    ///     .key_from_body("/data/id")
    ///     .require_key(true);
    /// ```
    ///
    /// # Panics
    ///
    /// When `pointer` is not a JSON pointer (`id` where `/id` is meant): a
    /// configuration error, found when the function starts.
    pub fn key_from_body(mut self, pointer: impl Into<String>) -> Self {
        let pointer = pointer.into();
        if let Err(e) = crate::json::check_pointer(&pointer) {
            panic!("IdempotencyLayer::key_from_body: {e}");
        }
        self.config.body_key = Some(pointer);
        self
    }

    /// Answer `400` (a problem document) when a covered request has no key,
    /// so no client skips the protection by omission. Off by default: a
    /// covered request without a key then runs the handler unprotected, as
    /// before; leave it off on an existing API whose clients do not send the
    /// key yet. A malformed key is a `400` either way.
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

    /// A namespace mixed into every record id, for services sharing one
    /// store ([`IdempotencyConfig::namespace`]).
    pub fn namespace(self, namespace: impl Into<String>) -> Self {
        self.map_config(|config| config.namespace(namespace))
    }

    /// How long a completed record replays (default 24 hours;
    /// [`IdempotencyConfig::expires_after`]).
    pub fn expires_after(self, ttl: Duration) -> Self {
        self.map_config(|config| config.expires_after(ttl))
    }

    /// Upper bound of a lease (default 15 minutes, Lambda's longest
    /// timeout), and the lease where there is no deadline
    /// ([`IdempotencyConfig::max_lease`]).
    pub fn max_lease(self, lease: Duration) -> Self {
        self.map_config(|config| config.max_lease(lease))
    }

    /// Time added to the invocation's deadline before a lease may be taken
    /// over (default 2 s; [`IdempotencyConfig::lease_margin`]).
    pub fn lease_margin(self, margin: Duration) -> Self {
        self.map_config(|config| config.lease_margin(margin))
    }

    /// Emit CloudWatch EMF metrics: claims, replays, conflicts, mismatches,
    /// fenced writes, releases, store errors, cache hits, oversized
    /// responses ([`IdempotencyConfig::metrics`]). Off by default.
    pub fn metrics(self, metrics: Metrics) -> Self {
        self.map_config(|config| config.metrics(metrics))
    }

    /// Let a retry that finds the same request still in progress wait up to
    /// `max_wait` for that request's response and answer it as a replay
    /// (byte for byte, with `Idempotent-Replayed: true`), instead of a `409`
    /// at once: a client whose first attempt timed out gets its answer from
    /// the retry ([`IdempotencyConfig::wait_for`], which says how it polls
    /// and what bounds it). Off by default; zero turns it off.
    ///
    /// - Never past the invocation's deadline (from the Lambda context)
    ///   less 1 s; when the wait ends first, `409` with `Retry-After`.
    /// - The same key with a different request answers `422` at once.
    /// - When the first request is released meanwhile (its handler failed,
    ///   or answered a status that is not stored), the waiting retry claims
    ///   the key and runs the handler, as a retry then would; one the
    ///   sweeper failed replays the sweeper's stored problem.
    /// - Each waiting request holds its Lambda invocation (billed duration)
    ///   and makes one store read per poll; `BENCHMARKS.md` gives both per
    ///   engine.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lambda_idempotency::{IdempotencyLayer, MemoryStore};
    ///
    /// let layer = IdempotencyLayer::new(MemoryStore::new()).wait_for(Duration::from_secs(8));
    /// # let _ = layer;
    /// ```
    pub fn wait_for(self, max_wait: Duration) -> Self {
        self.map_config(|config| config.wait_for(max_wait))
    }

    /// Set options of the shared config this layer holds.
    fn map_config(mut self, set: impl FnOnce(IdempotencyConfig) -> IdempotencyConfig) -> Self {
        self.config.shared = set(self.config.shared);
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
    /// retry runs the handler again (default [`stored_by_default`](super::stored_by_default); 5xx are
    /// also stored when [`store_server_errors`](Self::store_server_errors) is
    /// on). Handler errors (`Err`) are always released.
    ///
    /// ```
    /// use lambda_idempotency::{IdempotencyLayer, MemoryStore, http::stored_by_default};
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
    /// `max_age`, so a warm instance replays them without a store request.
    /// Off by default.
    pub fn local_cache(mut self, entries: usize, max_age: Duration) -> Self {
        self.config.shared = self.config.shared.local_cache(entries, max_age);
        self
    }

    /// Bound the local cache by the bytes of the responses it holds (default
    /// [`DEFAULT_MAX_BYTES`](crate::cache::DEFAULT_MAX_BYTES)); least recently
    /// used entries make room, a response larger than the budget is not
    /// cached. Before or after [`local_cache`](Self::local_cache), which
    /// turns the cache on (a budget alone does not).
    pub fn local_cache_max_bytes(mut self, max_bytes: usize) -> Self {
        self.config.shared = self.config.shared.local_cache_max_bytes(max_bytes);
        self
    }

    /// Adjust every replayed response (after `Idempotent-Replayed` is set), for
    /// example to add a header.
    pub fn replay_hook<F>(mut self, hook: F) -> Self
    where
        F: Fn(&mut Response<Body>) + Send + Sync + 'static,
    {
        self.config.replay_hook = Some(HookFn(Arc::new(move |response, _| hook(response))));
        self
    }

    /// Like [`replay_hook`](Self::replay_hook), with the completed record
    /// the response replays from (its attempt, expiry, fingerprint): for
    /// example, an `Age` header from when the record expires.
    pub fn replay_hook_with_record<F>(mut self, hook: F) -> Self
    where
        F: Fn(&mut Response<Body>, &Record) + Send + Sync + 'static,
    {
        self.config.replay_hook = Some(HookFn(Arc::new(hook)));
        self
    }

    /// Turn the middleware off (every request passes through), for local
    /// tests; [`from_env`](Self::from_env) sets it from [`DISABLED_ENV`].
    pub fn disabled(mut self, disabled: bool) -> Self {
        self.config.shared = self.config.shared.disabled(disabled);
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
        self.config.shared.warn_disabled();
        Idempotency::new(inner, Arc::new(self.config.clone()))
    }
}
