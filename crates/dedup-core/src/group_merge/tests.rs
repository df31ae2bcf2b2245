//! Tests of the group merge policy: survivor, text choice and metadata.

use serde_json::json;

use super::*;

const LIMITS: TextLimits = TextLimits { max_sentences: 2, max_bytes: 1 << 20 };

fn member(id: i64, verified: bool, occurrence_count: u64, text: &str) -> MemberView<'_> {
    MemberView { id, verified, occurrence_count, text }
}

fn map(value: serde_json::Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

#[test]
fn the_survivor_is_verified_first_then_most_seen_then_lowest_id() {
    let members = [member(5, false, 9, "a"), member(7, true, 1, "b"), member(6, true, 1, "c")];
    assert_eq!(choose_survivor(&members), Some(2));
    let members = [member(5, false, 2, "a"), member(3, false, 9, "b")];
    assert_eq!(choose_survivor(&members), Some(1));
    let members = [member(5, false, 2, "a"), member(3, false, 2, "b")];
    assert_eq!(choose_survivor(&members), Some(1));
    assert_eq!(choose_survivor(&[]), None);
}

#[test]
fn a_canonical_text_that_keeps_every_specific_is_used() {
    let members = [member(1, true, 1, "Run `cargo test` before a push."), member(2, false, 1, "Always test first.")];
    let (text, choice) = choose_text("Run `cargo test` before every push.", &members, &LIMITS).unwrap();
    assert_eq!(text, "Run `cargo test` before every push.");
    assert_eq!(choice, TextChoice::Canonical);
}

#[test]
fn a_canonical_text_that_drops_a_code_span_falls_back_to_the_best_existing_text() {
    let members = [member(1, true, 1, "Always test first."), member(2, false, 1, "Run `cargo test` before a push.")];
    let (text, choice) = choose_text("Always run the tests before pushing.", &members, &LIMITS).unwrap();
    assert_eq!(text, "Run `cargo test` before a push.");
    match choice {
        TextChoice::Existing { from, rejected_because } => {
            assert_eq!(from, 2);
            assert_eq!(rejected_because, "it drops the code span `cargo test`");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_guard_checks_numbers_paths_flags_length_and_sentences() {
    let originals = ["Retry 3 times with --force in src/db.py."];
    let problem = |c: &str| canonical_text_problem(c, &originals, &LIMITS);
    assert_eq!(problem("Retry with --force in src/db.py.").unwrap(), "it drops the number 3");
    assert_eq!(problem("Retry 3 times in src/db.py.").unwrap(), "it drops the flag --force");
    assert_eq!(problem("Retry 3 times with --force.").unwrap(), "it drops the path src/db.py");
    assert_eq!(problem("").unwrap(), "it is empty");
    assert_eq!(
        problem("Retry 3 times. Use --force. In src/db.py.").unwrap(),
        "it has 3 sentences, over the limit of 2"
    );
    let tight = TextLimits { max_sentences: 2, max_bytes: 10 };
    assert!(
        canonical_text_problem("Retry 3 times with --force in src/db.py.", &originals, &tight)
            .unwrap()
            .contains("over the limit of 10")
    );
    assert_eq!(problem("In src/db.py, retry 3 times with --force."), None);
}

#[test]
fn the_best_existing_text_prefers_specifics_then_length_then_lowest_id() {
    let members = [
        member(3, false, 1, "Test first."),
        member(1, false, 1, "Test first!"),
        member(2, false, 1, "Run `make test` first."),
    ];
    assert_eq!(best_existing_text(&members, &LIMITS), Some(2));
    let members = [member(3, false, 1, "Test first."), member(1, false, 1, "Test first!")];
    assert_eq!(best_existing_text(&members, &LIMITS), Some(1));
    let members = [member(3, false, 1, "Test it first."), member(1, false, 1, "Test first!")];
    assert_eq!(best_existing_text(&members, &LIMITS), Some(0));
}

#[test]
fn tags_and_mcp_servers_intersect_and_vanish_when_nothing_is_common() {
    let merged = merge_metadata(
        &map(json!({"tags": ["rust", "cli"], "mcp_servers": ["github"]})),
        &[&map(json!({"tags": ["cli", "rust", "x"], "mcp_servers": ["jira"]}))],
    );
    assert_eq!(merged, map(json!({"tags": ["rust", "cli"]})));
    let merged = merge_metadata(&map(json!({"tags": ["rust"]})), &[&map(json!({}))]);
    assert!(merged.is_empty(), "{merged:?}");
}

#[test]
fn repo_and_repos_become_one_union() {
    let merged = merge_metadata(
        &map(json!({"repo": "memdedup", "os": ["linux"], "paths": ["src/"]})),
        &[&map(json!({"repos": ["engrammar", "memdedup"], "os": "macos", "paths": ["docs/"]}))],
    );
    assert_eq!(
        merged,
        map(json!({"repos": ["memdedup", "engrammar"], "os": ["linux", "macos"], "paths": ["src/", "docs/"]}))
    );
}

#[test]
fn an_or_gated_key_is_dropped_when_one_member_applies_everywhere() {
    let merged = merge_metadata(&map(json!({"repos": ["a"], "os": ["linux"]})), &[&map(json!({"os": ["linux"]}))]);
    assert_eq!(merged, map(json!({"os": ["linux"]})));
}

#[test]
fn categories_union_and_unknown_keys_keep_the_survivors_value() {
    let merged = merge_metadata(
        &map(json!({"categories": ["dev/backend"], "source": "s1"})),
        &[&map(json!({"categories": ["dev/db", "dev/backend"], "source": "s2", "pinned": true}))],
    );
    assert_eq!(merged, map(json!({"categories": ["dev/backend", "dev/db"], "source": "s1", "pinned": true})));
}

#[test]
fn prerequisites_objects_follow_the_same_policy() {
    let merged = merge_metadata(
        &map(json!({"prerequisites": {"tags": ["a", "b"], "repos": ["x"], "custom": 1}})),
        &[&map(json!({"prerequisites": {"tags": ["b"], "repo": "y", "other": 2}}))],
    );
    assert_eq!(merged, map(json!({"prerequisites": {"tags": ["b"], "repos": ["x", "y"], "custom": 1}})));
    let merged = merge_metadata(&map(json!({"prerequisites": {"tags": ["a"]}})), &[&map(json!({"note": "n"}))]);
    assert_eq!(merged, map(json!({"note": "n"})));
}
