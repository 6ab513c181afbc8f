//! A fault-injecting [`Store`] wrapper for the fault harness
//! (tests/tests/it/fault_harness.rs): it numbers every store call of a run
//! and fails the one a [`FaultPlan`] aims at in one of three ways
//! ([`Fault`]), and it drives a virtual clock so a retry "past the lease"
//! needs no sleeping.
//!
//! The same plan numbers the calls an SDK client makes through a
//! [`FaultInterceptor`] (the cut-over's `GetItem` on Powertools' table), so
//! one run has one sequence of calls whatever they go to.
//!
//! **The process gone** ([`Fault::Gone`]): the call is applied, then the
//! plan marks the invocation dead and the call never returns (its future
//! stays pending); every later store call of a dead invocation stays pending
//! without reaching the store, and the harness drops the invocation's future
//! as soon as the plan says it died ([`FaultPlan::died`]). Nothing of that
//! invocation happens after the faulted call: what a process killed right
//! after the call leaves.
//!
//! **The virtual clock**: every time the library hands a store (a claim's
//! `now_ms`, lease end and expiry; a completion's expiry; a sweep's cutoff
//! and clock) is moved forward by [`FaultPlan::advance`]'s total before it
//! reaches the inner store, which compares only the times it is given
//! (docs/DESIGN.md section 4). A retry after `advance(lease)` is a retry
//! past the lease. Times the library reads back from records (a
//! `Retry-After`) are left as the store holds them.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use lambda_idempotency::store::{
    CheckpointRequest, ClaimOutcome, ClaimRequest, CompleteRequest, Completion, Lease, Listing,
    RecordPage, Resolution, Resolve, ResolveRequest, StoredRecord, StuckPage, StuckRequest,
    SweepCursor, SweepStore,
};
use lambda_idempotency::{Error, ErrorKind, Store};

use crate::schedule::Scheduler;

/// One way to fail a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// An error, and nothing written (the request never reached the store).
    Refused,
    /// The call applied, and its answer lost: the caller gets an error.
    AnswerLost,
    /// The call applied, then the process is gone: nothing of the
    /// invocation happens after it.
    Gone,
}

impl Fault {
    /// Every fault, in the order the harness injects them.
    pub const ALL: [Fault; 3] = [Fault::Refused, Fault::AnswerLost, Fault::Gone];

    /// Its name in a violation's path.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Refused => "error-nothing-written",
            Fault::AnswerLost => "applied-answer-lost",
            Fault::Gone => "applied-then-process-gone",
        }
    }
}

/// What a numbered call was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CallKind {
    /// [`Store::claim`].
    Claim,
    /// [`Store::complete`].
    Complete,
    /// [`Store::release`] (a give-back).
    Release,
    /// [`Store::checkpoint`] (a recovery point).
    Checkpoint,
    /// [`SweepStore::stuck`] (the sweeper's listing).
    Stuck,
    /// [`SweepStore::resolve_stuck`] (the sweeper's resolution).
    Resolve,
    /// [`SweepStore::settle`].
    Settle,
    /// [`Store::get`] (a `wait_for` poll; numbered apart:
    /// [`FaultPlan::failing_poll`]).
    Get,
    /// [`SweepStore::scan`].
    Scan,
    /// [`SweepStore::delete_expired`].
    DeleteExpired,
    /// A request of an SDK client with a [`FaultInterceptor`] (the
    /// cut-over's read of Powertools' record).
    Sdk(&'static str),
}

impl CallKind {
    /// Its name in a trace.
    pub fn name(self) -> &'static str {
        match self {
            CallKind::Claim => "claim",
            CallKind::Complete => "complete",
            CallKind::Release => "release",
            CallKind::Checkpoint => "checkpoint",
            CallKind::Stuck => "sweep-list",
            CallKind::Resolve => "sweep-resolve",
            CallKind::Settle => "sweep-settle",
            CallKind::Get => "get",
            CallKind::Scan => "scan",
            CallKind::DeleteExpired => "delete-expired",
            CallKind::Sdk(what) => what,
        }
    }
}

/// One numbered call of a run: its kind and the step of the run (an
/// invocation, a sweep) that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// What the call was.
    pub kind: CallKind,
    /// The step of the run that made it (`invoke#1`, `sweep-release`).
    pub step: String,
}

/// What a call that records an outcome (a completion, a recovery point)
/// did, as far as the run can prove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The store applied it: it answered success, or its answer was lost,
    /// or its process died right after it.
    Yes,
    /// Provably not: refused before it reached the store, or the store
    /// answered that it wrote nothing (fenced, the record gone, the
    /// transaction cancelled or rejected).
    No,
    /// An error that does not say whether it applied.
    Unknown,
}

impl Applied {
    fn of<T>(result: &Result<T, Error>) -> Applied {
        match result {
            Ok(_) => Applied::Yes,
            Err(e) => match e.kind() {
                ErrorKind::Fenced
                | ErrorKind::RecordGone
                | ErrorKind::TransactionCancelled
                | ErrorKind::TransactionRejected
                | ErrorKind::InvalidConfig => Applied::No,
                _ => Applied::Unknown,
            },
        }
    }
}

/// A call that records an outcome, with what it did: the evidence a repeat
/// of the work it recorded is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// The call ([`CallKind::Complete`] or [`CallKind::Checkpoint`]).
    pub call: Call,
    /// What the store did with it.
    pub applied: Applied,
}

/// What [`FaultPlan::enter`] decided for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// Call through and answer.
    Pass,
    /// Fail as the fault says.
    Fail(Fault),
    /// The invocation is dead: the call never happens nor returns.
    Dead,
}

#[derive(Debug, Default)]
struct PlanState {
    trace: Vec<Call>,
    /// The calls to fail (index, fault), in the order of the run.
    targets: Vec<(usize, Fault)>,
    /// The faults injected so far (index, kind).
    injected: Vec<(usize, CallKind)>,
    /// Reads ([`Store::get`], a `wait_for` poll) so far: numbered apart.
    polls: usize,
    /// The polls to fail (their number, fault).
    poll_targets: Vec<(usize, Fault)>,
    /// The polls failed so far, with the step that made each.
    polls_injected: Vec<(usize, String)>,
    /// Settlements of a shared store's listings so far (a listing that
    /// keeps its place saving it, [`SweepStore::finish`]): numbered apart,
    /// since how many listings a sweep makes depends on other runs' records.
    settles: usize,
    /// The settlements to fail (their number, fault).
    settle_targets: Vec<(usize, Fault)>,
    /// The settlements failed so far: number, the step that made it, fault.
    settles_injected: Vec<(usize, String, Fault)>,
    step: String,
    dead: bool,
    offset_ms: u64,
    /// Record ids this run claimed: a sweep lists only these, so runs
    /// sharing one engine's store do not sweep each other's records.
    claimed: BTreeSet<String>,
    /// The decision taken for an SDK request between its hooks.
    sdk_pending: Option<Fault>,
    /// Sweep listings (and settlements) pass unnumbered.
    unnumbered_listings: bool,
    /// The harness reads for itself: calls pass unnumbered, dead or not.
    quiet: bool,
    /// Calls that reached the engine while their invocation was dead
    /// (seen by a [`FaultStore::witness`]).
    late: Vec<Call>,
    /// Every completion and recovery point so far, with what it did.
    evidence: Vec<Evidence>,
    /// The scheduler each call waits for, as which actor
    /// ([`FaultPlan::scheduled`]).
    turn: Option<(Scheduler, usize)>,
}

/// The numbering, the fault aimed at, the dead flag and the virtual clock of
/// one run, shared by its [`FaultStore`] and [`FaultInterceptor`]s.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    state: Arc<Mutex<PlanState>>,
    dead: tokio::sync::watch::Sender<bool>,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan {
            state: Arc::default(),
            dead: tokio::sync::watch::channel(false).0,
        }
    }
}

impl FaultPlan {
    /// A plan that fails nothing: the run's calls are numbered only.
    pub fn new() -> Self {
        Self::default()
    }

    /// A plan that fails call `index` (from 0, in the order of the run) with `fault`.
    pub fn failing(index: usize, fault: Fault) -> Self {
        Self::default().then_failing(index, fault)
    }

    /// A plan that fails the `n`th read ([`Store::get`]: a `wait_for`
    /// poll, from 0) with `fault`. Reads are numbered apart from the other
    /// calls: how many a wait makes depends on the real clock.
    pub fn failing_poll(n: usize, fault: Fault) -> Self {
        let plan = Self::default();
        plan.lock().poll_targets.push((n, fault));
        plan
    }

    /// A plan that fails the `n`th settlement of a shared store's listing
    /// ([`SweepStore::finish`], from 0, numbered apart like polls: see
    /// [`without_listings`](Self::without_listings)) with `fault`.
    pub fn failing_settle(n: usize, fault: Fault) -> Self {
        let plan = Self::default();
        plan.lock().settle_targets.push((n, fault));
        plan
    }

    /// The settlements failed so far: their number, the step that made
    /// each, and the fault.
    pub fn settles_injected(&self) -> Vec<(usize, String, Fault)> {
        self.lock().settles_injected.clone()
    }

    /// The polls failed so far (their number, and the step that made each).
    pub fn polls_injected(&self) -> Vec<(usize, String)> {
        self.lock().polls_injected.clone()
    }

    /// The same plan, failing call `index` with `fault` too (a second
    /// fault, at a call the first one caused, say).
    pub fn then_failing(self, index: usize, fault: Fault) -> Self {
        self.lock().targets.push((index, fault));
        self
    }

    /// The same plan, each of its calls first waiting for its turn as
    /// `actor` of `scheduler` (the interleaving explorer).
    pub fn scheduled(self, scheduler: Scheduler, actor: usize) -> Self {
        self.lock().turn = Some((scheduler, actor));
        self
    }

    /// The same plan, `record_id` counted as claimed by it, so a sweep
    /// through it lists that record (a sweeper's own plan claims nothing).
    pub fn claims(self, record_id: &str) -> Self {
        self.claimed(record_id);
        self
    }

    /// The same plan, with sweep listings passed through unnumbered and
    /// unfaulted, and their settlements numbered apart (failed only where
    /// [`failing_settle`](Self::failing_settle) aims): on a store other
    /// runs share, how many pages a listing reads depends on their records,
    /// so numbering them with the other calls would shift every later
    /// call's number from one run to the next.
    pub fn without_listings(self) -> Self {
        self.lock().unnumbered_listings = true;
        self
    }

    fn lock(&self) -> MutexGuard<'_, PlanState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The calls made so far.
    pub fn trace(&self) -> Vec<Call> {
        self.lock().trace.clone()
    }

    /// The calls faults were injected at so far, in order: (index, kind).
    pub fn injected(&self) -> Vec<(usize, CallKind)> {
        self.lock().injected.clone()
    }

    /// The faults injected so far, in order: (index, kind, fault).
    pub fn injected_faults(&self) -> Vec<(usize, CallKind, Fault)> {
        let state = self.lock();
        state
            .injected
            .iter()
            .filter_map(|&(index, kind)| {
                let (_, fault) = state.targets.iter().find(|(at, _)| *at == index)?;
                Some((index, kind, *fault))
            })
            .collect()
    }

    /// Every completion and recovery point made so far (the numbered ones,
    /// in order), with what the store did with it.
    pub fn evidence(&self) -> Vec<Evidence> {
        self.lock().evidence.clone()
    }

    /// The name of the current step (`invoke#2`).
    pub fn current_step(&self) -> String {
        self.lock().step.clone()
    }

    fn record_evidence(&self, kind: CallKind, applied: Applied) {
        let mut state = self.lock();
        let step = state.step.clone();
        state.evidence.push(Evidence {
            call: Call { kind, step },
            applied,
        });
    }

    /// The calls that reached the engine while their invocation was dead,
    /// since the last time they were taken: every one is a call a process
    /// that is gone could not have made.
    pub fn take_late(&self) -> Vec<Call> {
        std::mem::take(&mut self.lock().late)
    }

    /// A new step of the run (a new invocation: a new process, alive).
    pub fn step(&self, name: impl Into<String>) {
        let mut state = self.lock();
        state.step = name.into();
        state.dead = false;
        drop(state);
        self.dead.send_replace(false);
    }

    /// The current invocation's process is gone from now on.
    pub fn die(&self) {
        self.lock().dead = true;
        self.dead.send_replace(true);
    }

    /// Is the current invocation's process gone?
    pub fn is_dead(&self) -> bool {
        self.lock().dead
    }

    /// Resolves once the current invocation's process is gone.
    pub async fn died(&self) {
        let mut rx = self.dead.subscribe();
        // The sender lives in `self`, so the channel cannot close here.
        let _ = rx.wait_for(|dead| *dead).await;
    }

    /// Fail nothing from now on (a run's settling phase).
    pub fn disarm(&self) {
        let mut state = self.lock();
        state.targets.clear();
        state.poll_targets.clear();
        state.settle_targets.clear();
    }

    /// The record ids this run's claims named (sorted).
    pub fn claimed_ids(&self) -> Vec<String> {
        self.lock().claimed.iter().cloned().collect()
    }

    /// Move the virtual clock `ms` forward.
    pub fn advance(&self, ms: u64) {
        self.lock().offset_ms += ms;
    }

    /// How far the virtual clock is ahead of the real one, ms.
    pub fn offset_ms(&self) -> u64 {
        self.lock().offset_ms
    }

    fn enter(&self, kind: CallKind) -> Decision {
        let mut state = self.lock();
        if state.quiet {
            return Decision::Pass;
        }
        if state.dead {
            return Decision::Dead;
        }
        if state.unnumbered_listings && kind == CallKind::Stuck {
            return Decision::Pass;
        }
        if state.unnumbered_listings && kind == CallKind::Settle {
            let n = state.settles;
            state.settles += 1;
            let Some(&(_, fault)) = state.settle_targets.iter().find(|(at, _)| *at == n) else {
                return Decision::Pass;
            };
            let step = state.step.clone();
            state.settles_injected.push((n, step, fault));
            return Decision::Fail(fault);
        }
        // How many times `wait_for` polls depends on the real clock (the
        // time its claim took), so its reads are numbered apart: the
        // numbers of the other calls stay the same from run to run.
        if kind == CallKind::Get {
            let n = state.polls;
            state.polls += 1;
            let Some(&(_, fault)) = state.poll_targets.iter().find(|(at, _)| *at == n) else {
                return Decision::Pass;
            };
            let step = state.step.clone();
            state.polls_injected.push((n, step));
            return Decision::Fail(fault);
        }
        let index = state.trace.len();
        let step = state.step.clone();
        state.trace.push(Call { kind, step });
        match state.targets.iter().find(|(at, _)| *at == index) {
            Some(&(_, fault)) => {
                state.injected.push((index, kind));
                Decision::Fail(fault)
            }
            None => Decision::Pass,
        }
    }

    /// A [`FaultStore::witness`]'s call `kind`: noted when its invocation is
    /// dead (and the harness is not reading for itself).
    fn witness(&self, kind: CallKind) {
        let mut state = self.lock();
        if state.dead && !state.quiet {
            let step = state.step.clone();
            state.late.push(Call { kind, step });
        }
    }

    /// Until the guard drops, calls pass unnumbered and unfaulted, even in
    /// a dead invocation: the harness's own reads of what the store holds
    /// (through a store that calls S3, say).
    pub fn quiet(&self) -> QuietGuard<'_> {
        self.lock().quiet = true;
        QuietGuard(self)
    }

    fn claimed(&self, record_id: &str) {
        self.lock().claimed.insert(record_id.to_owned());
    }

    fn is_ours(&self, record_id: &str) -> bool {
        self.lock().claimed.contains(record_id)
    }
}

/// See [`FaultPlan::quiet`].
#[derive(Debug)]
pub struct QuietGuard<'a>(&'a FaultPlan);

impl Drop for QuietGuard<'_> {
    fn drop(&mut self) {
        self.0.lock().quiet = false;
    }
}

/// The error of an injected fault.
fn injected(kind: CallKind, fault: Fault) -> Error {
    Error::store_unavailable(
        format!("fault harness: {} of {}", fault.name(), kind.name()),
        "injected by the fault harness",
    )
}

/// Never returns: the process is gone.
async fn gone<T>() -> T {
    std::future::pending().await
}

/// A [`Store`] that numbers its calls in a [`FaultPlan`], fails the one the
/// plan aims at, and moves the times it is handed by the plan's virtual
/// clock.
#[derive(Debug, Clone)]
pub struct FaultStore<S> {
    inner: S,
    plan: FaultPlan,
    /// A witness only: see [`FaultStore::witness`].
    witness: bool,
}

impl<S> FaultStore<S> {
    /// `inner`, faulted as `plan` says.
    pub fn new(inner: S, plan: FaultPlan) -> Self {
        FaultStore {
            inner,
            plan,
            witness: false,
        }
    }

    /// `inner` as it is (no numbering, no fault, no clock), noting in
    /// `plan` every call that reaches it while the plan's invocation is
    /// dead ([`FaultPlan::take_late`]). Put right above the engine, under
    /// every other layer (the faulting [`FaultStore`], an offload, a
    /// cut-over), it sees what reached the engine whichever layer made the
    /// call: a layer that calls on after its process died, or one that
    /// reaches the engine around the faulting store, shows up here.
    pub fn witness(inner: S, plan: FaultPlan) -> Self {
        FaultStore {
            inner,
            plan,
            witness: true,
        }
    }

    /// The store under the faults (for the harness's own reads, which are
    /// neither numbered nor faulted).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The plan.
    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    fn shift_ms(&self, ms: u64) -> u64 {
        match self.witness {
            true => ms,
            false => ms.saturating_add(self.plan.offset_ms()),
        }
    }

    fn shift_s(&self, s: u64) -> u64 {
        match self.witness {
            true => s,
            false => s.saturating_add(self.plan.offset_ms() / 1000),
        }
    }

    /// Run `call` (the inner store's) under the plan's decision for `kind`.
    async fn faulted<T>(
        &self,
        kind: CallKind,
        call: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        if self.witness {
            self.plan.witness(kind);
            return call.await;
        }
        // Its turn first, under a scheduler; not for the harness's own
        // reads, nor once its invocation is gone, nor for a listing of a
        // shared store (how many pages it reads depends on other runs'
        // records, so its turns would shift every later choice).
        let turn = {
            let state = self.plan.lock();
            let shared_listing =
                state.unnumbered_listings && matches!(kind, CallKind::Stuck | CallKind::Settle);
            match state.quiet || state.dead || shared_listing {
                true => None,
                false => state.turn.clone(),
            }
        };
        if let Some((scheduler, actor)) = turn {
            scheduler.turn(actor).await;
        }
        // The calls whose effect a repeat is checked against.
        let records = matches!(kind, CallKind::Complete | CallKind::Checkpoint);
        let quiet = self.plan.lock().quiet;
        let evidence = |applied| {
            if records && !quiet {
                self.plan.record_evidence(kind, applied);
            }
        };
        match self.plan.enter(kind) {
            Decision::Dead => gone().await,
            Decision::Fail(Fault::Refused) => {
                evidence(Applied::No);
                Err(injected(kind, Fault::Refused))
            }
            Decision::Pass => {
                let result = call.await;
                evidence(Applied::of(&result));
                result
            }
            Decision::Fail(fault) => {
                let applied = call.await;
                evidence(Applied::of(&applied));
                if fault == Fault::Gone {
                    self.plan.die();
                    return gone().await;
                }
                Err(injected(kind, fault))
            }
        }
    }
}

#[async_trait::async_trait]
impl<S: Store> Store for FaultStore<S> {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
        self.plan.claimed(&request.record_id);
        let shifted = ClaimRequest {
            now_ms: self.shift_ms(request.now_ms),
            lease_expires_at_ms: self.shift_ms(request.lease_expires_at_ms),
            expires_at_s: self.shift_s(request.expires_at_s),
            ..request.clone()
        };
        self.faulted(CallKind::Claim, self.inner.claim(&shifted))
            .await
    }

    async fn complete(&self, request: CompleteRequest<'_>) -> Result<Completion, Error> {
        let shifted = CompleteRequest {
            expires_at_s: self.shift_s(request.expires_at_s),
            ..request
        };
        self.faulted(CallKind::Complete, self.inner.complete(shifted))
            .await
    }

    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        self.faulted(CallKind::Release, self.inner.release(lease))
            .await
    }

    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error> {
        self.faulted(CallKind::Checkpoint, self.inner.checkpoint(request))
            .await
    }

    fn describe(&self) -> String {
        format!("{} (fault harness)", self.inner.describe())
    }
    fn reads_origin(&self) -> bool {
        self.inner.reads_origin()
    }

    async fn warm_up(&self) -> Result<(), Error> {
        self.inner.warm_up().await
    }
    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        self.faulted(CallKind::Get, self.inner.get(record_id)).await
    }
}

#[async_trait::async_trait]
impl<S: SweepStore> SweepStore for FaultStore<S> {
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
        let shifted = StuckRequest {
            cutoff_ms: self.shift_ms(request.cutoff_ms),
            ..request
        };
        let mut page = self
            .faulted(CallKind::Stuck, self.inner.stuck(shifted))
            .await?;
        page.records.retain(|r| self.plan.is_ours(&r.id));
        Ok(page)
    }

    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error> {
        let how = match request.how {
            Resolve::Release => Resolve::Release,
            Resolve::Fail {
                response,
                expires_at_s,
            } => Resolve::Fail {
                response,
                expires_at_s: self.shift_s(expires_at_s),
            },
        };
        let shifted = ResolveRequest {
            how,
            cutoff_ms: self.shift_ms(request.cutoff_ms),
            now_ms: self.shift_ms(request.now_ms),
            ..request
        };
        self.faulted(CallKind::Resolve, self.inner.resolve_stuck(shifted))
            .await
    }

    async fn finish(&self, listing: &Listing, resolved: &[String]) -> Result<(), Error> {
        self.faulted(CallKind::Settle, self.inner.finish(listing, resolved))
            .await
    }

    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error> {
        self.faulted(CallKind::Scan, self.inner.scan(cursor, limit))
            .await
    }

    async fn delete_expired(&self, now_s: u64, limit: usize) -> Result<u64, Error> {
        let now_s = self.shift_s(now_s);
        self.faulted(
            CallKind::DeleteExpired,
            self.inner.delete_expired(now_s, limit),
        )
        .await
    }
}

/// An SDK interceptor that numbers each request of its client in a
/// [`FaultPlan`] as a call of kind `Sdk(name)` (for S3, `name` then the
/// method: `s3-put`, `s3-get`, `s3-delete`) and fails the one the plan
/// aims at: refused before it is sent; its response replaced by a 500 after
/// the server applied it (give the client one attempt, so the error
/// reaches the caller); or, for the process gone, answered and the
/// invocation marked dead, so its next store call and its handler never
/// happen (an interceptor cannot hold the call itself back).
#[derive(Debug, Clone)]
pub struct FaultInterceptor {
    plan: FaultPlan,
    name: &'static str,
}

impl FaultInterceptor {
    /// Number the requests of a client as `name` calls in `plan`.
    pub fn new(plan: FaultPlan, name: &'static str) -> Self {
        FaultInterceptor { plan, name }
    }
}

impl Intercept for FaultInterceptor {
    fn name(&self) -> &'static str {
        "FaultInterceptor"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let kind = CallKind::Sdk(match (self.name, context.request().method()) {
            ("s3", "PUT") => "s3-put",
            ("s3", "GET") => "s3-get",
            ("s3", "DELETE") => "s3-delete",
            (name, _) => name,
        });
        match self.plan.enter(kind) {
            Decision::Pass => Ok(()),
            // A dead process sends nothing; its caller never sees this.
            Decision::Dead => Err("fault harness: the process is gone".into()),
            Decision::Fail(Fault::Refused) => Err(injected(kind, Fault::Refused).into()),
            Decision::Fail(fault) => {
                self.plan.lock().sdk_pending = Some(fault);
                Ok(())
            }
        }
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // Taken first: the plan's lock must be released before `die` takes it.
        let pending = self.plan.lock().sdk_pending.take();
        match pending {
            None => {}
            Some(Fault::Gone) => self.plan.die(),
            Some(_) => {
                let response = context.response_mut();
                *response.status_mut() = 500u16.try_into()?;
                *response.body_mut() = aws_smithy_types::body::SdkBody::from(
                    r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"answer lost by the fault harness"}"#,
                );
            }
        }
        Ok(())
    }
}
