//! `memdedup dedup --judge local`: assisted dedup offline, with the real local model and
//! SQLite; no judge server runs.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::{memdedup, require_model, run_json, sqlite_db, temp_file, text};

/// Two paraphrases of one rule: the local judge merges them.
const DOCS: [&str; 2] =
    ["Update the docs after every code change.", "After changing code, bring the documentation up to date."];
/// Near-duplicates with different numbers: the local judge vetoes them.
const MEETINGS: [&str; 2] = [
    "The user has a standing 1:1 with their manager every Thursday at 14:00.",
    "The user has a standing 1:1 with their manager every Thursday at 16:00.",
];
/// Far from everything else.
const LUNCH: &str = "The office cafeteria serves lunch between noon and two on weekdays.";

/// Every memory of `namespace`, deprecated ones too, by id.
fn all_memories(db: &str, namespace: &str) -> BTreeMap<i64, Value> {
    let list = run_json(db, &["list", "--all", "-n", namespace, "--limit", "0"]);
    list.as_array().expect("list prints an array").iter().map(|m| (m["id"].as_i64().unwrap(), m.clone())).collect()
}

/// The memories above, added with `memdedup add`; their ids by text. The inline check is
/// off: the meetings are close enough (cosine 0.99) for it to refuse the second one.
fn seed(db: &str, namespace: &str) -> BTreeMap<&'static str, i64> {
    require_model();
    let (_dir, config) = temp_file("memdedup.toml", b"[dedup]\nenabled = false\n");
    let config = config.display().to_string();
    DOCS.iter()
        .chain(&MEETINGS)
        .chain([&LUNCH])
        .map(|&t| {
            let added = run_json(db, &["--config", &config, "add", t, "-n", namespace]);
            let id = added["stored"].as_i64().unwrap_or_else(|| panic!("`{t}` was not stored: {added}"));
            (t, id)
        })
        .collect()
}

#[test]
fn dedup_with_the_local_judge_merges_only_the_paraphrases_and_undo_restores_them() {
    let (_dir, db) = sqlite_db();
    let ns = "lessons";
    let ids = seed(&db, ns);
    let before = all_memories(&db, ns);

    let report = run_json(&db, &["dedup", "--judge", "local", "-n", ns]);
    let run_id = report["run_id"].as_str().expect("a run id").to_owned();
    assert_eq!((report["merged"].as_u64(), report["absorbed"].as_u64()), (Some(1), Some(1)), "{report}");
    assert_eq!(report["failed"], 0, "{report}");
    assert_eq!(report["tokens"]["input_tokens"], 0, "no model was asked: {report}");
    let merge = &report["merges"][0];
    let (docs_a, docs_b) = (ids[DOCS[0]], ids[DOCS[1]]);
    assert_eq!(merge["survivor"], docs_a, "the lower id survives: {merge}");
    assert_eq!(merge["absorbed"], serde_json::json!([docs_b]), "{merge}");
    let confidence = merge["confidence"].as_f64().unwrap();
    assert!((0.55..=1.0).contains(&confidence), "the confidence is the pair's cosine: {merge}");
    assert!(merge["reason"].as_str().unwrap().contains("nothing sets the texts apart"), "{merge}");

    let live = run_json(&db, &["list", "-n", ns, "--limit", "0"]);
    let mut contents: Vec<&str> = live.as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    contents.sort_unstable();
    let mut expected = vec![DOCS[0], MEETINGS[0], MEETINGS[1], LUNCH];
    expected.sort_unstable();
    assert_eq!(contents, expected, "the survivor keeps its own text; the meetings stay apart");

    let ledger = run_json(&db, &["merges", "--run", &run_id]);
    let ledger = ledger.as_array().expect("merges prints an array");
    assert_eq!(ledger.len(), 1, "{ledger:#?}");
    assert_eq!((&ledger[0]["judge"], &ledger[0]["model"]), (&"local".into(), &"local-judge/builtin".into()));

    let undone = run_json(&db, &["undo", "--run", &run_id]);
    assert_eq!(undone.as_array().map(Vec::len), Some(1), "{undone}");
    let after = all_memories(&db, ns);
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    for (id, memory) in &after {
        for field in ["content", "helpful", "harmful", "occurrence_count", "metadata", "deprecated", "merged_into"] {
            assert_eq!(memory[field], before[id][field], "memory {id}'s {field}");
        }
    }
}

#[test]
fn dedup_with_a_bad_local_judge_parameter_file_fails_clearly() {
    let (dir, db) = sqlite_db();
    let (_params_dir, bad) =
        temp_file("judge.json", br#"{"duplicate_floor": 0.3, "related_floor": 0.5, "vetoes": []}"#);
    let missing = dir.path().join("missing.json");
    for (file, message) in [(&bad, "related_floor 0.5 is outside [0, duplicate_floor 0.3]"), (&missing, "cannot read")]
    {
        let assert = memdedup()
            .args(["--db", &db, "dedup", "--judge", "local", "--judge-params"])
            .arg(file)
            .assert()
            .code(1)
            .stdout("");
        let stderr = text(&assert.get_output().stderr);
        assert!(stderr.contains(message) && stderr.contains(&file.display().to_string()), "{stderr}");
    }
    // The file belongs to the local judge only.
    let assert = memdedup()
        .args(["--db", &db, "dedup", "--judge", "openai", "--judge-model", "m", "--judge-params"])
        .arg(&bad)
        .assert()
        .code(1);
    assert!(text(&assert.get_output().stderr).contains("--judge-params is for the local judge"));
    assert!(!std::path::Path::new(&db).exists(), "nothing was opened");
}
