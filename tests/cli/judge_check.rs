//! `check`, `add` and `capture` with the pair judge: `--judge local` vetoes a close pair
//! that other numbers keep apart and confirms a paraphrase below the threshold; the
//! cosine judge (the default) decides by the threshold alone. Real model, real SQLite.

use std::path::Path;

use serde_json::Value;

use crate::support::{json, memdedup, require_model, run_json, sqlite_db, temp_file, text};

/// A standing meeting, the same meeting at another hour (cosine about 0.99 with the local
/// model, above every threshold), and a paraphrase of a rule below the default 0.90
/// threshold but above the judge's duplicate floor.
const STANDING: &str = "The user has a standing 1:1 with their manager every Thursday at 14:00.";
const MOVED: &str = "The user has a standing 1:1 with their manager every Thursday at 16:00.";
const ROTATION: &str = "Production database credentials are rotated every 90 days through Vault.";
const ROTATION_PARAPHRASE: &str = "The prod database passwords are changed every 90 days by Vault.";

fn similarity(a: &str, b: &str) -> f64 {
    let out = memdedup().args(["similarity", a, b]).assert().success();
    text(&out.get_output().stdout).trim().parse().expect("similarity prints a number")
}

fn reasons(value: &Value) -> Vec<&str> {
    value["reasons"].as_array().expect("reasons is an array").iter().map(|r| r.as_str().unwrap()).collect()
}

#[test]
fn check_local_vetoes_other_numbers_that_the_cosine_judge_calls_a_duplicate() {
    require_model();
    let cosine = similarity(STANDING, MOVED);
    assert!(cosine >= 0.95, "the pair is closer than every threshold: {cosine}");
    let (_dir, db) = sqlite_db();
    run_json(&db, &["add", STANDING]);

    let by_cosine = run_json(&db, &["check", MOVED, "--judge", "cosine"]);
    assert_eq!(by_cosine["is_duplicate"], true, "{by_cosine}");
    assert_eq!(by_cosine["reason"], "SemanticSimilar");
    assert_eq!((by_cosine["judge"].as_str(), by_cosine["verdict"].as_str()), (Some("cosine"), Some("duplicate")));

    let by_judge = run_json(&db, &["check", MOVED, "--judge", "local"]);
    assert_eq!(by_judge["is_duplicate"], false, "{by_judge}");
    assert_eq!(by_judge["reason"], Value::Null);
    assert_eq!((by_judge["judge"].as_str(), by_judge["verdict"].as_str()), (Some("local"), Some("related")));
    assert_eq!(by_judge["threshold"], by_cosine["threshold"]);
    let why = reasons(&by_judge);
    assert!(why.iter().any(|r| r.contains("14:00") && r.contains("16:00")), "{by_judge}");

    // The line says why, too.
    let line = memdedup().args(["--db", &db, "check", MOVED, "--judge", "local"]).assert().success();
    let line = text(&line.get_output().stdout);
    assert!(
        line.starts_with("related to memdedup://global/default/1, not a duplicate") && line.contains("16:00"),
        "{line}"
    );
}

#[test]
fn check_local_confirms_a_paraphrase_below_the_threshold() {
    require_model();
    let cosine = similarity(ROTATION, ROTATION_PARAPHRASE);
    assert!((0.6..0.9).contains(&cosine), "the pair is in the gray band below 0.90: {cosine}");
    let (_dir, db) = sqlite_db();
    run_json(&db, &["add", ROTATION]);

    let by_cosine = run_json(&db, &["check", ROTATION_PARAPHRASE, "--judge", "cosine"]);
    assert_eq!(by_cosine["is_duplicate"], false, "{by_cosine}");
    assert_eq!((by_cosine["judge"].as_str(), by_cosine["verdict"].as_str()), (Some("cosine"), Some("unique")));

    let by_judge = run_json(&db, &["check", ROTATION_PARAPHRASE, "--judge", "local"]);
    assert_eq!(by_judge["is_duplicate"], true, "{by_judge}");
    assert_eq!(by_judge["reason"], "SemanticSimilar");
    assert_eq!(by_judge["matched_urn"], "memdedup://global/default/1");
    assert!(by_judge["similarity_score"].as_f64().unwrap() < by_judge["threshold"].as_f64().unwrap(), "{by_judge}");
    assert!(reasons(&by_judge)[0].contains("nothing sets the texts apart"), "{by_judge}");
}

#[test]
fn add_and_capture_local_skip_a_true_duplicate_and_store_the_vetoed_one() {
    require_model();
    let (_dir, db) = sqlite_db();
    run_json(&db, &["add", STANDING, "--judge", "local"]);
    run_json(&db, &["add", ROTATION, "--judge", "local"]);

    let duplicate = run_json(&db, &["add", ROTATION_PARAPHRASE, "--judge", "local"]);
    assert_eq!(duplicate["stored"], Value::Null, "{duplicate}");
    assert_eq!(duplicate["check"]["verdict"], "duplicate");
    assert_eq!(duplicate["check"]["judge"], "local");

    let vetoed = run_json(&db, &["add", MOVED, "--judge", "local"]);
    assert!(vetoed["urn"].as_str().is_some(), "the vetoed pair is stored: {vetoed}");
    assert_eq!(vetoed["check"]["verdict"], "related");
    assert!(reasons(&vetoed["check"]).iter().any(|r| r.contains("16:00")), "{vetoed}");

    // capture takes the same flags; the moved meeting is now known exactly.
    let (_in_dir, candidates) = temp_file(
        "candidates.jsonl",
        format!("{{\"content\":\"{MOVED}\"}}\n{{\"content\":\"{}\"}}\n", STANDING.replace("14:00", "09:30")).as_bytes(),
    );
    let captured =
        memdedup().args(["--db", &db, "capture", "--json", "--judge", "local"]).arg(&candidates).assert().success();
    let captured = json(&captured.get_output().stdout);
    let results = captured["results"].as_array().unwrap();
    assert_eq!(results[0]["check"]["reason"], "ExactMatch", "{captured}");
    assert_eq!(results[1]["check"]["verdict"], "related", "{captured}");
    assert!(results[1]["urn"].as_str().is_some(), "{captured}");

    let list = run_json(&db, &["list"]);
    assert_eq!(list.as_array().unwrap().len(), 4, "{list}");
}

#[test]
fn the_configured_judge_applies_and_flags_beat_it() {
    require_model();
    let (dir, db) = sqlite_db();
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, "[dedup]\njudge = \"local\"\n").unwrap();
    let config = config.display().to_string();
    run_json(&db, &["add", STANDING]);
    let configured = run_json(&db, &["--config", &config, "check", MOVED]);
    assert_eq!((configured["judge"].as_str(), configured["verdict"].as_str()), (Some("local"), Some("related")));
    let flagged = run_json(&db, &["--config", &config, "check", MOVED, "--judge", "cosine"]);
    assert_eq!((flagged["judge"].as_str(), flagged["verdict"].as_str()), (Some("cosine"), Some("duplicate")));
    let from_env = memdedup()
        .env("MEMDEDUP_DEDUP_JUDGE", "local")
        .args(["--db", &db, "check", MOVED, "--json"])
        .assert()
        .success();
    assert_eq!(json(&from_env.get_output().stdout)["judge"], "local");
}

fn failure(args: &[&str], config: Option<&Path>) -> (i32, String) {
    let mut cmd = memdedup();
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    let out = cmd.args(args).assert().failure();
    let out = out.get_output();
    (out.status.code().unwrap_or(-1), text(&out.stderr))
}

#[test]
fn bad_judge_settings_fail_naming_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db").display().to_string();
    let config = dir.path().join("memdedup.toml");
    let check = ["--db", db.as_str(), "check", "Any memory text that is long enough to be checked semantically."];

    std::fs::write(&config, "[dedup]\njudge = \"llm\"\n").unwrap();
    let (_, stderr) = failure(&check, Some(&config));
    assert!(
        stderr.contains("memdedup.toml: dedup.judge: expected \"learned\", \"cosine\" or \"local\", got \"llm\""),
        "{stderr}"
    );

    std::fs::write(&config, "[dedup]\njudge = \"local\"\njudge_params = \"missing.json\"\n").unwrap();
    let (_, stderr) = failure(&check, Some(&config));
    assert!(stderr.contains("dedup.judge_params: cannot read ") && stderr.contains("missing.json"), "{stderr}");

    std::fs::write(dir.path().join("bad.json"), "{\"duplicate_floor\": 0.5, \"vetoes\": [\"rhymes\"]}").unwrap();
    std::fs::write(&config, "[dedup]\njudge_params = \"bad.json\"\n").unwrap();
    let (_, stderr) = failure(&check, Some(&config));
    assert!(
        stderr.contains("dedup.judge_params: ") && stderr.contains("bad.json: invalid judge parameters"),
        "{stderr}"
    );

    let missing = dir.path().join("nowhere.json").display().to_string();
    let (_, stderr) = failure(&[&check[..], &["--judge", "local", "--judge-params", &missing]].concat(), None);
    assert!(stderr.contains("--judge-params: cannot read ") && stderr.contains("nowhere.json"), "{stderr}");
    let (_, stderr) = failure(&[&check[..], &["--judge-params", &missing]].concat(), None);
    assert!(stderr.contains("--judge-params: is for the local judge"), "{stderr}");

    let (code, stderr) = failure(&[&check[..], &["--judge", "llm"]].concat(), None);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("invalid value 'llm' for '--judge <JUDGE>'"), "{stderr}");

    let bad_env = memdedup().env("MEMDEDUP_DEDUP_JUDGE", "gpt").args(check).assert().failure();
    let stderr = text(&bad_env.get_output().stderr);
    assert!(
        stderr.contains("MEMDEDUP_DEDUP_JUDGE: expected \"learned\", \"cosine\" or \"local\", got \"gpt\""),
        "{stderr}"
    );
}
