//! How the example functions (`orders-api`, `order-events`, `sweeper`) find
//! their idempotency records: in DynamoDB (`IDEMPOTENCY_TABLE`, the SAM
//! template's way), or in the engine one variable names.
//!
//! Environment, all optional:
//!
//! - `IDEMPOTENCY_STORE_URL`: a `redis://` / `rediss://` URL (Redis, Valkey)
//!   or a `postgres://` / `postgresql://` URL, honoured as written (Redis
//!   database number; PostgreSQL database, user and `sslmode`). Unset: the
//!   records stay in DynamoDB. Only the idempotency records move: each
//!   function's own data stays where it is.
//! - `IDEMPOTENCY_REDIS_CLUSTER=true`: the Redis URL names a cluster
//!   (ElastiCache Serverless, MemoryDB).
//! - `IDEMPOTENCY_STORE_SECRET_ARN`: a Secrets Manager secret whose JSON
//!   `password` field is the PostgreSQL password (the RDS-managed secret's
//!   format), read once at start-up, so no password sits in the
//!   environment.
//! - `IDEMPOTENCY_CREATE_SCHEMA=1`: create the PostgreSQL table when missing
//!   (safe when many cold starts do it at once); otherwise a missing table
//!   fails the start.
//!
//! A bad URL, an unreachable server or a missing schema fails the start with
//! one line naming the variable. [`expires_after`] reads the functions'
//! `IDEMPOTENCY_EXPIRES_AFTER_SECONDS` with the same care.

use lambda_idempotency::store::{
    open_url, OpenOptions, UrlStore, CREATE_SCHEMA_ENV, REDIS_CLUSTER_ENV, STORE_URL_ENV,
};

/// The variable naming the PostgreSQL password's secret.
pub const SECRET_ARN_ENV: &str = "IDEMPOTENCY_STORE_SECRET_ARN";

/// The variable of how long a completed record replays.
pub const EXPIRES_AFTER_ENV: &str = "IDEMPOTENCY_EXPIRES_AFTER_SECONDS";

/// The longest record life a function accepts: 365 days. Longer is a typo
/// (a value in milliseconds, an extra digit), and near `u64::MAX` the
/// expiry (now + life) would not even be a time.
pub const MAX_EXPIRES_AFTER_SECONDS: u64 = 365 * 24 * 3600;

/// `IDEMPOTENCY_EXPIRES_AFTER_SECONDS` through `lookup`: `None` when unset
/// or empty, else a whole number of seconds from 1 to
/// [`MAX_EXPIRES_AFTER_SECONDS`]; anything else fails the start with a
/// message naming the variable and the range (`hint` says what the value
/// must cover).
pub fn expires_after(
    lookup: impl Fn(&str) -> Option<String>,
    hint: &str,
) -> Result<Option<std::time::Duration>, String> {
    let Some(text) = lookup(EXPIRES_AFTER_ENV).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    match text.trim().parse::<u64>() {
        Ok(seconds) if (1..=MAX_EXPIRES_AFTER_SECONDS).contains(&seconds) => {
            Ok(Some(std::time::Duration::from_secs(seconds)))
        }
        _ => Err(format!(
            "{EXPIRES_AFTER_ENV}={text:?} is not a whole number of seconds from 1 to \
             {MAX_EXPIRES_AFTER_SECONDS} (365 days): how long a completed record replays; \
             {hint}"
        )),
    }
}

/// A lookup of variables in `pairs` instead of the process environment, for
/// the `from_lookup` constructors ([`Engine::from_lookup`], the functions'
/// configurations) where the settings come from elsewhere: tests, tools.
pub fn lookup_in<'a>(pairs: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        let (_, value) = pairs.iter().find(|(key, _)| *key == name)?;
        Some((*value).to_owned())
    }
}

/// Where the records live, as the environment says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Engine {
    /// `IDEMPOTENCY_STORE_URL`; `None`: DynamoDB.
    pub url: Option<String>,
    /// `IDEMPOTENCY_REDIS_CLUSTER`.
    pub redis_cluster: bool,
    /// `IDEMPOTENCY_STORE_SECRET_ARN`.
    pub secret_arn: Option<String>,
    /// `IDEMPOTENCY_CREATE_SCHEMA`.
    pub create_schema: bool,
}

fn flag(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Result<bool, String> {
    match lookup(name).as_deref().map(str::trim) {
        None | Some("") | Some("0") | Some("false") => Ok(false),
        Some("1") | Some("true") => Ok(true),
        Some(other) => Err(format!(
            "{name}={other:?} is not a boolean: use 1 (or true) or 0 (or false)"
        )),
    }
}

impl Engine {
    /// Read the settings through `lookup`; the error names the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Engine, String> {
        let set = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let engine = Engine {
            url: set(STORE_URL_ENV),
            redis_cluster: flag(&lookup, REDIS_CLUSTER_ENV)?,
            secret_arn: set(SECRET_ARN_ENV),
            create_schema: flag(&lookup, CREATE_SCHEMA_ENV)?,
        };
        if engine.url.is_none() {
            for (name, given) in [
                (SECRET_ARN_ENV, engine.secret_arn.is_some()),
                (CREATE_SCHEMA_ENV, engine.create_schema),
                (REDIS_CLUSTER_ENV, engine.redis_cluster),
            ] {
                if given {
                    return Err(format!(
                        "{name} is set but {STORE_URL_ENV} is not: it only applies to the engine \
                         that URL names; set the URL, or unset {name} to keep the records in \
                         DynamoDB"
                    ));
                }
            }
        }
        Ok(engine)
    }

    /// Is it DynamoDB (no URL)?
    pub fn is_dynamodb(&self) -> bool {
        self.url.is_none()
    }

    /// Open the engine the URL names, connected and checked; `None` for
    /// DynamoDB, which the function builds itself.
    pub async fn open(&self, aws: &aws_config::SdkConfig) -> Result<Option<UrlStore>, String> {
        let Some(url) = &self.url else {
            return Ok(None);
        };
        let password = match &self.secret_arn {
            Some(arn) => Some(read_password(aws, arn).await?),
            None => None,
        };
        let options = OpenOptions {
            create_schema: self.create_schema,
            redis_cluster: self.redis_cluster,
            password,
        };
        open_url(url, &options)
            .await
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

/// The `password` field of secret `arn`'s JSON; never in a message.
async fn read_password(aws: &aws_config::SdkConfig, arn: &str) -> Result<String, String> {
    let client = aws_sdk_secretsmanager::Client::new(aws);
    let secret = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| {
            format!(
                "{SECRET_ARN_ENV}: cannot read secret {arn}: {}; check the ARN and the \
                 function's secretsmanager:GetSecretValue permission on it",
                aws_sdk_secretsmanager::error::DisplayErrorContext(&e)
            )
        })?;
    let text = secret.secret_string().ok_or_else(|| {
        format!("{SECRET_ARN_ENV}: secret {arn} holds no text: store JSON with a `password` field")
    })?;
    password_of(text).ok_or_else(|| {
        format!(
            "{SECRET_ARN_ENV}: secret {arn} is not JSON with a string `password` field (the \
             format RDS-managed secrets use)"
        )
    })
}

/// The `password` string of a secret's JSON text.
fn password_of(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    value.get("password")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_is_dynamodb() {
        let engine = Engine::from_lookup(lookup_in(&[])).unwrap();
        assert!(engine.is_dynamodb());
        assert_eq!(engine, Engine::default());
        assert!(
            Engine::from_lookup(lookup_in(&[("IDEMPOTENCY_STORE_URL", " ")]))
                .unwrap()
                .is_dynamodb()
        );
    }

    #[test]
    fn every_setting_is_read() {
        let engine = Engine::from_lookup(lookup_in(&[
            (
                "IDEMPOTENCY_STORE_URL",
                "postgres://app@proxy/db?sslmode=require",
            ),
            (
                "IDEMPOTENCY_STORE_SECRET_ARN",
                "arn:aws:secretsmanager:us-east-1:1:secret:x",
            ),
            ("IDEMPOTENCY_CREATE_SCHEMA", "1"),
        ]))
        .unwrap();
        assert_eq!(
            engine.url.as_deref(),
            Some("postgres://app@proxy/db?sslmode=require")
        );
        assert!(engine.create_schema && !engine.redis_cluster);
        assert!(engine.secret_arn.is_some());
    }

    #[test]
    fn engine_settings_without_a_url_are_refused_by_name() {
        let err =
            Engine::from_lookup(lookup_in(&[("IDEMPOTENCY_CREATE_SCHEMA", "1")])).unwrap_err();
        assert!(err.starts_with("IDEMPOTENCY_CREATE_SCHEMA is set but IDEMPOTENCY_STORE_URL"));
        let err = Engine::from_lookup(lookup_in(&[
            ("IDEMPOTENCY_STORE_URL", "redis://h"),
            ("IDEMPOTENCY_REDIS_CLUSTER", "yes"),
        ]))
        .unwrap_err();
        assert!(
            err.starts_with("IDEMPOTENCY_REDIS_CLUSTER=\"yes\""),
            "{err}"
        );
    }

    #[test]
    fn the_password_is_the_secrets_password_field() {
        assert_eq!(
            password_of(r#"{"username":"app","password":"p@ss"}"#).as_deref(),
            Some("p@ss")
        );
        assert_eq!(password_of(r#"{"username":"app"}"#), None);
        assert_eq!(password_of(r#"{"password":5}"#), None);
        assert_eq!(password_of("p@ss"), None);
    }
}
