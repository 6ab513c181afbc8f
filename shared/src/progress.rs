//! What one process knows about the claims it makes and the claims its
//! duplicates wait on ([`IdempotencyConfig::wait_for`]), so that a waiter
//! is answered within milliseconds of the first answer while reading the
//! record a handful of times:
//!
//! - **When a claim expects to finish.** The process keeps the durations of
//!   its last executions (claim to stored outcome, [`Progress::finished`]);
//!   a claim writes `now + their median` into its owner token
//!   ([`owner_with_estimate`]). A waiter in any process reads it from the
//!   record its claim found ([`expected_done_ms`]), sleeps until then, and
//!   polls tightly around it. The owner token is opaque to every engine and
//!   already stored and returned by every claim and read, so the estimate
//!   costs no attribute, column or migration, and a record without one (an
//!   older writer's, a Powertools record) is waited on with plain backoff.
//! - **The waiters of one record in this process** ([`Progress::join`]):
//!   one read per poll is shared by all of them ([`Waiting::read`]), and an
//!   outcome stored, or a key released, by this process wakes them at once
//!   ([`Progress::settled`]). Many invocations share a process under Lambda
//!   Managed Instances or `run_concurrent`; there a storm of duplicates
//!   costs a few reads, not a few per waiter.
//!
//! [`IdempotencyConfig::wait_for`]: crate::config::IdempotencyConfig::wait_for

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{watch, OnceCell};

use crate::clock::now_ms;
use crate::error::Error;
use crate::record::Record;

/// How many recent durations the estimate is the median of: enough to
/// ignore a stray slow or fast execution, few enough to follow a change.
const KEPT: usize = 15;

/// A waiter's poll reuses a read of the same record that another waiter of
/// this process started at most this long ago (in milliseconds): below the
/// tightest poll interval, so sharing never delays what a waiter learns by
/// more than one interval.
const SHARED_READ_MS: u64 = 10;

/// What separates the owner's random token from the claim's estimate.
const ESTIMATE_MARK: char = '@';

/// The owner token a claim writes: `token`, followed by when the claim
/// expects its outcome to be stored (epoch milliseconds), when it has an
/// estimate.
pub(crate) fn owner_with_estimate(token: String, done_by_ms: Option<u64>) -> String {
    match done_by_ms {
        Some(at) => format!("{token}{ESTIMATE_MARK}{at}"),
        None => token,
    }
}

/// When the claim that wrote `owner` expected its outcome to be stored
/// (epoch milliseconds), if it said.
pub(crate) fn expected_done_ms(owner: &str) -> Option<u64> {
    let (_, at) = owner.rsplit_once(ESTIMATE_MARK)?;
    at.parse().ok()
}

/// What a process knows about claims in progress; one per configuration
/// (its clones share it).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    durations: Mutex<Durations>,
    keys: Mutex<HashMap<String, Key>>,
}

/// The durations of the last executions, in milliseconds, oldest
/// overwritten first.
#[derive(Debug, Default)]
struct Durations {
    ms: [u64; KEPT],
    len: usize,
    next: usize,
}

/// A read of a record shared by its waiters here.
#[derive(Debug)]
struct Flight {
    started_ms: u64,
    /// How many times the record had been settled here when it started: a
    /// read started before the outcome was stored here is not shared
    /// after, or the waiters it wakes would learn nothing new.
    settled: u64,
    record: Arc<OnceCell<Option<Record>>>,
}

/// The waiters of one record in this process.
#[derive(Debug)]
struct Key {
    waiters: usize,
    /// The last read of the record started for them, and when.
    read: Option<Flight>,
    /// Bumped when this process stores the record's outcome or releases it.
    settled: watch::Sender<u64>,
}

impl Progress {
    /// An execution that claimed at `claimed_at_ms` stored its outcome now.
    pub(crate) fn finished(&self, claimed_at_ms: u64) {
        let took = now_ms().saturating_sub(claimed_at_ms);
        let mut d = self
            .durations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let at = d.next;
        d.ms[at] = took;
        d.next = (at + 1) % KEPT;
        d.len = (d.len + 1).min(KEPT);
    }

    /// When a claim made at `now_ms` should expect its outcome stored: the
    /// median of the recent durations later, or `None` before this process
    /// has stored one.
    pub(crate) fn estimate(&self, now_ms: u64) -> Option<u64> {
        let d = self
            .durations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut recent = d.ms[..d.len].to_vec();
        drop(d);
        recent.sort_unstable();
        let median = *recent.get(recent.len() / 2)?;
        Some(now_ms.saturating_add(median))
    }

    /// This process stored the outcome of `record_id`, or released it:
    /// wake its waiters here, so they read it now.
    pub(crate) fn settled(&self, record_id: &str) {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(key) = keys.get(record_id) {
            key.settled.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wait on `record_id` with this process's other waiters of it, until
    /// the returned handle drops.
    pub(crate) fn join<'a>(&'a self, record_id: &'a str) -> Waiting<'a> {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let key = keys.entry(record_id.to_owned()).or_insert_with(|| Key {
            waiters: 0,
            read: None,
            settled: watch::Sender::new(0),
        });
        key.waiters += 1;
        let settled = key.settled.subscribe();
        Waiting {
            progress: self,
            record_id,
            settled,
        }
    }
}

/// One waiter of a record, joined with the others of its process.
#[derive(Debug)]
pub(crate) struct Waiting<'a> {
    progress: &'a Progress,
    record_id: &'a str,
    settled: watch::Receiver<u64>,
}

impl Waiting<'_> {
    /// Sleep `ms`, or less when this process settles the record meanwhile.
    pub(crate) async fn sleep(&mut self, ms: u64) {
        let sleep = tokio::time::sleep(std::time::Duration::from_millis(ms));
        tokio::select! {
            () = sleep => {}
            // The sender lives while this waiter is joined, so `changed`
            // only returns on a new value.
            _ = self.settled.changed() => {}
        }
    }

    /// The record as the store holds it: a read another waiter of this
    /// process started within [`SHARED_READ_MS`], or a new one made by
    /// `get` (one read of the store). A failed read is this waiter's alone;
    /// the others read again.
    pub(crate) async fn read<F, Fut>(&self, get: F) -> Result<Option<Record>, Error>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Option<Record>, Error>>,
    {
        let cell = {
            let mut keys = self
                .progress
                .keys
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let now = now_ms();
            match keys.get_mut(self.record_id) {
                Some(key) => {
                    let settled = *key.settled.borrow();
                    match &key.read {
                        Some(flight)
                            if flight.settled == settled
                                && now.saturating_sub(flight.started_ms) <= SHARED_READ_MS =>
                        {
                            flight.record.clone()
                        }
                        _ => {
                            let record = Arc::new(OnceCell::new());
                            key.read = Some(Flight {
                                started_ms: now,
                                settled,
                                record: record.clone(),
                            });
                            record
                        }
                    }
                }
                // Joined keys stay until their last waiter leaves.
                None => Arc::new(OnceCell::new()),
            }
        };
        let record = cell.get_or_try_init(get).await?;
        Ok(record.clone())
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut keys = self
            .progress
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(key) = keys.get_mut(self.record_id) {
            key.waiters = key.waiters.saturating_sub(1);
            if key.waiters == 0 {
                keys.remove(self.record_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::MemoryStore;

    #[test]
    fn the_estimate_rides_in_the_owner_token_and_reads_back() {
        let owner = owner_with_estimate("0af3".into(), Some(1_700_000_000_123));
        assert_eq!(owner, "0af3@1700000000123");
        assert_eq!(expected_done_ms(&owner), Some(1_700_000_000_123));
        assert_eq!(owner_with_estimate("0af3".into(), None), "0af3");
        // Tokens without one: this library's older claims, Powertools
        // records, a resolver's owner, or anything unparsable.
        for plain in ["0af3", "", "resolved:0af3", "0af3@", "0af3@soon", "a@-1"] {
            assert_eq!(expected_done_ms(plain), None, "{plain}");
        }
        // A resolver's owner keeps the estimate it replaced; its record is
        // completed, so no waiter sleeps on it.
        assert_eq!(expected_done_ms("resolved:0af3@5"), Some(5));
    }

    #[test]
    fn the_estimate_is_the_median_of_the_last_durations() {
        let progress = Progress::default();
        assert_eq!(progress.estimate(1_000), None, "no execution seen yet");
        let now = now_ms();
        // Claimed 400 ms ago and stored now: about 400 ms.
        progress.finished(now - 400);
        let one = progress.estimate(0).unwrap();
        assert!((400..500).contains(&one), "{one}");
        // A stray slow execution moves the median by one place, not to it.
        progress.finished(now - 100);
        progress.finished(now - 60_000);
        let three = progress.estimate(0).unwrap();
        assert!((400..500).contains(&three), "{three}");
        // Only the last KEPT count: fifteen fast ones replace them all.
        for _ in 0..KEPT {
            progress.finished(now_ms() - 10);
        }
        let fast = progress.estimate(0).unwrap();
        assert!(fast < 100, "{fast}");
        assert!(progress.estimate(u64::MAX).is_some(), "saturates");
    }

    /// A store counting its reads, around a memory store.
    #[derive(Debug, Clone, Default)]
    struct Counted {
        inner: MemoryStore,
        gets: Arc<std::sync::atomic::AtomicUsize>,
    }

    #[async_trait::async_trait]
    impl Store for Counted {
        async fn claim(
            &self,
            request: &crate::store::ClaimRequest,
        ) -> Result<crate::store::ClaimOutcome, Error> {
            self.inner.claim(request).await
        }
        async fn complete(
            &self,
            request: crate::store::CompleteRequest<'_>,
        ) -> Result<crate::store::Completion, Error> {
            self.inner.complete(request).await
        }
        async fn release(&self, lease: &crate::store::Lease) -> Result<(), Error> {
            self.inner.release(lease).await
        }
        async fn checkpoint(
            &self,
            request: crate::store::CheckpointRequest<'_>,
        ) -> Result<(), Error> {
            self.inner.checkpoint(request).await
        }
        async fn get(&self, record_id: &str) -> Result<Option<crate::store::StoredRecord>, Error> {
            self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            Store::get(&self.inner, record_id).await
        }
    }

    /// One read of `id` through `store`, as the wait makes it.
    fn get<'a>(
        store: &'a Counted,
        id: &'a str,
    ) -> impl FnOnce() -> futures_util::future::BoxFuture<'a, Result<Option<Record>, Error>> {
        move || Box::pin(async move { Ok(Store::get(store, id).await?.map(|s| s.record)) })
    }

    #[tokio::test]
    async fn waiters_of_one_record_in_a_process_share_a_read() {
        let store = Counted::default();
        let progress = Progress::default();
        let waiters: Vec<_> = (0..50).map(|_| progress.join("r")).collect();
        let reads =
            futures_util::future::join_all(waiters.iter().map(|w| w.read(get(&store, "r")))).await;
        assert!(reads.iter().all(|r| matches!(r, Ok(None))));
        assert_eq!(store.gets.load(std::sync::atomic::Ordering::SeqCst), 1);
        // A poll after the shared window reads again.
        tokio::time::sleep(std::time::Duration::from_millis(SHARED_READ_MS + 5)).await;
        waiters[0].read(get(&store, "r")).await.unwrap();
        assert_eq!(store.gets.load(std::sync::atomic::Ordering::SeqCst), 2);
        // A read started before this process settled the record is not
        // shared after it.
        tokio::time::sleep(std::time::Duration::from_millis(SHARED_READ_MS + 5)).await;
        let mut before = Box::pin(waiters[0].read(get(&store, "r")));
        // Polled once: its read has started, and waits on the store.
        assert!(futures_util::FutureExt::now_or_never(&mut before).is_none());
        progress.settled("r");
        let (_, after) = tokio::join!(before, waiters[1].read(get(&store, "r")));
        after.unwrap();
        assert_eq!(store.gets.load(std::sync::atomic::Ordering::SeqCst), 4);
        // Another record is read on its own.
        progress.join("s").read(get(&store, "s")).await.unwrap();
        assert_eq!(store.gets.load(std::sync::atomic::Ordering::SeqCst), 5);
        drop(waiters);
        assert!(
            progress.keys.lock().unwrap().is_empty(),
            "the last waiter leaving forgets the key"
        );
    }

    #[tokio::test]
    async fn a_settled_record_wakes_its_waiters_in_this_process() {
        let progress = Progress::default();
        let mut waiting = progress.join("r");
        let started = std::time::Instant::now();
        let sleeper = async { waiting.sleep(10_000).await };
        let settler = async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            progress.settled("other");
            progress.settled("r");
        };
        tokio::join!(sleeper, settler);
        let woke = started.elapsed();
        assert!(woke < std::time::Duration::from_secs(5), "{woke:?}");
        // Settling a record nobody waits on is nothing.
        drop(waiting);
        progress.settled("r");
    }
}
