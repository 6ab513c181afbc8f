//! The optional in-process cache of completed records.
//!
//! A warm Lambda instance that has seen a key complete can replay it without a
//! DynamoDB request. Only completed records are cached (an in-progress record
//! must always be asked of the store, or two instances could both run), entries
//! are bounded in number and in bytes (LRU, [`DEFAULT_MAX_BYTES`] unless set
//! with [`local_cache_max_bytes`](crate::IdempotencyLayer::local_cache_max_bytes))
//! and in age, and never outlive the record's own expiry. Bodies are kept as
//! they replay (uncompressed), so a hit costs no decompression; the byte bound
//! counts them at that size. The fingerprint is cached with the response, so a different request
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

use crate::record::Record;

/// The local cache holds at most this many bytes of responses by default.
pub const DEFAULT_MAX_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug)]
struct Entry {
    /// A completed record (its response is there).
    record: Arc<Record>,
    cached_at: Instant,
    bytes: usize,
}

/// A bounded LRU of completed records, shared by every clone of a service.
#[derive(Debug)]
pub(crate) struct LocalCache {
    entries: Mutex<Entries>,
    max_age: Duration,
    max_bytes: usize,
}

#[derive(Debug)]
struct Entries {
    lru: LruCache<String, Entry>,
    /// Sum of the entries' `bytes`.
    bytes: usize,
}

impl LocalCache {
    pub(crate) fn new(capacity: usize, max_age: Duration, max_bytes: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        LocalCache {
            entries: Mutex::new(Entries {
                lru: LruCache::new(capacity),
                bytes: 0,
            }),
            max_age,
            max_bytes,
        }
    }

    /// The byte budget of the outputs held.
    #[cfg(test)]
    pub(crate) fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The same bounds with another byte budget (a fresh, empty cache).
    pub(crate) fn with_max_bytes(&self, max_bytes: usize) -> Self {
        let capacity = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lru
            .cap()
            .get();
        LocalCache::new(capacity, self.max_age, max_bytes)
    }

    /// The cached completed record `record_id`, if fresh.
    pub(crate) fn get(&self, record_id: &str, now_s: u64) -> Option<Arc<Record>> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entry = entries.lru.get(record_id)?;
        if entry.cached_at.elapsed() > self.max_age || entry.record.expires_at_s < now_s {
            entries.remove(record_id);
            return None;
        }
        Some(entry.record.clone())
    }

    /// Remember a completed record. One larger than the whole byte budget is
    /// not cached; otherwise least recently used entries make room.
    pub(crate) fn put(&self, record: Record) {
        let Some(response) = &record.response else {
            return;
        };
        let bytes = record.id.len()
            + record.fingerprint.len()
            + record.owner.len()
            + response.body.bytes().len()
            + response
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>();
        let record_id = record.id.clone();
        let record_id = record_id.as_str();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.remove(record_id);
        if bytes > self.max_bytes {
            return;
        }
        while entries.bytes + bytes > self.max_bytes {
            match entries.lru.pop_lru() {
                Some((_, old)) => entries.bytes -= old.bytes,
                None => break,
            }
        }
        let evicted = entries.lru.push(
            record_id.to_owned(),
            Entry {
                record: Arc::new(record),
                cached_at: Instant::now(),
                bytes,
            },
        );
        entries.bytes += bytes;
        if let Some((_, old)) = evicted {
            entries.bytes -= old.bytes;
        }
    }
}

impl Entries {
    fn remove(&mut self, record_id: &str) {
        if let Some(old) = self.lru.pop(record_id) {
            self.bytes -= old.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Status, StoredBody, StoredResponse};

    fn response() -> StoredResponse {
        StoredResponse::new(200, vec![], StoredBody::Empty)
    }

    /// A completed record `id` with fingerprint `fp`, kept until `expires`.
    fn completed(id: &str, fp: &str, response: StoredResponse, expires: u64) -> Record {
        Record {
            id: id.into(),
            status: Status::Completed,
            fingerprint: fp.into(),
            attempt: 1,
            owner: String::new(),
            lease_expires_at_ms: 0,
            expires_at_s: expires,
            response: Some(response),
            checkpoint: None,
        }
    }

    #[test]
    fn bounded_by_entries_age_and_record_expiry() {
        let cache = LocalCache::new(2, Duration::from_secs(60), DEFAULT_MAX_BYTES);
        cache.put(completed("a", "fa", response(), 100));
        cache.put(completed("b", "fb", response(), 100));
        cache.put(completed("c", "fc", response(), 100));
        assert!(cache.get("a", 50).is_none(), "least recently used evicted");
        assert_eq!(
            cache.get("b", 50).map(|r| r.fingerprint.clone()),
            Some("fb".into())
        );
        assert!(
            cache.get("c", 101).is_none(),
            "past the record's own expiry"
        );
        let young = LocalCache::new(2, Duration::ZERO, DEFAULT_MAX_BYTES);
        young.put(completed("a", "fa", response(), 100));
        std::thread::sleep(Duration::from_millis(2));
        assert!(young.get("a", 50).is_none(), "past max age");
    }

    fn body(bytes: usize) -> StoredResponse {
        StoredResponse::new(200, vec![], StoredBody::Binary(vec![7; bytes]))
    }

    #[test]
    fn bounded_by_bytes_as_well_as_entries() {
        // Room for two 400-byte bodies (plus ids and fingerprints), not three.
        let cache = LocalCache::new(100, Duration::from_secs(60), 1_000);
        cache.put(completed("a", "fa", body(400), 100));
        cache.put(completed("b", "fb", body(400), 100));
        cache.put(completed("c", "fc", body(400), 100));
        assert!(
            cache.get("a", 50).is_none(),
            "least recently used evicted for room"
        );
        assert!(cache.get("b", 50).is_some());
        assert!(cache.get("c", 50).is_some());
        // One body over the whole budget is not cached, and evicts nothing.
        cache.put(completed("huge", "fh", body(5_000), 100));
        assert!(cache.get("huge", 50).is_none());
        assert!(cache.get("b", 50).is_some() && cache.get("c", 50).is_some());
        // Replacing an entry frees its old size.
        for _ in 0..10 {
            cache.put(completed("b", "fb", body(400), 100));
        }
        assert!(cache.get("c", 50).is_some());
        let held = cache.entries.lock().unwrap().bytes;
        assert!(held <= 1_000, "{held} bytes held");
    }
}
