//! Model check: random interleavings of claim, complete, release, checkpoint,
//! takeover, sweep and expiry (a virtual clock: stores compare against the
//! caller's time) run against each store and a reference model of the rules in
//! docs/DESIGN.md section 4. Every outcome must match the model, and no interleaving
//! may produce two completions in one life of a record or a completion by a
//! fenced attempt. Each run tallies the outcomes it met (claims won, fenced
//! writes refused, ...), reported like the fuzz tests' (see `crate::fuzz::Tally`).

use std::sync::Arc;

use lambda_idempotency::{
    store::{
        CheckpointRequest, ClaimOutcome, ClaimRequest, CompleteRequest, Lease, Resolution, Status,
        StoredBody, StoredResponse, StuckRecord, SweepStore,
    },
    sweeper::Sweeper,
    MemoryStore, Store,
};
use proptest::prelude::*;

use crate::fuzz::Tally;

const ACTORS: usize = 3;
const RECORD_TTL_MS: u64 = 5_000;

#[derive(Debug, Clone)]
enum Op {
    Claim {
        actor: usize,
        fingerprint: u8,
        lease_ms: u64,
    },
    Complete {
        actor: usize,
    },
    Release {
        actor: usize,
    },
    Checkpoint {
        actor: usize,
    },
    Advance {
        ms: u64,
    },
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..ACTORS, 0u8..2, 1u64..3_000).prop_map(|(actor, fingerprint, lease_ms)| Op::Claim { actor, fingerprint, lease_ms }),
        2 => (0..ACTORS).prop_map(|actor| Op::Complete { actor }),
        1 => (0..ACTORS).prop_map(|actor| Op::Release { actor }),
        1 => (0..ACTORS).prop_map(|actor| Op::Checkpoint { actor }),
        2 => (0u64..4_000).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Sweep),
    ]
}

#[derive(Debug, Clone)]
struct ModelRecord {
    status: Status,
    fingerprint: String,
    attempt: u64,
    owner: String,
    lease_end: u64,
    expires_s: u64,
    checkpoint: Option<String>,
}

/// The reference model, and the bookkeeping of the run.
struct Model {
    record: Option<ModelRecord>,
    now: u64,
    leases: [Option<Lease>; ACTORS],
    next_owner: u64,
    completions_this_life: u32,
    highest_attempt: u64,
}

impl Model {
    fn holds(&self, lease: &Lease) -> bool {
        self.record.as_ref().is_some_and(|r| {
            r.status == Status::InProgress && r.attempt == lease.attempt && r.owner == lease.owner
        })
    }

    /// Did `lease` itself complete the record? A repeated completion by it
    /// is its own write coming back (an SDK retry), not a fenced one.
    fn completed_by(&self, lease: &Lease) -> bool {
        self.record.as_ref().is_some_and(|r| {
            r.status == Status::Completed && r.attempt == lease.attempt && r.owner == lease.owner
        })
    }
}

/// Drive one store through `ops`, checking each outcome against the model.
async fn check(
    store: Arc<dyn SweepStore>,
    sweeper: Option<&Sweeper>,
    id: &str,
    base_ms: u64,
    ops: &[Op],
    tally: &Tally,
) -> Result<(), String> {
    tally.add("cases");
    tally.add_n("operations", ops.len() as u64);
    let mut m = Model {
        record: None,
        now: base_ms,
        leases: Default::default(),
        next_owner: 0,
        completions_this_life: 0,
        highest_attempt: 0,
    };
    let response = StoredResponse::new(200, vec![], StoredBody::Text("done".into()));
    for (step, op) in ops.iter().enumerate() {
        let ctx = |what: String| format!("step {step} {op:?}: {what}");
        match op {
            Op::Advance { ms } => m.now += ms,
            Op::Claim {
                actor,
                fingerprint,
                lease_ms,
            } => {
                m.next_owner += 1;
                let owner = format!("a{actor}-{}", m.next_owner);
                let fingerprint = format!("fp{fingerprint}");
                let lease_end = m.now + lease_ms;
                let request = ClaimRequest {
                    record_id: id.into(),
                    fingerprint: fingerprint.clone(),
                    owner: owner.clone(),
                    now_ms: m.now,
                    lease_expires_at_ms: lease_end,
                    expires_at_s: ((m.now + RECORD_TTL_MS) / 1000).max(lease_end / 1000 + 1),
                    origin: None,
                };
                let now_s = m.now / 1000;
                let claimable = match &m.record {
                    None => true,
                    Some(r) => {
                        r.expires_s < now_s
                            || (r.status == Status::InProgress
                                && r.lease_end < m.now
                                && r.fingerprint == fingerprint)
                    }
                };
                let outcome = store
                    .claim(&request)
                    .await
                    .map_err(|e| ctx(e.to_string()))?;
                match (claimable, outcome) {
                    (true, ClaimOutcome::Claimed(lease)) => {
                        let (attempt, recovered, new_life) = match &m.record {
                            None => (1, None, true),
                            Some(r) if r.status == Status::InProgress && r.expires_s >= now_s => {
                                (r.attempt + 1, r.checkpoint.clone(), false)
                            }
                            Some(r) => (r.attempt + 1, None, true),
                        };
                        if lease.attempt != attempt {
                            return Err(ctx(format!(
                                "attempt {} but the model says {attempt}",
                                lease.attempt
                            )));
                        }
                        if lease.recovered.as_ref().map(|c| c.name.clone()) != recovered {
                            return Err(ctx(format!(
                                "recovered {:?} but the model says {recovered:?}",
                                lease.recovered
                            )));
                        }
                        tally.add(match (&m.record, new_life) {
                            (None, _) => "claims won, record absent",
                            (Some(_), true) => "claims won, record expired",
                            (Some(_), false) => "claims won by takeover",
                        });
                        if recovered.is_some() {
                            tally.add("takeovers resuming a recovery point");
                        }
                        if new_life {
                            m.completions_this_life = 0;
                        }
                        m.record = Some(ModelRecord {
                            status: Status::InProgress,
                            fingerprint,
                            attempt,
                            owner,
                            lease_end,
                            expires_s: request.expires_at_s,
                            checkpoint: recovered,
                        });
                        m.highest_attempt = m.highest_attempt.max(attempt);
                        m.leases[*actor] = Some(lease);
                    }
                    (false, ClaimOutcome::Exists(found)) => {
                        tally.add("claims refused");
                        let r = m
                            .record
                            .as_ref()
                            .ok_or_else(|| ctx("store found a record the model has not".into()))?;
                        if (
                            found.status,
                            found.attempt,
                            &found.fingerprint,
                            &found.owner,
                        ) != (r.status, r.attempt, &r.fingerprint, &r.owner)
                        {
                            return Err(ctx(format!("store has {found:?}, model has {r:?}")));
                        }
                    }
                    (expected, got) => {
                        return Err(ctx(format!(
                            "model claimable={expected}, store said {got:?}"
                        )))
                    }
                }
            }
            Op::Complete { actor } => {
                let Some(lease) = m.leases[*actor].clone() else {
                    continue;
                };
                let allowed = m.holds(&lease);
                let result = store
                    .complete(CompleteRequest::new(
                        &lease,
                        &response,
                        m.now / 1000 + RECORD_TTL_MS / 1000,
                    ))
                    .await;
                match (allowed, result) {
                    (true, Ok(_)) => {
                        tally.add("completions");
                        m.completions_this_life += 1;
                        if m.completions_this_life > 1 {
                            return Err(ctx("two completions in one life of the record".into()));
                        }
                        if let Some(r) = m.record.as_mut() {
                            r.status = Status::Completed;
                            r.expires_s = m.now / 1000 + RECORD_TTL_MS / 1000;
                            r.checkpoint = None;
                        }
                    }
                    (false, Ok(_)) if m.completed_by(&lease) => {
                        tally.add("repeated completions by the holder recognised")
                    }
                    (false, Err(e)) if e.is_fenced() && !m.completed_by(&lease) => {
                        tally.add("fenced completions refused")
                    }
                    (false, Err(e))
                        if e.kind() == lambda_idempotency::ErrorKind::RecordGone
                            && m.record.is_none() =>
                    {
                        tally.add("completions of a gone record refused")
                    }
                    (true, Err(e)) => return Err(ctx(format!("holder's completion refused: {e}"))),
                    (false, Ok(_)) => return Err(ctx("a fenced attempt completed".into())),
                    (false, Err(e)) => return Err(ctx(format!("unexpected error {e}"))),
                }
            }
            Op::Release { actor } => {
                let Some(lease) = m.leases[*actor].clone() else {
                    continue;
                };
                let allowed = m.holds(&lease);
                let before = crate::fixture::now_ms();
                match (allowed, store.release(&lease).await) {
                    (true, Ok(())) => match m.record.as_mut() {
                        // Rule 4: kept with its lease ended (on the store's
                        // clock, a moment before now), for the retry to
                        // resume. The model's clock moves past that moment,
                        // so both agree the lease is over.
                        Some(r) if r.checkpoint.is_some() => {
                            tally.add("releases keeping a recovery point");
                            r.lease_end = r.lease_end.min(before.saturating_sub(1));
                            m.now = m.now.max(crate::fixture::now_ms() + 5);
                        }
                        _ => {
                            tally.add("releases");
                            m.record = None;
                        }
                    },
                    // Nothing left to release: what a release wants.
                    (false, Ok(())) if m.record.is_none() => tally.add("releases of a gone record"),
                    (false, Err(e)) if e.is_fenced() && m.record.is_some() => {
                        tally.add("fenced releases refused")
                    }
                    (a, r) => return Err(ctx(format!("release: model allowed={a}, store {r:?}"))),
                }
            }
            Op::Checkpoint { actor } => {
                let Some(lease) = m.leases[*actor].clone() else {
                    continue;
                };
                let allowed = m.holds(&lease);
                let name = format!("step-{step}");
                let checkpoint = lambda_idempotency::store::Checkpoint {
                    name: name.clone(),
                    data: serde_json::json!(step),
                    attempt: lease.attempt,
                };
                match (
                    allowed,
                    store
                        .checkpoint(CheckpointRequest::new(&lease, &checkpoint))
                        .await,
                ) {
                    (true, Ok(())) => {
                        tally.add("recovery points");
                        if let Some(r) = m.record.as_mut() {
                            r.checkpoint = Some(name);
                        }
                    }
                    (false, Err(e)) if e.is_fenced() => tally.add("fenced recovery points refused"),
                    (a, r) => {
                        return Err(ctx(format!("checkpoint: model allowed={a}, store {r:?}")))
                    }
                }
            }
            Op::Sweep => {
                // The sweeper's rule (grace 0, policy release): an in-progress
                // record whose lease ended is deleted by a write fenced on what
                // it observed, unless it holds a recovery point.
                let Some(r) = m.record.clone() else { continue };
                if r.status != Status::InProgress || r.lease_end >= m.now {
                    continue;
                }
                let observed = StuckRecord {
                    id: id.into(),
                    attempt: r.attempt,
                    owner: r.owner.clone(),
                    lease_expires_at_ms: r.lease_end,
                    has_checkpoint: r.checkpoint.is_some(),
                };
                let resolution = match sweeper {
                    Some(sweeper) => sweeper
                        .resolve(&observed, m.now)
                        .await
                        .map_err(|e| ctx(e.to_string()))?,
                    None if observed.has_checkpoint => Resolution::Resumable,
                    None => {
                        let lease = Lease {
                            record_id: id.into(),
                            owner: r.owner.clone(),
                            fingerprint: r.fingerprint.clone(),
                            attempt: r.attempt,
                            recovered: None,
                        };
                        store
                            .release(&lease)
                            .await
                            .map(|_| Resolution::Released)
                            .map_err(|e| ctx(e.to_string()))?
                    }
                };
                match (observed.has_checkpoint, resolution) {
                    (false, Resolution::Released) => {
                        tally.add("sweeps releasing");
                        m.record = None;
                    }
                    (true, Resolution::Resumable) => tally.add("sweeps leaving a recovery point"),
                    (c, got) => {
                        return Err(ctx(format!("sweep with checkpoint={c} resolved {got:?}")))
                    }
                }
            }
        }
    }
    Ok(())
}

fn base_ms() -> u64 {
    crate::fixture::now_ms()
}

static MEMORY: Tally = Tally::new();

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
    fn memory_store_property(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let result = rt.block_on(check(Arc::new(MemoryStore::new()), None, "r", base_ms(), &ops, &MEMORY));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

#[test]
fn memory_store_matches_the_model() {
    memory_store_property();
    MEMORY.report("model::memory");
}

#[test]
fn dynamodb_local_matches_the_model() {
    let rt = engine_runtime();
    let (store, _) = rt.block_on(integration_tests::dynamo_store());
    engine_matches_the_model(&rt, store, "model::dynamodb_local", ENGINE_RUN);
}

#[test]
fn postgres_server_matches_the_model() {
    let rt = engine_runtime();
    let store = rt.block_on(integration_tests::postgres_store());
    engine_matches_the_model(&rt, store, "model::postgres_server", ENGINE_RUN);
}

#[test]
fn postgres_through_a_transaction_pooler_matches_the_model() {
    let rt = engine_runtime();
    let store = rt.block_on(integration_tests::postgres_store_at(
        &integration_tests::postgres_pooler_url(),
    ));
    engine_matches_the_model(&rt, store, "model::postgres_pooled", ENGINE_RUN);
}

#[test]
fn redis_server_matches_the_model() {
    let rt = engine_runtime();
    let store = rt.block_on(integration_tests::redis_store());
    engine_matches_the_model(&rt, store, "model::redis_server", REDIS_RUN);
}

#[test]
fn redis_cluster_matches_the_model() {
    let rt = engine_runtime();
    let store = rt.block_on(integration_tests::redis_cluster_store());
    engine_matches_the_model(&rt, store, "model::redis_cluster", REDIS_RUN);
}

fn engine_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// How much of the model one engine's run checks, and the ids its records get.
struct Run {
    cases: u32,
    /// Each case is 1 to `max_ops - 1` operations.
    max_ops: usize,
    /// The id of the `n`th case's record (from 1): a fresh record per case.
    record_id: fn(u64) -> String,
}

/// DynamoDB Local and PostgreSQL: 48 cases of up to 29 operations, one
/// record each in one table.
const ENGINE_RUN: Run = Run {
    cases: 48,
    max_ops: 30,
    record_id: |n| format!("{n:064x}"),
};

/// Redis answers faster: 400 cases of up to 39 operations, under the store's
/// own prefix; the ids are reversed so they spread over the shards (hash
/// slots).
const REDIS_RUN: Run = Run {
    cases: 400,
    max_ops: 40,
    record_id: |n| format!("{n:064x}").chars().rev().collect(),
};

/// The model check on a real engine, with the sweeper resolving stuck
/// records.
fn engine_matches_the_model<S: SweepStore + Clone + 'static>(
    rt: &tokio::runtime::Runtime,
    store: S,
    name: &str,
    run: Run,
) {
    let sweeper = Sweeper::new(store.clone()).grace(std::time::Duration::ZERO);
    let store: Arc<dyn SweepStore> = Arc::new(store);
    let counter = std::sync::atomic::AtomicU64::new(0);
    let tally = Tally::new();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: run.cases,
        ..ProptestConfig::default()
    });
    let result = runner.run(&proptest::collection::vec(op(), 1..run.max_ops), |ops| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let outcome = rt.block_on(check(
            store.clone(),
            Some(&sweeper),
            &(run.record_id)(n),
            base_ms(),
            &ops,
            &tally,
        ));
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    tally.report(name);
}
