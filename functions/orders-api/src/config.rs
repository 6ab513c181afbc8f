//! The settings of `orders-api`: the library's `IDEMPOTENCY_*` variables,
//! read and checked once by `lambda_idempotency::settings` (every function
//! by the same rules; docs/configuration.md lists them), and this function's
//! own: `ORDERS_TABLE`, `SIMULATED_PROVIDER_LATENCY_MS` and
//! `ORDERS_API_DEMO_CRASHES`.

use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::Client;
use lambda_idempotency::settings::{PowertoolsSettings, Settings};
use lambda_idempotency::store::powertools::PowertoolsRecords;
use lambda_idempotency::TenantSource;

pub use lambda_idempotency::settings::{
    POWERTOOLS_KEY_PREFIX_ENV, POWERTOOLS_TABLE_ENV, POWERTOOLS_UNTIL_ENV,
};

/// Settings read from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`: where the records live unless `engine` names
    /// another store (then it may be unset, and is empty).
    pub idempotency_table: String,
    /// `IDEMPOTENCY_STORE_URL` and its companions: the records in Redis,
    /// Valkey or PostgreSQL instead ([`idempotency_engine::open`]).
    pub engine: idempotency_engine::Engine,
    /// `ORDERS_TABLE`.
    pub orders_table: String,
    /// `SIMULATED_PROVIDER_LATENCY_MS` (default 0).
    pub provider_latency: Duration,
    /// `IDEMPOTENCY_EXPIRES_AFTER_SECONDS` (default 86400).
    pub expires_after: Duration,
    /// `IDEMPOTENCY_MAX_LEASE_SECONDS` (default 900).
    pub max_lease: Duration,
    /// `IDEMPOTENCY_WAIT_FOR_RESULT_MS` (default 0: off): how long a retry
    /// that finds the same order still in progress waits for its response
    /// instead of answering `409` at once (at most 900,000, and never past
    /// the invocation's deadline less 1 s).
    pub wait_for_result: Duration,
    /// `ORDERS_API_DEMO_CRASHES=1`: honour the demo's `x-demo-crash:
    /// after-charge` header by exiting the process after the charge is
    /// recorded. Never set it in production.
    pub demo_crashes: bool,
    /// `IDEMPOTENCY_METRICS_NAMESPACE`: emit the middleware's EMF metrics
    /// under this CloudWatch namespace (off when unset).
    pub metrics_namespace: Option<String>,
    /// `IDEMPOTENCY_ALLOW_ANONYMOUS=true`: requests without a JWT `sub` share
    /// one anonymous scope (an API without an authorizer). Default `false`:
    /// they are refused with a `401`, so no caller can replay another's
    /// response.
    pub allow_anonymous: bool,
    /// `IDEMPOTENCY_OFFLOAD_BUCKET` (and `IDEMPOTENCY_OFFLOAD_PREFIX`, default
    /// `orders-api/`): keep responses too large for the idempotency table in
    /// this S3 bucket and replay them from there ([`app_with_s3`](crate::app_with_s3)).
    /// Unset: such a response completes with the `response-too-large` problem.
    pub offload: Option<Offload>,
    /// `IDEMPOTENCY_POWERTOOLS_TABLE`, `IDEMPOTENCY_POWERTOOLS_KEY_PREFIX`
    /// and `IDEMPOTENCY_POWERTOOLS_UNTIL`: the cut-over from Powertools;
    /// `None` (the table unset or empty) when there is none.
    pub powertools: Option<PowertoolsCutover>,
    /// `IDEMPOTENCY_DISABLED=true`: the middleware switched off, for local
    /// tests (a warning is logged).
    pub disabled: bool,
    /// `IDEMPOTENCY_WARM_UP` (default true): the store's connection opened
    /// during init (`Store::warm_up`).
    pub warm_up: bool,
}

/// A cut-over from Powertools for AWS Lambda (Python) without running a
/// key twice (docs/powertools.md, "Cutting over"): until `until`, a key
/// this API has no record of is looked up in Powertools' table (one
/// `GetItem`); a key Powertools completed replays its stored response, one
/// it still runs answers `409`. Powertools' default layout: partition key
/// `id`, MD5 of the `Idempotency-Key` header's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowertoolsCutover {
    /// `IDEMPOTENCY_POWERTOOLS_TABLE`: the DynamoDB table (it may be the
    /// idempotency table itself).
    pub table: String,
    /// `IDEMPOTENCY_POWERTOOLS_KEY_PREFIX`: the part before `#` of the ids
    /// Powertools wrote (`<function name>.<module>.<handler>`, or its
    /// decorator's `key_prefix`).
    pub key_prefix: String,
    /// `IDEMPOTENCY_POWERTOOLS_UNTIL`: when the lookups stop; the switch
    /// plus Powertools' `expires_after_seconds` is enough.
    pub until: SystemTime,
}

impl From<PowertoolsSettings> for PowertoolsCutover {
    fn from(settings: PowertoolsSettings) -> Self {
        PowertoolsCutover {
            table: settings.table,
            key_prefix: settings.key_prefix,
            until: settings.until,
        }
    }
}

impl PowertoolsCutover {
    /// The records this cut-over reads, through `client`.
    pub fn records(&self, client: Client) -> PowertoolsRecords {
        PowertoolsRecords::new(client, &self.table, &self.key_prefix, self.until)
    }
}

/// Where responses too large for the idempotency table go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offload {
    /// The S3 bucket.
    pub bucket: String,
    /// The prefix of this function's objects (its IAM policy and the
    /// bucket's lifecycle rule are scoped to it).
    pub prefix: String,
}

impl Config {
    /// Where a request's tenant comes from: the JWT `sub`, refusing requests
    /// without one unless the configuration allows a shared anonymous scope.
    pub fn tenant_source(&self) -> TenantSource {
        if self.allow_anonymous {
            TenantSource::jwt_sub().or_anonymous()
        } else {
            TenantSource::jwt_sub()
        }
    }

    /// Read the settings; the error names the variable and what it must hold.
    pub fn from_env() -> Result<Config, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Read the settings through `lookup` (for tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let settings = Settings::from_lookup(&lookup).map_err(|e| e.to_string())?;
        Self::from_settings(settings, lookup)
    }

    /// The configuration from the library's `settings`, already read and
    /// checked, and this function's own variables through `lookup`.
    pub fn from_settings(
        settings: Settings,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, String> {
        let required = |name: &str| {
            lookup(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| format!("{name} is not set: give it the DynamoDB table name"))
        };
        let idempotency_table = match settings.table() {
            Ok(table) => table.to_owned(),
            Err(e) if settings.store.is_dynamodb() => return Err(e.to_string()),
            Err(_) => String::new(),
        };
        let orders_table = required("ORDERS_TABLE")?;
        let provider_latency = match lookup("SIMULATED_PROVIDER_LATENCY_MS") {
            None => 0,
            Some(v) => v.trim().parse::<u64>().map_err(|_| {
                format!("SIMULATED_PROVIDER_LATENCY_MS={v:?} is not a whole non-negative number")
            })?,
        };
        Ok(Config {
            idempotency_table,
            engine: settings.store,
            orders_table,
            provider_latency: Duration::from_millis(provider_latency),
            expires_after: settings
                .expires_after
                .unwrap_or(Duration::from_secs(86_400)),
            max_lease: settings.max_lease.unwrap_or(Duration::from_secs(900)),
            wait_for_result: settings.wait_for.unwrap_or(Duration::ZERO),
            demo_crashes: lookup("ORDERS_API_DEMO_CRASHES").as_deref() == Some("1"),
            metrics_namespace: settings.metrics_namespace,
            allow_anonymous: settings.allow_anonymous,
            offload: settings.offload.map(|offload| Offload {
                bucket: offload.bucket,
                prefix: offload.prefix.unwrap_or_else(|| "orders-api/".to_owned()),
            }),
            powertools: settings.powertools.map(PowertoolsCutover::from),
            disabled: settings.disabled,
            warm_up: settings.warm_up,
        })
    }
}

#[cfg(test)]
mod tests;
