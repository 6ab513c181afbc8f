//! [`ResponseFuture`]: what [`Idempotency`](super::Idempotency) answers with.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use lambda_http::Body;

/// The future of an [`Idempotency`](super::Idempotency) call: the handler's
/// response, a replay, or the middleware's own problem response.
pub struct ResponseFuture<E> {
    inner: Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>,
}

impl<E> ResponseFuture<E> {
    pub(super) fn new<F>(future: F) -> Self
    where
        F: Future<Output = Result<Response<Body>, E>> + Send + 'static,
    {
        ResponseFuture {
            inner: Box::pin(future),
        }
    }
}

impl<E> Future for ResponseFuture<E> {
    type Output = Result<Response<Body>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<E> std::fmt::Debug for ResponseFuture<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseFuture")
    }
}
