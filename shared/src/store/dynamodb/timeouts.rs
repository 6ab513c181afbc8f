//! How long a store call waits on DynamoDB: the fail-fast policy of the
//! request path (docs/DESIGN.md, "Failing fast").
//!
//! The SDK's defaults suit a batch job, not a request someone waits on:
//! no limit on an attempt (a port that accepts and never answers holds
//! the invocation until Lambda's timeout) and, under behaviour version
//! 2.0, retries after a jittered backoff from 1 s. The store's calls
//! override the client's configuration per call
//! (`customize().config_override(..)`) with a limit per attempt, a limit
//! per call (retries included) and a short backoff; the application's own
//! calls keep the configuration it built.
//!
//! Per call, on the application's client, rather than on a client derived
//! from it: a client built without an explicit HTTP client gets a default
//! one of its own, so a derived client would keep a connection pool of its
//! own and the handler's first call would open a second connection after
//! the store's warm-up. And only orchestrator settings change: the connect
//! and read timeouts are the HTTP client's settings, and the SDK keeps one
//! pool per distinct pair of them, so they stay the application's.

use std::time::Duration;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::Client;

/// Default limit on one attempt of a store call, its connection included.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(250);

/// Default limit on a whole store call, its retries included: past it, the
/// call fails as [`ErrorKind::StoreUnavailable`](crate::ErrorKind::StoreUnavailable)
/// and a request is answered 503 with `Retry-After`.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_millis(450);

/// Attempts of one call: a refused connection or a dropped one is tried
/// again on a fresh connection, twice at most.
const MAX_ATTEMPTS: u32 = 3;

/// The backoff before a retry, drawn (full jitter) below `INITIAL_BACKOFF`
/// doubled per retry, never above `MAX_BACKOFF`: a few tens of
/// milliseconds, within the call's limit.
const INITIAL_BACKOFF: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// What a store's calls wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timeouts {
    /// Limits per attempt and per call, with the short backoff.
    Limited { attempt: Duration, call: Duration },
    /// The client's own timeouts and retry policy, as the application
    /// built it.
    Client,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts::Limited {
            attempt: DEFAULT_ATTEMPT_TIMEOUT,
            call: DEFAULT_CALL_TIMEOUT,
        }
    }
}

impl Timeouts {
    /// The limits of a call of `call` in all: each attempt gets 5/9 of it
    /// (250 of 450 ms), so that one retry and its backoff still fit.
    pub(crate) fn of_call(call: Duration) -> Timeouts {
        Timeouts::Limited {
            attempt: call * 5 / 9,
            call,
        }
    }

    /// The limits `IDEMPOTENCY_STORE_TIMEOUT_MS` gives, or the defaults.
    pub(crate) fn from_env() -> Result<Timeouts, crate::Error> {
        crate::settings::store_timeout_from_env().map(Timeouts::of_call)
    }

    /// What the store's calls through `client` override its configuration
    /// with: nothing, or the limits and the backoff, with the client's own
    /// connect and read timeouts (the key of its connection pool).
    pub(crate) fn config_override(self, client: &Client) -> aws_sdk_dynamodb::config::Builder {
        let Timeouts::Limited { attempt, call } = self else {
            return aws_sdk_dynamodb::config::Builder::default();
        };
        let timeouts = client
            .config()
            .timeout_config()
            .map_or_else(TimeoutConfig::builder, TimeoutConfig::to_builder)
            .operation_attempt_timeout(attempt)
            .operation_timeout(call)
            .build();
        let retries = RetryConfig::standard()
            .with_max_attempts(MAX_ATTEMPTS)
            .with_initial_backoff(INITIAL_BACKOFF)
            .with_max_backoff(MAX_BACKOFF);
        aws_sdk_dynamodb::config::Builder::default()
            .timeout_config(timeouts)
            .retry_config(retries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Client {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_millis(3100))
                    .read_timeout(Duration::from_secs(7))
                    .build(),
            )
            .build();
        Client::from_conf(config)
    }

    #[test]
    fn limits_are_set_and_the_http_settings_kept() {
        let derived = Timeouts::default().config_override(&client()).build();
        let timeouts = derived.timeout_config().unwrap();
        assert_eq!(
            timeouts.operation_attempt_timeout(),
            Some(DEFAULT_ATTEMPT_TIMEOUT)
        );
        assert_eq!(timeouts.operation_timeout(), Some(DEFAULT_CALL_TIMEOUT));
        // The pool is shared only while these two are the application's.
        assert_eq!(
            timeouts.connect_timeout(),
            Some(Duration::from_millis(3100))
        );
        assert_eq!(timeouts.read_timeout(), Some(Duration::from_secs(7)));
        let retries = derived.retry_config().unwrap();
        assert_eq!(retries.max_attempts(), MAX_ATTEMPTS);
        assert_eq!(retries.initial_backoff(), INITIAL_BACKOFF);
        assert_eq!(retries.max_backoff(), MAX_BACKOFF);
    }

    #[test]
    fn the_default_call_limit_gives_the_default_attempt_limit() {
        assert_eq!(Timeouts::of_call(DEFAULT_CALL_TIMEOUT), Timeouts::default());
        assert_eq!(
            Timeouts::of_call(Duration::from_secs(9)),
            Timeouts::Limited {
                attempt: Duration::from_secs(5),
                call: Duration::from_secs(9)
            }
        );
    }

    #[test]
    fn the_clients_own_policy_is_kept_when_asked() {
        let kept = Timeouts::Client.config_override(&client()).build();
        assert_eq!(kept.timeout_config(), None, "nothing overridden");
        assert_eq!(kept.retry_config(), None, "nothing overridden");
    }
}
