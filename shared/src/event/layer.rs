//! [`IdempotentEventLayer`]: a typed `lambda_runtime` handler behind an
//! [`IdempotentFunction`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::{Layer, Service};

use super::error::EventError;
use super::function::IdempotentFunction;

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
        IdempotentEvent {
            inner,
            function: self.function.clone(),
        }
    }
}

/// The service made by [`IdempotentEventLayer`].
#[derive(Clone, Debug)]
pub struct IdempotentEvent<S> {
    inner: S,
    function: IdempotentFunction,
}

impl<S, T, O> Service<LambdaEvent<T>> for IdempotentEvent<S>
where
    S: Service<LambdaEvent<T>, Response = O> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    T: Serialize + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
{
    type Response = O;
    type Error = EventError<S::Error>;
    type Future = Pin<Box<dyn Future<Output = Result<O, EventError<S::Error>>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(EventError::Handler)
    }

    fn call(&mut self, event: LambdaEvent<T>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let function = self.function.with_context(&event.context);
        Box::pin(async move {
            let LambdaEvent { payload, context } = event;
            function
                .call(payload, move |payload| {
                    inner.call(LambdaEvent::new(payload, context))
                })
                .await
        })
    }
}
