//! What the sweeper and operators call on a [`DynamoStore`]: the listing
//! of stuck records (the sweep index here, the table's stream in
//! `stream.rs`), their fenced resolution, settling a listing, reading one
//! record or every one (the [`SweepStore`] implementation), and the
//! listings' cursors.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::codec::{decode, n, number, s};
use super::schema::SWEEP_SHARDS;
use super::store::sized;
use super::{Clause, DynamoStore, TableLayout, SWEEPER_ITEM_PREFIX};
use crate::error::{Error, ErrorKind};
use crate::record::Status;
use crate::store::{
    resolver_owner, Lease, Listing, RecordPage, Resolution, Resolve, ResolveRequest, Store,
    StuckPage, StuckRecord, StuckRequest, SweepCursor, SweepStore,
};

#[async_trait::async_trait]
impl SweepStore for DynamoStore {
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
        #[cfg(feature = "sweep-via-stream")]
        if let Some(streams) = &self.stream {
            // One page: the stream is read to its end (or a budget, or the
            // deadline) at once, since a record's later images decide
            // whether it is stuck.
            return self
                .stuck_from_stream(streams, request.cutoff_ms, request.deadline_ms)
                .await;
        }
        // The index is read a page at a time: no deadline to keep here.
        if !self.sweep_index {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "{} has no way to find stuck records: give it the table's stream \
                     (DynamoStoreBuilder::with_stream, feature `sweep-via-stream`) or opt into the sweep index \
                     (DynamoStoreBuilder::with_sweep_index, on every writer too)",
                    self.describe()
                ),
            ));
        }
        let position = match request.cursor {
            Some(cursor) => Position::decode(&self.layout, &cursor)?,
            None => Position {
                first: first_shard(crate::clock::now_ms()),
                i: 0,
                key: None,
            },
        };
        let shard = format!("{:x}", (position.first + position.i) % SWEEP_SHARDS);
        let result = self
            .client
            .query()
            .table_name(&*self.table)
            .index_name(&self.layout.sweep_index)
            .key_condition_expression("#shard = :shard AND #at < :cutoff")
            .expression_attribute_names("#shard", &self.layout.sweep_shard)
            .expression_attribute_names("#at", &self.layout.sweep_at)
            .expression_attribute_values(":shard", s(&shard))
            .expression_attribute_values(":cutoff", n(request.cutoff_ms))
            .limit(i32::try_from(request.limit.clamp(1, 1000)).unwrap_or(1000))
            .set_exclusive_start_key(position.key.clone())
            .send()
            .await;
        let out = match result {
            Ok(out) => out,
            Err(err) => {
                // One unreadable shard costs that shard, not the sweep: the
                // listing goes on with the next one.
                tracing::error!(
                    shard,
                    error = %self.unavailable("Query (sweep index)", err),
                    "reading a shard of the sweep index failed; the next sweep retries it"
                );
                return Ok(StuckPage {
                    next: position.next_shard(&self.layout),
                    failed_reads: 1,
                    ..StuckPage::default()
                });
            }
        };
        let mut records = Vec::new();
        for item in out.items() {
            // Only this layout's records: an item of another application
            // that happens to carry the index's attributes is not listed.
            let Some(id) = self
                .layout
                .record_id_of(item)
                .filter(|id| !id.starts_with(SWEEPER_ITEM_PREFIX))
            else {
                tracing::debug!("a sweep index entry outside the table layout's records; skipped");
                continue;
            };
            let status = item.get(&self.layout.status).and_then(|v| v.as_s().ok());
            if status.is_some_and(|status| status != Status::InProgress.as_str()) {
                continue;
            }
            let owner = item.get(&self.layout.owner).and_then(|v| v.as_s().ok());
            match (
                id,
                number(item, &self.layout.attempt),
                owner,
                number(item, &self.layout.sweep_at),
            ) {
                (id, Some(attempt), Some(owner), Some(lease)) => records.push(StuckRecord {
                    id,
                    attempt,
                    owner: owner.clone(),
                    lease_expires_at_ms: lease,
                    has_checkpoint: item.contains_key(&self.layout.checkpoint),
                }),
                // An index entry without the fencing attributes cannot be
                // resolved safely; it is logged and left alone.
                (id, ..) => {
                    tracing::warn!(record_id = %id, "sweep index entry lacks attempt/owner; skipped")
                }
            }
        }
        let next = match out.last_evaluated_key() {
            Some(key) => Some(Position {
                key: Some(key.clone()),
                ..position
            }),
            None => position.next_shard_position(),
        };
        Ok(StuckPage {
            records,
            next: next.map(|p| p.encode(&self.layout)),
            reads: 1,
            ..StuckPage::default()
        })
    }

    // Without the `sweep-via-stream` feature the deadline goes unused.
    #[allow(unused_variables)]
    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error> {
        let record = request.record;
        let lease = Lease {
            record_id: record.id.clone(),
            owner: record.owner.clone(),
            fingerprint: String::new(),
            attempt: record.attempt,
            recovered: None,
        };
        match request.how {
            Resolve::Release => {
                let only_without_a_point = [Clause::Absent("#checkpoint")];
                match self
                    .delete_stuck(
                        &lease,
                        &only_without_a_point,
                        request.cutoff_ms,
                        request.now_ms,
                    )
                    .await?
                {
                    None => Ok(Resolution::Released),
                    // Still the attempt seen, now with a recovery point (the
                    // index copy lags): kept for its retry to resume.
                    Some(item)
                        if still_stuck(&self.layout, &item, record, request.cutoff_ms)
                            && item.contains_key(&self.layout.checkpoint) =>
                    {
                        Ok(Resolution::Resumable)
                    }
                    Some(_) => Ok(Resolution::Fenced),
                }
            }
            Resolve::Fail {
                response,
                expires_at_s,
            } => {
                let (completion, _) = self.completion(&lease, response, expires_at_s);
                // Rule 5: a new owner, so the replaced attempt's late
                // completion is fenced. The lease seen over, and not
                // expired: an expired record is absent, and failing it
                // would bring it back with a fresh expiry.
                let update = completion
                    .name("#lease", &self.layout.lease_expires_at)
                    .value(":resolver", s(&resolver_owner(&record.owner)))
                    .value(":cutoff", n(request.cutoff_ms))
                    .value(":now_s", n(request.now_ms / 1000))
                    .set("#owner", ":resolver")
                    .when(Clause::Lt("#lease", ":cutoff"))
                    .when(Clause::Ge("#expires_at", ":now_s"));
                let op = "UpdateItem (fail stuck record)";
                match self.update_fenced(&record.id, update, true, op).await? {
                    None => Ok(Resolution::Failed),
                    Some(item)
                        if still_stuck(&self.layout, &item, record, request.cutoff_ms)
                            && number(&item, &self.layout.expires_at)
                                .is_some_and(|e| e < request.now_ms / 1000) =>
                    {
                        let expired = [Clause::Lt("#expires_at", ":now_s")];
                        match self
                            .delete_stuck(&lease, &expired, request.cutoff_ms, request.now_ms)
                            .await?
                        {
                            None => Ok(Resolution::Released),
                            Some(_) => Ok(Resolution::Fenced),
                        }
                    }
                    Some(_) => Ok(Resolution::Fenced),
                }
            }
        }
    }

    async fn finish(&self, listing: &Listing, resolved: &[String]) -> Result<(), Error> {
        #[cfg(feature = "sweep-via-stream")]
        if self.stream.is_some() {
            return self
                .settle_stream(listing, resolved, crate::clock::now_ms())
                .await;
        }
        // Without a stream there is no place to save: a scan's listing holds
        // nothing to finish.
        let _ = (listing, resolved);
        Ok(())
    }

    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error> {
        let start = match cursor {
            Some(cursor) => Some(self.layout.cursor_key(&cursor.0).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "scan cursor {:?} was not made by a scan of this table's layout; start \
                         again without one",
                        cursor.0
                    ),
                )
            })?),
            None => None,
        };
        let limit = i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000);
        let condition = self.layout.listing_condition();
        // A static partition holds every record: a Query reads it alone. A
        // prefix filters a Scan (read, and billed, whole).
        let (items, last_key) = match condition {
            Some(condition) if condition.key_condition.is_some() => {
                let out = self
                    .client
                    .query()
                    .table_name(&*self.table)
                    .set_key_condition_expression(condition.key_condition)
                    .set_filter_expression(condition.filter)
                    .set_expression_attribute_names(Some(condition.names))
                    .set_expression_attribute_values(Some(condition.values))
                    .limit(limit)
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .map_err(|err| self.unavailable("Query (records)", err))?;
                (out.items, out.last_evaluated_key)
            }
            condition => {
                let (filter, names, values) = match condition {
                    Some(c) => (c.filter, Some(c.names), Some(c.values)),
                    None => (None, None, None),
                };
                let out = self
                    .client
                    .scan()
                    .table_name(&*self.table)
                    .set_filter_expression(filter)
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .limit(limit)
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .map_err(|err| self.unavailable("Scan", err))?;
                (out.items, out.last_evaluated_key)
            }
        };
        let mut page = RecordPage::default();
        for item in items.unwrap_or_default() {
            let Some(id) = self.layout.record_id_of(&item) else {
                // Another application's item in a shared table.
                page.skipped += 1;
                continue;
            };
            // The sweeper's places in the stream are not records.
            if id.starts_with(SWEEPER_ITEM_PREFIX) {
                continue;
            }
            if !item.contains_key(&self.layout.status) {
                page.skipped += 1;
                tracing::debug!(key = %id, "an item of the table without a status is not an idempotency record; skipped");
                continue;
            }
            match decode(&self.layout, &id, &item).and_then(|record| sized(record, &item)) {
                Ok(record) => page.records.push(record),
                Err(err) => {
                    page.skipped += 1;
                    tracing::warn!(error = %err, "an item of the table is not an idempotency record; skipped")
                }
            }
        }
        page.next = last_key
            .and_then(|key| self.layout.key_cursor(&key))
            .map(SweepCursor);
        Ok(page)
    }
    /// The engine expires records itself: nothing to delete.
    async fn delete_expired(&self, _now_s: u64, _limit: usize) -> Result<u64, Error> {
        Ok(0)
    }
}

impl DynamoStore {
    /// Delete a stuck record fenced on `lease`, its lease over before
    /// `cutoff_ms`, on the further clauses `and` (over `#checkpoint`, or
    /// `#expires_at` against `:now_s`, `now_ms` in seconds); `Some(item)`
    /// when the condition failed, the item as it was (empty when gone).
    async fn delete_stuck(
        &self,
        lease: &Lease,
        and: &[Clause],
        cutoff_ms: u64,
        now_ms: u64,
    ) -> Result<Option<HashMap<String, AttributeValue>>, Error> {
        let delete = and.iter().fold(
            self.fenced_write(lease)
                .name("#lease", &self.layout.lease_expires_at)
                .name("#checkpoint", &self.layout.checkpoint)
                .name("#expires_at", &self.layout.expires_at)
                .value(":cutoff", n(cutoff_ms))
                .value(":now_s", n(now_ms / 1000))
                .when(Clause::Lt("#lease", ":cutoff")),
            |delete, clause| delete.when(*clause),
        );
        let op = "DeleteItem (release stuck record)";
        self.delete_fenced(&lease.record_id, delete, op).await
    }
}

/// Is `item` still the stuck attempt `record` saw (in progress, same attempt
/// and owner, lease over before `cutoff_ms`)?
fn still_stuck(
    layout: &TableLayout,
    item: &HashMap<String, AttributeValue>,
    record: &StuckRecord,
    cutoff_ms: u64,
) -> bool {
    item.get(&layout.status)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        == Some(Status::InProgress.as_str())
        && number(item, &layout.attempt) == Some(record.attempt)
        && item.get(&layout.owner).and_then(|v| v.as_s().ok()) == Some(&record.owner)
        && number(item, &layout.lease_expires_at).is_some_and(|l| l < cutoff_ms)
}

/// The shard a listing of stuck records starting at `now_ms` reads first:
/// drawn from a hash of the second, so every shard is first as often as any
/// other whatever a sweeper's schedule, and a backlog no single sweep
/// finishes cannot starve the shards read last.
fn first_shard(now_ms: u64) -> u32 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest((now_ms / 1000).to_be_bytes());
    u32::from(digest[0]) % SWEEP_SHARDS
}

/// Where a listing of the sweep index is: the shard it started at, how many
/// shards it has finished, and the index key to go on from in the current one.
#[derive(Debug, Clone)]
struct Position {
    first: u32,
    i: u32,
    key: Option<HashMap<String, AttributeValue>>,
}

impl Position {
    /// The start of the next shard, `None` after the last.
    fn next_shard_position(&self) -> Option<Position> {
        (self.i + 1 < SWEEP_SHARDS).then(|| Position {
            first: self.first,
            i: self.i + 1,
            key: None,
        })
    }

    fn next_shard(&self, layout: &TableLayout) -> Option<SweepCursor> {
        self.next_shard_position().map(|p| p.encode(layout))
    }

    /// As a cursor: JSON of the shard counters and the index key's
    /// attributes (all strings or numbers): the table key (`id`, and `sk`
    /// where the layout has a sort key) and the index's own.
    fn encode(&self, layout: &TableLayout) -> SweepCursor {
        let key = self.key.as_ref().map(|key| {
            let text = |name: &str| key.get(name).and_then(|v| v.as_s().ok()).cloned();
            let mut json = serde_json::json!({
                "id": text(layout.partition_key_name()),
                "shard": text(&layout.sweep_shard),
                "at": key.get(&layout.sweep_at).and_then(|v| v.as_n().ok()),
            });
            if let Some(sort) = layout.sort_key_name() {
                json["sk"] = serde_json::json!(text(sort));
            }
            json
        });
        SweepCursor(serde_json::json!({"first": self.first, "i": self.i, "key": key}).to_string())
    }

    fn decode(layout: &TableLayout, cursor: &SweepCursor) -> Result<Position, Error> {
        let invalid = || {
            Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "sweep cursor {:?} was not made by a DynamoStore listing; start again without one",
                    cursor.0
                ),
            )
        };
        let v: serde_json::Value = serde_json::from_str(&cursor.0).map_err(|_| invalid())?;
        let counter = |name: &str| {
            v[name]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n < SWEEP_SHARDS)
        };
        let (Some(first), Some(i)) = (counter("first"), counter("i")) else {
            return Err(invalid());
        };
        let key = match &v["key"] {
            serde_json::Value::Null => None,
            key => {
                let (Some(id), Some(shard), Some(at)) = (
                    key["id"].as_str(),
                    key["shard"].as_str(),
                    key["at"].as_str(),
                ) else {
                    return Err(invalid());
                };
                let mut map = HashMap::from([
                    (layout.partition_key_name().to_owned(), s(id)),
                    (layout.sweep_shard.clone(), s(shard)),
                    (layout.sweep_at.clone(), AttributeValue::N(at.to_owned())),
                ]);
                if let Some(sort) = layout.sort_key_name() {
                    let sk = key["sk"].as_str().ok_or_else(invalid)?;
                    map.insert(sort.to_owned(), s(sk));
                }
                Some(map)
            }
        };
        Ok(Position { first, i, key })
    }
}

#[cfg(test)]
mod tests {
    use super::super::schema;
    use super::*;

    #[test]
    fn listings_start_at_every_shard_in_turn() {
        // Sweeps every minute, every 5 and every 16 minutes (a period the
        // shard count divides), over 200 runs: each shard is the first one
        // read several times, so a backlog that no single sweep finishes
        // cannot starve the shards read last.
        for period_ms in [60_000u64, 300_000, 960_000] {
            let mut firsts = [0u32; SWEEP_SHARDS as usize];
            for run in 0..200u64 {
                firsts[first_shard(1_700_000_000_000 + run * period_ms) as usize] += 1;
            }
            assert!(
                firsts.iter().all(|n| *n >= 4),
                "every {period_ms} ms: {firsts:?}"
            );
        }
    }

    #[test]
    fn a_listing_position_round_trips_and_a_foreign_cursor_is_refused() {
        let position = Position {
            first: 3,
            i: 5,
            key: Some(HashMap::from([
                (schema::ID.to_owned(), s("abc")),
                (schema::SWEEP_SHARD.to_owned(), s("8")),
                (schema::SWEEP_AT.to_owned(), n(42)),
            ])),
        };
        let layout = TableLayout::default();
        let back = Position::decode(&layout, &position.encode(&layout)).unwrap();
        assert_eq!((back.first, back.i, back.key), (3, 5, position.key));
        // With a composite key, the sort key goes along.
        let composite = TableLayout::default()
            .key_attr("pk")
            .sort_key_attr("sk", "idempotency")
            .sweep_index("gsi1", "gsi1pk", "gsi1sk");
        let position = Position {
            first: 0,
            i: 1,
            key: Some(HashMap::from([
                ("pk".to_owned(), s("idempotency")),
                ("sk".to_owned(), s("abc")),
                ("gsi1pk".to_owned(), s("a")),
                ("gsi1sk".to_owned(), n(7)),
            ])),
        };
        let back = Position::decode(&composite, &position.encode(&composite)).unwrap();
        assert_eq!(back.key, position.key);
        for foreign in ["", "{}", r#"{"first":3,"i":16,"key":null}"#, "last-id"] {
            let err = Position::decode(&layout, &SweepCursor(foreign.into())).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{foreign}");
        }
    }
}
