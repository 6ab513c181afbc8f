//! The optional in-process cache of completed records.
//!
//! A warm Lambda instance that has seen a key complete can replay it without a
//! DynamoDB request. Only completed records are cached (an in-progress record
//! must always be asked of the store, or two instances could both run), entries
//! are bounded in number (LRU) and age, and never outlive the record's own
//! expiry. The fingerprint is cached with the response, so a different request
//! with a cached key still gets its `422`.
//!
//! ```
//! use std::time::Duration;
//! use lambda_idempotency::{IdempotencyLayer, MemoryStore};
//!
//! let layer = IdempotencyLayer::new(MemoryStore::new()).local_cache(1_000, Duration::from_secs(300));
//! # let _ = layer;
//! ```

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::record::StoredResponse;

#[derive(Debug)]
struct Entry {
    fingerprint: String,
    response: Arc<StoredResponse>,
    expires_at_s: u64,
    cached_at: Instant,
}

/// A bounded LRU of completed records, shared by every clone of a service.
#[derive(Debug)]
pub(crate) struct LocalCache {
    entries: Mutex<LruCache<String, Entry>>,
    max_age: Duration,
}

impl LocalCache {
    pub(crate) fn new(capacity: usize, max_age: Duration) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        LocalCache {
            entries: Mutex::new(LruCache::new(capacity)),
            max_age,
        }
    }

    /// The cached fingerprint and response of `record_id`, if fresh.
    pub(crate) fn get(&self, record_id: &str, now_s: u64) -> Option<(String, Arc<StoredResponse>)> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entry = entries.get(record_id)?;
        if entry.cached_at.elapsed() > self.max_age || entry.expires_at_s < now_s {
            entries.pop(record_id);
            return None;
        }
        Some((entry.fingerprint.clone(), entry.response.clone()))
    }

    /// Remember a completed record.
    pub(crate) fn put(
        &self,
        record_id: &str,
        fingerprint: &str,
        response: StoredResponse,
        expires_at_s: u64,
    ) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.put(
            record_id.to_owned(),
            Entry {
                fingerprint: fingerprint.to_owned(),
                response: Arc::new(response),
                expires_at_s,
                cached_at: Instant::now(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::StoredBody;

    fn response() -> StoredResponse {
        StoredResponse::new(200, vec![], StoredBody::Empty)
    }

    #[test]
    fn bounded_by_entries_age_and_record_expiry() {
        let cache = LocalCache::new(2, Duration::from_secs(60));
        cache.put("a", "fa", response(), 100);
        cache.put("b", "fb", response(), 100);
        cache.put("c", "fc", response(), 100);
        assert!(cache.get("a", 50).is_none(), "least recently used evicted");
        assert_eq!(cache.get("b", 50).map(|(f, _)| f), Some("fb".into()));
        assert!(
            cache.get("c", 101).is_none(),
            "past the record's own expiry"
        );
        let young = LocalCache::new(2, Duration::ZERO);
        young.put("a", "fa", response(), 100);
        std::thread::sleep(Duration::from_millis(2));
        assert!(young.get("a", 50).is_none(), "past max age");
    }
}
