//! `POST /orders`: validate the body, then create the order in phases that
//! a crashed run resumes (the pending order, the charge, the confirmation).

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use aws_sdk_dynamodb::Client;
use http::{header, StatusCode};
use lambda_http::{Body, Request, Response};
use lambda_idempotency::{IdempotencyContext, TenantSource};
use serde::Deserialize;

use crate::response::{dependency_failed, json_response, problem, problems};

/// What the handlers share, built by [`Orders::new`](crate::Orders::new).
/// It lives here, beside the order logic that reads most of it, so that
/// `routes` depends on this module and not the other way round.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) table: String,
    pub(crate) provider_latency: Duration,
    pub(crate) demo_crashes: bool,
    pub(crate) tenant: TenantSource,
    pub(crate) allow_anonymous: bool,
}

/// A new order as clients send it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewOrder {
    customer_id: String,
    amount: i64,
    currency: String,
}

fn parse_order(body: &[u8]) -> Result<NewOrder, String> {
    let order: NewOrder = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the body must be JSON {{\"customer_id\": string, \"amount\": integer > 0, \
             \"currency\": three uppercase letters}}: {e}"
        )
    })?;
    if order.customer_id.trim().is_empty() {
        return Err("customer_id must not be empty".into());
    }
    if order.amount <= 0 {
        return Err(format!(
            "amount must be an integer > 0 (minor units), got {}",
            order.amount
        ));
    }
    if order.currency.len() != 3 || !order.currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!(
            "currency must be three uppercase letters such as EUR, got {:?}",
            order.currency
        ));
    }
    Ok(order)
}

/// Create an order in three atomic phases separated by recovery points, so a
/// crash resumes where it stopped instead of starting over:
///
/// 1. write the order (`pending`, `executions` + 1), commit `order-created`;
/// 2. charge the provider (the one foreign call), commit `charged` with the
///    charge id;
/// 3. confirm the order with the charge id, answer `201`.
///
/// `executions` counts every run of the handler body: a fresh run adds 1 in
/// phase 1, a run resumed from a recovery point (which skips phase 1) adds 1
/// in phase 3 and to `resumed_runs` as well.
///
/// Ids come from the idempotency record (`derived_key`), so even a re-run of
/// a phase writes the same order and charges under the same provider key.
pub(crate) async fn create_order(inner: &Inner, req: &Request) -> Response<Body> {
    let order = match parse_order(req.body().as_ref()) {
        Ok(order) => order,
        Err(detail) => return problem(StatusCode::BAD_REQUEST, problems::INVALID_ORDER, &detail),
    };
    // The middleware requires a key on this route, so a claimed record (and
    // ids derived from it) is there whenever idempotency is on. Without one
    // (`LAMBDA_IDEMPOTENCY_DISABLED`, or the router called bare) the order
    // still runs, as a switched-off middleware promises, with fresh random
    // ids and no recovery points: a retry then makes another order.
    let run = match IdempotencyContext::of(req) {
        Some(ctx) => Run::recorded(ctx),
        None => match Run::unrecorded() {
            Ok(run) => run,
            Err(detail) => return dependency_failed(&detail),
        },
    };
    match run_phases(inner, req, &run, &order).await {
        Ok(response) => response,
        Err(detail) => dependency_failed(&detail),
    }
}

/// The phases, in order; a recovery point names the last one finished.
const PHASES: [&str; 2] = ["order-created", "charged"];

/// One run of `POST /orders`: its ids, and the idempotency record it reports
/// progress to (none when the middleware is switched off).
struct Run<'a> {
    order_id: String,
    /// The payment provider's idempotency key for this order's charge.
    charge_key: String,
    ctx: Option<&'a IdempotencyContext>,
}

impl<'a> Run<'a> {
    /// Ids derived from the claimed record, progress committed to it.
    fn recorded(ctx: &'a IdempotencyContext) -> Self {
        Run {
            order_id: ctx.derived_key("order"),
            charge_key: ctx.derived_key("charge"),
            ctx: Some(ctx),
        }
    }

    /// Fresh random ids and no record (the middleware is switched off).
    fn unrecorded() -> Result<Self, String> {
        let run = Run {
            order_id: random_hex(16)?,
            charge_key: random_hex(16)?,
            ctx: None,
        };
        tracing::warn!(
            order_id = %run.order_id,
            "POST /orders without an idempotency record (middleware disabled): \
             fresh ids, so a retry creates another order"
        );
        Ok(run)
    }

    fn recovery_point(&self) -> Option<&lambda_idempotency::store::Checkpoint> {
        self.ctx.and_then(IdempotencyContext::recovery_point)
    }

    /// Record that `phase` finished (nowhere when there is no record).
    async fn commit(&self, phase: &str, data: serde_json::Value) -> Result<(), String> {
        match self.ctx {
            Some(ctx) => ctx
                .commit(phase, data)
                .await
                .map_err(|e| format!("could not record progress: {e}")),
            None => Ok(()),
        }
    }
}

/// `bytes` random bytes in hex, for ids that nothing derives.
fn random_hex(bytes: usize) -> Result<String, String> {
    let mut random = vec![0u8; bytes];
    getrandom::fill(&mut random).map_err(|e| format!("could not draw a random id: {e}"))?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

async fn run_phases(
    inner: &Inner,
    req: &Request,
    run: &Run<'_>,
    order: &NewOrder,
) -> Result<Response<Body>, String> {
    let order_id = &run.order_id;
    let resumed_from = run.recovery_point().map(|p| p.name.clone());
    let reached = resumed_from
        .as_deref()
        .and_then(|r| PHASES.iter().position(|p| *p == r));
    let done = |phase: usize| reached.is_some_and(|r| r >= phase);

    if !done(0) {
        let tenant = inner.tenant.resolve(req);
        create_pending_order(inner, order_id, tenant.as_deref(), order).await?;
        run.commit(PHASES[0], serde_json::json!({ "order_id": order_id }))
            .await?;
    }
    let charge = match run.recovery_point() {
        Some(point) if done(1) => Charge {
            id: point.data["charge_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            provider_calls: point.data["provider_calls"].as_i64().unwrap_or_default(),
        },
        _ => {
            let charge = charge(inner, &run.charge_key, order).await?;
            run.commit(
                PHASES[1],
                serde_json::json!({ "charge_id": charge.id, "provider_calls": charge.provider_calls }),
            )
            .await?;
            charge
        }
    };
    if inner.demo_crashes
        && req
            .headers()
            .get("x-demo-crash")
            .is_some_and(|v| v == "after-charge")
    {
        // The demo's simulated crash: the process dies after the charge is
        // recorded and before the order is confirmed.
        tracing::warn!(order_id = %order_id, "x-demo-crash: exiting after the charge");
        std::process::exit(137);
    }
    let mut stored = confirm_order(inner, order_id, &charge.id, resumed_from.is_some()).await?;
    stored["provider_calls"] = charge.provider_calls.into();
    stored["resumed_from"] = resumed_from.into();
    let mut response = json_response(StatusCode::CREATED, &stored);
    if let Ok(location) = http::HeaderValue::from_str(&format!("/orders/{order_id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// A charge as the provider reports it.
struct Charge {
    id: String,
    /// How many times the provider was called for this key (deduplicated).
    provider_calls: i64,
}

/// The simulated payment provider: like a real one, it deduplicates charges by
/// the idempotency key it is given, durably (one item `charge#<key>` in the
/// orders table), counts every call it receives, and answers after a
/// configurable latency.
async fn charge(inner: &Inner, key: &str, order: &NewOrder) -> Result<Charge, String> {
    tokio::time::sleep(inner.provider_latency).await;
    let fresh_id = format!(
        "ch_{}",
        random_hex(12).map_err(|e| format!("provider {e}"))?
    );
    let output = inner
        .client
        .update_item()
        .table_name(&inner.table)
        .key("order_id", AttributeValue::S(format!("charge#{key}")))
        .update_expression(
            "SET charge_id = if_not_exists(charge_id, :id), amount = :a, currency = :c ADD calls :one",
        )
        .expression_attribute_values(":id", AttributeValue::S(fresh_id))
        .expression_attribute_values(":a", AttributeValue::N(order.amount.to_string()))
        .expression_attribute_values(":c", AttributeValue::S(order.currency.clone()))
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .map_err(|e| retry_cause("the payment provider failed", e))?;
    let item = output.attributes().cloned().unwrap_or_default();
    Ok(Charge {
        id: item
            .get("charge_id")
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default(),
        provider_calls: item
            .get("calls")
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or_default(),
    })
}

fn table_error(e: impl std::error::Error + 'static) -> String {
    retry_cause("the orders table could not be written", e)
}

/// The cause [`dependency_failed`] logs when a write of `POST /orders`
/// fails: what failed, the SDK's whole error, and that a retry with the
/// same key is safe (every write here is keyed by the idempotency record).
fn retry_cause(what: &str, e: impl std::error::Error + 'static) -> String {
    format!(
        "{what}: {}; retry with the same Idempotency-Key",
        aws_sdk_dynamodb::error::DisplayErrorContext(&e)
    )
}

/// Phase 1: the order exists, pending; `executions` counts how often this
/// phase, the start of the handler body, really ran.
async fn create_pending_order(
    inner: &Inner,
    order_id: &str,
    tenant: Option<&str>,
    order: &NewOrder,
) -> Result<(), String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // The tenant that may read the order back (none for anonymous orders).
    let (set_tenant, tenant_value) = match tenant {
        Some(t) => (", tenant = :t", Some(AttributeValue::S(t.to_owned()))),
        None => ("", None),
    };
    inner
        .client
        .update_item()
        .table_name(&inner.table)
        .key("order_id", AttributeValue::S(order_id.to_owned()))
        .update_expression(format!(
            "SET customer_id = :c, amount = :a, currency = :cur, \
             order_status = if_not_exists(order_status, :pending), \
             created_at = if_not_exists(created_at, :now){set_tenant} ADD executions :one"
        ))
        .set_expression_attribute_values(Some(
            tenant_value
                .map(|v| std::collections::HashMap::from([(":t".to_owned(), v)]))
                .unwrap_or_default(),
        ))
        .expression_attribute_values(":c", AttributeValue::S(order.customer_id.clone()))
        .expression_attribute_values(":a", AttributeValue::N(order.amount.to_string()))
        .expression_attribute_values(":cur", AttributeValue::S(order.currency.clone()))
        .expression_attribute_values(":pending", AttributeValue::S("pending".into()))
        .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .map(|_| ())
        .map_err(table_error)
}

/// Phase 3: the order is confirmed with its charge. A resumed run counts
/// itself here, as it skipped phase 1.
async fn confirm_order(
    inner: &Inner,
    order_id: &str,
    charge_id: &str,
    resumed: bool,
) -> Result<serde_json::Value, String> {
    let mut update = inner
        .client
        .update_item()
        .table_name(&inner.table)
        .key("order_id", AttributeValue::S(order_id.to_owned()))
        .expression_attribute_values(":ch", AttributeValue::S(charge_id.to_owned()))
        .expression_attribute_values(":confirmed", AttributeValue::S("confirmed".into()));
    update = if resumed {
        update
            .update_expression(
                "SET charge_id = :ch, order_status = :confirmed ADD executions :one, resumed_runs :one",
            )
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
    } else {
        update.update_expression("SET charge_id = :ch, order_status = :confirmed")
    };
    let output = update
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .map_err(table_error)?;
    Ok(order_json(output.attributes().cloned().unwrap_or_default()))
}

pub(crate) fn order_json(
    item: std::collections::HashMap<String, AttributeValue>,
) -> serde_json::Value {
    let s = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    let n = |k: &str| {
        item.get(k)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<i64>().ok())
    };
    serde_json::json!({
        "order_id": s("order_id"),
        "customer_id": s("customer_id"),
        "amount": n("amount"),
        "currency": s("currency"),
        "charge_id": s("charge_id"),
        "executions": n("executions"),
        "resumed_runs": n("resumed_runs").unwrap_or(0),
        "status": s("order_status"),
        "created_at": n("created_at"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_validation_explains_each_rule() {
        assert!(parse_order(br#"{"customer_id":"c1","amount":5,"currency":"EUR"}"#).is_ok());
        for (body, needle) in [
            (&br#"not json"#[..], "must be JSON"),
            (
                br#"{"customer_id":"","amount":5,"currency":"EUR"}"#,
                "customer_id",
            ),
            (
                br#"{"customer_id":"c","amount":0,"currency":"EUR"}"#,
                "amount",
            ),
            (
                br#"{"customer_id":"c","amount":2.5,"currency":"EUR"}"#,
                "must be JSON",
            ),
            (
                br#"{"customer_id":"c","amount":5,"currency":"eur"}"#,
                "currency",
            ),
            (
                br#"{"customer_id":"c","amount":5,"currency":"EURO"}"#,
                "currency",
            ),
            (
                br#"{"customer_id":"c","amount":5,"currency":"EUR","x":1}"#,
                "unknown field",
            ),
        ] {
            let err = parse_order(body).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }
}
