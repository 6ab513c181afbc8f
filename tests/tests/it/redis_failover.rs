//! Redis claims across a failover (issue 28, item 3): a real primary and a
//! real replica (`redis-server`, which `scripts/redis-local.sh` installs),
//! replication held back (the replica reaches the primary through a relay
//! that stops passing the primary's stream on), the primary killed and the
//! replica promoted. Without `wait_for_replicas` the retry
//! runs the handler a second time; with it, the first request fails closed
//! and the handler runs once.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use lambda_idempotency::{http::REPLAYED_HEADER, problem, IdempotencyLayer, RedisStore};
use tower::Layer;

use crate::fixture::{call, counting_handler, json, post, Runs};

/// A `redis-server` of this test's own, on a free loopback port, in a
/// temporary directory, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Server {
    fn start(replica_of: Option<u16>) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // Where a replica keeps the snapshot it receives.
        let dir =
            std::env::temp_dir().join(format!("redis-failover-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(primary) = replica_of {
            command.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
        }
        let child = command
            .spawn()
            .expect("redis-server on the PATH (scripts/redis-local.sh installs it)");
        Server { child, port, dir }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal}");
    }

    async fn command(&self, args: &[&str]) -> redis::Value {
        let client = redis::Client::open(self.url()).expect("URL");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query_async(&mut connection).await.expect("a reply")
    }

    /// Wait until the server answers, and for a replica until its link to
    /// the primary is up (it holds everything written before).
    async fn ready(&self) {
        for _ in 0..200 {
            let up = match redis::Client::open(self.url())
                .expect("URL")
                .get_multiplexed_async_connection()
                .await
            {
                Err(_) => false,
                Ok(mut connection) => redis::cmd("INFO")
                    .arg("replication")
                    .query_async::<String>(&mut connection)
                    .await
                    .is_ok_and(|info| {
                        info.contains("role:master") || info.contains("master_link_status:up")
                    }),
            };
            if up {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("redis-server on port {} did not come up", self.port);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A stopped process must be continued to die of SIGKILL's cleanup.
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TCP relay from the replica to the primary that can stop passing the
/// primary's replication stream on: what a replica lagging behind (or cut
/// off) at the moment of a failover has not received. The replica's
/// acknowledgements still reach the primary, so `WAIT` sees it behind.
struct Relay {
    port: u16,
    cut: Arc<AtomicBool>,
}

impl Relay {
    async fn to(primary: u16) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let cut_in_task = cut.clone();
        tokio::spawn(async move {
            while let Ok((replica, _)) = listener.accept().await {
                let Ok(upstream) = tokio::net::TcpStream::connect(("127.0.0.1", primary)).await
                else {
                    continue;
                };
                let (mut from_replica, mut to_replica) = replica.into_split();
                let (mut from_primary, mut to_primary) = upstream.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_replica, &mut to_primary).await;
                });
                let cut = cut_in_task.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 64 * 1024];
                    while let Ok(n @ 1..) = from_primary.read(&mut buf).await {
                        if !cut.load(Ordering::SeqCst)
                            && to_replica.write_all(&buf[..n]).await.is_err()
                        {
                            break;
                        }
                    }
                });
            }
        });
        Relay { port, cut }
    }

    /// From now on the replica receives nothing more from the primary.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

/// One request through the layer on `store`, and its status.
async fn order(store: RedisStore, runs: &Runs) -> http::Response<lambda_http::Body> {
    let mut svc =
        IdempotencyLayer::new(store).layer(counting_handler(runs.clone(), Duration::ZERO));
    call(
        &mut svc,
        post("/orders", Some("order-1"), r#"{"amount":5}"#),
    )
    .await
}

/// The first request reaches the primary while the replica receives
/// nothing; the primary dies, the replica is promoted, the client retries
/// against it. `durable` sets `wait_for_replicas(1, 300 ms)` on the
/// primary's store. Returns the first and the retried answer's status.
async fn failover(durable: bool, runs: &Runs) -> (u16, u16) {
    let primary = Server::start(None);
    primary.ready().await;
    let relay = Relay::to(primary.port).await;
    let replica = Server::start(Some(relay.port));
    replica.ready().await;
    let mut builder = RedisStore::builder(primary.url());
    if durable {
        builder = builder.wait_for_replicas(1, Duration::from_millis(300));
    }
    let on_primary = builder.connect().await.expect("the primary");
    // Replication held back: the claim (and anything after it) reaches the
    // primary only.
    relay.cut();
    let first = order(on_primary, runs).await.status().as_u16();
    drop(primary);
    replica.command(&["REPLICAOF", "NO", "ONE"]).await;
    let on_new_primary = RedisStore::connect(replica.url())
        .await
        .expect("the promoted replica");
    let retry = order(on_new_primary, runs).await;
    assert!(
        retry.headers().get(REPLAYED_HEADER).is_none(),
        "nothing to replay on the replica"
    );
    (first, retry.status().as_u16())
}

#[tokio::test]
async fn without_waiting_for_replicas_a_failover_runs_the_handler_twice() {
    let runs = Runs::default();
    let (first, retry) = failover(false, &runs).await;
    assert_eq!((first, retry), (201, 201));
    assert_eq!(
        runs.count(),
        2,
        "the claim was lost with the primary: the hole"
    );
}

#[tokio::test]
async fn waiting_for_a_replica_fails_closed_and_the_handler_runs_once() {
    let runs = Runs::default();
    let (first, retry) = failover(true, &runs).await;
    assert_eq!(first, 503, "the replica never acknowledged the claim");
    assert_eq!(retry, 201);
    assert_eq!(runs.count(), 1);
}

/// With the replica up, a durable store works as any other: claims,
/// completions and replays, each write acknowledged; and the claim a
/// stopped replica does not acknowledge is given back on the primary, so a
/// retry there runs at once instead of waiting out the lease.
#[tokio::test]
async fn a_durable_store_replays_and_gives_back_an_unacknowledged_claim() {
    let primary = Server::start(None);
    primary.ready().await;
    let replica = Server::start(Some(primary.port));
    replica.ready().await;
    let store = RedisStore::builder(primary.url())
        .wait_for_replicas(1, Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let runs = Runs::default();
    assert_eq!(order(store.clone(), &runs).await.status(), 201);
    let replay = order(store.clone(), &runs).await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 1);

    replica.signal("-STOP");
    let mut svc =
        IdempotencyLayer::new(store.clone()).layer(counting_handler(runs.clone(), Duration::ZERO));
    let refused = call(&mut svc, post("/orders", Some("order-2"), "{}")).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(json(&refused)["type"], problem::STORE_UNAVAILABLE.uri);
    assert_eq!(runs.count(), 1, "the handler did not run");
    replica.signal("-CONT");
    let retried = call(&mut svc, post("/orders", Some("order-2"), "{}")).await;
    assert_eq!(retried.status(), 201, "the key was given back: no 409");
    assert_eq!(runs.count(), 2);
}

#[tokio::test]
async fn waiting_for_replicas_is_refused_on_a_cluster_and_past_the_response_timeout() {
    let cluster = RedisStore::builder("redis://127.0.0.1:1")
        .cluster()
        .wait_for_replicas(1, Duration::from_millis(100))
        .open()
        .unwrap_err();
    assert_eq!(cluster.kind(), lambda_idempotency::ErrorKind::InvalidConfig);
    let too_long = RedisStore::builder("redis://127.0.0.1:1")
        .response_timeout(Duration::from_secs(2))
        .wait_for_replicas(1, Duration::from_secs(5))
        .open()
        .unwrap_err();
    assert!(
        too_long.to_string().contains("response timeout"),
        "{too_long}"
    );
    // The default response timeout is the wait's plus 450 ms: any wait
    // can report.
    RedisStore::builder("redis://127.0.0.1:1")
        .wait_for_replicas(1, Duration::from_secs(5))
        .open()
        .expect("the default response timeout outlasts the wait");
}
