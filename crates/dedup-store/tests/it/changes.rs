//! A memory's history: edits and deletions recorded with the change, listed, and undone
//! from the record; an undo refused when the memory changed since.

use anyhow::Context;
use dedup_store::{ChangeAction, Error, MemoryId, ReviewFilter, ReviewStatus, Scope, Store};

use crate::support::{basis, insert_vector, scope, stored};

const DIMS: usize = 8;

async fn live_ids(store: &Store, s: &Scope) -> anyhow::Result<Vec<MemoryId>> {
    Ok(store.search(s, crate::support::MODEL, &basis(DIMS, 0), 10).await?.iter().map(|n| n.id).collect())
}

backend_tests! {
    async fn an_edit_is_recorded_and_undone_back_to_the_old_text(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let id = insert_vector(&store, &s, "Rotate API keys every 90 days", &basis(DIMS, 0)).await?;
        let (memory, change) =
            store.edit(id, "Rotate API keys every 30 days".into(), stored(&basis(DIMS, 1)), "cli").await?;
        let change = change.context("a new text is recorded")?;
        assert_eq!(memory.content, "Rotate API keys every 30 days");
        assert!(!memory.dedup_verified, "an edited text is judged again");
        let history = store.changes(id).await?;
        assert_eq!(history.len(), 1);
        let c = &history[0];
        assert_eq!((c.id, c.memory, c.action, c.source.as_str()), (change, id, ChangeAction::Edited, "cli"));
        assert_eq!(c.before.as_deref(), Some("Rotate API keys every 90 days"));
        assert_eq!(c.after.as_deref(), Some("Rotate API keys every 30 days"));
        assert!(c.undoable());
        // The same text again changes nothing and records nothing.
        let (_, none) = store.edit(id, "Rotate API keys every 30 days".into(), None, "cli").await?;
        assert_eq!(none, None);
        // Undo: the old text and its vector are back, and the undo is a change of its own.
        let (memory, undo) = store.undo_change(change, stored(&basis(DIMS, 0)), "mcp").await?;
        assert_eq!(memory.content, "Rotate API keys every 90 days");
        assert_eq!(live_ids(&store, &s).await?.first(), Some(&id));
        let history = store.changes(id).await?;
        assert_eq!(history.len(), 2);
        assert_eq!(history[0].undone_by, Some(undo));
        assert_eq!((history[1].id, history[1].undoes), (undo, Some(change)));
        // Twice is refused, and so is an undo of an unknown change.
        let again = store.undo_change(change, None, "cli").await.unwrap_err();
        assert!(matches!(again, Error::ChangeNotUndoable { .. }), "{again}");
        assert!(again.to_string().contains(&format!("change {undo} undid it already")), "{again}");
        let unknown = dedup_store::ChangeId::new(9999);
        assert!(matches!(store.undo_change(unknown, None, "cli").await, Err(Error::ChangeNotFound(_))));
        Ok(())
    }

    async fn an_edit_undo_is_refused_once_the_text_changed_again(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let id = insert_vector(&store, &s, "Deploy on Tuesdays", &basis(DIMS, 0)).await?;
        let (_, first) = store.edit(id, "Deploy on Wednesdays".into(), stored(&basis(DIMS, 1)), "cli").await?;
        store.edit(id, "Deploy on Thursdays".into(), stored(&basis(DIMS, 2)), "cli").await?;
        let refused = store.undo_change(first.context("recorded")?, None, "cli").await.unwrap_err();
        assert!(refused.to_string().contains("text changed since"), "{refused}");
        assert_eq!(store.get(id).await?.context("kept")?.content, "Deploy on Thursdays");
        assert_eq!(store.changes(id).await?.len(), 2, "nothing recorded by the refused undo");
        Ok(())
    }

    async fn an_edit_to_another_live_text_is_refused_and_records_nothing(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let a = insert_vector(&store, &s, "Pin dependencies", &basis(DIMS, 0)).await?;
        let b = insert_vector(&store, &s, "Review every migration", &basis(DIMS, 1)).await?;
        let refused = store.edit(b, "Pin dependencies".into(), None, "cli").await.unwrap_err();
        assert!(matches!(refused, Error::Conflict { .. }), "{refused}");
        assert!(refused.to_string().contains(&format!("live memory {a}")), "{refused}");
        assert!(store.changes(b).await?.is_empty());
        let bad = store.edit(b, "x".into(), None, "bad\nsource").await.unwrap_err();
        assert!(bad.to_string().contains("source"), "{bad}");
        Ok(())
    }

    async fn a_forgotten_memory_leaves_search_and_comes_back_on_undo(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let keep = insert_vector(&store, &s, "Keep this one", &basis(DIMS, 1)).await?;
        let id = insert_vector(&store, &s, "Forget this one", &basis(DIMS, 0)).await?;
        let other = insert_vector(&store, &s, "A third memory", &basis(DIMS, 2)).await?;
        store.enqueue_review(&dedup_store::NewReview {
            scope: s.clone(), a: id, b: other, cosine: 0.9, probability: Some(0.5),
            judge: "learned".into(), reasons: vec![], source: "add".into(),
        }).await?;
        assert!(live_ids(&store, &s).await?.contains(&id));
        let change = store.forget_memory(id, "http").await?;
        let ids = live_ids(&store, &s).await?;
        assert!(!ids.contains(&id) && ids.contains(&keep), "{ids:?}");
        let memory = store.get(id).await?.context("the row is kept")?;
        assert!(memory.deprecated && memory.merged_into.is_none());
        let all = ReviewFilter { all: true, ..ReviewFilter::default() };
        assert_eq!(store.reviews(&all).await?[0].status, ReviewStatus::Expired);
        // Twice is refused: it is not live.
        let twice = store.forget_memory(id, "http").await.unwrap_err();
        assert!(matches!(twice, Error::NotLive { .. }), "{twice}");
        let history = store.changes(id).await?;
        assert_eq!((history.len(), history[0].action), (1, ChangeAction::Forgotten));
        assert_eq!(history[0].before.as_deref(), Some("Forget this one"));
        let (memory, undo) = store.undo_change(change, None, "http").await?;
        assert!(!memory.deprecated);
        assert!(live_ids(&store, &s).await?.contains(&id));
        let history = store.changes(id).await?;
        assert_eq!(history[1].action, ChangeAction::Restored);
        assert_eq!((history[0].undone_by, history[1].id), (Some(undo), undo));
        // A restore is not undone; forgetting again is the way.
        let refused = store.undo_change(undo, None, "http").await.unwrap_err();
        assert!(refused.to_string().contains("forget the memory again"), "{refused}");
        Ok(())
    }

    async fn a_forget_undo_is_refused_when_its_text_is_live_again_or_it_was_merged(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let id = insert_vector(&store, &s, "Use UTC timestamps", &basis(DIMS, 0)).await?;
        let change = store.forget_memory(id, "cli").await?;
        // The same text stored again meanwhile: bringing the old one back would make two.
        let again = insert_vector(&store, &s, "Use UTC timestamps", &basis(DIMS, 0)).await?;
        let refused = store.undo_change(change, None, "cli").await.unwrap_err();
        assert!(matches!(refused, Error::Conflict { .. }), "{refused}");
        assert!(refused.to_string().contains(&format!("live memory {again}")), "{refused}");
        assert!(store.get(id).await?.context("kept")?.deprecated);
        // Merged or otherwise not live: not editable, not forgettable.
        let refused = store.edit(id, "Use local time".into(), None, "cli").await.unwrap_err();
        assert!(matches!(refused, Error::NotLive { .. }), "{refused}");
        assert!(matches!(store.forget_memory(MemoryId::new(9999), "cli").await, Err(Error::NotFound(_))));
        Ok(())
    }
}
