//! Micro benchmarks (divan) of the library's hot paths, on a ~1 KB JSON body:
//! key parsing, fingerprinting, record encoding, and the whole middleware on
//! the in-memory store. `cargo bench -p integration-tests --bench micro`.

use divan::Bencher;
use lambda_http::{Body, Request, Response};
use lambda_idempotency::{key, Fingerprinter, IdempotencyLayer, MemoryStore, StoredResponse};
use tower::{Layer, ServiceExt};

fn main() {
    divan::main();
}

fn body() -> String {
    let items: Vec<serde_json::Value> = (0..12)
        .map(|i| serde_json::json!({"sku": format!("SKU-{i:04}"), "quantity": i + 1, "unit_price": 1000 + i}))
        .collect();
    serde_json::json!({"customer_id": "cus_42", "amount": 2500, "currency": "EUR", "items": items})
        .to_string()
}

#[divan::bench]
fn parse_bare_key() -> usize {
    key::parse(divan::black_box("8e03978e-40d5-43e8-bc93-6894a57f9324"))
        .map(|k| k.as_str().len())
        .unwrap_or(0)
}

#[divan::bench]
fn parse_sf_string_key() -> usize {
    key::parse(divan::black_box("\"8e03978e-40d5-43e8-bc93-6894a57f9324\""))
        .map(|k| k.as_str().len())
        .unwrap_or(0)
}

#[divan::bench]
fn fingerprint_1kb_json(bencher: Bencher) {
    let body = body();
    let fp = Fingerprinter::new();
    bencher.bench(|| fp.fingerprint("POST", "/orders", &[], divan::black_box(body.as_bytes())));
}

#[divan::bench]
fn fingerprint_1kb_selected_fields(bencher: Bencher) {
    let body = body();
    let fp = Fingerprinter::new().fields(["/amount", "/currency"]);
    bencher.bench(|| fp.fingerprint("POST", "/orders", &[], divan::black_box(body.as_bytes())));
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

fn request(key: &str, body: &str) -> Request {
    http::Request::post("/orders")
        .header("idempotency-key", key)
        .body(Body::from(body.to_owned()))
        .expect("static request")
}

fn service(
) -> impl tower::Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone {
    IdempotencyLayer::new(MemoryStore::new()).layer(tower::service_fn(|req: Request| async move {
        Ok::<_, lambda_http::Error>(
            Response::builder()
                .status(201)
                .body(Body::from(req.body().as_ref().to_vec()))?,
        )
    }))
}

#[divan::bench]
fn middleware_first_execution(bencher: Bencher) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let svc = service();
    let body = body();
    let mut n = 0u64;
    bencher.bench_local(|| {
        n += 1;
        rt.block_on(svc.clone().oneshot(request(&format!("k{n}"), &body)))
            .map(|r| r.status())
    });
}

#[divan::bench]
fn middleware_replay(bencher: Bencher) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let svc = service();
    let body = body();
    let _ = rt.block_on(svc.clone().oneshot(request("k", &body)));
    bencher.bench_local(|| {
        rt.block_on(svc.clone().oneshot(request("k", &body)))
            .map(|r| r.status())
    });
}
