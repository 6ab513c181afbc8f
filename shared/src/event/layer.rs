//! [`IdempotentEventLayer`]: a typed `lambda_runtime` handler behind an
//! [`IdempotentFunction`].

use tower::Layer;

use super::function::IdempotentFunction;
use super::service::IdempotentEvent;

/// Wraps a `Service<LambdaEvent<T>>` so each event runs at most once per key;
/// each event's Lambda context is registered for the lease.
///
/// ```
/// use lambda_idempotency::{IdempotentEventLayer, IdempotentFunction, MemoryStore};
/// use lambda_runtime::{service_fn, LambdaEvent};
/// use serde_json::{json, Value};
/// use tower::{Layer, Service, ServiceExt};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let function = IdempotentFunction::new(MemoryStore::new(), "order-events").key_pointers(["/event_id"]);
/// let mut handler = IdempotentEventLayer::new(function).layer(service_fn(|ev: LambdaEvent<Value>| async move {
///     Ok::<_, lambda_runtime::Error>(json!({"handled": ev.payload["event_id"]}))
/// }));
/// let event = || LambdaEvent::new(json!({"event_id": "e1"}), Default::default());
/// let out = handler.ready().await.unwrap().call(event()).await.unwrap();
/// assert_eq!(out, handler.ready().await.unwrap().call(event()).await.unwrap());
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct IdempotentEventLayer {
    function: IdempotentFunction,
}

impl IdempotentEventLayer {
    /// Use `function`'s key, validation, expiry and lease settings.
    pub fn new(function: IdempotentFunction) -> Self {
        IdempotentEventLayer { function }
    }
}

impl<S> Layer<S> for IdempotentEventLayer {
    type Service = IdempotentEvent<S>;

    fn layer(&self, inner: S) -> IdempotentEvent<S> {
        IdempotentEvent::new(inner, self.function.clone())
    }
}
