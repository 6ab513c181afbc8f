//! What the sweeper and operators call on a [`PostgresStore`]: the listing
//! of stuck records (the partial index on lease end), their fenced
//! resolution, reading one record or every one, deleting expired rows,
//! and the listing's cursor: the [`SweepStore`] implementation.

use tokio_postgres::types::Type;
use tokio_postgres::Row;

use super::codec::{column, corrupt, unsigned_column, ResponseParams, COLUMNS};
use super::store::{sized, Fence};
use super::{to_i64, PostgresStore};
use crate::error::{Error, ErrorKind};
use crate::store::rules::fit;
use crate::store::{
    resolver_owner, RecordPage, Resolution, Resolve, ResolveRequest, StuckPage, StuckRecord,
    StuckRequest, SweepCursor, SweepStore,
};

#[async_trait::async_trait]
impl SweepStore for PostgresStore {
    /// Its listing keeps no place between sweeps: nothing to save.
    async fn finish(
        &self,
        _listing: &crate::store::Listing,
        _resolved: &[String],
    ) -> Result<(), Error> {
        Ok(())
    }
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
        // One indexed query a page: nothing long enough to need the deadline.
        let (after_lease, after_id) = match &request.cursor {
            Some(cursor) => parse_stuck_cursor(cursor)?,
            None => (i64::MIN, String::new()),
        };
        let limit = request.limit.clamp(1, 1000);
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
                    (&to_i64(request.cutoff_ms), Type::INT8),
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
                attempt: unsigned_column(row, &id, "attempt")?,
                owner: column(row, &id, "owner")?,
                lease_expires_at_ms: unsigned_column(row, &id, "lease_expires_at")?,
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

    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error> {
        let record = request.record;
        let fence = Fence::of_stuck(record);
        let cutoff = to_i64(request.cutoff_ms);
        let now_s = to_i64(request.now_ms / 1000);
        // Still the attempt the listing saw, its lease over.
        let seen = "id = $1 AND status = 'IN_PROGRESS' AND attempt = $2 AND owner = $3 \
                    AND lease_expires_at < $4";
        match request.how {
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
                        &fence.params(&[(&cutoff, Type::INT8)]),
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
                // `$4` the cutoff, `$5` now, `$6`..`$12` the response, `$13` the
                // new owner.
                let mut params = fence.params(&[(&cutoff, Type::INT8), (&now_s, Type::INT8)]);
                params.extend(p.params());
                params.push((&resolver, Type::TEXT));
                let rows = self.query("fail stuck record", &sql, &params).await?;
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

    /// Delete up to `limit` records expired before `now_s` (epoch seconds),
    /// oldest first, skipping rows another transaction holds; returns how
    /// many went. Expired records are absent to every claim already: this
    /// only gives their space back.
    async fn delete_expired(&self, now_s: u64, limit: usize) -> Result<u64, Error> {
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
}
