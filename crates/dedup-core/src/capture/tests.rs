//! Unit tests of the offline capture analyser.

use super::*;

fn contents(candidates: &[CaptureCandidate]) -> Vec<&str> {
    candidates.iter().map(|c| c.content.as_str()).collect()
}

fn one(messages: &[ConversationMessage]) -> CaptureCandidate {
    let found = analyze_messages(messages);
    assert_eq!(found.len(), 1, "expected one candidate, got {found:#?}");
    found.into_iter().next().unwrap_or_else(|| unreachable!())
}

#[test]
fn decisions_are_found_in_both_speakers_messages() {
    let found = analyze_messages(&[
        ConversationMessage::user("Hi. We decided to use PostgreSQL for the billing database. Thanks!"),
        ConversationMessage::assistant("Understood. Let's go with sqlx for the database layer, it is async."),
        ConversationMessage::user("We'll use rustls instead of OpenSSL for every HTTP client."),
        ConversationMessage::assistant("We chose Axum over Actix because the team knows tower already."),
    ]);
    assert_eq!(
        contents(&found),
        [
            "We decided to use PostgreSQL for the billing database.",
            "Let's go with sqlx for the database layer, it is async.",
            "We'll use rustls instead of OpenSSL for every HTTP client.",
            "We chose Axum over Actix because the team knows tower already.",
        ]
    );
    assert!(found.iter().all(|c| c.kind == CaptureKind::Decision && c.namespace() == "decisions"));
    assert_eq!(found.iter().map(|c| c.message).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(found[0].cue, "we decided");
    assert_eq!(found[2].cue, "we'll use … instead of");
}

#[test]
fn learnings_are_found() {
    let found = analyze_messages(&[
        ConversationMessage::assistant(
            "I ran the suite again. It turns out the flaky test depended on the system clock. \
             The root cause was a missing index on the events table.",
        ),
        ConversationMessage::user("Lesson learned: always pin the toolchain in CI images."),
        ConversationMessage::assistant("The fix was to retry the connection after a short backoff."),
        ConversationMessage::user("Note to self, the staging database resets every Sunday night."),
    ]);
    assert_eq!(
        contents(&found),
        [
            "It turns out the flaky test depended on the system clock.",
            "The root cause was a missing index on the events table.",
            "Lesson learned: always pin the toolchain in CI images.",
            "The fix was to retry the connection after a short backoff.",
            "Note to self, the staging database resets every Sunday night.",
        ]
    );
    assert!(found.iter().all(|c| c.kind == CaptureKind::Learning && c.namespace() == "learnings"), "{found:#?}");
}

#[test]
fn patterns_are_found() {
    let found = analyze_messages(&[
        ConversationMessage::user("Never commit generated files in this repo, they are built in CI."),
        ConversationMessage::assistant("The convention is one module per command under the binary crate."),
        ConversationMessage::user("In this repo we use snake_case for every JSON field name."),
        ConversationMessage::assistant("The pattern is to map lower errors with an explicit match."),
    ]);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found.iter().all(|c| c.kind == CaptureKind::Pattern && c.namespace() == "patterns"), "{found:#?}");
    assert_eq!(found[0].cue, "never … in this repo");
}

#[test]
fn we_always_and_we_never_are_conventions_only_when_the_user_says_them() {
    let found = analyze_messages(&[
        ConversationMessage::assistant("We never reach this branch because the parser rejects empty input."),
        ConversationMessage::user("We always squash-merge pull requests into the main branch."),
        ConversationMessage::assistant("- **Root cause**: the cache key ignored the namespace of the memory."),
    ]);
    assert_eq!(
        contents(&found),
        [
            "We always squash-merge pull requests into the main branch.",
            "Root cause: the cache key ignored the namespace of the memory.",
        ]
    );
    assert_eq!(found[0].kind, CaptureKind::Pattern);
    assert_eq!(found[1].kind, CaptureKind::Learning);
}

#[test]
fn preferences_come_from_the_user_only() {
    let found = analyze_messages(&[
        ConversationMessage::user("I prefer small commits with clear messages over one big squash."),
        ConversationMessage::user("Please always run cargo fmt before you commit anything."),
        ConversationMessage::user("Don't ever push directly to the main branch of this project."),
        ConversationMessage::assistant("I prefer to read the whole file before I change anything in it."),
    ]);
    assert_eq!(
        contents(&found),
        [
            "I prefer small commits with clear messages over one big squash.",
            "Please always run cargo fmt before you commit anything.",
            "Don't ever push directly to the main branch of this project.",
        ]
    );
    assert!(found.iter().all(|c| c.kind == CaptureKind::Preference && c.namespace() == "preferences"));
    assert!(found.iter().all(|c| c.message < 3));
}

#[test]
fn namespaces_and_memory_kinds() {
    let pairs: Vec<_> = CaptureKind::ALL.iter().map(|k| (k.namespace(), k.memory_kind())).collect();
    assert_eq!(
        pairs,
        [("preferences", "preference"), ("decisions", "decision"), ("learnings", "lesson"), ("patterns", "pattern")]
    );
}

#[test]
fn code_blocks_and_indented_code_are_skipped() {
    let text = "Here is the change:\n\n```rust\n// we decided to use a HashMap here for the index\nlet x = 1;\n```\n\n~~~\nThe root cause was in this block too, but it is code.\n~~~\n\n    // we decided to keep this indented comment too\n\nTurns out the cache key ignored the namespace entirely.";
    let found = analyze_messages(&[ConversationMessage::assistant(text)]);
    assert_eq!(contents(&found), ["Turns out the cache key ignored the namespace entirely."]);
}

#[test]
fn an_unclosed_fence_hides_the_rest_of_the_message_only() {
    let found = analyze_messages(&[
        ConversationMessage::assistant("```\nwe decided to use tabs in the whole code base here"),
        ConversationMessage::user("We decided to ship the release on Thursday morning."),
    ]);
    assert_eq!(contents(&found), ["We decided to ship the release on Thursday morning."]);
}

#[test]
fn questions_hypotheticals_and_lead_ins_are_skipped() {
    let found = analyze_messages(&[
        ConversationMessage::user("Did we decide to use PostgreSQL for the billing database?"),
        ConversationMessage::user("Should we go with sqlx, or is diesel better for this?"),
        ConversationMessage::user("If we decided to use Redis, the cache would be shared."),
        ConversationMessage::assistant("The fix was the following change to the retry loop:"),
        ConversationMessage::user("We haven't decided whether to use Redis for the shared cache."),
        ConversationMessage::assistant("That was not the root cause of the timeouts in staging."),
    ]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn short_and_long_sentences_are_skipped() {
    let long = format!("We decided to use {} for everything.", "PostgreSQL and ".repeat(30));
    let found = analyze_messages(&[
        ConversationMessage::user("We decided: tabs."),
        ConversationMessage::user(long),
        ConversationMessage::user("We decided to keep the public API stable until 2.0."),
    ]);
    assert_eq!(contents(&found), ["We decided to keep the public API stable until 2.0."]);
}

#[test]
fn markdown_markers_and_fillers_are_trimmed() {
    let text = "## Summary\n\n- **We decided** to use `sqlx` for the store.\n> Turns out the\n> test was flaky because of timezones.\n1. The convention is one crate per\n   layer of the stack.\n\nOK, let's go with the smaller model for the tests.";
    let found = analyze_messages(&[ConversationMessage::assistant(text)]);
    assert_eq!(
        contents(&found),
        [
            "We decided to use `sqlx` for the store.",
            "Turns out the test was flaky because of timezones.",
            "The convention is one crate per layer of the stack.",
            "Let's go with the smaller model for the tests.",
        ]
    );
}

#[test]
fn sentences_are_not_cut_at_abbreviations_or_inside_code() {
    let found = analyze_messages(&[ConversationMessage::assistant(
        "We decided to use a small model, e.g. MiniLM, for the local embedder. The rule is to call `foo. bar` never.",
    )]);
    assert_eq!(
        contents(&found),
        [
            "We decided to use a small model, e.g. MiniLM, for the local embedder.",
            "The rule is to call `foo. bar` never.",
        ]
    );
}

#[test]
fn missing_final_punctuation_is_added_and_the_first_letter_capitalised() {
    let found = one(&[ConversationMessage::user("turns out the staging cluster runs an older kernel")]);
    assert_eq!(found.content, "Turns out the staging cluster runs an older kernel.");
}

#[test]
fn repeated_statements_are_captured_once_the_latest_kept() {
    let found = analyze_messages(&[
        ConversationMessage::user("We decided to use PostgreSQL for the billing database."),
        ConversationMessage::assistant("Noted."),
        ConversationMessage::user("we decided to use   PostgreSQL for the billing database"),
    ]);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].message, 2);
    assert_eq!(found[0].content, "We decided to use PostgreSQL for the billing database.");
}

#[test]
fn at_most_the_cap_the_latest_of_equals_in_conversation_order() {
    let messages: Vec<ConversationMessage> = (0..30)
        .map(|i| ConversationMessage::user(format!("We decided to name the service number {i} after a river.")))
        .collect();
    let found = analyze_messages(&messages);
    assert_eq!(found.len(), MAX_CAPTURE_CANDIDATES);
    assert_eq!(found.first().map(|c| c.message), Some(10));
    assert_eq!(found.last().map(|c| c.message), Some(29));
    assert!(found.windows(2).all(|w| w[0].message < w[1].message));
    let limits = CaptureLimits { max_candidates: 3, ..CaptureLimits::default() };
    let found = analyze_messages_with(&messages, &limits);
    assert_eq!(found.iter().map(|c| c.message).collect::<Vec<_>>(), [27, 28, 29]);
    assert!(analyze_messages_with(&messages, &CaptureLimits { max_candidates: 0, ..limits }).is_empty());
}

#[test]
fn markup_tables_and_rules_are_skipped() {
    let text = "<system-reminder>We decided to use tabs in the whole project.</system-reminder>\n| We decided | to use a table row here |\n---\nNothing to capture here at all, just text.";
    assert!(analyze_messages(&[ConversationMessage::user(text)]).is_empty());
}

#[test]
fn the_same_messages_give_the_same_candidates() {
    let messages = [
        ConversationMessage::user("I prefer tabs over spaces in every file of the repo."),
        ConversationMessage::assistant("The root cause was a race between the two writers."),
    ];
    assert_eq!(analyze_messages(&messages), analyze_messages(&messages));
}

#[test]
fn a_two_megabyte_conversation_is_read_whole() {
    let filler = "I looked at the module and the tests, and changed the loop to use an iterator instead. ";
    let mut messages = Vec::new();
    let mut bytes = 0;
    let mut i: usize = 0;
    while bytes < 2 * 1024 * 1024 {
        let text = if i.is_multiple_of(50) {
            format!("{}We decided to keep version {i} of the schema for now.", filler.repeat(5))
        } else {
            format!("{}\n```\nfn f() {{}}\n```\n{}", filler.repeat(10), filler)
        };
        bytes += text.len();
        messages.push(if i.is_multiple_of(2) {
            ConversationMessage::user(text)
        } else {
            ConversationMessage::assistant(text)
        });
        i += 1;
    }
    // Its speed is measured by `cargo xtask bench` (docs/BENCHMARKS.md), not here.
    let analysis = analyze_conversation(&messages, &CaptureLimits::default());
    assert_eq!(analysis.candidates.len(), MAX_CAPTURE_CANDIDATES);
    assert_eq!(analysis.dropped.len(), i.div_ceil(50) - MAX_CAPTURE_CANDIDATES);
    let all = analyze_messages_with(&messages, &CaptureLimits { max_candidates: usize::MAX, ..Default::default() });
    assert_eq!(all.len(), i.div_ceil(50));
}

#[test]
fn defect_14_over_the_cap_the_most_memorable_are_kept_and_the_rest_counted() {
    // Three early decisions of the user with concrete details, then many plain lessons of
    // the assistant: a cap of the latest would drop the decisions.
    let mut messages = vec![
        ConversationMessage::user("We decided to pin the Postgres image to version 16.4 for CI."),
        ConversationMessage::user("We decided to keep `sqlx` offline mode on in every crate."),
        ConversationMessage::user("I prefer squash merges for every pull request of this repo."),
    ];
    for i in 0..25 {
        let lesson = ["one", "two", "three", "four", "five"][i % 5];
        let place = ["cache", "queue", "index", "pool", "parser"][i / 5];
        messages.push(ConversationMessage::assistant(format!(
            "Turns out the {place} warning {lesson} was harmless after all."
        )));
    }
    let analysis = analyze_conversation(&messages, &CaptureLimits::default());
    assert_eq!(analysis.candidates.len(), MAX_CAPTURE_CANDIDATES);
    assert_eq!(analysis.dropped.len(), 28 - MAX_CAPTURE_CANDIDATES);
    assert_eq!(analysis.dropped.first().map(|c| c.message), Some(3), "the earliest lessons are left out");
    let kept: Vec<usize> = analysis.candidates.iter().map(|c| c.message).collect();
    assert_eq!(&kept[..3], [0, 1, 2], "the early decisions and the preference are kept: {kept:?}");
    assert!(kept.windows(2).all(|w| w[0] < w[1]), "conversation order: {kept:?}");
    // Of the equal lessons, the latest are kept.
    assert_eq!(kept.last(), Some(&27));
    assert!(!kept.contains(&3), "{kept:?}");
    // A setting of the cap.
    let limits = CaptureLimits { max_candidates: 2, ..CaptureLimits::default() };
    let analysis = analyze_conversation(&messages, &limits);
    assert_eq!(analysis.candidates.iter().map(|c| c.message).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(analysis.dropped.len(), 26);
}

#[test]
fn defect_14_memorability_weighs_kind_speaker_details_and_repeats() {
    let decision = one(&[ConversationMessage::assistant("We decided to run the nightly job from the new host.")]);
    let lesson = one(&[ConversationMessage::assistant("Turns out the nightly job ran twice on the old host.")]);
    assert!(memorability(&decision, Speaker::Assistant, 1) > memorability(&lesson, Speaker::Assistant, 1));
    assert!(memorability(&lesson, Speaker::User, 1) > memorability(&lesson, Speaker::Assistant, 1));
    assert!(memorability(&lesson, Speaker::Assistant, 2) > memorability(&lesson, Speaker::Assistant, 1));
    let detailed = one(&[ConversationMessage::assistant("Turns out the nightly job needs `--force` on the old host.")]);
    assert!(memorability(&detailed, Speaker::Assistant, 1) > memorability(&lesson, Speaker::Assistant, 1));
}

#[test]
fn a_statement_made_twice_outranks_one_made_once() {
    let mut messages: Vec<ConversationMessage> = (0..3)
        .map(|i| {
            ConversationMessage::assistant(format!("Turns out the {} step was slow.", ["lint", "build", "pack"][i]))
        })
        .collect();
    messages.insert(0, ConversationMessage::assistant("Turns out the deploy step was slow."));
    messages.push(ConversationMessage::assistant("Turns out the deploy step was slow."));
    let limits = CaptureLimits { max_candidates: 1, ..CaptureLimits::default() };
    let analysis = analyze_conversation(&messages, &limits);
    assert_eq!(contents(&analysis.candidates), ["Turns out the deploy step was slow."]);
    assert_eq!(analysis.candidates[0].message, 4, "the latest occurrence");
    assert_eq!(analysis.dropped.len(), 3);
}

#[test]
fn defect_14_conversational_lead_ins_and_fillers_are_stripped() {
    let cases = [
        (
            "Just to restate for the record: we decided to use PostgreSQL for billing.",
            "We decided to use PostgreSQL for billing.",
        ),
        (
            "Actually one more thing on the DB: the root cause was a missing index on orders.",
            "The root cause was a missing index on orders.",
        ),
        ("Actually, we decided to drop the Redis cache entirely.", "We decided to drop the Redis cache entirely."),
        ("OK, so, actually, we decided to ship on Fridays only.", "We decided to ship on Fridays only."),
        ("For the record, the convention is snake_case for tables.", "The convention is snake_case for tables."),
        ("To recap: we settled on weekly releases for the app.", "We settled on weekly releases for the app."),
    ];
    for (said, kept) in cases {
        assert_eq!(one(&[ConversationMessage::user(said)]).content, kept, "{said}");
    }
    // A lead-in that carries the cue stays, and so does context that is not filler.
    let kept = [
        "Root cause: the cache key ignored the tenant id.",
        "For the billing service: we decided to use PostgreSQL.",
        "In the billing service, we decided to use PostgreSQL.",
    ];
    for said in kept {
        assert_eq!(one(&[ConversationMessage::user(said)]).content, said, "{said}");
    }
}
