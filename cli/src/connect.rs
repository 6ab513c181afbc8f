//! From the command line's options to a store whose table exists: the
//! configuration errors an operator meets (no table name, a missing table, a
//! wrong region, no credentials) become one line saying what to do.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::Client;
use lambda_idempotency::{schema, DynamoStore};

use crate::{Failure, StoreArgs};

/// The store, and what the table's description says.
pub(crate) struct Connected {
    pub(crate) store: DynamoStore,
    /// DynamoDB's item count (refreshed about every six hours).
    pub(crate) approximate_items: Option<i64>,
    /// Where the table is, for messages.
    pub(crate) place: String,
    /// How stuck records are found: `stream` or `index`.
    pub(crate) discovery: &'static str,
}

/// Connect to the table the options name and check it is an idempotency
/// table (one `DescribeTable`, which reads no item).
pub(crate) async fn connect(args: &StoreArgs) -> Result<Connected, Failure> {
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
    if let Some(endpoint) = &args.endpoint_url {
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
    let place = match &args.endpoint_url {
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
    let store = DynamoStore::new(client, table);
    let (store, discovery) = match (has_stream, has_index) {
        (true, _) => (
            store.with_stream(aws_sdk_dynamodbstreams::Client::new(&shared)),
            "stream",
        ),
        (false, true) => (store.with_sweep_index(), "index"),
        (false, false) => {
            return Err(Failure::Store(format!(
                "{place} has neither a stream nor a `{}` index: is it the idempotency table? \
                 (IDEMPOTENCY_TABLE, --table)",
                schema::SWEEP_INDEX
            )))
        }
    };
    Ok(Connected {
        store,
        discovery,
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
