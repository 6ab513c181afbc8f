//! How records look to people (tables) and to scripts (JSON lines).
//!
//! The JSON field names are a documented contract (cli/README.md):
//! `record_id`, `status` (`IN_PROGRESS` or `COMPLETED`, as stored),
//! `attempt`, `lease_expires_at` and `expires_at` (RFC 3339, UTC), `stuck`,
//! `recovery_point` (name or null) and `response_status` (null while in
//! progress). `inspect` adds fields; none is ever renamed.

use std::io::IsTerminal;
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;
use comfy_table::{Cell, Color, ContentArrangement, Table};
use lambda_idempotency::store::{Record, Status, StoredBody, StoredRecord};
use serde_json::{json, Value};

/// The last second RFC 3339 can write (its years have four digits).
const LAST_RFC3339_SECOND: &str = "9999-12-31T23:59:59Z";

/// An instant, epoch milliseconds, as RFC 3339 UTC to the second. Instants
/// past the year 9999 (a saturated lease, a foreign record) are shown as its
/// last second: humantime refuses them, and one such record must not stop a
/// listing.
pub(crate) fn rfc3339_ms(ms: u64) -> String {
    let mut text = String::new();
    let at = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms));
    match std::fmt::Write::write_fmt(&mut text, format_args!("{at}")) {
        Ok(()) => text,
        Err(_) => LAST_RFC3339_SECOND.to_owned(),
    }
}

/// A signed span from now, for people: `in 42s`, `3m 5s ago`.
pub(crate) fn relative(at_ms: u64, now_ms: u64) -> String {
    let span = |ms: u64| {
        // Whole seconds: milliseconds are noise to an operator.
        humantime::format_duration(Duration::from_secs(ms / 1000)).to_string()
    };
    if at_ms >= now_ms {
        format!("in {}", span(at_ms - now_ms))
    } else {
        format!("{} ago", span(now_ms - at_ms))
    }
}

/// Is `record` stuck: in progress, its lease over for more than `grace_ms`.
pub(crate) fn is_stuck(record: &Record, now_ms: u64, grace_ms: u64) -> bool {
    record.status == Status::InProgress
        && record.lease_expires_at_ms.saturating_add(grace_ms) < now_ms
}

/// The contract fields of one record.
pub(crate) fn summary_json(record: &Record, now_ms: u64, grace_ms: u64) -> Value {
    json!({
        "record_id": record.id,
        "status": record.status.as_str(),
        "attempt": record.attempt,
        "lease_expires_at": rfc3339_ms(record.lease_expires_at_ms),
        "expires_at": rfc3339_ms(record.expires_at_s.saturating_mul(1000)),
        "stuck": is_stuck(record, now_ms, grace_ms),
        "recovery_point": record.checkpoint.as_ref().map(|c| c.name.clone()),
        "response_status": record.response.as_ref().map(|r| r.status),
    })
}

/// Everything `inspect` says about a record, as JSON: the contract fields
/// plus owner, fingerprint, the recovery point's data, the stored response
/// and the sizes.
pub(crate) fn detail_json(found: &StoredRecord, now_ms: u64, grace_ms: u64) -> Value {
    let record = &found.record;
    let mut out = summary_json(record, now_ms, grace_ms);
    let extra = json!({
        "owner": record.owner,
        "fingerprint": record.fingerprint,
        "expired": record.expires_at_s.saturating_mul(1000) < now_ms,
        "recovery_point_data": record.checkpoint.as_ref().map(|c| c.data.clone()),
        "recovery_point_attempt": record.checkpoint.as_ref().map(|c| c.attempt),
        "response": record.response.as_ref().map(|r| json!({
            "status": r.status,
            "headers": r.headers.iter()
                .map(|(name, value)| json!([name, String::from_utf8_lossy(value)]))
                .collect::<Vec<_>>(),
            "body": body_json(&r.body),
            "body_bytes": r.body.bytes().len(),
        })),
        "size_bytes": found.size_bytes,
        "write_units": found.write_units,
    });
    if let (Some(out), Value::Object(extra)) = (out.as_object_mut(), extra) {
        out.extend(extra);
    }
    out
}

/// A stored body for JSON: parsed when it is JSON, text when it is text,
/// base64 otherwise.
fn body_json(body: &StoredBody) -> Value {
    match body {
        StoredBody::Empty => Value::Null,
        StoredBody::Text(text) => serde_json::from_str(text).unwrap_or_else(|_| json!(text)),
        StoredBody::Binary(bytes) => {
            json!({ "base64": base64::engine::general_purpose::STANDARD.encode(bytes) })
        }
    }
}

/// A stored body for people: JSON pretty-printed, text as it is, binary as a
/// length and base64.
fn body_text(body: &StoredBody) -> String {
    match body_json(body) {
        Value::Null => "(empty)".into(),
        Value::String(text) => text,
        other @ Value::Object(_) if matches!(body, StoredBody::Binary(_)) => format!(
            "({} bytes, binary) {}",
            body.bytes().len(),
            other["base64"].as_str().unwrap_or_default()
        ),
        other => serde_json::to_string_pretty(&other).unwrap_or_default(),
    }
}

/// Colours only for a terminal, and never with `NO_COLOR` set.
pub(crate) fn colours() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
}

/// A table with the project's look: no wrapping (ids are copied from it).
pub(crate) fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().map(Cell::new));
    if !colours() {
        table.force_no_tty();
    }
    table
}

/// The status cell: coloured by what it means when colours are on.
pub(crate) fn status_cell(record: &Record, stuck: bool) -> Cell {
    let (text, colour) = match (record.status, stuck) {
        (Status::Completed, _) => ("COMPLETED", Color::Green),
        (Status::InProgress, true) => ("IN_PROGRESS (stuck)", Color::Red),
        (Status::InProgress, false) => ("IN_PROGRESS", Color::Yellow),
    };
    let cell = Cell::new(text);
    if colours() {
        cell.fg(colour)
    } else {
        cell
    }
}

/// The rows of `list`.
pub(crate) fn list_table(records: &[Record], now_ms: u64, grace_ms: u64) -> Table {
    let mut table = table(&[
        "record id",
        "status",
        "attempt",
        "lease ends",
        "expires",
        "recovery point",
        "response",
    ]);
    for record in records {
        let stuck = is_stuck(record, now_ms, grace_ms);
        table.add_row(vec![
            Cell::new(&record.id),
            status_cell(record, stuck),
            Cell::new(record.attempt),
            Cell::new(relative(record.lease_expires_at_ms, now_ms)),
            Cell::new(relative(record.expires_at_s.saturating_mul(1000), now_ms)),
            Cell::new(record.checkpoint.as_ref().map_or("-", |c| c.name.as_str())),
            Cell::new(
                record
                    .response
                    .as_ref()
                    .map_or("-".to_owned(), |r| r.status.to_string()),
            ),
        ]);
    }
    table
}

/// `inspect` for people: one field a row, then the stored response.
pub(crate) fn detail_table(found: &StoredRecord, now_ms: u64, grace_ms: u64) -> String {
    let record = &found.record;
    let stuck = is_stuck(record, now_ms, grace_ms);
    let mut table = table(&["field", "value"]);
    let lease = format!(
        "{} ({})",
        rfc3339_ms(record.lease_expires_at_ms),
        relative(record.lease_expires_at_ms, now_ms)
    );
    let expires_ms = record.expires_at_s.saturating_mul(1000);
    let mut expiry = format!(
        "{} ({})",
        rfc3339_ms(expires_ms),
        relative(expires_ms, now_ms)
    );
    if expires_ms < now_ms {
        expiry.push_str(": expired, absent to claims; TTL deletes it");
    }
    table.add_row(vec![Cell::new("record id"), Cell::new(&record.id)]);
    table.add_row(vec![Cell::new("status"), status_cell(record, stuck)]);
    table.add_row(vec![Cell::new("attempt"), Cell::new(record.attempt)]);
    table.add_row(vec![Cell::new("owner"), Cell::new(&record.owner)]);
    table.add_row(vec![Cell::new("lease ends"), Cell::new(lease)]);
    table.add_row(vec![Cell::new("expires"), Cell::new(expiry)]);
    table.add_row(vec![
        Cell::new("fingerprint"),
        Cell::new(&record.fingerprint),
    ]);
    let point = match &record.checkpoint {
        Some(c) => format!("{} (attempt {}): {}", c.name, c.attempt, c.data),
        None => "-".into(),
    };
    table.add_row(vec![Cell::new("recovery point"), Cell::new(point)]);
    let size = match (found.size_bytes, found.write_units) {
        (Some(bytes), Some(units)) => format!("{bytes} bytes, {units} write unit(s) per write"),
        (Some(bytes), None) => format!("{bytes} bytes"),
        _ => "-".into(),
    };
    table.add_row(vec![Cell::new("size"), Cell::new(size)]);
    let mut out = table.to_string();
    if let Some(response) = &record.response {
        out.push_str(&format!("\n\nstored response: {}\n", response.status));
        for (name, value) in &response.headers {
            out.push_str(&format!("{name}: {}\n", String::from_utf8_lossy(value)));
        }
        out.push('\n');
        out.push_str(&body_text(&response.body));
    }
    out
}
