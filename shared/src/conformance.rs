//! The behaviour every [`Store`] shows (docs/DESIGN.md section 4), as a
//! suite a store of your own can run (feature `test-util`): the cases every
//! engine of this crate runs in its own tests.
//!
//! The suite is in two parts, like the store contract: [`run`], the hot
//! path, needs only a [`Store`] (claims, completions, releases, fencing,
//! expiry, `get`); [`run_sweep`] needs a [`SweepStore`] too (the listing of
//! every record, the fenced resolution of a stuck one). Each case takes a store that holds no record yet and
//! panics, naming what differed, when the store breaks a rule; `run` and
//! `run_sweep` run their cases, each on a fresh store from your factory (use
//! a new table, key prefix or schema per store, as record ids repeat between
//! cases). `examples/custom_store.rs` runs `run` on a store of its own.
//!
//! ```
//! use lambda_idempotency::{conformance, MemoryStore};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! conformance::run(|| async { MemoryStore::new() }).await;
//! // MemoryStore is a SweepStore too:
//! conformance::run_sweep(|| async { MemoryStore::new() }).await;
//! # });
//! ```

use std::future::Future;
use std::time::Duration;

use crate::clock::now_ms;
use crate::error::{Error, ErrorKind};
use crate::store::{resolver_owner, Resolution, Resolve, ResolveRequest, StuckRecord};
use crate::store::{
    ClaimOutcome, ClaimRequest, CompleteRequest, Completion, Lease, Record, Status, Store,
    StoredBody, StoredResponse, SweepStore,
};

/// Run `$name(&store)` on a fresh store from `$make_store`, logged by name.
macro_rules! run_case {
    ($make_store:ident, $name:ident) => {{
        let store = $make_store().await;
        tracing::info!(case = stringify!($name), "conformance case");
        $name(&store).await;
    }};
}

/// Run every case of the hot path (a [`Store`]'s rules 1 to 4, and `get`),
/// each on a fresh store from `make_store`; panics at the first case the
/// store fails, naming it.
pub async fn run<S, F, Fut>(make_store: F)
where
    S: Store,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    run_case!(
        make_store,
        first_claim_gets_attempt_one_and_a_second_owner_sees_it_in_progress
    );
    run_case!(make_store, completed_record_is_returned_with_its_response);
    run_case!(
        make_store,
        release_deletes_so_the_next_claim_gets_a_higher_attempt
    );
    run_case!(
        make_store,
        takeover_after_lease_expiry_fences_the_stale_owner
    );
    run_case!(make_store, takeover_requires_the_same_fingerprint);
    run_case!(make_store, expired_record_is_reclaimed);
    run_case!(
        make_store,
        repeated_claim_by_the_same_owner_counts_as_claimed
    );
    run_case!(make_store, complete_and_release_by_a_stranger_are_fenced);
    run_case!(make_store, get_returns_the_record_as_stored_or_none);
}

/// Run every case of the sweeping and operating side (a [`SweepStore`]),
/// each on a fresh store from `make_store`; panics at the first case the
/// store fails, naming it. A store that implements both traits runs [`run`]
/// and this.
pub async fn run_sweep<S, F, Fut>(make_store: F)
where
    S: SweepStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    run_case!(make_store, scan_pages_through_every_record_once);
    run_case!(make_store, resolve_stuck_fences_the_attempt_it_replaces);
}

/// A claim of record `id` by `owner`, its lease ending in `lease_ms`, its
/// record kept an hour, fingerprint `fp-a`.
fn request(id: &str, owner: &str, lease_ms: u64) -> ClaimRequest {
    let now = now_ms();
    ClaimRequest {
        record_id: id.into(),
        fingerprint: "fp-a".into(),
        owner: owner.into(),
        now_ms: now,
        lease_expires_at_ms: now + lease_ms,
        expires_at_s: now / 1000 + 3600,
        origin: None,
    }
}

fn claimed(outcome: ClaimOutcome) -> Lease {
    match outcome {
        ClaimOutcome::Claimed(lease) => lease,
        ClaimOutcome::Exists(record) => panic!("expected a claim, found {record:?}"),
    }
}

fn existing(outcome: ClaimOutcome) -> Record {
    match outcome {
        ClaimOutcome::Exists(record) => record,
        ClaimOutcome::Claimed(lease) => panic!("expected an existing record, claimed {lease:?}"),
    }
}

fn response() -> StoredResponse {
    StoredResponse::new(
        201,
        vec![("x-a".into(), b"1".to_vec())],
        StoredBody::Text("done".into()),
    )
}

/// Complete `lease` with [`response`], kept for a minute.
async fn complete(store: &dyn Store, lease: &Lease) -> Result<Completion, Error> {
    let response = response();
    let request = CompleteRequest::new(lease, &response, now_ms() / 1000 + 60);
    store.complete(request).await
}

/// Rule 1: the first claim gets attempt 1; another owner finds the record in progress, with no response.
pub async fn first_claim_gets_attempt_one_and_a_second_owner_sees_it_in_progress(
    store: &dyn Store,
) {
    let lease = claimed(store.claim(&request("r", "a", 60_000)).await.unwrap());
    assert_eq!(lease.attempt, 1);
    let record = existing(store.claim(&request("r", "b", 60_000)).await.unwrap());
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(record.owner, "a");
    assert_eq!(record.attempt, 1);
    assert_eq!(record.fingerprint, "fp-a");
    assert!(record.response.is_none());
}

/// A completed record comes back to the next claim with its response and expiry.
pub async fn completed_record_is_returned_with_its_response(store: &dyn Store) {
    let lease = claimed(store.claim(&request("r", "a", 60_000)).await.unwrap());
    let expires = now_ms() / 1000 + 7200;
    store
        .complete(CompleteRequest::new(&lease, &response(), expires))
        .await
        .unwrap();
    let record = existing(store.claim(&request("r", "b", 60_000)).await.unwrap());
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.response, Some(response()));
    assert_eq!(record.fingerprint, "fp-a");
    assert_eq!(record.expires_at_s, expires);
}

/// A release gives the key back: the next claim starts afresh.
pub async fn release_deletes_so_the_next_claim_gets_a_higher_attempt(store: &dyn Store) {
    let lease = claimed(store.claim(&request("r", "a", 60_000)).await.unwrap());
    store.release(&lease).await.unwrap();
    let next = claimed(store.claim(&request("r", "b", 60_000)).await.unwrap());
    assert_eq!(next.owner, "b");
    assert_eq!(
        next.attempt, 1,
        "a released record is gone; the next claim starts afresh"
    );
}

/// Rules 1 and 2: after the lease ends the same request takes over (attempt 2), and the stale owner's completion and release are fenced and change nothing.
pub async fn takeover_after_lease_expiry_fences_the_stale_owner(store: &dyn Store) {
    let stale = claimed(store.claim(&request("r", "a", 50)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(120)).await;
    let fresh = claimed(store.claim(&request("r", "b", 60_000)).await.unwrap());
    assert_eq!(fresh.attempt, 2);

    let err = complete(store, &stale).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let err = store.release(&stale).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);

    // The stale writes changed nothing: the record is still b's, in progress.
    let record = existing(store.claim(&request("r", "c", 60_000)).await.unwrap());
    assert_eq!(
        (record.owner.as_str(), record.attempt, record.status),
        ("b", 2, Status::InProgress)
    );
    complete(store, &fresh).await.unwrap();
}

/// Rule 1: a takeover needs the same fingerprint; another request finds the record.
pub async fn takeover_requires_the_same_fingerprint(store: &dyn Store) {
    claimed(store.claim(&request("r", "a", 50)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(120)).await;
    let other = ClaimRequest {
        fingerprint: "fp-b".into(),
        ..request("r", "b", 60_000)
    };
    let record = existing(store.claim(&other).await.unwrap());
    assert_eq!(record.fingerprint, "fp-a");
}

/// Rule 1: a record past its expiry is absent to a claim, even one of another request, and its old response is gone.
pub async fn expired_record_is_reclaimed(store: &dyn Store) {
    let lease = claimed(store.claim(&request("r", "a", 60_000)).await.unwrap());
    // Completed but already past its TTL: DynamoDB's deletion lags, the item is
    // still readable, and the claim must treat it as absent, even for another body.
    let expired = now_ms() / 1000 - 5;
    let response = response();
    store
        .complete(CompleteRequest::new(&lease, &response, expired))
        .await
        .unwrap();
    let other = ClaimRequest {
        fingerprint: "fp-b".into(),
        ..request("r", "b", 60_000)
    };
    let next = claimed(store.claim(&other).await.unwrap());
    assert_eq!(next.attempt, 2);
    let record = existing(store.claim(&request("r", "c", 60_000)).await.unwrap());
    assert_eq!(record.fingerprint, "fp-b");
    assert_eq!(record.status, Status::InProgress);
    assert!(record.response.is_none(), "the old response must be gone");
}

/// Rule 3: a claim repeated by its own owner (a lost response, retried) is claimed again.
pub async fn repeated_claim_by_the_same_owner_counts_as_claimed(store: &dyn Store) {
    // What the store sees when the SDK retries a claim whose response was lost.
    let req = request("r", "a", 60_000);
    let first = claimed(store.claim(&req).await.unwrap());
    let again = claimed(store.claim(&req).await.unwrap());
    assert_eq!(first, again);
    complete(store, &again).await.unwrap();
}

/// Rule 2: a completion or release by another owner or attempt is fenced; a gone record is `RecordGone`, not fenced; a lease's second completion is its own write coming back.
pub async fn complete_and_release_by_a_stranger_are_fenced(store: &dyn Store) {
    let lease = claimed(store.claim(&request("r", "a", 60_000)).await.unwrap());
    let wrong_owner = Lease {
        owner: "z".into(),
        ..lease.clone()
    };
    let wrong_attempt = Lease {
        attempt: 7,
        ..lease.clone()
    };
    for bad in [&wrong_owner, &wrong_attempt] {
        assert!(complete(store, bad).await.unwrap_err().is_fenced());
        assert!(store.release(bad).await.unwrap_err().is_fenced());
    }
    let missing = Lease {
        record_id: "nope".into(),
        ..lease.clone()
    };
    // Nothing to release is not a fence: the record is gone, which is what a
    // release wants (and what an SDK-retried release finds).
    store.release(&missing).await.unwrap();
    // Nor is a completion of a gone record: it is not stored, and says so.
    assert_eq!(
        complete(store, &missing).await.unwrap_err().kind(),
        ErrorKind::RecordGone
    );
    complete(store, &lease).await.unwrap();
    // Completed by this lease: a second completion by it is its own write
    // coming back (as an SDK retry of a lost response is), not a fence, and
    // it changes nothing.
    let other = StoredResponse::new(500, vec![], StoredBody::Empty);
    store
        .complete(CompleteRequest::new(&lease, &other, now_ms() / 1000 + 60))
        .await
        .unwrap();
    // A stranger's completion of the completed record is still fenced.
    for bad in [&wrong_owner, &wrong_attempt] {
        assert!(store
            .complete(CompleteRequest::new(bad, &other, now_ms() / 1000 + 60))
            .await
            .unwrap_err()
            .is_fenced());
    }
    let record = existing(store.claim(&request("r", "c", 60_000)).await.unwrap());
    assert_eq!(record.response, Some(response()));
}

/// `get` reads a record as stored, or `None`.
pub async fn get_returns_the_record_as_stored_or_none(store: &dyn Store) {
    assert_eq!(store.get("absent").await.unwrap(), None);
    let lease = claimed(store.claim(&request("r", "a", 60_000)).await.unwrap());
    let found = store.get("r").await.unwrap().expect("claimed record");
    assert_eq!(found.record.status, Status::InProgress);
    assert_eq!(
        (found.record.attempt, found.record.owner.as_str()),
        (1, "a")
    );
    complete(store, &lease).await.unwrap();
    let found = store.get("r").await.unwrap().expect("completed record");
    assert_eq!(found.record.status, Status::Completed);
    assert_eq!(found.record.response, Some(response()));
}

/// `scan` pages through every record once, pages of at most the limit.
pub async fn scan_pages_through_every_record_once(store: &dyn SweepStore) {
    let mut ids: Vec<String> = (0..7).map(|i| format!("r{i}")).collect();
    for id in &ids {
        claimed(store.claim(&request(id, "a", 60_000)).await.unwrap());
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = store.scan(cursor, 3).await.unwrap();
        pages += 1;
        assert_eq!(page.skipped, 0);
        assert!(page.records.len() <= 3);
        seen.extend(page.records.into_iter().map(|r| r.record.id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    seen.sort();
    ids.sort();
    assert_eq!(seen, ids);
    assert!(pages >= 3, "pages of at most 3: {pages}");
}

/// Rule 5: a stuck record failed by a resolution completes under a new owner
/// ([`resolver_owner`]), so the late completion of the attempt it replaced
/// is fenced; a second resolution of what the listing saw is fenced; a
/// released one is gone.
pub async fn resolve_stuck_fences_the_attempt_it_replaces(store: &dyn SweepStore) {
    let stale = claimed(store.claim(&request("r", "a", 50)).await.unwrap());
    let abandoned = claimed(store.claim(&request("s", "a", 50)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(120)).await;
    // What a listing of stuck records would have seen of each.
    let mut seen = Vec::new();
    for lease in [&stale, &abandoned] {
        let found = store.get(&lease.record_id).await.unwrap().expect("claimed");
        seen.push(StuckRecord {
            id: lease.record_id.clone(),
            attempt: lease.attempt,
            owner: lease.owner.clone(),
            lease_expires_at_ms: found.record.lease_expires_at_ms,
            has_checkpoint: false,
        });
    }
    let now = now_ms();
    let problem = StoredResponse::new(500, vec![], StoredBody::Text("abandoned".into()));
    let fail = ResolveRequest {
        record: &seen[0],
        how: Resolve::Fail {
            response: &problem,
            expires_at_s: now / 1000 + 60,
        },
        cutoff_ms: now,
        now_ms: now,
    };
    assert_eq!(store.resolve_stuck(fail).await.unwrap(), Resolution::Failed);
    let err = complete(store, &stale).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let found = store.get("r").await.unwrap().expect("failed record");
    assert_eq!(found.record.status, Status::Completed);
    assert_eq!(found.record.owner, resolver_owner("a"));
    assert_eq!(found.record.response, Some(problem.clone()));
    assert_eq!(
        store.resolve_stuck(fail).await.unwrap(),
        Resolution::Fenced,
        "the record is no longer what the listing saw"
    );

    let release = ResolveRequest {
        record: &seen[1],
        how: Resolve::Release,
        ..fail
    };
    assert_eq!(
        store.resolve_stuck(release).await.unwrap(),
        Resolution::Released
    );
    assert_eq!(store.get("s").await.unwrap(), None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::store::memory::MemoryStore;
    use crate::store::{
        CheckpointRequest, Completion, RecordPage, Resolution, ResolveRequest, StoredRecord,
        StuckPage, StuckRequest, SweepCursor,
    };

    /// The promise a [`Flawed`] store breaks; each suite must catch its own.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Flaw {
        /// Rule 1: its claim succeeds whatever it finds, so two owners can
        /// hold one key at once ([`run`] must fail).
        ClaimsEverything,
        /// Its `scan` ignores its limit and lists everything in one page
        /// ([`run_sweep`] must fail).
        ScansInOnePage,
    }

    /// A [`MemoryStore`] with one [`Flaw`]: every other call is the memory
    /// store's own.
    #[derive(Debug)]
    struct Flawed {
        store: MemoryStore,
        flaw: Flaw,
    }

    impl Flawed {
        fn new(flaw: Flaw) -> Self {
            Flawed {
                store: MemoryStore::new(),
                flaw,
            }
        }
    }

    #[async_trait::async_trait]
    impl Store for Flawed {
        async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
            Ok(match self.store.claim(request).await? {
                ClaimOutcome::Exists(record) if self.flaw == Flaw::ClaimsEverything => {
                    ClaimOutcome::Claimed(Lease {
                        record_id: record.id,
                        owner: request.owner.clone(),
                        fingerprint: request.fingerprint.clone(),
                        attempt: record.attempt,
                        recovered: None,
                    })
                }
                outcome => outcome,
            })
        }
        async fn complete(&self, request: CompleteRequest<'_>) -> Result<Completion, Error> {
            self.store.complete(request).await
        }
        async fn release(&self, lease: &Lease) -> Result<(), Error> {
            self.store.release(lease).await
        }
        async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error> {
            self.store.checkpoint(request).await
        }
        async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
            Store::get(&self.store, record_id).await
        }
    }

    #[async_trait::async_trait]
    impl SweepStore for Flawed {
        async fn finish(
            &self,
            _listing: &crate::store::Listing,
            _resolved: &[String],
        ) -> Result<(), Error> {
            Ok(())
        }
        async fn delete_expired(&self, _now_s: u64, _limit: usize) -> Result<u64, Error> {
            Ok(0)
        }
        async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
            self.store.stuck(request).await
        }
        async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error> {
            self.store.resolve_stuck(request).await
        }
        async fn scan(
            &self,
            cursor: Option<SweepCursor>,
            limit: usize,
        ) -> Result<RecordPage, Error> {
            let limit = match self.flaw {
                Flaw::ScansInOnePage => usize::MAX,
                Flaw::ClaimsEverything => limit,
            };
            self.store.scan(cursor, limit).await
        }
    }

    #[tokio::test]
    #[should_panic(expected = "expected an existing record")]
    async fn a_store_that_breaks_a_rule_fails_the_suite() {
        run(|| async { Flawed::new(Flaw::ClaimsEverything) }).await;
    }

    #[tokio::test]
    #[should_panic(expected = "page.records.len() <= 3")]
    async fn a_store_whose_scan_ignores_its_limit_fails_the_sweep_suite() {
        run_sweep(|| async { Flawed::new(Flaw::ScansInOnePage) }).await;
    }

    #[tokio::test]
    async fn the_in_memory_store_passes_the_suite() {
        run(|| async { MemoryStore::new() }).await;
        run_sweep(|| async { MemoryStore::new() }).await;
    }
}
