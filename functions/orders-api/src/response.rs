//! The answers this API builds itself: JSON, RFC 9457 problems, and its
//! problem types.
//! In a module of their own so that `routes` and `order` both use them
//! without depending on each other.

use http::{header, StatusCode};
use lambda_http::{Body, Response};

/// Problem type URIs of this API (the middleware's own are in
/// `lambda_idempotency::problem`).
pub mod problems {
    /// The order body is not valid.
    pub const INVALID_ORDER: &str = "https://orders-api.example/problems/invalid-order";
    /// No such order.
    pub const NOT_FOUND: &str = "https://orders-api.example/problems/not-found";
    /// The method is not allowed on this path.
    pub const METHOD_NOT_ALLOWED: &str = "https://orders-api.example/problems/method-not-allowed";
    /// The orders table or the provider failed; retry with the same key.
    pub const DEPENDENCY_FAILED: &str = "https://orders-api.example/problems/dependency-failed";
}

/// A `503` for a failed dependency. The cause goes to the log only: SDK
/// error text can name accounts, ARNs and tables, which clients must not see.
pub(crate) fn dependency_failed(cause: &str) -> Response<Body> {
    tracing::error!(cause, "a dependency failed; answering 503");
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        problems::DEPENDENCY_FAILED,
        "the order could not be processed because a dependency (the orders table or the \
         payment provider) failed; retry with the same Idempotency-Key",
    )
}

pub(crate) fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::Text(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

pub(crate) fn problem(status: StatusCode, type_uri: &str, detail: &str) -> Response<Body> {
    let body = serde_json::json!({
        "type": type_uri,
        "title": status.canonical_reason().unwrap_or("error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut response = json_response(status, &body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/problem+json"),
    );
    response
}
