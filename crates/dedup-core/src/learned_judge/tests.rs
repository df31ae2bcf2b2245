//! The learned judge's decision: probabilities, bands, same texts, contrasts as explanation, bad settings.

use super::*;

fn settings_json(duplicate: f32, uncertain: f32) -> String {
    format!(
        r#"{{"format": 1, "model_file": "pair_judge.onnx", "model_sha256": "{sha}", "weights": "int8",
            "max_len": 96, "order": "canonical", "relations": ["unique", "related", "contradiction", "duplicate"],
            "decision": {{"features": ["duplicate_log_odds", "cosine"], "weights": [1.0, 2.0], "bias": -1.0}},
            "candidate_floor": 0.3, "duplicate_threshold": {duplicate}, "uncertain_threshold": {uncertain},
            "precision_target": 0.98, "seed": 13, "base": "all-MiniLM-L6-v2"}}"#,
        sha = "0".repeat(64)
    )
}

fn settings() -> LearnedJudgeSettings {
    LearnedJudgeSettings::parse(&settings_json(0.9, 0.5)).unwrap()
}

#[test]
fn probability_is_the_logistic_of_log_odds_and_cosine() {
    let s = settings();
    // Equal logits: duplicate log-odds = -ln 3; z = -ln 3 + 2 * 0.5 - 1.
    let p = s.probability(&[0.0; 4], 0.5);
    let z = -(3.0f64).ln();
    assert!((f64::from(p) - 1.0 / (1.0 + (-z).exp())).abs() < 1e-6, "{p}");
    // More duplicate logit or more cosine never lowers it.
    assert!(s.probability(&[0.0, 0.0, 0.0, 2.0], 0.5) > p);
    assert!(s.probability(&[0.0; 4], 0.9) > p);
    assert!(s.probability(&[0.0, 0.0, 3.0, 0.0], 0.5) < p);
}

#[test]
fn bands_give_duplicate_uncertain_related_and_unique() {
    let s = settings();
    let dup = s.decide(&[-3.0, -3.0, -3.0, 6.0], 0.9, Vec::new());
    assert_eq!(dup.verdict, PairVerdict::Duplicate, "{dup:?}");
    assert!(dup.probability.unwrap() >= 0.9);
    assert!(dup.reasons[0].contains("reaches"), "{:?}", dup.reasons);

    let unsure = s.decide(&[0.0, 0.0, 0.0, 1.5], 0.6, Vec::new());
    let p = unsure.probability.unwrap();
    assert!((0.5..0.9).contains(&p), "{p}");
    assert_eq!(unsure.verdict, PairVerdict::Uncertain);
    assert!(unsure.reasons[0].contains("uncertain band"));

    let contra = s.decide(&[-2.0, 0.0, 4.0, -2.0], 0.8, Vec::new());
    assert_eq!(contra.verdict, PairVerdict::Related);
    assert_eq!(contra.relation, Some(Relation::Contradiction));
    assert!(contra.reasons[0].contains("contradict"), "{:?}", contra.reasons);

    let other = s.decide(&[4.0, 0.0, 0.0, -2.0], 0.4, Vec::new());
    assert_eq!(other.verdict, PairVerdict::Unique);
}

#[test]
fn same_text_is_a_duplicate_without_the_model_and_below_floor_is_unique() {
    let s = settings();
    let j = s.judge("Use tabs.", "  use TABS. ", &[9.0, 0.0, 0.0, -9.0], 0.2);
    assert_eq!(j.verdict, PairVerdict::Duplicate);
    let j = s.below_floor("Use tabs.", "Prefer composition over inheritance.", 0.1);
    assert_eq!(j.verdict, PairVerdict::Unique);
    assert!(j.reasons[0].contains("candidate floor"));
    assert_eq!(s.below_floor("Use tabs.", "use tabs.", 0.1).verdict, PairVerdict::Duplicate);
}

#[test]
fn contrasts_are_explanations_not_causes() {
    let s = settings();
    let j = s.judge("Set the timeout to 5 seconds.", "Set the timeout to 30 seconds.", &[-3.0, -3.0, -3.0, 6.0], 0.95);
    // The model decides; the number contrast is only noted.
    assert_eq!(j.verdict, PairVerdict::Duplicate);
    assert!(j.reasons.iter().skip(1).all(|r| r.starts_with("noted: ")), "{:?}", j.reasons);
    assert!(!j.contrasts.is_empty());
}

#[test]
fn bad_settings_are_refused_with_the_reason() {
    let err = LearnedJudgeSettings::parse(&settings_json(0.4, 0.5)).unwrap_err().to_string();
    assert!(err.contains("uncertain_threshold"), "{err}");
    let err = LearnedJudgeSettings::parse(&settings_json(0.9, 0.5).replace("\"format\": 1", "\"format\": 2"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("format 2"), "{err}");
    let swapped = settings_json(0.9, 0.5).replace("\"unique\", \"related\"", "\"related\", \"unique\"");
    assert!(LearnedJudgeSettings::parse(&swapped).is_err());
    let extra = settings_json(0.9, 0.5).replace("\"seed\": 13", "\"seed\": 13, \"surprise\": 1");
    assert!(LearnedJudgeSettings::parse(&extra).unwrap_err().to_string().contains("surprise"));
}
