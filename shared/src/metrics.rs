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
