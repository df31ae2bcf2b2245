//! Undo after a run: the exact pre-merge state comes back, and undone pairs are not
//! proposed to the judge again.

use std::collections::BTreeSet;
use std::sync::Arc;

use dedup_assist::DedupOptions;
use dedup_store::MemoryId;

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
}
