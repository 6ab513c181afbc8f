//! Lambda entry point of `orders-api`.

use std::sync::Arc;

use lambda_http::Error;
use lambda_idempotency::{DynamoStore, Store};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    // Every variable read once, here: a bad value stops the start in one
    // line naming it.
    let config =
        orders_api::Config::from_env().map_err(|e| format!("orders-api cannot start: {e}"))?;
    let aws = aws_config::from_env()
        .http_client(https_client())
        .load()
        .await;
    let client = aws_sdk_dynamodb::Client::new(&aws);
    // Concurrent when the platform asks for it (AWS_LAMBDA_MAX_CONCURRENCY),
    // sequential otherwise: the idempotent service is Clone + Send.
    let s3 = aws_sdk_s3::Client::new(&aws);
    // IDEMPOTENCY_STORE_URL: the records in Redis, Valkey or PostgreSQL,
    // connected and checked now, so a bad URL fails the cold start.
    let store: Arc<dyn Store> = match idempotency_engine::open(&config.engine, &aws)
        .await
        .map_err(|e| format!("orders-api cannot start: {e}"))?
    {
        Some(store) => store.into_store(),
        None => Arc::new(
            DynamoStore::builder(client.clone(), config.idempotency_table.clone())
                .open()
                .map_err(|e| format!("orders-api cannot start: {e}"))?,
        ),
    };
    // IDEMPOTENCY_WARM_UP (default true): the store's connection opened
    // now, during init, so the first request does not pay for its TCP
    // connection and TLS handshake. On DynamoDB the connection is the
    // client's, which the orders share. A failure is logged and the
    // function starts: its first request opens the connection itself.
    if config.warm_up {
        if let Err(e) = store.warm_up().await {
            tracing::warn!(error = %e, "idempotency store warm-up failed; the first request opens the connection");
        }
    }
    let app = orders_api::app_with_store(client, store, s3, &config);
    lambda_http::run_concurrent(app).await
}

/// The SDK's HTTPS client (DynamoDB, S3) with rustls on ring rather than
/// the default aws-lc: aws-lc seeds its random generator from CPU jitter
/// entropy at its first use, about 35 ms of CPU before the first
/// connection's ClientHello on the benchmark's machine (BENCHMARKS.md, the
/// cold start over TLS), several times the handshake itself; ring takes its
/// randomness from the kernel. The same trust roots (the platform's).
fn https_client() -> aws_sdk_dynamodb::config::SharedHttpClient {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}
