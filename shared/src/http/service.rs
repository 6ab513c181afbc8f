//! [`Idempotency`]: the middleware service, and what it does with a request.

use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use http::{HeaderValue, Response};
use lambda_http::{Body, IntoResponse, Request, RequestExt};
use tower::Service;
use tracing::Instrument;

use super::layer::{Config, HookFn, StatusFn};
use super::{route_of, Tenant};
use super::{stored_by_default, ResponseFuture, REPLAYED_HEADER};
use crate::clock::millis;
use crate::error::{Error, ErrorKind};
use crate::key;
use crate::lifecycle::{self, Begun, Finished, Guard};
use crate::metrics::Event;
use crate::problem;
use crate::record::{Record, StoredBody, StoredResponse};
use crate::scope::{normalize_path, record_id};
use crate::store::ClaimOrigin;

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
    let deadline = req.lambda_context_ref().map(|c| c.deadline);
    let origin = || origin(&config, &req);
    let begun = lifecycle::begin(&config.shared, id, fingerprint, deadline, origin)
        .instrument(span.clone())
        .await;
    let guard = match begun {
        Err(err) => return Ok(span.in_scope(|| unavailable(&config, &err))),
        Ok(Begun::Run(guard)) => guard,
        Ok(begun) => return Ok(span.in_scope(|| answer_existing(&config, begun))),
    };
    req.extensions_mut().insert(guard.context().clone());
    let (guard, response) = guard
        .run(async { inner.call(req).await })
        .instrument(span.clone())
        .await?;
    let response = response.into_response().await;
    finish(&config, guard, response).instrument(span).await
}

/// Record the handler's response: give the key back when the status is
/// not stored (a retry runs again), otherwise store it (with any deferred
/// writes, in one transaction) and answer what that means for the client.
async fn finish<E>(
    config: &Config,
    guard: Guard<'_>,
    response: Response<Body>,
) -> Result<Response<Body>, E> {
    let status = response.status();
    let stored = match &config.store_when {
        Some(StatusFn(stored)) => stored(status),
        None => stored_by_default(status),
    } || (config.store_server_errors && status.is_server_error());
    if !stored {
        guard
            .abandon("the handler answered with a status that is not stored")
            .await;
        return Ok(response);
    }
    match guard.finish(StoredResponse::from_http(&response)).await {
        Finished::Stored | Finished::Oversized => Ok(response),
        // Nothing of this attempt committed, so its response is not true.
        Finished::Lost {
            error,
            transactional: true,
        } if error.is_fenced() => Ok(problem::response_retry_after(
            problem::IN_PROGRESS,
            "this request was taken over by a newer attempt before its writes committed; \
             retry to get that attempt's response",
            config.in_progress_retry_after.as_secs(),
        )),
        Finished::Lost {
            transactional: true,
            ..
        } => Ok(problem::response(
            problem::TRANSACTION_CANCELLED,
            "this request's idempotency record was released before its writes \
             committed, so nothing was written; retry with the same Idempotency-Key \
             to run it again",
        )),
        // The work is done and this response is its true outcome, so the
        // client gets it; a newer attempt's outcome is the one that replays,
        // or, with the record gone, a duplicate runs again under a new claim.
        Finished::Lost { .. } => Ok(response),
        Finished::Refused(err) if err.kind() == ErrorKind::TransactionCancelled => Ok(
            problem::response(problem::TRANSACTION_CANCELLED, &err.to_string()),
        ),
        Finished::Refused(err) => Ok(problem::response(
            problem::TRANSACTION_REJECTED,
            &err.to_string(),
        )),
        // Unknown whether the transaction committed; do not claim success.
        Finished::Unknown {
            error,
            transactional: true,
        } => {
            config.count(Event::StoreError);
            Ok(unavailable(config, &error))
        }
        // Not stored: the record stays in progress until its lease ends,
        // then a retry (or the sweeper) resolves it.
        Finished::Unknown { .. } => Ok(response),
    }
}

/// The answer to a request whose claim found the record held or done
/// (counted already, but for the conflict).
fn answer_existing(config: &Config, begun: Begun<'_>) -> Response<Body> {
    match begun {
        Begun::Mismatch(_) => key_reused(),
        Begun::Replay(record) if record.response.is_some() => replay(config, &record),
        // A completed record always has its response (the store's decoding
        // makes sure); an in-progress answer is the safe one.
        Begun::Replay(_) => in_progress(config, Duration::ZERO),
        Begun::InProgress { retry_after, .. } => in_progress(config, retry_after),
        // Answered by the caller before this is called.
        Begun::Run(_) => in_progress(config, Duration::ZERO),
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

/// The answer when the store failed (counted where it failed).
fn unavailable(config: &Config, err: &Error) -> Response<Body> {
    tracing::error!(error = %err, "idempotency store unavailable; request refused");
    problem::response_retry_after(
        problem::STORE_UNAVAILABLE,
        "the idempotency store could not be reached, so the request was not processed; \
         retry with the same Idempotency-Key after Retry-After seconds",
        config.unavailable_retry_after.as_secs(),
    )
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

/// How the request was sent, for a store layer that reads it
/// ([`ClaimOrigin`]): the key as the client sent it (the header's text,
/// quotes of the structured-field form included, or the body's JSON value
/// at the key pointer), the body, the event that carried the request and
/// where its tenant was read. `None` for a header that is not text.
fn origin(config: &Config, req: &Request) -> Option<ClaimOrigin> {
    let key = match &config.body_key {
        None => {
            serde_json::Value::String(req.headers().get(&config.header)?.to_str().ok()?.to_owned())
        }
        Some(pointer) => serde_json::from_slice::<serde_json::Value>(req.body().as_ref())
            .ok()?
            .pointer(pointer)?
            .clone(),
    };
    Some(ClaimOrigin::Http {
        key,
        body: StoredBody::of_http(req.body()),
        event: super::event::of(req),
        tenant: config.tenant.fields().clone(),
    })
}

/// Where the key is expected, for a `400` that says what to send.
fn key_source(config: &Config) -> String {
    match &config.body_key {
        None => format!("an `{}` header", config.header),
        Some(pointer) => format!("an idempotency key at `{pointer}` in its JSON body"),
    }
}
