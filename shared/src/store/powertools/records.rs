//! [`PowertoolsRecords`]: the records Powertools for AWS Lambda (Python)
//! left in DynamoDB, read during a cut-over so that no key still inside its
//! Powertools expiry runs a second time.
//!
//! Powertools keeps one item per key: `id` = `<prefix>#<hash>`, where the
//! prefix is `<function name>.<module>.<handler>` (or the decorator's
//! `key_prefix`) and the hash is the MD5 (by default) of
//! `json.dumps(key, sort_keys=True)`, the key being what its
//! `event_key_jmespath` selected; `status` (`INPROGRESS`, `COMPLETED`),
//! `data` (the handler's result as JSON text), `expiration` (epoch seconds),
//! `in_progress_expiration` (epoch milliseconds) and `validation` (the hash
//! of the validated payload). A table with a sort key holds them under one
//! partition (`idempotency#<function name>` by default) with the id as the
//! sort key. Every name is configurable, as it is in Powertools.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use sha2::Digest;

use crate::error::{Error, ErrorKind};

/// The hash function Powertools was configured with
/// (`IdempotencyConfig(hash_function=...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PowertoolsHash {
    /// `md5`, Powertools' default.
    #[default]
    Md5,
    /// `sha256`.
    Sha256,
}

impl PowertoolsHash {
    fn hex(self, text: &str) -> String {
        match self {
            PowertoolsHash::Md5 => crate::hash::hex(&md5::Md5::digest(text.as_bytes())),
            PowertoolsHash::Sha256 => crate::hash::hex(&sha2::Sha256::digest(text.as_bytes())),
        }
    }
}

/// Where and how Powertools for AWS Lambda (Python) kept its idempotency
/// records, for a cut-over without running anything twice.
///
/// Given to [`PowertoolsCutover`](super::PowertoolsCutover) around the
/// store this library writes to: until
/// `until`, every claim that would run the handler (one that finds no
/// record of its own, a takeover, a claim that resumes from a recovery
/// point) looks up the Powertools record of the same key first. A
/// `COMPLETED` one is replayed (its stored JSON as the response or output)
/// and copied into this library's own record, so the key's later duplicates
/// replay without the lookup; an `INPROGRESS` one answers as in progress;
/// none, or an expired one, lets the handler run. From `until` on nothing is
/// looked up and nothing is spent.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use lambda_idempotency::store::powertools::PowertoolsRecords;
///
/// # async fn f(client: aws_sdk_dynamodb::Client) {
/// // Powertools kept records for an hour (`expires_after_seconds=3600`):
/// // look them up for the hour after the switch.
/// let records = PowertoolsRecords::new(
///     client,
///     "IdempotencyTable",
///     "orders-api.app.lambda_handler",
///     SystemTime::now() + Duration::from_secs(3600),
/// );
/// # }
/// ```
#[derive(Clone)]
pub struct PowertoolsRecords {
    client: Client,
    table: String,
    key_prefix: String,
    until_ms: u64,
    hash: PowertoolsHash,
    key_attr: String,
    sort_key: Option<(String, String)>,
    status_attr: String,
    data_attr: String,
    expiry_attr: String,
    in_progress_expiry_attr: String,
    validation_attr: String,
    validate_body: bool,
}

impl std::fmt::Debug for PowertoolsRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PowertoolsRecords")
            .field("table", &self.table)
            .field("key_prefix", &self.key_prefix)
            .field("until_ms", &self.until_ms)
            .field("hash", &self.hash)
            .field("key_attr", &self.key_attr)
            .field("sort_key", &self.sort_key)
            .field("validate_body", &self.validate_body)
            .finish_non_exhaustive()
    }
}

/// What a Powertools record says about a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PowertoolsRecord {
    /// It ran: its result as JSON text, kept until `expires_at_s`, and the
    /// hash of the payload it validated, if any.
    Completed {
        data: String,
        expires_at_s: u64,
        validation: Option<String>,
    },
    /// It runs (or ran and died) until `until_ms`.
    InProgress { until_ms: u64 },
}

impl PowertoolsRecords {
    /// Records in `table` (the one Powertools wrote, which may be this
    /// library's own), with ids `key_prefix#<hash>` (the part before `#` in
    /// the table's ids, for example `orders-api.app.lambda_handler`), looked
    /// up until `until`: the switch plus Powertools' `expires_after_seconds`
    /// is enough, as no record outlives it. The layout is Powertools'
    /// default; the other methods say where it differs.
    pub fn new(
        client: Client,
        table: impl Into<String>,
        key_prefix: impl Into<String>,
        until: SystemTime,
    ) -> Self {
        let until_ms = until
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis();
        PowertoolsRecords {
            client,
            table: table.into(),
            key_prefix: key_prefix.into(),
            until_ms: u64::try_from(until_ms).unwrap_or(u64::MAX),
            hash: PowertoolsHash::Md5,
            key_attr: "id".into(),
            sort_key: None,
            status_attr: "status".into(),
            data_attr: "data".into(),
            expiry_attr: "expiration".into(),
            in_progress_expiry_attr: "in_progress_expiration".into(),
            validation_attr: "validation".into(),
            validate_body: false,
        }
    }

    /// The partition key attribute (Powertools' `key_attr`, `id` by default).
    pub fn key_attr(mut self, name: impl Into<String>) -> Self {
        self.key_attr = name.into();
        self
    }

    /// A table with a sort key (Powertools' `sort_key_attr`): every record
    /// under the partition `static_pk_value` (Powertools' default is
    /// `idempotency#<function name>`), the id in `sort_key_attr`.
    pub fn sort_key(
        mut self,
        sort_key_attr: impl Into<String>,
        static_pk_value: impl Into<String>,
    ) -> Self {
        self.sort_key = Some((sort_key_attr.into(), static_pk_value.into()));
        self
    }

    /// The status attribute (`status` by default).
    pub fn status_attr(mut self, name: impl Into<String>) -> Self {
        self.status_attr = name.into();
        self
    }

    /// The result attribute (`data` by default).
    pub fn data_attr(mut self, name: impl Into<String>) -> Self {
        self.data_attr = name.into();
        self
    }

    /// The expiry attribute, epoch seconds (`expiration` by default).
    pub fn expiry_attr(mut self, name: impl Into<String>) -> Self {
        self.expiry_attr = name.into();
        self
    }

    /// The in-progress expiry attribute, epoch milliseconds
    /// (`in_progress_expiration` by default).
    pub fn in_progress_expiry_attr(mut self, name: impl Into<String>) -> Self {
        self.in_progress_expiry_attr = name.into();
        self
    }

    /// The payload hash attribute (`validation` by default).
    pub fn validation_key_attr(mut self, name: impl Into<String>) -> Self {
        self.validation_attr = name.into();
        self
    }

    /// The hash function Powertools used (`md5` by default).
    pub fn hash_function(mut self, hash: PowertoolsHash) -> Self {
        self.hash = hash;
        self
    }

    /// Powertools validated the request body (`payload_validation_jmespath
    /// ="body"` on an API Gateway event): a request whose body hashes
    /// otherwise than the record's is a key reused with a different request
    /// (`422`), as it was under Powertools. Read by the HTTP layer only.
    pub fn validate_body(mut self) -> Self {
        self.validate_body = true;
        self
    }

    /// The table Powertools kept its records in, for messages.
    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// When the lookups stop.
    pub fn until(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.until_ms)
    }

    /// Are records looked up at `now_ms`?
    pub(crate) fn open(&self, now_ms: u64) -> bool {
        now_ms < self.until_ms
    }

    /// Does the HTTP layer compare the body with the record's hash?
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn validates_body(&self) -> bool {
        self.validate_body
    }

    /// Powertools' hash of `value`: of `json.dumps(value, sort_keys=True)`.
    pub(crate) fn hash_of(&self, value: &serde_json::Value) -> String {
        self.hash.hex(&super::python::dumps(value))
    }

    /// The id Powertools gave the record of key `key` (the value its
    /// `event_key_jmespath` selected).
    pub(crate) fn record_id(&self, key: &serde_json::Value) -> String {
        format!("{}#{}", self.key_prefix, self.hash_of(key))
    }

    fn item_key(&self, id: String) -> HashMap<String, AttributeValue> {
        match &self.sort_key {
            None => HashMap::from([(self.key_attr.clone(), AttributeValue::S(id))]),
            Some((sort_key_attr, partition)) => HashMap::from([
                (self.key_attr.clone(), AttributeValue::S(partition.clone())),
                (sort_key_attr.clone(), AttributeValue::S(id)),
            ]),
        }
    }

    /// The live Powertools record of `key` at `now_ms`, if any: one strongly
    /// consistent `GetItem`. An expired record is none, as Powertools itself
    /// treats it (expired once the clock's second is past `expiration`; in
    /// progress until the millisecond past `in_progress_expiration`).
    pub(crate) async fn find(
        &self,
        key: &serde_json::Value,
        now_ms: u64,
    ) -> Result<Option<PowertoolsRecord>, Error> {
        let id = self.record_id(key);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.item_key(id.clone())))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::StoreUnavailable,
                    format!(
                        "DynamoDB GetItem of the Powertools record `{id}` in table `{}` failed \
                         after the SDK's retries: {}",
                        self.table,
                        DisplayErrorContext(&err)
                    ),
                    err,
                )
            })?;
        match out.item() {
            None => Ok(None),
            Some(item) => self.decode(&id, item, now_ms),
        }
    }

    fn decode(
        &self,
        id: &str,
        item: &HashMap<String, AttributeValue>,
        now_ms: u64,
    ) -> Result<Option<PowertoolsRecord>, Error> {
        let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let number = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<f64>().ok())
                .filter(|n| n.is_finite() && *n >= 0.0)
                .map(|n| n as u64)
        };
        let corrupt = |what: &str| {
            Error::new(
                ErrorKind::CorruptRecord,
                format!(
                    "the Powertools record `{id}` in table `{}` {what}; check the layout given \
                     to PowertoolsRecords (attribute names as Powertools was configured)",
                    self.table
                ),
            )
        };
        let expires_at_s = number(&self.expiry_attr)
            .ok_or_else(|| corrupt(&format!("has no number `{}`", self.expiry_attr)))?;
        // Powertools' own test, `int(now) > expiration` (and its write's
        // condition `expiration < :now`, whole seconds): a record lives
        // through its second `expiration`.
        if now_ms / 1000 > expires_at_s {
            return Ok(None);
        }
        match text(&self.status_attr).as_deref() {
            Some("COMPLETED") => Ok(Some(PowertoolsRecord::Completed {
                // A handler that returned None left no result: JSON null.
                data: text(&self.data_attr).unwrap_or_else(|| "null".into()),
                expires_at_s,
                validation: text(&self.validation_attr),
            })),
            Some("INPROGRESS") => match number(&self.in_progress_expiry_attr) {
                // Powertools takes the record over only once
                // `in_progress_expiration < now` (milliseconds).
                Some(until_ms) if until_ms >= now_ms => {
                    Ok(Some(PowertoolsRecord::InProgress { until_ms }))
                }
                // Powertools takes such a record over: its run is over.
                Some(_) => Ok(None),
                // Without a Lambda context Powertools sets no in-progress
                // expiry: the record holds the key until it expires.
                None => Ok(Some(PowertoolsRecord::InProgress {
                    until_ms: expires_at_s.saturating_mul(1000),
                })),
            },
            // `EXPIRED` is only ever a status in memory.
            Some("EXPIRED") => Ok(None),
            Some(other) => Err(corrupt(&format!("has status {other:?}"))),
            None => Err(corrupt(&format!("has no string `{}`", self.status_attr))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn records() -> PowertoolsRecords {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        PowertoolsRecords::new(
            Client::from_conf(config),
            "t",
            "fn.app.handler",
            UNIX_EPOCH + Duration::from_secs(2_000_000_000),
        )
    }

    #[test]
    fn ids_hash_the_key_as_python_dumps_it() {
        // CPython: hashlib.md5(json.dumps("abc", sort_keys=True).encode()).hexdigest()
        assert_eq!(
            records().record_id(&json!("abc")),
            "fn.app.handler#ebd9f4c7b06cb0aaf5d13d80e49d8b90"
        );
        // ... and of {"b": 1, "a": [1.5, "é"]}
        assert_eq!(
            records().record_id(&json!({"b": 1, "a": [1.5, "é"]})),
            "fn.app.handler#1e7f1627a5947fe9c56251e6be2b9d03"
        );
        assert_eq!(
            records()
                .hash_function(PowertoolsHash::Sha256)
                .record_id(&json!("abc")),
            "fn.app.handler#6cc43f858fbb763301637b5af970e2a46b46f461f27e5a0f41e009c59b827b25"
        );
    }

    /// The ids and validation hashes Powertools 3.37.0 (the version
    /// scripts/bench/requirements.txt pins) computed for API Gateway events,
    /// configured with `event_key_jmespath='headers."idempotency-key"'`,
    /// `payload_validation_jmespath="body"` and prefix `fn.app.handler`;
    /// printed by its `_get_hashed_idempotency_key` and `_get_hashed_payload`.
    #[cfg(feature = "http")]
    #[test]
    fn http_requests_hash_as_powertools_hashed_their_events() {
        use super::super::result::body_as_powertools_saw_it;
        use crate::record::StoredBody;
        let r = records();
        // The HTTP entry point describes the header by its text as sent
        // (`ClaimOrigin::Http`).
        let key = |text: &'static str| r.record_id(&serde_json::Value::String(text.to_owned()));
        // {"headers": {"idempotency-key": "k1"}}
        assert_eq!(key("k1"), "fn.app.handler#b0c5b121e7cb24f7ce362a75c65bdbe7");
        // {"headers": {"idempotency-key": "\"k1\""}}: the quotes are hashed.
        assert_eq!(
            key("\"k1\""),
            "fn.app.handler#d17830d256019f08a6b2225188c41dea"
        );
        let body = |body: lambda_http::Body| {
            r.hash_of(&body_as_powertools_saw_it(&StoredBody::of_http(&body)))
        };
        // "body": "{\"amount\":2500}"
        assert_eq!(
            body(lambda_http::Body::from(r#"{"amount":2500}"#)),
            "99ab83bd956d8218b8ffac54eb065f28"
        );
        // "body": null, or no "body"
        assert_eq!(
            body(lambda_http::Body::Empty),
            "37a6259cc0c1dae299a7866489dff0bd"
        );
        // "body": ""
        assert_eq!(
            body(lambda_http::Body::from("")),
            "9d4568c009d203ab10e33ea9953a0264"
        );
        // "body": "AJ+SlgEC", "isBase64Encoded": true
        assert_eq!(
            body(lambda_http::Body::from(vec![0u8, 159, 146, 150, 1, 2])),
            "f8284f40044c44939f08e423d5500e5b"
        );
    }

    #[test]
    fn a_record_is_read_as_powertools_reads_it() {
        let r = records();
        let item = |pairs: &[(&str, AttributeValue)]| -> HashMap<String, AttributeValue> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect()
        };
        let n = |v: u64| AttributeValue::N(v.to_string());
        let s = |v: &str| AttributeValue::S(v.into());
        let now = 1_000_000_000_000;
        let completed = item(&[
            ("status", s("COMPLETED")),
            ("data", s(r#"{"statusCode": 201}"#)),
            ("expiration", n(now / 1000 + 60)),
        ]);
        assert_eq!(
            r.decode("x", &completed, now).unwrap(),
            Some(PowertoolsRecord::Completed {
                data: r#"{"statusCode": 201}"#.into(),
                expires_at_s: now / 1000 + 60,
                validation: None
            })
        );
        // Powertools keeps it through its second `expiration`
        // (`int(now) > expiration` is its test) and not a millisecond past.
        let expiration_ms = (now / 1000 + 60) * 1000;
        assert!(r
            .decode("x", &completed, expiration_ms + 999)
            .unwrap()
            .is_some());
        assert_eq!(
            r.decode("x", &completed, expiration_ms + 1000).unwrap(),
            None
        );
        let running = item(&[
            ("status", s("INPROGRESS")),
            ("expiration", n(now / 1000 + 3600)),
            ("in_progress_expiration", n(now + 5_000)),
        ]);
        assert_eq!(
            r.decode("x", &running, now).unwrap(),
            Some(PowertoolsRecord::InProgress {
                until_ms: now + 5_000
            })
        );
        // Taken over only once `in_progress_expiration < now`.
        assert!(r.decode("x", &running, now + 5_000).unwrap().is_some());
        assert_eq!(r.decode("x", &running, now + 5_001).unwrap(), None);
        let odd = item(&[("status", s("DONE")), ("expiration", n(now / 1000 + 60))]);
        let err = r.decode("x", &odd, now).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CorruptRecord);
        assert!(err.to_string().contains("\"DONE\""), "{err}");
    }
}
