//! The settings of `orders-api`: the library's `IDEMPOTENCY_*` variables,
//! read and checked once by `lambda_idempotency::settings` (every function
//! by the same rules; docs/configuration.md lists them), and this function's
//! own: `ORDERS_TABLE`, `SIMULATED_PROVIDER_LATENCY_MS` and
//! `ORDERS_API_DEMO_CRASHES`.

use std::time::Duration;

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

/// A cut-over from Powertools for AWS Lambda (Python or TypeScript)
/// without running a key twice (docs/powertools.md, "Cutting over"): until
/// the window ends, a key this API has no record of is looked up in
/// Powertools' table (one `GetItem`); a key Powertools completed replays
/// its stored response, one it still runs answers `409`. The key is what
/// Powertools' `event_key_jmespath` selects from the API Gateway event
/// (`IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH`), the `Idempotency-Key` header's
/// value without one. Checked when the configuration is read: expressions
/// that are not JMESPath, and a key that would not keep tenants apart (the
/// JWT `sub`) unless `IDEMPOTENCY_POWERTOOLS_SHARED_KEYS=true`, refuse the
/// start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowertoolsCutover {
    /// The `IDEMPOTENCY_POWERTOOLS_*` variables, checked.
    pub settings: PowertoolsSettings,
}

impl PowertoolsCutover {
    /// `settings`, refused when they do not describe records
    /// ([`PowertoolsRecords::from_settings`]) or would answer one tenant of
    /// `tenant` with another's response ([`PowertoolsRecords::check_tenant`]).
    pub fn checked(settings: PowertoolsSettings, tenant: &TenantSource) -> Result<Self, String> {
        // A client that sends nothing: the records are only checked here.
        let offline = Client::from_conf(
            aws_sdk_dynamodb::Config::builder()
                .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
                .build(),
        );
        let records =
            PowertoolsRecords::from_settings(offline, &settings).map_err(|e| e.to_string())?;
        records.check_tenant(tenant).map_err(|e| e.to_string())?;
        Ok(PowertoolsCutover { settings })
    }

    /// The records this cut-over reads, through `client`.
    pub fn records(&self, client: Client) -> PowertoolsRecords {
        match PowertoolsRecords::from_settings(client, &self.settings) {
            Ok(records) => records,
            // `checked` built these very records when the configuration was
            // read, so this cannot fail.
            Err(e) => unreachable!("the cut-over's settings were checked: {e}"),
        }
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
        tenant_source(self.allow_anonymous)
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
        let tenant = tenant_source(settings.allow_anonymous);
        let powertools = match settings.powertools {
            Some(powertools) => Some(PowertoolsCutover::checked(powertools, &tenant)?),
            None => None,
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
            powertools,
            disabled: settings.disabled,
            warm_up: settings.warm_up,
        })
    }
}

/// The JWT `sub`, and the shared anonymous scope when allowed.
fn tenant_source(allow_anonymous: bool) -> TenantSource {
    if allow_anonymous {
        TenantSource::jwt_sub().or_anonymous()
    } else {
        TenantSource::jwt_sub()
    }
}

#[cfg(test)]
mod tests;
