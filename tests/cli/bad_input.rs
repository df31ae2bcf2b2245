//! Bad input and bad command lines: exit code, the key part of the message, nothing written.

use predicates::str::contains;
use serde_json::{Value, json};

use crate::support::{EXAMPLE_PLAYBOOK, dir_listing, memdedup, temp_file, text};

/// Runs `playbook dedup FILE -o OUT` on a playbook holding `contents`, asserts exit code 1,
/// an empty stdout and no output file, and returns stderr.
fn playbook_dedup_error(contents: &[u8]) -> String {
    let (dir, file) = temp_file("playbook.json", contents);
    let out = dir.path().join("out.json");
    let assert = memdedup().args(["playbook", "dedup"]).arg(&file).arg("-o").arg(&out).assert().code(1).stdout("");
    assert_eq!(dir_listing(dir.path()), ["playbook.json"], "nothing is written on error");
    text(&assert.get_output().stderr)
}

/// Runs `scan FILE` on a collection holding `contents`, asserts exit code 1 and an empty
/// stdout, and returns stderr.
fn scan_error(contents: &[u8]) -> String {
    let (_dir, file) = temp_file("memories.jsonl", contents);
    let assert = memdedup().arg("scan").arg(&file).assert().code(1).stdout("");
    text(&assert.get_output().stderr)
}

#[track_caller]
fn assert_mentions(stderr: &str, expected: &str) {
    assert!(stderr.contains(expected), "expected {expected:?} in stderr:\n{stderr}");
}

/// A playbook whose OTHERS section holds `others`.
fn playbook_with_others(others: Value) -> Vec<u8> {
    json!({"version": "1.0", "sections": {"PATTERNS & APPROACHES": [], "OTHERS": others}}).to_string().into_bytes()
}

#[test]
fn malformed_playbook_json_names_line_and_column() {
    let stderr = playbook_dedup_error(b"{\"sections\": {\n  \"OTHERS\": [,]\n}}\n");
    assert_mentions(&stderr, "malformed JSON at line 2, column 14");
}

#[test]
fn missing_field_names_its_path() {
    let stderr = playbook_dedup_error(&playbook_with_others(json!([
        {"name": "oth-001", "text": "a"},
        {"name": "oth-002", "text": "b"},
        {"name": "oth-003", "text": "c"},
        {"name": "oth-004", "helpful": 1}
    ])));
    assert_mentions(&stderr, "sections.OTHERS[3].text");
    assert_mentions(&stderr, "missing");
}

#[test]
fn mistyped_counter_names_its_path() {
    let quoted = playbook_dedup_error(&playbook_with_others(json!([{"name": "oth-001", "text": "a", "helpful": "3"}])));
    assert_mentions(&quoted, "sections.OTHERS[0].helpful");

    let negative = playbook_dedup_error(&playbook_with_others(json!([
        {"name": "oth-001", "text": "a"},
        {"name": "oth-002", "text": "b", "harmful": -1}
    ])));
    assert_mentions(&negative, "sections.OTHERS[1].harmful");
}

#[test]
fn non_utf8_playbook_is_rejected() {
    let stderr = playbook_dedup_error(b"{\"sections\": {\"OTHERS\": [{\"name\": \"a\", \"text\": \"caf\xE9\"}]}}");
    assert_mentions(&stderr, "not valid UTF-8");
}

#[test]
fn non_utf8_offset_counts_the_byte_order_mark() {
    // The bad byte is at offset 13 of the file: 3 bytes of BOM, then `{"a": "caf`.
    let stderr = playbook_dedup_error(b"\xEF\xBB\xBF{\"a\": \"caf\xE9\"}");
    assert_mentions(&stderr, "invalid byte at offset 13");
}

#[test]
fn missing_input_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let out = dir.path().join("out.json");

    memdedup()
        .args(["playbook", "dedup"])
        .arg(&missing)
        .arg("-o")
        .arg(&out)
        .assert()
        .code(1)
        .stderr(contains(missing.display().to_string()));

    assert!(dir_listing(dir.path()).is_empty());
}

#[test]
fn threshold_outside_the_unit_interval_is_a_usage_error() {
    memdedup()
        .args(["playbook", "dedup", EXAMPLE_PLAYBOOK, "--threshold", "1.5"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(contains("outside [0, 1]"));
}

#[test]
fn non_numeric_threshold_is_a_usage_error() {
    memdedup()
        .args(["playbook", "dedup", EXAMPLE_PLAYBOOK, "--threshold", "abc"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(contains("not a number"));
    memdedup().args(["scan", EXAMPLE_PLAYBOOK, "--threshold", "abc"]).assert().code(2).stderr(contains("not a number"));
}

#[test]
fn output_and_in_place_together_are_a_usage_error() {
    let (dir, file) = temp_file("playbook.json", &std::fs::read(EXAMPLE_PLAYBOOK).unwrap());
    let out = dir.path().join("out.json");

    memdedup()
        .args(["playbook", "dedup", "--in-place"])
        .arg(&file)
        .arg("-o")
        .arg(&out)
        .assert()
        .code(2)
        .stderr(contains("cannot be used with"));

    assert_eq!(dir_listing(dir.path()), ["playbook.json"]);
}

#[test]
fn in_place_on_standard_input_is_a_usage_error() {
    let cwd = tempfile::tempdir().unwrap();

    memdedup()
        .current_dir(cwd.path())
        .args(["playbook", "dedup", "-", "--in-place"])
        .write_stdin(std::fs::read(EXAMPLE_PLAYBOOK).unwrap())
        .assert()
        .code(2)
        .stdout("");

    assert!(dir_listing(cwd.path()).is_empty(), "no file named `-` is created");
}

#[test]
fn malformed_jsonl_names_line_and_column() {
    let stderr = scan_error(b"{\"id\": 1, \"text\": \"a\"}\n{\"id\":2,,}\n");
    assert_mentions(&stderr, "line 2, column 9");
}

#[test]
fn jsonl_item_without_text_names_its_line() {
    let stderr = scan_error(b"{\"id\": 1, \"text\": \"a\"}\n\n{\"id\": 2}\n");
    assert_mentions(&stderr, "line 3: missing field `text`");
}

#[test]
fn non_utf8_jsonl_is_rejected() {
    let stderr = scan_error(b"{\"id\": 1, \"text\": \"caf\xE9\"}\n");
    assert_mentions(&stderr, "not valid UTF-8");
}

#[test]
fn unknown_subcommand_is_a_usage_error() {
    memdedup().arg("frobnicate").assert().code(2).stderr(contains("frobnicate"));
    memdedup().args(["playbook", "frobnicate"]).assert().code(2).stderr(contains("frobnicate"));
}

#[test]
fn defect_4_duplicate_keys_in_a_playbook_are_an_error_naming_key_and_line() {
    let sections =
        b"{\"sections\": {\n  \"OTHERS\": [{\"name\": \"keep-me\", \"text\": \"keep me\"}],\n  \"OTHERS\": []\n}}\n";
    let stderr = playbook_dedup_error(sections);
    assert_mentions(&stderr, "invalid playbook at sections.OTHERS: duplicate key \"OTHERS\" at line 3");

    let top = b"{\"sections\": {\"OTHERS\": []},\n \"sections\": {}}\n";
    assert_mentions(&playbook_dedup_error(top), "invalid playbook at sections: duplicate key \"sections\" at line 2");

    let entry = b"{\"sections\": {\"OTHERS\": [{\"name\": \"a\",\n \"text\": \"a\", \"text\": \"b\"}]}}\n";
    assert_mentions(
        &playbook_dedup_error(entry),
        "invalid playbook at sections.OTHERS[0].text: duplicate key \"text\" at line 2",
    );

    // --in-place must leave such a file exactly as it was.
    let (dir, file) = temp_file("playbook.json", sections);
    memdedup().args(["playbook", "dedup", "--in-place"]).arg(&file).assert().code(1).stdout("");
    assert_eq!(std::fs::read(&file).unwrap(), sections.to_vec());
    assert_eq!(dir_listing(dir.path()), ["playbook.json"]);
}

#[test]
fn defect_17_text_of_invisible_characters_only_is_refused_like_blank_text() {
    let (dir, db) = crate::support::sqlite_db();
    for invisible in ["\u{200b}\u{200b}", "\u{feff} \u{2060}\u{200d}"] {
        let out = memdedup().args(["--db", &db, "add", invisible, "--judge", "cosine"]).assert().code(1).stdout("");
        let stderr = text(&out.get_output().stderr);
        assert!(stderr.contains("must not be empty or blank"), "{stderr}");
    }
    let listed = memdedup().args(["--db", &db, "list", "--json"]).assert().success();
    assert_eq!(
        crate::support::json(&listed.get_output().stdout),
        json!([]),
        "nothing stored: {:?}",
        dir_listing(dir.path())
    );
}

#[test]
fn defect_17_the_hook_failure_namespace_refuses_memories() {
    let (_dir, db) = crate::support::sqlite_db();
    let out = memdedup()
        .args(["--db", &db, "add", "A memory in the wrong place.", "-n", "hook.pre-compact", "--judge", "cosine"])
        .assert()
        .code(1)
        .stdout("");
    let stderr = text(&out.get_output().stderr);
    assert!(stderr.contains("invalid namespace \"hook.pre-compact\": is reserved"), "{stderr}");
    let capture = json!({"content": "Another memory in the wrong place.", "namespace": "hook.pre-compact"});
    let out = memdedup()
        .args(["--db", &db, "capture", "-", "--json", "--judge", "cosine"])
        .write_stdin(format!("{capture}\n"))
        .assert()
        .code(1);
    let stderr = text(&out.get_output().stderr);
    assert!(stderr.contains("is reserved for the pre-compact hook's failure counters"), "{stderr}");
    let stats = memdedup().args(["--db", &db, "stats", "--json"]).assert().success();
    let stats = crate::support::json(&stats.get_output().stdout);
    assert_eq!(stats["namespaces"], json!([]), "nothing stored: {stats}");
}

#[test]
fn defect_17_a_scan_line_with_a_repeated_key_is_refused_like_a_playbook() {
    let jsonl = b"{\"id\": 1, \"text\": \"first\"}\n{\"id\": 2, \"text\": \"kept?\", \"text\": \"or this\"}\n";
    let stderr = scan_error(jsonl);
    assert_mentions(&stderr, "line 2, column");
    assert_mentions(&stderr, "duplicate key \"text\"");
    let array = b"[\n{\"id\": 1, \"id\": 2, \"text\": \"x\"}\n]";
    let stderr = scan_error(array);
    assert_mentions(&stderr, "duplicate key \"id\" at line 2");
    assert_mentions(&stderr, "([0].id)");
}

#[test]
fn defect_18_mcp_and_serve_exit_2_on_a_bad_configuration() {
    let (dir, config) = temp_file("memdedup.toml", b"[dedup]\nbogus = 1\n");
    let db = dir.path().join("memory.db");
    for command in [&["mcp"][..], &["serve", "--addr", "127.0.0.1:0"]] {
        let out = memdedup()
            .arg("--config")
            .arg(&config)
            .arg("--db")
            .arg(&db)
            .args(command)
            .write_stdin("")
            .timeout(std::time::Duration::from_secs(60))
            .assert()
            .code(2)
            .stdout("");
        let stderr = text(&out.get_output().stderr);
        assert!(stderr.contains("dedup.bogus") && stderr.contains("unknown key"), "{command:?}: {stderr}");
    }
    assert!(!db.exists(), "nothing was opened: {:?}", dir_listing(dir.path()));
}
