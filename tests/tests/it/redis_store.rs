//! What only a Redis server shows: round trips, the URL honoured as written
//! (database, credentials), key prefixes, key expiry, an unreachable or
//! silent server, and answers lost on the way back. The behaviour suites run
//! on Redis through `on_both_stores!`; these are about Redis itself.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency::{
    http::REPLAYED_HEADER,
    problem,
    store::{
        ClaimOutcome, CompleteRequest, Completion, Status, StoredBody, StoredResponse,
        StuckRequest, SweepStore,
    },
    sweeper::Sweeper,
    ErrorKind, IdempotencyLayer, RedisStore, Store,
};
use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::Layer;

use crate::fixture::{
    assert_sweep_keeps_its_deadline, call, claim_lease, claim_request, claimed, counting_handler,
    json, now_ms, post, silent_server, start_first, Runs,
};

/// `host:port` of the harness's server.
fn server() -> String {
    redis::Client::open(integration_tests::redis_url())
        .unwrap()
        .get_connection_info()
        .addr()
        .to_string()
}

/// A plain connection to the harness's server, database `db`.
async fn raw(db: u8) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://{}/{db}", server()))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn response() -> StoredResponse {
    StoredResponse::new(200, vec![], StoredBody::Text("done".into()))
}

#[tokio::test]
async fn round_trips_are_two_for_a_first_execution_and_one_for_a_replay_or_a_conflict() {
    let store = integration_tests::redis_store().await;
    let runs = Runs::default();
    let mut svc =
        IdempotencyLayer::new(store.clone()).layer(counting_handler(runs.clone(), Duration::ZERO));
    let first = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(first.status(), 201);
    assert_eq!(store.round_trips(), 2, "one claim script, one completion");

    let replay = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(store.round_trips(), 3, "a replay is one claim that lost");

    let slow_runs = Runs::default();
    let slow = IdempotencyLayer::new(store.clone()).layer(counting_handler(
        slow_runs.clone(),
        Duration::from_millis(400),
    ));
    let running = start_first(&slow, post("/orders", Some("k2"), "{}"), &slow_runs).await;
    let before = store.round_trips();
    let conflict = call(&mut slow.clone(), post("/orders", Some("k2"), "{}")).await;
    assert_eq!(conflict.status(), 409);
    assert_eq!(store.round_trips() - before, 1, "a conflict is one claim");
    assert_eq!(running.await.unwrap().status(), 201);
    assert_eq!(slow_runs.count(), 1);
}

#[tokio::test]
async fn a_closed_port_answers_503_the_handler_never_runs_and_the_password_never_shows() {
    let port = closed_port();
    let store = RedisStore::builder(format!("redis://app:hunter2@127.0.0.1:{port}/0"))
        .open()
        .unwrap();
    let runs = Runs::default();
    let mut svc =
        IdempotencyLayer::new(store.clone()).layer(counting_handler(runs.clone(), Duration::ZERO));
    let res = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(res.status(), 503);
    assert_eq!(json(&res)["type"], problem::STORE_UNAVAILABLE.uri);
    assert_eq!(runs.count(), 0, "fail closed: no claim, no execution");

    let err = store
        .claim(&claim_request("r", "o", 1000))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
    let message = err.to_string();
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(!message.contains("hunter2"), "{message}");

    let err = RedisStore::connect(format!("redis://app:hunter2@127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
    assert!(err.to_string().contains(&format!("127.0.0.1:{port}")));
    assert!(!err.to_string().contains("hunter2"));
}

#[tokio::test]
async fn a_sweep_of_an_unreachable_server_counts_every_shard_it_could_not_read() {
    let store = RedisStore::builder(format!("redis://127.0.0.1:{}", closed_port()))
        .open()
        .unwrap();
    let summary = Sweeper::new(store)
        .grace(Duration::ZERO)
        .sweep(Some(now_ms() + 60_000))
        .await;
    assert_eq!(summary.errors, 16, "one failed read per shard: {summary:?}");
    assert_eq!((summary.pages, summary.found), (0, 0));
    assert!(summary.remaining, "shards left unread");
}

#[tokio::test]
async fn a_silent_server_does_not_keep_a_sweep_past_its_deadline() {
    let (port, held) = silent_server().await;
    // The default timeouts (2 s to connect, 2 s per answer).
    let store = RedisStore::builder(format!("redis://127.0.0.1:{port}"))
        .open()
        .unwrap();
    assert_sweep_keeps_its_deadline(store).await;
    held.abort();
}

#[tokio::test]
async fn a_silent_server_answers_503_once_its_time_is_up() {
    // Accepts connections and never answers.
    let (port, held) = silent_server().await;
    let store = RedisStore::builder(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
        .open()
        .unwrap();
    let runs = Runs::default();
    let mut svc =
        IdempotencyLayer::new(store).layer(counting_handler(runs.clone(), Duration::ZERO));
    let res = tokio::time::timeout(
        Duration::from_secs(30),
        call(&mut svc, post("/orders", Some("k1"), "{}")),
    )
    .await
    .expect("the request was answered");
    assert_eq!(res.status(), 503);
    assert_eq!(runs.count(), 0);
    held.abort();
}

#[tokio::test]
async fn key_prefixes_keep_stores_apart_on_one_server() {
    let a = integration_tests::redis_store().await;
    let b = integration_tests::redis_store().await;
    assert_ne!(a.key_prefix(), b.key_prefix());
    let id = "0a1b2c";
    let lease_a = claim_lease(&a, id, "owner-a", 1).await;
    let lease_b = claim_lease(&b, id, "owner-b", 60_000).await;
    assert_eq!((lease_a.attempt, lease_b.attempt), (1, 1));
    crate::fixture::complete(&a, &lease_a, &response())
        .await
        .unwrap();
    let in_b = b.get(id).await.unwrap().unwrap().record;
    assert_eq!(
        (in_b.status, in_b.owner.as_str()),
        (Status::InProgress, "owner-b")
    );
    let in_a = a.get(id).await.unwrap().unwrap().record;
    assert_eq!(in_a.status, Status::Completed);

    // Listings see their own prefix only.
    let listed_a = a.scan(None, 100).await.unwrap();
    assert_eq!(listed_a.records.len(), 1);
    assert_eq!(listed_a.records[0].record.owner, "owner-a");
    let stuck_b = b.stuck(StuckRequest::new(u64::MAX, 100)).await.unwrap();
    assert_eq!(stuck_b.records.len(), 1);
    assert_eq!(stuck_b.records[0].owner, "owner-b");
    assert!(a
        .stuck(StuckRequest::new(u64::MAX, 100))
        .await
        .unwrap()
        .records
        .is_empty());

    // A prefix that is a prefix of another's is still its own.
    let short = RedisStore::builder(integration_tests::redis_url())
        .key_prefix(a.key_prefix().trim_end_matches(':'))
        .connect()
        .await
        .unwrap();
    assert!(short.scan(None, 100).await.unwrap().records.is_empty());
    assert!(short.get(id).await.unwrap().is_none());
}

#[tokio::test]
async fn a_tls_url_connects_over_tls_and_checks_the_certificate() {
    let url = std::env::var("IDEMPOTENCY_TEST_REDIS_TLS_URL").unwrap_or_else(|_| {
        panic!(
            "IDEMPOTENCY_TEST_REDIS_TLS_URL is not set: run the tests with scripts/redis-local.sh"
        )
    });
    // The harness's certificate is self-signed; `#insecure` accepts it.
    let store = integration_tests::redis_store_at(url.as_str()).await;
    let lease = claim_lease(&store, "71", "o", 60_000).await;
    crate::fixture::complete(&store, &lease, &response())
        .await
        .unwrap();
    let record = store.get("71").await.unwrap().unwrap().record;
    assert_eq!(record.status, Status::Completed);
    // Without it the certificate is checked, and refused.
    let checked = url.trim_end_matches("#insecure");
    assert_ne!(checked, url);
    let err = RedisStore::connect(checked).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
    assert!(err.to_string().contains("certificate"), "{err}");
}

#[tokio::test]
async fn a_resp3_connection_reads_records_as_resp2_does() {
    let store =
        integration_tests::redis_store_at(format!("redis://{}/?protocol=resp3", server())).await;
    let lease = claim_lease(&store, "3a", "o", 60_000).await;
    let stored = StoredResponse::new(
        201,
        vec![("x-raw".into(), vec![0, 0xff])],
        StoredBody::Binary(vec![1, 2, 3]),
    );
    crate::fixture::complete(&store, &lease, &stored)
        .await
        .unwrap();
    let record = store.get("3a").await.unwrap().unwrap().record;
    assert_eq!(record.response, Some(stored.clone()));
    match store
        .claim(&claim_request("3a", "other", 60_000))
        .await
        .unwrap()
    {
        ClaimOutcome::Exists(found) => assert_eq!(found.response, Some(stored)),
        other => panic!("expected the completed record, found {other:?}"),
    }
    assert_eq!(store.scan(None, 10).await.unwrap().records.len(), 1);
}

#[tokio::test]
async fn the_database_number_in_the_url_is_used() {
    let prefix = integration_tests::unique_redis_prefix();
    let store = RedisStore::builder(format!("redis://{}/5", server()))
        .key_prefix(&prefix)
        .connect()
        .await
        .unwrap();
    claim_lease(&store, "5e", "o", 60_000).await;
    let key = format!("{prefix}{{5}}r:5e");
    let in_5: bool = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut raw(5).await)
        .await
        .unwrap();
    let in_0: bool = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut raw(0).await)
        .await
        .unwrap();
    assert!(in_5 && !in_0, "database 5: {in_5}, database 0: {in_0}");
}

#[tokio::test]
async fn credentials_in_the_url_are_used_and_a_wrong_password_never_shows() {
    let user = format!(
        "idem-{}",
        integration_tests::unique_redis_prefix().trim_end_matches(':')
    );
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(">s3cret-pass")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .query_async(&mut raw(0).await)
        .await
        .unwrap();
    let store =
        integration_tests::redis_store_at(format!("redis://{user}:s3cret-pass@{}", server())).await;
    claim_lease(&store, "ac", "o", 60_000).await;

    let err = RedisStore::connect(format!("redis://{user}:wrong-pass@{}", server()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
    assert!(!err.to_string().contains("wrong-pass"), "{err}");
    assert!(err.to_string().contains(&server()), "{err}");
}

#[tokio::test]
async fn keys_live_until_their_record_expires_plus_a_grace_and_leave_the_index_when_done() {
    let store = integration_tests::redis_store().await;
    let prefix = store.key_prefix().to_owned();
    let con = raw(0).await;
    let request = claim_request("7f", "o", 60_000);
    let lease = claimed(store.claim(&request).await.unwrap());
    let key = format!("{prefix}{{7}}r:7f");
    let index = format!("{prefix}{{7}}stuck");
    // When the record's key expires, and its score in the stuck index.
    let expire_time = || {
        let (mut con, key) = (con.clone(), key.clone());
        async move {
            redis::cmd("EXPIRETIME")
                .arg(key)
                .query_async::<i64>(&mut con)
                .await
                .unwrap()
        }
    };
    let score = || {
        let (mut con, index) = (con.clone(), index.clone());
        async move {
            redis::cmd("ZSCORE")
                .arg(index)
                .arg("7f")
                .query_async::<Option<u64>>(&mut con)
                .await
                .unwrap()
        }
    };
    assert_eq!(expire_time().await, request.expires_at_s as i64 + 300);
    assert_eq!(score().await, Some(request.lease_expires_at_ms));

    let completed_until = now_ms() / 1000 + 90;
    store
        .complete(CompleteRequest::new(&lease, &response(), completed_until))
        .await
        .unwrap();
    assert_eq!(expire_time().await, completed_until as i64 + 300);
    assert_eq!(
        score().await,
        None,
        "a completed record leaves the stuck index"
    );
}

#[tokio::test]
async fn scan_pages_through_every_record_and_skips_foreign_keys() {
    let store = integration_tests::redis_store().await;
    let ids: std::collections::BTreeSet<String> =
        (0..25).map(|i| format!("{:x}{i}", i % 16)).collect();
    for id in &ids {
        claim_lease(&store, id, "o", 60_000).await;
    }
    // Another program's keys under the prefix: a hash that is no record and
    // a string.
    let mut con = raw(0).await;
    let prefix = store.key_prefix().to_owned();
    let _: () = redis::cmd("HSET")
        .arg(format!("{prefix}{{0}}r:foreign"))
        .arg("colour")
        .arg("blue")
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}{{1}}r:1text"))
        .arg("hello")
        .query_async(&mut con)
        .await
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut skipped = 0;
    let mut cursor = None;
    loop {
        let page = store.scan(cursor, 7).await.unwrap();
        assert!(page.records.len() <= 7, "{}", page.records.len());
        skipped += page.skipped;
        seen.extend(page.records.into_iter().map(|r| r.record.id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    assert_eq!(skipped, 2);
    // The string key is not a record either when read alone.
    let err = store.get("1text").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CorruptRecord);
}

/// A record whose attempt count is past what the claim script counts exactly
/// (Lua's numbers are doubles: exact to 2^53), damaged or written by another
/// tool: neither a takeover of its abandoned attempt nor a new life after it
/// expired can hand out the next fencing token, so the claim fails as a
/// corrupt record instead of storing a rounded token, and the hash is left
/// as it is. A completed one still replays.
#[tokio::test]
async fn a_claim_past_exact_attempt_counts_is_a_corrupt_record() {
    let store = integration_tests::redis_store().await;
    let mut con = raw(0).await;
    // A lease that ended (a takeover), and a record that expired (a new life).
    for (id, expires_in_s) in [("a-max", 3600), ("a-expired-max", -5)] {
        crate::fixture::claim_expiring(&store, id, expires_in_s).await;
        set_largest_attempt(&store, &mut con, id).await;
        crate::fixture::assert_no_next_attempt(&store, id).await;
        let (attempt, owner): (u64, String) = redis::cmd("HMGET")
            .arg(format!("{}{{a}}r:{id}", store.key_prefix()))
            .arg("attempt")
            .arg("owner")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!((attempt, owner.as_str()), (u64::MAX, "a"), "{id}");
    }
    let lease = crate::fixture::claim_expiring(&store, "a-done-max", 3600).await;
    crate::fixture::complete(&store, &lease, &response())
        .await
        .unwrap();
    set_largest_attempt(&store, &mut con, "a-done-max").await;
    crate::fixture::assert_found_at_largest_attempt(&store, "a-done-max", u64::MAX).await;
}

/// Set the attempt count of record `id` (in slot `{a}`) to u64's largest.
async fn set_largest_attempt(
    store: &RedisStore,
    con: &mut redis::aio::MultiplexedConnection,
    id: &str,
) {
    let _: () = redis::cmd("HSET")
        .arg(format!("{}{{a}}r:{id}", store.key_prefix()))
        .arg("attempt")
        .arg(u64::MAX.to_string())
        .query_async(con)
        .await
        .unwrap();
}

/// A TCP proxy to the harness's server that loses the answer to the next
/// script call on request: the server runs the script, then the client's
/// connection closes before the answer reaches it (the Redis counterpart of
/// a response lost after DynamoDB applied the write).
struct LosingProxy {
    port: u16,
    lose_next: Arc<AtomicU64>,
    lost: Arc<AtomicU64>,
    accepting: tokio::task::JoinHandle<()>,
}

impl LosingProxy {
    async fn start() -> LosingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (lose_next, lost) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let upstream = server();
        let accepting = {
            let (lose_next, lost) = (lose_next.clone(), lost.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    let armed = Arc::new(AtomicBool::new(false));
                    let (lose_next, lost, armed_up) =
                        (lose_next.clone(), lost.clone(), armed.clone());
                    tokio::spawn(async move {
                        let mut buf = vec![0; 64 * 1024];
                        while let Ok(n @ 1..) = client_read.read(&mut buf).await {
                            let call = buf[..n].windows(7).any(|w| w == b"EVALSHA");
                            if call
                                && lose_next
                                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                        n.checked_sub(1)
                                    })
                                    .is_ok()
                            {
                                armed_up.store(true, Ordering::SeqCst);
                            }
                            if server_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                    tokio::spawn(async move {
                        let mut buf = vec![0; 64 * 1024];
                        while let Ok(n @ 1..) = server_read.read(&mut buf).await {
                            if armed.load(Ordering::SeqCst) {
                                // The answer is dropped with the connection.
                                lost.fetch_add(1, Ordering::SeqCst);
                                break;
                            }
                            if client_write.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                }
            })
        };
        LosingProxy {
            port,
            lose_next,
            lost,
            accepting,
        }
    }

    fn lose_next_answer(&self) {
        self.lose_next.store(1, Ordering::SeqCst);
    }

    fn lost(&self) -> u64 {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for LosingProxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

#[tokio::test]
async fn lost_answers_are_recognised_as_our_own_writes_on_the_retry() {
    let proxy = LosingProxy::start().await;
    let store =
        integration_tests::redis_store_at(format!("redis://127.0.0.1:{}", proxy.port)).await;

    // The claim ran, its answer was lost; the retry finds our own owner.
    proxy.lose_next_answer();
    let request = claim_request("c1", "me", 60_000);
    let lease = match store.claim(&request).await.unwrap() {
        ClaimOutcome::Claimed(lease) => lease,
        other => panic!("expected our own claim, found {other:?}"),
    };
    assert_eq!(proxy.lost(), 1, "the claim's first answer was lost");
    assert_eq!(lease.attempt, 1, "one claim, seen twice");

    // The completion ran, its answer was lost; the retry finds it completed
    // by this very lease.
    proxy.lose_next_answer();
    let completion = crate::fixture::complete(&store, &lease, &response())
        .await
        .unwrap();
    assert_eq!(completion, Completion::Stored);
    assert_eq!(proxy.lost(), 2);
    let record = store.get("c1").await.unwrap().unwrap().record;
    assert_eq!(record.status, Status::Completed);

    // A release whose answer was lost: the retry finds the record gone.
    let other = claim_lease(&store, "c2", "me", 60_000).await;
    proxy.lose_next_answer();
    store.release(&other).await.unwrap();
    assert_eq!(proxy.lost(), 3);
    assert!(store.get("c2").await.unwrap().is_none());

    // Through the middleware: the handler runs once.
    let runs = Runs::default();
    let mut svc =
        IdempotencyLayer::new(store.clone()).layer(counting_handler(runs.clone(), Duration::ZERO));
    proxy.lose_next_answer();
    let res = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(res.status(), 201);
    assert_eq!(proxy.lost(), 4);
    let replay = call(&mut svc, post("/orders", Some("k1"), "{}")).await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 1);
}

#[tokio::test]
async fn on_a_cluster_records_spread_over_its_primaries() {
    let store = integration_tests::redis_cluster_store().await;
    assert!(
        store.describe().starts_with("Redis Cluster at "),
        "{}",
        store.describe()
    );
    let ids: Vec<String> = (0..16).map(|shard| format!("{shard:x}0")).collect();
    for id in &ids {
        claim_lease(&store, id, "o", 60_000).await;
    }
    // Which primary holds each record, from the cluster's own slot map.
    let url = std::env::var("IDEMPOTENCY_TEST_REDIS_CLUSTER_URL").unwrap();
    let mut node = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let slots: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut node)
        .await
        .unwrap();
    let Value::Array(ranges) = slots else {
        panic!("CLUSTER SLOTS: {slots:?}")
    };
    let owner_of = |slot: i64| {
        ranges.iter().find_map(|range| match range {
            Value::Array(parts) => match (&parts[0], &parts[1], &parts[2]) {
                (Value::Int(start), Value::Int(end), Value::Array(primary))
                    if (*start..=*end).contains(&slot) =>
                {
                    Some(format!("{:?}", primary[1]))
                }
                _ => None,
            },
            _ => None,
        })
    };
    let mut owners = std::collections::BTreeSet::new();
    for id in &ids {
        let key = format!("{}{{{}}}r:{id}", store.key_prefix(), &id[..1]);
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query_async(&mut node)
            .await
            .unwrap();
        owners.insert(owner_of(slot).expect("every slot has a primary"));
        assert!(store.get(id).await.unwrap().is_some(), "{id}");
    }
    assert_eq!(owners.len(), 3, "records on every primary: {owners:?}");
}
