//! What every subcommand sends and runs: the 1,000-byte request, the
//! handler the middleware wraps, one timed call through a service, and keys
//! never used before.

use std::time::{Duration, Instant};

use lambda_http::{Body, Request, Response};
use lambda_idempotency::http::REPLAYED_HEADER;
use tower::{Service, ServiceExt};

use crate::stats::micros;
use crate::Result;

/// The body of every benchmark request, shared with the Powertools side and
/// the micro benchmarks.
const BODY: &str = include_str!("../../../../scripts/bench/body.json");

/// Entries and age of the in-process cache of the cached-replay variant.
pub(crate) const CACHE_ENTRIES: usize = 1_000;
pub(crate) const CACHE_MAX_AGE: Duration = Duration::from_secs(300);

pub(crate) fn body() -> &'static str {
    BODY.trim_end()
}

pub(crate) fn request(key: &str) -> Request {
    http::Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body()))
        .expect("static request")
}

/// The handler every variant wraps: answers 201 with the body, doing no work,
/// so what is measured is the idempotency layer.
pub(crate) fn handler(delay: Duration) -> impl integration_tests::Handler {
    tower::service_fn(move |req: Request| async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        handler_response(req.body().as_ref())
    })
}

pub(crate) fn handler_response(
    body: &[u8],
) -> std::result::Result<Response<Body>, lambda_http::Error> {
    Ok(Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))?)
}

pub(crate) fn is_replayed(res: &Response<Body>) -> bool {
    res.headers().get(REPLAYED_HEADER).is_some()
}

/// Time one call through a service; the response is checked by the caller,
/// after the timing.
pub(crate) async fn timed_call<S>(svc: &S, req: Request) -> Result<(f64, Response<Body>)>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let t = Instant::now();
    let res = svc.clone().oneshot(req).await.map_err(|e| e.to_string())?;
    Ok((micros(t.elapsed()), res))
}

/// Keys, record ids and owner tokens never used before in this process.
#[derive(Default)]
pub(crate) struct Fresh(u64);

impl Fresh {
    pub(crate) fn key(&mut self, prefix: &str) -> String {
        self.0 += 1;
        format!("{prefix}-{}-{}", std::process::id(), self.0)
    }

    /// 32 hex digits, the shape of the middleware's random owner token.
    pub(crate) fn owner(&mut self) -> String {
        self.0 += 1;
        format!("{:016x}{:016x}", std::process::id(), self.0)
    }
}
