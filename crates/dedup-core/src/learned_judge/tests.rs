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

/// Scores with only cross-encoder logits.
fn ce(logits: [f32; 4]) -> PairScores {
    PairScores { logits: Some(logits), tuned_cosine: None }
}

fn settings() -> LearnedJudgeSettings {
    LearnedJudgeSettings::parse(&settings_json(0.9, 0.5)).unwrap()
}

#[test]
fn probability_is_the_logistic_of_log_odds_and_cosine() {
    let s = settings();
    // Equal logits: duplicate log-odds = -ln 3; z = -ln 3 + 2 * 0.5 - 1.
    let p = s.probability(&ce([0.0; 4]), 0.5);
    let z = -(3.0f64).ln();
    assert!((f64::from(p) - 1.0 / (1.0 + (-z).exp())).abs() < 1e-6, "{p}");
    // More duplicate logit or more cosine never lowers it.
    assert!(s.probability(&ce([0.0, 0.0, 0.0, 2.0]), 0.5) > p);
    assert!(s.probability(&ce([0.0; 4]), 0.9) > p);
    assert!(s.probability(&ce([0.0, 0.0, 3.0, 0.0]), 0.5) < p);
}

#[test]
fn bands_give_duplicate_uncertain_related_and_unique() {
    let s = settings();
    let dup = s.decide(&ce([-3.0, -3.0, -3.0, 6.0]), 0.9, Vec::new());
    assert_eq!(dup.verdict, PairVerdict::Duplicate, "{dup:?}");
    assert!(dup.probability.unwrap() >= 0.9);
    assert!(dup.reasons[0].contains("reaches"), "{:?}", dup.reasons);

    let unsure = s.decide(&ce([0.0, 0.0, 0.0, 1.5]), 0.6, Vec::new());
    let p = unsure.probability.unwrap();
    assert!((0.5..0.9).contains(&p), "{p}");
    assert_eq!(unsure.verdict, PairVerdict::Uncertain);
    assert!(unsure.reasons[0].contains("uncertain band"));

    let contra = s.decide(&ce([-2.0, 0.0, 4.0, -2.0]), 0.8, Vec::new());
    assert_eq!(contra.verdict, PairVerdict::Related);
    assert_eq!(contra.relation, Some(Relation::Contradiction));
    assert!(contra.reasons[0].contains("contradict"), "{:?}", contra.reasons);

    let other = s.decide(&ce([4.0, 0.0, 0.0, -2.0]), 0.4, Vec::new());
    assert_eq!(other.verdict, PairVerdict::Unique);
}

#[test]
fn same_text_is_a_duplicate_without_the_model_and_below_floor_is_unique() {
    let s = settings();
    let j = s.judge("Use tabs.", "  use TABS. ", &ce([9.0, 0.0, 0.0, -9.0]), 0.2);
    assert_eq!(j.verdict, PairVerdict::Duplicate);
    let j = s.below_floor("Use tabs.", "Prefer composition over inheritance.", 0.1);
    assert_eq!(j.verdict, PairVerdict::Unique);
    assert!(j.reasons[0].contains("candidate floor"));
    assert_eq!(s.below_floor("Use tabs.", "use tabs.", 0.1).verdict, PairVerdict::Duplicate);
}

#[test]
fn same_wording_is_a_duplicate_without_the_model() {
    let s = settings();
    // The model reads the pair as another claim; the words, numbers and signs are the same.
    let (a, b) = ("Install packages with pnpm, not npm.", "Install packages with `pnpm`, not `npm`");
    let j = s.judge(a, b, &ce([0.0, 9.0, 0.0, -9.0]), 0.8);
    assert_eq!(j.verdict, PairVerdict::Duplicate, "{j:?}");
    assert_eq!(j.probability, Some(1.0));
    assert!(j.reasons[0].contains("same words"), "{:?}", j.reasons);
    assert_eq!(s.below_floor(a, b, 0.1).verdict, PairVerdict::Duplicate);
    // Another sign is another claim: the model decides.
    let j = s.judge("Set the offset to -5.", "Set the offset to 5.", &ce([0.0, 9.0, 0.0, -9.0]), 0.95);
    assert_eq!(j.verdict, PairVerdict::Related, "{j:?}");
}

#[test]
fn contrasts_are_explanations_not_causes() {
    let s = settings();
    let j =
        s.judge("Set the timeout to 5 seconds.", "Set the timeout to 30 seconds.", &ce([-3.0, -3.0, -3.0, 6.0]), 0.95);
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

#[test]
fn candidates_default_to_eight_and_must_be_in_range() {
    assert_eq!(settings().candidates, DEFAULT_CANDIDATES, "a file that predates the field");
    let with =
        |n: usize| settings_json(0.9, 0.5).replace("\"seed\": 13", &format!("\"seed\": 13, \"candidates\": {n}"));
    assert_eq!(LearnedJudgeSettings::parse(&with(3)).unwrap().candidates, 3);
    for bad in [0, MAX_CANDIDATES + 1] {
        let err = LearnedJudgeSettings::parse(&with(bad)).unwrap_err().to_string();
        assert!(err.contains(&format!("candidates {bad} is outside")), "{err}");
    }
}

/// Settings of a judge that weighs only the fine-tuned embedder's cosine and the cosine.
fn embedder_settings() -> LearnedJudgeSettings {
    let json = format!(
        r#"{{"format": 1, "embedder_file": "judge_embedder.onnx", "embedder_sha256": "{sha}", "embedder_max_len": 256,
            "weights": "int8", "max_len": 96, "order": "canonical",
            "relations": ["unique", "related", "contradiction", "duplicate"],
            "decision": {{"features": ["tuned_cosine", "cosine"], "weights": [20.0, 2.0], "bias": -18.0}},
            "candidate_floor": 0.3, "duplicate_threshold": 0.9, "uncertain_threshold": 0.5,
            "precision_target": 0.98, "seed": 13, "base": "all-MiniLM-L6-v2"}}"#,
        sha = "0".repeat(64)
    );
    LearnedJudgeSettings::parse(&json).unwrap()
}

#[test]
fn a_judge_without_cross_encoder_weighs_the_tuned_cosine() {
    let s = embedder_settings();
    assert!(s.uses_embedder() && !s.uses_cross_encoder());
    let tuned = |t: f32| PairScores { logits: None, tuned_cosine: Some(t) };
    // z = 20 t + 2 c - 18.
    let p = s.probability(&tuned(0.8), 0.5);
    assert!((f64::from(p) - 1.0 / (1.0 + (-(20.0 * 0.8 + 2.0 * 0.5 - 18.0f64)).exp())).abs() < 1e-5, "{p}");
    let dup = s.decide(&tuned(0.99), 0.9, Vec::new());
    assert_eq!((dup.verdict, dup.relation), (PairVerdict::Duplicate, Some(Relation::Duplicate)), "{dup:?}");
    assert!(dup.reasons[0].contains("tuned cosine 0.990"), "{:?}", dup.reasons);
    // Below the band: related at cosine 0.5 or more, unique under it.
    let related = s.decide(&tuned(0.6), 0.7, Vec::new());
    assert_eq!((related.verdict, related.relation), (PairVerdict::Related, Some(Relation::Related)));
    let unique = s.decide(&tuned(0.3), 0.4, Vec::new());
    assert_eq!(unique.verdict, PairVerdict::Unique);
}

#[test]
fn the_models_a_decision_weighs_must_be_named() {
    let base = settings_json(0.9, 0.5);
    // tuned_cosine without an embedder file.
    let bad = base.replace(
        r#"["duplicate_log_odds", "cosine"], "weights": [1.0, 2.0]"#,
        r#"["duplicate_log_odds", "tuned_cosine"], "weights": [1.0, 2.0]"#,
    );
    let err = LearnedJudgeSettings::parse(&bad).unwrap_err().to_string();
    assert!(err.contains("embedder_file"), "{err}");
    // A cross-encoder file the decision does not use.
    let bad =
        base.replace(r#"["duplicate_log_odds", "cosine"], "weights": [1.0, 2.0]"#, r#"["cosine"], "weights": [2.0]"#);
    assert!(LearnedJudgeSettings::parse(&bad).unwrap_err().to_string().contains("model_file"));
    // Unknown, repeated, or unweighted features.
    for features in [
        r#"["cosine", "bleu"], "weights": [1.0, 2.0]"#,
        r#"["cosine", "cosine"], "weights": [1.0, 2.0]"#,
        r#"["cosine"], "weights": [1.0, 2.0]"#,
    ] {
        let bad = base.replace(r#"["duplicate_log_odds", "cosine"], "weights": [1.0, 2.0]"#, features);
        assert!(LearnedJudgeSettings::parse(&bad).unwrap_err().to_string().contains("distinct features"), "{features}");
    }
}

fn settings_holding(kinds: &str) -> LearnedJudgeSettings {
    let json = settings_json(0.9, 0.5).replace(r#""seed": 13"#, &format!(r#""review_contrasts": {kinds}, "seed": 13"#));
    LearnedJudgeSettings::parse(&json).unwrap()
}

#[test]
fn a_review_contrast_holds_a_duplicate_for_review() {
    let s = settings_holding(r#"["opposite_words"]"#);
    let always = "Always run the migrations before starting the API server.";
    let never = "Never run the migrations before starting the API server.";
    let confident = ce([-3.0, -3.0, -3.0, 6.0]);
    let held = s.judge(always, never, &confident, 0.93);
    assert_eq!(held.verdict, PairVerdict::Uncertain, "{held:?}");
    assert!(held.reasons[0].contains("reaches") && held.reasons[0].contains("opposite words"), "{:?}", held.reasons);
    // Without the setting, or without the contrast, the same scores merge.
    assert_eq!(settings().judge(always, never, &confident, 0.93).verdict, PairVerdict::Duplicate);
    let paraphrase = "Run the migrations before you start the API server, always.";
    assert_eq!(s.judge(always, paraphrase, &confident, 0.93).verdict, PairVerdict::Duplicate);
    // Below the duplicate threshold the contrast changes nothing.
    let low = s.judge(always, never, &ce([4.0, 0.0, 0.0, -2.0]), 0.4);
    assert_eq!(low.verdict, PairVerdict::Unique, "{low:?}");
}

#[test]
fn an_unknown_review_contrast_is_refused() {
    let json = settings_json(0.9, 0.5).replace(r#""seed": 13"#, r#""review_contrasts": ["antonyms"], "seed": 13"#);
    let err = LearnedJudgeSettings::parse(&json).unwrap_err().to_string();
    assert!(err.contains("antonyms") && err.contains("opposite_words"), "{err}");
}

#[test]
fn the_weights_form_is_known_and_a_dynamic_model_reads_one_pair_at_a_time() {
    let base = settings_json(0.9, 0.5);
    let int8 = LearnedJudgeSettings::parse(&base).unwrap();
    assert!(!int8.reads_one_at_a_time());
    let dynamic =
        LearnedJudgeSettings::parse(&base.replace(r#""weights": "int8""#, r#""weights": "int8-dynamic""#)).unwrap();
    assert!(dynamic.reads_one_at_a_time());
    let err = LearnedJudgeSettings::parse(&base.replace(r#""weights": "int8""#, r#""weights": "int4""#))
        .unwrap_err()
        .to_string();
    assert!(err.contains(r#"weights "int4""#) && err.contains("int8-dynamic"), "{err}");
}
