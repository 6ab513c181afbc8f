//! What the HTTP suites, the benchmarks and the tools build their handlers and
//! requests from, so each names a handler's type once.

use lambda_http::{Body, Error, Request, Response};
use tower::Service;

type Resp = Response<Body>;

/// An HTTP handler as the middleware wraps it: a cloneable, sendable tower
/// service from a Lambda request to a response, with a `Send` future.
/// Helpers return `impl Handler` instead of spelling the service bounds out.
pub trait Handler:
    Service<Request, Response = Resp, Error = Error, Future: Send + 'static> + Clone + Send + 'static
{
}

impl<S> Handler for S where
    S: Service<Request, Response = Resp, Error = Error, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

/// A handler that answers 201 with the request's body, doing no work.
pub fn echo_handler() -> impl Handler {
    tower::service_fn(|req: Request| async move {
        Ok::<_, Error>(
            Response::builder()
                .status(201)
                .header("content-type", "application/json")
                .body(Body::from(req.body().as_ref().to_vec()))?,
        )
    })
}

/// Send `req` through the middleware on `store` (50 ms leases) and kill its
/// invocation once the handler started (the future is dropped, as a crash or
/// timeout does), then wait past the lease: the record is left in progress
/// with the fingerprint the middleware gave it.
pub async fn crash_midway<S: lambda_idempotency::Store + 'static>(store: S, req: Request) {
    use std::time::Duration;
    use tower::{Layer, ServiceExt};
    let (started_tx, mut started_rx) = tokio::sync::mpsc::channel::<()>(1);
    let svc = lambda_idempotency::IdempotencyLayer::new(store)
        .max_lease(Duration::from_millis(50))
        .layer(tower::service_fn(move |_req: Request| {
            let started = started_tx.clone();
            async move {
                let _ = started.send(()).await;
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, Error>(Response::new(Body::Empty))
            }
        }));
    let task = tokio::spawn(svc.oneshot(req));
    tokio::time::timeout(Duration::from_secs(30), started_rx.recv())
        .await
        .expect("the handler started")
        .expect("the handler started");
    task.abort();
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// A POST to `path` with an optional `Idempotency-Key` and a JSON body.
pub fn post(path: &str, key: Option<&str>, body: &str) -> Request {
    let mut builder = http::Request::post(path).header("content-type", "application/json");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder
        .body(Body::from(body.to_owned()))
        .expect("a static request is valid")
}

/// `len` bytes that do not compress (an xorshift sequence from `seed`), so a
/// test can make a body that stays large after gzip.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
