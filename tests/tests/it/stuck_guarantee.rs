//! The sweeper's guarantee on the stores that keep their own listing of
//! records in progress (Redis, Redis Cluster, PostgreSQL and PgBouncer; the
//! in-memory store as a second runner): a record stuck at any time is
//! resolved within the schedule, the grace and a bounded number of sweeps,
//! also after a sweeper outage of days, and whatever the Redis index says
//! of it (issue 25, item 3). The DynamoDB stream's side is
//! `stream_discovery`.

use std::time::Duration;

use lambda_idempotency::{
    store::{ClaimRequest, Status, StuckRequest, SweepStore},
    sweeper::Sweeper,
    Store,
};

use crate::fixture::{claim_lease, claimed, now_ms, Fixture};

// Each test once per store that lists its own records in progress.
crate::fixture::test_cases!(
    2,
    [
        memory_store => crate::fixture::memory().await,
        redis_server => crate::fixture::redis().await,
        redis_cluster => crate::fixture::redis_cluster().await,
        postgres_server => crate::fixture::postgres().await,
        postgres_pooled => crate::fixture::postgres_pooled().await,
    ],
    [records_stuck_through_an_outage_of_days_are_resolved_by_the_next_sweeps]
);

const DAY_MS: u64 = 24 * 3600 * 1000;

fn hashed_id(key: &str) -> String {
    lambda_idempotency::scope::RecordScope::new("POST", "/orders", key).record_id()
}

/// A claim made `ago_ms` before now whose lease ended a minute later: stuck
/// ever since (the sweeper was down), still within its life.
fn claimed_before(id: &str, ago_ms: u64) -> ClaimRequest {
    let then = now_ms() - ago_ms;
    ClaimRequest {
        record_id: id.into(),
        fingerprint: "fp".into(),
        owner: format!("owner-{id}"),
        now_ms: then,
        lease_expires_at_ms: then + 60_000,
        expires_at_s: (now_ms() + DAY_MS) / 1000,
        origin: None,
    }
}

/// Records stuck at every point of a three-day outage, more than one page
/// of them, and a live one: the sweeps after it resolve every stuck one
/// within a bounded number and leave the live one alone.
async fn records_stuck_through_an_outage_of_days_are_resolved_by_the_next_sweeps(f: Fixture) {
    let store = f.store.clone();
    let mut ids = Vec::new();
    for i in 0..150u64 {
        let id = hashed_id(&format!("outage-{i}"));
        // From three days ago to a few seconds ago.
        let ago = 3 * DAY_MS - i * (3 * DAY_MS / 150) + 5_000;
        claimed(store.claim(&claimed_before(&id, ago)).await.unwrap());
        ids.push(id);
    }
    let live = hashed_id("outage-live");
    claim_lease(&store, &live, "owner-live", 600_000).await;
    let sweeper = Sweeper::new(store.clone())
        .grace(Duration::from_secs(1))
        .page_size(40);
    let mut released = 0;
    for _ in 0..2 {
        let summary = sweeper.sweep(Some(now_ms() + 60_000)).await;
        assert_eq!(summary.errors, 0, "{summary:?}");
        released += summary.released;
        if !summary.remaining {
            break;
        }
    }
    assert_eq!(released, 150);
    for id in &ids {
        assert!(store.get(id).await.unwrap().is_none(), "{id} released");
    }
    let kept = store
        .get(&live)
        .await
        .unwrap()
        .expect("the live record kept");
    assert_eq!(kept.record.status, Status::InProgress);
    let again = sweeper.sweep(None).await;
    assert_eq!((again.found, again.errors), (0, 0), "{again:?}");
}

/// Redis: the index and the records it points at, out of step.
mod redis_index {
    use super::*;

    /// `host:port` of the harness's server, database 0.
    async fn raw() -> redis::aio::MultiplexedConnection {
        redis::Client::open(integration_tests::redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    async fn index_size(con: &mut redis::aio::MultiplexedConnection, index: &str) -> u64 {
        redis::cmd("ZCARD")
            .arg(index)
            .query_async(con)
            .await
            .unwrap()
    }

    /// Thousands of index entries whose records are gone (say, expired while
    /// the sweeper was down) before a stuck record: one script call looks up
    /// a bounded number of them (it blocks the server while it runs), the
    /// listing goes on call by call, and the stuck record is resolved by the
    /// same sweep.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_index_full_of_dead_entries_is_worked_through_call_by_call() {
        let store = integration_tests::redis_store().await;
        let index = format!("{}{{7}}stuck", store.key_prefix());
        let mut con = raw().await;
        let old = now_ms() - 3_600_000;
        let mut add = redis::pipe();
        for i in 0..5_000u64 {
            add.cmd("ZADD")
                .arg(&index)
                .arg(old + i)
                .arg(format!("7dead{i:05}"))
                .ignore();
        }
        let _: () = add.query_async(&mut con).await.unwrap();
        let stuck = "7f00d";
        claim_lease(&store, stuck, "crashed", 1).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(index_size(&mut con, &index).await, 5_001);

        let page = store.stuck(StuckRequest::new(now_ms(), 100)).await.unwrap();
        let left = index_size(&mut con, &index).await;
        assert!(
            left >= 4_000,
            "one listing call removed {} dead entries: its loop is not bounded",
            5_001 - left
        );
        assert!(
            page.next.is_some(),
            "the listing goes on where the call stopped"
        );

        let summary = Sweeper::new(store.clone())
            .grace(Duration::ZERO)
            .sweep(Some(now_ms() + 60_000))
            .await;
        assert_eq!(
            (
                summary.found,
                summary.released,
                summary.errors,
                summary.remaining
            ),
            (1, 1, 0, false),
            "{summary:?}"
        );
        assert!(store.get(stuck).await.unwrap().is_none());
        assert_eq!(
            index_size(&mut con, &index).await,
            0,
            "dead entries removed"
        );
    }

    /// An index entry scored before its record's lease (the record was
    /// written past the index, say by a restore): the record is the truth.
    /// It is not listed (nor counted as fenced, sweep after sweep) while its
    /// lease runs, and is resolved once the lease is over.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_index_entry_out_of_step_with_its_record_follows_the_record() {
        let store = integration_tests::redis_store().await;
        let id = "3a11ve";
        let record = format!("{}{{3}}r:{id}", store.key_prefix());
        let index = format!("{}{{3}}stuck", store.key_prefix());
        let mut con = raw().await;
        claim_lease(&store, id, "holder", 1).await;
        // The record's lease runs 800 ms more; the index still says it ended.
        let lease_end = now_ms() + 800;
        let _: () = redis::cmd("HSET")
            .arg(&record)
            .arg("lease")
            .arg(lease_end)
            .query_async(&mut con)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let sweeper = Sweeper::new(store.clone()).grace(Duration::ZERO);
        let early = sweeper.sweep(None).await;
        assert_eq!(
            (early.found, early.fenced, early.released),
            (0, 0, 0),
            "a live record is not listed as stuck: {early:?}"
        );
        let score: Option<u64> = redis::cmd("ZSCORE")
            .arg(&index)
            .arg(id)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(score, Some(lease_end), "the entry follows the record");
        let kept = store.get(id).await.unwrap().expect("kept while live");
        assert_eq!(kept.record.status, Status::InProgress);
        tokio::time::sleep(Duration::from_millis(900)).await;
        let later = sweeper.sweep(None).await;
        assert_eq!((later.found, later.released), (1, 1), "{later:?}");
        assert!(store.get(id).await.unwrap().is_none());
    }
}
