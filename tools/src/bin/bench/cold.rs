//! Cold starts: `bench cold` (`orders-api`), `bench cold-same` (this
//! binary's `bench serve`, the function Powertools' cold start is set
//! against) and `bench cold-command` (any command, Powertools Python's).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use integration_tests::functions;
use integration_tests::runtime_api::{Outcome, RuntimeApi};
use lambda_idempotency::{DynamoStore, IdempotencyLayer};
use serde_json::{json, Value};
use tower::Layer;

use crate::handler::{body, handler};
use crate::Result;

/// Orders a warm `orders-api` serves before the cold runs by default (see
/// [`cold`]).
pub(crate) const COLD_WARM_UP_ORDERS: usize = 300;

/// `orders-api` from spawn to its first response, K times, split where the
/// Runtime API sees it (see [`cold_series`]). Process start alone is timed
/// apart: the same binary, spawned with its configuration incomplete (no
/// `ORDERS_TABLE`), refuses it and exits before building any client, so
/// spawn to exit is the executable's loading, the Tokio runtime, the log
/// subscriber and reading the environment; init minus that is the set-up
/// of the clients.
pub(crate) async fn cold(runs: usize, bin: &str, warm_up: usize) -> Result<Value> {
    let tables = functions::tables().await?;
    let series = ColdSeries {
        what: "cold start",
        body: r#"{"customer_id":"cus_42","amount":2500,"currency":"EUR"}"#,
        env: &|api| functions::orders_env(api, &tables, &[]),
        spawn: &|env| functions::spawn(bin, env),
        refused_without: Some("ORDERS_TABLE"),
    };
    cold_series(&series, runs, warm_up).await
}

/// A function process's environment, as `(name, value)` pairs.
type ProcessEnv = [(String, String)];

/// One function's cold starts, as [`cold`] and [`cold_same`] time them.
struct ColdSeries<'a> {
    /// What error messages call it.
    what: &'a str,
    /// The body of every request.
    body: &'a str,
    /// The function's environment for a Runtime API.
    env: &'a dyn Fn(&RuntimeApi) -> Vec<(String, String)>,
    /// Start the function with an environment.
    spawn: &'a dyn Fn(&ProcessEnv) -> Result<tokio::process::Child>,
    /// A variable without which the function refuses to start: spawn to
    /// exit without it is the process start.
    refused_without: Option<&'a str>,
}

/// `warm_up` requests through one warm process first (a fresh engine runs
/// its first requests through the JVM's interpreter, so the cold runs then
/// time the function's start, not DynamoDB Local's), then K cold runs, each
/// a new process on a new Runtime API: spawn to first response, split into
/// init (spawn to the first `GET .../next`, as Lambda's init duration) and
/// the first invocation (from there to the response), and a second request
/// in the same process right after, the warm figure the first invocation
/// compares with (the difference is first use: connections, clients).
async fn cold_series(series: &ColdSeries<'_>, runs: usize, warm_up: usize) -> Result<Value> {
    let what = series.what;
    let invoke = |api: &RuntimeApi, key: String| {
        let api = api.clone();
        let event = functions::post_order_event(&key, series.body);
        async move {
            match api.invoke(event, Duration::from_secs(30)).await {
                Outcome::Response(body)
                    if String::from_utf8_lossy(&body).contains("\"statusCode\":201") =>
                {
                    Ok(())
                }
                other => Err(format!("{what}, request {key}: unexpected {other:?}")),
            }
        }
    };
    let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
    let mut warm = (series.spawn)(&(series.env)(&api))?;
    for i in 0..warm_up {
        invoke(&api, format!("warm-{i}")).await?;
    }
    let _ = warm.kill().await;

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (mut total, mut init, mut first) = (vec![], vec![], vec![]);
    let (mut second, mut start) = (vec![], vec![]);
    // Run 0 warms the disk cache and is not recorded.
    for i in 0..=runs {
        let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
        let env = (series.env)(&api);
        let started = match series.refused_without {
            None => None,
            Some(name) => {
                let refused: Vec<(String, String)> =
                    env.iter().filter(|(k, _)| k != name).cloned().collect();
                let t = Instant::now();
                let mut child = (series.spawn)(&refused)?;
                let status = child.wait().await.map_err(|e| e.to_string())?;
                if status.success() {
                    return Err(format!(
                        "{what} {i}: without {name} the function exited successfully; \
                         expected it to refuse its configuration"
                    ));
                }
                Some(t.elapsed())
            }
        };

        let t = Instant::now();
        let mut child = (series.spawn)(&env)?;
        invoke(&api, format!("cold-{i}")).await?;
        let elapsed = t.elapsed();
        let t2 = Instant::now();
        let again = invoke(&api, format!("again-{i}")).await;
        let second_elapsed = t2.elapsed();
        let _ = child.kill().await;
        again?;
        let polled = api
            .first_poll()
            .ok_or_else(|| format!("{what} {i}: answered without polling"))?;
        if i > 0 {
            let to_poll = polled.saturating_duration_since(t);
            total.push(ms(elapsed));
            init.push(ms(to_poll));
            first.push(ms(elapsed.saturating_sub(to_poll)));
            second.push(ms(second_elapsed));
            start.extend(started.map(ms));
        }
    }
    let mut out = json!({
        "cold_start_ms": total,
        "init_ms": init,
        "first_invocation_ms": first,
        "second_invocation_ms": second,
    });
    if series.refused_without.is_some() {
        out["process_start_ms"] = json!(start);
    }
    Ok(out)
}

/// `bench serve`: the benchmark's handler in the middleware on DynamoDB, as
/// a Lambda function, so its cold start is set against Powertools' with the
/// same work (one claim, one completion).
pub(crate) async fn serve() -> Result<Value> {
    let aws = aws_config::load_from_env().await;
    // IDEMPOTENCY_TABLE, read (and checked) by the library's settings.
    let store =
        DynamoStore::from_env(aws_sdk_dynamodb::Client::new(&aws)).map_err(|e| e.to_string())?;
    let svc = IdempotencyLayer::new(store).layer(handler(Duration::ZERO));
    lambda_http::run(svc).await.map_err(|e| e.to_string())?;
    Ok(Value::Null)
}

/// `bench cold-same K W`: [`cold`]'s split for `bench serve` on a fresh
/// deployed table, each request with a new key and the 1 KB body.
pub(crate) async fn cold_same(runs: usize, warm_up: usize) -> Result<Value> {
    let bin = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = bin.to_string_lossy();
    let table = integration_tests::create_table(&integration_tests::client().await).await;
    let series = ColdSeries {
        what: "cold-same",
        body: body(),
        env: &|api| {
            let mut env = api.function_env("bench-serve");
            env.push(("IDEMPOTENCY_TABLE".into(), table.clone()));
            env
        },
        spawn: &|env| {
            tokio::process::Command::new(bin.as_ref())
                .arg("serve")
                .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("spawn {bin} serve: {e}"))
        },
        refused_without: None,
    };
    cold_series(&series, runs, warm_up).await
}

/// `command` from spawn to its first stdout line, K times. That line is a
/// JSON object with `"ok": true`; its other numeric fields (the phases the
/// process timed itself) are collected as series of their own.
pub(crate) async fn cold_command(runs: usize, command: &[String]) -> Result<Value> {
    let (program, args) = command
        .split_first()
        .ok_or("cold-command needs a command")?;
    let mut samples = Vec::new();
    let mut phases: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    // Run 0 warms the disk cache and is not recorded.
    for i in 0..=runs {
        let (_, elapsed, line) = first_line(program, args, &[]).await?;
        let parsed: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if parsed.get("ok") != Some(&Value::Bool(true)) {
            return Err(format!("cold run {i} of {program} printed {line:?}"));
        }
        if i > 0 {
            samples.push(elapsed.as_secs_f64() * 1e3);
            for (name, value) in parsed.as_object().into_iter().flatten() {
                if let (Some(v), true) = (value.as_f64(), name.ends_with("_ms")) {
                    phases.entry(name.clone()).or_default().push(v);
                }
            }
        }
    }
    let mut out = json!({"cold_start_ms": samples});
    for (name, series) in phases {
        out[name] = json!(series);
    }
    Ok(out)
}

/// Run `program` with `args` and `env` added to this process's
/// environment: when it was spawned, how long from then to its first
/// stdout line, and that line (empty when it printed none). The process is
/// waited for.
pub(crate) async fn first_line(
    program: &str,
    args: &[String],
    env: &[(String, String)],
) -> Result<(Instant, Duration, String)> {
    use tokio::io::AsyncBufReadExt;
    let t = Instant::now();
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawn {program}: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let line = tokio::io::BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    let elapsed = t.elapsed();
    let _ = child.wait().await;
    Ok((t, elapsed, line))
}
