//! Unit tests of the in-process recent-capture cache, and the behaviour every
//! [`RecentCaptures`] backend must share (run against Redis by `redis_recent`'s tests).

use std::time::Duration;

use dedup_core::ContentHash;
use dedup_store::{MemoryId, Scope};

use super::*;

pub(crate) fn scope(namespace: &str) -> Scope {
    Scope::namespace(namespace).unwrap()
}

pub(crate) fn hash(text: &str) -> ContentHash {
    ContentHash::of(text)
}

/// Records `text` in `scope` as memory `id`, with the URN the store would give it.
pub(crate) async fn record(cache: &dyn RecentCaptures, scope: &Scope, text: &str, id: i64) {
    let id = MemoryId::new(id);
    cache.record(scope, &hash(text), id, &scope.urn(id)).await.unwrap();
}

/// The id of the live capture of `text` in `scope`, if any.
pub(crate) async fn hit_id(cache: &dyn RecentCaptures, scope: &Scope, text: &str) -> Option<i64> {
    cache.check(scope, &hash(text)).await.unwrap().map(|hit| hit.memory_id.get())
}

/// Behaviour shared by every backend; each function takes a fresh, empty cache built with
/// a window of at least a minute and the capacity named in its doc.
pub(crate) mod shared {
    use super::*;

    /// Any capacity: a recorded capture is found with its id, URN and a small age.
    pub(crate) async fn record_then_check_hits(cache: &dyn RecentCaptures) {
        let decisions = scope("decisions");
        assert_eq!(cache.check(&decisions, &hash("Use PostgreSQL")).await.unwrap(), None);
        assert!(cache.is_empty().await.unwrap());
        record(cache, &decisions, "Use PostgreSQL", 7).await;
        let hit = cache.check(&decisions, &hash("  use postgresql ")).await.unwrap().unwrap();
        assert_eq!(hit.memory_id, MemoryId::new(7));
        assert_eq!(hit.urn, "memdedup://global/decisions/7");
        assert!(hit.age < Duration::from_secs(5), "{:?}", hit.age);
        assert_eq!(cache.len().await.unwrap(), 1);
        assert!(!cache.is_empty().await.unwrap());
    }

    /// Any capacity of at least 4: the same hash in another namespace or domain is no hit.
    pub(crate) async fn scopes_are_isolated(cache: &dyn RecentCaptures) {
        let decisions = scope("decisions");
        let patterns = scope("patterns");
        let other_domain = Scope::new("team-b", "decisions").unwrap();
        record(cache, &decisions, "Use PostgreSQL", 1).await;
        assert_eq!(hit_id(cache, &patterns, "Use PostgreSQL").await, None);
        assert_eq!(hit_id(cache, &other_domain, "Use PostgreSQL").await, None);
        record(cache, &patterns, "Use PostgreSQL", 2).await;
        record(cache, &other_domain, "Use PostgreSQL", 3).await;
        assert_eq!(hit_id(cache, &decisions, "Use PostgreSQL").await, Some(1));
        assert_eq!(hit_id(cache, &patterns, "Use PostgreSQL").await, Some(2));
        assert_eq!(hit_id(cache, &other_domain, "Use PostgreSQL").await, Some(3));
        assert_eq!(cache.len().await.unwrap(), 3);
    }

    /// Capacity 3: the least recently recorded entry goes first, and a check does not
    /// save an entry from eviction.
    pub(crate) async fn capacity_evicts_the_least_recently_recorded(cache: &dyn RecentCaptures) {
        let s = scope("decisions");
        record(cache, &s, "a", 1).await;
        record(cache, &s, "b", 2).await;
        record(cache, &s, "c", 3).await;
        assert_eq!(hit_id(cache, &s, "a").await, Some(1), "a check must not refresh `a`");
        record(cache, &s, "d", 4).await;
        assert_eq!(hit_id(cache, &s, "a").await, None, "`a` was recorded first");
        assert_eq!(hit_id(cache, &s, "b").await, Some(2));
        assert_eq!(hit_id(cache, &s, "c").await, Some(3));
        assert_eq!(hit_id(cache, &s, "d").await, Some(4));
        assert_eq!(cache.len().await.unwrap(), 3);
        for (i, text) in ["e", "f", "g", "h", "i"].into_iter().enumerate() {
            record(cache, &s, text, 10 + i64::try_from(i).unwrap()).await;
        }
        assert_eq!(cache.len().await.unwrap(), 3);
        for text in ["b", "c", "d", "e", "f"] {
            assert_eq!(hit_id(cache, &s, text).await, None, "{text}");
        }
        assert_eq!(hit_id(cache, &s, "g").await, Some(12));
        assert_eq!(hit_id(cache, &s, "i").await, Some(14));
    }

    /// Capacity 3: recording a key again replaces its id and URN and makes it the most
    /// recently recorded.
    pub(crate) async fn record_again_replaces_and_refreshes(cache: &dyn RecentCaptures) {
        let s = scope("learnings");
        record(cache, &s, "a", 1).await;
        record(cache, &s, "b", 2).await;
        record(cache, &s, "c", 3).await;
        record(cache, &s, "a", 11).await;
        let hit = cache.check(&s, &hash("a")).await.unwrap().unwrap();
        assert_eq!((hit.memory_id, hit.urn.as_str()), (MemoryId::new(11), "memdedup://global/learnings/11"));
        assert_eq!(cache.len().await.unwrap(), 3);
        record(cache, &s, "d", 4).await;
        assert_eq!(hit_id(cache, &s, "b").await, None, "`b` is now the least recently recorded");
        assert_eq!(hit_id(cache, &s, "a").await, Some(11));
        assert_eq!(hit_id(cache, &s, "c").await, Some(3));
        assert_eq!(hit_id(cache, &s, "d").await, Some(4));
    }
}

fn cache(ttl_secs: u64, capacity: usize) -> RecentCaptureCache {
    RecentCaptureCache::new(Duration::from_secs(ttl_secs), capacity)
}

#[tokio::test]
async fn record_then_check_hits() {
    let cache = cache(300, 10);
    assert_eq!(cache.backend(), "memory");
    shared::record_then_check_hits(&cache).await;
}

#[tokio::test]
async fn scopes_are_isolated() {
    shared::scopes_are_isolated(&cache(300, 10)).await;
}

#[tokio::test]
async fn capacity_evicts_the_least_recently_recorded() {
    shared::capacity_evicts_the_least_recently_recorded(&cache(300, 3)).await;
}

#[tokio::test]
async fn record_again_replaces_and_refreshes() {
    shared::record_again_replaces_and_refreshes(&cache(300, 3)).await;
}

#[tokio::test]
async fn capacity_zero_is_taken_as_one() {
    let cache = cache(300, 0);
    assert_eq!(cache.capacity(), 1);
    let s = scope("decisions");
    record(&cache, &s, "a", 1).await;
    record(&cache, &s, "b", 2).await;
    assert_eq!(hit_id(&cache, &s, "a").await, None);
    assert_eq!(hit_id(&cache, &s, "b").await, Some(2));
}

#[tokio::test(start_paused = true)]
async fn entries_expire_after_the_window() {
    let cache = cache(300, 10);
    assert_eq!(cache.ttl(), Duration::from_secs(300));
    let s = scope("decisions");
    record(&cache, &s, "Use PostgreSQL", 1).await;

    tokio::time::advance(Duration::from_secs(120)).await;
    let hit = cache.check(&s, &hash("Use PostgreSQL")).await.unwrap().unwrap();
    assert_eq!(hit.age, Duration::from_secs(120));

    tokio::time::advance(Duration::from_secs(180) - Duration::from_millis(1)).await;
    let hit = cache.check(&s, &hash("Use PostgreSQL")).await.unwrap().unwrap();
    assert_eq!(hit.age, Duration::from_secs(300) - Duration::from_millis(1));

    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(cache.check(&s, &hash("Use PostgreSQL")).await.unwrap(), None, "expired at exactly the window");
    assert_eq!(cache.lock().len(), 0, "the expired entry was evicted by the check");
}

#[tokio::test(start_paused = true)]
async fn record_again_restarts_the_window() {
    let cache = cache(300, 10);
    let s = scope("decisions");
    record(&cache, &s, "a", 1).await;
    tokio::time::advance(Duration::from_secs(200)).await;
    record(&cache, &s, "a", 1).await;
    tokio::time::advance(Duration::from_secs(200)).await;
    let hit = cache.check(&s, &hash("a")).await.unwrap().unwrap();
    assert_eq!(hit.age, Duration::from_secs(200));
    tokio::time::advance(Duration::from_secs(100)).await;
    assert_eq!(hit_id(&cache, &s, "a").await, None);
}

#[tokio::test(start_paused = true)]
async fn len_excludes_expired_entries() {
    let cache = cache(300, 10);
    let s = scope("patterns");
    record(&cache, &s, "a", 1).await;
    record(&cache, &s, "b", 2).await;
    tokio::time::advance(Duration::from_secs(200)).await;
    record(&cache, &s, "c", 3).await;
    assert_eq!(cache.len().await.unwrap(), 3);
    tokio::time::advance(Duration::from_secs(100)).await;
    assert_eq!(cache.len().await.unwrap(), 1, "a and b are 300 s old");
    assert_eq!(cache.lock().len(), 1, "and were evicted");
    tokio::time::advance(Duration::from_secs(200)).await;
    assert_eq!(cache.len().await.unwrap(), 0);
    assert!(cache.is_empty().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn expired_entries_do_not_count_against_capacity() {
    let cache = cache(300, 2);
    let s = scope("decisions");
    record(&cache, &s, "a", 1).await;
    tokio::time::advance(Duration::from_secs(250)).await;
    record(&cache, &s, "b", 2).await;
    tokio::time::advance(Duration::from_secs(50)).await;
    record(&cache, &s, "c", 3).await;
    assert_eq!(hit_id(&cache, &s, "b").await, Some(2), "the expired `a` made room, not `b`");
    assert_eq!(hit_id(&cache, &s, "c").await, Some(3));
}

#[tokio::test]
async fn the_cache_holds_no_content() {
    let cache = cache(300, 10);
    record(&cache, &scope("decisions"), "the secret plan is to use PostgreSQL", 1).await;
    let debug = format!("{cache:?}");
    assert!(!debug.contains("secret"), "{debug}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_records_and_checks_stay_bounded() {
    let cache = std::sync::Arc::new(cache(300, 50));
    let mut tasks = Vec::new();
    for task in 0..8_i64 {
        let cache = cache.clone();
        tasks.push(tokio::spawn(async move {
            let s = scope("decisions");
            for i in 0..100_i64 {
                let text = format!("{task}-{i}");
                record(cache.as_ref(), &s, &text, task * 1000 + i).await;
                let _ = hit_id(cache.as_ref(), &s, &text).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(cache.len().await.unwrap(), 50);
}

#[tokio::test]
async fn huge_capacity_allocates_nothing_up_front() {
    // A configured capacity of 2^31 once made the cache preallocate its map and abort the
    // process; memory now follows the entries held.
    let cache = RecentCaptureCache::new(Duration::from_secs(60), 1 << 31);
    assert_eq!(cache.capacity(), 1 << 31);
    record(&cache, &scope("decisions"), "Use PostgreSQL", 1).await;
    assert_eq!(hit_id(&cache, &scope("decisions"), "Use PostgreSQL").await, Some(1));
    let tiny = RecentCaptureCache::new(Duration::from_secs(60), 2);
    for (i, text) in ["a", "b", "c"].into_iter().enumerate() {
        record(&tiny, &scope("decisions"), text, i64::try_from(i).unwrap()).await;
    }
    assert_eq!(tiny.len().await.unwrap(), 2);
    assert_eq!(hit_id(&tiny, &scope("decisions"), "a").await, None, "the oldest goes beyond the capacity");
}
