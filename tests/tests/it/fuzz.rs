//! Bad input: property-based fuzzing of everything a client or an event
//! source controls. No input may panic; every HTTP answer the middleware makes
//! itself is one of its documented statuses.
//!
//! Every property tallies what it tried; with `RELIABILITY_PROPERTY_LOG` set
//! (by `make reliability`) each test appends its tally to that file, which
//! the reliability report is written from. Without it nothing is written.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use lambda_http::{Body, Request, Response};
use lambda_idempotency::{
    http::IdempotencyKey, Fingerprinter, IdempotencyLayer, MemoryStore, TenantSource,
};
use proptest::prelude::*;
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};

/// The file (JSON lines) property tests report their tallies to.
pub(crate) const PROPERTY_LOG: &str = "RELIABILITY_PROPERTY_LOG";

/// What the cases of one property test tried, by outcome; `cases` counts the
/// cases run. A static per test, since proptest bodies capture nothing.
pub(crate) struct Tally(Mutex<BTreeMap<String, u64>>);

impl Tally {
    pub(crate) const fn new() -> Tally {
        Tally(Mutex::new(BTreeMap::new()))
    }

    pub(crate) fn add(&self, what: impl Into<String>) {
        self.add_n(what, 1);
    }

    pub(crate) fn add_n(&self, what: impl Into<String>, n: u64) {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *counts.entry(what.into()).or_default() += n;
    }

    /// Append `{"test": test, "counts": {...}}` to the property log, if one
    /// is asked for. Called once a test has passed.
    pub(crate) fn report(&self, test: &str) {
        let Some(path) = std::env::var_os(PROPERTY_LOG) else {
            return;
        };
        let counts = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let line = format!("{}\n", json!({ "test": test, "counts": counts }));
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .unwrap_or_else(|e| panic!("{PROPERTY_LOG}={}: {e}", path.to_string_lossy()));
    }
}

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

static KEY_PARSER: Tally = Tally::new();
static QUOTED_KEYS: Tally = Tally::new();
static FINGERPRINT_BYTES: Tally = Tally::new();
static FINGERPRINT_JSON: Tally = Tally::new();
static HUGE_BODIES: Tally = Tally::new();
static MUTATED_EVENTS: Tally = Tally::new();
static MUTATED_STRINGS: Tally = Tally::new();

// Each property is a plain function made by `proptest!`, run by a test that
// reports its tally once it passed.
proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    fn key_parser_property(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        KEY_PARSER.add("cases");
        if let Ok(k) = IdempotencyKey::parse_bytes(&bytes) {
            KEY_PARSER.add("accepted");
            let k = k.as_str();
            prop_assert!(!k.is_empty() && k.len() <= lambda_idempotency::http::MAX_KEY_LEN);
            prop_assert!(k.bytes().all(|b| (0x20..=0x7e).contains(&b)));
        } else {
            KEY_PARSER.add("rejected");
        }
    }

    fn quoted_keys_property(k in "[ -~]{1,200}") {
        QUOTED_KEYS.add("cases");
        let quoted = format!("\"{}\"", k.replace('\\', "\\\\").replace('"', "\\\""));
        let parsed = IdempotencyKey::parse(&quoted);
        prop_assert!(parsed.is_ok(), "{quoted}: {:?}", parsed.err());
        let parsed = parsed.unwrap();
        prop_assert_eq!(parsed.as_str(), k.as_str());
    }

    fn fingerprint_bytes_property(bytes in proptest::collection::vec(any::<u8>(), 0..2_000), method in "[A-Z]{1,7}", path in "/[ -~]{0,40}") {
        FINGERPRINT_BYTES.add("cases");
        if std::str::from_utf8(&bytes).is_err() {
            FINGERPRINT_BYTES.add("invalid UTF-8");
        }
        let fp = Fingerprinter::new().fields(["/a", "/b/0"]);
        prop_assert_eq!(fp.fingerprint(&method, &path, &[], &bytes), fp.fingerprint(&method, &path, &[], &bytes));
    }

    fn fingerprint_json_property(value in json_value()) {
        FINGERPRINT_JSON.add("cases");
        if value.is_object() || value.is_array() {
            FINGERPRINT_JSON.add("objects and arrays");
        }
        let fp = Fingerprinter::new();
        let compact = serde_json::to_vec(&value).unwrap();
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        prop_assert_eq!(fp.fingerprint("POST", "/", &[], &compact), fp.fingerprint("POST", "/", &[], &pretty));
    }
}

#[test]
fn key_parser_never_panics_and_accepts_only_valid_keys() {
    key_parser_property();
    KEY_PARSER.report("fuzz::key_parser");
}

#[test]
fn quoted_keys_round_trip() {
    quoted_keys_property();
    QUOTED_KEYS.report("fuzz::quoted_keys");
}

#[test]
fn fingerprint_of_arbitrary_bytes_is_deterministic() {
    fingerprint_bytes_property();
    FINGERPRINT_BYTES.report("fuzz::fingerprint_bytes");
}

#[test]
fn fingerprint_ignores_json_formatting() {
    fingerprint_json_property();
    FINGERPRINT_JSON.report("fuzz::fingerprint_json");
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
        HUGE_BODIES.add("cases");
        HUGE_BODIES.add_n("bytes", body.len() as u64);
    }
    HUGE_BODIES.report("fuzz::huge_bodies");
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
/// the middleware, which runs after decoding, must never panic. query_map
/// 0.7.0 is the query-string type those two decode into: a
/// `multiValueQueryStringParameters` entry with an empty list of values
/// (`{"": []}`) indexes past its end while the request is built.
const UPSTREAM_DECODER_CRATES: &[&str] = &["lambda_http-", "aws_lambda_events-", "query_map-"];

thread_local! {
    /// Where the last panic on this thread was raised (file and line).
    static LAST_PANIC: std::cell::RefCell<Option<(String, u32)>> = const { std::cell::RefCell::new(None) };
}

/// Records each panic's location for [`panic_location`], then hands the
/// panic to the hook that was there before (proptest's, or the default).
fn record_panic_locations() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let location = info.location().map(|l| (l.file().to_owned(), l.line()));
            LAST_PANIC.with(|last| *last.borrow_mut() = location);
            previous(info);
        }));
    });
}

/// The message a panic carried.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// How an upstream decoder panic is tallied: where, and the message up to
/// its first `": "` (the `expect` text, or which `unwrap`).
fn upstream_panic(file: &str, line: u32, message: &str) -> String {
    let head: String = message
        .split(": ")
        .next()
        .unwrap_or_default()
        .trim()
        .chars()
        .take(60)
        .collect();
    format!(
        "upstream decoder panic at {}: {head}",
        short_location(file, line)
    )
}

/// `crate-version/src/file.rs:line` of an upstream panic location.
fn short_location(file: &str, line: u32) -> String {
    let parts: Vec<_> = std::path::Path::new(file)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let from = parts
        .iter()
        .position(|p| UPSTREAM_DECODER_CRATES.iter().any(|n| p.starts_with(n)))
        .unwrap_or(0);
    format!("{}:{line}", parts[from..].join("/"))
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

/// The HTTP sample events (API Gateway REST and HTTP APIs, Function URL,
/// ALB), sorted by file name so case seeds stay reproducible.
fn http_sample_events() -> Vec<Value> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../events");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            !crate::NON_HTTP_EVENTS.contains(&name.as_ref())
        })
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|t| serde_json::from_str(&t).ok())
        .collect()
}

/// JSON pointers to every string in `v`.
fn string_pointers(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::String(_) => out.push(at.to_owned()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                string_pointers(item, &format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let k = k.replace('~', "~0").replace('/', "~1");
                string_pointers(item, &format!("{at}/{k}"), out);
            }
        }
        _ => {}
    }
}

/// Strings a client or a proxy could put in a field: any text, printable
/// ASCII (header-like), or a structured-field quoted string.
fn field_string() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,64}",
        "[ -~]{0,64}",
        "[ -~]{0,40}".prop_map(|s| format!("\"{s}\"")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    fn mutated_events_property(
        which in any::<usize>(),
        path in proptest::collection::vec(any::<usize>(), 0..5),
        replacement in json_value(),
    ) {
        MUTATED_EVENTS.add("cases");
        let events = sample_events();
        let mut doc = events[which % events.len()].clone();
        mutate(&mut doc, &path, replacement);
        let text = doc.to_string();
        record_panic_locations();
        LAST_PANIC.with(|last| last.borrow_mut().take());
        let decoded = std::panic::catch_unwind(|| lambda_http::request::from_str(&text));
        let req = match decoded {
            Ok(Ok(req)) => req,
            Ok(Err(_)) => {
                // Rejected by the decoder with an error: fine.
                MUTATED_EVENTS.add("decoder error");
                return Ok(());
            }
            // Upstream findings inside the event decoder: see
            // UPSTREAM_DECODER_CRATES. Only those are tolerated, only there.
            Err(panic) => {
                let message = panic_message(&*panic);
                let (file, line) = LAST_PANIC.with(|last| last.borrow_mut().take()).unwrap_or_default();
                prop_assert!(is_upstream_decoder_panic(&file), "panic outside the upstream decoder, at {file}: {message}");
                MUTATED_EVENTS.add(upstream_panic(&file, line, &message));
                return Ok(());
            }
        };
        MUTATED_EVENTS.add("decoded");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let res = rt.block_on(service().oneshot(req)).unwrap();
        // 201 from the handler, or one of the middleware's own answers (401:
        // the event lost its JWT `sub`, and the tenant source fails closed).
        prop_assert!([201, 400, 401, 409, 422].contains(&res.status().as_u16()), "status {}", res.status());
        MUTATED_EVENTS.add(format!("status {}", res.status().as_u16()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    // Type-preserving mutations: one string of an HTTP event (a header such
    // as the key or the JWT, the body, the path, the method, ...) replaced,
    // so most events still decode and reach the middleware.
    fn mutated_strings_property(
        which in any::<usize>(),
        field in any::<usize>(),
        replacement in field_string(),
    ) {
        MUTATED_STRINGS.add("cases");
        let events = http_sample_events();
        let mut doc = events[which % events.len()].clone();
        let mut pointers = Vec::new();
        string_pointers(&doc, "", &mut pointers);
        let pointer = &pointers[field % pointers.len()];
        if let Some(node) = doc.pointer_mut(pointer) {
            *node = Value::String(replacement);
        }
        let text = doc.to_string();
        record_panic_locations();
        LAST_PANIC.with(|last| last.borrow_mut().take());
        let req = match std::panic::catch_unwind(|| lambda_http::request::from_str(&text)) {
            Ok(Ok(req)) => req,
            Ok(Err(_)) => {
                MUTATED_STRINGS.add("decoder error");
                return Ok(());
            }
            Err(panic) => {
                let message = panic_message(&*panic);
                let (file, line) = LAST_PANIC.with(|last| last.borrow_mut().take()).unwrap_or_default();
                prop_assert!(is_upstream_decoder_panic(&file), "panic outside the upstream decoder, at {file}:{line} ({pointer}): {message}");
                MUTATED_STRINGS.add(upstream_panic(&file, line, &message));
                return Ok(());
            }
        };
        MUTATED_STRINGS.add("decoded");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let res = rt.block_on(service().oneshot(req)).unwrap();
        prop_assert!([201, 400, 401, 409, 422].contains(&res.status().as_u16()), "status {} ({pointer})", res.status());
        MUTATED_STRINGS.add(format!("status {}", res.status().as_u16()));
    }
}

#[test]
fn mutated_strings_in_http_events_get_documented_statuses() {
    mutated_strings_property();
    MUTATED_STRINGS.report("fuzz::mutated_strings");
}

#[test]
fn mutated_events_decode_or_fail_cleanly_and_get_documented_statuses() {
    mutated_events_property();
    MUTATED_EVENTS.report("fuzz::mutated_events");
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
    assert_eq!(
        upstream_panic(
            &format!("{registry}/lambda_http-1.3.2/src/request.rs"),
            7,
            "failed to build request: http::Error(InvalidUri(InvalidUriChar))"
        ),
        "upstream decoder panic at lambda_http-1.3.2/src/request.rs:7: failed to build request"
    );
    assert_eq!(
        upstream_panic(
            "lambda_http-1.3.2/src/request.rs",
            553,
            "called `Result::unwrap()` on an `Err` value: EmptyHost"
        ),
        "upstream decoder panic at lambda_http-1.3.2/src/request.rs:553: called `Result::unwrap()` on an `Err` value"
    );
}
