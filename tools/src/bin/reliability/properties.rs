//! Sections 4 and 5: the tallies of the property tests (fuzzing, model
//! check), which scripts/reliability.sh runs just before and which append
//! them to `PROPERTY_LOG`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::Result;

/// The property tests of `tests/tests/it` that the report covers, by the
/// name they report under, with what they try.
pub(crate) const PROPERTIES: &[(&str, &str)] = &[
    (
        "fuzz::key_parser",
        "random byte strings (0-300 bytes) through the `Idempotency-Key` parser",
    ),
    (
        "fuzz::quoted_keys",
        "printable keys, quoted as structured-field strings, parsed back",
    ),
    (
        "fuzz::fingerprint_bytes",
        "random bodies (0-2,000 bytes), methods and paths, fingerprinted twice",
    ),
    (
        "fuzz::fingerprint_json",
        "random JSON documents (up to 6 levels), compact and pretty: one fingerprint",
    ),
    (
        "fuzz::huge_bodies",
        "1 M nested brackets, 200,000 nested objects, a 500,000-element array, 6 MB of invalid UTF-8",
    ),
    (
        "fuzz::mutated_events",
        "sample events with one node replaced by random JSON, through the event decoder and the middleware",
    ),
    (
        "fuzz::mutated_strings",
        "HTTP sample events with one string (a header, the key, the JWT, the body, the path, ...) replaced by random text, through the decoder and the middleware",
    ),
    (
        "model::memory",
        "interleavings of 1-39 operations, in-memory store, against the reference model",
    ),
    (
        "model::dynamodb_local",
        "interleavings of 1-29 operations, DynamoDB Local and the sweeper, against the reference model",
    ),
    (
        "interleavings",
        "the interleaving explorer (tests/tests/it/interleavings.rs): two attempts of one key (a retry past the lease or a duplicate inside it), with a sweep past the lease and an operator's forced `release` or `fail`, alone and together, with and without recovery points, on the in-memory store: every order of their store calls with at most 2 preemptions (`ci`) or every order (`full`), fault-free and with every fault kind at every call; no handler run once the outcome is stored, every completion reported stored and every replay the key's final outcome, a settling retry that gets it",
    ),
    (
        "interleavings::dynamodb_local",
        "the interleaving explorer's scenarios on DynamoDB Local (sweep index; at `ci` those without recovery points), sampled: 4 orders drawn from seeds per scenario fault-free, and each fault kind at each call under one drawn order",
    ),
    (
        "interleavings::redis",
        "the same on Redis",
    ),
    (
        "interleavings::postgres",
        "the same on PostgreSQL",
    ),
    (
        "stream_chaos",
        "seeds of the stream discovery under random stream faults (images dropped, duplicated, delayed; shards listed in any order, trimmed, closed, gone; empty pages, failed reads, expired iterators) on DynamoDB Local through the streams proxy: every stuck record found within lease + grace + the full-pass period + one sweep, none resolved twice, no live or completed record touched",
    ),
];

/// The fault harness's tests (tests/tests/it/fault_harness.rs, section 6),
/// by the name they report under, with what they cover.
pub(crate) const FAULT_HARNESS: &[(&str, &str)] = &[
    (
        "fault_harness::memory",
        "in-memory store: HTTP layer, `IdempotentFunction`, `SqsBatch`, `KinesisBatch` and `DynamoDbStreamBatch`, plain, recovery points, local cache, body keys and `wait_for`; every sweep with its housekeeping (`DeleteExpired`) on",
    ),
    (
        "fault_harness::powertools_cutover",
        "the cut-over from a Powertools table on DynamoDB Local (its `GetItem` faulted too), HTTP layer and `IdempotentFunction`; a key Powertools completed, and (HTTP) one it holds in progress",
    ),
    (
        "fault_harness::dynamodb_local",
        "DynamoDB Local (sweep index): every combination of the in-memory store's, and transactional completion",
    ),
    (
        "fault_harness::s3_offload",
        "S3 offload on a local S3 server (its `PutObject`, `GetObject` and `DeleteObject` faulted too), HTTP layer and `IdempotentFunction`",
    ),
    (
        "fault_harness::dynamodb_stream",
        "the sweeper as deployed by default: DynamoDB Local's stream discovery, its stream read through the streams proxy, the lifecycle driven directly (`ci`), every combination of the in-memory store's (`full`); the saving of the listing's place (`finish`) failed at each sweep schedule's first sweep",
    ),
    (
        "fault_harness::redis",
        "Redis: every combination of the in-memory store's",
    ),
    (
        "fault_harness::redis_cluster",
        "a three-primary Redis Cluster: the lifecycle driven directly (`ci`); every combination of the in-memory store's (`full`)",
    ),
    (
        "fault_harness::postgres",
        "PostgreSQL: every combination of the in-memory store's, and transactional completion",
    ),
    (
        "fault_harness::pgbouncer",
        "PostgreSQL through PgBouncer in transaction pooling: the lifecycle driven directly and transactional completion (`ci`); every combination of the in-memory store's and transactional completion (`full`)",
    ),
];

/// What each property test reported: its counts by outcome, `cases` first.
pub(crate) struct Properties(pub(crate) BTreeMap<String, BTreeMap<String, u64>>);

impl Properties {
    /// Read the JSON lines the tests appended (`RELIABILITY_PROPERTY_LOG`);
    /// every test of [`PROPERTIES`] must be there, having run cases.
    pub(crate) fn read(path: &str) -> Result<Properties> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!("{path}: {e} (the property tests write it; run scripts/reliability.sh)")
        })?;
        let mut tests = BTreeMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).map_err(|e| format!("{path}: {e}"))?;
            let name = v["test"]
                .as_str()
                .ok_or(format!("{path}: no test in {line}"))?;
            let counts: BTreeMap<String, u64> = serde_json::from_value(v["counts"].clone())
                .map_err(|e| format!("{path}: {e} in {line}"))?;
            tests.insert(name.to_owned(), counts);
        }
        for (name, _) in PROPERTIES.iter().chain(FAULT_HARNESS) {
            if tests
                .get(*name)
                .and_then(|c| c.get("cases"))
                .copied()
                .unwrap_or(0)
                == 0
            {
                return Err(format!(
                    "{path}: the property test {name} reported no cases"
                ));
            }
        }
        Ok(Properties(tests))
    }

    pub(crate) fn count(&self, test: &str, what: &str) -> u64 {
        self.0
            .get(test)
            .and_then(|c| c.get(what))
            .copied()
            .unwrap_or(0)
    }
}
