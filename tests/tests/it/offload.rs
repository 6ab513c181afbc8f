//! `S3Offload`: responses over the store's item limit kept in S3 and
//! replayed byte for byte, on DynamoDB Local and the in-memory store, against
//! the local S3-compatible server started by `scripts/s3-local.sh` (moto).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::config::SharedInterceptor;
use aws_sdk_s3::primitives::ByteStream;
use http::StatusCode;
use integration_tests::{noise, RequestCounter};
use lambda_http::{Body, Request, Response};
use lambda_idempotency::{
    event::EventError,
    http::REPLAYED_HEADER,
    store::offload::S3Offload,
    store::{
        CompleteRequest, Record, Status, StoredBody, StoredResponse, StuckRequest, SweepStore,
    },
    ErrorKind, IdempotencyLayer, IdempotentFunction, Store,
};
use serde_json::json;
use tower::Layer;

use crate::fixture::{
    call, claim_lease, claim_request, claimed, now_ms, on_both_stores, post, Fixture, Handler, Runs,
};

/// The endpoint of the harness's S3 server; a missing server fails the
/// tests (it must not skip them).
fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL_S3").unwrap_or_else(|_| {
        panic!(
            "AWS_ENDPOINT_URL_S3 is not set: these tests run against a local S3 server. Run \
             them with `make test` (or `scripts/dynamodb-local.sh scripts/s3-local.sh cargo test`)."
        )
    })
}

/// An S3 client for `endpoint`, counting its requests, at most `attempts`
/// attempts per call.
async fn s3_client(
    endpoint: String,
    counter: &RequestCounter,
    attempts: u32,
) -> aws_sdk_s3::Client {
    let shared = aws_config::from_env()
        .region(aws_config::Region::new("us-east-1"))
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(attempts))
        .load()
        .await;
    let config = aws_sdk_s3::config::Builder::from(&shared)
        .endpoint_url(endpoint)
        .force_path_style(true)
        .interceptor(SharedInterceptor::new(counter.clone()))
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// A fresh bucket on the harness's server, a client for it and the counter
/// of that client's requests (bucket creation not counted).
struct Bucket {
    name: String,
    client: aws_sdk_s3::Client,
    setup: aws_sdk_s3::Client,
    requests: RequestCounter,
}

impl Bucket {
    async fn new() -> Bucket {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let name = format!(
            "offload-{}-{}-{}",
            std::process::id(),
            crate::fixture::now_ms(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        let setup = s3_client(endpoint(), &RequestCounter::default(), 3).await;
        setup
            .create_bucket()
            .bucket(&name)
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "create bucket {name}: {}",
                    aws_sdk_s3::error::DisplayErrorContext(e)
                )
            });
        // The offload's own client: its calls are recorded as the S3
        // offload feature's (scripts/check-iam.py); the harness looks at
        // the bucket through `setup`.
        let requests = RequestCounter::default();
        let config = integration_tests::iam_record::s3_config("feature-s3-offload")
            .await
            .retry_config(aws_sdk_s3::config::retry::RetryConfig::standard().with_max_attempts(3))
            .interceptor(SharedInterceptor::new(requests.clone()))
            .build();
        let client = aws_sdk_s3::Client::from_conf(config);
        Bucket {
            name,
            client,
            setup,
            requests,
        }
    }

    /// `store` with responses over the default limit offloaded here.
    fn offload(&self, store: Arc<dyn SweepStore>) -> S3Offload<Arc<dyn SweepStore>> {
        S3Offload::new(store, self.client.clone(), &self.name).key_prefix("it/")
    }

    /// Every key in the bucket, sorted.
    async fn keys(&self) -> Vec<String> {
        let listed = self
            .setup
            .list_objects_v2()
            .bucket(&self.name)
            .send()
            .await
            .expect("list the bucket");
        let mut keys: Vec<String> = listed
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect();
        keys.sort();
        keys
    }
}

/// The one record of a fresh store, as stored (pointers not followed).
async fn only_record(store: &dyn SweepStore) -> Record {
    let page = store.scan(None, 10).await.expect("scan");
    assert_eq!(page.records.len(), 1, "{:?}", page.records);
    page.records.into_iter().next().expect("one record").record
}

/// A 500 KB binary body that gzip cannot shrink: over DynamoDB's 400 KB item
/// limit in any form.
fn large_body(seed: u64) -> Vec<u8> {
    noise(500_000, seed)
}

/// A handler answering 201 with a large binary body, counting its runs.
fn large_handler(runs: Runs, body: Vec<u8>) -> impl Handler {
    tower::service_fn(move |_req: Request| {
        let runs = runs.clone();
        let body = body.clone();
        async move {
            runs.bump();
            Ok::<_, lambda_http::Error>(
                Response::builder()
                    .status(201)
                    .header("content-type", "application/octet-stream")
                    .header("set-cookie", "a=1")
                    .header("set-cookie", "b=2")
                    .body(Body::Binary(body))?,
            )
        }
    })
}

/// A response over the item limit goes through the middleware, is kept in
/// S3 and replays byte for byte, status, headers and body kind included.
async fn a_large_http_response_replays_byte_for_byte(fixture: Fixture) {
    let bucket = Bucket::new().await;
    let runs = Runs::default();
    let body = large_body(1);
    let mut svc = IdempotencyLayer::new(bucket.offload(fixture.store.clone()))
        .layer(large_handler(runs.clone(), body.clone()));

    let first = call(&mut svc, post("/exports", Some("k1"), "{}")).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(first.body().as_ref(), body.as_slice());

    let replay = call(&mut svc, post("/exports", Some("k1"), "{}")).await;
    assert_eq!(runs.count(), 1, "the handler never runs again");
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(replay.headers()["content-type"], "application/octet-stream");
    let cookies: Vec<_> = replay.headers().get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"]);
    assert!(
        matches!(replay.body(), Body::Binary(b) if b == &body),
        "the body replays byte for byte, as binary"
    );

    // The store holds a pointer, not the response nor the too-large marker.
    let record = only_record(fixture.store.as_ref()).await;
    let stored = record.response.expect("a completed record");
    assert_eq!(stored.status, 0, "a pointer: {stored:?}");
    assert!(stored.body.bytes().len() < 1_000);
    assert_eq!(bucket.keys().await.len(), 1);
}

/// An event output over the item limit replays through the event path.
async fn a_large_event_output_replays(fixture: Fixture) {
    let bucket = Bucket::new().await;
    let runs = Runs::default();
    let function = IdempotentFunction::new(bucket.offload(fixture.store.clone()), "export");
    // Hex of noise: text that gzip halves at best, 1 MB, far over the limit.
    let output: String = noise(500_000, 2)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let first: Result<String, EventError<String>> = function
        .call(json!({"n": 1}), |_| async {
            runs.bump();
            Ok(output.clone())
        })
        .await;
    assert_eq!(first.expect("the first call succeeds"), output);
    let again: Result<String, EventError<String>> = function
        .call(json!({"n": 1}), |_| async {
            runs.bump();
            Ok(String::from("ran twice"))
        })
        .await;
    assert_eq!(again.expect("the duplicate replays"), output);
    assert_eq!(runs.count(), 1);
    assert_eq!(bucket.keys().await.len(), 1);
}

/// Each attempt writes its own object; a stale attempt's completion is
/// fenced, leaves no pointer to its object and deletes it, and the newer
/// attempt's response is the one that replays.
async fn a_fenced_completion_deletes_its_object_and_leaves_no_pointer(fixture: Fixture) {
    let bucket = Bucket::new().await;
    let store = bucket.offload(fixture.store.clone());
    let stale = claim_lease(&store, "r1", "stale", 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let newer = claimed(
        store
            .claim(&claim_request("r1", "newer", 60_000))
            .await
            .expect("takeover"),
    );
    assert_eq!(newer.attempt, stale.attempt + 1, "a takeover");
    let expires = crate::fixture::now_ms() / 1000 + 3600;

    let stale_response = StoredResponse::new(200, vec![], StoredBody::Binary(large_body(3)));
    let err = store
        .complete(CompleteRequest::new(&stale, &stale_response, expires))
        .await
        .expect_err("the stale attempt is fenced");
    assert_eq!(err.kind(), ErrorKind::Fenced);
    assert_eq!(
        bucket.keys().await,
        Vec::<String>::new(),
        "its object is deleted"
    );

    let newer_response = StoredResponse::new(200, vec![], StoredBody::Binary(large_body(4)));
    store
        .complete(CompleteRequest::new(&newer, &newer_response, expires))
        .await
        .expect("the newer attempt completes");
    assert_eq!(
        bucket.keys().await,
        [format!("it/r1/{}-newer", newer.attempt)],
        "one object, named after the attempt that wrote it"
    );
    let replayed = store.get("r1").await.expect("get").expect("present");
    assert_eq!(replayed.record.response, Some(newer_response));
    let pointer = fixture
        .store
        .get("r1")
        .await
        .expect("get")
        .expect("present")
        .record
        .response
        .expect("completed");
    let pointer = String::from_utf8(pointer.body.bytes().to_vec()).expect("a JSON pointer");
    assert!(
        pointer.contains(&format!("it/r1/{}-newer", newer.attempt)),
        "{pointer}"
    );
}

/// With S3 unreachable the completion fails: the event fails (so it is
/// delivered again) and the key is not left completed, nor is any marker.
async fn s3_down_fails_the_completion_and_leaves_the_key_uncompleted(fixture: Fixture) {
    // A port nothing listens on.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    };
    let requests = RequestCounter::default();
    let down = s3_client(format!("http://127.0.0.1:{closed}"), &requests, 1).await;
    let store = S3Offload::new(fixture.store.clone(), down, "nowhere");

    let function = IdempotentFunction::new(store.clone(), "export");
    let big: String = noise(450_000, 6)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let result: Result<String, EventError<String>> = function
        .call(json!({"n": 2}), |_| async { Ok(big.clone()) })
        .await;
    match result {
        Err(EventError::CompletionFailed { source, .. }) => {
            assert_eq!(source.kind(), ErrorKind::StoreUnavailable, "{source}");
            assert!(source.to_string().contains("s3://nowhere/"), "{source}");
        }
        other => panic!(
            "expected a failed completion, got {:?}",
            other.map(|o| o.len())
        ),
    }
    assert!(requests.get() >= 1, "the S3 write was attempted");
    let record = only_record(fixture.store.as_ref()).await;
    assert_eq!(record.status, Status::InProgress, "not completed");
    assert_eq!(record.response, None);

    // Through the middleware, the failed completion is what a failed store
    // write is there: the client gets the handler's true response (its work
    // is done), nothing replays it, and a retry while the lease holds gets a
    // 409 rather than a response that was never recorded.
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(store).layer(large_handler(runs.clone(), large_body(9)));
    let first = call(&mut svc, post("/exports", Some("k3"), "{}")).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let retry = call(&mut svc, post("/exports", Some("k3"), "{}")).await;
    assert_eq!(retry.status(), StatusCode::CONFLICT);
    assert!(retry.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(runs.count(), 1);
    let page = fixture.store.scan(None, 10).await.expect("scan");
    assert!(
        page.records
            .iter()
            .all(|r| r.record.status == Status::InProgress && r.record.response.is_none()),
        "no key completed: {:?}",
        page.records
            .iter()
            .map(|r| r.record.status)
            .collect::<Vec<_>>()
    );
}

/// An object altered (or removed) after the completion is refused on
/// replay: the middleware answers 503, the handler does not run, and a read
/// of the record says what is wrong.
async fn a_tampered_object_is_refused_on_replay(fixture: Fixture) {
    let bucket = Bucket::new().await;
    let runs = Runs::default();
    let store = bucket.offload(fixture.store.clone());
    let mut svc =
        IdempotencyLayer::new(store.clone()).layer(large_handler(runs.clone(), large_body(7)));
    let first = call(&mut svc, post("/exports", Some("k2"), "{}")).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let keys = bucket.keys().await;
    assert_eq!(keys.len(), 1);
    let record_id = only_record(fixture.store.as_ref()).await.id;

    // Same size, one byte changed.
    let object = bucket
        .setup
        .get_object()
        .bucket(&bucket.name)
        .key(&keys[0])
        .send()
        .await
        .expect("get")
        .body
        .collect()
        .await
        .expect("read")
        .into_bytes();
    let mut tampered = object.to_vec();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    bucket
        .setup
        .put_object()
        .bucket(&bucket.name)
        .key(&keys[0])
        .body(ByteStream::from(tampered))
        .send()
        .await
        .expect("overwrite");

    let replay = call(&mut svc, post("/exports", Some("k2"), "{}")).await;
    assert_eq!(replay.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(replay.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(runs.count(), 1, "the handler does not run again");
    let err = store.get(&record_id).await.expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::CorruptRecord);
    assert!(err.to_string().contains("altered"), "{err}");

    bucket
        .setup
        .delete_object()
        .bucket(&bucket.name)
        .key(&keys[0])
        .send()
        .await
        .expect("delete");
    let err = store.get(&record_id).await.expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::CorruptRecord);
    assert!(err.to_string().contains("missing"), "{err}");
}

/// Responses that fit the store never touch S3; one that does not, does.
async fn small_responses_never_touch_s3(fixture: Fixture) {
    let bucket = Bucket::new().await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(bucket.offload(fixture.store.clone())).layer(
        crate::fixture::counting_handler(runs.clone(), Duration::ZERO),
    );
    let first = call(&mut svc, post("/orders", Some("small"), "{\"n\":1}")).await;
    let replay = call(&mut svc, post("/orders", Some("small"), "{\"n\":1}")).await;
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(replay.body().as_ref(), first.body().as_ref());
    assert_eq!(runs.count(), 1);
    assert_eq!(
        bucket.requests.get(),
        0,
        "no S3 request for a small response"
    );
    let record = only_record(fixture.store.as_ref()).await;
    assert_eq!(
        record.response.map(|r| r.status),
        Some(201),
        "stored as it is"
    );

    let mut large = IdempotencyLayer::new(bucket.offload(fixture.store.clone()))
        .layer(large_handler(Runs::default(), large_body(8)));
    call(&mut large, post("/exports", Some("large"), "{}")).await;
    assert_eq!(bucket.requests.get(), 1, "one PUT for a large response");
}

/// A pointer is only followed to its own record's objects: one that names
/// another record's object (same bucket, right size and hash, so every
/// later check would pass) or a key outside the prefix is refused before
/// anything is read from S3, so a record never replays another's response.
async fn a_pointer_to_another_records_object_is_refused_unread(fixture: Fixture) {
    let bucket = Bucket::new().await;
    let store = bucket.offload(fixture.store.clone());
    let mut svc =
        IdempotencyLayer::new(store.clone()).layer(large_handler(Runs::default(), large_body(9)));
    let first = call(&mut svc, post("/exports", Some("k-theirs"), "{}")).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let theirs = only_record(fixture.store.as_ref()).await;
    let pointer = theirs.response.clone().expect("a pointer");
    let pointer_text = String::from_utf8_lossy(pointer.body.bytes()).into_owned();

    // Another record completed, in the store itself, with that pointer, and
    // with the same pointer moved outside the prefix.
    let moved = StoredResponse::new(
        pointer.status,
        pointer.headers.clone(),
        StoredBody::Text(pointer_text.replace("\"key\":\"it/", "\"key\":\"elsewhere/")),
    );
    for (id, response) in [("a".repeat(64), pointer), ("b".repeat(64), moved)] {
        let lease = claimed(
            fixture
                .store
                .claim(&claim_request(&id, "forger", 60_000))
                .await
                .unwrap(),
        );
        let expires_at_s = crate::fixture::now_ms() / 1000 + 3600;
        fixture
            .store
            .complete(CompleteRequest::new(&lease, &response, expires_at_s))
            .await
            .unwrap();
        let reads = bucket.requests.get();
        let err = store.get(&id).await.expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::CorruptRecord, "{err}");
        assert!(
            err.to_string().contains(&id) && err.to_string().contains("it/"),
            "{err}"
        );
        assert_eq!(bucket.requests.get(), reads, "nothing read from S3");
    }
    // The record the object belongs to still replays.
    let replay = call(&mut svc, post("/exports", Some("k-theirs"), "{}")).await;
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert!(replay.headers().get(REPLAYED_HEADER).is_some());
}

on_both_stores!(
    a_pointer_to_another_records_object_is_refused_unread,
    a_large_http_response_replays_byte_for_byte,
    a_large_event_output_replays,
    a_fenced_completion_deletes_its_object_and_leaves_no_pointer,
    s3_down_fails_the_completion_and_leaves_the_key_uncompleted,
    a_tampered_object_is_refused_on_replay,
    small_responses_never_touch_s3,
    a_completion_of_a_released_record_deletes_its_object,
    a_fenced_completion_whose_record_points_to_its_object_keeps_it,
);

/// A record released by an operator while its attempt ran: the completion
/// that wrote its response to S3 finds no record (`RecordGone`), so no
/// record can point to the object, and it is deleted; the answer stays
/// `RecordGone`.
async fn a_completion_of_a_released_record_deletes_its_object(fixture: Fixture) {
    let bucket = Bucket::new().await;
    let store = bucket.offload(fixture.store.clone());
    let lease = claim_lease(&store, "r1", "me", 600_000).await;
    // Released (no recovery point: deleted) behind the attempt's back.
    fixture.store.release(&lease).await.expect("released");
    let large = StoredResponse::new(200, vec![], StoredBody::Binary(large_body(5)));
    let err = store
        .complete(CompleteRequest::new(&lease, &large, now_ms() / 1000 + 3600))
        .await
        .expect_err("the record is gone");
    assert_eq!(err.kind(), ErrorKind::RecordGone, "{err}");
    assert_eq!(
        bucket.keys().await,
        Vec::<String>::new(),
        "no record points to the object: it is deleted"
    );
    assert!(fixture.store.get("r1").await.expect("get").is_none());
}

/// A store whose completion is applied but answered `Fenced`: what a
/// transaction retried after its answer was lost reports (DynamoDB's
/// `TransactWriteItems` does not recognise its own completed record).
#[derive(Debug)]
struct AppliedButFenced(Arc<dyn SweepStore>);

#[async_trait::async_trait]
impl Store for AppliedButFenced {
    async fn claim(
        &self,
        request: &lambda_idempotency::store::ClaimRequest,
    ) -> Result<lambda_idempotency::store::ClaimOutcome, lambda_idempotency::Error> {
        self.0.claim(request).await
    }
    async fn complete(
        &self,
        request: CompleteRequest<'_>,
    ) -> Result<lambda_idempotency::store::Completion, lambda_idempotency::Error> {
        let lease = request.lease.clone();
        self.0.complete(request).await?;
        Err(lambda_idempotency::Error::fenced(
            &lease.record_id,
            lease.attempt,
        ))
    }
    async fn release(
        &self,
        lease: &lambda_idempotency::store::Lease,
    ) -> Result<(), lambda_idempotency::Error> {
        self.0.release(lease).await
    }
    async fn checkpoint(
        &self,
        request: lambda_idempotency::store::CheckpointRequest<'_>,
    ) -> Result<(), lambda_idempotency::Error> {
        self.0.checkpoint(request).await
    }
    async fn get(
        &self,
        record_id: &str,
    ) -> Result<Option<lambda_idempotency::store::StoredRecord>, lambda_idempotency::Error> {
        self.0.get(record_id).await
    }
}

#[async_trait::async_trait]
impl SweepStore for AppliedButFenced {
    async fn finish(
        &self,
        _listing: &lambda_idempotency::store::Listing,
        _resolved: &[String],
    ) -> Result<(), lambda_idempotency::Error> {
        Ok(())
    }
    async fn delete_expired(
        &self,
        _now_s: u64,
        _limit: usize,
    ) -> Result<u64, lambda_idempotency::Error> {
        Ok(0)
    }
    async fn stuck(
        &self,
        request: StuckRequest,
    ) -> Result<lambda_idempotency::store::StuckPage, lambda_idempotency::Error> {
        self.0.stuck(request).await
    }
    async fn resolve_stuck(
        &self,
        request: lambda_idempotency::store::ResolveRequest<'_>,
    ) -> Result<lambda_idempotency::store::Resolution, lambda_idempotency::Error> {
        self.0.resolve_stuck(request).await
    }
    async fn scan(
        &self,
        cursor: Option<lambda_idempotency::store::SweepCursor>,
        limit: usize,
    ) -> Result<lambda_idempotency::store::RecordPage, lambda_idempotency::Error> {
        self.0.scan(cursor, limit).await
    }
}

/// A completion answered `Fenced` although its pointer was written (see
/// [`AppliedButFenced`]): the record points to the object, so the object
/// is kept and the response replays; the answer stays `Fenced`.
async fn a_fenced_completion_whose_record_points_to_its_object_keeps_it(fixture: Fixture) {
    let bucket = Bucket::new().await;
    let store = bucket.offload(Arc::new(AppliedButFenced(fixture.store.clone())));
    let lease = claim_lease(&store, "r1", "me", 600_000).await;
    let large = StoredResponse::new(200, vec![], StoredBody::Binary(large_body(6)));
    let err = store
        .complete(CompleteRequest::new(&lease, &large, now_ms() / 1000 + 3600))
        .await
        .expect_err("answered fenced");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    assert_eq!(
        bucket.keys().await,
        [format!("it/r1/{}-me", lease.attempt)],
        "the record points to the object: it is kept"
    );
    let replayed = store.get("r1").await.expect("readable").expect("present");
    assert_eq!(replayed.record.response, Some(large));
}

/// The example consumer wraps its store in the offload when
/// `IDEMPOTENCY_OFFLOAD_BUCKET` names a bucket: its (small) outputs still
/// replay from the table without an S3 request, and the variable without an
/// S3 client is refused rather than ignored.
#[tokio::test]
async fn the_example_consumer_offloads_when_a_bucket_is_named() {
    let bucket = Bucket::new().await;
    let client = integration_tests::client().await;
    let idempotency = integration_tests::create_table(&client).await;
    let orders = integration_tests::orders_table(&client).await;
    let name = bucket.name.clone();
    let env = move |var: &str| match var {
        "IDEMPOTENCY_TABLE" => Some(idempotency.clone()),
        "ORDERS_TABLE" => Some(orders.clone()),
        "IDEMPOTENCY_OFFLOAD_BUCKET" => Some(name.clone()),
        _ => None,
    };
    let err = order_events::Consumer::from_lookup(client.clone(), &env)
        .expect_err("a bucket without an S3 client");
    assert!(err.contains("from_env_with_s3"), "{err}");

    let consumer = order_events::Consumer::from_lookup_with_s3(
        client.clone(),
        Some(bucket.client.clone()),
        &env,
    )
    .expect("consumer");
    let event: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/../events/async-invoke-order-event.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("sample event"),
    )
    .expect("JSON");
    let mut context = lambda_runtime::Context::default();
    context.deadline = crate::fixture::now_ms() + 30_000;
    let first = serde_json::to_value(
        consumer
            .handle(event.clone(), &context)
            .await
            .expect("handled"),
    )
    .expect("JSON");
    let again = serde_json::to_value(consumer.handle(event, &context).await.expect("replayed"))
        .expect("JSON");
    assert_eq!(first, again);
    assert_eq!(again["sent"], 1, "sent once");
    assert_eq!(bucket.requests.get(), 0, "small outputs stay in the table");
}

/// One conditional order put to hand to a completion.
fn put_order(table: &str, id: &str) -> lambda_idempotency::store::DeferredWrites {
    integration_tests::one_write(integration_tests::put_new_order(table, id))
}

/// The transactional completion carries the pointer: the handler's write
/// and the pointer commit together on DynamoDB, and a cancelled transaction
/// (nothing written) deletes its object.
#[tokio::test]
async fn a_transactional_completion_commits_the_pointer_with_the_writes() {
    let bucket = Bucket::new().await;
    let (store, _) = integration_tests::dynamo_store().await;
    let client = store.client().clone();
    let orders = integration_tests::orders_table(&client).await;
    let store = S3Offload::new(store, bucket.client.clone(), &bucket.name).key_prefix("it/");
    let expires = crate::fixture::now_ms() / 1000 + 3600;
    let large = StoredResponse::new(201, vec![], StoredBody::Binary(large_body(10)));

    let lease = claim_lease(&store, "t1", "me", 60_000).await;
    store
        .complete(
            CompleteRequest::new(&lease, &large, expires).with_writes(put_order(&orders, "o-1")),
        )
        .await
        .expect("committed");
    let order = [(
        "order_id",
        aws_sdk_dynamodb::types::AttributeValue::S("o-1".into()),
    )];
    assert!(
        integration_tests::consistent_item(&client, &orders, order)
            .await
            .is_some(),
        "the handler's write committed"
    );
    let replayed = store.get("t1").await.expect("get").expect("present");
    assert_eq!(replayed.record.response, Some(large.clone()));
    let committed_key = format!("it/t1/{}-me", lease.attempt);
    assert_eq!(bucket.keys().await, std::slice::from_ref(&committed_key));

    // o-1 exists: the transaction is cancelled, nothing of it is written.
    let lease = claim_lease(&store, "t2", "me", 60_000).await;
    let err = store
        .complete(
            CompleteRequest::new(&lease, &large, expires).with_writes(put_order(&orders, "o-1")),
        )
        .await
        .expect_err("cancelled");
    assert_eq!(err.kind(), ErrorKind::TransactionCancelled, "{err}");
    assert_eq!(
        bucket.keys().await,
        [committed_key],
        "the cancelled completion's object is deleted"
    );
    let record = store.get("t2").await.expect("get").expect("present");
    assert_eq!(record.record.status, Status::InProgress);
}

/// A store without transactions refuses deferred writes before writing
/// anything: the object written for that completion is deleted.
#[tokio::test]
async fn a_refused_transactional_completion_deletes_its_object_on_the_memory_store() {
    let bucket = Bucket::new().await;
    let store = bucket.offload(Arc::new(lambda_idempotency::MemoryStore::new()));
    let lease = claim_lease(&store, "t3", "me", 60_000).await;
    let large = StoredResponse::new(201, vec![], StoredBody::Binary(large_body(11)));
    let err = store
        .complete(
            CompleteRequest::new(&lease, &large, crate::fixture::now_ms() / 1000 + 3600)
                .with_writes(put_order("orders", "o-2")),
        )
        .await
        .expect_err("no transactions in memory");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert_eq!(bucket.keys().await, Vec::<String>::new());
    assert!(bucket.requests.get() >= 2, "written, then deleted");
}

/// A sweep's deadline reaches the DynamoDB stream listing under the offload:
/// a listing whose deadline has come reads nothing and says so (`incomplete`),
/// where the same listing without one finds the stuck record. (The offload
/// once dropped the deadline, so a listing under it read past the sweep's
/// end.)
#[tokio::test]
async fn a_stream_listing_under_the_offload_keeps_the_sweeps_deadline() {
    let bucket = Bucket::new().await;
    let (dynamo, _) = integration_tests::dynamo_store().await;
    let dynamo = integration_tests::dynamo_builder_like(&dynamo)
        .with_stream(integration_tests::streams_client().await)
        .open()
        .unwrap();
    let store = bucket.offload(Arc::new(dynamo));
    let id = "stuck-under-the-offload";
    claimed(store.claim(&claim_request(id, "a", 1)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(20)).await;

    let cutoff = now_ms();
    let late = StuckRequest::new(cutoff, 10).by(cutoff - 1);
    let page = store.stuck(late).await.unwrap();
    assert!(page.incomplete && page.records.is_empty(), "{page:?}");

    let page = store.stuck(StuckRequest::new(cutoff, 10)).await.unwrap();
    let ids: Vec<&str> = page.records.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, [id], "{page:?}");
}

crate::fixture::test_cases!(4, [
    dynamodb_transactions => crate::rare_paths::Transactional::dynamodb().await,
    postgres_transactions => crate::rare_paths::Transactional::postgres(&integration_tests::postgres_url()).await,
    postgres_pooled_transactions => crate::rare_paths::Transactional::postgres(&integration_tests::postgres_pooler_url()).await,
], [a_transactional_completion_of_a_released_record_deletes_its_object]);

/// The transactional completion of a record an operator released while
/// its attempt ran: `RecordGone` on every engine with transactions, none of
/// the handler's writes committed, and the object deleted.
async fn a_transactional_completion_of_a_released_record_deletes_its_object(
    t: crate::rare_paths::Transactional,
) {
    let bucket = Bucket::new().await;
    let store = bucket.offload(t.store.clone());
    let lease = claim_lease(&store, "r1", "me", 600_000).await;
    t.store.release(&lease).await.expect("released");
    let large = StoredResponse::new(201, vec![], StoredBody::Binary(large_body(12)));
    let err = store
        .complete(
            CompleteRequest::new(&lease, &large, now_ms() / 1000 + 3600)
                .with_writes(t.order("o-1")),
        )
        .await
        .expect_err("the record is gone");
    assert_eq!(err.kind(), ErrorKind::RecordGone, "{err}");
    assert!(!t.has_order("o-1").await, "nothing of it committed");
    assert_eq!(bucket.keys().await, Vec::<String>::new());
}
