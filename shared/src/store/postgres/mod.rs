//! [`PostgresStore`]: records in a PostgreSQL table, one row per record.
//!
//! Every statement is sent as an unnamed statement with its parameter types
//! (`query_typed`: parse, bind and execute in one round trip), never a named
//! prepared statement, and no session state is set outside a transaction, so
//! the store works through a transaction-pooling proxy (RDS Proxy,
//! PgBouncer). Every statement runs under `lock_timeout` and
//! `statement_timeout`, set with `SET LOCAL` for its own transaction and
//! pipelined with it (see `limited`). The table is [`POSTGRES_SCHEMA`], created by
//! [`PostgresStore::migrate`], never silently.
//!
//! How each operation is done:
//!
//! - **Claim**: one `INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE
//!   <expired, or abandoned by the same request>` that returns either the
//!   new attempt or, when the claim loses, the existing row: one round trip.
//! - **Complete, release, recovery points**: `UPDATE`/`DELETE` fenced on
//!   `status`, `attempt` and `owner`.
//! - **Transactional completion**: the handler's own statements
//!   ([`PgWrite`], handed to
//!   [`IdempotencyContext::defer_write`](crate::IdempotencyContext::defer_write))
//!   commit in the same transaction as the fenced completion.
//! - **Expiry**: a claim treats a row past `expires_at` as absent;
//!   [`delete_expired`](crate::store::SweepStore::delete_expired) removes such rows in
//!   bounded batches.
//!
//! The files, laid out as in every engine of the crate: this one holds the
//! store type, its constructors and schema checks, and the plumbing every
//! operation goes through (a pooled connection, one limited statement, a
//! failed call's error); `store.rs` the hot path ([`Store`](crate::Store)'s
//! claim, complete, checkpoint and release, with the transactional paths);
//! `sweep.rs` what the sweeper and operators call (stuck listings,
//! resolution, get, scan, expired rows, their cursors); `codec.rs` records
//! as rows and parameters; `connect.rs` the URL and TLS; `write.rs` the
//! handler's own writes; `schema.sql` the table.

mod codec;
mod connect;
mod store;
mod sweep;
mod write;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

/// PostgreSQL types of [`PgWrite`] parameters.
pub use tokio_postgres::types::Type as PgType;
pub use write::PgWrite;

use crate::error::{Error, ErrorKind};
use crate::store::DEFAULT_MAX_RESPONSE_BYTES;
use store::HotSql;

/// The SQL that creates the records table and its indexes (idempotent:
/// `IF NOT EXISTS` throughout), unqualified: run it with `search_path` set
/// to the schema that holds the table, as [`PostgresStore::migrate`] does.
pub const POSTGRES_SCHEMA: &str = include_str!("schema.sql");

/// The table [`POSTGRES_SCHEMA`] creates.
pub const POSTGRES_TABLE: &str = "idempotency_records";

/// Connections a store's pool opens at most, unless
/// [`PostgresStoreBuilder::max_connections`] says otherwise: a Lambda instance
/// serves one request at a time, so a few cover a sweeper's and a test's
/// concurrency without crowding the server.
const DEFAULT_MAX_CONNECTIONS: usize = 8;

/// How long a request waits for a free connection of the pool.
const POOL_WAIT: Duration = Duration::from_secs(10);

/// A [`Store`](crate::Store) on a PostgreSQL table ([`POSTGRES_SCHEMA`]).
///
/// Cheap to clone: clones share the pool.
///
/// ```no_run
/// use lambda_idempotency::{IdempotencyLayer, PostgresStore};
///
/// # async fn f() -> Result<(), lambda_idempotency::Error> {
/// let store = PostgresStore::builder("postgres://app@db.internal:5432/orders?sslmode=require")
///     .connect()
///     .await?;
/// store.check_schema().await?; // or store.migrate() once, at deploy time
/// let layer = IdempotencyLayer::new(store);
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    /// The PostgreSQL schema that holds the table.
    schema: Arc<str>,
    /// `"schema"."idempotency_records"`, quoted.
    table: Arc<str>,
    sql: Arc<HotSql>,
    /// `host:port/database as user`, for messages.
    label: Arc<str>,
    /// How long a new connection may take (the pool's create timeout).
    connect_timeout: Duration,
    max_response_bytes: usize,
    round_trips: Arc<AtomicU64>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.table)
            .field("server", &self.label)
            .finish()
    }
}

/// Quote an identifier for SQL text.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Options of a [`PostgresStore`]: see [`PostgresStore::builder`].
#[derive(Clone)]
pub struct PostgresStoreBuilder {
    url: String,
    schema: String,
    max_connections: usize,
    max_response_bytes: usize,
    /// As set; `None`: the URL's `connect_timeout`, or the store's limit.
    connect_timeout: Option<Duration>,
}

impl std::fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: not printed.
        f.debug_struct("PostgresStoreBuilder")
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl PostgresStoreBuilder {
    /// Keep the table in the PostgreSQL schema `schema` instead of `public`
    /// (created by [`PostgresStore::migrate`] when missing).
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// How long a new connection may take, TCP, TLS, startup and
    /// authentication together, before the operation fails as
    /// [`ErrorKind::StoreUnavailable`] (a 503). Default: the URL's
    /// `connect_timeout` (whole seconds, as libpq reads it), or else
    /// `IDEMPOTENCY_STORE_TIMEOUT_MS`, 450 ms when unset
    /// (docs/DESIGN.md, "Failing fast").
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Open at most `connections` connections (default 8).
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections.max(1);
        self
    }

    /// Keep responses up to `bytes` (body after compression plus headers;
    /// default [`DEFAULT_MAX_RESPONSE_BYTES`], the same limit as DynamoDB's,
    /// so a function behaves the same on either). Larger ones complete with
    /// a problem marker instead.
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// The store, connecting on first use: the URL is parsed and the pool
    /// built, but nothing is sent, so an unreachable server shows up as
    /// [`ErrorKind::StoreUnavailable`] on the first operation.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`] when the URL is not a valid PostgreSQL
    /// URL, its TLS roots cannot be read, or (without a `connect_timeout`
    /// in the URL) `IDEMPOTENCY_STORE_TIMEOUT_MS` is not a number of
    /// milliseconds.
    pub fn open(self) -> Result<PostgresStore, Error> {
        let mut target = connect::parse(&self.url)?;
        let tls = connect::tls_connector(&target)?;
        // How long a new connection may take before the store reports the
        // server unreachable (a 503): the URL's `connect_timeout` (whole
        // seconds, as libpq reads it), or the store's limit
        // (IDEMPOTENCY_STORE_TIMEOUT_MS, default 450 ms). The driver's
        // connect_timeout bounds each TCP connection only; the pool's
        // bounds the whole of a new connection (TLS, startup,
        // authentication), which a silent server would otherwise hold
        // until Lambda's timeout.
        let create = match (self.connect_timeout, target.config.get_connect_timeout()) {
            (Some(timeout), _) | (None, Some(&timeout)) => timeout,
            (None, None) => crate::settings::store_timeout_from_env()?,
        };
        target.config.connect_timeout(create);
        let manager = Manager::from_config(
            target.config,
            tls,
            ManagerConfig {
                // No statement on check-out: the pool only drops connections
                // the driver saw close.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(self.max_connections)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(create))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::InvalidConfig,
                    format!("building the PostgreSQL connection pool: {err}"),
                    err,
                )
            })?;
        let table = format!("{}.{}", quote_ident(&self.schema), POSTGRES_TABLE);
        Ok(PostgresStore {
            pool,
            schema: Arc::from(self.schema),
            sql: Arc::new(HotSql::for_table(&table)),
            table: Arc::from(table),
            label: Arc::from(target.label),
            connect_timeout: create,
            max_response_bytes: self.max_response_bytes,
            round_trips: Arc::default(),
        })
    }

    /// The store, connected: as [`open`](Self::open), then one connection
    /// is opened and checked out of the pool, so a function can fail at
    /// start, naming the server, when it cannot be reached. The table is
    /// not looked at: [`PostgresStore::check_schema`] does that.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open); [`ErrorKind::StoreUnavailable`] naming the
    /// server when no connection can be opened.
    pub async fn connect(self) -> Result<PostgresStore, Error> {
        let store = self.open()?;
        // Checked out and given back to the pool, open, for the first
        // operation.
        drop(store.client("connect").await?);
        Ok(store)
    }
}

impl PostgresStore {
    /// Options for a store on the table in schema `public` of the database
    /// `url` names (`postgres://` or `postgresql://`; user, password, host,
    /// port, database and `sslmode` honoured as libpq does, `sslrootcert`
    /// for the CA bundle of `verify-ca` / `verify-full`). Nothing is parsed
    /// or sent until [`open`](PostgresStoreBuilder::open) or
    /// [`connect`](PostgresStoreBuilder::connect).
    pub fn builder(url: impl Into<String>) -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            connect_timeout: None,
            url: url.into(),
            schema: "public".to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// The connection pool, for the application's own queries.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The table, schema-qualified and quoted as SQL text uses it.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Statements this store sent to the server so far (each one round
    /// trip; a transaction's `BEGIN` and `COMMIT` count too; opening a
    /// connection does not).
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    /// Create the schema (when not `public`), the table and its indexes
    /// when missing, in one transaction under a transaction-scoped advisory
    /// lock, so any number of cold starts may run it at once on an empty
    /// database. Needs the privilege to create them; the functions' own
    /// role need not have it when this runs at deploy time.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::StoreUnavailable`] when the server cannot be reached or
    /// refuses a statement (permissions).
    pub async fn migrate(&self) -> Result<(), Error> {
        let mut client = self.client("migrate").await?;
        let fail = |err| self.failed("migrate", err);
        self.count();
        let tx = client.transaction().await.map_err(fail)?;
        // One lock per schema: concurrent creations of the same objects
        // wait for each other instead of racing on the catalog.
        let lock_key = format!("lambda-idempotency:{}", self.schema);
        self.count();
        tx.query_typed(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[(&lock_key, Type::TEXT)],
        )
        .await
        .map_err(fail)?;
        let schema = quote_ident(&self.schema);
        // Transaction-scoped search path: nothing outlives the transaction.
        self.count();
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; SET LOCAL search_path TO {schema}; {POSTGRES_SCHEMA}"
        ))
        .await
        .map_err(fail)?;
        self.count();
        tx.commit().await.map_err(fail)?;
        tracing::info!(table = %self.table, server = %self.label, "idempotency schema ready");
        Ok(())
    }

    /// Check at start-up that the table exists, so a function without its
    /// schema fails at once with what to do, not on its first request.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`] when the table is missing;
    /// [`ErrorKind::StoreUnavailable`] when the server cannot be reached.
    pub async fn check_schema(&self) -> Result<(), Error> {
        let rows = self
            .query(
                "check schema",
                "SELECT to_regclass($1) IS NOT NULL AS present",
                &[(&self.table.to_string(), Type::TEXT)],
            )
            .await?;
        let present = rows
            .first()
            .and_then(|row| row.try_get::<_, bool>("present").ok())
            .unwrap_or(false);
        if present {
            Ok(())
        } else {
            Err(self.missing_table())
        }
    }

    fn missing_table(&self) -> Error {
        Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "the idempotency table {} does not exist in PostgreSQL {}: run migrate \
                 (PostgresStore::migrate) or set IDEMPOTENCY_CREATE_SCHEMA=1",
                self.table, self.label
            ),
        )
    }

    async fn client(&self, op: &str) -> Result<deadpool_postgres::Object, Error> {
        self.pool.get().await.map_err(|err| {
            let detail = match &err {
                // The driver's message, and its cause (a TLS handshake's
                // reason, say): never the password, which it does not print.
                deadpool_postgres::PoolError::Backend(e) => match std::error::Error::source(e) {
                    Some(cause) => format!("{e}: {cause}"),
                    None => e.to_string(),
                },
                deadpool_postgres::PoolError::Timeout(deadpool_postgres::TimeoutType::Create) => {
                    format!(
                        "no answer within {} ms of connecting (the server accepts connections \
                         but does not answer them: overloaded, or not PostgreSQL; a slower \
                         server needs the URL's connect_timeout, in seconds)",
                        self.connect_timeout.as_millis()
                    )
                }
                deadpool_postgres::PoolError::Timeout(_) => format!(
                    "no connection within {}s (the server is slow to accept, or every \
                     connection is busy)",
                    POOL_WAIT.as_secs()
                ),
                other => other.to_string(),
            };
            Error::with_source(
                ErrorKind::StoreUnavailable,
                format!(
                    "PostgreSQL {op}: cannot connect to {}: {detail}; check that the server is \
                     up and reachable from here (VPC, security group, RDS Proxy) and the URL's \
                     host, port, database, user, sslmode and sslrootcert",
                    self.label
                ),
                err,
            )
        })
    }

    /// An error of a statement: a missing table says what to do; anything
    /// else is the store being unavailable.
    fn failed(&self, op: &str, err: tokio_postgres::Error) -> Error {
        use tokio_postgres::error::SqlState;
        if err.code() == Some(&SqlState::UNDEFINED_TABLE) {
            return self.missing_table();
        }
        if err.code() == Some(&SqlState::NUMERIC_VALUE_OUT_OF_RANGE) {
            // The statements' only arithmetic is the claim's `attempt + 1`:
            // a row no retry can ever claim, not a server to wait for.
            return Error::with_source(
                ErrorKind::CorruptRecord,
                format!(
                    "PostgreSQL {op} on {}: the record's {} ({}); was the row written by \
                     something other than lambda-idempotency? `lambda-idempotency release` \
                     removes it",
                    self.table,
                    crate::store::rules::ATTEMPT_EXHAUSTED,
                    err.as_db_error().map_or("", |db| db.message()),
                ),
                err,
            );
        }
        let detail = match err.as_db_error() {
            Some(db) if db.code() == &SqlState::LOCK_NOT_AVAILABLE => format!(
                "the record's row stayed locked by another transaction for longer than \
                 lock_timeout ({} s): {} ({}); retry later",
                LOCK_TIMEOUT.as_secs(),
                db.message(),
                db.code().code()
            ),
            Some(db) if db.code() == &SqlState::QUERY_CANCELED => format!(
                "the statement ran past statement_timeout ({} s) and was cancelled: {} ({}); \
                 retry later",
                STATEMENT_TIMEOUT.as_secs(),
                db.message(),
                db.code().code()
            ),
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => err.to_string(),
        };
        Error::with_source(
            ErrorKind::StoreUnavailable,
            format!(
                "PostgreSQL {op} on {} at {} failed: {detail}",
                self.table, self.label
            ),
            err,
        )
    }

    /// One statement, one round trip, on a pooled connection. A pooled
    /// connection can be dead without the driver knowing yet (the server or
    /// a proxy closed it while the Lambda sandbox was frozen): a statement
    /// that finds its connection lost is sent once more on a new one. Every
    /// statement sent here may be repeated: a repeated claim finds its own
    /// claim (rule 3), a repeated completion its own completion, a repeated
    /// release an absent record, a repeated recovery point writes the same,
    /// reads are reads; a repeated resolution of a stuck record finds it
    /// resolved and reports `Fenced` (a count off by one, nothing written).
    async fn query(
        &self,
        op: &str,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        let client = self.client(op).await?;
        self.count();
        match limited(&client, sql, params).await {
            Err(err) if connection_lost(&err) => {
                // Dropped first: the pool discards a closed connection.
                drop(client);
                tracing::warn!(op, server = %self.label, error = %err, "PostgreSQL connection lost; the statement is sent again on a new one");
                let client = self.client(op).await?;
                self.count();
                limited(&client, sql, params)
                    .await
                    .map_err(|err| self.failed(op, err))
            }
            result => result.map_err(|err| self.failed(op, err)),
        }
    }
}

/// How long a statement waits for a row another transaction holds locked
/// (a takeover behind a transactional completion, an operator's session)
/// before the server gives up: the claim then answers `StoreUnavailable`
/// (a 503 to retry) well before the Lambda deadline, instead of waiting on.
const LOCK_TIMEOUT: Duration = Duration::from_secs(3);

/// How long any statement may run on the server.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The limits, for the current transaction only (`SET LOCAL`): no session
/// state, so a transaction-pooling proxy (RDS Proxy, PgBouncer) hands the
/// connection on unchanged.
fn set_limits() -> String {
    format!(
        "SET LOCAL lock_timeout = {}; SET LOCAL statement_timeout = {}",
        LOCK_TIMEOUT.as_millis(),
        STATEMENT_TIMEOUT.as_millis()
    )
}

/// One statement under [`LOCK_TIMEOUT`] and [`STATEMENT_TIMEOUT`]: `BEGIN`
/// and the limits, the statement, `COMMIT`, pipelined (sent together, in
/// this order: `biased` polls them in turn, and the driver sends each
/// request when first polled), so still one round trip. A failed statement
/// aborts the transaction, and the `COMMIT` then ends it.
async fn limited(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let begin = format!("BEGIN; {}", set_limits());
    let (begun, rows, committed) = tokio::join!(
        biased;
        client.batch_execute(&begin),
        client.query_typed(sql, params),
        client.batch_execute("COMMIT"),
    );
    begun?;
    let rows = rows?;
    committed?;
    Ok(rows)
}

/// Did `err` find the connection closed or broken (rather than the server
/// refusing the statement)?
fn connection_lost(err: &tokio_postgres::Error) -> bool {
    err.is_closed()
        || std::error::Error::source(err).is_some_and(|source| source.is::<std::io::Error>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
