//! Unit tests of the pair judge choice: which candidate wins, and the verdict.

use super::*;

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
    assert_eq!(below, PairDecision { duplicate: None, nearest: None }, "below the floor nothing is judged");
}

#[test]
fn local_judge_vetoes_a_pair_above_the_threshold() {
    let judge = PairJudgeChoice::local_builtin();
    let decision = judge.decide(MOVED, &[candidate(1, 0.99, STANDING)], 0.9);
    assert!(decision.duplicate.is_none(), "{decision:?}");
    let (id, judgement) = decision.nearest.expect("the vetoed pair is reported");
    assert_eq!((id, judgement.verdict), (1, PairVerdict::Related));
    assert!(judgement.reasons.iter().any(|r| r.contains("14:00") && r.contains("16:00")), "{judgement:?}");
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
    assert_eq!(low, PairDecision { duplicate: None, nearest: None });
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
    assert_eq!(err, "invalid configuration: memdedup.toml: dedup.judge: expected \"cosine\" or \"local\", got \"llm\"");

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
