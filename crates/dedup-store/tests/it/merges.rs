//! The merge ledger (seed 003 §4, §9): merges applied from a plan, undone exactly, refused
//! when stale; the dedup queue and its guarded writes.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::Context;
use dedup_core::{ContentHash, Embedding};
use dedup_store::{
    Edge, Error, Lifecycle, MAX_DEDUP_ERROR_CHARS, Memory, MemoryId, MemoryUpdate, MergeFilter, MergeId, MergePlan,
    Scope, Store, StoredVector, TextSource,
};

use crate::support::{MODEL, basis, insert_text, insert_vector, scope};

const DIMS: usize = 8;

/// Everything a merge may change about a group, as the public API shows it.
#[derive(Debug, PartialEq)]
struct GroupState {
    memories: Vec<Memory>,
    vectors: HashMap<MemoryId, Embedding>,
    edges: Vec<Vec<Edge>>,
}

async fn group_state(store: &Store, ids: &[MemoryId]) -> anyhow::Result<GroupState> {
    let mut memories = Vec::new();
    let mut edges = Vec::new();
    for &id in ids {
        memories.push(store.get(id).await?.with_context(|| format!("memory {id} exists"))?);
        edges.push(store.edges_of(id).await?);
    }
    Ok(GroupState { memories, vectors: store.vectors(MODEL, ids).await?, edges })
}

/// A plan merging `absorbed` into `survivor` as they are now: counters summed, metadata
/// of the survivor with a marker, text unchanged.
async fn plan_for(store: &Store, run: &str, survivor: MemoryId, absorbed: &[MemoryId]) -> anyhow::Result<MergePlan> {
    let mut expected = Vec::new();
    for &id in std::iter::once(&survivor).chain(absorbed) {
        expected.push(store.get(id).await?.with_context(|| format!("memory {id} exists"))?);
    }
    let mut metadata = expected[0].metadata.clone();
    metadata.insert("merged".to_owned(), serde_json::json!(absorbed.iter().map(|id| id.get()).collect::<Vec<_>>()));
    Ok(MergePlan {
        run_id: run.to_owned(),
        scope: expected[0].scope.clone(),
        survivor,
        absorbed: absorbed.to_vec(),
        helpful: expected.iter().map(|m| m.helpful).sum(),
        harmful: expected.iter().map(|m| m.harmful).sum(),
        occurrence_count: expected.iter().map(|m| m.occurrence_count).sum(),
        expected,
        content: None,
        vector: None,
        metadata,
        canonical_text: None,
        text_source: TextSource::Unchanged,
        confidence: 0.9,
        reason: "the same lesson".to_owned(),
        judge: "test".to_owned(),
        model: String::new(),
    })
}

/// `plan` with a new text and vector for the survivor.
fn with_text(mut plan: MergePlan, text: &str, vector: Embedding) -> MergePlan {
    plan.content = Some(text.to_owned());
    plan.canonical_text = Some(text.to_owned());
    plan.text_source = TextSource::Canonical;
    plan.vector = Some(StoredVector { model: MODEL.to_owned(), embedding: vector });
    plan
}

fn ids(neighbours: &[dedup_store::Neighbour]) -> HashSet<MemoryId> {
    neighbours.iter().map(|n| n.id).collect()
}

fn hash_of(memory: &Memory) -> (MemoryId, ContentHash) {
    (memory.id, memory.content_hash.clone())
}

/// A group `a` (survivor), `b`, `c` and an outsider `x`, with vectors along axes 0 to 3
/// and edges: a→x, b→x, b→a, b→c (relates_to), c→x (supports), x→c (cites).
struct Group {
    scope: Scope,
    a: MemoryId,
    b: MemoryId,
    c: MemoryId,
    x: MemoryId,
}

impl Group {
    async fn new(store: &Store) -> anyhow::Result<Group> {
        let s = scope("global", "lessons");
        let a = insert_vector(store, &s, "Run the migrations before starting the server", &basis(DIMS, 0)).await?;
        let b = insert_vector(store, &s, "Migrations go first, then the server", &basis(DIMS, 1)).await?;
        let c = insert_vector(store, &s, "Start the server only after migrating", &basis(DIMS, 2)).await?;
        let x = insert_vector(store, &s, "Back up the database every night", &basis(DIMS, 3)).await?;
        for (source, target, kind) in [
            (a, x, "relates_to"),
            (b, x, "relates_to"),
            (b, a, "relates_to"),
            (b, c, "relates_to"),
            (c, x, "supports"),
            (x, c, "cites"),
        ] {
            assert!(store.add_edge(source, target, kind).await?);
        }
        Ok(Group { scope: s, a, b, c, x })
    }

    fn members(&self) -> [MemoryId; 4] {
        [self.a, self.b, self.c, self.x]
    }
}

/// Lets the clock move on, so that a rewritten `updated_at` shows.
async fn tick() {
    tokio::time::sleep(Duration::from_millis(3)).await;
}

fn undo_refusal(result: Result<impl std::fmt::Debug, Error>) -> anyhow::Result<String> {
    match result {
        Err(Error::UndoRefused { reason, .. }) => Ok(reason),
        other => anyhow::bail!("expected an undo refusal, got {other:?}"),
    }
}

backend_tests! {
    async fn apply_then_undo_restores_the_exact_pre_merge_state(db) {
        let store = db.open().await?;
        let g = Group::new(&store).await?;
        // Give the members distinct states: counters, metadata, a title, a lifecycle and
        // dedup bookkeeping, which the merge rewrites and the undo must bring back.
        store.note_occurrence(g.b).await?;
        let mut metadata = serde_json::Map::new();
        metadata.insert("source".to_owned(), serde_json::json!("session 7"));
        let update = MemoryUpdate {
            title: Some(Some("Order of startup".to_owned())),
            lifecycle: Some(Lifecycle::Weak),
            metadata: Some(metadata),
            ..MemoryUpdate::default()
        };
        store.update(g.c, update, None).await?;
        let a = store.get(g.a).await?.context("a")?;
        let c = store.get(g.c).await?.context("c")?;
        assert_eq!(store.mark_verified(&[hash_of(&a)]).await?, [g.a]);
        assert_eq!(store.record_dedup_failure(&[hash_of(&c)], "judge timed out").await?, [g.c]);
        let before = group_state(&store, &g.members()).await?;
        tick().await;

        let plan = with_text(
            plan_for(&store, "run-1", g.a, &[g.b, g.c]).await?,
            "Always run the migrations before the server starts",
            basis(DIMS, 4),
        );
        let record = store.apply_merge(&plan).await?;
        assert_eq!((record.survivor, record.absorbed.clone()), (g.a, vec![g.b, g.c]));
        assert_eq!(record.final_text, "Always run the migrations before the server starts");
        assert_eq!(record.text_source, TextSource::Canonical);
        assert_eq!(record.undone_at, None);
        assert_eq!(store.merge(record.id).await?, Some(record.clone()));

        // The survivor: written as planned and queued for dedup again (seed 003 §9).
        let survivor = store.get(g.a).await?.context("survivor")?;
        assert_eq!(survivor.content, "Always run the migrations before the server starts");
        assert_eq!(survivor.content_hash, ContentHash::of(&survivor.content));
        assert_eq!((survivor.helpful, survivor.harmful, survivor.occurrence_count), (0, 0, 4));
        assert_eq!(survivor.metadata, plan.metadata);
        assert!(!survivor.dedup_verified && survivor.dedup_last_error.is_none() && !survivor.deprecated);
        assert!(survivor.updated_at > before.memories[0].updated_at);
        let vectors = store.vectors(MODEL, &g.members()).await?;
        assert_eq!(vectors.get(&g.a), Some(&basis(DIMS, 4)));
        // The absorbed: retired into the survivor, verified, vectors kept.
        for (i, id) in [(1, g.b), (2, g.c)] {
            let absorbed = store.get(id).await?.context("absorbed")?;
            assert!(absorbed.deprecated && absorbed.dedup_verified, "{absorbed:?}");
            assert_eq!(absorbed.merged_into, Some(g.a));
            assert_eq!(absorbed.content, before.memories[i].content);
            assert_eq!(vectors.get(&id), before.vectors.get(&id));
        }
        assert_eq!(store.dedup_counts(&g.scope).await?.live, 2);

        let report = store.undo_merge(record.id, false).await?;
        assert_eq!((report.merge, report.survivor, report.restored), (record.id, g.a, vec![g.b, g.c]));
        assert!(report.blocked_pairs.is_empty());
        assert_eq!(group_state(&store, &g.members()).await?, before);
        let undone = store.merge(record.id).await?.context("merge kept in the ledger")?;
        assert!(undone.undone_at.is_some());
        assert!(store.merges(&MergeFilter::default()).await?.is_empty(), "undone merges are hidden by default");
        let all = MergeFilter { include_undone: true, ..MergeFilter::default() };
        assert_eq!(store.merges(&all).await?, [undone]);
        assert!(store.never_merge_pairs(&g.scope).await?.is_empty());
        Ok(())
    }

    async fn merge_moves_edges_without_self_loops_or_duplicates(db) {
        let store = db.open().await?;
        let g = Group::new(&store).await?;
        let original = store.edges_of(g.x).await?;
        let created = |source: MemoryId, target: MemoryId, kind: &str| {
            original
                .iter()
                .find(|e| (e.source, e.target, e.kind.as_str()) == (source, target, kind))
                .map(|e| e.created_at)
        };
        store.apply_merge(&plan_for(&store, "run-1", g.a, &[g.b, g.c]).await?).await?;

        let mut edges: Vec<(MemoryId, MemoryId, String)> =
            store.edges_of(g.a).await?.into_iter().map(|e| (e.source, e.target, e.kind)).collect();
        edges.sort();
        let mut expected = vec![
            (g.a, g.x, "relates_to".to_owned()),
            (g.a, g.x, "supports".to_owned()),
            (g.x, g.a, "cites".to_owned()),
        ];
        expected.sort();
        // b→x relates_to duplicated a→x; b→a and b→c became self-loops.
        assert_eq!(edges, expected);
        assert!(store.edges_of(g.b).await?.is_empty());
        assert!(store.edges_of(g.c).await?.is_empty());
        // Moved edges keep their creation time.
        let moved = store.edges_of(g.x).await?;
        let supports = moved.iter().find(|e| e.kind == "supports").context("supports moved")?;
        assert_eq!(Some(supports.created_at), created(g.c, g.x, "supports"));
        let cites = moved.iter().find(|e| e.kind == "cites").context("cites moved")?;
        assert_eq!(Some(cites.created_at), created(g.x, g.c, "cites"));
        assert_eq!(moved.len(), 3);
        Ok(())
    }

    async fn searches_skip_absorbed_memories_after_merge_and_see_them_after_undo(db) {
        let store = db.open().await?;
        let g = Group::new(&store).await?;
        // This handle's index is loaded before the merge; another handle's is not.
        assert_eq!(store.search(&g.scope, MODEL, &basis(DIMS, 1), 1).await?[0].id, g.b);
        let other = db.open().await?;

        let plan = with_text(plan_for(&store, "run-1", g.a, &[g.b, g.c]).await?, "Migrate, then serve", basis(DIMS, 4));
        let record = store.apply_merge(&plan).await?;
        for handle in [&store, &other] {
            for axis in 0..DIMS {
                let hits = handle.search(&g.scope, MODEL, &basis(DIMS, axis), 10).await?;
                assert_eq!(ids(&hits), HashSet::from([g.a, g.x]), "axis {axis}");
            }
            let best = handle.search(&g.scope, MODEL, &basis(DIMS, 4), 1).await?;
            assert_eq!(best[0].id, g.a);
            assert!((best[0].score - 1.0).abs() < 1e-6, "the survivor's new vector is searched");
        }

        store.undo_merge(record.id, false).await?;
        for handle in [&store, &other] {
            for (axis, id) in [(0, g.a), (1, g.b), (2, g.c), (3, g.x)] {
                let best = handle.search(&g.scope, MODEL, &basis(DIMS, axis), 1).await?;
                assert_eq!(best[0].id, id, "axis {axis}");
                assert!((best[0].score - 1.0).abs() < 1e-6);
            }
            let hits = handle.search(&g.scope, MODEL, &basis(DIMS, 4), 10).await?;
            assert_eq!(ids(&hits), HashSet::from(g.members()));
            assert!(hits.iter().all(|h| h.score.abs() < 1e-6), "the merged vector is gone: {hits:?}");
        }
        Ok(())
    }

    async fn stale_plans_are_refused_and_write_nothing(db) {
        let store = db.open().await?;
        let g = Group::new(&store).await?;
        let plan = plan_for(&store, "run-1", g.a, &[g.b, g.c]).await?;
        // Dedup bookkeeping changed since the read does not make a plan stale.
        let b = store.get(g.b).await?.context("b")?;
        store.mark_verified(&[hash_of(&b)]).await?;
        store.note_occurrence(g.b).await?;
        let before = group_state(&store, &g.members()).await?;
        match store.apply_merge(&plan).await {
            Err(Error::MergeConflict { id, reason }) => {
                assert_eq!(id, g.b);
                assert!(reason.contains("occurrence_count"), "{reason}");
            }
            other => anyhow::bail!("expected a merge conflict, got {other:?}"),
        }
        assert_eq!(group_state(&store, &g.members()).await?, before, "nothing written");
        let all = MergeFilter { include_undone: true, ..MergeFilter::default() };
        assert!(store.merges(&all).await?.is_empty());

        let plan = plan_for(&store, "run-1", g.a, &[g.b, g.c]).await?;
        let edit = MemoryUpdate { content: Some("Migrate first".to_owned()), ..MemoryUpdate::default() };
        store.update(g.c, edit, Some(StoredVector { model: MODEL.to_owned(), embedding: basis(DIMS, 2) })).await?;
        let error = store.apply_merge(&plan).await.err().context("an edited member refuses the plan")?;
        assert!(error.to_string().contains(&format!("memory {}: its content changed", g.c)), "{error}");

        let plan = plan_for(&store, "run-1", g.a, &[g.b, g.c]).await?;
        store.deprecate(g.b, None).await?;
        let error = store.apply_merge(&plan).await.err().context("a deprecated member refuses the plan")?;
        assert!(matches!(&error, Error::MergeConflict { id, .. } if *id == g.b), "{error}");
        assert!(error.to_string().contains("deprecated"), "{error}");
        assert!(store.get(g.c).await?.is_some_and(|c| !c.deprecated), "nothing written");
        assert!(store.merges(&all).await?.is_empty());
        Ok(())
    }

    async fn plans_are_validated_before_anything_is_written(db) {
        let store = db.open().await?;
        let g = Group::new(&store).await?;
        let good = plan_for(&store, "run-1", g.a, &[g.b, g.c]).await?;
        let invalid = |change: fn(&mut MergePlan)| {
            let mut plan = good.clone();
            change(&mut plan);
            plan
        };
        for (plan, wanted) in [
            (invalid(|p| p.absorbed.clear()), "absorbs no memory"),
            (invalid(|p| p.absorbed.push(p.survivor)), "into itself"),
            (invalid(|p| p.absorbed.push(p.absorbed[0])), "listed twice"),
            (invalid(|p| drop(p.expected.pop())), "no expected state"),
            (invalid(|p| p.run_id.clear()), "invalid run_id"),
            (invalid(|p| p.run_id = "r".repeat(129)), "invalid run_id"),
            (invalid(|p| p.confidence = f64::NAN), "invalid confidence"),
            (invalid(|p| p.content = Some(" ".to_owned())), "invalid content"),
            (
                invalid(|p| p.text_source = TextSource::Existing { from: MemoryId::new(p.survivor.get() + 100) }),
                "text source",
            ),
            // The survivor has a vector: a new text needs one too.
            (invalid(|p| p.content = Some("A new text".to_owned())), "needs a new vector"),
        ] {
            let error = store.apply_merge(&plan).await.err().with_context(|| format!("{wanted}: refused"))?;
            assert!(error.to_string().contains(wanted), "{wanted}: {error}");
        }
        // The survivor's own text is no new text: it keeps its vector.
        let mut same_text = good.clone();
        same_text.content = Some(good.expected[0].content.clone());
        same_text.text_source = TextSource::Existing { from: g.a };
        let record = store.apply_merge(&same_text).await?;
        assert_eq!(store.vectors(MODEL, &[g.a]).await?.get(&g.a), Some(&basis(DIMS, 0)));
        store.undo_merge(record.id, false).await?;
        // A new text equal to a live outsider's conflicts; a vector of other dimensions is
        // refused.
        let outsider = store.get(g.x).await?.context("x")?.content;
        let taken = with_text(good.clone(), &outsider, basis(DIMS, 5));
        assert!(matches!(store.apply_merge(&taken).await, Err(Error::Conflict { .. })));
        let wrong_dims = with_text(good.clone(), "Migrate, then serve", basis(4, 0));
        assert!(matches!(store.apply_merge(&wrong_dims).await, Err(Error::InvalidVector(_))));
        // Taking an absorbed memory's text is fine: it is retired in the same merge.
        let b_text = store.get(g.b).await?.context("b")?.content;
        let mut existing = with_text(good.clone(), &b_text, basis(DIMS, 1));
        existing.text_source = TextSource::Existing { from: g.b };
        let before = group_state(&store, &g.members()).await?;
        let all = MergeFilter { include_undone: true, ..MergeFilter::default() };
        assert_eq!(store.merges(&all).await?.len(), 1, "refused plans write nothing");
        let record = store.apply_merge(&existing).await?;
        assert_eq!(record.text_source, TextSource::Existing { from: g.b });
        assert_eq!(store.get(g.a).await?.context("a")?.content, b_text);
        store.undo_merge(record.id, false).await?;
        assert_eq!(group_state(&store, &g.members()).await?, before);
        Ok(())
    }

    async fn undo_is_refused_after_a_later_edit_or_edge(db) {
        let store = db.open().await?;
        let g = Group::new(&store).await?;
        let record = store.apply_merge(&plan_for(&store, "run-1", g.a, &[g.b]).await?).await?;
        let edit = MemoryUpdate { content: Some("Edited after the merge".to_owned()), ..MemoryUpdate::default() };
        store.update(g.a, edit, Some(StoredVector { model: MODEL.to_owned(), embedding: basis(DIMS, 6) })).await?;
        let after_edit = group_state(&store, &g.members()).await?;
        let reason = undo_refusal(store.undo_merge(record.id, false).await)?;
        assert_eq!(reason, format!("memory {}'s content changed since merge {}", g.a, record.id));
        assert_eq!(group_state(&store, &g.members()).await?, after_edit, "nothing written");
        assert!(store.merge(record.id).await?.context("merge")?.undone_at.is_none());

        let record = store.apply_merge(&plan_for(&store, "run-2", g.c, &[g.x]).await?).await?;
        assert!(store.add_edge(g.a, g.c, "mentions").await?);
        let reason = undo_refusal(store.undo_merge(record.id, false).await)?;
        assert!(reason.starts_with(&format!("memory {} has an edge added since merge {}", g.c, record.id)), "{reason}");
        // Dedup bookkeeping since the merge does not stand in the way.
        let c = store.get(g.c).await?.context("c")?;
        store.record_dedup_failure(&[hash_of(&c)], "judge down").await?;
        store.mark_verified(&[hash_of(&c)]).await?;
        let reason = undo_refusal(store.undo_merge(record.id, false).await)?;
        assert!(reason.contains("edge added"), "{reason}");

        // Deleting an absorbed memory makes its merge impossible to undo; the survivor
        // itself cannot be deleted.
        assert!(matches!(store.delete(g.c).await, Err(Error::Conflict { .. })));
        assert!(store.delete(g.x).await?);
        let reason = undo_refusal(store.undo_merge(record.id, false).await)?;
        assert_eq!(reason, format!("memory {} no longer exists", g.x));
        Ok(())
    }

    async fn undo_waits_for_a_later_merge_of_the_survivor(db) {
        let store = db.open().await?;
        let g = Group::new(&store).await?;
        let before = group_state(&store, &g.members()).await?;
        let first = store.apply_merge(&plan_for(&store, "run-1", g.a, &[g.b]).await?).await?;
        let between = group_state(&store, &g.members()).await?;
        tick().await;
        let second = store.apply_merge(&plan_for(&store, "run-2", g.a, &[g.c]).await?).await?;
        assert!(second.id > first.id);

        let reason = undo_refusal(store.undo_merge(first.id, false).await)?;
        assert!(reason.contains(&format!("undo merge {} first", second.id)), "{reason}");
        store.undo_merge(second.id, false).await?;
        assert_eq!(group_state(&store, &g.members()).await?, between);
        let reason = undo_refusal(store.undo_merge(second.id, false).await)?;
        assert!(reason.contains("undone already"), "{reason}");
        store.undo_merge(first.id, false).await?;
        assert_eq!(group_state(&store, &g.members()).await?, before);
        let unknown = MergeId::new(second.id.get() + 10);
        assert!(matches!(store.undo_merge(unknown, false).await, Err(Error::MergeNotFound(_))));
        assert_eq!(store.merge(unknown).await?, None);
        Ok(())
    }

    async fn undo_run_reverses_a_run_and_is_all_or_nothing(db) {
        let store = db.open().await?;
        let g = Group::new(&store).await?;
        let before = group_state(&store, &g.members()).await?;
        let first = store.apply_merge(&plan_for(&store, "run-1", g.a, &[g.b]).await?).await?;
        let second = store.apply_merge(&plan_for(&store, "run-1", g.a, &[g.c]).await?).await?;
        let filter = MergeFilter { run_id: Some("run-1".to_owned()), ..MergeFilter::default() };
        assert_eq!(store.merges(&filter).await?.iter().map(|m| m.id).collect::<Vec<_>>(), [first.id, second.id]);

        let reports = store.undo_run("run-1", false).await?;
        assert_eq!(reports.iter().map(|r| r.merge).collect::<Vec<_>>(), [second.id, first.id], "newest first");
        assert_eq!(group_state(&store, &g.members()).await?, before);
        assert!(store.undo_run("run-1", false).await?.is_empty(), "nothing left to undo");

        // All or nothing: the newer merge could be undone, the older one not.
        let older = store.apply_merge(&plan_for(&store, "run-3", g.a, &[g.b]).await?).await?;
        let newer = store.apply_merge(&plan_for(&store, "run-3", g.c, &[g.x]).await?).await?;
        store.note_occurrence(g.a).await?;
        let applied = group_state(&store, &g.members()).await?;
        match store.undo_run("run-3", true).await {
            Err(Error::UndoRefused { merge, reason }) => {
                assert_eq!(merge, older.id);
                assert!(reason.contains("occurrence_count"), "{reason}");
            }
            other => anyhow::bail!("expected a refusal, got {other:?}"),
        }
        assert_eq!(group_state(&store, &g.members()).await?, applied, "the newer merge is still applied");
        assert!(store.merge(newer.id).await?.context("newer")?.undone_at.is_none());
        assert!(store.never_merge_pairs(&g.scope).await?.is_empty());
        Ok(())
    }

    async fn defect_9_absorbed_memories_keep_no_stale_dedup_error(db) {
        let store = db.open().await?;
        let g = Group::new(&store).await?;
        let b = store.get(g.b).await?.context("b")?;
        store.record_dedup_failure(&[(g.b, b.content_hash.clone())], "batch-1: the judge timed out").await?;
        assert!(store.get(g.b).await?.context("b")?.dedup_last_error.is_some());

        let record = store.apply_merge(&plan_for(&store, "run-1", g.a, &[g.b]).await?).await?;
        let absorbed = store.get(g.b).await?.context("b")?;
        assert!(absorbed.deprecated && absorbed.dedup_verified, "{absorbed:?}");
        assert_eq!(absorbed.dedup_last_error, None);

        // Undo gives the error back with the rest of the row.
        store.undo_merge(record.id, false).await?;
        assert_eq!(store.get(g.b).await?.context("b")?.dedup_last_error.as_deref(), Some("batch-1: the judge timed out"));
        Ok(())
    }

    async fn block_remerge_records_pairs_and_clear_never_merge_removes_them(db) {
        let store = db.open().await?;
        let g = Group::new(&store).await?;
        let plan = plan_for(&store, "run-1", g.c, &[g.a, g.b]).await?;
        let record = store.apply_merge(&plan).await?;
        let report = store.undo_merge(record.id, true).await?;
        let expected = vec![(g.a, g.b), (g.a, g.c), (g.b, g.c)];
        assert_eq!(report.blocked_pairs, expected);
        assert_eq!(store.never_merge_pairs(&g.scope).await?, expected.iter().copied().collect());
        assert!(store.never_merge_pairs(&scope("global", "other")).await?.is_empty());

        // The group, or any pair of it, cannot be merged again until the pairs are cleared.
        let again = plan_for(&store, "run-2", g.a, &[g.b]).await?;
        assert!(matches!(store.apply_merge(&again).await, Err(Error::MergeBlocked { .. })));
        let unrelated = store.apply_merge(&plan_for(&store, "run-2", g.a, &[g.x]).await?).await?;
        store.undo_merge(unrelated.id, false).await?;
        assert_eq!(store.clear_never_merge(&scope("global", "other")).await?, 0);
        assert_eq!(store.clear_never_merge(&g.scope).await?, 3);
        assert!(store.never_merge_pairs(&g.scope).await?.is_empty());
        store.apply_merge(&plan_for(&store, "run-2", g.a, &[g.b]).await?).await?;
        Ok(())
    }

    async fn undo_is_refused_when_a_restored_text_is_taken(db) {
        let store = db.open().await?;
        let g = Group::new(&store).await?;
        let record = store.apply_merge(&plan_for(&store, "run-1", g.a, &[g.b]).await?).await?;
        // b's text is free once b is retired; a new memory takes it.
        let b_text = store.get(g.b).await?.context("b")?.content;
        let taker = insert_text(&store, &g.scope, &b_text).await?;
        let reason = undo_refusal(store.undo_merge(record.id, false).await)?;
        assert_eq!(reason, format!("memory {}'s text is now held by live memory {taker} of {}", g.b, g.scope));
        assert!(store.get(g.b).await?.context("b")?.deprecated, "nothing written");
        store.deprecate(taker, None).await?;
        store.undo_merge(record.id, false).await?;
        assert!(!store.get(g.b).await?.context("b")?.deprecated);
        Ok(())
    }

    async fn mark_verified_and_record_dedup_failure_respect_their_guards(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let mut memories = Vec::new();
        for text in ["first lesson", "second lesson", "third lesson", "retired lesson"] {
            let id = insert_text(&store, &s, text).await?;
            memories.push(store.get(id).await?.context("stored")?);
        }
        let [a, b, c, d] = [&memories[0], &memories[1], &memories[2], &memories[3]];
        store.deprecate(d.id, None).await?;
        let d = store.get(d.id).await?.context("d")?;
        tick().await;

        // A stale hash (the text changed since it was judged) and a retired row: untouched.
        let stale = (b.id, ContentHash::of("what b said before"));
        let touched = store.mark_verified(&[hash_of(a), stale.clone(), hash_of(&d), hash_of(a)]).await?;
        assert_eq!(touched, [a.id]);
        // Failures count only on rows still unverified.
        let long = "é".repeat(MAX_DEDUP_ERROR_CHARS + 500);
        let touched = store.record_dedup_failure(&[hash_of(a), hash_of(b), hash_of(c), stale], &long).await?;
        assert_eq!(touched, [b.id, c.id]);
        store.record_dedup_failure(&[hash_of(c)], "judge said \0 nothing").await?;

        let now: Vec<Memory> = {
            let mut now = Vec::new();
            for m in [a, b, c] {
                now.push(store.get(m.id).await?.context("stored")?);
            }
            now
        };
        assert!(now[0].dedup_verified && now[0].dedup_attempts == 0 && now[0].dedup_last_error.is_none());
        assert!(!now[1].dedup_verified && now[1].dedup_attempts == 1);
        assert_eq!(now[1].dedup_last_error.as_deref().map(|e| e.chars().count()), Some(MAX_DEDUP_ERROR_CHARS));
        assert_eq!(now[1].dedup_last_error.as_deref(), Some("é".repeat(MAX_DEDUP_ERROR_CHARS).as_str()));
        assert_eq!(now[2].dedup_attempts, 2);
        assert_eq!(now[2].dedup_last_error.as_deref(), Some("judge said \u{fffd} nothing"));
        for (before, now) in [a, b, c].into_iter().zip(&now) {
            assert_eq!(now.updated_at, before.updated_at, "memory {}", now.id);
        }
        assert_eq!(store.get(d.id).await?, Some(d.clone()), "retired rows are not touched");
        // Verifying clears the last error.
        assert_eq!(store.mark_verified(&[hash_of(c)]).await?, [c.id]);
        let c = store.get(c.id).await?.context("c")?;
        assert!(c.dedup_verified && c.dedup_last_error.is_none() && c.dedup_attempts == 2);
        Ok(())
    }

    async fn unverified_and_exhausted_respect_max_attempts(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let mut ids = Vec::new();
        for i in 0..5 {
            ids.push(insert_text(&store, &s, &format!("lesson {i}")).await?);
        }
        let other = insert_text(&store, &scope("global", "other"), "lesson elsewhere").await?;
        let memories = store.list(&Default::default()).await?;
        let hash = |id: MemoryId| memories.iter().find(|m| m.id == id).map(hash_of).context("listed");
        store.mark_verified(&[hash(ids[0])?]).await?;
        for _ in 0..2 {
            store.record_dedup_failure(&[hash(ids[1])?], "parse error").await?;
        }
        store.record_dedup_failure(&[hash(ids[2])?], "parse error").await?;
        store.deprecate(ids[4], None).await?;

        let listed = |memories: Vec<Memory>| memories.into_iter().map(|m| m.id).collect::<Vec<_>>();
        assert_eq!(listed(store.unverified(&s, 2, 0).await?), [ids[2], ids[3]]);
        assert_eq!(listed(store.unverified(&s, 3, 0).await?), [ids[1], ids[2], ids[3]]);
        assert_eq!(listed(store.unverified(&s, 3, 2).await?), [ids[1], ids[2]]);
        assert_eq!(listed(store.unverified(&s, 0, 0).await?), Vec::<MemoryId>::new());
        assert_eq!(listed(store.exhausted(&s, 2).await?), [ids[1]]);
        assert_eq!(listed(store.exhausted(&s, 1).await?), [ids[1], ids[2]]);
        assert_eq!(listed(store.unverified(&scope("global", "other"), 1, 0).await?), [other]);
        let counts = store.dedup_counts(&s).await?;
        assert_eq!((counts.live, counts.verified, counts.unverified), (4, 1, 3));
        Ok(())
    }

    async fn update_of_the_text_requeues_a_verified_memory(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let id = insert_text(&store, &s, "Pin dependency versions").await?;
        let memory = store.get(id).await?.context("stored")?;
        store.record_dedup_failure(&[hash_of(&memory)], "timeout").await?;
        store.mark_verified(&[hash_of(&memory)]).await?;
        store.record_dedup_failure(&[hash_of(&memory)], "ignored: already verified").await?;
        let retitle = MemoryUpdate { title: Some(Some("Dependencies".to_owned())), ..MemoryUpdate::default() };
        let updated = store.update(id, retitle, None).await?;
        assert!(updated.dedup_verified, "a new title is not a new text");
        let edit = MemoryUpdate { content: Some("Pin every dependency version".to_owned()), ..MemoryUpdate::default() };
        let updated = store.update(id, edit, None).await?;
        assert!(!updated.dedup_verified && updated.dedup_last_error.is_none());
        assert_eq!(updated.dedup_attempts, 1);
        assert_eq!(store.unverified(&s, 5, 0).await?.len(), 1);
        Ok(())
    }
}
