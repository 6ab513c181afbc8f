//! [`ResponseFuture`]: what [`IdempotentEvent`](super::IdempotentEvent)
//! answers with.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The future of an [`IdempotentEvent`](super::IdempotentEvent) call: the
/// handler's output, a replay of it, or the error that stopped the event.
pub struct ResponseFuture<O, E> {
    inner: Pin<Box<dyn Future<Output = Result<O, E>> + Send>>,
}

impl<O, E> ResponseFuture<O, E> {
    pub(super) fn new<F>(future: F) -> Self
    where
        F: Future<Output = Result<O, E>> + Send + 'static,
    {
        ResponseFuture {
            inner: Box::pin(future),
        }
    }
}

impl<O, E> Future for ResponseFuture<O, E> {
    type Output = Result<O, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<O, E> std::fmt::Debug for ResponseFuture<O, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseFuture")
    }
}
