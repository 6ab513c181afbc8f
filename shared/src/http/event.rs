//! The Lambda event that carried a request, rebuilt from what `lambda_http`
//! kept of it: what another tool saw when it read the event itself (the
//! cut-over from Powertools evaluates its key expression on it,
//! [`ClaimOrigin::Http`](crate::store::ClaimOrigin::Http)).
//!
//! `lambda_http` keeps the request context, the path and query
//! parameters, the stage variables, the headers and the body; the rest of
//! the event follows from them. Header names come back lowercase (an
//! `http::HeaderMap` keeps no case): the HTTP API and ALBs send them so,
//! but a REST API passes on the client's case, so its event lists each
//! header under its lowercase name and under its Title-Case form
//! (`Idempotency-Key`), the two spellings an expression written for a REST
//! API uses.

use std::collections::BTreeMap;

use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt};
use serde_json::{json, Map, Value};

/// The event of `req`, in the shape of the source that sent it (REST API,
/// HTTP API and Function URL, ALB); a request without a context (built in
/// a test, or by a runtime emulator) as an HTTP API event.
pub(crate) fn of(req: &Request) -> Value {
    let (body, base64) = body(req.body());
    let mut event = match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV1(ctx)) => {
            let mut event = rest(req, true);
            event.insert("resource".into(), json!(ctx.resource_path));
            event.insert("requestContext".into(), to_value(ctx));
            event
        }
        Some(RequestContext::Alb(ctx)) => {
            let mut event = rest(req, false);
            event.insert("requestContext".into(), to_value(ctx));
            event
        }
        Some(RequestContext::ApiGatewayV2(ctx)) => {
            let mut event = http_api(req);
            event.insert("routeKey".into(), json!(ctx.route_key));
            event.insert("requestContext".into(), to_value(ctx));
            event
        }
        _ => http_api(req),
    };
    event.insert("body".into(), body);
    event.insert("isBase64Encoded".into(), Value::Bool(base64));
    Value::Object(event)
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The body as the event held it: text as it is, bytes in base64, none as
/// null.
fn body(body: &Body) -> (Value, bool) {
    use base64::Engine;
    match body {
        Body::Empty => (Value::Null, false),
        Body::Text(text) => (Value::String(text.clone()), false),
        Body::Binary(bytes) => (
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
            true,
        ),
        // A body type of a later lambda_http: its bytes, as binary.
        #[allow(unreachable_patterns)]
        other => (
            Value::String(base64::engine::general_purpose::STANDARD.encode(other.as_ref())),
            true,
        ),
    }
}

/// Each header's values, in order, by lowercase name.
fn headers(req: &Request) -> BTreeMap<String, Vec<String>> {
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in req.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_owned())
            .or_default()
            .push(value);
    }
    headers
}

/// `idempotency-key` as `Idempotency-Key`.
fn title_case(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// A query map (query string, path parameters, stage variables) with each
/// name's values joined by `join`, or its last one (`None`); null when empty.
fn joined(
    map: Option<&lambda_http::aws_lambda_events::query_map::QueryMap>,
    join: Option<&str>,
) -> Value {
    let Some(map) = map.filter(|m| !m.is_empty()) else {
        return Value::Null;
    };
    let mut out = Map::new();
    for (name, _) in map.iter() {
        if out.contains_key(name) {
            continue;
        }
        let all = map.all(name).unwrap_or_default();
        let value = match join {
            Some(join) => all.join(join),
            None => all.last().map(|v| (*v).to_owned()).unwrap_or_default(),
        };
        out.insert(name.to_owned(), Value::String(value));
    }
    Value::Object(out)
}

/// Every value of each name of a query map; null when empty.
fn multi(map: Option<&lambda_http::aws_lambda_events::query_map::QueryMap>) -> Value {
    let Some(map) = map.filter(|m| !m.is_empty()) else {
        return Value::Null;
    };
    let mut out = Map::new();
    for (name, _) in map.iter() {
        out.entry(name.to_owned())
            .or_insert_with(|| json!(map.all(name).unwrap_or_default()));
    }
    Value::Object(out)
}

/// The path parameters and stage variables, as every source names them.
fn parameters(event: &mut Map<String, Value>, req: &Request) {
    event.insert(
        "pathParameters".into(),
        joined(req.path_parameters_ref(), None),
    );
    event.insert(
        "stageVariables".into(),
        joined(req.stage_variables_ref(), None),
    );
}

/// A REST API (`title_case_too`) or ALB event, less its context and body.
fn rest(req: &Request, title_case_too: bool) -> Map<String, Value> {
    let mut single = Map::new();
    let mut multiple = Map::new();
    for (name, values) in headers(req) {
        let mut names = vec![name.clone()];
        if title_case_too && title_case(&name) != name {
            names.push(title_case(&name));
        }
        for name in names {
            single.insert(name.clone(), json!(values.last()));
            multiple.insert(name, json!(values));
        }
    }
    let query = req.query_string_parameters_ref();
    let mut event = Map::new();
    event.insert("path".into(), json!(req.raw_http_path()));
    event.insert("httpMethod".into(), json!(req.method().as_str()));
    event.insert("headers".into(), Value::Object(single));
    event.insert("multiValueHeaders".into(), Value::Object(multiple));
    event.insert("queryStringParameters".into(), joined(query, None));
    event.insert("multiValueQueryStringParameters".into(), multi(query));
    parameters(&mut event, req);
    event
}

/// An HTTP API (payload 2.0) or Function URL event, less its route, context
/// and body.
fn http_api(req: &Request) -> Map<String, Value> {
    let mut headers_out = Map::new();
    let mut cookies = Vec::new();
    for (name, values) in headers(req) {
        if name == "cookie" {
            // The HTTP API hands cookies over apart from the headers.
            cookies.extend(
                values
                    .iter()
                    .flat_map(|v| v.split(';'))
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(|c| Value::String(c.to_owned())),
            );
            continue;
        }
        headers_out.insert(name, Value::String(values.join(",")));
    }
    let mut event = Map::new();
    event.insert("version".into(), json!("2.0"));
    event.insert("routeKey".into(), json!("$default"));
    event.insert("rawPath".into(), json!(req.raw_http_path()));
    event.insert(
        "rawQueryString".into(),
        json!(req.uri().query().unwrap_or("")),
    );
    if !cookies.is_empty() {
        event.insert("cookies".into(), Value::Array(cookies));
    }
    event.insert("headers".into(), Value::Object(headers_out));
    event.insert(
        "queryStringParameters".into(),
        joined(req.query_string_parameters_ref(), Some(",")),
    );
    parameters(&mut event, req);
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_api_event_comes_back_with_its_key_claims_and_body() {
        let sent = json!({
            "version": "2.0", "routeKey": "POST /orders", "rawPath": "/orders", "rawQueryString": "a=1&a=2",
            "cookies": ["s=1", "t=2"],
            "headers": {"idempotency-key": "k1", "x-many": "a,b"}, "isBase64Encoded": false,
            "queryStringParameters": {"a": "1,2"},
            "requestContext": {"accountId": "1", "apiId": "a", "domainName": "d", "domainPrefix": "d",
                "http": {"method": "POST", "path": "/orders", "protocol": "HTTP/1.1", "sourceIp": "1.2.3.4", "userAgent": "u"},
                "requestId": "r", "routeKey": "POST /orders", "stage": "$default", "time": "t", "timeEpoch": 0,
                "authorizer": {"jwt": {"claims": {"sub": "tenant-a"}, "scopes": null}}},
            "body": "{\"order_id\":\"o-1\"}"
        });
        let req = lambda_http::request::from_str(&sent.to_string()).expect("HTTP API event");
        let event = of(&req);
        for path in [
            "/headers/idempotency-key",
            "/headers/x-many",
            "/body",
            "/isBase64Encoded",
            "/routeKey",
            "/rawPath",
            "/rawQueryString",
            "/cookies",
            "/queryStringParameters",
            "/requestContext/authorizer/jwt/claims/sub",
            "/requestContext/requestId",
        ] {
            assert_eq!(event.pointer(path), sent.pointer(path), "{path}");
        }
        assert_eq!(event.pointer("/headers/cookie"), None);
    }

    #[test]
    fn a_rest_api_event_lists_headers_in_both_cases_and_binary_bodies_in_base64() {
        let sent = json!({
            "resource": "/orders", "path": "/orders", "httpMethod": "POST",
            "headers": {"Idempotency-Key": "k1"}, "multiValueHeaders": {"Idempotency-Key": ["k1"]},
            "queryStringParameters": null, "multiValueQueryStringParameters": null, "pathParameters": null,
            "stageVariables": null, "body": "AAEC", "isBase64Encoded": true,
            "requestContext": {"resourceId": "r", "resourcePath": "/orders", "httpMethod": "POST", "path": "/prod/orders",
                "accountId": "1", "protocol": "HTTP/1.1", "stage": "prod", "requestId": "r", "apiId": "a",
                "identity": {}, "authorizer": {"claims": {"sub": "tenant-a"}}}
        });
        let req = lambda_http::request::from_str(&sent.to_string()).expect("REST API event");
        let event = of(&req);
        assert_eq!(event["headers"]["Idempotency-Key"], "k1");
        assert_eq!(event["headers"]["idempotency-key"], "k1");
        assert_eq!(event["multiValueHeaders"]["Idempotency-Key"], json!(["k1"]));
        assert_eq!(event["body"], "AAEC");
        assert_eq!(event["isBase64Encoded"], true);
        assert_eq!(event["resource"], "/orders");
        assert_eq!(event["httpMethod"], "POST");
        assert_eq!(
            event.pointer("/requestContext/authorizer/claims/sub"),
            Some(&json!("tenant-a"))
        );
    }

    #[test]
    fn a_request_without_context_is_an_http_api_event() {
        let req = http::Request::post("/orders?x=1")
            .header("idempotency-key", "k1")
            .body(Body::Empty)
            .expect("request");
        let event = of(&req);
        assert_eq!(event["version"], "2.0");
        assert_eq!(event["headers"]["idempotency-key"], "k1");
        assert_eq!(event["body"], Value::Null);
        assert_eq!(event["rawQueryString"], "x=1");
    }
}
