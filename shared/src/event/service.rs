//! [`IdempotentEvent`]: the service [`IdempotentEventLayer`](super::IdempotentEventLayer)
//! wraps a typed `lambda_runtime` handler in.

use std::task::{Context as TaskContext, Poll};

use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::Service;

use super::error::EventError;
use super::function::IdempotentFunction;
use super::future::ResponseFuture;

/// The service made by [`IdempotentEventLayer`](super::IdempotentEventLayer).
#[derive(Clone, Debug)]
pub struct IdempotentEvent<S> {
    inner: S,
    function: IdempotentFunction,
}

impl<S> IdempotentEvent<S> {
    pub(super) fn new(inner: S, function: IdempotentFunction) -> Self {
        IdempotentEvent { inner, function }
    }

    /// The function this runs once per key, unwrapped: the layer is gone.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The function this runs once per key.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The function this runs once per key, to change in place.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// How it reads keys and what it shares with the HTTP layer.
    pub fn function(&self) -> &IdempotentFunction {
        &self.function
    }
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
    type Future = ResponseFuture<O, EventError<S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(EventError::Handler)
    }

    fn call(&mut self, event: LambdaEvent<T>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let function = self.function.with_context(&event.context);
        ResponseFuture::new(async move {
            let LambdaEvent { payload, context } = event;
            function
                .call(payload, move |payload| {
                    inner.call(LambdaEvent::new(payload, context))
                })
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use tower::Layer;

    use crate::event::{IdempotentEventLayer, IdempotentFunction};
    use crate::store::memory::MemoryStore;

    #[test]
    fn the_wrapped_service_can_be_reached_and_taken_back() {
        #[derive(Clone, Debug, PartialEq)]
        struct Named(&'static str);
        let function = IdempotentFunction::new(MemoryStore::new(), "f");
        let mut svc = IdempotentEventLayer::new(function).layer(Named("inner"));
        assert_eq!(svc.get_ref(), &Named("inner"));
        svc.get_mut().0 = "changed";
        assert_eq!(svc.into_inner(), Named("changed"));
    }
}
