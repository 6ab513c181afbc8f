//! The hot path of a [`PostgresStore`]: the [`Store`] implementation, whose
//! claim, completion, recovery points and release are here with their
//! statements and the transactional paths; what the sweeper and operators
//! call (listings, resolution, get, scan: the
//! [`SweepStore`](crate::store::SweepStore) side) is in `sweep.rs`.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::codec::{column, corrupt, decode, ResponseParams, COLUMNS};
use super::write::PgWrite;
use super::{connection_lost, set_limits, to_i64, PostgresStore};
use crate::error::{Error, ErrorKind};
use crate::store::rules::{claim_contended, claimable, fit, lease_ended_at, own_claim};
use crate::store::{
    CheckpointRequest, ClaimOutcome, ClaimRequest, CompleteRequest, Completion, DeferredWrites,
    Lease, Store, StoredRecord, StuckRecord,
};

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
        Err(claim_contended(&request.record_id))
    }

    async fn complete(&self, request: CompleteRequest<'_>) -> Result<Completion, Error> {
        let lease = request.lease;
        let fitted = fit(request.response, self.max_response_bytes);
        let params = ResponseParams::new(&fitted, request.expires_at_s);
        if !request.writes.is_empty() {
            let head = TxHead::Completion(&params);
            self.transaction_with_writes(lease, head, request.writes)
                .await?;
            return Ok(fitted.completion);
        }
        let fence = Fence::of(lease);
        let rows = self
            .query(
                "complete",
                &self.sql.complete,
                &fence.params(&params.params()),
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
        } else if !present || self.gone_now(&fence).await {
            Err(Error::record_gone(&lease.record_id, lease.attempt))
        } else {
            Err(Error::fenced(&lease.record_id, lease.attempt))
        }
    }

    async fn checkpoint(&self, request: CheckpointRequest<'_>) -> Result<(), Error> {
        let (lease, checkpoint) = (request.lease, request.checkpoint);
        if !request.writes.is_empty() {
            let head = TxHead::RecoveryPoint {
                name: &checkpoint.name,
                json: checkpoint.to_json(),
            };
            return self
                .transaction_with_writes(lease, head, request.writes)
                .await;
        }
        let fence = Fence::of(lease);
        let json = checkpoint.to_json();
        let updated = self
            .query(
                "checkpoint",
                &self.sql.checkpoint,
                &fence.params(&[(&json, Type::TEXT)]),
            )
            .await?
            .len();
        if updated == 1 {
            Ok(())
        } else {
            Err(Error::fenced(&lease.record_id, lease.attempt))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        let fence = Fence::of(lease);
        let ended = to_i64(lease_ended_at());
        let rows = self
            .query(
                "release",
                &self.sql.release,
                &fence.params(&[(&ended, Type::INT8)]),
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

    fn describe(&self) -> String {
        format!("PostgreSQL table {} at {}", self.table, self.label)
    }

    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        let sql = format!(
            "SELECT {COLUMNS}, pg_column_size(r.*) AS size_bytes FROM {t} r WHERE id = $1",
            t = self.table
        );
        let rows = self.query("get", &sql, &[(&record_id, Type::TEXT)]).await?;
        rows.first().map(sized).transpose()
    }

    /// A connection checked out of the pool and given back: the pool's
    /// first connection (TCP, TLS when the URL asks for it, authentication)
    /// is opened now when it has none idle. No statement is sent.
    async fn warm_up(&self) -> Result<(), Error> {
        drop(self.client("warm-up").await?);
        Ok(())
    }
}

impl PostgresStore {
    /// Is the record of `fence` gone, asked by a statement of its own after
    /// a fenced write changed nothing? A delete that committed while the
    /// write waited for the row's lock is not in the write's snapshot (its
    /// `present` still says there), but it is in a later statement's. Only
    /// on a refused write; if the question fails the answer stays
    /// "fenced", which is as definite (nothing was written).
    async fn gone_now(&self, fence: &Fence) -> bool {
        self.query(
            "complete (is the record gone?)",
            &self.sql.present,
            &fence.id_param(),
        )
        .await
        .is_ok_and(|rows| rows.is_empty())
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
                let completion_params = fence.params(&params.params());
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
                let params = fence.params(&[(json, Type::TEXT)]);
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
            // Gone, or held by another attempt? Asked by a statement of its
            // own, which also sees a delete that committed while the update
            // waited for the row's lock (see `gone_now`). A failed question
            // leaves the answer "fenced": nothing was written either way.
            self.count();
            let gone = tx
                .query_typed(&self.sql.present, &fence.id_param())
                .await
                .is_ok_and(|rows| rows.is_empty());
            self.count();
            let _ = tx.rollback().await;
            return Err(TxFailure::Failed(if gone {
                Error::record_gone(&lease.record_id, lease.attempt)
            } else {
                Error::fenced(&lease.record_id, lease.attempt)
            }));
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
                    "PostgreSQL at {} rolled back {} and the handler's {total} write(s) at \
                     COMMIT: {summary}; nothing was written",
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
    /// The recovery point `name`, as stored (see `Checkpoint::to_json`).
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
pub(super) struct HotSql {
    claim: String,
    complete: String,
    release: String,
    checkpoint: String,
    /// The record's row (`$1` id), if any: is the record a fenced write
    /// missed gone?
    present: String,
}

impl HotSql {
    pub(super) fn for_table(t: &str) -> Self {
        HotSql {
            claim: Self::claim(t),
            complete: Self::complete(t),
            release: Self::release(t),
            checkpoint: Self::checkpoint(t),
            present: format!("SELECT 1 FROM {t} WHERE id = $1"),
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

/// The fence of a lease: `$1` id, `$2` attempt, `$3` owner.
pub(super) struct Fence {
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

    pub(super) fn of_stuck(record: &StuckRecord) -> Self {
        Fence {
            id: record.id.clone(),
            attempt: to_i64(record.attempt),
            owner: record.owner.clone(),
        }
    }

    /// The fence's parameters, `$1` id, `$2` attempt and `$3` owner, then
    /// `rest` from `$4` on.
    pub(super) fn params<'a>(
        &'a self,
        rest: &[(&'a (dyn ToSql + Sync), Type)],
    ) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
        let mut params: Vec<(&'a (dyn ToSql + Sync), Type)> = vec![
            (&self.id, Type::TEXT),
            (&self.attempt, Type::INT8),
            (&self.owner, Type::TEXT),
        ];
        params.extend_from_slice(rest);
        params
    }

    /// The record's id alone, `$1`.
    fn id_param(&self) -> [(&(dyn ToSql + Sync), Type); 1] {
        [(&self.id, Type::TEXT)]
    }
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

/// What [`Store::get`] and
/// [`SweepStore::scan`](crate::store::SweepStore::scan) return: the record and its size as
/// PostgreSQL stores the row (`pg_column_size`, after its own compression);
/// PostgreSQL bills no write units.
pub(super) fn sized(row: &Row) -> Result<StoredRecord, Error> {
    let record = decode(row)?;
    let size: Option<i32> = column(row, &record.id, "size_bytes")?;
    Ok(StoredRecord {
        size_bytes: size.and_then(|s| u64::try_from(s).ok()),
        write_units: None,
        record,
    })
}
