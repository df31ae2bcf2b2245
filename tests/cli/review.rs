//! `memdedup review`: the pairs the learned judge was unsure of, queued by `add`, listed and
//! decided merge (undoable), apart or skip.

use serde_json::Value;

use crate::pairs::unsure_pair;
use crate::support::{memdedup, require_model, run_json, sqlite_db, text};

/// Adds a pair the learned judge is unsure of (tests/cli/pairs.rs) to `namespace`; the ids.
fn add_pair(db: &str, namespace: &str) -> (i64, i64) {
    let [first, second] = unsure_pair();
    let first = run_json(db, &["add", first, "-n", namespace]);
    let second = run_json(db, &["add", second, "-n", namespace]);
    assert_eq!(second["check"]["verdict"], "uncertain", "{second}");
    (first["stored"].as_i64().expect("stored"), second["stored"].as_i64().expect("stored"))
}

fn pending(db: &str, namespace: &str) -> Vec<Value> {
    run_json(db, &["review", "-n", namespace]).as_array().expect("an array").clone()
}

fn decide(db: &str, args: &[&str]) -> (i32, String, String) {
    let out = memdedup().args(["--db", db, "review", "decide"]).args(args).output().expect("runs");
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[test]
fn an_uncertain_add_is_queued_and_merge_goes_through_the_ledger() {
    require_model();
    let (_dir, db) = sqlite_db();
    let (a, b) = add_pair(&db, "lessons");
    let queue = pending(&db, "lessons");
    assert_eq!(queue.len(), 1, "{queue:?}");
    let entry = &queue[0];
    assert_eq!(
        (entry["status"].as_str(), entry["source"].as_str(), entry["judge"].as_str()),
        (Some("pending"), Some("add"), Some("learned"))
    );
    assert_eq!((entry["low"]["id"].as_i64(), entry["high"]["id"].as_i64()), (Some(a), Some(b)));
    assert_eq!(entry["low"]["text"], unsure_pair()[0]);
    assert!(entry["probability"].as_f64().is_some_and(|p| p > 0.0 && p < 1.0), "{entry}");
    assert!(entry["reasons"][0].as_str().is_some_and(|r| r.contains("uncertain band")), "{entry}");
    // The human listing names both texts and how to decide.
    let listed = memdedup().args(["--db", &db, "review"]).assert().success();
    let listed = text(&listed.get_output().stdout);
    assert!(
        listed.contains(unsure_pair()[1]) && listed.contains("memdedup review decide ID merge|apart|skip"),
        "{listed}"
    );

    let id = entry["id"].as_i64().expect("id").to_string();
    let (code, stdout, stderr) = decide(&db, &[&id, "merge"]);
    assert_eq!(code, 0, "{stderr}");
    let undo = stdout.lines().find_map(|l| l.strip_prefix("undo with: ")).expect("an undo hint").to_owned();
    assert!(undo.contains(&format!("--db {db}")), "the hint works as pasted: {undo}");
    let live = run_json(&db, &["list", "--limit", "0"]);
    assert_eq!(live.as_array().map(Vec::len), Some(1), "{live}");
    assert!(pending(&db, "lessons").is_empty());
    let all = run_json(&db, &["review", "--all"]);
    assert_eq!((all[0]["status"].as_str(), all[0]["merge_id"].as_i64()), (Some("merged"), Some(1)));
    // Deciding again is refused and changes nothing.
    let (code, _, stderr) = decide(&db, &[&id, "apart"]);
    assert_eq!(code, 1);
    assert!(stderr.contains(&format!("review entry {id} cannot be decided: it is merged")), "{stderr}");
    // The printed undo restores both memories.
    let words: Vec<&str> = undo.split_whitespace().skip(1).collect();
    memdedup().args(&words).assert().success();
    assert_eq!(run_json(&db, &["list", "--limit", "0"]).as_array().map(Vec::len), Some(2));
}

#[test]
fn apart_and_skip_and_bad_decisions() {
    require_model();
    let (_dir, db) = sqlite_db();
    add_pair(&db, "apart");
    add_pair(&db, "skip");
    let apart = pending(&db, "apart")[0]["id"].as_i64().expect("id").to_string();
    let skip = pending(&db, "skip")[0]["id"].as_i64().expect("id").to_string();
    // Bad input: named, exit 2 (usage) or 1 (no such entry), nothing decided.
    let (code, _, stderr) = decide(&db, &["x1", "apart"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("`x1` is not a review entry id"), "{stderr}");
    let (code, _, stderr) = decide(&db, &["999", "apart"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("no review entry with id 999"), "{stderr}");
    let (code, _, stderr) = decide(&db, &[&apart, "merge", "--survivor", "77"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--survivor 77 is not one of the pair's memories"), "{stderr}");
    let (code, _, stderr) = decide(&db, &[&apart, "maybe"]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(pending(&db, "apart").len(), 1);

    let (code, stdout, stderr) = decide(&db, &[&apart, "apart"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("kept apart; the pair will not be proposed again"), "{stdout}");
    assert!(pending(&db, "apart").is_empty());
    let decided = run_json(&db, &["review", "decide", &skip, "skip"]);
    assert_eq!(decided["status"], "skipped", "{decided}");
    assert!(pending(&db, "skip").is_empty());
    let all = run_json(&db, &["review", "--all"]);
    let statuses: Vec<&str> = all.as_array().expect("array").iter().filter_map(|e| e["status"].as_str()).collect();
    assert_eq!(statuses, ["apart", "skipped"]);
    // Both memories of each pair stay live.
    assert_eq!(run_json(&db, &["list", "--limit", "0"]).as_array().map(Vec::len), Some(4));
}

#[test]
fn dedup_queues_the_pairs_the_learned_judge_is_unsure_of() {
    require_model();
    let (dir, db) = sqlite_db();
    // Stored by the cosine judge at a high threshold, so `add` queues nothing.
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, "[dedup]\ndefault_threshold = 0.99\njudge = \"cosine\"\n").expect("writable");
    let config = config.display().to_string();
    let [first, second] = unsure_pair();
    for text in [first, second, "Prefer composition over inheritance in new code"] {
        memdedup().args(["--db", &db, "--config", &config, "add", text, "-n", "lessons"]).assert().success();
    }
    assert!(pending(&db, "lessons").is_empty());
    memdedup().args(["--db", &db, "dedup", "-n", "lessons", "--judge", "learned"]).assert().success();
    let queue = pending(&db, "lessons");
    assert_eq!(queue.len(), 1, "{queue:?}");
    assert_eq!((queue[0]["source"].as_str(), queue[0]["judge"].as_str()), (Some("dedup"), Some("learned")));
    assert_eq!((queue[0]["low"]["id"].as_i64(), queue[0]["high"]["id"].as_i64()), (Some(1), Some(2)));
    // Decided apart, a second run neither merges nor queues the pair again.
    let id = queue[0]["id"].as_i64().expect("id").to_string();
    memdedup().args(["--db", &db, "review", "decide", &id, "apart"]).assert().success();
    memdedup().args(["--db", &db, "dedup", "-n", "lessons", "--judge", "learned"]).assert().success();
    assert!(pending(&db, "lessons").is_empty());
    assert_eq!(run_json(&db, &["list", "--limit", "0"]).as_array().map(Vec::len), Some(3));
}
