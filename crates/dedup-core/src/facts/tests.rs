//! Unit and property tests of the fact rules and the prompt formatting (seed 002).

use proptest::prelude::*;

use super::*;

fn fact(content: &str, category: FactCategory, confidence: f64) -> FactView<'_> {
    FactView { content, category, confidence }
}

fn full_profile() -> MemoryProfile {
    MemoryProfile {
        user: UserContext {
            work_context: ProfileSection::new("Backend engineer on the billing service"),
            personal_context: ProfileSection::new("Lives in Lisbon, cycles to work"),
            top_of_mind: ProfileSection::new("Migrating invoices to Postgres"),
        },
        history: HistoryContext {
            recent_months: ProfileSection::new("Shipped the new payment retries"),
            earlier_context: ProfileSection::new("Worked on the mobile app"),
            long_term_background: ProfileSection::new("Ten years of Python, learning Rust"),
        },
    }
}

fn cl100k() -> Cl100kTokens {
    Cl100kTokens::new().expect("the cl100k_base ranks ship inside tiktoken-rs")
}

#[test]
fn scenario_fact_categories() {
    let names: Vec<&str> = FactCategory::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(names, ["preference", "knowledge", "context", "behavior", "goal", "correction"]);
    for category in FactCategory::ALL {
        assert_eq!(category.as_str().parse::<FactCategory>(), Ok(category));
        assert_eq!(serde_json::to_string(&category).unwrap(), format!("\"{category}\""));
        assert_eq!(serde_json::from_str::<FactCategory>(&format!("\"{category}\"")).unwrap(), category);
    }
    assert_eq!(" Preference ".parse::<FactCategory>(), Ok(FactCategory::Preference));
    let error = "opinion".parse::<FactCategory>().unwrap_err();
    assert_eq!(
        error.to_string(),
        "unknown fact category \"opinion\" (expected one of: preference, knowledge, context, behavior, goal, correction)"
    );
    assert!(serde_json::from_str::<FactCategory>("\"opinion\"").is_err());
}

#[test]
fn fact_keys_casefold_like_python() {
    // Expected values computed with CPython's `s.strip().casefold()`.
    let cases = [
        ("Straße", "strasse"),
        ("STRASSE", "strasse"),
        ("  User prefers Rust \n", "user prefers rust"),
        ("\u{1c}tab\u{1f}", "tab"),
        ("ΣΊΣΥΦΟΣ", "σίσυφοσ"),
        ("σίσυφος", "σίσυφοσ"),
        ("ﬁle", "file"),
        ("İstanbul", "i\u{307}stanbul"),
        ("ǅemal", "ǆemal"),
        ("ΐ", "ι\u{308}\u{301}"),
        ("ẞ", "ss"),
        ("Ꭰ", "Ꭰ"),
        ("ꭰ", "Ꭰ"),
        ("µ", "μ"),
        ("K", "k"),
        ("a  b", "a  b"),
    ];
    for (content, key) in cases {
        assert_eq!(fact_key(content), key, "{content:?}");
    }
    assert_eq!(fact_key("Straße"), fact_key("STRASSE"));
    assert_ne!(fact_key("a b"), fact_key("a  b"), "inner whitespace is kept");
}

#[test]
fn policies_are_validated() {
    assert_eq!(FactPolicy::default(), FactPolicy { confidence_threshold: 0.5, max_facts: 500 });
    assert!(FactPolicy::new(0.0, 1).is_ok());
    assert!(FactPolicy::new(1.0, 1).is_ok());
    for (threshold, max) in [(-0.1, 10), (1.01, 10), (f64::NAN, 10), (f64::INFINITY, 10), (0.5, 0)] {
        let error = FactPolicy::new(threshold, max).unwrap_err();
        assert!(matches!(error, FactError::InvalidPolicy { .. }), "{threshold} {max}: {error}");
    }
    let policy = FactPolicy::default();
    assert!(policy.accepts(0.5) && policy.accepts(1.0));
    assert!(!policy.accepts(0.49) && !policy.accepts(f64::NAN));
}

#[test]
fn profiles_read_deerflow_memory_json() {
    let json = r#"{
        "version": "1.0",
        "lastUpdated": "2025-01-01T00:00:00Z",
        "user": {
            "workContext": {"summary": "Engineer", "updatedAt": "2025-01-01T00:00:00Z"},
            "topOfMind": {"summary": "Release"}
        },
        "history": {"longTermBackground": {"summary": "Physics degree", "updatedAt": ""}},
        "facts": []
    }"#;
    let profile: MemoryProfile = serde_json::from_str(json).unwrap();
    assert_eq!(profile.user.work_context.summary, "Engineer");
    assert_eq!(profile.user.work_context.updated_at, "2025-01-01T00:00:00Z");
    assert_eq!(profile.user.personal_context, ProfileSection::default());
    assert_eq!(profile.user.top_of_mind.summary, "Release");
    assert_eq!(profile.history.long_term_background.summary, "Physics degree");
    assert!(!profile.is_empty());

    let written = serde_json::to_value(&profile).unwrap();
    assert_eq!(written["user"]["workContext"]["updatedAt"], "2025-01-01T00:00:00Z");
    assert_eq!(written["history"]["recentMonths"], serde_json::json!({"summary": "", "updatedAt": ""}));
    assert_eq!(serde_json::from_value::<MemoryProfile>(written).unwrap(), profile);

    let empty: MemoryProfile = serde_json::from_str("{}").unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty, MemoryProfile::default());
}

#[test]
fn scenario_format_with_all_sections() {
    let facts = [
        fact("Prefers tabs over spaces", FactCategory::Preference, 0.7),
        fact("  Corrected: the service is in Go, not Java  ", FactCategory::Correction, 0.95),
        fact("Wants to learn Rust", FactCategory::Goal, 0.825),
        fact("   ", FactCategory::Knowledge, 1.0),
    ];
    let text = format_context(&full_profile(), &facts, DEFAULT_MAX_TOKENS, &cl100k());
    assert_eq!(
        text,
        "User Context:\n\
         - Work: Backend engineer on the billing service\n\
         - Personal: Lives in Lisbon, cycles to work\n\
         - Current Focus: Migrating invoices to Postgres\n\
         \n\
         History:\n\
         - Recent: Shipped the new payment retries\n\
         - Earlier: Worked on the mobile app\n\
         - Background: Ten years of Python, learning Rust\n\
         \n\
         Facts:\n\
         - [correction | 0.95] Corrected: the service is in Go, not Java\n\
         - [goal | 0.82] Wants to learn Rust\n\
         - [preference | 0.70] Prefers tabs over spaces"
    );
}

#[test]
fn empty_sections_are_left_out() {
    let counter = cl100k();
    assert_eq!(format_context(&MemoryProfile::default(), &[], DEFAULT_MAX_TOKENS, &counter), "");

    let mut profile = MemoryProfile::default();
    profile.user.top_of_mind = ProfileSection::new("Release 2.0");
    profile.history.earlier_context = ProfileSection::new("  ");
    assert_eq!(format_context(&profile, &[], 100, &counter), "User Context:\n- Current Focus: Release 2.0");

    profile.history.recent_months = ProfileSection::new("Hired two people");
    assert_eq!(
        format_context(&profile, &[], 100, &counter),
        "User Context:\n- Current Focus: Release 2.0\n\nHistory:\n- Recent: Hired two people"
    );

    let facts = [fact("Uses vim", FactCategory::Behavior, 1.0), fact("Likes tea", FactCategory::Preference, 0.5)];
    assert_eq!(
        format_context(&MemoryProfile::default(), &facts, 100, &counter),
        "Facts:\n- [behavior | 1.00] Uses vim\n- [preference | 0.50] Likes tea"
    );
}

#[test]
fn equal_confidences_keep_their_order() {
    let facts = [
        fact("first", FactCategory::Context, 0.8),
        fact("second", FactCategory::Context, 0.9),
        fact("third", FactCategory::Context, 0.8),
    ];
    let text = format_context(&MemoryProfile::default(), &facts, 100, &CharEstimate);
    assert_eq!(text, "Facts:\n- [context | 0.90] second\n- [context | 0.80] first\n- [context | 0.80] third");
}

#[test]
fn scenario_token_budget_enforcement() {
    let counter = cl100k();
    let profile = full_profile();
    let contents: Vec<String> = (0..40).map(|i| format!("Fact number {i} about the user's stack and habits")).collect();
    let facts: Vec<FactView<'_>> = contents
        .iter()
        .enumerate()
        .map(|(i, c)| fact(c, FactCategory::Knowledge, f64::from(u8::try_from(i).unwrap()) / 40.0))
        .collect();
    let everything = format_context(&profile, &facts, usize::MAX, &counter);
    let cost = counter.count(&everything);
    assert!(cost > 300, "{cost}");

    // Over budget: facts go from the lowest confidence up, the rest stay in order.
    let budget = cost - 60;
    let trimmed = format_context(&profile, &facts, budget, &counter);
    assert!(counter.count(&trimmed) <= budget);
    assert!(!trimmed.ends_with(TRUNCATION_MARKER));
    let kept: Vec<&str> = trimmed.split("Facts:\n").nth(1).unwrap().lines().collect();
    assert!(kept.len() < facts.len() && !kept.is_empty(), "{}", kept.len());
    let expected: Vec<String> = (0..kept.len())
        .map(|n| 39 - n)
        .map(|i| format!("- [knowledge | {:.2}] {}", facts[i].confidence, contents[i]))
        .collect();
    assert_eq!(kept, expected);
    assert!(trimmed.starts_with(&format_context(&profile, &[], usize::MAX, &counter)));
    // The largest number of facts that fits is kept: one more would not fit.
    assert!(counter.count(&format!("{trimmed}\n{}", expected_line(&facts[39 - kept.len()]))) > budget);

    // Still over with no facts: cut at the character level, "\n..." appended.
    let profile_only = format_context(&profile, &[], usize::MAX, &counter);
    let budget = counter.count(&profile_only) / 2;
    let cut = format_context(&profile, &facts, budget, &counter);
    assert!(cut.ends_with(TRUNCATION_MARKER), "{cut}");
    assert!(counter.count(&cut) <= budget);
    let prefix = cut.strip_suffix(TRUNCATION_MARKER).unwrap();
    assert!(profile_only.starts_with(prefix));
    assert!(!cut.contains("Facts:"));
    // The prefix is the longest that fits: one more character would not.
    let next = profile_only[prefix.len()..].chars().next().unwrap();
    assert!(counter.count(&format!("{prefix}{next}{TRUNCATION_MARKER}")) > budget);
}

fn expected_line(f: &FactView<'_>) -> String {
    format!("- [{} | {:.2}] {}", f.category, f.confidence, f.content.trim())
}

#[test]
fn budgets_smaller_than_the_marker_give_the_marker_alone() {
    let counter = cl100k();
    let marker_cost = counter.count(TRUNCATION_MARKER);
    assert_eq!(marker_cost, 2);
    let facts = [fact("Uses vim", FactCategory::Behavior, 1.0)];
    for budget in 0..marker_cost {
        assert_eq!(format_context(&full_profile(), &facts, budget, &counter), TRUNCATION_MARKER);
    }
    assert_eq!(format_context(&full_profile(), &facts, marker_cost, &counter), TRUNCATION_MARKER);
    assert_eq!(format_context(&MemoryProfile::default(), &[], 0, &counter), "");
}

#[test]
fn truncation_cuts_on_char_boundaries() {
    let mut profile = MemoryProfile::default();
    profile.user.work_context = ProfileSection::new("Ünïcödé 🚀 text ".repeat(200));
    for budget in [3, 5, 17, 64, 300] {
        for counter in [&CharEstimate as &dyn TokenCounter, &cl100k()] {
            let cut = format_context(&profile, &[], budget, counter);
            assert!(cut.ends_with(TRUNCATION_MARKER));
            assert!(counter.count(&cut) <= budget, "{budget}: {}", counter.count(&cut));
        }
    }
}

#[test]
fn cl100k_counts_match_tiktoken() {
    let counter = cl100k();
    // tiktoken: len(cl100k_base.encode(...)).
    assert_eq!(counter.count(""), 0);
    assert_eq!(counter.count("hello world"), 2);
    assert_eq!(counter.count("tiktoken is great!"), 6);
    // Special tokens count as the text they are.
    assert!(counter.count("<|endoftext|>") > 1);
    // Long runs that stress the pre-tokenising regex neither panic nor estimate.
    assert!(counter.count(&" ".repeat(100_000)) > 0);
    assert!(counter.count(&"ab1 ".repeat(50_000)) >= 50_000);
    assert_eq!(default_token_counter().count("hello world"), 2);
}

#[test]
fn char_estimate_is_a_quarter_of_the_characters() {
    assert_eq!(CharEstimate.count(""), 0);
    assert_eq!(CharEstimate.count("abc"), 0);
    assert_eq!(CharEstimate.count("abcd"), 1);
    assert_eq!(CharEstimate.count("ßßßßßßßß"), 2);
}

fn arb_section() -> impl Strategy<Value = ProfileSection> {
    prop_oneof![Just(String::new()), "[ a-zA-Zé🚀.,\n]{0,80}"].prop_map(ProfileSection::new)
}

fn arb_profile() -> impl Strategy<Value = MemoryProfile> {
    proptest::collection::vec(arb_section(), 6).prop_map(|mut s| MemoryProfile {
        history: HistoryContext {
            long_term_background: s.pop().unwrap_or_default(),
            earlier_context: s.pop().unwrap_or_default(),
            recent_months: s.pop().unwrap_or_default(),
        },
        user: UserContext {
            top_of_mind: s.pop().unwrap_or_default(),
            personal_context: s.pop().unwrap_or_default(),
            work_context: s.pop().unwrap_or_default(),
        },
    })
}

fn arb_facts() -> impl Strategy<Value = Vec<(String, FactCategory, f64)>> {
    proptest::collection::vec(
        ("[ a-zA-Zß🚀.\n]{0,60}", proptest::sample::select(FactCategory::ALL.to_vec()), 0.0..=1.0f64),
        0..25,
    )
}

/// The budget holds (or the output is the bare marker, for budgets under its cost); an
/// untruncated output keeps the highest-confidence facts, in order.
fn check_budget(
    profile: &MemoryProfile,
    raw: &[(String, FactCategory, f64)],
    budget: usize,
    counter: &dyn TokenCounter,
) {
    let facts: Vec<FactView<'_>> = raw.iter().map(|(c, cat, conf)| fact(c, *cat, *conf)).collect();
    let out = format_context(profile, &facts, budget, counter);
    if counter.count(TRUNCATION_MARKER) > budget && out == TRUNCATION_MARKER {
        return;
    }
    assert!(counter.count(&out) <= budget, "{} > {budget}: {out:?}", counter.count(&out));
    if !out.ends_with(TRUNCATION_MARKER) {
        let full = format_context(profile, &facts, usize::MAX, counter);
        assert!(full.starts_with(&out), "{out:?} is not a prefix of {full:?}");
    }
}

proptest! {
    #[test]
    fn output_never_exceeds_the_budget_char_estimate(
        profile in arb_profile(), facts in arb_facts(), budget in 0usize..400,
    ) {
        check_budget(&profile, &facts, budget, &CharEstimate);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn output_never_exceeds_the_budget_cl100k(profile in arb_profile(), facts in arb_facts(), budget in 0usize..300) {
        check_budget(&profile, &facts, budget, &cl100k());
    }
}

#[test]
fn a_replacement_profile_is_read_strictly() {
    let ok = serde_json::json!({"user": {"topOfMind": {"summary": "Release 2.0", "updatedAt": "2025-05-01"}}});
    let profile = MemoryProfile::from_replacement(&ok).unwrap();
    assert_eq!(profile.user.top_of_mind.summary, "Release 2.0");
    assert_eq!(profile.history, HistoryContext::default());
    for (bad, expected) in [
        (serde_json::json!([]), "the profile must be an object, not an array"),
        (serde_json::json!({"user": {"topofmind": {}}}), "unknown field `user.topofmind`, expected one of"),
        (
            serde_json::json!({"history": {"recentMonths": {"summary": null}}}),
            "`history.recentMonths.summary` must be a string, not null",
        ),
    ] {
        let err = MemoryProfile::from_replacement(&bad).unwrap_err();
        assert!(err.contains(expected), "{bad}: {err}");
    }
}
