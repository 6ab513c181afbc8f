//! CloudWatch metrics as Embedded Metric Format (EMF) lines.
//!
//! Lambda forwards stdout to CloudWatch Logs, which turns an EMF JSON line into
//! metrics without any API call.
//!
//! ```
//! use lambda_idempotency::metrics::emf_line;
//!
//! let line = emf_line("LambdaIdempotency", &[("Function", "sweeper")], &[("SweepFound", 3)], 1_700_000_000_000);
//! let v: serde_json::Value = serde_json::from_str(&line).unwrap();
//! assert_eq!(v["SweepFound"], 3);
//! assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Namespace"], "LambdaIdempotency");
//! ```

/// One EMF line: the given count metrics under `namespace`, with `dimensions`.
pub fn emf_line(
    namespace: &str,
    dimensions: &[(&str, &str)],
    counts: &[(&str, u64)],
    timestamp_ms: u64,
) -> String {
    let mut root = serde_json::Map::new();
    let names: Vec<&str> = dimensions.iter().map(|(k, _)| *k).collect();
    let metrics: Vec<serde_json::Value> = counts
        .iter()
        .map(|(name, _)| serde_json::json!({"Name": name, "Unit": "Count"}))
        .collect();
    root.insert(
        "_aws".into(),
        serde_json::json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{"Namespace": namespace, "Dimensions": [names], "Metrics": metrics}],
        }),
    );
    for (k, v) in dimensions {
        root.insert((*k).into(), serde_json::Value::from(*v));
    }
    for (k, v) in counts {
        root.insert((*k).into(), serde_json::Value::from(*v));
    }
    serde_json::Value::Object(root).to_string()
}

/// What the middleware counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A key was claimed and the handler ran.
    Claimed,
    /// A stored response was replayed from the store.
    Replayed,
    /// A duplicate arrived while the first was in progress.
    InProgressConflict,
    /// A key was reused with a different request.
    FingerprintMismatch,
    /// A write was rejected because a newer attempt holds the record.
    FencedWrite,
    /// A record was released so a retry runs again.
    Released,
    /// The store failed (the request was refused or not recorded).
    StoreError,
    /// A response was replayed from the local cache.
    CacheHit,
    /// A response was too large to store; a marker was stored instead.
    OversizedResponse,
    /// `max_lease` ended a lease before the invocation's own deadline: a
    /// retry could take the key over while this invocation still runs. Raise
    /// `max_lease` above the function timeout.
    LeaseCapped,
    /// A covered request had no tenant where the tenant source requires one
    /// (answered `401`).
    TenantMissing,
    /// A Kinesis or DynamoDB Streams record whose outcome no redelivery can
    /// change before its idempotency record expires (abandoned and failed
    /// by the sweeper, no key, a stored output that cannot be read back) was logged and counted as
    /// processed, so its shard goes on instead of stalling for a day.
    StreamRecordSkipped,
    /// A request carried an idempotency key with a method the HTTP layer's
    /// default rule does not cover (PUT, DELETE: only POST and PATCH are):
    /// its handler ran unprotected. Cover the method with
    /// [`IdempotencyLayer::methods`](crate::IdempotencyLayer::methods), or
    /// name the methods there to say this is meant.
    UncoveredKey,
}

impl Event {
    /// The metric name.
    pub fn name(self) -> &'static str {
        match self {
            Event::Claimed => "Claimed",
            Event::Replayed => "Replayed",
            Event::InProgressConflict => "InProgressConflict",
            Event::FingerprintMismatch => "FingerprintMismatch",
            Event::FencedWrite => "FencedWrite",
            Event::Released => "Released",
            Event::StoreError => "StoreError",
            Event::CacheHit => "CacheHit",
            Event::OversizedResponse => "OversizedResponse",
            Event::LeaseCapped => "LeaseCapped",
            Event::TenantMissing => "TenantMissing",
            Event::StreamRecordSkipped => "StreamRecordSkipped",
            Event::UncoveredKey => "UncoveredKey",
        }
    }
}

type Sink = dyn Fn(&str) + Send + Sync;

/// CloudWatch metrics of the middleware as EMF lines; off unless configured
/// with [`IdempotencyLayer::metrics`](crate::IdempotencyLayer::metrics).
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use lambda_idempotency::metrics::{Event, Metrics};
///
/// let lines = Arc::new(Mutex::new(Vec::new()));
/// let captured = lines.clone();
/// let metrics = Metrics::new("Orders")
///     .dimension("Service", "orders-api")
///     .sink(move |line| captured.lock().unwrap().push(line.to_owned()));
/// metrics.emit(Event::Replayed);
/// let line: serde_json::Value = serde_json::from_str(&lines.lock().unwrap()[0]).unwrap();
/// assert_eq!(line["Replayed"], 1);
/// assert_eq!(line["Service"], "orders-api");
/// ```
#[derive(Clone)]
pub struct Metrics {
    namespace: String,
    dimensions: Vec<(String, String)>,
    sink: Option<std::sync::Arc<Sink>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("namespace", &self.namespace)
            .field("dimensions", &self.dimensions)
            .finish()
    }
}

impl Metrics {
    /// Metrics in `namespace`, written to stdout (where Lambda's log agent
    /// picks EMF up).
    pub fn new(namespace: impl Into<String>) -> Self {
        Metrics {
            namespace: namespace.into(),
            dimensions: Vec::new(),
            sink: None,
        }
    }

    /// Add a dimension (for example the service name).
    pub fn dimension(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.dimensions.push((name.into(), value.into()));
        self
    }

    /// Write lines to `sink` instead of stdout (tests, custom shippers).
    pub fn sink<F: Fn(&str) + Send + Sync + 'static>(mut self, sink: F) -> Self {
        self.sink = Some(std::sync::Arc::new(sink));
        self
    }

    /// Count one `event`.
    pub fn emit(&self, event: Event) {
        let dimensions: Vec<(&str, &str)> = self
            .dimensions
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let line = emf_line(
            &self.namespace,
            &dimensions,
            &[(event.name(), 1)],
            crate::clock::now_ms(),
        );
        match &self.sink {
            Some(sink) => sink(&line),
            None => println!("{line}"),
        }
    }
}
