//! [`DynamoStore`]: records in a DynamoDB table.
//!
//! Table layout (see [`schema`](crate::schema)): partition key `id` (S), TTL
//! attribute `expires_at` (epoch seconds), and a sparse global secondary index
//! `sweep` (`sweep_shard` S, `sweep_at` N) whose attributes exist only while a
//! record is in progress, for the sweeper.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use crate::error::{Error, ErrorKind};
use crate::record::{Record, Status, StoredBody, StoredResponse};
use crate::store::{own_claim, ClaimOutcome, ClaimRequest, Lease, Store};

/// Attribute and index names of the idempotency table.
pub mod schema {
    /// Partition key (S): hash of the scope.
    pub const ID: &str = "id";
    /// `IN_PROGRESS` or `COMPLETED` (S).
    pub const STATUS: &str = "status";
    /// Request fingerprint (S).
    pub const FINGERPRINT: &str = "fingerprint";
    /// Fencing token (N).
    pub const ATTEMPT: &str = "attempt";
    /// Owner token of the lease holder (S).
    pub const OWNER: &str = "owner";
    /// Lease end, epoch milliseconds (N).
    pub const LEASE_EXPIRES_AT: &str = "lease_expires_at";
    /// TTL attribute, epoch seconds (N). Enable TTL on this attribute.
    pub const EXPIRES_AT: &str = "expires_at";
    /// Stored response status (N).
    pub const RESPONSE_STATUS: &str = "response_status";
    /// Stored response headers (L of `[S name, B value]`).
    pub const RESPONSE_HEADERS: &str = "response_headers";
    /// Stored response body (B).
    pub const RESPONSE_BODY: &str = "response_body";
    /// `empty`, `text` or `binary` (S).
    pub const RESPONSE_BODY_KIND: &str = "response_body_kind";
    /// Recovery point of a record (M), kept across takeovers; a sweep in
    /// `release` mode leaves such records for their next retry to resume.
    pub const CHECKPOINT: &str = "checkpoint";
    /// Sweeper index partition key (S), present only while in progress.
    pub const SWEEP_SHARD: &str = "sweep_shard";
    /// Sweeper index sort key (N): lease end in ms, present only while in progress.
    pub const SWEEP_AT: &str = "sweep_at";
    /// Name of the sparse sweeper index.
    pub const SWEEP_INDEX: &str = "sweep";
    /// Number of sweeper index shards: the first hex digit of the record id.
    pub const SWEEP_SHARDS: u32 = 16;
}

use schema::*;

/// A [`Store`] on a DynamoDB table. Cheap to clone.
///
/// ```no_run
/// use lambda_idempotency::DynamoStore;
///
/// # async fn f() {
/// let config = aws_config::load_from_env().await;
/// let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&config), "idempotency");
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: Arc<str>,
}

impl DynamoStore {
    /// A store on `table` through `client`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoStore {
            client,
            table: Arc::from(table.into()),
        }
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn unavailable<E, R>(&self, op: &str, err: SdkError<E, R>) -> Error
    where
        E: std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        Error::with_source(
            ErrorKind::StoreUnavailable,
            format!(
                "DynamoDB {op} on table `{}` failed after the SDK's retries: {}",
                self.table,
                DisplayErrorContext(&err)
            ),
            err,
        )
    }

    fn fence_condition() -> &'static str {
        "#status = :in_progress AND #attempt = :attempt AND #owner = :owner"
    }

    fn fence_values(lease: &Lease) -> [(&'static str, AttributeValue); 3] {
        [
            (":in_progress", s(Status::InProgress.as_str())),
            (":attempt", n(lease.attempt)),
            (":owner", s(&lease.owner)),
        ]
    }
}

#[async_trait::async_trait]
impl Store for DynamoStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, Error> {
        let shard = request
            .record_id
            .get(..1)
            .unwrap_or("0")
            .to_ascii_lowercase();
        let result = self
            .client
            .update_item()
            .table_name(&*self.table)
            .key(ID, s(&request.record_id))
            // Absent, expired (TTL deletion lags by days), or an abandoned
            // claim of the same request whose lease has run out.
            .condition_expression(
                "attribute_not_exists(#id) OR #expires_at < :now_s \
                 OR (#status = :in_progress AND #lease < :now_ms AND #fingerprint = :fingerprint)",
            )
            .update_expression(
                "SET #status = :in_progress, #fingerprint = :fingerprint, #owner = :owner, \
                 #lease = :lease, #expires_at = :expires_at, \
                 #attempt = if_not_exists(#attempt, :zero) + :one, \
                 #sweep_shard = :shard, #sweep_at = :lease \
                 REMOVE #rs, #rh, #rb, #rk",
            )
            .expression_attribute_names("#id", ID)
            .expression_attribute_names("#status", STATUS)
            .expression_attribute_names("#fingerprint", FINGERPRINT)
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#lease", LEASE_EXPIRES_AT)
            .expression_attribute_names("#expires_at", EXPIRES_AT)
            .expression_attribute_names("#attempt", ATTEMPT)
            .expression_attribute_names("#sweep_shard", SWEEP_SHARD)
            .expression_attribute_names("#sweep_at", SWEEP_AT)
            .expression_attribute_names("#rs", RESPONSE_STATUS)
            .expression_attribute_names("#rh", RESPONSE_HEADERS)
            .expression_attribute_names("#rb", RESPONSE_BODY)
            .expression_attribute_names("#rk", RESPONSE_BODY_KIND)
            .expression_attribute_values(":now_s", n(request.now_ms / 1000))
            .expression_attribute_values(":now_ms", n(request.now_ms))
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .expression_attribute_values(":fingerprint", s(&request.fingerprint))
            .expression_attribute_values(":owner", s(&request.owner))
            .expression_attribute_values(":lease", n(request.lease_expires_at_ms))
            .expression_attribute_values(":expires_at", n(request.expires_at_s))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":shard", s(&shard))
            .return_values(ReturnValue::UpdatedNew)
            // A lost claim learns the existing record in this same round trip.
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(output) => {
                let attempt = output
                    .attributes()
                    .and_then(|a| a.get(ATTEMPT))
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| {
                        corrupt(&request.record_id, "the claim did not return `attempt`")
                    })?;
                Ok(ClaimOutcome::Claimed(Lease {
                    record_id: request.record_id.clone(),
                    owner: request.owner.clone(),
                    attempt,
                }))
            }
            Err(err) => {
                let existing = err.as_service_error().and_then(|e| match e {
                    UpdateItemError::ConditionalCheckFailedException(e) => {
                        Some(e.item().cloned().unwrap_or_default())
                    }
                    _ => None,
                });
                let Some(item) = existing else {
                    return Err(self.unavailable("UpdateItem (claim)", err));
                };
                let record = decode(&request.record_id, &item)?;
                Ok(match own_claim(&record, request) {
                    Some(lease) => ClaimOutcome::Claimed(lease),
                    None => ClaimOutcome::Exists(record),
                })
            }
        }
    }

    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at_s: u64,
    ) -> Result<(), Error> {
        let headers = headers_value(&response.headers);
        // An update rather than a put keeps the fingerprint (a later request
        // with another body must still get a 422); removing the sweep
        // attributes takes the record out of the sparse index.
        let mut update = String::from(
            "SET #status = :completed, #expires_at = :expires_at, #rs = :rs, #rh = :rh, #rk = :rk",
        );
        update.push_str(if response.body.bytes().is_empty() {
            " REMOVE #sweep_shard, #sweep_at, #rb"
        } else {
            ", #rb = :rb REMOVE #sweep_shard, #sweep_at"
        });
        let mut request = self
            .client
            .update_item()
            .table_name(&*self.table)
            .key(ID, s(&lease.record_id))
            .condition_expression(Self::fence_condition())
            .update_expression(update)
            .expression_attribute_names("#status", STATUS)
            .expression_attribute_names("#attempt", ATTEMPT)
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#expires_at", EXPIRES_AT)
            .expression_attribute_names("#rs", RESPONSE_STATUS)
            .expression_attribute_names("#rh", RESPONSE_HEADERS)
            .expression_attribute_names("#rk", RESPONSE_BODY_KIND)
            .expression_attribute_names("#rb", RESPONSE_BODY)
            .expression_attribute_names("#sweep_shard", SWEEP_SHARD)
            .expression_attribute_names("#sweep_at", SWEEP_AT)
            .expression_attribute_values(":completed", s(Status::Completed.as_str()))
            .expression_attribute_values(":expires_at", n(expires_at_s))
            .expression_attribute_values(":rs", n(u64::from(response.status)))
            .expression_attribute_values(":rh", headers)
            .expression_attribute_values(":rk", s(response.body.kind()));
        if !response.body.bytes().is_empty() {
            request = request.expression_attribute_values(
                ":rb",
                AttributeValue::B(response.body.bytes().to_vec().into()),
            );
        }
        for (name, value) in Self::fence_values(lease) {
            request = request.expression_attribute_values(name, value);
        }
        match request.send().await {
            Ok(_) => Ok(()),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Err(Error::fenced(&lease.record_id, lease.attempt))
            }
            Err(err) => Err(self.unavailable("UpdateItem (complete)", err)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        let mut request = self
            .client
            .delete_item()
            .table_name(&*self.table)
            .key(ID, s(&lease.record_id))
            .condition_expression(Self::fence_condition())
            .expression_attribute_names("#status", STATUS)
            .expression_attribute_names("#attempt", ATTEMPT)
            .expression_attribute_names("#owner", OWNER);
        for (name, value) in Self::fence_values(lease) {
            request = request.expression_attribute_values(name, value);
        }
        match request.send().await {
            Ok(_) => Ok(()),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Err(Error::fenced(&lease.record_id, lease.attempt))
            }
            Err(err) => Err(self.unavailable("DeleteItem (release)", err)),
        }
    }
}

pub(crate) fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

pub(crate) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn corrupt(record_id: &str, what: &str) -> Error {
    Error::new(
        ErrorKind::CorruptRecord,
        format!(
            "idempotency record {record_id} cannot be read: {what}; \
             was the item written by something other than lambda-idempotency?"
        ),
    )
}

/// Stored headers as a list of `[S name, B value]` pairs.
pub(crate) fn headers_value(headers: &[(String, Vec<u8>)]) -> AttributeValue {
    AttributeValue::L(
        headers
            .iter()
            .map(|(name, value)| {
                AttributeValue::L(vec![s(name), AttributeValue::B(value.clone().into())])
            })
            .collect(),
    )
}

/// Decode an item into a [`Record`].
pub(crate) fn decode(
    record_id: &str,
    item: &HashMap<String, AttributeValue>,
) -> Result<Record, Error> {
    let get_s = |name: &str| -> Result<String, Error> {
        item.get(name)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .ok_or_else(|| corrupt(record_id, &format!("string attribute `{name}` is missing")))
    };
    let get_n = |name: &str| -> Result<u64, Error> {
        item.get(name)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| corrupt(record_id, &format!("number attribute `{name}` is missing")))
    };
    let status_text = get_s(STATUS)?;
    let status = Status::parse(&status_text)
        .ok_or_else(|| corrupt(record_id, &format!("unknown status `{status_text}`")))?;
    let response = match status {
        Status::InProgress => None,
        Status::Completed => Some(decode_response(record_id, item)?),
    };
    Ok(Record {
        id: record_id.to_owned(),
        status,
        fingerprint: get_s(FINGERPRINT)?,
        attempt: get_n(ATTEMPT)?,
        owner: get_s(OWNER)?,
        lease_expires_at_ms: get_n(LEASE_EXPIRES_AT)?,
        expires_at_s: get_n(EXPIRES_AT)?,
        response,
    })
}

fn decode_response(
    record_id: &str,
    item: &HashMap<String, AttributeValue>,
) -> Result<StoredResponse, Error> {
    let status = item
        .get(RESPONSE_STATUS)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<u16>().ok())
        .ok_or_else(|| corrupt(record_id, "the stored response has no status"))?;
    let mut headers = Vec::new();
    if let Some(list) = item.get(RESPONSE_HEADERS).and_then(|v| v.as_l().ok()) {
        for pair in list {
            match pair.as_l().ok().map(Vec::as_slice) {
                Some([AttributeValue::S(name), AttributeValue::B(value)]) => {
                    headers.push((name.clone(), value.as_ref().to_vec()))
                }
                _ => {
                    return Err(corrupt(
                        record_id,
                        "a stored header is not a [name, value] pair",
                    ))
                }
            }
        }
    }
    let kind = item
        .get(RESPONSE_BODY_KIND)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        .unwrap_or("empty");
    let bytes = item
        .get(RESPONSE_BODY)
        .and_then(|v| v.as_b().ok())
        .map(|b| b.as_ref().to_vec())
        .unwrap_or_default();
    let body = StoredBody::from_parts(kind, bytes)
        .ok_or_else(|| corrupt(record_id, &format!("unknown body kind `{kind}`")))?;
    Ok(StoredResponse::new(status, headers, body))
}
