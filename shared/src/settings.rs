//! Every `IDEMPOTENCY_*` environment variable the library, the example
//! functions and the CLI understand, defined, validated and documented in
//! one place, and read once.
//!
//! [`VARIABLES`] is the definition: each variable's name, what it holds,
//! its default and what it sets. The parsers below read each variable
//! through its entry, so a rule (a range, what counts as a boolean) is
//! written once; the table in `docs/configuration.md` is generated from the
//! same entries ([`markdown_table`]) and a test fails when the two differ.
//!
//! Everywhere, a variable that is unset or holds only spaces keeps its
//! default, and spaces around a value are ignored. A value that is not what
//! the variable holds is an [`ErrorKind::InvalidConfig`](crate::ErrorKind)
//! error in one line that names the variable, the value and what to set.
//!
//! ```
//! use lambda_idempotency::settings::Settings;
//!
//! let env = |name: &str| match name {
//!     "IDEMPOTENCY_TABLE" => Some("idempotency".to_owned()),
//!     "IDEMPOTENCY_WAIT_FOR_RESULT_MS" => Some("8000".to_owned()),
//!     _ => None,
//! };
//! let settings = Settings::from_lookup(env).unwrap();
//! assert_eq!(settings.table().unwrap(), "idempotency");
//! assert_eq!(settings.wait_for, Some(std::time::Duration::from_secs(8)));
//!
//! let typo = |name: &str| (name == "IDEMPOTENCY_MAX_LEASE_SECONDS").then(|| "15m".to_owned());
//! let err = Settings::from_lookup(typo).unwrap_err();
//! assert!(err.to_string().starts_with("IDEMPOTENCY_MAX_LEASE_SECONDS=\"15m\" is not a whole number of seconds from 1 to 86400"));
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Error;

mod variables;

pub use variables::*;

impl Variable {
    /// The value, trimmed; `None` when unset or empty.
    fn read(&self, lookup: &impl Fn(&str) -> Option<String>) -> Option<String> {
        lookup(self.name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// "`NAME="value"` is not <kind>: <what>; <fix>", the one-line error of
    /// a value this variable does not hold.
    fn refuse(&self, value: &str, fix: &str) -> Error {
        Error::invalid_config(format!(
            "{}={value:?} is not {}: {}; {fix}",
            self.name,
            self.kind.describe(),
            self.what
        ))
    }

    fn text(&self, lookup: &impl Fn(&str) -> Option<String>) -> Option<String> {
        self.read(lookup)
    }

    fn boolean(&self, lookup: &impl Fn(&str) -> Option<String>) -> Result<Option<bool>, Error> {
        let Some(value) = self.read(lookup) else {
            return Ok(None);
        };
        boolean(&value)
            .map(Some)
            .map_err(|e| Error::invalid_config(format!("{}={value:?} {e}", self.name)))
    }

    fn number(&self, lookup: &impl Fn(&str) -> Option<String>) -> Result<Option<u64>, Error> {
        let Kind::Number { min, max, .. } = self.kind else {
            unreachable!("{} is not a number", self.name)
        };
        let Some(value) = self.read(lookup) else {
            return Ok(None);
        };
        match value.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(self.refuse(
                &value,
                &format!("set it so, or unset it (default: {})", self.default),
            )),
        }
    }

    fn table_name(
        &self,
        lookup: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<String>, Error> {
        let Some(value) = self.read(lookup) else {
            return Ok(None);
        };
        let valid = (3..=255).contains(&value.len())
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if valid {
            Ok(Some(value))
        } else {
            Err(Error::invalid_config(format!(
                "{}={value:?} is not a DynamoDB table name (3 to 255 letters, digits, `_`, `-` \
                 and `.`): {}",
                self.name, self.what
            )))
        }
    }

    fn time(&self, lookup: &impl Fn(&str) -> Option<String>) -> Result<Option<SystemTime>, Error> {
        let Some(value) = self.read(lookup) else {
            return Ok(None);
        };
        rfc3339(&value).map(Some).ok_or_else(|| {
            Error::invalid_config(format!(
                "{}={value:?} is not an RFC 3339 time such as 2026-12-01T00:00:00Z: {}",
                self.name, self.what
            ))
        })
    }
}

/// An RFC 3339 time (`2026-12-01T00:00:00Z`, `2026-12-01T01:00:00+01:00`,
/// with or without a fraction of a second, which is dropped); `None` for
/// anything else or a time before 1970 (times are compared as epoch
/// milliseconds).
fn rfc3339(text: &str) -> Option<SystemTime> {
    let time =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    let epoch_s = u64::try_from(time.unix_timestamp()).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(epoch_s))
}

/// Every setting the environment gives, read once: [`Settings::from_env`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settings {
    /// [`TABLE_ENV`]: `None` when unset ([`table`](Self::table) refuses it).
    pub table: Option<String>,
    /// [`DISABLED_ENV`] (or [`LEGACY_DISABLED_ENV`]).
    pub disabled: bool,
    /// [`EXPIRES_AFTER_ENV`]; `None`: the default (24 hours).
    pub expires_after: Option<Duration>,
    /// [`MAX_LEASE_ENV`]; `None`: the default (15 minutes).
    pub max_lease: Option<Duration>,
    /// [`SWEEP_FULL_PASS_ENV`]; `None`: the default (an hour).
    pub sweep_full_pass: Option<Duration>,
    /// [`WAIT_FOR_RESULT_ENV`]; `None`: no wait (unset, empty or `0`).
    pub wait_for: Option<Duration>,
    /// [`STORE_TIMEOUT_ENV`]; `None`: the default (450 ms), which the
    /// stores' builders apply themselves.
    pub store_timeout: Option<Duration>,
    /// [`METRICS_NAMESPACE_ENV`]; `None`: no metrics.
    pub metrics_namespace: Option<String>,
    /// [`WARM_UP_ENV`]; `true` unless set to false.
    pub warm_up: bool,
    /// [`ALLOW_ANONYMOUS_ENV`].
    pub allow_anonymous: bool,
    /// [`OFFLOAD_BUCKET_ENV`] and [`OFFLOAD_PREFIX_ENV`]; `None` without a
    /// bucket.
    pub offload: Option<OffloadSettings>,
    /// The `IDEMPOTENCY_POWERTOOLS_*` variables; `None` without the
    /// table.
    pub powertools: Option<PowertoolsSettings>,
    /// Where the records live when not in DynamoDB.
    pub store: StoreSettings,
}

/// Where outputs too large for the store go ([`OFFLOAD_BUCKET_ENV`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadSettings {
    /// The S3 bucket.
    pub bucket: String,
    /// [`OFFLOAD_PREFIX_ENV`]; `None`: the function's own default.
    pub prefix: Option<String>,
}

/// A cut-over from Powertools for AWS Lambda (docs/powertools.md): the
/// table, the prefix and the end together, or none of the cut-over's
/// variables.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PowertoolsSettings {
    /// [`POWERTOOLS_TABLE_ENV`].
    pub table: String,
    /// [`POWERTOOLS_KEY_PREFIX_ENV`]: no `#` in it.
    pub key_prefix: String,
    /// [`POWERTOOLS_UNTIL_ENV`].
    pub until: SystemTime,
    /// [`POWERTOOLS_MAX_TIMEOUT_ENV`].
    pub max_timeout: std::time::Duration,
    /// [`POWERTOOLS_RUNTIME_ENV`]: `python` or `typescript`.
    pub runtime: String,
    /// [`POWERTOOLS_KEY_JMESPATH_ENV`].
    pub key_jmespath: Option<String>,
    /// [`POWERTOOLS_VALIDATION_JMESPATH_ENV`].
    pub validation_jmespath: Option<String>,
    /// [`POWERTOOLS_SHARED_KEYS_ENV`].
    pub shared_keys: bool,
}

/// Where the records live when [`STORE_URL_ENV`] names an engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreSettings {
    /// [`STORE_URL_ENV`]; `None`: DynamoDB.
    pub url: Option<String>,
    /// [`REDIS_CLUSTER_ENV`].
    pub redis_cluster: bool,
    /// [`SECRET_ARN_ENV`].
    pub secret_arn: Option<String>,
    /// [`CREATE_SCHEMA_ENV`].
    pub create_schema: bool,
    /// [`REDIS_WAIT_REPLICAS_ENV`] and [`REDIS_WAIT_TIMEOUT_MS_ENV`];
    /// `None`: writes count when the primary has them.
    pub redis_wait: Option<RedisWait>,
}

/// How many Redis replicas must hold each write, and how long a write waits
/// for them (`RedisStoreBuilder::wait_for_replicas`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisWait {
    /// At least 1.
    pub replicas: u32,
    /// 1 ms to [`MAX_REDIS_WAIT_TIMEOUT_MS`].
    pub timeout: Duration,
}

impl Settings {
    /// Every variable of [`VARIABLES`] from the process environment.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig), in
    /// one line naming the first variable whose value is not what it holds.
    pub fn from_env() -> Result<Settings, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env), with the variables read through
    /// `lookup` (tests, settings kept elsewhere).
    ///
    /// # Errors
    ///
    /// As [`from_env`](Self::from_env).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, Error> {
        let v = variable;
        Ok(Settings {
            table: v(TABLE_ENV).text(&lookup),
            disabled: disabled(&lookup)?,
            expires_after: v(EXPIRES_AFTER_ENV)
                .number(&lookup)?
                .map(Duration::from_secs),
            max_lease: v(MAX_LEASE_ENV).number(&lookup)?.map(Duration::from_secs),
            sweep_full_pass: v(SWEEP_FULL_PASS_ENV)
                .number(&lookup)?
                .map(Duration::from_secs),
            wait_for: v(WAIT_FOR_RESULT_ENV)
                .number(&lookup)?
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            store_timeout: v(STORE_TIMEOUT_ENV)
                .number(&lookup)?
                .map(Duration::from_millis),
            metrics_namespace: v(METRICS_NAMESPACE_ENV).text(&lookup),
            warm_up: v(WARM_UP_ENV).boolean(&lookup)?.unwrap_or(true),
            allow_anonymous: v(ALLOW_ANONYMOUS_ENV).boolean(&lookup)?.unwrap_or(false),
            offload: v(OFFLOAD_BUCKET_ENV)
                .text(&lookup)
                .map(|bucket| OffloadSettings {
                    bucket,
                    prefix: v(OFFLOAD_PREFIX_ENV).text(&lookup),
                }),
            powertools: PowertoolsSettings::from_lookup(&lookup)?,
            store: StoreSettings::from_lookup(&lookup)?,
        })
    }

    /// [`TABLE_ENV`], which a DynamoDB store needs.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming
    /// the variable when it is unset or empty.
    pub fn table(&self) -> Result<&str, Error> {
        self.table.as_deref().ok_or_else(|| {
            Error::invalid_config(format!(
                "{TABLE_ENV} is not set: give it the DynamoDB table name of the idempotency \
                 records"
            ))
        })
    }
}

/// [`STORE_TIMEOUT_ENV`] from the process environment, or its default: the
/// limit the stores' builders apply unless given one.
///
/// # Errors
///
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the
/// variable when it is not a number of milliseconds in range.
#[cfg(any(feature = "dynamodb", feature = "redis", feature = "postgres"))]
pub(crate) fn store_timeout_from_env() -> Result<Duration, Error> {
    let ms = variable(STORE_TIMEOUT_ENV)
        .number(&|name: &str| std::env::var(name).ok())?
        .unwrap_or(DEFAULT_STORE_TIMEOUT_MS);
    Ok(Duration::from_millis(ms))
}

/// [`DISABLED_ENV`], or its former name when it is unset (a warning once
/// per process says to rename it).
fn disabled(lookup: &impl Fn(&str) -> Option<String>) -> Result<bool, Error> {
    if let Some(on) = variable(DISABLED_ENV).boolean(lookup)? {
        return Ok(on);
    }
    let legacy = Variable {
        name: LEGACY_DISABLED_ENV,
        ..*variable(DISABLED_ENV)
    };
    let Some(on) = legacy.boolean(lookup)? else {
        return Ok(false);
    };
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "{LEGACY_DISABLED_ENV} is the former name of {DISABLED_ENV}: it is still read, \
             but rename it (the old name goes in a later release)"
        );
    }
    Ok(on)
}

/// The one rule of every boolean variable ([`Kind::Boolean`]): `true` or
/// `1`, `false` or `0`, in any case, spaces around ignored. The CLI parses
/// its `--redis-cluster` (and [`REDIS_CLUSTER_ENV`]) with it too.
///
/// # Errors
///
/// Anything else, with what to write instead.
pub fn boolean(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err("is not a boolean: use true or false".to_owned()),
    }
}

/// [`METRICS_STACK_ENV`] from the process environment, read at each EMF
/// line; `None` when unset or empty.
pub fn metrics_stack() -> Option<String> {
    variable(METRICS_STACK_ENV).text(&|name: &str| std::env::var(name).ok())
}

impl PowertoolsSettings {
    /// The cut-over the three variables describe: `None` when the table is
    /// unset (then the other two must be too); otherwise all three, each
    /// checked.
    fn from_lookup(
        lookup: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<PowertoolsSettings>, Error> {
        let v = variable;
        let Some(table) = v(POWERTOOLS_TABLE_ENV).table_name(lookup)? else {
            for name in [
                POWERTOOLS_KEY_PREFIX_ENV,
                POWERTOOLS_UNTIL_ENV,
                POWERTOOLS_MAX_TIMEOUT_ENV,
                POWERTOOLS_RUNTIME_ENV,
                POWERTOOLS_KEY_JMESPATH_ENV,
                POWERTOOLS_VALIDATION_JMESPATH_ENV,
                POWERTOOLS_SHARED_KEYS_ENV,
            ] {
                if v(name).read(lookup).is_some() {
                    return Err(Error::invalid_config(format!(
                        "{name} is set but {POWERTOOLS_TABLE_ENV} is not: it only applies to a \
                         cut-over from Powertools; set the table Powertools kept its records \
                         in, or unset {name}"
                    )));
                }
            }
            return Ok(None);
        };
        let key_prefix = v(POWERTOOLS_KEY_PREFIX_ENV).text(lookup).ok_or_else(|| {
            Error::invalid_config(format!(
                "{POWERTOOLS_KEY_PREFIX_ENV} is not set but {POWERTOOLS_TABLE_ENV} is: give it \
                 the part before `#` of the ids in Powertools' table, such as \
                 orders-api.app.lambda_handler"
            ))
        })?;
        if key_prefix.contains('#') {
            return Err(Error::invalid_config(format!(
                "{POWERTOOLS_KEY_PREFIX_ENV}={key_prefix:?} holds a `#`: give only the part \
                 before `#` of the ids in Powertools' table, such as orders-api.app.lambda_handler"
            )));
        }
        let until = v(POWERTOOLS_UNTIL_ENV).time(lookup)?.ok_or_else(|| {
            Error::invalid_config(format!(
                "{POWERTOOLS_UNTIL_ENV} is not set but {POWERTOOLS_TABLE_ENV} is: give it when \
                 the cut-over ends, an RFC 3339 time such as 2026-12-01T00:00:00Z (the switch \
                 plus Powertools' expires_after_seconds)"
            ))
        })?;
        let runtime = v(POWERTOOLS_RUNTIME_ENV)
            .text(lookup)
            .map(|r| r.to_ascii_lowercase())
            .unwrap_or_else(|| "python".to_owned());
        if runtime != "python" && runtime != "typescript" {
            return Err(Error::invalid_config(format!(
                "{POWERTOOLS_RUNTIME_ENV}={runtime:?} is not a Powertools runtime: use python \
                 (aws-lambda-powertools) or typescript (@aws-lambda-powertools/idempotency)"
            )));
        }
        Ok(Some(PowertoolsSettings {
            table,
            key_prefix,
            until,
            max_timeout: std::time::Duration::from_secs(
                v(POWERTOOLS_MAX_TIMEOUT_ENV).number(lookup)?.unwrap_or(900),
            ),
            runtime,
            key_jmespath: v(POWERTOOLS_KEY_JMESPATH_ENV).text(lookup),
            validation_jmespath: v(POWERTOOLS_VALIDATION_JMESPATH_ENV).text(lookup),
            shared_keys: v(POWERTOOLS_SHARED_KEYS_ENV)
                .boolean(lookup)?
                .unwrap_or(false),
        }))
    }
}

impl StoreSettings {
    /// Is it DynamoDB (no URL)?
    pub fn is_dynamodb(&self) -> bool {
        self.url.is_none()
    }

    /// The engine settings through `lookup`, checked together: a companion
    /// without the URL, or the replica wait where it cannot apply, is
    /// refused by name.
    fn from_lookup(lookup: &impl Fn(&str) -> Option<String>) -> Result<StoreSettings, Error> {
        let v = variable;
        let store = StoreSettings {
            url: v(STORE_URL_ENV).text(lookup),
            redis_cluster: v(REDIS_CLUSTER_ENV).boolean(lookup)?.unwrap_or(false),
            secret_arn: v(SECRET_ARN_ENV).text(lookup),
            create_schema: v(CREATE_SCHEMA_ENV).boolean(lookup)?.unwrap_or(false),
            redis_wait: redis_wait(lookup)?,
        };
        if let (Some(url), Some(_)) = (&store.url, store.redis_wait) {
            if !is_redis_url(url) {
                return Err(Error::invalid_config(format!(
                    "{REDIS_WAIT_REPLICAS_ENV} is set but {STORE_URL_ENV} does not name Redis: \
                     the replica wait is Redis's (WAIT); unset {REDIS_WAIT_REPLICAS_ENV}"
                )));
            }
            if store.redis_cluster {
                return Err(Error::invalid_config(format!(
                    "{REDIS_WAIT_REPLICAS_ENV} is set with {REDIS_CLUSTER_ENV}: the replica wait \
                     is for one Redis server with its replicas, and the store does not wait on \
                     a cluster (ElastiCache Serverless included); unset one of them"
                )));
            }
        }
        if store.url.is_none() {
            for (name, given) in [
                (SECRET_ARN_ENV, store.secret_arn.is_some()),
                (CREATE_SCHEMA_ENV, store.create_schema),
                (REDIS_CLUSTER_ENV, store.redis_cluster),
                (REDIS_WAIT_REPLICAS_ENV, store.redis_wait.is_some()),
            ] {
                if given {
                    return Err(Error::invalid_config(format!(
                        "{name} is set but {STORE_URL_ENV} is not: it only applies to the engine \
                         that URL names; set the URL, or unset {name} to keep the records in \
                         DynamoDB"
                    )));
                }
            }
        }
        Ok(store)
    }
}

/// The replica wait the two variables describe; `None` when
/// [`REDIS_WAIT_REPLICAS_ENV`] is unset or empty.
fn redis_wait(lookup: &impl Fn(&str) -> Option<String>) -> Result<Option<RedisWait>, Error> {
    let timeout = variable(REDIS_WAIT_TIMEOUT_MS_ENV).number(lookup)?;
    let Some(replicas) = variable(REDIS_WAIT_REPLICAS_ENV).number(lookup)? else {
        return match timeout {
            Some(_) => Err(Error::invalid_config(format!(
                "{REDIS_WAIT_TIMEOUT_MS_ENV} is set but {REDIS_WAIT_REPLICAS_ENV} is not: the \
                 timeout is how long a write waits for that many replicas; set both, or unset \
                 {REDIS_WAIT_TIMEOUT_MS_ENV}"
            ))),
            None => Ok(None),
        };
    };
    let replicas = u32::try_from(replicas).map_err(|_| {
        variable(REDIS_WAIT_REPLICAS_ENV).refuse(&replicas.to_string(), "a few at most")
    })?;
    Ok(Some(RedisWait {
        replicas,
        timeout: Duration::from_millis(timeout.unwrap_or(DEFAULT_REDIS_WAIT_TIMEOUT_MS)),
    }))
}

/// Does `url` name Redis or Valkey (by its scheme)?
fn is_redis_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("redis") || scheme.eq_ignore_ascii_case("rediss")
    })
}

#[cfg(test)]
mod tests;
