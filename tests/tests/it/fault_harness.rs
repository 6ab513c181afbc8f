//! The fault harness: every store call of every feature, failed on purpose
//! (docs/testing.md, "The fault harness").
//!
//! A case is a feature combination (the surface a user calls: the HTTP
//! layer, `IdempotentFunction`, `SqsBatch`, `KinesisBatch` or
//! `DynamoDbStreamBatch`, or the claim lifecycle they share driven
//! directly, and one feature turned on),
//! what its first execution does (completes, fails, its process dies
//! mid-handler, or it overruns its lease while a retry takes over and
//! finishes, then completes late), a schedule of retries (a retry inside
//! the lease and one past it; or a sweep under the `release` or the `fail`
//! policy past the lease, then a retry; every sweep with its housekeeping
//! on), one store call of that run and one
//! fault at it (`integration_tests::fault_store::Fault`), and where that
//! fault caused calls of a kind the fault-free run never makes, a second
//! fault at each. Each combination × first execution × schedule is run
//! fault-free once to number its calls, then once per call and fault,
//! deterministically (one task, the virtual clock of the `FaultPlan`, no
//! randomness the run depends on). A wait's polls (`wait_for`) are
//! numbered apart, since how many it makes depends on the real clock: with
//! the wait turned on, the retry that waits on a first execution that died
//! has its first poll failed with each fault. The feature's layers (the offload, the
//! cut-over) wrap the faulting store, and a witnessing one sits right above
//! the engine. After the
//! schedule an unfaulted settling phase (past the lease, a sweep, a retry)
//! checks that whatever the fault left resolves within its bound.
//!
//! Invariants checked on every case (the first three while the run goes):
//!
//! - **effect**: the handler's effect never runs once its outcome is
//!   durably stored: a completed record of this life, a recovery point
//!   recording the step, or (cut-over) Powertools' completed record; nor
//!   after an earlier execution's completion (for the step, its recovery
//!   point) that may have applied (`FaultPlan::evidence`: only a call never
//!   made or one the store said wrote nothing proves it did not). A repeat
//!   while nothing recorded the effect is the documented window
//!   (docs/DESIGN.md section 6) and is allowed; it must then use the same
//!   derived key.
//! - **stored**: a completed record, once seen, stays completed with the
//!   same outcome; success (an output, an acknowledged batch record, a 2xx of
//!   a transactional completion) is never reported while the outcome that
//!   had to be stored is not; a transactional completion and its deferred
//!   write are one (the record holds the handler's outcome if and only if
//!   the key's one order row exists, read back from the engine). The
//!   cut-over gets no exemption: for a key Powertools completed, its
//!   outcome counts as stored only while Powertools' record of that key,
//!   read back, still holds it (a record of ours that only marks the key,
//!   the sweeper's `abandoned`, answers from it).
//! - **replay**: every replay is byte-identical to the first answer that
//!   was stored or replayed.
//! - **gone**: once an invocation's process is gone, none of its calls
//!   reaches the engine, whichever layer makes it.
//! - **answer**: a wait whose poll failed answers the store's failure (a
//!   `503` with the store-unavailable problem, `EventError::Store`).
//! - **reported**: a sweep's summary counts each of its calls that failed
//!   (`errors`, `housekeeping_failed`), and (in-memory store) no error
//!   when none did.
//! - **swept**: a record stuck when the settling sweep starts is resolved
//!   by it, whatever the faults did to earlier sweeps and to the place
//!   their listing saved.
//! - **bound**: after the settling phase the record is completed and the
//!   last retry received the key's outcome (the first one stored or
//!   replayed), not an in-progress answer, a store error or another one.
//!
//! `FAULT_HARNESS_SIZE=ci` (the default, what `make test` runs) covers every
//! case on the in-memory store, the cut-over (a Powertools table on DynamoDB
//! Local) and S3 offload (a local S3 server), and a subset on DynamoDB
//! Local, Redis and PostgreSQL, a smaller one on the Redis Cluster and
//! through PgBouncer and on DynamoDB's stream discovery (the deployed
//! sweeper, its stream through the streams proxy, the saving of its place
//! failed too); `full` runs every combination on those engines too. Each test prints its case count and the path of every
//! violation, and fails on any.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::dynamodb::{Event as DynamoDbEvent, EventRecord as DynamoDbRecord};
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::config::SharedInterceptor;
use integration_tests::fault_store::{
    Applied, Call, CallKind, Fault, FaultInterceptor, FaultPlan, FaultStore,
};
use integration_tests::streams_proxy::StreamsProxy;
use lambda_http::{Body, Request, Response};
use lambda_idempotency::event::EventError;
use lambda_idempotency::event::{DynamoDbStreamBatch, KinesisBatch, SqsBatch};
use lambda_idempotency::http::REPLAYED_HEADER;
use lambda_idempotency::lifecycle::{self, Begun, Finished};
use lambda_idempotency::store::dynamodb::{KeyValue, TableLayout};
use lambda_idempotency::store::postgres::{PgType, PgWrite};
use lambda_idempotency::store::powertools::{PowertoolsCutover, PowertoolsRecords};
use lambda_idempotency::store::{Status, StoredBody, StoredResponse, SweepStore};
use lambda_idempotency::sweeper::{SweepPolicy, SweepSummary, Sweeper};
use lambda_idempotency::{
    IdempotencyConfig, IdempotencyContext, IdempotencyLayer, IdempotentFunction, MemoryStore, Store,
};
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};

/// The lease every case takes (no invocation deadline: `max_lease`).
const LEASE: Duration = Duration::from_secs(10);
/// The sweeper's grace past a lease.
const GRACE: Duration = Duration::from_secs(1);
/// How far "past the lease" moves the virtual clock.
const PAST_LEASE_MS: u64 = 20_000;
/// `wait_for`: one poll (the first poll comes after at least 25 ms).
const WAIT_FOR: Duration = Duration::from_millis(20);

/// Where a case's calls go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    Http,
    Function,
    Sqs,
    /// `KinesisBatch`: one record of a shard, named by its sequence number
    /// when it fails.
    Kinesis,
    /// `DynamoDbStreamBatch`: one change of a table's stream.
    DynamoDbStream,
    /// The lifecycle under every entry point (`lambda_idempotency::lifecycle`),
    /// driven as an entry point of a user's own would.
    Core,
}

/// The one feature a combination turns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feature {
    Plain,
    RecoveryPoints,
    LocalCache,
    BodyKey,
    WaitFor,
    Cutover,
    /// The cut-over, for a key Powertools still holds in progress.
    CutoverInProgress,
    /// The cut-over finding Powertools' key with its key expression
    /// (`event_key_jmespath`, and `payload_validation_jmespath` on HTTP).
    CutoverExpression,
    Transactional,
    /// Responses kept in S3 (`S3Offload`, every response over its limit).
    Offload,
}

impl Feature {
    /// A cut-over for a key Powertools completed.
    fn completed_cutover(self) -> bool {
        matches!(self, Feature::Cutover | Feature::CutoverExpression)
    }

    /// A cut-over for a key Powertools still holds.
    fn held_cutover(self) -> bool {
        self == Feature::CutoverInProgress
    }

    fn cutover(self) -> bool {
        self.completed_cutover() || self.held_cutover()
    }
}

/// What the first execution of the handler does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum First {
    Completes,
    /// Returns an error: the claim is given back.
    Fails,
    /// Its process dies after its effect, before it answers.
    Dies,
    /// It outlives its lease: paused after its effect while a retry past
    /// the lease takes the key over and finishes, then it finishes too (a
    /// late completion, fenced, racing the newer attempt's).
    Overruns,
}

/// Where an overrunning first execution waits: it says it paused, then
/// waits until the harness lets it go on. Only the first invocation's
/// handler pauses (the gate is armed for it alone): when a fault kept it
/// from running, a retry's execution is the key's first, and runs through.
#[derive(Clone)]
struct Gate {
    armed: Arc<std::sync::atomic::AtomicBool>,
    paused: tokio::sync::watch::Sender<bool>,
    go: tokio::sync::watch::Sender<bool>,
}

impl Gate {
    fn new() -> Self {
        Gate {
            armed: Arc::default(),
            paused: tokio::sync::watch::channel(false).0,
            go: tokio::sync::watch::channel(false).0,
        }
    }

    fn arm(&self, armed: bool) {
        self.armed.store(armed, std::sync::atomic::Ordering::SeqCst);
    }

    /// The handler's side: paused, until let go (when armed).
    async fn pause(&self) {
        if !self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        self.paused.send_replace(true);
        let mut go = self.go.subscribe();
        // The sender lives in `self`: the channel cannot close here.
        let _ = go.wait_for(|go| *go).await;
    }

    /// Resolves once the handler paused.
    async fn paused(&self) {
        let mut paused = self.paused.subscribe();
        let _ = paused.wait_for(|paused| *paused).await;
    }

    fn go(&self) {
        self.go.send_replace(true);
    }
}

/// How clients retry after the first invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schedule {
    /// A retry inside the lease, then one past it.
    Retries,
    /// Past the lease, a sweep (`release`), then a retry.
    SweepRelease,
    /// Past the lease, a sweep (`fail`), then a retry.
    SweepFail,
}

impl Schedule {
    const ALL: [Schedule; 3] = [
        Schedule::Retries,
        Schedule::SweepRelease,
        Schedule::SweepFail,
    ];

    /// The policy of its sweeps (the settling phase's too).
    fn policy(self) -> SweepPolicy {
        match self {
            Schedule::SweepFail => SweepPolicy::Fail,
            _ => SweepPolicy::Release,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Combo {
    surface: Surface,
    feature: Feature,
}

/// Every combination a user can configure that the harness drives.
fn combos(transactional: bool, cutover: bool) -> Vec<Combo> {
    use Feature::*;
    let mut all = Vec::new();
    let mut add = |surface, features: &[Feature]| {
        for &feature in features {
            all.push(Combo { surface, feature });
        }
    };
    add(
        Surface::Http,
        &[Plain, RecoveryPoints, LocalCache, BodyKey, WaitFor],
    );
    add(
        Surface::Function,
        &[Plain, RecoveryPoints, LocalCache, BodyKey, WaitFor],
    );
    add(Surface::Sqs, &[Plain, RecoveryPoints, BodyKey]);
    add(Surface::Kinesis, &[Plain, RecoveryPoints, BodyKey]);
    add(Surface::DynamoDbStream, &[Plain, RecoveryPoints, BodyKey]);
    add(Surface::Core, &[Plain, RecoveryPoints, LocalCache]);
    if transactional {
        add(Surface::Http, &[Transactional]);
    }
    if cutover {
        add(
            Surface::Http,
            &[Cutover, CutoverInProgress, CutoverExpression],
        );
        add(Surface::Function, &[Cutover, CutoverExpression]);
    }
    all
}

/// The Powertools table the cut-over combinations read, as Powertools for
/// AWS Lambda (Python) itself wrote it (tests/powertools/write_records.py).
#[derive(Debug, Clone)]
struct PowertoolsTables {
    http_table: String,
    event_table: String,
    http_prefix: String,
    event_prefix: String,
    event_partition: String,
    /// Until when (epoch ms) Powertools certainly holds `running-1` in
    /// progress: it saved it with 60 s left, after this was measured.
    running_until_ms: u64,
    /// The keys of Powertools' records of `done-1` (HTTP table) and `o-1`
    /// (event table, under `event_partition`).
    done_1_id: String,
    o_1_sort_key: String,
    /// Reads them back, unfaulted.
    client: aws_sdk_dynamodb::Client,
}

impl PowertoolsTables {
    /// Run the script (the cut-over suite's source of real records); it
    /// completed `done-1` (HTTP, body [`CUTOVER_BODY`]) and `o-1` (events).
    async fn written() -> Self {
        let started_ms = crate::fixture::now_ms();
        let wrote = crate::fixture::powertools_wrote("fh-pt").await;
        let text = |name: &str| wrote.text(name);
        PowertoolsTables {
            http_table: wrote.http_table.clone(),
            event_table: wrote.event_table.clone(),
            http_prefix: text("http"),
            event_prefix: text("event"),
            event_partition: text("event_partition"),
            running_until_ms: started_ms + 60_000,
            done_1_id: text("done_1_id"),
            o_1_sort_key: text("o_1_sort_key"),
            client: integration_tests::client().await,
        }
    }

    /// Whether Powertools' record of the completed key (`done-1` on
    /// `Surface::Http`, `o-1` otherwise) still holds its outcome: completed
    /// and not expired. Inside the window, a key whose record of ours only
    /// marks it (the sweeper's `abandoned`) is answered from that record.
    async fn holds_outcome(&self, surface: Surface) -> bool {
        use aws_sdk_dynamodb::types::AttributeValue::S;
        let read = match surface {
            Surface::Http => self
                .client
                .get_item()
                .table_name(&self.http_table)
                .key("id", S(self.done_1_id.clone())),
            _ => self
                .client
                .get_item()
                .table_name(&self.event_table)
                .key("pk", S(self.event_partition.clone()))
                .key("sk", S(self.o_1_sort_key.clone())),
        };
        let item = read
            .consistent_read(true)
            .send()
            .await
            .expect("DynamoDB Local answers the harness's read of Powertools' record")
            .item;
        let Some(item) = item else { return false };
        let completed = item
            .get("status")
            .and_then(|v| v.as_s().ok())
            .map(String::as_str)
            == Some("COMPLETED");
        let now_s = crate::fixture::now_ms() / 1000;
        let unexpired = item
            .get("expiration")
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|expiration| expiration > now_s);
        completed && unexpired
    }
}

/// `store` with every response kept in the engine's bucket, through an S3
/// client whose requests `plan` numbers (one attempt each).
async fn offloaded(
    engine: &Engine,
    store: Arc<dyn SweepStore>,
    plan: &FaultPlan,
) -> lambda_idempotency::store::offload::S3Offload<Arc<dyn SweepStore>> {
    let bucket = engine
        .bucket
        .as_ref()
        .expect("offload cases run where the harness made a bucket");
    let config = integration_tests::iam_record::s3_config("feature-s3-offload")
        .await
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::standard().with_max_attempts(1))
        .interceptor(aws_sdk_s3::config::SharedInterceptor::new(
            FaultInterceptor::new(plan.clone(), "s3"),
        ))
        .build();
    lambda_idempotency::store::offload::S3Offload::new(
        store,
        aws_sdk_s3::Client::from_conf(config),
        bucket,
    )
    .key_prefix("fault-harness/")
    .max_response_bytes(16)
}

/// The body Powertools' handler completed `done-1` with.
const CUTOVER_BODY: &str = r#"{"amount":2500}"#;
/// The response body Powertools stored for `done-1` (status 201): its
/// handler's `json.dumps`.
const CUTOVER_HTTP_OUTCOME: &str = r#"{"order": {"amount": 2500}, "by": "powertools"}"#;
/// The output Powertools stored for `o-1`.
const CUTOVER_EVENT_OUTCOME: &str = r#"{"charged": 2500, "order_id": "o-1"}"#;

/// The writes a transactional completion defers, on its engine: one order
/// row per key, inserted only where none exists (a second commit of the
/// same key's order fails), and read back unfaulted to check that a
/// completion and its order are one.
#[derive(Clone)]
enum Orders {
    Dynamo {
        table: String,
        client: aws_sdk_dynamodb::Client,
    },
    Postgres {
        table: String,
        store: Arc<lambda_idempotency::store::postgres::PostgresStore>,
    },
}

impl Orders {
    fn defer(&self, ctx: &IdempotencyContext, id: &str) -> Result<(), String> {
        match self {
            Orders::Dynamo { table, .. } => {
                ctx.defer_write(integration_tests::put_new_order(table, id))
            }
            Orders::Postgres { table, .. } => ctx.defer_write(
                PgWrite::new(format!("INSERT INTO {table} (id) VALUES ($1)"))
                    .bind(id.to_owned(), PgType::TEXT),
            ),
        }
        .map_err(|e| e.to_string())
    }

    /// Whether order `id` was written (read from the engine, not through
    /// the fault plan).
    async fn exists(&self, id: &str) -> bool {
        match self {
            Orders::Dynamo { table, client } => integration_tests::consistent_item(
                client,
                table,
                [(
                    "order_id",
                    aws_sdk_dynamodb::types::AttributeValue::S(id.into()),
                )],
            )
            .await
            .is_some(),
            Orders::Postgres { table, store } => !store
                .pool()
                .get()
                .await
                .expect("a connection for the harness's own read")
                .query_typed(
                    &format!("SELECT id FROM {table} WHERE id = $1"),
                    &[(&id, PgType::TEXT)],
                )
                .await
                .expect("the orders table answers the harness's own read")
                .is_empty(),
        }
    }
}

/// An engine the harness runs on.
#[derive(Clone)]
struct Engine {
    name: &'static str,
    /// A store shared by every case (engines), or `None`: a fresh
    /// `MemoryStore` per case.
    shared: Option<Arc<dyn SweepStore>>,
    orders: Option<Orders>,
    powertools: Option<PowertoolsTables>,
    /// The bucket of the offload combinations.
    bucket: Option<String>,
    /// Its listing keeps its place (the DynamoDB stream's): the first
    /// settlement of each sweep schedule is failed with each fault too.
    settles: bool,
}

impl Engine {
    /// `plan` as this engine numbers calls: a shared store's listings pass
    /// unnumbered ([`FaultPlan::without_listings`]).
    fn plan(&self, plan: FaultPlan) -> FaultPlan {
        match self.shared {
            Some(_) => plan.without_listings(),
            None => plan,
        }
    }

    /// An engine whose one store every case shares, with no orders table,
    /// cut-over or offload.
    fn shared(name: &'static str, store: Arc<dyn SweepStore>) -> Engine {
        Engine {
            name,
            shared: Some(store),
            orders: None,
            powertools: None,
            bucket: None,
            settles: false,
        }
    }

    fn store(&self) -> Arc<dyn SweepStore> {
        self.shared
            .clone()
            .unwrap_or_else(|| Arc::new(MemoryStore::new()))
    }
}

/// One case's identity: its violation path starts with this.
#[derive(Debug, Clone, Copy)]
struct CaseId {
    combo: Combo,
    first: First,
    schedule: Schedule,
}

/// What one invocation answered, as its client saw it.
#[derive(Debug, Clone)]
enum Answer {
    /// The process died: no answer.
    Died,
    Http {
        status: u16,
        replayed: bool,
        body: Vec<u8>,
    },
    Output(Result<Value, String>),
    /// SQS: the record was acknowledged (`true`) or reported failed.
    Batch(bool),
}

/// A wait whose poll failed (and whose process lived) answers the store's
/// failure: a `503` with the store-unavailable problem, or
/// `EventError::Store`; never a replay, a conflict or another failure that
/// would tell the client something the store did not say.
fn check_failed_poll(observed: &Mutex<Observed>, answer: &Answer) {
    let answered = match answer {
        Answer::Died => return,
        Answer::Http { status, body, .. } => {
            let body = String::from_utf8_lossy(body);
            if *status == 503 && body.contains("/problems/store-unavailable") {
                return;
            }
            format!("{status} {body}")
        }
        Answer::Output(Err(e)) if e.starts_with("idempotency store failed, nothing ran") => return,
        Answer::Output(out) => format!("{out:?}"),
        Answer::Batch(acknowledged) => format!("batch record acknowledged: {acknowledged}"),
    };
    lock(observed).violations.push(format!(
        "answer: a wait whose poll failed answered {answered}, not the store's failure"
    ));
}

/// An outcome as compared: status and body bytes (a function's output as
/// its canonical JSON text).
type Outcome = (u16, Vec<u8>);

/// What one run observed.
#[derive(Default)]
struct Observed {
    /// Each violation once, in the order first seen.
    executions: u32,
    /// The step (invocation) of each execution, in order.
    execution_steps: Vec<String>,
    /// Derived keys the effect used, per execution.
    derived: Vec<String>,
    violations: Violations,
    /// The first outcome stored or replayed.
    reference: Option<Outcome>,
    /// A completed record was seen.
    stored_seen: bool,
    /// The settling sweep found the record stuck (the swept invariant
    /// applied).
    stuck_at_settling: bool,
}

/// An invocation's call, not yet polled.
type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = Answer>>>;

/// One run of a case, with or without a fault.
struct Run {
    id: CaseId,
    engine: Engine,
    plan: FaultPlan,
    /// What the library is given: the engine's store under a witness of
    /// calls made after death, the faults, then the feature's own layer
    /// (the offload), so that every call a layer makes meets the plan.
    store: Arc<dyn SweepStore>,
    key: String,
    observed: Arc<Mutex<Observed>>,
    /// The HTTP service or function of the warm instance (kept between
    /// invocations with a local cache, rebuilt after a death).
    warm: Option<Instance>,
    step: u32,
    /// How many calls the schedule made before the settling phase (the
    /// calls a fault is injected at).
    faultable: usize,
    gate: Gate,
}

#[derive(Clone)]
enum Instance {
    Http(lambda_idempotency::http::Idempotency<HarnessService>),
    // Boxed: a function is much larger than the other variants.
    Function(Box<IdempotentFunction>),
    Sqs(Arc<SqsBatch>),
    Kinesis(Arc<KinesisBatch>),
    DynamoDbStream(Arc<DynamoDbStreamBatch>),
    Core(Arc<IdempotencyConfig>),
}

type HarnessService = tower::util::BoxCloneService<Request, Response<Body>, lambda_http::Error>;

/// A run's violations, each once.
#[derive(Default)]
struct Violations(Vec<String>);

impl Violations {
    fn push(&mut self, violation: impl Into<String>) {
        let violation = violation.into();
        if !self.0.contains(&violation) {
            self.0.push(violation);
        }
    }
}

fn lock(observed: &Mutex<Observed>) -> std::sync::MutexGuard<'_, Observed> {
    observed.lock().unwrap_or_else(|p| p.into_inner())
}

/// The handler every surface runs: a foreign effect (a charge, recorded by
/// a recovery point where the feature asks), then the first execution's
/// behaviour, then the main effect; checked against the store as it runs.
#[derive(Clone)]
struct Handler {
    feature: Feature,
    first: First,
    plan: FaultPlan,
    /// The run's store, which the handler reads quietly.
    inner: Arc<dyn SweepStore>,
    observed: Arc<Mutex<Observed>>,
    orders: Option<Orders>,
    order_id: String,
    /// Cut-over in progress: until when Powertools holds the key.
    powertools_running_until_ms: Option<u64>,
    /// Where an overrunning first execution waits.
    gate: Gate,
}

impl Handler {
    async fn execute(&self, ctx: Option<IdempotencyContext>) -> Result<Value, String> {
        if self.plan.is_dead() {
            return std::future::pending().await;
        }
        let Some(ctx) = ctx else {
            lock(&self.observed)
                .violations
                .push("effect: the handler ran without an idempotency context");
            return Err("no context".into());
        };
        let record = {
            let _quiet = self.plan.quiet();
            self.inner.get(ctx.record_id()).await
        }
        .ok()
        .flatten()
        .map(|s| s.record);
        let evidence = self.plan.evidence();
        let step = self.plan.current_step();
        // Whether an earlier execution's call of `kind` (its completion, its
        // recovery point) may have been applied: anything but a proof that
        // it was not (docs/DESIGN.md section 6, "what proves a repeat safe").
        let may_have_committed = |observed: &Observed, kind: CallKind| -> Vec<String> {
            let mut found = Vec::new();
            for (k, earlier) in observed.execution_steps.iter().enumerate() {
                let resumed = format!("{earlier}-");
                for e in evidence.iter().filter(|e| {
                    e.call.kind == kind
                        && e.applied != Applied::No
                        && (e.call.step == *earlier || e.call.step.starts_with(&resumed))
                }) {
                    found.push(format!(
                        "execution {} ({} of {}: {:?})",
                        k + 1,
                        kind.name(),
                        e.call.step,
                        e.applied
                    ));
                }
            }
            found
        };
        let execution = {
            let mut observed = lock(&self.observed);
            observed.executions += 1;
            for earlier in may_have_committed(&observed, CallKind::Complete) {
                observed.violations.push(format!(
                    "effect: the handler ran again though {earlier} may have stored the outcome"
                ));
            }
            let charge_committed = may_have_committed(&observed, CallKind::Checkpoint);
            observed.execution_steps.push(step);
            if self.feature.completed_cutover() {
                observed.violations.push(
                    "effect: the handler ran for a key Powertools completed (its completion \
                     is the key's one execution)",
                );
            }
            if let Some(until) = self.powertools_running_until_ms {
                if crate::fixture::now_ms() < until {
                    observed.violations.push(
                        "effect: the handler ran while Powertools still held the key in progress",
                    );
                }
            }
            if record
                .as_ref()
                .is_some_and(|r| r.status == Status::Completed)
            {
                observed
                    .violations
                    .push("effect: the handler ran after its outcome was stored");
            }
            (observed.executions, charge_committed)
        };
        let (execution, charge_committed) = execution;
        if self.feature == Feature::RecoveryPoints && ctx.recovery_point().is_none() {
            for earlier in charge_committed {
                lock(&self.observed).violations.push(format!(
                    "effect: step `charge` ran again though {earlier} may have stored the \
                     recovery point recording it"
                ));
            }
            if record
                .as_ref()
                .and_then(|r| r.checkpoint.as_ref())
                .is_some_and(|c| c.name == "charged")
            {
                lock(&self.observed).violations.push(
                    "effect: step `charge` ran again after the recovery point recording it \
                     was stored",
                );
            }
            let charge = ctx.derived_key("charge");
            ctx.commit("charged", json!({ "charge": charge }))
                .await
                .map_err(|e| e.to_string())?;
        }
        if execution == 1 {
            match self.first {
                First::Completes => {}
                First::Fails => return Err("the first execution fails".into()),
                First::Dies => {
                    self.plan.die();
                    return std::future::pending().await;
                }
                First::Overruns => self.gate.pause().await,
            }
        }
        lock(&self.observed).derived.push(ctx.derived_key("ship"));
        if let (Feature::Transactional, Some(orders)) = (self.feature, &self.orders) {
            orders.defer(&ctx, &self.order_id)?;
        }
        Ok(json!({
            "execution": execution,
            "attempt": ctx.attempt(),
            "ship": ctx.derived_key("ship"),
        }))
    }
}

impl Run {
    async fn new(engine: &Engine, id: CaseId, plan: FaultPlan, serial: u64) -> Run {
        let witnessed: Arc<dyn SweepStore> =
            Arc::new(FaultStore::witness(engine.store(), plan.clone()));
        let mut store: Arc<dyn SweepStore> = Arc::new(FaultStore::new(witnessed, plan.clone()));
        if id.combo.feature == Feature::Offload {
            store = Arc::new(offloaded(engine, store, &plan).await);
        }
        let key = if id.combo.feature.completed_cutover() {
            match id.combo.surface {
                Surface::Http => "done-1".to_owned(),
                _ => "o-1".to_owned(),
            }
        } else if id.combo.feature.held_cutover() {
            "running-1".to_owned()
        } else {
            format!("fh-{}-{serial}", std::process::id())
        };
        // Powertools' completion is the key's first stored outcome: every
        // answer and our own record must keep it.
        let reference = id
            .combo
            .feature
            .completed_cutover()
            .then(|| match id.combo.surface {
                Surface::Http => (201, CUTOVER_HTTP_OUTCOME.as_bytes().to_vec()),
                _ => (200, canonical(CUTOVER_EVENT_OUTCOME.as_bytes())),
            });
        let observed = Observed {
            reference,
            ..Observed::default()
        };
        Run {
            id,
            engine: engine.clone(),
            plan,
            store,
            key,
            observed: Arc::new(Mutex::new(observed)),
            warm: None,
            step: 0,
            faultable: 0,
            gate: Gate::new(),
        }
    }

    fn handler(&self) -> Handler {
        Handler {
            feature: self.id.combo.feature,
            first: self.id.first,
            plan: self.plan.clone(),
            inner: self.store.clone(),
            observed: self.observed.clone(),
            orders: self.engine.orders.clone(),
            order_id: self.key.clone(),
            powertools_running_until_ms: (self.id.combo.feature.held_cutover())
                .then(|| self.engine.powertools.as_ref().map(|t| t.running_until_ms))
                .flatten(),
            gate: self.gate.clone(),
        }
    }

    async fn config(&self) -> IdempotencyConfig {
        // The cut-over is a layer around the faulty store, so its own calls
        // (the claim, the give-back, the copy) meet the plan's faults.
        let config = match self.id.combo.feature.cutover() {
            true => IdempotencyConfig::new(PowertoolsCutover::new(
                self.store.clone(),
                self.powertools().await,
            )),
            false => IdempotencyConfig::new(self.store.clone()),
        }
        .max_lease(LEASE);
        match self.id.combo.feature {
            Feature::LocalCache => config.local_cache(100, Duration::from_secs(600)),
            _ => config,
        }
    }

    /// The Powertools records of the cut-over, read through a client whose
    /// requests the plan numbers (one attempt each: a lost answer is an
    /// error, as after the SDK's retries).
    fn powertools_tables(&self) -> &PowertoolsTables {
        self.engine
            .powertools
            .as_ref()
            .expect("cut-over cases run where Powertools wrote its tables")
    }

    async fn powertools(&self) -> PowertoolsRecords {
        let tables = self.powertools_tables();
        let shared = aws_config::from_env()
            .region(aws_config::Region::new("us-east-1"))
            .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(1))
            .load()
            .await;
        let client = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&shared)
                .endpoint_url(integration_tests::endpoint())
                .interceptor(SharedInterceptor::new(FaultInterceptor::new(
                    self.plan.clone(),
                    "cutover-read",
                )))
                .build(),
        );
        let until = SystemTime::now() + Duration::from_secs(3600);
        let expression = self.id.combo.feature == Feature::CutoverExpression;
        // The expressions Powertools was configured with
        // (tests/powertools/write_records.py).
        let records = match self.id.combo.surface {
            Surface::Http if expression => {
                PowertoolsRecords::new(client, &tables.http_table, &tables.http_prefix, until)
                    .key_jmespath("headers.\"idempotency-key\"")
                    .and_then(|r| r.validation_jmespath("body"))
            }
            Surface::Http => {
                Ok(
                    PowertoolsRecords::new(client, &tables.http_table, &tables.http_prefix, until)
                        .validate_body(),
                )
            }
            _ => {
                let records = PowertoolsRecords::new(
                    client,
                    &tables.event_table,
                    &tables.event_prefix,
                    until,
                )
                .key_attr("pk")
                .sort_key("sk", &tables.event_partition);
                match expression {
                    true => records.key_jmespath("order_id"),
                    false => Ok(records),
                }
            }
        };
        records.expect("Powertools' expressions are JMESPath")
    }

    async fn instance(&self) -> Instance {
        let config = self.config().await;
        let feature = self.id.combo.feature;
        match self.id.combo.surface {
            Surface::Core => Instance::Core(Arc::new(config)),
            Surface::Http => {
                let handler = self.handler();
                let service = tower::service_fn(move |req: Request| {
                    let handler = handler.clone();
                    async move {
                        let ctx = IdempotencyContext::of(&req).cloned();
                        let output = handler.execute(ctx).await?;
                        Ok::<_, lambda_http::Error>(
                            Response::builder()
                                .status(201)
                                .header("content-type", "application/json")
                                .body(Body::from(output.to_string()))?,
                        )
                    }
                });
                let mut layer = IdempotencyLayer::with_config(config);
                if feature == Feature::BodyKey {
                    layer = layer.key_from_body("/order_id");
                }
                if feature == Feature::WaitFor {
                    layer = layer.wait_for(WAIT_FOR);
                }
                Instance::Http(layer.layer(tower::util::BoxCloneService::new(service)))
            }
            Surface::Function | Surface::Sqs | Surface::Kinesis | Surface::DynamoDbStream => {
                let mut function = IdempotentFunction::with_config(config, "fault-harness");
                if (feature == Feature::BodyKey || feature.completed_cutover())
                    && self.id.combo.surface == Surface::Function
                {
                    function = function.key_pointers(["/order_id"]);
                }
                if feature == Feature::WaitFor {
                    function = function.wait_for(WAIT_FOR);
                }
                let body_key = feature == Feature::BodyKey;
                match self.id.combo.surface {
                    Surface::Function => return Instance::Function(Box::new(function)),
                    Surface::Kinesis => {
                        let mut batch = KinesisBatch::new(function);
                        if body_key {
                            batch = batch.key_data_pointer("/order_id");
                        }
                        return Instance::Kinesis(Arc::new(batch));
                    }
                    Surface::DynamoDbStream => {
                        let mut batch = DynamoDbStreamBatch::new(function);
                        if body_key {
                            batch = batch.key_item_keys();
                        }
                        return Instance::DynamoDbStream(Arc::new(batch));
                    }
                    _ => {}
                }
                let mut batch = SqsBatch::new(function);
                if feature == Feature::BodyKey {
                    batch = batch.key_body_pointer("/order_id");
                }
                Instance::Sqs(Arc::new(batch))
            }
        }
    }

    fn request_body(&self) -> String {
        if self.id.combo.feature.cutover() {
            match self.id.combo.surface {
                Surface::Http => CUTOVER_BODY.to_owned(),
                _ => json!({"order_id": self.key, "amount": 2500}).to_string(),
            }
        } else {
            json!({"order_id": self.key, "amount": 2500}).to_string()
        }
    }

    /// One invocation (a client's request, a function call, an SQS
    /// delivery), dropped when its process dies.
    async fn invoke(&mut self) -> Answer {
        let (call, executions_before) = self.start().await;
        let step = self.plan.current_step();
        let answer = self.until_died(call).await;
        let executed = lock(&self.observed).executions > executions_before;
        self.check_answer(&answer, executed).await;
        if self.plan.polls_injected().iter().any(|(_, s)| *s == step) {
            check_failed_poll(&self.observed, &answer);
        }
        answer
    }

    /// The first invocation overrunning its lease (`First::Overruns`): once
    /// its handler paused, the clock moves past the lease and a retry runs
    /// to its end, then the first one goes on from where it paused.
    async fn overrun(&mut self) {
        let (mut call, executions_before) = self.start().await;
        let (plan, gate) = (self.plan.clone(), self.gate.clone());
        gate.arm(true);
        let early = tokio::select! {
            biased;
            answer = &mut call => Some(answer),
            () = plan.died() => Some(Answer::Died),
            () = gate.paused() => None,
        };
        gate.arm(false);
        if let Some(answer) = early {
            // A fault ended it before its handler paused.
            if matches!(answer, Answer::Died) {
                self.warm = None;
            }
            self.check_gone();
            let executed = lock(&self.observed).executions > executions_before;
            self.check_answer(&answer, executed).await;
            return;
        }
        let first_step = self.step;
        self.plan.advance(PAST_LEASE_MS);
        self.invoke().await;
        // Its process is alive again: it was only slow.
        self.plan.step(format!("invoke#{first_step}-resumed"));
        self.gate.go();
        let answer = self.until_died(call).await;
        self.check_answer(&answer, true).await;
    }

    /// `call`'s answer, or `Answer::Died` once its process is gone.
    async fn until_died(&mut self, call: Pending) -> Answer {
        let plan = self.plan.clone();
        let answer = tokio::select! {
            biased;
            answer = call => answer,
            () = plan.died() => Answer::Died,
        };
        if matches!(answer, Answer::Died) {
            self.warm = None;
        }
        self.check_gone();
        answer
    }

    /// A new invocation's step and its call, not yet polled (with the
    /// handler's execution count before it).
    async fn start(&mut self) -> (Pending, u32) {
        self.step += 1;
        self.plan.step(format!("invoke#{}", self.step));
        let keep_warm = self.id.combo.feature == Feature::LocalCache;
        let instance = match (&self.warm, keep_warm) {
            (Some(warm), true) => warm.clone(),
            _ => self.instance().await,
        };
        self.warm = Some(instance.clone());
        let executions_before = lock(&self.observed).executions;
        let handler = self.handler();
        let body = self.request_body();
        let key = self.key.clone();
        let call = async move {
            match instance {
                Instance::Http(service) => {
                    let mut builder =
                        http::Request::post("/orders").header("content-type", "application/json");
                    if !matches!(handler.feature, Feature::BodyKey) {
                        builder = builder.header("idempotency-key", key.as_str());
                    }
                    let request = builder.body(Body::from(body)).expect("a valid request");
                    match service.oneshot(request).await {
                        Ok(response) => {
                            let status = response.status().as_u16();
                            let replayed = response.headers().contains_key(REPLAYED_HEADER);
                            Answer::Http {
                                status,
                                replayed,
                                body: response.body().as_ref().to_vec(),
                            }
                        }
                        // The handler's error: Lambda answers 502.
                        Err(_) => Answer::Http {
                            status: 502,
                            replayed: false,
                            body: Vec::new(),
                        },
                    }
                }
                Instance::Function(function) => {
                    let arg: Value = serde_json::from_str(&body).expect("JSON");
                    let out: Result<Value, EventError<String>> = function
                        .call_with_context(arg, |_, ctx| async move { handler.execute(ctx).await })
                        .await;
                    Answer::Output(out.map_err(|e| e.to_string()))
                }
                Instance::Core(config) => {
                    let id = format!("fault-harness-core#{key}");
                    Answer::Output(core(&config, id, body, &handler).await)
                }
                Instance::Sqs(batch) => {
                    let mut message = SqsMessage::default();
                    message.message_id = Some(format!("m-{key}"));
                    message.body = Some(body);
                    let mut event = SqsEvent::default();
                    event.records = vec![message];
                    let handler = &handler;
                    batch_answer(
                        batch
                            .process(event, |_, ctx| async move { handler.execute(ctx).await })
                            .await
                            .map(|response| response.batch_item_failures),
                    )
                }
                Instance::Kinesis(batch) => {
                    // Lambda delivers a shard's record again with the same
                    // event id and sequence number.
                    let mut record = KinesisEventRecord::default();
                    record.event_id = Some(format!("shardId-000000000000:{key}"));
                    record.kinesis.sequence_number =
                        format!("49590338271490256608559692538361571095921575989136588898-{key}");
                    record.kinesis.partition_key = key.clone();
                    record.kinesis.data.0 = body.into_bytes();
                    let mut event = KinesisEvent::default();
                    event.records = vec![record];
                    let handler = &handler;
                    batch_answer(
                        batch
                            .process(event, |_, ctx| async move { handler.execute(ctx).await })
                            .await
                            .map(|response| response.batch_item_failures),
                    )
                }
                Instance::DynamoDbStream(batch) => {
                    let order: Value = serde_json::from_str(&body).expect("JSON");
                    let record: DynamoDbRecord = serde_json::from_value(json!({
                        "eventID": format!("change-{key}"),
                        "eventName": "INSERT",
                        "awsRegion": "us-east-1",
                        "eventSource": "aws:dynamodb",
                        "dynamodb": {
                            "Keys": {"order_id": {"S": key}},
                            "NewImage": {
                                "order_id": {"S": key},
                                "amount": {"N": order["amount"].to_string()},
                            },
                            "SequenceNumber": format!("1000-{key}"),
                            "SizeBytes": 64,
                            "StreamViewType": "NEW_IMAGE",
                        },
                    }))
                    .expect("a DynamoDB Streams record");
                    let mut event = DynamoDbEvent::default();
                    event.records = vec![record];
                    let handler = &handler;
                    batch_answer(
                        batch
                            .process(event, |_, ctx| async move { handler.execute(ctx).await })
                            .await
                            .map(|response| response.batch_item_failures),
                    )
                }
            }
        };
        (Box::pin(call), executions_before)
    }

    /// A sweep under `policy`, itself a process that can die, with its
    /// housekeeping on as the deployed sweeper runs it (the engine's
    /// deletion of expired records is one more call to fault). Its summary,
    /// unless its process died.
    async fn sweep(&mut self, policy: SweepPolicy) -> Option<SweepSummary> {
        self.step += 1;
        self.plan.step(format!("sweep#{}", self.step));
        let sweeper = Sweeper::new(self.store.clone())
            .policy(policy)
            .grace(GRACE)
            .housekeeping(true);
        let plan = self.plan.clone();
        let before = (plan.injected_faults().len(), plan.settles_injected().len());
        let summary = tokio::select! {
            biased;
            summary = sweeper.sweep(None) => Some(summary),
            () = plan.died() => None,
        };
        if let Some(summary) = &summary {
            let mut faults = plan.injected_faults().split_off(before.0);
            let settles = plan.settles_injected().split_off(before.1);
            faults.extend(
                settles
                    .into_iter()
                    .map(|(n, _, fault)| (n, CallKind::Settle, fault)),
            );
            self.check_reported(summary, &faults);
        }
        self.check_gone();
        self.check_stored().await;
        summary
    }

    /// The reported invariant: a sweep's summary says what failed. Every
    /// call of the sweep that returned an error is counted in its `errors`
    /// (the sweeper's metrics and alarms read them), a failed housekeeping
    /// call sets `housekeeping_failed`, and (on the in-memory store, where
    /// nothing fails unless told to) a sweep none of whose calls failed
    /// reports no error.
    fn check_reported(&self, summary: &SweepSummary, faults: &[(usize, CallKind, Fault)]) {
        let failed = faults.iter().filter(|(_, _, f)| *f != Fault::Gone).count() as u64;
        let housekeeping = faults
            .iter()
            .any(|(_, kind, f)| *kind == CallKind::DeleteExpired && *f != Fault::Gone);
        // On an engine a call can fail of itself (a timeout on a loaded
        // emulator, a stream read): there an error no fault caused is the
        // summary telling the truth, so only the in-memory store's sweeps
        // are held to "no failure, no error".
        let exact = self.engine.shared.is_none();
        let mut observed = lock(&self.observed);
        if summary.errors < failed || (exact && failed == 0 && summary.errors > 0) {
            observed.violations.push(format!(
                "reported: the sweep's summary counts {} errors where {failed} of its calls failed",
                summary.errors
            ));
        }
        if summary.housekeeping_failed != housekeeping && (exact || housekeeping) {
            observed.violations.push(format!(
                "reported: the sweep's summary says housekeeping_failed: {} where its \
                 housekeeping call {}",
                summary.housekeeping_failed,
                match housekeeping {
                    true => "failed",
                    false => "did not fail",
                }
            ));
        }
    }

    /// The process-gone invariant: once an invocation's process is gone,
    /// none of its calls reaches the engine, whichever layer makes it.
    fn check_gone(&self) {
        for call in self.plan.take_late() {
            lock(&self.observed).violations.push(format!(
                "gone: {} of {} reached the store after its process died",
                call.kind.name(),
                call.step
            ));
        }
    }

    /// The record as the store holds it (unfaulted, unnumbered).
    async fn record(&self) -> Option<lambda_idempotency::store::Record> {
        let id = self.record_id()?;
        let _quiet = self.plan.quiet();
        self.store
            .get(&id)
            .await
            .expect("the engine answers the harness's own read")
            .map(|s| s.record)
    }

    /// The record of this run's key: the one id its claims named (`None`
    /// before the first claim).
    fn record_id(&self) -> Option<String> {
        self.plan.claimed_ids().into_iter().next()
    }

    fn compare(&self, what: &str, outcome: Outcome) {
        let mut observed = lock(&self.observed);
        match &observed.reference {
            None => observed.reference = Some(outcome),
            Some(reference) if *reference != outcome => {
                let message = format!(
                    "{what}: {} {} differs from the first answer {} {}",
                    outcome.0,
                    String::from_utf8_lossy(&outcome.1),
                    reference.0,
                    String::from_utf8_lossy(&reference.1)
                );
                observed.violations.push(message);
            }
            Some(_) => {}
        }
    }

    /// The stored outcome, as compared.
    fn stored_outcome(&self, record: &lambda_idempotency::store::Record) -> Option<Outcome> {
        let response = record.response.as_ref()?;
        let body = response.body.bytes().to_vec();
        Some(match self.id.combo.surface {
            Surface::Http => (response.status, body),
            _ => (200, canonical(&body)),
        })
    }

    /// The stored-outcome invariant: once completed, completed with the
    /// same outcome.
    async fn check_stored(&mut self) -> Option<lambda_idempotency::store::Record> {
        let record = self.record().await;
        match &record {
            // Inside the cut-over window the key's outcome may live in
            // Powertools' record alone: a record the sweeper failed here
            // (its attempt died before its lookup decided anything) keeps
            // the `abandoned` marker, and every duplicate is answered from
            // Powertools' record instead (the replay check holds the
            // answers to it). So the key's stored outcome is Powertools':
            // its record must still hold it, and it counts as seen.
            Some(r) if self.id.combo.feature.completed_cutover() && marks_only(r) => {
                let surface = self.id.combo.surface;
                if self.powertools_tables().holds_outcome(surface).await {
                    lock(&self.observed).stored_seen = true;
                } else {
                    lock(&self.observed).violations.push(
                        "stored: this store's record only marks the key (`abandoned`) and \
                         Powertools' record no longer holds the key's outcome",
                    );
                }
            }
            Some(r) if r.status == Status::Completed => {
                if let Some(outcome) = self.stored_outcome(r) {
                    lock(&self.observed).stored_seen = true;
                    self.compare("stored: the stored outcome", outcome);
                }
            }
            _ if lock(&self.observed).stored_seen => lock(&self.observed).violations.push(format!(
                "stored: the completed record was lost (now {:?})",
                record.as_ref().map(|r| r.status)
            )),
            _ => {}
        }
        record
    }

    async fn check_answer(&mut self, answer: &Answer, executed: bool) {
        let record = self.check_stored().await;
        let completed = record
            .as_ref()
            .is_some_and(|r| r.status == Status::Completed);
        let feature = self.id.combo.feature;
        // The key's outcome is stored: in our completed record, or, for a
        // key Powertools completed, in Powertools' record (a success
        // answered from it needs no record of ours; one answered for a key
        // Powertools still holds, or after its record is gone, does).
        // Read back only for a success to judge.
        let success = matches!(answer, Answer::Output(Ok(_)) | Answer::Batch(true));
        let stored = completed
            || (success
                && feature.completed_cutover()
                && self
                    .powertools_tables()
                    .holds_outcome(self.id.combo.surface)
                    .await);
        match answer {
            Answer::Died => {}
            Answer::Http {
                status,
                replayed,
                body,
                ..
            } => {
                if *replayed {
                    self.compare("replay: the replayed answer", (*status, body.clone()));
                }
                // While Powertools runs the key, the sweeper's marker of an
                // attempt here that died before deciding says nothing of
                // its outcome: the answer is in progress, never `abandoned`.
                if let Some(until) = self.handler().powertools_running_until_ms {
                    if crate::fixture::now_ms() < until
                        && String::from_utf8_lossy(body).contains("/problems/abandoned")
                    {
                        lock(&self.observed).violations.push(
                            "replay: `abandoned` answered while Powertools still held the key",
                        );
                    }
                }
                if feature == Feature::Transactional && (200..300).contains(status) && !completed {
                    lock(&self.observed).violations.push(format!(
                        "stored: {status} reported for a transactional completion that is not stored"
                    ));
                }
            }
            Answer::Output(Ok(value)) => {
                if !executed {
                    self.compare(
                        "replay: the replayed output",
                        (200, canonical(value.to_string().as_bytes())),
                    );
                }
                if !stored {
                    lock(&self.observed)
                        .violations
                        .push("stored: an output was returned that is not stored");
                }
            }
            Answer::Output(Err(_)) => {}
            Answer::Batch(acknowledged) => {
                if *acknowledged && !stored {
                    lock(&self.observed).violations.push(
                        "stored: the batch record was acknowledged while its outcome is not stored",
                    );
                }
            }
        }
    }

    /// The schedule, then the unfaulted settling phase and its checks.
    async fn play(&mut self) {
        match self.id.first {
            First::Overruns => self.overrun().await,
            _ => {
                self.invoke().await;
            }
        }
        match self.id.schedule {
            Schedule::Retries => {
                self.invoke().await;
                self.plan.advance(PAST_LEASE_MS);
                self.invoke().await;
            }
            Schedule::SweepRelease | Schedule::SweepFail => {
                self.plan.advance(PAST_LEASE_MS);
                self.sweep(self.id.schedule.policy()).await;
                self.invoke().await;
            }
        }
        // Settling: whatever the fault left must resolve within one lease,
        // one sweep and one retry. Its calls are not faulted.
        self.plan.disarm();
        self.faultable = self.plan.trace().len();
        self.plan.advance(PAST_LEASE_MS);
        let stuck = self.stuck_record().await;
        let settling = self.sweep(self.id.schedule.policy()).await;
        if let Some(stuck) = stuck {
            lock(&self.observed).stuck_at_settling = true;
            // A sweep that reports an error may leave what it could not
            // read or write for the next one (it says so): on an engine a
            // call can fail of itself, and only then is a record left
            // stuck not a lost one.
            if settling.is_some_and(|s| s.errors == 0) {
                self.check_swept(&stuck).await;
            }
        }
        self.plan.advance(PAST_LEASE_MS);
        let last = self.invoke().await;
        let record = self.record().await;
        let resolved = record
            .as_ref()
            .is_some_and(|r| r.status == Status::Completed);
        // A key Powertools holds is Powertools' to resolve: answered 409
        // until then, with no record of ours.
        let ours = !self.id.combo.feature.held_cutover();
        if let (Feature::Transactional, Some(orders)) = (self.id.combo.feature, &self.engine.orders)
        {
            self.check_transactional(orders, record.as_ref()).await;
        }
        if resolved && ours {
            self.check_delivered(&last, record.as_ref());
        }
        let mut observed = lock(&self.observed);
        if !resolved && ours {
            observed.violations.push(format!(
                "bound: the record is {:?} after a lease, a sweep and a retry",
                record.map(|r| r.status)
            ));
        }
        if matches!(last, Answer::Died) {
            observed
                .violations
                .push("bound: the settling retry did not answer");
        }
        let first = observed.derived.first().cloned();
        if observed.derived.iter().any(|d| Some(d) != first.as_ref()) {
            observed
                .violations
                .push("effect: a repeat of the effect used another derived key");
        }
    }
}

impl Run {
    /// The run's record, if the settling sweep must resolve it: in progress
    /// with its lease over more than the grace ago, and not a record the
    /// `release` policy leaves for a retry to resume (one holding a
    /// recovery point).
    async fn stuck_record(&self) -> Option<lambda_idempotency::store::Record> {
        let now = crate::fixture::now_ms() + self.plan.offset_ms();
        let grace = u64::try_from(GRACE.as_millis()).unwrap_or(u64::MAX);
        self.record().await.filter(|r| {
            r.status == Status::InProgress
                && r.lease_expires_at_ms.saturating_add(grace) < now
                && !(self.id.schedule.policy() == SweepPolicy::Release && r.checkpoint.is_some())
        })
    }

    /// The swept invariant: the settling sweep, unfaulted and reporting no
    /// error, resolves a record stuck before it (whatever a fault did to
    /// earlier sweeps and to the place their listing saved), rather than
    /// leave it to the retry.
    async fn check_swept(&self, stuck: &lambda_idempotency::store::Record) {
        let after = self.record().await;
        if after.as_ref().is_some_and(|r| {
            r.status == Status::InProgress && r.attempt == stuck.attempt && r.owner == stuck.owner
        }) {
            lock(&self.observed).violations.push(format!(
                "swept: the settling sweep left the record stuck (attempt {}, its lease over \
                 {} ms before the sweep)",
                stuck.attempt,
                (crate::fixture::now_ms() + self.plan.offset_ms())
                    .saturating_sub(stuck.lease_expires_at_ms)
            ));
        }
    }

    /// Transactional completion: the record completed with the handler's
    /// outcome if and only if its deferred write (the key's one order row)
    /// committed. A record the sweeper failed carries no order.
    async fn check_transactional(
        &self,
        orders: &Orders,
        record: Option<&lambda_idempotency::store::Record>,
    ) {
        let ordered = orders.exists(&self.key).await;
        let succeeded = record
            .filter(|r| r.status == Status::Completed)
            .and_then(|r| r.response.as_ref())
            .is_some_and(|r| (200..300).contains(&r.status));
        if ordered != succeeded {
            lock(&self.observed).violations.push(format!(
                "stored: the transactional completion and its write parted: record completed \
                 with the handler's outcome: {succeeded}, order written: {ordered}"
            ));
        }
    }

    /// The bound's other half: once the record is completed, the settling
    /// retry receives the key's outcome (the first one stored or replayed),
    /// not an in-progress answer, a store error or another outcome. A stored
    /// problem (the sweeper's `fail`) may reach a function or batch as the
    /// error it is.
    fn check_delivered(&self, last: &Answer, record: Option<&lambda_idempotency::store::Record>) {
        let mut observed = lock(&self.observed);
        let Some(reference) = observed.reference.clone() else {
            observed
                .violations
                .push("bound: the record is completed but no outcome of it was seen");
            return;
        };
        // The record holds a problem, not the handler's output.
        let problem = record
            .and_then(|r| r.response.as_ref())
            .is_some_and(|r| !(200..300).contains(&r.status));
        let (delivered, answered) = match last {
            // The settling retry's death is a violation of its own.
            Answer::Died => return,
            Answer::Http { status, body, .. } => (
                (*status, body.clone()) == reference,
                format!("{status} {}", String::from_utf8_lossy(body)),
            ),
            Answer::Output(Ok(value)) => (
                (200, canonical(value.to_string().as_bytes())) == reference,
                format!("output {value}"),
            ),
            Answer::Output(Err(error)) => (problem, format!("error {error}")),
            Answer::Batch(acknowledged) => (
                *acknowledged || problem,
                format!("acknowledged: {acknowledged}"),
            ),
        };
        if !delivered {
            observed.violations.push(format!(
                "bound: the settling retry answered {answered}, not the key's outcome {} {}",
                reference.0,
                String::from_utf8_lossy(&reference.1)
            ));
        }
    }
}

/// One call through the lifecycle alone, as an entry point of a user's own
/// makes it: the payload's text is its fingerprint, the output is stored as
/// its JSON text, and the answers are the event path's.
async fn core(
    config: &IdempotencyConfig,
    id: String,
    body: String,
    handler: &Handler,
) -> Result<Value, String> {
    let begun = lifecycle::begin(config, id, body, None, || None)
        .await
        .map_err(|e| e.to_string())?;
    let record = match begun {
        Begun::Run(guard) => {
            let ctx = guard.context().clone();
            let (guard, output) = guard.run(handler.execute(Some(ctx))).await?;
            let stored = StoredResponse::new(200, Vec::new(), StoredBody::Text(output.to_string()));
            return match guard.finish(stored).await {
                Finished::Stored | Finished::Oversized => Ok(output),
                // Fenced too: the record will hold the newer attempt's
                // outcome, not this one.
                other => Err(format!("not recorded: {other:?}")),
            };
        }
        Begun::Replay(record) => record,
        other => return Err(format!("not run: {other:?}")),
    };
    match &record.response {
        Some(stored) if stored.status == 200 => {
            serde_json::from_slice(stored.body.bytes()).map_err(|e| e.to_string())
        }
        other => Err(format!("replayed a problem: {other:?}")),
    }
}

/// Whether `record` only marks its key (the sweeper's `abandoned`, the
/// too-large marker) rather than holding its outcome.
fn marks_only(record: &lambda_idempotency::store::Record) -> bool {
    record.status == Status::Completed
        && record.response.as_ref().is_some_and(|response| {
            let body = String::from_utf8_lossy(response.body.bytes());
            body.contains("/problems/abandoned") || body.contains("/problems/response-too-large")
        })
}

/// A function output's canonical bytes (its JSON re-serialised), so a
/// stored output and a returned value compare.
fn canonical(bytes: &[u8]) -> Vec<u8> {
    serde_json::from_slice::<Value>(bytes)
        .map(|v| v.to_string().into_bytes())
        .unwrap_or_else(|_| bytes.to_vec())
}

/// What a harness run covered and found.
#[derive(Default)]
struct Report {
    cases: u64,
    /// Cases by the kind of the call faulted.
    by_call: std::collections::BTreeMap<&'static str, u64>,
    repeats_in_window: u64,
    /// Cases with a second fault, at a call only the first one caused.
    second_faults: u64,
    /// Cases whose wait made no poll to fail (its claim outlasted the
    /// wait): not tallied, since it depends on the real clock.
    polls_unreached: u64,
    /// Cases whose aimed settlement was never made (no listing to settle).
    settles_unreached: u64,
    /// Runs (fault-free ones too) whose settling sweep had a stuck record
    /// to resolve.
    stuck_at_settling: u64,
    violations: Vec<String>,
}

/// Run every case of `combos` × `firsts` × schedules on `engine`: each
/// fault-free to number its calls, then at each call with each fault.
///
/// With `second_faults`, the calls a fault caused that the fault-free run
/// never makes are each failed in turn too (every harness but the engines'
/// at ci size, where they would add a third of the cases: there the
/// sweeper's resolutions are reached by the sweep schedules, and the rest
/// runs at full size).
async fn harness(
    engine: Engine,
    combos: &[Combo],
    firsts: &[First],
    second_faults: bool,
) -> Report {
    let mut report = Report::default();
    let mut serial = 0u64;
    for &combo in combos {
        for &first in firsts {
            for schedule in Schedule::ALL {
                let id = CaseId {
                    combo,
                    first,
                    schedule,
                };
                serial += 1;
                let mut clean = Run::new(&engine, id, engine.plan(FaultPlan::new()), serial).await;
                clean.play().await;
                let trace = clean.plan.trace();
                collect(&mut report, &clean, id, &[], &trace);
                for (index, call) in trace[..clean.faultable].iter().enumerate() {
                    for fault in Fault::ALL {
                        serial += 1;
                        let plan = engine.plan(FaultPlan::failing(index, fault));
                        let mut run = Run::new(&engine, id, plan, serial).await;
                        run.play().await;
                        report.cases += 1;
                        *report.by_call.entry(call.kind.name()).or_default() += 1;
                        let at = [(index, call, fault)];
                        check_injected(&mut report, &engine, id, &run, &at);
                        collect(&mut report, &run, id, &at, &trace);
                        // The calls only this fault caused (a kind the
                        // fault-free run never makes: the offload's
                        // DeleteObject of an object no record points to,
                        // say), each failed in turn as well.
                        let caused = match second_faults {
                            true => run.plan.trace(),
                            false => Vec::new(),
                        };
                        for (second, then) in caused
                            .iter()
                            .enumerate()
                            .take(run.faultable)
                            .skip(index + 1)
                            .filter(|(_, c)| trace.iter().all(|t| t.kind != c.kind))
                        {
                            for then_fault in Fault::ALL {
                                serial += 1;
                                let plan = engine.plan(
                                    FaultPlan::failing(index, fault)
                                        .then_failing(second, then_fault),
                                );
                                let mut run = Run::new(&engine, id, plan, serial).await;
                                run.play().await;
                                report.cases += 1;
                                report.second_faults += 1;
                                *report.by_call.entry(then.kind.name()).or_default() += 1;
                                let at = [(index, call, fault), (second, then, then_fault)];
                                check_injected(&mut report, &engine, id, &run, &at);
                                collect(&mut report, &run, id, &at, &trace);
                            }
                        }
                    }
                }
                // The wait's polls, numbered apart (how many a wait makes
                // depends on the real clock): a retry inside the lease of a
                // first execution that died waits, and its first poll fails.
                if combo.feature == Feature::WaitFor
                    && first == First::Dies
                    && schedule == Schedule::Retries
                {
                    for fault in Fault::ALL {
                        serial += 1;
                        let plan = engine.plan(FaultPlan::failing_poll(0, fault));
                        let mut run = Run::new(&engine, id, plan, serial).await;
                        run.play().await;
                        report.cases += 1;
                        *report.by_call.entry("wait-poll").or_default() += 1;
                        let at = match run.plan.polls_injected().first() {
                            Some((n, step)) => format!("poll {n} (get of {step}) {}", fault.name()),
                            None => {
                                report.polls_unreached += 1;
                                format!("poll 0 {} (not reached)", fault.name())
                            }
                        };
                        collect_at(&mut report, &run, id, &at, &trace);
                    }
                }
                // A listing that keeps its place: the first sweep's saving
                // of it (numbered apart, as its listings are), failed.
                if engine.settles && schedule != Schedule::Retries {
                    for fault in Fault::ALL {
                        serial += 1;
                        let plan = engine.plan(FaultPlan::failing_settle(0, fault));
                        let mut run = Run::new(&engine, id, plan, serial).await;
                        run.play().await;
                        report.cases += 1;
                        *report.by_call.entry("sweep-settle").or_default() += 1;
                        let at = match run.plan.settles_injected().first() {
                            Some((n, step, _)) => {
                                format!("settle {n} (sweep-settle of {step}) {}", fault.name())
                            }
                            None => {
                                report.settles_unreached += 1;
                                format!("settle 0 {} (not reached)", fault.name())
                            }
                        };
                        collect_at(&mut report, &run, id, &at, &trace);
                    }
                }
            }
        }
    }
    report
}

/// A batch's answer: acknowledged when its response names no failed
/// record; an error fails the whole batch (Lambda delivers it again).
fn batch_answer<F, E>(failures: Result<Vec<F>, E>) -> Answer {
    Answer::Batch(failures.is_ok_and(|f| f.is_empty()))
}

/// The faults went where they were aimed (each at its call's index and
/// kind), or the run diverged from the one that numbered its calls.
fn check_injected(
    report: &mut Report,
    engine: &Engine,
    id: CaseId,
    run: &Run,
    at: &[(usize, &Call, Fault)],
) {
    let injected = run.plan.injected();
    let aimed: Vec<_> = at
        .iter()
        .map(|(index, call, _)| (*index, call.kind))
        .collect();
    if injected != aimed {
        report.violations.push(format!(
            "{} | harness: the run diverged from the one that numbered its calls: faults aimed at \
             {aimed:?}, injected at {injected:?}",
            path(engine.name, id),
        ));
    }
}

fn path(engine: &str, id: CaseId) -> String {
    format!(
        "{engine} / {:?}+{:?} / first {:?} / {:?}",
        id.combo.surface, id.combo.feature, id.first, id.schedule
    )
}

fn collect(
    report: &mut Report,
    run: &Run,
    id: CaseId,
    faults: &[(usize, &Call, Fault)],
    trace: &[Call],
) {
    let at = match faults {
        [] => "no fault".to_owned(),
        faults => faults
            .iter()
            .map(|(index, call, fault)| {
                format!(
                    "call {index} ({} of {}) {}",
                    call.kind.name(),
                    call.step,
                    fault.name()
                )
            })
            .collect::<Vec<_>>()
            .join(" then "),
    };
    collect_at(report, run, id, &at, trace);
}

/// [`collect`], the faults described by `at`.
fn collect_at(report: &mut Report, run: &Run, id: CaseId, at: &str, trace: &[Call]) {
    let observed = lock(&run.observed);
    if observed.derived.len() > 1 {
        report.repeats_in_window += 1;
    }
    if observed.stuck_at_settling {
        report.stuck_at_settling += 1;
    }
    let calls: Vec<String> = trace
        .iter()
        .map(|c| format!("{}:{}", c.step, c.kind.name()))
        .collect();
    for violation in &observed.violations.0 {
        report.violations.push(format!(
            "{} / {at} | {violation} | fault-free calls: {}",
            path(run.engine.name, id),
            calls.join(" ")
        ));
    }
}

/// `FAULT_HARNESS_SIZE`: `ci` (default) or `full` (also `stream_chaos`'s
/// number of seeds).
pub(crate) fn full_size() -> bool {
    match std::env::var("FAULT_HARNESS_SIZE").as_deref() {
        Ok("full") => true,
        Ok("ci") | Err(_) => false,
        Ok(other) => panic!("FAULT_HARNESS_SIZE is `{other}`: use `ci` or `full`"),
    }
}

/// Print what a run covered and fail on any violation; once it passed,
/// report its tally to the reliability run's log as `test`
/// (scripts/reliability.sh, RELIABILITY.md section 6).
fn judge(test: &str, report: Report) {
    println!(
        "fault harness {test}: {} cases (combination × call × fault), {} of them with a second \
         fault at a call only the first one caused, {} with the effect repeated inside the \
         documented window, {} violations; calls faulted: {:?}; wait polls not reached (the \
         claim outlasted the wait): {}; settlements not reached: {}; runs whose settling sweep \
         had a stuck record to resolve: {}",
        report.cases,
        report.second_faults,
        report.repeats_in_window,
        report.violations.len(),
        report.by_call,
        report.polls_unreached,
        report.settles_unreached,
        report.stuck_at_settling
    );
    for violation in &report.violations {
        println!("VIOLATION {violation}");
    }
    assert!(
        report.violations.is_empty(),
        "fault harness {test}: {} violations (printed above), first: {}",
        report.violations.len(),
        report.violations[0]
    );
    let tally = crate::fuzz::Tally::new();
    tally.add_n("cases", report.cases);
    tally.add_n(
        "effect repeated inside the documented window",
        report.repeats_in_window,
    );
    tally.add_n(
        "second fault at a call only the first caused",
        report.second_faults,
    );
    tally.add_n(
        "stuck record left for the settling sweep",
        report.stuck_at_settling,
    );
    for (call, n) in report.by_call {
        tally.add_n(format!("{call} faulted"), n);
    }
    tally.report(test);
}

const ALL_FIRSTS: [First; 4] = [First::Completes, First::Fails, First::Dies, First::Overruns];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_call_failed_on_the_memory_store() {
    let engine = Engine {
        name: "memory",
        shared: None,
        orders: None,
        powertools: None,
        bucket: None,
        settles: false,
    };
    let report = harness(engine, &combos(false, false), &ALL_FIRSTS, true).await;
    judge("fault_harness::memory", report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_call_failed_in_the_powertools_cutover() {
    let engine = Engine {
        name: "memory+powertools-table",
        shared: None,
        orders: None,
        powertools: Some(PowertoolsTables::written().await),
        bucket: None,
        settles: false,
    };
    let cutover: Vec<Combo> = combos(false, true)
        .into_iter()
        .filter(|c| c.feature.cutover())
        .collect();
    let report = harness(engine, &cutover, &[First::Completes], true).await;
    judge("fault_harness::powertools_cutover", report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_call_failed_with_s3_offload() {
    let bucket = format!("fault-harness-{}", std::process::id());
    let endpoint = std::env::var("AWS_ENDPOINT_URL_S3").unwrap_or_else(|_| {
        panic!("AWS_ENDPOINT_URL_S3 is not set: run the tests through scripts/s3-local.sh")
    });
    let shared = aws_config::from_env()
        .region(aws_config::Region::new("us-east-1"))
        .load()
        .await;
    let setup = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&shared)
            .endpoint_url(endpoint)
            .force_path_style(true)
            .build(),
    );
    setup
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "create bucket {bucket}: {}",
                aws_sdk_s3::error::DisplayErrorContext(e)
            )
        });
    let engine = Engine {
        name: "memory+s3",
        shared: None,
        orders: None,
        powertools: None,
        bucket: Some(bucket),
        settles: false,
    };
    let offload = [Surface::Http, Surface::Function].map(|surface| Combo {
        surface,
        feature: Feature::Offload,
    });
    let report = harness(engine, &offload, &ALL_FIRSTS, true).await;
    judge("fault_harness::s3_offload", report);
}

/// The engines' subset: the paths each implements differently (claim,
/// takeover, fenced completion, recovery points, release, the sweeper's
/// resolutions, transactions), on the HTTP layer and functions.
fn engine_combos(transactional: bool) -> (Vec<Combo>, Vec<First>) {
    if full_size() {
        return (combos(transactional, false), ALL_FIRSTS.to_vec());
    }
    let mut subset = vec![
        Combo {
            surface: Surface::Http,
            feature: Feature::Plain,
        },
        Combo {
            surface: Surface::Http,
            feature: Feature::RecoveryPoints,
        },
        // The lifecycle the entry points share, driven directly.
        Combo {
            surface: Surface::Core,
            feature: Feature::Plain,
        },
    ];
    if transactional {
        subset.push(Combo {
            surface: Surface::Http,
            feature: Feature::Transactional,
        });
    }
    // An overrun's late completion is the fenced one.
    (subset, vec![First::Completes, First::Dies, First::Overruns])
}

/// The second deployment of an engine (a Redis Cluster, PostgreSQL through
/// PgBouncer): every combination at full size; at ci size the lifecycle
/// driven directly (and a transactional completion, where the engine has
/// one), since the engine's code paths are the ones its first deployment
/// runs and what differs is the connection underneath.
fn second_deployment_combos(transactional: bool) -> (Vec<Combo>, Vec<First>) {
    if full_size() {
        return engine_combos(transactional);
    }
    let mut subset = vec![Combo {
        surface: Surface::Core,
        feature: Feature::Plain,
    }];
    if transactional {
        subset.push(Combo {
            surface: Surface::Http,
            feature: Feature::Transactional,
        });
    }
    (subset, vec![First::Completes, First::Dies, First::Overruns])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_call_failed_on_dynamodb_local() {
    let (store, _) = integration_tests::dynamo_store().await;
    let table = integration_tests::orders_table(store.client()).await;
    let client = store.client().clone();
    let engine = Engine {
        name: "dynamodb-local",
        shared: Some(Arc::new(
            integration_tests::dynamo_builder_like(&store)
                .with_sweep_index()
                .open()
                .unwrap(),
        )),
        orders: Some(Orders::Dynamo { table, client }),
        powertools: None,
        bucket: None,
        settles: false,
    };
    let (combos, firsts) = engine_combos(true);
    let report = harness(engine, &combos, &firsts, full_size()).await;
    judge("fault_harness::dynamodb_local", report);
}

/// The sweeper as deployed by default: DynamoDB's stream discovery, its
/// stream read through the streams proxy (no fault of its own here:
/// `stream_chaos` has those), its listing's place saved by each sweep, and
/// the first sweep's saving failed with each fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_call_failed_on_the_dynamodb_stream_sweeper() {
    let (base, _) = integration_tests::dynamo_store().await;
    let proxy = StreamsProxy::start()
        .await
        .expect("the streams proxy starts");
    let layout = TableLayout::default().partition_key(
        "id",
        KeyValue::prefixed(format!("fh{}#", std::process::id())),
    );
    let store = lambda_idempotency::DynamoStore::builder(base.client().clone(), base.table())
        .with_layout(layout)
        .with_stream(proxy.client().await)
        .open()
        .expect("the stream store opens");
    let engine = Engine {
        settles: true,
        ..Engine::shared("dynamodb-local-stream", Arc::new(store))
    };
    let (combos, firsts) = second_deployment_combos(false);
    let report = harness(engine, &combos, &firsts, full_size()).await;
    judge("fault_harness::dynamodb_stream", report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_call_failed_on_redis() {
    let engine = Engine::shared("redis", Arc::new(integration_tests::redis_store().await));
    let (combos, firsts) = engine_combos(false);
    let report = harness(engine, &combos, &firsts, full_size()).await;
    judge("fault_harness::redis", report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_call_failed_on_a_redis_cluster() {
    let engine = Engine::shared(
        "redis-cluster",
        Arc::new(integration_tests::redis_cluster_store().await),
    );
    let (combos, firsts) = second_deployment_combos(false);
    let report = harness(engine, &combos, &firsts, full_size()).await;
    judge("fault_harness::redis_cluster", report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_call_failed_on_postgres() {
    let engine = postgres_engine("postgres", &integration_tests::postgres_url()).await;
    let (combos, firsts) = engine_combos(true);
    let report = harness(engine, &combos, &firsts, full_size()).await;
    judge("fault_harness::postgres", report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_call_failed_through_pgbouncer() {
    let engine = postgres_engine("pgbouncer", &integration_tests::postgres_pooler_url()).await;
    let (combos, firsts) = second_deployment_combos(true);
    let report = harness(engine, &combos, &firsts, full_size()).await;
    judge("fault_harness::pgbouncer", report);
}

/// A PostgreSQL engine reached through `url` (the server, or PgBouncer in
/// transaction pooling), with an orders table beside its records.
async fn postgres_engine(name: &'static str, url: &str) -> Engine {
    let store = Arc::new(integration_tests::postgres_store_at(url).await);
    let table = store.table().replace("idempotency_records", "fh_orders");
    store
        .pool()
        .get()
        .await
        .expect("a connection")
        .batch_execute(&format!("CREATE TABLE {table} (id text PRIMARY KEY)"))
        .await
        .expect("the orders table");
    Engine {
        name,
        shared: Some(store.clone()),
        orders: Some(Orders::Postgres { table, store }),
        powertools: None,
        bucket: None,
        settles: false,
    }
}
