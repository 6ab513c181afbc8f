//! Settling a stream listing: where the next listing starts in each shard
//! and where the catch-up scan goes on, saved so that no older listing
//! moves a place back.

use std::collections::{HashMap, HashSet};

use super::super::codec::{n, s};
use super::super::DynamoStore;
use super::{
    sequence_order, Candidate, Plan, CARRY, CATCH_UP_ID, HORIZON, LISTED_AT, MAX_CARRY_BYTES,
    POSITION, POSITION_PREFIX, POSITION_TTL_S,
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
        let Plan {
            shards,
            listed_at,
            mut catch_up,
        } = plan;
        let found_now: HashSet<String> = catch_up
            .as_ref()
            .map(|c| c.found.iter().cloned().collect())
            .unwrap_or_default();
        // Carried records that fit no position item and that no stream
        // place brings back: found again by the catch-up scan.
        let mut unplaced: Vec<String> = Vec::new();
        let mut positions: Vec<Position> = Vec::new();
        for shard in shards {
            let bounded = bound_carry(shard.carry, &found_now)?;
            unplaced.extend(bounded.unplaced);
            let pinned = shard
                .pins
                .iter()
                // (A record with no place in the stream pins nothing.)
                .filter(|(seq, id)| !seq.is_empty() && !resolved.contains(id.as_str()))
                .map(|(seq, _)| seq.as_str())
                .chain(bounded.pin.as_deref())
                .min_by(|a, b| sequence_order(a, b));
            let position = match (pinned, shard.end, shard.start) {
                (Some(seq), _, _) => format!("at:{seq}"),
                (None, Some(end), _) => format!("after:{end}"),
                // The saved place was trimmed and nothing newer is readable
                // (a shard idle past the retention): the trim horizon, its
                // past covered by the catch-up this listing runs. Saved
                // again, the trimmed place would be refused at every listing.
                (None, None, Some(_)) if shard.start_trimmed => HORIZON.to_owned(),
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
            positions.push(Position {
                shard: shard.shard,
                position,
                carry: bounded.text,
                unknown_past: shard.unknown_past,
                heir: shard.heir,
            });
        }
        if !unplaced.is_empty() {
            tracing::warn!(
                records = unplaced.len(),
                "more stuck records with a recovery point than a position item holds; the \
                 catch-up scan finds the rest again"
            );
        }
        let expires = n(now_ms / 1000 + POSITION_TTL_S);
        let mut failures = Vec::new();
        // The catch-up's place first: a shard whose past is unknown moves on
        // only once the scan that covers that past is saved.
        let scan_again_from = if unplaced.is_empty() {
            None
        } else if unplaced.iter().all(|id| found_now.contains(id)) {
            // Found by this listing's pages: those pages are read again.
            catch_up.as_ref().map(|c| c.from.clone())
        } else {
            // Carried from before: the scan starts over to find them.
            Some(None)
        };
        let saved = match (scan_again_from, catch_up.take()) {
            (Some(from), _) => Some(self.save_catch_up(from, listed_at, &expires).await),
            (None, None) => None,
            (None, Some(catch_up)) => {
                // The scan moves on only once what it found is resolved:
                // those records' images may be gone from the stream.
                let settled = !catch_up.hold
                    && catch_up
                        .found
                        .iter()
                        .all(|id| resolved.contains(id.as_str()));
                Some(match (settled, catch_up.done) {
                    (true, true) => self.end_catch_up(listed_at).await,
                    (true, false) => self.save_catch_up(catch_up.next, listed_at, &expires).await,
                    (false, _) => self.save_catch_up(catch_up.from, listed_at, &expires).await,
                })
            }
        };
        let mut past_covered = true;
        if let Some(Err(err)) = saved {
            tracing::error!(error = %err, "saving the sweeper's catch-up place failed; the next sweep scans that part again");
            failures.push(err);
            past_covered = false;
        }
        // Children before their parents: a closed shard that handed what it
        // carries to a child is saved without it only once the child is
        // saved with it.
        let mut saved_shards: HashSet<String> = HashSet::new();
        for place in positions.into_iter().rev() {
            if place.unknown_past && !past_covered {
                // Saved, this place would hide that its past is unknown.
                continue;
            }
            if place
                .heir
                .as_ref()
                .is_some_and(|heir| !saved_shards.contains(heir))
            {
                // Its old place (with what it carried) stands.
                continue;
            }
            let mut item = self
                .layout
                .key(&format!("{POSITION_PREFIX}{}", place.shard));
            item.insert(POSITION.to_owned(), s(&place.position));
            item.insert(CARRY.to_owned(), s(&place.carry));
            item.insert(self.layout.expires_at.clone(), expires.clone());
            match self
                .put_if_newer(item, listed_at, "PutItem (sweeper position)")
                .await
            {
                Ok(_) => {
                    saved_shards.insert(place.shard);
                }
                Err(err) => {
                    tracing::error!(shard = %place.shard, error = %err, "saving the sweeper's place in a shard failed; the next sweep reads it again");
                    failures.push(err);
                }
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

    /// Save where the catch-up scan goes on (`None`: the table's start).
    async fn save_catch_up(
        &self,
        at: Option<String>,
        listed_at: u64,
        expires: &aws_sdk_dynamodb::types::AttributeValue,
    ) -> Result<(), Error> {
        let mut item = self.layout.key(CATCH_UP_ID);
        item.insert(
            POSITION.to_owned(),
            s(&format!("scan:{}", at.unwrap_or_default())),
        );
        item.insert(self.layout.expires_at.clone(), expires.clone());
        self.put_if_newer(item, listed_at, "PutItem (sweeper catch-up)")
            .await
            .map(drop)
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

/// One shard's place as settled, before it is saved.
struct Position {
    shard: String,
    position: String,
    /// The carried records, as saved (JSON).
    carry: String,
    unknown_past: bool,
    heir: Option<String>,
}

/// What of a shard's carried records its position item holds.
#[derive(Debug)]
struct BoundedCarry {
    /// The records that fit in [`MAX_CARRY_BYTES`], as saved (JSON).
    text: String,
    /// Where the shard's place must stay so that the stream shows again
    /// the records that did not fit and have a place in it (the earliest's
    /// sequence number).
    pin: Option<String>,
    /// Records that did not fit and have no place in the stream to read
    /// again (carried from an earlier listing, found by the catch-up scan,
    /// or handed over by a closed shard).
    unplaced: Vec<String>,
}

/// Bound what a shard carries by bytes, so its position item stays within
/// DynamoDB's 400 KB item limit; no record is dropped: one that does not
/// fit is either read again from the stream (the place stays before it) or
/// found again by the catch-up scan (`found_now`: those this listing's scan
/// pages found, which the scan reads again).
fn bound_carry(
    mut carry: Vec<(String, Candidate)>,
    found_now: &HashSet<String>,
) -> Result<BoundedCarry, Error> {
    // First those no stream place brings back (carried from before, then
    // this listing's scan finds), then the stream's, earliest first: once
    // one of those does not fit, the place stays before it, and every later
    // one is read again anyway.
    let rank = |(id, candidate): &(String, Candidate)| match (
        candidate.sequence.is_empty(),
        found_now.contains(id),
    ) {
        (true, false) => 0,
        (true, true) => 1,
        (false, _) => 2,
    };
    carry.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then_with(|| sequence_order(&a.1.sequence, &b.1.sequence))
            .then_with(|| a.1.lease_expires_at_ms.cmp(&b.1.lease_expires_at_ms))
            .then_with(|| a.0.cmp(&b.0))
    });
    let mut text = String::from("[");
    let mut pin = None;
    let mut unplaced = Vec::new();
    let mut full = false;
    for entry in carry {
        let one = serde_json::to_string(&entry).map_err(|e| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("the carried records: {e}"),
            )
        })?;
        // A comma before it and the closing bracket after.
        full = full || text.len() + one.len() + 2 > MAX_CARRY_BYTES;
        if !full {
            if text.len() > 1 {
                text.push(',');
            }
            text.push_str(&one);
        } else if entry.1.sequence.is_empty() {
            unplaced.push(entry.0);
        } else if pin.is_none() {
            pin = Some(entry.1.sequence);
        }
    }
    text.push(']');
    Ok(BoundedCarry {
        text,
        pin,
        unplaced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(sequence: &str) -> Candidate {
        Candidate {
            attempt: 1,
            owner: "7c9e6679-7425-40de-944b-e07fc1f90ae7".into(),
            lease_expires_at_ms: 1_764_000_000_000,
            has_checkpoint: true,
            shard: 0,
            sequence: sequence.into(),
        }
    }

    fn id(i: usize) -> String {
        format!("{i:064x}")
    }

    #[test]
    fn a_carry_past_the_item_limit_keeps_every_record_findable() {
        // 2,000 from the stream, 300 found by this listing's scan, 300
        // carried from before without a place in the stream.
        let mut carry: Vec<(String, Candidate)> = (0..2_000)
            .map(|i| {
                (
                    id(i),
                    candidate(&format!("{}", 100_000_000_000_000_000_000u128 + i as u128)),
                )
            })
            .collect();
        carry.extend((2_000..2_300).map(|i| (id(i), candidate(""))));
        carry.extend((2_300..2_600).map(|i| (id(i), candidate(""))));
        let found_now: HashSet<String> = (2_000..2_300).map(id).collect();
        let bounded = bound_carry(carry, &found_now).unwrap();
        assert!(
            bounded.text.len() <= MAX_CARRY_BYTES,
            "{}",
            bounded.text.len()
        );
        let kept: Vec<(String, Candidate)> = serde_json::from_str(&bounded.text).unwrap();
        let kept: HashSet<String> = kept.into_iter().map(|(id, _)| id).collect();
        // The ones no stream place brings back are kept first.
        assert!((2_300..2_600).map(id).all(|i| kept.contains(&i)));
        assert!((2_000..2_300).map(id).all(|i| kept.contains(&i)));
        assert!(bounded.unplaced.is_empty());
        // The stream's: the earliest kept, the place pinned at the first
        // that did not fit, so every later one is read again.
        let pin = bounded.pin.expect("a pin");
        for i in 0..2_000 {
            let sequence = format!("{}", 100_000_000_000_000_000_000u128 + i as u128);
            let carried = kept.contains(&id(i));
            let read_again = sequence_order(&sequence, &pin) != std::cmp::Ordering::Less;
            assert!(
                carried != read_again,
                "{i}: carried {carried}, read again {read_again}"
            );
        }
    }

    #[test]
    fn records_without_a_stream_place_that_do_not_fit_are_named() {
        let carry: Vec<(String, Candidate)> = (0..2_000).map(|i| (id(i), candidate(""))).collect();
        let bounded = bound_carry(carry, &HashSet::new()).unwrap();
        let kept: Vec<(String, Candidate)> = serde_json::from_str(&bounded.text).unwrap();
        assert!(bounded.text.len() <= MAX_CARRY_BYTES);
        assert!(!bounded.unplaced.is_empty());
        assert_eq!(kept.len() + bounded.unplaced.len(), 2_000);
        assert_eq!(bounded.pin, None);
    }

    #[test]
    fn a_small_carry_is_kept_whole() {
        let carry = vec![(id(1), candidate("5")), (id(2), candidate(""))];
        let bounded = bound_carry(carry, &HashSet::new()).unwrap();
        let kept: Vec<(String, Candidate)> = serde_json::from_str(&bounded.text).unwrap();
        assert_eq!(kept.len(), 2);
        assert_eq!((bounded.pin, bounded.unplaced.len()), (None, 0));
        let empty = bound_carry(Vec::new(), &HashSet::new()).unwrap();
        assert_eq!(empty.text, "[]");
    }
}
