//! Semantic duplicates and exact search, including writes of other store handles.

use dedup_core::Embedding;
use dedup_store::{Error, InsertOutcome, MemoryId, NewMemory, StoredVector};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::support::{MODEL, at_cosine, basis, embedding, insert_vector, random_unit, scope, stored};

/// Brute-force top-k: every vector scored, highest first, ties by lower id.
fn brute_force(vectors: &[(MemoryId, Embedding)], query: &Embedding, k: usize) -> Vec<(MemoryId, f32)> {
    let mut scored: Vec<(MemoryId, f32)> =
        vectors.iter().map(|(id, v)| (*id, v.cosine(query).unwrap_or(f32::NAN))).collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(k);
    scored
}

backend_tests! {
    async fn search_scopes_merges_scopes_best_first_and_leaves_out_dead_memories(db) {
        let store = db.open().await?;
        let (a, b, c) = (scope("global", "a"), scope("global", "b"), scope("other", "c"));
        let query = basis(8, 0);
        let best = insert_vector(&store, &a, "the best match", &query).await?;
        let next = insert_vector(&store, &b, "the next one", &at_cosine(&query, &basis(8, 1), 0.8)).await?;
        let far = insert_vector(&store, &c, "far away", &basis(8, 2)).await?;
        assert_eq!(store.scopes_with_memories(None).await?, [a.clone(), b.clone(), c.clone()]);
        assert_eq!(store.scopes_with_memories(Some("other")).await?, std::slice::from_ref(&c));
        let found = store.search_scopes(&[a.clone(), b.clone(), c.clone()], MODEL, &query, 5).await?;
        let ids: Vec<MemoryId> = found.iter().map(|(m, _)| m.id).collect();
        assert_eq!(ids, [best, next, far]);
        assert!((found[1].1 - 0.8).abs() < 1e-4, "{:?}", found[1].1);
        assert_eq!(store.search_scopes(&[a.clone(), b.clone()], MODEL, &query, 1).await?.len(), 1);
        assert!(store.deprecate(best, None).await?);
        let found = store.search_scopes(&[a.clone(), b.clone()], MODEL, &query, 5).await?;
        assert_eq!(found.iter().map(|(m, _)| m.id).collect::<Vec<_>>(), [next]);
        assert_eq!(store.scopes_with_memories(None).await?, [b, c], "a holds no live memory now");
        Ok(())
    }

    async fn semantic_duplicate_at_and_below_threshold(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let e1 = basis(8, 0);
        // normalize(e1 + 0.2 e2): cosine with e1 is 1 / sqrt(1.04) ≈ 0.9806, and exactly
        // its first component, however the dot product is summed.
        let near = embedding([1.0, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0].to_vec());
        let score = near.as_slice()[0];
        assert!((score - 1.0 / 1.04f32.sqrt()).abs() < 1e-6);

        let original = insert_vector(&store, &s, "Deploy on Fridays is risky", &e1).await?;
        let paraphrase = NewMemory::new(s.clone(), "Friday deployments are risky");
        let at = store.insert_checked(paraphrase.clone(), stored(&near), Some(score)).await?;
        assert_eq!(at, InsertOutcome::SemanticDuplicate { id: original, score });

        let just_above = f32::from_bits(score.to_bits() + 1);
        let above = store.insert_checked(paraphrase.clone(), stored(&near), Some(just_above)).await?;
        let InsertOutcome::Inserted(stored_id) = above else { anyhow::bail!("expected an insert, got {above:?}") };
        assert_ne!(stored_id, original);

        // No threshold: no semantic check. Another model: other vectors.
        let third = NewMemory::new(s.clone(), "Fridays: no deploys");
        assert!(matches!(store.insert_checked(third, stored(&e1), None).await?, InsertOutcome::Inserted(_)));
        let other_model = Some(StoredVector { model: "other/model".to_owned(), embedding: e1.clone() });
        let fourth = NewMemory::new(s.clone(), "Never deploy on a Friday");
        assert!(matches!(store.insert_checked(fourth, other_model, Some(0.5)).await?, InsertOutcome::Inserted(_)));

        // The best match is reported, with its score.
        let query = embedding([1.0, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0].to_vec());
        let best = store.insert_checked(NewMemory::new(s.clone(), "new text"), stored(&query), Some(0.5)).await?;
        let expected = store.search(&s, MODEL, &query, 1).await?;
        assert_eq!(best, InsertOutcome::SemanticDuplicate { id: expected[0].id, score: expected[0].score });
        Ok(())
    }

    async fn vectors_of_other_dimensions_are_rejected(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        insert_vector(&store, &s, "eight dims", &basis(8, 0)).await?;
        let wrong = store.insert_checked(NewMemory::new(s.clone(), "four dims"), stored(&basis(4, 0)), None).await;
        assert!(matches!(wrong, Err(Error::InvalidVector(_))), "{wrong:?}");
        assert!(matches!(store.search(&s, MODEL, &basis(4, 0), 3).await, Err(Error::InvalidVector(_))));
        assert_eq!(store.list(&Default::default()).await?.len(), 1, "the rejected memory is not stored");
        // Another scope has its own dimensions.
        insert_vector(&store, &scope("global", "small"), "four dims", &basis(4, 0)).await?;
        Ok(())
    }

    async fn search_is_exact_against_brute_force(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let mut rng = StdRng::seed_from_u64(42);
        let dims = 24;
        let mut live = Vec::new();
        for i in 0..300 {
            let v = random_unit(&mut rng, dims);
            let id = insert_vector(&store, &s, &format!("memory number {i}"), &v).await?;
            if i % 7 == 3 {
                store.deprecate(id, None).await?;
            } else {
                live.push((id, v));
            }
        }
        // Neither another scope nor another model shows up.
        for i in 0..20 {
            let v = random_unit(&mut rng, dims);
            insert_vector(&store, &scope("global", "other"), &format!("other scope {i}"), &v).await?;
            let other_model = Some(StoredVector { model: "other/model".to_owned(), embedding: v });
            store.insert_checked(NewMemory::new(s.clone(), format!("other model {i}")), other_model, None).await?;
        }

        for round in 0..10 {
            let query = if round == 0 { live[5].1.clone() } else { random_unit(&mut rng, dims) };
            for k in [1, 10, 1000] {
                let got = store.search(&s, MODEL, &query, k).await?;
                let want = brute_force(&live, &query, k);
                assert_eq!(got.len(), want.len(), "k={k}");
                for (rank, (hit, (id, score))) in got.iter().zip(&want).enumerate() {
                    assert!((hit.score - score).abs() < 1e-5, "k={k} rank {rank}: {} vs {score}", hit.score);
                    // Equal ids unless two scores are too close to order reliably.
                    let tied = want.iter().any(|(other, s)| other != id && (s - score).abs() < 1e-5);
                    assert!(hit.id == *id || tied, "k={k} rank {rank}: got {} want {id}", hit.id);
                }
                assert!(got.windows(2).all(|w| w[0].score >= w[1].score), "sorted by score");
            }
        }
        assert_eq!(store.search(&s, MODEL, &live[0].1, 0).await?, []);
        assert_eq!(store.search(&scope("global", "empty"), MODEL, &live[0].1, 5).await?, []);
        Ok(())
    }

    async fn another_handle_sees_inserts_and_deprecations(db) {
        let writer = db.open().await?;
        let reader = db.open().await?;
        let s = scope("global", "shared");
        let (e1, e2, e3) = (basis(6, 0), basis(6, 1), basis(6, 2));
        assert_eq!(reader.search(&s, MODEL, &e1, 5).await?, [], "loaded while empty");

        let x = insert_vector(&writer, &s, "x", &e1).await?;
        let hits = reader.search(&s, MODEL, &e1, 5).await?;
        assert_eq!(hits.first().map(|h| h.id), Some(x));

        let y = insert_vector(&writer, &s, "y", &e2).await?;
        assert_eq!(reader.search(&s, MODEL, &e2, 1).await?.first().map(|h| h.id), Some(y));
        assert_eq!(reader.search(&s, MODEL, &e2, 5).await?.len(), 2);

        // A check through the reader sees the writer's rows under the lock too.
        let close_to_y = crate::support::at_cosine(&e2, &e3, 0.95);
        let y_again = NewMemory::new(s.clone(), "y again");
        let outcome = reader.insert_checked(y_again, stored(&close_to_y), Some(0.9)).await?;
        assert!(matches!(outcome, InsertOutcome::SemanticDuplicate { id, .. } if id == y), "{outcome:?}");

        assert!(writer.deprecate(x, None).await?);
        for store in [&reader, &writer] {
            let ids: Vec<_> = store.search(&s, MODEL, &e1, 5).await?.into_iter().map(|h| h.id).collect();
            assert_eq!(ids, [y], "deprecated rows leave the index");
        }

        // Re-inserting the text stores a new row that both handles find.
        let x2 = insert_vector(&reader, &s, "x", &e1).await?;
        assert_ne!(x2, x);
        assert_eq!(writer.search(&s, MODEL, &e1, 1).await?.first().map(|h| h.id), Some(x2));
        // A third handle loads everything at once.
        let late = db.open().await?;
        let mut ids: Vec<_> = late.search(&s, MODEL, &e3, 10).await?.into_iter().map(|h| h.id).collect();
        ids.sort();
        assert_eq!(ids, [y, x2]);
        Ok(())
    }

    async fn corrupt_vectors_fail_the_search(db) {
        let store = db.open().await?;
        let s = scope("global", "default");
        let id = insert_vector(&store, &s, "damaged vector", &basis(4, 0)).await?;
        db.execute_raw(&format!("UPDATE embeddings SET dims = 5 WHERE memory_id = {id}")).await?;
        let fresh = db.open().await?;
        let error = fresh.search(&s, MODEL, &basis(4, 0), 3).await;
        assert!(matches!(error, Err(Error::Corrupt { table: "embeddings", .. })), "{error:?}");
        Ok(())
    }
}
