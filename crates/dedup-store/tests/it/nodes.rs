//! Typed nodes: kind- and dimension-filtered search and checks, memories that may repeat a
//! text, in-place updates, hard deletes, listing by kind and lifecycle, and edges of a
//! memory.

use anyhow::{anyhow, bail};
use dedup_core::{ContentHash, Embedding};
use dedup_store::{
    Error, InsertOutcome, Lifecycle, ListFilter, Memory, MemoryId, MemoryUpdate, Neighbour, NewMemory, Scope,
    SearchFilter, Store,
};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::support::{MODEL, at_cosine, basis, embedding, insert_text, insert_vector, random_unit, scope, stored};

const LESSON: &str = "custom:lesson";

/// Stores `text` as a memory of `kind`, with `vector` when given (no semantic check), and
/// returns its id.
async fn insert_kind(
    store: &Store,
    scope: &Scope,
    kind: &str,
    text: &str,
    vector: Option<&Embedding>,
) -> anyhow::Result<MemoryId> {
    let memory = NewMemory::new(scope.clone(), text).with_kind(kind);
    match store.insert_checked(memory, vector.and_then(stored), None).await? {
        InsertOutcome::Inserted(id) => Ok(id),
        other => bail!("expected {kind} {text:?} to be inserted, got {other:?}"),
    }
}

async fn memory(store: &Store, id: MemoryId) -> anyhow::Result<Memory> {
    store.get(id).await?.ok_or_else(|| anyhow!("memory {id} not found"))
}

fn ids(hits: &[Neighbour]) -> Vec<MemoryId> {
    hits.iter().map(|h| h.id).collect()
}

fn score_of(hits: &[Neighbour], id: MemoryId) -> Option<f32> {
    hits.iter().find(|h| h.id == id).map(|h| h.score)
}

fn near(a: f32, b: f32) -> bool {
    (a - b).abs() < 1e-5
}

/// The ids of every memory `filter` lists.
async fn listed(store: &Store, filter: ListFilter) -> anyhow::Result<Vec<MemoryId>> {
    Ok(store.list(&filter).await?.into_iter().map(|m| m.id).collect())
}

/// Stores a titled node of `kind` that may repeat its text, and returns its id.
async fn insert_node(store: &Store, scope: &Scope, kind: &str, title: &str, body: &str) -> anyhow::Result<MemoryId> {
    let memory = NewMemory::new(scope.clone(), body).with_kind(kind).with_title(title).allow_repeats();
    match store.insert_checked(memory, None, None).await? {
        InsertOutcome::Inserted(id) => Ok(id),
        other => bail!("expected node {title:?} to be inserted, got {other:?}"),
    }
}

/// An edit of title and body, refused when it duplicates another node of the kind.
fn retext(title: &str, body: &str) -> MemoryUpdate {
    MemoryUpdate {
        content: Some(body.to_owned()),
        title: Some(Some(title.to_owned())),
        unique_in_kind: true,
        ..MemoryUpdate::default()
    }
}

backend_tests! {
    async fn defect_7_an_edit_cannot_make_an_exact_twin_within_the_kind(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let first = insert_node(&store, &s, LESSON, "Never trade weekends", "Low volume raises slippage").await?;
        let second = insert_node(&store, &s, LESSON, "Size by volatility", "Risk one percent per trade").await?;
        let other_kind = insert_node(&store, &s, "custom:curiosity", "Why volume?", "Unknown").await?;
        // Title and body of another live node of the kind (spacing and case aside): refused, nothing written.
        let error = store.update(second, retext("never trade  WEEKENDS", "Low volume raises slippage"), None).await.unwrap_err();
        assert!(matches!(error, Error::DuplicateEdit { id, existing } if id == second && existing == first), "{error}");
        assert_eq!(memory(&store, second).await?.title.as_deref(), Some("Size by volatility"));
        // The same body under another title, or the same pair in another kind, is allowed.
        store.update(second, retext("Weekend slippage", "Low volume raises slippage"), None).await?;
        store.update(other_kind, retext("Never trade weekends", "Low volume raises slippage"), None).await?;
        // Without the flag the store does not check (the caller decides).
        let unchecked = MemoryUpdate { unique_in_kind: false, ..retext("Never trade weekends", "Low volume raises slippage") };
        store.update(second, unchecked, None).await?;
        Ok(())
    }

    async fn defect_7_racing_edits_on_two_handles_leave_no_twin(db) {
        let first = std::sync::Arc::new(db.open().await?);
        let second = std::sync::Arc::new(db.open().await?);
        let s = scope("global", "default");
        for round in 0..10 {
            let a = insert_node(&first, &s, LESSON, &format!("A{round}"), "one").await?;
            let b = insert_node(&first, &s, LESSON, &format!("B{round}"), "two").await?;
            let target = retext(&format!("Same {round}"), "same body");
            let (x, y) = tokio::join!(first.update(a, target.clone(), None), second.update(b, target.clone(), None));
            let ok = [x.is_ok(), y.is_ok()];
            assert_eq!(ok.iter().filter(|&&o| o).count(), 1, "round {round}: {x:?} / {y:?}");
        }
        Ok(())
    }

    async fn kind_filter_isolates_kinds(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let (e1, e2, e3) = (basis(8, 0), basis(8, 1), basis(8, 2));
        // The same vector under two kinds: only the filter tells them apart.
        let lesson = insert_kind(&store, &s, LESSON, "Check the logs first", Some(&e1)).await?;
        let plain = insert_kind(&store, &s, "memory", "The logs live in /var/log", Some(&e1)).await?;
        let lesson2 = insert_kind(&store, &s, LESSON, "Read the error message", Some(&e2)).await?;
        insert_kind(&store, &scope("global", "other"), LESSON, "Other scope lesson", Some(&e1)).await?;
        assert_eq!(memory(&store, lesson).await?.kind, LESSON, "kinds may contain ':'");

        let lessons = SearchFilter::kind(LESSON);
        let hits = store.search_filtered(&s, MODEL, &e1, 10, &lessons, None).await?;
        assert_eq!(ids(&hits), [lesson, lesson2]);
        let hits = store.search_filtered(&s, MODEL, &e1, 10, &SearchFilter::kind("memory"), None).await?;
        assert_eq!(ids(&hits), [plain]);
        let mut all = ids(&store.search(&s, MODEL, &e1, 10).await?);
        all.sort();
        assert_eq!(all, [lesson, plain, lesson2], "no filter: every kind");
        assert_eq!(store.search_filtered(&s, MODEL, &e1, 10, &SearchFilter::kind("custom:none"), None).await?, []);
        let hits = store.search_filtered(&s, MODEL, &e1, 10, &lessons, Some(0.5)).await?;
        assert_eq!(ids(&hits), [lesson], "min_score drops the orthogonal lesson");

        // Writes through the loaded indexes of this handle land in the right kind only:
        // a plain memory checked against lessons, a lesson checked against everything.
        let gated = store
            .insert_checked_filtered(
                NewMemory::new(s.clone(), "Plain note along e3"),
                stored(&e3),
                Some(0.9),
                &lessons,
            )
            .await?;
        let InsertOutcome::Inserted(plain3) = gated else { bail!("expected an insert, got {gated:?}") };
        let lesson3 = insert_kind(&store, &s, LESSON, "Lesson along e3", Some(&e3)).await?;
        for handle in [&store, &db.open().await?] {
            let hits = handle.search_filtered(&s, MODEL, &e3, 10, &lessons, None).await?;
            assert_eq!(hits.first().map(|h| h.id), Some(lesson3));
            assert!(!ids(&hits).contains(&plain3), "a plain memory is not a lesson: {hits:?}");
            assert!(!ids(&hits).contains(&plain), "{hits:?}");
            let hits = handle.search_filtered(&s, MODEL, &e3, 10, &SearchFilter::kind("memory"), None).await?;
            assert_eq!(ids(&hits), [plain3, plain]);
        }

        let bad = store.search_filtered(&s, MODEL, &e1, 10, &SearchFilter::kind("bad kind"), None).await;
        assert!(matches!(bad, Err(Error::InvalidName { what: "kind", .. })), "{bad:?}");
        Ok(())
    }

    async fn dims_filter_scores_like_truncating_by_hand(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let mut rng = StdRng::seed_from_u64(11);
        let mut vectors = Vec::new();
        for i in 0..24 {
            let v = random_unit(&mut rng, 8);
            let kind = if i % 2 == 0 { LESSON } else { "memory" };
            vectors.push((insert_kind(&store, &s, kind, &format!("memory {i}"), Some(&v)).await?, kind, v));
        }
        let mut truncation_mattered = false;
        for round in 0..5 {
            let query = random_unit(&mut rng, 8);
            let short_query = query.truncate(4)?;
            for filter in [SearchFilter::default().with_dims(4), SearchFilter::kind(LESSON).with_dims(4)] {
                let mut want: Vec<(MemoryId, f32)> = Vec::new();
                for (id, kind, v) in &vectors {
                    if filter.kind.as_deref().is_none_or(|k| k == *kind) {
                        let score = v.truncate(4)?.cosine(&short_query)?;
                        truncation_mattered |= (score - v.cosine(&query)?).abs() > 0.05;
                        want.push((*id, score));
                    }
                }
                want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));

                let got = store.search_filtered(&s, MODEL, &query, 100, &filter, None).await?;
                assert_eq!(got.len(), want.len(), "round {round} {filter:?}");
                for (id, score) in &want {
                    let hit = score_of(&got, *id).ok_or_else(|| anyhow!("{id} missing in round {round}"))?;
                    assert!((hit - score).abs() < 1e-6, "round {round} {filter:?} memory {id}: {hit} vs {score}");
                }
                assert!(got.windows(2).all(|w| w[0].score >= w[1].score), "sorted by score");
                let top = store.search_filtered(&s, MODEL, &query, 3, &filter, None).await?;
                for (hit, (_, score)) in top.iter().zip(&want) {
                    assert!((hit.score - score).abs() < 1e-6, "top 3: {} vs {score}", hit.score);
                }
            }
        }
        assert!(truncation_mattered, "the test vectors must score differently on 4 dimensions");

        // Keeping at least every dimension changes nothing; the full vectors stay stored.
        let query = random_unit(&mut rng, 8);
        let full = store.search(&s, MODEL, &query, 100).await?;
        for (id, _, v) in &vectors {
            let hit = score_of(&full, *id).ok_or_else(|| anyhow!("{id} missing"))?;
            assert!((hit - v.cosine(&query)?).abs() < 1e-6);
        }
        for dims in [8, 64] {
            let wide = SearchFilter::default().with_dims(dims);
            assert_eq!(store.search_filtered(&s, MODEL, &query, 100, &wide, None).await?, full, "dims {dims}");
        }
        let zero = store.search_filtered(&s, MODEL, &query, 5, &SearchFilter::default().with_dims(0), None).await;
        assert!(matches!(zero, Err(Error::InvalidVector(_))), "{zero:?}");
        Ok(())
    }

    async fn filtered_check_catches_same_kind_and_ignores_other_kinds(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let (e1, e2) = (basis(8, 0), basis(8, 1));
        let lessons = SearchFilter::kind(LESSON);
        let lesson = insert_kind(&store, &s, LESSON, "Pin dependency versions", Some(&e1)).await?;
        let plain = insert_kind(&store, &s, "memory", "We use cargo", Some(&e2)).await?;

        let near_lesson = at_cosine(&e1, &basis(8, 2), 0.95);
        let candidate = NewMemory::new(s.clone(), "Always pin versions").with_kind(LESSON);
        let outcome = store.insert_checked_filtered(candidate.clone(), stored(&near_lesson), Some(0.9), &lessons).await?;
        assert!(
            matches!(outcome, InsertOutcome::SemanticDuplicate { id, score } if id == lesson && near(score, 0.95)),
            "{outcome:?}"
        );

        // Near the plain memory only: a duplicate for the unfiltered check, not among lessons.
        let near_plain = at_cosine(&e2, &basis(8, 3), 0.95);
        let other = NewMemory::new(s.clone(), "Cargo builds our code").with_kind(LESSON);
        let unfiltered = store.insert_checked(other.clone(), stored(&near_plain), Some(0.9)).await?;
        assert!(matches!(unfiltered, InsertOutcome::SemanticDuplicate { id, .. } if id == plain), "{unfiltered:?}");
        let outcome = store.insert_checked_filtered(other, stored(&near_plain), Some(0.9), &lessons).await?;
        let InsertOutcome::Inserted(new_lesson) = outcome else { bail!("expected an insert, got {outcome:?}") };
        assert_eq!(memory(&store, new_lesson).await?.kind, LESSON);
        // The lesson just stored is in the lesson index at once.
        let closer = at_cosine(&near_plain, &basis(8, 4), 0.97);
        let again = NewMemory::new(s.clone(), "Cargo is our build tool").with_kind(LESSON);
        let outcome = store.insert_checked_filtered(again, stored(&closer), Some(0.9), &lessons).await?;
        assert!(matches!(outcome, InsertOutcome::SemanticDuplicate { id, .. } if id == new_lesson), "{outcome:?}");
        // A plain memory near the first lesson passes a check among plain memories.
        let note = NewMemory::new(s.clone(), "Versions are pinned in Cargo.lock");
        let outcome =
            store.insert_checked_filtered(note, stored(&near_lesson), Some(0.9), &SearchFilter::kind("memory")).await?;
        assert!(matches!(outcome, InsertOutcome::Inserted(_)), "{outcome:?}");

        // On 4 dimensions a and b are equal; on 8 their cosine is 0.5.
        let t = scope("global", "truncated");
        let a = embedding([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0].to_vec());
        let b = embedding([1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0].to_vec());
        let first = insert_kind(&store, &t, LESSON, "first half matters", Some(&a)).await?;
        let short = SearchFilter::kind(LESSON).with_dims(4);
        let candidate = NewMemory::new(t.clone(), "second half differs").with_kind(LESSON);
        let outcome = store.insert_checked_filtered(candidate.clone(), stored(&b), Some(0.99), &short).await?;
        assert!(
            matches!(outcome, InsertOutcome::SemanticDuplicate { id, score } if id == first && near(score, 1.0)),
            "{outcome:?}"
        );
        let outcome = store.insert_checked_filtered(candidate, stored(&b), Some(0.99), &lessons).await?;
        let InsertOutcome::Inserted(second) = outcome else { bail!("expected an insert, got {outcome:?}") };
        // The stored vector is the full one.
        let hits = store.search(&t, MODEL, &b, 10).await?;
        assert!(score_of(&hits, second).is_some_and(|s| near(s, 1.0)), "{hits:?}");
        assert!(score_of(&hits, first).is_some_and(|s| near(s, 0.5)), "{hits:?}");
        let hits = store.search_filtered(&t, MODEL, &b, 10, &short, None).await?;
        assert!(hits.iter().all(|h| near(h.score, 1.0)) && hits.len() == 2, "{hits:?}");
        Ok(())
    }

    async fn allow_repeats_lets_equal_texts_in(db) {
        let store = db.open().await?;
        let s = scope("global", "episodes");
        let text = "Deployed v1.2 to staging";
        let episode = || NewMemory::new(s.clone(), text).with_kind("episode").allow_repeats();
        let first = store.insert_checked(episode(), None, None).await?;
        let second = store.insert_checked(episode(), None, None).await?;
        let (InsertOutcome::Inserted(first), InsertOutcome::Inserted(second)) = (first, second) else {
            bail!("expected two inserts, got {first:?} and {second:?}");
        };
        assert_ne!(first, second);
        assert!(!memory(&store, first).await?.unique_content);
        assert_eq!(store.find_exact(&s, &ContentHash::of(text)).await?, None, "repeats are not exact matches");

        // A normal memory with the same text is not blocked by them, and is unique itself.
        let normal = insert_text(&store, &s, text).await?;
        assert!(memory(&store, normal).await?.unique_content);
        assert_eq!(store.find_exact(&s, &ContentHash::of(text)).await?, Some(normal));
        let again = store.insert_checked(NewMemory::new(s.clone(), text.to_uppercase()), None, None).await?;
        assert_eq!(again, InsertOutcome::ExactDuplicate(normal));
        // ... nor does it block a further repeat.
        let third = store.insert_checked(episode(), None, None).await?;
        assert!(matches!(third, InsertOutcome::Inserted(id) if id != first && id != second), "{third:?}");
        assert_eq!(store.list(&ListFilter::default()).await?.len(), 4);
        Ok(())
    }

    async fn update_content_changes_hash_and_vector(db) {
        let store = db.open().await?;
        let other = db.open().await?;
        let s = scope("global", "default");
        let (e1, e2, e3) = (basis(8, 0), basis(8, 1), basis(8, 2));
        let old_text = "Indent with tabs";
        let new_text = "Indent with four spaces";
        let a = insert_vector(&store, &s, old_text, &e1).await?;
        let b = insert_vector(&store, &s, "Run the tests before pushing", &e2).await?;
        for handle in [&store, &other] {
            assert_eq!(ids(&handle.search(&s, MODEL, &e1, 1).await?), [a], "index loaded before the update");
        }
        let before = memory(&store, a).await?;

        let change = MemoryUpdate { content: Some(new_text.to_owned()), ..MemoryUpdate::default() };
        let updated = store.update(a, change, stored(&e3)).await?;
        assert_eq!((updated.id, updated.content.as_str()), (a, new_text));
        assert_eq!(updated.content_hash, ContentHash::of(new_text));
        assert_ne!(updated.content_hash, before.content_hash);
        assert_eq!(updated.created_at, before.created_at);
        assert!(updated.updated_at >= before.updated_at);
        assert_eq!(store.get(a).await?, Some(updated.clone()), "returned as stored");
        assert_eq!(store.find_exact(&s, &ContentHash::of(old_text)).await?, None);
        assert_eq!(store.find_exact(&s, &ContentHash::of(new_text)).await?, Some(a));

        for handle in [&store, &other, &db.open().await?] {
            let hits = handle.search(&s, MODEL, &e3, 1).await?;
            assert!(hits.first().is_some_and(|h| h.id == a && near(h.score, 1.0)), "found by the new vector: {hits:?}");
            let hits = handle.search(&s, MODEL, &e1, 10).await?;
            assert!(score_of(&hits, a).is_some_and(|s| near(s, 0.0)), "not by the old one: {hits:?}");
            assert!(score_of(&hits, b).is_some());
        }
        // The old text is free again.
        assert_ne!(insert_text(&store, &s, old_text).await?, a);

        // New content without a vector removes the vector.
        let change = MemoryUpdate { content: Some("Indent with two spaces".to_owned()), ..MemoryUpdate::default() };
        store.update(a, change, None).await?;
        for handle in [&store, &other] {
            let hits = handle.search(&s, MODEL, &e3, 10).await?;
            assert_eq!(ids(&hits), [b], "the vector went with the old content");
        }
        Ok(())
    }

    async fn update_to_another_live_text_conflicts_and_changes_nothing(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let (e1, e2, e3) = (basis(8, 0), basis(8, 1), basis(8, 2));
        let a = insert_vector(&store, &s, "alpha", &e1).await?;
        let b = insert_vector(&store, &s, "beta", &e2).await?;
        assert_eq!(ids(&store.search(&s, MODEL, &e1, 1).await?), [a]);
        let (before_a, before_b) = (memory(&store, a).await?, memory(&store, b).await?);

        let change = MemoryUpdate {
            content: Some("  BETA ".to_owned()),
            lifecycle: Some(Lifecycle::Weak),
            ..MemoryUpdate::default()
        };
        let error = store.update(a, change, stored(&e3)).await;
        assert!(matches!(error, Err(Error::Conflict { .. })), "{error:?}");
        assert_eq!(memory(&store, a).await?, before_a, "nothing changed");
        assert_eq!(memory(&store, b).await?, before_b);
        assert_eq!(store.find_exact(&s, &ContentHash::of("beta")).await?, Some(b));
        for handle in [&store, &db.open().await?] {
            let hits = handle.search(&s, MODEL, &e1, 10).await?;
            assert!(hits.first().is_some_and(|h| h.id == a && near(h.score, 1.0)), "old vector kept: {hits:?}");
        }

        // Its own text, differently spelled, is no conflict.
        let own = store.update(a, MemoryUpdate { content: Some("ALPHA".to_owned()), ..MemoryUpdate::default() }, stored(&e1)).await?;
        assert_eq!((own.content.as_str(), &own.content_hash), ("ALPHA", &before_a.content_hash));
        // Neither is a deprecated memory's text, nor a repeatable memory's.
        store.deprecate(b, None).await?;
        let taken = store.update(a, MemoryUpdate { content: Some("beta".to_owned()), ..MemoryUpdate::default() }, None).await?;
        assert_eq!(taken.content, "beta");
        assert_eq!(store.find_exact(&s, &ContentHash::of("beta")).await?, Some(a));
        let repeat = NewMemory::new(s.clone(), "gamma").with_kind("episode").allow_repeats();
        assert!(matches!(store.insert_checked(repeat, None, None).await?, InsertOutcome::Inserted(_)));
        let gamma = store.update(a, MemoryUpdate { content: Some("gamma".to_owned()), ..MemoryUpdate::default() }, None).await?;
        assert_eq!(gamma.content, "gamma");

        let unknown = MemoryId::new(a.get() + 100);
        let missing = store.update(unknown, MemoryUpdate { content: Some("delta".to_owned()), ..MemoryUpdate::default() }, None).await;
        assert!(matches!(missing, Err(Error::NotFound(id)) if id == unknown), "{missing:?}");
        Ok(())
    }

    async fn update_of_lifecycle_title_and_metadata_keeps_the_vector(db) {
        let store = db.open().await?;
        let other = db.open().await?;
        let s = scope("global", "default");
        let (e1, e2) = (basis(8, 0), basis(8, 1));
        let a = insert_kind(&store, &s, LESSON, "Write the test first", Some(&e1)).await?;
        insert_vector(&store, &s, "unrelated", &e2).await?;
        for handle in [&store, &other] {
            assert_eq!(ids(&handle.search(&s, MODEL, &e1, 1).await?), [a]);
        }
        let before = memory(&store, a).await?;

        let mut metadata = serde_json::Map::new();
        metadata.insert("source".to_owned(), serde_json::json!("review"));
        let change = MemoryUpdate {
            lifecycle: Some(Lifecycle::Dormant),
            title: Some(Some("Testing".to_owned())),
            metadata: Some(metadata.clone()),
            ..MemoryUpdate::default()
        };
        let updated = store.update(a, change, None).await?;
        assert_eq!(updated.lifecycle, Lifecycle::Dormant);
        assert_eq!(updated.title.as_deref(), Some("Testing"));
        assert_eq!(updated.metadata, metadata);
        assert_eq!((&updated.content, &updated.content_hash, &updated.kind), (&before.content, &before.content_hash, &before.kind));
        assert_eq!(store.get(a).await?, Some(updated));

        for handle in [&store, &other, &db.open().await?] {
            let hits = handle.search(&s, MODEL, &e1, 1).await?;
            assert!(hits.first().is_some_and(|h| h.id == a && near(h.score, 1.0)), "vector kept: {hits:?}");
            let hits = handle.search_filtered(&s, MODEL, &e1, 1, &SearchFilter::kind(LESSON), None).await?;
            assert_eq!(ids(&hits), [a]);
        }
        let untitled = store.update(a, MemoryUpdate { title: Some(None), ..MemoryUpdate::default() }, None).await?;
        assert_eq!((untitled.title, untitled.lifecycle), (None, Lifecycle::Dormant));
        Ok(())
    }

    async fn update_with_only_a_vector_reembeds(db) {
        let store = db.open().await?;
        let other = db.open().await?;
        let s = scope("global", "default");
        let (e1, e2, e3) = (basis(8, 0), basis(8, 1), basis(8, 2));
        let a = insert_vector(&store, &s, "re-embed me", &e1).await?;
        let b = insert_vector(&store, &s, "leave me", &e2).await?;
        for handle in [&store, &other] {
            assert_eq!(ids(&handle.search(&s, MODEL, &e1, 1).await?), [a]);
        }
        let before = memory(&store, a).await?;

        let updated = store.update(a, MemoryUpdate::default(), stored(&e3)).await?;
        assert_eq!((&updated.content, &updated.content_hash), (&before.content, &before.content_hash));
        assert_eq!(store.find_exact(&s, &before.content_hash).await?, Some(a));
        for handle in [&store, &other, &db.open().await?] {
            let hits = handle.search(&s, MODEL, &e3, 1).await?;
            assert!(hits.first().is_some_and(|h| h.id == a && near(h.score, 1.0)), "new vector: {hits:?}");
            let hits = handle.search(&s, MODEL, &e1, 10).await?;
            assert!(score_of(&hits, a).is_some_and(|s| near(s, 0.0)), "old vector gone: {hits:?}");
            assert_eq!(hits.len(), 2, "one vector per memory: {hits:?}");
            assert!(score_of(&hits, b).is_some());
        }
        Ok(())
    }

    async fn update_rejects_a_vector_of_other_dimensions(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let a = insert_vector(&store, &s, "eight dims", &basis(8, 0)).await?;
        insert_vector(&store, &s, "eight dims too", &basis(8, 1)).await?;
        let before = memory(&store, a).await?;

        let result = store.update(a, MemoryUpdate::default(), stored(&basis(4, 0))).await;
        assert!(matches!(result, Err(Error::InvalidVector(_))), "a 4-dim vector among 8-dim ones: {result:?}");
        assert_eq!(memory(&store, a).await?, before);
        let hits = db.open().await?.search(&s, MODEL, &basis(8, 0), 5).await;
        assert!(hits.as_ref().is_ok_and(|h| h.first().is_some_and(|h| h.id == a)), "scope still searchable: {hits:?}");
        Ok(())
    }

    async fn filtered_check_rejects_a_vector_of_other_dimensions(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let plain = insert_vector(&store, &s, "eight dims", &basis(8, 0)).await?;
        let cases = [
            (basis(4, 0), SearchFilter::kind(LESSON)),
            (basis(16, 1), SearchFilter::default().with_dims(4)),
        ];
        for (i, (vector, filter)) in cases.into_iter().enumerate() {
            let lesson = NewMemory::new(s.clone(), format!("lesson {i}")).with_kind(LESSON);
            let result = store.insert_checked_filtered(lesson, stored(&vector), Some(0.9), &filter).await;
            assert!(
                matches!(result, Err(Error::InvalidVector(_))),
                "a {}-dim vector among 8-dim ones, {filter:?}: {result:?}",
                vector.dims()
            );
            let hits = db.open().await?.search(&s, MODEL, &basis(8, 0), 5).await;
            assert!(hits.as_ref().is_ok_and(|h| ids(h) == [plain]), "scope still searchable: {hits:?}");
        }
        Ok(())
    }

    async fn delete_removes_row_vector_and_edges(db) {
        let writer = db.open().await?;
        let reader = db.open().await?;
        let s = scope("global", "default");
        let (e1, e2, e3) = (basis(8, 0), basis(8, 1), basis(8, 2));
        let a = insert_kind(&writer, &s, LESSON, "to be deleted", Some(&e1)).await?;
        let b = insert_vector(&writer, &s, "stays b", &e2).await?;
        let c = insert_vector(&writer, &s, "stays c", &e3).await?;
        writer.add_edge(a, b, "relates_to").await?;
        writer.add_edge(c, a, "supersedes").await?;
        writer.add_edge(b, c, "relates_to").await?;
        let absorbed = insert_text(&writer, &s, "absorbed into a").await?;
        writer.deprecate(absorbed, Some(a)).await?;

        // Both handles have their indexes (plain, by kind, truncated) loaded.
        let lessons = SearchFilter::kind(LESSON);
        let short = SearchFilter::default().with_dims(4);
        for handle in [&writer, &reader] {
            assert_eq!(ids(&handle.search(&s, MODEL, &e1, 1).await?), [a]);
            assert_eq!(ids(&handle.search_filtered(&s, MODEL, &e1, 1, &lessons, None).await?), [a]);
            assert_eq!(ids(&handle.search_filtered(&s, MODEL, &e1, 1, &short, None).await?), [a]);
        }

        assert!(writer.delete(a).await?);
        let late = db.open().await?;
        for handle in [&writer, &reader, &late] {
            assert_eq!(handle.get(a).await?, None);
            let hits = handle.search(&s, MODEL, &e1, 10).await?;
            assert!(!ids(&hits).contains(&a), "{hits:?}");
            assert_eq!(hits.len(), 2);
            assert_eq!(handle.search_filtered(&s, MODEL, &e1, 10, &lessons, None).await?, []);
            assert!(!ids(&handle.search_filtered(&s, MODEL, &e1, 10, &short, None).await?).contains(&a));
        }
        assert_eq!(db.execute_raw(&format!("DELETE FROM embeddings WHERE memory_id = {a}")).await?, 0, "vector");
        assert_eq!(db.execute_raw(&format!("DELETE FROM edges WHERE source = {a} OR target = {a}")).await?, 0);
        assert_eq!(writer.edges_of(a).await?, []);
        let left: Vec<_> = writer.edges_of(b).await?.into_iter().map(|e| (e.source, e.target)).collect();
        assert_eq!(left, [(b, c)]);
        let history = memory(&writer, absorbed).await?;
        assert!(history.deprecated && history.merged_into.is_none(), "{history:?}");
        let listed_ids = listed(&writer, ListFilter { include_deprecated: true, ..ListFilter::default() }).await?;
        assert_eq!(listed_ids, [b, c, absorbed]);

        // Gone for good: a second delete finds nothing, the text is free, the handles go on.
        assert!(!writer.delete(a).await?);
        assert!(!reader.delete(a).await?);
        let a2 = insert_kind(&reader, &s, LESSON, "to be deleted", Some(&e1)).await?;
        for handle in [&writer, &reader] {
            assert_eq!(ids(&handle.search_filtered(&s, MODEL, &e1, 10, &lessons, None).await?), [a2]);
        }
        Ok(())
    }

    async fn delete_of_unknown_id_returns_false(db) {
        let store = db.open().await?;
        assert!(!store.delete(MemoryId::new(1)).await?, "empty database");
        let s = scope("global", "default");
        let a = insert_vector(&store, &s, "kept", &basis(4, 0)).await?;
        assert!(!store.delete(MemoryId::new(a.get() + 1000)).await?);
        assert_eq!(listed(&store, ListFilter::default()).await?, [a]);
        assert_eq!(ids(&store.search(&s, MODEL, &basis(4, 0), 5).await?), [a]);
        Ok(())
    }

    async fn delete_of_a_merge_survivor_conflicts(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let survivor = insert_vector(&store, &s, "survivor", &basis(4, 0)).await?;
        db.execute_raw(&format!(
            "INSERT INTO merge_log (run_id, survivor, absorbed_ids, created_at) \
             VALUES ('run-1', {survivor}, '[]', '2024-01-01T00:00:00Z')"
        ))
        .await?;
        let result = store.delete(survivor).await;
        assert!(matches!(result, Err(Error::Conflict { .. })), "{result:?}");
        assert!(store.get(survivor).await?.is_some());
        assert_eq!(ids(&store.search(&s, MODEL, &basis(4, 0), 5).await?), [survivor]);
        Ok(())
    }

    async fn list_filters_by_kind_and_lifecycle(db) {
        let store = db.open().await?;
        let (s, t) = (scope("global", "a"), scope("other", "a"));
        let plain = insert_kind(&store, &s, "memory", "plain", None).await?;
        let l1 = insert_kind(&store, &s, LESSON, "lesson one", None).await?;
        let l2 = insert_kind(&store, &s, LESSON, "lesson two", None).await?;
        let decision = insert_kind(&store, &s, "decision", "decision", None).await?;
        let l3 = insert_kind(&store, &t, LESSON, "lesson three", None).await?;
        let retired = insert_kind(&store, &s, LESSON, "retired lesson", None).await?;
        store.deprecate(retired, None).await?;
        for (id, lifecycle) in [(l2, Lifecycle::Weak), (decision, Lifecycle::Weak), (plain, Lifecycle::Dormant)] {
            store.update(id, MemoryUpdate { lifecycle: Some(lifecycle), ..MemoryUpdate::default() }, None).await?;
        }

        let kind = |k: &str| ListFilter { kind: Some(k.to_owned()), ..ListFilter::default() };
        let lifecycle = |l| ListFilter { lifecycle: Some(l), ..ListFilter::default() };
        assert_eq!(listed(&store, kind(LESSON)).await?, [l1, l2, l3]);
        assert_eq!(listed(&store, ListFilter { include_deprecated: true, ..kind(LESSON) }).await?, [l1, l2, l3, retired]);
        assert_eq!(listed(&store, ListFilter { domain: Some("global".to_owned()), ..kind(LESSON) }).await?, [l1, l2]);
        assert_eq!(listed(&store, kind("decision")).await?, [decision]);
        assert_eq!(listed(&store, kind("custom:none")).await?, []);
        assert_eq!(listed(&store, lifecycle(Lifecycle::Weak)).await?, [l2, decision]);
        assert_eq!(listed(&store, lifecycle(Lifecycle::Active)).await?, [l1, l3]);
        assert_eq!(listed(&store, lifecycle(Lifecycle::Dormant)).await?, [plain]);
        assert_eq!(listed(&store, ListFilter { lifecycle: Some(Lifecycle::Weak), ..kind(LESSON) }).await?, [l2]);
        assert_eq!(listed(&store, ListFilter { lifecycle: Some(Lifecycle::Dormant), ..kind(LESSON) }).await?, []);
        let bad = store.list(&kind("bad kind")).await;
        assert!(matches!(bad, Err(Error::InvalidName { what: "kind", .. })), "{bad:?}");
        Ok(())
    }

    async fn edges_of_returns_both_directions(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let (a, b, c) = (insert_text(&store, &s, "a").await?, insert_text(&store, &s, "b").await?, insert_text(&store, &s, "c").await?);
        let lonely = insert_text(&store, &s, "no edges").await?;
        store.add_edge(a, b, "relates_to").await?;
        store.add_edge(c, a, "supersedes").await?;
        store.add_edge(b, c, "relates_to").await?;
        store.add_edge(a, b, "supersedes").await?;

        let summary = |edges: Vec<dedup_store::Edge>| {
            let mut out: Vec<_> = edges.into_iter().map(|e| (e.source, e.target, e.kind)).collect();
            out.sort();
            out
        };
        let of_a = store.edges_of(a).await?;
        assert!(of_a.windows(2).all(|w| w[0].created_at <= w[1].created_at), "oldest first: {of_a:?}");
        let (relates, supersedes) = ("relates_to".to_owned(), "supersedes".to_owned());
        assert_eq!(
            summary(of_a),
            [(a, b, relates.clone()), (a, b, supersedes.clone()), (c, a, supersedes.clone())],
            "outgoing and incoming"
        );
        assert_eq!(summary(store.edges_of(b).await?), [(a, b, relates.clone()), (a, b, supersedes), (b, c, relates)]);
        assert_eq!(store.edges_of(lonely).await?, []);
        assert_eq!(store.edges_of(MemoryId::new(lonely.get() + 100)).await?, []);
        Ok(())
    }
}
