//! Backends and helpers shared by the suites.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use integration_tests::{post, Handler};
use lambda_http::{Body, Request, Response};
/// The suites' clock is the library's.
pub use lambda_idempotency::store::now_ms;
use lambda_idempotency::{
    store::{
        ClaimOutcome, ClaimRequest, CompleteRequest, Completion, Lease, StoredResponse, SweepStore,
    },
    sweeper::Sweeper,
    IdempotencyContext, MemoryStore, Store,
};

/// A store under test and a way to count the requests it made.
pub struct Fixture {
    pub store: Arc<dyn SweepStore>,
    requests: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl Fixture {
    /// Store requests made so far (DynamoDB HTTP requests, Redis round
    /// trips, PostgreSQL statements, or in-memory operations).
    pub fn requests(&self) -> u64 {
        (self.requests)()
    }
}

pub async fn memory() -> Fixture {
    let store = MemoryStore::new();
    let counter = store.clone();
    Fixture {
        store: Arc::new(store),
        requests: Box::new(move || counter.requests()),
    }
}

pub async fn dynamodb() -> Fixture {
    let (store, counter) = integration_tests::dynamo_store().await;
    Fixture {
        store: Arc::new(store),
        requests: Box::new(move || counter.get()),
    }
}

pub async fn redis() -> Fixture {
    let store = integration_tests::redis_store().await;
    let counter = store.clone();
    Fixture {
        store: Arc::new(store),
        requests: Box::new(move || counter.round_trips()),
    }
}

pub async fn redis_cluster() -> Fixture {
    let store = integration_tests::redis_cluster_store().await;
    let counter = store.clone();
    Fixture {
        store: Arc::new(store),
        requests: Box::new(move || counter.round_trips()),
    }
}

pub async fn postgres() -> Fixture {
    postgres_at(&integration_tests::postgres_url()).await
}

/// The PostgreSQL store through PgBouncer in transaction pooling mode.
pub async fn postgres_pooled() -> Fixture {
    postgres_at(&integration_tests::postgres_pooler_url()).await
}

async fn postgres_at(url: &str) -> Fixture {
    let store = integration_tests::postgres_store_at(url).await;
    let counter = store.clone();
    // The schema's creation is the fixture's, not the test's.
    let baseline = store.round_trips();
    Fixture {
        store: Arc::new(store),
        requests: Box::new(move || counter.round_trips() - baseline),
    }
}

/// One `#[tokio::test]` (multi-threaded, `$workers` threads) per case and
/// per named async fn: `mod <case> { async fn <name>() {
/// super::<name>(<subject>).await } }`, the subject an expression evaluated
/// inside the test (it may `.await`). The suites name their cases through
/// it, so a test's path, `<suite>::<case>::<name>` (what
/// scripts/it-shards.sh runs by), is made in this one place.
macro_rules! test_cases {
    (@case $workers:tt, $case:ident, $subject:expr, [$($name:ident),* $(,)?]) => {
        mod $case {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $workers)]
                async fn $name() {
                    super::$name($subject).await
                }
            )*
        }
    };
    ($workers:tt, [$($case:ident => $subject:expr),+ $(,)?], $names:tt) => {
        $( crate::fixture::test_cases!(@case $workers, $case, $subject, $names); )+
    };
}
pub(crate) use test_cases;

/// Generate one `#[tokio::test]` per backend for each named async fn taking a `Fixture`.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        crate::fixture::test_cases!(4, [
            memory_store => crate::fixture::memory().await,
            dynamodb_local => crate::fixture::dynamodb().await,
            redis_server => crate::fixture::redis().await,
            redis_cluster => crate::fixture::redis_cluster().await,
            postgres_server => crate::fixture::postgres().await,
            postgres_pooled => crate::fixture::postgres_pooled().await,
        ], [$($name),*]);
    };
}
pub(crate) use on_both_stores;

/// Complete `lease` on `store` with `response`, kept for an hour: the
/// completion store tests make when the expiry is not what they test.
pub async fn complete(
    store: &(impl Store + ?Sized),
    lease: &Lease,
    response: &StoredResponse,
) -> Result<Completion, lambda_idempotency::Error> {
    let expires_at_s = now_ms() / 1000 + 3600;
    store
        .complete(CompleteRequest::new(lease, response, expires_at_s))
        .await
}

pub use integration_tests::claim_request;

/// The lease of a claim that must have succeeded.
pub fn claimed(outcome: ClaimOutcome) -> Lease {
    match outcome {
        ClaimOutcome::Claimed(lease) => lease,
        ClaimOutcome::Exists(record) => panic!("expected a claim, found {record:?}"),
    }
}

/// The lease of a claim of record `id` by `owner` (see [`claim_request`])
/// in `store`, which must succeed.
pub async fn claim_lease(
    store: &(impl Store + ?Sized),
    id: &str,
    owner: &str,
    lease_ms: u64,
) -> Lease {
    claimed(
        store
            .claim(&claim_request(id, owner, lease_ms))
            .await
            .expect("the store answers"),
    )
}

/// Claim `id` for owner `a` with a 20 ms lease, the record expiring
/// `expires_in_s` seconds from now (negative: already expired): the start of
/// a takeover (the lease ends, the record lives) or of a new life (the
/// record expired) once [`assert_no_next_attempt`] claims it again.
pub async fn claim_expiring(store: &(impl Store + ?Sized), id: &str, expires_in_s: i64) -> Lease {
    claimed(
        store
            .claim(&ClaimRequest {
                expires_at_s: (now_ms() / 1000).saturating_add_signed(expires_in_s),
                ..claim_request(id, "a", 20)
            })
            .await
            .expect("the store answers"),
    )
}

/// Once the lease of [`claim_expiring`] has ended, a claim of `id` (owner
/// `b`) fails as a corrupt record: its attempt count has no next value.
pub async fn assert_no_next_attempt(store: &(impl Store + ?Sized), id: &str) {
    tokio::time::sleep(Duration::from_millis(40)).await;
    let err = match store.claim(&claim_request(id, "b", 60_000)).await {
        Err(err) => err,
        Ok(outcome) => panic!("{id}: claimed past the largest attempt: {outcome:?}"),
    };
    assert_eq!(
        err.kind(),
        lambda_idempotency::ErrorKind::CorruptRecord,
        "{id}: {err}"
    );
    assert!(err.to_string().contains("attempt count"), "{id}: {err}");
}

/// A completed record whose attempt count has no next value still answers
/// a claim of `id` with itself (a replay): only a new attempt needs the next
/// fencing token.
pub async fn assert_found_at_largest_attempt(
    store: &(impl Store + ?Sized),
    id: &str,
    largest: u64,
) {
    match store.claim(&claim_request(id, "b", 60_000)).await {
        Ok(ClaimOutcome::Exists(record)) => {
            assert_eq!(
                record.status,
                lambda_idempotency::store::Status::Completed,
                "{id}"
            );
            assert_eq!(record.attempt, largest, "{id}");
        }
        other => panic!("{id}: a completed record must be found as it is: {other:?}"),
    }
}

/// What the counting handler saw on each run.
#[derive(Debug, Clone, Default)]
pub struct Runs(Arc<AtomicU64>);

impl Runs {
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    pub fn bump(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// A handler that counts its runs, optionally sleeps, and answers 201 with
/// what it learned from its idempotency context.
pub fn counting_handler(runs: Runs, delay: Duration) -> impl Handler {
    tower::service_fn(move |req: Request| {
        let runs = runs.clone();
        async move {
            let run = runs.bump();
            tokio::time::sleep(delay).await;
            let ctx = IdempotencyContext::of(&req).cloned();
            let body = serde_json::json!({
                "run": run,
                "attempt": ctx.as_ref().map(|c| c.attempt()),
                "charge_key": ctx.as_ref().map(|c| c.derived_key("charge")),
                "echo": String::from_utf8_lossy(req.body().as_ref()),
            });
            Ok(Response::builder()
                .status(201)
                .header("content-type", "application/json")
                .header("x-run", run.to_string())
                .body(Body::from(body.to_string()))?)
        }
    })
}

/// One request through `svc`, which must answer.
pub async fn call<S>(svc: &mut S, req: Request) -> Response<Body>
where
    S: tower::Service<Request, Response = Response<Body>, Error = lambda_http::Error>,
{
    use tower::ServiceExt;
    svc.ready()
        .await
        .expect("ready")
        .call(req)
        .await
        .expect("response")
}

/// `POST /orders` with `Idempotency-Key: key` and an empty JSON body through
/// a clone of `svc` (the middleware's clones share its store and cache), which
/// must answer.
pub async fn post_order<S: Handler>(svc: &S, key: &str) -> Response<Body> {
    use tower::ServiceExt;
    svc.clone()
        .oneshot(post("/orders", Some(key), "{}"))
        .await
        .expect("response")
}

/// A handler with one phase, that counts its runs in `runs`: a run that finds
/// a recovery point answers 201 `resumed from <its name>`; the others run
/// `phase` (which commits the recovery point, and may fail after it) and
/// answer what it answers.
pub fn one_phase_handler<F, Fut>(runs: Runs, phase: F) -> impl Handler
where
    F: Fn(IdempotencyContext) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<Body>, lambda_http::Error>> + Send + 'static,
{
    tower::service_fn(move |req: Request| {
        let (runs, phase) = (runs.clone(), phase.clone());
        async move {
            runs.bump();
            let ctx = IdempotencyContext::of(&req).ok_or("no context")?.clone();
            if let Some(point) = ctx.recovery_point() {
                let body = format!("resumed from {}", point.name);
                return Ok(Response::builder().status(201).body(Body::from(body))?);
            }
            phase(ctx).await
        }
    })
}

/// Two retries of `key`, a key the sweeper failed, through `svc` (whose
/// handler counts its runs in `runs`): each replays the stored `abandoned`
/// problem, and the handler never runs again.
pub async fn assert_failed_key_replays_abandoned<S: Handler>(svc: &S, key: &str, runs: &Runs) {
    for _ in 0..2 {
        let res = post_order(svc, key).await;
        assert_eq!(res.status(), 500);
        assert_eq!(
            res.headers()[lambda_idempotency::http::REPLAYED_HEADER],
            "true"
        );
        assert_eq!(
            json(&res)["type"],
            lambda_idempotency::problem::ABANDONED.uri
        );
    }
    assert_eq!(
        runs.count(),
        0,
        "the handler never runs again for a failed key"
    );
}

/// Send `req` through a clone of `svc` in its own task and return once the
/// handler has started (`runs` moved), so its key is claimed and in progress.
pub async fn start_first<S: Handler>(
    svc: &S,
    req: Request,
    runs: &Runs,
) -> tokio::task::JoinHandle<Response<Body>> {
    let mut first = svc.clone();
    let task = tokio::spawn(async move { call(&mut first, req).await });
    while runs.count() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    task
}

pub fn json(response: &Response<Body>) -> serde_json::Value {
    serde_json::from_slice(response.body().as_ref()).expect("JSON body")
}

/// A server on a free local port that accepts connections and never answers;
/// it holds them until the returned task is aborted.
pub async fn silent_server() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    (port, held)
}

/// A sweep of `store` (a silent server's) given 3 s and told to stop 1 s
/// before: it returns by its deadline, with the work left and the errors
/// counted.
pub async fn assert_sweep_keeps_its_deadline(store: impl SweepStore + 'static) {
    let deadline = now_ms() + 3_000;
    let summary = tokio::time::timeout(
        Duration::from_secs(30),
        Sweeper::new(store)
            .stop_before(Duration::from_secs(1))
            .sweep(Some(deadline)),
    )
    .await
    .expect("the sweep returned");
    assert!(
        now_ms() <= deadline,
        "returned {} ms after its deadline",
        now_ms() - deadline
    );
    assert!(summary.remaining, "{summary:?}");
    assert!(summary.errors >= 1, "{summary:?}");
}

/// The `state` of order `id` in the DynamoDB table `table` (keyed by
/// `order_id`), read consistently; `None` when there is no such order.
pub async fn dynamo_order_state(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    id: &str,
) -> Option<String> {
    let key = [(
        "order_id",
        aws_sdk_dynamodb::types::AttributeValue::S(id.into()),
    )];
    integration_tests::consistent_item(client, table, key)
        .await?
        .get("state")
        .and_then(|v| v.as_s().ok())
        .cloned()
}

/// What an operator's `release --force` or `fail --force` does to record
/// `record_id` while its attempt `attempt` runs: the sweeper's resolution
/// of the record as read now, whether or not its lease is over.
pub async fn force_resolution(
    store: &Arc<dyn SweepStore>,
    record_id: &str,
    attempt: u64,
    policy: lambda_idempotency::sweeper::SweepPolicy,
) -> lambda_idempotency::store::Resolution {
    let owner = store
        .get(record_id)
        .await
        .expect("the store answers")
        .expect("the record exists")
        .record
        .owner;
    let stuck = lambda_idempotency::store::StuckRecord {
        id: record_id.to_owned(),
        attempt,
        owner,
        lease_expires_at_ms: 0,
        has_checkpoint: false,
    };
    Sweeper::new(store.clone())
        .policy(policy)
        .resolve_live(&stuck, now_ms())
        .await
        .expect("the store answers")
}

/// What Powertools for AWS Lambda (Python) itself wrote into DynamoDB
/// Local (tests/powertools/write_records.py, run with the Python of
/// `IDEMPOTENCY_TEST_POWERTOOLS_PYTHON`): its two tables, and what the
/// script printed (the id prefixes, `done-1`'s expiration).
pub struct PowertoolsWrote {
    /// The table of the HTTP function's records.
    pub http_table: String,
    /// The table of the event function's records.
    pub event_table: String,
    /// The script's JSON line.
    pub printed: serde_json::Value,
}

impl PowertoolsWrote {
    /// The printed text `name` (an id prefix).
    pub fn text(&self, name: &str) -> String {
        self.printed[name]
            .as_str()
            .unwrap_or_else(|| panic!("the script printed no {name}: {}", self.printed))
            .to_owned()
    }
}

/// Run Powertools for AWS Lambda (Python) against DynamoDB Local: it makes
/// two tables named after `name` and writes its records into them.
pub async fn powertools_wrote(name: &str) -> PowertoolsWrote {
    let python = std::env::var("IDEMPOTENCY_TEST_POWERTOOLS_PYTHON").unwrap_or_else(|_| {
        panic!(
            "IDEMPOTENCY_TEST_POWERTOOLS_PYTHON is not set: this test reads records written by \
             Powertools for AWS Lambda (Python). Run it with `make test`, or set it to the \
             Python of .tools/bench-venv (scripts/bench-venv.sh installs it)."
        )
    });
    let http_table = integration_tests::unique_name(&format!("{name}-http"));
    let event_table = integration_tests::unique_name(&format!("{name}-event"));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/powertools/write_records.py");
    let out = tokio::process::Command::new(&python)
        .arg(script)
        .arg(&http_table)
        .arg(&event_table)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {python} {script}: {e}"));
    assert!(
        out.status.success(),
        "Powertools did not write its records: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = serde_json::from_slice(&out.stdout).expect("the script prints JSON");
    PowertoolsWrote {
        http_table,
        event_table,
        printed,
    }
}
