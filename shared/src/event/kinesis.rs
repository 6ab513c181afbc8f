//! [`KinesisBatch`]: Kinesis Data Streams batches, each record once, in
//! shard order, with partial batch responses.

use std::future::Future;
use std::sync::Arc;

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::KinesisEventResponse;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::batch::{first_failure, pointer_key, record_key, text_key};
use super::function::{IdempotentFunction, Key, TooDeep};
use crate::context::IdempotencyContext;
use crate::error::Error;
use crate::json::{check_pointer, CanonicalJson};

/// A key made from a whole record ([`KinesisBatch::key_fn`]).
type RecordKeyFn = dyn Fn(&KinesisEventRecord) -> Option<String> + Send + Sync;

/// Where a record's key comes from.
#[derive(Clone)]
enum KinesisKey {
    EventId,
    DataPointer(String),
    PartitionKey,
    Fn(Arc<RecordKeyFn>),
}

impl std::fmt::Debug for KinesisKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KinesisKey::EventId => f.write_str("EventId"),
            KinesisKey::DataPointer(p) => f.debug_tuple("DataPointer").field(p).finish(),
            KinesisKey::PartitionKey => f.write_str("PartitionKey"),
            KinesisKey::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

/// Processes Kinesis Data Streams batches record by record, in shard order,
/// through an [`IdempotentFunction`].
///
/// Each record runs through the function: a record that Lambda delivers
/// again (a retried batch, a duplicate the producer put twice under the
/// same key) replays instead of running again. The response names the first
/// record that failed (its handler failed, it is still in progress in
/// another invocation, it could not be claimed) by its sequence number, as
/// Lambda's partial batch response for streams asks (the event source
/// mapping needs `FunctionResponseTypes: [ReportBatchItemFailures]`).
///
/// Processing stops at that first failure. Lambda checkpoints the shard at
/// the lowest sequence number the response names and delivers every record
/// from there again, so the later records come back anyway; running them now
/// would apply their effects before the failed record's, out of the shard's
/// order. On the retry the records that succeeded replay.
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
/// ```
/// use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
/// use lambda_idempotency::{IdempotentFunction, MemoryStore, event::KinesisBatch};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let batch = KinesisBatch::new(IdempotentFunction::new(MemoryStore::new(), "consumer"));
/// let mut event = KinesisEvent::default();
/// for n in 1..=3 {
///     let mut record = KinesisEventRecord::default();
///     record.event_id = Some(format!("shardId-000000000000:{n}"));
///     record.kinesis.sequence_number = n.to_string();
///     record.kinesis.data.0 = format!(r#"{{"order":{n}}}"#).into_bytes();
///     event.records.push(record);
/// }
/// let response = batch
///     .process(event, |record, _ctx| async move {
///         match record.kinesis.sequence_number.as_str() {
///             "2" => Err("downstream down"),
///             _ => Ok(()),
///         }
///     })
///     .await
///     .expect("every record has a sequence number");
/// // Record 2 failed: Lambda retries from it; record 3 did not run.
/// assert_eq!(response.batch_item_failures.len(), 1);
/// assert_eq!(response.batch_item_failures[0].item_identifier.as_deref(), Some("2"));
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct KinesisBatch {
    function: IdempotentFunction,
    key: KinesisKey,
}

impl KinesisBatch {
    /// Key = the record's `eventID` (the shard and the sequence number:
    /// unique per record, the same when Lambda delivers it again).
    /// `function`'s validation pointers apply to the record's `data` as JSON
    /// (no fields when it is not JSON).
    pub fn new(function: IdempotentFunction) -> Self {
        KinesisBatch {
            function,
            key: KinesisKey::EventId,
        }
    }

    /// Key = the value at this JSON pointer of the record's `data` (base64
    /// decoded, as JSON): for producer-side ids, so the same event put twice
    /// runs once. A string is the key as it is; another value is kept apart
    /// from strings (`5` is not `"5"`), numbers exact. Data that is not JSON,
    /// or has nothing (or null) there, has no key.
    ///
    /// # Panics
    ///
    /// When `pointer` is not an RFC 6901 JSON pointer (`"event_id"` for
    /// `"/event_id"`): it would match nothing. A configuration error, found
    /// at start-up.
    pub fn key_data_pointer(mut self, pointer: impl Into<String>) -> Self {
        let pointer = pointer.into();
        if let Err(e) = check_pointer(&pointer) {
            panic!("KinesisBatch::key_data_pointer: {e}");
        }
        self.key = KinesisKey::DataPointer(pointer);
        self
    }

    /// Key = the record's partition key. Only for producers that put each
    /// event under its own partition key (an event id): records that share
    /// one (an order's events) would share a key, and all but the first
    /// would replay.
    pub fn key_partition_key(mut self) -> Self {
        self.key = KinesisKey::PartitionKey;
        self
    }

    /// Key = what `f` makes of the whole record (`None`: no key).
    pub fn key_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&KinesisEventRecord) -> Option<String> + Send + Sync + 'static,
    {
        self.key = KinesisKey::Fn(Arc::new(f));
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
    /// A failed record without a sequence number cannot be named in the
    /// partial batch response; `process` then returns an
    /// [`ErrorKind::InvalidEvent`](crate::ErrorKind::InvalidEvent) error:
    /// fail the invocation with it, so Lambda delivers the whole batch again
    /// (the records that succeeded replay).
    #[must_use = "the response names the Kinesis record that failed: dropped, Lambda is told the whole batch succeeded and moves past that record and the rest of its shard's batch"]
    pub async fn process<O, E, F, Fut>(
        &self,
        event: KinesisEvent,
        handler: F,
    ) -> Result<KinesisEventResponse, Error>
    where
        O: Serialize + DeserializeOwned,
        E: std::fmt::Display,
        F: Fn(KinesisEventRecord, Option<IdempotencyContext>) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        // One metrics line for the whole batch (crate::metrics).
        let failed = crate::metrics::gathered(
            self.function.config().metrics.as_ref(),
            first_failure(
                &self.function,
                "Kinesis",
                event.records,
                |record| self.prepare(record),
                &handler,
            ),
        )
        .await?;
        let mut response = KinesisEventResponse::default();
        if let Some(sequence_number) = failed {
            response.add_failure(sequence_number);
        }
        Ok(response)
    }

    /// A record's sequence number, key and fingerprint.
    fn prepare(
        &self,
        record: &KinesisEventRecord,
    ) -> (Option<String>, Result<Option<Key>, TooDeep>, String) {
        let sequence_number =
            Some(record.kinesis.sequence_number.clone()).filter(|s| !s.is_empty());
        // The key and the validated fields are read from the data's text,
        // canonicalised once, so numbers keep every digit.
        let text = std::str::from_utf8(&record.kinesis.data).ok();
        let data = text.and_then(CanonicalJson::parse);
        let reads_data =
            matches!(self.key, KinesisKey::DataPointer(_)) || self.function.validates();
        let key = record_key(text, data.as_ref(), reads_data, |data| match &self.key {
            KinesisKey::EventId => text_key(record.event_id.clone()),
            KinesisKey::DataPointer(pointer) => data.and_then(|d| pointer_key(d, pointer)),
            KinesisKey::PartitionKey => text_key(Some(record.kinesis.partition_key.clone())),
            KinesisKey::Fn(f) => text_key(f(record)),
        });
        let fingerprint = self.function.fingerprint_of_canonical(data.as_ref());
        (sequence_number, key, fingerprint)
    }
}
