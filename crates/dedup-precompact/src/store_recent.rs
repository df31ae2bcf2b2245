//! [`StoreRecentCaptures`]: the recent-capture cache kept in the memory store itself, so
//! that processes started minutes apart (one per hook run) see each other's captures.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dedup_core::ContentHash;
use dedup_store::{MemoryId, Scope, Store};

use crate::recent::{RecentCaptureCache, RecentCaptures, RecentHit};
use crate::{Error, Result};

/// A [`RecentCaptures`] in the store's `recent_captures` table, with the semantics of
/// [`RecentCaptureCache`](crate::RecentCaptureCache) across processes: an entry lives for
/// the window after its latest record, and beyond the capacity the least recently
/// recorded entry is forgotten. It is the service's default, since every CLI run (and so
/// every hook run) is a new process whose in-process cache starts empty.
///
/// It lives as long as the store, not the process, and is as shared as the store is
/// (every process on one SQLite file or Postgres database). Only hashes, ids and times
/// are kept, never content. Ages are measured by each host's clock.
///
/// An in-process [`RecentCaptureCache`] sits in front of the table: every record goes to
/// both, and a check asks it first. So this process's own captures are still caught while
/// the store is down, as they were before captures were persisted. A failing query is an
/// [`Error::RecentCache`], so the service fails open.
pub struct StoreRecentCaptures {
    store: Arc<Store>,
    local: RecentCaptureCache,
    ttl: Duration,
    capacity: usize,
}

impl StoreRecentCaptures {
    /// Captures of `store` that live for `ttl`, at most `capacity` of them (0 is taken as 1).
    pub fn new(store: Arc<Store>, ttl: Duration, capacity: usize) -> StoreRecentCaptures {
        StoreRecentCaptures { store, local: RecentCaptureCache::new(ttl, capacity), ttl, capacity: capacity.max(1) }
    }

    /// How long an entry lives after it was recorded.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The most entries kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl fmt::Debug for StoreRecentCaptures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreRecentCaptures")
            .field("store", &self.store.location())
            .field("ttl", &self.ttl)
            .field("capacity", &self.capacity)
            .finish()
    }
}

fn unavailable(what: &str, error: &dedup_store::Error) -> Error {
    Error::RecentCache(format!("{what} in the store failed: {error}"))
}

#[async_trait::async_trait]
impl RecentCaptures for StoreRecentCaptures {
    async fn check(&self, scope: &Scope, hash: &ContentHash) -> Result<Option<RecentHit>> {
        if let Some(hit) = self.local.check(scope, hash).await? {
            return Ok(Some(hit));
        }
        let hit = self.store.recent_capture(scope, hash, self.ttl).await.map_err(|e| unavailable("check", &e))?;
        Ok(hit.map(|hit| RecentHit { memory_id: hit.memory_id, urn: scope.urn(hit.memory_id), age: hit.age }))
    }

    async fn record(&self, scope: &Scope, hash: &ContentHash, memory_id: MemoryId, urn: &str) -> Result<()> {
        self.local.record(scope, hash, memory_id, urn).await?;
        self.store
            .record_recent_capture(scope, hash, memory_id, self.ttl, self.capacity)
            .await
            .map_err(|e| unavailable("record", &e))
    }

    async fn len(&self) -> Result<usize> {
        let n = self.store.recent_capture_count(self.ttl).await.map_err(|e| unavailable("count", &e))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn backend(&self) -> &'static str {
        "store"
    }
}
