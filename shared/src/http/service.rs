//! [`Idempotency`]: the middleware service, and what it does with a request.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use http::{HeaderValue, Response};
use lambda_http::{Body, IntoResponse, Request, RequestExt};
use tower::Service;
use tracing::Instrument;

use super::layer::{Config, HookFn, StatusFn};
use super::{route_of, Tenant};
use super::{stored_by_default, ResponseFuture, REPLAYED_HEADER};
use crate::claim::{self, Found};
use crate::clock::{millis, now_ms};
use crate::context::IdempotencyContext;
use crate::cutover::{self, PowertoolsKey, Shape};
use crate::error::{Error, ErrorKind};
use crate::key;
use crate::metrics::Event;
use crate::problem;
use crate::record::{Record, Status, StoredResponse};
use crate::scope::{normalize_path, record_id};
use crate::store::{ClaimRequest, CompleteRequest, Completion, Lease};

/// The middleware service made by [`IdempotencyLayer`](crate::IdempotencyLayer),
/// whose docs say what it answers.
#[derive(Clone, Debug)]
pub struct Idempotency<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> Idempotency<S> {
    pub(super) fn new(inner: S, config: Arc<Config>) -> Self {
        Idempotency { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
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
    type Future = ResponseFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // The clone is not ready; keep the ready one for this call (tower's rule).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        ResponseFuture::new(async move {
            // One metrics line for the whole request (crate::metrics).
            let held = Arc::clone(&config);
            crate::metrics::gathered(held.shared.metrics.as_ref(), handle(config, inner, req)).await
        })
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
    if config.shared.disabled {
        return Ok(inner.call(req).await?.into_response().await);
    }
    if !config.methods.contains(req.method()) {
        let has_key = config.body_key.is_none() && req.headers().contains_key(&config.header);
        config.note_uncovered(req.method(), has_key);
        return Ok(inner.call(req).await?.into_response().await);
    }
    let key = match read_key(&config, &req) {
        Ok(Some(key)) => key,
        Ok(None) if config.require_key => {
            return Ok(problem::response(
                problem::KEY_MISSING,
                &format!(
                    "{} {} requires {}; send a unique value (a UUID) and reuse it when you \
                     retry the same request",
                    req.method(),
                    req.uri().path(),
                    key_source(&config)
                ),
            ))
        }
        Ok(None) => return Ok(inner.call(req).await?.into_response().await),
        Err(err) => return Ok(problem::response(problem::KEY_INVALID, &err.to_string())),
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
        &config.shared.namespace,
        tenant.as_deref(),
        &method,
        &route_of(&req),
        key.as_str(),
    );
    // Every value of a repeated fingerprinted header counts, in order.
    let fingerprint = config.fingerprinter.fingerprint_request(
        &method,
        &path,
        req.uri().query(),
        req.headers(),
        req.body().as_ref(),
    );
    // Every log line of this request carries the hashed record id, never the
    // raw key or body.
    let span = tracing::info_span!("idempotency", record_id = %id);

    let now = now_ms();
    if let Some(cached) = config
        .shared
        .cache
        .as_ref()
        .and_then(|c| c.get(&id, now / 1000))
    {
        return Ok(span.in_scope(|| {
            if cached.fingerprint == fingerprint {
                config.count(Event::CacheHit);
                tracing::debug!("idempotent response replayed from the local cache");
                replay(&config, &cached)
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
        config.shared.leases,
        config.shared.expires_after,
    ) {
        Ok(started) => started,
        Err(err) => return Ok(span.in_scope(|| unavailable(&config, &err))),
    };
    if capped {
        config.count(Event::LeaseCapped);
    }
    let powertools = || powertools_key(&config, &req);
    let lease = match cutover::claim(&config.shared, &claim, Shape::Http, powertools)
        .instrument(span.clone())
        .await
    {
        Err(err) => return Ok(span.in_scope(|| unavailable(&config, &err))),
        Ok(Found::Claimed(lease)) => lease,
        Ok(found) => return Ok(span.in_scope(|| answer_existing(&config, found))),
    };
    config.count(Event::Claimed);
    // The hot path logs at debug (logs are billed per byte); a takeover of
    // an earlier attempt is rare and worth an info line.
    span.in_scope(|| {
        if lease.attempt > 1 {
            tracing::info!(
                attempt = lease.attempt,
                resumes_from = lease.recovered.as_ref().map(|c| c.name.as_str()),
                "idempotency key taken over from an earlier attempt"
            )
        } else {
            tracing::debug!("idempotency key claimed")
        }
    });

    let context = IdempotencyContext::from_lease(config.shared.store.clone(), lease.clone());
    req.extensions_mut().insert(context.clone());
    let called = AssertUnwindSafe(async { inner.call(req).await })
        .catch_unwind()
        .instrument(span.clone())
        .await;
    let response = match called {
        Ok(Ok(response)) => response.into_response().await,
        Ok(Err(err)) => {
            give_up(&config, &lease, &context, "the handler returned an error")
                .instrument(span)
                .await;
            return Err(err);
        }
        Err(panic) => {
            // Free the key for the retry now rather than at the lease's end,
            // then let the panic go on to the runtime as it would have.
            give_up(&config, &lease, &context, "the handler panicked")
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
        give_up(
            config,
            lease,
            context,
            "the handler answered with a status that is not stored",
        )
        .await;
        return Ok(response);
    }
    let stored = StoredResponse::from_http(&response);
    let expires_at = (now_ms() / 1000).saturating_add(config.shared.expires_after.as_secs());
    let writes = context.take_writes();
    let transactional = !writes.is_empty();
    match config
        .shared
        .store
        .complete(CompleteRequest::new(lease, &stored, expires_at).with_writes(writes))
        .await
    {
        Ok(Completion::Stored) => {
            tracing::debug!(
                attempt = lease.attempt,
                status = status.as_u16(),
                transactional,
                "idempotent response stored"
            );
            if let Some(cache) = &config.shared.cache {
                cache.put(Record {
                    id: lease.record_id.clone(),
                    status: Status::Completed,
                    fingerprint: fingerprint.to_owned(),
                    attempt: lease.attempt,
                    owner: lease.owner.clone(),
                    lease_expires_at_ms: 0,
                    expires_at_s: expires_at,
                    response: Some(stored),
                    checkpoint: None,
                });
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
        Err(err) if err.kind() == ErrorKind::RecordGone => {
            // Released by an operator (or expired) while the handler ran:
            // nothing is stored, so a duplicate runs again under a new claim.
            config.count(Event::FencedWrite);
            tracing::warn!(attempt = lease.attempt, error = %err, "completion not stored: the record is gone; this response is not replayed");
            if transactional {
                return Ok(problem::response(
                    problem::TRANSACTION_CANCELLED,
                    "this request's idempotency record was released before its writes \
                     committed, so nothing was written; retry with the same Idempotency-Key \
                     to run it again",
                ));
            }
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
        Found::Mismatch(_) => {
            config.count(Event::FingerprintMismatch);
            key_reused()
        }
        Found::Completed(record) => match &record.response {
            Some(_) => {
                config.count(Event::Replayed);
                tracing::debug!("idempotent response replayed");
                let response = replay(config, &record);
                if let Some(cache) = &config.shared.cache {
                    cache.put(record);
                }
                response
            }
            // A completed record always has its response (the store's
            // decoding makes sure); an in-progress answer is the safe one.
            None => in_progress(config, Duration::ZERO),
        },
        Found::InProgress { retry_after, .. } => in_progress(config, retry_after),
        // Answered by the caller before this is called.
        Found::Claimed(_) => in_progress(config, Duration::ZERO),
    }
}

fn in_progress(config: &Config, lease_left: Duration) -> Response<Body> {
    config.count(Event::InProgressConflict);
    let after = millis(lease_left)
        .div_ceil(1000)
        .min(config.in_progress_retry_after.as_secs());
    tracing::debug!("idempotency key in progress");
    problem::response_retry_after(
        problem::IN_PROGRESS,
        "a request with this Idempotency-Key is still being processed; retry after the \
         number of seconds in Retry-After to get its response",
        after,
    )
}

/// The response a completed `record` replays (it has one: the callers
/// check), with the hook applied.
fn replay(config: &Config, record: &Record) -> Response<Body> {
    let mut response = record
        .response
        .as_ref()
        .map(StoredResponse::to_http)
        .unwrap_or_default();
    response
        .headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    if let Some(HookFn(hook)) = &config.replay_hook {
        hook(&mut response, record);
    }
    response
}

fn key_reused() -> Response<Body> {
    tracing::debug!("idempotency key reused with a different request");
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

/// Give the claim up after a failure (see [`claim::give_up`]), counted.
async fn give_up(config: &Config, lease: &Lease, context: &IdempotencyContext, why: &str) {
    if let Some(released) = claim::give_up(config.shared.store.as_ref(), lease, context, why).await
    {
        config.count(released.event());
    }
}

async fn release(config: &Config, lease: &Lease, why: &str) {
    config.count(
        claim::release(config.shared.store.as_ref(), lease, why)
            .await
            .event(),
    );
}

/// The request's key, from its header or, with
/// [`key_from_body`](super::IdempotencyLayer::key_from_body), from its JSON
/// body; `None` when it has none (a body nested too deep to read is an
/// error, not "none").
fn read_key(config: &Config, req: &Request) -> Result<Option<key::IdempotencyKey>, Error> {
    match &config.body_key {
        None => req
            .headers()
            .get(&config.header)
            .map(|value| key::parse_bytes(value.as_bytes()))
            .transpose(),
        Some(pointer) => key::from_body(req.body().as_ref(), pointer),
    }
}

/// What Powertools hashed for this request, for a cut-over (crate::cutover):
/// the key as its `event_key_jmespath` selected it (the header's text as
/// sent, quotes included, or the body's value at the pointer) and the body
/// as its `payload_validation_jmespath="body"` selects it.
fn powertools_key(config: &Config, req: &Request) -> Option<PowertoolsKey> {
    #[cfg(feature = "powertools")]
    {
        let records = config.shared.powertools.as_deref()?;
        let key = match &config.body_key {
            None => cutover::header_as_powertools_saw_it(req.headers().get(&config.header)?)?,
            Some(pointer) => serde_json::from_slice::<serde_json::Value>(req.body().as_ref())
                .ok()?
                .pointer(pointer)?
                .clone(),
        };
        let payload = records
            .validates_body()
            .then(|| cutover::body_as_powertools_saw_it(req.body()));
        Some(PowertoolsKey { key, payload })
    }
    #[cfg(not(feature = "powertools"))]
    {
        let _ = (config, req);
        None
    }
}

/// Where the key is expected, for a `400` that says what to send.
fn key_source(config: &Config) -> String {
    match &config.body_key {
        None => format!("an `{}` header", config.header),
        Some(pointer) => format!("an idempotency key at `{pointer}` in its JSON body"),
    }
}
