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
//! - `IDEMPOTENCY_REDIS_WAIT_REPLICAS=<n>` (and
//!   `IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS`, default 300, 1 to 1999): a claim,
//!   a recovery point or a completion counts only once `n` replicas of the
//!   Redis primary hold it (`RedisStoreBuilder::wait_for_replicas`), so a
//!   failover while replication lags cannot lose it and run a key twice.
//!   One Redis server with replicas only: refused with
//!   `IDEMPOTENCY_REDIS_CLUSTER` (a cluster, ElastiCache Serverless
//!   included) and with a PostgreSQL URL.
//!
//! A bad URL, an unreachable server or a missing schema fails the start with
//! one line naming the variable. [`expires_after`] reads the functions'
//! `IDEMPOTENCY_EXPIRES_AFTER_SECONDS` with the same care.

use lambda_idempotency::store::{
    open_url, OpenOptions, UrlStore, CREATE_SCHEMA_ENV, REDIS_CLUSTER_ENV, STORE_URL_ENV,
};
use lambda_idempotency::RedisStore;

/// The variable naming the PostgreSQL password's secret.
pub const SECRET_ARN_ENV: &str = "IDEMPOTENCY_STORE_SECRET_ARN";

/// The variable of how many Redis replicas must hold each write.
pub const REDIS_WAIT_REPLICAS_ENV: &str = "IDEMPOTENCY_REDIS_WAIT_REPLICAS";

/// The variable of how long a write waits for those replicas.
pub const REDIS_WAIT_TIMEOUT_MS_ENV: &str = "IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS";

/// The wait when [`REDIS_WAIT_TIMEOUT_MS_ENV`] is unset: a few hundred
/// milliseconds, as docs/engines.md advises for ElastiCache with replicas.
pub const DEFAULT_REDIS_WAIT_TIMEOUT_MS: u64 = 300;

/// The longest wait: under the Redis store's 2 s response timeout, which
/// the wait must stay below to ever report.
pub const MAX_REDIS_WAIT_TIMEOUT_MS: u64 = 1999;

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
    /// `IDEMPOTENCY_REDIS_WAIT_REPLICAS` and
    /// `IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS`; `None`: writes count when the
    /// primary has them.
    pub redis_wait: Option<RedisWait>,
}

/// How many Redis replicas must hold each write, and for how long a write
/// waits for them (`RedisStoreBuilder::wait_for_replicas`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisWait {
    /// `IDEMPOTENCY_REDIS_WAIT_REPLICAS`: at least 1.
    pub replicas: u32,
    /// `IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS`: 1 to
    /// [`MAX_REDIS_WAIT_TIMEOUT_MS`].
    pub timeout: std::time::Duration,
}

/// The replica wait the two variables describe; `None` when
/// `IDEMPOTENCY_REDIS_WAIT_REPLICAS` is unset or empty.
fn redis_wait(lookup: &impl Fn(&str) -> Option<String>) -> Result<Option<RedisWait>, String> {
    let set = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    let timeout_text = set(REDIS_WAIT_TIMEOUT_MS_ENV);
    let Some(replicas_text) = set(REDIS_WAIT_REPLICAS_ENV) else {
        return match timeout_text {
            Some(_) => Err(format!(
                "{REDIS_WAIT_TIMEOUT_MS_ENV} is set but {REDIS_WAIT_REPLICAS_ENV} is not: the \
                 timeout is how long a write waits for that many replicas; set both, or unset \
                 {REDIS_WAIT_TIMEOUT_MS_ENV}"
            )),
            None => Ok(None),
        };
    };
    let replicas = match replicas_text.trim().parse::<u32>() {
        Ok(n) if n >= 1 => n,
        _ => {
            return Err(format!(
                "{REDIS_WAIT_REPLICAS_ENV}={replicas_text:?} is not a whole number of replicas \
                 of at least 1: how many replicas must hold each write before it counts (1 on \
                 ElastiCache with replicas); unset it to count a write once the primary has it"
            ))
        }
    };
    let timeout_ms = match timeout_text {
        None => DEFAULT_REDIS_WAIT_TIMEOUT_MS,
        Some(text) => match text.trim().parse::<u64>() {
            Ok(ms) if (1..=MAX_REDIS_WAIT_TIMEOUT_MS).contains(&ms) => ms,
            _ => {
                return Err(format!(
                    "{REDIS_WAIT_TIMEOUT_MS_ENV}={text:?} is not a whole number of milliseconds \
                     from 1 to {MAX_REDIS_WAIT_TIMEOUT_MS}: how long a write waits for its \
                     replicas, under the store's 2 s response timeout (a few hundred is usual)"
                ))
            }
        },
    };
    Ok(Some(RedisWait {
        replicas,
        timeout: std::time::Duration::from_millis(timeout_ms),
    }))
}

/// Does `url` name Redis or Valkey (by its scheme)?
fn is_redis_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("redis") || scheme.eq_ignore_ascii_case("rediss")
    })
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
            redis_wait: redis_wait(&lookup)?,
        };
        if let (Some(url), Some(_)) = (&engine.url, engine.redis_wait) {
            if !is_redis_url(url) {
                return Err(format!(
                    "{REDIS_WAIT_REPLICAS_ENV} is set but {STORE_URL_ENV} does not name Redis: \
                     the replica wait is Redis's (WAIT); unset {REDIS_WAIT_REPLICAS_ENV}"
                ));
            }
            if engine.redis_cluster {
                return Err(format!(
                    "{REDIS_WAIT_REPLICAS_ENV} is set with {REDIS_CLUSTER_ENV}: the replica wait \
                     is for one Redis server with its replicas, and the store does not wait on \
                     a cluster (ElastiCache Serverless included); unset one of them"
                ));
            }
        }
        if engine.url.is_none() {
            for (name, given) in [
                (SECRET_ARN_ENV, engine.secret_arn.is_some()),
                (CREATE_SCHEMA_ENV, engine.create_schema),
                (REDIS_CLUSTER_ENV, engine.redis_cluster),
                (REDIS_WAIT_REPLICAS_ENV, engine.redis_wait.is_some()),
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
        if let Some(wait) = self.redis_wait {
            // `open_url` knows no replica wait: the Redis store is built
            // here, its errors named by the URL's variable as open_url does.
            let mut builder = RedisStore::builder(url.as_str());
            if self.redis_cluster {
                // Refused by the store (no wait on a cluster), as
                // `from_lookup` refuses the two together.
                builder = builder.cluster();
            }
            let store = builder
                .wait_for_replicas(wait.replicas, wait.timeout)
                .connect()
                .await
                .map_err(|e| {
                    let message = e.to_string();
                    if message.starts_with(STORE_URL_ENV) {
                        message
                    } else {
                        format!("{STORE_URL_ENV}: {message}")
                    }
                })?;
            return Ok(Some(UrlStore::Redis(store)));
        }
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
    fn the_replica_wait_is_read_with_its_default_timeout() {
        let redis = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![("IDEMPOTENCY_STORE_URL", "rediss://primary:6379")];
            pairs.extend_from_slice(extra);
            pairs
        };
        let off = Engine::from_lookup(lookup_in(&redis(&[]))).unwrap();
        assert_eq!(off.redis_wait, None);
        let blank = Engine::from_lookup(lookup_in(&redis(&[(
            "IDEMPOTENCY_REDIS_WAIT_REPLICAS",
            " ",
        )])))
        .unwrap();
        assert_eq!(
            blank.redis_wait, None,
            "empty is off, as a template parameter's default"
        );
        let one = Engine::from_lookup(lookup_in(&redis(&[(
            "IDEMPOTENCY_REDIS_WAIT_REPLICAS",
            "1",
        )])))
        .unwrap();
        assert_eq!(
            one.redis_wait,
            Some(RedisWait {
                replicas: 1,
                timeout: std::time::Duration::from_millis(300)
            })
        );
        let two = Engine::from_lookup(lookup_in(&redis(&[
            ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "2"),
            ("IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS", "1999"),
        ])))
        .unwrap();
        assert_eq!(
            two.redis_wait,
            Some(RedisWait {
                replicas: 2,
                timeout: std::time::Duration::from_millis(1999)
            })
        );
    }

    #[test]
    fn each_bad_replica_wait_is_refused_in_one_line_naming_its_variable() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[
                    ("IDEMPOTENCY_STORE_URL", "redis://h"),
                    ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "0"),
                ],
                "IDEMPOTENCY_REDIS_WAIT_REPLICAS=\"0\" is not a whole number of replicas of at least 1",
            ),
            (
                &[
                    ("IDEMPOTENCY_STORE_URL", "redis://h"),
                    ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "one"),
                ],
                "IDEMPOTENCY_REDIS_WAIT_REPLICAS=\"one\" is not a whole number",
            ),
            (
                &[
                    ("IDEMPOTENCY_STORE_URL", "redis://h"),
                    ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "1"),
                    ("IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS", "2000"),
                ],
                "IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS=\"2000\" is not a whole number of milliseconds from 1 to 1999",
            ),
            (
                &[
                    ("IDEMPOTENCY_STORE_URL", "redis://h"),
                    ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "1"),
                    ("IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS", "0"),
                ],
                "IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS=\"0\"",
            ),
            (
                &[
                    ("IDEMPOTENCY_STORE_URL", "redis://h"),
                    ("IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS", "300"),
                ],
                "IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS is set but IDEMPOTENCY_REDIS_WAIT_REPLICAS is not",
            ),
            (
                &[("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "1")],
                "IDEMPOTENCY_REDIS_WAIT_REPLICAS is set but IDEMPOTENCY_STORE_URL is not",
            ),
            (
                &[
                    ("IDEMPOTENCY_STORE_URL", "postgres://app@db/x"),
                    ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "1"),
                ],
                "IDEMPOTENCY_REDIS_WAIT_REPLICAS is set but IDEMPOTENCY_STORE_URL does not name Redis",
            ),
            (
                &[
                    ("IDEMPOTENCY_STORE_URL", "rediss://cache:6379"),
                    ("IDEMPOTENCY_REDIS_CLUSTER", "true"),
                    ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "1"),
                ],
                "IDEMPOTENCY_REDIS_WAIT_REPLICAS is set with IDEMPOTENCY_REDIS_CLUSTER",
            ),
        ];
        for (pairs, start) in cases {
            let err = Engine::from_lookup(lookup_in(pairs)).unwrap_err();
            assert!(err.starts_with(start), "{pairs:?}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
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
