//! Unit tests of the pair judge choice: which candidate wins, and the verdict.

use super::*;
use crate::LearnedPairJudge;

const STANDING: &str = "The user has a standing 1:1 with their manager every Thursday at 14:00.";
const MOVED: &str = "The user has a standing 1:1 with their manager every Thursday at 16:00.";
const PARAPHRASE: &str = "Every Thursday at 14:00 the user has a standing 1:1 with their manager.";
const OTHER: &str = "Deployments are frozen on Fridays.";

fn candidate(id: u32, cosine: f32, text: &str) -> JudgeCandidate<'_, u32> {
    JudgeCandidate { id, cosine, text }
}

#[test]
fn cosine_judge_takes_the_nearest_at_or_above_the_threshold() {
    let judge = PairJudgeChoice::Cosine;
    assert_eq!(judge.floor(0.9), 0.9);
    assert_eq!(judge.candidates(), 1);
    let decision = judge.decide(MOVED, &[candidate(1, 0.99, STANDING)], 0.9);
    let (id, judgement) = decision.duplicate.expect("a duplicate");
    assert_eq!((id, judgement.verdict), (1, PairVerdict::Duplicate));
    assert_eq!(judgement.reasons, ["cosine 0.990 reaches the threshold 0.90"]);

    let below = judge.decide(MOVED, &[candidate(1, 0.85, STANDING)], 0.9);
    assert_eq!(
        below,
        PairDecision { duplicate: None, nearest: None, fallback: None },
        "below the floor nothing is judged"
    );
}

#[test]
fn local_judge_vetoes_a_pair_above_the_threshold() {
    let judge = PairJudgeChoice::local_builtin();
    let decision = judge.decide(MOVED, &[candidate(1, 0.99, STANDING)], 0.9);
    assert!(decision.duplicate.is_none(), "{decision:?}");
    let (id, judgement) = decision.nearest.expect("the vetoed pair is reported");
    assert_eq!((id, judgement.verdict), (1, PairVerdict::Related));
    // The reasons name which text says what: a review lists the stored memory first.
    assert!(
        judgement.reasons.iter().any(|r| r == "specifics differ: 16:00 in the new text, 14:00 in the stored text"),
        "{judgement:?}"
    );
    let single = judge.judge_pair(MOVED, STANDING, 0.99, 0.9);
    assert_eq!(single.reasons, judgement.reasons);
}

#[test]
fn local_judge_confirms_a_gray_band_duplicate() {
    let judge = PairJudgeChoice::local_builtin();
    let floor = judge.floor(0.9);
    assert_eq!(floor, LocalJudgeParams::builtin().duplicate_floor.min(0.9));
    let decision = judge.decide(PARAPHRASE, &[candidate(7, 0.8, STANDING)], 0.9);
    let (id, judgement) = decision.duplicate.expect("a gray-band duplicate");
    assert_eq!(id, 7);
    assert!(judgement.reasons[0].contains("nothing sets the texts apart"), "{judgement:?}");
    // Below the judge's floor nothing is judged.
    let low = judge.decide(PARAPHRASE, &[candidate(7, floor - 0.01, STANDING)], 0.9);
    assert_eq!(low, PairDecision { duplicate: None, nearest: None, fallback: None });
}

#[test]
fn the_confirmed_duplicate_of_highest_cosine_wins_over_a_closer_vetoed_one() {
    let judge = PairJudgeChoice::local_builtin();
    let candidates = [candidate(1, 0.99, MOVED), candidate(2, 0.7, OTHER), candidate(3, 0.93, PARAPHRASE)];
    let decision = judge.decide(STANDING, &candidates, 0.9);
    let (id, judgement) = decision.duplicate.clone().expect("a duplicate");
    assert_eq!(id, 3, "{decision:?}");
    assert_eq!(judgement.cosine, 0.93);
    assert_eq!(decision.nearest, None);
    assert_eq!(decision.judgement().map(|j| j.verdict), Some(PairVerdict::Duplicate));

    // Two confirmed duplicates: the higher cosine wins, whatever the order.
    let both = [candidate(4, 0.8, PARAPHRASE), candidate(5, 0.95, STANDING)];
    assert_eq!(judge.decide(STANDING, &both, 0.9).duplicate.map(|(id, _)| id), Some(5));
}

#[test]
fn a_threshold_below_the_judge_floor_still_lets_only_vetoes_keep_pairs_apart() {
    let judge = PairJudgeChoice::local_builtin();
    let floor = LocalJudgeParams::builtin().duplicate_floor;
    let threshold = floor - 0.1;
    let cosine = floor - 0.05;
    let judgement = judge.judge_pair(PARAPHRASE, STANDING, cosine, threshold);
    assert_eq!(judgement.verdict, PairVerdict::Duplicate, "{judgement:?}");
    assert_eq!(judgement.cosine, cosine);
    assert!(judgement.reasons[0].contains("reaches the threshold"), "{judgement:?}");
    let vetoed = judge.judge_pair(MOVED, STANDING, cosine, threshold);
    assert_eq!(vetoed.verdict, PairVerdict::Related, "{vetoed:?}");
}

#[test]
fn names_parse_and_params_files_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(PairJudgeChoice::from_name("Cosine", "k", None, "p").unwrap(), PairJudgeChoice::Cosine);
    let local = PairJudgeChoice::from_name("local", "k", None, "p").unwrap();
    assert_eq!(local.name(), "local");
    let err = PairJudgeChoice::from_name("llm", "memdedup.toml: dedup.judge", None, "p").unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid configuration: memdedup.toml: dedup.judge: expected \"learned\", \"cosine\" or \"local\", got \"llm\""
    );

    let missing = dir.path().join("missing.json");
    let err = PairJudgeChoice::local(Some(&missing), "--judge-params").unwrap_err().to_string();
    assert!(
        err.starts_with("invalid configuration: --judge-params: cannot read ") && err.contains("missing.json"),
        "{err}"
    );

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"duplicate_floor": 1.5, "related_floor": 0.4, "vetoes": []}"#).unwrap();
    let err = PairJudgeChoice::local(Some(&bad), "--judge-params").unwrap_err().to_string();
    assert!(err.contains("bad.json") && err.contains("duplicate_floor 1.5 is outside [0, 1]"), "{err}");

    let good = dir.path().join("good.json");
    std::fs::write(&good, r#"{"duplicate_floor": 0.7, "related_floor": 0.4, "vetoes": ["negation_flip"]}"#).unwrap();
    let judge = PairJudgeChoice::local(Some(&good), "--judge-params").unwrap();
    assert_eq!(judge.floor(0.9), 0.7);
    assert_eq!(format!("{judge:?}").split('(').next(), Some("Local"));
}

/// A scorer whose logits depend on the second text only: "dup" texts read as duplicates,
/// "maybe" texts sit in the uncertain band, anything else as related.
#[derive(Debug)]
struct FakeScorer {
    settings: dedup_core::LearnedJudgeSettings,
    calls: std::sync::atomic::AtomicUsize,
    prepared: std::sync::atomic::AtomicBool,
}

impl FakeScorer {
    fn new() -> FakeScorer {
        let json = format!(
            r#"{{"format": 1, "model_file": "pair_judge.onnx", "model_sha256": "{sha}", "weights": "int8",
                "max_len": 96, "order": "canonical", "relations": ["unique", "related", "contradiction", "duplicate"],
                "decision": {{"features": ["duplicate_log_odds", "cosine"], "weights": [1.0, 0.0], "bias": 0.0}},
                "candidate_floor": 0.3, "candidates": 3, "duplicate_threshold": 0.9, "uncertain_threshold": 0.5,
                "precision_target": 0.98, "seed": 13, "base": "test"}}"#,
            sha = "0".repeat(64)
        );
        FakeScorer {
            settings: dedup_core::LearnedJudgeSettings::parse(&json).unwrap(),
            calls: std::sync::atomic::AtomicUsize::new(0),
            prepared: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl dedup_core::PairScorer for FakeScorer {
    fn settings(&self) -> &dedup_core::LearnedJudgeSettings {
        &self.settings
    }

    fn prepare_for_many(&self) {
        self.prepared.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn scores(&self, pairs: &[(&str, &str)]) -> std::result::Result<Vec<dedup_core::PairScores>, String> {
        self.calls.fetch_add(pairs.len(), std::sync::atomic::Ordering::SeqCst);
        Ok(pairs
            .iter()
            .map(|(_, b)| {
                if b.starts_with("dup") {
                    [-4.0, -4.0, -4.0, 4.0]
                } else if b.starts_with("maybe") {
                    [-4.0, 0.0, -4.0, 1.0]
                } else {
                    [-4.0, 4.0, -4.0, -4.0]
                }
            })
            .map(|l| dedup_core::PairScores { logits: Some(l), tuned_cosine: None })
            .collect())
    }
}

fn learned(scorer: &Arc<FakeScorer>) -> PairJudgeChoice {
    PairJudgeChoice::Learned(LearnedPairJudge::with_scorer(scorer.clone()))
}

#[test]
fn learned_judge_picks_the_duplicate_of_highest_probability_whatever_the_cosine_threshold() {
    let scorer = Arc::new(FakeScorer::new());
    let judge = learned(&scorer);
    assert_eq!(judge.name(), "learned");
    assert_eq!(judge.floor(0.9), 0.3, "the model's candidate floor, not the cosine threshold");
    assert_eq!(judge.candidates(), 3, "the model's own number of candidates");
    let decision = judge.decide(
        "new text",
        &[candidate(1, 0.95, "other claim"), candidate(2, 0.6, "dup text"), candidate(3, 0.2, "dup but far")],
        0.9,
    );
    let (id, judgement) = decision.duplicate.expect("a duplicate");
    assert_eq!(id, 2, "a duplicate below the cosine threshold, above the floor");
    assert!(judgement.probability.unwrap() > 0.9, "{judgement:?}");
    assert_eq!(decision.nearest, None);
    assert_eq!(decision.fallback, None);
    assert_eq!(scorer.calls.load(std::sync::atomic::Ordering::SeqCst), 2, "below the floor is never scored");
}

#[test]
fn learned_judge_reports_the_uncertain_candidate_before_a_closer_related_one() {
    let scorer = Arc::new(FakeScorer::new());
    let decision =
        learned(&scorer).decide("new text", &[candidate(1, 0.97, "other claim"), candidate(2, 0.7, "maybe same")], 0.9);
    assert_eq!(decision.duplicate, None);
    let (id, judgement) = decision.nearest.expect("a nearest");
    assert_eq!(id, 2);
    assert_eq!(judgement.verdict, PairVerdict::Uncertain, "{judgement:?}");
    let related = learned(&scorer).decide("new text", &[candidate(1, 0.97, "other claim")], 0.98);
    assert_eq!(related.nearest.unwrap().1.verdict, PairVerdict::Related, "a cosine of 0.97 is not a duplicate");
}

#[test]
fn learned_judge_holds_for_review_a_pair_cosine_would_merge() {
    let scorer = Arc::new(FakeScorer::new());
    let decision = learned(&scorer).decide("new text", &[candidate(1, 0.97, "other claim")], 0.9);
    assert_eq!(decision.duplicate, None);
    let (id, judgement) = decision.nearest.expect("a nearest");
    assert_eq!((id, judgement.verdict), (1, PairVerdict::Uncertain), "{judgement:?}");
    assert!(
        judgement.reasons[0].contains("reaches the threshold 0.90 but the learned judge disagrees"),
        "{judgement:?}"
    );
    let single = learned(&scorer).judge_pair("new text", "other claim", 0.97, 0.9);
    assert_eq!(single.verdict, PairVerdict::Uncertain, "{single:?}");
}

#[test]
fn learned_judge_reasons_name_the_new_and_the_stored_text() {
    let scorer = Arc::new(FakeScorer::new());
    let decision = learned(&scorer).decide("other claim at 5 MB", &[candidate(1, 0.97, "other claim at 1 MB")], 0.9);
    let (_, judgement) = decision.nearest.expect("a nearest");
    assert!(
        judgement.reasons.iter().any(|r| r == "noted: specifics differ: 5 in the new text, 1 in the stored text"),
        "{judgement:?}"
    );
    assert!(judgement.reasons.iter().all(|r| !r.contains(" vs ")), "{judgement:?}");
}

#[test]
fn learned_judge_without_a_model_decides_by_cosine_and_says_why() {
    let judge = PairJudgeChoice::from_name("Learned", "--judge", None, "--judge-params").unwrap();
    assert_eq!(judge.name(), "learned");
    assert_eq!(judge.floor(0.9), 0.9, "no model: the cosine threshold");
    assert_eq!(judge.candidates(), 1);
    assert!(!judge.reads_texts());
    let decision = judge.decide("new", &[candidate(1, 0.95, "dup text")], 0.9);
    assert_eq!(decision.duplicate.as_ref().map(|(id, _)| *id), Some(1), "cosine 0.95 >= 0.90");
    let fallback = decision.fallback.expect("the reason cosine decided");
    assert!(fallback.contains("learned judge is unavailable") && fallback.contains("cosine decided"), "{fallback}");
    let single = judge.judge_pair("new", "other", 0.5, 0.9);
    assert_eq!(single.verdict, PairVerdict::Unique);
    assert!(single.reasons[0].contains("unavailable"), "{:?}", single.reasons);
}

/// A learned judge (floor 0.3) whose fake model counts its loads.
fn counting_judge() -> (PairJudgeChoice, Arc<std::sync::atomic::AtomicUsize>) {
    let loads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = loads.clone();
    let judge = PairJudgeChoice::Learned(LearnedPairJudge::with_loader(
        0.3,
        8,
        Box::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(Arc::new(FakeScorer::new()) as Arc<dyn dedup_core::PairScorer>)
        }),
    ));
    (judge, loads)
}

#[test]
fn learned_judge_loads_its_model_once_on_first_use() {
    let (judge, loads) = counting_judge();
    assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing loaded before a pair is judged");
    let copy = judge.clone();
    assert!(judge.judge_pair("new", "dup text", 0.8, 0.9).is_duplicate());
    assert!(copy.judge_pair("new", "dup again", 0.8, 0.9).is_duplicate());
    assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 1, "clones share one load");
    let failing = PairJudgeChoice::Learned(LearnedPairJudge::with_loader(
        0.3,
        8,
        Box::new(|| Err("pair_judge.onnx is missing".into())),
    ));
    let judgement = failing.judge_pair("new", "dup text", 0.95, 0.9);
    assert!(judgement.reasons[0].contains("pair_judge.onnx is missing"), "{:?}", judgement.reasons);
    assert_eq!(failing.floor(0.9), 0.9, "after a failed load: the cosine threshold");
}

#[test]
fn learned_judge_loaded_in_the_background_is_loaded_once_and_its_guard_waits() {
    use std::sync::atomic::Ordering::SeqCst;
    let loads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let scorer = Arc::new(FakeScorer::new());
    let (counter, model) = (loads.clone(), scorer.clone());
    let judge = LearnedPairJudge::with_loader(
        0.3,
        8,
        Box::new(move || {
            // A slow load: the pair below is judged while it runs and waits for it.
            std::thread::sleep(std::time::Duration::from_millis(50));
            counter.fetch_add(1, SeqCst);
            Ok(model.clone() as Arc<dyn dedup_core::PairScorer>)
        }),
    );
    let first = judge.load_in_background(true);
    let second = judge.load_in_background(true);
    let choice = PairJudgeChoice::Learned(judge.clone());
    assert!(choice.judge_pair("new", "dup text", 0.8, 0.9).is_duplicate());
    drop((first, second));
    assert_eq!(loads.load(SeqCst), 1, "one load, shared by the background thread and the check");
    assert!(scorer.prepared.load(SeqCst), "a long-lived load gets ready for many pairs");
    drop(judge.load_in_background(false));
    assert_eq!(loads.load(SeqCst), 1, "a loaded judge is not loaded again");

    let (choice, loads) = counting_judge();
    let judge = choice.learned().expect("a learned judge").clone();
    drop(judge.load_in_background(false));
    assert_eq!(loads.load(SeqCst), 1, "loaded before any pair is judged");
    let failing = LearnedPairJudge::with_loader(0.3, 8, Box::new(|| Err("pair_judge.onnx is missing".into())));
    drop(failing.load_in_background(false));
    assert_eq!(failing.floor(), None, "a failed background load is remembered: checks decide by cosine");
}

#[test]
fn learned_judge_does_not_load_its_model_when_no_candidate_reaches_the_floor() {
    let (judge, loads) = counting_judge();
    let far = [candidate(1, 0.29, "dup text"), candidate(2, -0.1, "other")];
    let decision = judge.decide("new", &far, 0.9);
    assert!(decision.duplicate.is_none() && decision.nearest.is_none() && decision.fallback.is_none(), "{decision:?}");
    assert!(judge.decide::<u32>("new", &[], 0.9).duplicate.is_none());
    assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing to read: no model loaded");
    // A threshold under the floor lets cosine call a pair between the two a duplicate when
    // the model is missing, so that pair is still taken to the model.
    let decision = judge.decide("new", &[candidate(1, 0.25, "dup text")], 0.2);
    assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 1, "{decision:?}");
    let close = judge.decide("new", &[candidate(1, 0.8, "dup text")], 0.9);
    assert_eq!(close.duplicate.as_ref().map(|(id, _)| *id), Some(1), "{close:?}");
    assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 1, "loaded once");
}
