//! The commands: each reads through the library's `SweepStore` (the
//! sweeper's discovery, `scan`; `get` of the `Store` it extends) and writes
//! only through the sweeper's fenced resolutions.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lambda_idempotency::{
    scope::RecordScope,
    store::{
        now_ms, Record, Resolution, Status, StoredRecord, StuckRecord, StuckRequest, SweepCursor,
    },
    sweeper::{SweepPolicy, Sweeper},
};
use serde_json::{json, Value};

use crate::connect::{connect, Connected};
use crate::view;
use crate::{Cli, Command, Failure, InspectArgs, ListArgs, ResolveArgs, StatsArgs};

/// Records read per page.
const PAGE: usize = 100;

/// Run the command `cli` names.
pub(crate) async fn run(cli: Cli) -> Result<(), Failure> {
    let connected = connect(&cli.store).await?;
    match cli.command {
        Command::Inspect(args) => inspect(&connected, &args, cli.json).await,
        Command::List(args) => list(&connected, &args, cli.json).await,
        Command::Release(args) => resolve(&connected, &args, SweepPolicy::Release, cli.json).await,
        Command::Fail(args) => resolve(&connected, &args, SweepPolicy::Fail, cli.json).await,
        Command::Stats(args) => stats(&connected, &args, cli.json).await,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn store_error(place: &str, err: lambda_idempotency::Error) -> Failure {
    Failure::Store(format!("{place}: {err}"))
}

/// A listing that did not read everything (a stream backlog larger than one
/// listing, records trimmed before the sweeper read them, a full pass of
/// the table under way) shows what it found; the operator is told it may be
/// partial.
fn partial_listing_warning(c: &Connected, page: &lambda_idempotency::store::StuckPage) {
    if page.behind {
        eprintln!(
            "warning: the listing of {} is behind (records it may have missed, such as ones the \
             stream trimmed before the sweeper read them, or a full pass of the table that \
             cannot finish within its period); the sweeper's full pass finds them over its next \
             runs, and --scan reads every record now",
            c.place
        );
    } else if page.incomplete {
        eprintln!(
            "warning: the listing of {} did not read everything (a backlog, or a full pass \
             under way): records may be missing; the sweeper reads on at its next runs, and \
             --scan reads every record now",
            c.place
        );
    }
}

/// A spinner on stderr for anything that pages; indicatif draws nothing when
/// stderr is not a terminal.
fn progress(what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{elapsed}]") {
        bar.set_style(style);
    }
    bar.set_message(what.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

async fn fetch(c: &Connected, record_id: &str) -> Result<StoredRecord, Failure> {
    c.store
        .get(record_id)
        .await
        .map_err(|err| store_error(&c.place, err))?
        .ok_or_else(|| {
            Failure::NotFound(format!(
                "no record `{record_id}` in {}: it never existed, was released, or expired \
                 (records built from --key need the same --tenant, --method, --path and \
                 --namespace as the request)",
                c.place
            ))
        })
}

async fn inspect(c: &Connected, args: &InspectArgs, json: bool) -> Result<(), Failure> {
    let record_id = match (&args.record_id, &args.scope.key) {
        (Some(id), _) => id.clone(),
        (None, Some(key)) => {
            let Some(path) = &args.scope.path else {
                return Err(Failure::Usage(
                    "--key needs --path: the route template the request matched, or its path \
                     (for example --path /orders)"
                        .into(),
                ));
            };
            let method = args.scope.method.to_ascii_uppercase();
            RecordScope {
                namespace: &args.scope.namespace,
                tenant: args.scope.tenant.as_deref(),
                ..RecordScope::new(&method, path, key)
            }
            .record_id()
        }
        (None, None) => {
            return Err(Failure::Usage(
                "name the record: a record id, or --key with --path".into(),
            ))
        }
    };
    let found = fetch(c, &record_id).await?;
    let now = now_ms();
    let grace = millis(Duration::from_secs(60));
    if json {
        println!("{}", view::detail_json(&found, now, grace));
    } else {
        println!("{}", view::detail_table(&found, now, grace));
    }
    Ok(())
}

/// Which records `list` shows.
#[derive(Clone, Copy)]
enum Wanted {
    Stuck,
    InProgress,
    Completed,
}

async fn list(c: &Connected, args: &ListArgs, json: bool) -> Result<(), Failure> {
    let wanted = if args.stuck {
        Wanted::Stuck
    } else if args.completed {
        Wanted::Completed
    } else {
        Wanted::InProgress
    };
    let now = now_ms();
    let grace = millis(args.grace);
    let older = args.older_than.map(millis);
    // Lease ended before this instant (epoch ms).
    let cutoff = match (wanted, older) {
        (Wanted::Stuck, older) => now.saturating_sub(grace.max(older.unwrap_or(0))),
        (_, Some(older)) => now.saturating_sub(older),
        (_, None) => u64::MAX,
    };
    let keep = |r: &Record| match wanted {
        Wanted::Completed => r.status == Status::Completed,
        Wanted::Stuck | Wanted::InProgress => {
            r.status == Status::InProgress && r.lease_expires_at_ms < cutoff
        }
    };
    let limit = args.limit.max(1);
    let bar = progress("reading");
    let (records, more) = if args.scan {
        match (c.engine, c.approximate_items) {
            ("dynamodb", items) => eprintln!(
                "warning: --scan reads every item of {} ({} items, as DynamoDB last counted): \
                 billed for every item read",
                c.place,
                items.map_or("an unknown number of".to_owned(), |n| n.to_string())
            ),
            _ => eprintln!(
                "warning: --scan reads every item of {}: one read for every record stored",
                c.place
            ),
        }
        scan_records(c, limit, &keep, &bar).await?
    } else {
        let (records, more, listed) = discovered_records(c, cutoff, limit, &keep, &bar).await?;
        if listed == 0 {
            if let Some(note) = empty_index_note(c).await? {
                eprintln!("{note}");
            }
        }
        (records, more)
    };
    bar.finish_and_clear();
    // Oldest lease first: the longest stuck is what an operator looks at first.
    let mut records = records;
    records.sort_by(|a, b| (a.lease_expires_at_ms, &a.id).cmp(&(b.lease_expires_at_ms, &b.id)));
    if json {
        for record in &records {
            println!("{}", view::summary_json(record, now, grace));
        }
    } else if records.is_empty() {
        let what = match wanted {
            Wanted::Stuck => "stuck records",
            Wanted::InProgress => "records in progress",
            Wanted::Completed => "completed records",
        };
        println!("no {what} in {}", c.place);
    } else {
        println!("{}", view::list_table(&records, now, grace));
    }
    if more {
        eprintln!(
            "showing the first {limit}; there are more (raise --limit, or narrow with --older-than)"
        );
    }
    Ok(())
}

/// Up to `limit` records kept by `keep`, page by page from `page` (which
/// returns a page's records, where the listing goes on, and what it read so
/// far for the progress line), and whether more were left.
async fn collect<F, Fut>(
    limit: usize,
    keep: &dyn Fn(&Record) -> bool,
    bar: &ProgressBar,
    mut page: F,
) -> Result<(Vec<Record>, bool), Failure>
where
    F: FnMut(Option<SweepCursor>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<Record>, Option<SweepCursor>, String), Failure>>,
{
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let (records, next, progress) = page(cursor).await?;
        for record in records.into_iter().filter(|r| keep(r)) {
            if out.len() == limit {
                return Ok((out, true));
            }
            out.push(record);
        }
        bar.set_message(format!("{progress}, {} kept", out.len()));
        match next {
            Some(next) => cursor = Some(next),
            None => return Ok((out, false)),
        }
    }
}

/// When DynamoDB's sparse `sweep` index (a table without a stream) listed
/// nothing at all: is that because nothing is in progress, or because the
/// table's writers never opted into the index (`with_sweep_index`), which
/// then stays empty while records are in progress? One page of the table
/// (up to 100 items) is read to tell, and the note says which.
async fn empty_index_note(c: &Connected) -> Result<Option<String>, Failure> {
    if c.discovery != Some("index") {
        return Ok(None);
    }
    // The listing asked for leases over before a cutoff: a live one in the
    // index means it is filled.
    let any = c
        .store
        .stuck(StuckRequest::new(u64::MAX, 1))
        .await
        .map_err(|err| store_error(&c.place, err))?;
    if !any.records.is_empty() {
        return Ok(None);
    }
    let page = c
        .store
        .scan(None, PAGE)
        .await
        .map_err(|err| store_error(&c.place, err))?;
    let unindexed = page
        .records
        .iter()
        .find(|found| found.record.status == Status::InProgress);
    Ok(Some(match unindexed {
        Some(found) => format!(
            "note: the `sweep` index of {} is empty, yet record `{}` is in progress: the \
             table's writers did not opt into the index (DynamoStoreBuilder::with_sweep_index), so \
             neither this listing nor the sweeper finds their records; enable the table's \
             stream (the default discovery), opt every writer in, or list with --scan",
            c.place, found.record.id
        ),
        None => format!(
            "note: the `sweep` index of {} is empty: nothing is in progress, or the table's \
             writers did not opt into the index (DynamoStoreBuilder::with_sweep_index) and it stays \
             empty; --scan reads the table itself",
            c.place
        ),
    }))
}

/// Up to `limit` records through the sweeper's discovery, each read again
/// (the listing lags the table and does not carry every attribute), whether
/// more were left, and how many the listing held before `keep` chose.
async fn discovered_records(
    c: &Connected,
    cutoff: u64,
    limit: usize,
    keep: &dyn Fn(&Record) -> bool,
    bar: &ProgressBar,
) -> Result<(Vec<Record>, bool, u64), Failure> {
    let pages = std::cell::Cell::new(0u64);
    let listed = std::cell::Cell::new(0u64);
    let (records, more) = collect(limit, keep, bar, |cursor| {
        let pages = &pages;
        let listed = &listed;
        async move {
            pages.set(pages.get() + 1);
            let page = c
                .store
                .stuck(StuckRequest::new(cutoff, PAGE).at(cursor))
                .await
                .map_err(|err| store_error(&c.place, err))?;
            if page.failed_reads > 0 {
                return Err(Failure::Store(format!(
                    "listing stuck records of {} failed (see the log above); nothing listed",
                    c.place
                )));
            }
            listed.set(listed.get() + page.records.len() as u64);
            partial_listing_warning(c, &page);
            let mut records = Vec::new();
            for entry in page.records {
                let found = c
                    .store
                    .get(&entry.id)
                    .await
                    .map_err(|err| store_error(&c.place, err))?;
                records.extend(found.map(|f| f.record));
            }
            Ok((
                records,
                page.next,
                format!("{} listing read(s)", pages.get()),
            ))
        }
    })
    .await?;
    Ok((records, more, listed.get()))
}

/// Up to `limit` records by reading every item.
async fn scan_records(
    c: &Connected,
    limit: usize,
    keep: &dyn Fn(&Record) -> bool,
    bar: &ProgressBar,
) -> Result<(Vec<Record>, bool), Failure> {
    let read = std::cell::Cell::new(0u64);
    collect(limit, keep, bar, |cursor| {
        let read = &read;
        async move {
            let page = c
                .store
                .scan(cursor, PAGE)
                .await
                .map_err(|err| store_error(&c.place, err))?;
            read.set(read.get() + page.records.len() as u64 + page.skipped);
            let records = page.records.into_iter().map(|f| f.record).collect();
            Ok((records, page.next, format!("{} item(s) read", read.get())))
        }
    })
    .await
}

async fn resolve(
    c: &Connected,
    args: &ResolveArgs,
    policy: SweepPolicy,
    json: bool,
) -> Result<(), Failure> {
    let action = match policy {
        SweepPolicy::Release => "release",
        SweepPolicy::Fail => "fail",
    };
    let found = fetch(c, &args.record_id).await?;
    let record = &found.record;
    let now = now_ms();
    let grace = millis(args.grace);
    if record.status == Status::Completed {
        return Err(Failure::Usage(format!(
            "record `{}` is COMPLETED (it replays its response {}): {action} acts on records in \
             progress only",
            record.id,
            record.response.as_ref().map_or(0, |r| r.status)
        )));
    }
    let stuck = view::is_stuck(record, now, grace);
    if !stuck && !args.force {
        return Err(Failure::Usage(format!(
            "record `{}` has a live lease (it ends {}, plus {} grace): its invocation may still be \
             running. Wait, or pass --force if it is known to be dead (the write stays fenced on \
             attempt {})",
            record.id,
            view::relative(record.lease_expires_at_ms, now),
            humantime::format_duration(args.grace),
            record.attempt
        )));
    }
    let target = StuckRecord {
        id: record.id.clone(),
        attempt: record.attempt,
        owner: record.owner.clone(),
        lease_expires_at_ms: record.lease_expires_at_ms,
        has_checkpoint: record.checkpoint.is_some(),
    };
    let keeps = policy == SweepPolicy::Release && record.checkpoint.is_some();
    if args.dry_run {
        let would = if keeps { "kept" } else { outcome_name(policy) };
        report(
            json,
            json!({
                "record_id": record.id, "action": action, "dry_run": true,
                "result": would, "attempt": record.attempt, "forced": args.force && !stuck,
            }),
            &format!(
                "dry run: record `{}` (attempt {}) would be {would}{}; nothing was written",
                record.id,
                record.attempt,
                if keeps {
                    " for its retry to resume from its recovery point"
                } else {
                    ""
                }
            ),
        );
        return Ok(());
    }
    let sweeper = Sweeper::new(c.store.clone())
        .policy(policy)
        .grace(args.grace);
    let resolution = if stuck {
        sweeper.resolve(&target, now).await
    } else {
        sweeper.resolve_live(&target, now).await
    }
    .map_err(|err| store_error(&c.place, err))?;
    let (result, line) = match resolution {
        Resolution::Released => (
            "released",
            format!(
                "released record `{}` (attempt {}): the next retry runs the handler again",
                record.id, record.attempt
            ),
        ),
        Resolution::Failed => (
            "failed",
            format!(
                "failed record `{}` (attempt {}): every retry now gets the `abandoned` problem (500)",
                record.id, record.attempt
            ),
        ),
        Resolution::Resumable => {
            let name = record.checkpoint.as_ref().map_or("", |c| c.name.as_str());
            return Err(Failure::NotWritten(format!(
                "kept record `{}`: it holds the recovery point `{name}`, and its next retry \
                 resumes there. To end it instead, use `fail`",
                record.id
            )));
        }
        Resolution::Fenced => {
            return Err(Failure::NotWritten(format!(
                "nothing written: record `{}` changed after it was read (a newer attempt, its \
                 completion, or another resolution). Inspect it again",
                record.id
            )))
        }
    };
    report(
        json,
        json!({
            "record_id": record.id, "action": action, "dry_run": false,
            "result": result, "attempt": record.attempt, "forced": args.force && !stuck,
        }),
        &line,
    );
    Ok(())
}

fn outcome_name(policy: SweepPolicy) -> &'static str {
    match policy {
        SweepPolicy::Release => "released",
        SweepPolicy::Fail => "failed",
    }
}

fn report(json: bool, value: Value, line: &str) {
    if json {
        println!("{value}");
    } else {
        println!("{line}");
    }
}

/// Buckets of in-progress records by how long ago their lease ended: the
/// JSON key, the words for people, the bucket's upper bound in ms.
const AGES: [(&str, &str, u64); 5] = [
    ("lt_1m", "under 1m ago", 60_000),
    ("1m_10m", "1m to 10m ago", 600_000),
    ("10m_1h", "10m to 1h ago", 3_600_000),
    ("1h_1d", "1h to 1d ago", 86_400_000),
    ("gt_1d", "over 1d ago", u64::MAX),
];

#[derive(Default)]
struct Counts {
    live: u64,
    stuck: u64,
    with_recovery_point: u64,
    completed: Option<u64>,
    ages: [u64; AGES.len()],
    oldest_stuck: Option<(String, u64)>,
}

impl Counts {
    fn in_progress(&mut self, id: &str, lease_ms: u64, checkpoint: bool, now: u64, grace: u64) {
        if checkpoint {
            self.with_recovery_point += 1;
        }
        if lease_ms >= now {
            self.live += 1;
            return;
        }
        let ago = now - lease_ms;
        if let Some(i) = AGES.iter().position(|(_, _, below)| ago < *below) {
            self.ages[i] += 1;
        }
        if lease_ms.saturating_add(grace) < now {
            self.stuck += 1;
            if self
                .oldest_stuck
                .as_ref()
                .is_none_or(|(_, l)| lease_ms < *l)
            {
                self.oldest_stuck = Some((id.to_owned(), lease_ms));
            }
        }
    }
}

async fn stats(c: &Connected, args: &StatsArgs, json: bool) -> Result<(), Failure> {
    let now = now_ms();
    let grace = millis(args.grace);
    let mut counts = Counts::default();
    let bar = progress("counting");
    if args.scan {
        let cost = if c.engine == "dynamodb" {
            "billed for every item read"
        } else {
            "one read for every record stored"
        };
        eprintln!("warning: --scan reads every item of {}: {cost}", c.place);
        let mut completed = 0;
        let mut cursor = None;
        loop {
            let page = c
                .store
                .scan(cursor, PAGE)
                .await
                .map_err(|err| store_error(&c.place, err))?;
            for found in &page.records {
                let r = &found.record;
                match r.status {
                    Status::Completed => completed += 1,
                    Status::InProgress => counts.in_progress(
                        &r.id,
                        r.lease_expires_at_ms,
                        r.checkpoint.is_some(),
                        now,
                        grace,
                    ),
                }
            }
            bar.set_message(format!("{completed} completed so far"));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        counts.completed = Some(completed);
    } else {
        let mut cursor = None;
        loop {
            let page = c
                .store
                .stuck(StuckRequest::new(u64::MAX, PAGE).at(cursor))
                .await
                .map_err(|err| store_error(&c.place, err))?;
            if page.failed_reads > 0 {
                return Err(Failure::Store(format!(
                    "listing in-progress records of {} failed (see the log above)",
                    c.place
                )));
            }
            partial_listing_warning(c, &page);
            // The listing's view of a record may lag (and an index holds no
            // recovery point): each record is read for it.
            for listed in &page.records {
                let found = c
                    .store
                    .get(&listed.id)
                    .await
                    .map_err(|err| store_error(&c.place, err))?;
                if let Some(r) = found.map(|f| f.record) {
                    if r.status == Status::InProgress {
                        let point = r.checkpoint.is_some();
                        counts.in_progress(&r.id, r.lease_expires_at_ms, point, now, grace);
                    }
                }
            }
            bar.set_message(format!("{} in progress so far", counts.live + counts.stuck));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    bar.finish_and_clear();
    let in_progress = counts.live + counts.ages.iter().sum::<u64>();
    if in_progress == 0 && !args.scan {
        if let Some(note) = empty_index_note(c).await? {
            eprintln!("{note}");
        }
    }
    let oldest = counts.oldest_stuck.as_ref().map(
        |(id, lease)| json!({ "record_id": id, "lease_expires_at": view::rfc3339_ms(*lease) }),
    );
    if json {
        let ages: serde_json::Map<String, Value> = AGES
            .iter()
            .zip(counts.ages)
            .map(|((key, _, _), n)| ((*key).to_owned(), json!(n)))
            .collect();
        println!(
            "{}",
            json!({
                "source": if args.scan { Some("scan") } else { c.discovery },
                "in_progress": in_progress,
                "live": counts.live,
                "stuck": counts.stuck,
                "with_recovery_point": counts.with_recovery_point,
                "completed": counts.completed,
                "approximate_items": c.approximate_items,
                "engine": c.engine,
                "lease_ended": ages,
                "oldest_stuck": oldest,
            })
        );
        return Ok(());
    }
    let mut table = view::table(&["", "records"]);
    table.add_row(vec!["in progress".to_owned(), in_progress.to_string()]);
    table.add_row(vec!["  live lease".to_owned(), counts.live.to_string()]);
    for ((_, words, _), n) in AGES.iter().zip(counts.ages) {
        table.add_row(vec![format!("  lease ended {words}"), n.to_string()]);
    }
    table.add_row(vec![
        format!("  stuck (grace {})", humantime::format_duration(args.grace)),
        counts.stuck.to_string(),
    ]);
    table.add_row(vec![
        "  with a recovery point".to_owned(),
        counts.with_recovery_point.to_string(),
    ]);
    table.add_row(vec![
        "completed".to_owned(),
        counts
            .completed
            .map_or("not counted (--scan counts them)".to_owned(), |n| {
                n.to_string()
            }),
    ]);
    // DynamoDB's own count; the other engines keep none to read cheaply.
    let items = match (c.engine, c.approximate_items) {
        ("dynamodb", n) => n.map_or("-".to_owned(), |n| n.to_string()),
        _ => "n/a".to_owned(),
    };
    table.add_row(vec!["items (DynamoDB's count, ~6 h old)".to_owned(), items]);
    println!("{table}");
    match counts.oldest_stuck {
        Some((id, lease)) => println!(
            "oldest stuck: `{id}`, lease ended {} ({})",
            view::rfc3339_ms(lease),
            view::relative(lease, now)
        ),
        None => println!("no stuck record"),
    }
    Ok(())
}
