//! Each error kind has a pair whose cosine (all-MiniLM-L6-v2, measured on the labelled
//! corpus and given here) reaches any sensible duplicate threshold, and a named signal
//! that separates it; low-overlap paraphrases pass.

use proptest::prelude::*;

use super::*;

/// A judge that vetoes on every signal, at the floors the tests name.
fn judge(duplicate_floor: f32) -> LocalJudge {
    LocalJudge::new(LocalJudgeParams {
        duplicate_floor,
        related_floor: 0.4,
        vetoes: CONTRAST_KINDS.iter().map(|k| (*k).to_owned()).collect(),
        fitted: None,
    })
}

/// Asserts the pair is related (not a duplicate) because of `signal`, and names it.
fn vetoed_by(first: &str, second: &str, cosine: f32, signal: &str) -> PairJudgement {
    let j = judge(0.55).judge(first, second, cosine);
    assert_eq!(j.verdict, PairVerdict::Related, "{j:?}");
    assert!(j.contrasts.iter().any(|c| c.kind() == signal), "{signal} not found: {j:?}");
    j
}

#[test]
fn added_condition_is_caught_by_the_condition_marker() {
    let j = vetoed_by(
        "The user has a gym session Monday, Wednesday and Friday at 07:00.",
        "The user has a gym session Monday, Wednesday and Friday at 07:00 unless they are travelling.",
        0.924,
        "added_condition",
    );
    assert_eq!(j.reasons[0], "only the second text adds a condition (\"unless\")");
}

#[test]
fn named_sides_replace_the_positions_in_every_reason_of_a_contrast() {
    let mut j = vetoed_by(
        "The user has a standing 1:1 with their manager every Thursday at 16:00.",
        "The user has a standing 1:1 with their manager every Thursday at 14:00.",
        0.994,
        "specifics_differ",
    );
    let before = j.reasons.clone();
    j.name_sides("the new text", "the stored text");
    assert_eq!(j.reasons[0], "specifics differ: 16:00 in the new text, 14:00 in the stored text");
    assert_eq!(j.reasons.len(), before.len());
    assert!(j.reasons.iter().all(|r| !r.contains(" vs ")), "{:?}", j.reasons);
    // A duplicate's noted contrasts are named too; its deciding reason is untouched.
    let mut j = judge(0.55).judge("Keep request bodies under 5 MB.", "Keep request bodies under 1 MB.", 0.97);
    let reasons = j.reasons.clone();
    j.name_sides("memory 2", "memory 1");
    assert_eq!(j.reasons.len(), reasons.len());
    assert!(j.reasons.iter().any(|r| r.contains("5 in memory 2, 1 in memory 1")), "{:?}", j.reasons);
}

#[test]
fn opposite_action_is_caught_by_opposite_words() {
    let j = vetoed_by(
        "When the 50-day moving average crosses above the 200-day on SPY, add to the equity allocation.",
        "When the 50-day moving average crosses below the 200-day on SPY, reduce the equity allocation.",
        0.947,
        "opposite_words",
    );
    assert!(j.reasons.iter().any(|r| r.contains("above vs below")), "{:?}", j.reasons);
}

#[test]
fn opposite_by_negation_is_caught_by_the_negation_flip() {
    vetoed_by(
        "We write new services in Rust; existing Go services are not rewritten.",
        "We write new services in Go and rewrite the existing Rust services in Go too.",
        0.944,
        "negation_flip",
    );
}

#[test]
fn different_numbers_are_caught_by_specifics() {
    let j = vetoed_by(
        "The user has a standing 1:1 with their manager every Thursday at 14:00.",
        "The user has a standing 1:1 with their manager every Thursday at 16:00.",
        0.994,
        "specifics_differ",
    );
    assert_eq!(j.reasons[0], "specifics differ: 14:00 vs 16:00");
    vetoed_by(
        "Set the merge threshold for decisions to 0.98.",
        "Set the merge threshold for decisions to 0.90.",
        0.97,
        "specifics_differ",
    );
}

#[test]
fn different_entity_is_caught_by_entities() {
    let j = vetoed_by(
        "ETH staking rewards are logged as income on the date received for taxes.",
        "SOL staking rewards are logged as income on the date received for taxes.",
        0.903,
        "entities_differ",
    );
    assert!(j.reasons.iter().any(|r| r == "entities differ: ETH vs SOL"), "{:?}", j.reasons);
}

#[test]
fn narrower_rule_is_caught_by_the_scope_word() {
    vetoed_by(
        "Page the on-call for customer-facing alerts; everything else goes to the Slack channel.",
        "Page the on-call only for checkout outages; other alerts go to the Slack channel.",
        0.86,
        "scope_narrowed",
    );
}

#[test]
fn other_claim_on_the_same_topic_is_caught_by_entities() {
    vetoed_by(
        "We picked Postgres over MongoDB for the ledger because we need multi-row transactions.",
        "We picked Postgres for the ledger, but multi-row transactions there must use SERIALIZABLE isolation.",
        0.833,
        "entities_differ",
    );
}

#[test]
fn low_overlap_paraphrases_pass() {
    for (a, b, cosine) in [
        (
            "Production database credentials are rotated every 90 days through Vault.",
            "The secrets manager swaps out the live datastore logins roughly every quarter.",
            0.599,
        ),
        (
            "Store every timestamp as UTC, and localise only at display time.",
            "Timestamps in the DB are UTC; only the UI converts them to local time.",
            0.598,
        ),
        (
            "Run `cargo clippy -- -D warnings` before pushing, CI fails on any lint warning.",
            "CI treats clippy warnings as errors, so run clippy with `-D warnings` locally before a push.",
            0.82,
        ),
    ] {
        let j = judge(0.55).judge(a, b, cosine);
        assert_eq!(j.verdict, PairVerdict::Duplicate, "{a} / {b}: {j:?}");
        assert!(j.reasons[0].starts_with(&format!("cosine {cosine:.3} reaches 0.55")), "{:?}", j.reasons);
    }
}

#[test]
fn cosine_bands_decide_without_contrast() {
    let j = judge(0.7);
    let (a, b) = ("Use ruff for linting Python.", "Python code is linted with ruff.");
    assert_eq!(j.judge(a, b, 0.75).verdict, PairVerdict::Duplicate);
    let related = j.judge(a, b, 0.6);
    assert_eq!(related.verdict, PairVerdict::Related);
    assert_eq!(related.reasons, ["cosine 0.600 is below 0.70"]);
    assert_eq!(j.judge(a, b, 0.2).verdict, PairVerdict::Unique);
}

#[test]
fn a_veto_not_in_the_parameters_is_only_noted() {
    let mut params = LocalJudgeParams::builtin();
    params.vetoes = vec!["specifics_differ".to_owned()];
    params.duplicate_floor = 0.5;
    params.related_floor = 0.3;
    let j = LocalJudge::new(params).judge(
        "Retry HTTP 429 responses with exponential backoff and honour the `Retry-After` header.",
        "When an API returns 429, back off exponentially and respect `Retry-After`.",
        0.79,
    );
    assert_eq!(j.verdict, PairVerdict::Duplicate);
    assert!(j.reasons.iter().any(|r| r == "noted, not decisive: entities differ: HTTP vs API"), "{j:?}");
}

#[test]
fn builtin_parameters_parse_and_bad_ones_are_refused() {
    let builtin = LocalJudgeParams::builtin();
    assert!(builtin.related_floor <= builtin.duplicate_floor);
    for (text, expected) in [
        ("{", "invalid judge parameters: EOF"),
        (r#"{"duplicate_floor": 1.5, "related_floor": 0.4, "vetoes": []}"#, "duplicate_floor 1.5 is outside [0, 1]"),
        (r#"{"duplicate_floor": 0.5, "related_floor": 0.6, "vetoes": []}"#, "related_floor 0.6 is outside"),
        (r#"{"duplicate_floor": 0.5, "related_floor": 0.4, "vetoes": ["vibes"]}"#, "unknown veto \"vibes\""),
        (r#"{"duplicate_floor": 0.5, "related_floor": 0.4, "vetoes": [], "x": 1}"#, "unknown field `x`"),
    ] {
        let error = LocalJudgeParams::parse(text).unwrap_err().to_string();
        assert!(error.contains(expected), "{text}: {error}");
    }
}

proptest! {
    #[test]
    fn verdicts_are_symmetric(a in "[a-zA-Z0-9 .,:`%-]{0,60}", b in "[a-zA-Z0-9 .,:`%-]{0,60}", cosine in -1.0f32..=1.0) {
        let j = LocalJudge::default();
        let (x, y) = (j.judge(&a, &b, cosine), j.judge(&b, &a, cosine));
        prop_assert_eq!(x.verdict, y.verdict);
        let kinds = |j: &PairJudgement| j.contrasts.iter().map(Contrast::kind).collect::<Vec<_>>();
        prop_assert_eq!(kinds(&x), kinds(&y));
    }

    #[test]
    fn a_text_is_a_duplicate_of_itself(a in "\\PC{0,80}", cosine in -1.0f32..=1.0) {
        prop_assert_eq!(LocalJudge::default().judge(&a, &a, cosine).verdict, PairVerdict::Duplicate);
    }
}
