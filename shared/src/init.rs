//! What a function does during Lambda's init phase, before its first
//! request: the AWS SDK's configuration (`aws_config`, feature `aws`) and
//! the store's connection ([`warm_up`]).
//!
//! Both are about the first request's time. Done this way, a cold start's
//! first response costs about what a warm one does
//! (BENCHMARKS.md, "cold start over TLS"), because the work it would
//! otherwise do (seeding a TLS library's random generator, opening the
//! store's connection and its TLS session) is done in init, which Lambda
//! runs before the first request arrives and, with SnapStart or
//! provisioned concurrency, before any request is waiting.
//!
//! ```no_run
//! # #[cfg(all(feature = "aws", feature = "dynamodb"))]
//! # async fn f() -> Result<(), lambda_idempotency::Error> {
//! use lambda_idempotency::{init, settings::Settings, DynamoStore};
//!
//! let settings = Settings::from_env()?;
//! let aws = init::aws_config().await;
//! let client = aws_sdk_dynamodb::Client::new(&aws);
//! let store = DynamoStore::builder(client.clone(), settings.table()?).open()?;
//! init::warm_up(&store, settings.warm_up).await;
//! // ... the handler's own clients from `aws`, then `lambda_http::run`.
//! # Ok(())
//! # }
//! ```

use crate::store::Store;

/// The AWS SDK configuration a Lambda function wants, for every client
/// built from it (DynamoDB, S3, ...): region, credentials and endpoints
/// from the environment, as `aws_config::load_from_env` reads them, with
/// the SDK's HTTPS client on rustls with ring.
///
/// Why ring: the SDK's default TLS provider, aws-lc, seeds its random
/// generator from CPU jitter entropy at its first use, tens of
/// milliseconds of CPU before the first connection's `ClientHello` on a
/// small Lambda, several times the handshake itself (BENCHMARKS.md, the
/// cold start over TLS); ring takes its randomness from the kernel. The
/// trust roots are the same (the platform's).
#[cfg(feature = "aws")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
pub async fn aws_config() -> ::aws_config::SdkConfig {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let https = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    ::aws_config::from_env().http_client(https).load().await
}

/// Open `store`'s connection now, when `enabled` (the settings'
/// [`warm_up`](crate::settings::Settings::warm_up),
/// `IDEMPOTENCY_WARM_UP`, default true): [`Store::warm_up`], so that the
/// first request does not pay for the connection and its TLS handshake. On
/// DynamoDB the connection is the client's, which the handler's own calls
/// through the same client share.
///
/// A store that cannot be reached does not stop the function: the failure
/// is logged as a warning and `false` returned, and the first request
/// opens the connection itself (or answers 503 if the store is still
/// unreachable). Returns whether the connection was opened.
pub async fn warm_up<S: Store + ?Sized>(store: &S, enabled: bool) -> bool {
    if !enabled {
        return false;
    }
    match store.warm_up().await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(
                error = %e,
                "idempotency store warm-up failed; the first request opens the connection"
            );
            false
        }
    }
}
