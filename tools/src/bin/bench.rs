//! The end-to-end benchmark driver behind `make bench` (run it in release).
//!
//! Subcommands; each prints one JSON object on stdout. DynamoDB Local must be
//! running for `latency`, `cold` and `storm` (`scripts/bench.sh` arranges it):
//! - `latency N R`: R rounds on DynamoDB Local, each of two passes of N
//!   iterations, on three tables made before the first write: one laid out
//!   as Powertools' (the compared table), the deployed one and the deployed
//!   one without its index. The comparison pass times, per iteration, one call of each
//!   kind Powertools is timed on, in turn, so drift hits every kind alike:
//!   the bare conditional `PutItem` (the issue's round-trip floor), a first
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
//! - `cold-command K CMD ARGS...`: process spawn to its first stdout line
//!   (Powertools Python's import + setup + first invocation), K times;
//! - `storm ORDERS_API_BIN REQUESTS KEYS CONCURRENCY PROCESSES`: the duplicate
//!   storm against real `orders-api` processes, each key's duplicates sent
//!   back to back so they race; peak RSS, statuses and execution counts.
//!
//! Every request carries `scripts/bench/body.json`, the 1,000-byte JSON body
//! the Powertools side sends too.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::functions;
use integration_tests::runtime_api::{Outcome, RuntimeApi};
use integration_tests::RequestCounter;
use lambda_http::{Body, IntoResponse, Request, Response};
use lambda_idempotency::{
    http::REPLAYED_HEADER,
    store::{Checkpoint, ClaimOutcome, ClaimRequest, Completion, Lease, Status, StoredResponse},
    DynamoStore, Fingerprinter, IdempotencyLayer, MemoryStore, Store,
};
use serde_json::{json, Value};
use tower::{Layer, Service, ServiceExt};

type Result<T> = std::result::Result<T, String>;

/// What the library's store calls return.
type StoreResult<T> = std::result::Result<T, lambda_idempotency::Error>;

/// The body of every benchmark request, shared with the Powertools side and
/// the micro benchmarks.
const BODY: &str = include_str!("../../../scripts/bench/body.json");

/// Entries and age of the in-process cache of the cached-replay variant.
const CACHE_ENTRIES: usize = 1_000;
const CACHE_MAX_AGE: Duration = Duration::from_secs(300);

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
            "serve" => serve().await,
            "cold-same" => {
                let warm_up = num(2, COLD_WARM_UP_ORDERS as u64) as usize;
                cold_same(num(1, 10) as usize, warm_up).await
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
                "unknown subcommand {other:?}; see the doc comment of tools/src/bin/bench.rs"
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

fn body() -> &'static str {
    BODY.trim_end()
}

fn request(key: &str) -> Request {
    http::Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body()))
        .expect("static request")
}

/// The handler every variant wraps: answers 201 with the body, doing no work,
/// so what is measured is the idempotency layer.
fn handler(delay: Duration) -> impl integration_tests::Handler {
    tower::service_fn(move |req: Request| async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        handler_response(req.body().as_ref())
    })
}

fn handler_response(body: &[u8]) -> std::result::Result<Response<Body>, lambda_http::Error> {
    Ok(Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))?)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn is_replayed(res: &Response<Body>) -> bool {
    res.headers().get(REPLAYED_HEADER).is_some()
}

/// Latency samples of one kind of call, and the DynamoDB requests counted
/// around those very calls.
#[derive(Default)]
struct Series {
    us: Vec<f64>,
    requests: u64,
}

#[derive(Default)]
struct Samples(BTreeMap<&'static str, Series>);

impl Samples {
    fn add(&mut self, kind: &'static str, us: f64, requests: u64) {
        let series = self.0.entry(kind).or_default();
        series.us.push(us);
        series.requests += requests;
    }

    /// Runs `op`, adding its time and the store requests it made (as
    /// `counter` saw them) under `kind`.
    async fn measure<T>(
        &mut self,
        kind: &'static str,
        counter: &RequestCounter,
        op: impl std::future::Future<Output = T>,
    ) -> T {
        let before = counter.get();
        let start = Instant::now();
        let out = op.await;
        self.add(kind, micros(start.elapsed()), counter.get() - before);
        out
    }

    /// `{"<kind>_us": [...]}` and `{"<kind>": requests}`.
    fn into_json(
        self,
    ) -> (
        serde_json::Map<String, Value>,
        serde_json::Map<String, Value>,
    ) {
        let mut samples = serde_json::Map::new();
        let mut requests = serde_json::Map::new();
        for (kind, series) in self.0 {
            samples.insert(format!("{kind}_us"), json!(series.us));
            requests.insert(kind.to_owned(), json!(series.requests));
        }
        (samples, requests)
    }
}

/// One idempotency table with its store, its own request counter, and the
/// middleware on it (over a [`TimedStore`] reading `in_store`).
struct Target<S> {
    store: DynamoStore,
    counter: RequestCounter,
    in_store: StoreClock,
    svc: S,
}

fn target(
    store: DynamoStore,
    counter: RequestCounter,
) -> Target<impl Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone> {
    let in_store = StoreClock::default();
    let timed = TimedStore {
        inner: store.clone(),
        clock: in_store.clone(),
    };
    let svc = IdempotencyLayer::new(timed).layer(handler(Duration::ZERO));
    Target {
        store,
        counter,
        in_store,
        svc,
    }
}

/// Nanoseconds spent inside store calls, summed.
#[derive(Clone, Debug, Default)]
struct StoreClock(Arc<std::sync::atomic::AtomicU64>);

impl StoreClock {
    fn add(&self, since: Instant) {
        let ns = since.elapsed().as_nanos() as u64;
        self.0.fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
    }
    fn micros(&self) -> f64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1000.0
    }
}

/// A store that times every call it passes on: the latency of a call
/// through the middleware minus its time inside the store is what the
/// middleware itself adds (plus the two clock reads per store call).
#[derive(Debug)]
struct TimedStore {
    inner: DynamoStore,
    clock: StoreClock,
}

#[async_trait::async_trait]
impl Store for TimedStore {
    async fn claim(&self, request: &ClaimRequest) -> StoreResult<ClaimOutcome> {
        let start = Instant::now();
        let out = self.inner.claim(request).await;
        self.clock.add(start);
        out
    }
    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at_s: u64,
    ) -> StoreResult<Completion> {
        let start = Instant::now();
        let out = self.inner.complete(lease, response, expires_at_s).await;
        self.clock.add(start);
        out
    }
    async fn release(&self, lease: &Lease) -> StoreResult<()> {
        let start = Instant::now();
        let out = self.inner.release(lease).await;
        self.clock.add(start);
        out
    }
    async fn checkpoint(&self, lease: &Lease, checkpoint: &Checkpoint) -> StoreResult<()> {
        let start = Instant::now();
        let out = self.inner.checkpoint(lease, checkpoint).await;
        self.clock.add(start);
        out
    }
    async fn stuck(
        &self,
        cutoff_ms: u64,
        cursor: Option<lambda_idempotency::store::SweepCursor>,
        limit: usize,
    ) -> StoreResult<lambda_idempotency::store::StuckPage> {
        self.inner.stuck(cutoff_ms, cursor, limit).await
    }
    async fn resolve_stuck(
        &self,
        record: &lambda_idempotency::store::StuckRecord,
        how: lambda_idempotency::store::Resolve<'_>,
        cutoff_ms: u64,
        now_ms: u64,
    ) -> StoreResult<lambda_idempotency::store::Resolution> {
        self.inner
            .resolve_stuck(record, how, cutoff_ms, now_ms)
            .await
    }
    async fn get(
        &self,
        record_id: &str,
    ) -> StoreResult<Option<lambda_idempotency::store::StoredRecord>> {
        self.inner.get(record_id).await
    }
    async fn scan(
        &self,
        cursor: Option<lambda_idempotency::store::SweepCursor>,
        limit: usize,
    ) -> StoreResult<lambda_idempotency::store::RecordPage> {
        self.inner.scan(cursor, limit).await
    }
}

/// Time one call through a service; the response is checked by the caller,
/// after the timing.
async fn timed_call<S>(svc: &S, req: Request) -> Result<(f64, Response<Body>)>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let t = Instant::now();
    let res = svc.clone().oneshot(req).await.map_err(|e| e.to_string())?;
    Ok((micros(t.elapsed()), res))
}

/// DynamoDB requests per call over 50 calls of `svc` (the `what` probe),
/// each request from `next` and each answer checked by `ok`.
async fn probe<S>(
    what: &str,
    counter: &RequestCounter,
    svc: &S,
    mut next: impl FnMut() -> Request,
    ok: impl Fn(&Response<Body>) -> bool,
) -> Result<f64>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    const CALLS: u64 = 50;
    let before = counter.get();
    for _ in 0..CALLS {
        let (_, res) = timed_call(svc, next()).await?;
        if !ok(&res) {
            return Err(format!("probe {what} answered {}", res.status()));
        }
    }
    Ok((counter.get() - before) as f64 / CALLS as f64)
}

/// Keys, record ids and owner tokens never used before in this process.
#[derive(Default)]
struct Fresh(u64);

impl Fresh {
    fn key(&mut self, prefix: &str) -> String {
        self.0 += 1;
        format!("{prefix}-{}-{}", std::process::id(), self.0)
    }

    /// 32 hex digits, the shape of the middleware's random owner token.
    fn owner(&mut self) -> String {
        self.0 += 1;
        format!("{:016x}{:016x}", std::process::id(), self.0)
    }
}

/// What the samples of one table are called.
struct Names {
    bare: &'static str,
    first: &'static str,
    replay: &'static str,
    /// A first execution's and a replay's latency outside store calls.
    first_own: &'static str,
    replay_own: &'static str,
    claim: &'static str,
    complete: &'static str,
    replay_claim: &'static str,
}

/// The comparison pass, on a table laid out as Powertools' (partition key
/// only: no stream, no index), the same four kinds of call as Powertools
/// makes; its exact requests are not made in that pass.
const COMPARED: Names = Names {
    bare: "bare",
    first: "first",
    replay: "replay",
    first_own: "first_own",
    replay_own: "replay_own",
    claim: "plain_claim",
    complete: "plain_complete",
    replay_claim: "plain_replay_claim",
};

/// The diagnostic pass on the deployed table (stream and `sweep` index).
const DEPLOYED: Names = Names {
    bare: "idx_bare",
    first: "idx_first",
    replay: "idx_replay",
    first_own: "idx_first_own",
    replay_own: "idx_replay_own",
    claim: "claim",
    complete: "complete",
    replay_claim: "replay_claim",
};

/// The diagnostic pass on the deployed table without its index (the stream kept).
const NO_GSI: Names = Names {
    bare: "no_gsi_bare",
    first: "no_gsi_first",
    replay: "no_gsi_replay",
    first_own: "no_gsi_first_own",
    replay_own: "no_gsi_replay_own",
    claim: "no_gsi_claim",
    complete: "no_gsi_complete",
    replay_claim: "no_gsi_replay_claim",
};

/// The diagnostic pass on the compared table (neither stream nor index).
const PLAIN: Names = Names {
    bare: "plain_bare",
    first: "plain_first",
    replay: "plain_replay",
    first_own: "plain_first_own",
    replay_own: "plain_replay_own",
    claim: "plain_claim",
    complete: "plain_complete",
    replay_claim: "plain_replay_claim",
};

/// The claim the middleware would send for `key`: the same record id, the
/// same fingerprint of the body, a 32-hex-digit owner, a 15-minute lease and a
/// 24-hour expiry (the defaults outside Lambda).
fn claim_request(key: &str, owner: String, fingerprint: &str) -> ClaimRequest {
    let now = now_ms();
    let lease = now + 15 * 60 * 1000;
    ClaimRequest {
        record_id: lambda_idempotency::scope::RecordScope::new("POST", "/orders", key).record_id(),
        fingerprint: fingerprint.to_owned(),
        owner,
        now_ms: now,
        lease_expires_at_ms: lease,
        expires_at_s: now / 1000 + 24 * 3600,
    }
}

/// The library's own requests, issued alone: claim of an absent record,
/// completion with the handler's 1 KB response, and claim of that now
/// completed record (what a replay sends). Through `Store`, so the requests
/// are exactly the library's; the timing includes the store's building of
/// the request and decoding of the answer (microseconds of library CPU).
async fn exact_requests<S>(
    t: &Target<S>,
    names: &Names,
    fresh: &mut Fresh,
    fingerprint: &str,
    stored: &StoredResponse,
    samples: &mut Samples,
) -> Result<()> {
    let key = fresh.key("exact");
    let claim = claim_request(&key, fresh.owner(), fingerprint);
    let outcome = samples
        .measure(names.claim, &t.counter, async {
            t.store.claim(&claim).await.map_err(|e| e.to_string())
        })
        .await?;
    let ClaimOutcome::Claimed(lease) = outcome else {
        return Err(format!("claim of a fresh key found a record: {outcome:?}"));
    };

    let expires_at = now_ms() / 1000 + 24 * 3600;
    samples
        .measure(names.complete, &t.counter, async {
            t.store
                .complete(&lease, stored, expires_at)
                .await
                .map_err(|e| e.to_string())
        })
        .await?;

    let again = claim_request(&key, fresh.owner(), fingerprint);
    let outcome = samples
        .measure(names.replay_claim, &t.counter, async {
            t.store.claim(&again).await.map_err(|e| e.to_string())
        })
        .await?;
    match outcome {
        ClaimOutcome::Exists(record)
            if record.status == Status::Completed && record.response.is_some() =>
        {
            Ok(())
        }
        other => Err(format!(
            "claim of a completed record did not find it: {other:?}"
        )),
    }
}

/// A first execution of a fresh key, then a replay of it, through the middleware.
async fn first_and_replay<S>(
    t: &Target<S>,
    names: &Names,
    fresh: &mut Fresh,
    samples: &mut Samples,
) -> Result<()>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let key = fresh.key("bench");
    let req = request(&key);
    let before = t.counter.get();
    let in_store = t.in_store.micros();
    let (us, res) = timed_call(&t.svc, req).await?;
    samples.add(names.first, us, t.counter.get() - before);
    samples.add(names.first_own, us - (t.in_store.micros() - in_store), 0);
    if res.status() != 201 || is_replayed(&res) {
        return Err(format!("first execution answered {}", res.status()));
    }
    let req = request(&key);
    let before = t.counter.get();
    let in_store = t.in_store.micros();
    let (us, res) = timed_call(&t.svc, req).await?;
    samples.add(names.replay, us, t.counter.get() - before);
    samples.add(names.replay_own, us - (t.in_store.micros() - in_store), 0);
    if res.status() != 201 || !is_replayed(&res) {
        return Err(format!("replay answered {} unreplayed", res.status()));
    }
    Ok(())
}

/// Everything one latency iteration uses: the three tables (see
/// [`latency`]) and the cached middleware, on the compared table.
struct Env<'a, A, C> {
    compared: &'a Target<A>,
    deployed: &'a Target<A>,
    no_gsi: &'a Target<A>,
    cached_svc: &'a C,
    cached_key: &'a str,
    fingerprint: &'a str,
    stored: &'a StoredResponse,
}

impl<A, C> Env<'_, A, C>
where
    A: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
    C: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    /// The comparison pass: one call of each kind Powertools is timed on
    /// too, each timed alone, in a fixed order, so both tools put the same
    /// load on their DynamoDB Local while they are timed.
    async fn iteration(&self, fresh: &mut Fresh, samples: &mut Samples) -> Result<()> {
        let compared = self.compared;
        bare_put_timed(compared, &COMPARED, fresh, samples).await?;
        first_and_replay(compared, &COMPARED, fresh, samples).await?;

        let before = compared.counter.get();
        let (us, res) = timed_call(self.cached_svc, request(self.cached_key)).await?;
        samples.add("cached_replay", us, compared.counter.get() - before);
        if res.status() != 201 || !is_replayed(&res) {
            return Err(format!(
                "cached replay answered {} unreplayed",
                res.status()
            ));
        }
        Ok(())
    }

    /// The diagnostic pass: everything again, with the library's exact
    /// requests, on the deployed table, on it without its index, and on the
    /// compared table (DynamoDB Local charges a stream and an index on every
    /// write to the table, the floor's included), the three in one pass so
    /// their figures share its conditions.
    async fn diagnostic_iteration(&self, fresh: &mut Fresh, samples: &mut Samples) -> Result<()> {
        let (fp, stored) = (self.fingerprint, self.stored);
        diagnose_table(self.deployed, &DEPLOYED, fresh, fp, stored, samples).await?;
        diagnose_table(self.no_gsi, &NO_GSI, fresh, fp, stored, samples).await?;
        diagnose_table(self.compared, &PLAIN, fresh, fp, stored, samples).await
    }
}

/// The floor's bare `PutItem`, timed, on `t`'s table.
async fn bare_put_timed<S>(
    t: &Target<S>,
    names: &Names,
    fresh: &mut Fresh,
    samples: &mut Samples,
) -> Result<()> {
    let key = fresh.key("bare");
    samples
        .measure(names.bare, &t.counter, bare_put(&t.store, &key))
        .await?;
    Ok(())
}

/// One diagnostic round on one table: the bare `PutItem`, a first execution
/// and its replay through the middleware, and the library's exact requests.
async fn diagnose_table<S>(
    t: &Target<S>,
    names: &Names,
    fresh: &mut Fresh,
    fingerprint: &str,
    stored: &StoredResponse,
    samples: &mut Samples,
) -> Result<()>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    bare_put_timed(t, names, fresh, samples).await?;
    first_and_replay(t, names, fresh, samples).await?;
    exact_requests(t, names, fresh, fingerprint, stored, samples).await
}

/// The latency passes on three tables, all created before the first write
/// (DynamoDB Local slows every write to a stream-enabled table created after
/// other stream tables took writes, so `scripts/bench.sh` also gives each
/// run an engine of its own): the compared table, laid out as Powertools'
/// (partition key only, no stream, no index), which the comparison pass
/// uses; the deployed table of template.yaml (stream and sparse `sweep`
/// index); and that table without its index. Only the diagnostic pass
/// touches the last two.
async fn latency(n: usize, rounds: usize) -> Result<Value> {
    let deployed =
        target_on(integration_tests::create_table(&integration_tests::client().await).await).await;
    let no_gsi = target_on(create_table_without_gsi(true).await?).await;
    let compared = target_on(create_table_without_gsi(false).await?).await;
    let cached_svc = IdempotencyLayer::new(compared.store.clone())
        .local_cache(CACHE_ENTRIES, CACHE_MAX_AGE)
        .layer(handler(Duration::ZERO));
    let tables = json!({
        "compared": describe(&compared.store).await?,
        "gsi": describe(&deployed.store).await?,
        "no_gsi": describe(&no_gsi.store).await?,
    });

    let fingerprint = Fingerprinter::new().fingerprint("POST", "/orders", &[], body().as_bytes());
    let stored =
        StoredResponse::from_http(&handler_response(body().as_bytes()).map_err(|e| e.to_string())?);
    let mut fresh = Fresh::default();
    let cached_key = fresh.key("cached");
    let res = cached_svc
        .clone()
        .oneshot(request(&cached_key))
        .await
        .map_err(|e| e.to_string())?;
    if res.status() != 201 {
        return Err(format!(
            "cached key's first execution answered {}",
            res.status()
        ));
    }

    // Warm-up: connections, caches, and DynamoDB Local's JIT, which takes a
    // thousand or so calls to settle.
    let mut warm = Samples::default();
    let env = Env {
        compared: &compared,
        deployed: &deployed,
        no_gsi: &no_gsi,
        cached_svc: &cached_svc,
        cached_key: &cached_key,
        fingerprint: &fingerprint,
        stored: &stored,
    };
    for _ in 0..300 {
        env.iteration(&mut fresh, &mut warm).await?;
        env.diagnostic_iteration(&mut fresh, &mut warm).await?;
    }

    let mut rounds_data = Vec::new();
    for _ in 0..rounds {
        let mut samples = Samples::default();
        for _ in 0..n {
            env.iteration(&mut fresh, &mut samples).await?;
        }
        // After the comparison pass, never inside it: these calls would
        // triple the engine's load (and its garbage collections) during the
        // timed calls of this tool only.
        for _ in 0..n {
            env.diagnostic_iteration(&mut fresh, &mut samples).await?;
        }
        let (mut data, requests) = samples.into_json();
        data.insert("requests_counted".into(), Value::Object(requests));
        data.insert("calls".into(), json!(n));
        rounds_data.push(Value::Object(data));
    }

    // Requests per invocation kind, counted by the SDK interceptor.
    let per_call = |before: u64, after: u64, calls: u64| (after - before) as f64 / calls as f64;
    let counter = &compared.counter;
    let first_requests = probe(
        "first execution",
        counter,
        &compared.svc,
        || request(&fresh.key("probe")),
        |res| res.status() == 201,
    )
    .await?;
    let key = fresh.key("probe");
    compared
        .svc
        .clone()
        .oneshot(request(&key))
        .await
        .map_err(|e| e.to_string())?;
    let replay_requests = probe(
        "replay",
        counter,
        &compared.svc,
        || request(&key),
        is_replayed,
    )
    .await?;
    let cached_requests = probe(
        "cached replay",
        counter,
        &cached_svc,
        || request(&cached_key),
        is_replayed,
    )
    .await?;
    let slow =
        IdempotencyLayer::new(compared.store.clone()).layer(handler(Duration::from_millis(500)));
    let busy = fresh.key("busy");
    let running = tokio::spawn(slow.clone().oneshot(request(&busy)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = counter.get();
    let res = compared
        .svc
        .clone()
        .oneshot(request(&busy))
        .await
        .map_err(|e| e.to_string())?;
    let in_progress_requests = per_call(before, counter.get(), 1);
    if res.status() != 409 {
        return Err(format!("in-progress answered {}", res.status()));
    }
    running
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;

    Ok(json!({
        "tool": "lambda-idempotency",
        "iterations": n,
        "rounds": rounds,
        "body_bytes": body().len(),
        "local_cache": {"entries": CACHE_ENTRIES, "max_age_s": CACHE_MAX_AGE.as_secs()},
        "tables": tables,
        "requests": {
            "first": first_requests,
            "replay": replay_requests,
            "in_progress": in_progress_requests,
            "cached_replay": cached_requests,
        },
        "rounds_data": rounds_data,
    }))
}

/// `bench engine-probe N`: the Rust client's bare `PutItem` p50 on the
/// current engine, on a table of its own laid out as Powertools'.
async fn engine_probe(n: usize) -> Result<Value> {
    let t = target_on(create_table_without_gsi(false).await?).await;
    let mut fresh = Fresh::default();
    let mut samples = Samples::default();
    for _ in 0..n {
        bare_put_timed(&t, &COMPARED, &mut fresh, &mut Samples::default()).await?;
    }
    for _ in 0..n {
        bare_put_timed(&t, &COMPARED, &mut fresh, &mut samples).await?;
    }
    let (data, _) = samples.into_json();
    Ok(Value::Object(data))
}

/// The idempotency table of template.yaml without its sparse `sweep` index
/// (and the attribute definitions only the index used), with or without its
/// stream: same key, same TTL attribute, same billing mode.
async fn create_table_without_gsi(stream: bool) -> Result<String> {
    let mut def = integration_tests::table_definition("IdempotencyTable")?;
    def.global_secondary_indexes.clear();
    if !stream {
        def.stream_specification = None;
    }
    let keys: Vec<String> = def
        .key_schema
        .iter()
        .map(|k| k.attribute_name.clone())
        .collect();
    def.attribute_definitions
        .retain(|a| keys.contains(&a.attribute_name));
    let name = integration_tests::unique_name(if stream {
        "idempotency-no-gsi"
    } else {
        "idempotency-plain"
    });
    integration_tests::create_table_from_definition(&integration_tests::client().await, def, &name)
        .await?;
    Ok(name)
}

/// A [`Target`] on `table`, with a client and request counter of its own.
async fn target_on(
    table: String,
) -> Target<impl Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone> {
    let counter = RequestCounter::default();
    let client =
        integration_tests::client_with(vec![aws_sdk_dynamodb::config::SharedInterceptor::new(
            counter.clone(),
        )])
        .await;
    target(DynamoStore::new(client, table), counter)
}

async fn describe(store: &DynamoStore) -> Result<Value> {
    let out = integration_tests::client()
        .await
        .describe_table()
        .table_name(store.table())
        .send()
        .await
        .map_err(|e| {
            format!(
                "describe {}: {}",
                store.table(),
                aws_sdk_dynamodb::error::DisplayErrorContext(e)
            )
        })?;
    let indexes: Vec<String> = out
        .table()
        .map(|t| {
            t.global_secondary_indexes()
                .iter()
                .filter_map(|i| i.index_name().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let stream = out
        .table()
        .and_then(|t| t.stream_specification())
        .is_some_and(|s| s.stream_enabled());
    Ok(json!({"name": store.table(), "global_secondary_indexes": indexes, "stream": stream}))
}

/// The bare floor: one conditional PutItem of a small item with the same client.
async fn bare_put(store: &DynamoStore, key: &str) -> Result<()> {
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item("id", AttributeValue::S(format!("bare-{key}")))
        .item("n", AttributeValue::N("1".into()))
        .condition_expression("attribute_not_exists(id)")
        .send()
        .await
        .map(|_| ())
        .map_err(|e| {
            format!(
                "bare put: {}",
                aws_sdk_dynamodb::error::DisplayErrorContext(e)
            )
        })
}

/// CPU time consumed by the calling thread, in nanoseconds (user + system),
/// from `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`. Declared here rather than
/// through a crate: the C library is linked anyway.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn thread_cpu_ns() -> Result<u64> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec (64-bit Linux layout) for the call's duration.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Err("clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed".into());
    }
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn thread_cpu_ns() -> Result<u64> {
    Err("thread CPU time is only read on 64-bit Linux".into())
}

/// Nanoseconds per request of every batch of a pass: thread CPU time and,
/// for comparison, wall time.
#[derive(Clone, Default)]
struct Cost {
    cpu: Vec<f64>,
    wall: Vec<f64>,
}

/// Requests are built, and responses checked and dropped, in batches of this
/// many, outside the timing.
const CPU_BATCH: usize = 64;

/// Run requests for `keys` through `svc` one after another and return their
/// cost per request, CPU and wall nanoseconds. Only the invocations are
/// timed: the requests are built before, and the responses checked and
/// dropped after, as a warm Lambda process handles one request and drops it
/// before the next. (Building all requests up front and keeping every
/// response would add the page faults and cache misses of a working set of
/// tens of megabytes, which is the benchmark's, not the library's.)
async fn time_batch<S>(
    svc: &S,
    keys: impl Iterator<Item = String>,
    replayed: bool,
) -> Result<(f64, f64)>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let batch = requests(keys);
    let n = batch.len().max(1) as f64;
    let mut responses = Vec::with_capacity(batch.len());
    let started = Instant::now();
    let start = thread_cpu_ns()?;
    for req in batch {
        // As `lambda_http::run` serves a handler: its answer is converted
        // with `IntoResponse` (the middleware converts the inner handler's
        // answer too, so that second conversion counts).
        let res = svc.clone().oneshot(req).await.map_err(|e| e.to_string())?;
        responses.push(res.into_response().await);
    }
    let cpu = (thread_cpu_ns()? - start) as f64 / n;
    let wall = micros(started.elapsed()) * 1000.0 / n;
    if let Some(bad) = responses
        .iter()
        .find(|r| r.status() != 201 || is_replayed(r) != replayed)
    {
        return Err(format!(
            "cpu pass: answer {} (replayed: {}), expected 201 (replayed: {replayed})",
            bad.status(),
            is_replayed(bad)
        ));
    }
    Ok((cpu, wall))
}

impl Cost {
    fn add(&mut self, (cpu, wall): (f64, f64)) {
        self.cpu.push(cpu);
        self.wall.push(wall);
    }
}

/// `keys` through `svc` in batches of [`CPU_BATCH`]; `fresh` gives each
/// batch a new service (with an empty store).
async fn cpu_pass<S>(
    svc: S,
    fresh: Option<fn() -> S>,
    keys: impl Iterator<Item = String>,
    replayed: bool,
) -> Result<Cost>
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let keys: Vec<String> = keys.collect();
    let mut cost = Cost::default();
    for chunk in keys.chunks(CPU_BATCH) {
        let svc = fresh.map_or_else(|| svc.clone(), |f| f());
        cost.add(time_batch(&svc, chunk.iter().cloned(), replayed).await?);
    }
    Ok(cost)
}

fn requests(keys: impl Iterator<Item = String>) -> Vec<Request> {
    keys.map(|k| request(&k)).collect()
}

/// The services the CPU figures compare.
fn bare() -> impl Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone {
    handler(Duration::ZERO)
}

fn wrapped(
    cache: bool,
) -> impl Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone {
    let layer = IdempotencyLayer::new(MemoryStore::new());
    let layer = if cache {
        layer.local_cache(CACHE_ENTRIES, CACHE_MAX_AGE)
    } else {
        layer
    };
    layer.layer(handler(Duration::ZERO))
}

/// `wrapped(cache)` with the key `k` completed.
async fn wrapped_with_k(
    cache: bool,
) -> Result<impl Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone> {
    let svc = wrapped(cache);
    svc.clone()
        .oneshot(request("k"))
        .await
        .map_err(|e| e.to_string())?;
    Ok(svc)
}

/// Thread CPU per request of the variants in one run: bare, first execution
/// (a fresh store per batch, so the store holds at most one batch of
/// records), replay, cached replay, and first execution on one store that
/// grows to `n` records (each with its 1 KB response) over the run. The
/// variants take turns batch by batch, so a change in the machine's speed
/// meets all of them alike, as the latency rounds interleave their calls.
async fn cpu_run(n: usize, run: usize) -> Result<[Cost; 5]> {
    let bare_svc = bare();
    let replay_svc = wrapped_with_k(false).await?;
    let cached_svc = wrapped_with_k(true).await?;
    let grown_svc = wrapped(false);
    let mut costs: [Cost; 5] = Default::default();
    for start in (0..n).step_by(CPU_BATCH) {
        let end = (start + CPU_BATCH).min(n);
        let keys = |kind: &'static str| (start..end).map(move |i| format!("{kind}-{run}-{i}"));
        let same = || std::iter::repeat_n("k".to_owned(), end - start);
        costs[0].add(time_batch(&bare_svc, keys("bare"), false).await?);
        costs[1].add(time_batch(&wrapped(false), keys("first"), false).await?);
        costs[2].add(time_batch(&replay_svc, same(), true).await?);
        costs[3].add(time_batch(&cached_svc, same(), true).await?);
        costs[4].add(time_batch(&grown_svc, keys("grown"), false).await?);
    }
    Ok(costs)
}

async fn cpu(n: usize) -> Result<Value> {
    const RUNS: usize = 7;
    // A discarded run warms the allocator and the caches.
    cpu_run(n / 4, 0).await?;
    let mut runs = Vec::new();
    for run in 1..=RUNS {
        runs.push(cpu_run(n, run).await?);
    }
    // Every batch of every run, per variant. The typical request is the
    // median batch: a batch that an interrupt, a page fault or a neighbour on
    // the shared cores slowed down moves a mean, not the median.
    let batches = |i: usize, f: fn(&Cost) -> &Vec<f64>| -> Vec<f64> {
        runs.iter().flat_map(|r| f(&r[i]).iter().copied()).collect()
    };
    fn cpu(c: &Cost) -> &Vec<f64> {
        &c.cpu
    }
    fn wall(c: &Cost) -> &Vec<f64> {
        &c.wall
    }
    let med = |i: usize, f: fn(&Cost) -> &Vec<f64>| median(&mut batches(i, f));
    let mean = |i: usize| {
        let all = batches(i, cpu);
        all.iter().sum::<f64>() / all.len().max(1) as f64
    };
    let net = |i: usize, f: fn(&Cost) -> &Vec<f64>| med(i, f) - med(0, f);
    let names = [
        "bare",
        "first",
        "replay",
        "cached_replay",
        "first_grown_store",
    ];
    let per = |f: &dyn Fn(usize) -> f64| -> Value {
        (1..names.len())
            .map(|i| (names[i].to_owned(), json!(f(i))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    Ok(json!({
        "method": format!("thread CPU time (CLOCK_THREAD_CPUTIME_ID), current-thread runtime, MemoryStore, requests built and responses dropped in batches of {CPU_BATCH} outside the timing; per request = median over the batches of all runs"),
        "runs": RUNS, "requests_per_run": n, "batch": CPU_BATCH, "body_bytes": body().len(),
        "first_ns": net(1, cpu), "replay_ns": net(2, cpu), "cached_replay_ns": net(3, cpu),
        "first_grown_store_ns": net(4, cpu),
        "bare_handler_ns": med(0, cpu),
        "gross_ns": per(&|i| med(i, cpu)),
        "mean_net_ns": per(&|i| mean(i) - mean(0)),
        "wall_net_ns": per(&|i| net(i, wall)),
    }))
}

async fn cpu_probe(kind: &str, n: usize) -> Result<Value> {
    let distinct = (0..n).map(|i| format!("k{i}"));
    let same = std::iter::repeat_n("k".to_owned(), n);
    let cost = match kind {
        "bare" => cpu_pass(bare(), None, distinct, false).await?,
        "first" => cpu_pass(wrapped(false), Some(|| wrapped(false)), distinct, false).await?,
        "replay" | "cached" => {
            let svc = wrapped_with_k(kind == "cached").await?;
            cpu_pass(svc, None, same, true).await?
        }
        other => {
            return Err(format!(
                "cpu-probe kind {other:?}: use bare, first, replay or cached"
            ))
        }
    };
    let mean = cost.cpu.iter().sum::<f64>() / cost.cpu.len().max(1) as f64;
    Ok(json!({"requests": n, "cpu_ns_per_request": mean}))
}

/// Conflicts timed per engine: each waits on one first execution still running.
const CONFLICTS: usize = 20;

/// A store engine under test, its own counter of the round trips it sends
/// (DynamoDB: HTTP requests, counted by an SDK interceptor; Redis and
/// PostgreSQL: commands and statements, counted by the store) and the
/// server's version when the store can ask for it.
struct Engine {
    name: &'static str,
    store: Arc<dyn Store>,
    round_trips: Box<dyn Fn() -> u64 + Sync>,
    version: Option<String>,
}

impl Engine {
    fn redis(name: &'static str, store: lambda_idempotency::RedisStore) -> Self {
        let counter = store.clone();
        Engine {
            name,
            store: Arc::new(store),
            round_trips: Box::new(move || counter.round_trips()),
            version: None,
        }
    }

    async fn postgres(name: &'static str, url: &str) -> Result<Self> {
        let store = integration_tests::postgres_store_at(url).await;
        let version = store
            .pool()
            .get()
            .await
            .map_err(|e| format!("{name}: a connection: {e}"))?
            .query_one("SHOW server_version", &[])
            .await
            .map_err(|e| format!("{name}: the server's version: {e}"))?
            .try_get::<_, String>(0)
            .map_err(|e| format!("{name}: the server's version: {e}"))?;
        let counter = store.clone();
        Ok(Engine {
            name,
            store: Arc::new(store),
            round_trips: Box::new(move || counter.round_trips()),
            version: Some(format!("PostgreSQL {version}")),
        })
    }
}

/// `bench engines N`: every store engine through the same middleware and
/// handler, one after the other, one call at a time.
async fn engines(n: usize) -> Result<Value> {
    let load_start = load_average();
    let (dynamo, dynamo_counter) = integration_tests::dynamo_store().await;
    let all = [
        Engine {
            name: "DynamoDB Local",
            store: Arc::new(dynamo),
            round_trips: Box::new(move || dynamo_counter.get()),
            version: None,
        },
        Engine::redis("Redis", integration_tests::redis_store().await),
        Engine::redis(
            "Redis Cluster (3 primaries)",
            integration_tests::redis_cluster_store().await,
        ),
        Engine::postgres("PostgreSQL", &integration_tests::postgres_url()).await?,
        Engine::postgres(
            "PostgreSQL through PgBouncer (transaction pooling)",
            &integration_tests::postgres_pooler_url(),
        )
        .await?,
    ];
    let mut rows = Vec::new();
    for engine in &all {
        rows.push(engine_row(engine, n).await?);
    }
    Ok(json!({
        "iterations": n,
        "conflicts": CONFLICTS,
        "body_bytes": body().len(),
        "load_average": {"start": load_start, "end": load_average()},
        "engines": rows,
    }))
}

/// The 1-minute load average (Linux), a noise marker: the engines share the
/// machine's cores with the benchmark.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// One engine's row: round trips per kind of call and latency percentiles.
/// Each iteration times, in turn so drift hits every kind alike, the bare
/// round trip (a read of an absent record through the store: the engine's
/// floor), a first execution and a replay of its key through the middleware;
/// then `CONFLICTS` duplicates while a first execution of their key still
/// runs. Round trips are counted around every timed call.
async fn engine_row(engine: &Engine, n: usize) -> Result<Value> {
    let name = engine.name;
    let svc = IdempotencyLayer::new(engine.store.clone()).layer(handler(Duration::ZERO));
    let mut fresh = Fresh::default();
    let mut kinds: BTreeMap<&str, (Vec<f64>, u64)> = BTreeMap::new();
    let mut record = |kind, us, before: u64| {
        let entry = kinds.entry(kind).or_default();
        entry.0.push(us);
        entry.1 += (engine.round_trips)() - before;
    };
    // Round 0 warms connections and the engine, and is not recorded.
    for round in 0..2 {
        let calls = if round == 0 { n.min(300) } else { n };
        for _ in 0..calls {
            let key = fresh.key("engine");
            let before = (engine.round_trips)();
            let t = Instant::now();
            let absent = engine
                .store
                .get(&fresh.key("absent"))
                .await
                .map_err(|e| format!("{name}: a read of an absent record: {e}"))?;
            let us = micros(t.elapsed());
            if absent.is_some() {
                return Err(format!("{name}: a record never written was found"));
            }
            if round == 1 {
                record("bare", us, before);
            }
            for (kind, ok) in [
                (
                    "first",
                    (|res: &Response<Body>| res.status() == 201) as fn(&_) -> bool,
                ),
                ("replay", is_replayed),
            ] {
                let before = (engine.round_trips)();
                let (us, res) = timed_call(&svc, request(&key)).await?;
                if !ok(&res) {
                    return Err(format!("{name}: {kind} answered {}", res.status()));
                }
                if round == 1 {
                    record(kind, us, before);
                }
            }
        }
    }
    let slow = IdempotencyLayer::new(engine.store.clone()).layer(handler(Duration::from_secs(2)));
    let busy = fresh.key("busy");
    let running = tokio::spawn(slow.oneshot(request(&busy)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..CONFLICTS {
        let before = (engine.round_trips)();
        let (us, res) = timed_call(&svc, request(&busy)).await?;
        if res.status() != 409 {
            return Err(format!("{name}: in progress answered {}", res.status()));
        }
        record("in_progress", us, before);
    }
    let first = running
        .await
        .map_err(|e| format!("{name}: the running first execution: {e}"))?
        .map_err(|e| format!("{name}: the running first execution: {e}"))?;
    if first.status() != 201 {
        return Err(format!(
            "{name}: the running first execution answered {}",
            first.status()
        ));
    }
    let mut per_call = serde_json::Map::new();
    let mut latency = serde_json::Map::new();
    for (kind, (mut us, counted)) in kinds {
        per_call.insert(kind.into(), json!(counted as f64 / us.len().max(1) as f64));
        us.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| {
            us.get(((us.len() as f64 - 1.0) * q).round() as usize)
                .copied()
        };
        latency.insert(
            kind.into(),
            json!({"p50": at(0.5), "p99": at(0.99), "calls": us.len()}),
        );
    }
    Ok(json!({
        "engine": name,
        "version": engine.version,
        "round_trips": per_call,
        "latency_us": latency,
    }))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Orders a warm `orders-api` serves before the cold runs by default (see
/// [`cold`]).
const COLD_WARM_UP_ORDERS: usize = 300;

/// `orders-api` from spawn to its first response, K times, split where the
/// Runtime API sees it (see [`cold_series`]). Process start alone is timed
/// apart: the same binary, spawned with its configuration incomplete (no
/// `ORDERS_TABLE`), refuses it and exits before building any client, so
/// spawn to exit is the executable's loading, the Tokio runtime, the log
/// subscriber and reading the environment; init minus that is the set-up
/// of the clients.
async fn cold(runs: usize, bin: &str, warm_up: usize) -> Result<Value> {
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
async fn serve() -> Result<Value> {
    let table = std::env::var("IDEMPOTENCY_TABLE").map_err(|_| "IDEMPOTENCY_TABLE is not set")?;
    let aws = aws_config::load_from_env().await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&aws), table);
    let svc = IdempotencyLayer::new(store).layer(handler(Duration::ZERO));
    lambda_http::run(svc).await.map_err(|e| e.to_string())?;
    Ok(Value::Null)
}

/// `bench cold-same K W`: [`cold`]'s split for `bench serve` on a fresh
/// deployed table, each request with a new key and the 1 KB body.
async fn cold_same(runs: usize, warm_up: usize) -> Result<Value> {
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
async fn cold_command(runs: usize, command: &[String]) -> Result<Value> {
    use tokio::io::AsyncBufReadExt;
    let (program, args) = command
        .split_first()
        .ok_or("cold-command needs a command")?;
    let mut samples = Vec::new();
    let mut phases: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    // Run 0 warms the disk cache and is not recorded.
    for i in 0..=runs {
        let t = Instant::now();
        let mut child = tokio::process::Command::new(program)
            .args(args)
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

/// How many invocations of each key were in flight at once (sent to the
/// Runtime API and not yet answered), at most.
#[derive(Default)]
struct InFlight {
    now: HashMap<usize, usize>,
    peak: HashMap<usize, usize>,
}

impl InFlight {
    fn enter(&mut self, key: usize) {
        let now = self.now.entry(key).or_default();
        *now += 1;
        let peak = self.peak.entry(key).or_default();
        *peak = (*peak).max(*now);
    }

    fn leave(&mut self, key: usize) {
        if let Some(now) = self.now.get_mut(&key) {
            *now -= 1;
        }
    }
}

async fn storm(
    bin: &str,
    requests: usize,
    keys: usize,
    concurrency: usize,
    processes: usize,
) -> Result<Value> {
    if keys == 0 || requests < keys {
        return Err(format!(
            "storm: {requests} requests over {keys} keys: need at least one request per key"
        ));
    }
    let tables = functions::tables().await?;
    let orders = tables.1.clone();
    let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
    let env = functions::orders_env(&api, &tables, &[]);
    let mut children = Vec::new();
    for _ in 0..processes {
        children.push(functions::spawn(bin, &env)?);
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let statuses = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    let in_flight = Arc::new(Mutex::new(InFlight::default()));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (api, next, statuses, in_flight) = (
            api.clone(),
            next.clone(),
            statuses.clone(),
            in_flight.clone(),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= requests {
                    break;
                }
                // Each key's duplicates are consecutive (10 per key for 10,000
                // requests over 1,000 keys), so the workers that take them
                // send them at the same moment: they race for the claim.
                let k = i * keys / requests;
                let key = format!("storm-{k}");
                let body = format!(
                    r#"{{"customer_id":"cus_{k}","amount":{},"currency":"EUR"}}"#,
                    100 + k
                );
                if let Ok(mut f) = in_flight.lock() {
                    f.enter(k);
                }
                let outcome = api
                    .invoke(
                        functions::post_order_event(&key, &body),
                        Duration::from_secs(30),
                    )
                    .await;
                if let Ok(mut f) = in_flight.lock() {
                    f.leave(k);
                }
                let label = match outcome {
                    Outcome::Response(b) => match serde_json::from_slice::<Value>(&b) {
                        Ok(v) => match v["statusCode"].as_u64() {
                            Some(s) if v["headers"][REPLAYED_HEADER].is_string() => {
                                format!("{s} replayed")
                            }
                            Some(s) => s.to_string(),
                            None => "unparsable".into(),
                        },
                        Err(_) => "unparsable".into(),
                    },
                    Outcome::Error(_) => "error".into(),
                    Outcome::TimedOut => "timeout".into(),
                };
                if let Ok(mut s) = statuses.lock() {
                    *s.entry(label).or_default() += 1;
                }
            }
        }));
    }
    for w in workers {
        w.await.map_err(|e| e.to_string())?;
    }
    let elapsed = started.elapsed();
    let rss: Vec<u64> = children
        .iter()
        .filter_map(|c| c.id())
        .filter_map(functions::peak_rss_kb)
        .collect();
    for mut c in children {
        let _ = c.kill().await;
    }
    // Every order must have run exactly once.
    let executions = functions::order_executions(&orders).await?;
    let orders_once = executions.values().filter(|n| **n == 1).count();
    let statuses = statuses.lock().map(|s| s.clone()).unwrap_or_default();
    let peaks: Vec<usize> = in_flight
        .lock()
        .map(|f| f.peak.values().copied().collect())
        .unwrap_or_default();
    Ok(json!({
        "requests": requests, "keys": keys, "concurrency": concurrency, "processes": processes,
        "seconds": elapsed.as_secs_f64(),
        "statuses": statuses,
        "same_key_in_flight_max": peaks.iter().max(),
        "keys_with_concurrent_duplicates": peaks.iter().filter(|p| **p >= 2).count(),
        "orders": executions.len(), "orders_executed_once": orders_once,
        "executions_ok": executions.len() == keys && orders_once == keys,
        "peak_rss_kb_per_process": rss,
        "peak_rss_kb": rss.iter().max(),
    }))
}
