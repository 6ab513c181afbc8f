//! Event-driven idempotency: typed `LambdaEvent` handlers, async functions and
//! SQS batches, on every store; the example consumer on DynamoDB Local.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::{
    event::{EventError, SqsBatch},
    IdempotentEventLayer, IdempotentFunction,
};
use lambda_runtime::{service_fn, LambdaEvent};
use serde_json::{json, Value};
use tower::{Layer, Service, ServiceExt};

use crate::fixture::{now_ms, on_both_stores, Fixture, Runs};

on_both_stores!(
    duplicate_event_runs_once_and_replays_an_identical_output,
    concurrent_duplicates_run_once_and_the_rest_are_typed_in_progress,
    handler_error_releases_so_the_retry_runs,
    validation_mismatch_is_a_distinct_error,
    missing_key_is_an_error_or_passes_through,
    batch_reports_exactly_the_failing_and_in_progress_records,
    redelivered_batch_does_not_run_completed_records_again,
    fifo_batch_fails_everything_after_the_first_failure,
    lambda_deadline_sets_the_lease,
    sqs_keys_from_a_message_attribute_keep_their_types_apart,
    fifo_deduplication_id_and_a_closure_are_key_sources,
    sqs_body_nested_too_deep_fails_its_record_and_never_runs,
);

fn counting_event_handler(
    runs: Runs,
    delay: Duration,
) -> impl Service<
    LambdaEvent<Value>,
    Response = Value,
    Error = lambda_runtime::Error,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    service_fn(move |event: LambdaEvent<Value>| {
        let run = runs.bump();
        async move {
            tokio::time::sleep(delay).await;
            Ok::<_, lambda_runtime::Error>(
                json!({"run": run, "order": event.payload["order_id"], "request": event.context.request_id}),
            )
        }
    })
}

fn lambda_event(payload: Value, request_id: &str) -> LambdaEvent<Value> {
    let mut context = lambda_runtime::Context::default();
    context.request_id = request_id.into();
    context.deadline = now_ms() + 30_000;
    LambdaEvent::new(payload, context)
}

async fn duplicate_event_runs_once_and_replays_an_identical_output(f: Fixture) {
    let runs = Runs::default();
    let function = IdempotentFunction::new(f.store.clone(), "consumer").key_pointers(["/event_id"]);
    let mut svc = IdempotentEventLayer::new(function)
        .layer(counting_event_handler(runs.clone(), Duration::ZERO));
    let payload = json!({"event_id": "e1", "order_id": "o1"});
    let first = svc
        .ready()
        .await
        .unwrap()
        .call(lambda_event(payload.clone(), "req-1"))
        .await
        .unwrap();
    let second = svc
        .ready()
        .await
        .unwrap()
        .call(lambda_event(payload, "req-2"))
        .await
        .unwrap();
    assert_eq!(
        first, second,
        "the output is replayed, including the first request id"
    );
    assert_eq!(first["request"], "req-1");
    assert_eq!(runs.count(), 1);
    // A different key runs.
    svc.ready()
        .await
        .unwrap()
        .call(lambda_event(json!({"event_id": "e2"}), "req-3"))
        .await
        .unwrap();
    assert_eq!(runs.count(), 2);
}

async fn concurrent_duplicates_run_once_and_the_rest_are_typed_in_progress(f: Fixture) {
    let runs = Runs::default();
    let function = IdempotentFunction::new(f.store.clone(), "consumer").key_pointers(["/event_id"]);
    let svc = IdempotentEventLayer::new(function).layer(counting_event_handler(
        runs.clone(),
        Duration::from_millis(300),
    ));
    let barrier = Arc::new(tokio::sync::Barrier::new(10));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let svc = svc.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            svc.oneshot(lambda_event(
                json!({"event_id": "same"}),
                &format!("req-{i}"),
            ))
            .await
        }));
    }
    let mut ok = 0;
    let mut in_progress = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => ok += 1,
            Err(err @ EventError::InProgress { retry_after, .. }) => {
                assert!(retry_after > Duration::ZERO);
                // The error carries the record that holds the key.
                let existing = err.existing_record().expect("the in-progress record");
                assert_eq!(
                    existing.status,
                    lambda_idempotency::store::Status::InProgress
                );
                assert!(existing.expires_at_s > now_ms() / 1000);
                assert!(existing.response.is_none());
                in_progress += 1
            }
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert_eq!(runs.count(), 1);
    assert_eq!(ok, 1);
    assert_eq!(in_progress, 9);
    let diagnostic: lambda_runtime::Diagnostic = EventError::<lambda_runtime::Error>::InProgress {
        record_id: "r".into(),
        retry_after: Duration::from_secs(3),
        existing: None,
    }
    .into();
    assert_eq!(diagnostic.error_type, "Idempotency.InProgress");
}

async fn handler_error_releases_so_the_retry_runs(f: Fixture) {
    let runs = Runs::default();
    let function = IdempotentFunction::new(f.store.clone(), "charge").key_pointers(["/payment_id"]);
    let arg = json!({"payment_id": "p1"});
    let r1: Result<String, _> = function
        .call(arg.clone(), |_| async {
            runs.bump();
            Err("provider timeout")
        })
        .await;
    assert!(matches!(r1, Err(EventError::Handler("provider timeout"))));
    let r2: Result<String, EventError<&str>> = function
        .call(arg.clone(), |_| async {
            runs.bump();
            Ok("charged".into())
        })
        .await;
    assert_eq!(r2.unwrap(), "charged");
    let r3: Result<String, EventError<&str>> = function
        .call(arg, |_| async {
            runs.bump();
            Ok("again".into())
        })
        .await;
    assert_eq!(r3.unwrap(), "charged");
    assert_eq!(runs.count(), 2);
}

async fn validation_mismatch_is_a_distinct_error(f: Fixture) {
    let function = IdempotentFunction::new(f.store.clone(), "charge")
        .key_pointers(["/payment_id"])
        .validate(["/amount"]);
    let ok: Result<i64, EventError<String>> = function
        .call(
            json!({"payment_id": "p1", "amount": 5, "note": "a"}),
            |v| async move { Ok(v["amount"].as_i64().unwrap()) },
        )
        .await;
    assert_eq!(ok.unwrap(), 5);
    // Same key, a field outside the validation set changed: replay.
    let replay: Result<i64, EventError<String>> = function
        .call(
            json!({"payment_id": "p1", "amount": 5, "note": "b"}),
            |_| async { Ok(-1) },
        )
        .await;
    assert_eq!(replay.unwrap(), 5);
    let mismatch: Result<i64, EventError<String>> = function
        .call(json!({"payment_id": "p1", "amount": 9}), |_| async {
            Ok(-1)
        })
        .await;
    let err = mismatch.unwrap_err();
    assert!(matches!(err, EventError::PayloadMismatch { .. }), "{err}");
    assert_eq!(err.error_type(), "Idempotency.PayloadMismatch");
    // The error carries the completed record and its stored output.
    let existing = err.existing_record().expect("the completed record");
    assert_eq!(
        existing.status,
        lambda_idempotency::store::Status::Completed
    );
    let stored = existing.response.as_ref().expect("its stored output");
    assert_eq!(stored.body.bytes(), b"5");
}

async fn missing_key_is_an_error_or_passes_through(f: Fixture) {
    let runs = Runs::default();
    let strict = IdempotentFunction::new(f.store.clone(), "consumer").key_pointers(["/event_id"]);
    let err = strict
        .call(json!({"other": 1}), |_| async {
            runs.bump();
            Ok::<_, String>(1)
        })
        .await
        .unwrap_err();
    assert!(matches!(err, EventError::KeyMissing { .. }));
    assert!(err.to_string().contains("consumer"));
    let lenient = strict.clone().pass_through_missing_key(true);
    for _ in 0..2 {
        let out = lenient
            .call_with_context(json!({"event_id": null}), |_, ctx| {
                runs.bump();
                async move { Ok::<_, String>(ctx.is_none()) }
            })
            .await
            .unwrap();
        assert!(out, "no idempotency context without a key");
    }
    assert_eq!(runs.count(), 2);
    assert_eq!(f.requests(), 0);
}

fn message(id: &str, body: Value) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.body = Some(body.to_string());
    m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:orders".into());
    m
}

/// The ids a partial batch response names, in order.
fn failed_ids(response: &aws_lambda_events::event::sqs::SqsBatchResponse) -> Vec<&str> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect()
}

fn batch(messages: Vec<SqsMessage>) -> SqsEvent {
    let mut e = SqsEvent::default();
    e.records = messages;
    e
}

async fn batch_reports_exactly_the_failing_and_in_progress_records(f: Fixture) {
    let runs = Runs::default();
    let function = IdempotentFunction::new(f.store.clone(), "consumer").validate(["/order"]);
    let processor = SqsBatch::new(function.clone()).key_body_pointer("/event_id");

    // "busy" is being processed by another invocation right now: its
    // handler runs (its claim is won) until the batch is done, however slow
    // the machine (a fixed 800 ms once ran out before the batch reached it).
    let started = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let busy = {
        let function = function.clone();
        let (started, release) = (started.clone(), release.clone());
        tokio::spawn(async move {
            // Same record as the batch's key: function name + the event id.
            function
                .key_pointers(["/event_id"])
                .call(json!({"event_id": "busy", "order": 4}), |_| async move {
                    started.notify_one();
                    release.notified().await;
                    Ok::<_, String>(4)
                })
                .await
        })
    };
    started.notified().await;

    let event = batch(vec![
        message("m1", json!({"event_id": "a", "order": 1})),
        message("m2", json!({"event_id": "a", "order": 1})), // duplicate inside the batch
        message("m3", json!({"event_id": "boom", "order": 2})),
        message("m4", json!({"event_id": "b", "order": 3})),
        message("m5", json!({"event_id": "busy", "order": 4})),
        message("m6", json!({"event_id": "a", "order": 99})), // same key, other payload
    ]);
    let response = processor
        .process(event, |msg, _ctx| {
            let runs = runs.clone();
            async move {
                runs.bump();
                let body: Value = serde_json::from_str(msg.body.as_deref().unwrap()).unwrap();
                if body["event_id"] == "boom" {
                    Err(format!("cannot process {}", body["event_id"]))
                } else {
                    Ok(body["order"].as_i64().unwrap())
                }
            }
        })
        .await
        .unwrap();
    let mut failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    failed.sort();
    release.notify_one();
    assert_eq!(failed, ["m3", "m5", "m6"]);
    assert_eq!(
        runs.count(),
        3,
        "a, boom and b ran; the duplicate replayed; busy and the mismatch did not run"
    );
    assert_eq!(busy.await.unwrap().unwrap(), 4);
}

async fn redelivered_batch_does_not_run_completed_records_again(f: Fixture) {
    let runs = Runs::default();
    let processor = SqsBatch::new(IdempotentFunction::new(f.store.clone(), "consumer"));
    let make = || {
        batch(vec![
            message("m1", json!({"n": 1})),
            message("m2", json!({"n": 2})),
        ])
    };
    let handler = |msg: SqsMessage, _| {
        let runs = runs.clone();
        async move {
            runs.bump();
            if msg.message_id.as_deref() == Some("m2") && runs.count() < 3 {
                Err("transient")
            } else {
                Ok(())
            }
        }
    };
    let first = processor.process(make(), handler).await.unwrap();
    assert_eq!(first.batch_item_failures.len(), 1);
    assert_eq!(first.batch_item_failures[0].item_identifier, "m2");
    // SQS redelivers the whole batch (same message ids): only m2 runs.
    let second = processor.process(make(), handler).await.unwrap();
    assert!(second.batch_item_failures.is_empty());
    assert_eq!(runs.count(), 3);
}

async fn fifo_batch_fails_everything_after_the_first_failure(f: Fixture) {
    let runs = Runs::default();
    let processor = SqsBatch::new(IdempotentFunction::new(f.store.clone(), "consumer"));
    let mut messages = vec![
        message("m1", json!(1)),
        message("m2", json!(2)),
        message("m3", json!(3)),
    ];
    for m in &mut messages {
        m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:orders.fifo".into());
    }
    let response = processor
        .process(batch(messages), |msg, _| {
            let runs = runs.clone();
            async move {
                runs.bump();
                if msg.message_id.as_deref() == Some("m2") {
                    Err("no")
                } else {
                    Ok(())
                }
            }
        })
        .await
        .unwrap();
    assert_eq!(failed_ids(&response), ["m2", "m3"]);
    assert_eq!(runs.count(), 2, "m3 was not attempted out of order");
}

async fn lambda_deadline_sets_the_lease(f: Fixture) {
    // With a registered deadline in the past + 0 margin, the lease is already
    // over when the call ends: a concurrent duplicate may take over at once.
    let mut context = lambda_runtime::Context::default();
    context.deadline = now_ms() + 100;
    let function = IdempotentFunction::new(f.store.clone(), "consumer")
        .lease_margin(Duration::ZERO)
        .with_context(&context);
    let slow = {
        let function = function.clone();
        tokio::spawn(async move {
            function
                .call(json!("k"), |_| async {
                    tokio::time::sleep(Duration::from_millis(600)).await;
                    Ok::<_, String>("slow".to_owned())
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(250)).await;
    let fast = function
        .call(json!("k"), |_| async { Ok::<_, String>("fast".to_owned()) })
        .await
        .unwrap();
    assert_eq!(fast, "fast", "the first lease ended at the Lambda deadline");
    // The slow call's completion is fenced: its output is stored nowhere, so
    // its call fails (to be delivered again), and a duplicate replays the
    // newer attempt's.
    let slow = slow.await.unwrap().unwrap_err();
    assert_eq!(slow.error_type(), "Idempotency.CompletionFailed", "{slow}");
    let again = function
        .call(json!("k"), |_| async {
            Ok::<_, String>("again".to_owned())
        })
        .await
        .unwrap();
    assert_eq!(again, "fast");
}

/// The sample event `events/<name>`, as JSON.
pub(crate) fn sample(name: &str) -> Value {
    let path = format!("{}/../events/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[tokio::test]
async fn the_example_consumer_processes_the_sample_events_once() {
    let client = integration_tests::client().await;
    let idempotency = integration_tests::create_table(&client).await;
    let orders = integration_tests::orders_table(&client).await;
    // Its calls recorded as order-events' (scripts/check-iam.py).
    let function = integration_tests::iam_record::dynamodb_client("order-events").await;
    let consumer = order_events::Consumer::new(function, &idempotency, &orders);
    let mut context = lambda_runtime::Context::default();
    context.deadline = now_ms() + 30_000;

    // The batch holds evt-1001 twice (two message ids) and evt-1002.
    let out = consumer
        .handle(sample("sqs-order-events-batch.json"), &context)
        .await
        .unwrap();
    let out = serde_json::to_value(out).unwrap();
    assert_eq!(out["batchItemFailures"], json!([]));

    // The same evt-1001 delivered again by direct async invoke: replayed.
    let direct = serde_json::to_value(
        consumer
            .handle(sample("async-invoke-order-event.json"), &context)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(direct["order_id"], "ord-1");
    assert_eq!(direct["sent"], 1);

    let scan = client
        .scan()
        .table_name(&orders)
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let mut sent: Vec<(String, String)> = scan
        .items()
        .iter()
        .map(|i| {
            (
                i["about_order"].as_s().unwrap().clone(),
                i["sent"].as_n().unwrap().clone(),
            )
        })
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        [
            ("ord-1".to_owned(), "1".to_owned()),
            ("ord-2".to_owned(), "1".to_owned())
        ],
        "one confirmation per event"
    );

    // The same event id with another order is refused with a typed error.
    let mut other = sample("async-invoke-order-event.json");
    other["order_id"] = json!("ord-9");
    let err = consumer.handle(other, &context).await.unwrap_err();
    assert_eq!(err.error_type, "Idempotency.PayloadMismatch", "{err:?}");
    // A payload that is neither shape is a clear error.
    let err = consumer
        .handle(json!({"hello": 1}), &context)
        .await
        .unwrap_err();
    assert!(
        err.error_message
            .contains("neither an SQS event nor an order event"),
        "{err:?}"
    );
    // An event the handler refuses: its claim is released (DeleteItem), so
    // a redelivery runs again and is refused again, not replayed.
    let mut refused = sample("async-invoke-order-event.json");
    refused["event_id"] = json!("evt-refused");
    refused["type"] = json!("OrderCancelled");
    for _ in 0..2 {
        let err = consumer
            .handle(refused.clone(), &context)
            .await
            .unwrap_err();
        assert!(err.error_message.contains("only OrderPlaced"), "{err:?}");
    }
}

async fn oversized_output_case(store: impl lambda_idempotency::Store + 'static) {
    let runs = Runs::default();
    let function = IdempotentFunction::new(store, "export");
    // Hex of a pseudo-random sequence: gzip halves it at best, far above 200 bytes.
    let mut x: u64 = 0x853c_49e6_748f_ea9b;
    let big: String = (0..10_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from_digit((x % 16) as u32, 16).unwrap_or('0')
        })
        .collect();
    let first: Result<String, EventError<String>> = function
        .call(json!({"n": 1}), |_| async {
            runs.bump();
            Ok(big.clone())
        })
        .await;
    assert_eq!(
        first.unwrap().len(),
        10_000,
        "the first caller gets the output"
    );
    let second: Result<String, EventError<String>> = function
        .call(json!({"n": 1}), |_| async {
            runs.bump();
            Ok(String::new())
        })
        .await;
    let err = second.unwrap_err();
    assert!(matches!(err, EventError::OutputTooLarge { .. }), "{err}");
    assert_eq!(err.error_type(), "Idempotency.OutputTooLarge");
    assert_eq!(runs.count(), 1, "never run again");
}

#[tokio::test]
async fn oversized_output_is_a_distinct_error_on_the_memory_store() {
    oversized_output_case(lambda_idempotency::MemoryStore::with_max_response_bytes(
        200,
    ))
    .await;
}

#[tokio::test]
async fn oversized_output_is_a_distinct_error_on_dynamodb_local() {
    let (store, _) = integration_tests::dynamo_store().await;
    let store = integration_tests::dynamo_builder_like(&store)
        .max_response_bytes(200)
        .open()
        .unwrap();
    oversized_output_case(store).await;
}

/// An event's record lives as long as its message can be delivered again:
/// `IDEMPOTENCY_EXPIRES_AFTER_SECONDS` (the template sets it to the queues'
/// retention) is the record's life, and a bad value is refused.
#[tokio::test]
async fn the_example_consumer_keeps_records_for_the_configured_redelivery_window() {
    let client = integration_tests::client().await;
    let idempotency = integration_tests::create_table(&client).await;
    let orders = integration_tests::orders_table(&client).await;
    let four_days = 345_600u64;
    let env = |expiry: &'static str| {
        let (idempotency, orders) = (idempotency.clone(), orders.clone());
        move |name: &str| match name {
            "IDEMPOTENCY_TABLE" => Some(idempotency.clone()),
            "ORDERS_TABLE" => Some(orders.clone()),
            "IDEMPOTENCY_EXPIRES_AFTER_SECONDS" => Some(expiry.to_owned()),
            _ => None,
        }
    };
    let consumer = order_events::Consumer::from_lookup(client.clone(), env("345600")).unwrap();
    let mut context = lambda_runtime::Context::default();
    context.deadline = now_ms() + 30_000;
    consumer
        .handle(sample("async-invoke-order-event.json"), &context)
        .await
        .unwrap();
    let store = lambda_idempotency::DynamoStore::builder(client.clone(), &idempotency)
        .open()
        .unwrap();
    let page = lambda_idempotency::store::SweepStore::scan(&store, None, 10)
        .await
        .unwrap();
    assert_eq!(page.records.len(), 1);
    let expires = page.records[0].record.expires_at_s;
    let now_s = now_ms() / 1000;
    assert!(
        expires + 60 >= now_s + four_days && expires <= now_s + four_days,
        "expires {expires}, now {now_s}"
    );
    // Absurd lives (none, or past what expiry arithmetic and TTL hold) too.
    for bad in ["0", "-1", "a day", "31536001", "18446744073709551615"] {
        let err = order_events::Consumer::from_lookup(client.clone(), env(bad)).unwrap_err();
        assert!(err.contains("IDEMPOTENCY_EXPIRES_AFTER_SECONDS"), "{err}");
    }
}

/// A message attribute `name` of `data_type` (`String`, `Number`) `value`.
fn with_attribute(mut m: SqsMessage, name: &str, data_type: &str, value: &str) -> SqsMessage {
    let mut attribute = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
    attribute.data_type = Some(data_type.into());
    attribute.string_value = Some(value.into());
    m.message_attributes.insert(name.into(), attribute);
    m
}

async fn sqs_keys_from_a_message_attribute_keep_their_types_apart(f: Fixture) {
    let runs = Runs::default();
    let processor = SqsBatch::new(IdempotentFunction::new(f.store.clone(), "consumer"))
        .key_message_attribute("order");
    let event = batch(vec![
        with_attribute(message("m1", json!({"n": 1})), "order", "String", "5"),
        // The same attribute value on another message: replays.
        with_attribute(message("m2", json!({"n": 1})), "order", "String", "5"),
        // The number 5 is another key than the string "5".
        with_attribute(message("m3", json!({"n": 1})), "order", "Number", "5"),
        // No such attribute: no key, an error for that record only.
        message("m4", json!({"n": 1})),
    ]);
    let response = processor
        .process(event, |_msg, _ctx| {
            let runs = runs.clone();
            async move {
                runs.bump();
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    assert_eq!(failed_ids(&response), ["m4"]);
    assert_eq!(runs.count(), 2, "the string 5 once, the number 5 once");
}

async fn fifo_deduplication_id_and_a_closure_are_key_sources(f: Fixture) {
    let runs = Runs::default();
    let handler = |_msg: SqsMessage, _ctx| {
        let runs = runs.clone();
        async move {
            runs.bump();
            Ok::<_, String>(())
        }
    };
    let fifo = |id: &str, dedup: &str| {
        let mut m = message(id, json!({"n": 1}));
        m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:orders.fifo".into());
        m.attributes
            .insert("MessageDeduplicationId".into(), dedup.into());
        m
    };
    let by_dedup = SqsBatch::new(IdempotentFunction::new(f.store.clone(), "fifo-consumer"))
        .key_deduplication_id();
    let response = by_dedup
        .process(
            batch(vec![
                fifo("m1", "d-1"),
                fifo("m2", "d-1"),
                fifo("m3", "d-2"),
            ]),
            handler,
        )
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(runs.count(), 2, "d-1 once, d-2 once");

    let by_closure = SqsBatch::new(IdempotentFunction::new(f.store.clone(), "closure-consumer"))
        .key_fn(|m: &SqsMessage| m.body.as_deref().map(|b| b.len().to_string()));
    let response = by_closure
        .process(
            batch(vec![
                message("m1", json!({"n": 1})),
                message("m2", json!({"n": 2})),
                message("m3", json!({"n": 10})),
            ]),
            handler,
        )
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        runs.count(),
        4,
        "two bodies of 7 bytes share a key; 8 bytes is another"
    );
}

/// A JSON text `{"event_id":..,"deep":[[..1..]]}` whose containers nest
/// `depth` levels (the object is the first).
pub(crate) fn nested_json(event_id: &str, depth: usize) -> String {
    format!(
        r#"{{"event_id":"{event_id}","deep":{}1{}}}"#,
        "[".repeat(depth - 1),
        "]".repeat(depth - 1)
    )
}

/// Issue 41, item 6, on the event path: serde_json reads JSON nested at
/// most 127 levels deep. A body nested deeper was taken for one without a
/// key: `KeyMissing` (telling the producer to send a key it sent), or, with
/// `pass_through_missing_key`, a run without idempotency. It now fails its
/// record, is never run, and its neighbours are unaffected; the same for a
/// body whose validated fields cannot be read.
async fn sqs_body_nested_too_deep_fails_its_record_and_never_runs(f: Fixture) {
    let raw = |id: &str, body: String| {
        let mut m = message(id, json!({}));
        m.body = Some(body);
        m
    };
    for pass_through in [false, true] {
        let name = format!("deep-{pass_through}");
        let keyed_by_body = SqsBatch::new(
            IdempotentFunction::new(f.store.clone(), name.clone())
                .pass_through_missing_key(pass_through),
        )
        .key_body_pointer("/event_id");
        let validated = SqsBatch::new(
            IdempotentFunction::new(f.store.clone(), format!("{name}-validated"))
                .validate(["/event_id"])
                .pass_through_missing_key(pass_through),
        );
        for (keys, processor) in [("body pointer", keyed_by_body), ("validated", validated)] {
            let runs = Runs::default();
            let event = batch(vec![
                raw("at-limit", nested_json("e1", 127)),
                raw("too-deep", nested_json("e2", 128)),
                raw("far-too-deep", nested_json("e3", 5_000)),
            ]);
            let response = processor
                .process(event, |msg, _ctx| {
                    let runs = runs.clone();
                    async move {
                        runs.bump();
                        Ok::<_, String>(msg.message_id)
                    }
                })
                .await
                .unwrap();
            assert_eq!(
                failed_ids(&response),
                ["too-deep", "far-too-deep"],
                "{keys}, pass_through_missing_key({pass_through})"
            );
            assert_eq!(
                runs.count(),
                1,
                "only the body at the limit ran ({keys}, pass_through_missing_key({pass_through}))"
            );
        }
    }
}
