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

mod connect;
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
use crate::record::{decode_body, Checkpoint, Record, Status, StoredBody, StoredResponse};
use crate::store::{
    claimable, fit, lease_ended_at, own_claim, resolver_owner, ClaimOutcome, ClaimRequest,
    Completion, DeferredWrites, Fitted, Lease, RecordPage, Resolution, Resolve, Store,
    StoredRecord, StuckPage, StuckRecord, SweepCursor, DEFAULT_MAX_RESPONSE_BYTES,
};

/// The SQL that creates the records table and its indexes (idempotent:
/// `IF NOT EXISTS` throughout), unqualified: run it with `search_path` set
/// to the schema that holds the table, as [`PostgresStore::migrate`] does.
pub const POSTGRES_SCHEMA: &str = include_str!("schema.sql");

/// The table [`POSTGRES_SCHEMA`] creates.
pub const POSTGRES_TABLE: &str = "idempotency_records";

/// Connections a store's pool opens at most, unless
/// [`PostgresStore::max_connections`] says otherwise: a Lambda instance
/// serves one request at a time, so a few cover a sweeper's and a test's
/// concurrency without crowding the server.
const DEFAULT_MAX_CONNECTIONS: usize = 8;

/// How long a request waits for a free connection of the pool.
const POOL_WAIT: Duration = Duration::from_secs(10);

/// Every column of a record, as the decoder reads them.
const COLUMNS: &str = "id, status, fingerprint, attempt, owner, lease_expires_at, expires_at, \
     response_status, response_header_names, response_header_values, response_body, \
     response_body_kind, response_encoding, checkpoint::text AS checkpoint";

/// A [`Store`] on a PostgreSQL table ([`POSTGRES_SCHEMA`]). Cheap to clone:
/// clones share the pool.
///
/// - **Claim**: one `INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE
///   <expired, or abandoned by the same request>` that returns either the
///   new attempt or, when the claim loses, the existing row: one round trip.
/// - **Complete, release, recovery points**: `UPDATE`/`DELETE` fenced on
///   `status`, `attempt` and `owner`.
/// - **Transactional completion**: the handler's own statements
///   ([`PgWrite`], handed to
///   [`IdempotencyContext::defer_write`](crate::IdempotencyContext::defer_write))
///   commit in the same transaction as the fenced completion.
/// - **Expiry**: a claim treats a row past `expires_at` as absent;
///   [`delete_expired`](Self::delete_expired) removes such rows in bounded
///   batches.
///
/// ```no_run
/// use lambda_idempotency::{IdempotencyLayer, PostgresStore};
///
/// # async fn f() -> Result<(), lambda_idempotency::Error> {
/// let store = PostgresStore::from_url("postgres://app@db.internal:5432/orders?sslmode=require")?;
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

impl PostgresStore {
    /// A store on the table in schema `public` of the database `url` names
    /// (`postgres://` or `postgresql://`; user, password, host, port,
    /// database and `sslmode` honoured as libpq does, `sslrootcert` for the
    /// CA bundle of `verify-ca` / `verify-full`). Connections are opened
    /// lazily, on first use.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`] when the URL is not a valid PostgreSQL
    /// URL, or its TLS roots cannot be read.
    pub fn from_url(url: &str) -> Result<Self, Error> {
        let target = connect::parse(url)?;
        let tls = connect::tls_connector(&target)?;
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
            .max_size(DEFAULT_MAX_CONNECTIONS)
            .wait_timeout(Some(POOL_WAIT))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::InvalidConfig,
                    format!("building the PostgreSQL connection pool: {err}"),
                    err,
                )
            })?;
        Ok(Self::with_pool(pool, target.label))
    }

    fn with_pool(pool: Pool, label: String) -> Self {
        PostgresStore {
            pool,
            schema: Arc::from("public"),
            table: Arc::from(format!("{}.{}", quote_ident("public"), POSTGRES_TABLE)),
            sql: Arc::new(HotSql::for_table(&format!(
                "{}.{}",
                quote_ident("public"),
                POSTGRES_TABLE
            ))),
            label: Arc::from(label),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            round_trips: Arc::default(),
        }
    }

    /// Keep the table in the PostgreSQL schema `schema` instead of `public`
    /// (created by [`migrate`](Self::migrate) when missing).
    pub fn with_schema(mut self, schema: &str) -> Self {
        self.schema = Arc::from(schema);
        self.table = Arc::from(format!("{}.{}", quote_ident(schema), POSTGRES_TABLE));
        self.sql = Arc::new(HotSql::for_table(&self.table));
        self
    }

    /// Open at most `connections` connections (default 8).
    pub fn max_connections(self, connections: usize) -> Self {
        self.pool.resize(connections.max(1));
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

    /// Delete up to `limit` records expired before `now_s` (epoch seconds),
    /// oldest first, skipping rows another transaction holds; returns how
    /// many went. Expired records are absent to every claim already: this
    /// only gives their space back. Call it from a schedule (the sweeper's)
    /// until it returns less than `limit`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::StoreUnavailable`] when the server cannot be reached.
    pub async fn delete_expired(&self, now_s: u64, limit: usize) -> Result<u64, Error> {
        let sql = format!(
            "WITH gone AS ( \
               DELETE FROM {t} WHERE id IN ( \
                 SELECT id FROM {t} WHERE expires_at < $1 \
                 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
               AND expires_at < $1 RETURNING 1) \
             SELECT count(*) AS deleted FROM gone",
            t = self.table
        );
        let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX);
        let rows = self
            .query(
                "delete expired",
                &sql,
                &[(&to_i64(now_s), Type::INT8), (&limit, Type::INT8)],
            )
            .await?;
        let deleted: i64 = rows
            .first()
            .map(|row| row.try_get("deleted"))
            .transpose()
            .map_err(|err| corrupt("(delete expired)", &err.to_string()))?
            .unwrap_or(0);
        Ok(u64::try_from(deleted).unwrap_or(0))
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

    /// `head` (the fenced completion or recovery point) and the handler's
    /// writes in one transaction. A connection found lost at `BEGIN` (nothing
    /// sent yet) starts the transaction again on a new one (see `query`).
    async fn transaction_with_writes(
        &self,
        lease: &Lease,
        head: TxHead<'_>,
        writes: DeferredWrites,
    ) -> Result<(), Error> {
        let writes = writes.into_typed::<PgWrite>()?;
        let fence = Fence::of(lease);
        let op = head.op();
        let mut client = self.client(op).await?;
        match self
            .transactional(&mut client, lease, &fence, &head, &writes)
            .await
        {
            Ok(()) => Ok(()),
            Err(TxFailure::Failed(err)) => Err(err),
            Err(TxFailure::LostAtBegin(err)) => {
                drop(client);
                tracing::warn!(op, server = %self.label, error = %err, "PostgreSQL connection lost; the transaction starts again on a new one");
                let mut client = self.client(op).await?;
                self.transactional(&mut client, lease, &fence, &head, &writes)
                    .await
                    .map_err(|failure| match failure {
                        TxFailure::Failed(err) => err,
                        TxFailure::LostAtBegin(err) => self.failed(op, err),
                    })
            }
        }
    }

    /// `head` and the handler's writes in one transaction on `client`.
    async fn transactional(
        &self,
        client: &mut deadpool_postgres::Object,
        lease: &Lease,
        fence: &Fence,
        head: &TxHead<'_>,
        writes: &[PgWrite],
    ) -> Result<(), TxFailure> {
        let fail = |err| TxFailure::Failed(self.failed(head.op(), err));
        self.count();
        let tx = match client.transaction().await {
            Ok(tx) => tx,
            Err(err) if connection_lost(&err) => return Err(TxFailure::LostAtBegin(err)),
            Err(err) => return Err(fail(err)),
        };
        // The fenced update of the record first: its row lock holds every
        // takeover off until the transaction ends, so the writes commit only
        // under this attempt. The limits go with it (pipelined, no round
        // trip of their own).
        self.count();
        let limits = set_limits();
        let updated = match head {
            TxHead::Completion(params) => {
                let completion_params = completion_params(fence, params);
                let (limited, updated) = tokio::join!(
                    biased;
                    tx.batch_execute(&limits),
                    tx.query_typed(&self.sql.complete, &completion_params),
                );
                limited.map_err(fail)?;
                updated
            }
            .map_err(fail)?
            .first()
            .map(|row| column::<bool>(row, &lease.record_id, "updated"))
            .transpose()
            .map_err(TxFailure::Failed)?
            .unwrap_or(false),
            TxHead::RecoveryPoint { json, .. } => {
                let params: [(&(dyn ToSql + Sync), Type); 4] = [
                    (&fence.id, Type::TEXT),
                    (&fence.attempt, Type::INT8),
                    (&fence.owner, Type::TEXT),
                    (json, Type::TEXT),
                ];
                let (limited, updated) = tokio::join!(
                    biased;
                    tx.batch_execute(&limits),
                    tx.query_typed(&self.sql.checkpoint, &params),
                );
                limited.map_err(fail)?;
                updated.map_err(fail)?.len() == 1
            }
        };
        if !updated {
            self.count();
            let _ = tx.rollback().await;
            return Err(TxFailure::Failed(Error::fenced(
                &lease.record_id,
                lease.attempt,
            )));
        }
        let what = head.what(&lease.record_id);
        let total = writes.len();
        for (i, write) in writes.iter().enumerate() {
            let params: Vec<(&(dyn ToSql + Sync), Type)> = write
                .params
                .iter()
                .map(|(value, ty)| (&**value as &(dyn ToSql + Sync), ty.clone()))
                .collect();
            self.count();
            let cancelled = match tx.execute_typed(&write.sql, &params).await {
                Ok(rows) if rows >= write.min_rows => continue,
                Ok(rows) => Error::new(
                    ErrorKind::TransactionCancelled,
                    format!(
                        "deferred write {i} of {total} changed {rows} row(s), fewer than the {} \
                         it requires; {what} and every write were rolled back, nothing was \
                         written",
                        write.min_rows
                    ),
                ),
                Err(err) => statement_error(err, i, total, &what, &self.label),
            };
            self.count();
            let _ = tx.rollback().await;
            return Err(TxFailure::Failed(cancelled));
        }
        self.count();
        tx.commit().await.map_err(|err| match commit_refused(&err) {
            // The server answered the COMMIT with a rollback (a deferred
            // constraint, a serialisation failure): nothing committed, so
            // this is as definite as a cancelled write.
            Some(summary) => TxFailure::Failed(Error::with_source(
                ErrorKind::TransactionCancelled,
                format!(
                    "PostgreSQL at {} rolled back {} and the handler's {total} write(s) at                      COMMIT: {summary}; nothing was written",
                    self.label,
                    head.what(&lease.record_id)
                ),
                err,
            )),
            // Anything else (the connection lost): whether it committed is
            // unknown.
            None => fail(err),
        })
    }
}

/// What a transaction with the handler's writes commits first, fenced.
enum TxHead<'a> {
    /// The completion with this response.
    Completion(&'a ResponseParams),
    /// The recovery point `name`, as stored (see [`checkpoint_json`]).
    RecoveryPoint { name: &'a str, json: String },
}

impl TxHead<'_> {
    /// The operation, for messages and logs.
    fn op(&self) -> &'static str {
        match self {
            TxHead::Completion(_) => "transactional complete",
            TxHead::RecoveryPoint { .. } => "transactional recovery point",
        }
    }

    /// What was rolled back, for messages.
    fn what(&self, record_id: &str) -> String {
        match self {
            TxHead::Completion(_) => format!("the completion of record {record_id}"),
            TxHead::RecoveryPoint { name, .. } => {
                format!("the recovery point `{name}` of record {record_id}")
            }
        }
    }
}

/// The hot path's statements, written once per store.
#[derive(Debug)]
struct HotSql {
    claim: String,
    complete: String,
    release: String,
    checkpoint: String,
}

impl HotSql {
    fn for_table(t: &str) -> Self {
        HotSql {
            claim: Self::claim(t),
            complete: Self::complete(t),
            release: Self::release(t),
            checkpoint: Self::checkpoint(t),
        }
    }

    fn claim(t: &str) -> String {
        format!(
            "WITH claimed AS ( \
               INSERT INTO {t} AS r (id, status, fingerprint, attempt, owner, lease_expires_at, expires_at) \
               VALUES ($1, 'IN_PROGRESS', $2, 1, $3, $4, $5) \
               ON CONFLICT (id) DO UPDATE SET \
                 status = 'IN_PROGRESS', fingerprint = EXCLUDED.fingerprint, \
                 attempt = r.attempt + 1, owner = EXCLUDED.owner, \
                 lease_expires_at = EXCLUDED.lease_expires_at, expires_at = EXCLUDED.expires_at, \
                 response_status = NULL, response_header_names = NULL, \
                 response_header_values = NULL, response_body = NULL, \
                 response_body_kind = NULL, response_encoding = NULL, \
                 checkpoint = CASE WHEN r.expires_at < $6 THEN NULL ELSE r.checkpoint END \
               WHERE r.expires_at < $6 \
                  OR (r.status = 'IN_PROGRESS' AND r.lease_expires_at < $7 \
                      AND r.fingerprint = EXCLUDED.fingerprint) \
               RETURNING {COLUMNS}) \
             SELECT true AS claimed, {COLUMNS} FROM claimed \
             UNION ALL \
             SELECT false AS claimed, {COLUMNS} FROM {t} \
             WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM claimed)",
        )
    }

    /// The completion's fenced update, `$1`..`$10`; in a CTE returning
    /// `updated`, with `ours` telling whether the record is already
    /// completed by this very lease.
    fn complete(t: &str) -> String {
        format!(
            "WITH done AS ( \
               UPDATE {t} SET status = 'COMPLETED', expires_at = $4, response_status = $5, \
                 response_header_names = $6, response_header_values = $7, response_body = $8, \
                 response_body_kind = $9, response_encoding = $10, checkpoint = NULL \
               WHERE id = $1 AND status = 'IN_PROGRESS' AND attempt = $2 AND owner = $3 \
               RETURNING 1) \
             SELECT EXISTS (SELECT 1 FROM done) AS updated, \
                    EXISTS (SELECT 1 FROM {t} WHERE id = $1 AND status = 'COMPLETED' \
                            AND attempt = $2 AND owner = $3) AS ours, \
                    EXISTS (SELECT 1 FROM {t} WHERE id = $1) AS present",
        )
    }

    /// Rule 4: deleted without a recovery point, else kept with its lease
    /// ended at `$4`.
    fn release(t: &str) -> String {
        format!(
            "WITH gone AS ( \
               DELETE FROM {t} WHERE id = $1 AND status = 'IN_PROGRESS' AND attempt = $2 \
               AND owner = $3 AND checkpoint IS NULL RETURNING 1), \
             ended AS ( \
               UPDATE {t} SET lease_expires_at = LEAST(lease_expires_at, $4) \
               WHERE id = $1 AND status = 'IN_PROGRESS' AND attempt = $2 AND owner = $3 \
               AND checkpoint IS NOT NULL RETURNING 1) \
             SELECT EXISTS (SELECT 1 FROM gone) OR EXISTS (SELECT 1 FROM ended) AS deleted, \
                    EXISTS (SELECT 1 FROM {t} WHERE id = $1) AS present",
        )
    }

    fn checkpoint(t: &str) -> String {
        format!(
            "UPDATE {t} SET checkpoint = $4::text::jsonb \
             WHERE id = $1 AND status = 'IN_PROGRESS' AND attempt = $2 AND owner = $3 \
             RETURNING 1",
        )
    }
}

/// A response as the completion writes it: `$4`..`$10` of
/// [`PostgresStore::complete_sql`].
struct ResponseParams {
    expires_at: i64,
    status: i32,
    header_names: Vec<String>,
    header_values: Vec<Vec<u8>>,
    body: Option<Vec<u8>>,
    kind: &'static str,
    encoding: Option<&'static str>,
}

impl ResponseParams {
    fn new(fitted: &Fitted<'_>, expires_at_s: u64) -> Self {
        let response = &fitted.response;
        ResponseParams {
            expires_at: to_i64(expires_at_s),
            status: i32::from(response.status),
            header_names: response.headers.iter().map(|(n, _)| n.clone()).collect(),
            header_values: response.headers.iter().map(|(_, v)| v.clone()).collect(),
            body: (!fitted.body.is_empty()).then(|| fitted.body.to_vec()),
            kind: response.body.kind(),
            encoding: fitted.gzip.then_some("gzip"),
        }
    }
}

/// The fence of a lease: `$1` id, `$2` attempt, `$3` owner.
struct Fence {
    id: String,
    attempt: i64,
    owner: String,
}

impl Fence {
    fn of(lease: &Lease) -> Self {
        Fence {
            id: lease.record_id.clone(),
            attempt: to_i64(lease.attempt),
            owner: lease.owner.clone(),
        }
    }

    fn of_stuck(record: &StuckRecord) -> Self {
        Fence {
            id: record.id.clone(),
            attempt: to_i64(record.attempt),
            owner: record.owner.clone(),
        }
    }
}

/// `$1`..`$10` of the completion statement.
fn completion_params<'a>(
    fence: &'a Fence,
    response: &'a ResponseParams,
) -> [(&'a (dyn ToSql + Sync), Type); 10] {
    [
        (&fence.id, Type::TEXT),
        (&fence.attempt, Type::INT8),
        (&fence.owner, Type::TEXT),
        (&response.expires_at, Type::INT8),
        (&response.status, Type::INT4),
        (&response.header_names, Type::TEXT_ARRAY),
        (&response.header_values, Type::BYTEA_ARRAY),
        (&response.body, Type::BYTEA),
        (&response.kind, Type::TEXT),
        (&response.encoding, Type::TEXT),
    ]
}

/// How a transactional completion failed.
enum TxFailure {
    /// The connection was found lost at `BEGIN`: nothing was sent.
    LostAtBegin(tokio_postgres::Error),
    /// Anything else, as the caller reports it.
    Failed(Error),
}

/// The server's own refusal of a COMMIT, which rolled the transaction back:
/// an integrity constraint checked at commit (class 23) or a transaction
/// rollback (class 40: serialisation failure, deadlock). `None` for anything
/// that leaves the outcome unknown.
fn commit_refused(err: &tokio_postgres::Error) -> Option<String> {
    let db = err.as_db_error()?;
    let code = db.code().code();
    (code.starts_with("23") || code.starts_with("40")).then(|| format!("{} ({code})", db.message()))
}

/// Did `err` find the connection closed or broken (rather than the server
/// refusing the statement)?
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

fn connection_lost(err: &tokio_postgres::Error) -> bool {
    err.is_closed()
        || std::error::Error::source(err).is_some_and(|source| source.is::<std::io::Error>())
}

fn corrupt(record_id: &str, what: &str) -> Error {
    Error::new(
        ErrorKind::CorruptRecord,
        format!(
            "idempotency record {record_id} cannot be read: {what}; was the row written by \
             something other than lambda-idempotency?"
        ),
    )
}

/// What a stuck-record statement did, from the boolean columns of its one
/// row: the resolution of the first flag that is true, else fenced (the
/// record was no longer the attempt the listing saw). `what` names the
/// statement for the message when no row came back.
fn flagged_resolution(
    rows: &[Row],
    id: &str,
    what: &str,
    flags: [(&str, Resolution); 2],
) -> Result<Resolution, Error> {
    let row = rows
        .first()
        .ok_or_else(|| corrupt(id, &format!("{what} returned nothing")))?;
    for (name, resolution) in flags {
        if column::<bool>(row, id, name)? {
            return Ok(resolution);
        }
    }
    Ok(Resolution::Fenced)
}

fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    id: &str,
    name: &str,
) -> Result<T, Error> {
    row.try_get(name)
        .map_err(|err| corrupt(id, &format!("column {name}: {err}")))
}

fn unsigned(value: i64, id: &str, name: &str) -> Result<u64, Error> {
    u64::try_from(value).map_err(|_| corrupt(id, &format!("{name} is negative")))
}

/// A recovery point as stored (JSON text of `{"name", "data", "attempt"}`).
fn checkpoint_json(checkpoint: &Checkpoint) -> String {
    serde_json::json!({
        "name": checkpoint.name,
        "data": checkpoint.data,
        "attempt": checkpoint.attempt,
    })
    .to_string()
}

/// A row of [`COLUMNS`] as a record.
fn decode(row: &Row) -> Result<Record, Error> {
    let id: String = column(row, "(unknown)", "id")?;
    let status: String = column(row, &id, "status")?;
    let status = Status::parse(&status)
        .ok_or_else(|| corrupt(&id, &format!("unknown status `{status}`")))?;
    let response = match column::<Option<i32>>(row, &id, "response_status")? {
        None if status == Status::Completed => {
            return Err(corrupt(&id, "completed without a response"))
        }
        None => None,
        Some(code) => {
            let code = u16::try_from(code)
                .map_err(|_| corrupt(&id, &format!("response status {code}")))?;
            let names: Vec<String> =
                column::<Option<_>>(row, &id, "response_header_names")?.unwrap_or_default();
            let values: Vec<Vec<u8>> =
                column::<Option<_>>(row, &id, "response_header_values")?.unwrap_or_default();
            if names.len() != values.len() {
                return Err(corrupt(&id, "header names and values differ in number"));
            }
            let bytes: Vec<u8> =
                column::<Option<_>>(row, &id, "response_body")?.unwrap_or_default();
            let gzip = match column::<Option<String>>(row, &id, "response_encoding")?.as_deref() {
                None => false,
                Some("gzip") => true,
                Some(other) => return Err(corrupt(&id, &format!("unknown encoding `{other}`"))),
            };
            let bytes =
                decode_body(bytes, gzip).ok_or_else(|| corrupt(&id, "the body does not decode"))?;
            let kind: Option<String> = column(row, &id, "response_body_kind")?;
            let body = StoredBody::from_parts(kind.as_deref().unwrap_or("empty"), bytes)
                .ok_or_else(|| corrupt(&id, "unknown body kind or a text body not UTF-8"))?;
            Some(StoredResponse::new(
                code,
                names.into_iter().zip(values).collect(),
                body,
            ))
        }
    };
    let checkpoint = match column::<Option<String>>(row, &id, "checkpoint")? {
        None => None,
        Some(text) => {
            let value: serde_json::Value = serde_json::from_str(&text)
                .map_err(|err| corrupt(&id, &format!("checkpoint: {err}")))?;
            match (value["name"].as_str(), value["attempt"].as_u64()) {
                (Some(name), Some(attempt)) => Some(Checkpoint {
                    name: name.to_owned(),
                    data: value["data"].clone(),
                    attempt,
                }),
                _ => return Err(corrupt(&id, "checkpoint lacks its name or attempt")),
            }
        }
    };
    Ok(Record {
        status,
        fingerprint: column(row, &id, "fingerprint")?,
        attempt: unsigned(column(row, &id, "attempt")?, &id, "attempt")?,
        owner: column(row, &id, "owner")?,
        lease_expires_at_ms: unsigned(
            column(row, &id, "lease_expires_at")?,
            &id,
            "lease_expires_at",
        )?,
        expires_at_s: unsigned(column(row, &id, "expires_at")?, &id, "expires_at")?,
        response,
        checkpoint,
        id,
    })
}

/// The keyset cursor of a stuck listing: the last row's lease end and id.
fn stuck_cursor(lease_ms: u64, id: &str) -> SweepCursor {
    SweepCursor(format!("{lease_ms}:{id}"))
}

fn parse_stuck_cursor(cursor: &SweepCursor) -> Result<(i64, String), Error> {
    cursor
        .0
        .split_once(':')
        .and_then(|(lease, id)| Some((lease.parse().ok()?, id.to_owned())))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "sweep cursor {:?} was not made by a PostgresStore listing; start again \
                     without one",
                    cursor.0
                ),
            )
        })
}

/// What [`Store::get`] and [`Store::scan`] return: the record and its size
/// as PostgreSQL stores the row (`pg_column_size`, after its own
/// compression); PostgreSQL bills no write units.
fn sized(row: &Row) -> Result<StoredRecord, Error> {
    let record = decode(row)?;
    let size: Option<i32> = column(row, &record.id, "size_bytes")?;
    Ok(StoredRecord {
        size_bytes: size.and_then(|s| u64::try_from(s).ok()),
        write_units: None,
        record,
    })
}

#[async_trait::async_trait]
impl Store for PostgresStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
        let now_s = to_i64(request.now_ms / 1000);
        let now_ms = to_i64(request.now_ms);
        let lease = to_i64(request.lease_expires_at_ms);
        let expires = to_i64(request.expires_at_s);
        // A statement sees the rows committed when it started: a claim that
        // raced a concurrent first claim of the same id (its insert waited
        // for that one's commit) finds no row it can see, and one that raced
        // a completion may see the record as it was. Both look again: the
        // next statement sees the commit. Each round is a real change by
        // someone else, so three are plenty.
        for _ in 0..3 {
            let rows = self
                .query(
                    "claim",
                    &self.sql.claim,
                    &[
                        (&request.record_id, Type::TEXT),
                        (&request.fingerprint, Type::TEXT),
                        (&request.owner, Type::TEXT),
                        (&lease, Type::INT8),
                        (&expires, Type::INT8),
                        (&now_s, Type::INT8),
                        (&now_ms, Type::INT8),
                    ],
                )
                .await?;
            let Some(row) = rows.first() else { continue };
            let claimed: bool = column(row, &request.record_id, "claimed")?;
            let record = decode(row)?;
            if claimed {
                return Ok(ClaimOutcome::Claimed(Lease {
                    record_id: request.record_id.clone(),
                    owner: request.owner.clone(),
                    fingerprint: request.fingerprint.clone(),
                    attempt: record.attempt,
                    // Cleared by a new life, kept by a takeover.
                    recovered: record.checkpoint,
                }));
            }
            if let Some(lease) = own_claim(&record, request) {
                return Ok(ClaimOutcome::Claimed(lease));
            }
            if !claimable(&record, request) {
                return Ok(ClaimOutcome::Exists(record));
            }
        }
        Err(Error::new(
            ErrorKind::StoreUnavailable,
            format!(
                "record {} changed under three claims in a row; retry the request",
                request.record_id
            ),
        ))
    }

    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at_s: u64,
    ) -> Result<Completion, Error> {
        let fitted = fit(response, self.max_response_bytes);
        let params = ResponseParams::new(&fitted, expires_at_s);
        let fence = Fence::of(lease);
        let rows = self
            .query(
                "complete",
                &self.sql.complete,
                &completion_params(&fence, &params),
            )
            .await?;
        let (updated, ours, present) = rows
            .first()
            .map(|row| {
                Ok::<_, Error>((
                    column::<bool>(row, &lease.record_id, "updated")?,
                    column::<bool>(row, &lease.record_id, "ours")?,
                    column::<bool>(row, &lease.record_id, "present")?,
                ))
            })
            .transpose()?
            .unwrap_or((false, false, false));
        if updated || ours {
            // `ours`: this lease's own completion is already there (a retry
            // of a completion whose answer was lost); it stands.
            Ok(fitted.completion)
        } else if !present {
            Err(Error::record_gone(&lease.record_id, lease.attempt))
        } else {
            Err(Error::fenced(&lease.record_id, lease.attempt))
        }
    }

    async fn complete_with_writes(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at_s: u64,
        writes: DeferredWrites,
    ) -> Result<Completion, Error> {
        if writes.is_empty() {
            return self.complete(lease, response, expires_at_s).await;
        }
        let fitted = fit(response, self.max_response_bytes);
        let params = ResponseParams::new(&fitted, expires_at_s);
        self.transaction_with_writes(lease, TxHead::Completion(&params), writes)
            .await?;
        Ok(fitted.completion)
    }

    async fn checkpoint_with_writes(
        &self,
        lease: &Lease,
        checkpoint: &Checkpoint,
        writes: DeferredWrites,
    ) -> Result<(), Error> {
        if writes.is_empty() {
            return self.checkpoint(lease, checkpoint).await;
        }
        let head = TxHead::RecoveryPoint {
            name: &checkpoint.name,
            json: checkpoint_json(checkpoint),
        };
        self.transaction_with_writes(lease, head, writes).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        let fence = Fence::of(lease);
        let ended = to_i64(lease_ended_at());
        let rows = self
            .query(
                "release",
                &self.sql.release,
                &[
                    (&fence.id, Type::TEXT),
                    (&fence.attempt, Type::INT8),
                    (&fence.owner, Type::TEXT),
                    (&ended, Type::INT8),
                ],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| corrupt(&lease.record_id, "the release returned nothing"))?;
        let deleted: bool = column(row, &lease.record_id, "deleted")?;
        let present: bool = column(row, &lease.record_id, "present")?;
        // Absent already (released, swept, expired and cleaned): what a
        // release wants.
        if deleted || !present {
            Ok(())
        } else {
            Err(Error::fenced(&lease.record_id, lease.attempt))
        }
    }

    async fn checkpoint(&self, lease: &Lease, checkpoint: &Checkpoint) -> Result<(), Error> {
        let fence = Fence::of(lease);
        let json = checkpoint_json(checkpoint);
        let updated = self
            .query(
                "checkpoint",
                &self.sql.checkpoint,
                &[
                    (&fence.id, Type::TEXT),
                    (&fence.attempt, Type::INT8),
                    (&fence.owner, Type::TEXT),
                    (&json, Type::TEXT),
                ],
            )
            .await?
            .len();
        if updated == 1 {
            Ok(())
        } else {
            Err(Error::fenced(&lease.record_id, lease.attempt))
        }
    }

    async fn stuck(
        &self,
        cutoff_ms: u64,
        cursor: Option<SweepCursor>,
        limit: usize,
    ) -> Result<StuckPage, Error> {
        let (after_lease, after_id) = match &cursor {
            Some(cursor) => parse_stuck_cursor(cursor)?,
            None => (i64::MIN, String::new()),
        };
        let limit = limit.clamp(1, 1000);
        let sql = format!(
            "SELECT id, attempt, owner, lease_expires_at, checkpoint IS NOT NULL AS has_checkpoint \
             FROM {t} WHERE status = 'IN_PROGRESS' AND lease_expires_at < $1 \
             AND (lease_expires_at, id) > ($2, $3) \
             ORDER BY lease_expires_at, id LIMIT $4",
            t = self.table
        );
        let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        let rows = self
            .query(
                "stuck listing",
                &sql,
                &[
                    (&to_i64(cutoff_ms), Type::INT8),
                    (&after_lease, Type::INT8),
                    (&after_id, Type::TEXT),
                    (&fetch, Type::INT8),
                ],
            )
            .await?;
        let more = rows.len() > limit;
        let mut records = Vec::with_capacity(limit);
        for row in rows.iter().take(limit) {
            let id: String = column(row, "(stuck listing)", "id")?;
            records.push(StuckRecord {
                attempt: unsigned(column(row, &id, "attempt")?, &id, "attempt")?,
                owner: column(row, &id, "owner")?,
                lease_expires_at_ms: unsigned(
                    column(row, &id, "lease_expires_at")?,
                    &id,
                    "lease_expires_at",
                )?,
                has_checkpoint: column(row, &id, "has_checkpoint")?,
                id,
            });
        }
        let next = more
            .then(|| {
                records
                    .last()
                    .map(|r| stuck_cursor(r.lease_expires_at_ms, &r.id))
            })
            .flatten();
        Ok(StuckPage {
            records,
            next,
            reads: 1,
            ..StuckPage::default()
        })
    }

    async fn resolve_stuck(
        &self,
        record: &StuckRecord,
        how: Resolve<'_>,
        cutoff_ms: u64,
        now_ms: u64,
    ) -> Result<Resolution, Error> {
        let fence = Fence::of_stuck(record);
        let cutoff = to_i64(cutoff_ms);
        let now_s = to_i64(now_ms / 1000);
        // Still the attempt the listing saw, its lease over.
        let seen = "id = $1 AND status = 'IN_PROGRESS' AND attempt = $2 AND owner = $3 \
                    AND lease_expires_at < $4";
        match how {
            Resolve::Release => {
                let sql = format!(
                    "WITH gone AS (DELETE FROM {t} WHERE {seen} AND checkpoint IS NULL RETURNING 1) \
                     SELECT EXISTS (SELECT 1 FROM gone) AS deleted, \
                            EXISTS (SELECT 1 FROM {t} WHERE {seen} AND checkpoint IS NOT NULL) \
                              AS resumable",
                    t = self.table
                );
                let rows = self
                    .query(
                        "release stuck record",
                        &sql,
                        &[
                            (&fence.id, Type::TEXT),
                            (&fence.attempt, Type::INT8),
                            (&fence.owner, Type::TEXT),
                            (&cutoff, Type::INT8),
                        ],
                    )
                    .await?;
                flagged_resolution(
                    &rows,
                    &record.id,
                    "the release",
                    [
                        ("deleted", Resolution::Released),
                        ("resumable", Resolution::Resumable),
                    ],
                )
            }
            Resolve::Fail {
                response,
                expires_at_s,
            } => {
                // Not expired: completed with the problem. Expired: absent
                // by definition, so deleted, never brought back to life.
                let sql = format!(
                    "WITH failed AS ( \
                       UPDATE {t} SET status = 'COMPLETED', owner = $13, expires_at = $6, \
                         response_status = $7, response_header_names = $8, \
                         response_header_values = $9, response_body = $10, \
                         response_body_kind = $11, response_encoding = $12, checkpoint = NULL \
                       WHERE {seen} AND expires_at >= $5 RETURNING 1), \
                     gone AS (DELETE FROM {t} WHERE {seen} AND expires_at < $5 RETURNING 1) \
                     SELECT EXISTS (SELECT 1 FROM failed) AS failed, \
                            EXISTS (SELECT 1 FROM gone) AS deleted",
                    t = self.table
                );
                let fitted = fit(response, self.max_response_bytes);
                let p = ResponseParams::new(&fitted, expires_at_s);
                // Rule 5: the replaced attempt's late completion is fenced.
                let resolver = resolver_owner(&record.owner);
                let rows = self
                    .query(
                        "fail stuck record",
                        &sql,
                        &[
                            (&fence.id, Type::TEXT),
                            (&fence.attempt, Type::INT8),
                            (&fence.owner, Type::TEXT),
                            (&cutoff, Type::INT8),
                            (&now_s, Type::INT8),
                            (&p.expires_at, Type::INT8),
                            (&p.status, Type::INT4),
                            (&p.header_names, Type::TEXT_ARRAY),
                            (&p.header_values, Type::BYTEA_ARRAY),
                            (&p.body, Type::BYTEA),
                            (&p.kind, Type::TEXT),
                            (&p.encoding, Type::TEXT),
                            (&resolver, Type::TEXT),
                        ],
                    )
                    .await?;
                flagged_resolution(
                    &rows,
                    &record.id,
                    "the resolution",
                    [
                        ("failed", Resolution::Failed),
                        ("deleted", Resolution::Released),
                    ],
                )
            }
        }
    }

    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        let sql = format!(
            "SELECT {COLUMNS}, pg_column_size(r.*) AS size_bytes FROM {t} r WHERE id = $1",
            t = self.table
        );
        let rows = self.query("get", &sql, &[(&record_id, Type::TEXT)]).await?;
        rows.first().map(sized).transpose()
    }

    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error> {
        let limit = limit.clamp(1, 1000);
        let after = cursor.map(|c| c.0);
        let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT {COLUMNS}, pg_column_size(r.*) AS size_bytes FROM {t} r \
             WHERE $1::text IS NULL OR id > $1 ORDER BY id LIMIT $2",
            t = self.table
        );
        let rows = self
            .query("scan", &sql, &[(&after, Type::TEXT), (&fetch, Type::INT8)])
            .await?;
        let more = rows.len() > limit;
        let mut page = RecordPage::default();
        let mut last = None;
        for row in rows.iter().take(limit) {
            last = row.try_get::<_, String>("id").ok();
            match sized(row) {
                Ok(record) => page.records.push(record),
                Err(err) => {
                    page.skipped += 1;
                    tracing::warn!(error = %err, "a row of the table is not an idempotency record; skipped");
                }
            }
        }
        page.next = more.then_some(last).flatten().map(SweepCursor);
        Ok(page)
    }

    fn describe(&self) -> String {
        format!("PostgreSQL table {} at {}", self.table, self.label)
    }
}

/// What a failing deferred statement means: a constraint or a conflict with
/// another transaction cancels the completion (the data decided); a
/// statement the server cannot run at all is rejected (the handler's code
/// decided); a lost connection leaves the outcome to the lease.
fn statement_error(
    err: tokio_postgres::Error,
    index: usize,
    total: usize,
    what: &str,
    server: &str,
) -> Error {
    let Some(db) = err.as_db_error() else {
        return Error::with_source(
            ErrorKind::StoreUnavailable,
            format!(
                "PostgreSQL at {server} failed during deferred write {index} of {total} with \
                 {what}: {err}"
            ),
            err,
        );
    };
    let code = db.code().code();
    let summary = format!("{} ({code})", db.message());
    // Class 23: integrity constraints; 40: transaction rollback
    // (serialization failure, deadlock).
    let kind = if code.starts_with("23") || code.starts_with("40") {
        ErrorKind::TransactionCancelled
    } else {
        ErrorKind::TransactionRejected
    };
    let verdict = if kind == ErrorKind::TransactionCancelled {
        "cancelled"
    } else {
        "refused as invalid"
    };
    Error::with_source(
        kind,
        format!(
            "deferred write {index} of {total} was {verdict} by PostgreSQL: {summary}; {what} \
             and every write were rolled back, nothing was written"
        ),
        err,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_cursor_round_trips_and_a_foreign_one_is_refused() {
        let cursor = stuck_cursor(1_700_000_000_123, "ab:cd");
        assert_eq!(
            parse_stuck_cursor(&cursor).unwrap(),
            (1_700_000_000_123, "ab:cd".to_owned())
        );
        for foreign in ["", "abc", "x:1", r#"{"first":1}"#] {
            let err = parse_stuck_cursor(&SweepCursor(foreign.into())).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{foreign}");
        }
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
