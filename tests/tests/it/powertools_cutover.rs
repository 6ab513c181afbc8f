//! The cut-over from Powertools for AWS Lambda (Python)
//! (`PowertoolsRecords`, docs/powertools.md "Cutting over"), against records
//! Powertools itself wrote to DynamoDB Local (tests/powertools/write_records.py,
//! run with the Python of `IDEMPOTENCY_TEST_POWERTOOLS_PYTHON`), with this
//! library's own records on every store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::Response;
use lambda_http::{Body, Request};
use lambda_idempotency::event::{EventError, IdempotentFunction};
use lambda_idempotency::store::powertools::{PowertoolsCutover, PowertoolsRecords};
use lambda_idempotency::store::{
    CheckpointRequest, ClaimOutcome, ClaimRequest, CompleteRequest, Completion, Lease, RecordPage,
    Resolution, ResolveRequest, Status, StoredRecord, StuckPage, StuckRequest, SweepCursor,
    SweepStore,
};
use lambda_idempotency::{http::REPLAYED_HEADER, problem, IdempotencyLayer, Store};
use serde_json::{json, Value};
use tower::Layer;

use crate::fixture::{
    call, counting_handler, json as body_json, on_both_stores, one_phase_handler, silent_server,
    Fixture, Runs,
};

on_both_stores!(
    a_completed_powertools_record_is_replayed_and_becomes_ours,
    a_powertools_record_in_progress_is_409_and_the_key_stays_free,
    a_body_other_than_the_one_powertools_validated_is_422,
    keys_powertools_never_saw_run_and_after_the_window_nothing_is_read,
    event_outputs_powertools_stored_are_returned_without_running,
    a_copy_that_failed_is_replayed_and_the_claim_given_back,
    a_takeover_after_a_copy_that_failed_reads_powertools_again,
    a_takeover_after_a_give_back_that_failed_reads_powertools_again,
    a_takeover_after_a_read_that_failed_reads_powertools_again,
    a_takeover_after_an_invocation_died_reading_reads_powertools_again,
    a_takeover_that_resumes_from_a_recovery_point_reads_powertools_too,
    an_event_takeover_after_a_copy_that_failed_reads_powertools_again,
    a_quoted_key_finds_the_record_of_the_text_powertools_hashed,
    a_request_without_body_matches_the_null_body_powertools_validated,
    a_base64_body_matches_the_text_powertools_validated,
    waiting_on_a_key_powertools_holds_reads_only_its_record,
    a_waiter_on_a_key_the_sweeper_failed_answers_409_while_powertools_holds_it,
    held_keys_remember_each_waiting_request,
    an_outcome_too_large_to_copy_replays_from_powertools_not_as_too_large,
    a_record_saved_after_until_by_a_call_in_flight_is_still_read,
);

/// This library's store with chosen calls failing and every call counted:
/// a store that fails one write (the copy of a Powertools outcome, a
/// give-back), and what a wait costs.
#[derive(Debug)]
struct BrokenCalls {
    inner: Arc<dyn SweepStore>,
    /// How many of the next completions and releases fail (nothing written).
    failing_completes: AtomicU64,
    failing_releases: AtomicU64,
    /// How many of the next completions store the too-large marker instead,
    /// as a store whose limit the response exceeds does.
    oversized_completes: AtomicU64,
    claims: AtomicU64,
    completes: AtomicU64,
    releases: AtomicU64,
    gets: AtomicU64,
}

impl BrokenCalls {
    fn new(inner: Arc<dyn SweepStore>) -> Arc<Self> {
        Arc::new(BrokenCalls {
            inner,
            failing_completes: AtomicU64::new(0),
            failing_releases: AtomicU64::new(0),
            oversized_completes: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            completes: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            gets: AtomicU64::new(0),
        })
    }

    /// The next completion fails.
    fn fail_next_complete(&self) {
        self.failing_completes.store(1, Ordering::SeqCst);
    }

    /// The next completion fails, and so does the next release.
    fn fail_next_complete_and_release(&self) {
        self.fail_next_complete();
        self.fail_next_release();
    }

    /// The next completion's response is too large for the store.
    fn oversize_next_complete(&self) {
        self.oversized_completes.store(1, Ordering::SeqCst);
    }

    fn fail_next_release(&self) {
        self.failing_releases.store(1, Ordering::SeqCst);
    }

    /// Take one planned failure from `budget`, if any is left.
    fn failing(budget: &AtomicU64, what: &str) -> Result<(), lambda_idempotency::Error> {
        match budget.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) {
            Ok(_) => Err(lambda_idempotency::Error::store_unavailable(
                format!("{what} failed on purpose (BrokenCalls)"),
                std::io::Error::other("injected"),
            )),
            Err(_) => Ok(()),
        }
    }

    /// (claims, completions, releases, reads) made so far.
    fn calls(&self) -> (u64, u64, u64, u64) {
        (
            self.claims.load(Ordering::SeqCst),
            self.completes.load(Ordering::SeqCst),
            self.releases.load(Ordering::SeqCst),
            self.gets.load(Ordering::SeqCst),
        )
    }
}

#[async_trait::async_trait]
impl Store for BrokenCalls {
    async fn claim(
        &self,
        request: &ClaimRequest,
    ) -> Result<ClaimOutcome, lambda_idempotency::Error> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(request).await
    }
    async fn complete(
        &self,
        request: CompleteRequest<'_>,
    ) -> Result<Completion, lambda_idempotency::Error> {
        self.completes.fetch_add(1, Ordering::SeqCst);
        Self::failing(&self.failing_completes, "the completion")?;
        if Self::failing(&self.oversized_completes, "").is_err() {
            // What a store does with a response over its limit: the record
            // completes with the too-large marker instead.
            let marker = marker(problem::RESPONSE_TOO_LARGE);
            self.inner
                .complete(CompleteRequest::new(
                    request.lease,
                    &marker,
                    request.expires_at_s,
                ))
                .await?;
            return Ok(Completion::Oversized { bytes: 400_000 });
        }
        self.inner.complete(request).await
    }
    async fn release(&self, lease: &Lease) -> Result<(), lambda_idempotency::Error> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        Self::failing(&self.failing_releases, "the release")?;
        self.inner.release(lease).await
    }
    async fn checkpoint(
        &self,
        request: CheckpointRequest<'_>,
    ) -> Result<(), lambda_idempotency::Error> {
        self.inner.checkpoint(request).await
    }
    async fn get(
        &self,
        record_id: &str,
    ) -> Result<Option<StoredRecord>, lambda_idempotency::Error> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get(record_id).await
    }
}

#[async_trait::async_trait]
impl SweepStore for BrokenCalls {
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
    async fn stuck(&self, request: StuckRequest) -> Result<StuckPage, lambda_idempotency::Error> {
        self.inner.stuck(request).await
    }
    async fn resolve_stuck(
        &self,
        request: ResolveRequest<'_>,
    ) -> Result<Resolution, lambda_idempotency::Error> {
        self.inner.resolve_stuck(request).await
    }
    async fn scan(
        &self,
        cursor: Option<SweepCursor>,
        limit: usize,
    ) -> Result<RecordPage, lambda_idempotency::Error> {
        self.inner.scan(cursor, limit).await
    }
}

/// The tables Powertools wrote and the id prefixes it used.
struct Written {
    http_table: String,
    event_table: String,
    http_prefix: String,
    event_prefix: String,
    event_partition: String,
    /// The `expiration` (epoch seconds) of Powertools' record of `done-1`.
    done_1_expiration: u64,
}

/// Run Powertools for AWS Lambda (Python) against DynamoDB Local: it makes
/// two tables and writes its records (tests/powertools/write_records.py).
async fn powertools_wrote() -> Written {
    let wrote = crate::fixture::powertools_wrote("pt").await;
    let text = |name: &str| wrote.text(name);
    let printed = &wrote.printed;
    // Powertools names records `<function>.<module>.<qualified name>#<hash>`.
    assert!(
        text("http").starts_with("orders-api.__main__."),
        "{printed}"
    );
    Written {
        http_table: wrote.http_table.clone(),
        event_table: wrote.event_table.clone(),
        http_prefix: text("http"),
        event_prefix: text("event"),
        event_partition: text("event_partition"),
        done_1_expiration: printed["done_1_expiration"]
            .as_u64()
            .expect("an expiration"),
    }
}

/// Every record of this library's store, all pages (a cluster lists node
/// by node).
async fn our_records(f: &Fixture) -> Vec<lambda_idempotency::store::StoredRecord> {
    let mut records = Vec::new();
    let mut cursor = None;
    loop {
        let page = f.store.scan(cursor, 100).await.expect("scan");
        records.extend(page.records);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return records,
        }
    }
}

/// Looked up for the next hour.
fn open_window() -> SystemTime {
    SystemTime::now() + Duration::from_secs(3600)
}

async fn http_records(w: &Written, until: SystemTime) -> PowertoolsRecords {
    PowertoolsRecords::new(
        integration_tests::client().await,
        &w.http_table,
        &w.http_prefix,
        until,
    )
    .validate_body()
}

fn order(key: &str, body: &str) -> Request {
    http::Request::post("/orders")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body.to_owned()))
        .expect("request")
}

/// The body Powertools' handler was called with.
const BODY: &str = r#"{"amount":2500}"#;

/// The bytes of `binary-1`'s body, which API Gateway sent Powertools
/// base64-encoded (tests/powertools/write_records.py).
const BINARY_BODY: [u8; 6] = [0, 159, 146, 150, 1, 2];

/// This library's leases in the takeover tests: short, so a retry takes
/// the key over soon.
const SHORT_LEASE: Duration = Duration::from_millis(300);

/// Wait until a lease taken now with [`SHORT_LEASE`] has ended.
async fn past_the_lease() {
    tokio::time::sleep(SHORT_LEASE + Duration::from_millis(200)).await;
}

/// `done-1`'s replay of what Powertools' handler answered.
fn assert_powertools_replay(replay: &Response<Body>) {
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(replay.headers()["location"], "/orders/1");
    assert_eq!(
        body_json(replay),
        json!({"order": {"amount": 2500}, "by": "powertools"})
    );
}

async fn a_completed_powertools_record_is_replayed_and_becomes_ours(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        http_records(&w, open_window()).await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    let replay = call(&mut svc, order("done-1", BODY)).await;
    assert_eq!(runs.count(), 0, "Powertools already ran it");
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(replay.headers()["location"], "/orders/1");
    assert_eq!(
        body_json(&replay),
        json!({"order": {"amount": 2500}, "by": "powertools"})
    );
    // Kept as long as Powertools keeps its record: through its second
    // `expiration` (Powertools' test is `int(now) > expiration`).
    let ours = our_records(&f).await;
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(ours[0].record.expires_at_s, w.done_1_expiration + 1);
    // Copied into this library's record: with the Powertools table gone,
    // the key still replays the same response.
    integration_tests::client()
        .await
        .delete_table()
        .table_name(&w.http_table)
        .send()
        .await
        .expect("delete the Powertools table");
    let again = call(&mut svc, order("done-1", BODY)).await;
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()[REPLAYED_HEADER], "true");
    assert_eq!(again.body().as_ref(), replay.body().as_ref());
    assert_eq!(runs.count(), 0);
}

async fn a_powertools_record_in_progress_is_409_and_the_key_stays_free(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        http_records(&w, open_window()).await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    let answer = call(&mut svc, order("running-1", BODY)).await;
    assert_eq!(answer.status(), 409);
    assert_eq!(body_json(&answer)["type"], problem::IN_PROGRESS.uri);
    let retry_after: u64 = answer.headers()["retry-after"]
        .to_str()
        .expect("text")
        .parse()
        .expect("seconds");
    assert!(retry_after >= 1, "{retry_after}");
    assert_eq!(runs.count(), 0);
    // The claim was given back: nothing of this library holds the key, so
    // a retry asks Powertools' record again.
    let ours = our_records(&f).await;
    assert!(ours.is_empty(), "{ours:?}");
    assert_eq!(call(&mut svc, order("running-1", BODY)).await.status(), 409);
}

async fn a_body_other_than_the_one_powertools_validated_is_422(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        http_records(&w, open_window()).await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    let reused = call(&mut svc, order("done-2", r#"{"amount":1}"#)).await;
    assert_eq!(reused.status(), 422);
    assert_eq!(body_json(&reused)["type"], problem::KEY_REUSED.uri);
    assert_eq!(runs.count(), 0);
    // The key is not taken by the refused request: the original body
    // still replays Powertools' outcome.
    let replay = call(&mut svc, order("done-2", BODY)).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 0);
}

async fn keys_powertools_never_saw_run_and_after_the_window_nothing_is_read(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    let mut open = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        http_records(&w, open_window()).await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    let fresh = call(&mut open, order("fresh-1", BODY)).await;
    assert_eq!(fresh.status(), 201);
    assert!(fresh.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(runs.count(), 1);
    // The window over (`until`, plus the longest Powertools timeout, plus
    // a second): done-3, which Powertools completed, runs here (the cost
    // of a window too short), and the Powertools table is not read, which
    // a table that no longer exists proves.
    let mut closed = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        PowertoolsRecords::new(
            integration_tests::client().await,
            "no-such-table",
            &w.http_prefix,
            SystemTime::now() - Duration::from_secs(32),
        )
        .max_timeout(Duration::from_secs(30))
        .validate_body(),
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    let after = call(&mut closed, order("done-3", BODY)).await;
    assert_eq!(after.status(), 201);
    assert!(after.headers().get(REPLAYED_HEADER).is_none());
    assert_eq!(runs.count(), 2);
    // And a lookup that fails is a 503 that leaves the key free.
    let mut broken = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        PowertoolsRecords::new(
            integration_tests::client().await,
            "no-such-table",
            &w.http_prefix,
            open_window(),
        ),
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    let refused = call(&mut broken, order("fresh-2", BODY)).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(
        runs.count(),
        2,
        "not run: whether Powertools ran it is unknown"
    );
    let ours = our_records(&f).await;
    assert_eq!(ours.len(), 2, "fresh-1 and done-3 only: {ours:?}");
}

/// The event function's records (a table with a sort key), read for the
/// next hour.
async fn event_records(w: &Written) -> PowertoolsRecords {
    PowertoolsRecords::new(
        integration_tests::client().await,
        &w.event_table,
        &w.event_prefix,
        open_window(),
    )
    .key_attr("pk")
    .sort_key("sk", &w.event_partition)
}

async fn event_outputs_powertools_stored_are_returned_without_running(f: Fixture) {
    let w = powertools_wrote().await;
    let records = event_records(&w).await;
    let charge =
        IdempotentFunction::new(PowertoolsCutover::new(f.store.clone(), records), "charge")
            .key_pointers(["/order_id"]);
    let runs = Runs::default();
    let run = |order: Value| {
        let runs = runs.clone();
        charge.call(order, move |_| async move {
            runs.bump();
            Ok::<Value, String>(json!({"charged": "again"}))
        })
    };
    let out: Result<Value, EventError<String>> =
        run(json!({"order_id": "o-1", "amount": 2500})).await;
    assert_eq!(out.unwrap(), json!({"charged": 2500, "order_id": "o-1"}));
    // An integer key hashes as Powertools hashed the integer.
    let out = run(json!({"order_id": 42, "amount": 1})).await;
    assert_eq!(out.unwrap(), json!({"charged": 1}));
    assert_eq!(runs.count(), 0);
    // A string "42" is another key, which Powertools never saw.
    let out = run(json!({"order_id": "42", "amount": 1})).await;
    assert_eq!(out.unwrap(), json!({"charged": "again"}));
    assert_eq!(runs.count(), 1);
}

async fn a_copy_that_failed_is_replayed_and_the_claim_given_back(f: Fixture) {
    let w = powertools_wrote().await;
    let store = BrokenCalls::new(f.store.clone());
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        store.clone(),
        http_records(&w, open_window()).await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    store.fail_next_complete();
    // Powertools' outcome, replayed although this library could not keep it.
    assert_powertools_replay(&call(&mut svc, order("done-1", BODY)).await);
    let ours = our_records(&f).await;
    assert!(ours.is_empty(), "the claim was given back: {ours:?}");
    // So the next duplicate reads the record again at once (no 409 for the
    // rest of the lease) and keeps it this time.
    assert_powertools_replay(&call(&mut svc, order("done-1", BODY)).await);
    assert_eq!(runs.count(), 0, "Powertools already ran done-1");
    let ours = our_records(&f).await;
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(ours[0].record.status, Status::Completed);
}

async fn a_takeover_after_a_copy_that_failed_reads_powertools_again(f: Fixture) {
    let w = powertools_wrote().await;
    let store = BrokenCalls::new(f.store.clone());
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        store.clone(),
        http_records(&w, open_window()).await,
    ))
    .max_lease(SHORT_LEASE)
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    // The copy of the completed record fails and so does the give-back:
    // this library's record stays in progress at attempt 1, undecided.
    store.fail_next_complete_and_release();
    assert_powertools_replay(&call(&mut svc, order("done-1", BODY)).await);
    past_the_lease().await;
    // The retry takes the record over: Powertools' outcome again, not a run.
    assert_powertools_replay(&call(&mut svc, order("done-1", BODY)).await);
    assert_eq!(runs.count(), 0, "Powertools already ran done-1");
    let ours = our_records(&f).await;
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(ours[0].record.status, Status::Completed, "copied this time");
}

async fn a_takeover_after_a_give_back_that_failed_reads_powertools_again(f: Fixture) {
    let w = powertools_wrote().await;
    let store = BrokenCalls::new(f.store.clone());
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        store.clone(),
        http_records(&w, open_window()).await,
    ))
    .max_lease(SHORT_LEASE)
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    store.fail_next_release();
    assert_eq!(call(&mut svc, order("running-1", BODY)).await.status(), 409);
    past_the_lease().await;
    // Powertools still runs it (its in-progress expiry is a minute away).
    let retry = call(&mut svc, order("running-1", BODY)).await;
    assert_eq!(retry.status(), 409);
    assert_eq!(body_json(&retry)["type"], problem::IN_PROGRESS.uri);
    assert_eq!(runs.count(), 0, "Powertools still runs running-1");
}

async fn a_takeover_after_a_read_that_failed_reads_powertools_again(f: Fixture) {
    let w = powertools_wrote().await;
    let store = BrokenCalls::new(f.store.clone());
    let runs = Runs::default();
    let mut unreadable = IdempotencyLayer::new(PowertoolsCutover::new(
        store.clone(),
        PowertoolsRecords::new(
            integration_tests::client().await,
            "no-such-table",
            &w.http_prefix,
            open_window(),
        ),
    ))
    .max_lease(SHORT_LEASE)
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    store.fail_next_release();
    assert_eq!(
        call(&mut unreadable, order("done-1", BODY)).await.status(),
        503
    );
    past_the_lease().await;
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        store.clone(),
        http_records(&w, open_window()).await,
    ))
    .max_lease(SHORT_LEASE)
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    assert_powertools_replay(&call(&mut svc, order("done-1", BODY)).await);
    assert_eq!(runs.count(), 0, "Powertools already ran done-1");
}

async fn a_takeover_after_an_invocation_died_reading_reads_powertools_again(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    // The Powertools table behind a server that never answers: the
    // invocation dies (its future dropped) while the read is in flight,
    // after its claim.
    let (port, held) = silent_server().await;
    let mut hanging = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        PowertoolsRecords::new(
            integration_tests::client_for(format!("http://127.0.0.1:{port}"), 1).await,
            &w.http_table,
            &w.http_prefix,
            open_window(),
        ),
    ))
    .max_lease(SHORT_LEASE)
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    let died = tokio::time::timeout(
        Duration::from_secs(2),
        call(&mut hanging, order("done-1", BODY)),
    )
    .await;
    assert!(died.is_err(), "the silent server answered");
    held.abort();
    let ours = our_records(&f).await;
    assert_eq!(ours.len(), 1, "the claim was made: {ours:?}");
    assert_eq!(ours[0].record.status, Status::InProgress);
    past_the_lease().await;
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        http_records(&w, open_window()).await,
    ))
    .max_lease(SHORT_LEASE)
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    assert_powertools_replay(&call(&mut svc, order("done-1", BODY)).await);
    assert_eq!(runs.count(), 0, "Powertools already ran done-1");
}

async fn a_takeover_that_resumes_from_a_recovery_point_reads_powertools_too(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    // A recovery point written with nothing read: before the window opened
    // (or by a version that skipped the read on a takeover). The phase
    // answers 500, which is not stored: the record keeps its recovery point
    // with its lease ended, for the next retry to resume from.
    let handler = one_phase_handler(runs.clone(), |ctx| async move {
        ctx.commit("charged", json!({})).await?;
        Ok(Response::builder().status(500).body(Body::Empty)?)
    });
    let mut unread = IdempotencyLayer::new(f.store.clone()).layer(handler.clone());
    assert_eq!(call(&mut unread, order("done-1", BODY)).await.status(), 500);
    assert_eq!(runs.count(), 1);
    let ours = our_records(&f).await;
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert!(ours[0].record.checkpoint.is_some(), "{ours:?}");
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        http_records(&w, open_window()).await,
    ))
    .layer(handler);
    // The point proves this library's handler started, not that Powertools
    // never ran the key: Powertools' outcome is the one its client got.
    assert_powertools_replay(&call(&mut svc, order("done-1", BODY)).await);
    assert_eq!(runs.count(), 1, "not resumed: Powertools ran done-1");
}

async fn an_event_takeover_after_a_copy_that_failed_reads_powertools_again(f: Fixture) {
    let w = powertools_wrote().await;
    let store = BrokenCalls::new(f.store.clone());
    let charge = IdempotentFunction::with_config(
        lambda_idempotency::IdempotencyConfig::new(PowertoolsCutover::new(
            store.clone(),
            event_records(&w).await,
        ))
        .max_lease(SHORT_LEASE),
        "charge",
    )
    .key_pointers(["/order_id"]);
    let runs = Runs::default();
    let run = || {
        let runs = runs.clone();
        charge.call(
            json!({"order_id": "o-1", "amount": 2500}),
            move |_| async move {
                runs.bump();
                Ok::<Value, String>(json!({"charged": "again"}))
            },
        )
    };
    store.fail_next_complete_and_release();
    let first: Result<Value, EventError<String>> = run().await;
    assert_eq!(first.unwrap(), json!({"charged": 2500, "order_id": "o-1"}));
    past_the_lease().await;
    let again: Result<Value, EventError<String>> = run().await;
    assert_eq!(again.unwrap(), json!({"charged": 2500, "order_id": "o-1"}));
    assert_eq!(runs.count(), 0, "Powertools already ran o-1");
}

async fn a_quoted_key_finds_the_record_of_the_text_powertools_hashed(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        http_records(&w, open_window()).await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    // The draft standard's own form: a structured-field string.
    let replay = call(&mut svc, order(r#""quoted-1""#, BODY)).await;
    assert_eq!(runs.count(), 0, "Powertools already ran \"quoted-1\"");
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    // This library reads the key unquoted: the bare form retries it.
    let bare = call(&mut svc, order("quoted-1", BODY)).await;
    assert_eq!(bare.headers()[REPLAYED_HEADER], "true");
    assert_eq!(runs.count(), 0);
}

async fn a_request_without_body_matches_the_null_body_powertools_validated(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        http_records(&w, open_window()).await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    let request = http::Request::post("/orders")
        .header("idempotency-key", "nobody-1")
        .body(Body::Empty)
        .expect("request");
    let replay = call(&mut svc, request).await;
    assert_eq!(replay.status(), 201, "{:?}", body_json(&replay));
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(
        body_json(&replay),
        json!({"order": null, "by": "powertools"})
    );
    assert_eq!(runs.count(), 0);
}

async fn a_base64_body_matches_the_text_powertools_validated(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        http_records(&w, open_window()).await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    // lambda_http decodes an `isBase64Encoded` body into these bytes.
    let request = http::Request::post("/orders")
        .header("idempotency-key", "binary-1")
        .body(Body::Binary(BINARY_BODY.to_vec()))
        .expect("request");
    let replay = call(&mut svc, request).await;
    assert_eq!(replay.status(), 201, "{:?}", body_json(&replay));
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(
        body_json(&replay),
        json!({"order": "AJ+SlgEC", "by": "powertools"})
    );
    assert_eq!(runs.count(), 0);
}

async fn waiting_on_a_key_powertools_holds_reads_only_its_record(f: Fixture) {
    let w = powertools_wrote().await;
    let store = BrokenCalls::new(f.store.clone());
    let charge = IdempotentFunction::new(
        PowertoolsCutover::new(store.clone(), event_records(&w).await),
        "charge",
    )
    .key_pointers(["/order_id"])
    .wait_for(Duration::from_millis(800));
    let runs = Runs::default();
    let out: Result<Value, EventError<String>> = charge
        .call(json!({"order_id": "o-3", "amount": 1}), |_| async {
            runs.bump();
            Ok::<Value, String>(json!({"charged": "again"}))
        })
        .await;
    // Powertools holds o-3 for a minute: the wait ends without a run.
    assert!(matches!(out, Err(EventError::InProgress { .. })), "{out:?}");
    assert_eq!(runs.count(), 0);
    // One claim and its give-back; the polls read the Powertools record
    // alone, never this library's store.
    assert_eq!(
        store.calls(),
        (1, 0, 1, 0),
        "(claims, completions, releases, reads)"
    );
}

/// A problem document of `kind`, as a store keeps a marker.
fn marker(kind: problem::ProblemType) -> lambda_idempotency::store::StoredResponse {
    lambda_idempotency::store::StoredResponse::new(
        kind.status,
        vec![("content-type".into(), b"application/problem+json".to_vec())],
        lambda_idempotency::store::StoredBody::Text(
            json!({"type": kind.uri, "status": kind.status}).to_string(),
        ),
    )
}

/// A record of this library's for `key` that the sweeper failed: its
/// attempt died (here before the cut-over could decide anything), and the
/// `fail` policy completed it with the `abandoned` problem (fenced on the
/// dead attempt, as the sweeper's resolution is).
async fn failed_by_the_sweeper(f: &Fixture, key: &str) {
    integration_tests::crash_midway(f.store.clone(), order(key, BODY)).await;
    let ours = our_records(f).await;
    let [dead] = ours.as_slice() else {
        panic!("one record in progress: {ours:?}");
    };
    let lease = Lease {
        record_id: dead.record.id.clone(),
        owner: dead.record.owner.clone(),
        fingerprint: dead.record.fingerprint.clone(),
        attempt: dead.record.attempt,
        recovered: None,
    };
    let expires_at_s = lambda_idempotency::store::now_ms() / 1000 + 3600;
    f.store
        .complete(CompleteRequest::new(
            &lease,
            &marker(problem::ABANDONED),
            expires_at_s,
        ))
        .await
        .expect("the sweeper's fail");
}

async fn a_waiter_on_a_key_the_sweeper_failed_answers_409_while_powertools_holds_it(f: Fixture) {
    let w = powertools_wrote().await;
    failed_by_the_sweeper(&f, "running-1").await;
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        http_records(&w, open_window()).await,
    ))
    .wait_for(Duration::from_millis(700))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    // Powertools still runs running-1: the waiter polls its record, never
    // the sweeper's marker, and answers in progress when its wait ends.
    let answer = call(&mut svc, order("running-1", BODY)).await;
    assert_eq!(answer.status(), 409, "{:?}", body_json(&answer));
    assert_eq!(body_json(&answer)["type"], problem::IN_PROGRESS.uri);
    assert_eq!(runs.count(), 0);
    // And again (nothing cached the marker as the key's answer).
    assert_eq!(call(&mut svc, order("running-1", BODY)).await.status(), 409);
}

async fn held_keys_remember_each_waiting_request(f: Fixture) {
    let w = powertools_wrote().await;
    let cutover = PowertoolsCutover::new(f.store.clone(), http_records(&w, open_window()).await);
    let record_id = integration_tests::unique_name("held");
    // Two requests with the key Powertools holds (running-1) and different
    // bodies, claimed in one process (as `run_concurrent` serves them):
    // each finds it held by Powertools.
    for (fingerprint, body) in [("fp-a", BODY), ("fp-b", r#"{"amount":7}"#)] {
        let mut request = crate::fixture::claim_request(&record_id, fingerprint, 60_000);
        request.fingerprint = fingerprint.to_owned();
        request.origin = Some(lambda_idempotency::store::ClaimOrigin::Http {
            key: json!("running-1"),
            body: lambda_idempotency::store::StoredBody::Text(body.to_owned()),
            event: json!({"headers": {"idempotency-key": "running-1"}, "body": body}),
            tenant: lambda_idempotency::store::TenantFields::None,
        });
        match cutover.claim(&request).await.expect("claim") {
            ClaimOutcome::Exists(record) => {
                assert_eq!(record.status, Status::InProgress, "{record:?}");
                assert_eq!(record.fingerprint, fingerprint);
            }
            other => panic!("Powertools holds running-1: {other:?}"),
        }
    }
    // What their waits poll must not answer one with the other's
    // fingerprint (a `422` for a request that reused nothing): with two
    // requests waiting, each claims again and its claim decides for it.
    let polled = cutover.get(&record_id).await.expect("get");
    assert!(
        polled
            .as_ref()
            .is_none_or(|p| p.record.status != Status::InProgress),
        "{polled:?}"
    );
}

async fn an_outcome_too_large_to_copy_replays_from_powertools_not_as_too_large(f: Fixture) {
    let w = powertools_wrote().await;
    let store = BrokenCalls::new(f.store.clone());
    let runs = Runs::default();
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        store.clone(),
        http_records(&w, open_window()).await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    store.oversize_next_complete();
    assert_powertools_replay(&call(&mut svc, order("done-1", BODY)).await);
    // The copy holds the too-large marker, not the outcome: later
    // duplicates still get Powertools' outcome while the window lasts.
    for _ in 0..2 {
        assert_powertools_replay(&call(&mut svc, order("done-1", BODY)).await);
    }
    assert_eq!(runs.count(), 0);
}

async fn a_record_saved_after_until_by_a_call_in_flight_is_still_read(f: Fixture) {
    let w = powertools_wrote().await;
    let runs = Runs::default();
    // `until` a minute ago: Powertools' records were all written after it,
    // as a call in flight at the switch saves its record when it ends.
    // Within the longest Powertools timeout (default 900 s) they are read.
    let mut svc = IdempotencyLayer::new(PowertoolsCutover::new(
        f.store.clone(),
        http_records(&w, SystemTime::now() - Duration::from_secs(60)).await,
    ))
    .layer(counting_handler(runs.clone(), Duration::ZERO));
    assert_powertools_replay(&call(&mut svc, order("done-1", BODY)).await);
    assert_eq!(runs.count(), 0);
}
