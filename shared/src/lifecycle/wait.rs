//! Waiting for the outcome of a duplicate in progress
//! ([`IdempotencyConfig::wait_for`]): poll the record until it completes,
//! frees, or the wait ends.
//!
//! Every engine is polled the same way, with [`Store::get`]: one read of one
//! record per poll, which is what a notification would save. A notification
//! is not cheaper here. Each waiter is an invocation of its own, often in a
//! process of its own, so a Redis subscription or a PostgreSQL `LISTEN`
//! would cost one more connection (and TLS handshake) per waiter, more than
//! the handful of reads of a typical wait; `LISTEN` does not work through a
//! transaction pooler (PgBouncer, RDS Proxy pins the session), and Redis
//! keyspace notifications are off by default and node-local in a cluster,
//! so a missed one would leave a waiter asleep until its wait ends.
//!
//! [`Store::get`]: crate::store::Store::get

use std::time::Duration;

use super::{replayed, Begun};
use crate::clock::millis;
use crate::config::IdempotencyConfig;
use crate::error::Error;
use crate::metrics::Event;
use crate::record::{Record, Status};

/// The first poll comes this long after the claim found the key held,...
const FIRST_POLL: Duration = Duration::from_millis(50);
/// ...each next one twice as long after, up to this.
const MAX_POLL: Duration = Duration::from_secs(1);
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
    until: Option<u64>,
    started_ms: u64,
}

impl Polls {
    pub(super) fn new(until: Option<u64>, started_ms: u64) -> Polls {
        Polls {
            next: FIRST_POLL,
            until,
            started_ms,
        }
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
            let sleep = jittered(millis(self.next)).min(lease_left).min(until - now);
            tokio::time::sleep(Duration::from_millis(sleep)).await;
            self.next = (self.next * 2).min(MAX_POLL);
            let record = match config.store.get(record_id).await {
                Ok(stored) => stored.map(|s| s.record),
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
