//! Statistics: durations in microseconds, the median, and the latency
//! samples of the latency passes with the requests counted around them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use integration_tests::RequestCounter;
use serde_json::{json, Value};

pub(crate) fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Latency samples of one kind of call, and the DynamoDB requests counted
/// around those very calls.
#[derive(Default)]
struct Series {
    us: Vec<f64>,
    requests: u64,
}

#[derive(Default)]
pub(crate) struct Samples(BTreeMap<&'static str, Series>);

impl Samples {
    pub(crate) fn add(&mut self, kind: &'static str, us: f64, requests: u64) {
        let series = self.0.entry(kind).or_default();
        series.us.push(us);
        series.requests += requests;
    }

    /// Runs `op`, adding its time and the store requests it made (as
    /// `counter` saw them) under `kind`.
    pub(crate) async fn measure<T>(
        &mut self,
        kind: &'static str,
        counter: &RequestCounter,
        op: impl std::future::Future<Output = T>,
    ) -> T {
        let before = counter.get();
        let start = Instant::now();
        let out = op.await;
        self.add(kind, micros(start.elapsed()), counter.get() - before);
        out
    }

    /// `{"<kind>_us": [...]}` and `{"<kind>": requests}`.
    pub(crate) fn into_json(
        self,
    ) -> (
        serde_json::Map<String, Value>,
        serde_json::Map<String, Value>,
    ) {
        let mut samples = serde_json::Map::new();
        let mut requests = serde_json::Map::new();
        for (kind, series) in self.0 {
            samples.insert(format!("{kind}_us"), json!(series.us));
            requests.insert(kind.to_owned(), json!(series.requests));
        }
        (samples, requests)
    }
}
