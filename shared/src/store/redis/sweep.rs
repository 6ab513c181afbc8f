//! What the sweeper and operators call on a [`RedisStore`]: the listing of
//! stuck records (each shard's sorted set, through stuck.lua), their
//! fenced resolution, reading one record or every one (`SCAN`), and the
//! listings' cursors: the [`SweepStore`] implementation.

use std::sync::atomic::Ordering;

use ::redis::Value;

use super::codec::{bytes, decode, hash_fields, number, text};
use super::store::unsized_record;
use super::{Connection, RedisStore, SCRIPTS, SHARDS};
use crate::error::{Error, ErrorKind};
use crate::store::{
    resolver_owner, RecordPage, Resolution, Resolve, ResolveRequest, StuckPage, StuckRecord,
    StuckRequest, SweepCursor, SweepStore,
};

/// Index entries one call of `stuck.lua` looks up at most: a script blocks
/// the server while it runs, so an index full of entries to remove (records
/// expired) or to skip is worked through page by page.
const STUCK_LOOKUPS_PER_CALL: usize = 1_000;

#[async_trait::async_trait]
impl SweepStore for RedisStore {
    /// Its listing keeps no place between sweeps: nothing to save.
    async fn finish(
        &self,
        _listing: &crate::store::Listing,
        _resolved: &[String],
    ) -> Result<(), Error> {
        Ok(())
    }
    /// The engine expires records itself: nothing to delete.
    async fn delete_expired(&self, _now_s: u64, _limit: usize) -> Result<u64, Error> {
        Ok(0)
    }
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, Error> {
        // Each call of stuck.lua is bounded: nothing long enough to need the
        // deadline.
        let limit = request.limit.max(1);
        let (mut shard, mut after) = match request.cursor {
            Some(cursor) => decode_cursor(&cursor)?,
            None => (0, None),
        };
        let mut page = StuckPage::default();
        while shard < SHARDS {
            let wanted = limit - page.records.len();
            match self
                .stuck_in_shard(shard, request.cutoff_ms, after, wanted)
                .await
            {
                Ok((records, more)) => {
                    page.reads += 1;
                    page.records.extend(records);
                    if let Some((lease, id)) = more {
                        page.next = Some(encode_cursor(shard, Some((lease, &id))));
                        return Ok(page);
                    }
                }
                Err(err) => {
                    // One unreadable shard costs that shard, not the sweep:
                    // the page ends here (a server that does not answer
                    // costs one timeout per page, and the sweeper minds its
                    // deadline between pages) and the listing goes on with
                    // the next shard.
                    page.failed_reads += 1;
                    tracing::error!(
                        shard,
                        error = %err,
                        "reading a shard of the stuck index failed; the next sweep retries it"
                    );
                    page.next = (shard + 1 < SHARDS).then(|| encode_cursor(shard + 1, None));
                    return Ok(page);
                }
            }
            shard += 1;
            after = None;
            if page.records.len() >= limit && shard < SHARDS {
                page.next = Some(encode_cursor(shard, None));
                return Ok(page);
            }
        }
        Ok(page)
    }

    async fn resolve_stuck(&self, request: ResolveRequest<'_>) -> Result<Resolution, Error> {
        let record = request.record;
        let mut invocation =
            self.fenced(&SCRIPTS.resolve, &record.id, record.attempt, &record.owner);
        invocation.arg(request.cutoff_ms).arg(request.now_ms);
        match request.how {
            Resolve::Release => {
                invocation.arg("release");
            }
            Resolve::Fail {
                response,
                expires_at_s,
            } => {
                invocation.arg("fail");
                self.completion_args(&mut invocation, response, expires_at_s);
                invocation.arg(resolver_owner(&record.owner));
            }
        }
        let reply = self.eval("resolving a stuck record", &invocation).await?;
        match bytes(&reply) {
            Some(b"released") => Ok(Resolution::Released),
            Some(b"failed") => Ok(Resolution::Failed),
            Some(b"resumable") => Ok(Resolution::Resumable),
            Some(b"fenced") => Ok(Resolution::Fenced),
            _ => Err(self.unexpected("resolving a stuck record", &reply)),
        }
    }

    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error> {
        let limit = limit.clamp(1, 1000);
        // The cursor: what is scanned (`*`: the server; a shard: its node
        // of a cluster), SCAN's cursor, and how many keys of its batch were
        // listed already (SCAN's COUNT is a hint; pages hold at most
        // `limit`).
        let first = if self.cluster { Some(0) } else { None };
        let (mut shard, mut scan_cursor, mut skip) = match &cursor {
            Some(c) => decode_scan_cursor(&c.0, self.cluster).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "`{}` is not a cursor of this Redis store's scan; start over",
                        c.0
                    ),
                )
            })?,
            None => (first, 0, 0),
        };
        let (keys, next) = loop {
            let (next, keys) = self.scan_batch(shard, scan_cursor, limit).await?;
            let remaining: Vec<String> = keys.into_iter().skip(skip).collect();
            if remaining.len() > limit {
                let listed = skip + limit;
                break (
                    remaining.into_iter().take(limit).collect(),
                    Some(encode_scan_cursor(shard, scan_cursor, listed)),
                );
            }
            // Where the scan goes on once this batch is listed.
            let after = match (next, shard) {
                (0, Some(s)) if s + 1 < SHARDS => Some((Some(s + 1), 0)),
                (0, _) => None,
                (next, shard) => Some((shard, next)),
            };
            match after {
                // An empty batch of a scan that goes on: read the next one.
                Some((next_shard, next_cursor)) if remaining.is_empty() => {
                    (shard, scan_cursor, skip) = (next_shard, next_cursor, 0);
                }
                after => {
                    break (
                        remaining,
                        after.map(|(shard, next)| encode_scan_cursor(shard, next, 0)),
                    )
                }
            }
        };
        let mut connection = self.connection.clone();
        let mut page = RecordPage {
            next: next.map(SweepCursor),
            ..RecordPage::default()
        };
        if keys.is_empty() {
            return Ok(page);
        }
        let mut pipeline = ::redis::pipe();
        // A key of another type under the prefix is skipped, not the page.
        pipeline.ignore_errors();
        for key in &keys {
            pipeline.cmd("HGETALL").arg(key);
        }
        let hashes: Vec<Value> = pipeline
            .query_async(&mut connection)
            .await
            .map_err(|e| self.unavailable("scan", e))?;
        for (key, hash) in keys.iter().zip(hashes) {
            let id = key.split_once("}r:").map(|(_, id)| id).unwrap_or(key);
            match hash_fields(hash).map(|fields| (fields.is_empty(), decode(id, &fields))) {
                // Expired between SCAN and HGETALL.
                Some((true, _)) => {}
                Some((false, Ok(record))) => page.records.push(unsized_record(record)),
                Some((false, Err(err))) => {
                    page.skipped += 1;
                    tracing::warn!(error = %err, "a key under the store's prefix is not an idempotency record; skipped");
                }
                None => page.skipped += 1,
            }
        }
        Ok(page)
    }
}

impl RedisStore {
    /// One `SCAN` batch of record keys: of the whole server (`None`), or of
    /// one shard, read on the cluster node that holds its slot (each
    /// shard's keys matched alone, so a node holding several shards' slots
    /// lists each key once).
    async fn scan_batch(
        &self,
        shard: Option<u8>,
        cursor: u64,
        count: usize,
    ) -> Result<(u64, Vec<String>), Error> {
        let tag = match shard {
            Some(shard) => format!("{{{shard:x}}}"),
            None => "{?}".to_owned(),
        };
        let mut command = ::redis::cmd("SCAN");
        command
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{}{tag}r:*", glob_literal(&self.prefix)))
            .arg("COUNT")
            .arg(count);
        let reply = match (&self.connection.inner, shard) {
            (Connection::Cluster(cluster), Some(shard)) => {
                use ::redis::cluster_routing::{
                    Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
                };
                self.connection.round_trips.fetch_add(1, Ordering::Relaxed);
                let node = Route::with_key(self.index_key(shard), SlotAddr::Master);
                cluster
                    .clone()
                    .route_command(
                        command,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(node)),
                    )
                    .await
            }
            _ => command.query_async(&mut self.connection.clone()).await,
        }
        .map_err(|e| self.unavailable("scan", e))?;
        ::redis::from_redis_value(reply).map_err(|e| self.unavailable("scan", e.into()))
    }

    /// One shard's page of stuck records after `after` (lease, id), and,
    /// when the shard has more, where its listing goes on (the last index
    /// entry the script passed).
    async fn stuck_in_shard(
        &self,
        shard: u8,
        cutoff_ms: u64,
        after: Option<(u64, String)>,
        limit: usize,
    ) -> Result<(Vec<StuckRecord>, Option<(u64, String)>), Error> {
        let (after_lease, after_id) = match after {
            Some((lease, id)) => (lease.to_string(), id),
            None => (String::new(), String::new()),
        };
        let reply = self
            .eval(
                "listing stuck records",
                SCRIPTS
                    .stuck
                    .key(self.index_key(shard))
                    .arg(format!("{}r:", self.slot_prefix(shard)))
                    .arg(cutoff_ms)
                    .arg(after_lease)
                    .arg(after_id)
                    .arg(limit)
                    .arg(STUCK_LOOKUPS_PER_CALL),
            )
            .await?;
        let Value::Array(parts) = &reply else {
            return Err(self.unexpected("the stuck listing", &reply));
        };
        let (Some(more), Some(Value::Array(flat))) = (parts.first().and_then(number), parts.get(1))
        else {
            return Err(self.unexpected("the stuck listing", &reply));
        };
        let mut records = Vec::with_capacity(flat.len() / 5);
        for entry in flat.chunks(5) {
            match entry {
                [id, attempt, owner, lease, has_checkpoint] => {
                    match (text(id), number(attempt), text(owner), number(lease)) {
                        (Some(id), Some(attempt), Some(owner), Some(lease)) => {
                            records.push(StuckRecord {
                                id,
                                attempt,
                                owner,
                                lease_expires_at_ms: lease,
                                has_checkpoint: number(has_checkpoint) == Some(1),
                            })
                        }
                        // Cannot be resolved safely without its fence: logged, left.
                        _ => tracing::warn!(
                            shard,
                            "a stuck record's attempt, owner or lease is not readable; skipped"
                        ),
                    }
                }
                _ => return Err(self.unexpected("the stuck listing", &reply)),
            }
        }
        if more != 1 {
            return Ok((records, None));
        }
        // Where the script stopped; it always passes one entry at least.
        let resume = match (parts.get(2).and_then(number), parts.get(3).and_then(text)) {
            (Some(lease), Some(id)) if !id.is_empty() => (lease, id),
            _ => return Err(self.unexpected("the stuck listing", &reply)),
        };
        Ok((records, Some(resume)))
    }
}

/// Where a stuck listing goes on: a shard, and within it the (lease, id)
/// of the last record listed.
fn encode_cursor(shard: u8, after: Option<(u64, &str)>) -> SweepCursor {
    SweepCursor(match after {
        Some((lease, id)) => format!("{shard:x}:{lease}:{id}"),
        None => format!("{shard:x}"),
    })
}

fn decode_cursor(cursor: &SweepCursor) -> Result<(u8, Option<(u64, String)>), Error> {
    let invalid = || {
        Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "`{}` is not a cursor of a Redis store's stuck listing; start the listing over",
                cursor.0
            ),
        )
    };
    let mut parts = cursor.0.splitn(3, ':');
    let shard = parts
        .next()
        .and_then(|s| u8::from_str_radix(s, 16).ok())
        .filter(|s| *s < SHARDS)
        .ok_or_else(invalid)?;
    match (parts.next(), parts.next()) {
        (None, _) => Ok((shard, None)),
        (Some(lease), Some(id)) => Ok((
            shard,
            Some((lease.parse().map_err(|_| invalid())?, id.to_owned())),
        )),
        (Some(_), None) => Err(invalid()),
    }
}

/// Where a scan goes on: `*` (the whole server) or the shard being read on
/// a cluster, SCAN's cursor, and the keys of its batch already listed.
fn encode_scan_cursor(shard: Option<u8>, cursor: u64, listed: usize) -> String {
    match shard {
        Some(shard) => format!("{shard:x}:{cursor}:{listed}"),
        None => format!("*:{cursor}:{listed}"),
    }
}

fn decode_scan_cursor(text: &str, cluster: bool) -> Option<(Option<u8>, u64, usize)> {
    let mut parts = text.split(':');
    let (what, cursor, listed) = (parts.next()?, parts.next()?, parts.next()?);
    let shard = match (what, cluster) {
        ("*", false) => None,
        (hex, true) => Some(u8::from_str_radix(hex, 16).ok().filter(|s| *s < SHARDS)?),
        _ => return None,
    };
    if parts.next().is_some() {
        return None;
    }
    Some((shard, cursor.parse().ok()?, listed.parse().ok()?))
}

/// `text` as a literal in a `SCAN ... MATCH` pattern.
fn glob_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        for (shard, after) in [(0, None), (15, Some((1_700_000_000_123, "a:b:c")))] {
            let cursor = encode_cursor(shard, after);
            let (s, a) = decode_cursor(&cursor).unwrap();
            assert_eq!(s, shard);
            assert_eq!(a.as_ref().map(|(l, id)| (*l, id.as_str())), after);
        }
        for bad in ["", "g", "10", "3:x:id", "3:12"] {
            assert!(decode_cursor(&SweepCursor(bad.into())).is_err(), "{bad}");
        }
    }

    #[test]
    fn scan_cursors_round_trip_and_belong_to_their_kind_of_store() {
        for (shard, cursor, listed, cluster) in [(None, 0, 0, false), (Some(15), 123, 7, true)] {
            let text = encode_scan_cursor(shard, cursor, listed);
            assert_eq!(
                decode_scan_cursor(&text, cluster),
                Some((shard, cursor, listed))
            );
            assert_eq!(decode_scan_cursor(&text, !cluster), None);
        }
        for bad in ["", "*:1", "*:x:0", "10:0:0", "*:1:2:3"] {
            assert_eq!(decode_scan_cursor(bad, false), None, "{bad}");
            assert_eq!(decode_scan_cursor(bad, true), None, "{bad}");
        }
    }

    #[test]
    fn scan_patterns_take_the_prefix_literally() {
        assert_eq!(glob_literal("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
