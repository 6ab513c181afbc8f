//! [`PowertoolsRecords`]: the records Powertools for AWS Lambda (Python or
//! TypeScript) left in DynamoDB, read during a cut-over so that no key
//! still inside its Powertools expiry runs a second time.
//!
//! Powertools keeps one item per key: `id` = `<prefix>#<hash>`, where the
//! prefix is `<function name>.<module>.<handler>` for Python (the function
//! name for TypeScript, or the configured `key_prefix` / `keyPrefix`) and
//! the hash is the MD5 (by default) of the key's JSON, the key being what
//! its `event_key_jmespath` selected: Python hashes
//! `json.dumps(key, sort_keys=True)` in hex, TypeScript
//! `JSON.stringify(deepSort(key))` in base64 ([`PowertoolsRuntime`]).
//! Then `status` (`INPROGRESS`, `COMPLETED`), `data` (the handler's result:
//! JSON text for Python, a DynamoDB value for TypeScript), `expiration`
//! (epoch seconds), `in_progress_expiration` (epoch milliseconds) and
//! `validation` (the hash of the validated payload). A table with a sort
//! key holds them under one partition (`idempotency#<prefix>` by default)
//! with the id as the sort key. Every name is configurable, as it is in
//! Powertools.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use sha2::Digest;

use super::expression::Expression;
use crate::error::{Error, ErrorKind};
use crate::store::TenantFields;

/// Which Powertools for AWS Lambda wrote the records: they name, hash and
/// store them differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PowertoolsRuntime {
    /// Powertools for AWS Lambda (Python), `aws-lambda-powertools` 2.x and
    /// 3.x: hex digests of `json.dumps(key, sort_keys=True)`, results as
    /// JSON text, a record live through the second of its `expiration`.
    #[default]
    Python,
    /// Powertools for AWS Lambda (TypeScript),
    /// `@aws-lambda-powertools/idempotency` 2.x with its DynamoDB
    /// persistence layer: base64 digests of
    /// `JSON.stringify(deepSort(key))`, results as DynamoDB values, a record
    /// expired once the clock is past its `expiration`.
    TypeScript,
}

impl PowertoolsRuntime {
    /// `python` or `typescript`, as `IDEMPOTENCY_POWERTOOLS_RUNTIME` names it.
    pub fn name(self) -> &'static str {
        match self {
            PowertoolsRuntime::Python => "python",
            PowertoolsRuntime::TypeScript => "typescript",
        }
    }

    /// The text hashed for `value`.
    fn json(self, value: &serde_json::Value) -> String {
        match self {
            PowertoolsRuntime::Python => super::python::dumps(value),
            PowertoolsRuntime::TypeScript => super::javascript::stringify(value),
        }
    }

    /// Did Powertools find no key in `value` (what its `event_key_jmespath`
    /// selected)? Python then ran the handler without a record; TypeScript
    /// hashed it all the same (one record shared by every request without a
    /// key), which the cut-over does not replay.
    pub(crate) fn missing_key(self, value: &serde_json::Value) -> bool {
        use serde_json::Value;
        match self {
            // `is_missing_idempotency_key`: a list or dict whose items (its
            // keys, for a dict) are all None; no number or bool; otherwise
            // `not data`.
            PowertoolsRuntime::Python => match value {
                Value::Array(items) => items.iter().all(Value::is_null),
                Value::Object(map) => map.is_empty(),
                Value::Number(_) | Value::Bool(_) => false,
                Value::Null => true,
                Value::String(s) => s.is_empty(),
            },
            // `isMissingIdempotencyKey`: an array or object none of whose
            // values is truthy; otherwise `!data`.
            PowertoolsRuntime::TypeScript => {
                let truthy = |v: &Value| match v {
                    Value::Null => false,
                    Value::Bool(b) => *b,
                    Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
                    Value::String(s) => !s.is_empty(),
                    Value::Array(_) | Value::Object(_) => true,
                };
                match value {
                    Value::Array(items) => !items.iter().any(truthy),
                    Value::Object(map) => !map.values().any(truthy),
                    other => !truthy(other),
                }
            }
        }
    }
}

impl std::str::FromStr for PowertoolsRuntime {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "python" => Ok(PowertoolsRuntime::Python),
            "typescript" => Ok(PowertoolsRuntime::TypeScript),
            _ => Err("is not a Powertools runtime: use python or typescript".to_owned()),
        }
    }
}

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
    fn digest(self, text: &str) -> Vec<u8> {
        match self {
            PowertoolsHash::Md5 => md5::Md5::digest(text.as_bytes()).to_vec(),
            PowertoolsHash::Sha256 => sha2::Sha256::digest(text.as_bytes()).to_vec(),
        }
    }
}

/// The longest Powertools function timeout when none is given: Lambda's
/// longest, 900 s.
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(900);

/// Where and how Powertools for AWS Lambda (Python or TypeScript) kept its
/// idempotency records, for a cut-over without running anything twice.
///
/// Given to [`PowertoolsCutover`](super::PowertoolsCutover) around the
/// store this library writes to: until
/// `until`, every claim that would run the handler (one that finds no
/// record of its own, a takeover, a claim that resumes from a recovery
/// point) looks up the Powertools record of the same key first. A
/// `COMPLETED` one is replayed (its stored JSON as the response or output)
/// and copied into this library's own record, so the key's later duplicates
/// replay without the lookup; an `INPROGRESS` one answers as in progress;
/// none, or an expired one, lets the handler run. From the window's end
/// ([`reads_until`](Self::reads_until): `until` plus the longest Powertools
/// function timeout plus a second) nothing is looked up and nothing is
/// spent.
///
/// The key is what Powertools' `event_key_jmespath` selected
/// ([`key_jmespath`](Self::key_jmespath)) from the event as Powertools saw
/// it; without one, the key as this library reads it (the
/// `Idempotency-Key` header's text, the body's value at the key pointer,
/// an event function's key).
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
    runtime: PowertoolsRuntime,
    key_expression: Option<Expression>,
    validation: Option<Expression>,
    max_timeout_ms: u64,
    shared_keys: bool,
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
            .field("runtime", &self.runtime)
            .field("key_expression", &self.key_expression)
            .field("validation", &self.validation)
            .field("max_timeout_ms", &self.max_timeout_ms)
            .field("shared_keys", &self.shared_keys)
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
    /// up until `until` (the switch plus Powertools' `expires_after_seconds`)
    /// and then as long as a call still running at the switch may keep
    /// its record ([`max_timeout`](Self::max_timeout)). The layout is
    /// Powertools' default; the other methods say where it differs.
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
            runtime: PowertoolsRuntime::Python,
            key_expression: None,
            validation: None,
            max_timeout_ms: DEFAULT_MAX_TIMEOUT.as_millis() as u64,
            shared_keys: false,
        }
    }

    /// The records the `IDEMPOTENCY_POWERTOOLS_*` variables describe
    /// ([`Settings::powertools`](crate::settings::Settings::powertools)),
    /// read through `client`.
    ///
    /// # Errors
    ///
    /// A runtime other than `python` or `typescript`, or an expression that
    /// is not JMESPath, naming the variable.
    pub fn from_settings(
        client: Client,
        settings: &crate::settings::PowertoolsSettings,
    ) -> Result<Self, Error> {
        use crate::settings::{
            POWERTOOLS_KEY_JMESPATH_ENV, POWERTOOLS_RUNTIME_ENV, POWERTOOLS_VALIDATION_JMESPATH_ENV,
        };
        let runtime: PowertoolsRuntime = settings.runtime.parse().map_err(|why| {
            Error::invalid_config(format!(
                "{POWERTOOLS_RUNTIME_ENV}={:?} {why}",
                settings.runtime
            ))
        })?;
        let named = |setting: &str, err: Error| Error::invalid_config(format!("{setting}: {err}"));
        let mut records = PowertoolsRecords::new(
            client,
            &settings.table,
            &settings.key_prefix,
            settings.until,
        )
        .runtime(runtime)
        .max_timeout(settings.max_timeout)
        .shared_keys(settings.shared_keys);
        if let Some(expression) = &settings.key_jmespath {
            records = records
                .key_jmespath(expression)
                .map_err(|e| named(POWERTOOLS_KEY_JMESPATH_ENV, e))?;
        }
        if let Some(expression) = &settings.validation_jmespath {
            records = records
                .validation_jmespath(expression)
                .map_err(|e| named(POWERTOOLS_VALIDATION_JMESPATH_ENV, e))?;
        }
        Ok(records)
    }

    /// The Powertools that wrote the records (Python by default).
    pub fn runtime(mut self, runtime: PowertoolsRuntime) -> Self {
        self.runtime = runtime;
        self
    }

    /// Powertools' `event_key_jmespath`: the key is what it selects from
    /// the event as Powertools saw it (the API Gateway or ALB event of an
    /// HTTP request, an SQS, Kinesis or DynamoDB stream record, an event
    /// function's argument), with Powertools' `powertools_json`,
    /// `powertools_base64` and `powertools_base64_gzip`.
    ///
    /// # Errors
    ///
    /// An expression that is not JMESPath, saying why.
    pub fn key_jmespath(mut self, expression: &str) -> Result<Self, Error> {
        self.key_expression = Some(Expression::compile(
            expression,
            "the Powertools key expression (event_key_jmespath)",
        )?);
        Ok(self)
    }

    /// Powertools' `payload_validation_jmespath`: a request whose selected
    /// payload hashes otherwise than the record's `validation` is a key
    /// reused with a different request (`422`), as it was under Powertools.
    ///
    /// # Errors
    ///
    /// An expression that is not JMESPath, saying why.
    pub fn validation_jmespath(mut self, expression: &str) -> Result<Self, Error> {
        self.validation = Some(Expression::compile(
            expression,
            "the Powertools validation expression (payload_validation_jmespath)",
        )?);
        Ok(self)
    }

    /// The longest timeout of the functions that wrote with Powertools
    /// (900 s by default, Lambda's longest): a call still running at the
    /// switch saves its record (and its `expiration`) when it ends, so
    /// records are looked up until `until` plus this plus a second.
    pub fn max_timeout(mut self, timeout: Duration) -> Self {
        self.max_timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Powertools' keys were shared across tenants (its key expression
    /// did not name the tenant), and that stays so during the cut-over:
    /// one tenant's request may replay the response Powertools stored for
    /// another's with the same key. Without it, an HTTP layer that reads a
    /// tenant refuses a key expression that does not name the tenant's
    /// source ([`check_tenant`](Self::check_tenant)).
    pub fn shared_keys(mut self, shared: bool) -> Self {
        self.shared_keys = shared;
        self
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
    /// ="body"` on an API Gateway event): [`validation_jmespath`](Self::validation_jmespath)
    /// with `body`.
    pub fn validate_body(mut self) -> Self {
        self.validation = Expression::compile("body", "body").ok();
        self
    }

    /// The table Powertools kept its records in, for messages.
    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// The `until` given: the switch plus Powertools'
    /// `expires_after_seconds`.
    pub fn until(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.until_ms)
    }

    /// When the lookups stop: [`until`](Self::until) plus the longest
    /// Powertools function timeout plus a second, past every record a call
    /// running at the switch saved.
    pub fn reads_until(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.reads_until_ms())
    }

    fn reads_until_ms(&self) -> u64 {
        self.until_ms
            .saturating_add(self.max_timeout_ms)
            .saturating_add(1000)
    }

    /// Are records looked up at `now_ms`?
    pub(crate) fn open(&self, now_ms: u64) -> bool {
        now_ms < self.reads_until_ms()
    }

    /// Refuse a tenant source whose tenants Powertools' keys would not keep
    /// apart: a key expression that does not select where `tenant` reads
    /// the tenant (or no key expression), or a tenant read where the
    /// library cannot see (a function of yours, Lambda's tenant id); unless
    /// keys were shared across tenants ([`shared_keys`](Self::shared_keys)).
    /// Call it where the function starts, so a risky configuration never
    /// serves a request; the cut-over checks every HTTP claim too.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig),
    /// naming the two settings that decide it.
    #[cfg(feature = "http")]
    pub fn check_tenant(&self, tenant: &crate::TenantSource) -> Result<(), Error> {
        self.check_tenant_fields(tenant.fields())
    }

    /// [`check_tenant`](Self::check_tenant) of where a request's tenant was
    /// read.
    pub(crate) fn check_tenant_fields(&self, tenant: &TenantFields) -> Result<(), Error> {
        use crate::settings::{POWERTOOLS_KEY_JMESPATH_ENV, POWERTOOLS_SHARED_KEYS_ENV};
        if self.shared_keys {
            return Ok(());
        }
        let fields = match tenant {
            TenantFields::None => return Ok(()),
            TenantFields::At(fields) => fields,
            TenantFields::Unknown => {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "the cut-over from Powertools cannot tell whether its keys keep tenants apart: \
                         the tenant is read by a function of the application (or is Lambda's tenant \
                         id), which no Powertools key expression can name. If Powertools' keys were \
                         shared across tenants, say so with {POWERTOOLS_SHARED_KEYS_ENV}=true \
                         (PowertoolsRecords::shared_keys; docs/powertools.md explains the risk); \
                         {POWERTOOLS_KEY_JMESPATH_ENV} cannot make this safe"
                    ),
                ))
            }
        };
        let named = self
            .key_expression
            .as_ref()
            .is_some_and(|expression| fields.iter().any(|field| expression.keeps(field)));
        if named {
            return Ok(());
        }
        let expression = match &self.key_expression {
            Some(expression) => format!("`{}` does not select it", expression.text()),
            None => "is not set, so the key is the Idempotency-Key alone".to_owned(),
        };
        let first = fields.first().map(|f| f.join(".")).unwrap_or_default();
        Err(Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "the cut-over from Powertools could answer one tenant with the response \
                 Powertools stored for another: the tenant is read from `{first}`, but \
                 Powertools' key expression ({POWERTOOLS_KEY_JMESPATH_ENV}) {expression}. Set \
                 {POWERTOOLS_KEY_JMESPATH_ENV} to the event_key_jmespath Powertools used if it \
                 named the tenant (such as [{first}, headers.\"idempotency-key\"]), or, if \
                 Powertools' keys were shared across tenants, say so with \
                 {POWERTOOLS_SHARED_KEYS_ENV}=true (docs/powertools.md explains the risk)"
            ),
        ))
    }

    /// The Powertools that wrote the records.
    pub(crate) fn runtime_of(&self) -> PowertoolsRuntime {
        self.runtime
    }

    /// The key expression, if Powertools was configured with one here.
    pub(crate) fn key_expression(&self) -> Option<&Expression> {
        self.key_expression.as_ref()
    }

    /// The validation expression, if any.
    pub(crate) fn validation(&self) -> Option<&Expression> {
        self.validation.as_ref()
    }

    /// Powertools' hash of `value`: of its JSON as the runtime writes it,
    /// hex for Python, base64 for TypeScript.
    pub(crate) fn hash_of(&self, value: &serde_json::Value) -> String {
        let digest = self.hash.digest(&self.runtime.json(value));
        match self.runtime {
            PowertoolsRuntime::Python => crate::hash::hex(&digest),
            PowertoolsRuntime::TypeScript => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.encode(digest)
            }
        }
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
        let expired = match self.runtime {
            // Python's own test, `int(now) > expiration` (and its write's
            // condition `expiration < :now`, whole seconds): a record lives
            // through its second `expiration`.
            PowertoolsRuntime::Python => now_ms / 1000 > expires_at_s,
            // TypeScript's `Date.now() / 1000 > expiration`.
            PowertoolsRuntime::TypeScript => now_ms > expires_at_s.saturating_mul(1000),
        };
        if expired {
            return Ok(None);
        }
        match text(&self.status_attr).as_deref() {
            Some("COMPLETED") => Ok(Some(PowertoolsRecord::Completed {
                data: match self.runtime {
                    // A handler that returned None left no result: JSON null.
                    PowertoolsRuntime::Python => {
                        text(&self.data_attr).unwrap_or_else(|| "null".into())
                    }
                    // TypeScript marshalls the result into a DynamoDB value;
                    // `undefined` is left out.
                    PowertoolsRuntime::TypeScript => match item.get(&self.data_attr) {
                        Some(value) => json_of(value)
                            .map_err(|why| {
                                corrupt(&format!("has a `{}` that is {why}", self.data_attr))
                            })?
                            .to_string(),
                        None => "null".into(),
                    },
                },
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

/// The JSON value a DynamoDB value holds, as `unmarshall` of
/// `@aws-sdk/util-dynamodb` reads it (sets as arrays, binary as base64).
fn json_of(value: &AttributeValue) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    let number = |n: &str| -> Result<Value, String> {
        serde_json::from_str::<serde_json::Number>(n.trim())
            .map(Value::Number)
            .map_err(|_| format!("the number {n:?}, not JSON"))
    };
    let bytes = |b: &aws_sdk_dynamodb::primitives::Blob| {
        use base64::Engine;
        Value::String(base64::engine::general_purpose::STANDARD.encode(b.as_ref()))
    };
    Ok(match value {
        AttributeValue::S(s) => Value::String(s.clone()),
        AttributeValue::N(n) => number(n)?,
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::Null(_) => Value::Null,
        AttributeValue::M(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), json_of(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        AttributeValue::L(items) => {
            Value::Array(items.iter().map(json_of).collect::<Result<_, String>>()?)
        }
        AttributeValue::Ss(items) => {
            Value::Array(items.iter().cloned().map(Value::String).collect())
        }
        AttributeValue::Ns(items) => Value::Array(
            items
                .iter()
                .map(|n| number(n))
                .collect::<Result<_, String>>()?,
        ),
        AttributeValue::B(b) => bytes(b),
        AttributeValue::Bs(items) => Value::Array(items.iter().map(bytes).collect()),
        _ => return Err("of a type this library does not know".into()),
    })
}

#[cfg(test)]
mod tests;
