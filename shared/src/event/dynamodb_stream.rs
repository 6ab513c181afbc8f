//! [`DynamoDbStreamBatch`]: DynamoDB Streams batches, each record once, in
//! shard order, with partial batch responses.

use std::future::Future;
use std::sync::Arc;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::batch::{first_failure, text_key};
use super::function::{IdempotentFunction, Key, TooDeep};
use crate::context::IdempotencyContext;
use crate::error::Error;
use crate::json::CanonicalJson;

/// A key made from a whole record ([`DynamoDbStreamBatch::key_fn`]).
type RecordKeyFn = dyn Fn(&EventRecord) -> Option<String> + Send + Sync;

/// Where a record's key comes from.
#[derive(Clone)]
enum StreamKey {
    EventId,
    ItemKeys,
    Fn(Arc<RecordKeyFn>),
}

impl std::fmt::Debug for StreamKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamKey::EventId => f.write_str("EventId"),
            StreamKey::ItemKeys => f.write_str("ItemKeys"),
            StreamKey::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

/// Processes DynamoDB Streams batches record by record, in shard order,
/// through an [`IdempotentFunction`].
///
/// Each record runs through the function: a record that Lambda delivers
/// again (a retried batch) replays instead of running again. The response
/// names the first record that failed (its handler failed, it is still in
/// progress in another invocation, it could not be claimed) by its
/// `SequenceNumber`, as Lambda's partial batch response for streams asks
/// (the event source mapping needs
/// `FunctionResponseTypes: [ReportBatchItemFailures]`).
///
/// Processing stops at that first failure. Lambda checkpoints the shard at
/// the lowest sequence number the response names and delivers every record
/// from there again, so the later records come back anyway; running them now
/// would apply an item's later changes before its earlier one. On the retry
/// the records that succeeded replay.
///
/// A duplicate of a record that completed counts as processed even when its
/// stored output cannot be replayed (too large to keep, or no longer of the
/// output type): the batch does not use outputs, and failing it would hold
/// the shard on a record that already ran. A record whose outcome no
/// redelivery can change before its idempotency record expires (abandoned
/// and failed by the sweeper, no key, a stored output gone from S3) is
/// logged with its sequence number, counted
/// (metric `StreamRecordSkipped`, to alarm on) and treated as processed, so
/// the shard goes on instead of stalling for a day.
///
/// The function's validation pointers apply to the record's `NewImage` in
/// DynamoDB's JSON (`/amount` is `{"N":"5"}`, so a change of type is a
/// change too; numbers compare as DynamoDB wrote them). A `REMOVE` record,
/// or a stream that does not carry new images, has no fields there.
///
/// ```
/// use aws_lambda_events::event::dynamodb::{Event, EventRecord};
/// use lambda_idempotency::{IdempotentFunction, MemoryStore, event::DynamoDbStreamBatch};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let batch = DynamoDbStreamBatch::new(IdempotentFunction::new(MemoryStore::new(), "projector"));
/// let mut event = Event::default();
/// for n in 1..=3 {
///     let mut record = EventRecord::default();
///     record.event_id = format!("event-{n}");
///     record.change.sequence_number = Some(format!("{n}00"));
///     event.records.push(record);
/// }
/// let response = batch
///     .process(event, |record, _ctx| async move {
///         match record.event_id.as_str() {
///             "event-2" => Err("downstream down"),
///             _ => Ok(()),
///         }
///     })
///     .await
///     .expect("every record has a sequence number");
/// // Record 2 failed: Lambda retries from it; record 3 did not run.
/// assert_eq!(response.batch_item_failures.len(), 1);
/// assert_eq!(response.batch_item_failures[0].item_identifier.as_deref(), Some("200"));
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct DynamoDbStreamBatch {
    function: IdempotentFunction,
    key: StreamKey,
}

impl DynamoDbStreamBatch {
    /// Key = the record's `eventID` (unique per stream record, the same when
    /// Lambda delivers it again).
    pub fn new(function: IdempotentFunction) -> Self {
        DynamoDbStreamBatch {
            function,
            key: StreamKey::EventId,
        }
    }

    /// Key = the changed item's primary key (the record's `Keys`), in
    /// canonical DynamoDB JSON: the order of the attributes does not matter,
    /// their types do (`{"N":"5"}` is not `{"S":"5"}`).
    ///
    /// Every change of one item then shares a key: while its record lives
    /// ([`IdempotentFunction::expires_after`]) only the item's first change
    /// runs and the later ones replay. Use it for items written once (an
    /// outbox), or make the key of the item and what tells its changes
    /// apart (a version attribute) with [`key_fn`](Self::key_fn).
    pub fn key_item_keys(mut self) -> Self {
        self.key = StreamKey::ItemKeys;
        self
    }

    /// Key = what `f` makes of the whole record (`None`: no key).
    pub fn key_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&EventRecord) -> Option<String> + Send + Sync + 'static,
    {
        self.key = StreamKey::Fn(Arc::new(f));
        self
    }

    /// Register the invocation's Lambda context for the leases.
    pub fn register_context(&mut self, context: &lambda_runtime::Context) {
        self.function.register_context(context);
    }

    /// Run `handler` once per record key, in order, up to the first failure,
    /// and report that record's sequence number (no failure: an empty list).
    ///
    /// # Errors
    ///
    /// A failed record without a `SequenceNumber` cannot be named in the
    /// partial batch response; `process` then returns an
    /// [`ErrorKind::InvalidEvent`](crate::ErrorKind::InvalidEvent) error:
    /// fail the invocation with it, so Lambda delivers the whole batch again
    /// (the records that succeeded replay).
    #[must_use = "the response names the stream record that failed: dropped, Lambda is told the whole batch succeeded and moves past that change and the ones after it"]
    pub async fn process<O, E, F, Fut>(
        &self,
        event: Event,
        handler: F,
    ) -> Result<DynamoDbEventResponse, Error>
    where
        O: Serialize + DeserializeOwned,
        E: std::fmt::Display,
        F: Fn(EventRecord, Option<IdempotencyContext>) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        // One metrics line for the whole batch (crate::metrics).
        let failed = crate::metrics::gathered(
            self.function.config().metrics.as_ref(),
            first_failure(
                &self.function,
                "DynamoDB Streams",
                event.records,
                |record| self.prepare(record),
                &handler,
            ),
        )
        .await?;
        let mut response = DynamoDbEventResponse::default();
        if let Some(sequence_number) = failed {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(sequence_number);
            response.batch_item_failures.push(failure);
        }
        Ok(response)
    }

    /// A record's sequence number, key and fingerprint.
    fn prepare(
        &self,
        record: &EventRecord,
    ) -> (Option<String>, Result<Option<Key>, TooDeep>, String) {
        let sequence_number = record
            .change
            .sequence_number
            .clone()
            .filter(|s| !s.is_empty());
        let key = match &self.key {
            StreamKey::EventId => text_key(Some(record.event_id.clone())),
            StreamKey::ItemKeys if record.change.keys.is_empty() => None,
            StreamKey::ItemKeys => dynamodb_json(&record.change.keys)
                .and_then(|keys| keys.at("").map(<[u8]>::to_vec))
                .and_then(|keys| String::from_utf8(keys).ok())
                .map(Key::json),
            StreamKey::Fn(f) => text_key(f(record)),
        };
        let new_image = dynamodb_json(&record.change.new_image);
        let fingerprint = self.function.fingerprint_of_canonical(new_image.as_ref());
        // Never too deep to read: the items were read from the event's own
        // JSON, nested inside it, so written alone they nest less than JSON
        // is read (and DynamoDB keys are scalars).
        (sequence_number, Ok(key), fingerprint)
    }
}

/// An item (`Keys`, `NewImage`) as canonical DynamoDB JSON: every attribute
/// as `{"<type>": value}`, members in name order, so it does not depend on
/// the order the event listed them in.
fn dynamodb_json(item: &impl Serialize) -> Option<CanonicalJson> {
    serde_json::to_string(item)
        .ok()
        .and_then(|text| CanonicalJson::parse(&text))
}
