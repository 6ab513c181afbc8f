//! [`DynamoStore`]: records in a DynamoDB table.
//!
//! Table layout by default (see [`schema`](crate::schema)): partition key
//! `id` (S), TTL attribute `expires_at` (epoch seconds), and a stream (view
//! type `NEW_IMAGE`) in which the sweeper finds stuck records. Opted into
//! instead (`with_sweep_index`): a sparse global secondary index `sweep`
//! (`sweep_shard` S, `sweep_at` N) whose attributes exist only while a record
//! is in progress. Another table (other names, a composite key, other items
//! beside the records) is adopted with a [`TableLayout`].

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use crate::error::{Error, ErrorKind};
use crate::record::{Record, Status, StoredResponse};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{TransactWriteItem, Update};

use crate::store::{
    claimable, completed_by, fit, lease_ended_at, may_take_over, own_claim, resolver_owner,
    Checkpoint, ClaimOutcome, ClaimRequest, Completion, DeferredWrites, Fitted, Lease, RecordPage,
    Resolution, Resolve, Settlement, Store, StoredRecord, StuckPage, StuckRecord, SweepCursor,
    DEFAULT_MAX_RESPONSE_BYTES,
};

/// Attribute and index names of the template's idempotency table: the
/// names of [`TableLayout::default`], which a store uses unless given another
/// layout ([`DynamoStore::with_layout`]).
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
#[cfg(feature = "streams")]
mod stream;
#[cfg(feature = "streams")]
pub use stream::{streams_endpoint, DYNAMODB_ENDPOINT_ENV, STREAMS_ENDPOINT_ENV};

use codec::{checkpoint_value, corrupt, decode, headers_value, item_size, n, number, s};
pub use layout::{KeyValue, TableLayout};
use schema::{sweep_shard, SWEEP_SHARDS};

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
    max_response_bytes: usize,
    /// Attribute names and the key of records' items.
    layout: Arc<TableLayout>,
    /// Claims write the sparse index's keys, and listings read the index.
    sweep_index: bool,
    /// Listings read the table's stream.
    #[cfg(feature = "streams")]
    stream: Option<aws_sdk_dynamodbstreams::Client>,
    /// Where the stream is read, for messages, when known
    /// ([`with_stream_at`](Self::with_stream_at)).
    #[cfg(feature = "streams")]
    stream_endpoint: Option<Arc<str>>,
}

impl DynamoStore {
    /// A store on `table` through `client`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoStore {
            client,
            table: Arc::from(table.into()),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            layout: Arc::new(TableLayout::default()),
            sweep_index: false,
            #[cfg(feature = "streams")]
            stream: None,
            #[cfg(feature = "streams")]
            stream_endpoint: None,
        }
    }

    /// Find stuck records through the table's stream (view type `NEW_IMAGE`),
    /// read with `streams`: the listing the sweeper and the CLI use, at no
    /// cost on the hot path (claims, recovery points and completions write
    /// nothing for it). See docs/DESIGN.md section 9.
    #[cfg(feature = "streams")]
    pub fn with_stream(mut self, streams: aws_sdk_dynamodbstreams::Client) -> Self {
        self.stream = Some(streams);
        self.stream_endpoint = None;
        self
    }

    /// [`with_stream`](Self::with_stream), with the client built from
    /// `config` (`aws_sdk_dynamodbstreams::config::Builder::from(&sdk_config)`)
    /// at `endpoint`, `None` meaning the region's own, whatever `config`
    /// holds: pass [`streams_endpoint`](crate::streams_endpoint) of the
    /// environment, so that the stream follows `AWS_ENDPOINT_URL_DYNAMODB`
    /// (DynamoDB Local serves both) and an empty variable never reaches the
    /// SDK, which panics on one. Errors reading the stream name the
    /// endpoint.
    #[cfg(feature = "streams")]
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
        self.stream_endpoint = Some(Arc::from(place));
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
    /// # Panics
    ///
    /// When `layout` is invalid (see [`TableLayout::validate`], which returns
    /// the same error): an empty or a repeated attribute name, or no key that
    /// holds the record id. A configuration error, found at start-up.
    pub fn with_layout(mut self, layout: TableLayout) -> Self {
        if let Err(err) = layout.validate() {
            panic!("{err}");
        }
        self.layout = Arc::new(layout);
        self
    }

    /// The layout of the table's items.
    pub fn layout(&self) -> &TableLayout {
        &self.layout
    }

    /// Keep responses up to `bytes` (body after compression plus headers;
    /// default [`DEFAULT_MAX_RESPONSE_BYTES`], below DynamoDB's 400 KB item
    /// limit). Larger ones complete with a problem marker instead.
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
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
        // A claim that races another writer between its two conditional
        // writes (a takeover lost to a sweep, say) looks again; three rounds
        // are plenty, each is a real state change by someone else.
        let mut last = None;
        for _ in 0..3 {
            let existing = match self.claim_new_life(request).await? {
                Ok(lease) => return Ok(ClaimOutcome::Claimed(lease)),
                Err(existing) => existing,
            };
            if let Some(lease) = own_claim(&existing, request) {
                return Ok(ClaimOutcome::Claimed(lease));
            }
            if !may_take_over(&existing, request) {
                return Ok(ClaimOutcome::Exists(existing));
            }
            match self.take_over(request, &existing).await? {
                Ok(lease) => return Ok(ClaimOutcome::Claimed(lease)),
                Err(Some(now)) => {
                    if let Some(lease) = own_claim(&now, request) {
                        return Ok(ClaimOutcome::Claimed(lease));
                    }
                    if !claimable(&now, request) {
                        return Ok(ClaimOutcome::Exists(now));
                    }
                    last = Some(now);
                }
                // Deleted meanwhile (released or swept): a new life is free.
                Err(None) => {}
            }
        }
        match last {
            Some(record) => Ok(ClaimOutcome::Exists(record)),
            None => Err(Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "record {} changed under three claims in a row; retry the request",
                    request.record_id
                ),
            )),
        }
    }

    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at_s: u64,
    ) -> Result<Completion, Error> {
        let (update, completion) = self.completion(lease, response, expires_at_s);
        let result = self
            .client
            .update_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&lease.record_id)))
            .condition_expression(Self::fence_condition())
            .update_expression(update.expression)
            .set_expression_attribute_names(Some(update.names))
            .set_expression_attribute_values(Some(update.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(completion),
            Err(err) => match condition_failure_item(&err) {
                // The SDK retried a completion whose first try was applied
                // (its response was lost): the record is completed under our
                // own attempt and owner, which only our completion does.
                Some(item)
                    if decode(&self.layout, &lease.record_id, &item)
                        .is_ok_and(|r| completed_by(&r, lease)) =>
                {
                    Ok(completion)
                }
                // No item at all: released by an operator, or expired and
                // deleted; nothing is stored.
                Some(item) if item.is_empty() => {
                    Err(Error::record_gone(&lease.record_id, lease.attempt))
                }
                Some(_) => Err(Error::fenced(&lease.record_id, lease.attempt)),
                None => Err(self.unavailable("UpdateItem (complete)", err)),
            },
        }
    }

    async fn complete_with_writes(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at_s: u64,
        writes: DeferredWrites,
    ) -> Result<Completion, Error> {
        if writes.is_empty() {
            return self.complete(lease, response, expires_at_s).await;
        }
        let (update, completion) = self.completion(lease, response, expires_at_s);
        self.transaction_with_writes(lease, update, "the completion", writes)
            .await?;
        Ok(completion)
    }

    async fn checkpoint_with_writes(
        &self,
        lease: &Lease,
        checkpoint: &Checkpoint,
        writes: DeferredWrites,
    ) -> Result<(), Error> {
        if writes.is_empty() {
            return self.checkpoint(lease, checkpoint).await;
        }
        let update = self.checkpoint_update(lease, checkpoint);
        let what = format!("the recovery point `{}`", checkpoint.name);
        self.transaction_with_writes(lease, update, &what, writes)
            .await
    }

    async fn release(&self, lease: &Lease) -> Result<(), Error> {
        // Rule 4: the delete is conditioned on there being no recovery
        // point; a record holding one has its lease ended instead (below).
        let mut request = self
            .client
            .delete_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&lease.record_id)))
            .condition_expression(format!(
                "{} AND attribute_not_exists(#checkpoint)",
                Self::fence_condition()
            ))
            .expression_attribute_names("#status", &self.layout.status)
            .expression_attribute_names("#attempt", &self.layout.attempt)
            .expression_attribute_names("#owner", &self.layout.owner)
            .expression_attribute_names("#checkpoint", &self.layout.checkpoint);
        for (name, value) in Self::fence_values(lease) {
            request = request.expression_attribute_values(name, value);
        }
        let result = request
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) => match err.as_service_error() {
                // Gone: what a release wants. Either the SDK retried a delete
                // whose first try was applied (its response was lost), or the
                // record expired or was swept; no newer attempt holds it.
                Some(DeleteItemError::ConditionalCheckFailedException(e))
                    if e.item().is_none_or(HashMap::is_empty) =>
                {
                    Ok(())
                }
                // Still ours, holding a recovery point: kept for the retry.
                Some(DeleteItemError::ConditionalCheckFailedException(e))
                    if e.item().is_some_and(|item| {
                        decode(&self.layout, &lease.record_id, item).is_ok_and(|r| {
                            r.status == Status::InProgress
                                && r.attempt == lease.attempt
                                && r.owner == lease.owner
                                && r.checkpoint.is_some()
                        })
                    }) =>
                {
                    self.end_lease(lease).await
                }
                Some(DeleteItemError::ConditionalCheckFailedException(_)) => {
                    Err(Error::fenced(&lease.record_id, lease.attempt))
                }
                _ => Err(self.unavailable("DeleteItem (release)", err)),
            },
        }
    }

    #[allow(unused_variables)]
    async fn settle(&self, settlement: &Settlement, resolved: &[String]) -> Result<(), Error> {
        #[cfg(feature = "streams")]
        if self.stream.is_some() {
            return self
                .settle_stream(settlement, resolved, crate::clock::now_ms())
                .await;
        }
        Ok(())
    }

    async fn get(&self, record_id: &str) -> Result<Option<StoredRecord>, Error> {
        let out = self
            .client
            .get_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(record_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| self.unavailable("GetItem", err))?;
        out.item()
            .map(|item| sized(decode(&self.layout, record_id, item)?, item))
            .transpose()
    }

    async fn scan(&self, cursor: Option<SweepCursor>, limit: usize) -> Result<RecordPage, Error> {
        let start = match cursor {
            Some(cursor) => Some(self.layout.cursor_key(&cursor.0).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "scan cursor {:?} was not made by a scan of this table's layout; start \
                         again without one",
                        cursor.0
                    ),
                )
            })?),
            None => None,
        };
        let limit = i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000);
        let condition = self.layout.listing_condition();
        // A static partition holds every record: a Query reads it alone. A
        // prefix filters a Scan (read, and billed, whole).
        let (items, last_key) = match condition {
            Some(condition) if condition.key_condition.is_some() => {
                let out = self
                    .client
                    .query()
                    .table_name(&*self.table)
                    .set_key_condition_expression(condition.key_condition)
                    .set_filter_expression(condition.filter)
                    .set_expression_attribute_names(Some(condition.names))
                    .set_expression_attribute_values(Some(condition.values))
                    .limit(limit)
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .map_err(|err| self.unavailable("Query (records)", err))?;
                (out.items, out.last_evaluated_key)
            }
            condition => {
                let (filter, names, values) = match condition {
                    Some(c) => (c.filter, Some(c.names), Some(c.values)),
                    None => (None, None, None),
                };
                let out = self
                    .client
                    .scan()
                    .table_name(&*self.table)
                    .set_filter_expression(filter)
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .limit(limit)
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .map_err(|err| self.unavailable("Scan", err))?;
                (out.items, out.last_evaluated_key)
            }
        };
        let mut page = RecordPage::default();
        for item in items.unwrap_or_default() {
            let Some(id) = self.layout.record_id_of(&item) else {
                // Another application's item in a shared table.
                page.skipped += 1;
                continue;
            };
            // The sweeper's places in the stream are not records.
            if id.starts_with(SWEEPER_ITEM_PREFIX) {
                continue;
            }
            if !item.contains_key(&self.layout.status) {
                page.skipped += 1;
                tracing::debug!(key = %id, "an item of the table without a status is not an idempotency record; skipped");
                continue;
            }
            match decode(&self.layout, &id, &item).and_then(|record| sized(record, &item)) {
                Ok(record) => page.records.push(record),
                Err(err) => {
                    page.skipped += 1;
                    tracing::warn!(error = %err, "an item of the table is not an idempotency record; skipped")
                }
            }
        }
        page.next = last_key
            .and_then(|key| self.layout.key_cursor(&key))
            .map(SweepCursor);
        Ok(page)
    }

    async fn stuck(
        &self,
        cutoff_ms: u64,
        cursor: Option<SweepCursor>,
        limit: usize,
    ) -> Result<StuckPage, Error> {
        #[cfg(feature = "streams")]
        if let Some(streams) = &self.stream {
            // One page: the stream is read to its end (or a budget) at once,
            // since a record's later images decide whether it is stuck.
            let _ = (cursor, limit);
            return self.stuck_from_stream(streams, cutoff_ms, None).await;
        }
        if !self.sweep_index {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "{} has no way to find stuck records: give it the table's stream \
                     (DynamoStore::with_stream, feature `streams`) or opt into the sweep index \
                     (DynamoStore::with_sweep_index, on every writer too)",
                    self.describe()
                ),
            ));
        }
        let position = match cursor {
            Some(cursor) => Position::decode(&self.layout, &cursor)?,
            None => Position {
                first: first_shard(crate::clock::now_ms()),
                i: 0,
                key: None,
            },
        };
        let shard = format!("{:x}", (position.first + position.i) % SWEEP_SHARDS);
        let result = self
            .client
            .query()
            .table_name(&*self.table)
            .index_name(&self.layout.sweep_index)
            .key_condition_expression("#shard = :shard AND #at < :cutoff")
            .expression_attribute_names("#shard", &self.layout.sweep_shard)
            .expression_attribute_names("#at", &self.layout.sweep_at)
            .expression_attribute_values(":shard", s(&shard))
            .expression_attribute_values(":cutoff", n(cutoff_ms))
            .limit(i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000))
            .set_exclusive_start_key(position.key.clone())
            .send()
            .await;
        let out = match result {
            Ok(out) => out,
            Err(err) => {
                // One unreadable shard costs that shard, not the sweep: the
                // listing goes on with the next one.
                tracing::error!(
                    shard,
                    error = %self.unavailable("Query (sweep index)", err),
                    "reading a shard of the sweep index failed; the next sweep retries it"
                );
                return Ok(StuckPage {
                    next: position.next_shard(&self.layout),
                    failed_reads: 1,
                    ..StuckPage::default()
                });
            }
        };
        let mut records = Vec::new();
        for item in out.items() {
            // Only this layout's records: an item of another application
            // that happens to carry the index's attributes is not listed.
            let Some(id) = self
                .layout
                .record_id_of(item)
                .filter(|id| !id.starts_with(SWEEPER_ITEM_PREFIX))
            else {
                tracing::debug!("a sweep index entry outside the table layout's records; skipped");
                continue;
            };
            let status = item.get(&self.layout.status).and_then(|v| v.as_s().ok());
            if status.is_some_and(|status| status != Status::InProgress.as_str()) {
                continue;
            }
            let owner = item.get(&self.layout.owner).and_then(|v| v.as_s().ok());
            match (
                id,
                number(item, &self.layout.attempt),
                owner,
                number(item, &self.layout.sweep_at),
            ) {
                (id, Some(attempt), Some(owner), Some(lease)) => records.push(StuckRecord {
                    id,
                    attempt,
                    owner: owner.clone(),
                    lease_expires_at_ms: lease,
                    has_checkpoint: item.contains_key(&self.layout.checkpoint),
                }),
                // An index entry without the fencing attributes cannot be
                // resolved safely; it is logged and left alone.
                (id, ..) => {
                    tracing::warn!(record_id = %id, "sweep index entry lacks attempt/owner; skipped")
                }
            }
        }
        let next = match out.last_evaluated_key() {
            Some(key) => Some(Position {
                key: Some(key.clone()),
                ..position
            }),
            None => position.next_shard_position(),
        };
        Ok(StuckPage {
            records,
            next: next.map(|p| p.encode(&self.layout)),
            reads: 1,
            ..StuckPage::default()
        })
    }

    #[allow(unused_variables)]
    async fn stuck_by(
        &self,
        cutoff_ms: u64,
        cursor: Option<SweepCursor>,
        limit: usize,
        deadline_ms: u64,
    ) -> Result<StuckPage, Error> {
        #[cfg(feature = "streams")]
        if let Some(streams) = &self.stream {
            return self
                .stuck_from_stream(streams, cutoff_ms, Some(deadline_ms))
                .await;
        }
        self.stuck(cutoff_ms, cursor, limit).await
    }

    async fn resolve_stuck(
        &self,
        record: &StuckRecord,
        how: Resolve<'_>,
        cutoff_ms: u64,
        now_ms: u64,
    ) -> Result<Resolution, Error> {
        let lease = Lease {
            record_id: record.id.clone(),
            owner: record.owner.clone(),
            fingerprint: String::new(),
            attempt: record.attempt,
            recovered: None,
        };
        // The lease fence, and the lease seen over.
        let fence = format!("{} AND #lease < :cutoff", Self::fence_condition());
        match how {
            Resolve::Release => {
                let condition = format!("{fence} AND attribute_not_exists(#checkpoint)");
                match self
                    .delete_stuck(&lease, &condition, cutoff_ms, now_ms)
                    .await?
                {
                    None => Ok(Resolution::Released),
                    // Still the attempt seen, now with a recovery point (the
                    // index copy lags): kept for its retry to resume.
                    Some(item)
                        if still_stuck(&self.layout, &item, record, cutoff_ms)
                            && item.contains_key(&self.layout.checkpoint) =>
                    {
                        Ok(Resolution::Resumable)
                    }
                    Some(_) => Ok(Resolution::Fenced),
                }
            }
            Resolve::Fail {
                response,
                expires_at_s,
            } => {
                let (update, _) = self.completion(&lease, response, expires_at_s);
                let mut names = update.names;
                names.insert("#lease".into(), self.layout.lease_expires_at.clone());
                names.insert("#expires_at".into(), self.layout.expires_at.clone());
                let mut values = update.values;
                // Rule 5: a new owner, so the replaced attempt's late
                // completion is fenced.
                let expression = update
                    .expression
                    .replacen("SET ", "SET #owner = :resolver, ", 1);
                values.insert(":resolver".into(), s(&resolver_owner(&record.owner)));
                values.insert(":cutoff".into(), n(cutoff_ms));
                values.insert(":now_s".into(), n(now_ms / 1000));
                let result = self
                    .client
                    .update_item()
                    .table_name(&*self.table)
                    .set_key(Some(self.layout.key(&record.id)))
                    // Not expired: an expired record is absent, and failing
                    // it would bring it back with a fresh expiry.
                    .condition_expression(format!("{fence} AND #expires_at >= :now_s"))
                    .update_expression(expression)
                    .set_expression_attribute_names(Some(names))
                    .set_expression_attribute_values(Some(values))
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .send()
                    .await;
                match result {
                    Ok(_) => Ok(Resolution::Failed),
                    Err(err) => match condition_failure_item(&err) {
                        Some(item)
                            if still_stuck(&self.layout, &item, record, cutoff_ms)
                                && number(&item, &self.layout.expires_at)
                                    .is_some_and(|e| e < now_ms / 1000) =>
                        {
                            let condition = format!("{fence} AND #expires_at < :now_s");
                            match self
                                .delete_stuck(&lease, &condition, cutoff_ms, now_ms)
                                .await?
                            {
                                None => Ok(Resolution::Released),
                                Some(_) => Ok(Resolution::Fenced),
                            }
                        }
                        Some(_) => Ok(Resolution::Fenced),
                        None => Err(self.unavailable("UpdateItem (fail stuck record)", err)),
                    },
                }
            }
        }
    }

    fn describe(&self) -> String {
        #[cfg(feature = "streams")]
        if let (Some(_), Some(endpoint)) = (&self.stream, &self.stream_endpoint) {
            return format!(
                "DynamoDB table `{}` (its stream read at {endpoint})",
                self.table
            );
        }
        format!("DynamoDB table `{}`", self.table)
    }

    async fn checkpoint(&self, lease: &Lease, checkpoint: &Checkpoint) -> Result<(), Error> {
        let update = self.checkpoint_update(lease, checkpoint);
        let result = self
            .client
            .update_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&lease.record_id)))
            .condition_expression(Self::fence_condition())
            .update_expression(update.expression)
            .set_expression_attribute_names(Some(update.names))
            .set_expression_attribute_values(Some(update.values))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) if is_condition_failure(&err) => {
                Err(Error::fenced(&lease.record_id, lease.attempt))
            }
            Err(err) => Err(self.unavailable("UpdateItem (checkpoint)", err)),
        }
    }
}

/// An update expression with its names and values.
struct UpdateParts {
    expression: String,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl UpdateParts {
    /// An update fenced on `lease`: the attribute names of its placeholders
    /// and the fence's values, its expression and own values still to add.
    fn fenced<'a>(lease: &Lease, names: impl IntoIterator<Item = (&'a str, &'a String)>) -> Self {
        UpdateParts {
            expression: String::new(),
            names: names
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            values: DynamoStore::fence_values(lease)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        }
    }
}

impl DynamoStore {
    /// The fenced recovery-point update, shared by the plain and the
    /// transactional path.
    fn checkpoint_update(&self, lease: &Lease, checkpoint: &Checkpoint) -> UpdateParts {
        let mut update = UpdateParts::fenced(
            lease,
            [
                ("#checkpoint", &self.layout.checkpoint),
                ("#status", &self.layout.status),
                ("#attempt", &self.layout.attempt),
                ("#owner", &self.layout.owner),
            ],
        );
        update
            .values
            .insert(":checkpoint".into(), checkpoint_value(checkpoint));
        update.expression = "SET #checkpoint = :checkpoint".into();
        update
    }

    /// End `lease` now, keeping the record and its recovery point (rule 4):
    /// the next retry takes it over and resumes. Fenced like a release.
    async fn end_lease(&self, lease: &Lease) -> Result<(), Error> {
        let mut update = UpdateParts::fenced(
            lease,
            [
                ("#status", &self.layout.status),
                ("#attempt", &self.layout.attempt),
                ("#owner", &self.layout.owner),
                ("#lease", &self.layout.lease_expires_at),
            ],
        );
        update.values.insert(":ended".into(), n(lease_ended_at()));
        update.expression = "SET #lease = :ended".into();
        if self.sweep_index {
            // The index lists by lease end: it must see the record stuck now.
            update
                .names
                .insert("#sweep_at".into(), self.layout.sweep_at.clone());
            update.expression.push_str(", #sweep_at = :ended");
        }
        let result = self
            .client
            .update_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&lease.record_id)))
            .condition_expression(Self::fence_condition())
            .update_expression(update.expression)
            .set_expression_attribute_names(Some(update.names))
            .set_expression_attribute_values(Some(update.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) => match condition_failure_item(&err) {
                // Gone meanwhile (expired): what a release wants.
                Some(item) if item.is_empty() => Ok(()),
                Some(_) => Err(Error::fenced(&lease.record_id, lease.attempt)),
                None => Err(self.unavailable("UpdateItem (end the lease)", err)),
            },
        }
    }

    /// `update` of the record (fenced on `lease`; `what` it writes, for
    /// messages) and the handler's writes in one `TransactWriteItems`: both
    /// commit or neither does.
    async fn transaction_with_writes(
        &self,
        lease: &Lease,
        update: UpdateParts,
        what: &str,
        writes: DeferredWrites,
    ) -> Result<(), Error> {
        let writes = writes.into_typed::<TransactWriteItem>()?;
        let record_update = Update::builder()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&lease.record_id)))
            .condition_expression(Self::fence_condition())
            // Tells a record that is gone from one held by another attempt.
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .update_expression(update.expression)
            .set_expression_attribute_names(Some(update.names))
            .set_expression_attribute_values(Some(update.values))
            .build()
            .map_err(|e| {
                Error::with_source(
                    ErrorKind::InvalidConfig,
                    format!("building {what} of record {}: {e}", lease.record_id),
                    e,
                )
            })?;
        let mut items = vec![TransactWriteItem::builder().update(record_update).build()];
        items.extend(writes);
        let items_len = items.len();
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        let Err(err) = result else { return Ok(()) };
        let cancelled = err.as_service_error().and_then(|e| match e {
            TransactWriteItemsError::TransactionCanceledException(c) => Some(c),
            _ => None,
        });
        let reasons: Option<Vec<String>> = cancelled.map(|c| {
            c.cancellation_reasons()
                .iter()
                .map(|r| r.code().unwrap_or("None").to_owned())
                .collect()
        });
        // The first item is the record; with no old image, it is gone.
        let record_gone = cancelled
            .and_then(|c| c.cancellation_reasons().first())
            .is_some_and(|r| r.item().is_none_or(HashMap::is_empty));
        match reasons {
            // The first item is the record: its condition failing means
            // fenced, or gone when there is no record at all.
            Some(reasons)
                if reasons.first().map(String::as_str) == Some("ConditionalCheckFailed") =>
            {
                if record_gone {
                    Err(Error::record_gone(&lease.record_id, lease.attempt))
                } else {
                    Err(Error::fenced(&lease.record_id, lease.attempt))
                }
            }
            Some(reasons) => Err(Error::new(
                ErrorKind::TransactionCancelled,
                format!(
                    "{what} of record {} and the handler's {} write(s) were cancelled together, \
                     nothing was written; reasons per item (record first): [{}]",
                    lease.record_id,
                    reasons.len().saturating_sub(1),
                    reasons.join(", ")
                ),
            )),
            // Refused as invalid before it ran (over 100 items, two
            // operations on one item, ...): nothing committed.
            None if err.as_service_error().and_then(|e| e.code())
                == Some("ValidationException") =>
            {
                Err(Error::with_source(
                    ErrorKind::TransactionRejected,
                    format!(
                        "DynamoDB refused {what} of record {} with the handler's {} deferred \
                         write(s) as invalid, nothing was written: {}; check the writes given to \
                         defer_write (at most 99, one per item)",
                        lease.record_id,
                        items_len - 1,
                        DisplayErrorContext(&err)
                    ),
                    err,
                ))
            }
            None => Err(self.unavailable(&format!("TransactWriteItems ({what})"), err)),
        }
    }

    /// The fenced completion update, shared by the plain and the transactional
    /// path. An update rather than a put keeps the fingerprint (a later request
    /// with another body must still get a 422); removing the sweep attributes
    /// takes the record out of the sparse index.
    fn completion(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        expires_at_s: u64,
    ) -> (UpdateParts, Completion) {
        let Fitted {
            response: stored,
            body,
            gzip,
            completion,
        } = fit(response, self.max_response_bytes);
        let UpdateParts {
            mut names,
            mut values,
            ..
        } = UpdateParts::fenced(
            lease,
            [
                ("#status", &self.layout.status),
                ("#attempt", &self.layout.attempt),
                ("#owner", &self.layout.owner),
                ("#expires_at", &self.layout.expires_at),
                ("#rs", &self.layout.response_status),
                ("#rh", &self.layout.response_headers),
                ("#rk", &self.layout.response_body_kind),
                ("#rb", &self.layout.response_body),
                ("#re", &self.layout.response_encoding),
                ("#sweep_shard", &self.layout.sweep_shard),
                ("#sweep_at", &self.layout.sweep_at),
                ("#checkpoint", &self.layout.checkpoint),
            ],
        );
        values.insert(":completed".into(), s(Status::Completed.as_str()));
        values.insert(":expires_at".into(), n(expires_at_s));
        values.insert(":rs".into(), n(u64::from(stored.status)));
        values.insert(":rh".into(), headers_value(&stored.headers));
        values.insert(":rk".into(), s(stored.body.kind()));
        let mut set = String::from(
            "SET #status = :completed, #expires_at = :expires_at, #rs = :rs, #rh = :rh, #rk = :rk",
        );
        let mut remove = vec!["#sweep_shard", "#sweep_at", "#checkpoint"];
        if body.is_empty() {
            remove.push("#rb");
        } else {
            set.push_str(", #rb = :rb");
            values.insert(":rb".into(), AttributeValue::B(body.into_owned().into()));
        }
        if gzip {
            set.push_str(", #re = :re");
            values.insert(":re".into(), s("gzip"));
        } else {
            remove.push("#re");
        }
        names.retain(|k, _| {
            set.contains(k.as_str())
                || remove.contains(&k.as_str())
                || Self::fence_condition().contains(k.as_str())
        });
        let expression = format!("{set} REMOVE {}", remove.join(", "));
        (
            UpdateParts {
                expression,
                names,
                values,
            },
            completion,
        )
    }

    /// Delete a stuck record under `condition` (fenced on `lease`, lease
    /// before `:cutoff`, maybe `:now_s`); `Some(item)` when the condition
    /// failed, the item as it was (empty when gone).
    async fn delete_stuck(
        &self,
        lease: &Lease,
        condition: &str,
        cutoff_ms: u64,
        now_ms: u64,
    ) -> Result<Option<HashMap<String, AttributeValue>>, Error> {
        let mut request = self
            .client
            .delete_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&lease.record_id)))
            .condition_expression(condition)
            .expression_attribute_names("#status", &self.layout.status)
            .expression_attribute_names("#attempt", &self.layout.attempt)
            .expression_attribute_names("#owner", &self.layout.owner)
            .expression_attribute_names("#lease", &self.layout.lease_expires_at)
            .expression_attribute_values(":cutoff", n(cutoff_ms))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if condition.contains("#checkpoint") {
            request = request.expression_attribute_names("#checkpoint", &self.layout.checkpoint);
        }
        if condition.contains("#expires_at") {
            request = request
                .expression_attribute_names("#expires_at", &self.layout.expires_at)
                .expression_attribute_values(":now_s", n(now_ms / 1000));
        }
        for (name, value) in Self::fence_values(lease) {
            request = request.expression_attribute_values(name, value);
        }
        match request.send().await {
            Ok(_) => Ok(None),
            Err(err) => match err.as_service_error() {
                Some(DeleteItemError::ConditionalCheckFailedException(e)) => {
                    Ok(Some(e.item().cloned().unwrap_or_default()))
                }
                _ => Err(self.unavailable("DeleteItem (release stuck record)", err)),
            },
        }
    }

    /// The claim of a new life: the record is absent, or expired (TTL
    /// deletion lags by days). It removes whatever an earlier life left (its
    /// response, its recovery point), so nothing of another request can reach
    /// this one. `Err(record)` is the record as it is when the condition fails.
    async fn claim_new_life(&self, request: &ClaimRequest) -> Result<Result<Lease, Record>, Error> {
        // The index's keys only where the index is the listing: written on
        // every claim, they cost an index write unit each time.
        let index_keys = if self.sweep_index {
            ", #sweep_shard = :shard, #sweep_at = :lease"
        } else {
            ""
        };
        let mut request_builder = self
            .client
            .update_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&request.record_id)))
            .condition_expression("attribute_not_exists(#id) OR #expires_at < :now_s")
            .update_expression(format!(
                "SET #status = :in_progress, #fingerprint = :fingerprint, #owner = :owner, \
                 #lease = :lease, #expires_at = :expires_at, \
                 #attempt = if_not_exists(#attempt, :zero) + :one{index_keys} \
                 REMOVE #rs, #rh, #rb, #rk, #re, #checkpoint"
            ))
            .expression_attribute_names("#id", self.layout.partition_key_name())
            .expression_attribute_names("#status", &self.layout.status)
            .expression_attribute_names("#fingerprint", &self.layout.fingerprint)
            .expression_attribute_names("#owner", &self.layout.owner)
            .expression_attribute_names("#lease", &self.layout.lease_expires_at)
            .expression_attribute_names("#expires_at", &self.layout.expires_at)
            .expression_attribute_names("#attempt", &self.layout.attempt)
            .expression_attribute_names("#rs", &self.layout.response_status)
            .expression_attribute_names("#rh", &self.layout.response_headers)
            .expression_attribute_names("#rb", &self.layout.response_body)
            .expression_attribute_names("#rk", &self.layout.response_body_kind)
            .expression_attribute_names("#re", &self.layout.response_encoding)
            .expression_attribute_names("#checkpoint", &self.layout.checkpoint)
            .expression_attribute_values(":now_s", n(request.now_ms / 1000))
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .expression_attribute_values(":fingerprint", s(&request.fingerprint))
            .expression_attribute_values(":owner", s(&request.owner))
            .expression_attribute_values(":lease", n(request.lease_expires_at_ms))
            .expression_attribute_values(":expires_at", n(request.expires_at_s))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            // Only the new attempt comes back: an expired record's old
            // response is never read, let alone decompressed.
            .return_values(ReturnValue::UpdatedNew)
            // A lost claim learns the existing record in this same round trip.
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if self.sweep_index {
            request_builder = request_builder
                .expression_attribute_names("#sweep_shard", &self.layout.sweep_shard)
                .expression_attribute_names("#sweep_at", &self.layout.sweep_at)
                .expression_attribute_values(
                    ":shard",
                    s(&sweep_shard(&request.record_id).to_string()),
                );
        }
        let result = request_builder.send().await;
        match result {
            Ok(output) => {
                let attempt = output
                    .attributes()
                    .and_then(|item| item.get(&self.layout.attempt))
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| {
                        corrupt(&request.record_id, "the claim did not return its attempt")
                    })?;
                Ok(Ok(Lease {
                    record_id: request.record_id.clone(),
                    owner: request.owner.clone(),
                    fingerprint: request.fingerprint.clone(),
                    attempt,
                    recovered: None,
                }))
            }
            Err(err) => match condition_failure_item(&err) {
                Some(item) => Ok(Err(decode(&self.layout, &request.record_id, &item)?)),
                None => Err(self.unavailable("UpdateItem (claim)", err)),
            },
        }
    }

    /// Take over `seen`, an abandoned attempt of the same request in the same
    /// life: fenced on the attempt seen, so two takers cannot both win, and
    /// keeping the recovery point, which comes back with the new attempt.
    /// `Err(record)` is the record as it is when the condition fails (`None`
    /// when it is gone).
    async fn take_over(
        &self,
        request: &ClaimRequest,
        seen: &Record,
    ) -> Result<Result<Lease, Option<Record>>, Error> {
        // The index entry follows the new lease, where there is an index.
        let index_key = if self.sweep_index {
            ", #sweep_at = :lease"
        } else {
            ""
        };
        let mut request_builder = self
            .client
            .update_item()
            .table_name(&*self.table)
            .set_key(Some(self.layout.key(&request.record_id)))
            .condition_expression(
                "#status = :in_progress AND #attempt = :seen AND #lease < :now_ms \
                 AND #fingerprint = :fingerprint AND #expires_at >= :now_s",
            )
            .update_expression(format!(
                "SET #owner = :owner, #lease = :lease, #expires_at = :expires_at, \
                 #attempt = :next{index_key}"
            ))
            .expression_attribute_names("#status", &self.layout.status)
            .expression_attribute_names("#fingerprint", &self.layout.fingerprint)
            .expression_attribute_names("#owner", &self.layout.owner)
            .expression_attribute_names("#lease", &self.layout.lease_expires_at)
            .expression_attribute_names("#expires_at", &self.layout.expires_at)
            .expression_attribute_names("#attempt", &self.layout.attempt)
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .expression_attribute_values(":seen", n(seen.attempt))
            .expression_attribute_values(":next", n(seen.attempt + 1))
            .expression_attribute_values(":now_ms", n(request.now_ms))
            .expression_attribute_values(":now_s", n(request.now_ms / 1000))
            .expression_attribute_values(":fingerprint", s(&request.fingerprint))
            .expression_attribute_values(":owner", s(&request.owner))
            .expression_attribute_values(":lease", n(request.lease_expires_at_ms))
            .expression_attribute_values(":expires_at", n(request.expires_at_s))
            // The recovery point as of the takeover itself: a checkpoint the
            // stale attempt committed after `seen` was read is inherited too.
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if self.sweep_index {
            request_builder =
                request_builder.expression_attribute_names("#sweep_at", &self.layout.sweep_at);
        }
        let result = request_builder.send().await;
        match result {
            Ok(output) => {
                let record = decode(
                    &self.layout,
                    &request.record_id,
                    output.attributes().unwrap_or(&HashMap::new()),
                )?;
                Ok(Ok(Lease {
                    record_id: request.record_id.clone(),
                    owner: request.owner.clone(),
                    fingerprint: request.fingerprint.clone(),
                    attempt: record.attempt,
                    recovered: record.checkpoint,
                }))
            }
            Err(err) => match condition_failure_item(&err) {
                Some(item) if item.is_empty() => Ok(Err(None)),
                Some(item) => Ok(Err(Some(decode(&self.layout, &request.record_id, &item)?))),
                None => Err(self.unavailable("UpdateItem (takeover)", err)),
            },
        }
    }
}

/// Ids of the items the sweeper keeps in the table (its places in the
/// stream); no record id (a hex hash) starts with it.
const SWEEPER_ITEM_PREFIX: &str = "~sweeper/";

/// `record` with the billed size of `item`, the item it was decoded from.
fn sized(record: Record, item: &HashMap<String, AttributeValue>) -> Result<StoredRecord, Error> {
    let size = item_size(item);
    Ok(StoredRecord {
        record,
        size_bytes: Some(size),
        write_units: Some(size.div_ceil(1024).max(1)),
    })
}

/// Is `item` still the stuck attempt `record` saw (in progress, same attempt
/// and owner, lease over before `cutoff_ms`)?
fn still_stuck(
    layout: &TableLayout,
    item: &HashMap<String, AttributeValue>,
    record: &StuckRecord,
    cutoff_ms: u64,
) -> bool {
    item.get(&layout.status)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        == Some(Status::InProgress.as_str())
        && number(item, &layout.attempt) == Some(record.attempt)
        && item.get(&layout.owner).and_then(|v| v.as_s().ok()) == Some(&record.owner)
        && number(item, &layout.lease_expires_at).is_some_and(|l| l < cutoff_ms)
}

/// The shard a listing of stuck records starting at `now_ms` reads first:
/// drawn from a hash of the second, so every shard is first as often as any
/// other whatever a sweeper's schedule, and a backlog no single sweep
/// finishes cannot starve the shards read last.
fn first_shard(now_ms: u64) -> u32 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest((now_ms / 1000).to_be_bytes());
    u32::from(digest[0]) % SWEEP_SHARDS
}

/// Where a listing of the sweep index is: the shard it started at, how many
/// shards it has finished, and the index key to go on from in the current one.
#[derive(Debug, Clone)]
struct Position {
    first: u32,
    i: u32,
    key: Option<HashMap<String, AttributeValue>>,
}

impl Position {
    /// The start of the next shard, `None` after the last.
    fn next_shard_position(&self) -> Option<Position> {
        (self.i + 1 < SWEEP_SHARDS).then(|| Position {
            first: self.first,
            i: self.i + 1,
            key: None,
        })
    }

    fn next_shard(&self, layout: &TableLayout) -> Option<SweepCursor> {
        self.next_shard_position().map(|p| p.encode(layout))
    }

    /// As a cursor: JSON of the shard counters and the index key's
    /// attributes (all strings or numbers): the table key (`id`, and `sk`
    /// where the layout has a sort key) and the index's own.
    fn encode(&self, layout: &TableLayout) -> SweepCursor {
        let key = self.key.as_ref().map(|key| {
            let text = |name: &str| key.get(name).and_then(|v| v.as_s().ok()).cloned();
            let mut json = serde_json::json!({
                "id": text(layout.partition_key_name()),
                "shard": text(&layout.sweep_shard),
                "at": key.get(&layout.sweep_at).and_then(|v| v.as_n().ok()),
            });
            if let Some(sort) = layout.sort_key_name() {
                json["sk"] = serde_json::json!(text(sort));
            }
            json
        });
        SweepCursor(serde_json::json!({"first": self.first, "i": self.i, "key": key}).to_string())
    }

    fn decode(layout: &TableLayout, cursor: &SweepCursor) -> Result<Position, Error> {
        let invalid = || {
            Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "sweep cursor {:?} was not made by a DynamoStore listing; start again without one",
                    cursor.0
                ),
            )
        };
        let v: serde_json::Value = serde_json::from_str(&cursor.0).map_err(|_| invalid())?;
        let counter = |name: &str| {
            v[name]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n < SWEEP_SHARDS)
        };
        let (Some(first), Some(i)) = (counter("first"), counter("i")) else {
            return Err(invalid());
        };
        let key = match &v["key"] {
            serde_json::Value::Null => None,
            key => {
                let (Some(id), Some(shard), Some(at)) = (
                    key["id"].as_str(),
                    key["shard"].as_str(),
                    key["at"].as_str(),
                ) else {
                    return Err(invalid());
                };
                let mut map = HashMap::from([
                    (layout.partition_key_name().to_owned(), s(id)),
                    (layout.sweep_shard.clone(), s(shard)),
                    (layout.sweep_at.clone(), AttributeValue::N(at.to_owned())),
                ]);
                if let Some(sort) = layout.sort_key_name() {
                    let sk = key["sk"].as_str().ok_or_else(invalid)?;
                    map.insert(sort.to_owned(), s(sk));
                }
                Some(map)
            }
        };
        Ok(Position { first, i, key })
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

fn is_condition_failure<E, R>(err: &SdkError<E, R>) -> bool
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata,
{
    err.as_service_error().and_then(|e| e.code()) == Some("ConditionalCheckFailedException")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::StoredBody;

    #[test]
    fn listings_start_at_every_shard_in_turn() {
        // Sweeps every minute, every 5 and every 16 minutes (a period the
        // shard count divides), over 200 runs: each shard is the first one
        // read several times, so a backlog that no single sweep finishes
        // cannot starve the shards read last.
        for period_ms in [60_000u64, 300_000, 960_000] {
            let mut firsts = [0u32; SWEEP_SHARDS as usize];
            for run in 0..200u64 {
                firsts[first_shard(1_700_000_000_000 + run * period_ms) as usize] += 1;
            }
            assert!(
                firsts.iter().all(|n| *n >= 4),
                "every {period_ms} ms: {firsts:?}"
            );
        }
    }

    #[test]
    fn a_listing_position_round_trips_and_a_foreign_cursor_is_refused() {
        let position = Position {
            first: 3,
            i: 5,
            key: Some(HashMap::from([
                (schema::ID.to_owned(), s("abc")),
                (schema::SWEEP_SHARD.to_owned(), s("8")),
                (schema::SWEEP_AT.to_owned(), n(42)),
            ])),
        };
        let layout = TableLayout::default();
        let back = Position::decode(&layout, &position.encode(&layout)).unwrap();
        assert_eq!((back.first, back.i, back.key), (3, 5, position.key));
        // With a composite key, the sort key goes along.
        let composite = TableLayout::default()
            .key_attr("pk")
            .sort_key_attr("sk", "idempotency")
            .sweep_index("gsi1", "gsi1pk", "gsi1sk");
        let position = Position {
            first: 0,
            i: 1,
            key: Some(HashMap::from([
                ("pk".to_owned(), s("idempotency")),
                ("sk".to_owned(), s("abc")),
                ("gsi1pk".to_owned(), s("a")),
                ("gsi1sk".to_owned(), n(7)),
            ])),
        };
        let back = Position::decode(&composite, &position.encode(&composite)).unwrap();
        assert_eq!(back.key, position.key);
        for foreign in ["", "{}", r#"{"first":3,"i":16,"key":null}"#, "last-id"] {
            let err = Position::decode(&layout, &SweepCursor(foreign.into())).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{foreign}");
        }
    }

    #[test]
    #[should_panic(expected = "the status and the owner attributes are both named `state`")]
    fn an_invalid_layout_is_refused_when_the_store_is_built() {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        let layout = TableLayout::default()
            .status_attr("state")
            .owner_attr("state");
        let _ = DynamoStore::new(Client::from_conf(config), "t").with_layout(layout);
    }

    #[test]
    fn a_completion_compresses_its_body_once() {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        let store = DynamoStore::new(Client::from_conf(config), "t");
        let lease = Lease {
            record_id: "r".into(),
            owner: "o".into(),
            fingerprint: "f".into(),
            attempt: 1,
            recovered: None,
        };
        let response = StoredResponse::new(200, vec![], StoredBody::Text("abc".repeat(2_000)));
        crate::record::COMPRESSIONS.with(|n| n.set(0));
        let (update, completion) = store.completion(&lease, &response, 60);
        assert_eq!(completion, Completion::Stored);
        assert_eq!(crate::record::COMPRESSIONS.with(|n| n.get()), 1);
        assert_eq!(update.values[":re"], s("gzip"));
    }
}
