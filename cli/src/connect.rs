//! From the command line's options to a store that exists: the
//! configuration errors an operator meets (no table name, a missing table, a
//! wrong region, no credentials, a bad store URL, an unreachable server, a
//! missing schema) become one line saying what to do.

use std::sync::Arc;

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::Client;
use lambda_idempotency::{
    store::dynamodb::{schema, streams_endpoint, DYNAMODB_ENDPOINT_ENV},
    store::{open_url, OpenOptions, SweepStore, UrlStore},
    DynamoStore,
};

use crate::{Failure, StoreArgs};

/// The store, and what its engine says about it.
pub(crate) struct Connected {
    pub(crate) store: Arc<dyn SweepStore>,
    /// The engine: `dynamodb`, `redis` or `postgres`.
    pub(crate) engine: &'static str,
    /// DynamoDB's item count (refreshed about every six hours); `None` on
    /// the other engines.
    pub(crate) approximate_items: Option<i64>,
    /// Where the records are, for messages.
    pub(crate) place: String,
    /// How DynamoDB finds stuck records: `stream` or `index`; `None` on the
    /// other engines, which keep their own listing of records in progress.
    pub(crate) discovery: Option<&'static str>,
}

/// Connect to the store the options name: the engine a store URL names
/// (checked as the functions check it at start), or else the DynamoDB table.
/// The functions' rule: a store URL wins over a table, so the environment a
/// function runs with works here as it is; a note on stderr says the table
/// is not read.
pub(crate) async fn connect(args: &StoreArgs) -> Result<Connected, Failure> {
    let table = args.table.as_deref().filter(|t| !t.trim().is_empty());
    let url = args.store_url.as_deref().filter(|u| !u.trim().is_empty());
    match (url, table) {
        (Some(url), table) => {
            if let Some(table) = table {
                eprintln!(
                    "note: the store URL (--store-url, IDEMPOTENCY_STORE_URL) names where the \
                     records are, as it does for the functions: table `{table}` is not read \
                     (--table, IDEMPOTENCY_TABLE)"
                );
            }
            connect_url(url, args.redis_cluster).await
        }
        (None, _) if args.redis_cluster => Err(Failure::Usage(
            "--redis-cluster (IDEMPOTENCY_REDIS_CLUSTER) needs a redis:// or rediss:// store \
             URL (--store-url, IDEMPOTENCY_STORE_URL)"
                .into(),
        )),
        (None, _) => connect_dynamodb(args).await,
    }
}

/// Open the store `url` names, as the functions open it at start, without
/// creating a schema: an operator's tool never changes one.
async fn connect_url(url: &str, redis_cluster: bool) -> Result<Connected, Failure> {
    let options = OpenOptions {
        create_schema: false,
        redis_cluster,
        password: None,
    };
    // The library's message names the variable, never the password; it is
    // kept to one line as every error of this tool is.
    let opened = open_url(url, &options).await.map_err(|err| {
        Failure::Store(
            err.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        )
    })?;
    let engine = match &opened {
        UrlStore::Redis(_) => "redis",
        UrlStore::Postgres(_) => "postgres",
        _ => "other",
    };
    let store = opened.into_store();
    Ok(Connected {
        place: store.describe(),
        store,
        engine,
        approximate_items: None,
        discovery: None,
    })
}

/// Connect to the table the options name and check it is an idempotency
/// table (one `DescribeTable`, which reads no item).
async fn connect_dynamodb(args: &StoreArgs) -> Result<Connected, Failure> {
    let Some(table) = args.table.clone().filter(|t| !t.is_empty()) else {
        return Err(Failure::Usage(
            "no table: set IDEMPOTENCY_TABLE or pass --table with the idempotency table's name \
             (the stack's IdempotencyTableName output)"
                .into(),
        ));
    };
    let mut loader = aws_config::from_env();
    if let Some(profile) = &args.profile {
        loader = loader.profile_name(profile);
    }
    if let Some(region) = &args.region {
        loader = loader.region(aws_config::Region::new(region.clone()));
    }
    // An empty --endpoint-url (or AWS_ENDPOINT_URL_DYNAMODB) is unset: the
    // SDK panics on an empty endpoint.
    let endpoint = args.endpoint_url.clone().filter(|e| !e.trim().is_empty());
    if let Some(endpoint) = &endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    let shared = loader.load().await;
    let region = shared.region().map(|r| r.to_string());
    let Some(region) = region else {
        return Err(Failure::Usage(
            "no region: set AWS_REGION or pass --region (the region of the idempotency table)"
                .into(),
        ));
    };
    let place = match &endpoint {
        Some(endpoint) => format!("table `{table}` at {endpoint}"),
        None => format!("table `{table}` in {region}"),
    };
    let client = Client::new(&shared);
    let described = client
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .map_err(|err| describe_failure(&place, err))?;
    let description = described.table();
    // Stuck records are found as the sweeper finds them: in the table's
    // stream, or in the sparse index where the writers opted into it.
    let has_stream = description
        .and_then(|t| t.stream_specification())
        .is_some_and(|s| s.stream_enabled());
    let has_index = description
        .map(|t| {
            t.global_secondary_indexes()
                .iter()
                .any(|i| i.index_name() == Some(schema::SWEEP_INDEX))
        })
        .unwrap_or(false);
    // An operator's command, not a request someone waits on: the client's
    // own timeouts and retries (its first call may fetch credentials, SSO
    // or an assumed role, which the store's 250 ms attempt limit would
    // cut), not the request path's limits.
    let store = DynamoStore::builder(client, table).client_timeouts();
    let (store, discovery) = match (has_stream, has_index) {
        (true, _) => {
            // Where the functions read it: its own variable, else where
            // DynamoDB is (here --endpoint-url, or AWS_ENDPOINT_URL_DYNAMODB).
            let streams = streams_endpoint(|name| {
                if name == DYNAMODB_ENDPOINT_ENV {
                    endpoint.clone()
                } else {
                    std::env::var(name).ok()
                }
            });
            (
                store.with_stream_at(
                    aws_sdk_dynamodbstreams::config::Builder::from(&shared),
                    streams,
                ),
                "stream",
            )
        }
        (false, true) => (store.with_sweep_index(), "index"),
        (false, false) => {
            return Err(Failure::Store(format!(
                "{place} has neither a stream nor a `{}` index: is it the idempotency table? \
                 (IDEMPOTENCY_TABLE, --table)",
                schema::SWEEP_INDEX
            )))
        }
    };
    let store = store.open().map_err(|e| Failure::Store(e.to_string()))?;
    Ok(Connected {
        store: Arc::new(store),
        engine: "dynamodb",
        discovery: Some(discovery),
        approximate_items: description.and_then(|t| t.item_count()),
        place,
    })
}

/// One line for a failed `DescribeTable`: what is wrong, what to do.
fn describe_failure<E, R>(place: &str, err: SdkError<E, R>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = err.code().map(str::to_owned);
    let detail = DisplayErrorContext(&err).to_string();
    let message = match code.as_deref() {
        Some("ResourceNotFoundException") => format!(
            "{place} does not exist: check the table name (IDEMPOTENCY_TABLE, --table) and the \
             region (AWS_REGION, --region)"
        ),
        Some("UnrecognizedClientException" | "InvalidSignatureException") => format!(
            "the credentials were refused reading {place}: check AWS_PROFILE/--profile or the \
             AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY pair"
        ),
        Some("AccessDeniedException") => format!(
            "access denied to {place}: the identity needs dynamodb:DescribeTable, GetItem, Query, \
             Scan, UpdateItem and DeleteItem on it"
        ),
        _ if detail.contains("credentials") => format!(
            "no AWS credentials to read {place}: set AWS_PROFILE (or pass --profile), or \
             AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        ),
        _ if matches!(
            err,
            SdkError::DispatchFailure(_) | SdkError::TimeoutError(_)
        ) =>
        {
            format!(
                "cannot reach DynamoDB for {place}: check the region (AWS_REGION, --region), the \
             endpoint (--endpoint-url) and the network ({detail})"
            )
        }
        _ => format!("reading {place} failed: {detail}"),
    };
    Failure::Store(message)
}
