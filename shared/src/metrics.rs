//! CloudWatch metrics as Embedded Metric Format (EMF) lines.
//!
//! Lambda forwards stdout to CloudWatch Logs, which turns an EMF JSON line into
//! metrics without any API call. Logs are billed per byte ingested, so the
//! middleware writes at most one line per invocation: every count of one HTTP
//! request, one event, or one whole SQS, Kinesis or DynamoDB Streams batch is
//! gathered and written together when it ends (several metrics, one
//! `_aws` header).
//!
//! ```
//! use lambda_idempotency::metrics::emf_line;
//!
//! let line = emf_line("LambdaIdempotency", &[("Function", "sweeper")], &[("SweepFound", 3)], 1_700_000_000_000);
//! let v: serde_json::Value = serde_json::from_str(&line).unwrap();
//! assert_eq!(v["SweepFound"], 3);
//! assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Namespace"], "LambdaIdempotency");
//! ```
//!
//! **One deployment's metrics.** Two deployments of the same functions in
//! one account and Region (staging and production, or two templates side
//! by side) print the same namespace, metric names and dimensions, so each
//! would raise the other's alarms. Set [`STACK_ENV`]
//! (`IDEMPOTENCY_METRICS_STACK`; the SAM templates set it to the stack's
//! name) and every line also carries the dimension [`STACK_DIMENSION`]
//! (`Stack`) with that value, in the same dimension set as the others:
//! alarms and dashboards then name it to watch one deployment. Unset or
//! empty, the lines are what they always were.

/// The environment variable whose value, when set and not empty, every EMF
/// line this crate writes carries as the dimension [`STACK_DIMENSION`]
/// (read at each line, so it applies to [`Metrics`], to [`emf_line`] and to
/// the sweeper's summary alike). A line whose dimensions already name
/// [`STACK_DIMENSION`] keeps its own value.
pub const STACK_ENV: &str = crate::settings::METRICS_STACK_ENV;

/// The dimension that names the deployment a line comes from: see
/// [`STACK_ENV`].
pub const STACK_DIMENSION: &str = "Stack";

/// One EMF line: the given count metrics under `namespace`, with
/// `dimensions`, and with [`STACK_DIMENSION`] when [`STACK_ENV`] is set.
pub fn emf_line(
    namespace: &str,
    dimensions: &[(&str, &str)],
    counts: &[(&str, u64)],
    timestamp_ms: u64,
) -> String {
    let stack = crate::settings::metrics_stack();
    emf_line_of(
        namespace,
        dimensions,
        stack.as_deref(),
        counts,
        timestamp_ms,
    )
}

/// [`emf_line`] with the deployment's name given (`None`: no
/// [`STACK_DIMENSION`]) instead of read from [`STACK_ENV`].
fn emf_line_of(
    namespace: &str,
    dimensions: &[(&str, &str)],
    stack: Option<&str>,
    counts: &[(&str, u64)],
    timestamp_ms: u64,
) -> String {
    let mut dimensions = dimensions.to_vec();
    if let Some(stack) = stack {
        if !dimensions.iter().any(|(k, _)| *k == STACK_DIMENSION) {
            dimensions.push((STACK_DIMENSION, stack));
        }
    }
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
    for (k, v) in &dimensions {
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

    /// Count one `event`: inside an invocation of the middleware, added to
    /// that invocation's line (written when it ends); elsewhere, a line of
    /// its own at once.
    pub fn emit(&self, event: Event) {
        let gathered = INVOCATION
            .try_with(|tally| tally.metrics.same_target(self) && tally.add(event))
            .unwrap_or(false);
        if !gathered {
            self.write(&[(event.name(), 1)]);
        }
    }

    /// Metrics written to the same place under the same name and dimensions.
    fn same_target(&self, other: &Metrics) -> bool {
        let same_sink = match (&self.sink, &other.sink) {
            (None, None) => true,
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
            _ => false,
        };
        same_sink && self.namespace == other.namespace && self.dimensions == other.dimensions
    }

    /// One EMF line with `counts`.
    fn write(&self, counts: &[(&str, u64)]) {
        let dimensions: Vec<(&str, &str)> = self
            .dimensions
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let line = emf_line(&self.namespace, &dimensions, counts, crate::clock::now_ms());
        match &self.sink {
            Some(sink) => sink(&line),
            None => println!("{line}"),
        }
    }
}

tokio::task_local! {
    /// The counts of the invocation this task is running, if any.
    static INVOCATION: std::sync::Arc<Tally>;
}

/// What one invocation counted so far, written as one line when it ends (or
/// when its future is dropped half-way, so a cancelled invocation still
/// reports what it did).
struct Tally {
    metrics: Metrics,
    counts: std::sync::Mutex<Vec<(Event, u64)>>,
}

impl Tally {
    /// Add one `event`; `false` if the tally could not be reached (then the
    /// caller writes the event on its own line, so no count is lost).
    fn add(&self, event: Event) -> bool {
        let Ok(mut counts) = self.counts.lock() else {
            return false;
        };
        match counts.iter_mut().find(|(e, _)| *e == event) {
            Some((_, n)) => *n += 1,
            None => counts.push((event, 1)),
        }
        true
    }

    /// Write what was counted, once.
    fn flush(&self) {
        let counts = match self.counts.lock() {
            Ok(mut counts) => std::mem::take(&mut *counts),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        if !counts.is_empty() {
            let named: Vec<(&str, u64)> = counts.iter().map(|(e, n)| (e.name(), *n)).collect();
            self.metrics.write(&named);
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Run `invocation` with its counts gathered into one line, written when it
/// ends. Without metrics, or inside an invocation already gathering for the
/// same metrics (an event call inside a batch), it just runs.
pub(crate) async fn gathered<F: std::future::Future>(
    metrics: Option<&Metrics>,
    invocation: F,
) -> F::Output {
    let Some(metrics) = metrics else {
        return invocation.await;
    };
    let nested = INVOCATION
        .try_with(|tally| tally.metrics.same_target(metrics))
        .unwrap_or(false);
    if nested {
        return invocation.await;
    }
    let tally = std::sync::Arc::new(Tally {
        metrics: metrics.clone(),
        counts: std::sync::Mutex::new(Vec::new()),
    });
    let output = INVOCATION.scope(tally.clone(), invocation).await;
    tally.flush();
    output
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    /// Metrics whose lines are kept, parsed.
    fn captured(namespace: &str) -> (Metrics, Arc<Mutex<Vec<serde_json::Value>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let metrics = Metrics::new(namespace).sink(move |line| {
            let parsed = serde_json::from_str(line).expect("an EMF line is JSON");
            sink.lock().unwrap().push(parsed)
        });
        (metrics, lines)
    }

    fn names(line: &serde_json::Value) -> Vec<&str> {
        line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .expect("a list of metrics")
            .iter()
            .map(|m| m["Name"].as_str().expect("a name"))
            .collect()
    }

    #[test]
    fn a_stack_joins_the_dimension_set_and_its_absence_changes_nothing() {
        let dims = [("Service", "orders-api")];
        let plain: serde_json::Value =
            serde_json::from_str(&emf_line_of("N", &dims, None, &[("Claimed", 1)], 7)).unwrap();
        assert_eq!(
            plain,
            serde_json::json!({
                "_aws": {"Timestamp": 7, "CloudWatchMetrics": [{"Namespace": "N",
                    "Dimensions": [["Service"]], "Metrics": [{"Name": "Claimed", "Unit": "Count"}]}]},
                "Service": "orders-api", "Claimed": 1,
            }),
            "without a stack, the line as it always was"
        );
        let scoped: serde_json::Value = serde_json::from_str(&emf_line_of(
            "N",
            &dims,
            Some("orders-prod"),
            &[("Claimed", 1)],
            7,
        ))
        .unwrap();
        assert_eq!(
            scoped["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            serde_json::json!([["Service", "Stack"]])
        );
        assert_eq!(scoped["Stack"], "orders-prod");
        assert_eq!(scoped["Service"], "orders-api");
        let own: serde_json::Value = serde_json::from_str(&emf_line_of(
            "N",
            &[("Stack", "mine")],
            Some("orders-prod"),
            &[("Claimed", 1)],
            7,
        ))
        .unwrap();
        assert_eq!(
            (
                &own["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
                &own["Stack"]
            ),
            (&serde_json::json!([["Stack"]]), &serde_json::json!("mine")),
            "a dimension named Stack by the caller is kept, not doubled"
        );
    }

    #[test]
    fn outside_an_invocation_each_count_is_a_line_at_once() {
        let (metrics, lines) = captured("T");
        metrics.emit(Event::Claimed);
        metrics.emit(Event::Replayed);
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(names(&lines[0]), ["Claimed"]);
        assert_eq!(names(&lines[1]), ["Replayed"]);
    }

    #[tokio::test]
    async fn one_invocation_writes_one_line_with_every_count() {
        let (metrics, lines) = captured("T");
        gathered(Some(&metrics), async {
            metrics.emit(Event::LeaseCapped);
            metrics.emit(Event::Claimed);
            metrics.emit(Event::Claimed);
            assert!(lines.lock().unwrap().is_empty(), "written at the end");
        })
        .await;
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(names(&lines[0]), ["LeaseCapped", "Claimed"]);
        assert_eq!(lines[0]["Claimed"], 2);
        assert_eq!(lines[0]["LeaseCapped"], 1);
    }

    #[tokio::test]
    async fn an_invocation_that_counts_nothing_writes_nothing() {
        let (metrics, lines) = captured("T");
        gathered(Some(&metrics), async {}).await;
        assert!(lines.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_call_inside_a_batch_joins_the_batch_line() {
        let (metrics, lines) = captured("T");
        gathered(Some(&metrics), async {
            for event in [Event::Claimed, Event::Replayed, Event::Claimed] {
                gathered(Some(&metrics), async { metrics.emit(event) }).await;
            }
        })
        .await;
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["Claimed"], 2);
        assert_eq!(lines[0]["Replayed"], 1);
    }

    #[tokio::test]
    async fn other_metrics_inside_an_invocation_keep_their_own_lines() {
        let (ours, our_lines) = captured("Ours");
        let (theirs, their_lines) = captured("Theirs");
        gathered(Some(&ours), async {
            ours.emit(Event::Claimed);
            theirs.emit(Event::StoreError);
            assert_eq!(their_lines.lock().unwrap().len(), 1, "not held back");
        })
        .await;
        assert_eq!(our_lines.lock().unwrap().len(), 1);
        let theirs = their_lines.lock().unwrap();
        assert_eq!(
            theirs[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"],
            "Theirs"
        );
        assert_eq!(names(&theirs[0]), ["StoreError"]);
    }

    #[tokio::test]
    async fn a_cancelled_invocation_still_writes_what_it_counted() {
        let (metrics, lines) = captured("T");
        let invocation = gathered(Some(&metrics), async {
            metrics.emit(Event::Claimed);
            std::future::pending::<()>().await
        });
        let cut = tokio::time::timeout(Duration::from_millis(20), invocation).await;
        assert!(cut.is_err(), "the invocation never ends by itself");
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["Claimed"], 1);
    }
}
