//! Recent captures seen across processes: kept in the store by default, and in a shared
//! Redis keyed by the store's identity.

use std::sync::Arc;

use dedup_precompact::{DeduplicationConfig, DeduplicationService, DuplicateReason};
use dedup_store::NewMemory;

use crate::backend_tests;
use crate::support::{TableEmbedder, TestStore, long};

backend_tests! {
    async fn defect_9_captures_of_one_process_are_seen_by_the_next(db) {
        let scope = db.scope("learnings");
        let text = long("Pin the toolchain in rust-toolchain.toml");
        // The first hook run stores and records the capture, then ends.
        let first = DeduplicationService::new(db.reopen().await, Arc::new(TableEmbedder::new()), DeduplicationConfig::default());
        let id = first.add(NewMemory::new(scope.clone(), &text)).await.unwrap().stored.expect("stored");
        drop(first);
        // The memory goes (an edit, a merge, a delete); the exact check can no longer see it.
        assert!(db.store.delete(id).await.unwrap());
        // The next hook run is a new process with a new handle: the capture is still seen.
        let next = DeduplicationService::new(db.reopen().await, Arc::new(TableEmbedder::new()), DeduplicationConfig::default());
        let result = next.check_duplicate(&text, &scope).await.unwrap();
        assert_eq!(result.reason, Some(DuplicateReason::RecentCapture), "{result:?}");
        assert_eq!(result.matched_memory_id, Some(id));
        assert!(result.captured_secs_ago.is_some_and(|secs| secs < 60));
        assert!(result.degraded.is_empty(), "{result:?}");
    }
}

#[cfg(feature = "redis")]
fn redis_url() -> String {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "REDIS_URL is not set: run the Redis tests with `cargo xtask ci` (it starts a disposable redis-server)"
        ),
    }
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn defect_6_stores_sharing_one_redis_keep_their_captures_apart() {
    let config = DeduplicationConfig { redis_url: Some(redis_url()), ..DeduplicationConfig::default() };
    let (one, two) = (
        TestStore::open(crate::support::Backend::Sqlite).await,
        TestStore::open(crate::support::Backend::Sqlite).await,
    );
    // The same domain in both, as two agents' default stores would have.
    let scope = one.scope("learnings");
    let connect =
        |store| DeduplicationService::new(store, Arc::new(TableEmbedder::new()), config.clone()).connect_recent_cache();
    let first = connect(one.store.clone()).await;
    let text = long("Rotate the API keys every month");
    let id = first.add(NewMemory::new(scope.clone(), &text)).await.unwrap().stored.expect("stored in store one");

    // Store two never saw it: it stores the memory, naming nothing of store one.
    let second = connect(two.store.clone()).await;
    let added = second.add(NewMemory::new(scope.clone(), &text)).await.unwrap();
    assert!(added.stored.is_some(), "store two refused a memory only store one has: {added:?}");
    assert!(added.check.degraded.is_empty(), "{added:?}");

    // Within store one, the shared cache still works across handles: after the memory is
    // deleted, another handle on store one sees the capture through Redis.
    assert!(one.store.delete(id).await.unwrap());
    let other_handle = connect(one.reopen().await).await;
    let result = other_handle.check_duplicate(&text, &scope).await.unwrap();
    assert_eq!(result.reason, Some(DuplicateReason::RecentCapture), "{result:?}");
    assert_eq!(result.matched_memory_id, Some(id));
}
