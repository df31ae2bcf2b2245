//! The store's identity, recent captures kept in the database, and the vector backfill.

use std::time::Duration;

use dedup_core::ContentHash;
use dedup_store::{Error, ListFilter, MemoryUpdate, NewMemory, StoredVector, titled_text};

use crate::support::{MODEL, basis, insert_text, insert_vector, scope};

const WINDOW: Duration = Duration::from_secs(300);

backend_tests! {
    async fn store_id_is_stable_per_database_and_differs_between_databases(db) {
        let first = db.open().await?;
        let again = db.open().await?;
        assert_eq!(first.store_id().len(), 32);
        assert!(first.store_id().chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(first.store_id(), again.store_id());
        let other_db = crate::support::TestDb::new(db.backend()).await?;
        let other = other_db.open().await?;
        assert_ne!(first.store_id(), other.store_id());
        Ok(())
    }

    async fn defect_9_recent_captures_outlive_the_handle(db) {
        let s = scope("global", "hooks");
        let text = "Run the migrations before the API server.";
        let hash = ContentHash::of(text);
        let id = {
            let store = db.open().await?;
            let id = insert_text(&store, &s, text).await?;
            store.record_recent_capture(&s, &hash, id, WINDOW, 10).await?;
            store.close().await;
            id
        };
        // A new handle (a new hook process) sees the capture, with its age.
        let store = db.open().await?;
        let hit = store.recent_capture(&s, &hash, WINDOW).await?.expect("capture seen by a new handle");
        assert_eq!(hit.memory_id, id);
        assert!(hit.age < Duration::from_secs(60), "{:?}", hit.age);
        // Another scope, another hash, or a window already over: no hit.
        assert_eq!(store.recent_capture(&scope("global", "other"), &hash, WINDOW).await?, None);
        assert_eq!(store.recent_capture(&s, &ContentHash::of("something else"), WINDOW).await?, None);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(store.recent_capture(&s, &hash, Duration::from_millis(1)).await?, None);
        assert_eq!(store.recent_capture_count(WINDOW).await?, 1);
        Ok(())
    }

    async fn recent_captures_keep_the_capacity_and_outlive_their_memories(db) {
        let store = db.open().await?;
        let s = scope("global", "hooks");
        let mut captured = Vec::new();
        for i in 0..5 {
            let text = format!("lesson number {i}");
            let id = insert_text(&store, &s, &text).await?;
            store.record_recent_capture(&s, &ContentHash::of(&text), id, WINDOW, 3).await?;
            captured.push((text, id));
        }
        // Capacity 3: the two oldest are forgotten.
        assert_eq!(store.recent_capture_count(WINDOW).await?, 3);
        for (i, (text, id)) in captured.iter().enumerate() {
            let hit = store.recent_capture(&s, &ContentHash::of(text), WINDOW).await?;
            assert_eq!(hit.map(|h| h.memory_id), (i >= 2).then_some(*id), "capture {i}");
        }
        // A capture outlives its memory (seed 004: it catches what the store no longer has).
        let (text, id) = &captured[4];
        assert!(store.delete(*id).await?);
        let hit = store.recent_capture(&s, &ContentHash::of(text), WINDOW).await?;
        assert_eq!(hit.map(|h| h.memory_id), Some(*id));
        Ok(())
    }

    async fn defect_8_unembedded_memories_are_listed_counted_and_backfilled(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let insert = |memory: NewMemory| {
            let store = &store;
            async move {
                match store.insert_checked(memory, None, None).await? {
                    dedup_store::InsertOutcome::Inserted(id) => Ok(id),
                    other => anyhow::bail!("expected an insert, got {other:?}"),
                }
            }
        };
        insert_vector(&store, &s, "embedded", &basis(4, 0)).await?;
        // Too short for a vector on purpose: not pending, not counted.
        insert_text(&store, &s, "short").await?;
        let plain = insert(NewMemory::new(s.clone(), "stored while the embedder was down").vector_pending()).await?;
        let titled = insert(
            NewMemory::new(s.clone(), "Low volume raises slippage").with_title("No weekend trades").embed_title().vector_pending(),
        )
        .await?;
        let stats = store.stats().await?;
        assert_eq!(stats.namespaces[0].live, 4);
        assert_eq!(stats.namespaces[0].unembedded, 2);
        let pending_filter = ListFilter { vector_pending: true, ..ListFilter::default() };
        assert_eq!(store.list(&pending_filter).await?.iter().map(|m| m.id).collect::<Vec<_>>(), [plain, titled]);

        let filter = ListFilter { without_vector: true, ..ListFilter::default() };
        let pending: Vec<_> = store.list(&filter).await?.into_iter().filter(|m| m.vector_pending).collect();
        assert_eq!(store.list(&filter).await?.len(), 3, "every live memory without a vector");
        assert_eq!(pending.iter().map(|m| m.id).collect::<Vec<_>>(), [plain, titled]);
        assert_eq!(pending[0].embedding_text(), "stored while the embedder was down");
        assert_eq!(pending[1].embedding_text(), titled_text("No weekend trades", "Low volume raises slippage"));
        assert_eq!(pending[1].embedding_text(), "No weekend trades. Low volume raises slippage");

        // Backfill the first; the search sees it at once.
        let vector = StoredVector { model: MODEL.to_owned(), embedding: basis(4, 1) };
        assert!(store.attach_vector(plain, &pending[0].content_hash, &vector).await?);
        let hits = store.search(&s, MODEL, &basis(4, 1), 1).await?;
        assert_eq!(hits[0].id, plain);
        assert!((hits[0].score - 1.0).abs() < 1e-6);
        // Not twice, and not over an edit made since it was listed.
        assert!(!store.attach_vector(plain, &pending[0].content_hash, &vector).await?);
        let update = MemoryUpdate { content: Some("edited meanwhile".into()), ..MemoryUpdate::default() };
        store.update(titled, update, None).await?;
        assert!(!store.attach_vector(titled, &pending[1].content_hash, &vector).await?);
        // Wrong dimensions for the scope's vectors of the model are refused.
        let wrong = StoredVector { model: MODEL.to_owned(), embedding: basis(8, 1) };
        let fresh = store.list(&pending_filter).await?;
        assert_eq!(fresh.len(), 1);
        let error = store.attach_vector(titled, &fresh[0].content_hash, &wrong).await.unwrap_err();
        assert!(matches!(error, Error::InvalidVector(_)), "{error}");
        assert_eq!(store.stats().await?.namespaces[0].unembedded, 1);
        assert!(!store.get(plain).await?.expect("stored").vector_pending);
        Ok(())
    }
}
