//! `sweeper`: a scheduled Lambda that resolves stuck in-progress idempotency
//! records (see `lambda_idempotency::sweeper::Sweeper`).
//!
//! Environment: `IDEMPOTENCY_TABLE`, `SWEEP_POLICY` (`release` | `fail`, default
//! `release`), `SWEEP_GRACE_SECONDS` (default 60), `SWEEP_DISCOVERY` (`stream`,
//! the default: stuck records are found in the table's stream; `index`: in
//! the sparse `sweep` index, for tables whose writers opted into it),
//! `AWS_ENDPOINT_URL_DYNAMODB_STREAMS` (where the stream is read; unset or
//! empty: where `AWS_ENDPOINT_URL_DYNAMODB` points, so DynamoDB Local needs
//! only that one, see `lambda_idempotency::store::dynamodb::streams_endpoint`), and
//! `IDEMPOTENCY_MAX_LEASE_SECONDS` (the writers' longest lease, read by the
//! library's rule as theirs, `lambda_idempotency::settings`, default 900:
//! with the stream as discovery, one that with the grace reaches
//! the stream's 24-hour retention is refused, see
//! `lambda_idempotency::store::dynamodb::check_lease_within_stream`), and
//! `IDEMPOTENCY_STORE_URL` with its companions (the `idempotency_engine`
//! crate): the records in Redis, Valkey or PostgreSQL, listed through the
//! store (`IDEMPOTENCY_TABLE` is then not needed); on PostgreSQL each run
//! also deletes expired rows in bounded batches, and
//! `IDEMPOTENCY_SWEEP_FULL_PASS_SECONDS` (default 3600: how often a full pass
//! of the table backs the stream up, `lambda_idempotency::settings`). Input:
//! any event (the schedule's); output: the [`SweepOutput`] as JSON (the
//! [`SweepSummary`]'s fields, and `trimmed`). One EMF
//! metric line with the counts goes to stdout (dimension `Function=sweeper`,
//! and `Stack=<value>` when `IDEMPOTENCY_METRICS_STACK` is set, as the
//! templates set it to the stack's name:
//! `lambda_idempotency::metrics::STACK_ENV`). The cold start
//! ([`Config::start`]) checks the table's stream: one without new images
//! (`KEYS_ONLY`, `OLD_IMAGE`) fails it, in one line naming `StreamViewType`.

use std::time::Duration;

use lambda_idempotency::{
    settings::Settings,
    store::{now_ms, SweepStore},
    sweeper::{SweepPolicy, SweepSummary, Sweeper},
    DynamoStore,
};
use lambda_runtime::LambdaEvent;

/// The function's output: the sweep's counts, and `trimmed`, which earlier
/// versions wrote when the stream had trimmed records before the sweeper
/// read them: now the same as `behind` (that, or a full pass that could not
/// finish within its period), kept so that readers of the output go on
/// working.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SweepOutput {
    /// The sweep's counts.
    #[serde(flatten)]
    pub summary: SweepSummary,
    /// The same as [`SweepSummary::behind`].
    pub trimmed: bool,
}

impl std::ops::Deref for SweepOutput {
    type Target = SweepSummary;
    fn deref(&self) -> &SweepSummary {
        &self.summary
    }
}

/// Settings read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE` (empty when `engine` names another store).
    pub table: String,
    /// `IDEMPOTENCY_STORE_URL` and its companions.
    pub engine: idempotency_engine::Engine,
    /// `SWEEP_POLICY`.
    pub policy: SweepPolicy,
    /// `SWEEP_GRACE_SECONDS`.
    pub grace: Duration,
    /// `SWEEP_DISCOVERY`: find stuck records in the sparse index instead of
    /// the table's stream.
    pub index: bool,
    /// Where the table's stream is read (`None`: the region's endpoint):
    /// `AWS_ENDPOINT_URL_DYNAMODB_STREAMS`, else `AWS_ENDPOINT_URL_DYNAMODB`.
    pub streams_endpoint: Option<String>,
    /// `IDEMPOTENCY_SWEEP_FULL_PASS_SECONDS`: how often the full pass of the
    /// table, the stream's backstop, starts (zero: only at a gap).
    pub full_pass: Duration,
}

impl Config {
    /// Read the settings; the error names the variable and what it must hold.
    pub fn from_env() -> Result<Config, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Read the settings through `lookup` (for tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        // The IDEMPOTENCY_* variables are the library's, read and checked
        // there; the SWEEP_* ones are this function's own.
        let settings = Settings::from_lookup(&lookup).map_err(|e| e.to_string())?;
        let engine = settings.store.clone();
        let table = match settings.table() {
            Ok(table) => table.to_owned(),
            Err(e) if engine.is_dynamodb() => return Err(e.to_string()),
            Err(_) => String::new(),
        };
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
        if engine.is_dynamodb() && !index {
            // The writers' longest lease, read by the same rule as theirs.
            let max_lease = settings.max_lease.map_or(900, |lease| lease.as_secs());
            lambda_idempotency::store::dynamodb::check_lease_within_stream(
                Duration::from_secs(max_lease),
                Duration::from_secs(grace),
            )
            .map_err(|e| {
                format!(
                    "IDEMPOTENCY_MAX_LEASE_SECONDS={max_lease} with SWEEP_GRACE_SECONDS={grace} \
                     and SWEEP_DISCOVERY=stream: {e} (SWEEP_DISCOVERY=index)"
                )
            })?;
        }
        Ok(Config {
            table,
            engine,
            policy,
            grace: Duration::from_secs(grace),
            index,
            streams_endpoint: lambda_idempotency::store::dynamodb::streams_endpoint(&lookup),
            full_pass: settings
                .sweep_full_pass
                .unwrap_or(lambda_idempotency::store::dynamodb::DEFAULT_FULL_PASS),
        })
    }

    /// The store these settings describe: reading the table's stream with
    /// a client built from `streams` at [`streams_endpoint`](Self::streams_endpoint)
    /// (feature `sweep-via-stream`), or the index with
    /// `SWEEP_DISCOVERY=index`.
    ///
    /// # Errors
    ///
    /// The store's configuration error, as one line.
    fn store(
        &self,
        client: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::config::Builder,
    ) -> Result<DynamoStore, String> {
        let store = DynamoStore::builder(client, self.table.clone());
        let store = if self.index {
            store.with_sweep_index()
        } else {
            store
                .with_stream_at(streams, self.streams_endpoint.clone())
                .full_pass(self.full_pass)
        };
        store.open().map_err(|e| e.to_string())
    }

    /// The sweeper these settings describe on the DynamoDB table, without
    /// the cold start's check ([`start`](Self::start)).
    ///
    /// # Errors
    ///
    /// The store's configuration error, as one line.
    pub fn sweeper(
        &self,
        client: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::config::Builder,
    ) -> Result<Sweeper, String> {
        Ok(self.sweeper_on(self.store(client, streams)?))
    }

    /// The sweeper of the function's cold start: one store, whose table's
    /// discovery is checked before it sweeps.
    ///
    /// # Errors
    ///
    /// One line naming what is wrong and the setting to change.
    pub async fn start(
        &self,
        client: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::config::Builder,
    ) -> Result<Sweeper, String> {
        let store = self.store(client, streams)?;
        if !self.index {
            // A stream without new images would list nothing, sweep after
            // sweep, and report success: refuse it now.
            store.check_stream().await.map_err(|e| e.to_string())?;
        }
        Ok(self.sweeper_on(store))
    }

    /// The sweeper these settings describe on `store` (the engine
    /// `IDEMPOTENCY_STORE_URL` names), which lists its stuck records itself.
    /// Each sweep also runs the store's housekeeping
    /// ([`Sweeper::housekeeping`]): on PostgreSQL it deletes expired rows in
    /// bounded batches; elsewhere it sends nothing.
    pub fn sweeper_on(&self, store: impl SweepStore + 'static) -> Sweeper {
        Sweeper::new(store)
            .policy(self.policy)
            .grace(self.grace)
            .housekeeping(true)
    }
}

/// Handle one scheduled invocation: sweep until done or near the deadline,
/// then delete expired rows (the housekeeping, PostgreSQL's) in the time left.
///
/// The summary and its EMF line are written even when some requests failed
/// (`errors`, also a metric to alarm on). The invocation fails only when no
/// read of the listing succeeded and at least one failed (`pages` 0,
/// `errors` above 0): the stream, the sparse index or the engine could not
/// be read at all (a wrong table name, missing permissions, the store down),
/// so that misconfiguration shows up as a failed invocation; or when the
/// housekeeping failed (`housekeeping_failed`: the role may not delete).
pub async fn handle(
    sweeper: &Sweeper,
    event: LambdaEvent<serde_json::Value>,
) -> Result<SweepOutput, lambda_runtime::Error> {
    let summary = sweeper.sweep(Some(event.context.deadline)).await;
    println!("{}", summary.emf("sweeper", now_ms()));
    tracing::info!(?summary, "sweep finished");
    if summary.pages == 0 && summary.errors > 0 {
        return Err(format!(
            "the sweep could not list stuck records of {} ({} failed reads, see the error \
             log lines): check IDEMPOTENCY_TABLE, the endpoint (AWS_ENDPOINT_URL_DYNAMODB), \
             the table's stream (or the index, with SWEEP_DISCOVERY=index) and the \
             function's permissions on them",
            sweeper.store_description(),
            summary.errors
        )
        .into());
    }
    if summary.housekeeping_failed {
        return Err(format!(
            "deleting expired idempotency records of {} failed after {} rows (see the error \
             log line); the rest stay, harmless, until a later run: check \
             IDEMPOTENCY_STORE_URL and the role's DELETE privilege on the table",
            sweeper.store_description(),
            summary.expired_deleted
        )
        .into());
    }
    Ok(SweepOutput {
        trimmed: summary.behind,
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use idempotency_engine::lookup_in;

    #[test]
    fn defaults_and_errors() {
        let c = Config::from_lookup(lookup_in(&[("IDEMPOTENCY_TABLE", "t")])).unwrap();
        assert_eq!(
            (c.policy, c.grace),
            (SweepPolicy::Release, Duration::from_secs(60))
        );
        let c = Config::from_lookup(lookup_in(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("SWEEP_POLICY", "FAIL"),
            ("SWEEP_GRACE_SECONDS", "5"),
        ]))
        .unwrap();
        assert_eq!(
            (c.policy, c.grace),
            (SweepPolicy::Fail, Duration::from_secs(5))
        );
        assert!(Config::from_lookup(lookup_in(&[]))
            .unwrap_err()
            .contains("IDEMPOTENCY_TABLE"));
        let err = Config::from_lookup(lookup_in(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("SWEEP_POLICY", "delete"),
        ]))
        .unwrap_err();
        assert!(err.contains("release") && err.contains("fail"), "{err}");
        assert!(Config::from_lookup(lookup_in(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("SWEEP_GRACE_SECONDS", "-1")
        ]))
        .is_err());
    }

    #[test]
    fn a_lease_longer_than_the_stream_keeps_its_claim_is_refused() {
        let config = |lease: &'static str, discovery: &'static str| {
            Config::from_lookup(lookup_in(&[
                ("IDEMPOTENCY_TABLE", "t"),
                ("IDEMPOTENCY_MAX_LEASE_SECONDS", lease),
                ("SWEEP_DISCOVERY", discovery),
            ]))
        };
        assert!(config("900", "stream").is_ok());
        assert!(config("86000", "stream").is_ok());
        // The longest lease the writers accept (a day, the library's rule)
        // with the grace reaches the stream's retention.
        let err = config("86400", "stream").unwrap_err();
        assert!(
            err.contains("IDEMPOTENCY_MAX_LEASE_SECONDS=86400")
                && err.contains("86400 s")
                && err.contains("SWEEP_GRACE_SECONDS=60")
                && !err.contains('\n'),
            "{err}"
        );
        // The grace counts: 86,340 s plus 60 s reaches the retention.
        assert!(config("86340", "stream").is_err());
        // The index keeps a record until it is resolved: no bound there
        // but the writers' own (a day), the same rule as theirs.
        assert!(config("86400", "index").is_ok());
        for discovery in ["stream", "index"] {
            let err = config("90000", discovery).unwrap_err();
            assert!(
                err.starts_with("IDEMPOTENCY_MAX_LEASE_SECONDS=\"90000\" is not a whole number of seconds from 1 to 86400"),
                "{err}"
            );
        }
        assert!(config("soon", "stream")
            .unwrap_err()
            .contains("IDEMPOTENCY_MAX_LEASE_SECONDS"));
    }

    #[test]
    fn a_store_url_needs_no_table() {
        let c = Config::from_lookup(lookup_in(&[(
            "IDEMPOTENCY_STORE_URL",
            "redis://cache:6379",
        )]))
        .unwrap();
        assert_eq!(c.table, "");
        assert_eq!(c.engine.url.as_deref(), Some("redis://cache:6379"));
        assert!(
            Config::from_lookup(lookup_in(&[("IDEMPOTENCY_CREATE_SCHEMA", "1")]))
                .unwrap_err()
                .contains("IDEMPOTENCY_STORE_URL")
        );
    }
}
