//! `memdedup review` in a terminal, driven through a pseudo-terminal as a person would:
//! one pair at a time with its differences marked, keys to merge, keep apart, skip and
//! undo the last decision, and the store checked afterwards.

use std::process::Command;

use rexpect::session::{PtySession, spawn_command};
use serde_json::Value;

use crate::pairs::review_pairs as pairs;
use crate::support::{CLEARED_ENV_VARS, require_model, run_json, sqlite_db};

/// A store with both review pairs (tests/cli/pairs.rs) queued, lessons first.
fn queued_db() -> (tempfile::TempDir, String) {
    let (dir, db) = sqlite_db();
    for (namespace, first, second) in pairs() {
        run_json(&db, &["add", "-n", namespace, first]);
        let added = run_json(&db, &["add", "-n", namespace, second]);
        assert_eq!(added["check"]["verdict"], "uncertain", "{added}");
    }
    assert_eq!(run_json(&db, &["review"]).as_array().map(Vec::len), Some(2));
    (dir, db)
}

/// `memdedup --db DB review` on a pseudo-terminal, without colour (the differences are
/// marked `[-word-]` and `{+word+}`).
fn review_session(db: &str) -> PtySession {
    on_a_pty(&["--db", db, "review"])
}

/// `memdedup ARGS…` on a pseudo-terminal, with a clean environment and no colour.
fn on_a_pty(args: &[&str]) -> PtySession {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("memdedup"));
    for name in CLEARED_ENV_VARS {
        command.env_remove(name);
    }
    command.env("NO_COLOR", "1").env("TERM", "xterm").current_dir(std::env::temp_dir());
    command.args(args);
    spawn_command(command, Some(60_000)).expect("memdedup starts on a pty")
}

/// Types `key` (sent at once: the review reads keys in raw mode, without Enter).
fn press(pty: &mut PtySession, key: &str, what: &str) {
    pty.send(key).unwrap_or_else(|e| panic!("{what}: {e}"));
    pty.flush().unwrap_or_else(|e| panic!("{what}: {e}"));
}

fn statuses(db: &str) -> Vec<(String, String)> {
    let all = run_json(db, &["review", "--all"]);
    all.as_array()
        .expect("an array")
        .iter()
        .map(|r| {
            (
                r["scope"]["namespace"].as_str().unwrap_or_default().to_owned(),
                r["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn live_count(db: &str) -> usize {
    run_json(db, &["list", "--limit", "0"]).as_array().map_or(0, Vec::len)
}

#[test]
fn review_in_a_terminal_merges_and_keeps_apart_pair_by_pair() {
    require_model();
    let (_dir, db) = queued_db();
    let mut pty = review_session(&db);
    pty.exp_string("[1/2] review 1").expect("the first pair with its progress");
    pty.exp_string("why: learned judge").expect("the judge's reason");
    pty.exp_string("[q] quit > ").expect("the keys");
    press(&mut pty, "m", "merge");
    pty.exp_string("review 1: merged memory 2 into 1 (merge 1").expect("merged");
    pty.exp_string("[2/2] review 2").expect("the second pair");
    pty.exp_string("[-month,-]").expect("the word only the first text has is marked");
    pty.exp_string("{+week,+}").expect("the word only the second text has is marked");
    press(&mut pty, "a", "apart");
    pty.exp_string("review 2: kept apart").expect("kept apart");
    pty.exp_string("all 2 pairs decided; [u] undo last  [q] quit > ").expect("a last chance to undo");
    press(&mut pty, "q", "quit");
    pty.exp_string("reviewed: 1 merged, 1 kept apart, 0 skipped, 0 undone; 0 left for later").expect("the tally");
    pty.exp_eof().expect("it exits");
    assert_eq!(statuses(&db), [("lessons".to_owned(), "merged".to_owned()), ("ops".to_owned(), "apart".to_owned())]);
    assert_eq!(live_count(&db), 3, "one memory merged away");
    let merges = run_json(&db, &["merges"]);
    assert_eq!(merges.as_array().map(Vec::len), Some(1), "{merges}");
}

#[test]
fn review_in_a_terminal_undoes_the_last_decision_and_quits_leaving_the_rest() {
    require_model();
    let (_dir, db) = queued_db();
    let mut pty = review_session(&db);
    pty.exp_string("[1/2] review 1").expect("the first pair");
    press(&mut pty, "m", "merge");
    pty.exp_string("merged memory 2 into 1").expect("merged");
    pty.exp_string("[2/2] review 2").expect("the second pair");
    // Undo the merge: both memories are back and the first pair is shown again.
    press(&mut pty, "u", "undo");
    pty.exp_string("undid merge 1: review 1 is pending again").expect("undone");
    pty.exp_string("[1/2] review 1").expect("the first pair again");
    press(&mut pty, "s", "skip");
    pty.exp_string("review 1: skipped").expect("skipped");
    pty.exp_string("[2/2] review 2").expect("the second pair again");
    press(&mut pty, "q", "quit");
    pty.exp_string("reviewed: 0 merged, 0 kept apart, 1 skipped, 1 undone; 1 left for later").expect("the tally");
    pty.exp_eof().expect("it exits");
    assert_eq!(statuses(&db), [("lessons".to_owned(), "skipped".to_owned()), ("ops".to_owned(), "pending".to_owned())]);
    assert_eq!(live_count(&db), 4, "the undone merge restored both memories");
    let merges = run_json(&db, &["merges", "--all"]);
    assert!(merges[0]["undone_at"].is_string(), "{merges}");
}

#[test]
fn review_outside_a_terminal_lists_and_list_forces_it() {
    require_model();
    let (_dir, db) = queued_db();
    // Not a terminal (the test's pipes): the listing, as before.
    let listed = crate::support::memdedup().args(["--db", &db, "review"]).output().expect("runs");
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.contains("2 pairs pending; decide with"), "{listed}");
    // On a terminal, --list prints the same listing and waits for no key.
    let mut pty = on_a_pty(&["--db", &db, "review", "--list"]);
    pty.exp_string("2 pairs pending; decide with").expect("the listing");
    pty.exp_eof().expect("it exits without a key");
    let _: Value = run_json(&db, &["review"]);
}
