//! Settling a stream listing: where the next listing starts in each shard
//! and where the catch-up scan goes on, saved so that no older listing
//! moves a place back.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::super::codec::{n, s};
use super::super::DynamoStore;
use super::{
    sequence_order, Plan, CARRY, CATCH_UP_ID, HORIZON, LISTED_AT, MAX_CARRIED, POSITION,
    POSITION_PREFIX, POSITION_TTL_S,
};
use crate::error::{Error, ErrorKind};
use crate::store::Settlement;

impl DynamoStore {
    /// Write `item` unless a listing that started later than `listed_at`
    /// wrote it already. `Ok(false)` when it had.
    async fn put_if_newer(
        &self,
        mut item: HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
        listed_at: u64,
        what: &str,
    ) -> Result<bool, Error> {
        item.insert(LISTED_AT.to_owned(), n(listed_at));
        let written = self
            .client
            .put_item()
            .table_name(&*self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#listed_at) OR #listed_at <= :listed_at")
            .expression_attribute_names("#listed_at", LISTED_AT)
            .expression_attribute_values(":listed_at", n(listed_at))
            .send()
            .await;
        match written {
            Ok(_) => Ok(true),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                tracing::debug!(what, "a later sweep saved this place already; kept");
                Ok(false)
            }
            Err(err) => Err(self.unavailable(what, err)),
        }
    }

    /// Save where the next listing starts in each shard the settled listing
    /// read: at the earliest record it saw in progress that is not in
    /// `resolved`, else after the last record it read; and where a
    /// catch-up scan goes on. Every place is saved even when one fails;
    /// none replaces a place a later listing saved.
    pub(crate) async fn settle_stream(
        &self,
        settlement: &Settlement,
        resolved: &[String],
        now_ms: u64,
    ) -> Result<(), Error> {
        let plan: Plan = serde_json::from_str(&settlement.0).map_err(|e| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("a settlement not made by a DynamoStore stream listing: {e}"),
            )
        })?;
        let resolved: HashSet<&str> = resolved.iter().map(String::as_str).collect();
        let mut positions: BTreeMap<String, (String, String, bool)> = BTreeMap::new();
        for mut shard in plan.shards {
            let pinned = shard
                .pins
                .iter()
                .filter(|(_, id)| !resolved.contains(id.as_str()))
                .map(|(seq, _)| seq.as_str())
                .min_by(|a, b| sequence_order(a, b));
            let position = match (pinned, shard.end, shard.start) {
                (Some(seq), _, _) => format!("at:{seq}"),
                (None, Some(end), _) => format!("after:{end}"),
                // Nothing read and nothing pinned: the saved place stands,
                // saved again with what it carries now.
                (None, None, Some(saved)) => saved,
                // Nothing read of a shard never saved (empty, or failing):
                // its past is known (its parent was read, or the catch-up
                // covers it), so the next listing reads it from its trim
                // horizon and, once its parent is gone from the stream, does
                // not take its past for unknown.
                (None, None, None) => HORIZON.to_owned(),
            };
            if shard.carry.len() > MAX_CARRIED {
                tracing::warn!(
                    shard = %shard.shard,
                    carried = shard.carry.len(),
                    "more stuck records with a recovery point than the sweeper carries; the \
                     oldest are no longer listed (lambda-idempotency list --stuck --scan finds them)"
                );
                shard
                    .carry
                    .sort_by_key(|(_, c)| std::cmp::Reverse(c.lease_expires_at_ms));
                shard.carry.truncate(MAX_CARRIED);
            }
            let carry = serde_json::to_string(&shard.carry).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!("the carried records: {e}"),
                )
            })?;
            positions.insert(shard.shard, (position, carry, shard.unknown_past));
        }
        let expires = n(now_ms / 1000 + POSITION_TTL_S);
        let mut failures = Vec::new();
        // The catch-up's place first: a shard whose past is unknown moves on
        // only once the scan that covers that past is saved.
        let mut past_covered = true;
        if let Some(catch_up) = plan.catch_up {
            // The scan moves on only once what it found is resolved: those
            // records' images may be gone from the stream.
            let settled = !catch_up.hold
                && catch_up
                    .found
                    .iter()
                    .all(|id| resolved.contains(id.as_str()));
            let saved = match (settled, catch_up.done) {
                (true, true) => self.end_catch_up(plan.listed_at).await,
                (settled, _) => {
                    let at = if settled {
                        catch_up.next
                    } else {
                        catch_up.from
                    };
                    let mut item = self.layout.key(CATCH_UP_ID);
                    item.insert(
                        POSITION.to_owned(),
                        s(&format!("scan:{}", at.unwrap_or_default())),
                    );
                    item.insert(self.layout.expires_at.clone(), expires.clone());
                    self.put_if_newer(item, plan.listed_at, "PutItem (sweeper catch-up)")
                        .await
                        .map(drop)
                }
            };
            if let Err(err) = saved {
                tracing::error!(error = %err, "saving the sweeper's catch-up place failed; the next sweep scans that part again");
                failures.push(err);
                past_covered = false;
            }
        }
        for (shard, (position, carry, unknown_past)) in positions {
            if unknown_past && !past_covered {
                // Saved, this place would hide that its past is unknown.
                continue;
            }
            let mut item = self.layout.key(&format!("{POSITION_PREFIX}{shard}"));
            item.insert(POSITION.to_owned(), s(&position));
            item.insert(CARRY.to_owned(), s(&carry));
            item.insert(self.layout.expires_at.clone(), expires.clone());
            if let Err(err) = self
                .put_if_newer(item, plan.listed_at, "PutItem (sweeper position)")
                .await
            {
                tracing::error!(shard, error = %err, "saving the sweeper's place in a shard failed; the next sweep reads it again");
                failures.push(err);
            }
        }
        match failures.len() {
            0 => Ok(()),
            1 => Err(failures.remove(0)),
            more => Err(Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "saving {more} of the sweeper's places failed (the next sweep reads those \
                     parts again); the first: {}",
                    failures.remove(0)
                ),
            )),
        }
    }

    /// The catch-up scan reached the table's end: its item goes, unless a
    /// later listing wrote it (then that listing ends it).
    async fn end_catch_up(&self, listed_at: u64) -> Result<(), Error> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(CATCH_UP_ID)))
            .condition_expression("attribute_not_exists(#listed_at) OR #listed_at <= :listed_at")
            .expression_attribute_names("#listed_at", LISTED_AT)
            .expression_attribute_values(":listed_at", n(listed_at))
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(()),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(err) => Err(self.unavailable("DeleteItem (sweeper catch-up)", err)),
        }
    }
}
