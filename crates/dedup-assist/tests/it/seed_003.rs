//! Seed 003's success criteria with the real local model and a judge that answers like a
//! correct one: 14 conceptual duplicates in three clusters collapse to three survivors,
//! close negatives stay, and a second run changes nothing.

use std::sync::Arc;

use dedup_assist::DedupOptions;
use dedup_store::MemoryId;

use crate::backend_tests;
use crate::support::{Truth, local_embedder, openai_judge, run};

pub const NO_COMPAT: [&str; 5] = [
    "Do not add migration or compatibility code for dev-only projects.",
    "Dev-only projects need no migration scripts or backward-compatibility shims.",
    "Skip compatibility layers and data migrations in projects that are still dev-only.",
    "For a project that only runs in development, don't write migration or compat code.",
    "No migration or compat code is needed while a project is dev-only.",
];
pub const RENAME_DB: [&str; 6] = [
    "When renaming terminology, also update the stored database content, not just the code.",
    "Renaming a term means updating the existing rows in the database too.",
    "After a terminology rename, rewrite the database content to use the new names.",
    "Update DB content whenever terminology is renamed.",
    "A rename of domain terms must include rewriting the old terms stored in the database.",
    "Don't forget the database data when you rename terminology in the codebase.",
];
pub const DOCS: [&str; 3] = [
    "Update the docs after every code change.",
    "After changing code, bring the documentation up to date.",
    "Keep documentation in sync by updating it whenever the code changes.",
];
/// Close to the clusters, but different rules: never merged.
pub const NEGATIVES: [&str; 5] = [
    "Write migration scripts for every schema change in production projects.",
    "When renaming terminology, keep the old database values and map them in code.",
    "Update the changelog after every release.",
    "Do not update docs for internal refactors that change no behaviour.",
    "Rename terminology only after the product team signs off.",
];
pub const CANON_NO_COMPAT: &str = "Do not add migration or compatibility code while a project is dev-only.";
pub const CANON_RENAME_DB: &str =
    "When renaming terminology, also update the database content that uses the old terms.";
pub const CANON_DOCS: &str = "Update the documentation whenever the code changes.";

pub fn truth() -> Truth {
    Truth::new()
        .cluster("no-compat", CANON_NO_COMPAT, &NO_COMPAT)
        .cluster("rename-db", CANON_RENAME_DB, &RENAME_DB)
        .cluster("docs", CANON_DOCS, &DOCS)
}

/// Stores the 19 memories, all unverified; returns the negatives' ids.
pub async fn seed(db: &crate::support::TestStore, embedder: &dyn dedup_embed::Embedder) -> Vec<MemoryId> {
    for text in NO_COMPAT.iter().chain(&RENAME_DB).chain(&DOCS) {
        db.add(embedder, text).await;
    }
    let mut negatives = Vec::new();
    for text in NEGATIVES {
        negatives.push(db.add(embedder, text).await);
    }
    negatives
}

backend_tests! {
    async fn seed_003_fourteen_duplicates_collapse_to_three_and_negatives_stay(db) {
        let embedder = local_embedder();
        let negatives = seed(&db, embedder.as_ref()).await;
        let server = truth().server();
        let report = run(&db, embedder.clone(), openai_judge(&server), DedupOptions::default()).await;

        let live = db.live().await;
        let texts: Vec<&str> = live.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(live.len(), 3 + NEGATIVES.len(), "live memories: {texts:#?}\nreport: {report:#?}");
        for canonical in [CANON_NO_COMPAT, CANON_RENAME_DB, CANON_DOCS] {
            assert!(texts.contains(&canonical), "{canonical} missing from {texts:#?}");
        }
        for id in negatives {
            let memory = db.get(id).await;
            assert!(!memory.deprecated, "negative {} was merged: {memory:?}", memory.content);
            assert!(memory.dedup_verified);
        }
        assert!(live.iter().all(|m| m.dedup_verified), "converged means all verified: {live:#?}");
        assert_eq!(report.merged, 3, "{report:#?}");
        assert_eq!(report.absorbed, 11);
        let summed: u64 = live.iter().filter(|m| m.content == CANON_RENAME_DB).map(|m| m.occurrence_count).sum();
        assert_eq!(summed, 6, "occurrences are summed into the survivor");
        assert!(report.passes.len() >= 2, "survivors are re-checked after their merge: {report:#?}");
        assert_eq!(report.passes[0].mode, dedup_core::JudgeMode::Bootstrap);
        assert_eq!((report.failed, report.retryable, report.skipped), (0, 0, 0));
        assert!(report.judge_calls >= 2 && report.tokens.input_tokens > 0, "{report:#?}");
    }

    async fn seed_003_running_again_changes_nothing(db) {
        let embedder = local_embedder();
        seed(&db, embedder.as_ref()).await;
        let server = truth().server();
        run(&db, embedder.clone(), openai_judge(&server), DedupOptions::default()).await;
        let converged = db.state(embedder.model_id()).await;
        let calls = server.request_count();

        let again = run(&db, embedder.clone(), openai_judge(&server), DedupOptions::default()).await;
        assert_eq!(db.state(embedder.model_id()).await, converged, "a second run changed the store");
        assert_eq!(server.request_count(), calls, "a converged store needs no judge call");
        assert_eq!((again.merged, again.processed, again.judge_calls), (0, 0, 0), "{again:#?}");
        assert!(again.passes.is_empty());
    }

    async fn seed_003_a_run_interrupted_after_a_failed_batch_resumes_and_converges(db) {
        let embedder = local_embedder();
        seed(&db, embedder.as_ref()).await;
        // The first call gets a reply that is not JSON; every later one a correct answer.
        let truth = Arc::new(truth());
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let server = {
            let (truth, calls) = (truth.clone(), calls.clone());
            dedup_llm::fake::FakeLlm::start(Arc::new(move |request: &dedup_llm::fake::FakeRequest| {
                if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    return dedup_llm::fake::FakeReply::text("I think some of these are duplicates.");
                }
                let answer = truth.answer(&crate::support::batch_of(request));
                dedup_llm::fake::FakeReply::text(serde_json::to_string(&answer).unwrap())
            }))
        };
        let options = DedupOptions { in_flight: 1, ..DedupOptions::default() };
        let first = run(&db, embedder.clone(), openai_judge(&server), options).await;
        assert!(first.failed > 0, "{first:#?}");
        assert!(first.merged > 0, "the other batches went on: {first:#?}");
        // A failed batch is not retried in the same run: one attempt each, no more.
        assert!(db.live().await.iter().all(|m| m.dedup_attempts <= 1));
        assert!(first.errors.iter().any(|e| e.contains("no JSON object")), "{:?}", first.errors);
        let failed: Vec<_> = db.live().await.into_iter().filter(|m| m.dedup_attempts == 1).collect();
        assert!(!failed.is_empty());
        assert!(failed.iter().all(|m| !m.dedup_verified && m.dedup_last_error.as_deref().is_some_and(|e| e.contains("no JSON object"))));

        let second = run(&db, embedder.clone(), openai_judge(&server), DedupOptions::default()).await;
        let live = db.live().await;
        assert_eq!(live.len(), 3 + NEGATIVES.len(), "{second:#?}");
        assert!(live.iter().all(|m| m.dedup_verified));
        assert_eq!(second.retryable, 0);
    }

    async fn seed_003_bootstrap_on_an_all_unverified_store(db) {
        let embedder = local_embedder();
        seed(&db, embedder.as_ref()).await;
        assert!(db.live().await.iter().all(|m| !m.dedup_verified));
        let server = truth().server();
        let options = DedupOptions { max_passes: 1, ..DedupOptions::default() };
        let report = run(&db, embedder.clone(), openai_judge(&server), options).await;
        assert_eq!(report.passes.len(), 1);
        assert_eq!(report.passes[0].mode, dedup_core::JudgeMode::Bootstrap);
        let batches: Vec<_> = server.requests().iter().map(crate::support::batch_of).collect();
        assert!(batches.iter().all(|b| b.mode == dedup_core::JudgeMode::Bootstrap));
        // Bootstrap groups among unverified memories; all three clusters merge at once.
        assert_eq!(report.merged, 3, "{report:#?}");
        // The survivors are re-queued; everything else is verified.
        let live = db.live().await;
        let unverified: Vec<&str> = live.iter().filter(|m| !m.dedup_verified).map(|m| m.content.as_str()).collect();
        assert_eq!(unverified.len(), 3, "{unverified:?}");
    }
}
