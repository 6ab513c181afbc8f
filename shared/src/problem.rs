//! Problem responses (RFC 9457 `application/problem+json`).
//!
//! Every response the middleware makes itself is a problem document with a
//! stable `type` URI, so clients can branch on it:
//!
//! | `type` | status | when |
//! |---|---|---|
//! | [`KEY_MISSING`] | 400 | the key header is absent on a route that requires it |
//! | [`KEY_INVALID`] | 400 | the key is empty, longer than 255 bytes, or not printable ASCII |
//! | [`TENANT_MISSING`] | 401 | a tenant source is configured but the request has no tenant (no authorizer, absent claim); nothing ran |
//! | [`IN_PROGRESS`] | 409 | the first request with this key is still running (`Retry-After` says when to retry) |
//! | [`KEY_REUSED`] | 422 | the key was first used with a different request (method, route, path, query string, selected headers or body) |
//! | [`STORE_UNAVAILABLE`] | 503 | the idempotency store could not be reached; the handler did not run |
//! | [`RESPONSE_TOO_LARGE`] | 500 | the first request succeeded but its response was too large to store; it is not run again |
//! | [`TRANSACTION_CANCELLED`] | 409 | the handler's transactional writes were cancelled by a condition; nothing was written, retry may run again |
//! | [`TRANSACTION_REJECTED`] | 500 | DynamoDB refused the handler's transactional writes as invalid; nothing was written, the key was released |
//! | [`ABANDONED`] | 500 | the first request never finished and the sweeper failed it (`fail` policy); replays from then on |
//!
//! ```
//! use lambda_idempotency::problem;
//!
//! let response = problem::response(problem::KEY_MISSING, "send an Idempotency-Key header");
//! assert_eq!(response.status(), 400);
//! assert_eq!(response.headers()["content-type"], "application/problem+json");
//! ```

#[cfg(feature = "http")]
use http::{header, HeaderValue, Response, StatusCode};
#[cfg(feature = "http")]
use lambda_http::Body;

/// Base of the problem type URIs.
pub const BASE: &str = "https://lambda-idempotency.dev/problems/";

/// A problem type: its URI, title and status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProblemType {
    /// The stable `type` URI.
    pub uri: &'static str,
    /// The short human-readable `title`.
    pub title: &'static str,
    /// The HTTP status.
    pub status: u16,
}

/// Declares each problem type as a constant whose URI is [`BASE`] followed by
/// its slug (literals, so the URI is a `&'static str` built at compile time).
macro_rules! problem_types {
    ($($(#[$doc:meta])* $name:ident = ($slug:literal, $status:literal, $title:literal);)*) => {
        $(
            $(#[$doc])*
            pub const $name: ProblemType = ProblemType {
                uri: concat!("https://lambda-idempotency.dev/problems/", $slug),
                title: $title,
                status: $status,
            };
        )*
    };
}

problem_types! {
    /// The key header is required here but absent.
    KEY_MISSING = ("key-missing", 400, "Idempotency-Key header is missing");
    /// The tenant source is configured but the request carries no tenant (no
    /// authorizer, or the claim or field is absent): the request is refused
    /// rather than run in a scope shared with every other anonymous caller.
    TENANT_MISSING = ("tenant-missing", 401, "The request carries no tenant identity");
    /// The key is malformed.
    KEY_INVALID = ("key-invalid", 400, "Idempotency-Key header is invalid");
    /// A request with this key is still being processed.
    IN_PROGRESS = ("in-progress", 409, "A request with this Idempotency-Key is still being processed");
    /// The key was used for a different request.
    KEY_REUSED = ("key-reused", 422, "Idempotency-Key was already used for a different request");
    /// The store is unreachable; nothing ran.
    STORE_UNAVAILABLE = ("store-unavailable", 503, "Idempotency store is unavailable");
    /// The first request never finished; the sweeper stored this terminal outcome.
    ABANDONED = ("abandoned", 500, "The request with this Idempotency-Key was abandoned");
    /// The first request succeeded but its response was too large to store.
    RESPONSE_TOO_LARGE = ("response-too-large", 500, "The response to this Idempotency-Key is too large to replay");
    /// The first call of an idempotent function ran, but its output could
    /// not be serialised to JSON to store it: it is not run again, and its
    /// duplicates get this in place of the output.
    OUTPUT_NOT_STORED = ("output-not-stored", 500, "The output of the first call could not be stored for replay");
    /// The handler's writes and the completion were cancelled as one transaction.
    TRANSACTION_CANCELLED = ("transaction-cancelled", 409, "The request's writes were cancelled");
    /// DynamoDB refused the handler's transactional writes as invalid (more than
    /// 100 items, two operations on one item, an item too large): nothing was
    /// written and the key was released. A bug in the handler, not the client's.
    TRANSACTION_REJECTED = ("transaction-rejected", 500, "The request's writes were rejected as invalid");
}

/// The problem document of `kind` with a `detail` sentence, as JSON text:
/// the body of [`response`] and of the problems the event path stores.
pub(crate) fn document(kind: ProblemType, detail: &str) -> String {
    serde_json::json!({
        "type": kind.uri,
        "title": kind.title,
        "status": kind.status,
        "detail": detail,
    })
    .to_string()
}

/// The content type of a problem document.
pub(crate) const CONTENT_TYPE: &str = "application/problem+json";

/// Build a problem response of `kind` with a `detail` sentence.
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub fn response(kind: ProblemType, detail: &str) -> Response<Body> {
    let mut response = Response::new(Body::Text(document(kind, detail)));
    *response.status_mut() =
        StatusCode::from_u16(kind.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    response
}

/// Like [`response`], with a `Retry-After` header in whole seconds (at least 1).
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub fn response_retry_after(kind: ProblemType, detail: &str, seconds: u64) -> Response<Body> {
    let mut response = response(kind, detail);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_share_the_base_and_are_distinct() {
        let all = [
            KEY_MISSING,
            TENANT_MISSING,
            KEY_INVALID,
            IN_PROGRESS,
            KEY_REUSED,
            STORE_UNAVAILABLE,
            ABANDONED,
            RESPONSE_TOO_LARGE,
            OUTPUT_NOT_STORED,
            TRANSACTION_CANCELLED,
            TRANSACTION_REJECTED,
        ];
        for (i, a) in all.iter().enumerate() {
            assert!(a.uri.starts_with(BASE));
            for b in &all[i + 1..] {
                assert_ne!(a.uri, b.uri);
            }
        }
    }

    #[test]
    #[cfg(feature = "http")]
    fn body_is_problem_json_with_retry_after() {
        let r = response_retry_after(IN_PROGRESS, "wait", 0);
        assert_eq!(r.status(), 409);
        assert_eq!(r.headers()["retry-after"], "1");
        let body: serde_json::Value = serde_json::from_slice(r.body().as_ref()).unwrap();
        assert_eq!(body["type"], IN_PROGRESS.uri);
        assert_eq!(body["status"], 409);
        assert_eq!(body["detail"], "wait");
    }
}
