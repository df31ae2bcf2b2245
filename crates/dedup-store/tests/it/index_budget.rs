//! The index memory budget: least recently used scopes dropped, loaded again on use, with
//! the same answers and every write seen.

use std::sync::Arc;

use dedup_core::Embedding;
use dedup_store::{MemoryId, Neighbour, Scope, Store, StoreOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::support::{MODEL, TestDb, insert_vector, random_unit, scope};

const DIMS: usize = 32;
/// Memories per scope; every scope gets the same count, so their indexes are the same size.
const PER_SCOPE: usize = 12;

/// Fills `scopes` namespaces with [`PER_SCOPE`] random vectors each, through a handle of
/// its own; returns the scopes and their ids with vectors.
async fn fill(db: &TestDb, scopes: usize, seed: u64) -> anyhow::Result<Vec<(Scope, Vec<(MemoryId, Embedding)>)>> {
    let writer = db.open().await?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    for i in 0..scopes {
        let s = scope("tenants", &format!("agent-{i}"));
        let mut rows = Vec::new();
        for j in 0..PER_SCOPE {
            let vector = random_unit(&mut rng, DIMS);
            rows.push((insert_vector(&writer, &s, &format!("memory {j} of agent {i}"), &vector).await?, vector));
        }
        out.push((s, rows));
    }
    writer.close().await;
    Ok(out)
}

/// The heap bytes of one scope's index, measured on a handle without a tight budget.
async fn one_index_bytes(db: &TestDb, s: &Scope, query: &Embedding) -> anyhow::Result<u64> {
    let probe = db.open().await?;
    probe.search(s, MODEL, query, 1).await?;
    let bytes = probe.index_usage().resident_bytes;
    assert!(bytes > 0, "a loaded index has a size");
    Ok(bytes)
}

/// A handle whose budget holds `indexes` indexes of `one` bytes, and half of another.
async fn open_with_room(db: &TestDb, one: u64, indexes: u64) -> anyhow::Result<Store> {
    let budget = usize::try_from(one * indexes + one / 2)?;
    db.open_with(&StoreOptions { index_memory_bytes: budget, ..StoreOptions::default() }).await
}

/// Brute-force top-k, highest first, ties by lower id.
fn brute_force(rows: &[(MemoryId, Embedding)], query: &Embedding, k: usize) -> Vec<MemoryId> {
    let mut scored: Vec<(MemoryId, f32)> = rows.iter().map(|(id, v)| (*id, v.cosine(query).unwrap_or(0.0))).collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.into_iter().take(k).map(|(id, _)| id).collect()
}

fn ids(hits: &[Neighbour]) -> Vec<MemoryId> {
    hits.iter().map(|n| n.id).collect()
}

backend_tests! {
    async fn least_recently_used_scope_is_dropped_first(db) {
        let scopes = fill(db, 3, 1).await?;
        let query = random_unit(&mut StdRng::seed_from_u64(99), DIMS);
        let one = one_index_bytes(db, &scopes[0].0, &query).await?;
        let store = open_with_room(db, one, 2).await?;
        let [a, b, c] = [&scopes[0].0, &scopes[1].0, &scopes[2].0];

        store.search(a, MODEL, &query, 3).await?;
        store.search(b, MODEL, &query, 3).await?;
        let usage = store.index_usage();
        assert_eq!((usage.resident_indexes, usage.evictions, usage.loads), (2, 0, 2));
        assert_eq!(usage.resident_bytes, 2 * one);

        // `a` used again: `b` is now the least recently used, and goes for `c`.
        store.search(a, MODEL, &query, 3).await?;
        store.search(c, MODEL, &query, 3).await?;
        let usage = store.index_usage();
        assert_eq!((usage.resident_indexes, usage.evictions, usage.loads), (2, 1, 3));
        assert!(usage.resident_bytes <= usage.budget_bytes, "{usage:?}");
        assert!(usage.load_seconds > 0.0, "{usage:?}");

        store.search(a, MODEL, &query, 3).await?;
        assert_eq!(store.index_usage().loads, 3, "`a` stayed resident");
        store.search(b, MODEL, &query, 3).await?;
        let usage = store.index_usage();
        assert_eq!((usage.loads, usage.evictions), (4, 2), "`b` was loaded again, for `c`");
        Ok(())
    }

    async fn evicted_scope_reloads_with_identical_results(db) {
        let scopes = fill(db, 2, 2).await?;
        let mut rng = StdRng::seed_from_u64(7);
        let queries: Vec<Embedding> = (0..5).map(|_| random_unit(&mut rng, DIMS)).collect();
        let one = one_index_bytes(db, &scopes[0].0, &queries[0]).await?;
        let store = open_with_room(db, one, 1).await?;
        let (a, rows) = &scopes[0];

        let mut before = Vec::new();
        for query in &queries {
            before.push(store.search(a, MODEL, query, 5).await?);
        }
        store.search(&scopes[1].0, MODEL, &queries[0], 5).await?;
        assert_eq!(store.index_usage().evictions, 1);
        for (query, before) in queries.iter().zip(&before) {
            let after = store.search(a, MODEL, query, 5).await?;
            assert_eq!(&after, before);
            assert_eq!(ids(&after), brute_force(rows, query, 5));
        }
        let usage = store.index_usage();
        assert_eq!((usage.loads, usage.evictions), (3, 2));
        Ok(())
    }

    async fn writes_after_eviction_are_seen(db) {
        let scopes = fill(db, 2, 3).await?;
        let mut rng = StdRng::seed_from_u64(11);
        let query = random_unit(&mut rng, DIMS);
        let one = one_index_bytes(db, &scopes[0].0, &query).await?;
        let store = open_with_room(db, one, 1).await?;
        let other = db.open().await?;
        let (a, rows) = &scopes[0];
        let b = &scopes[1].0;

        store.search(a, MODEL, &query, 3).await?;
        store.search(b, MODEL, &query, 3).await?;
        // `a` is dropped; it changes through this handle and another one meanwhile.
        assert_eq!(store.index_usage().resident_indexes, 1);
        let best = store.search(a, MODEL, &query, 1).await?[0].id;
        store.search(b, MODEL, &query, 3).await?;
        assert!(other.delete(best).await?);
        let deprecated = rows.iter().map(|(id, _)| *id).find(|id| *id != best).unwrap_or(best);
        assert!(other.deprecate(deprecated, None).await?);
        let own = insert_vector(&store, a, "written through the budgeted handle", &query).await?;
        store.search(b, MODEL, &query, 3).await?;
        let near = crate::support::at_cosine(&query, &random_unit(&mut rng, DIMS), 0.999);
        let theirs = insert_vector(&other, a, "written through another handle", &near).await?;

        let hits = ids(&store.search(a, MODEL, &query, PER_SCOPE + 2).await?);
        assert_eq!(&hits[..2], &[own, theirs]);
        assert!(!hits.contains(&best) && !hits.contains(&deprecated), "{hits:?}");
        assert_eq!(hits.len(), PER_SCOPE, "12 - 2 + 2 live memories");
        Ok(())
    }

    async fn an_index_larger_than_the_budget_is_still_served(db) {
        let scopes = fill(db, 2, 4).await?;
        let store = db.open_with(&StoreOptions { index_memory_bytes: 1, ..StoreOptions::default() }).await?;
        for (s, rows) in &scopes {
            let query = &rows[3].1;
            let hits = store.search(s, MODEL, query, 4).await?;
            assert_eq!(ids(&hits), brute_force(rows, query, 4));
            assert_eq!(hits[0].id, rows[3].0);
            let usage = store.index_usage();
            assert_eq!(usage.resident_indexes, 1, "only the index in use stays: {usage:?}");
            assert!(usage.resident_bytes > usage.budget_bytes);
        }
        assert_eq!(store.index_usage().evictions, 1);
        Ok(())
    }

    async fn concurrent_writes_and_searches_under_a_tiny_budget_match_brute_force(db) {
        let scopes = fill(db, 4, 5).await?;
        let query = random_unit(&mut StdRng::seed_from_u64(5), DIMS);
        let one = one_index_bytes(db, &scopes[0].0, &query).await?;
        let store = Arc::new(open_with_room(db, one, 1).await?);
        let mut tasks = Vec::new();
        for worker in 0..4u64 {
            let store = Arc::clone(&store);
            let names: Vec<Scope> = scopes.iter().map(|(s, _)| s.clone()).collect();
            tasks.push(tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(100 + worker);
                let mut written = Vec::new();
                for step in 0..25 {
                    let s = &names[rng.random_range(0..names.len())];
                    let vector = random_unit(&mut rng, DIMS);
                    if rng.random_bool(0.4) {
                        let text = format!("worker {worker} step {step}");
                        let id = insert_vector(&store, s, &text, &vector).await?;
                        written.push((s.clone(), id, vector));
                    } else {
                        store.search(s, MODEL, &vector, 3).await?;
                    }
                }
                anyhow::Ok(written)
            }));
        }
        let mut all: Vec<(Scope, Vec<(MemoryId, Embedding)>)> = scopes;
        for task in tasks {
            for (s, id, vector) in task.await?? {
                if let Some((_, rows)) = all.iter_mut().find(|(name, _)| *name == s) {
                    rows.push((id, vector));
                }
            }
        }
        let usage = store.index_usage();
        assert!(usage.evictions > 0, "{usage:?}");
        let mut rng = StdRng::seed_from_u64(6);
        for (s, rows) in &all {
            for _ in 0..3 {
                let query = random_unit(&mut rng, DIMS);
                let hits = store.search(s, MODEL, &query, 5).await?;
                assert_eq!(ids(&hits), brute_force(rows, &query, 5), "{s}");
            }
        }
        // Every index holds at least `one` bytes and the budget one and a half of them.
        assert_eq!(store.index_usage().resident_indexes, 1);
        Ok(())
    }
}
