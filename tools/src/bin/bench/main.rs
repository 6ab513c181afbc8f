//! The end-to-end benchmark driver behind `make bench` (run it in release).
//!
//! Subcommands; each prints one JSON object on stdout. DynamoDB Local must be
//! running for `latency`, `cold` and `storm` (`scripts/bench.sh` arranges it):
//! - `latency N R`: R rounds on DynamoDB Local, each of two passes of N
//!   iterations, on three tables made before the first write: one laid out
//!   as Powertools' (the compared table), the deployed one and the deployed
//!   one without its index. The comparison pass times, per iteration, one call of each
//!   kind Powertools is timed on, in turn, so drift hits every kind alike:
//!   the bare conditional `PutItem` (the round-trip floor), a first
//!   execution and a replay of that key through the HTTP middleware, and a
//!   replay from the in-process cache (`.local_cache(..)`). The diagnostic
//!   pass then times, on each of the three tables, the bare `PutItem`, a
//!   first execution and its replay, and
//!   the library's own requests issued alone through `Store::claim` /
//!   `Store::complete` (claim of an absent record, completion with the 1 KB
//!   response, claim of a completed record = a replay's request). Separate
//!   passes keep the engine's load during the compared calls what it is for
//!   Powertools. The middleware runs over a store wrapper that times its
//!   store calls, so each call's own time (outside the store) is recorded too.
//!   Requests are counted by an SDK interceptor around every timed call, and
//!   per invocation kind by a separate probe (first, replay, in progress,
//!   cached replay);
//! - `engines N` (behind `make bench-engines`): the same middleware on each
//!   engine in turn, DynamoDB Local, a Redis server, a Redis Cluster
//!   (`IDEMPOTENCY_TEST_REDIS_URL` and `IDEMPOTENCY_TEST_REDIS_CLUSTER_URL`,
//!   from `scripts/redis-local.sh`), PostgreSQL directly and through
//!   PgBouncer in transaction pooling mode (`IDEMPOTENCY_TEST_POSTGRES_URL`
//!   and `IDEMPOTENCY_TEST_POSTGRES_POOLER_URL`, from
//!   `scripts/postgres-local.sh`): after a warm-up, N iterations of a bare
//!   round trip (a read of an absent record through the store), a first
//!   execution and its replay, then 20 conflicts with a first execution
//!   still running; round trips per call as each engine's counter saw them,
//!   and p50 / p99 latency per kind;
//! - `cpu N`: thread CPU time (`CLOCK_THREAD_CPUTIME_ID`) per request on a
//!   current-thread runtime and `MemoryStore`, requests built and responses
//!   dropped in batches of 64 outside the timing, wrapped handler minus the
//!   bare handler, median over the batches of 7 runs of N (and the mean);
//! - `cpu-probe bare|first|replay|cached N`: N requests only, for
//!   instruction counting under callgrind;
//! - `cold K ORDERS_API_BIN [W]`: process spawn to first response of
//!   `orders-api` through the Runtime API, K times, split into process
//!   start, client set-up and first invocation, after W orders (default
//!   300) served by a warm process have warmed DynamoDB Local;
//! - `engine-probe N`: N bare conditional `PutItem`s of this client on a
//!   fresh table without stream or index, after as many to warm up: run on
//!   the engine the Powertools pass just used, it says with the same client
//!   whether the two tools met engines of the same speed;
//! - `serve`: a Lambda function (through the Runtime API of
//!   `AWS_LAMBDA_RUNTIME_API`) that is the benchmark's handler wrapped in
//!   the middleware on `DynamoStore` (`IDEMPOTENCY_TABLE`): the same
//!   function Powertools' cold start runs;
//! - `cold-same K [W]`: `cold`, on that function (this binary's `serve`)
//!   with the 1,000-byte body, after W requests have warmed the engine;
//! - `cutover N`: a first execution without a cut-over from Powertools,
//!   with its window open and with it over (cutover.rs);
//! - `logs N ORDERS_API_BIN`: the bytes `orders-api` writes to its log per
//!   first execution, replay and request whose key is in progress, as
//!   deployed (logs.rs);
//! - `cold-tls K ORDERS_API_BIN CERT_DIR PYTHON SCRIPT [W]`: the first
//!   request after a cold start over TLS, through a TLS-terminating proxy
//!   in front of DynamoDB Local (a test CA's certificate, from
//!   `scripts/bench/tls-certs.sh CERT_DIR`): `orders-api` with its store's
//!   warm-up on and off, and Powertools Python's probe SCRIPT, K runs each,
//!   split into process start, client set-up, TLS handshake and first
//!   execution (cold_tls.rs), after W orders (default 300) have warmed the
//!   engine; first, each client is shown to refuse the proxy without the
//!   test CA;
//! - `cold-command K CMD ARGS...`: process spawn to its first stdout line
//!   (Powertools Python's import + setup + first invocation), K times;
//! - `storm ORDERS_API_BIN REQUESTS KEYS CONCURRENCY PROCESSES`: the duplicate
//!   storm against real `orders-api` processes, each key's duplicates sent
//!   back to back so they race; peak RSS, statuses and execution counts.
//!
//! Every request carries `scripts/bench/body.json`, the 1,000-byte JSON body
//! the Powertools side sends too.
//!
//! One file per subcommand, but `cold.rs`, which holds the cold starts
//! (`cold`, `cold-same`, `cold-command`, and `serve`, the function
//! `cold-same` starts; `cold-tls` is `cold_tls.rs`, its proxy
//! `tls_proxy.rs`); what several share is in `handler.rs` (the request
//! and the handler every variant wraps), `stats.rs`, `tables.rs` (the latency
//! tables and their clients), `timed_store.rs` and `calls.rs` (the calls
//! timed on one table).

mod calls;
mod cold;
mod cold_tls;
mod cpu;
mod cutover;
mod engine_probe;
mod engines;
mod handler;
mod latency;
mod logs;
mod stats;
mod storm;
mod tables;
mod timed_store;
mod tls_proxy;

use cold::{cold, cold_command, cold_same, serve, COLD_WARM_UP_ORDERS};
use cold_tls::cold_tls;
use cpu::{cpu, cpu_probe};
use cutover::cutover;
use engine_probe::engine_probe;
use engines::engines;
use latency::latency;
use logs::logs;
use storm::storm;

type Result<T> = std::result::Result<T, String>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let num = |i: usize, default: u64| args.get(i).and_then(|v| v.parse().ok()).unwrap_or(default);
    // CPU figures come from one thread doing all the work; the rest needs the
    // multi-threaded runtime (concurrent invocations, the Runtime API server).
    let single = matches!(arg(0).as_str(), "cpu" | "cpu-probe");
    let runtime = if single {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    let runtime = runtime.unwrap_or_else(|e| fail(format!("tokio runtime: {e}")));
    let result = runtime.block_on(async {
        match arg(0).as_str() {
            "latency" => latency(num(1, 2000) as usize, num(2, 3) as usize).await,
            "engines" => engines(num(1, 2000) as usize).await,
            "cpu" => cpu(num(1, 20_000) as usize).await,
            "cpu-probe" => cpu_probe(&arg(1), num(2, 1000) as usize).await,
            "cold" => {
                let warm_up = num(3, COLD_WARM_UP_ORDERS as u64) as usize;
                cold(num(1, 10) as usize, &arg(2), warm_up).await
            }
            "engine-probe" => engine_probe(num(1, 500) as usize).await,
            "logs" => logs(num(1, 50) as usize, &arg(2)).await,
            "cutover" => cutover(num(1, 1000) as usize).await,
            "serve" => serve().await,
            "cold-same" => {
                let warm_up = num(2, COLD_WARM_UP_ORDERS as u64) as usize;
                cold_same(num(1, 10) as usize, warm_up).await
            }
            "cold-tls" => {
                let warm_up = num(6, COLD_WARM_UP_ORDERS as u64) as usize;
                let certs = std::path::PathBuf::from(arg(3));
                cold_tls(
                    num(1, 10) as usize,
                    &arg(2),
                    &certs,
                    &arg(4),
                    &arg(5),
                    warm_up,
                )
                .await
            }
            "cold-command" => cold_command(num(1, 10) as usize, &args[2.min(args.len())..]).await,
            "storm" => {
                storm(
                    &arg(1),
                    num(2, 10_000) as usize,
                    num(3, 1000) as usize,
                    num(4, 32) as usize,
                    num(5, 4) as usize,
                )
                .await
            }
            other => Err(format!(
                "unknown subcommand {other:?}; see the doc comment of tools/src/bin/bench/main.rs"
            )),
        }
    });
    match result {
        Ok(value) => println!("{value}"),
        Err(e) => fail(e),
    }
}

fn fail(message: String) -> ! {
    eprintln!("bench: {message}");
    std::process::exit(1)
}
