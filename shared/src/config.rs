//! [`IdempotencyConfig`]: the options the HTTP middleware and the event
//! path share, set once.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::millis;

use crate::cache::LocalCache;
use crate::error::Error;
use crate::metrics::{Event, Metrics};
use crate::settings::Settings;
use crate::store::Store;

pub use crate::cache::DEFAULT_MAX_BYTES as DEFAULT_LOCAL_CACHE_BYTES;

pub use crate::settings::{
    DISABLED_ENV, EXPIRES_AFTER_ENV, MAX_LEASE_ENV, METRICS_NAMESPACE_ENV, WAIT_FOR_RESULT_ENV,
};

/// Does [`DISABLED_ENV`] (or its former name, `LAMBDA_IDEMPOTENCY_DISABLED`)
/// turn the middleware off in this process? A value that is not a boolean
/// counts as off here (idempotency stays on); every `from_env` refuses it.
pub fn disabled_from_env() -> bool {
    Settings::from_env().is_ok_and(|settings| settings.disabled)
}

/// What the HTTP middleware ([`IdempotencyLayer`](crate::IdempotencyLayer))
/// and the event path ([`IdempotentFunction`](crate::IdempotentFunction),
/// and through it [`IdempotentEventLayer`](crate::IdempotentEventLayer) and
/// the batch processors) share: the store, the namespace, how long records
/// live, the leases, the local cache, metrics and the disable switch.
///
/// Build it once and hand it to both paths; each adds its own options
/// (methods and headers for HTTP, key sources and validation for events).
///
/// ```
/// use std::time::Duration;
/// use lambda_idempotency::metrics::Metrics;
/// use lambda_idempotency::{IdempotencyConfig, IdempotencyLayer, IdempotentFunction, MemoryStore};
///
/// let config = IdempotencyConfig::new(MemoryStore::new())
///     .expires_after(Duration::from_secs(3600))
///     .local_cache(1_000, Duration::from_secs(300))
///     .metrics(Metrics::new("Orders").dimension("Service", "orders"));
/// let http = IdempotencyLayer::with_config(config.clone()).require_key(true);
/// let events = IdempotentFunction::with_config(config, "order-events").key_pointers(["/order_id"]);
/// # let _ = (http, events);
/// ```
#[derive(Clone, Debug)]
pub struct IdempotencyConfig {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) namespace: String,
    pub(crate) expires_after: Duration,
    pub(crate) leases: Leases,
    pub(crate) cache: Option<Arc<LocalCache>>,
    /// The local cache's byte budget when one was set, kept so that the
    /// order of the two builder calls does not matter.
    cache_max_bytes: Option<usize>,
    pub(crate) metrics: Option<Metrics>,
    pub(crate) disabled: bool,
    /// How long a duplicate waits for the outcome of the request in
    /// progress ([`wait_for`](Self::wait_for)); `None`: not at all.
    pub(crate) wait_for: Option<Duration>,
    /// What this process knows of claims in progress (its clones share
    /// it): how long its handler takes, and its waiters of each record.
    pub(crate) progress: Arc<crate::progress::Progress>,
}

impl IdempotencyConfig {
    /// Records in `store`. Defaults: no namespace, records kept 24 hours,
    /// lease = the invocation's deadline + 2 s, capped at 15 minutes, no
    /// local cache, no metrics, on.
    pub fn new(store: impl Store + 'static) -> Self {
        IdempotencyConfig {
            store: Arc::new(store),
            namespace: String::new(),
            expires_after: Duration::from_secs(24 * 3600),
            leases: Leases::default(),
            cache: None,
            cache_max_bytes: None,
            metrics: None,
            disabled: false,
            wait_for: None,
            progress: Arc::default(),
        }
    }

    /// [`new`](Self::new), with the options a deployment sets in the
    /// environment, read the same way for the HTTP layer and the event
    /// path (their `from_env`s call this): [`DISABLED_ENV`],
    /// [`EXPIRES_AFTER_ENV`], [`MAX_LEASE_ENV`], [`METRICS_NAMESPACE_ENV`]
    /// and [`WAIT_FOR_RESULT_ENV`], through [`Settings`] (where every
    /// variable is defined; `docs/configuration.md` lists them). An unset
    /// or empty variable keeps the default.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming
    /// the variable whose value is not what it accepts.
    pub fn from_env(store: impl Store + 'static) -> Result<Self, Error> {
        Self::from_lookup(store, |name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env), with the variables read through
    /// `lookup` instead of the process environment (tests, settings kept
    /// elsewhere).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lambda_idempotency::{IdempotencyConfig, MemoryStore};
    ///
    /// let vars = |name: &str| (name == "IDEMPOTENCY_EXPIRES_AFTER_SECONDS").then(|| "3600".to_owned());
    /// let config = IdempotencyConfig::from_lookup(MemoryStore::new(), vars).unwrap();
    /// assert!(!config.is_disabled());
    ///
    /// let typo = |name: &str| (name == "IDEMPOTENCY_MAX_LEASE_SECONDS").then(|| "15m".to_owned());
    /// let err = IdempotencyConfig::from_lookup(MemoryStore::new(), typo).unwrap_err();
    /// assert!(err.to_string().contains("IDEMPOTENCY_MAX_LEASE_SECONDS=\"15m\""));
    /// ```
    pub fn from_lookup(
        store: impl Store + 'static,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Error> {
        Ok(Settings::from_lookup(lookup)?.config(store))
    }

    /// A namespace mixed into every record id, for sharing one table between
    /// services whose keys could collide.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How long a completed record replays (default 24 hours).
    pub fn expires_after(mut self, ttl: Duration) -> Self {
        self.expires_after = ttl;
        self
    }

    /// Upper bound of a lease (default 15 minutes, Lambda's longest timeout).
    /// Where there is no deadline (outside Lambda, or no context registered),
    /// the lease is this long.
    pub fn max_lease(mut self, lease: Duration) -> Self {
        self.leases.max_lease = lease;
        self
    }

    /// Time added to the invocation's deadline before a lease may be taken
    /// over (default 2 s), covering clock skew and the runtime's shutdown.
    pub fn lease_margin(mut self, margin: Duration) -> Self {
        self.leases.margin = margin;
        self
    }

    /// Keep up to `entries` completed records in process memory for at most
    /// `max_age` (and never past the record's own expiry), so a warm
    /// instance replays them without a store request. Off by default.
    pub fn local_cache(mut self, entries: usize, max_age: Duration) -> Self {
        self.cache = Some(Arc::new(LocalCache::new(
            entries,
            max_age,
            self.cache_max_bytes
                .unwrap_or(crate::cache::DEFAULT_MAX_BYTES),
        )));
        self
    }

    /// Bound the local cache by the bytes of the outputs it holds (default
    /// [`DEFAULT_LOCAL_CACHE_BYTES`]);
    /// least recently used entries make room, one larger than the budget is
    /// not cached. Before or after [`local_cache`](Self::local_cache), which
    /// turns the cache on (a budget alone does not).
    pub fn local_cache_max_bytes(mut self, max_bytes: usize) -> Self {
        self.cache_max_bytes = Some(max_bytes);
        if let Some(cache) = &self.cache {
            self.cache = Some(Arc::new(cache.with_max_bytes(max_bytes)));
        }
        self
    }

    /// Emit CloudWatch EMF metrics (claims, replays, conflicts, mismatches,
    /// fenced writes, releases, store errors, cache hits, oversized outputs,
    /// capped leases). Off by default.
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Let a duplicate that finds the same request still in progress wait
    /// up to `max_wait` for its outcome and answer that outcome as a
    /// replay, instead of answering at once that it is in progress (`409`
    /// on HTTP, [`EventError::InProgress`](crate::event::EventError) on the
    /// event path). Off by default; zero turns it off.
    ///
    /// - The wait polls the record with
    ///   [`Store::get`] (a consistent read on
    ///   DynamoDB). The claim holding the key says when it expects to finish
    ///   (the median of its process's recent durations): the wait sleeps
    ///   until then, then polls 20 ms later and half as long again each
    ///   time, up to 250 ms between polls (without an estimate: 50 ms after
    ///   its own claim, growing the same way). Each interval is cut by a
    ///   random part of up to half so that duplicates waiting on one key
    ///   spread their reads; waiters in one process share one read per poll
    ///   and wake when that process stores the outcome.
    /// - It never outlasts the invocation's deadline less 1 s (the HTTP
    ///   layer reads it from the Lambda context; the event path from
    ///   [`register_context`](crate::IdempotentFunction::register_context)),
    ///   so the waiting invocation answers before it is cut off.
    /// - A different request with the same key does not wait: it is refused
    ///   at once.
    /// - When the key frees meanwhile (the first request failed and was
    ///   released, its lease ended, the record expired), the waiting request
    ///   claims it and runs, as a retry then would; a record the sweeper
    ///   failed replays its stored problem.
    /// - When `max_wait` ends first, the answer is the one without a wait.
    ///
    /// What it costs, per engine, is measured in `BENCHMARKS.md`
    /// ("Waiting for the first answer").
    pub fn wait_for(mut self, max_wait: Duration) -> Self {
        self.wait_for = Some(max_wait).filter(|w| !w.is_zero());
        self
    }

    /// Turn idempotency off: every request or event runs its handler as if
    /// unwrapped, for local tests. A warning is logged once per process.
    pub fn disabled(mut self, disabled: bool) -> Self {
        self.disabled = disabled;
        self
    }

    /// Is idempotency off?
    pub fn is_disabled(&self) -> bool {
        self.disabled
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Count `event` when metrics are on.
    pub(crate) fn count(&self, event: Event) {
        if let Some(metrics) = &self.metrics {
            metrics.emit(event);
        }
    }

    /// Say once per process that idempotency is off.
    pub(crate) fn warn_disabled(&self) {
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if self.disabled && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(
                "lambda-idempotency is DISABLED ({} or .disabled(true)): retries and duplicates \
                 will run the handler again",
                DISABLED_ENV
            );
        }
    }
}

// Defined here, beside what it builds, so that `settings` depends on
// nothing of the crate but its error type (no module cycle).
impl Settings {
    /// The options these settings give the HTTP layer and the event path,
    /// around `store`: [`IdempotencyConfig`]'s
    /// defaults where a variable is unset.
    pub fn config(&self, store: impl Store + 'static) -> IdempotencyConfig {
        let mut config = IdempotencyConfig::new(store).disabled(self.disabled);
        if let Some(ttl) = self.expires_after {
            config = config.expires_after(ttl);
        }
        if let Some(lease) = self.max_lease {
            config = config.max_lease(lease);
        }
        if let Some(namespace) = &self.metrics_namespace {
            config = config.metrics(Metrics::new(namespace));
        }
        if let Some(wait) = self.wait_for {
            config = config.wait_for(wait);
        }
        config
    }
}

/// How leases are drawn: until the invocation's deadline plus `margin`,
/// never longer than `max_lease` (the whole lease where there is no deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Leases {
    pub(crate) max_lease: Duration,
    pub(crate) margin: Duration,
}

impl Default for Leases {
    /// 15 minutes (Lambda's longest timeout) and 2 s.
    fn default() -> Self {
        Leases {
            max_lease: Duration::from_secs(15 * 60),
            margin: Duration::from_secs(2),
        }
    }
}

impl Leases {
    /// The end of a lease taken at `now`, and whether `max_lease` cut it
    /// short of the invocation's deadline (a retry could then take the key
    /// over while the invocation still runs). A deadline already past is
    /// not this invocation's (a stale one, registered by an earlier
    /// invocation of the instance): the lease is then `max_lease`, as with
    /// no deadline, rather than the margin alone.
    pub(crate) fn end(&self, now: u64, deadline_ms: Option<u64>) -> (u64, bool) {
        let cap = now.saturating_add(millis(self.max_lease));
        match deadline_ms.filter(|d| *d > now) {
            Some(deadline) => {
                let wanted = deadline.saturating_add(millis(self.margin));
                (wanted.min(cap), wanted > cap)
            }
            None => (cap, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[test]
    fn lease_follows_deadline_plus_margin_within_the_cap() {
        let leases = Leases {
            max_lease: Duration::from_secs(60),
            margin: Duration::from_secs(2),
        };
        assert_eq!(leases.end(1_000, Some(11_000)), (13_000, false));
        assert_eq!(leases.end(1_000, Some(900_000)), (61_000, true));
        assert_eq!(leases.end(1_000, None), (61_000, false));
    }

    #[test]
    fn a_deadline_already_past_is_stale_and_the_lease_is_max_lease() {
        // A deadline registered by an earlier invocation of a warm
        // instance: not this one's, so no 2 s lease from it.
        let leases = Leases {
            max_lease: Duration::from_secs(60),
            margin: Duration::from_secs(2),
        };
        assert_eq!(leases.end(5_000, Some(1_000)), (65_000, false));
        assert_eq!(leases.end(5_000, Some(4_999)), (65_000, false));
    }

    #[test]
    fn from_env_reads_each_variable_and_names_the_one_it_refuses() {
        let config = |pairs: &'static [(&'static str, &'static str)]| {
            IdempotencyConfig::from_lookup(MemoryStore::new(), move |name| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| (*value).to_owned())
            })
        };
        let defaults = config(&[]).unwrap();
        assert_eq!(defaults.expires_after, Duration::from_secs(24 * 3600));
        assert_eq!(defaults.leases, Leases::default());
        assert!(defaults.metrics.is_none() && !defaults.disabled);
        assert_eq!(defaults.wait_for, None);
        let set = config(&[
            (EXPIRES_AFTER_ENV, " 3600 "),
            (MAX_LEASE_ENV, "60"),
            (METRICS_NAMESPACE_ENV, "Orders"),
            (DISABLED_ENV, "true"),
            (WAIT_FOR_RESULT_ENV, "8000"),
        ])
        .unwrap();
        assert_eq!(set.expires_after, Duration::from_secs(3600));
        assert_eq!(set.leases.max_lease, Duration::from_secs(60));
        assert!(set.metrics.is_some() && set.disabled);
        assert_eq!(set.wait_for, Some(Duration::from_secs(8)));
        // Empty is unset; a wait of 0 is none.
        let empty = config(&[
            (EXPIRES_AFTER_ENV, ""),
            (METRICS_NAMESPACE_ENV, " "),
            (WAIT_FOR_RESULT_ENV, "0"),
        ])
        .unwrap();
        assert_eq!(empty.expires_after, Duration::from_secs(24 * 3600));
        assert!(empty.metrics.is_none());
        assert_eq!(empty.wait_for, None);
        for (variable, value) in [
            (EXPIRES_AFTER_ENV, "0"),
            (EXPIRES_AFTER_ENV, "1h"),
            (EXPIRES_AFTER_ENV, "31536001"),
            (MAX_LEASE_ENV, "-5"),
            (MAX_LEASE_ENV, "86401"),
            (WAIT_FOR_RESULT_ENV, "5s"),
            (WAIT_FOR_RESULT_ENV, "-1"),
            (WAIT_FOR_RESULT_ENV, "900001"),
        ] {
            let pairs: &'static [(&'static str, &'static str)] =
                Box::leak(vec![(variable, value)].into_boxed_slice());
            let err = config(pairs).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidConfig);
            assert!(
                err.to_string().contains(&format!("{variable}={value:?}")),
                "{err}"
            );
        }
    }

    #[test]
    fn the_local_cache_byte_budget_holds_in_either_order() {
        let max_age = Duration::from_secs(60);
        let budget = |config: IdempotencyConfig| config.cache.map(|c| c.max_bytes());
        let after = IdempotencyConfig::new(MemoryStore::new())
            .local_cache(5, max_age)
            .local_cache_max_bytes(123);
        let before = IdempotencyConfig::new(MemoryStore::new())
            .local_cache_max_bytes(123)
            .local_cache(5, max_age);
        assert_eq!(budget(after), Some(123));
        assert_eq!(
            budget(before),
            Some(123),
            "set before the cache, it was dropped"
        );
        // A budget alone turns no cache on.
        let alone = IdempotencyConfig::new(MemoryStore::new()).local_cache_max_bytes(123);
        assert_eq!(budget(alone), None);
    }
}
