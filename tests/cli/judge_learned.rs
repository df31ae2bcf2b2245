//! `check` and `add` with the learned pair judge, end to end: the README's type-hints pair
//! is refused as a duplicate, "Always/Never run the migrations" is stored as related, and
//! without its model the judge falls back to cosine and says so. Real models, real SQLite.

use serde_json::Value;

use crate::support::{memdedup, require_model, run_json, sqlite_db, text};

/// The README's opening pair: 46 and 42 characters, under seed 004's old 50-character
/// minimum, so before three-word memories were compared it was stored twice.
const TYPE_HINTS: &str = "always use type hints for function parameters";
const TYPE_HINTS_AGAIN: &str = "use type hints on all function parameters";
const ALWAYS: &str = "Always run the migrations before starting the API server.";
const NEVER: &str = "Never run the migrations before starting the API server.";

fn add(db: &str, content: &str) -> Value {
    run_json(db, &["add", content, "--judge", "learned"])
}

#[test]
fn learned_add_refuses_the_readme_type_hints_pair_as_a_duplicate() {
    require_model();
    let (_dir, db) = sqlite_db();
    let first = add(&db, TYPE_HINTS);
    assert!(first["stored"].is_u64(), "{first}");
    assert_eq!(first["embedded"], true, "seven words are compared by meaning: {first}");

    let again = add(&db, TYPE_HINTS_AGAIN);
    let check = &again["check"];
    assert_eq!(again["stored"], Value::Null, "{again}");
    assert_eq!(check["reason"], "SemanticSimilar", "{again}");
    assert_eq!((check["judge"].as_str(), check["verdict"].as_str()), (Some("learned"), Some("duplicate")));
    let p = check["probability"].as_f64().expect("the learned judge states its probability");
    assert!(p > 0.5 && p <= 1.0, "{check}");
    assert!(check["reasons"][0].as_str().unwrap().contains("P(duplicate)"), "{check}");

    // The line a person reads says the same.
    let line = memdedup().args(["--db", &db, "check", TYPE_HINTS_AGAIN, "--judge", "learned"]).assert().success();
    let line = text(&line.get_output().stdout);
    assert!(
        line.starts_with("duplicate of memdedup://global/default/1: the learned judge gives P(duplicate)"),
        "{line}"
    );
}

#[test]
fn learned_add_stores_always_never_as_related_not_as_a_duplicate() {
    require_model();
    let (_dir, db) = sqlite_db();
    add(&db, ALWAYS);
    // Cosine alone calls the opposite a duplicate at the default threshold.
    let by_cosine = run_json(&db, &["check", NEVER, "--judge", "cosine"]);
    assert_eq!(by_cosine["is_duplicate"], true, "{by_cosine}");

    let never = add(&db, NEVER);
    let check = &never["check"];
    assert!(never["stored"].is_u64(), "the opposite is stored: {never}");
    assert_eq!((check["judge"].as_str(), check["verdict"].as_str()), (Some("learned"), Some("related")), "{never}");
    assert!(check["probability"].as_f64().unwrap() < 0.5, "{check}");
    assert_eq!(check["likely_duplicate"], Value::Null, "{check}");
}

#[test]
fn learned_judge_without_its_model_falls_back_to_cosine_and_says_so() {
    require_model();
    // The installed model directory, without the pair judge's model file.
    let installed = crate::support::installed_model_dir();
    let partial = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&installed).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "pair_judge.onnx" {
            std::os::unix::fs::symlink(entry.path(), partial.path().join(entry.file_name())).unwrap();
        }
    }
    let (_dir, db) = sqlite_db();
    let model_dir = partial.path().to_str().unwrap();
    let run = |args: &[&str]| {
        let out = memdedup().args(["--db", &db, "--model-dir", model_dir]).args(args).arg("--json").assert().success();
        let stderr = text(&out.get_output().stderr);
        (crate::support::json(&out.get_output().stdout), stderr)
    };
    let (first, _) = run(&["add", ALWAYS, "--judge", "learned"]);
    assert!(first["stored"].is_u64(), "{first}");
    let (check, stderr) = run(&["check", NEVER, "--judge", "learned"]);
    assert_eq!(check["judge"], "cosine", "cosine decided: {check}");
    assert_eq!(check["is_duplicate"], true, "at cosine's threshold the opposite is a duplicate: {check}");
    let note = check["notes"][0].as_str().expect("a note says why");
    assert!(note.contains("learned judge is unavailable") && note.contains("pair_judge.onnx"), "{note}");
    assert!(note.contains("cargo xtask fetch-model"), "{note}");
    assert!(stderr.contains("learned judge is unavailable"), "{stderr}");
}
