//! Recent captures seen across processes: kept in the store by default, and in a shared
//! Redis keyed by the store's identity.

use std::sync::Arc;

use dedup_precompact::{DeduplicationConfig, DeduplicationService, DuplicateReason};
use dedup_store::NewMemory;

use crate::backend_tests;
use crate::support::{TableEmbedder, TestStore, long};

/// An embedder that can be switched off, as a model that goes missing and comes back.
struct Switchable {
    inner: TableEmbedder,
    down: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Switchable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switchable").field("down", &self.down).finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl dedup_embed::Embedder for Switchable {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    async fn embed(&self, texts: &[String]) -> dedup_embed::Result<Vec<dedup_core::Embedding>> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(dedup_embed::Error::Inference("the model is not installed".into()));
        }
        self.inner.embed(texts).await
    }
}

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

    async fn defect_8_memories_stored_while_the_embedder_was_down_get_their_vector(db) {
        let original = long("Deploy only after the canary has been green for an hour");
        let paraphrase = long("Ship to production once the canary stays green for sixty minutes");
        let embedder = Arc::new(Switchable {
            inner: TableEmbedder::new().with_paraphrase(&original, &paraphrase, 0.97),
            down: std::sync::atomic::AtomicBool::new(true),
        });
        let dedup = DeduplicationService::new(db.store.clone(), embedder.clone(), DeduplicationConfig::default());
        let scope = db.scope("learnings");
        let stored = dedup.add(NewMemory::new(scope.clone(), &original)).await.unwrap();
        let id = stored.stored.expect("stored despite the embedder (fail-open)");
        assert!(!stored.embedded);
        let memory = db.store.get(id).await.unwrap().unwrap();
        assert!(memory.vector_pending, "{memory:?}");
        let stats = db.store.stats().await.unwrap();
        let ours = stats.namespaces.iter().find(|n| n.domain == db.domain && n.namespace == "learnings").unwrap();
        assert_eq!(ours.unembedded, 1);

        // The embedder is back: the next add embeds its own text and catches up on the rest.
        embedder.down.store(false, std::sync::atomic::Ordering::SeqCst);
        let next = dedup.add(NewMemory::new(scope.clone(), long("Keep feature flags for one release only"))).await.unwrap();
        assert!(next.stored.is_some() && next.embedded);
        assert!(!db.store.get(id).await.unwrap().unwrap().vector_pending);
        // The backfilled memory is now visible to the semantic check.
        let check = dedup.check_duplicate(&paraphrase, &scope).await.unwrap();
        assert_eq!(check.reason, Some(DuplicateReason::SemanticSimilar), "{check:?}");
        assert_eq!(check.matched_memory_id, Some(id));
        let stats = db.store.stats().await.unwrap();
        let ours = stats.namespaces.iter().find(|n| n.domain == db.domain && n.namespace == "learnings").unwrap();
        assert_eq!(ours.unembedded, 0);
        // An explicit backfill now finds nothing left to do.
        let report = dedup.backfill(Some(&scope), false, 8, 0).await.unwrap();
        assert_eq!(report.embedded, 0);
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
