//! Kinesis and DynamoDB Streams batches (`KinesisBatch`,
//! `DynamoDbStreamBatch`) on every store: each record once, in shard order,
//! the first failure the only one reported and the last one run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::dynamodb::{Event as DynamoDbEvent, EventRecord};
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::{DynamoDbEventResponse, KinesisEventResponse};
use lambda_idempotency::{
    event::{DynamoDbStreamBatch, KinesisBatch},
    ErrorKind, IdempotencyContext, IdempotentFunction,
};
use serde_json::{json, Value};

use crate::events::sample;
use crate::fixture::{on_both_stores, Fixture};

on_both_stores!(
    kinesis_duplicates_in_a_batch_and_a_redelivered_batch_run_once,
    kinesis_first_failure_stops_the_batch_and_is_the_only_identifier,
    kinesis_in_progress_duplicate_fails_and_stops,
    kinesis_data_pointer_keeps_types_apart_and_numbers_exact,
    kinesis_partition_key_and_a_closure_are_key_sources,
    kinesis_failed_record_without_a_sequence_number_fails_the_invocation,
    completed_record_whose_output_no_longer_fits_counts_as_processed,
    an_abandoned_record_or_a_missing_key_does_not_stall_the_shard,
    kinesis_data_nested_too_deep_is_skipped_never_run,
    dynamodb_redelivered_batch_runs_each_record_once,
    dynamodb_first_failure_stops_the_batch_and_is_the_only_identifier,
    dynamodb_item_keys_ignore_attribute_order_and_keep_types_apart,
    dynamodb_validation_applies_to_the_new_image,
    dynamodb_closure_key_and_a_record_without_a_sequence_number,
    sample_kinesis_event_processes_each_order_event_once,
    sample_dynamodb_stream_event_processes_each_change_once,
);

/// What the handler saw, in order: one entry per run.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, what: String) {
        self.0.lock().expect("not poisoned").push(what);
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().expect("not poisoned").clone()
    }
}

/// A Kinesis record of shard 0 with sequence number `seq` and `data` as its
/// bytes (JSON or not).
fn kinesis_record(seq: &str, data: &str) -> KinesisEventRecord {
    let mut record = KinesisEventRecord::default();
    record.event_id = Some(format!("shardId-000000000000:{seq}"));
    record.kinesis.sequence_number = seq.into();
    record.kinesis.partition_key = format!("pk-{seq}");
    record.kinesis.data.0 = data.as_bytes().to_vec();
    record
}

fn kinesis_event(records: Vec<KinesisEventRecord>) -> KinesisEvent {
    let mut event = KinesisEvent::default();
    event.records = records;
    event
}

/// The sequence numbers a Kinesis partial batch response names, in order.
fn kinesis_failed(response: &KinesisEventResponse) -> Vec<&str> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_deref().unwrap_or("<none>"))
        .collect()
}

/// The sequence numbers a DynamoDB Streams partial batch response names.
fn dynamodb_failed(response: &DynamoDbEventResponse) -> Vec<&str> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_deref().unwrap_or("<none>"))
        .collect()
}

/// One delivery of `records` to `batch`, each run by [`kinesis_handler`];
/// the invocation itself must succeed.
async fn deliver_kinesis(
    batch: &KinesisBatch,
    records: Vec<KinesisEventRecord>,
    seen: &Seen,
    failing: &Arc<Mutex<Vec<String>>>,
) -> KinesisEventResponse {
    batch
        .process(kinesis_event(records), kinesis_handler(seen, failing))
        .await
        .unwrap()
}

/// Deliver `records` to `batch` with a handler that fails none of them, and
/// check that the batch reports no failure: the shard goes on.
async fn deliver_kinesis_ok(batch: &KinesisBatch, records: Vec<KinesisEventRecord>, seen: &Seen) {
    let response = deliver_kinesis(batch, records, seen, &Arc::default()).await;
    assert_eq!(
        kinesis_failed(&response),
        Vec::<&str>::new(),
        "the shard goes on"
    );
}

/// A handler that records each run's sequence number and fails the ones in
/// `failing` (while `failing` holds them).
fn kinesis_handler(
    seen: &Seen,
    failing: &Arc<Mutex<Vec<String>>>,
) -> impl Fn(KinesisEventRecord, Option<IdempotencyContext>) -> std::future::Ready<Result<String, String>>
{
    let (seen, failing) = (seen.clone(), failing.clone());
    move |record, _ctx| {
        let seq = record.kinesis.sequence_number.clone();
        seen.push(seq.clone());
        let fail = failing.lock().expect("not poisoned").contains(&seq);
        std::future::ready(if fail {
            Err(format!("cannot process {seq}"))
        } else {
            Ok(seq)
        })
    }
}

/// A config on `store` whose metrics lines (EMF JSON) are kept in the
/// returned list, for [`skipped_counts`].
fn metered(
    store: Arc<dyn lambda_idempotency::store::SweepStore>,
) -> (
    lambda_idempotency::IdempotencyConfig,
    Arc<Mutex<Vec<String>>>,
) {
    use lambda_idempotency::metrics::Metrics;
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let config = lambda_idempotency::IdempotencyConfig::new(store)
        .metrics(Metrics::new("Test").sink(move |l| sink.lock().unwrap().push(l.to_owned())));
    (config, lines)
}

/// The `StreamRecordSkipped` count of each metrics line that has one.
fn skipped_counts(lines: &Mutex<Vec<String>>) -> Vec<u64> {
    lines
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| {
            let line: Value = serde_json::from_str(l).expect("EMF JSON");
            line["StreamRecordSkipped"].as_u64()
        })
        .collect()
}

async fn kinesis_duplicates_in_a_batch_and_a_redelivered_batch_run_once(f: Fixture) {
    let seen = Seen::default();
    let none = Arc::default();
    let batch = KinesisBatch::new(IdempotentFunction::new(f.store.clone(), "consumer"))
        .key_data_pointer("/event_id");
    let make = || {
        vec![
            kinesis_record("1", r#"{"event_id":"e1","n":1}"#),
            // The producer put e1 twice: another record, the same event.
            kinesis_record("2", r#"{"event_id":"e1","n":1}"#),
            kinesis_record("3", r#"{"event_id":"e2","n":2}"#),
        ]
    };
    let response = deliver_kinesis(&batch, make(), &seen, &none).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(seen.all(), ["1", "3"], "the duplicate e1 replayed");
    // Lambda delivers the same batch again: everything replays.
    let again = deliver_kinesis(&batch, make(), &seen, &none).await;
    assert!(again.batch_item_failures.is_empty());
    assert_eq!(seen.all(), ["1", "3"]);
}

async fn kinesis_first_failure_stops_the_batch_and_is_the_only_identifier(f: Fixture) {
    let seen = Seen::default();
    let failing = Arc::new(Mutex::new(vec!["20".to_owned(), "40".to_owned()]));
    let batch = KinesisBatch::new(IdempotentFunction::new(f.store.clone(), "consumer"));
    let records = ["10", "20", "30", "40"]
        .map(|seq| kinesis_record(seq, &format!("{{\"n\":{seq}}}")))
        .to_vec();
    let response = deliver_kinesis(&batch, records.clone(), &seen, &failing).await;
    assert_eq!(kinesis_failed(&response), ["20"], "only the checkpoint");
    assert_eq!(
        seen.all(),
        ["10", "20"],
        "30 and 40 did not run out of order"
    );

    // Lambda retries from the checkpoint; 20 now succeeds, 40 still fails.
    failing.lock().unwrap().retain(|s| s != "20");
    let retry = deliver_kinesis(&batch, records[1..].to_vec(), &seen, &failing).await;
    assert_eq!(kinesis_failed(&retry), ["40"]);
    assert_eq!(seen.all(), ["10", "20", "20", "30", "40"]);

    // The whole batch again (a retry after a timeout, say): 10, 20 and 30
    // replay, 40 runs.
    failing.lock().unwrap().clear();
    let last = deliver_kinesis(&batch, records, &seen, &failing).await;
    assert!(last.batch_item_failures.is_empty());
    assert_eq!(seen.all(), ["10", "20", "20", "30", "40", "40"]);
}

async fn kinesis_in_progress_duplicate_fails_and_stops(f: Fixture) {
    let seen = Seen::default();
    let none = Arc::default();
    let function = IdempotentFunction::new(f.store.clone(), "consumer");
    let batch = KinesisBatch::new(function.clone()).key_data_pointer("/event_id");

    // "busy" is being processed by another invocation right now: same
    // function name, same key.
    let started = Arc::new(tokio::sync::Notify::new());
    let busy = {
        let function = function.key_pointers(["/event_id"]);
        let started = started.clone();
        tokio::spawn(async move {
            function
                .call(json!({"event_id": "busy"}), |_| async move {
                    started.notify_one();
                    tokio::time::sleep(Duration::from_millis(800)).await;
                    Ok::<_, String>("done elsewhere".to_owned())
                })
                .await
        })
    };
    started.notified().await;

    let make = || {
        vec![
            kinesis_record("1", r#"{"event_id":"a"}"#),
            kinesis_record("2", r#"{"event_id":"busy"}"#),
            kinesis_record("3", r#"{"event_id":"c"}"#),
        ]
    };
    let response = deliver_kinesis(&batch, make(), &seen, &none).await;
    assert_eq!(kinesis_failed(&response), ["2"]);
    assert_eq!(seen.all(), ["1"], "busy did not run twice, c did not run");

    // Once the other invocation completed it, the retry replays it.
    assert_eq!(busy.await.unwrap().unwrap(), "done elsewhere");
    let retry = deliver_kinesis(&batch, make(), &seen, &none).await;
    assert!(retry.batch_item_failures.is_empty());
    assert_eq!(seen.all(), ["1", "3"]);
}

async fn kinesis_data_pointer_keeps_types_apart_and_numbers_exact(f: Fixture) {
    let seen = Seen::default();
    let none = Arc::default();
    let batch = KinesisBatch::new(IdempotentFunction::new(f.store.clone(), "consumer"))
        .key_data_pointer("/id");
    let response = deliver_kinesis(
        &batch,
        vec![
            kinesis_record("1", r#"{"id":5}"#),
            // The string "5" is another key than the number 5.
            kinesis_record("2", r#"{"id":"5"}"#),
            // The number 5 again, written with other spacing: replays.
            kinesis_record("3", r#"{ "id" : 5 }"#),
            // Two numbers a float would not tell apart.
            kinesis_record("4", r#"{"id":12345678901234567890123}"#),
            kinesis_record("5", r#"{"id":12345678901234567890124}"#),
            // Data that is not JSON has no key: no redelivery gives
            // it one, so it is skipped (logged, counted), not retried.
            kinesis_record("6", "id=5"),
            kinesis_record("7", r#"{"id":7}"#),
        ],
        &seen,
        &none,
    )
    .await;
    assert_eq!(kinesis_failed(&response), Vec::<&str>::new());
    assert_eq!(seen.all(), ["1", "2", "4", "5", "7"]);
}

async fn kinesis_partition_key_and_a_closure_are_key_sources(f: Fixture) {
    let seen = Seen::default();
    let by_partition_key =
        KinesisBatch::new(IdempotentFunction::new(f.store.clone(), "by-partition-key"))
            .key_partition_key();
    let with_partition_key = |seq: &str, pk: &str| {
        let mut record = kinesis_record(seq, "{}");
        record.kinesis.partition_key = pk.into();
        record
    };
    deliver_kinesis_ok(
        &by_partition_key,
        vec![
            with_partition_key("1", "evt-1"),
            with_partition_key("2", "evt-1"),
            with_partition_key("3", "evt-2"),
        ],
        &seen,
    )
    .await;
    assert_eq!(seen.all(), ["1", "3"], "evt-1 once, evt-2 once");

    // A closure over the record: here the data's length.
    let by_closure = KinesisBatch::new(IdempotentFunction::new(f.store.clone(), "by-closure"))
        .key_fn(|r: &KinesisEventRecord| Some(r.kinesis.data.len().to_string()));
    deliver_kinesis_ok(
        &by_closure,
        vec![
            kinesis_record("4", "abc"),
            kinesis_record("5", "xyz"),
            kinesis_record("6", "abcd"),
        ],
        &seen,
    )
    .await;
    assert_eq!(
        seen.all(),
        ["1", "3", "4", "6"],
        "two 3-byte records share a key"
    );
}

async fn kinesis_failed_record_without_a_sequence_number_fails_the_invocation(f: Fixture) {
    let seen = Seen::default();
    let failing = Arc::new(Mutex::new(vec![String::new()]));
    let batch = KinesisBatch::new(IdempotentFunction::new(f.store.clone(), "consumer"));
    let mut unnamed = kinesis_record("", "{}");
    unnamed.event_id = Some("shardId-000000000000:unnamed".into());
    // A record without a sequence number that succeeds is fine.
    let ok = deliver_kinesis(
        &batch,
        vec![kinesis_record("1", "{}"), unnamed.clone()],
        &seen,
        &Arc::default(),
    )
    .await;
    assert!(ok.batch_item_failures.is_empty());
    // One that fails cannot be named: the invocation fails.
    let mut other = unnamed;
    other.event_id = Some("shardId-000000000000:unnamed-2".into());
    let err = batch
        .process(
            kinesis_event(vec![other, kinesis_record("3", "{}")]),
            kinesis_handler(&seen, &failing),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidEvent);
    assert!(err.to_string().contains("sequence number"), "{err}");
    assert_eq!(seen.all(), ["1", "", ""], "record 3 did not run");
}

async fn completed_record_whose_output_no_longer_fits_counts_as_processed(f: Fixture) {
    let seen = Seen::default();
    let batch = KinesisBatch::new(IdempotentFunction::new(f.store.clone(), "consumer"));
    let make = || kinesis_event(vec![kinesis_record("1", "{}"), kinesis_record("2", "{}")]);
    let first = batch
        .process(make(), |record, _| {
            seen.push(record.kinesis.sequence_number.clone());
            async { Ok::<u32, String>(7) }
        })
        .await
        .unwrap();
    assert!(first.batch_item_failures.is_empty());
    // A new deployment's handler returns another type: the stored `7` is no
    // `Vec<String>`, but the records ran; the shard moves on.
    let again = batch
        .process(make(), |record, _| {
            seen.push(record.kinesis.sequence_number.clone());
            async { Ok::<Vec<String>, String>(Vec::new()) }
        })
        .await
        .unwrap();
    assert!(again.batch_item_failures.is_empty());
    assert_eq!(seen.all(), ["1", "2"]);
}

/// Issue 25, item 4: a record the sweeper failed (`Abandoned`) or one
/// without a key cannot change on redelivery until its record expires (a
/// day): it is counted (`StreamRecordSkipped`) and the shard goes on, where
/// it used to be named as the batch's failure on every redelivery.
async fn an_abandoned_record_or_a_missing_key_does_not_stall_the_shard(f: Fixture) {
    use lambda_idempotency::sweeper::SweepPolicy;
    let (config, lines) = metered(f.store.clone());
    let batch = KinesisBatch::new(IdempotentFunction::with_config(config, "consumer"))
        .key_data_pointer("/event_id");
    let seen = Seen::default();
    let store = f.store.clone();
    // The first delivery of e1 is abandoned: the sweeper (forced, as an
    // operator would) fails it while it runs.
    let first = batch
        .process(
            kinesis_event(vec![kinesis_record("1", r#"{"event_id":"e1"}"#)]),
            |record, ctx| {
                let store = store.clone();
                seen.push(record.kinesis.sequence_number.clone());
                async move {
                    let ctx = ctx.expect("keyed");
                    crate::fixture::force_resolution(
                        &store,
                        ctx.record_id(),
                        ctx.attempt(),
                        SweepPolicy::Fail,
                    )
                    .await;
                    Ok::<String, String>("late".into())
                }
            },
        )
        .await
        .unwrap();
    // Its output was not stored (the record holds the sweeper's problem):
    // the record is reported failed, to come again (docs/DESIGN.md
    // section 8), and its redelivery below is skipped.
    assert_eq!(
        kinesis_failed(&first),
        ["1"],
        "the late completion's output is stored nowhere"
    );

    deliver_kinesis_ok(
        &batch,
        vec![
            kinesis_record("1", r#"{"event_id":"e1"}"#),
            kinesis_record("2", r#"{"n":2}"#),
            kinesis_record("3", r#"{"event_id":"e3"}"#),
        ],
        &seen,
    )
    .await;
    assert_eq!(seen.all(), ["1", "3"], "the abandoned e1 did not run again");
    // Counted in the batch's one line.
    assert_eq!(
        skipped_counts(&lines),
        [2],
        "the abandoned record and the one without a key"
    );
}

/// A DynamoDB Streams record, as Lambda sends it (DynamoDB JSON images).
fn dynamodb_record(event_id: &str, seq: &str, keys: Value, new_image: Value) -> EventRecord {
    serde_json::from_value(json!({
        "eventID": event_id,
        "eventName": "MODIFY",
        "awsRegion": "us-east-1",
        "eventSource": "aws:dynamodb",
        "dynamodb": {
            "Keys": keys,
            "NewImage": new_image,
            "SequenceNumber": seq,
            "SizeBytes": 64,
            "StreamViewType": "NEW_IMAGE"
        }
    }))
    .expect("a DynamoDB Streams record")
}

fn dynamodb_event(records: Vec<EventRecord>) -> DynamoDbEvent {
    let mut event = DynamoDbEvent::default();
    event.records = records;
    event
}

/// A handler that records each run's sequence number and fails the ones in
/// `failing`.
fn dynamodb_handler(
    seen: &Seen,
    failing: &[&str],
) -> impl Fn(EventRecord, Option<IdempotencyContext>) -> std::future::Ready<Result<(), String>> {
    let seen = seen.clone();
    let failing: Vec<String> = failing.iter().map(|s| s.to_string()).collect();
    move |record, _ctx| {
        let seq = record.change.sequence_number.clone().unwrap_or_default();
        seen.push(seq.clone());
        std::future::ready(if failing.contains(&seq) {
            Err(format!("cannot process {seq}"))
        } else {
            Ok(())
        })
    }
}

/// One delivery of `records` to `batch`, each run by [`dynamodb_handler`];
/// the invocation itself must succeed.
async fn deliver_dynamodb(
    batch: &DynamoDbStreamBatch,
    records: Vec<EventRecord>,
    seen: &Seen,
    failing: &[&str],
) -> DynamoDbEventResponse {
    batch
        .process(dynamodb_event(records), dynamodb_handler(seen, failing))
        .await
        .unwrap()
}

fn order_keys(id: &str) -> Value {
    json!({"order_id": {"S": id}})
}

async fn dynamodb_redelivered_batch_runs_each_record_once(f: Fixture) {
    let seen = Seen::default();
    let batch = DynamoDbStreamBatch::new(IdempotentFunction::new(f.store.clone(), "projector"));
    let make = || {
        vec![
            dynamodb_record("ev-1", "100", order_keys("o1"), json!({})),
            dynamodb_record("ev-2", "200", order_keys("o1"), json!({})),
            dynamodb_record("ev-3", "300", order_keys("o2"), json!({})),
        ]
    };
    let first = deliver_dynamodb(&batch, make(), &seen, &[]).await;
    assert!(first.batch_item_failures.is_empty());
    assert_eq!(
        seen.all(),
        ["100", "200", "300"],
        "each change is its own record"
    );
    let again = deliver_dynamodb(&batch, make(), &seen, &[]).await;
    assert!(again.batch_item_failures.is_empty());
    assert_eq!(seen.all(), ["100", "200", "300"], "the redelivery replayed");
}

async fn dynamodb_first_failure_stops_the_batch_and_is_the_only_identifier(f: Fixture) {
    let seen = Seen::default();
    let batch = DynamoDbStreamBatch::new(IdempotentFunction::new(f.store.clone(), "projector"));
    let records = vec![
        dynamodb_record("ev-1", "100", order_keys("o1"), json!({})),
        dynamodb_record("ev-2", "200", order_keys("o2"), json!({})),
        dynamodb_record("ev-3", "300", order_keys("o3"), json!({})),
    ];
    let response = deliver_dynamodb(&batch, records.clone(), &seen, &["200", "300"]).await;
    assert_eq!(dynamodb_failed(&response), ["200"]);
    assert_eq!(seen.all(), ["100", "200"]);
    // Lambda retries from 200: it runs again (its failure released the key).
    let retry = deliver_dynamodb(&batch, records[1..].to_vec(), &seen, &[]).await;
    assert!(retry.batch_item_failures.is_empty());
    assert_eq!(seen.all(), ["100", "200", "200", "300"]);
}

async fn dynamodb_item_keys_ignore_attribute_order_and_keep_types_apart(f: Fixture) {
    let seen = Seen::default();
    let batch = DynamoDbStreamBatch::new(IdempotentFunction::new(f.store.clone(), "outbox"))
        .key_item_keys();
    let response = deliver_dynamodb(
        &batch,
        vec![
            dynamodb_record(
                "ev-1",
                "100",
                json!({"pk": {"S": "a"}, "sk": {"N": "5"}}),
                json!({}),
            ),
            // The same primary key, listed in the other order: replays.
            dynamodb_record(
                "ev-2",
                "200",
                json!({"sk": {"N": "5"}, "pk": {"S": "a"}}),
                json!({}),
            ),
            // The sort key as a string: another item.
            dynamodb_record(
                "ev-3",
                "300",
                json!({"pk": {"S": "a"}, "sk": {"S": "5"}}),
                json!({}),
            ),
            // No keys at all: no key, ever; skipped, not retried.
            dynamodb_record("ev-4", "400", json!({}), json!({})),
            dynamodb_record("ev-5", "500", json!({"pk": {"S": "b"}}), json!({})),
        ],
        &seen,
        &[],
    )
    .await;
    assert_eq!(dynamodb_failed(&response), Vec::<&str>::new());
    assert_eq!(seen.all(), ["100", "300", "500"]);
}

async fn dynamodb_validation_applies_to_the_new_image(f: Fixture) {
    let seen = Seen::default();
    let function = IdempotentFunction::new(f.store.clone(), "outbox").validate(["/amount"]);
    let batch = DynamoDbStreamBatch::new(function).key_item_keys();
    // Change `n` (event `ev-n`, sequence number `n00`) of `order`, its new
    // image holding `amount` and `note`.
    let change = |n: u32, order: &str, amount: Value, note: &str| {
        dynamodb_record(
            &format!("ev-{n}"),
            &format!("{n}00"),
            order_keys(order),
            json!({"order_id": {"S": "o1"}, "amount": amount, "note": {"S": note}}),
        )
    };
    let response = deliver_dynamodb(
        &batch,
        vec![
            change(1, "o1", json!({"N": "5"}), "a"),
            // Same amount, another field changed: replays.
            change(2, "o1", json!({"N": "5"}), "b"),
            // The amount as a string is a change: a payload mismatch.
            change(3, "o1", json!({"S": "5"}), "a"),
            change(4, "o2", json!({"N": "1"}), "a"),
        ],
        &seen,
        &[],
    )
    .await;
    assert_eq!(dynamodb_failed(&response), ["300"]);
    assert_eq!(seen.all(), ["100"]);
}

async fn dynamodb_closure_key_and_a_record_without_a_sequence_number(f: Fixture) {
    let seen = Seen::default();
    let batch = DynamoDbStreamBatch::new(IdempotentFunction::new(f.store.clone(), "projector"))
        .key_fn(|r: &EventRecord| Some(format!("{}:{}", r.event_name, r.event_id)));
    let response = deliver_dynamodb(
        &batch,
        vec![
            dynamodb_record("ev-1", "100", order_keys("o1"), json!({})),
            dynamodb_record("ev-1", "200", order_keys("o1"), json!({})),
            dynamodb_record("ev-2", "300", order_keys("o1"), json!({})),
        ],
        &seen,
        &[],
    )
    .await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(seen.all(), ["100", "300"]);

    let mut unnamed = dynamodb_record("ev-9", "900", order_keys("o9"), json!({}));
    unnamed.change.sequence_number = None;
    let err = batch
        .process(dynamodb_event(vec![unnamed]), |_, _| async {
            Err::<(), _>("downstream down")
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidEvent);
    assert!(err.to_string().contains("DynamoDB Streams"), "{err}");
}

async fn sample_kinesis_event_processes_each_order_event_once(f: Fixture) {
    let seen = Seen::default();
    let event: KinesisEvent =
        serde_json::from_value(sample("stream-batches/kinesis-order-events-batch.json"))
            .expect("the sample is a Kinesis event");
    let batch = KinesisBatch::new(IdempotentFunction::new(f.store.clone(), "order-events"))
        .key_data_pointer("/event_id");
    let handler = |record: KinesisEventRecord, _| {
        let seen = seen.clone();
        async move {
            let order: Value = serde_json::from_slice(&record.kinesis.data)
                .map_err(|e| format!("data is not JSON: {e}"))?;
            seen.push(order["order_id"].as_str().unwrap_or("?").to_owned());
            Ok::<_, String>(order["order_id"].clone())
        }
    };
    // The batch holds evt-2001 twice (two records) and evt-2002.
    let response = batch.process(event.clone(), handler).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(seen.all(), ["ord-21", "ord-22"]);
    let again = batch.process(event, handler).await.unwrap();
    assert!(again.batch_item_failures.is_empty());
    assert_eq!(seen.all(), ["ord-21", "ord-22"]);
}

async fn sample_dynamodb_stream_event_processes_each_change_once(f: Fixture) {
    let seen = Seen::default();
    let event: DynamoDbEvent =
        serde_json::from_value(sample("stream-batches/dynamodb-stream-batch.json"))
            .expect("the sample is a DynamoDB Streams event");
    let handler = |record: EventRecord, _| {
        let seen = seen.clone();
        async move {
            seen.push(format!("{} {}", record.event_name, record.event_id));
            Ok::<_, String>(())
        }
    };
    // By event id: each of the three changes once, the redelivery replays.
    let by_event = DynamoDbStreamBatch::new(IdempotentFunction::new(f.store.clone(), "projector"));
    let response = by_event.process(event.clone(), handler).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    by_event.process(event.clone(), handler).await.unwrap();
    assert_eq!(seen.all().len(), 3);
    // By item: ord-31's INSERT and MODIFY share a key, so only its INSERT runs.
    let by_item = DynamoDbStreamBatch::new(IdempotentFunction::new(f.store.clone(), "outbox"))
        .key_item_keys();
    let response = by_item.process(event, handler).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    let runs = seen.all();
    assert_eq!(runs.len(), 5, "{runs:?}");
    assert!(
        runs[3].starts_with("INSERT") && runs[4].starts_with("INSERT"),
        "{runs:?}"
    );
}

/// Issue 41, item 6, on the event path: Kinesis data nested deeper than
/// serde_json reads (127 levels) was taken for data without a key, so with
/// `pass_through_missing_key` it ran without idempotency. It is never run
/// now: like a record without a key, no redelivery changes it, so it is
/// skipped (logged with its depth, counted) and the shard goes on.
async fn kinesis_data_nested_too_deep_is_skipped_never_run(f: Fixture) {
    use crate::events::nested_json;
    for pass_through in [false, true] {
        let (config, lines) = metered(f.store.clone());
        let function = IdempotentFunction::with_config(config, format!("deep-{pass_through}"))
            .pass_through_missing_key(pass_through);
        let batch = KinesisBatch::new(function).key_data_pointer("/event_id");
        let seen = Seen::default();
        deliver_kinesis_ok(
            &batch,
            vec![
                kinesis_record("1", &nested_json("e1", 127)),
                kinesis_record("2", &nested_json("e2", 128)),
                kinesis_record("3", &nested_json("e3", 5_000)),
                kinesis_record("4", r#"{"event_id":"e4"}"#),
            ],
            &seen,
        )
        .await;
        assert_eq!(
            seen.all(),
            ["1", "4"],
            "the records nested too deep never ran (pass_through_missing_key({pass_through}))"
        );
        assert_eq!(
            skipped_counts(&lines),
            [2],
            "both records nested too deep are counted"
        );
    }
}
