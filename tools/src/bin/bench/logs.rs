//! `bench logs N BIN`: what `orders-api` writes to its log per invocation,
//! as deployed (`RUST_LOG=info`, the metrics namespace template.yaml sets):
//! CloudWatch Logs bills ingestion per byte, so this is a running cost.
//!
//! One process on a Runtime API, its stdout and stderr read to the byte
//! (Lambda forwards both). After a first request (start-up lines counted
//! apart), N first executions, the N replays of their keys, then N requests
//! whose key is in progress: each such key's first request went to a second
//! process that exits after the charge (the demo's `x-demo-crash`), so its
//! claim stays held until its lease ends. Bytes are read once the process
//! has been quiet, so each kind gets exactly its own lines. Lambda's own
//! platform lines (`START`, `END`, `REPORT`) are the same for every
//! function and are left out, as they are on Powertools' side
//! (scripts/bench/powertools_logs.py).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use integration_tests::functions;
use integration_tests::runtime_api::{Outcome, RuntimeApi};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::Result;

/// The lines a process wrote so far, from both streams.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

impl Captured {
    /// Read `stream` line by line into the capture until it closes.
    fn follow(&self, stream: impl AsyncRead + Unpin + Send + 'static) {
        let lines = self.0.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stream).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if let Ok(mut lines) = lines.lock() {
                    lines.push(line);
                }
            }
        });
    }

    /// The lines written since `from` (a count of lines), once nothing new
    /// came for a while.
    async fn since_quiet(&self, from: usize) -> Vec<String> {
        let mut seen = usize::MAX;
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let lines = self.0.lock().map(|l| l.clone()).unwrap_or_default();
            if lines.len() == seen {
                return lines
                    .get(from..)
                    .map(<[String]>::to_vec)
                    .unwrap_or_default();
            }
            seen = lines.len();
        }
    }

    fn len(&self) -> usize {
        self.0.lock().map(|l| l.len()).unwrap_or_default()
    }
}

/// Bytes as the log receives them: each line with its newline.
fn bytes(lines: &[String]) -> usize {
    lines.iter().map(|l| l.len() + 1).sum()
}

pub(crate) async fn logs(n: usize, bin: &str) -> Result<Value> {
    if n == 0 {
        return Err("logs: N must be at least 1".into());
    }
    let tables = functions::tables().await?;
    let deployed = [
        ("RUST_LOG", "info"),
        ("IDEMPOTENCY_METRICS_NAMESPACE", "LambdaIdempotency"),
    ];
    let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
    let captured = Captured::default();
    let mut child = functions::spawn_logged(bin, &functions::orders_env(&api, &tables, &deployed))?;
    if let Some(out) = child.stdout.take() {
        captured.follow(out);
    }
    if let Some(err) = child.stderr.take() {
        captured.follow(err);
    }
    let body = r#"{"customer_id":"cus_42","amount":2500,"currency":"EUR"}"#;
    let request = |key: String, extra: Option<(&str, &str)>| {
        let mut event: Value = serde_json::from_str(&functions::post_order_event(&key, body))
            .map_err(|e| format!("the POST /orders event: {e}"))?;
        if let Some((name, value)) = extra {
            event["headers"][name] = json!(value);
        }
        Ok::<_, String>(event.to_string())
    };
    let expect = |api: RuntimeApi, event: String, status: u16| async move {
        match api.invoke(event, Duration::from_secs(30)).await {
            Outcome::Response(body)
                if String::from_utf8_lossy(&body).contains(&format!("\"statusCode\":{status}")) =>
            {
                Ok(())
            }
            other => Err(format!("logs: expected status {status}, got {other:?}")),
        }
    };

    expect(api.clone(), request("start".into(), None)?, 201).await?;
    let start = captured.since_quiet(0).await;

    let mut per_kind = serde_json::Map::new();
    let mut samples = serde_json::Map::new();
    let mut measure = |kind: &str, lines: Vec<String>| {
        per_kind.insert(kind.into(), json!(bytes(&lines) as f64 / n as f64));
        let per_invocation = lines.len() / n;
        samples.insert(kind.into(), json!(lines[..per_invocation.min(lines.len())]));
    };
    let from = captured.len();
    for i in 0..n {
        expect(api.clone(), request(format!("first-{i}"), None)?, 201).await?;
    }
    measure("first", captured.since_quiet(from).await);
    let from = captured.len();
    for i in 0..n {
        expect(api.clone(), request(format!("first-{i}"), None)?, 201).await?;
    }
    measure("replay", captured.since_quiet(from).await);

    // Keys left in progress by a process that exits after the charge.
    let crashing = RuntimeApi::start().await.map_err(|e| e.to_string())?;
    let mut env = functions::orders_env(&crashing, &tables, &deployed);
    env.push(("ORDERS_API_DEMO_CRASHES".into(), "1".into()));
    for i in 0..n {
        let mut crasher = functions::spawn(bin, &env)?;
        let event = request(format!("held-{i}"), Some(("x-demo-crash", "after-charge")))?;
        // The lease is the invocation's deadline: held for the measurement.
        tokio::select! {
            outcome = crashing.invoke(event, Duration::from_secs(120)) => {
                let _ = crasher.kill().await;
                return Err(format!(
                    "logs: the crashing process answered instead of exiting: {outcome:?}"
                ));
            }
            exited = crasher.wait() => {
                exited.map_err(|e| format!("logs: waiting for the crashing process: {e}"))?;
            }
        }
    }
    let from = captured.len();
    for i in 0..n {
        expect(api.clone(), request(format!("held-{i}"), None)?, 409).await?;
    }
    measure("in_progress", captured.since_quiet(from).await);
    let _ = child.kill().await;

    Ok(json!({
        "invocations_per_kind": n,
        "bytes_per_invocation": per_kind,
        "first_request_bytes": bytes(&start),
        "sample_lines": samples,
        "settings": deployed.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
    }))
}
