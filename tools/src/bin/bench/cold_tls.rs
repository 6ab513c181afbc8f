//! `bench cold-tls`: the first request after a cold start as it happens on
//! AWS, over TLS: `orders-api` (its store's warm-up on and off) and
//! Powertools Python's cold-start probe, both through one TLS-terminating
//! proxy in front of DynamoDB Local (tls_proxy.rs) whose certificate a test
//! CA signed, trusted by both clients and by nothing else.
//!
//! Each run is split where it can be observed without instrumenting
//! either tool beyond what it already reports, on this process's clock:
//! - process start: `orders-api` spawned without `ORDERS_TABLE` refuses
//!   its configuration and exits before building a client (loading, Tokio,
//!   log subscriber, environment): spawn to exit. Powertools: the
//!   interpreter's start, the run's total minus the phases the script
//!   times itself;
//! - imports (Powertools only): importing Powertools and boto3;
//! - client set-up: `orders-api`, from process start to whichever comes
//!   first of the proxy accepting its connection and its first
//!   `GET /next` at the Runtime API (the end of init): the AWS
//!   configuration, the clients, the store. Powertools: its set-up phase
//!   (boto3 client, persistence layer, decorated handler);
//! - TLS handshake: the proxy's view of the first connection, from
//!   accepting it to the client's `Finished` (ClientHello, the server's
//!   flight, the client's verification of the chain and key exchange);
//!   said to fall in init or in the first invocation;
//! - warm-up request: with the warm-up on, the rest of init after the
//!   handshake (the `GetItem`'s round trip and whatever init does after
//!   it);
//! - first execution: the first invocation (first `GET /next` to the
//!   response for `orders-api`, the script's invocation phase for
//!   Powertools) minus the handshake when it happened there.
//!
//! Before the runs, each client is shown to refuse the proxy when the
//! test CA is not among its roots (the trust is real), and every measured
//! run must open its first connection through a completed handshake.

use std::path::Path;
use std::time::{Duration, Instant};

use integration_tests::functions;
use integration_tests::runtime_api::{Outcome, RuntimeApi};
use serde_json::{json, Value};

use crate::cold::first_line;
use crate::tls_proxy::{Connection, TlsProxy};
use crate::Result;

/// The files `scripts/bench/tls-certs.sh` makes in its directory.
struct Certs {
    /// The proxy's chain, leaf then intermediate.
    chain: String,
    /// The leaf's key.
    key: String,
    /// The machine's roots and the test CA: what both clients trust.
    trusted: String,
    /// The machine's roots and another CA, not the test CA.
    untrusted: String,
}

impl Certs {
    fn in_dir(dir: &Path) -> Certs {
        let file = |name: &str| dir.join(name).display().to_string();
        Certs {
            chain: file("server-chain.pem"),
            key: file("server.key"),
            trusted: file("trusted.pem"),
            untrusted: file("untrusted.pem"),
        }
    }
}

/// An order, as `bench cold` posts it.
const ORDER: &str = r#"{"customer_id":"cus_42","amount":2500,"currency":"EUR"}"#;

/// `bench cold-tls K ORDERS_API_BIN CERT_DIR PYTHON SCRIPT [W]`: W orders
/// through a warm `orders-api` on the proxy first (the engine's JIT), the
/// trust checks, then K rounds (after one unrecorded), each a cold
/// `orders-api` with its warm-up on, one with it off, and a cold run of the
/// Powertools probe SCRIPT, in that order on even rounds and the two
/// `orders-api` runs swapped on odd ones.
pub(crate) async fn cold_tls(
    runs: usize,
    bin: &str,
    cert_dir: &Path,
    python: &str,
    script: &str,
    warm_up_orders: usize,
) -> Result<Value> {
    let certs = Certs::in_dir(cert_dir);
    let plain = std::env::var("AWS_ENDPOINT_URL_DYNAMODB")
        .map_err(|_| "AWS_ENDPOINT_URL_DYNAMODB is not set: run under scripts/dynamodb-local.sh")?;
    let upstream = plain
        .strip_prefix("http://")
        .ok_or_else(|| format!("AWS_ENDPOINT_URL_DYNAMODB={plain}: expected http://host:port"))?
        .trim_end_matches('/')
        .to_owned();
    let proxy = TlsProxy::start(certs.chain.as_ref(), certs.key.as_ref(), upstream).await?;
    let endpoint = format!("https://127.0.0.1:{}", proxy.port);
    let tables = functions::tables().await?;
    let powertools_table = powertools_table().await?;

    // What each tool is given: the proxy's endpoint, and roots. The SDK
    // for Rust reads its roots through rustls-native-certs, which takes
    // SSL_CERT_FILE (and SSL_CERT_DIR, emptied here) in place of the
    // system's; boto3 takes AWS_CA_BUNDLE in place of certifi's bundle.
    let rust_env = |roots: &str, warm_up: bool| {
        vec![
            ("AWS_ENDPOINT_URL_DYNAMODB", endpoint.clone()),
            ("SSL_CERT_FILE", roots.to_owned()),
            ("SSL_CERT_DIR", String::new()),
            ("IDEMPOTENCY_WARM_UP", warm_up.to_string()),
        ]
    };
    let python_env = |roots: &str| {
        vec![
            ("AWS_ENDPOINT_URL_DYNAMODB".to_owned(), endpoint.clone()),
            ("AWS_CA_BUNDLE".to_owned(), roots.to_owned()),
            ("POWERTOOLS_TABLE".to_owned(), powertools_table.clone()),
        ]
    };
    let orders = OrdersApi {
        bin,
        tables: &tables,
    };
    let script = [script.to_owned()];

    // The trust is real: without the test CA, neither client completes a
    // handshake, and neither answers.
    eprintln!(
        "bench: cold-tls: each client against roots without the test CA (a refusal is expected)"
    );
    proxy.take();
    let refused = orders
        .run(&rust_env(&certs.untrusted, true), "untrusted")
        .await;
    let orders_untrusted = refusals(&proxy.take(), "orders-api", refused.err())?;
    let (_, _, line) = first_line(python, &script, &python_env(&certs.untrusted)).await?;
    let python_refused = (!line.contains("\"ok\": true")).then(|| format!("printed {line:?}"));
    let python_untrusted = refusals(&proxy.take(), "Powertools", python_refused)?;

    // The engine warmed through the proxy by a warm process.
    let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
    let mut env = functions::orders_env(&api, &tables, &[]);
    env.extend(own(rust_env(&certs.trusted, true)));
    let mut warm = functions::spawn(bin, &env)?;
    for i in 0..warm_up_orders {
        invoke_order(&api, format!("tls-warm-{i}")).await?;
    }
    let _ = warm.kill().await;
    proxy.take();

    let (mut on, mut off, mut powertools) = (vec![], vec![], vec![]);
    // Round 0 warms the disk cache and is not recorded.
    for i in 0..=runs {
        let process_start = orders.process_start(i).await?;
        let mut pair = [(true, &mut on), (false, &mut off)];
        if i % 2 == 1 {
            pair.reverse();
        }
        for (warm_up, series) in pair {
            proxy.take();
            let run = orders
                .run(
                    &rust_env(&certs.trusted, warm_up),
                    &format!("{warm_up}-{i}"),
                )
                .await?;
            let split = run.split(process_start, &proxy.take())?;
            if i > 0 {
                series.push(split);
            }
        }
        proxy.take();
        let (spawned, elapsed, line) =
            first_line(python, &script, &python_env(&certs.trusted)).await?;
        let split = python_split(spawned, elapsed, &line, &proxy.take())?;
        if i > 0 {
            powertools.push(split);
        }
    }
    Ok(json!({
        "orders_api_warm_up_on": on,
        "orders_api_warm_up_off": off,
        "powertools": powertools,
        "untrusted_refused": {"orders_api": orders_untrusted, "powertools": python_untrusted},
    }))
}

/// `(name, value)` pairs with owned names, as `functions::spawn` takes them.
fn own(pairs: Vec<(&str, String)>) -> Vec<(String, String)> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// A table laid out as Powertools' default (partition key `id`, no stream).
async fn powertools_table() -> Result<String> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let name = integration_tests::unique_name("powertools-tls");
    integration_tests::client()
        .await
        .create_table()
        .table_name(&name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(|e| e.to_string())?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .map_err(|e| e.to_string())?,
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(|e| format!("create table {name}: {e:?}"))?;
    Ok(name)
}

/// The connections of a run against untrusted roots: at least one, none
/// with a completed handshake, and the client reported a failure. The
/// proxy's reasons, for the report.
fn refusals(connections: &[Connection], who: &str, failure: Option<String>) -> Result<Value> {
    let Some(failure) = failure else {
        return Err(format!(
            "{who} answered through the TLS proxy without the test CA among its roots: \
             the trust is not what the benchmark says"
        ));
    };
    if connections.is_empty() {
        return Err(format!(
            "{who} failed without connecting to the TLS proxy ({failure}): not a TLS refusal"
        ));
    }
    if connections.iter().any(|c| c.handshake.is_ok()) {
        return Err(format!(
            "{who} completed a handshake without the test CA among its roots"
        ));
    }
    let reasons: Vec<String> = connections
        .iter()
        .filter_map(|c| c.handshake.clone().err())
        .collect();
    Ok(json!({"connections": connections.len(), "proxy_saw": reasons}))
}

/// Invoke one order through `api` and require its 201.
async fn invoke_order(api: &RuntimeApi, key: String) -> Result<()> {
    match api
        .invoke(
            functions::post_order_event(&key, ORDER),
            Duration::from_secs(30),
        )
        .await
    {
        Outcome::Response(body)
            if String::from_utf8_lossy(&body).contains("\"statusCode\":201") =>
        {
            Ok(())
        }
        other => Err(format!("order {key}: unexpected {other:?}")),
    }
}

/// `orders-api` on its tables.
struct OrdersApi<'a> {
    bin: &'a str,
    tables: &'a (String, String),
}

/// One cold `orders-api` run: when it started, its first poll, its first
/// response, and how long a second request took after it.
struct OrdersRun {
    spawned: Instant,
    polled: Instant,
    responded: Instant,
    /// The second request's time, in the warm process.
    second: Duration,
}

impl OrdersApi<'_> {
    /// Spawn to exit of the binary refusing its configuration (no
    /// `ORDERS_TABLE`), as `bench cold` measures it.
    async fn process_start(&self, i: usize) -> Result<Duration> {
        let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
        let mut env = functions::orders_env(&api, self.tables, &[]);
        env.retain(|(k, _)| k != "ORDERS_TABLE");
        let t = Instant::now();
        let status = functions::spawn(self.bin, &env)?
            .wait()
            .await
            .map_err(|e| e.to_string())?;
        if status.success() {
            return Err(format!(
                "process start {i}: without ORDERS_TABLE orders-api exited successfully"
            ));
        }
        Ok(t.elapsed())
    }

    /// A new process on a new Runtime API with `extra` in its environment,
    /// up to its answer to one order.
    async fn run(&self, extra: &[(&str, String)], label: &str) -> Result<OrdersRun> {
        let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
        let mut env = functions::orders_env(&api, self.tables, &[]);
        env.extend(own(extra.to_vec()));
        let spawned = Instant::now();
        let mut child = functions::spawn(self.bin, &env)?;
        let answered = invoke_order(&api, format!("tls-cold-{label}")).await;
        let responded = Instant::now();
        // The same request again in the now warm process: what the first
        // invocation is set against.
        let again = match answered {
            Ok(()) => invoke_order(&api, format!("tls-again-{label}")).await,
            Err(e) => Err(e),
        };
        let second = responded.elapsed();
        let _ = child.kill().await;
        again?;
        let polled = api
            .first_poll()
            .ok_or_else(|| format!("cold run {label}: answered without polling"))?;
        Ok(OrdersRun {
            spawned,
            polled,
            responded,
            second,
        })
    }
}

/// The first connection of a run: when it was accepted, the time to its
/// ClientHello and its handshake, which must have completed.
fn first_handshake(connections: &[Connection], who: &str) -> Result<(Instant, Duration, Duration)> {
    let first = connections
        .first()
        .ok_or_else(|| format!("{who}: no connection reached the TLS proxy"))?;
    let handshake = first
        .handshake
        .clone()
        .map_err(|e| format!("{who}: the TLS handshake failed: {e}"))?;
    Ok((first.accepted, first.before_hello, handshake))
}

impl OrdersRun {
    /// The run's split (see the module's documentation).
    fn split(&self, process_start: Duration, connections: &[Connection]) -> Result<Value> {
        let (accepted, before_hello, handshake) = first_handshake(connections, "orders-api")?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let since = |t: Instant| t.saturating_duration_since(self.spawned);
        let init = since(self.polled);
        let total = since(self.responded);
        let first_invocation = total.saturating_sub(init);
        let tls = before_hello + handshake;
        let done = since(accepted) + tls;
        let in_init = done <= init;
        let client_setup = since(accepted).min(init).saturating_sub(process_start);
        let (warm_up_request, first_execution) = if in_init {
            (init - done, first_invocation)
        } else {
            (Duration::ZERO, first_invocation.saturating_sub(tls))
        };
        Ok(json!({
            "total_ms": ms(total),
            "init_ms": ms(init),
            "first_invocation_ms": ms(first_invocation),
            "process_start_ms": ms(process_start),
            "client_setup_ms": ms(client_setup),
            "before_hello_ms": ms(before_hello),
            "handshake_ms": ms(handshake),
            "handshake_in_init": in_init,
            "warm_up_request_ms": ms(warm_up_request),
            "first_execution_ms": ms(first_execution),
            "second_invocation_ms": ms(self.second),
            "connections": connections.len(),
        }))
    }
}

/// Powertools' run, split from the phases the probe timed itself and the
/// proxy's handshake.
fn python_split(
    spawned: Instant,
    elapsed: Duration,
    line: &str,
    connections: &[Connection],
) -> Result<Value> {
    let parsed: Value = serde_json::from_str(line).unwrap_or(Value::Null);
    if parsed.get("ok") != Some(&Value::Bool(true)) {
        return Err(format!("Powertools cold run printed {line:?}"));
    }
    let phase = |name: &str| {
        parsed
            .get(name)
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("Powertools cold run: no {name} in {line}"))
    };
    let (import, setup, invocation) = (
        phase("import_ms")?,
        phase("setup_ms")?,
        phase("invocation_ms")?,
    );
    let (accepted, before_hello, handshake) = first_handshake(connections, "Powertools")?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let done = ms(accepted.saturating_duration_since(spawned) + before_hello + handshake);
    let tls = ms(before_hello + handshake);
    let total = ms(elapsed);
    // boto3 connects on its first request, inside the invocation.
    let in_init = done <= total - invocation;
    Ok(json!({
        "total_ms": total,
        "init_ms": total - invocation,
        "first_invocation_ms": invocation,
        "process_start_ms": (total - import - setup - invocation).max(0.0),
        "import_ms": import,
        "client_setup_ms": setup,
        "before_hello_ms": ms(before_hello),
        "handshake_ms": ms(handshake),
        "handshake_in_init": in_init,
        "warm_up_request_ms": 0.0,
        "first_execution_ms": if in_init { invocation } else { (invocation - tls).max(0.0) },
        "connections": connections.len(),
    }))
}
