//! `sweeper`: a scheduled Lambda that resolves stuck in-progress idempotency
//! records (see `lambda_idempotency::Sweeper`).
//!
//! Environment: `IDEMPOTENCY_TABLE`, `SWEEP_POLICY` (`release` | `fail`, default
//! `release`), `SWEEP_GRACE_SECONDS` (default 60), `SWEEP_DISCOVERY` (`stream`,
//! the default: stuck records are found in the table's stream; `index`: in
//! the sparse `sweep` index, for tables whose writers opted into it). Input:
//! any event (the schedule's); output: the [`SweepSummary`] as JSON. One EMF
//! metric line with the counts goes to stdout.

use std::time::Duration;

use lambda_idempotency::{DynamoStore, SweepPolicy, SweepSummary, Sweeper};
use lambda_runtime::LambdaEvent;

/// Settings read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`.
    pub table: String,
    /// `SWEEP_POLICY`.
    pub policy: SweepPolicy,
    /// `SWEEP_GRACE_SECONDS`.
    pub grace: Duration,
    /// `SWEEP_DISCOVERY`: find stuck records in the sparse index instead of
    /// the table's stream.
    pub index: bool,
}

impl Config {
    /// Read the settings; the error names the variable and what it must hold.
    pub fn from_env() -> Result<Config, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Read the settings through `lookup` (for tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let table = lookup("IDEMPOTENCY_TABLE")
            .filter(|t| !t.is_empty())
            .ok_or("IDEMPOTENCY_TABLE is not set: give it the idempotency table name")?;
        let policy = match lookup("SWEEP_POLICY") {
            None => SweepPolicy::Release,
            Some(p) => p.parse().map_err(|e| format!("SWEEP_POLICY: {e}"))?,
        };
        let grace = match lookup("SWEEP_GRACE_SECONDS") {
            None => 60,
            Some(g) => g.trim().parse().map_err(|_| {
                format!("SWEEP_GRACE_SECONDS={g:?} is not a whole number of seconds")
            })?,
        };
        let index = match lookup("SWEEP_DISCOVERY").as_deref() {
            None | Some("") | Some("stream") => false,
            Some("index") => true,
            Some(other) => {
                return Err(format!(
                    "SWEEP_DISCOVERY={other:?} is neither `stream` (the table's stream, the \
                     default) nor `index` (the sparse sweep index)"
                ))
            }
        };
        Ok(Config {
            table,
            policy,
            grace: Duration::from_secs(grace),
            index,
        })
    }

    /// The sweeper these settings describe, reading the table's stream with
    /// `streams` (or the index, with `SWEEP_DISCOVERY=index`).
    pub fn sweeper(
        &self,
        client: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
    ) -> Sweeper {
        let store = DynamoStore::new(client, self.table.clone());
        let store = if self.index {
            store.with_sweep_index()
        } else {
            store.with_stream(streams)
        };
        Sweeper::new(store).policy(self.policy).grace(self.grace)
    }
}

/// Handle one scheduled invocation: sweep until done or near the deadline.
///
/// The summary and its EMF line are written even when some requests failed
/// (`errors`, also a metric to alarm on). The invocation fails only when no
/// index page could be read at all (a wrong table name, missing permissions,
/// DynamoDB down), so that misconfiguration shows up as a failed invocation.
pub async fn handle(
    sweeper: &Sweeper,
    event: LambdaEvent<serde_json::Value>,
) -> Result<SweepSummary, lambda_runtime::Error> {
    let summary = sweeper.sweep(Some(event.context.deadline)).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    println!("{}", summary.emf("sweeper", now));
    tracing::info!(?summary, "sweep finished");
    if summary.pages == 0 && summary.errors > 0 {
        return Err(format!(
            "the sweep could not list stuck records of {} ({} failed reads, see the error \
             log lines): check IDEMPOTENCY_TABLE, the table's stream (or the index, with \
             SWEEP_DISCOVERY=index) and the function's permissions on them",
            sweeper.store_description(),
            summary.errors
        )
        .into());
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn defaults_and_errors() {
        let c = Config::from_lookup(env(&[("IDEMPOTENCY_TABLE", "t")])).unwrap();
        assert_eq!(
            (c.policy, c.grace),
            (SweepPolicy::Release, Duration::from_secs(60))
        );
        let c = Config::from_lookup(env(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("SWEEP_POLICY", "FAIL"),
            ("SWEEP_GRACE_SECONDS", "5"),
        ]))
        .unwrap();
        assert_eq!(
            (c.policy, c.grace),
            (SweepPolicy::Fail, Duration::from_secs(5))
        );
        assert!(Config::from_lookup(env(&[]))
            .unwrap_err()
            .contains("IDEMPOTENCY_TABLE"));
        let err = Config::from_lookup(env(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("SWEEP_POLICY", "delete"),
        ]))
        .unwrap_err();
        assert!(err.contains("release") && err.contains("fail"), "{err}");
        assert!(Config::from_lookup(env(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("SWEEP_GRACE_SECONDS", "-1")
        ]))
        .is_err());
    }
}
