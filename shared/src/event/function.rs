//! [`IdempotentFunction`]: any async function, run once per key.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::EventError;
use crate::config::IdempotencyConfig;
use crate::context::IdempotencyContext;
use crate::error::ErrorKind;
use crate::hash::hex;
use crate::json::check_pointer;
use crate::lifecycle::{self, Begun, Finished, Guard};
use crate::metrics::{Event, Metrics};
use crate::record::{Record, StoredBody, StoredResponse};
use crate::scope::record_id;
use crate::store::{ClaimOrigin, Store};

type KeyFn = dyn Fn(&serde_json::Value) -> Option<String> + Send + Sync;

#[derive(Clone)]
enum KeySource {
    Whole,
    Pointers(Vec<String>),
    Fn(Arc<KeyFn>),
}

impl fmt::Debug for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Whole => f.write_str("Whole"),
            KeySource::Pointers(p) => f.debug_tuple("Pointers").field(p).finish(),
            KeySource::Fn(_) => f.write_str("Fn"),
        }
    }
}

/// Runs a closure at most once per key.
///
/// The key comes from the argument: by default its whole canonical JSON, or the
/// values at RFC 6901 JSON pointers ([`key_pointers`](IdempotentFunction::key_pointers)),
/// or a closure. Optional validation pointers make a duplicate whose payload
/// differs at those fields a distinct error ([`EventError::PayloadMismatch`]).
///
/// ```
/// use lambda_idempotency::{IdempotentFunction, MemoryStore};
/// use serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let charge = IdempotentFunction::new(MemoryStore::new(), "charge").key_pointers(["/payment_id"]);
/// let payment = json!({"payment_id": "p1", "amount": 5});
/// let first: String = charge.call(payment.clone(), |p| async move {
///     Ok::<_, std::io::Error>(format!("charged {}", p["amount"]))
/// }).await.unwrap();
/// let again: String = charge.call(payment, |_| async { Ok::<_, std::io::Error>("ran twice".to_owned()) }).await.unwrap();
/// assert_eq!(first, again); // the second closure never ran
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct IdempotentFunction {
    config: IdempotencyConfig,
    name: String,
    key: KeySource,
    validate: Vec<String>,
    pass_through_missing_key: bool,
    deadline_ms: Option<u64>,
    replay_hook: Option<OutputHookFn>,
}

/// A hook over replayed outputs ([`IdempotentFunction::replay_hook`]).
type OutputHook = dyn Fn(&mut serde_json::Value, &Record) + Send + Sync;

#[derive(Clone)]
struct OutputHookFn(Arc<OutputHook>);

impl fmt::Debug for OutputHookFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplayHook")
    }
}

impl IdempotentFunction {
    /// Records are scoped by `name`, so two functions never share a key.
    /// Defaults: key = the whole argument, no validation, missing key = error,
    /// records kept 24 hours, lease = registered deadline + 2 s, capped at 15 min.
    pub fn new(store: impl Store + 'static, name: impl Into<String>) -> Self {
        Self::with_config(IdempotencyConfig::new(store), name)
    }

    /// A function named `name` with the options a deployment sets in the
    /// environment ([`IdempotencyConfig::from_env`], read the same way as
    /// [`IdempotencyLayer::from_env`](crate::http::IdempotencyLayer::from_env)).
    ///
    /// # Errors
    ///
    /// A variable whose value is not what it accepts, named.
    pub fn from_env(
        store: impl Store + 'static,
        name: impl Into<String>,
    ) -> Result<Self, crate::error::Error> {
        Ok(Self::with_config(IdempotencyConfig::from_env(store)?, name))
    }

    /// A function named `name` with the options it shares with the HTTP
    /// middleware (store, namespace, expiry, leases, local cache, metrics,
    /// disable switch) taken from `config`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lambda_idempotency::{IdempotencyConfig, IdempotentFunction, MemoryStore};
    /// use serde_json::json;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// let config = IdempotencyConfig::new(store.clone()).local_cache(100, Duration::from_secs(60));
    /// let charge = IdempotentFunction::with_config(config, "charge").key_pointers(["/id"]);
    /// for _ in 0..3 {
    ///     let out: u32 = charge.call(json!({"id": "p1"}), |_| async { Ok::<_, String>(5) }).await.unwrap();
    ///     assert_eq!(out, 5);
    /// }
    /// assert_eq!(store.requests(), 2, "one claim, one completion; the duplicates hit the cache");
    /// # });
    /// ```
    pub fn with_config(config: IdempotencyConfig, name: impl Into<String>) -> Self {
        IdempotentFunction {
            config,
            name: name.into(),
            key: KeySource::Whole,
            validate: Vec::new(),
            pass_through_missing_key: false,
            deadline_ms: None,
            replay_hook: None,
        }
    }

    /// The options shared with the HTTP middleware.
    pub fn config(&self) -> &IdempotencyConfig {
        &self.config
    }

    /// Key = the values at these JSON pointers (`/order/id`). A single string
    /// value is the key as is; otherwise the canonical JSON of all values
    /// (a single value of another type is kept apart from strings: `5` and
    /// `"5"` are two keys). When every pointer is absent or null, the key is
    /// missing.
    ///
    /// # Panics
    ///
    /// When a pointer is not an RFC 6901 JSON pointer (`"order_id"` for
    /// `"/order_id"`): it would match nothing. A configuration error, found
    /// at start-up.
    pub fn key_pointers<I, S>(mut self, pointers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.key = KeySource::Pointers(checked_pointers("key_pointers", pointers));
        self
    }

    /// Key = any function of the argument's JSON; `None` = missing.
    pub fn key_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&serde_json::Value) -> Option<String> + Send + Sync + 'static,
    {
        self.key = KeySource::Fn(Arc::new(f));
        self
    }

    /// A duplicate whose values at these pointers differ from the first call's
    /// fails with [`EventError::PayloadMismatch`] instead of replaying.
    ///
    /// # Panics
    ///
    /// When a pointer is not an RFC 6901 JSON pointer, as
    /// [`key_pointers`](Self::key_pointers).
    pub fn validate<I, S>(mut self, pointers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.validate = checked_pointers("validate", pointers);
        self
    }

    /// Run the closure without idempotency when the key is missing (default:
    /// fail with [`EventError::KeyMissing`]).
    pub fn pass_through_missing_key(mut self, pass: bool) -> Self {
        self.pass_through_missing_key = pass;
        self
    }

    /// Mix `namespace` into this function's record ids, so that two
    /// services writing one table never meet on a key; the same as
    /// setting it on the shared config.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.config = self.config.namespace(namespace);
        self
    }

    /// Keep each completed output this long for duplicates to replay: a
    /// day unless set (the shared config's option of the same name).
    pub fn expires_after(mut self, ttl: Duration) -> Self {
        self.config = self.config.expires_after(ttl);
        self
    }

    /// Never hold a key longer than `lease` in one call, and hold it that
    /// long when no Lambda context is registered (default 15 minutes).
    pub fn max_lease(mut self, lease: Duration) -> Self {
        self.config = self.config.max_lease(lease);
        self
    }

    /// How long past the registered deadline a key stays held before a
    /// retry may take it over (default 2 s).
    pub fn lease_margin(mut self, margin: Duration) -> Self {
        self.config = self.config.lease_margin(margin);
        self
    }

    /// Count what each call decided (claimed, replayed, in progress,
    /// mismatched, fenced, released, failed, cached, too large) as EMF
    /// metrics; off unless set.
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.config = self.config.metrics(metrics);
        self
    }

    /// Adjust every replayed output (from the store or the local cache)
    /// before it is deserialised, with the completed record it replays from
    /// (attempt, expiry, fingerprint). The first run's own output is returned as the function made it.
    ///
    /// ```
    /// use lambda_idempotency::{IdempotentFunction, MemoryStore};
    /// use serde_json::{json, Value};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let f = IdempotentFunction::new(MemoryStore::new(), "f")
    ///     .replay_hook(|output, record| output["replayed_attempt"] = json!(record.attempt));
    /// let first: Value = f.call(json!(1), |_| async { Ok::<_, String>(json!({"ok": true})) }).await.unwrap();
    /// let again: Value = f.call(json!(1), |_| async { Ok::<_, String>(json!({})) }).await.unwrap();
    /// assert_eq!(first, json!({"ok": true}));
    /// assert_eq!(again, json!({"ok": true, "replayed_attempt": 1}));
    /// # });
    /// ```
    pub fn replay_hook<F>(mut self, hook: F) -> Self
    where
        F: Fn(&mut serde_json::Value, &Record) + Send + Sync + 'static,
    {
        self.replay_hook = Some(OutputHookFn(Arc::new(hook)));
        self
    }

    /// Wait up to `max_wait` for a duplicate that is still in progress
    /// instead of failing with [`EventError::InProgress`] at once, then
    /// replay its output once it completes, or run when its key frees
    /// (released, or its lease ended): the shared option
    /// [`IdempotencyConfig::wait_for`], whose docs say how it polls and
    /// what bounds it. Never waits past the registered invocation's
    /// deadline ([`register_context`](Self::register_context)) less 1 s;
    /// off by default. Useful for direct invocations whose caller wants the
    /// answer, not an error. The polls are
    /// [`Store::get`](crate::Store::get)s, so a store layer decides what
    /// they read (a cut-over reads the other tool's record of a key that
    /// tool still holds).
    pub fn wait_for(mut self, max_wait: Duration) -> Self {
        self.config = self.config.wait_for(max_wait);
        self
    }

    /// Register the invocation's Lambda context: leases end at its deadline
    /// (plus the margin) instead of after `max_lease`.
    pub fn register_context(&mut self, context: &lambda_runtime::Context) {
        self.deadline_ms = Some(context.deadline);
    }

    /// Like [`register_context`](Self::register_context), returning a copy.
    pub fn with_context(&self, context: &lambda_runtime::Context) -> Self {
        let mut copy = self.clone();
        copy.register_context(context);
        copy
    }

    /// Run `f(arg)` at most once for `arg`'s key and return its output, or the
    /// stored output of the run that got there first.
    pub async fn call<A, O, E, F, Fut>(&self, arg: A, f: F) -> Result<O, EventError<E>>
    where
        A: Serialize,
        O: Serialize + DeserializeOwned,
        F: FnOnce(A) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        self.call_with_context(arg, |arg, _| f(arg)).await
    }

    /// Like [`call`](Self::call); the closure also gets the
    /// [`IdempotencyContext`] (`None` when a missing key passed through), for
    /// [`derived_key`](IdempotencyContext::derived_key)s.
    pub async fn call_with_context<A, O, E, F, Fut>(&self, arg: A, f: F) -> Result<O, EventError<E>>
    where
        A: Serialize,
        O: Serialize + DeserializeOwned,
        F: FnOnce(A, Option<IdempotencyContext>) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        let json = serde_json::to_value(&arg).map_err(|source| EventError::Serialization {
            what: format!(
                "the argument of `{}` (to find its key), nothing ran",
                self.name
            ),
            source,
        })?;
        let key = self.key_of(&json);
        let fingerprint = self.fingerprint_of(&json);
        // One metrics line per call, or per batch when a batch calls.
        crate::metrics::gathered(
            self.config.metrics.as_ref(),
            self.run_keyed(Ok(key), fingerprint, arg, f),
        )
        .await
    }

    /// Count `event` in this function's metrics (stream batches count
    /// what they skip).
    #[cfg(any(feature = "kinesis", feature = "events-dynamodb-stream"))]
    pub(crate) fn count(&self, event: Event) {
        self.config.count(event);
    }

    pub(crate) fn key_of(&self, json: &serde_json::Value) -> Option<Key> {
        match &self.key {
            KeySource::Whole => Some(Key::text_of_json(json.to_string())),
            KeySource::Fn(f) => f(json).map(Key::text),
            KeySource::Pointers(pointers) => {
                let values: Vec<&serde_json::Value> = pointers
                    .iter()
                    .map(|p| json.pointer(p).unwrap_or(&serde_json::Value::Null))
                    .collect();
                match values.as_slice() {
                    _ if values.iter().all(|v| v.is_null()) => None,
                    [serde_json::Value::String(s)] => Some(Key::text(s.clone())),
                    // One value of another type: its JSON, kept apart from
                    // strings (`5` is not `"5"`).
                    [value] => Some(Key::json(value.to_string())),
                    // Several values are always a JSON array: no string of a
                    // single-pointer key can be one, the pointers are fixed.
                    _ => Some(Key::text_of_json(
                        serde_json::Value::from(values.into_iter().cloned().collect::<Vec<_>>())
                            .to_string(),
                    )),
                }
            }
        }
        .filter(|k| !k.value.is_empty())
    }

    pub(crate) fn fingerprint_of(&self, json: &serde_json::Value) -> String {
        self.fingerprint_fields(|pointer| {
            json.pointer(pointer)
                .map(|v| v.to_string().into_bytes())
                .unwrap_or_default()
        })
    }

    /// [`fingerprint_of`](Self::fingerprint_of) a canonicalised JSON text
    /// (an SQS body), its numbers exact; no document (a body that is not
    /// JSON) has no fields.
    #[cfg(any(
        feature = "sqs",
        feature = "kinesis",
        feature = "events-dynamodb-stream"
    ))]
    pub(crate) fn fingerprint_of_canonical(
        &self,
        doc: Option<&crate::json::CanonicalJson>,
    ) -> String {
        self.fingerprint_fields(|pointer| {
            doc.and_then(|d| d.at(pointer))
                .map(<[u8]>::to_vec)
                .unwrap_or_default()
        })
    }

    /// The hash of the validated fields' canonical JSON (empty when absent).
    fn fingerprint_fields(&self, value_at: impl Fn(&str) -> Vec<u8>) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for pointer in &self.validate {
            let value = value_at(pointer);
            h.update((pointer.len() as u64).to_be_bytes());
            h.update(pointer.as_bytes());
            h.update((value.len() as u64).to_be_bytes());
            h.update(&value);
        }
        hex(&h.finalize())
    }

    /// The record id a key maps to under this function.
    pub fn record_id(&self, key: &str) -> String {
        self.record_id_of(&Key::text(key.to_owned()))
    }

    fn record_id_of(&self, key: &Key) -> String {
        // The key's kind goes in its own part of the scope, so a string key
        // and a JSON key with the same text are two records.
        let kind = if key.json {
            "FUNCTION:json"
        } else {
            "FUNCTION"
        };
        record_id(&self.config.namespace, None, kind, &self.name, &key.value)
    }

    /// Does this function read validated fields from the payload?
    #[cfg(any(feature = "sqs", feature = "kinesis"))]
    pub(crate) fn validates(&self) -> bool {
        !self.validate.is_empty()
    }

    /// Run `f(arg)` under `key`: `Ok(None)` when the payload has no key
    /// (an error, or a run without idempotency when passed through), `Err`
    /// when the payload could not be read for its depth (an error even
    /// when missing keys pass through: it may hold one).
    pub(crate) async fn run_keyed<A, O, E, F, Fut>(
        &self,
        key: Result<Option<Key>, TooDeep>,
        fingerprint: String,
        arg: A,
        f: F,
    ) -> Result<O, EventError<E>>
    where
        A: Serialize,
        O: Serialize + DeserializeOwned,
        F: FnOnce(A, Option<IdempotencyContext>) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        if self.config.disabled {
            self.config.warn_disabled();
            return f(arg, None).await.map_err(EventError::Handler);
        }
        let key = key.map_err(|too_deep| EventError::PayloadTooDeep {
            function: self.name.clone(),
            depth: too_deep.depth,
            limit: too_deep.limit,
        })?;
        let Some(key) = key else {
            if self.pass_through_missing_key {
                tracing::warn!(function = %self.name, "idempotency key missing; running without idempotency");
                return f(arg, None).await.map_err(EventError::Handler);
            }
            return Err(EventError::KeyMissing {
                function: self.name.clone(),
            });
        };
        let id = self.record_id_of(&key);
        // What the call was made with, as JSON, for a store layer that reads
        // it (only then: serialising every argument would cost each call).
        let event = self
            .config
            .store
            .reads_origin()
            .then(|| serde_json::to_value(&arg).unwrap_or(serde_json::Value::Null));
        let begun = lifecycle::begin(&self.config, id, fingerprint, self.deadline_ms, || {
            key.origin(event.clone().unwrap_or_default())
        })
        .await
        .map_err(|err| match err.kind() {
            ErrorKind::Randomness => EventError::Randomness(err),
            _ => EventError::Store(err),
        })?;
        let guard = match begun {
            Begun::Run(guard) => guard,
            Begun::Replay(record) => return self.replay(record.id.clone(), &record),
            Begun::Mismatch(existing) => {
                return Err(EventError::PayloadMismatch {
                    record_id: existing.id.clone(),
                    existing: Some(existing),
                })
            }
            Begun::InProgress {
                retry_after,
                existing,
            } => {
                self.config.count(Event::InProgressConflict);
                return Err(EventError::InProgress {
                    record_id: existing.id.clone(),
                    retry_after,
                    existing: Some(existing),
                });
            }
        };
        let context = guard.context().clone();
        let (guard, output) = guard
            .run(f(arg, Some(context)))
            .await
            .map_err(EventError::Handler)?;
        // Serialised before the await: the future holds no `&O` (which would
        // ask `O: Sync` of every caller).
        let json = serde_json::to_string(&output);
        self.complete(guard, json).await?;
        Ok(output)
    }

    /// Record `output` as the outcome of the claim `guard` holds, with the
    /// deferred writes. An outcome that is not recorded fails the call (so
    /// the event source delivers it again) unless the work provably stands.
    async fn complete<E>(
        &self,
        guard: Guard<'_>,
        json: serde_json::Result<String>,
    ) -> Result<(), EventError<E>> {
        let id = guard.lease().record_id.clone();
        let stored = match json {
            Ok(json) => StoredResponse::new(200, Vec::new(), StoredBody::Text(json)),
            Err(source) => {
                // The function ran (its work, deferred writes included,
                // stands): completed with a marker, as an output too large
                // to store is, so a duplicate never runs it again.
                self.config.count(Event::OversizedResponse);
                tracing::error!(record_id = %id, function = %self.name, error = %source, "the output cannot be serialised to JSON; the record completes with a marker, duplicates will get EventError::OutputNotStored");
                StoredResponse::problem(
                    crate::problem::OUTPUT_NOT_STORED,
                    &format!(
                        "the first call of `{}` ran, but its output could not be serialised to \
                         store it ({source}); it was not run again",
                        self.name
                    ),
                )
            }
        };
        match guard.finish(stored).await {
            Finished::Stored | Finished::Oversized => Ok(()),
            // Nothing recorded (a newer attempt holds the key, the record
            // is gone, the transaction was refused) or unknown whether it
            // was: the event is reported failed, to come again and replay,
            // run or take over. Even a fenced plain completion, whose work
            // is done: an output the record does not hold would be an
            // answer no duplicate gets (the newer attempt's is the one that
            // replays, and it may never come if that attempt fails too).
            Finished::Lost { error, .. }
            | Finished::Refused(error)
            | Finished::Unknown { error, .. } => Err(EventError::CompletionFailed {
                record_id: id,
                source: error,
            }),
        }
    }

    /// The output a completed `record` replays, through the replay hook.
    fn replay<O: DeserializeOwned, E>(
        &self,
        record_id: String,
        record: &Record,
    ) -> Result<O, EventError<E>> {
        match &self.replay_hook {
            None => replay(record_id, record.response.as_ref()),
            Some(OutputHookFn(hook)) => {
                let value: serde_json::Value = replay(record_id.clone(), record.response.as_ref())?;
                let mut value = value;
                hook(&mut value, record);
                serde_json::from_value(value)
                    .map_err(|source| EventError::CorruptOutput { record_id, source })
            }
        }
    }
}

/// The stored output of a completed record, for a duplicate: the output
/// itself, or what stands in for it (too large to keep, or abandoned and
/// failed by the sweeper).
fn replay<O: DeserializeOwned, E>(
    record_id: String,
    stored: Option<&StoredResponse>,
) -> Result<O, EventError<E>> {
    match stored {
        Some(stored) if stored.status == 200 => {
            tracing::debug!(record_id = %record_id, "idempotent output replayed");
            serde_json::from_slice(stored.body.bytes())
                .map_err(|source| EventError::CorruptOutput { record_id, source })
        }
        Some(stored) if stored.is_problem(crate::problem::RESPONSE_TOO_LARGE) => {
            Err(EventError::OutputTooLarge { record_id })
        }
        Some(stored) if stored.is_problem(crate::problem::OUTPUT_NOT_STORED) => {
            Err(EventError::OutputNotStored { record_id })
        }
        _ => Err(EventError::Abandoned { record_id }),
    }
}

/// `pointers`, each checked to be a JSON pointer: one that is not would
/// silently match nothing, so the builder refuses it at start-up.
fn checked_pointers<I, S>(setter: &str, pointers: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let pointers: Vec<String> = pointers.into_iter().map(Into::into).collect();
    for pointer in &pointers {
        if let Err(e) = check_pointer(pointer) {
            panic!("IdempotentFunction::{setter}: {e}");
        }
    }
    pointers
}

/// An idempotency key and its kind: text (a string as it is) or the JSON of
/// a value of another type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    value: String,
    json: bool,
    /// The value is the JSON text of what the key was taken from (also
    /// for the whole payload and several pointers, which are text keys).
    json_text: bool,
}

impl Key {
    pub(crate) fn text(value: String) -> Key {
        Key {
            value,
            json: false,
            json_text: false,
        }
    }

    pub(crate) fn json(value: String) -> Key {
        Key {
            value,
            json: true,
            json_text: true,
        }
    }

    /// A text key whose text is JSON (record ids as for [`text`](Self::text)).
    fn text_of_json(value: String) -> Key {
        Key {
            value,
            json: false,
            json_text: true,
        }
    }

    /// The value this key was taken from, for a store layer that reads
    /// it ([`ClaimOrigin`]): a string, or the value whose JSON the key is;
    /// and `event`, what the function is called with, as JSON.
    pub(crate) fn origin(&self, event: serde_json::Value) -> Option<ClaimOrigin> {
        let key = if self.json_text {
            serde_json::from_str(&self.value).ok()?
        } else {
            serde_json::Value::String(self.value.clone())
        };
        Some(ClaimOrigin::Event { key, event })
    }
}

/// A payload that did not parse as JSON because it nests arrays and objects
/// deeper than JSON is read: its key cannot be told, so it is neither run
/// under no key nor reported as missing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(any(feature = "sqs", feature = "kinesis")), allow(dead_code))]
pub(crate) struct TooDeep {
    /// How deep the payload nests.
    pub(crate) depth: usize,
    /// The deepest nesting read ([`crate::json::MAX_DEPTH`]).
    pub(crate) limit: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    #[tokio::test]
    async fn an_argument_that_cannot_be_serialised_is_its_own_error_and_nothing_runs() {
        let store = MemoryStore::new();
        let function = IdempotentFunction::new(store.clone(), "f");
        // JSON object keys must be strings.
        let arg = std::collections::HashMap::from([((1, 2), 3)]);
        let ran = std::sync::atomic::AtomicBool::new(false);
        let err = function
            .call(arg, |_| async {
                ran.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok::<u8, String>(0)
            })
            .await
            .unwrap_err();
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(err.error_type(), "Idempotency.Serialization");
        assert!(err.to_string().contains("argument of `f`"), "{err}");
        assert_eq!(store.requests(), 0);
    }

    #[tokio::test]
    async fn a_completion_fenced_by_a_newer_attempt_fails_the_call_whose_output_is_not_stored() {
        let function = IdempotentFunction::new(MemoryStore::new(), "f")
            .max_lease(std::time::Duration::from_millis(5));
        let arg = serde_json::json!({"order": 1});
        // The first call overruns its lease; a retry takes the key over and
        // completes while it runs.
        let first: Result<String, EventError<String>> = function
            .call(arg.clone(), |_| async {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                let retry: Result<String, EventError<String>> = function
                    .call(arg.clone(), |_| async { Ok("second".to_owned()) })
                    .await;
                assert_eq!(retry.map_err(|e| e.to_string()).as_deref(), Ok("second"));
                Ok("first".to_owned())
            })
            .await;
        // Its output is not the one the record holds: the call fails, to be
        // delivered again, instead of answering what no duplicate gets.
        let err = first.expect_err("a fenced completion's output is not stored");
        assert_eq!(err.error_type(), "Idempotency.CompletionFailed", "{err}");
        let again: Result<String, EventError<String>> = function
            .call(arg, |_| async { Ok("third".to_owned()) })
            .await;
        assert_eq!(again.map_err(|e| e.to_string()).as_deref(), Ok("second"));
    }
}
