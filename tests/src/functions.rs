//! Real function processes on DynamoDB Local: tables from template.yaml,
//! `orders-api` processes polling a [`RuntimeApi`], HTTP API events, and the
//! orders they leave behind. Shared by the benchmark and reliability drivers.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;

use crate::runtime_api::RuntimeApi;

/// Fresh idempotency and orders tables, from template.yaml.
pub async fn tables() -> Result<(String, String), String> {
    let client = crate::client().await;
    let idempotency = crate::unique_name("idempotency");
    let orders = crate::unique_name("orders");
    crate::create_table_from_template(&client, "IdempotencyTable", &idempotency).await?;
    crate::create_table_from_template(&client, "OrdersTable", &orders).await?;
    Ok((idempotency, orders))
}

/// Environment of an `orders-api` process on these tables, polling `api`.
pub fn orders_env(
    api: &RuntimeApi,
    tables: &(String, String),
    extra: &[(&str, &str)],
) -> Vec<(String, String)> {
    let mut env = api.function_env("orders-api");
    for (k, v) in [
        ("IDEMPOTENCY_TABLE", tables.0.as_str()),
        ("ORDERS_TABLE", tables.1.as_str()),
        ("RUST_LOG", "error"),
        // No authorizer in front of these processes: the shared anonymous
        // scope, as the template sets it when it has no JWT authorizer.
        ("IDEMPOTENCY_ALLOW_ANONYMOUS", "true"),
    ] {
        env.push((k.into(), v.into()));
    }
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

/// Start a function binary with `env`; stdout piped (for EMF lines), stderr discarded.
pub fn spawn(bin: &str, env: &[(String, String)]) -> Result<tokio::process::Child, String> {
    spawn_with_stderr(bin, env, std::process::Stdio::null())
}

/// Start a function binary with `env`, both streams piped: everything it
/// writes, as Lambda sends both to the function's log.
pub fn spawn_logged(bin: &str, env: &[(String, String)]) -> Result<tokio::process::Child, String> {
    spawn_with_stderr(bin, env, std::process::Stdio::piped())
}

fn spawn_with_stderr(
    bin: &str,
    env: &[(String, String)],
    stderr: std::process::Stdio,
) -> Result<tokio::process::Child, String> {
    tokio::process::Command::new(bin)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawn {bin}: {e} (build it first: cargo build -p orders-api)"))
}

/// An HTTP API (v2) `POST /orders` event.
pub fn post_order_event(key: &str, body: &str) -> String {
    json!({
        "version": "2.0", "routeKey": "POST /orders", "rawPath": "/orders", "rawQueryString": "",
        "headers": {"content-type": "application/json", "idempotency-key": key},
        "requestContext": {"accountId": "123456789012", "apiId": "local", "domainName": "local", "domainPrefix": "local",
            "http": {"method": "POST", "path": "/orders", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "harness"},
            "requestId": "harness", "routeKey": "POST /orders", "stage": "$default", "time": "22/Nov/2026:10:15:00 +0000", "timeEpoch": 0},
        "body": body, "isBase64Encoded": false
    })
    .to_string()
}

/// Peak resident set of a process, from /proc (Linux).
pub fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Every item of a table (consistent scan, all pages).
pub async fn scan(table: &str) -> Result<Vec<HashMap<String, AttributeValue>>, String> {
    crate::scan_all(&crate::client().await, table).await
}

/// `executions` of every order (charge items left out), by order id.
pub async fn order_executions(orders_table: &str) -> Result<BTreeMap<String, u64>, String> {
    Ok(scan(orders_table)
        .await?
        .into_iter()
        .filter_map(|item| {
            let id = item.get("order_id")?.as_s().ok()?.clone();
            let n = item.get("executions")?.as_n().ok()?.parse().ok()?;
            (!id.starts_with("charge#")).then_some((id, n))
        })
        .collect())
}
