//! Bad input: property-based fuzzing of everything a client or an event
//! source controls. No input may panic; every HTTP answer the middleware makes
//! itself is one of its documented statuses.

use std::time::Duration;

use lambda_http::{Body, Request, Response};
use lambda_idempotency::{key, Fingerprinter, IdempotencyLayer, MemoryStore, TenantSource};
use proptest::prelude::*;
use serde_json::Value;
use tower::{Layer, ServiceExt};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::hash_map(".{0,8}", inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn key_parser_never_panics_and_accepts_only_valid_keys(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(k) = key::parse_bytes(&bytes) {
            let k = k.as_str();
            prop_assert!(!k.is_empty() && k.len() <= key::MAX_KEY_LEN);
            prop_assert!(k.bytes().all(|b| (0x20..=0x7e).contains(&b)));
        }
    }

    #[test]
    fn quoted_keys_round_trip(k in "[ -~]{1,200}") {
        let quoted = format!("\"{}\"", k.replace('\\', "\\\\").replace('"', "\\\""));
        let parsed = key::parse(&quoted);
        prop_assert!(parsed.is_ok(), "{quoted}: {:?}", parsed.err());
        let parsed = parsed.unwrap();
        prop_assert_eq!(parsed.as_str(), k.as_str());
    }

    #[test]
    fn fingerprint_of_arbitrary_bytes_is_deterministic(bytes in proptest::collection::vec(any::<u8>(), 0..2_000), method in "[A-Z]{1,7}", path in "/[ -~]{0,40}") {
        let fp = Fingerprinter::new().fields(["/a", "/b/0"]);
        prop_assert_eq!(fp.fingerprint(&method, &path, &[], &bytes), fp.fingerprint(&method, &path, &[], &bytes));
    }

    #[test]
    fn fingerprint_ignores_json_formatting(value in json_value()) {
        let fp = Fingerprinter::new();
        let compact = serde_json::to_vec(&value).unwrap();
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        prop_assert_eq!(fp.fingerprint("POST", "/", &[], &compact), fp.fingerprint("POST", "/", &[], &pretty));
    }
}

#[test]
fn deep_and_huge_json_bodies_do_not_panic() {
    let fp = Fingerprinter::new().fields(["/x"]);
    for body in [
        "[".repeat(1_000_000).into_bytes(),
        format!("{}{}", "{\"a\":".repeat(200_000), "1").into_bytes(),
        format!("[{}1]", "1,".repeat(500_000)).into_bytes(),
        vec![0xff; 6 * 1024 * 1024],
    ] {
        let a = fp.fingerprint("POST", "/", &[], &body);
        assert_eq!(a.len(), 64);
    }
}

fn service(
) -> impl tower::Service<Request, Response = Response<Body>, Error = lambda_http::Error> + Clone {
    IdempotencyLayer::new(MemoryStore::new())
        .require_key(true)
        .tenant(TenantSource::jwt_sub())
        .layer(crate::fixture::counting_handler(
            crate::fixture::Runs::default(),
            Duration::ZERO,
        ))
}

/// Mutate a JSON document: replace one node (found by following `path`, each
/// step an index into an object or array) with an arbitrary value.
fn mutate(node: &mut Value, path: &[usize], replacement: Value) {
    let descend = match (path.first(), &*node) {
        (Some(_), Value::Object(map)) => !map.is_empty(),
        (Some(_), Value::Array(items)) => !items.is_empty(),
        _ => false,
    };
    if !descend {
        *node = replacement;
        return;
    }
    let i = path[0];
    let child = match node {
        Value::Object(map) => {
            let key = map.keys().nth(i % map.len()).cloned().unwrap_or_default();
            map.get_mut(&key)
        }
        Value::Array(items) => {
            let len = items.len();
            items.get_mut(i % len)
        }
        _ => None,
    };
    if let Some(child) = child {
        mutate(child, &path[1..], replacement);
    }
}

/// Crates whose code decodes a Lambda event into an `http::Request` before
/// any handler or middleware runs. This fuzzer has found panics in them
/// (lambda_http 1.3.2 / aws_lambda_events 1.2.1): `isBase64Encoded: true`
/// with a body that is not base64, a host or path that `url::Url::parse`
/// rejects (`build_request_uri` unwraps; the ALB `host` header reaches it), a
/// URI `http` refuses (`expect("failed to build request")`). lambda_runtime's
/// `CatchPanicService` turns those into invocation errors. They are upstream
/// findings, tolerated only when the panic is raised inside these crates:
/// the middleware, which runs after decoding, must never panic.
const UPSTREAM_DECODER_CRATES: &[&str] = &["lambda_http-", "aws_lambda_events-"];

thread_local! {
    /// Where the last panic on this thread was raised (file of its location).
    static LAST_PANIC_FILE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Records each panic's location for [`panic_location`], then hands the
/// panic to the hook that was there before (proptest's, or the default).
fn record_panic_locations() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let file = info.location().map(|l| l.file().to_owned());
            LAST_PANIC_FILE.with(|last| *last.borrow_mut() = file);
            previous(info);
        }));
    });
}

fn is_upstream_decoder_panic(file: &str) -> bool {
    // Registry sources live in `.../index.crates.io-*/<crate>-<version>/src/...`.
    std::path::Path::new(file).components().any(|part| {
        let part = part.as_os_str().to_string_lossy();
        UPSTREAM_DECODER_CRATES
            .iter()
            .any(|name| part.starts_with(name))
    })
}

fn sample_events() -> Vec<Value> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../events");
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .filter_map(|t| serde_json::from_str(&t).ok())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_events_decode_or_fail_cleanly_and_get_documented_statuses(
        which in any::<usize>(),
        path in proptest::collection::vec(any::<usize>(), 0..5),
        replacement in json_value(),
    ) {
        let events = sample_events();
        let mut doc = events[which % events.len()].clone();
        mutate(&mut doc, &path, replacement);
        let text = doc.to_string();
        record_panic_locations();
        LAST_PANIC_FILE.with(|last| last.borrow_mut().take());
        let decoded = std::panic::catch_unwind(|| lambda_http::request::from_str(&text));
        let req = match decoded {
            Ok(Ok(req)) => req,
            Ok(Err(_)) => return Ok(()), // rejected by the decoder with an error: fine
            // Upstream findings inside the event decoder: see
            // UPSTREAM_DECODER_CRATES. Only those are tolerated, only there.
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let file = LAST_PANIC_FILE.with(|last| last.borrow_mut().take()).unwrap_or_default();
                prop_assert!(is_upstream_decoder_panic(&file), "panic outside the upstream decoder, at {file}: {message}");
                return Ok(());
            }
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let res = rt.block_on(service().oneshot(req)).unwrap();
        // 201 from the handler, or one of the middleware's own answers.
        prop_assert!([201, 400, 409, 422].contains(&res.status().as_u16()), "status {}", res.status());
    }
}

#[test]
fn only_panics_raised_inside_the_event_decoder_crates_count_as_upstream() {
    let registry = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f";
    assert!(is_upstream_decoder_panic(&format!(
        "{registry}/lambda_http-1.3.2/src/request.rs"
    )));
    assert!(is_upstream_decoder_panic(&format!(
        "{registry}/aws_lambda_events-1.2.1/src/encodings/http.rs"
    )));
    assert!(!is_upstream_decoder_panic("shared/src/http.rs"));
    assert!(!is_upstream_decoder_panic(&format!(
        "{registry}/lambda_runtime-1.5.0/src/layers/panic.rs"
    )));
    assert!(!is_upstream_decoder_panic(""));
}
