//! The batch judge on hand-made batches: cosines are given, as the runner would give them.

use dedup_core::{CandidateEdge, JudgeMode, JudgeRules, ValidatedResponse, validate_response};

use super::*;

const AT_14: &str = "The user has a standing 1:1 with their manager every Thursday at 14:00.";
const AT_16: &str = "The user has a standing 1:1 with their manager every Thursday at 16:00.";
const DOCS_A: &str = "Update the docs after every code change.";
const DOCS_B: &str = "After changing code, bring the documentation up to date.";
const LUNCH: &str = "The office cafeteria serves lunch between noon and two on weekdays.";

fn memory(id: i64, status: MemoryStatus, text: &str) -> JudgeMemory {
    JudgeMemory {
        id,
        status,
        text: text.to_owned(),
        kind: "lesson".to_owned(),
        metadata: serde_json::Map::new(),
        occurrence_count: 1,
    }
}

fn edge(source_id: i64, target_id: i64, similarity: f32) -> CandidateEdge {
    CandidateEdge { source_id, target_id, similarity }
}

fn batch(mode: JudgeMode, memories: Vec<JudgeMemory>, candidate_edges: Vec<CandidateEdge>) -> JudgeBatch {
    JudgeBatch { mode, batch_id: "b1".to_owned(), rules: JudgeRules::default(), memories, candidate_edges }
}

/// The thursday pair (vetoed: other numbers) and the docs pair (paraphrases), plus a
/// memory with no edge; all unverified.
fn bootstrap_batch() -> JudgeBatch {
    use MemoryStatus::Unverified;
    batch(
        JudgeMode::Bootstrap,
        vec![
            memory(1, Unverified, AT_14),
            memory(2, Unverified, AT_16),
            memory(3, Unverified, DOCS_A),
            memory(4, Unverified, DOCS_B),
            memory(5, Unverified, LUNCH),
        ],
        vec![edge(1, 2, 0.97), edge(3, 4, 0.83), edge(2, 3, 0.51)],
    )
}

fn validated(batch: &JudgeBatch, judge: &LocalBatchJudge) -> ValidatedResponse {
    let response = judge.respond(batch);
    validate_response(batch, response.clone(), &ContractLimits::default())
        .unwrap_or_else(|e| panic!("the reply breaks the contract: {e}\n{response:#?}"))
}

#[test]
fn only_the_true_duplicate_pair_is_grouped_in_bootstrap_mode() {
    let batch = bootstrap_batch();
    let valid = validated(&batch, &LocalBatchJudge::builtin());
    assert_eq!(valid.groups.len(), 1, "{valid:#?}");
    let group = &valid.groups[0];
    assert_eq!(group.ids, vec![3, 4]);
    assert_eq!(group.canonical_text, DOCS_A, "the survivor (lowest id, all else equal) keeps its text");
    assert_eq!(group.confidence, f64::from(0.83f32), "the lowest cosine of the group");
    assert!(group.reason.contains("nothing sets the texts apart"), "{}", group.reason);
    assert_eq!(valid.no_match_ids, vec![1, 2, 5]);
    assert!(
        valid.notes.iter().any(|n| n.starts_with("memories 1 and 2 are related") && n.contains("14")),
        "the vetoed pair is explained: {:?}",
        valid.notes
    );
}

#[test]
fn incremental_groups_hold_an_unverified_memory_and_keep_the_verified_text() {
    use MemoryStatus::{Unverified, Verified};
    let batch = batch(
        JudgeMode::Incremental,
        vec![
            memory(1, Verified, AT_14),
            memory(2, Unverified, AT_16),
            memory(3, Unverified, DOCS_A),
            memory(4, Verified, DOCS_B),
        ],
        vec![edge(2, 1, 0.97), edge(3, 4, 0.83)],
    );
    let valid = validated(&batch, &LocalBatchJudge::builtin());
    assert_eq!(valid.groups.len(), 1, "{valid:#?}");
    assert_eq!(valid.groups[0].ids, vec![3, 4]);
    assert_eq!(valid.groups[0].canonical_text, DOCS_B, "the verified member survives");
    assert_eq!(valid.no_match_ids, vec![2], "only unverified ids are listed");
}

#[test]
fn the_reply_does_not_depend_on_the_order_of_memories_and_edges() {
    let batch = bootstrap_batch();
    let judge = LocalBatchJudge::builtin();
    let expected = judge.respond(&batch);
    for turn in 0..batch.memories.len() {
        let mut shuffled = batch.clone();
        shuffled.memories.rotate_left(turn);
        shuffled.candidate_edges.rotate_left(turn % batch.candidate_edges.len());
        if turn % 2 == 1 {
            shuffled.memories.reverse();
            for e in &mut shuffled.candidate_edges {
                std::mem::swap(&mut e.source_id, &mut e.target_id);
            }
        }
        assert_eq!(judge.respond(&shuffled), expected, "rotation {turn}");
    }
}

/// Three paraphrases: a–b and b–c confirmed; a–c at `ac`.
fn triangle(ac: f32) -> JudgeBatch {
    use MemoryStatus::Unverified;
    batch(
        JudgeMode::Bootstrap,
        vec![
            memory(7, Unverified, "Run the formatter before every commit."),
            memory(8, Unverified, "Always run the formatter before you commit."),
            memory(9, Unverified, "Format the code before committing it."),
        ],
        vec![edge(7, 8, 0.93), edge(8, 9, 0.88), edge(7, 9, ac)],
    )
}

#[test]
fn groups_use_complete_linkage_over_confirmed_pairs() {
    let judge = LocalBatchJudge::builtin();
    let all = validated(&triangle(0.86), &judge);
    assert_eq!(all.groups.len(), 1, "{all:#?}");
    assert_eq!(all.groups[0].ids, vec![7, 8, 9]);
    assert_eq!(all.groups[0].confidence, f64::from(0.86f32));
    assert!(all.groups[0].reason.starts_with("all 3 pairs confirmed; weakest 7-9: "), "{}", all.groups[0].reason);

    // a–c below the confidence hint: not confirmed, so c cannot join; the strongest pair
    // is grouped first.
    let chain = validated(&triangle(0.7), &judge);
    assert_eq!(chain.groups.len(), 1, "{chain:#?}");
    assert_eq!(chain.groups[0].ids, vec![7, 8]);
    assert_eq!(chain.no_match_ids, vec![9]);
}

#[test]
fn pairs_below_the_confidence_hint_are_not_grouped() {
    let mut batch = bootstrap_batch();
    batch.rules.min_confidence_hint = 0.9;
    let valid = validated(&batch, &LocalBatchJudge::builtin());
    assert!(valid.groups.is_empty(), "{valid:#?}");
    batch.rules.min_confidence_hint = 0.55;
    assert_eq!(validated(&batch, &LocalBatchJudge::builtin()).groups.len(), 1);
}

#[test]
fn a_survivor_text_over_the_sentence_limit_gives_way_to_one_that_fits() {
    use MemoryStatus::Unverified;
    let long = "Run the formatter before every commit. It keeps diffs small. Reviewers expect it.";
    let mut members =
        vec![memory(1, Unverified, long), memory(2, Unverified, "Always run the formatter before you commit.")];
    members[0].occurrence_count = 5;
    let b = batch(JudgeMode::Bootstrap, members.clone(), vec![edge(1, 2, 0.9)]);
    let valid = validated(&b, &LocalBatchJudge::builtin());
    assert_eq!(valid.groups.len(), 1, "{valid:#?}");
    assert_eq!(valid.groups[0].canonical_text, "Always run the formatter before you commit.");

    // No member fits: no group, and a note says why.
    members[1].text = "Always run the formatter before you commit. It keeps diffs small. Really.".to_owned();
    let b = batch(JudgeMode::Bootstrap, members, vec![edge(1, 2, 0.9)]);
    let valid = validated(&b, &LocalBatchJudge::builtin());
    assert!(valid.groups.is_empty(), "{valid:#?}");
    assert_eq!(valid.no_match_ids, vec![1, 2]);
    assert!(valid.notes.iter().any(|n| n.contains("sentences")), "{:?}", valid.notes);
}

#[test]
fn the_group_cap_is_respected() {
    let mut batch = triangle(0.2);
    batch.memories.push(memory(10, MemoryStatus::Unverified, DOCS_A));
    batch.memories.push(memory(11, MemoryStatus::Unverified, DOCS_B));
    batch.candidate_edges.push(edge(10, 11, 0.95));
    batch.rules.max_groups = 1;
    let valid = validated(&batch, &LocalBatchJudge::builtin());
    assert_eq!(valid.groups.len(), 1, "{valid:#?}");
    assert_eq!(valid.groups[0].ids, vec![10, 11], "the strongest group first");
}

#[test]
fn the_model_names_the_parameters() {
    assert_eq!(LocalBatchJudge::builtin().model(), "local-judge/builtin");
    assert_eq!(LocalBatchJudge::builtin().name(), "local");
    let mut params = LocalJudgeParams::builtin();
    let custom = LocalBatchJudge::with_params(params.clone());
    let model = custom.model().to_owned();
    assert!(model.starts_with("local-judge/") && model.len() == "local-judge/".len() + 16, "{model}");
    params.duplicate_floor = 0.7;
    assert_ne!(LocalBatchJudge::with_params(params).model(), model, "other parameters, another digest");
    let floor = LocalJudgeParams::builtin().duplicate_floor;
    assert_eq!(LocalBatchJudge::builtin().default_min_confidence(), Some(f64::from(floor)));
}

#[test]
fn parameter_files_are_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    std::fs::write(&good, r#"{"duplicate_floor": 0.7, "related_floor": 0.4, "vetoes": ["specifics_differ"]}"#).unwrap();
    let judge = LocalBatchJudge::from_params_file(&good).unwrap();
    assert_eq!(judge.params().duplicate_floor, 0.7);

    let missing = dir.path().join("missing.json");
    let err = LocalBatchJudge::from_params_file(&missing).unwrap_err().to_string();
    assert!(err.contains("cannot read judge parameters") && err.contains("missing.json"), "{err}");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"duplicate_floor": 1.5, "related_floor": 0.4, "vetoes": []}"#).unwrap();
    let err = LocalBatchJudge::from_params_file(&bad).unwrap_err().to_string();
    assert!(err.contains("bad.json") && err.contains("duplicate_floor"), "{err}");
}

#[test]
fn long_reasons_are_cut_to_the_limit() {
    let judge =
        LocalBatchJudge::builtin().with_limits(ContractLimits { max_reason_chars: 20, ..ContractLimits::default() });
    let response = judge.respond(&bootstrap_batch());
    assert_eq!(response.groups[0].reason.chars().count(), 20, "{:?}", response.groups[0].reason);
    assert!(response.groups[0].reason.ends_with('…'));
}

/// A learned-judge model for tests: the docs pair reads as a duplicate, the thursday pair
/// sits in the uncertain band, anything else is related.
#[derive(Debug)]
struct TableScorer(dedup_core::LearnedJudgeSettings);

impl TableScorer {
    fn new() -> TableScorer {
        let json = format!(
            r#"{{"format": 1, "model_file": "pair_judge.onnx", "model_sha256": "{sha}", "weights": "int8",
                "max_len": 96, "order": "canonical", "relations": ["unique", "related", "contradiction", "duplicate"],
                "decision": {{"features": ["duplicate_log_odds", "cosine"], "weights": [1.0, 0.0], "bias": 0.0}},
                "candidate_floor": 0.3, "duplicate_threshold": 0.9, "uncertain_threshold": 0.5,
                "precision_target": 0.98, "seed": 13, "base": "test"}}"#,
            sha = "ab".repeat(32)
        );
        TableScorer(dedup_core::LearnedJudgeSettings::parse(&json).unwrap())
    }
}

impl PairScorer for TableScorer {
    fn settings(&self) -> &dedup_core::LearnedJudgeSettings {
        &self.0
    }

    fn scores(&self, pairs: &[(&str, &str)]) -> std::result::Result<Vec<dedup_core::PairScores>, String> {
        Ok(pairs
            .iter()
            .map(|&(a, b)| {
                let has = |t: &str| a == t || b == t;
                if has(DOCS_A) && has(DOCS_B) {
                    [-4.0, -4.0, -4.0, 4.0]
                } else if has(AT_14) && has(AT_16) {
                    [-4.0, 0.0, -4.0, 1.0]
                } else {
                    [-4.0, 4.0, -4.0, -4.0]
                }
            })
            .map(|l| dedup_core::PairScores { logits: Some(l), tuned_cosine: None })
            .collect())
    }
}

#[test]
fn learned_judge_groups_the_probable_pair_and_lists_the_uncertain_one_for_review() {
    let batch = bootstrap_batch();
    let judge = LocalBatchJudge::learned(Arc::new(TableScorer::new()));
    assert_eq!((judge.name(), judge.model()), (LEARNED_JUDGE_NAME, "learned-judge/abababababababab"));
    assert_eq!(judge.default_min_confidence(), Some(f64::from(0.9f32)));
    let valid = validated(&batch, &judge);
    assert_eq!(valid.groups.len(), 1, "{valid:#?}");
    assert_eq!(valid.groups[0].ids, vec![3, 4]);
    assert!(valid.groups[0].confidence > 0.9, "the pair's probability: {valid:#?}");
    let response = judge.respond(&batch);
    let uncertain: Vec<&String> = response.notes.iter().filter(|n| n.contains("uncertain")).collect();
    assert_eq!(uncertain.len(), 1, "{:?}", response.notes);
    assert!(uncertain[0].starts_with("memories 1 and 2 may be duplicates"), "{uncertain:?}");
}

#[derive(Debug)]
struct BrokenScorer(dedup_core::LearnedJudgeSettings);

impl PairScorer for BrokenScorer {
    fn settings(&self) -> &dedup_core::LearnedJudgeSettings {
        &self.0
    }

    fn scores(&self, _: &[(&str, &str)]) -> std::result::Result<Vec<dedup_core::PairScores>, String> {
        Err("the model file is gone".to_owned())
    }
}

#[tokio::test]
async fn learned_judge_whose_model_fails_reports_a_failure_and_groups_nothing() {
    let batch = bootstrap_batch();
    let judge = LocalBatchJudge::learned(Arc::new(BrokenScorer(TableScorer::new().0)));
    let failure = judge.judge(&batch).await.unwrap_err();
    assert!(failure.message.contains("the model file is gone"), "{failure}");
    let response = judge.respond(&batch);
    assert!(response.groups.is_empty(), "{response:?}");
    assert!(response.notes[0].contains("the learned judge failed"), "{response:?}");
}
