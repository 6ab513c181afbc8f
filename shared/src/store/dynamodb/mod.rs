//! [`DynamoStore`]: records in a DynamoDB table.
//!
//! Table layout by default (see [`schema`]): partition key
//! `id` (S), TTL attribute `expires_at` (epoch seconds), and a stream (view
//! type `NEW_IMAGE`) in which the sweeper finds stuck records. Opted into
//! instead (`with_sweep_index`): a sparse global secondary index `sweep`
//! (`sweep_shard` S, `sweep_at` N) whose attributes exist only while a record
//! is in progress. Another table (other names, a composite key, other items
//! beside the records) is adopted with a [`TableLayout`].
//!
//! The files, laid out as in every engine of the crate: this one holds the
//! store type, its builder methods and the plumbing every operation goes
//! through (a failed call's error, the fenced conditional writes);
//! `store.rs` the hot path ([`Store`](crate::Store)'s claim, complete,
//! checkpoint and release); `sweep.rs` what the sweeper and operators call
//! (stuck listings, resolution, get, scan, their cursors); `codec.rs` records
//! as items; `layout.rs` attribute names and keys; `stream.rs` (and
//! `stream/`) the listing through the table's stream.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use crate::error::{Error, ErrorKind};
use crate::record::Status;
use crate::store::{Lease, DEFAULT_MAX_RESPONSE_BYTES};

/// Attribute and index names of the template's idempotency table: the
/// names of [`TableLayout::default`], which a store uses unless given another
/// layout ([`DynamoStoreBuilder::with_layout`](crate::store::dynamodb::DynamoStoreBuilder::with_layout)).
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
    /// `gzip` when the stored body is compressed (S); absent otherwise.
    pub const RESPONSE_ENCODING: &str = "response_encoding";
    /// Recovery point of a record (M), kept across takeovers; a sweep in
    /// `release` mode leaves such records for their next retry to resume.
    pub const CHECKPOINT: &str = "checkpoint";
    /// Sweeper index partition key (S), present only while in progress.
    pub const SWEEP_SHARD: &str = "sweep_shard";
    /// Sweeper index sort key (N): lease end in ms, present only while in progress.
    pub const SWEEP_AT: &str = "sweep_at";
    /// Name of the sparse sweeper index.
    pub const SWEEP_INDEX: &str = "sweep";
    /// Number of sweeper index shards (`0` to `f`), see [`sweep_shard`].
    pub const SWEEP_SHARDS: u32 = 16;

    /// The sweeper index shard of a record: the first hex digit of its id when
    /// the id is a hex hash (as every id this crate makes is), else the first
    /// hex digit of the id's SHA-256, so any id spreads evenly over the shards.
    pub fn sweep_shard(record_id: &str) -> char {
        match record_id.chars().next() {
            Some(c @ ('0'..='9' | 'a'..='f')) => c,
            _ => {
                use sha2::{Digest, Sha256};
                let first = Sha256::digest(record_id.as_bytes())[0] >> 4;
                char::from_digit(u32::from(first), 16).unwrap_or('0')
            }
        }
    }
}

mod codec;
mod layout;
mod store;
#[cfg(feature = "sweep-via-stream")]
mod stream;
mod sweep;
mod timeouts;
mod write;
#[cfg(feature = "sweep-via-stream")]
pub use stream::{
    check_lease_within_stream, streams_endpoint, DEFAULT_FULL_PASS, DYNAMODB_ENDPOINT_ENV,
    STREAMS_ENDPOINT_ENV, STREAM_RETENTION,
};

use codec::{n, s};
pub use layout::{KeyValue, TableLayout};
pub use store::WARM_UP_RECORD_ID;
pub(crate) use timeouts::Timeouts;
pub use timeouts::{DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CALL_TIMEOUT};
use write::{Clause, WriteParts};

/// Ids of the items the sweeper keeps in the table (its places in the
/// stream, `stream.rs`); no record id (a hex hash) starts with it, so the
/// scans of `sweep.rs` and the stream's listing skip them.
const SWEEPER_ITEM_PREFIX: &str = "~sweeper/";

/// A [`Store`](crate::Store) on a DynamoDB table. Cheap to clone.
///
/// ```no_run
/// use lambda_idempotency::DynamoStore;
///
/// # async fn f() -> Result<(), lambda_idempotency::Error> {
/// let config = aws_config::load_from_env().await;
/// let store = DynamoStore::builder(aws_sdk_dynamodb::Client::new(&config), "idempotency").open()?;
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct DynamoStore {
    /// The application's client: every call, the sweeper's listings as
    /// they are.
    client: Client,
    /// What the request path's calls (claim, get, complete, recovery
    /// points, release, resolution, warm-up) lay over the client's
    /// configuration: the store's timeouts and backoff
    /// ([`DynamoStoreBuilder::timeouts`]).
    limits: aws_sdk_dynamodb::config::Builder,
    table: Arc<str>,
    max_response_bytes: usize,
    /// Attribute names and the key of records' items.
    layout: Arc<TableLayout>,
    /// Claims write the sparse index's keys, and listings read the index.
    sweep_index: bool,
    /// Listings read the table's stream.
    #[cfg(feature = "sweep-via-stream")]
    stream: Option<aws_sdk_dynamodbstreams::Client>,
    /// Where the stream is read, for messages, when known
    /// ([`with_stream_at`](DynamoStoreBuilder::with_stream_at)).
    #[cfg(feature = "sweep-via-stream")]
    stream_endpoint: Option<Arc<str>>,
    /// How often a full pass of the table backs the stream up.
    #[cfg(feature = "sweep-via-stream")]
    full_pass: std::time::Duration,
}

impl DynamoStoreBuilder {
    /// With the stream ([`with_stream`](Self::with_stream)): start a full
    /// pass of the table, the stream's backstop, every `period` (default
    /// [`DEFAULT_FULL_PASS`], one hour; the sweeper's
    /// `IDEMPOTENCY_SWEEP_FULL_PASS_SECONDS`). A pass reads the whole table
    /// for stuck records, a budgeted part per listing, its place kept
    /// between sweeps: whatever the stream does, a record stuck at any time
    /// is found within lease + grace + `period` + the pass's own duration.
    /// It costs a read of the whole table per period (docs/SCALING.md).
    /// `Duration::ZERO` turns the periodic pass off: a gap the stream shows
    /// (a trim, a shard with no known past) still starts one.
    #[cfg(feature = "sweep-via-stream")]
    pub fn full_pass(mut self, period: std::time::Duration) -> Self {
        self.full_pass = period;
        self
    }

    /// Find stuck records through the table's stream (view type `NEW_IMAGE`),
    /// read through `streams`: the listing the sweeper and the CLI use, at no
    /// cost on the hot path (claims, recovery points and completions write
    /// nothing for it). See docs/DESIGN.md section 9.
    #[cfg(feature = "sweep-via-stream")]
    pub fn with_stream(mut self, streams: aws_sdk_dynamodbstreams::Client) -> Self {
        self.stream = Some(streams);
        self.stream_endpoint = None;
        self
    }

    /// [`with_stream`](Self::with_stream), with the client built from
    /// `config` (`aws_sdk_dynamodbstreams::config::Builder::from(&sdk_config)`)
    /// at `endpoint`, `None` meaning the region's own, whatever `config`
    /// holds: pass [`streams_endpoint`] of the
    /// environment, so that the stream follows `AWS_ENDPOINT_URL_DYNAMODB`
    /// (DynamoDB Local serves both) and an empty variable never reaches the
    /// SDK, which panics on one. Errors reading the stream name the
    /// endpoint.
    #[cfg(feature = "sweep-via-stream")]
    pub fn with_stream_at(
        mut self,
        mut config: aws_sdk_dynamodbstreams::config::Builder,
        endpoint: Option<String>,
    ) -> Self {
        config.set_endpoint_url(endpoint.clone());
        let config = config.build();
        let place = match (endpoint, config.region()) {
            (Some(endpoint), _) => endpoint,
            (None, Some(region)) => format!(
                "https://streams.dynamodb.{region}.amazonaws.com (the region's endpoint: \
                 neither {} nor {} is set)",
                stream::STREAMS_ENDPOINT_ENV,
                stream::DYNAMODB_ENDPOINT_ENV
            ),
            (None, None) => "the region's endpoint, with no region set (AWS_REGION)".to_owned(),
        };
        self.stream = Some(aws_sdk_dynamodbstreams::Client::from_conf(config));
        self.stream_endpoint = Some(place);
        self
    }

    /// Keep stuck records in the sparse `sweep` index instead: every claim
    /// writes the index's keys (one more write unit per claim and one per
    /// completion) and listings query the index. For tables without a
    /// stream. Every writer of the table (the functions) and the sweeper must
    /// agree on it.
    pub fn with_sweep_index(mut self) -> Self {
        self.sweep_index = true;
        self
    }

    /// Keep records in a table laid out as `layout` says (attribute names,
    /// a composite key, the sweep index): to adopt an existing table, a
    /// single-table design included. Every writer of the table and the
    /// sweeper must use the same layout.
    ///
    /// An invalid layout (see [`TableLayout::validate`]: an empty or a
    /// repeated attribute name, or no key that holds the record id) is
    /// refused by [`open`](Self::open).
    pub fn with_layout(mut self, layout: TableLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Keep responses up to `bytes` (body after compression plus headers;
    /// default [`DEFAULT_MAX_RESPONSE_BYTES`], below DynamoDB's 400 KB item
    /// limit). Larger ones complete with a problem marker instead.
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// Limit each attempt of the store's request-path calls (claim, get,
    /// complete, recovery points, release, resolution) to `attempt`, its
    /// connection included, and each call, its retries included, to `call`
    /// (defaults [`DEFAULT_ATTEMPT_TIMEOUT`], 250 ms, and
    /// [`DEFAULT_CALL_TIMEOUT`], 450 ms, or `IDEMPOTENCY_STORE_TIMEOUT_MS`
    /// for the call and 5/9 of it for an attempt; up to 3 attempts, 20–100
    /// ms apart). Past `call` the call fails as
    /// [`ErrorKind::StoreUnavailable`] and a request is answered 503 with
    /// `Retry-After`, rather than waiting out the SDK's default backoff or
    /// a server that never answers. The client's connect and read timeouts
    /// are kept, so the store and the application share its connections.
    /// Listings (the sweeper's) use the client as given.
    pub fn timeouts(mut self, attempt: std::time::Duration, call: std::time::Duration) -> Self {
        self.timeouts = Some(Timeouts::Limited { attempt, call });
        self
    }

    /// Send the store's calls with the client's own timeouts and retry
    /// policy, as the application configured them, instead of
    /// [`timeouts`](Self::timeouts)' limits.
    pub fn client_timeouts(mut self) -> Self {
        self.timeouts = Some(Timeouts::Client);
        self
    }

    /// The store. Sends nothing: an unreachable table shows up as
    /// [`ErrorKind::StoreUnavailable`] on the first operation.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`] when the layout is invalid (see
    /// [`TableLayout::validate`]), or, without
    /// [`timeouts`](Self::timeouts), when `IDEMPOTENCY_STORE_TIMEOUT_MS`
    /// is set to something else than a number of milliseconds.
    pub fn open(self) -> Result<DynamoStore, Error> {
        self.layout.validate()?;
        let timeouts = match self.timeouts {
            Some(timeouts) => timeouts,
            None => Timeouts::from_env()?,
        };
        Ok(DynamoStore {
            limits: timeouts.config_override(&self.client),
            client: self.client,
            table: Arc::from(self.table),
            max_response_bytes: self.max_response_bytes,
            layout: Arc::new(self.layout),
            sweep_index: self.sweep_index,
            #[cfg(feature = "sweep-via-stream")]
            stream: self.stream,
            #[cfg(feature = "sweep-via-stream")]
            stream_endpoint: self.stream_endpoint.map(Arc::from),
            #[cfg(feature = "sweep-via-stream")]
            full_pass: self.full_pass,
        })
    }
}

/// Options of a [`DynamoStore`]: see [`DynamoStore::builder`].
#[derive(Debug, Clone)]
pub struct DynamoStoreBuilder {
    client: Client,
    /// As set; `None`: `IDEMPOTENCY_STORE_TIMEOUT_MS` or the defaults.
    timeouts: Option<Timeouts>,
    table: String,
    max_response_bytes: usize,
    layout: TableLayout,
    sweep_index: bool,
    #[cfg(feature = "sweep-via-stream")]
    stream: Option<aws_sdk_dynamodbstreams::Client>,
    #[cfg(feature = "sweep-via-stream")]
    stream_endpoint: Option<String>,
    #[cfg(feature = "sweep-via-stream")]
    full_pass: std::time::Duration,
}

impl DynamoStore {
    /// The store on the table `IDEMPOTENCY_TABLE` names (the variable every
    /// template sets), with the default layout, through `client`; nothing
    /// is sent until the store's first operation. For other options, read
    /// the name with [`Settings`](crate::settings::Settings) and use
    /// [`builder`](Self::builder).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`] naming
    /// `IDEMPOTENCY_TABLE` when it is unset or empty, or any other
    /// `IDEMPOTENCY_*` variable whose value is not what it holds.
    pub fn from_env(client: Client) -> Result<DynamoStore, Error> {
        let settings = crate::settings::Settings::from_env()?;
        DynamoStore::builder(client, settings.table()?).open()
    }

    /// Options for a store on `table` through `client`; nothing is sent
    /// until the store's first operation.
    pub fn builder(client: Client, table: impl Into<String>) -> DynamoStoreBuilder {
        DynamoStoreBuilder {
            client,
            timeouts: None,
            table: table.into(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            layout: TableLayout::default(),
            sweep_index: false,
            #[cfg(feature = "sweep-via-stream")]
            stream: None,
            #[cfg(feature = "sweep-via-stream")]
            stream_endpoint: None,
            #[cfg(feature = "sweep-via-stream")]
            full_pass: DEFAULT_FULL_PASS,
        }
    }

    /// The layout of the table's items.
    pub fn layout(&self) -> &TableLayout {
        &self.layout
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The SDK client, as given to the builder (the store's request-path
    /// calls add its timeouts: [`DynamoStoreBuilder::timeouts`]).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The configuration a request-path call overrides the client's with
    /// (`customize().config_override(..)`): per call, so that the call
    /// runs on the client itself, its HTTP client and connection pool
    /// included, which the application's own calls share.
    fn limits(&self) -> aws_sdk_dynamodb::config::Builder {
        self.limits.clone()
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

    /// A write fenced on `lease`: the record is still in progress under
    /// this attempt and owner. Its own clauses, actions, names and values
    /// are added to it.
    fn fenced_write(&self, lease: &Lease) -> WriteParts {
        WriteParts::default()
            .name("#status", &self.layout.status)
            .name("#attempt", &self.layout.attempt)
            .name("#owner", &self.layout.owner)
            .value(":in_progress", s(Status::InProgress.as_str()))
            .value(":attempt", n(lease.attempt))
            .value(":owner", s(&lease.owner))
            .when(Clause::Eq("#status", ":in_progress"))
            .when(Clause::Eq("#attempt", ":attempt"))
            .when(Clause::Eq("#owner", ":owner"))
    }

    /// `write`, an update of the item of record `record_id` on its condition
    /// (the lease fence, and whatever a caller adds to it), in one
    /// `UpdateItem`. `Ok(None)`: written. `Ok(Some(item))`: the condition
    /// failed, and `item` is the item as it was (empty when there is none)
    /// when `old_item` asks for it, else empty: a caller that takes any
    /// refusal for a fence need not have the item read back. Any other
    /// failure is the store being unavailable, `op` naming the call.
    async fn update_fenced(
        &self,
        record_id: &str,
        write: WriteParts,
        old_item: bool,
        op: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, Error> {
        let result = self
            .client
            .update_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(record_id)))
            .condition_expression(write.condition())
            .update_expression(write.expression())
            .set_expression_attribute_names(Some(write.used_names()))
            .set_expression_attribute_values(Some(write.used_values()))
            .set_return_values_on_condition_check_failure(
                old_item.then_some(ReturnValuesOnConditionCheckFailure::AllOld),
            )
            .customize()
            .config_override(self.limits())
            .send()
            .await;
        match result {
            Ok(_) => Ok(None),
            Err(err) => match condition_failure_item(&err) {
                Some(item) => Ok(Some(item)),
                None => Err(self.unavailable(op, err)),
            },
        }
    }

    /// Delete the item of record `record_id` on the condition of `write`
    /// (whose expression stays empty: a delete has none), in one
    /// `DeleteItem`. `Ok(None)`: deleted. `Ok(Some(item))`: the condition
    /// failed, `item` the item as it was (empty when there is none). Any
    /// other failure is the store being unavailable, `op` naming the call.
    async fn delete_fenced(
        &self,
        record_id: &str,
        write: WriteParts,
        op: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, Error> {
        let result = self
            .client
            .delete_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(record_id)))
            .condition_expression(write.condition())
            .set_expression_attribute_names(Some(write.used_names()))
            .set_expression_attribute_values(Some(write.used_values()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .customize()
            .config_override(self.limits())
            .send()
            .await;
        match result {
            Ok(_) => Ok(None),
            Err(err) => match err.as_service_error() {
                Some(DeleteItemError::ConditionalCheckFailedException(e)) => {
                    Ok(Some(e.item().cloned().unwrap_or_default()))
                }
                _ => Err(self.unavailable(op, err)),
            },
        }
    }
}

/// The item a failed `UpdateItem` condition returned (empty when the item
/// does not exist), or `None` when the failure was not a condition's.
fn condition_failure_item<R>(
    err: &SdkError<UpdateItemError, R>,
) -> Option<HashMap<String, AttributeValue>> {
    match err.as_service_error()? {
        UpdateItemError::ConditionalCheckFailedException(e) => {
            Some(e.item().cloned().unwrap_or_default())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_layout_is_refused_when_the_store_is_built() {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        let layout = TableLayout::default()
            .status_attr("state")
            .owner_attr("state");
        let err = DynamoStore::builder(Client::from_conf(config), "t")
            .with_layout(layout)
            .open()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(
            err.to_string()
                .contains("the status and the owner attributes are both named `state`"),
            "{err}"
        );
    }
}
