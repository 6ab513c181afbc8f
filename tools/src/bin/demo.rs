//! The narrated demo scenario behind `make demo`.
//!
//! `demo create-tables` makes the tables named by `IDEMPOTENCY_TABLE` and
//! `ORDERS_TABLE` on DynamoDB Local from template.yaml's definitions.
//! `demo play <watch-url>` talks to `orders-api` served by `cargo lambda watch`
//! (its Function URL emulation and its Lambda Invoke API), prints every request
//! and response, and exits non-zero if any answer differs from the contract.

use std::time::Duration;

use reqwest::{Client, Method, StatusCode};

type Result<T> = std::result::Result<T, String>;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("create-tables") => create_tables().await,
        Some("play") => match args.get(1) {
            Some(url) => play(url.trim_end_matches('/')).await,
            None => Err("usage: demo play <cargo-lambda-watch-url>".into()),
        },
        Some("resume") => match args.get(1) {
            Some(url) => resume(url.trim_end_matches('/')).await,
            None => Err("usage: demo resume <cargo-lambda-watch-url>".into()),
        },
        _ => Err(
            "usage: demo create-tables | demo play <watch-url> | demo resume <watch-url>".into(),
        ),
    };
    if let Err(e) = result {
        eprintln!("demo failed: {e}");
        std::process::exit(1);
    }
}

fn env(name: &str) -> Result<String> {
    std::env::var(name).map_err(|_| format!("{name} is not set (run the demo with `make demo`)"))
}

async fn create_tables() -> Result<()> {
    let client = integration_tests::client().await;
    for (logical_id, var) in [
        ("IdempotencyTable", "IDEMPOTENCY_TABLE"),
        ("OrdersTable", "ORDERS_TABLE"),
    ] {
        let name = env(var)?;
        integration_tests::create_table_from_template(&client, logical_id, &name).await?;
        println!("created table {name} from template.yaml resource {logical_id}");
    }
    Ok(())
}

/// One HTTP exchange as the demo shows it.
struct Exchange {
    status: StatusCode,
    headers: Vec<(String, String)>,
    body: serde_json::Value,
}

impl Exchange {
    /// An answer as the demo shows it, whichever way it came (a Function URL
    /// or the Invoke API): the body as JSON, or as text when it is not JSON;
    /// printed on arrival.
    fn received(status: StatusCode, headers: Vec<(String, String)>, text: &str) -> Exchange {
        let body = serde_json::from_str(text).unwrap_or(serde_json::Value::String(text.to_owned()));
        let exchange = Exchange {
            status,
            headers,
            body,
        };
        exchange.print();
        exchange
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn print(&self) {
        println!("  <- {}", self.status);
        for (k, v) in &self.headers {
            if [
                "content-type",
                "idempotent-replayed",
                "retry-after",
                "location",
            ]
            .contains(&k.to_ascii_lowercase().as_str())
            {
                println!("     {k}: {v}");
            }
        }
        println!("     {}", self.body);
    }

    fn expect(&self, status: u16, what: &str) -> Result<()> {
        if self.status.as_u16() == status {
            println!("  ok: {what}");
            Ok(())
        } else {
            Err(format!(
                "expected {status} ({what}), got {}: {}",
                self.status, self.body
            ))
        }
    }
}

struct Demo {
    http: Client,
    url_base: String,
    invoke_url: String,
}

impl Demo {
    async fn send(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<&str>,
    ) -> Result<Exchange> {
        println!("  -> {method} {path}");
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.url_base));
        if let Some(key) = key {
            println!("     Idempotency-Key: {key}");
            req = req.header("Idempotency-Key", key);
        }
        if let Some(body) = body {
            println!("     {body}");
            req = req
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        let res = req
            .send()
            .await
            .map_err(|e| format!("request to cargo lambda watch failed: {e}"))?;
        let status = res.status();
        let headers = res
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let text = res
            .text()
            .await
            .map_err(|e| format!("reading the response: {e}"))?;
        Ok(Exchange::received(status, headers, &text))
    }

    /// `POST /orders` with a key and a JSON body, the demo's most common call.
    async fn post_order(&self, key: &str, body: &str) -> Result<Exchange> {
        self.send(Method::POST, "/orders", Some(key), Some(body))
            .await
    }

    /// Send an HTTP API (v2) event with a JWT `sub` claim through the Lambda
    /// Invoke API, as API Gateway does after its JWT authorizer accepted a token.
    async fn invoke_as_tenant(&self, sub: &str, key: &str, body: &str) -> Result<Exchange> {
        println!("  -> POST /orders (HTTP API event, JWT sub = {sub}, via the Lambda Invoke API)");
        println!("     Idempotency-Key: {key}");
        println!("     {body}");
        let event = serde_json::json!({
            "version": "2.0", "routeKey": "POST /orders", "rawPath": "/orders", "rawQueryString": "",
            "headers": {"content-type": "application/json", "idempotency-key": key},
            "requestContext": {
                "accountId": "123456789012", "apiId": "demo", "domainName": "demo.execute-api.local",
                "domainPrefix": "demo", "requestId": "demo", "routeKey": "POST /orders", "stage": "$default",
                "time": "22/Nov/2026:10:15:00 +0000", "timeEpoch": 1795169700000u64,
                "http": {"method": "POST", "path": "/orders", "protocol": "HTTP/1.1", "sourceIp": "203.0.113.10", "userAgent": "demo"},
                "authorizer": {"jwt": {"claims": {"sub": sub}, "scopes": null}}
            },
            "body": body, "isBase64Encoded": false
        });
        let res = self
            .http
            .post(&self.invoke_url)
            .body(event.to_string())
            .send()
            .await
            .map_err(|e| format!("invoke request failed: {}", chain(&e)))?;
        let raw: serde_json::Value = res.json_value().await?;
        let status = raw["statusCode"]
            .as_u64()
            .and_then(|s| StatusCode::from_u16(s as u16).ok())
            .ok_or_else(|| format!("the invoke answer has no statusCode: {raw}"))?;
        let headers = raw["headers"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        let text = raw["body"].as_str().unwrap_or_default();
        Ok(Exchange::received(status, headers, text))
    }
}

trait JsonValue {
    async fn json_value(self) -> Result<serde_json::Value>;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> Result<serde_json::Value> {
        let text = self
            .text()
            .await
            .map_err(|e| format!("reading the response: {e}"))?;
        serde_json::from_str(&text).map_err(|e| format!("the answer is not JSON ({e}): {text}"))
    }
}

/// An error and its causes, one after the other (reqwest's Display alone says
/// only "error sending request").
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn step(n: u32, title: &str) {
    println!("\n== {n}. {title}");
}

fn demo(base: &str) -> Result<Demo> {
    Ok(Demo {
        http: Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| e.to_string())?,
        url_base: format!("{base}/lambda-url/orders-api"),
        invoke_url: format!("{base}/2015-03-31/functions/orders-api/invocations"),
    })
}

/// The crashing order of step 8 (sent by `play`, retried by `resume`).
const CRASH_ORDER: &str = r#"{"customer_id":"cus_9","amount":4200,"currency":"EUR"}"#;

/// Steps 1 to 8, up to the crash: the function process dies mid-request.
async fn play(base: &str) -> Result<()> {
    let demo = demo(base)?;
    let order = r#"{"customer_id":"cus_42","amount":2500,"currency":"EUR"}"#;

    step(
        1,
        "First call: the handler runs, charges the provider once, stores the response",
    );
    let first = demo.post_order("order-0001", order).await?;
    first.expect(201, "created")?;
    let order_id = first.body["order_id"]
        .as_str()
        .ok_or("no order_id in the response")?
        .to_owned();

    step(
        2,
        "Client retry with the same key and body: replayed, the handler does not run",
    );
    let retry = demo.post_order("order-0001", order).await?;
    retry.expect(201, "same status")?;
    if retry.header("idempotent-replayed") != Some("true") || retry.body != first.body {
        return Err("the retry was not an identical replay".into());
    }
    println!("  ok: Idempotent-Replayed: true, identical body");

    step(
        3,
        "Duplicate sent while the first is still running (the provider takes 1.5 s)",
    );
    let slow = tokio::spawn({
        let http = demo.http.clone();
        let url = format!("{}/orders", demo.url_base);
        async move {
            http.post(url)
                .header("Idempotency-Key", "order-0002")
                .header("content-type", "application/json")
                .body(r#"{"customer_id":"cus_7","amount":990,"currency":"USD"}"#)
                .send()
                .await
                .map(|r| r.status())
        }
    });
    println!("  (order-0002 sent in the background)");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let dup = demo
        .post_order(
            "order-0002",
            r#"{"customer_id":"cus_7","amount":990,"currency":"USD"}"#,
        )
        .await?;
    dup.expect(409, "in progress")?;
    if dup.header("retry-after").is_none() {
        return Err("the 409 has no Retry-After".into());
    }
    let original = slow
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    println!("  background order-0002 finished: {original}");
    if original != StatusCode::CREATED {
        return Err(format!("the original order-0002 answered {original}"));
    }

    step(
        4,
        "Same key, different body: the key was used for another request",
    );
    demo.post_order(
        "order-0001",
        r#"{"customer_id":"cus_42","amount":9900,"currency":"EUR"}"#,
    )
    .await?
    .expect(422, "key reused")?;

    step(5, "No Idempotency-Key on a route that requires one");
    demo.send(Method::POST, "/orders", None, Some(order))
        .await?
        .expect(400, "key missing")?;

    step(
        6,
        "Another tenant sends the same key: it gets its own order, never the first tenant's",
    );
    let other = demo
        .invoke_as_tenant("tenant-b", "order-0001", order)
        .await?;
    other.expect(201, "created for tenant-b")?;
    if other.header("idempotent-replayed").is_some()
        || other.body["order_id"] == first.body["order_id"]
    {
        return Err("tenant-b received tenant A's stored response".into());
    }
    println!("  ok: a different order_id, not a replay");

    step(7, "GET the first order: the handler body ran exactly once");
    let got = demo
        .send(Method::GET, &format!("/orders/{order_id}"), None, None)
        .await?;
    got.expect(200, "found")?;
    if got.body["executions"] != 1 {
        return Err(format!(
            "executions is {}, expected 1",
            got.body["executions"]
        ));
    }
    println!("  ok: executions = 1");

    step(
        8,
        "A crash after the charge: the retry resumes at the recovery point",
    );
    println!("  -> POST /orders   (x-demo-crash: after-charge: the process exits after the charge is recorded)");
    println!("     Idempotency-Key: order-0003");
    let crashed = demo
        .http
        .post(format!("{}/orders", demo.url_base))
        .header("Idempotency-Key", "order-0003")
        .header("x-demo-crash", "after-charge")
        .header("content-type", "application/json")
        .body(CRASH_ORDER)
        .timeout(Duration::from_secs(15))
        .send()
        .await;
    match crashed {
        Ok(res) if res.status().is_success() => {
            return Err(format!("the crash request succeeded: {}", res.status()))
        }
        Ok(res) => println!(
            "  <- {} (the function process died mid-request)",
            res.status()
        ),
        Err(e) => println!(
            "  <- no response: {} (the function process died mid-request)",
            chain(&e)
        ),
    }
    Ok(())
}

/// Step 8, after the crash: a new function instance serves the retry, which
/// takes the record over and resumes from the recovery point.
async fn resume(base: &str) -> Result<()> {
    let demo = demo(base)?;
    println!("  (a new function instance is up, as Lambda starts one after a crash)");
    println!("  (waiting 4 s: the crashed attempt's lease is 3 s)");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let resumed = demo.post_order("order-0003", CRASH_ORDER).await?;
    resumed.expect(201, "completed by the retry")?;
    if resumed.body["resumed_from"] != "charged" || resumed.body["provider_calls"] != 1 {
        return Err(format!(
            "the retry did not resume after the charge: {}",
            resumed.body
        ));
    }
    if resumed.body["executions"] != 2 || resumed.body["resumed_runs"] != 1 {
        return Err(format!(
            "the order should count two runs of the body, one resumed: {}",
            resumed.body
        ));
    }
    println!("  ok: resumed_from = charged, provider_calls = 1 (the card was charged once)");
    println!("  ok: executions = 2, resumed_runs = 1 (the body ran twice; the retry skipped the done phases)");
    println!("\ndemo: every step answered as the contract says");
    Ok(())
}
