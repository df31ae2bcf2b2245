//! Seed 004's unit, integration and property tests, on SQLite and on Postgres.

use std::sync::Arc;
use std::time::Duration;

use dedup_precompact::{CheckType, DeduplicationConfig, DeduplicationService, DuplicateReason};
use dedup_store::{MemoryId, NewMemory};

use crate::backend_tests;
use crate::support::{TableEmbedder, TestStore, long, service};

backend_tests! {
    async fn seed_004_exact_match_after_normalisation(db) {
        let embedder = Arc::new(TableEmbedder::new());
        let dedup = service(&db, embedder.clone());
        let scope = db.scope("decisions");
        let text = long("Use PostgreSQL for the primary database");
        let stored = dedup.add(NewMemory::new(scope.clone(), &text)).await.unwrap();
        let id = stored.stored.expect("new content is stored");
        let calls_before = embedder.calls();
        let variant = format!("  {}\n", text.to_uppercase().replace(' ', "\t "));
        let result = dedup.check_duplicate(&variant, &scope).await.unwrap();
        assert!(result.is_duplicate);
        assert_eq!(result.reason, Some(DuplicateReason::ExactMatch));
        assert_eq!(result.matched_memory_id, Some(id));
        assert_eq!(result.matched_urn, Some(format!("memdedup://{}/decisions/{id}", db.domain)));
        assert_eq!(result.similarity_score, Some(1.0));
        assert_eq!(embedder.calls(), calls_before, "an exact hit embeds nothing");
    }

    async fn seed_004_semantic_threshold_per_namespace(db) {
        let original = long("We chose Postgres as the system of record");
        let at_091 = long("Postgres is the database of record we picked");
        let embedder = Arc::new(TableEmbedder::new().with_paraphrase(&original, &at_091, 0.91));
        let dedup = service(&db, embedder);
        for namespace in ["decisions", "patterns", "learnings", "default"] {
            dedup.add(NewMemory::new(db.scope(namespace), &original)).await.unwrap();
        }
        // 0.91 is below decisions' 0.92 and above patterns' 0.90, learnings' 0.88 and the
        // default 0.90.
        let expectations = [("decisions", false, 0.92), ("patterns", true, 0.90), ("learnings", true, 0.88), ("default", true, 0.90)];
        for (namespace, duplicate, threshold) in expectations {
            let result = dedup.check_duplicate(&at_091, &db.scope(namespace)).await.unwrap();
            assert_eq!(result.is_duplicate, duplicate, "{namespace}: {result:?}");
            assert_eq!(result.threshold, threshold);
            let nearest = result.nearest.expect("the original is the nearest memory");
            assert!((nearest.score - 0.91).abs() < 1e-4, "{}", nearest.score);
            if duplicate {
                assert_eq!(result.reason, Some(DuplicateReason::SemanticSimilar));
                assert_eq!(result.similarity_score, Some(nearest.score));
                assert!(result.matched_urn.as_deref().unwrap().contains(&format!("/{namespace}/")));
            }
        }
    }

    async fn seed_004_namespace_scoped_search(db) {
        let original = long("Deploy on Fridays only with a rollback plan");
        let paraphrase = long("Friday deploys need a rollback plan");
        let dedup = service(&db, Arc::new(TableEmbedder::new().with_paraphrase(&original, &paraphrase, 0.99)));
        dedup.add(NewMemory::new(db.scope("patterns"), &original)).await.unwrap();
        let other = dedup.check_duplicate(&original, &db.scope("learnings")).await.unwrap();
        assert!(!other.is_duplicate, "identical text in another namespace is not a duplicate: {other:?}");
        assert_eq!(other.nearest, None, "the other namespace has no memories at all");
        let added = dedup.add(NewMemory::new(db.scope("learnings"), &paraphrase)).await.unwrap();
        assert!(added.stored.is_some());
    }

    async fn seed_004_recent_capture_catches_what_the_store_no_longer_has(db) {
        let dedup = DeduplicationService::without_embeddings(db.store.clone(), DeduplicationConfig::default());
        let scope = db.scope("decisions");
        let text = long("Cache the exchange rates for one hour");
        // Captured by another writer that has not stored it here (or stored it elsewhere).
        dedup.record_capture(&text, &scope, MemoryId::new(777)).await;
        let result = dedup.check_duplicate(&text, &scope).await.unwrap();
        assert_eq!(result.reason, Some(DuplicateReason::RecentCapture));
        assert_eq!(result.matched_memory_id, Some(MemoryId::new(777)));
        assert_eq!(result.matched_urn, Some(format!("memdedup://{}/decisions/777", db.domain)));
        assert!(result.not_run.contains(&CheckType::Semantic), "no embedder: {result:?}");
        let other_scope = db.scope("patterns");
        assert!(!dedup.check_duplicate(&text, &other_scope).await.unwrap().is_duplicate);
    }

    async fn seed_004_short_content_skips_the_semantic_check(db) {
        // Seed 004's minimum of 50 characters, set as the override it now is.
        let embedder = Arc::new(TableEmbedder::new());
        let config = DeduplicationConfig { min_semantic_length: 50, ..DeduplicationConfig::default() };
        let dedup = DeduplicationService::new(db.store.clone(), embedder.clone(), config);
        let scope = db.scope("default");
        let short = "use tabs, not spaces"; // 20 characters < 50
        let added = dedup.add(NewMemory::new(scope.clone(), short)).await.unwrap();
        assert!(added.stored.is_some() && !added.embedded);
        assert!(added.check.not_run.contains(&CheckType::Semantic));
        assert_eq!(embedder.calls(), 0, "below min_semantic_length nothing is embedded");
    }

    async fn three_word_memories_are_compared_by_meaning_two_words_are_not(db) {
        // By default a memory of three words is compared by meaning, however short.
        let (rule, paraphrase) = ("prefer tabs always", "always prefer tabs");
        let embedder = Arc::new(TableEmbedder::new().with_paraphrase(rule, paraphrase, 0.97));
        let dedup = service(&db, embedder.clone());
        let scope = db.scope("default");
        assert!(dedup.add(NewMemory::new(scope.clone(), rule)).await.unwrap().embedded);
        let again = dedup.add(NewMemory::new(scope.clone(), paraphrase)).await.unwrap();
        assert_eq!(again.stored, None, "{:?}", again.check);
        assert_eq!(again.check.reason, Some(DuplicateReason::SemanticSimilar));
        let calls = embedder.calls();
        let two = dedup.add(NewMemory::new(scope, "tabs   please")).await.unwrap();
        assert!(two.stored.is_some() && !two.embedded && two.check.not_run.contains(&CheckType::Semantic));
        assert_eq!(embedder.calls(), calls, "two words are not embedded");
    }

    async fn seed_004_disabled_service_checks_nothing_and_says_why_an_exact_repeat_is_refused(db) {
        let config = DeduplicationConfig { enabled: false, ..DeduplicationConfig::default() };
        let dedup = DeduplicationService::new(db.store.clone(), Arc::new(TableEmbedder::new()), config);
        let scope = db.scope("default");
        let text = long("Feature flags are cleaned up after each release");
        dedup.add(NewMemory::new(scope.clone(), &text)).await.unwrap();
        let result = dedup.check_duplicate(&text, &scope).await.unwrap();
        assert!(!result.is_duplicate);
        assert_eq!(result.not_run, vec![CheckType::Exact, CheckType::Semantic, CheckType::Recent]);
        // Exact duplicates stay impossible by construction even so.
        let again = dedup.add(NewMemory::new(scope, &text)).await.unwrap();
        assert_eq!(again.stored, None);
        assert_eq!(again.check.reason, Some(DuplicateReason::ExactMatch));
        // Defect 10: the result says what the switch turned off and why this was refused.
        assert!(again.check.notes.iter().any(|n| n.contains("deduplication is disabled") && n.contains("single live copy")), "{:?}", again.check.notes);
    }

    async fn seed_004_add_stores_the_embedding_used_by_the_check(db) {
        let original = long("Rate limit the public API to 100 requests per minute");
        let paraphrase = long("The public API allows 100 requests a minute at most");
        let embedder = Arc::new(TableEmbedder::new().with_paraphrase(&original, &paraphrase, 0.95));
        let dedup = service(&db, embedder.clone());
        let scope = db.scope("patterns");
        let first = dedup.add(NewMemory::new(scope.clone(), &original)).await.unwrap();
        assert!(first.embedded);
        assert_eq!(embedder.calls(), 1, "one embedding for check and store");
        // The very next check sees it: no window in which a new memory is invisible.
        let second = dedup.add(NewMemory::new(scope.clone(), &paraphrase)).await.unwrap();
        assert_eq!(second.stored, None);
        assert_eq!(second.check.reason, Some(DuplicateReason::SemanticSimilar));
        assert_eq!(second.check.matched_memory_id, first.stored);
        let memory = db.store.get(first.stored.unwrap()).await.unwrap().unwrap();
        assert_eq!(memory.occurrence_count, 2);
        let stats = db.store.stats().await.unwrap();
        let ns = stats.namespaces.iter().find(|n| n.domain == db.domain && n.namespace == "patterns").unwrap();
        assert_eq!(ns.skipped.get("semantic"), Some(&1));
    }

    async fn seed_004_other_process_writes_are_seen(db) {
        let original = long("Backups are restored monthly to prove they work");
        let paraphrase = long("Every month we restore a backup to prove it works");
        let embedder = Arc::new(TableEmbedder::new().with_paraphrase(&original, &paraphrase, 0.97));
        let first = service(&db, embedder.clone());
        let second = DeduplicationService::new(db.reopen().await, embedder, DeduplicationConfig::default());
        let scope = db.scope("learnings");
        // The second handle loads its index before the first one writes.
        assert!(!second.check_duplicate(&long("unrelated warm-up text"), &scope).await.unwrap().is_duplicate);
        first.add(NewMemory::new(scope.clone(), &original)).await.unwrap();
        let seen = second.check_duplicate(&paraphrase, &scope).await.unwrap();
        assert_eq!(seen.reason, Some(DuplicateReason::SemanticSimilar), "{seen:?}");
    }

    async fn seed_004_invalid_content_is_an_error_and_stores_nothing(db) {
        let dedup = service(&db, Arc::new(TableEmbedder::new()));
        let scope = db.scope("default");
        for bad in [String::new(), "   \n\t".to_owned(), "x".repeat((1 << 20) + 1), "nul\0byte".to_owned()] {
            let err = dedup.add(NewMemory::new(scope.clone(), bad.clone())).await.unwrap_err();
            assert!(err.to_string().starts_with("invalid content"), "{err}");
            assert!(!err.is_unavailable());
            assert!(dedup.check_duplicate(&bad, &scope).await.is_err());
        }
        let listed = db
            .store
            .list(&dedup_store::ListFilter { domain: Some(db.domain.clone()), ..Default::default() })
            .await
            .unwrap();
        assert!(listed.is_empty());
    }
}

#[tokio::test]
async fn seed_004_recent_window_expires() {
    let db = TestStore::open(crate::support::Backend::Sqlite).await;
    let config = DeduplicationConfig { recent_window: Duration::from_secs(1), ..DeduplicationConfig::default() };
    let dedup = DeduplicationService::without_embeddings(db.store.clone(), config);
    let scope = db.scope("default");
    dedup.record_capture("a decision", &scope, MemoryId::new(1)).await;
    assert!(dedup.check_duplicate("a decision", &scope).await.unwrap().is_duplicate);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(!dedup.check_duplicate("a decision", &scope).await.unwrap().is_duplicate, "the window has passed");
}

mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::support::Backend;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    fn identical_content_always_duplicates(backend: Backend) {
        let rt = runtime();
        let (db, dedup) = rt.block_on(async {
            let db = TestStore::open(backend).await;
            let dedup = service(&db, Arc::new(TableEmbedder::new()));
            (db, dedup)
        });
        proptest!(ProptestConfig::with_cases(24), |(content in "\\PC{50,500}")| {
            prop_assume!(!content.trim().is_empty());
            let scope = db.scope("decisions");
            rt.block_on(async {
                dedup.record_capture(&content, &scope, MemoryId::new(1)).await;
                let result = dedup.check_duplicate(&content, &scope).await.unwrap();
                prop_assert!(result.is_duplicate);
                prop_assert!(result.matched_urn.is_some());
                Ok(())
            })?;
        });
    }

    static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn slightly_different_content_not_exact_match(backend: Backend) {
        let rt = runtime();
        let (db, dedup) = rt.block_on(async {
            let db = TestStore::open(backend).await;
            let dedup = service(&db, Arc::new(TableEmbedder::new()));
            (db, dedup)
        });
        proptest!(ProptestConfig::with_cases(24), |(base in "\\PC{100,300}", suffix in "\\PC{10,50}")| {
            // Normalisation ignores whitespace, so a suffix must carry a visible character.
            prop_assume!(!base.trim().is_empty() && !suffix.trim().is_empty());
            // A namespace per case, so an earlier case's base cannot be this case's text.
            let scope = db.scope(&format!("case{}", CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
            let modified = format!("{base} {suffix}");
            rt.block_on(async {
                dedup.add(NewMemory::new(scope.clone(), base.clone())).await.unwrap();
                let result = dedup.check_duplicate(&modified, &scope).await.unwrap();
                prop_assert_ne!(result.reason, Some(DuplicateReason::ExactMatch));
                Ok(())
            })?;
        });
    }

    #[test]
    fn seed_004_identical_content_always_duplicates_sqlite() {
        identical_content_always_duplicates(Backend::Sqlite);
    }

    #[test]
    fn seed_004_identical_content_always_duplicates_postgres() {
        identical_content_always_duplicates(Backend::Postgres);
    }

    #[test]
    fn seed_004_slightly_different_content_not_exact_match_sqlite() {
        slightly_different_content_not_exact_match(Backend::Sqlite);
    }

    #[test]
    fn seed_004_slightly_different_content_not_exact_match_postgres() {
        slightly_different_content_not_exact_match(Backend::Postgres);
    }
}
