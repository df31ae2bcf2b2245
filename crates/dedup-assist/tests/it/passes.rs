//! Seed 003's passes with a deterministic embedder: multi-pass convergence, merge
//! invalidation (§9), the bridge example (§2), limits, dry runs and calls in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use dedup_assist::{DedupOptions, Judge, JudgeFailure, JudgeReply};
use dedup_core::{JudgeBatch, JudgeMode, MemoryStatus};
use dedup_embed::Embedder;

use crate::backend_tests;
use crate::support::{TableEmbedder, TestStore, Truth, batch_of, openai_judge, run};

const FILLER: [&str; 4] = [
    "Prefer composition over inheritance.",
    "Pin dependency versions in lock files.",
    "Log request ids on every error.",
    "Keep functions short and focused.",
];

async fn add_verified_filler(db: &TestStore, embedder: &dyn Embedder) {
    let mut ids = Vec::new();
    for text in FILLER {
        ids.push(db.add(embedder, text).await);
    }
    db.verify(&ids).await;
}

backend_tests! {
    async fn seed_003_multi_pass_convergence_needs_more_than_one_pass(db) {
        const U1: &str = "Rotate the API keys every month.";
        const U2: &str = "API keys get replaced on a monthly schedule.";
        const CANON: &str = "Rotate the API keys every month.";
        let embedder = Arc::new(TableEmbedder::new().near(U1, U2, 0.82));
        add_verified_filler(&db, embedder.as_ref()).await;
        let u1 = db.add(embedder.as_ref(), U1).await;
        let u2 = db.add(embedder.as_ref(), U2).await;
        let server = Truth::new().cluster("keys", CANON, &[U1, U2]).server();
        let report = run(&db, embedder.clone(), openai_judge(&server), DedupOptions::default()).await;

        // Pass 1: U1 has no verified candidate and is verified; U2 waits for it.
        assert_eq!(report.passes[0].mode, JudgeMode::Incremental);
        assert_eq!(report.passes[0].deferred, 1, "{report:#?}");
        assert_eq!(report.passes[0].merged, 0);
        // Pass 2: U2 against the now verified U1.
        assert_eq!(report.passes[1].merged, 1, "{report:#?}");
        assert_eq!(report.merged, 1);
        let survivor = db.get(u1).await;
        assert!(!survivor.deprecated && survivor.dedup_verified, "{survivor:?}");
        assert_eq!(db.get(u2).await.merged_into, Some(u1));
        assert!(db.live().await.iter().all(|m| m.dedup_verified));
    }

    async fn seed_003_merge_invalidation_requeues_the_survivor_with_its_new_text(db) {
        // U matches V; the merged text is close to W, which neither original was.
        const V: &str = "Run the linter before committing.";
        const U: &str = "Lint the code prior to each commit.";
        const W: &str = "Never commit code that fails the linter.";
        const CANON: &str = "Run the linter before every commit and never commit code that fails it.";
        let embedder = Arc::new(TableEmbedder::new().near(V, U, 0.85).near(W, CANON, 0.9));
        add_verified_filler(&db, embedder.as_ref()).await;
        let v = db.add(embedder.as_ref(), V).await;
        let w = db.add(embedder.as_ref(), W).await;
        db.verify(&[v, w]).await;
        let u = db.add(embedder.as_ref(), U).await;
        let server = Truth::new().cluster("lint", CANON, &[V, U, W]).server();

        let single = DedupOptions { max_passes: 1, ..DedupOptions::default() };
        let first = run(&db, embedder.clone(), openai_judge(&server), single).await;
        assert_eq!(first.merged, 1, "{first:#?}");
        let survivor = db.get(v).await;
        assert_eq!(survivor.content, CANON);
        assert!(!survivor.dedup_verified, "a survivor is re-queued after its merge");
        assert_eq!(survivor.dedup_last_error, None);
        assert_eq!(db.get(u).await.merged_into, Some(v));
        assert!(!db.get(w).await.deprecated, "W was no candidate of the old texts");

        let second = run(&db, embedder.clone(), openai_judge(&server), DedupOptions::default()).await;
        assert_eq!(second.merged, 1, "the re-queued survivor finds W with its new text: {second:#?}");
        let last = batch_of(server.requests().last().unwrap());
        let requeued = last.memories.iter().find(|m| m.text == CANON).expect("the survivor's new text was judged");
        assert!(requeued.status == MemoryStatus::Unverified || requeued.status == MemoryStatus::Verified);
        let live: Vec<_> = db.live().await.into_iter().filter(|m| !FILLER.contains(&m.content.as_str())).collect();
        assert_eq!(live.len(), 1, "{live:#?}");
        assert_eq!(live[0].occurrence_count, 3);
    }

    async fn seed_003_bridge_example_d_still_finds_b(db) {
        // A and B are verified and distinct; C duplicates A, D duplicates B; C and D are
        // close to each other, and D is close to A too.
        const A: &str = "Cache HTTP responses for five minutes.";
        const B: &str = "Cache database query results for an hour.";
        const C: &str = "Keep HTTP responses cached for 5 minutes.";
        const D: &str = "Query results from the database are cached for one hour.";
        // A and B are nearly orthogonal: C is at about 0.91 to A and 0.41 to B, D the
        // other way round, and C and D are at about 0.75 to each other.
        let embedder = Arc::new(TableEmbedder::new().blend(C, &[(A, 1.0), (B, 0.45)]).blend(D, &[(B, 1.0), (A, 0.45)]));
        add_verified_filler(&db, embedder.as_ref()).await;
        let a = db.add(embedder.as_ref(), A).await;
        let b = db.add(embedder.as_ref(), B).await;
        db.verify(&[a, b]).await;
        let c = db.add(embedder.as_ref(), C).await;
        let d = db.add(embedder.as_ref(), D).await;
        let server = Truth::new()
            .cluster("http", "Cache HTTP responses for five minutes (5 minutes).", &[A, C])
            .cluster("db", "Cache database query results for one hour.", &[B, D])
            .server();
        let report = run(&db, embedder.clone(), openai_judge(&server), DedupOptions::default()).await;
        assert_eq!(report.merged, 2, "{report:#?}");
        assert_eq!(db.get(c).await.merged_into, Some(a));
        assert_eq!(db.get(d).await.merged_into, Some(b), "D found B");
        assert!(!db.get(b).await.deprecated, "B survives");
        // Candidates only ever came from the verified pool.
        for request in server.requests() {
            let batch = batch_of(&request);
            if batch.mode == JudgeMode::Incremental {
                for edge in &batch.candidate_edges {
                    let target = batch.memories.iter().find(|m| m.id == edge.target_id).unwrap();
                    assert_eq!(target.status, MemoryStatus::Verified, "{batch:#?}");
                }
            }
        }
    }

    async fn a_dry_run_writes_nothing_and_proposes_the_merges(db) {
        const V: &str = "Use `cargo nextest run` for the test suite.";
        const U: &str = "Run the test suite with `cargo nextest run`.";
        let embedder = Arc::new(TableEmbedder::new().near(V, U, 0.9));
        add_verified_filler(&db, embedder.as_ref()).await;
        let v = db.add(embedder.as_ref(), V).await;
        db.verify(&[v]).await;
        let u = db.add(embedder.as_ref(), U).await;
        let before = db.state(embedder.model_id()).await;
        let server = Truth::new().cluster("nextest", "Run the test suite with `cargo nextest run`.", &[V, U]).server();
        let options = DedupOptions { dry_run: true, ..DedupOptions::default() };
        let report = run(&db, embedder.clone(), openai_judge(&server), options).await;
        assert!(report.dry_run);
        assert_eq!(db.state(embedder.model_id()).await, before, "a dry run wrote");
        assert_eq!(report.proposals.len(), 1, "{report:#?}");
        let proposal = &report.proposals[0];
        assert_eq!((proposal.survivor, proposal.absorbed.clone()), (v, vec![u]), "the verified memory survives");
        assert_eq!(proposal.confidence, 0.95);
        assert_eq!(report.merged, 0);
    }

    async fn limit_decides_at_most_n_memories(db) {
        let embedder = Arc::new(TableEmbedder::new());
        add_verified_filler(&db, embedder.as_ref()).await;
        for i in 0..3 {
            db.add(embedder.as_ref(), &format!("Unrelated lesson number {i} about something else.")).await;
        }
        let server = Truth::new().server();
        let options = DedupOptions { limit: Some(2), ..DedupOptions::default() };
        let report = run(&db, embedder.clone(), openai_judge(&server), options).await;
        assert_eq!(report.processed, 2, "{report:#?}");
        assert_eq!(report.skipped, 1);
        assert_eq!(report.retryable, 1);
        assert_eq!(db.live().await.iter().filter(|m| !m.dedup_verified).count(), 1);
    }

    async fn defect_9_limit_bounds_a_first_run_on_a_new_namespace(db) {
        const PAIRS: [(&str, &str); 3] = [
            ("Back up the database before a migration.", "Take a database backup before migrating."),
            ("Write release notes for every release.", "Every release gets release notes."),
            ("Use UTC timestamps in logs.", "Log timestamps in UTC."),
        ];
        let mut embedder = TableEmbedder::new();
        for (a, b) in PAIRS {
            embedder = embedder.near(a, b, 0.9);
        }
        let embedder = Arc::new(embedder);
        for (a, b) in PAIRS {
            db.add(embedder.as_ref(), a).await;
            db.add(embedder.as_ref(), b).await;
        }
        let mut truth = Truth::new();
        for (label, (a, b)) in ["backup", "notes", "utc"].into_iter().zip(PAIRS) {
            truth = truth.cluster(label, a, &[a, b]);
        }
        let server = truth.server();

        let options = DedupOptions { limit: Some(1), ..DedupOptions::default() };
        let report = run(&db, embedder.clone(), openai_judge(&server), options).await;
        assert_eq!(report.processed, 1, "{report:#?}");
        assert_eq!(report.merged, 0, "{report:#?}");
        assert_eq!(db.live().await.iter().filter(|m| !m.dedup_verified).count(), 5);

        // The next bounded run decides two more: the second memory of the first pair
        // meets its (now verified) duplicate.
        let options = DedupOptions { limit: Some(2), ..DedupOptions::default() };
        let report = run(&db, embedder.clone(), openai_judge(&server), options).await;
        assert!(report.processed <= 2, "{report:#?}");
        assert_eq!(report.merged, 1, "{report:#?}");
        assert_eq!(db.live().await.len(), 5);
        // Four left: the last two pairs, and the survivor the merge queued again.
        assert_eq!(db.live().await.iter().filter(|m| !m.dedup_verified).count(), 4);
    }

    async fn only_id_decides_one_memory(db) {
        const V: &str = "Squash commits before merging.";
        const U: &str = "Merge only squashed commits.";
        let embedder = Arc::new(TableEmbedder::new().near(V, U, 0.8));
        add_verified_filler(&db, embedder.as_ref()).await;
        let v = db.add(embedder.as_ref(), V).await;
        db.verify(&[v]).await;
        let u = db.add(embedder.as_ref(), U).await;
        let other = db.add(embedder.as_ref(), "Write the changelog entry with the change.").await;
        let server = Truth::new().cluster("squash", V, &[V, U]).server();
        let options = DedupOptions { only_id: Some(u), ..DedupOptions::default() };
        let report = run(&db, embedder.clone(), openai_judge(&server), options).await;
        assert_eq!(report.merged, 1, "{report:#?}");
        assert!(!db.get(other).await.dedup_verified, "other memories are left alone");
    }
}

mod in_flight {
    use super::*;

    /// A judge that answers from the truth after a delay and counts calls in flight.
    #[derive(Debug)]
    struct SlowJudge {
        truth: Truth,
        delay: Duration,
        current: AtomicUsize,
        peak: AtomicUsize,
    }

    #[async_trait]
    impl Judge for SlowJudge {
        fn name(&self) -> &str {
            "slow"
        }

        fn model(&self) -> &str {
            ""
        }

        async fn judge(&self, batch: &JudgeBatch) -> Result<JudgeReply, JudgeFailure> {
            let now = self.current.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            self.current.fetch_sub(1, Ordering::SeqCst);
            Ok(JudgeReply { response: self.truth.answer(batch), usage: Default::default() })
        }
    }

    backend_tests! {
        async fn judge_calls_run_in_flight_up_to_the_setting_and_apply_one_at_a_time(db) {
            // Eight independent pairs: eight batches of one pair each.
            let mut embedder = TableEmbedder::new();
            let mut truth = Truth::new();
            let pairs: Vec<(String, String)> = (0..8)
                .map(|i| (format!("Verified rule number {i} about topic {i}."), format!("Rule {i} restated about topic {i}.")))
                .collect();
            for (v, u) in &pairs {
                embedder = embedder.near(v, u, 0.9);
            }
            for (i, (v, u)) in pairs.iter().enumerate() {
                let label: &'static str = Box::leak(format!("pair{i}").into_boxed_str());
                truth = truth.cluster(label, v, &[v.as_str(), u.as_str()]);
            }
            let embedder = Arc::new(embedder);
            let mut verified = Vec::new();
            for (v, _) in &pairs {
                verified.push(db.add(embedder.as_ref(), v).await);
            }
            db.verify(&verified).await;
            for (_, u) in &pairs {
                db.add(embedder.as_ref(), u).await;
            }
            let judge = Arc::new(SlowJudge { truth, delay: Duration::from_millis(150), current: AtomicUsize::new(0), peak: AtomicUsize::new(0) });
            let options = DedupOptions { batch_size: 1, in_flight: 4, ..DedupOptions::default() };
            let report = run(&db, embedder.clone(), judge.clone(), options).await;
            assert_eq!(report.merged, 8, "{report:#?}");
            assert_eq!(judge.peak.load(Ordering::SeqCst), 4, "four calls in flight at once");
            assert_eq!(db.live().await.len(), 8);
        }
    }
}
