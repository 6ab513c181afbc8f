//! `lambda-idempotency`: the operator's command line for idempotency records.
//!
//! What happened to this key, which keys are stuck, can this one run again:
//! `inspect`, `list`, `stats`, and the sweeper's two fenced resolutions for
//! one record, `release` and `fail`. Configured like the functions
//! (`IDEMPOTENCY_TABLE`, the standard AWS variables and profiles), with
//! `--endpoint-url` for DynamoDB Local, or `IDEMPOTENCY_STORE_URL` for
//! Redis, Valkey or PostgreSQL (which wins over the table, as it does for
//! the functions). Exit codes: 0 done, 1 not found,
//! 2 usage (or a write refused without `--force`), 3 store error, 4 nothing
//! written (fenced, or kept for its recovery point).

mod commands;
mod connect;
mod view;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lambda_idempotency::settings;

/// Inspect, list, release and fail idempotency records.
#[derive(Debug, Parser)]
#[command(name = "lambda-idempotency", version, about, long_about = None)]
#[command(
    after_help = "Exit codes: 0 done, 1 not found, 2 usage or refused, 3 store error, \
                        4 nothing written (fenced, or kept for its recovery point)."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// One JSON object per line instead of tables (the documented contract).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the records are.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// The idempotency table.
    #[arg(long, env = settings::TABLE_ENV, global = true)]
    pub(crate) table: Option<String>,
    /// A DynamoDB endpoint other than AWS's (DynamoDB Local: http://localhost:8000).
    #[arg(long, env = "AWS_ENDPOINT_URL_DYNAMODB", global = true)]
    pub(crate) endpoint_url: Option<String>,
    /// The table's region (default: AWS_REGION, then the profile's).
    #[arg(long, global = true)]
    pub(crate) region: Option<String>,
    /// The AWS profile to use (default: AWS_PROFILE, then `default`).
    #[arg(long, global = true)]
    pub(crate) profile: Option<String>,
    /// Records in Redis, Valkey or PostgreSQL instead of DynamoDB, as the
    /// functions read them: redis://, rediss://, postgres://, postgresql://.
    /// Wins over --table, as it does for the functions.
    #[arg(
        long,
        env = settings::STORE_URL_ENV,
        global = true,
        hide_env_values = true
    )]
    pub(crate) store_url: Option<String>,
    /// The Redis URL names a Redis Cluster (ElastiCache Serverless, MemoryDB).
    #[arg(
        long,
        env = settings::REDIS_CLUSTER_ENV,
        global = true,
        // The functions' rule for the variable (true/false, 1/0).
        value_parser = settings::boolean
    )]
    pub(crate) redis_cluster: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Everything about one record: status, lease, expiry, recovery point, stored response, size.
    Inspect(InspectArgs),
    /// Records in progress or stuck, found as the sweeper finds them (DynamoDB: the table's stream or index; no scan unless --scan).
    List(ListArgs),
    /// Delete a stuck record so the next retry runs again (fenced, like the sweeper's `release`).
    Release(ResolveArgs),
    /// Complete a stuck record with the `abandoned` problem (a 500) that every retry replays.
    Fail(ResolveArgs),
    /// Counts by status, ages of in-progress records, the oldest stuck one.
    Stats(StatsArgs),
}

/// Which record: its id, or what the middleware made the id from.
#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// The record id (64 hex characters, as logs and `list` show it).
    #[arg(required_unless_present = "key", conflicts_with = "key")]
    pub(crate) record_id: Option<String>,
    #[command(flatten)]
    pub(crate) scope: ScopeArgs,
}

/// The parts of a record id (see `RecordScope`).
#[derive(Debug, Args)]
pub(crate) struct ScopeArgs {
    /// The Idempotency-Key the client sent.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// The tenant (omit for anonymous requests).
    #[arg(long, requires = "key")]
    pub(crate) tenant: Option<String>,
    /// The HTTP method.
    #[arg(long, default_value = "POST", requires = "key")]
    pub(crate) method: String,
    /// The route template the request matched, or its path.
    #[arg(long, requires = "key")]
    pub(crate) path: Option<String>,
    /// The layer's namespace, if it sets one.
    #[arg(long, default_value = "", requires = "key")]
    pub(crate) namespace: String,
}

/// Which records to list.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Records whose lease ended more than --grace ago (what the sweeper resolves).
    #[arg(long, conflicts_with_all = ["in_progress", "completed"])]
    pub(crate) stuck: bool,
    /// Every record in progress, live leases included (the default).
    #[arg(long, conflicts_with = "completed")]
    pub(crate) in_progress: bool,
    /// Completed records (the sweeper's listing holds only records in progress: needs --scan).
    #[arg(long, requires = "scan")]
    pub(crate) completed: bool,
    /// Only records whose lease ended at least this long ago (10m, 1h30m, 2d).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) older_than: Option<Duration>,
    /// At most this many records.
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: usize,
    /// How long after its lease ended a record counts as stuck (the sweeper's default).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub(crate) grace: Duration,
    /// Read every item of the table instead of the sweeper's listing: finds
    /// records it no longer shows, and completed ones; on DynamoDB billed for every item read.
    #[arg(long)]
    pub(crate) scan: bool,
}

/// One record to resolve.
#[derive(Debug, Args)]
pub(crate) struct ResolveArgs {
    /// The record id.
    pub(crate) record_id: String,
    /// Act on a live lease too (its invocation is known to be dead). Still
    /// fenced on the attempt and owner read: a newer attempt wins.
    #[arg(long)]
    pub(crate) force: bool,
    /// Say what would be written, write nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// How long after its lease ended a record counts as stuck (the sweeper's default).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub(crate) grace: Duration,
}

/// What to count.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Count completed records exactly by reading every item (on DynamoDB billed for every item read).
    #[arg(long)]
    pub(crate) scan: bool,
    /// How long after its lease ended a record counts as stuck (the sweeper's default).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub(crate) grace: Duration,
}

/// Why a command ended without doing its job, with its exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Exit 1: no such record.
    NotFound(String),
    /// Exit 2: the command cannot be carried out as given.
    Usage(String),
    /// Exit 3: the store failed or is misconfigured.
    Store(String),
    /// Exit 4: the write was fenced or withheld; nothing was written.
    NotWritten(String),
}

impl Failure {
    fn exit_code(&self) -> u8 {
        match self {
            Failure::NotFound(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Store(_) => 3,
            Failure::NotWritten(_) => 4,
        }
    }

    fn message(&self) -> &str {
        match self {
            Failure::NotFound(m)
            | Failure::Usage(m)
            | Failure::Store(m)
            | Failure::NotWritten(m) => m,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {}", failure.message());
            ExitCode::from(failure.exit_code())
        }
    }
}
