//! Micro benchmarks (divan) of the library's hot paths, on the 1,000-byte JSON
//! body of the end-to-end benchmark (`scripts/bench/body.json`): key parsing,
//! fingerprinting, record encoding, and the whole middleware on the in-memory
//! store next to the bare handler it wraps (the difference is the library).
//! Requests are built outside the timed region. `make bench` runs them and
//! puts the medians in BENCHMARKS.md; alone:
//! `cargo bench -p integration-tests --bench micro`.

use std::time::Duration;

use divan::Bencher;
use lambda_http::{Body, IntoResponse, Request, Response};
use lambda_idempotency::{
    http::IdempotencyKey, store::StoredResponse, Fingerprinter, IdempotencyLayer, MemoryStore,
};
use tower::{Layer, Service, ServiceExt};

fn main() {
    divan::main();
}

/// The body every benchmark sends, shared with the end-to-end driver and the
/// Powertools side.
const BODY: &str = include_str!("../../scripts/bench/body.json");

fn body() -> &'static str {
    BODY.trim_end()
}

#[divan::bench]
fn parse_bare_key() -> usize {
    IdempotencyKey::parse(divan::black_box("8e03978e-40d5-43e8-bc93-6894a57f9324"))
        .map(|k| k.as_str().len())
        .unwrap_or(0)
}

#[divan::bench]
fn parse_sf_string_key() -> usize {
    IdempotencyKey::parse(divan::black_box("\"8e03978e-40d5-43e8-bc93-6894a57f9324\""))
        .map(|k| k.as_str().len())
        .unwrap_or(0)
}

#[divan::bench]
fn fingerprint_1kb_json(bencher: Bencher) {
    let fp = Fingerprinter::new();
    bencher.bench(|| fp.fingerprint("POST", "/orders", &[], divan::black_box(body().as_bytes())));
}

#[divan::bench]
fn fingerprint_1kb_selected_fields(bencher: Bencher) {
    let fp = Fingerprinter::new().fields(["/amount", "/currency"]);
    bencher.bench(|| fp.fingerprint("POST", "/orders", &[], divan::black_box(body().as_bytes())));
}

#[divan::bench]
fn record_round_trip(bencher: Bencher) {
    let response = Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .header("location", "/orders/1")
        .body(Body::from(body()))
        .expect("static response");
    bencher.bench(|| StoredResponse::from_http(divan::black_box(&response)).to_http());
}

fn request(key: &str) -> Request {
    integration_tests::post("/orders", Some(key), body())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

/// Time `svc` on requests from `make_request`, built outside the timing, its
/// answers converted as `lambda_http::run` converts them; the responses are
/// dropped outside the timing too.
fn bench_service<S>(bencher: Bencher, svc: S, mut make_request: impl FnMut() -> Request)
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let rt = runtime();
    bencher
        .with_inputs(&mut make_request)
        .bench_local_values(|req| {
            rt.block_on(async {
                // Converted as `lambda_http::run` converts a handler's answer.
                match svc.clone().oneshot(req).await {
                    Ok(res) => Ok(res.into_response().await),
                    Err(e) => Err(e),
                }
            })
        });
}

/// A service with one completed record under key `k`.
fn with_completed_key<S>(svc: S) -> S
where
    S: Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone,
{
    let _ = runtime().block_on(svc.clone().oneshot(request("k")));
    svc
}

#[divan::bench]
fn bare_handler(bencher: Bencher) {
    let mut n = 0u64;
    bench_service(bencher, integration_tests::echo_handler(), move || {
        n += 1;
        request(&format!("k{n}"))
    });
}

#[divan::bench]
fn middleware_first_execution(bencher: Bencher) {
    let svc = IdempotencyLayer::new(MemoryStore::new()).layer(integration_tests::echo_handler());
    let mut n = 0u64;
    bench_service(bencher, svc, move || {
        n += 1;
        request(&format!("k{n}"))
    });
}

#[divan::bench]
fn middleware_replay(bencher: Bencher) {
    let svc = with_completed_key(
        IdempotencyLayer::new(MemoryStore::new()).layer(integration_tests::echo_handler()),
    );
    bench_service(bencher, svc, || request("k"));
}

#[divan::bench]
fn middleware_cached_replay(bencher: Bencher) {
    let svc = with_completed_key(
        IdempotencyLayer::new(MemoryStore::new())
            .local_cache(1_000, Duration::from_secs(300))
            .layer(integration_tests::echo_handler()),
    );
    bench_service(bencher, svc, || request("k"));
}
