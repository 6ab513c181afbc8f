//! A deterministic scheduler of store calls, for the interleaving explorer
//! (tests/tests/it/interleavings.rs).
//!
//! Several actors (two attempts of one key, a sweeper, an operator) run as
//! futures of one task. Each store call an actor makes through a
//! [`FaultStore`](crate::fault_store::FaultStore) whose plan is
//! [`scheduled`](crate::fault_store::FaultPlan::scheduled) first waits for its
//! turn. When every actor still running waits at a call (none can move
//! otherwise: the store is in memory and the clocks are virtual), the
//! scheduler lets exactly one go, as the run's script says, and records the
//! decision. So a script is one interleaving of the actors' store calls, and
//! the same script gives the same run.
//!
//! [`next_script`] walks every script depth first: at each decision the
//! default is the actor that went last (no switch), then every other
//! actor waiting, as long as the run's *preemptions* (switching away from
//! an actor that could have gone on) stay within the bound. With a bound at
//! least the number of calls, that is every interleaving; with a smaller
//! one, every interleaving with at most that many preemptions (the bound
//! under which most concurrency defects show, after CHESS).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{oneshot, Notify};

/// One decision of a run: the actors it could let go, in the order they
/// are tried (the default first), and the one it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Actor ids, those the preemption bound allows.
    pub options: Vec<usize>,
    /// Index into `options` of the actor let go.
    pub taken: usize,
}

#[derive(Default)]
struct State {
    /// Actors waiting at a call, each with what lets it go.
    waiting: BTreeMap<usize, oneshot::Sender<()>>,
    /// Actors not finished.
    live: usize,
    /// The choices to make (indices into each decision's options); past
    /// its end, the default.
    script: Vec<usize>,
    bound: usize,
    decisions: Vec<Decision>,
    last: Option<usize>,
    preemptions: usize,
    /// A script that asked for an option a decision did not have: the run
    /// diverged from the one the script came from.
    diverged: bool,
    /// Past the script, each choice drawn from this (xorshift64*) instead
    /// of the default.
    rng: Option<u64>,
}

/// The scheduler of one run (cheap to clone: every actor's plan holds it).
#[derive(Clone, Default)]
pub struct Scheduler {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").finish_non_exhaustive()
    }
}

/// An actor of a run.
pub type Actor<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

impl Scheduler {
    /// A run that makes the choices of `script` and then the defaults, with
    /// at most `bound` preemptions.
    pub fn new(script: Vec<usize>, bound: usize) -> Self {
        let scheduler = Scheduler::default();
        {
            let mut state = scheduler.lock();
            state.script = script;
            state.bound = bound;
        }
        scheduler
    }

    /// A run whose every choice is drawn from `seed`, any actor waiting
    /// being as likely (no preemption bound): a sample of the orders, for
    /// engines where walking them all would take too long.
    pub fn seeded(seed: u64) -> Self {
        let scheduler = Scheduler::new(Vec::new(), usize::MAX);
        scheduler.lock().rng = Some(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        scheduler
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait until `actor` may make its next call.
    pub(crate) async fn turn(&self, actor: usize) {
        let (go, wait) = oneshot::channel();
        self.lock().waiting.insert(actor, go);
        self.changed.notify_one();
        // The run drops the actors only once they are all done: the sender
        // is never dropped unsent while an actor waits.
        let _ = wait.await;
    }

    /// Run `actors` (actor `i` is `actors[i]`, whose store calls take
    /// their turns as actor `i`) until each has ended.
    pub async fn run(&self, actors: Vec<Actor<'_>>) {
        self.lock().live = actors.len();
        let mut running: FuturesUnordered<_> = actors
            .into_iter()
            .map(|actor| async move {
                actor.await;
                self.lock().live -= 1;
                self.changed.notify_one();
            })
            .collect();
        loop {
            tokio::select! {
                biased;
                ended = running.next() => {
                    if ended.is_none() {
                        break;
                    }
                }
                () = self.all_waiting() => self.let_one_go(),
            }
        }
    }

    /// Ready when every actor still running waits at a call.
    async fn all_waiting(&self) {
        loop {
            {
                let state = self.lock();
                if state.live > 0 && state.waiting.len() == state.live {
                    return;
                }
            }
            self.changed.notified().await;
        }
    }

    fn let_one_go(&self) {
        let mut state = self.lock();
        let enabled: Vec<usize> = state.waiting.keys().copied().collect();
        let last_waits = state.last.is_some_and(|last| enabled.contains(&last));
        let default = match state.last {
            Some(last) if last_waits => last,
            _ => enabled[0],
        };
        let mut options = vec![default];
        if !last_waits || state.preemptions < state.bound {
            options.extend(enabled.iter().copied().filter(|&a| a != default));
        }
        let at = state.decisions.len();
        let taken = match state.script.get(at) {
            Some(&i) if i < options.len() => i,
            Some(_) => {
                state.diverged = true;
                0
            }
            None => match state.rng.as_mut() {
                Some(rng) => {
                    *rng ^= *rng >> 12;
                    *rng ^= *rng << 25;
                    *rng ^= *rng >> 27;
                    let drawn = rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33;
                    usize::try_from(drawn).unwrap_or(0) % options.len()
                }
                None => 0,
            },
        };
        let actor = options[taken];
        if last_waits && actor != default {
            state.preemptions += 1;
        }
        state.last = Some(actor);
        state.decisions.push(Decision { options, taken });
        if let Some(go) = state.waiting.remove(&actor) {
            let _ = go.send(());
        }
    }

    /// The decisions the run made.
    pub fn decisions(&self) -> Vec<Decision> {
        self.lock().decisions.clone()
    }

    /// Whether the run met a decision its script did not fit (the same
    /// choices led somewhere else: the code under test is not
    /// deterministic).
    pub fn diverged(&self) -> bool {
        self.lock().diverged
    }
}

/// The script after `decisions` in depth-first order, or `None` when every
/// one has been run.
pub fn next_script(decisions: &[Decision]) -> Option<Vec<usize>> {
    let at = decisions
        .iter()
        .rposition(|d| d.taken + 1 < d.options.len())?;
    let mut script: Vec<usize> = decisions[..at].iter().map(|d| d.taken).collect();
    script.push(decisions[at].taken + 1);
    Some(script)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every interleaving of two actors of two steps each: C(4, 2) = 6
    /// orders, each once, with a bound that allows any switch.
    #[tokio::test]
    async fn every_interleaving_of_two_actors_is_run_once() {
        let mut seen = std::collections::BTreeSet::new();
        let mut script = Some(Vec::new());
        while let Some(s) = script {
            let scheduler = Scheduler::new(s, usize::MAX);
            let order = Arc::new(Mutex::new(Vec::new()));
            let actor = |id: usize| -> Actor<'_> {
                let (scheduler, order) = (scheduler.clone(), order.clone());
                Box::pin(async move {
                    for step in 0..2 {
                        scheduler.turn(id).await;
                        order.lock().unwrap().push((id, step));
                    }
                })
            };
            scheduler.run(vec![actor(0), actor(1)]).await;
            assert!(!scheduler.diverged());
            assert!(
                seen.insert(order.lock().unwrap().clone()),
                "an order ran twice"
            );
            script = next_script(&scheduler.decisions());
        }
        assert_eq!(seen.len(), 6);
    }

    /// With no preemption allowed, an actor runs until it ends before
    /// another starts: two orders of two actors.
    #[tokio::test]
    async fn a_bound_of_zero_runs_each_actor_to_its_end() {
        let mut orders = Vec::new();
        let mut script = Some(Vec::new());
        while let Some(s) = script {
            let scheduler = Scheduler::new(s, 0);
            let order = Arc::new(Mutex::new(Vec::new()));
            let actor = |id: usize| -> Actor<'_> {
                let (scheduler, order) = (scheduler.clone(), order.clone());
                Box::pin(async move {
                    for _ in 0..2 {
                        scheduler.turn(id).await;
                        order.lock().unwrap().push(id);
                    }
                })
            };
            scheduler.run(vec![actor(0), actor(1)]).await;
            orders.push(order.lock().unwrap().clone());
            script = next_script(&scheduler.decisions());
        }
        assert_eq!(orders, vec![vec![0, 0, 1, 1], vec![1, 1, 0, 0]]);
    }
}
