//! Storing, reading, listing and counting memories; the embedding cache and edges;
//! rejected input.

use std::collections::HashSet;

use chrono::{Duration as ChronoDuration, Utc};
use dedup_core::ContentHash;
use dedup_store::{Error, InsertOutcome, Lifecycle, ListFilter, MAX_CONTENT_BYTES, MemoryId, NewMemory, StoredVector};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::support::{MODEL, basis, insert_text, random_unit, scope, stored};

fn all() -> ListFilter {
    ListFilter { include_deprecated: true, ..ListFilter::default() }
}

backend_tests! {
    async fn migrations_are_idempotent(db) {
        let first = db.open().await?;
        let s = scope("global", "default");
        let id = insert_text(&first, &s, "kept across reopening").await?;
        first.close().await;

        let again = db.open().await?;
        assert_eq!(again.get(id).await?.map(|m| m.content), Some("kept across reopening".to_owned()));
        // Two handles opening at once (two processes starting) both succeed.
        let (a, b) = tokio::join!(db.open(), db.open());
        let (a, b) = (a?, b?);
        assert_eq!(a.list(&all()).await?.len(), 1);
        assert_eq!(b.backend(), again.backend());
        Ok(())
    }

    async fn insert_get_roundtrip_keeps_every_field(db) {
        let store = db.open().await?;
        let s = scope("team-a", "decisions");
        let mut metadata = serde_json::Map::new();
        metadata.insert("source".to_owned(), serde_json::json!("unit test"));
        metadata.insert("tags".to_owned(), serde_json::json!(["a", "b", {"nested": 1.5}]));
        metadata.insert("n".to_owned(), serde_json::json!(3));
        let content = "  Use PostgreSQL für Speicher 🚀\n\tsecond line ";
        let before = Utc::now() - ChronoDuration::seconds(1);
        let outcome = store
            .insert_checked(
                NewMemory::new(s.clone(), content)
                    .with_kind("decision")
                    .with_title("Storage — choice")
                    .with_metadata(metadata.clone()),
                stored(&basis(4, 1)),
                Some(0.9),
            )
            .await?;
        let after = Utc::now() + ChronoDuration::seconds(1);
        let InsertOutcome::Inserted(id) = outcome else { anyhow::bail!("expected an insert, got {outcome:?}") };

        let memory = store.get(id).await?.ok_or_else(|| anyhow::anyhow!("memory {id} not found"))?;
        assert_eq!(memory.id, id);
        assert_eq!(memory.scope, s);
        assert_eq!(memory.kind, "decision");
        assert_eq!(memory.title.as_deref(), Some("Storage — choice"));
        assert_eq!(memory.content, content, "content is stored exactly as given");
        assert_eq!(memory.content_hash, ContentHash::of(content));
        assert_eq!(memory.lifecycle, Lifecycle::Active);
        assert_eq!((memory.helpful, memory.harmful, memory.occurrence_count), (0, 0, 1));
        assert!(!memory.dedup_verified);
        assert_eq!(memory.dedup_attempts, 0);
        assert_eq!(memory.dedup_last_error, None);
        assert!(!memory.deprecated);
        assert_eq!(memory.merged_into, None);
        assert_eq!(memory.metadata, metadata);
        assert_eq!(memory.created_at, memory.updated_at);
        assert!(before <= memory.created_at && memory.created_at <= after, "{}", memory.created_at);
        assert_eq!(memory.urn(), format!("memdedup://team-a/decisions/{id}"));

        assert_eq!(store.get(MemoryId::new(id.get() + 1000)).await?, None);
        // Defaults: kind "memory", no title, empty metadata.
        let plain = insert_text(&store, &s, "plain").await?;
        let plain = store.get(plain).await?.ok_or_else(|| anyhow::anyhow!("plain memory not found"))?;
        assert_eq!((plain.kind.as_str(), plain.title, plain.metadata.len()), ("memory", None, 0));
        assert!(plain.id > id, "ids grow");
        Ok(())
    }

    async fn exact_duplicate_after_normalisation_stores_nothing(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let id = insert_text(&store, &s, "Use PostgreSQL for storage").await?;
        for variant in ["use postgresql for storage", "  USE   PostgreSQL\tfor\nstorage  "] {
            let outcome = store.insert_checked(NewMemory::new(s.clone(), variant), None, None).await?;
            assert_eq!(outcome, InsertOutcome::ExactDuplicate(id), "{variant:?}");
        }
        // The exact check comes first even when a vector would also match.
        let outcome = store
            .insert_checked(NewMemory::new(s.clone(), "USE POSTGRESQL FOR STORAGE"), stored(&basis(3, 0)), Some(0.1))
            .await?;
        assert_eq!(outcome, InsertOutcome::ExactDuplicate(id));
        assert_eq!(store.list(&all()).await?.len(), 1);
        assert_eq!(store.find_exact(&s, &ContentHash::of(" use postgresql FOR storage")).await?, Some(id));
        assert_eq!(store.find_exact(&s, &ContentHash::of("Use PostgreSQL for storage!")).await?, None);
        Ok(())
    }

    async fn same_text_in_another_namespace_or_domain_is_stored(db) {
        let store = db.open().await?;
        let text = "Retry flaky network calls with backoff";
        let scopes = [scope("global", "a"), scope("global", "b"), scope("other", "a")];
        let mut ids = Vec::new();
        for s in &scopes {
            ids.push(insert_text(&store, s, text).await?);
        }
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 3);
        for (s, id) in scopes.iter().zip(&ids) {
            assert_eq!(store.find_exact(s, &ContentHash::of(text)).await?, Some(*id));
            assert_eq!(store.get(*id).await?.map(|m| m.scope), Some(s.clone()));
        }
        Ok(())
    }

    async fn deprecated_rows_do_not_block_reinsert(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let text = "Prefer small pull requests";
        let first = insert_text(&store, &s, text).await?;
        assert!(store.deprecate(first, None).await?);
        assert!(!store.deprecate(first, None).await?, "deprecating twice changes nothing");
        assert_eq!(store.find_exact(&s, &ContentHash::of(text)).await?, None);

        let second = insert_text(&store, &s, text).await?;
        assert_ne!(first, second);
        assert_eq!(store.find_exact(&s, &ContentHash::of(text)).await?, Some(second));
        assert_eq!(store.list(&ListFilter::default()).await?.iter().map(|m| m.id).collect::<Vec<_>>(), [second]);
        assert_eq!(store.list(&all()).await?.iter().map(|m| m.id).collect::<Vec<_>>(), [first, second]);

        let absorbed = insert_text(&store, &s, "Keep pull requests small").await?;
        assert!(store.deprecate(absorbed, Some(second)).await?);
        let memory = store.get(absorbed).await?.ok_or_else(|| anyhow::anyhow!("absorbed memory vanished"))?;
        assert!(memory.deprecated);
        assert_eq!(memory.merged_into, Some(second));
        assert!(memory.updated_at >= memory.created_at);

        assert!(matches!(store.deprecate(second, Some(second)).await, Err(Error::InvalidMerge { .. })));
        let unknown = MemoryId::new(second.get() + 100);
        assert!(matches!(store.deprecate(unknown, None).await, Err(Error::NotFound(id)) if id == unknown));
        assert!(matches!(store.deprecate(second, Some(unknown)).await, Err(Error::NotFound(id)) if id == unknown));
        let elsewhere = insert_text(&store, &scope("global", "other"), "elsewhere").await?;
        assert!(matches!(store.deprecate(second, Some(elsewhere)).await, Err(Error::InvalidMerge { .. })));
        assert!(!store.get(second).await?.is_some_and(|m| m.deprecated), "failed merges change nothing");
        Ok(())
    }

    async fn list_filters_and_pages_in_id_order(db) {
        let store = db.open().await?;
        let (a1, a2, b1) = (scope("d1", "n1"), scope("d1", "n2"), scope("d2", "n1"));
        let mut expected = Vec::new();
        for i in 0..7 {
            expected.push((insert_text(&store, &a1, &format!("a1 memory {i}")).await?, a1.clone()));
        }
        for i in 0..3 {
            expected.push((insert_text(&store, &a2, &format!("a2 memory {i}")).await?, a2.clone()));
        }
        for i in 0..2 {
            expected.push((insert_text(&store, &b1, &format!("b1 memory {i}")).await?, b1.clone()));
        }
        let retired = expected.remove(3).0;
        assert!(store.deprecate(retired, None).await?);

        let ids = |filter: ListFilter| {
            let store = &store;
            async move { anyhow::Ok(store.list(&filter).await?.into_iter().map(|m| m.id).collect::<Vec<_>>()) }
        };
        let live: Vec<MemoryId> = expected.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids(ListFilter::default()).await?, live);
        let of = |pred: &dyn Fn(&dedup_store::Scope) -> bool| {
            expected.iter().filter(|(_, s)| pred(s)).map(|(id, _)| *id).collect::<Vec<_>>()
        };
        let d1 = ListFilter { domain: Some("d1".to_owned()), ..ListFilter::default() };
        assert_eq!(ids(d1.clone()).await?, of(&|s| s.domain() == "d1"));
        let n1 = ListFilter { namespace: Some("n1".to_owned()), ..ListFilter::default() };
        assert_eq!(ids(n1).await?, of(&|s| s.namespace_name() == "n1"));
        let d1n2 = ListFilter { namespace: Some("n2".to_owned()), ..d1.clone() };
        assert_eq!(ids(d1n2).await?, of(&|s| *s == a2));
        let with_retired = ListFilter { include_deprecated: true, ..d1.clone() };
        assert!(ids(with_retired).await?.contains(&retired));

        // Pages of 3 put together give the whole list; limit 0 means no limit.
        let mut paged = Vec::new();
        let mut after = None;
        loop {
            let page = ids(ListFilter { after, limit: 3, ..ListFilter::default() }).await?;
            assert!(page.len() <= 3);
            let Some(last) = page.last().copied() else { break };
            paged.extend(page);
            after = Some(last);
        }
        assert_eq!(paged, live);
        assert_eq!(ids(ListFilter { limit: 0, ..ListFilter::default() }).await?.len(), live.len());
        assert_eq!(ids(ListFilter { domain: Some("nobody".to_owned()), ..ListFilter::default() }).await?, []);
        let bad = ListFilter { domain: Some("bad domain".to_owned()), ..ListFilter::default() };
        assert!(matches!(store.list(&bad).await, Err(Error::InvalidName { what: "domain", .. })));
        Ok(())
    }

    async fn stats_count_memories_skips_and_cache(db) {
        let store = db.open().await?;
        let (a, b, c) = (scope("global", "a"), scope("global", "b"), scope("z", "quiet"));
        let first = insert_text(&store, &a, "one").await?;
        insert_text(&store, &a, "two").await?;
        insert_text(&store, &b, "three").await?;
        store.deprecate(first, None).await?;
        store.record_skip(&a, "exact").await?;
        store.record_skip(&a, "exact").await?;
        store.record_skip(&a, "semantic").await?;
        store.record_skip(&c, "recent").await?;
        assert!(matches!(store.record_skip(&c, "").await, Err(Error::InvalidName { .. })));
        let cached = [(ContentHash::of_raw("x"), basis(2, 0)), (ContentHash::of_raw("y"), basis(2, 1))];
        store.cache_embeddings(MODEL, &cached).await?;

        let stats = store.stats().await?;
        assert_eq!(stats.backend, store.backend());
        assert_eq!(stats.location, db.location.redacted());
        assert_eq!(stats.cached_embeddings, 2);
        let summary: Vec<_> = stats
            .namespaces
            .iter()
            .map(|n| {
                let skipped: Vec<_> = n.skipped.clone().into_iter().collect();
                (n.domain.as_str(), n.namespace.as_str(), n.live, n.deprecated, skipped)
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("global", "a", 1, 1, vec![("exact".to_owned(), 2), ("semantic".to_owned(), 1)]),
                ("global", "b", 1, 0, vec![]),
                ("z", "quiet", 0, 0, vec![("recent".to_owned(), 1)]),
            ]
        );
        Ok(())
    }

    async fn note_occurrence_counts_duplicates(db) {
        let store = db.open().await?;
        let id = insert_text(&store, &scope("global", "default"), "seen often").await?;
        store.note_occurrence(id).await?;
        store.note_occurrence(id).await?;
        let memory = store.get(id).await?.ok_or_else(|| anyhow::anyhow!("memory vanished"))?;
        assert_eq!(memory.occurrence_count, 3);
        assert!(memory.updated_at >= memory.created_at);
        let unknown = MemoryId::new(id.get() + 1);
        assert!(matches!(store.note_occurrence(unknown).await, Err(Error::NotFound(i)) if i == unknown));
        Ok(())
    }

    async fn embedding_cache_roundtrips_many_hashes(db) {
        let store = db.open().await?;
        let mut rng = StdRng::seed_from_u64(7);
        let entries: Vec<_> =
            (0..1500).map(|i| (ContentHash::of_raw(&format!("text {i}")), random_unit(&mut rng, 16))).collect();
        store.cache_embeddings(MODEL, &entries).await?;

        let mut wanted: Vec<ContentHash> = entries.iter().map(|(h, _)| h.clone()).collect();
        wanted.extend((0..10).map(|i| ContentHash::of_raw(&format!("missing {i}"))));
        let found = store.cached_embeddings(MODEL, &wanted).await?;
        assert_eq!(found.len(), 1500);
        for (hash, embedding) in &entries {
            let got = found.get(hash).ok_or_else(|| anyhow::anyhow!("{hash:?} missing"))?;
            let worst = got.as_slice().iter().zip(embedding.as_slice()).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(worst < 1e-6, "{hash:?} differs by {worst}");
        }

        // Existing entries are kept; other models are separate.
        store.cache_embeddings(MODEL, &[(entries[0].0.clone(), basis(16, 3))]).await?;
        let again = store.cached_embeddings(MODEL, &wanted[..1]).await?;
        assert!(again.get(&entries[0].0).is_some_and(|e| e.cosine(&entries[0].1).unwrap_or(0.0) > 0.999));
        assert!(store.cached_embeddings("other/model", &wanted).await?.is_empty());
        assert!(store.cached_embeddings(MODEL, &[]).await?.is_empty());
        assert_eq!(store.stats().await?.cached_embeddings, 1500);
        Ok(())
    }

    async fn add_edge_is_idempotent(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let (a, b) = (insert_text(&store, &s, "a").await?, insert_text(&store, &s, "b").await?);
        assert!(store.add_edge(a, b, "related").await?);
        assert!(!store.add_edge(a, b, "related").await?);
        assert!(store.add_edge(b, a, "related").await?);
        assert!(store.add_edge(a, b, "supersedes").await?);
        let unknown = MemoryId::new(b.get() + 10);
        assert!(matches!(store.add_edge(a, unknown, "related").await, Err(Error::NotFound(id)) if id == unknown));
        assert!(matches!(store.add_edge(unknown, a, "related").await, Err(Error::NotFound(id)) if id == unknown));
        assert!(matches!(store.add_edge(a, b, "not a kind").await, Err(Error::InvalidName { what: "kind", .. })));
        Ok(())
    }

    async fn bad_input_is_rejected_and_nothing_is_written(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let too_long = "x".repeat(MAX_CONTENT_BYTES + 1);
        let mut nul_metadata = serde_json::Map::new();
        nul_metadata.insert("key\0".to_owned(), serde_json::json!(1));
        let cases: Vec<(NewMemory, &str)> = vec![
            (NewMemory::new(s.clone(), ""), "content"),
            (NewMemory::new(s.clone(), " \n\t "), "content"),
            (NewMemory::new(s.clone(), too_long), "content"),
            (NewMemory::new(s.clone(), "nul \0 inside"), "content"),
            (NewMemory::new(s.clone(), "ok").with_title("nul \0 title"), "title"),
            (NewMemory::new(s.clone(), "ok").with_title("t".repeat(1025)), "title"),
            (NewMemory::new(s.clone(), "ok").with_metadata(nul_metadata), "metadata"),
        ];
        for (memory, field) in cases {
            let error = store.insert_checked(memory, stored(&basis(2, 0)), Some(0.9)).await;
            assert!(matches!(&error, Err(Error::InvalidContent { what, .. }) if *what == field), "{field}: {error:?}");
        }
        for kind in ["", "no kind", "-dash", "k/slash"] {
            let error = store.insert_checked(NewMemory::new(s.clone(), "ok").with_kind(kind), None, None).await;
            assert!(matches!(error, Err(Error::InvalidName { what: "kind", .. })), "{kind:?}: {error:?}");
        }
        let bad_model = Some(StoredVector { model: String::new(), embedding: basis(2, 0) });
        assert!(matches!(
            store.insert_checked(NewMemory::new(s.clone(), "ok"), bad_model, None).await,
            Err(Error::InvalidName { what: "model", .. })
        ));
        assert!(matches!(
            store.insert_checked(NewMemory::new(s.clone(), "ok"), stored(&basis(2, 0)), Some(f32::NAN)).await,
            Err(Error::InvalidVector(_))
        ));
        assert_eq!(store.list(&all()).await?, []);
        assert_eq!(store.stats().await?.namespaces, []);

        // The largest allowed content is stored.
        let largest = "y".repeat(MAX_CONTENT_BYTES);
        let id = insert_text(&store, &s, &largest).await?;
        assert_eq!(store.get(id).await?.map(|m| m.content.len()), Some(MAX_CONTENT_BYTES));
        Ok(())
    }

    async fn corrupt_rows_are_reported_not_trusted(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let id = insert_text(&store, &s, "will be damaged").await?;
        db.execute_raw(&format!("UPDATE memories SET dedup_attempts = -1 WHERE id = {id}")).await?;
        let error = store.get(id).await;
        assert!(matches!(&error, Err(Error::Corrupt { table: "memories", .. })), "{error:?}");
        assert!(error.is_err_and(|e| e.to_string().contains("dedup_attempts")));
        Ok(())
    }

    async fn newer_schema_fails_with_migrate_error(db) {
        db.open().await?.close().await;
        let checksum = if db.backend() == crate::support::Backend::Sqlite { "x'00'" } else { "'\\x00'::bytea" };
        db.execute_raw(&format!(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (9999, 'from a newer memdedup', TRUE, {checksum}, 0)"
        ))
        .await?;
        let error = db.open().await.err().and_then(|e| e.downcast::<Error>().ok());
        assert!(matches!(&error, Some(Error::Migrate { .. })), "{error:?}");
        assert!(error.is_some_and(|e| e.is_unavailable()));
        Ok(())
    }
}
