//! The HTTP middleware: [`IdempotencyLayer`] and the [`Idempotency`] service.

pub(crate) mod event;
mod future;
mod layer;
mod service;
mod tenant;

use tower::Layer;

pub use self::future::ResponseFuture;
pub use self::layer::IdempotencyLayer;
pub use self::service::Idempotency;
pub use self::tenant::TenantSource;
pub(crate) use self::tenant::{route_of, Tenant};
pub use crate::key::{IdempotencyKey, MAX_KEY_LEN};
use crate::store::Store;
use http::StatusCode;

/// Header added to replayed responses.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

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

/// Wrap a handler function with every default: the simple case.
///
/// The same as `IdempotencyLayer::new(store).layer(service_fn(handler))`:
/// `POST` and `PATCH` covered, the key optional (a request without one runs
/// the handler unprotected), one anonymous tenant scope. It reads no
/// environment variable; for the deployment's options (`IDEMPOTENCY_DISABLED`
/// and the rest) or any other option, use
/// [`IdempotencyLayer::from_env`] or [`IdempotencyLayer::new`] and its
/// methods.
///
/// ```no_run
/// use lambda_http::{Body, Error, Request, Response};
/// use lambda_idempotency::{DynamoStore, http::idempotent};
///
/// async fn create_order(_req: Request) -> Result<Response<Body>, Error> {
///     Ok(Response::builder().status(201).body(Body::from("{}"))?)
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), Error> {
///     let aws = aws_config::load_from_env().await;
///     // The table IDEMPOTENCY_TABLE names.
///     let store = DynamoStore::from_env(aws_sdk_dynamodb::Client::new(&aws))?;
///     lambda_http::run(idempotent(store, create_order)).await
/// }
/// ```
pub fn idempotent<F>(
    store: impl Store + 'static,
    handler: F,
) -> Idempotency<tower::util::ServiceFn<F>> {
    IdempotencyLayer::new(store).layer(tower::service_fn(handler))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::store::memory::MemoryStore;
    use lambda_http::{Body, Request, Response};
    use tower::Service;
    use tower::ServiceExt;

    fn layer() -> IdempotencyLayer {
        IdempotencyLayer::new(MemoryStore::new())
    }

    /// `request` through `svc` once it is ready, as the Lambda runtime
    /// sends it; the services under test here never fail.
    async fn send<S>(svc: &mut S, request: Request) -> Response<Body>
    where
        S: Service<Request, Response = Response<Body>>,
        S::Error: std::fmt::Debug,
    {
        svc.ready().await.unwrap().call(request).await.unwrap()
    }

    #[test]
    fn service_is_clone_and_send_for_run_concurrent() {
        fn assert_bounds<T: Clone + Send + Sync + 'static>(_: &T) {}
        let svc = layer().layer(tower::service_fn(|_req: Request| async {
            Ok::<_, lambda_http::Error>(Response::new(Body::Empty))
        }));
        assert_bounds(&svc);
    }

    #[tokio::test]
    async fn new_is_on_whatever_the_environment_and_disabled_passes_through() {
        // `new` reads no environment: this holds even where the variable is set.
        assert!(!layer().config.shared.disabled);
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
        let res = send(&mut svc, req).await;
        assert_eq!(res.status(), 200);
        assert!(res.headers().get(REPLAYED_HEADER).is_none());
        assert_eq!(store.requests(), 0);
    }

    /// A key sent with PUT or DELETE, which the default rule (POST and
    /// PATCH) does not cover, runs the handler unprotected: it passes
    /// through as before, but is counted (and logged once) so whoever
    /// wrapped the handler learns it. Safe methods, requests without a key
    /// and methods chosen explicitly are not counted.
    #[tokio::test]
    async fn a_key_on_a_method_the_default_rule_leaves_out_is_counted() {
        use crate::metrics::Metrics;
        use std::sync::Mutex;

        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let captured = lines.clone();
        let metrics =
            Metrics::new("T").sink(move |line| captured.lock().unwrap().push(line.to_owned()));
        let handler = || {
            tower::service_fn(|_req: Request| async {
                Ok::<_, lambda_http::Error>(Response::new(Body::from("ok")))
            })
        };
        let request = |method: &str, key: bool| {
            let mut req = http::Request::builder().method(method).uri("/orders/1");
            if key {
                req = req.header("idempotency-key", "k");
            }
            req.body(Body::Empty).unwrap()
        };
        let store = MemoryStore::new();
        let mut by_default = IdempotencyLayer::new(store.clone())
            .metrics(metrics.clone())
            .layer(handler());
        let mut chosen = IdempotencyLayer::new(store.clone())
            .methods([http::Method::POST, http::Method::PATCH])
            .metrics(metrics)
            .layer(handler());
        let counted = || {
            lines
                .lock()
                .unwrap()
                .iter()
                .filter(|line| line.contains("\"UncoveredKey\""))
                .count()
        };
        for (method, key) in [("PUT", true), ("DELETE", true)] {
            let res = send(&mut by_default, request(method, key)).await;
            assert_eq!(res.status(), 200, "{method} passes through");
        }
        assert_eq!(counted(), 2);
        for (method, key) in [("GET", true), ("HEAD", true), ("PUT", false)] {
            send(&mut by_default, request(method, key)).await;
        }
        send(&mut chosen, request("PUT", true)).await;
        assert_eq!(
            counted(),
            2,
            "safe methods, no key, methods chosen: not counted"
        );
        assert_eq!(store.requests(), 0);
    }

    #[test]
    fn the_wrapped_service_can_be_reached_and_taken_back() {
        #[derive(Clone, Debug, PartialEq)]
        struct Named(&'static str);
        let mut svc = layer().layer(Named("inner"));
        assert_eq!(svc.get_ref(), &Named("inner"));
        svc.get_mut().0 = "changed";
        assert_eq!(svc.into_inner(), Named("changed"));
    }
}
