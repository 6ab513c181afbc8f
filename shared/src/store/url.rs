//! Opening a store from a URL: `redis://` / `rediss://` (Redis or Valkey)
//! or `postgres://` / `postgresql://`, as one setting chooses the engine.

use std::sync::Arc;

use crate::error::{Error, ErrorKind};
use crate::store::SweepStore;

/// The environment variables of the engine a URL names, defined with every
/// other in [`settings`](crate::settings).
pub use crate::settings::{CREATE_SCHEMA_ENV, REDIS_CLUSTER_ENV, STORE_URL_ENV};

/// A store opened by [`open_url`], of the engine its URL named.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum UrlStore {
    /// `redis://` or `rediss://`.
    #[cfg(feature = "redis")]
    Redis(super::redis::RedisStore),
    /// `postgres://` or `postgresql://`.
    #[cfg(feature = "postgres")]
    Postgres(super::postgres::PostgresStore),
}

impl UrlStore {
    /// The store, for [`IdempotencyLayer`](crate::IdempotencyLayer),
    /// [`IdempotentFunction`](crate::IdempotentFunction), a `Sweeper` or the
    /// CLI: every engine a URL opens implements both sides of the contract
    /// (an `Arc<dyn SweepStore>` is a [`Store`](crate::Store) too).
    pub fn into_store(self) -> Arc<dyn SweepStore> {
        match self {
            #[cfg(feature = "redis")]
            UrlStore::Redis(store) => Arc::new(store),
            #[cfg(feature = "postgres")]
            UrlStore::Postgres(store) => Arc::new(store),
        }
    }
}

/// How [`open_url`] opens a store.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// PostgreSQL: create the schema when missing
    /// ([`PostgresStore::migrate`](super::postgres::PostgresStore::migrate), safe when
    /// many cold starts run it at once) instead of failing the start.
    pub create_schema: bool,
    /// Redis: the URL names a Redis Cluster (ElastiCache Serverless,
    /// MemoryDB, a self-managed cluster): use the cluster client.
    pub redis_cluster: bool,
    /// PostgreSQL: the password, when the URL carries none (read from a
    /// secret at start-up rather than kept in the environment).
    pub password: Option<String>,
}

/// The engine a URL names, by its scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Redis,
    Postgres,
}

fn engine_of(url: &str) -> Result<Engine, Error> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("redis" | "rediss") => Ok(Engine::Redis),
        Some("postgres" | "postgresql") => Ok(Engine::Postgres),
        _ => Err(Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "{STORE_URL_ENV}: `{}` is not a store URL; use redis:// or rediss:// (Redis, \
                 Valkey), postgres:// or postgresql://, or unset it for DynamoDB",
                redacted(url)
            ),
        )),
    }
}

/// `url` without its password, for messages. Parsed as a URL parser reads
/// it (the `url` crate): a `/`, `?` or `#` left unencoded in a password
/// ends the authority there, so the rest of the password would read as a
/// path; an `@` after the host says so, and then nothing but the scheme is
/// shown. A URL that does not parse is not shown at all.
fn redacted(url: &str) -> String {
    const ENCODE: &str = "percent-encode `/`, `?`, `#` and `@` in a password";
    let mut parsed = match url::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(err) => return format!("(not shown: it does not parse as a URL, {err}; {ENCODE})"),
    };
    if parsed[url::Position::BeforePath..].contains('@') {
        return format!(
            "{}://(not shown: an `@` after the host is part of a password; {ENCODE})",
            parsed.scheme()
        );
    }
    if parsed.password().is_some() && parsed.set_password(Some("***")).is_err() {
        return format!("{}://(not shown)", parsed.scheme());
    }
    parsed.to_string()
}

/// `url` with `password` set in its user information (percent-encoded).
#[cfg(feature = "postgres")]
fn with_password(url: &str, password: &str) -> Result<String, Error> {
    let missing_user = || {
        Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "{STORE_URL_ENV}: `{}` names no user, so the password read for it has no one to \
                 go with: write the user in the URL (postgres://user@host/db)",
                redacted(url)
            ),
        )
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(missing_user)?;
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (userinfo, host) = rest[..authority_end]
        .rsplit_once('@')
        .ok_or_else(missing_user)?;
    let user = userinfo.split(':').next().unwrap_or_default();
    if user.is_empty() {
        return Err(missing_user());
    }
    let password =
        percent_encoding::utf8_percent_encode(password, percent_encoding::NON_ALPHANUMERIC);
    Ok(format!(
        "{scheme}://{user}:{password}@{host}{}",
        &rest[authority_end..]
    ))
}

/// Open the store `url` names, connected and checked, so that a bad URL, an
/// unreachable server or (PostgreSQL) a missing schema fails at start-up
/// with one line naming [`STORE_URL_ENV`] rather than on the first request.
///
/// - `redis://` / `rediss://` (feature `redis`): [`RedisStore`](super::redis::RedisStore),
///   database number, user and password as written.
/// - `postgres://` / `postgresql://` (feature `postgres`):
///   [`PostgresStore`](super::postgres::PostgresStore), database, user and `sslmode`
///   as written; its table is checked, or created with
///   [`OpenOptions::create_schema`].
///
/// ```
/// use lambda_idempotency::{ErrorKind, store::{open_url, OpenOptions}};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let err = open_url("mysql://db/idempotency", &OpenOptions::default()).await.unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidConfig);
/// assert!(err.to_string().starts_with("IDEMPOTENCY_STORE_URL:"));
/// # });
/// ```
///
/// # Errors
///
/// [`ErrorKind::InvalidConfig`]: an unknown scheme, an engine this build
/// has no feature for, a malformed URL, a missing schema;
/// [`ErrorKind::StoreUnavailable`]: the server cannot be reached.
pub async fn open_url(url: &str, options: &OpenOptions) -> Result<UrlStore, Error> {
    #[cfg(any(feature = "redis", feature = "postgres"))]
    let named = |err: Error| {
        if err.to_string().starts_with(STORE_URL_ENV) {
            err
        } else {
            Error::with_source(err.kind(), format!("{STORE_URL_ENV}: {err}"), err)
        }
    };
    match engine_of(url)? {
        Engine::Redis => {
            #[cfg(feature = "redis")]
            {
                let mut builder = super::redis::RedisStore::builder(url);
                if options.redis_cluster {
                    builder = builder.cluster();
                }
                let store = builder.connect().await.map_err(named)?;
                Ok(UrlStore::Redis(store))
            }
            #[cfg(not(feature = "redis"))]
            Err(not_built("redis", url))
        }
        Engine::Postgres => {
            #[cfg(feature = "postgres")]
            {
                let url = match &options.password {
                    Some(password) => with_password(url, password)?,
                    None => url.to_owned(),
                };
                let store = super::postgres::PostgresStore::builder(&url)
                    .open()
                    .map_err(named)?;
                if options.create_schema {
                    store.migrate().await.map_err(named)?;
                } else {
                    store.check_schema().await.map_err(named)?;
                }
                Ok(UrlStore::Postgres(store))
            }
            #[cfg(not(feature = "postgres"))]
            {
                let _ = options;
                Err(not_built("postgres", url))
            }
        }
    }
}

#[cfg(any(not(feature = "redis"), not(feature = "postgres")))]
fn not_built(feature: &str, url: &str) -> Error {
    Error::new(
        ErrorKind::InvalidConfig,
        format!(
            "{STORE_URL_ENV}: `{}` needs lambda-idempotency's `{feature}` feature, which this \
             build does not have",
            redacted(url)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_by_scheme_in_any_case() {
        assert_eq!(engine_of("redis://h").unwrap(), Engine::Redis);
        assert_eq!(engine_of("REDISS://h:6380/2").unwrap(), Engine::Redis);
        assert_eq!(engine_of("postgres://u@h/db").unwrap(), Engine::Postgres);
        assert_eq!(engine_of("postgresql://h").unwrap(), Engine::Postgres);
        for bad in ["", "h:6379", "http://h", "dynamodb://t"] {
            let err = engine_of(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            assert!(err.to_string().contains("redis://"), "{err}");
        }
    }

    #[test]
    fn messages_never_show_a_password() {
        assert_eq!(
            redacted("redis://user:s3cret@h:6379/1"),
            "redis://user:***@h:6379/1"
        );
        assert_eq!(
            redacted("postgres://app:p%40ss@db/x?sslmode=require"),
            "postgres://app:***@db/x?sslmode=require"
        );
        assert_eq!(redacted("redis://h:6379"), "redis://h:6379");
        assert_eq!(redacted("redis://:s3cret@h:6379"), "redis://:***@h:6379");
        let err = engine_of("mysql://root:hunter2@db/x").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn a_password_with_an_unencoded_delimiter_is_not_shown() {
        // `/`, `?` or `#` unencoded in a password end the authority for any
        // URL parser: what follows must not be printed as a path.
        for (url, secret) in [
            ("redis://user:pa/ss@h:6379/1", "pa/ss"),
            ("redis://user:1234/x@h:6379", "1234/x"),
            ("postgres://app:p?ss@db/x", "p?ss"),
            ("postgres://app:p#ss@db/x", "p#ss"),
            ("rediss://default:s3/cr3t@cache.example:6380", "s3/cr3t"),
        ] {
            let shown = redacted(url);
            let (left, right) = secret.split_at(secret.len() / 2);
            assert!(
                !(shown.contains(left) && shown.contains(right)),
                "{url} shown as {shown}"
            );
            let err = engine_of(
                &url.replacen("redis", "mysql", 1)
                    .replacen("postgres", "mysql", 1),
            )
            .unwrap_err();
            assert!(!err.to_string().contains(secret), "{err}");
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_password_from_a_secret_joins_the_user_encoded() {
        assert_eq!(
            with_password("postgres://app@proxy:5432/db?sslmode=require", "p@ss/w:rd").unwrap(),
            "postgres://app:p%40ss%2Fw%3Ard@proxy:5432/db?sslmode=require"
        );
        assert_eq!(
            with_password("postgres://app:old@proxy/db", "new").unwrap(),
            "postgres://app:new@proxy/db"
        );
        for no_user in ["postgres://proxy/db", "postgres://@proxy/db"] {
            let err = with_password(no_user, "x").unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            assert!(err.to_string().contains("names no user"), "{err}");
        }
    }
}
