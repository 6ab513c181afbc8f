//! The `Orders` service: the router and `GET /orders/{order_id}`
//! (`POST /orders` is the order logic's, in `order`).

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use http::StatusCode;
use lambda_http::{Body, Request, Response};

use crate::order::{create_order, order_json, Inner};
use crate::response::{dependency_failed, json_response, problem, problems};
use crate::Config;

/// The router and handlers.
#[derive(Clone, Debug)]
pub struct Orders {
    inner: Arc<Inner>,
}

impl Orders {
    /// Handlers on the orders table of `config`.
    pub fn new(client: Client, config: &Config) -> Orders {
        Orders {
            inner: Arc::new(Inner {
                client,
                table: config.orders_table.clone(),
                provider_latency: config.provider_latency,
                demo_crashes: config.demo_crashes,
                tenant: config.tenant_source(),
                allow_anonymous: config.allow_anonymous,
            }),
        }
    }
}

impl tower::Service<Request> for Orders {
    type Response = Response<Body>;
    type Error = lambda_http::Error;
    type Future = lambda_http::BoxFuture<'static, Result<Response<Body>, lambda_http::Error>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move { Ok(route(&inner, req).await) })
    }
}

async fn route(inner: &Inner, req: Request) -> Response<Body> {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let method = req.method().clone();
    if path.ends_with("/orders") || path == "orders" {
        return match method {
            http::Method::POST => create_order(inner, &req).await,
            _ => problem(
                StatusCode::METHOD_NOT_ALLOWED,
                problems::METHOD_NOT_ALLOWED,
                "use POST /orders to create an order",
            ),
        };
    }
    if let Some((prefix, id)) = path.rsplit_once('/') {
        if prefix.ends_with("/orders") || prefix == "orders" {
            return match method {
                http::Method::GET => get_order(inner, &req, id).await,
                _ => problem(
                    StatusCode::METHOD_NOT_ALLOWED,
                    problems::METHOD_NOT_ALLOWED,
                    "use GET /orders/{order_id}",
                ),
            };
        }
    }
    problem(
        StatusCode::NOT_FOUND,
        problems::NOT_FOUND,
        "no such route; try POST /orders or GET /orders/{order_id}",
    )
}

async fn get_order(inner: &Inner, req: &Request, order_id: &str) -> Response<Body> {
    let caller = inner.tenant.resolve(req);
    if caller.is_none() && !inner.allow_anonymous {
        return lambda_idempotency::problem::response(
            lambda_idempotency::problem::TENANT_MISSING,
            "orders belong to the caller that created them, and this request carries no \
             caller identity (JWT sub)",
        );
    }
    // Order ids are 32 hex characters (derived keys); anything else, including
    // the provider's `charge#...` items, is not an order.
    if order_id.len() != 32 || !order_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return problem(
            StatusCode::NOT_FOUND,
            problems::NOT_FOUND,
            "no order has this id",
        );
    }
    let result = inner
        .client
        .get_item()
        .table_name(&inner.table)
        .key("order_id", AttributeValue::S(order_id.to_owned()))
        .consistent_read(true)
        .send()
        .await;
    match result {
        Ok(output) => match output.item() {
            // Another tenant's order is answered as absent: its existence is
            // not the caller's business.
            Some(item)
                if item
                    .get("tenant")
                    .and_then(|v| v.as_s().ok())
                    .map(String::as_str)
                    == caller.as_deref() =>
            {
                json_response(StatusCode::OK, &order_json(item.clone()))
            }
            _ => problem(
                StatusCode::NOT_FOUND,
                problems::NOT_FOUND,
                "no order has this id",
            ),
        },
        Err(e) => dependency_failed(&format!(
            "the orders table could not be read: {}",
            aws_sdk_dynamodb::error::DisplayErrorContext(&e)
        )),
    }
}
