//! Seed 004's recent-capture check: the [`RecentCaptures`] trait and its in-process
//! backend, [`RecentCaptureCache`], an LRU cache bounded by capacity and a time window.

use std::num::NonZeroUsize;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use dedup_core::ContentHash;
use dedup_store::{MemoryId, Scope};
use lru::LruCache;
use tokio::time::Instant;

use crate::Result;

/// A capture found by [`RecentCaptures::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentHit {
    /// The memory that was captured.
    pub memory_id: MemoryId,
    /// Its URN, `memdedup://{domain}/{namespace}/{id}`.
    pub urn: String,
    /// How long ago it was recorded; always less than the window.
    pub age: Duration,
}

/// Recently captured content, keyed by (scope, content hash): seed 004's
/// `RecentCaptureChecker`, shared by the service as `Arc<dyn RecentCaptures>`.
///
/// Implementations remember hashes, ids and URNs, never content. An entry lives for the
/// backend's window from its latest [`record`](RecentCaptures::record); beyond the
/// backend's capacity the least recently recorded entry is forgotten ([`check`] does not
/// refresh an entry).
///
/// [`check`]: RecentCaptures::check
#[async_trait::async_trait]
pub trait RecentCaptures: Send + Sync + std::fmt::Debug {
    /// The capture of `hash` in `scope` within the window, if any. Expired entries are
    /// never returned (and are evicted); the same hash in another scope is not a hit.
    async fn check(&self, scope: &Scope, hash: &ContentHash) -> Result<Option<RecentHit>>;

    /// Records a capture, replacing an older one of the same (scope, hash) and restarting
    /// its window.
    async fn record(&self, scope: &Scope, hash: &ContentHash, memory_id: MemoryId, urn: &str) -> Result<()>;

    /// The number of live (unexpired) entries, for the `dedup_cache_size` gauge.
    async fn len(&self) -> Result<usize>;

    /// Whether there are no live entries.
    async fn is_empty(&self) -> Result<bool> {
        Ok(self.len().await? == 0)
    }

    /// The backend's name: "memory" or "redis".
    fn backend(&self) -> &'static str;
}

/// One remembered capture.
#[derive(Debug, Clone)]
struct Entry {
    memory_id: MemoryId,
    urn: String,
    recorded_at: Instant,
}

/// The in-process [`RecentCaptures`]: an [`LruCache`] of at most `capacity` entries, each
/// live for `ttl` after it was recorded. Contents are lost on restart (seed 004: "not
/// persisted, intentional").
///
/// Lookups do not promote entries, so the cache's LRU order is the order of recording and
/// expired entries always sit at its least-recent end. Time is [`tokio::time::Instant`], so
/// tests can pause and advance it. The lock is a std mutex, never held across an `.await`.
#[derive(Debug)]
pub struct RecentCaptureCache {
    ttl: Duration,
    capacity: NonZeroUsize,
    entries: Mutex<LruCache<(Scope, ContentHash), Entry>>,
}

impl RecentCaptureCache {
    /// An empty cache whose entries live for `ttl` and that holds at most `capacity`
    /// entries (a capacity of 0 is taken as 1).
    ///
    /// Memory grows with the entries held, not with `capacity`: a capacity of billions
    /// allocates nothing up front (a preallocated map of that size would abort the
    /// process).
    pub fn new(ttl: Duration, capacity: usize) -> RecentCaptureCache {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        RecentCaptureCache { ttl, capacity, entries: Mutex::new(LruCache::unbounded()) }
    }

    /// How long an entry lives after it was recorded.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The most entries the cache holds.
    pub fn capacity(&self) -> usize {
        self.capacity.get()
    }

    fn lock(&self) -> MutexGuard<'_, LruCache<(Scope, ContentHash), Entry>> {
        // A panic while the lock was held cannot leave the LRU half-updated in a way that
        // matters here (the worst case is one stale entry), so a poisoned lock is reused.
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn is_expired(&self, entry: &Entry, now: Instant) -> bool {
        now.saturating_duration_since(entry.recorded_at) >= self.ttl
    }

    /// Drops expired entries from the least-recent end.
    fn evict_expired(&self, entries: &mut LruCache<(Scope, ContentHash), Entry>, now: Instant) {
        while entries.peek_lru().is_some_and(|(_, entry)| self.is_expired(entry, now)) {
            entries.pop_lru();
        }
    }
}

#[async_trait::async_trait]
impl RecentCaptures for RecentCaptureCache {
    async fn check(&self, scope: &Scope, hash: &ContentHash) -> Result<Option<RecentHit>> {
        let now = Instant::now();
        let key = (scope.clone(), hash.clone());
        let mut entries = self.lock();
        let Some(entry) = entries.peek(&key) else {
            return Ok(None);
        };
        if self.is_expired(entry, now) {
            entries.pop(&key);
            self.evict_expired(&mut entries, now);
            return Ok(None);
        }
        Ok(Some(RecentHit {
            memory_id: entry.memory_id,
            urn: entry.urn.clone(),
            age: now.saturating_duration_since(entry.recorded_at),
        }))
    }

    async fn record(&self, scope: &Scope, hash: &ContentHash, memory_id: MemoryId, urn: &str) -> Result<()> {
        let now = Instant::now();
        let mut entries = self.lock();
        self.evict_expired(&mut entries, now);
        entries.put((scope.clone(), hash.clone()), Entry { memory_id, urn: urn.to_owned(), recorded_at: now });
        while entries.len() > self.capacity.get() {
            entries.pop_lru();
        }
        Ok(())
    }

    async fn len(&self) -> Result<usize> {
        let now = Instant::now();
        let mut entries = self.lock();
        self.evict_expired(&mut entries, now);
        Ok(entries.len())
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
pub(crate) mod tests;
