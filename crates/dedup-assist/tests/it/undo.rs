//! Undo after a run: the exact pre-merge state comes back, and undone pairs are not
//! proposed to the judge again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use dedup_assist::{DedupOptions, Judge, JudgeFailure, JudgeReply};
use dedup_core::JudgeBatch;
use dedup_store::{MemoryId, MergeId, Store};

use crate::backend_tests;
use crate::support::{TableEmbedder, Truth, batch_of, openai_judge, run};

const A1: &str = "Back up the database before a migration.";
const A2: &str = "Take a database backup before migrating.";
const A3: &str = "Always snapshot the DB before running migrations.";
const B1: &str = "Write release notes for every release.";
const B2: &str = "Every release gets release notes.";
const OTHER: &str = "Use UTC timestamps in logs.";

backend_tests! {
    async fn undo_of_a_run_restores_the_exact_pre_merge_state_and_blocks_the_pairs(db) {
        let embedder = Arc::new(TableEmbedder::new().near(A1, A2, 0.88).near(A1, A3, 0.8).near(B1, B2, 0.9));
        let other = db.add(embedder.as_ref(), OTHER).await;
        db.verify(&[other]).await;
        let mut ids = Vec::new();
        for text in [A1, A2, A3, B1, B2] {
            ids.push(db.add(embedder.as_ref(), text).await);
        }
        // Edges inside a group and out of it.
        db.store.add_edge(ids[1], other, "relates_to").await.unwrap();
        db.store.add_edge(ids[0], ids[2], "relates_to").await.unwrap();
        db.store.add_edge(other, ids[4], "supports").await.unwrap();
        let before = db.state("table-64").await;

        let truth = Truth::new()
            .cluster("backup", "Back up the database before running a migration.", &[A1, A2, A3])
            .cluster("notes", "Write release notes for every release.", &[B1, B2]);
        let server = truth.clone().server();
        let report = run(&db, embedder.clone(), openai_judge(&server), DedupOptions::default()).await;
        assert_eq!(report.merged, 2, "{report:#?}");
        let merges = db.merges().await;
        assert_eq!(merges.len(), 2);

        let undone = db.store.undo_run(&report.run_id, true).await.unwrap();
        assert_eq!(undone.len(), 2);
        let after = db.state("table-64").await;
        // Members of the merges are back exactly; the memory that was only verified by
        // the run keeps that.
        for id in &ids {
            assert_eq!(after.memories[id], before.memories[id], "memory {id} differs after undo");
            assert_eq!(after.vectors.get(id), before.vectors.get(id), "vector of {id} differs after undo");
            assert_eq!(after.edges[id], before.edges[id], "edges of {id} differ after undo");
        }
        assert_eq!(after.edges[&other], before.edges[&other]);
        let pairs = db.store.never_merge_pairs(&db.scope()).await.unwrap();
        assert_eq!(pairs.len(), 3 + 1, "every pair of both groups: {pairs:?}");

        // The next run does not ask about the undone pairs, and merges nothing.
        let calls = server.request_count();
        let again = run(&db, embedder.clone(), openai_judge(&server), DedupOptions::default()).await;
        assert_eq!(again.merged, 0, "{again:#?}");
        for request in &server.requests()[calls..] {
            let batch = batch_of(request);
            for edge in &batch.candidate_edges {
                let pair = (MemoryId::new(edge.source_id.min(edge.target_id)), MemoryId::new(edge.source_id.max(edge.target_id)));
                assert!(!pairs.contains(&pair), "an undone pair was proposed again: {pair:?}");
            }
        }
        let live: BTreeSet<MemoryId> = db.live().await.iter().map(|m| m.id).collect();
        assert!(ids.iter().all(|id| live.contains(id)));

        // Clearing the blocks lets the judge see them again.
        assert_eq!(db.store.clear_never_merge(&db.scope()).await.unwrap(), 4);
    }

    async fn undo_is_refused_after_a_later_change(db) {
        let embedder = Arc::new(TableEmbedder::new().near(A1, A2, 0.9));
        let other = db.add(embedder.as_ref(), OTHER).await;
        db.verify(&[other]).await;
        let a1 = db.add(embedder.as_ref(), A1).await;
        db.add(embedder.as_ref(), A2).await;
        let server = Truth::new().cluster("backup", A1, &[A1, A2]).server();
        let report = run(&db, embedder.clone(), openai_judge(&server), DedupOptions::default()).await;
        assert_eq!(report.merged, 1);
        let survivor = report.merges[0].survivor;
        assert_eq!(survivor, a1);
        db.store.note_occurrence(survivor).await.unwrap();
        let error = db.store.undo_merge(report.merges[0].merge_id, true).await.unwrap_err().to_string();
        assert!(error.contains(&survivor.to_string()) && error.contains("occurrence_count"), "{error}");
    }

    async fn defect_5_undo_racing_dedup_skips_the_blocked_group_and_the_run_completes(db) {
        let embedder = Arc::new(TableEmbedder::new().near(A1, A2, 0.9).near(B1, B2, 0.9));
        db.add(embedder.as_ref(), A1).await;
        db.add(embedder.as_ref(), A2).await;
        let truth = Truth::new()
            .cluster("backup", A1, &[A1, A2])
            .cluster("notes", B1, &[B1, B2]);
        let server = truth.server();
        let first = run(&db, embedder.clone(), openai_judge(&server), DedupOptions::default()).await;
        assert_eq!(first.merged, 1, "{first:#?}");
        let b1 = db.add(embedder.as_ref(), B1).await;
        let b2 = db.add(embedder.as_ref(), B2).await;

        // The second run reads the (empty) blocks, then while its judge works an undo of
        // the first run's merge commits and blocks A1/A2, which the next pass groups again.
        let judge = Arc::new(UndoWhileJudging {
            inner: openai_judge(&server),
            store: db.store.clone(),
            merge: first.merges[0].merge_id,
            undone: AtomicBool::new(false),
        });
        let report = run(&db, embedder.clone(), judge.clone(), DedupOptions::default()).await;

        assert!(judge.undone.load(Ordering::SeqCst), "the undo ran during the run");
        assert_eq!(report.merged, 1, "only the notes group merges: {report:#?}");
        let merged: BTreeSet<MemoryId> =
            report.merges.iter().flat_map(|m| m.absorbed.iter().copied().chain([m.survivor])).collect();
        assert_eq!(merged, BTreeSet::from([b1, b2]));
        assert_eq!(db.live().await.iter().filter(|m| [A1, A2].contains(&m.content.as_str())).count(), 2);
        let failed = db.live().await.into_iter().filter(|m| m.dedup_last_error.is_some()).count();
        assert!(failed >= 1, "the skipped group's memories record why: {report:#?}");
    }
}

/// A judge that undoes (and blocks) one merge the first time it is asked, as a user's
/// `undo --run` racing the run would.
#[derive(Debug)]
struct UndoWhileJudging {
    inner: Arc<dyn Judge>,
    store: Arc<Store>,
    merge: MergeId,
    undone: AtomicBool,
}

#[async_trait]
impl Judge for UndoWhileJudging {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    async fn judge(&self, batch: &JudgeBatch) -> Result<JudgeReply, JudgeFailure> {
        if !self.undone.swap(true, Ordering::SeqCst) {
            self.store.undo_merge(self.merge, true).await.expect("the undo commits");
        }
        self.inner.judge(batch).await
    }
}
