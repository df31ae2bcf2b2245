//! Behaviour when the local model is missing: fail closed, or pass through with `--fail-open`.

use predicates::prelude::PredicateBooleanExt;
use predicates::str::contains;
use serde_json::{Value, json};

use crate::support::{EXAMPLE_MEMORIES, FETCH_MODEL, dir_listing, example_playbook_copy, json, memdedup, temp_file};

/// `memdedup --model-dir <empty dir>`; the directory lives as long as the returned guard.
fn without_model() -> (tempfile::TempDir, assert_cmd::Command) {
    let empty = tempfile::tempdir().unwrap();
    let mut cmd = memdedup();
    cmd.arg("--model-dir").arg(empty.path());
    (empty, cmd)
}

#[test]
fn missing_model_fails_closed_and_names_the_fetch_command() {
    let (dir, file) = example_playbook_copy();
    let out = dir.path().join("out.json");
    let (_empty, mut cmd) = without_model();

    cmd.args(["playbook", "dedup"])
        .arg(&file)
        .arg("-o")
        .arg(&out)
        .assert()
        .code(1)
        .stdout("")
        .stderr(contains(FETCH_MODEL).and(contains("--fail-open")));

    assert_eq!(dir_listing(dir.path()), ["playbook.json"], "no output file is written");
}

#[test]
fn missing_model_with_in_place_leaves_the_file_alone() {
    let (dir, file) = example_playbook_copy();
    let before = std::fs::read(&file).unwrap();
    let (_empty, mut cmd) = without_model();

    cmd.args(["playbook", "dedup", "--in-place"]).arg(&file).assert().code(1).stderr(contains(FETCH_MODEL));

    assert_eq!(std::fs::read(&file).unwrap(), before);
    assert_eq!(dir_listing(dir.path()), ["playbook.json"]);
}

#[test]
fn scn_dedup_003_01_fail_open_writes_the_input_unchanged() {
    let (dir, file) = example_playbook_copy();
    let out = dir.path().join("out.json");
    let (_empty, mut cmd) = without_model();

    cmd.args(["playbook", "dedup", "--fail-open"])
        .arg(&file)
        .arg("-o")
        .arg(&out)
        .assert()
        .success()
        .stderr(contains("unchanged").and(contains(FETCH_MODEL)));

    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&file).unwrap());
}

#[test]
fn fail_open_in_place_leaves_the_file_unchanged() {
    let (dir, file) = example_playbook_copy();
    let before = std::fs::read(&file).unwrap();
    let (_empty, mut cmd) = without_model();

    cmd.args(["playbook", "dedup", "--fail-open", "--in-place"]).arg(&file).assert().success();

    assert_eq!(std::fs::read(&file).unwrap(), before);
    assert_eq!(dir_listing(dir.path()), ["playbook.json"]);
}

#[test]
fn fail_open_keeps_a_byte_order_mark() {
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend(std::fs::read(crate::support::EXAMPLE_PLAYBOOK).unwrap());
    let (dir, file) = temp_file("playbook.json", &bytes);
    let out = dir.path().join("out.json");
    let (_empty, mut cmd) = without_model();

    cmd.args(["playbook", "dedup", "--fail-open"]).arg(&file).arg("-o").arg(&out).assert().success();

    let written = std::fs::read(&out).unwrap();
    assert!(
        written == bytes,
        "the playbook must pass through byte for byte: the output starts with {:?}, the input with {:?}",
        &written[..8],
        &bytes[..8]
    );
}

#[test]
fn fail_open_dry_run_json_says_why_it_skipped() {
    let (dir, file) = example_playbook_copy();
    let (_empty, mut cmd) = without_model();

    let assert = cmd.args(["playbook", "dedup", "--fail-open", "--dry-run", "--json"]).arg(&file).assert().success();

    let report = json(&assert.get_output().stdout);
    assert!(report["skipped"].as_str().is_some_and(|s| s.contains(FETCH_MODEL)), "{report}");
    assert_eq!(report["merged"], json!([]));
    assert_eq!(report["entries_after"], report["entries_before"]);
    assert_eq!(report["output"], Value::Null);
    assert_eq!(dir_listing(dir.path()), ["playbook.json"]);
}

#[test]
fn fail_open_does_not_excuse_bad_input() {
    let (dir, file) = temp_file("playbook.json", b"{\"sections\": ");
    let out = dir.path().join("out.json");
    let (_empty, mut cmd) = without_model();

    cmd.args(["playbook", "dedup", "--fail-open"])
        .arg(&file)
        .arg("-o")
        .arg(&out)
        .assert()
        .code(1)
        .stderr(contains("malformed JSON"));

    assert!(!out.exists());
}

#[test]
fn scan_and_similarity_fail_without_the_model() {
    for args in [&["scan", EXAMPLE_MEMORIES][..], &["similarity", "a", "b"]] {
        let (_empty, mut cmd) = without_model();
        cmd.args(args).assert().code(1).stdout("").stderr(contains(FETCH_MODEL));
    }
}

#[test]
fn scn_dedup_005_01_empty_playbook_needs_no_model() {
    let playbook = br#"{"sections": {"PATTERNS & APPROACHES": [], "OTHERS": []}}"#;
    let (dir, file) = temp_file("playbook.json", playbook);
    let out = dir.path().join("out.json");
    let (_empty, mut cmd) = without_model();

    cmd.args(["playbook", "dedup"]).arg(&file).arg("-o").arg(&out).assert().success();

    assert_eq!(std::fs::read(&out).unwrap(), playbook);
}

#[test]
fn scn_dedup_005_02_single_entry_needs_no_model() {
    let playbook = br#"{"sections": {"OTHERS": [{"name": "oth-001", "text": "a", "helpful": 2}]}}"#;
    let (dir, file) = temp_file("playbook.json", playbook);
    let out = dir.path().join("out.json");
    let (_empty, mut cmd) = without_model();

    cmd.args(["playbook", "dedup"]).arg(&file).arg("-o").arg(&out).assert().success();

    assert_eq!(std::fs::read(&out).unwrap(), playbook);
}
