//! Waiting for the outcome of a duplicate in progress
//! ([`IdempotencyConfig::wait_for`]): poll the record until it completes,
//! frees, or the wait ends.
//!
//! When to poll. The claim holding the key says in its owner token when it
//! expects to finish ([`crate::progress`]): a waiter sleeps until then, and
//! polls from there 20 ms apart, each interval half as long again as the
//! last, up to 250 ms. A record that says nothing (its claimer had not yet
//! finished an execution, or wrote no estimate) is polled 50 ms after the
//! claim found it held, then on the same growing intervals. Each interval
//! loses a random part of up to half of it, so waiters spread their polls.
//!
//! How. Every engine is polled the same way, with [`Store::get`]: one read
//! of one record per poll, shared by the waiters of that record in this
//! process, and a waiter here is woken at once when this process stores
//! the outcome or releases the key. A notification across processes is
//! not cheaper: each waiter is an invocation of its own, often in a
//! process of its own, so a Redis subscription or a PostgreSQL `LISTEN`
//! would cost one more connection (and TLS handshake) per waiter, more
//! than the two or three reads of a wait that knows when to look;
//! `LISTEN` does not work through a transaction pooler (PgBouncer, RDS
//! Proxy pins the session), and Redis keyspace notifications are off by
//! default and node-local in a cluster, so a missed one would leave a
//! waiter asleep until its wait ends.
//!
//! [`Store::get`]: crate::store::Store::get

use std::time::Duration;

use super::{replayed, Begun};
use crate::clock::millis;
use crate::config::IdempotencyConfig;
use crate::error::Error;
use crate::metrics::Event;
use crate::progress::expected_done_ms;
use crate::record::{Record, Status};

/// Without an estimate, the first poll comes this long after the claim
/// found the key held...
const FIRST_POLL: Duration = Duration::from_millis(50);
/// ...after the estimate, the next poll this long after the last...
const TIGHT_POLL: Duration = Duration::from_millis(20);
/// ...and each next one half as long again (`GROWTH` / 2), up to this:
/// short enough that a waiter is answered within it of the outcome, long
/// enough that a waiter past the estimate reads at most four times a
/// second.
const MAX_POLL: Duration = Duration::from_millis(250);
const GROWTH: u32 = 3;
/// A wait ends this long before the invocation's deadline, so the waiting
/// invocation answers (in progress, retry later) instead of being cut off.
const DEADLINE_RESERVE: Duration = Duration::from_secs(1);

/// When a wait that starts at `started_ms` must end (epoch milliseconds):
/// `None` when the config does not wait.
pub(super) fn until(
    config: &IdempotencyConfig,
    started_ms: u64,
    deadline_ms: Option<u64>,
) -> Option<u64> {
    let until = started_ms.saturating_add(millis(config.wait_for?));
    Some(match deadline_ms.filter(|d| *d > 0) {
        Some(deadline) => until.min(deadline.saturating_sub(millis(DEADLINE_RESERVE))),
        None => until,
    })
}

/// The polls of one wait, for the lifetime of a [`begin`](super::begin):
/// the interval keeps growing across the claims a wait makes.
pub(super) struct Polls {
    next: Duration,
    /// The owner whose estimate this wait has slept until: each claim
    /// holding the key gets one such sleep.
    slept_for: Option<String>,
    until: Option<u64>,
    started_ms: u64,
}

impl Polls {
    pub(super) fn new(until: Option<u64>, started_ms: u64) -> Polls {
        Polls {
            next: FIRST_POLL,
            slept_for: None,
            until,
            started_ms,
        }
    }

    /// How long to sleep before the next poll of `existing`, at `now`:
    /// until its claim's estimate the first time one is seen (tight polls
    /// after it), else the next jittered interval.
    fn next_sleep(&mut self, existing: &Record, now: u64) -> u64 {
        if self.slept_for.as_deref() != Some(existing.owner.as_str()) {
            if let Some(done_by) =
                expected_done_ms(&existing.owner).filter(|at| *at < existing.lease_expires_at_ms)
            {
                self.slept_for = Some(existing.owner.clone());
                self.next = TIGHT_POLL;
                if done_by > now {
                    return done_by - now;
                }
            }
        }
        let sleep = jittered(millis(self.next));
        self.next = (self.next * GROWTH / 2).min(MAX_POLL);
        sleep
    }

    /// Wait while `existing` (the record holding `record_id` for the same
    /// request) is in progress: poll it until it completes, another request
    /// holds the key, the key frees, or the wait ends. `None`: the key
    /// freed (released, expired, or its lease ended), so claim again;
    /// otherwise the answer (the completed record, another request's
    /// record, or the record still in progress when the wait ended).
    pub(super) async fn wait<'a>(
        &mut self,
        config: &'a IdempotencyConfig,
        record_id: &str,
        fingerprint: &str,
        mut existing: Box<Record>,
    ) -> Result<Option<Begun<'a>>, Error> {
        let mut waiting = config.progress.join(record_id);
        loop {
            let now = crate::clock::now_ms();
            let Some(until) = self.until.filter(|until| now < *until) else {
                if self.until.take().is_some() {
                    tracing::info!(
                        record_id,
                        waited_ms = now.saturating_sub(self.started_ms),
                        "gave up waiting for the duplicate in progress"
                    );
                }
                return Ok(Some(Begun::InProgress {
                    retry_after: Duration::from_millis(
                        existing.lease_expires_at_ms.saturating_sub(now),
                    ),
                    existing,
                }));
            };
            let lease_left = existing.lease_expires_at_ms.saturating_sub(now).max(1);
            // The last sleep is cut to what is left of the wait, so a wait
            // takes its whole allowance.
            let sleep = self
                .next_sleep(&existing, now)
                .min(lease_left)
                .min(until - now);
            waiting.sleep(sleep).await;
            let read = || async { Ok(config.store.get(record_id).await?.map(|s| s.record)) };
            let record = match waiting.read(read).await {
                Ok(record) => record,
                Err(err) => {
                    config.count(Event::StoreError);
                    return Err(err);
                }
            };
            let now = crate::clock::now_ms();
            match record {
                // Released, or expired (a claim treats it as absent):
                // claiming again runs it here.
                None => return Ok(None),
                Some(record) if record.expires_at_s.saturating_mul(1000) <= now => return Ok(None),
                Some(record) if record.fingerprint != fingerprint => {
                    config.count(Event::FingerprintMismatch);
                    return Ok(Some(Begun::Mismatch(Box::new(record))));
                }
                Some(record) if record.status == Status::Completed => {
                    return Ok(Some(replayed(config, record)))
                }
                // Its lease is over: claiming again takes it over.
                Some(record) if record.lease_expires_at_ms <= now => return Ok(None),
                Some(record) => *existing = record,
            }
        }
    }
}

/// `interval_ms` less a random part of up to half of it: duplicates that
/// wait on one key then spread their polls instead of reading the record in
/// lockstep. Without randomness (the source failed) the interval is whole.
fn jittered(interval_ms: u64) -> u64 {
    let mut random = [0u8; 2];
    if getrandom::fill(&mut random).is_err() {
        return interval_ms;
    }
    let cut = (interval_ms / 2) * u64::from(u16::from_le_bytes(random)) / u64::from(u16::MAX);
    interval_ms - cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_polls_are_jittered_within_half_of_their_interval() {
        let draws: Vec<u64> = (0..1_000).map(|_| jittered(100)).collect();
        assert!(draws.iter().all(|d| (50..=100).contains(d)), "{draws:?}");
        // Duplicates waiting on one key must not poll in lockstep: the draws
        // spread over the range (51 values; 1,000 uniform draws all but
        // surely hit more than 20 of them).
        let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
        assert!(distinct.len() > 20, "{} distinct intervals", distinct.len());
        // The smallest intervals stay whole numbers of milliseconds above 0.
        assert!((0..100).all(|_| jittered(1) == 1));
    }

    fn record(owner: &str, lease_expires_at_ms: u64) -> Record {
        Record {
            id: "r".into(),
            status: Status::InProgress,
            fingerprint: "f".into(),
            attempt: 1,
            owner: owner.into(),
            lease_expires_at_ms,
            expires_at_s: lease_expires_at_ms / 1000 + 60,
            response: None,
            checkpoint: None,
        }
    }

    #[test]
    fn a_waiter_sleeps_until_the_claims_estimate_then_polls_tightly() {
        let mut polls = Polls::new(None, 0);
        let held = record("t@10700", 40_000);
        // Claimed at 10,000 expecting to finish at 10,700: at 10,100 the
        // waiter sleeps the 600 ms left, once.
        assert_eq!(polls.next_sleep(&held, 10_100), 600);
        // Then 20 ms (less jitter), growing by half each time, to 250 ms.
        let after: Vec<u64> = (0..9).map(|_| polls.next_sleep(&held, 10_700)).collect();
        let tops = [20, 30, 45, 67, 101, 151, 227, 250, 250];
        for (got, top) in after.iter().zip(tops) {
            assert!((top / 2..=top).contains(got), "{after:?}");
        }
        // A new claim of the key (a takeover) brings its own estimate.
        let taken = record("u@12000", 40_000);
        assert_eq!(polls.next_sleep(&taken, 11_000), 1_000);
    }

    #[test]
    fn a_waiter_past_the_estimate_or_without_one_polls_on_growing_intervals() {
        // Past it: the tight polls start at once.
        let mut polls = Polls::new(None, 0);
        let late = polls.next_sleep(&record("t@10700", 40_000), 11_000);
        assert!((10..=20).contains(&late), "{late}");
        // Without one (no execution finished in the claimer's process yet,
        // or a record written by another tool): 50 ms, then half as long
        // again each time, to 250 ms.
        let mut polls = Polls::new(None, 0);
        let plain = record("t", 40_000);
        let got: Vec<u64> = (0..7).map(|_| polls.next_sleep(&plain, 10_000)).collect();
        for (got, top) in got.iter().zip([50, 75, 112, 168, 250, 250, 250]) {
            assert!((top / 2..=top).contains(got), "{got} of {top}");
        }
        // An estimate past the lease's end is not believed.
        let mut polls = Polls::new(None, 0);
        let after_lease = polls.next_sleep(&record("t@50000", 40_000), 10_000);
        assert!((25..=50).contains(&after_lease), "{after_lease}");
    }

    #[test]
    fn a_wait_ends_a_second_before_the_deadline_and_never_without_the_option() {
        let store = crate::MemoryStore::new();
        let off = IdempotencyConfig::new(store.clone());
        assert_eq!(until(&off, 1_000_000, Some(1_005_000)), None);
        let on = IdempotencyConfig::new(store).wait_for(Duration::from_secs(10));
        // The deadline comes first: its reserve is kept.
        assert_eq!(until(&on, 1_000_000, Some(1_005_000)), Some(1_004_000));
        // The wait ends first.
        assert_eq!(until(&on, 1_000_000, Some(1_060_000)), Some(1_010_000));
        // No deadline (outside Lambda, or none registered).
        assert_eq!(until(&on, 1_000_000, None), Some(1_010_000));
    }
}
