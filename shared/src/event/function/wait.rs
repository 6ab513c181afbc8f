//! A claim of the event path: run, replay the completed record, or, with
//! [`wait_for`](IdempotentFunction::wait_for), wait for the duplicate in
//! progress (polling with jitter) until it completes or its key frees.

use std::time::Duration;

use super::IdempotentFunction;
use crate::clock::millis;
use crate::error::ErrorKind;
use crate::event::EventError;
use crate::lifecycle::{self, Begun, Guard};
use crate::metrics::Event;
use crate::record::{Record, Status};

/// What a claim of the event path decided.
pub(super) enum Claimed<'a> {
    /// This invocation holds the key: run under the guard.
    Run(Guard<'a>),
    /// The same payload completed: replay this record.
    Replay(Record),
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

/// Polling while waiting for a duplicate starts this often, doubling...
const WAIT_FIRST_POLL: Duration = Duration::from_millis(50);
/// ...up to this.
const WAIT_MAX_POLL: Duration = Duration::from_secs(1);
/// Waiting stops this long before the invocation's deadline, so the
/// duplicate fails with `InProgress` (and is retried) instead of being cut
/// off by the timeout.
const WAIT_DEADLINE_RESERVE: Duration = Duration::from_secs(1);

impl IdempotentFunction {
    /// Claim record `id` for the payload with `fingerprint`: run, or replay
    /// the completed record; a duplicate in progress waits when
    /// [`wait_for`](Self::wait_for) says so, and fails otherwise.
    pub(super) async fn claim<E>(
        &self,
        id: String,
        fingerprint: String,
        key: &super::Key,
    ) -> Result<Claimed<'_>, EventError<E>> {
        let started = crate::clock::now_ms();
        let mut wait_until = self.wait_for.map(|w| {
            let until = started.saturating_add(millis(w));
            match self.deadline_ms.filter(|d| *d > 0) {
                Some(deadline) => until.min(deadline.saturating_sub(millis(WAIT_DEADLINE_RESERVE))),
                None => until,
            }
        });
        let mut poll = WAIT_FIRST_POLL;
        loop {
            let begun = lifecycle::begin(
                &self.config,
                id.clone(),
                fingerprint.clone(),
                self.deadline_ms,
                || key.origin(),
            )
            .await
            .map_err(|err| match err.kind() {
                ErrorKind::Randomness => EventError::Randomness(err),
                _ => EventError::Store(err),
            })?;
            let mut existing = match begun {
                Begun::Run(guard) => return Ok(Claimed::Run(guard)),
                Begun::Replay(record) => return Ok(Claimed::Replay(record)),
                Begun::Mismatch(existing) => return Err(mismatch(existing)),
                Begun::InProgress { existing, .. } => existing,
            };
            // In progress elsewhere: wait (when asked to) until the record
            // completes, or frees so that claiming again can win.
            loop {
                let now = crate::clock::now_ms();
                let lease_left = existing.lease_expires_at_ms.saturating_sub(now).max(1);
                // The last sleep is cut to what is left of the wait, so a
                // wait takes its whole allowance: giving up when the next
                // full poll would overrun it ended a 400 ms wait after 200.
                let sleep = match wait_until {
                    Some(until) if now < until => {
                        jittered(millis(poll)).min(lease_left).min(until - now)
                    }
                    _ => {
                        self.config.count(Event::InProgressConflict);
                        let retry_after = Duration::from_millis(
                            existing
                                .lease_expires_at_ms
                                .saturating_sub(crate::clock::now_ms()),
                        );
                        if wait_until.take().is_some() {
                            tracing::info!(record_id = %id, waited_ms = now.saturating_sub(started), "gave up waiting for the duplicate in progress");
                        }
                        return Err(EventError::InProgress {
                            record_id: id,
                            retry_after,
                            existing: Some(existing),
                        });
                    }
                };
                tokio::time::sleep(Duration::from_millis(sleep)).await;
                poll = (poll * 2).min(WAIT_MAX_POLL);
                let record = match self.config.store.get(&id).await {
                    Ok(stored) => stored.map(|s| s.record),
                    Err(err) => {
                        self.config.count(Event::StoreError);
                        return Err(EventError::Store(err));
                    }
                };
                let now = crate::clock::now_ms();
                match record {
                    // Released, or expired (a claim treats it as absent):
                    // claiming again runs it here.
                    None => break,
                    Some(record) if record.expires_at_s.saturating_mul(1000) <= now => break,
                    Some(record) if record.fingerprint != fingerprint => {
                        self.config.count(Event::FingerprintMismatch);
                        return Err(mismatch(Box::new(record)));
                    }
                    Some(record) if record.status == Status::Completed => {
                        return Ok(self.replayed(record))
                    }
                    // Its lease is over: claiming again takes it over.
                    Some(record) if record.lease_expires_at_ms <= now => break,
                    Some(record) => *existing = record,
                }
            }
        }
    }

    /// A completed record found by a wait: counted and cached.
    fn replayed(&self, record: Record) -> Claimed<'_> {
        self.config.count(Event::Replayed);
        if let Some(cache) = &self.config.cache {
            if record.response.is_some() {
                cache.put(record.clone());
            }
        }
        Claimed::Replay(record)
    }
}

/// The key was first used with another payload.
fn mismatch<E>(existing: Box<Record>) -> EventError<E> {
    EventError::PayloadMismatch {
        record_id: existing.id.clone(),
        existing: Some(existing),
    }
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
}
