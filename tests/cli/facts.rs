//! `memdedup facts add|list|update|delete|context|profile` on a temporary SQLite database.

use predicates::str::contains;
use serde_json::Value;

use crate::support::{json, key_set, keys, memdedup, sqlite_db, temp_file, text};

/// Runs `memdedup --db DB facts args…`, expecting success, and returns stdout.
fn facts(db: &str, args: &[&str]) -> String {
    let assert = memdedup().args(["--db", db, "facts"]).args(args).assert().success();
    text(&assert.get_output().stdout)
}

/// Runs `memdedup --db DB facts args… --json`, expecting success, and parses stdout.
fn facts_json(db: &str, args: &[&str]) -> Value {
    let assert = memdedup().args(["--db", db, "facts"]).args(args).arg("--json").assert().success();
    json(&assert.get_output().stdout)
}

/// The id in `added fact_xxxxxxxx to …`.
fn added_id(line: &str) -> String {
    let id = line.strip_prefix("added ").and_then(|rest| rest.split_whitespace().next());
    id.unwrap_or_else(|| panic!("expected `added <id> to …`, got {line:?}")).to_owned()
}

#[test]
fn add_reports_added_duplicate_and_low_confidence_and_exits_0() {
    let (_dir, db) = sqlite_db();
    let out = facts(&db, &["add", "Prefers Rust for backends", "--category", "preference", "--confidence", "0.9"]);
    let id = added_id(out.trim_end());
    assert!(id.starts_with("fact_") && id.len() == 13, "{out}");
    assert_eq!(out, format!("added {id} to global/default\n"));

    let out = facts(&db, &["add", "  PREFERS RUST FOR BACKENDS ", "--confidence", "0.99"]);
    assert_eq!(out, format!("skipped: duplicate of {id} in global/default (same content, ignoring case)\n"));

    let out = facts(&db, &["add", "Maybe likes jazz", "--confidence", "0.3"]);
    assert_eq!(out, "skipped: confidence 0.30 is below the threshold 0.50\n");
    let out = facts(&db, &["add", "Maybe likes jazz", "--confidence", "0.3", "--min-confidence", "0.2"]);
    assert!(out.starts_with("added fact_"), "{out}");

    let listed = facts_json(&db, &["list"]);
    let contents: Vec<&str> = listed.as_array().unwrap().iter().map(|f| f["content"].as_str().unwrap()).collect();
    assert_eq!(contents, ["Prefers Rust for backends", "Maybe likes jazz"]);
}

#[test]
fn add_json_prints_the_tagged_outcome() {
    let (_dir, db) = sqlite_db();
    let added = facts_json(&db, &["add", "Works at Acme", "--source", "thread-7", "-c", "knowledge"]);
    assert_eq!(added["outcome"], "added");
    assert_eq!(added["evicted"], Value::Array(vec![]));
    let fact = &added["fact"];
    assert_eq!(
        keys(fact),
        key_set(&["id", "scope", "content", "category", "confidence", "source", "createdAt", "updatedAt"])
    );
    assert_eq!(fact["content"], "Works at Acme");
    assert_eq!(fact["category"], "knowledge");
    assert_eq!(fact["confidence"], 1.0, "a fact added by hand defaults to certain");
    assert_eq!(fact["source"], "thread-7");
    assert_eq!(fact["scope"], serde_json::json!({"domain": "global", "namespace": "default"}));
    assert!(fact["createdAt"].as_str().unwrap().ends_with('Z'), "{fact}");

    let duplicate = facts_json(&db, &["add", "works at ACME"]);
    assert_eq!(duplicate["outcome"], "duplicate");
    assert_eq!(duplicate["existing"], *fact);

    let low = facts_json(&db, &["add", "Might move", "--confidence", "0.25"]);
    assert_eq!(low, serde_json::json!({"outcome": "low_confidence", "confidence": 0.25, "threshold": 0.5}));
}

#[test]
fn a_full_scope_evicts_its_lowest_confidence_fact() {
    let (_dir, db) = sqlite_db();
    let low = added_id(facts(&db, &["add", "low", "--confidence", "0.6", "--max-facts", "2"]).trim_end());
    facts(&db, &["add", "high", "--confidence", "0.9", "--max-facts", "2"]);
    let out = facts(&db, &["add", "new", "--confidence", "0.7", "--max-facts", "2"]);
    let new = added_id(out.lines().next().unwrap());
    assert_eq!(
        out,
        format!("added {new} to global/default\nevicted {low} (confidence 0.60) to stay within the fact limit\n")
    );
    let list = facts(&db, &["list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(lines[0].contains("0.90  context     high"), "{list}");
    assert!(lines[1].starts_with(&format!("{new}  0.70  context     new")), "{list}");
}

#[test]
fn update_changes_only_the_given_fields() {
    let (_dir, db) = sqlite_db();
    let added = facts_json(&db, &["add", "Uses vim", "--category", "behavior", "--confidence", "0.6"]);
    let id = added["fact"]["id"].as_str().unwrap().to_owned();
    let updated = facts_json(&db, &["update", &id, "--confidence", "0.95"]);
    assert_eq!(updated["confidence"], 0.95);
    assert_eq!(updated["content"], "Uses vim");
    assert_eq!(updated["category"], "behavior");
    assert_eq!(updated["createdAt"], added["fact"]["createdAt"]);
    assert_ne!(updated["updatedAt"], added["fact"]["updatedAt"]);

    let out = facts(&db, &["update", &id, "--content", "Uses neovim", "--category", "preference"]);
    assert_eq!(out, format!("{id}  0.95  preference  Uses neovim\n"));

    // Nothing to change is a usage error.
    memdedup().args(["--db", &db, "facts", "update", &id]).assert().code(2).stderr(contains("nothing to update"));
    // Another fact's content (ignoring case) is a conflict.
    facts(&db, &["add", "Drinks tea"]);
    memdedup()
        .args(["--db", &db, "facts", "update", &id, "--content", "DRINKS TEA"])
        .assert()
        .code(1)
        .stderr(contains("conflict: the new content of fact"));
}

#[test]
fn unknown_ids_fail_clearly() {
    let (_dir, db) = sqlite_db();
    facts(&db, &["add", "Has a cat"]);
    for args in [
        vec!["delete", "fact_00000000"],
        vec!["update", "fact_00000000", "--confidence", "0.7"],
        vec!["delete", "not-an-id"],
    ] {
        let assert = memdedup().args(["--db", &db, "facts"]).args(&args).assert().code(1).stdout("");
        let stderr = text(&assert.get_output().stderr);
        assert_eq!(stderr, format!("error: no fact with id \"{}\"\n", args[1]), "{args:?}");
    }
}

#[test]
fn delete_removes_the_fact() {
    let (_dir, db) = sqlite_db();
    let id = added_id(facts(&db, &["add", "Lives in Lisbon"]).trim_end());
    facts(&db, &["add", "Cycles to work"]);
    assert_eq!(facts(&db, &["delete", &id]), format!("deleted {id}\n"));
    let list = facts(&db, &["list"]);
    assert!(!list.contains(&id) && list.contains("Cycles to work"), "{list}");
    assert_eq!(
        facts_json(&db, &["delete", &added_id(facts(&db, &["add", "x"]).trim_end())])["deleted"]
            .as_str()
            .map(|s| s.len()),
        Some(13)
    );
    memdedup().args(["--db", &db, "facts", "delete", &id]).assert().code(1).stderr(contains("no fact with id"));
}

#[test]
fn list_is_per_scope() {
    let (_dir, db) = sqlite_db();
    facts(&db, &["add", "Prefers Rust", "--namespace", "alice"]);
    facts(&db, &["add", "Prefers Rust", "--namespace", "bob", "--domain", "team"]);
    assert_eq!(facts_json(&db, &["list", "--namespace", "alice"]).as_array().unwrap().len(), 1);
    assert_eq!(facts_json(&db, &["list", "--namespace", "bob", "--domain", "team"]).as_array().unwrap().len(), 1);
    assert_eq!(facts(&db, &["list", "--namespace", "carol"]), "no facts in global/carol\n");
    memdedup()
        .args(["--db", &db, "facts", "list", "--namespace", "no such/ns"])
        .assert()
        .code(2)
        .stderr(contains("invalid namespace"));
}

#[test]
fn bad_categories_and_confidences_are_usage_errors() {
    let (_dir, db) = sqlite_db();
    memdedup()
        .args(["--db", &db, "facts", "add", "x", "--category", "opinion"])
        .assert()
        .code(2)
        .stderr(contains("preference, knowledge, context, behavior, goal, correction"));
    memdedup()
        .args(["--db", &db, "facts", "add", "x", "--confidence", "1.5"])
        .assert()
        .code(2)
        .stderr(contains("outside [0, 1]"));
    memdedup()
        .args(["--db", &db, "facts", "add", "x", "--max-facts", "0"])
        .assert()
        .code(2)
        .stderr(contains("at least 1"));
    // Blank content is bad input (exit 1), and nothing is stored.
    memdedup().args(["--db", &db, "facts", "add", "   "]).assert().code(1).stderr(contains("invalid content"));
    assert_eq!(facts(&db, &["list"]), "no facts in global/default\n");
}

#[test]
fn context_prints_the_prompt_text_within_the_budget() {
    let (_dir, db) = sqlite_db();
    assert_eq!(facts(&db, &["context"]), "", "nothing known, nothing printed");
    let profile = r#"{"user": {"workContext": {"summary": "Backend engineer"}, "topOfMind": {"summary": "Release 2.0"}},
                      "history": {"recentMonths": {"summary": "Shipped retries"}}}"#;
    let (_pdir, path) = temp_file("profile.json", profile.as_bytes());
    let shown = json(facts(&db, &["profile", "--set", path.to_str().unwrap()]).as_bytes());
    assert_eq!(shown["user"]["workContext"]["summary"], "Backend engineer");
    assert_eq!(shown["user"]["personalContext"]["summary"], "");
    facts(&db, &["add", "Prefers tabs", "--category", "preference", "--confidence", "0.7"]);
    facts(&db, &["add", "Corrected: the service is in Go", "--category", "correction", "--confidence", "0.95"]);

    assert_eq!(
        facts(&db, &["context"]),
        "User Context:\n- Work: Backend engineer\n- Current Focus: Release 2.0\n\n\
         History:\n- Recent: Shipped retries\n\n\
         Facts:\n- [correction | 0.95] Corrected: the service is in Go\n- [preference | 0.70] Prefers tabs\n"
    );

    // A tight budget drops the lowest-confidence fact first.
    let full = facts_json(&db, &["context"]);
    let tokens = full["tokens"].as_u64().unwrap();
    assert_eq!(full["max_tokens"], 2000);
    let budget = (tokens - 3).to_string();
    let tight = facts_json(&db, &["context", "--max-tokens", &budget]);
    let text = tight["context"].as_str().unwrap();
    assert!(text.contains("Go") && !text.contains("Prefers tabs"), "{text}");
    assert!(tight["tokens"].as_u64().unwrap() <= tokens - 3);
    // A budget smaller than the profile cuts the text and says so.
    let cut = facts_json(&db, &["context", "--max-tokens", "8"]);
    assert!(cut["context"].as_str().unwrap().ends_with("\n..."), "{cut}");
    assert!(cut["tokens"].as_u64().unwrap() <= 8, "{cut}");
}

#[test]
fn logs_name_skipped_facts_by_fingerprint_only() {
    let (_dir, db) = sqlite_db();
    facts(&db, &["add", "Secret project Nightingale"]);
    let skipped = |args: &[&str]| {
        let assert = memdedup().args(["-v", "--db", &db, "facts", "add"]).args(args).assert().success();
        text(&assert.get_output().stderr)
    };
    let stderr = skipped(&["Secret plan Osprey", "--confidence", "0.1"]);
    assert!(stderr.contains("low-confidence fact skipped") && stderr.contains("fingerprint"), "{stderr}");
    assert!(!stderr.contains("Osprey"), "{stderr}");
    let stderr = skipped(&["SECRET PROJECT NIGHTINGALE"]);
    assert!(stderr.contains("duplicate fact skipped") && stderr.contains("fingerprint"), "{stderr}");
    assert!(!stderr.to_lowercase().contains("nightingale"), "{stderr}");
}

#[test]
fn help_works_for_every_facts_command() {
    for command in ["add", "list", "update", "delete", "context", "profile"] {
        memdedup().args(["facts", command, "--help"]).assert().success().stdout(contains("Usage: memdedup facts"));
    }
    memdedup().args(["facts", "--help"]).assert().success().stdout(contains("context"));
}

#[test]
fn defect_11_context_max_tokens_zero_is_a_usage_error() {
    let (_dir, db) = sqlite_db();
    for budget in ["0", "1000001"] {
        memdedup()
            .args(["--db", &db, "facts", "context", "--max-tokens", budget])
            .assert()
            .code(2)
            .stdout("")
            .stderr(contains("is not in 1..=1000000"));
    }
}

/// Defect "malformed profile input erases the profile": `facts profile --set` refuses a
/// wrong shape or an unknown field with exit 2, and the profile is unchanged.
#[test]
fn malformed_profile_input_erases_the_profile_no_more() {
    let (_dir, db) = sqlite_db();
    let good = r#"{"user": {"workContext": {"summary": "Backend engineer"}}}"#;
    let (_gdir, path) = temp_file("profile.json", good.as_bytes());
    facts(&db, &["profile", "--set", path.to_str().unwrap()]);
    for (bad, expected) in [
        ("[]", "must be an object, not an array"),
        (r#"{"unknown": 1}"#, "unknown field `unknown`"),
        (r#"{"user": {"workContext": "Backend"}}"#, "`user.workContext` must be an object"),
        ("not json", "is not JSON"),
    ] {
        memdedup()
            .args(["--db", &db, "facts", "profile", "--set", "-"])
            .write_stdin(bad)
            .assert()
            .code(2)
            .stderr(contains(expected));
        let shown = json(facts(&db, &["profile"]).as_bytes());
        assert_eq!(shown["user"]["workContext"]["summary"], "Backend engineer", "{bad} changed the profile");
    }
}
