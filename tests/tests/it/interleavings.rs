//! The interleaving explorer (docs/testing.md, "The interleaving
//! explorer"): the library's own claim lifecycle, sweeper and forced
//! resolution, run as concurrent actors on one key of a `MemoryStore`,
//! every store call a point where another actor may go first.
//!
//! Each scenario is a first attempt (`A`) and a second one (`B`: a retry
//! past `A`'s lease, or a duplicate inside it), with, in some, a sweep past
//! the lease or an operator's forced resolution (`release` or `fail`, the
//! CLI's `--force` on a live lease). A deterministic scheduler
//! (`integration_tests::schedule`) lets one waiting call go at a time and
//! walks every order of the actors' calls with at most [`bound`]
//! preemptions; each scenario runs fault-free, then with every fault kind
//! (`Fault::ALL`) at every numbered call of every actor, each under every
//! such order (at `FAULT_HARNESS_SIZE=full`, every order). The clocks
//! are virtual (a late actor's `FaultPlan` is
//! ahead of the first one's), so nothing sleeps and the same order gives
//! the same run.
//!
//! Checked after every run, then after a settling retry (past every
//! lease, unfaulted, alone):
//! - **effect**: no handler runs once the key holds its outcome;
//! - **stored**: a completion reported stored is the key's outcome at the
//!   end (so at most one is reported);
//! - **replay**: every replay is that outcome, byte for byte;
//! - **bound**: the settling retry gets the key's outcome (it runs the
//!   handler only when none is stored, and then stores it);
//! - **deterministic**: each order runs as its script says and ends.
//!
//! On DynamoDB Local (sweep index), Redis and PostgreSQL the same
//! scenarios run sampled: a few orders drawn from seeds, and each fault at
//! each call under one drawn order (`sampled`).
//!
//! The walk's size and what it met go to the reliability log
//! (`interleavings`, `interleavings::ENGINE`), checked against
//! reliability-counts.json by `make test`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use integration_tests::fault_store::{Fault, FaultPlan, FaultStore};
use integration_tests::schedule::{next_script, Actor, Scheduler};
use lambda_idempotency::lifecycle::{self, Begun, Finished};
use lambda_idempotency::store::{Status, StoredBody, StoredResponse, StuckRecord, SweepStore};
use lambda_idempotency::sweeper::{SweepPolicy, Sweeper};
use lambda_idempotency::{IdempotencyConfig, MemoryStore, Store};

/// The lease every attempt takes.
const LEASE: Duration = Duration::from_secs(10);
/// The sweeper's grace past a lease.
const GRACE: Duration = Duration::from_secs(1);
/// How far ahead a late actor's clock is: past the lease and the grace.
const PAST_LEASE_MS: u64 = 12_000;
/// Preemptions allowed in one order (switching away from an actor that
/// could go on): 2 at `FAULT_HARNESS_SIZE=ci` (what `make test` runs),
/// none counted at `full` (every order of the calls).
fn bound() -> usize {
    match crate::fault_harness::full_size() {
        true => usize::MAX,
        false => 2,
    }
}
/// Runs so far (each run's key is its own on a shared engine).
static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
const BODY: &str = "{\"amount\":2500}";

/// A party beside the two attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Party {
    /// A sweep past the lease under this policy.
    Sweep(SweepPolicy),
    /// An operator's forced resolution of the live record.
    Operator(SweepPolicy),
}

#[derive(Debug, Clone, Copy)]
struct Scenario {
    /// Whether `B` comes past `A`'s lease (a takeover), or inside it (a
    /// duplicate).
    late_b: bool,
    /// Whether each attempt's handler records its charge in a recovery
    /// point (a resumed one skips it).
    recovery_points: bool,
    /// Actors 2 and 3.
    parties: &'static [Party],
}

const SWEEP_RELEASE: Party = Party::Sweep(SweepPolicy::Release);
const SWEEP_FAIL: Party = Party::Sweep(SweepPolicy::Fail);
const FORCE_RELEASE: Party = Party::Operator(SweepPolicy::Release);
const FORCE_FAIL: Party = Party::Operator(SweepPolicy::Fail);

impl Scenario {
    /// Every scenario: `B` inside or past the lease, with each party, and
    /// a sweep and an operator together; with and without recovery points.
    fn all() -> Vec<Scenario> {
        let shapes: [(bool, &'static [Party]); 10] = [
            (false, &[]),
            (true, &[]),
            (true, &[SWEEP_RELEASE]),
            (true, &[SWEEP_FAIL]),
            (false, &[FORCE_RELEASE]),
            (false, &[FORCE_FAIL]),
            (true, &[FORCE_RELEASE]),
            (true, &[FORCE_FAIL]),
            (true, &[SWEEP_RELEASE, FORCE_FAIL]),
            (true, &[SWEEP_FAIL, FORCE_RELEASE]),
        ];
        [false, true]
            .into_iter()
            .flat_map(|recovery_points| {
                shapes.map(|(late_b, parties)| Scenario {
                    late_b,
                    recovery_points,
                    parties,
                })
            })
            .collect()
    }

    fn actors(self) -> usize {
        2 + self.parties.len()
    }

    /// Whether actor `i`'s clock is past `A`'s lease.
    fn late(self, i: usize) -> bool {
        match i {
            0 => false,
            1 => self.late_b,
            _ => matches!(self.parties[i - 2], Party::Sweep(_)),
        }
    }

    fn name(self) -> String {
        let mut name = match self.late_b {
            true => "A, B past the lease".to_owned(),
            false => "A, B inside the lease".to_owned(),
        };
        for party in self.parties {
            name.push_str(&match party {
                Party::Sweep(p) => format!(", sweep ({p:?})"),
                Party::Operator(p) => format!(", operator ({p:?}, forced)"),
            });
        }
        if self.recovery_points {
            name.push_str(", recovery points");
        }
        name
    }
}

/// The store the actors share and this run's key in it.
#[derive(Clone)]
struct Target {
    store: Arc<dyn SweepStore>,
    key: String,
}

impl Target {
    /// The key's record as the store holds it, read directly (no turn,
    /// no fault).
    async fn record(&self) -> Option<lambda_idempotency::store::Record> {
        self.store
            .get(&self.key)
            .await
            .expect("the engine answers the explorer's own read")
            .map(|s| s.record)
    }
}

/// Where the explorer runs.
#[derive(Clone)]
enum Engine {
    /// A fresh `MemoryStore` per run.
    Memory,
    /// One engine's store, shared by every run (each on a key of its own).
    Shared(Arc<dyn SweepStore>),
}

impl Engine {
    fn target(&self) -> Target {
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self {
            Engine::Memory => Target {
                store: Arc::new(MemoryStore::new()),
                key: "interleaved-1".to_owned(),
            },
            Engine::Shared(store) => Target {
                store: store.clone(),
                key: format!("il-{}-{run}", std::process::id()),
            },
        }
    }
}

/// Which order a run takes: a script of the walk, or one drawn from a
/// seed (the engines' sample).
#[derive(Debug, Clone)]
enum Order {
    Script(Vec<usize>),
    Seed(u64),
}

/// What an attempt answered.
#[derive(Debug, Clone)]
enum Answer {
    /// Ran the handler and its completion was stored: this output.
    Stored(Vec<u8>),
    /// Ran the handler, and its completion was not stored (fenced, lost,
    /// unknown): nothing to check of it.
    NotStored,
    /// Replayed this outcome.
    Replayed(Vec<u8>),
    /// In progress elsewhere, or an error: nothing to check.
    Other(String),
    /// Its process died.
    Died,
}

#[derive(Default)]
struct Observed {
    answers: Vec<(usize, Answer)>,
    violations: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The key's outcome as the store holds it, read directly (no turn, no
/// fault): `Some` once completed.
async fn outcome(target: &Target) -> Option<Vec<u8>> {
    let record = target.record().await?;
    (record.status == Status::Completed)
        .then(|| record.response.map(|r| r.body.bytes().to_vec()))
        .flatten()
}

/// One attempt of the key, as actor `actor`: claim, run (its effect
/// checked against what the store already holds), complete.
async fn attempt(
    actor: usize,
    recovery_points: bool,
    store: Arc<dyn SweepStore>,
    plan: FaultPlan,
    target: Target,
    observed: Arc<Mutex<Observed>>,
) {
    let config = IdempotencyConfig::new(store).max_lease(LEASE);
    let work = async {
        match lifecycle::begin(&config, target.key.clone(), BODY.to_owned(), None, || None).await {
            Ok(Begun::Run(guard)) => {
                if let Some(held) = outcome(&target).await {
                    lock(&observed).violations.push(format!(
                        "effect: actor {actor} ran the handler while the key held its outcome {}",
                        String::from_utf8_lossy(&held)
                    ));
                }
                let output = format!("{{\"by\":{actor}}}");
                let ctx = guard.context().clone();
                let handler = async {
                    if recovery_points && ctx.recovery_point().is_none() {
                        if target
                            .record()
                            .await
                            .and_then(|r| r.checkpoint)
                            .is_some_and(|c| c.name == "charged")
                        {
                            lock(&observed).violations.push(format!(
                                "effect: actor {actor} charged again though the recovery point \
                                 recording the charge is stored"
                            ));
                        }
                        ctx.commit("charged", serde_json::json!({ "by": actor }))
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    Ok::<_, String>(())
                };
                let guard = match guard.run(handler).await {
                    Ok((guard, ())) => guard,
                    Err(e) => return Answer::Other(e),
                };
                let stored = StoredResponse::new(200, Vec::new(), StoredBody::Text(output.clone()));
                match guard.finish(stored).await {
                    Finished::Stored => Answer::Stored(output.into_bytes()),
                    _ => Answer::NotStored,
                }
            }
            Ok(Begun::Replay(record)) => match record.response {
                Some(response) => Answer::Replayed(response.body.bytes().to_vec()),
                None => Answer::Other("a replay without a response".to_owned()),
            },
            Ok(other) => Answer::Other(format!("{other:?}")),
            Err(e) => Answer::Other(e.to_string()),
        }
    };
    let answer = tokio::select! {
        biased;
        answer = work => answer,
        () = plan.died() => Answer::Died,
    };
    lock(&observed).answers.push((actor, answer));
}

/// A sweep under `policy`, itself a process that can die.
async fn sweep(store: Arc<dyn SweepStore>, plan: FaultPlan, policy: SweepPolicy) {
    let sweeper = Sweeper::new(store).policy(policy).grace(GRACE);
    tokio::select! {
        biased;
        _ = sweeper.sweep(None) => {},
        () = plan.died() => {},
    }
}

/// An operator's forced resolution (the CLI's `release`/`fail --force`):
/// read the record; if it is in progress, resolve it whatever its lease.
async fn operator(store: Arc<dyn SweepStore>, plan: FaultPlan, policy: SweepPolicy, key: String) {
    let work = async {
        let Ok(Some(found)) = store.get(&key).await else {
            return;
        };
        let record = found.record;
        if record.status != Status::InProgress {
            return;
        }
        let target = StuckRecord {
            id: record.id.clone(),
            attempt: record.attempt,
            owner: record.owner.clone(),
            lease_expires_at_ms: record.lease_expires_at_ms,
            has_checkpoint: record.checkpoint.is_some(),
        };
        let sweeper = Sweeper::new(store).policy(policy).grace(GRACE);
        let _ = sweeper
            .resolve_live(&target, crate::fixture::now_ms())
            .await;
    };
    tokio::select! {
        biased;
        () = work => {},
        () = plan.died() => {},
    }
}

/// What one run did.
struct RunResult {
    script_end: Option<Vec<usize>>,
    /// Numbered calls each actor made.
    calls: Vec<usize>,
    injected: bool,
    violations: Vec<String>,
}

/// One order (`script`) of `scenario`, with `fault` (actor, call, kind) if
/// any, then the settling retry and the checks.
async fn run(
    engine: &Engine,
    scenario: Scenario,
    fault: Option<(usize, usize, Fault)>,
    order: Order,
) -> RunResult {
    let target = engine.target();
    let scheduler = match order {
        Order::Script(script) => Scheduler::new(script, bound()),
        Order::Seed(seed) => Scheduler::seeded(seed),
    };
    let observed = Arc::new(Mutex::new(Observed::default()));
    let plans: Vec<FaultPlan> = (0..scenario.actors())
        .map(|i| {
            let plan = match fault {
                Some((actor, call, kind)) if actor == i => FaultPlan::failing(call, kind),
                _ => FaultPlan::new(),
            }
            .scheduled(scheduler.clone(), i)
            .claims(&target.key);
            // A shared store's listings pass unnumbered and take no turn.
            let plan = match engine {
                Engine::Memory => plan,
                Engine::Shared(_) => plan.without_listings(),
            };
            if scenario.late(i) {
                plan.advance(PAST_LEASE_MS);
            }
            plan
        })
        .collect();
    let store = |i: usize| -> Arc<dyn SweepStore> {
        Arc::new(FaultStore::new(target.store.clone(), plans[i].clone()))
    };
    let mut actors: Vec<Actor<'_>> = vec![
        Box::pin(attempt(
            0,
            scenario.recovery_points,
            store(0),
            plans[0].clone(),
            target.clone(),
            observed.clone(),
        )),
        Box::pin(attempt(
            1,
            scenario.recovery_points,
            store(1),
            plans[1].clone(),
            target.clone(),
            observed.clone(),
        )),
    ];
    for (i, party) in scenario.parties.iter().enumerate() {
        let (store, plan) = (store(i + 2), plans[i + 2].clone());
        actors.push(match *party {
            Party::Sweep(policy) => Box::pin(sweep(store, plan, policy)),
            Party::Operator(policy) => Box::pin(operator(store, plan, policy, target.key.clone())),
        });
    }
    let ended = tokio::time::timeout(Duration::from_secs(10), scheduler.run(actors))
        .await
        .is_ok();
    let mut violations = Vec::new();
    if !ended {
        violations.push("deterministic: the run did not end".to_owned());
    }
    if scheduler.diverged() {
        violations.push("deterministic: the run diverged from its script".to_owned());
    }
    // Settling: a retry past every lease, unfaulted, alone.
    let settle = FaultPlan::new();
    settle.advance(3 * PAST_LEASE_MS);
    attempt(
        9,
        scenario.recovery_points,
        Arc::new(FaultStore::new(target.store.clone(), settle.clone())),
        settle,
        target.clone(),
        observed.clone(),
    )
    .await;
    let held = outcome(&target).await;
    let observed = std::mem::take(&mut *lock(&observed));
    violations.extend(observed.violations);
    for (actor, answer) in &observed.answers {
        match answer {
            Answer::Stored(output) if held.as_ref() != Some(output) => violations.push(format!(
                "stored: actor {actor}'s completion {} was reported stored; the key holds {:?}",
                String::from_utf8_lossy(output),
                held.as_deref().map(String::from_utf8_lossy)
            )),
            Answer::Replayed(bytes) if held.as_ref() != Some(bytes) => violations.push(format!(
                "replay: actor {actor} replayed {}; the key holds {:?}",
                String::from_utf8_lossy(bytes),
                held.as_deref().map(String::from_utf8_lossy)
            )),
            Answer::Other(what) if *actor == 9 => {
                violations.push(format!("bound: the settling retry got no outcome: {what}"))
            }
            _ => {}
        }
    }
    if held.is_none() {
        violations.push("bound: after the settling retry the key holds no outcome".to_owned());
    }
    RunResult {
        script_end: next_script(&scheduler.decisions()),
        calls: plans.iter().map(|p| p.trace().len()).collect(),
        injected: plans.iter().any(|p| !p.injected().is_empty()),
        violations,
    }
}

/// What a walk covered and found.
#[derive(Default)]
struct Walk {
    runs: u64,
    /// Runs whose fault was reached (the order led to its call).
    faulted: u64,
    violations: Vec<String>,
}

impl Walk {
    /// One run's result, `order` naming the order it took.
    fn add(
        &mut self,
        scenario: Scenario,
        fault: Option<(usize, usize, Fault)>,
        order: &str,
        result: RunResult,
    ) {
        self.runs += 1;
        self.faulted += u64::from(result.injected);
        for v in result.violations {
            self.violations.push(format!(
                "{} / fault {:?} / {order} | {v}",
                scenario.name(),
                fault.map(|(a, c, f)| format!("actor {a} call {c} {}", f.name()))
            ));
        }
    }

    /// Print the first violations and fail `test` on any.
    fn judge(&self, test: &str) {
        for v in self.violations.iter().take(50) {
            println!("VIOLATION {v}");
        }
        assert!(
            self.violations.is_empty(),
            "{test}: {} violations (the first 50 printed above), first: {}",
            self.violations.len(),
            self.violations[0]
        );
    }
}

/// Every order of `scenario` with `fault`; the most calls each actor made.
async fn walk(
    engine: &Engine,
    scenario: Scenario,
    fault: Option<(usize, usize, Fault)>,
    into: &mut Walk,
) -> Vec<usize> {
    let mut most = vec![0; scenario.actors()];
    let mut script = Some(Vec::new());
    let mut order = 0u64;
    while let Some(s) = script {
        let mut result = run(engine, scenario, fault, Order::Script(s.clone())).await;
        order += 1;
        for (m, c) in most.iter_mut().zip(&result.calls) {
            *m = (*m).max(*c);
        }
        script = result.script_end.take();
        into.add(
            scenario,
            fault,
            &format!("order {order} (script {s:?})"),
            result,
        );
    }
    most
}

#[tokio::test]
async fn every_interleaving_at_this_bound_with_every_fault_at_every_call() {
    let tally = crate::fuzz::Tally::new();
    let mut total = Walk::default();
    let mut orders = 0u64;
    let scenarios = Scenario::all();
    for &scenario in &scenarios {
        let mut walk_of = Walk::default();
        let most = walk(&Engine::Memory, scenario, None, &mut walk_of).await;
        orders += walk_of.runs;
        println!(
            "interleavings: {}: {} orders fault-free, calls per actor at most {most:?}",
            scenario.name(),
            walk_of.runs
        );
        for (actor, &calls) in most.iter().enumerate() {
            for call in 0..calls {
                for fault in Fault::ALL {
                    walk(
                        &Engine::Memory,
                        scenario,
                        Some((actor, call, fault)),
                        &mut walk_of,
                    )
                    .await;
                }
            }
        }
        println!("interleavings: {}: {} runs", scenario.name(), walk_of.runs);
        total.runs += walk_of.runs;
        total.faulted += walk_of.faulted;
        total.violations.extend(walk_of.violations);
    }
    println!(
        "interleavings: {} runs of {} scenarios ({orders} orders fault-free, {} runs with their \
         fault reached), at most {} preemptions, {} violations",
        total.runs,
        scenarios.len(),
        total.faulted,
        match bound() {
            usize::MAX => "any number of".to_owned(),
            n => n.to_string(),
        },
        total.violations.len()
    );
    total.judge("interleavings");
    tally.add_n("cases", total.runs);
    tally.add_n("scenarios", scenarios.len() as u64);
    tally.add_n("orders fault-free", orders);
    tally.add_n("runs with their fault reached", total.faulted);
    tally.report("interleavings");
}

/// Orders drawn per scenario on an engine, fault-free.
const SAMPLED_ORDERS: u64 = 4;

/// The explorer on a real engine, sampled (at ci size, the scenarios
/// without recovery points): per scenario, [`SAMPLED_ORDERS`]
/// orders fault-free, then each fault kind at each call of each actor
/// (as many calls as those orders made) under one order drawn from its own
/// seed. Reported as `interleavings::NAME`.
async fn sampled(name: &str, store: Arc<dyn SweepStore>) {
    let engine = Engine::Shared(store);
    let mut total = Walk::default();
    let mut seed = 0u64;
    // At ci size, the scenarios without recovery points.
    let scenarios = Scenario::all()
        .into_iter()
        .filter(|s| crate::fault_harness::full_size() || !s.recovery_points);
    for scenario in scenarios {
        // The calls each actor made, at most, in the fault-free orders:
        // each is faulted in turn.
        let mut most = vec![0; scenario.actors()];
        let mut targets = Vec::new();
        for _ in 0..SAMPLED_ORDERS {
            seed += 1;
            let result = run(&engine, scenario, None, Order::Seed(seed)).await;
            for (m, c) in most.iter_mut().zip(&result.calls) {
                *m = (*m).max(*c);
            }
            total.add(scenario, None, &format!("seed {seed}"), result);
        }
        for (actor, &calls) in most.iter().enumerate() {
            for call in 0..calls {
                targets.extend(Fault::ALL.map(|fault| (actor, call, fault)));
            }
        }
        for fault in targets {
            seed += 1;
            let result = run(&engine, scenario, Some(fault), Order::Seed(seed)).await;
            total.add(scenario, Some(fault), &format!("seed {seed}"), result);
        }
    }
    println!(
        "interleavings::{name}: {} runs sampled ({} with their fault reached), {} violations",
        total.runs,
        total.faulted,
        total.violations.len()
    );
    total.judge(&format!("interleavings::{name}"));
    let tally = crate::fuzz::Tally::new();
    tally.add_n("cases", total.runs);
    tally.add_n("runs with their fault reached", total.faulted);
    tally.report(&format!("interleavings::{name}"));
}

#[tokio::test]
async fn sampled_orders_on_dynamodb_local() {
    let (store, _) = integration_tests::dynamo_store().await;
    let store = integration_tests::dynamo_builder_like(&store)
        .with_sweep_index()
        .open()
        .expect("the store opens");
    sampled("dynamodb_local", Arc::new(store)).await;
}

#[tokio::test]
async fn sampled_orders_on_redis() {
    sampled("redis", Arc::new(integration_tests::redis_store().await)).await;
}

#[tokio::test]
async fn sampled_orders_on_postgres() {
    sampled(
        "postgres",
        Arc::new(integration_tests::postgres_store().await),
    )
    .await;
}
