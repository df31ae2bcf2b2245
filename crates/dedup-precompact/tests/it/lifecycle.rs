//! A memory's lifecycle through the service: an edit refused when it duplicates another
//! memory (exactly or by meaning, with the duplicate named), recorded and undone; forget
//! and undo; the history with merges.

use std::sync::Arc;

use dedup_precompact::{DuplicateReason, EditStatus, HistoryEvent};
use dedup_store::{ChangeAction, MemoryId, NewMemory};

use crate::backend_tests;
use crate::support::{TableEmbedder, long, service};

backend_tests! {
    async fn an_edit_that_duplicates_another_memory_is_refused_with_it_named(db) {
        let first = long("Pin every dependency to an exact version");
        let second = long("Review database migrations before merging");
        let paraphrase = long("Every dependency gets pinned to one exact version");
        let embedder = Arc::new(TableEmbedder::new().with_paraphrase(&first, &paraphrase, 0.97));
        let dedup = service(&db, embedder);
        let scope = db.scope("decisions");
        let a = dedup.add(NewMemory::new(scope.clone(), &first)).await.unwrap().stored.unwrap();
        let b = dedup.add(NewMemory::new(scope.clone(), &second)).await.unwrap().stored.unwrap();
        // By meaning: b edited into a paraphrase of a.
        let outcome = dedup.edit(b, &paraphrase, "cli").await.unwrap();
        assert_eq!(outcome.status, EditStatus::Duplicate);
        let duplicate = outcome.duplicate.expect("named");
        assert_eq!(duplicate.id, a);
        assert!((duplicate.similarity - 0.97).abs() < 1e-3, "{}", duplicate.similarity);
        assert_eq!(outcome.memory.content, second, "nothing changed");
        // Exactly: b edited into a's text.
        let outcome = dedup.edit(b, &first, "cli").await.unwrap();
        assert_eq!((outcome.status, outcome.duplicate.map(|d| (d.id, d.similarity))), (EditStatus::Duplicate, Some((a, 1.0))));
        assert!(db.store.changes(b).await.unwrap().is_empty());
        // Editing a into its own paraphrase is no duplicate of itself.
        let outcome = dedup.edit(a, &paraphrase, "cli").await.unwrap();
        assert_eq!(outcome.status, EditStatus::Edited, "{outcome:?}");
        assert!(outcome.change.is_some());
    }

    async fn an_edit_is_searchable_by_its_new_text_and_undone_with_its_old_vector(db) {
        let embedder = Arc::new(TableEmbedder::new());
        let dedup = service(&db, embedder);
        let scope = db.scope("decisions");
        let old = long("Deploys happen on Tuesdays");
        let new = long("Deploys happen on Thursdays");
        let id = dedup.add(NewMemory::new(scope.clone(), &old)).await.unwrap().stored.unwrap();
        let outcome = dedup.edit(id, &new, "mcp").await.unwrap();
        assert_eq!(outcome.status, EditStatus::Edited);
        let check = dedup.check_duplicate(&new, &scope).await.unwrap();
        assert_eq!(check.matched_memory_id, Some(id), "the new text is what is stored");
        let same = dedup.edit(id, &new, "mcp").await.unwrap();
        assert_eq!((same.status, same.change), (EditStatus::Unchanged, None));
        let (memory, _) = dedup.undo_change(outcome.change.unwrap(), "mcp").await.unwrap();
        assert_eq!(memory.content, old);
        // The old text's vector is back: a paraphrase-free search finds it by its text.
        let check = dedup.check_duplicate(&old, &scope).await.unwrap();
        assert_eq!(check.matched_memory_id, Some(id));
        let nearest = dedup.store().search(&scope, "table-384", &crate::support::random_vector(&old), 1).await.unwrap();
        assert_eq!(nearest[0].id, id);
        assert!(nearest[0].score > 0.999, "{}", nearest[0].score);
    }

    async fn a_forgotten_memory_is_not_a_duplicate_until_the_forget_is_undone(db) {
        let dedup = service(&db, Arc::new(TableEmbedder::new()));
        let scope = db.scope("decisions");
        let text = long("Use UTC in every log timestamp");
        let id = dedup.add(NewMemory::new(scope.clone(), &text)).await.unwrap().stored.unwrap();
        let change = dedup.forget(id, "cli").await.unwrap();
        // Neither the exact, the semantic nor the recent-capture check finds it: the capture
        // window does not hold a text against the user who took it back.
        let check = dedup.check_duplicate(&text, &scope).await.unwrap();
        assert_ne!(check.reason, Some(DuplicateReason::ExactMatch));
        assert_ne!(check.reason, Some(DuplicateReason::SemanticSimilar));
        assert_ne!(check.reason, Some(DuplicateReason::RecentCapture));
        assert!(!check.is_duplicate, "{check:?}");
        assert!(dedup.store().find_exact(&scope, &dedup_core::ContentHash::of(&text)).await.unwrap().is_none());
        let refused = dedup.edit(id, &long("Use local time"), "cli").await.unwrap_err();
        assert!(refused.to_string().contains("is not live"), "{refused}");
        dedup.undo_change(change, "cli").await.unwrap();
        let check = dedup.check_duplicate(&text, &scope).await.unwrap();
        assert_eq!(check.matched_memory_id, Some(id));
        let history = dedup.history(id).await.unwrap();
        let actions: Vec<ChangeAction> = history
            .events
            .iter()
            .filter_map(|e| match e { HistoryEvent::Change(c) => Some(c.action), HistoryEvent::Merge(_) => None })
            .collect();
        assert_eq!(actions, [ChangeAction::Forgotten, ChangeAction::Restored]);
        assert!(dedup.history(MemoryId::new(987_654)).await.is_err());
    }

    async fn a_text_taken_back_by_forget_or_edit_can_be_added_again_within_the_capture_window(db) {
        let dedup = service(&db, Arc::new(TableEmbedder::new()));
        let scope = db.scope("decisions");
        let forgotten = long("Tag every release in git");
        let edited = long("Deploys happen on Tuesdays");
        let a = dedup.add(NewMemory::new(scope.clone(), &forgotten)).await.unwrap().stored.unwrap();
        let b = dedup.add(NewMemory::new(scope.clone(), &edited)).await.unwrap().stored.unwrap();
        // Within the window, the same text is a recent capture while its memory holds it.
        let again = dedup.check_duplicate(&forgotten, &scope).await.unwrap();
        assert!(again.is_duplicate && again.matched_memory_id == Some(a), "{again:?}");
        dedup.forget(a, "cli").await.unwrap();
        dedup.edit(b, &long("Deploys happen on Thursdays"), "cli").await.unwrap();
        for (text, old) in [(&forgotten, a), (&edited, b)] {
            let outcome = dedup.add(NewMemory::new(scope.clone(), text)).await.unwrap();
            let stored = outcome.stored.unwrap_or_else(|| panic!("{text:?} is stored again: {outcome:?}"));
            assert_ne!(stored, old);
        }
        // A merged memory's text still counts: its survivor holds it.
        let c = dedup.add(NewMemory::new(scope.clone(), long("Pin the toolchain version"))).await.unwrap().stored.unwrap();
        let d = dedup.add(NewMemory::new(scope.clone(), long("Keep one lockfile per repository"))).await.unwrap().stored.unwrap();
        db.store.deprecate(d, Some(c)).await.unwrap();
        let merged = dedup.check_duplicate(&long("Keep one lockfile per repository"), &scope).await.unwrap();
        assert_eq!((merged.reason, merged.matched_memory_id), (Some(DuplicateReason::RecentCapture), Some(d)));
    }

    async fn the_history_lists_the_merges_a_memory_took_part_in(db) {
        let dedup = service(&db, Arc::new(TableEmbedder::new()));
        let scope = db.scope("decisions");
        let a = dedup.add(NewMemory::new(scope.clone(), long("Cache invalidation after deploys"))).await.unwrap().stored.unwrap();
        let b = dedup.add(NewMemory::new(scope.clone(), long("Invalidate caches once deployed"))).await.unwrap().stored.unwrap();
        let c = dedup.add(NewMemory::new(scope.clone(), long("Unrelated memory"))).await.unwrap().stored.unwrap();
        let survivor = db.store.get(a).await.unwrap().unwrap();
        let absorbed = db.store.get(b).await.unwrap().unwrap();
        let plan = dedup_store::MergePlan::keeping_survivor("run-1", &survivor, std::slice::from_ref(&absorbed), 0.9, "person", "test");
        let record = db.store.apply_merge(&plan).await.unwrap();
        for id in [a, b] {
            let history = dedup.history(id).await.unwrap();
            assert!(matches!(&history.events[..], [HistoryEvent::Merge(m)] if m.id == record.id), "{id}: {:?}", history.events);
        }
        assert!(dedup.history(c).await.unwrap().events.is_empty());
        let refused = dedup.forget(b, "cli").await.unwrap_err();
        assert!(refused.to_string().contains(&format!("merged into memory {a}")), "{refused}");
    }
}
