//! [`RedisStore`]: records in Redis or Valkey.
//!
//! Layout, under a key prefix (default `idempotency:`):
//!
//! - one hash per record, `<prefix>{<shard>}r:<id>`, with a field per
//!   [`Record`](crate::store::Record) field (responses binary-safe, bodies
//!   gzip-compressed where the DynamoDB store would compress them) and a
//!   key TTL five minutes past the record's expiry (the scripts treat it as
//!   absent from its expiry on);
//! - one sorted set per shard, `<prefix>{<shard>}stuck`: the ids of the
//!   records in progress, scored by lease end, where the sweeper finds stuck
//!   records without `KEYS` or `SCAN`.
//!
//! `<shard>` is the first hex digit of the record id (16 shards, as the
//! DynamoDB sweep index has): it is the Redis Cluster hash tag, so a record
//! and its shard's index live in one hash slot and every script touches one
//! slot. Records spread over 16 slots, hence over up to 16 primaries of a
//! cluster ([`RedisStoreBuilder::cluster`]).
//!
//! Every write is one Lua script (so one round trip), evaluated atomically
//! by the server with the same rules as [`MemoryStore`](crate::MemoryStore)
//! (docs/DESIGN.md section 4).
//!
//! How each operation is done:
//!
//! - claim: one script, one round trip (a new life, a takeover of an
//!   abandoned attempt of the same request, our own claim after a lost
//!   response, or the record as it is);
//! - complete, release, checkpoint, and the sweeper's resolution: one
//!   script each, fenced on status, attempt and owner;
//! - expiry: the key's TTL, and every script treats a record past its
//!   expiry as absent (the caller's clock decides, as on DynamoDB);
//! - stuck records: a sorted set by lease end per hash slot, kept by the
//!   same scripts;
//! - one server (with its replicas), or a Redis Cluster
//!   ([`RedisStoreBuilder::cluster`]): every script touches one hash slot.
//!
//! The files, laid out as in every engine of the crate: this one holds the
//! store type, its builder and connection, and the plumbing every operation
//! goes through (keys, running a script, a failed call's error); `store.rs`
//! the hot path ([`Store`](crate::Store)'s claim, complete, checkpoint and
//! release); `sweep.rs` what the sweeper and operators call (stuck
//! listings, resolution, get, scan, their cursors); `codec.rs` records as
//! hashes and script replies; the `*.lua` files the scripts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, Pipeline, RedisError, RedisFuture, Script, ScriptInvocation, Value};

use crate::error::{Error, ErrorKind};
use crate::store::DEFAULT_MAX_RESPONSE_BYTES;

mod codec;
mod store;
mod sweep;

use codec::text;

/// The key prefix when none is given.
const DEFAULT_PREFIX: &str = "idempotency:";

/// Shards of the stuck index, hence hash slots the records spread over.
const SHARDS: u8 = 16;
/// How long a key outlives its record's expiry, in seconds. The scripts
/// treat an expired record as absent right away; the key stays a little
/// (as a DynamoDB item stays until its TTL deletion runs) so a new life of
/// the key goes on counting attempts from the last one, and operators and
/// the sweeper still see what expired.
const EXPIRY_GRACE_S: u64 = 300;

/// The scripts' sources: claim, complete, release, checkpoint, resolve, stuck.
/// A completion and the sweeper's `fail` write a final outcome alike: both
/// scripts start with completed.lua's `write_completed`.
const SOURCES: [&str; 6] = [
    include_str!("claim.lua"),
    concat!(include_str!("completed.lua"), include_str!("complete.lua")),
    include_str!("release.lua"),
    include_str!("checkpoint.lua"),
    concat!(include_str!("completed.lua"), include_str!("resolve.lua")),
    include_str!("stuck.lua"),
];

/// The scripts, hashed once per process.
struct Scripts {
    claim: Script,
    complete: Script,
    release: Script,
    checkpoint: Script,
    resolve: Script,
    stuck: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let [claim, complete, release, checkpoint, resolve, stuck] = SOURCES.map(Script::new);
    Scripts {
        claim,
        complete,
        release,
        checkpoint,
        resolve,
        stuck,
    }
});

/// A [`Store`](crate::Store) on Redis or Valkey (feature `redis`).
///
/// Cheap to clone: clones share one multiplexed connection, re-established
/// when it drops.
///
/// What the server must be: `maxmemory-policy noeviction` (every key has a
/// TTL, so the `volatile-*` policies may evict records too, and an evicted
/// record lets its key run again), and a primary that does not lose
/// acknowledged writes. Replication to replicas is asynchronous: a failover
/// can lose the last writes, a claim included, so a retry right then may run
/// the handler again, unless the store waits for its replicas
/// ([`RedisStoreBuilder::wait_for_replicas`]); DynamoDB's writes are durable
/// when acknowledged.
///
/// ```no_run
/// use lambda_idempotency::{IdempotencyLayer, RedisStore};
///
/// # async fn f() -> Result<(), lambda_idempotency::Error> {
/// // AUTH, TLS (`rediss://`) and the database number come from the URL.
/// let store = RedisStore::builder("rediss://default:secret@cache.example.com:6379/0")
///     .key_prefix("orders:")
///     .connect()
///     .await?;
/// let layer = IdempotencyLayer::new(store);
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    connection: CountedConnection,
    prefix: Arc<str>,
    /// `host:port`, for messages (never the URL: it may hold a password).
    server: Arc<str>,
    max_response_bytes: usize,
    /// The server is a Redis Cluster.
    cluster: bool,
    /// Replicas that must hold a claim, recovery point or completion
    /// before it counts ([`RedisStoreBuilder::wait_for_replicas`]).
    replication: Option<Replication>,
}

/// `WAIT`'s arguments: how many replicas, for how long at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Replication {
    replicas: u32,
    timeout: Duration,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("server", &self.server)
            .field("cluster", &self.cluster)
            .field("replication", &self.replication)
            .field("prefix", &self.prefix)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

/// Default limit on connecting to the server, TLS and authentication
/// included ([`RedisStoreBuilder::connect_timeout`]).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(200);

/// Default limit on the server's answer to one command
/// ([`RedisStoreBuilder::response_timeout`]); a store waiting for replicas
/// adds its wait to it.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_millis(450);

/// Options of a [`RedisStore`]: see [`RedisStore::builder`].
#[derive(Clone)]
pub struct RedisStoreBuilder {
    url: String,
    prefix: String,
    /// As set; `None`: 4/9 of the store's limit
    /// (`IDEMPOTENCY_STORE_TIMEOUT_MS`, default 450 ms).
    connect_timeout: Option<Duration>,
    /// As set; `None`: the store's limit, plus the replica wait.
    response_timeout: Option<Duration>,
    max_response_bytes: usize,
    cluster: bool,
    replication: Option<Replication>,
}

impl std::fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: not printed.
        f.debug_struct("RedisStoreBuilder")
            .field("prefix", &self.prefix)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("cluster", &self.cluster)
            .field("replication", &self.replication)
            .finish_non_exhaustive()
    }
}

impl RedisStoreBuilder {
    /// Prefix of every key the store writes (default `idempotency:`), so
    /// several applications or environments can share one database. It
    /// cannot contain `{` or `}`: the store's own hash tag follows it.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long connecting may take, TLS and authentication included
    /// (default [`DEFAULT_CONNECT_TIMEOUT`], 200 ms, or 4/9 of
    /// `IDEMPOTENCY_STORE_TIMEOUT_MS` when it is set): past it the
    /// operation fails as [`ErrorKind::StoreUnavailable`] (a 503) and the
    /// next one connects again.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How long the server may take to answer one command (default
    /// [`DEFAULT_RESPONSE_TIMEOUT`], 450 ms, or `IDEMPOTENCY_STORE_TIMEOUT_MS`
    /// when it is set, plus the replica wait's timeout when
    /// [`wait_for_replicas`](Self::wait_for_replicas) is set).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = Some(timeout);
        self
    }

    /// Keep responses up to `bytes` (body after compression plus headers;
    /// default [`DEFAULT_MAX_RESPONSE_BYTES`], as on DynamoDB). Larger ones
    /// complete with a problem marker instead.
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// The URL names one node of a Redis Cluster (cluster mode enabled:
    /// ElastiCache, MemoryDB, ElastiCache Serverless): the store learns the
    /// cluster's slots from it and sends each script to the node of its
    /// keys' slot. Every script touches one slot, so no script spans nodes.
    /// A cluster has database 0 only.
    /// [`SweepStore::scan`](crate::store::SweepStore::scan) reads each shard on the node that
    /// holds it.
    pub fn cluster(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// Count a claim, a recovery point or a completion as done only once
    /// `replicas` replicas hold it (Redis `WAIT`, one more round trip each),
    /// waiting at most `timeout`. Replication is asynchronous: without this,
    /// a write the primary acknowledged is lost if a replica is promoted
    /// before it arrived, and a retry then claims the key again and runs the
    /// handler twice. When fewer replicas answer in time the operation fails
    /// closed ([`ErrorKind::StoreUnavailable`], a `503`): a claim is
    /// released again first (its handler has not run), a completion or a
    /// recovery point is reported as not recorded.
    ///
    /// `timeout` must be shorter than the response timeout, when one is set
    /// (the default response timeout adds `timeout`). One server with
    /// replicas only: on a Redis Cluster [`open`](Self::open) refuses it.
    /// MemoryDB keeps every acknowledged write in its multi-AZ log and needs
    /// none of this; on ElastiCache (Redis OSS or Valkey) with replicas, use
    /// one replica and a timeout of a few hundred milliseconds.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replication = Some(Replication { replicas, timeout });
        self
    }

    /// The connect and response timeouts in force: as set, or from the
    /// store's limit (`limit`): 4/9 of it to connect (two attempts and the
    /// delay between them fit in it), all of it plus the replica wait
    /// (which the server answers only once it is over) for an answer.
    fn timeouts_in_force(&self, limit: Duration) -> (Duration, Duration) {
        let connect = self.connect_timeout.unwrap_or(limit * 4 / 9);
        let response = self
            .response_timeout
            .unwrap_or_else(|| limit + self.replication.map_or(Duration::ZERO, |r| r.timeout));
        (connect, response)
    }

    /// The store, connecting on first use: nothing is sent yet, so an
    /// unreachable server shows up as [`ErrorKind::StoreUnavailable`] on the
    /// first operation. Must be called inside a Tokio runtime.
    ///
    /// Fails with [`ErrorKind::InvalidConfig`] when the URL is not a Redis
    /// URL, the prefix holds a brace, there is no Tokio runtime, or (with a
    /// timeout left to its default) `IDEMPOTENCY_STORE_TIMEOUT_MS` is not a
    /// number of milliseconds.
    pub fn open(self) -> Result<RedisStore, Error> {
        let limit = match (self.connect_timeout, self.response_timeout) {
            (Some(_), Some(_)) => DEFAULT_RESPONSE_TIMEOUT,
            _ => crate::settings::store_timeout_from_env()?,
        };
        let (connect_timeout, response_timeout) = self.timeouts_in_force(limit);
        if let Some(replication) = self.replication {
            if self.cluster {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    "wait_for_replicas is for one Redis server with its replicas; on a Redis \
                     Cluster `WAIT` would have to reach the node of every key, which this store \
                     does not do: leave it out (or use MemoryDB, whose writes are durable)",
                ));
            }
            if replication.timeout >= response_timeout {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "wait_for_replicas waits up to {} ms, not less than the response timeout \
                         ({} ms), so the wait could never report; use a shorter wait or a longer \
                         response_timeout",
                        replication.timeout.as_millis(),
                        response_timeout.as_millis()
                    ),
                ));
            }
        }
        if self.prefix.contains(['{', '}']) {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "the Redis key prefix `{}` contains a brace; braces mark the hash tag the \
                     store adds itself, so use a prefix without `{{` or `}}`",
                    self.prefix
                ),
            ));
        }
        let client = ::redis::Client::open(self.url.as_str()).map_err(|e| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "not a Redis URL ({}); write it as redis://[user:password@]host[:port][/db] \
                     or rediss:// for TLS",
                    e.detail().unwrap_or("it does not parse")
                ),
            )
        })?;
        let addr = client.get_connection_info().addr();
        let server: Arc<str> = Arc::from(addr.to_string());
        if matches!(addr, ::redis::ConnectionAddr::TcpTls { .. }) {
            // rustls needs a process-wide crypto provider; another part of
            // the program may have installed one already, which is as good.
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "a RedisStore must be opened inside a Tokio runtime (its connection runs as a \
                 task); open it in `main` after `#[tokio::main]`",
            ));
        }
        let cannot = |e: RedisError| {
            Error::with_source(
                ErrorKind::InvalidConfig,
                format!("cannot set up the connection to Redis at {server}: {e}"),
                e,
            )
        };
        let connection = if self.cluster {
            let cluster = ::redis::cluster::ClusterClient::builder([self.url.as_str()])
                .connection_timeout(connect_timeout)
                .response_timeout(response_timeout)
                // As below: an unreachable cluster fails the request soon.
                .retries(1)
                .min_retry_wait(20)
                .max_retry_wait(50)
                .build()
                .map_err(cannot)?;
            Connection::Cluster(
                cluster.get_pending_async_connection_with_config(
                    ::redis::cluster::ClusterConfig::new()
                        .set_connection_timeout(connect_timeout)
                        .set_response_timeout(response_timeout),
                ),
            )
        } else {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(response_timeout))
                // An unreachable server fails the request soon (503, fail
                // closed) rather than after seconds of reconnection
                // attempts; the next request tries again. Two connection
                // attempts and the delay between them stay within 450 ms
                // (docs/DESIGN.md, "Failing fast").
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(20))
                .set_max_delay(Duration::from_millis(50));
            Connection::Single(
                ConnectionManager::new_lazy_with_config(client, config).map_err(cannot)?,
            )
        };
        Ok(RedisStore {
            connection: CountedConnection {
                inner: connection,
                round_trips: Arc::new(AtomicU64::new(0)),
            },
            prefix: Arc::from(self.prefix),
            server,
            max_response_bytes: self.max_response_bytes,
            cluster: self.cluster,
            replication: self.replication,
        })
    }

    /// The store, connected: the server answered and holds the store's
    /// scripts. Fails with [`ErrorKind::StoreUnavailable`] naming the server
    /// when it cannot be reached, so a function can fail at start. Logs a
    /// warning when the server may evict keys (any `maxmemory-policy` but
    /// `noeviction`).
    pub async fn connect(self) -> Result<RedisStore, Error> {
        let store = self.open()?;
        // Through the connection itself: loading is not an operation of
        // the store, so it is not counted in `round_trips`. One command at
        // a time: a cluster sends `SCRIPT LOAD` to every primary.
        let mut connection = store.connection.inner.clone();
        for source in SOURCES {
            let _: Value = ::redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(source)
                .query_async(&mut connection)
                .await
                .map_err(|e| store.unavailable("loading its scripts", e))?;
        }
        let info: Value = ::redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut connection)
            .await
            .map_err(|e| store.unavailable("reading its memory settings", e))?;
        // A cluster answers per node; each node's policy is its own.
        let info = match &info {
            Value::Map(nodes) => nodes.iter().filter_map(|(_, v)| text(v)).collect(),
            other => text(other).unwrap_or_default(),
        };
        match eviction_policy(&info) {
            Some("noeviction") | None => {}
            Some(policy) => tracing::warn!(
                server = %store.server,
                policy,
                "the Redis server may evict keys when its memory is full (maxmemory-policy \
                 {policy}); an evicted idempotency record lets its key run again: set \
                 maxmemory-policy to noeviction"
            ),
        }
        Ok(store)
    }
}

impl RedisStore {
    /// Options for a store on the server at `url`
    /// (`redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS;
    /// the database number and the credentials are used as written).
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
            connect_timeout: None,
            response_timeout: None,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            cluster: false,
            replication: None,
        }
    }

    /// A store on `url` with the default options, connected and checked
    /// (see [`RedisStoreBuilder::connect`]).
    pub async fn connect(url: impl Into<String>) -> Result<RedisStore, Error> {
        Self::builder(url).connect().await
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// Round trips to the server made by this store's operations so far (a
    /// script is one; a script the server had not cached yet costs two
    /// more, once; a retry after a dropped connection counts).
    pub fn round_trips(&self) -> u64 {
        self.connection.round_trips.load(Ordering::Relaxed)
    }

    /// The key prefix and hash tag of a shard's keys.
    fn slot_prefix(&self, shard: u8) -> String {
        format!("{}{{{shard:x}}}", self.prefix)
    }

    fn record_key(&self, record_id: &str) -> String {
        format!("{}r:{record_id}", self.slot_prefix(shard_of(record_id)))
    }

    fn index_key(&self, shard: u8) -> String {
        format!("{}stuck", self.slot_prefix(shard))
    }

    fn unavailable(&self, op: &str, err: RedisError) -> Error {
        if err.code() == Some("WRONGTYPE") {
            return Error::with_source(
                ErrorKind::CorruptRecord,
                format!(
                    "a key of the idempotency store at {} (prefix `{}`) holds another type \
                     ({op}): another application writes under this prefix; give the store a \
                     prefix of its own",
                    self.server, self.prefix
                ),
                err,
            );
        }
        if err.kind() == ::redis::ErrorKind::InvalidClientConfig {
            return Error::with_source(
                ErrorKind::InvalidConfig,
                format!(
                    "the Redis URL for {} asks for what this build cannot do ({op}): {err}; \
                     fix the URL",
                    self.server
                ),
                err,
            );
        }
        let what = if err.is_connection_refusal() {
            "refused the connection"
        } else if err.is_timeout() {
            "did not answer in time"
        } else if err.is_connection_dropped() {
            "dropped the connection"
        } else if err.is_io_error() {
            "could not be reached"
        } else if err.kind() == ::redis::ErrorKind::AuthenticationFailed {
            "refused the credentials"
        } else {
            "answered with an error"
        };
        Error::with_source(
            ErrorKind::StoreUnavailable,
            format!(
                "Redis at {} {what} ({op}): {err}; check that the server is up and reachable \
                 from here (host, port, TLS, credentials, network rules), then retry",
                self.server
            ),
            err,
        )
    }

    /// Run a script; a command that failed because the connection dropped
    /// or could not be made is sent once more (every script is safe to
    /// repeat: rules 3 and 4 of docs/DESIGN.md section 4).
    async fn eval(&self, op: &str, invocation: &ScriptInvocation<'_>) -> Result<Value, Error> {
        let mut connection = self.connection.clone();
        let mut retried = false;
        loop {
            match invocation.invoke_async::<Value>(&mut connection).await {
                Ok(value) => return Ok(value),
                Err(err)
                    if !retried
                        && (err.is_connection_dropped()
                            || err.is_connection_refusal()
                            || (err.is_io_error() && !err.is_timeout())) =>
                {
                    retried = true;
                }
                Err(err) => return Err(self.unavailable(op, err)),
            }
        }
    }

    /// With [`RedisStoreBuilder::wait_for_replicas`]: wait until that many
    /// replicas hold this connection's writes (the `op` just made among
    /// them), or fail with [`ErrorKind::StoreUnavailable`]. Without it, done.
    async fn replicated(&self, op: &str) -> Result<(), Error> {
        let Some(Replication { replicas, timeout }) = self.replication else {
            return Ok(());
        };
        let mut connection = self.connection.clone();
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let acknowledged: u64 = ::redis::cmd("WAIT")
            .arg(replicas)
            .arg(millis)
            .query_async(&mut connection)
            .await
            .map_err(|e| self.unavailable(op, e))?;
        if acknowledged >= u64::from(replicas) {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::StoreUnavailable,
            format!(
                "Redis at {} holds the {op}, but only {acknowledged} of the {replicas} replicas \
                 asked for acknowledged it within {millis} ms: a failover now could lose it, so \
                 it does not count; retry the request, and check the replicas' replication \
                 link (INFO replication)",
                self.server
            ),
        ))
    }

    /// A reply the scripts never give.
    fn unexpected(&self, op: &str, reply: &Value) -> Error {
        Error::new(
            ErrorKind::StoreUnavailable,
            format!(
                "Redis at {} answered {op} with {reply:?}, which the store's script never \
                 returns; is another program loading scripts under the same hash?",
                self.server
            ),
        )
    }

    /// An invocation of `script` on record `record_id` and its shard's
    /// index, fenced on `attempt` and `owner`: the keys and first arguments
    /// complete.lua, release.lua and resolve.lua share.
    fn fenced<'a>(
        &self,
        script: &'a Script,
        record_id: &str,
        attempt: u64,
        owner: &str,
    ) -> ScriptInvocation<'a> {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(self.record_key(record_id))
            .key(self.index_key(shard_of(record_id)))
            .arg(record_id)
            .arg(attempt)
            .arg(owner);
        invocation
    }
}

/// The shard of a record: the first hex digit of its id when the id is a
/// hex hash (as every id this crate makes is), else the first hex digit of
/// the id's SHA-256, so any id spreads evenly.
fn shard_of(record_id: &str) -> u8 {
    match record_id.chars().next() {
        Some(c @ ('0'..='9' | 'a'..='f')) => c.to_digit(16).map_or(0, |d| d as u8),
        _ => {
            use sha2::{Digest, Sha256};
            Sha256::digest(record_id.as_bytes())[0] >> 4
        }
    }
}

/// The `maxmemory_policy` of an `INFO memory` answer. Every key of the store
/// has a TTL, so any policy but `noeviction` may evict records.
fn eviction_policy(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|line| line.strip_prefix("maxmemory_policy:"))
        .map(str::trim)
}

/// The connection to a server or to a cluster.
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

/// The connection, counting the round trips made through it.
#[derive(Clone)]
struct CountedConnection {
    inner: Connection,
    round_trips: Arc<AtomicU64>,
}

impl ConnectionLike for CountedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use ::redis::cluster_routing::Slot;

    fn store(prefix: &str) -> RedisStore {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        RedisStore::builder("redis://127.0.0.1:1")
            .key_prefix(prefix)
            .open()
            .unwrap()
    }

    #[test]
    fn every_script_touches_one_hash_slot() {
        let store = store("app:");
        for id in [
            "0f3a9c", "ffff", "a1", "not-hex", "ABC", "", "{brace}", "x}y{z",
        ] {
            let shard = shard_of(id);
            let record = store.record_key(id);
            let index = store.index_key(shard);
            // Claim, complete, release and resolve take both keys; the
            // listing reads records of its shard through the same prefix.
            assert_eq!(Slot::for_key(&record), Slot::for_key(&index), "{id}");
            let listed = format!("{}r:{id}", store.slot_prefix(shard));
            assert_eq!(listed, record);
        }
        // The 16 shards are 16 distinct slots, so records spread.
        let slots: std::collections::HashSet<_> = (0..SHARDS)
            .map(|s| Slot::for_key(store.index_key(s)))
            .collect();
        assert_eq!(slots.len(), usize::from(SHARDS));
    }

    #[test]
    fn ids_made_by_the_crate_use_their_first_digit_and_others_spread() {
        assert_eq!(shard_of("3fa0"), 3);
        assert_eq!(shard_of("c0ffee"), 12);
        let shards: std::collections::HashSet<u8> =
            (0..200).map(|i| shard_of(&format!("key-{i}"))).collect();
        assert_eq!(shards.len(), usize::from(SHARDS));
    }

    #[test]
    fn a_prefix_with_a_brace_or_a_bad_url_is_refused_and_the_password_never_shows() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let err = RedisStore::builder("redis://localhost")
            .key_prefix("a{b")
            .open()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        let err = RedisStore::builder("http://user:hunter2@localhost")
            .open()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let store = RedisStore::builder("redis://user:hunter2@cache.internal:6380/3")
            .open()
            .unwrap();
        assert_eq!(
            store.describe(),
            "Redis at cache.internal:6380 (key prefix `idempotency:`)"
        );
        assert!(!format!("{store:?}").contains("hunter2"));
    }

    #[test]
    fn opening_outside_a_runtime_is_a_config_error_not_a_panic() {
        let err = RedisStore::builder("redis://localhost").open().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn the_eviction_policy_is_read_from_info() {
        let info = "# Memory\r\nused_memory:100\r\nmaxmemory_policy:volatile-lru\r\nother:1\r\n";
        assert_eq!(eviction_policy(info), Some("volatile-lru"));
        assert_eq!(eviction_policy("# Memory\r\n"), None);
    }
}
