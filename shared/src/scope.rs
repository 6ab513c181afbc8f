//! Scoping keys: which record a key maps to.
//!
//! A key is scoped by tenant + method + path + key, and the record id is a
//! SHA-256 of that scope, so tenant A's key `k1` and tenant B's key `k1` are
//! two records, and raw keys are never stored in the key attribute. The HTTP
//! middleware takes the tenant from a
//! [`TenantSource`](crate::http::TenantSource) and the path from the route
//! the request matched; the event path scopes keys by its function name.

use sha2::{Digest, Sha256};

use crate::hash::hex;

/// A path with runs of `/` collapsed and a trailing `/` removed (`/` stays
/// `/`): the forms a router treats as one route are one scope and one
/// fingerprint.
pub(crate) fn normalize_path(path: &str) -> std::borrow::Cow<'_, str> {
    let clean = !path.contains("//") && (path.len() <= 1 || !path.ends_with('/'));
    if clean && path.starts_with('/') {
        return std::borrow::Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len() + 1);
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        out.push('/');
        out.push_str(segment);
    }
    if out.is_empty() {
        out.push('/');
    }
    std::borrow::Cow::Owned(out)
}

/// What the id of a request's record is made of, to find that record again
/// (an operator's `inspect --key`, a test): the layer's namespace (empty
/// unless one was set), the tenant (`None`: anonymous), the method, the route
/// (the matched route template, or the path) and the key.
///
/// ```
/// use lambda_idempotency::scope::RecordScope;
///
/// let scope = RecordScope { tenant: Some("t-42"), ..RecordScope::new("POST", "/orders", "order-0001") };
/// assert_eq!(scope.record_id().len(), 64);
/// // Paths are normalised as the middleware does it.
/// assert_eq!(
///     RecordScope::new("POST", "orders//", "k").record_id(),
///     RecordScope::new("POST", "/orders", "k").record_id()
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordScope<'a> {
    /// The layer's namespace (`IdempotencyLayer::namespace`), empty by default.
    pub namespace: &'a str,
    /// The tenant, `None` for anonymous requests.
    pub tenant: Option<&'a str>,
    /// The HTTP method, as sent (`POST`).
    pub method: &'a str,
    /// The route template the request matched, or its path.
    pub route: &'a str,
    /// The idempotency key.
    pub key: &'a str,
}

impl<'a> RecordScope<'a> {
    /// An anonymous scope in no namespace.
    pub fn new(method: &'a str, route: &'a str, key: &'a str) -> Self {
        Self {
            namespace: "",
            tenant: None,
            method,
            route,
            key,
        }
    }

    /// The record id the middleware gives this scope (a hex SHA-256).
    pub fn record_id(&self) -> String {
        record_id(
            self.namespace,
            self.tenant,
            self.method,
            &normalize_path(self.route),
            self.key,
        )
    }
}

/// The record id of a scope: hex SHA-256 over length-prefixed parts.
pub(crate) fn record_id(
    namespace: &str,
    tenant: Option<&str>,
    method: &str,
    path: &str,
    key: &str,
) -> String {
    let mut h = Sha256::new();
    let mut put = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    put(b"scope1");
    put(namespace.as_bytes());
    match tenant {
        Some(t) => {
            put(b"tenant");
            put(t.as_bytes());
        }
        None => put(b"anonymous"),
    }
    put(method.as_bytes());
    put(path.as_bytes());
    put(key.as_bytes());
    hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scope_part_separates_records() {
        let base = record_id("", Some("a"), "POST", "/orders", "k");
        assert_ne!(base, record_id("", Some("b"), "POST", "/orders", "k"));
        assert_ne!(base, record_id("", None, "POST", "/orders", "k"));
        assert_ne!(base, record_id("x", Some("a"), "POST", "/orders", "k"));
        assert_ne!(base, record_id("", Some("a"), "PATCH", "/orders", "k"));
        assert_ne!(base, record_id("", Some("a"), "POST", "/order", "k"));
        assert_ne!(base, record_id("", Some("a"), "POST", "/orders", "k2"));
        // Length prefixes: moving bytes between parts changes the id.
        assert_ne!(
            record_id("", Some("ab"), "POST", "/", "k"),
            record_id("", Some("a"), "bPOST", "/", "k")
        );
        assert_eq!(base, record_id("", Some("a"), "POST", "/orders", "k"));
        assert_eq!(base.len(), 64);
    }
}
