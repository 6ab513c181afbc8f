//! How the example functions (`orders-api`, `order-events`, `sweeper`) open
//! their idempotency records: in DynamoDB (`IDEMPOTENCY_TABLE`, the SAM
//! template's way), or in the engine `IDEMPOTENCY_STORE_URL` names.
//!
//! The variables themselves (`IDEMPOTENCY_STORE_URL`,
//! `IDEMPOTENCY_REDIS_CLUSTER`, `IDEMPOTENCY_STORE_SECRET_ARN`,
//! `IDEMPOTENCY_CREATE_SCHEMA`, `IDEMPOTENCY_REDIS_WAIT_REPLICAS` and
//! `IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS`) are read and checked by the
//! library's settings (`lambda_idempotency::settings::StoreSettings`,
//! docs/configuration.md); this crate opens what they name: [`open`]
//! connects and checks the store (a bad URL, an unreachable server or a
//! missing schema fails the start with one line naming the variable) and
//! reads the PostgreSQL password from Secrets Manager, which the library
//! does not depend on.

use lambda_idempotency::settings::{SECRET_ARN_ENV, STORE_URL_ENV};
use lambda_idempotency::store::{open_url, OpenOptions, UrlStore};
use lambda_idempotency::RedisStore;

/// Where the records live, as the environment says
/// ([`lambda_idempotency::settings::StoreSettings`]).
pub use lambda_idempotency::settings::StoreSettings as Engine;
pub use lambda_idempotency::settings::{RedisWait, Settings};

/// A lookup of variables in `pairs` instead of the process environment, for
/// the `from_lookup` constructors ([`Settings::from_lookup`], the functions'
/// configurations) where the settings come from elsewhere: tests, tools.
pub fn lookup_in<'a>(pairs: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        let (_, value) = pairs.iter().find(|(key, _)| *key == name)?;
        Some((*value).to_owned())
    }
}

/// Open the engine `engine`'s URL names, connected and checked; `None` for
/// DynamoDB, which the function builds itself.
pub async fn open(
    engine: &Engine,
    aws: &aws_config::SdkConfig,
) -> Result<Option<UrlStore>, String> {
    let Some(url) = &engine.url else {
        return Ok(None);
    };
    if let Some(wait) = engine.redis_wait {
        // `open_url` knows no replica wait: the Redis store is built
        // here, its errors named by the URL's variable as open_url does.
        let mut builder = RedisStore::builder(url.as_str());
        if engine.redis_cluster {
            // Refused by the store (no wait on a cluster), as
            // the settings refuse the two together.
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
    let password = match &engine.secret_arn {
        Some(arn) => Some(read_password(aws, arn).await?),
        None => None,
    };
    let options = OpenOptions {
        create_schema: engine.create_schema,
        redis_cluster: engine.redis_cluster,
        password,
    };
    open_url(url, &options)
        .await
        .map(Some)
        .map_err(|e| e.to_string())
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

    /// The engine settings `pairs` give, as the functions read them.
    fn store_settings(pairs: &[(&str, &str)]) -> Result<Engine, String> {
        Settings::from_lookup(lookup_in(pairs))
            .map(|settings| settings.store)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn unset_is_dynamodb() {
        let engine = store_settings(&[]).unwrap();
        assert!(engine.is_dynamodb());
        assert_eq!(engine, Engine::default());
        assert!(store_settings(&[("IDEMPOTENCY_STORE_URL", " ")])
            .unwrap()
            .is_dynamodb());
    }

    #[test]
    fn every_setting_is_read() {
        let engine = store_settings(&[
            (
                "IDEMPOTENCY_STORE_URL",
                "postgres://app@proxy/db?sslmode=require",
            ),
            (
                "IDEMPOTENCY_STORE_SECRET_ARN",
                "arn:aws:secretsmanager:us-east-1:1:secret:x",
            ),
            ("IDEMPOTENCY_CREATE_SCHEMA", "1"),
        ])
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
        let err = store_settings(&[("IDEMPOTENCY_CREATE_SCHEMA", "1")]).unwrap_err();
        assert!(err.starts_with("IDEMPOTENCY_CREATE_SCHEMA is set but IDEMPOTENCY_STORE_URL"));
        let err = store_settings(&[
            ("IDEMPOTENCY_STORE_URL", "redis://h"),
            ("IDEMPOTENCY_REDIS_CLUSTER", "yes"),
        ])
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
        let off = store_settings(&redis(&[])).unwrap();
        assert_eq!(off.redis_wait, None);
        let blank = store_settings(&redis(&[("IDEMPOTENCY_REDIS_WAIT_REPLICAS", " ")])).unwrap();
        assert_eq!(
            blank.redis_wait, None,
            "empty is off, as a template parameter's default"
        );
        let one = store_settings(&redis(&[("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "1")])).unwrap();
        assert_eq!(
            one.redis_wait,
            Some(RedisWait {
                replicas: 1,
                timeout: std::time::Duration::from_millis(300)
            })
        );
        let two = store_settings(&redis(&[
            ("IDEMPOTENCY_REDIS_WAIT_REPLICAS", "2"),
            ("IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS", "1999"),
        ]))
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
            let err = store_settings(pairs).unwrap_err();
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
