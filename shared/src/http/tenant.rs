//! The tenant of a request: [`TenantSource`] reads it from the request (a
//! JWT claim, an authorizer field, the IAM principal, Lambda's tenant id, or
//! a function of yours), and the route the request matched.

use std::fmt;
use std::sync::Arc;

use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};

use crate::scope::normalize_path;
use crate::store::TenantFields;

type Resolver = dyn Fn(&Request) -> Option<String> + Send + Sync;

/// Where the tenant of a request comes from.
///
/// The tenant is part of every record's scope ([`crate::scope`]), so tenant
/// A's key `k1` and tenant B's key `k1` are two records. With [`TenantSource::anonymous`] (the default) every
/// request shares one anonymous scope (which no tenant's scope can collide
/// with). Any other source **fails closed**: a request for which it yields
/// nothing is refused with a `401`
/// [`TENANT_MISSING`](crate::problem::TENANT_MISSING) problem, unless the source
/// opts in to the shared anonymous scope with
/// [`or_anonymous`](TenantSource::or_anonymous).
///
/// The path part of the scope is the route the request matched: API Gateway's
/// route template where the event has one (HTTP API `routeKey`, REST API
/// `resourcePath`), else the path with repeated and trailing slashes removed
/// (`route_of`); `/orders`, `/orders/` and `//orders` are one route.
///
/// ```
/// use lambda_idempotency::TenantSource;
/// use lambda_http::Request;
///
/// // Tenant = the `x-tenant` header (only sound if something upstream checks it).
/// let tenant = TenantSource::from_fn(|req: &Request| {
///     req.headers().get("x-tenant")?.to_str().ok().map(str::to_owned)
/// });
/// let req = http::Request::builder().header("x-tenant", "acme").body(lambda_http::Body::Empty).unwrap();
/// assert_eq!(tenant.resolve(&req).as_deref(), Some("acme"));
/// ```
#[derive(Clone)]
pub struct TenantSource {
    name: &'static str,
    resolve: Option<Arc<Resolver>>,
    or_anonymous: bool,
    /// Where in the event it reads the tenant.
    fields: TenantFields,
}

/// The tenant scope of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tenant {
    /// This tenant's own scope.
    Known(String),
    /// The shared anonymous scope, as configured.
    Anonymous,
    /// The source is configured but found nothing: refuse the request.
    Missing,
}

impl TenantSource {
    /// No tenant: every request shares one anonymous scope (the default).
    pub fn anonymous() -> Self {
        TenantSource {
            name: "anonymous",
            resolve: None,
            or_anonymous: true,
            fields: TenantFields::None,
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
        let fields = at(&[
            &["requestContext", "authorizer", "jwt", "claims", &claim],
            &["requestContext", "authorizer", "claims", &claim],
        ]);
        Self::named("jwt_claim", fields, move |req| {
            match req.request_context_ref()? {
                RequestContext::ApiGatewayV2(ctx) => ctx
                    .authorizer
                    .as_ref()?
                    .jwt
                    .as_ref()?
                    .claims
                    .get(&claim)
                    .filter(|c| !c.contains('\0'))
                    .cloned(),
                RequestContext::ApiGatewayV1(ctx) => {
                    json_string(ctx.authorizer.fields.get("claims")?.get(&claim)?)
                }
                _ => None,
            }
        })
    }

    /// A field of a Lambda authorizer's context (`context.authorizer.lambda.<field>`
    /// on HTTP APIs, `context.authorizer.<field>` on REST APIs). A number or
    /// a boolean is a tenant of its own, not its string form: `3` resolves
    /// as `"\0json:3"`, `"3"` as `"3"`; a string holding a NUL is none.
    pub fn authorizer_field(field: impl Into<String>) -> Self {
        let field = field.into();
        let fields = at(&[
            &["requestContext", "authorizer", "lambda", &field],
            &["requestContext", "authorizer", &field],
        ]);
        Self::named("authorizer_field", fields, move |req| {
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
        let fields = at(&[
            &["requestContext", "authorizer", "iam", "userArn"],
            &["requestContext", "identity", "userArn"],
        ]);
        Self::named("iam_principal", fields, |req| {
            match req.request_context_ref()? {
                RequestContext::ApiGatewayV2(ctx) => {
                    ctx.authorizer.as_ref()?.iam.as_ref()?.user_arn.clone()
                }
                RequestContext::ApiGatewayV1(ctx) => ctx.identity.user_arn.clone(),
                _ => None,
            }
        })
    }

    /// The Lambda tenant id of a function in tenant-isolation mode
    /// (`Context::tenant_id`).
    pub fn lambda_tenant_id() -> Self {
        Self::named("lambda_tenant_id", TenantFields::Unknown, |req| {
            req.lambda_context_ref()?.tenant_id.clone()
        })
    }

    /// Any function of the request.
    pub fn from_fn<F>(f: F) -> Self
    where
        F: Fn(&Request) -> Option<String> + Send + Sync + 'static,
    {
        Self::named("from_fn", TenantFields::Unknown, f)
    }

    fn named<F>(name: &'static str, fields: TenantFields, f: F) -> Self
    where
        F: Fn(&Request) -> Option<String> + Send + Sync + 'static,
    {
        TenantSource {
            name,
            resolve: Some(Arc::new(f)),
            or_anonymous: false,
            fields,
        }
    }

    /// Where in the request's event this source reads the tenant: fields of
    /// the HTTP API's and the REST API's `requestContext`, none for
    /// [`anonymous`](Self::anonymous), unknown for a function of yours or
    /// Lambda's tenant id.
    pub fn fields(&self) -> &TenantFields {
        &self.fields
    }

    /// Put requests for which this source finds no tenant in the shared
    /// anonymous scope instead of refusing them with a `401`. Only sound when
    /// every caller without a tenant may replay every other one's responses
    /// (a public, unauthenticated API).
    pub fn or_anonymous(mut self) -> Self {
        self.or_anonymous = true;
        self
    }

    /// The tenant scope of `req`.
    pub(crate) fn scope(&self, req: &Request) -> Tenant {
        match self.resolve(req) {
            Some(tenant) => Tenant::Known(tenant),
            None if self.or_anonymous => Tenant::Anonymous,
            None => Tenant::Missing,
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
        f.debug_struct("TenantSource")
            .field("name", &self.name)
            .field("or_anonymous", &self.or_anonymous)
            .finish()
    }
}

/// Fields of the event, each as its names from the root.
fn at(paths: &[&[&str]]) -> TenantFields {
    TenantFields::At(
        paths
            .iter()
            .map(|path| path.iter().map(|name| (*name).to_owned()).collect())
            .collect(),
    )
}

/// What starts the tenant of a number or a boolean field: a NUL, which no
/// string tenant read from a field holds (one that does is no tenant).
const TYPED_TENANT: &str = "\0json:";

/// The tenant a JSON field names: a string as it is; a number or a boolean
/// as [`TYPED_TENANT`] and its JSON text, so `3`, `"3"` and `true`,
/// `"true"` are four tenants, and no string can name a typed one.
fn json_string(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) if s.contains('\0') => None,
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(_) | serde_json::Value::Bool(_) => {
            Some(format!("{TYPED_TENANT}{value}"))
        }
        _ => None,
    }
}

/// The route `req` matched, the path part of its scope: the route template
/// of an API Gateway event (`/orders/{order_id}` from the HTTP API route key
/// `POST /orders/{order_id}`, or the REST API resource path), otherwise
/// [`normalize_path`](crate::scope::normalize_path) of the request path (ALB, Function URLs, an HTTP API's
/// `$default` route, requests built in tests).
pub(crate) fn route_of(req: &Request) -> std::borrow::Cow<'_, str> {
    let template = match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx
            .route_key
            .as_deref()
            .filter(|k| *k != "$default")
            .and_then(|k| k.split_once(' ').map(|(_, path)| path).or(Some(k))),
        Some(RequestContext::ApiGatewayV1(ctx)) => ctx.resource_path.as_deref(),
        _ => None,
    };
    match template {
        Some(t) if t.starts_with('/') => std::borrow::Cow::Borrowed(t),
        _ => normalize_path(req.uri().path()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(authorizer: serde_json::Value) -> Request {
        let event = serde_json::json!({
            "version": "2.0", "routeKey": "POST /orders", "rawPath": "/orders", "rawQueryString": "",
            "headers": {}, "isBase64Encoded": false,
            "requestContext": {"accountId": "1", "apiId": "a", "domainName": "d", "domainPrefix": "d",
                "http": {"method": "POST", "path": "/orders", "protocol": "HTTP/1.1", "sourceIp": "1.2.3.4", "userAgent": "u"},
                "requestId": "r", "routeKey": "POST /orders", "stage": "$default", "time": "t", "timeEpoch": 0,
                "authorizer": authorizer}
        });
        lambda_http::request::from_str(&event.to_string()).expect("HTTP API event")
    }

    fn v1(authorizer: serde_json::Value, identity: serde_json::Value) -> Request {
        let event = serde_json::json!({
            "resource": "/orders", "path": "/orders", "httpMethod": "POST", "headers": {}, "multiValueHeaders": {},
            "queryStringParameters": null, "multiValueQueryStringParameters": null, "pathParameters": null,
            "stageVariables": null, "body": null, "isBase64Encoded": false,
            "requestContext": {"resourceId": "r", "resourcePath": "/orders", "httpMethod": "POST", "path": "/prod/orders",
                "accountId": "1", "protocol": "HTTP/1.1", "stage": "prod", "requestId": "r", "apiId": "a",
                "identity": identity, "authorizer": authorizer}
        });
        lambda_http::request::from_str(&event.to_string()).expect("REST API event")
    }

    #[test]
    fn every_tenant_source_reads_its_field() {
        let jwt = v2(
            serde_json::json!({"jwt": {"claims": {"sub": "user-1", "org": "acme"}, "scopes": null}}),
        );
        assert_eq!(
            TenantSource::jwt_sub().resolve(&jwt).as_deref(),
            Some("user-1")
        );
        assert_eq!(
            TenantSource::jwt_claim("org").resolve(&jwt).as_deref(),
            Some("acme")
        );
        let cognito = v1(
            serde_json::json!({"claims": {"sub": "user-2"}}),
            serde_json::json!({}),
        );
        assert_eq!(
            TenantSource::jwt_sub().resolve(&cognito).as_deref(),
            Some("user-2")
        );

        let lambda_v2 = v2(serde_json::json!({"lambda": {"tenant": "t-9", "plan": 3}}));
        assert_eq!(
            TenantSource::authorizer_field("tenant")
                .resolve(&lambda_v2)
                .as_deref(),
            Some("t-9")
        );
        assert_eq!(
            TenantSource::authorizer_field("plan")
                .resolve(&lambda_v2)
                .as_deref(),
            Some("\0json:3")
        );
        let lambda_v1 = v1(
            serde_json::json!({"tenant": "t-8", "principalId": "p"}),
            serde_json::json!({}),
        );
        assert_eq!(
            TenantSource::authorizer_field("tenant")
                .resolve(&lambda_v1)
                .as_deref(),
            Some("t-8")
        );

        let arn = "arn:aws:iam::1:user/alice";
        let iam_v2 = v2(serde_json::json!({"iam": {"userArn": arn}}));
        assert_eq!(
            TenantSource::iam_principal().resolve(&iam_v2).as_deref(),
            Some(arn)
        );
        let iam_v1 = v1(serde_json::json!({}), serde_json::json!({"userArn": arn}));
        assert_eq!(
            TenantSource::iam_principal().resolve(&iam_v1).as_deref(),
            Some(arn)
        );

        let mut context = lambda_http::Context::default();
        context.tenant_id = Some("tenant-7".into());
        let with_tenant = http::Request::new(lambda_http::Body::Empty).with_lambda_context(context);
        assert_eq!(
            TenantSource::lambda_tenant_id()
                .resolve(&with_tenant)
                .as_deref(),
            Some("tenant-7")
        );

        // Absent or empty: the anonymous scope.
        assert_eq!(TenantSource::jwt_sub().resolve(&lambda_v2), None);
        assert_eq!(TenantSource::iam_principal().resolve(&jwt), None);
        assert_eq!(TenantSource::anonymous().resolve(&jwt), None);
        let empty = v2(serde_json::json!({"jwt": {"claims": {"sub": ""}, "scopes": null}}));
        assert_eq!(TenantSource::jwt_sub().resolve(&empty), None);
    }

    #[test]
    fn a_typed_authorizer_field_is_not_the_tenant_of_its_string_form() {
        let field = TenantSource::authorizer_field("tenant");
        let v2_of = |value: serde_json::Value| {
            field.resolve(&v2(serde_json::json!({"lambda": {"tenant": value}})))
        };
        let v1_of = |value: serde_json::Value| {
            field.resolve(&v1(
                serde_json::json!({"tenant": value, "principalId": "p"}),
                serde_json::json!({}),
            ))
        };
        for resolve in [
            &v2_of as &dyn Fn(serde_json::Value) -> Option<String>,
            &v1_of,
        ] {
            let text = resolve(serde_json::json!("3"));
            assert_eq!(text.as_deref(), Some("3"));
            let number = resolve(serde_json::json!(3));
            assert!(number.is_some());
            assert_ne!(number, text, "3 and \"3\"");
            let boolean = resolve(serde_json::json!(true));
            assert!(boolean.is_some());
            assert_ne!(
                boolean,
                resolve(serde_json::json!("true")),
                "true and \"true\""
            );
            // No string can take a typed value's tenant: a string with a NUL
            // is no tenant at all.
            assert_eq!(
                resolve(serde_json::Value::String(number.clone().unwrap())),
                None
            );
            assert_eq!(resolve(serde_json::json!("a\u{0}b")), None);
        }
    }
}
