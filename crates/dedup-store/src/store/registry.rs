//! The in-process vector indexes of one store handle, kept within a memory budget by
//! dropping the least recently used.
//!
//! An index dropped here is gone for good: the next use of its (scope, model, filter)
//! starts from an empty [`IndexState`] with no version and loads it whole from the
//! database. Only an index nothing else holds is dropped, so no search or insert works on
//! an index the registry no longer knows, and no incremental update can land on a state
//! that a later search would take for current.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lru::LruCache;

use super::{IndexHandle, IndexKey};
use crate::{Scope, SearchFilter};

/// What the vector indexes of a [`Store`](crate::Store) hold, and how often they were
/// loaded and dropped since it was opened.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct IndexUsage {
    /// Heap bytes of the resident indexes, as last measured after each search or insert.
    pub resident_bytes: u64,
    /// [`StoreOptions::index_memory_bytes`](crate::StoreOptions::index_memory_bytes).
    pub budget_bytes: u64,
    /// Indexes the registry holds (one per scope, model and filter used).
    pub resident_indexes: u64,
    /// Indexes dropped to stay within the budget.
    pub evictions: u64,
    /// Indexes loaded whole from the database because they were not resident (first use
    /// or after an eviction).
    pub loads: u64,
    /// Total time those loads took, in seconds (database read and index build).
    pub load_seconds: f64,
}

/// Counts of cold index loads, shared with the backends that perform them.
#[derive(Debug, Default)]
pub(crate) struct IndexLoads {
    count: AtomicU64,
    nanos: AtomicU64,
}

impl IndexLoads {
    /// One index was loaded whole from the database in `took`.
    pub(crate) fn record(&self, took: Duration) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.nanos.fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

/// One resident index and its size when last measured.
struct Entry {
    handle: IndexHandle,
    bytes: usize,
}

struct Resident {
    /// Most recently used first.
    entries: LruCache<IndexKey, Entry>,
    /// **Invariant:** the sum of `bytes` over `entries`.
    bytes: usize,
    evictions: u64,
    /// Indexes already reported as larger than the whole budget.
    oversized: HashSet<IndexKey>,
}

/// The lazily created indexes of one store handle, by [`IndexKey`], within a budget of
/// heap bytes.
pub(crate) struct IndexRegistry {
    resident: Mutex<Resident>,
    budget_bytes: usize,
    loads: Arc<IndexLoads>,
}

impl IndexRegistry {
    pub(crate) fn new(budget_bytes: usize) -> IndexRegistry {
        IndexRegistry {
            resident: Mutex::new(Resident {
                entries: LruCache::unbounded(),
                bytes: 0,
                evictions: 0,
                oversized: HashSet::new(),
            }),
            budget_bytes,
            loads: Arc::default(),
        }
    }

    /// The index of (`scope`, `model`, `filter`), created empty if it is not resident, and
    /// now the most recently used.
    pub(crate) fn handle(&self, scope: &Scope, model: &str, filter: &SearchFilter) -> (IndexKey, IndexHandle) {
        let key = IndexKey { scope: scope.clone(), model: model.to_owned(), filter: filter.clone() };
        let mut resident = self.lock();
        let entry = resident.entries.get_or_insert(key.clone(), || Entry { handle: IndexHandle::default(), bytes: 0 });
        let handle = Arc::clone(&entry.handle);
        (key, handle)
    }

    /// The resident indexes of `scope`, of every model and filter.
    pub(crate) fn handles_of(&self, scope: &Scope) -> Vec<IndexHandle> {
        let resident = self.lock();
        resident.entries.iter().filter(|(key, _)| &key.scope == scope).map(|(_, e)| Arc::clone(&e.handle)).collect()
    }

    /// Where the backends count cold loads.
    pub(crate) fn loads(&self) -> &IndexLoads {
        &self.loads
    }

    /// [`IndexRegistry::loads`], to keep beyond a borrow of the registry.
    pub(crate) fn loads_handle(&self) -> Arc<IndexLoads> {
        Arc::clone(&self.loads)
    }

    /// Records that the index of `key`, held by the caller as `handle`, now takes `bytes`;
    /// then drops the least recently used indexes that nothing holds until the total fits
    /// the budget again. The caller's own index is never dropped (it is held), so one index
    /// larger than the budget stays, with a warning the first time.
    pub(crate) fn settle(&self, key: &IndexKey, handle: &IndexHandle, bytes: usize) {
        let mut resident = self.lock();
        let resident = &mut *resident;
        match resident.entries.peek_mut(key) {
            Some(entry) if Arc::ptr_eq(&entry.handle, handle) => {
                resident.bytes = resident.bytes - entry.bytes + bytes;
                entry.bytes = bytes;
            }
            // Dropped and created again meanwhile: the new one is measured by its own user.
            _ => return,
        }
        if resident.bytes <= self.budget_bytes {
            return;
        }
        let mut victims = Vec::new();
        let mut freed = 0;
        // Least recently used first. An index held elsewhere is in use: it stays.
        for (candidate, entry) in resident.entries.iter().rev() {
            if resident.bytes - freed <= self.budget_bytes {
                break;
            }
            if candidate != key && Arc::strong_count(&entry.handle) == 1 {
                victims.push(candidate.clone());
                freed += entry.bytes;
            }
        }
        for victim in victims {
            if let Some(entry) = resident.entries.pop(&victim) {
                resident.bytes -= entry.bytes;
                resident.evictions += 1;
                tracing::debug!(scope = %victim.scope, model = victim.model, bytes = entry.bytes, "index dropped");
            }
        }
        if bytes > self.budget_bytes && resident.oversized.insert(key.clone()) {
            tracing::warn!(
                scope = %key.scope,
                model = key.model,
                index_bytes = bytes,
                budget_bytes = self.budget_bytes,
                "one vector index is larger than the whole index memory budget ([store] index_memory_mb): it is \
                 served, and dropped as soon as another index is used"
            );
        }
    }

    /// The numbers behind [`Store::index_usage`](crate::Store::index_usage).
    pub(crate) fn usage(&self) -> super::IndexUsage {
        let resident = self.lock();
        IndexUsage {
            resident_bytes: resident.bytes as u64,
            budget_bytes: self.budget_bytes as u64,
            resident_indexes: resident.entries.len() as u64,
            evictions: resident.evictions,
            loads: self.loads.count.load(Ordering::Relaxed),
            load_seconds: Duration::from_nanos(self.loads.nanos.load(Ordering::Relaxed)).as_secs_f64(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Resident> {
        self.resident.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(registry: &IndexRegistry, namespace: &str) -> (IndexKey, IndexHandle) {
        let scope = Scope::new("global", namespace).unwrap();
        registry.handle(&scope, "m", &SearchFilter::default())
    }

    #[test]
    fn an_index_in_use_is_never_dropped() {
        let registry = IndexRegistry::new(10);
        let (a, held_a) = key_of(&registry, "a");
        registry.settle(&a, &held_a, 6);
        drop(held_a);
        let (b, held_b) = key_of(&registry, "b");
        registry.settle(&b, &held_b, 6);
        let usage = registry.usage();
        assert_eq!((usage.resident_indexes, usage.resident_bytes, usage.evictions), (1, 6, 1), "`a` was free");

        // `b` is held: `c` goes over the budget rather than drop it.
        let (c, held_c) = key_of(&registry, "c");
        registry.settle(&c, &held_c, 6);
        let usage = registry.usage();
        assert_eq!((usage.resident_indexes, usage.resident_bytes, usage.evictions), (2, 12, 1));
        drop(held_b);
        registry.settle(&c, &held_c, 7);
        let usage = registry.usage();
        assert_eq!((usage.resident_indexes, usage.resident_bytes, usage.evictions), (1, 7, 2));
        assert_eq!(registry.handles_of(&c.scope).len(), 1);
    }

    #[test]
    fn a_dropped_index_comes_back_empty() {
        let registry = IndexRegistry::new(0);
        let (a, held) = key_of(&registry, "a");
        held.try_write().unwrap().version = Some(3);
        registry.settle(&a, &held, 1);
        drop(held);
        let (b, other) = key_of(&registry, "b");
        registry.settle(&b, &other, 1);
        let (_, again) = key_of(&registry, "a");
        assert_eq!(again.try_read().unwrap().version, None, "a new state is loaded whole");
    }
}
