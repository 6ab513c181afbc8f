//! The full pass, the stream's backstop: a scan of the table for stuck
//! records, resumable (its place kept in the item `~sweeper/full-pass`) and
//! budgeted ([`PASS_PAGES`] pages per listing), started every period and at
//! once when the stream shows a gap.

use std::collections::HashSet;

use super::super::codec::{n, s};
use super::super::DynamoStore;
use super::read::within;
use super::{PassPlan, LISTED_AT, PASS_ID, PASS_PAGES, PASS_PAGES_MAX, POSITION, STARTED_AT};
use crate::clock::millis;
use crate::error::Error;
use crate::record::Status;
use crate::store::{StuckRecord, SweepCursor, SweepStore};

/// Pass item positions: a pass that runs on its period goes on at
/// `scan:<key>`, one a gap started at `catch-up:<key>` (`<key>` empty: the
/// table's start); `done:` when none runs.
const SCAN: &str = "scan";
const CATCH_UP: &str = "catch-up";

/// The pass item as the last finished listing saved it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct SavedPass {
    /// Where a running pass goes on (`Some(None)`: the table's start);
    /// `None` when no pass runs.
    pub(super) running: Option<Option<String>>,
    /// When the running (or last) pass started; `None`: never.
    pub(super) started_at: Option<u64>,
    /// The running pass was started by a gap (it catches up on records
    /// the stream may not show).
    pub(super) catching_up: bool,
    /// When the listing that saved the item started (epoch ms).
    pub(super) listed_at: Option<u64>,
}

/// What the listing decided about the full pass.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct PassStep {
    /// Where this listing's pages start (`None`: the table's start).
    pub(super) from: Option<String>,
    /// When the pass they belong to started.
    pub(super) started_at: u64,
    /// The pass was started by a gap.
    pub(super) catching_up: bool,
    /// Pages this listing may read of it.
    pub(super) pages: usize,
}

/// Whether this listing reads pages of a full pass, and from where: a gap
/// starts one over (records stuck before it may lie behind a running pass's
/// place); a running one goes on; one starts when the last started a
/// `period` ago (never with a zero period, which leaves only gaps to start
/// one).
pub(super) fn next_step(
    saved: &SavedPass,
    gap: bool,
    period: std::time::Duration,
    listed_at: u64,
    items: u64,
) -> Option<PassStep> {
    let pages = pages_for(saved, period, listed_at, items);
    if gap {
        return Some(PassStep {
            from: None,
            started_at: listed_at,
            catching_up: true,
            pages,
        });
    }
    if let Some(from) = &saved.running {
        return Some(PassStep {
            from: from.clone(),
            started_at: saved.started_at.unwrap_or(listed_at),
            catching_up: saved.catching_up,
            pages,
        });
    }
    let due = !period.is_zero()
        && saved
            .started_at
            .is_none_or(|started| listed_at.saturating_sub(started) >= millis(period));
    due.then_some(PassStep {
        from: None,
        started_at: listed_at,
        catching_up: false,
        pages,
    })
}

/// Pages a listing reads of a pass: twice its share of the table's `items`
/// (1,000 a page) for a pass to finish within `period`, at the pace the
/// listings come (the time since the last one), within [`PASS_PAGES`] and
/// [`PASS_PAGES_MAX`]; the least with no period to keep.
fn pages_for(saved: &SavedPass, period: std::time::Duration, listed_at: u64, items: u64) -> usize {
    let since = saved
        .listed_at
        .map(|last| listed_at.saturating_sub(last))
        .unwrap_or(0);
    if period.is_zero() {
        return PASS_PAGES;
    }
    let period = millis(period);
    let share = u128::from(items) * u128::from(since) * 2 / u128::from(period) / 1000 + 1;
    usize::try_from(share)
        .unwrap_or(PASS_PAGES_MAX)
        .clamp(PASS_PAGES, PASS_PAGES_MAX)
}

/// A pass that has not reached the table's end a `period` after it started
/// is behind: records stuck meanwhile wait longer than the bound says.
pub(super) fn overdue(pass: &PassPlan, period: std::time::Duration, now_ms: u64) -> bool {
    !pass.done && !period.is_zero() && now_ms.saturating_sub(pass.started_at) > millis(period)
}

impl DynamoStore {
    /// The pass item: where a running pass goes on and when it started.
    pub(super) async fn saved_pass(&self) -> Result<SavedPass, Error> {
        let out = self
            .client
            .get_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(PASS_ID)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| self.unavailable("GetItem (sweeper full pass)", err))?;
        let item = out.item();
        let position = item
            .and_then(|i| i.get(POSITION))
            .and_then(|v| v.as_s().ok())
            .and_then(|p| p.split_once(':'));
        let running = |(kind, key): (&str, &str)| {
            matches!(kind, SCAN | CATCH_UP).then(|| Some(key.to_owned()).filter(|k| !k.is_empty()))
        };
        Ok(SavedPass {
            running: position.and_then(running),
            catching_up: position.is_some_and(|(kind, _)| kind == CATCH_UP),
            listed_at: item
                .and_then(|i| i.get(LISTED_AT))
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok()),
            started_at: item
                .and_then(|i| i.get(STARTED_AT))
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok()),
        })
    }

    /// Up to the step's pages of the pass from its place: records in
    /// progress with a lease over before `cutoff_ms` join `records` (once:
    /// the stream may have listed them too; a later attempt than the one it
    /// listed replaces that one). `Err` when a page failed (what
    /// the pages before it found is kept in `records` and the plan).
    pub(super) async fn pass_pages(
        &self,
        step: PassStep,
        cutoff_ms: u64,
        deadline_ms: Option<u64>,
        records: &mut Vec<StuckRecord>,
        reads: &mut u64,
    ) -> (PassPlan, Result<(), Error>) {
        let mut plan = PassPlan {
            started_at: step.started_at,
            catching_up: step.catching_up,
            from: step.from.clone(),
            next: step.from,
            ..PassPlan::default()
        };
        let mut listed: HashSet<String> = records.iter().map(|r| r.id.clone()).collect();
        for _ in 0..step.pages {
            let cursor = plan.next.clone().map(SweepCursor);
            let Some(page) = within(deadline_ms, SweepStore::scan(self, cursor, 1000)).await else {
                break;
            };
            let page = match page {
                Ok(page) => page,
                Err(err) => return (plan, Err(err)),
            };
            *reads += 1;
            for stored in page.records {
                let record = stored.record;
                if record.status != Status::InProgress || record.lease_expires_at_ms >= cutoff_ms {
                    continue;
                }
                plan.found.push(record.id.clone());
                let found = StuckRecord {
                    has_checkpoint: record.checkpoint.is_some(),
                    id: record.id,
                    attempt: record.attempt,
                    owner: record.owner,
                    lease_expires_at_ms: record.lease_expires_at_ms,
                };
                if listed.insert(found.id.clone()) {
                    records.push(found);
                } else if let Some(listed) = records
                    .iter_mut()
                    .find(|r| r.id == found.id && r.attempt < found.attempt)
                {
                    // The stream still shows an earlier attempt as the
                    // record's latest (a takeover it has not shown yet):
                    // resolving that one is fenced, and the attempt stuck
                    // now would wait for the next pass.
                    *listed = found;
                }
            }
            plan.next = page.next.map(|next| next.0);
            if plan.next.is_none() {
                plan.done = true;
                break;
            }
        }
        (plan, Ok(()))
    }

    /// Save the pass's place once its listing is finished: it moves on only
    /// once every stuck record its pages found is resolved (those pages are
    /// read again otherwise), and ends at the table's end.
    pub(super) async fn save_pass(
        &self,
        pass: &PassPlan,
        resolved: &HashSet<&str>,
        listed_at: u64,
        expires: &aws_sdk_dynamodb::types::AttributeValue,
    ) -> Result<bool, Error> {
        let settled = pass.found.iter().all(|id| resolved.contains(id.as_str()));
        let kind = if pass.catching_up { CATCH_UP } else { SCAN };
        let position = match (settled, pass.done) {
            (true, true) => "done:".to_owned(),
            (true, false) => format!("{kind}:{}", pass.next.as_deref().unwrap_or_default()),
            (false, _) => format!("{kind}:{}", pass.from.as_deref().unwrap_or_default()),
        };
        let mut item = self.layout.key(PASS_ID);
        item.insert(POSITION.to_owned(), s(&position));
        item.insert(STARTED_AT.to_owned(), n(pass.started_at));
        item.insert(self.layout.expires_at.clone(), expires.clone());
        self.put_if_newer(item, listed_at, "PutItem (sweeper full pass)")
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const HOUR: Duration = Duration::from_secs(3600);
    const T: u64 = 1_764_000_000_000;

    #[test]
    fn a_pass_starts_each_period_at_a_gap_and_never_with_a_zero_period() {
        let idle = SavedPass {
            running: None,
            started_at: Some(T),
            catching_up: false,
            listed_at: None,
        };
        assert_eq!(next_step(&idle, false, HOUR, T + 3_599_999, 0), None);
        let due = next_step(&idle, false, HOUR, T + 3_600_000, 0).expect("due");
        assert_eq!((due.from, due.started_at), (None, T + 3_600_000));
        // Never started: the first listing starts one.
        assert!(next_step(&SavedPass::default(), false, HOUR, T, 0).is_some());
        assert_eq!(
            next_step(&SavedPass::default(), false, Duration::ZERO, T, 0),
            None
        );
        // A gap starts over from the table's start, even while one runs.
        let running = SavedPass {
            running: Some(Some("k".into())),
            started_at: Some(T),
            catching_up: false,
            listed_at: None,
        };
        let over = next_step(&running, true, Duration::ZERO, T + 5, 0).expect("gap");
        assert_eq!(
            (over.from, over.started_at, over.catching_up),
            (None, T + 5, true)
        );
        let on = next_step(&running, false, HOUR, T + 5, 0).expect("running");
        assert_eq!(
            (on.from.as_deref(), on.started_at, on.catching_up),
            (Some("k"), T, false)
        );
    }

    #[test]
    fn a_listing_reads_twice_its_share_of_the_table_within_the_bounds() {
        let last = SavedPass {
            listed_at: Some(T),
            ..SavedPass::default()
        };
        let five_minutes = 300_000;
        // 1,000,000 items, a listing every 5 minutes, a pass an hour: 12
        // listings share 1,000 pages, 84 each, twice that read.
        assert_eq!(pages_for(&last, HOUR, T + five_minutes, 1_000_000), 167);
        assert_eq!(pages_for(&last, HOUR, T + five_minutes, 1_000), PASS_PAGES);
        assert_eq!(
            pages_for(&last, HOUR, T + five_minutes, 100_000_000),
            PASS_PAGES_MAX
        );
        // No earlier listing to pace by, or no period: the least.
        assert_eq!(
            pages_for(&SavedPass::default(), HOUR, T, 1_000_000),
            PASS_PAGES
        );
        assert_eq!(
            pages_for(&last, Duration::ZERO, T + 1, 1_000_000),
            PASS_PAGES
        );
    }

    #[test]
    fn a_pass_past_its_period_unfinished_is_overdue() {
        let pass = PassPlan {
            started_at: T,
            ..PassPlan::default()
        };
        assert!(!overdue(&pass, HOUR, T + 3_600_000));
        assert!(overdue(&pass, HOUR, T + 3_600_001));
        assert!(!overdue(&pass, Duration::ZERO, T + 10 * 3_600_000));
        let done = PassPlan { done: true, ..pass };
        assert!(!overdue(&done, HOUR, T + 10 * 3_600_000));
    }
}
