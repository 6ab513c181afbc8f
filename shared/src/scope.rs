//! Scoping keys: who is asking, and which record a key maps to.
//!
//! A key is scoped by tenant + method + path + key, and the record id is a
//! SHA-256 of that scope, so tenant A's key `k1` and tenant B's key `k1` are two
//! records, and raw keys are never stored in the key attribute. The tenant comes
//! from a [`TenantSource`]; requests for which it yields nothing share one
//! anonymous scope (which no tenant's scope can collide with).
//!
//! ```
//! use lambda_idempotency::TenantSource;
//! use lambda_http::Request;
//!
//! // Tenant = the `x-tenant` header (only sound if something upstream checks it).
//! let tenant = TenantSource::from_fn(|req: &Request| {
//!     req.headers().get("x-tenant")?.to_str().ok().map(str::to_owned)
//! });
//! let req = http::Request::builder().header("x-tenant", "acme").body(lambda_http::Body::Empty).unwrap();
//! assert_eq!(tenant.resolve(&req).as_deref(), Some("acme"));
//! ```

use std::fmt;
use std::sync::Arc;

use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};
use sha2::{Digest, Sha256};

use crate::fingerprint::hex;

type Resolver = dyn Fn(&Request) -> Option<String> + Send + Sync;

/// Where the tenant of a request comes from.
#[derive(Clone)]
pub struct TenantSource {
    name: &'static str,
    resolve: Option<Arc<Resolver>>,
}

impl TenantSource {
    /// No tenant: every request shares one anonymous scope (the default).
    pub fn anonymous() -> Self {
        TenantSource {
            name: "anonymous",
            resolve: None,
        }
    }

    /// The JWT `sub` claim from an API Gateway JWT authorizer (HTTP API) or a
    /// Cognito user-pool authorizer (REST API).
    pub fn jwt_sub() -> Self {
        Self::jwt_claim("sub")
    }

    /// Any JWT claim, as for [`jwt_sub`](Self::jwt_sub).
    pub fn jwt_claim(claim: impl Into<String>) -> Self {
        let claim = claim.into();
        Self::named("jwt_claim", move |req| match req.request_context_ref()? {
            RequestContext::ApiGatewayV2(ctx) => ctx
                .authorizer
                .as_ref()?
                .jwt
                .as_ref()?
                .claims
                .get(&claim)
                .cloned(),
            RequestContext::ApiGatewayV1(ctx) => {
                json_string(ctx.authorizer.fields.get("claims")?.get(&claim)?)
            }
            _ => None,
        })
    }

    /// A field of a Lambda authorizer's context (`context.authorizer.lambda.<field>`
    /// on HTTP APIs, `context.authorizer.<field>` on REST APIs).
    pub fn authorizer_field(field: impl Into<String>) -> Self {
        let field = field.into();
        Self::named("authorizer_field", move |req| {
            match req.request_context_ref()? {
                RequestContext::ApiGatewayV2(ctx) => {
                    json_string(ctx.authorizer.as_ref()?.fields.get(&field)?)
                }
                RequestContext::ApiGatewayV1(ctx) => {
                    json_string(ctx.authorizer.fields.get(&field)?)
                }
                _ => None,
            }
        })
    }

    /// The IAM principal ARN of a SigV4-signed request (IAM authorization).
    pub fn iam_principal() -> Self {
        Self::named("iam_principal", |req| match req.request_context_ref()? {
            RequestContext::ApiGatewayV2(ctx) => {
                ctx.authorizer.as_ref()?.iam.as_ref()?.user_arn.clone()
            }
            RequestContext::ApiGatewayV1(ctx) => ctx.identity.user_arn.clone(),
            _ => None,
        })
    }

    /// The Lambda tenant id of a function in tenant-isolation mode
    /// (`Context::tenant_id`).
    pub fn lambda_tenant_id() -> Self {
        Self::named("lambda_tenant_id", |req| {
            req.lambda_context_ref()?.tenant_id.clone()
        })
    }

    /// Any function of the request.
    pub fn from_fn<F>(f: F) -> Self
    where
        F: Fn(&Request) -> Option<String> + Send + Sync + 'static,
    {
        Self::named("from_fn", f)
    }

    fn named<F>(name: &'static str, f: F) -> Self
    where
        F: Fn(&Request) -> Option<String> + Send + Sync + 'static,
    {
        TenantSource {
            name,
            resolve: Some(Arc::new(f)),
        }
    }

    /// The tenant of `req`, if any. An empty string counts as none.
    pub fn resolve(&self, req: &Request) -> Option<String> {
        self.resolve
            .as_ref()
            .and_then(|f| f(req))
            .filter(|t| !t.is_empty())
    }
}

impl Default for TenantSource {
    fn default() -> Self {
        Self::anonymous()
    }
}

impl fmt::Debug for TenantSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TenantSource").field(&self.name).finish()
    }
}

fn json_string(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The record id of a scope: hex SHA-256 over length-prefixed parts.
pub fn record_id(
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
