//! Finishing a stream listing: where the next listing starts in each shard
//! and where the full pass goes on, saved so that no older listing moves a
//! place back.

use std::collections::{HashMap, HashSet};

use super::super::codec::{n, s};
use super::super::DynamoStore;
use super::{
    sequence_order, Plan, ShardPlan, HORIZON, ITERATOR, ITERATOR_AT, LISTED_AT, POSITION,
    POSITION_PREFIX, POSITION_TTL_S,
};
use crate::error::{Error, ErrorKind};
use crate::store::Listing;

/// One shard's place as this listing leaves it: the position, and the
/// iterator to go on from when nothing holds the place behind it.
#[derive(Debug, PartialEq, Eq)]
struct Place {
    position: String,
    iterator: Option<(String, u64)>,
}

/// Where the next listing starts in `shard`: at the earliest pin not
/// resolved (`resolved`), else after the last record read (going on from
/// where reading stopped past it while that is fresh), else where it
/// started; a shard never read past its trim horizon keeps that, with the
/// time up to which it was read (`listed_at`), so that a later trim of it
/// is seen.
fn place_of(shard: &ShardPlan, resolved: &HashSet<&str>, listed_at: u64) -> Place {
    let pinned = shard
        .pins
        .iter()
        .filter(|(seq, id)| !seq.is_empty() && !resolved.contains(id.as_str()))
        .map(|(seq, _)| seq.as_str())
        .min_by(|a, b| sequence_order(a, b));
    if let Some(seq) = pinned {
        // Read again from there: no iterator past it.
        return Place {
            position: format!("at:{seq}"),
            iterator: None,
        };
    }
    let position = match (&shard.end, &shard.start) {
        (Some(end), _) => format!("after:{end}"),
        // Nothing read: a place in a sequence stands unless it was trimmed
        // (the gap says so; saved again it would be refused every time).
        (None, Some(start)) if !shard.gap && !start.starts_with(HORIZON) => start.clone(),
        (None, _) => format!("{HORIZON}:{listed_at}"),
    };
    Place {
        position,
        iterator: shard.iterator.clone(),
    }
}

impl DynamoStore {
    /// Write `item` unless a listing that started later than `listed_at`
    /// wrote it already. `Ok(false)` when it had.
    pub(super) async fn put_if_newer(
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

    /// Save where the full pass goes on, then where the next listing starts
    /// in each shard the finished listing read. Every place is saved even
    /// when one fails; none replaces a place a later listing saved; a
    /// shard whose past is unknown (a gap) is saved only once the pass that
    /// covers that past is.
    pub(crate) async fn settle_stream(
        &self,
        listing: &Listing,
        resolved: &[String],
        now_ms: u64,
    ) -> Result<(), Error> {
        let plan: Plan = serde_json::from_str(&listing.0).map_err(|e| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("a listing not made by a DynamoStore stream listing: {e}"),
            )
        })?;
        let resolved: HashSet<&str> = resolved.iter().map(String::as_str).collect();
        let expires = n(now_ms / 1000 + POSITION_TTL_S);
        let mut failures = Vec::new();
        let mut pass_saved = true;
        if let Some(pass) = &plan.pass {
            if let Err(err) = self
                .save_pass(pass, &resolved, plan.listed_at, &expires)
                .await
            {
                tracing::error!(error = %err, "saving the sweeper's full pass place failed; the next sweep reads that part again");
                failures.push(err);
                pass_saved = false;
            }
        }
        for shard in &plan.shards {
            if shard.gap && !(pass_saved && plan.pass.is_some()) {
                // Saved, this place would hide that its past is unknown.
                continue;
            }
            let place = place_of(shard, &resolved, plan.listed_at);
            let mut item = self
                .layout
                .key(&format!("{POSITION_PREFIX}{}", shard.shard));
            item.insert(POSITION.to_owned(), s(&place.position));
            if let Some((iterator, at)) = &place.iterator {
                item.insert(ITERATOR.to_owned(), s(iterator));
                item.insert(ITERATOR_AT.to_owned(), n(*at));
            }
            item.insert(self.layout.expires_at.clone(), expires.clone());
            if let Err(err) = self
                .put_if_newer(item, plan.listed_at, "PutItem (sweeper position)")
                .await
            {
                tracing::error!(shard = %shard.shard, error = %err, "saving the sweeper's place in a shard failed; the next sweep reads it again");
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard() -> ShardPlan {
        ShardPlan {
            shard: "s".into(),
            ..ShardPlan::default()
        }
    }

    #[test]
    fn the_place_waits_for_the_earliest_unresolved_pin() {
        let mut plan = shard();
        plan.end = Some("900".into());
        plan.iterator = Some(("it".into(), 5));
        plan.pins = vec![("300".into(), "a".into()), ("1000".into(), "b".into())];
        let none = HashSet::new();
        assert_eq!(
            place_of(&plan, &none, 7),
            Place {
                position: "at:300".into(),
                iterator: None
            }
        );
        let a: HashSet<&str> = ["a"].into();
        assert_eq!(place_of(&plan, &a, 7).position, "at:1000");
        let both: HashSet<&str> = ["a", "b"].into();
        assert_eq!(
            place_of(&plan, &both, 7),
            Place {
                position: "after:900".into(),
                iterator: Some(("it".into(), 5))
            }
        );
    }

    #[test]
    fn a_shard_with_nothing_read_keeps_its_place_or_its_horizon_with_the_time() {
        let mut plan = shard();
        plan.start = Some("after:5".into());
        assert_eq!(place_of(&plan, &HashSet::new(), 7).position, "after:5");
        // Trimmed: saved again, it would be refused at every listing.
        plan.gap = true;
        assert_eq!(place_of(&plan, &HashSet::new(), 7).position, "horizon:7");
        // Read from the horizon and found empty: the time moves on, so a
        // trim of what comes later is seen.
        plan.gap = false;
        plan.start = Some("horizon:3".into());
        assert_eq!(place_of(&plan, &HashSet::new(), 7).position, "horizon:7");
        plan.start = None;
        assert_eq!(place_of(&plan, &HashSet::new(), 7).position, "horizon:7");
    }
}
