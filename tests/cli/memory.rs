//! `memdedup check`, `add`, `capture`, `list`, `show`, `stats` against real SQLite and
//! Postgres databases, and the embedding cache behind `scan --db`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};

use serde_json::Value;

use crate::support::{
    EXAMPLE_MEMORIES, json, memdedup, postgres_url, require_model, run_json, sqlite_db, temp_file, text,
    unique_namespace,
};

/// A decision and a paraphrase of it that the local model scores above 0.92 (the
/// `decisions` threshold), and an unrelated decision.
const DECISION: &str = "We decided to use PostgreSQL as the primary database for the billing service.";
const DECISION_PARAPHRASE: &str = "We decided to use PostgreSQL as the main database for the billing service.";
const UNRELATED: &str = "Run the integration tests against a disposable database before every release.";

/// `add` under the cosine judge: these tests pin seed 004's verdicts (judge_learned.rs
/// covers the default judge).
fn add(db: &str, namespace: &str, content: &str) -> Value {
    run_json(db, &["add", content, "--namespace", namespace, "--judge", "cosine"])
}

fn live_contents(db: &str, namespace: &str) -> Vec<String> {
    let list = run_json(db, &["list", "--namespace", namespace, "--limit", "0"]);
    list.as_array().expect("list prints an array").iter().map(|m| m["content"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn add_stores_new_memories_and_names_the_duplicate_it_skips() {
    require_model();
    let (_dir, db) = sqlite_db();
    let first = add(&db, "decisions", DECISION);
    let urn = first["urn"].as_str().expect("a stored memory has a URN").to_owned();
    assert!(urn.starts_with("memdedup://global/decisions/"), "{first}");
    assert_eq!(first["check"]["is_duplicate"], false);
    assert_eq!(first["embedded"], true);

    let exact = add(&db, "decisions", &format!("  {}  ", DECISION.to_uppercase()));
    assert_eq!(exact["stored"], Value::Null, "{exact}");
    assert_eq!(exact["check"]["reason"], "ExactMatch");
    assert_eq!(exact["check"]["matched_urn"], urn.as_str());

    let paraphrase = add(&db, "decisions", DECISION_PARAPHRASE);
    assert_eq!(paraphrase["stored"], Value::Null, "{paraphrase}");
    assert_eq!(paraphrase["check"]["reason"], "SemanticSimilar");
    assert_eq!(paraphrase["check"]["matched_urn"], urn.as_str());
    let score = paraphrase["check"]["similarity_score"].as_f64().unwrap();
    assert!((0.92..1.0).contains(&score), "{paraphrase}");
    assert_eq!(paraphrase["check"]["threshold"].as_f64().unwrap() as f32, 0.92);

    // The same paraphrase in another namespace is new there.
    let elsewhere = add(&db, "learnings", DECISION_PARAPHRASE);
    assert!(elsewhere["urn"].as_str().unwrap().starts_with("memdedup://global/learnings/"), "{elsewhere}");

    assert_eq!(live_contents(&db, "decisions"), vec![DECISION.to_owned()]);
    let shown = run_json(&db, &["show", &urn]);
    assert_eq!(shown["occurrence_count"], 3, "the two skipped duplicates count as occurrences: {shown}");

    let stats = run_json(&db, &["stats"]);
    let decisions = stats["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["namespace"] == "decisions")
        .expect("stats list the decisions namespace")
        .clone();
    assert_eq!(decisions["live"], 1);
    assert_eq!(decisions["skipped"]["exact"], 1);
    assert_eq!(decisions["skipped"]["semantic"], 1);
}

#[test]
fn check_reports_the_verdict_without_storing() {
    require_model();
    let (_dir, db) = sqlite_db();
    add(&db, "decisions", DECISION);
    let unique = run_json(&db, &["check", "--judge", "cosine", UNRELATED, "--namespace", "decisions"]);
    assert_eq!(unique["is_duplicate"], false, "{unique}");
    assert_eq!(unique["matched_urn"], Value::Null);
    assert!(unique["nearest"]["score"].as_f64().unwrap() < 0.92, "{unique}");
    let duplicate = run_json(&db, &["check", "--judge", "cosine", DECISION_PARAPHRASE, "--namespace", "decisions"]);
    assert_eq!(duplicate["reason"], "SemanticSimilar", "{duplicate}");
    assert!(duplicate["check_duration_ms"].is_u64());
    assert_eq!(live_contents(&db, "decisions").len(), 1, "check stores nothing");

    let human =
        memdedup().args(["--db", &db, "check", "--judge", "cosine", DECISION, "-n", "decisions"]).assert().success();
    let line = text(&human.get_output().stdout);
    assert!(line.starts_with("duplicate of memdedup://global/decisions/1: exact match"), "{line}");
}

#[test]
fn texts_under_three_words_skip_the_semantic_check() {
    require_model();
    let (_dir, db) = sqlite_db();
    let stored = add(&db, "default", "use tabs");
    assert_eq!(stored["embedded"], false, "{stored}");
    let check = run_json(&db, &["check", "tabs   please", "--namespace", "default"]);
    assert_eq!(check["is_duplicate"], false);
    assert!(check["not_run"].as_array().unwrap().contains(&Value::from("semantic")), "{check}");
    // Three words are compared by meaning, however short.
    let three = run_json(&db, &["check", "use tab characters", "--namespace", "default"]);
    assert!(!three["not_run"].as_array().unwrap().contains(&Value::from("semantic")), "{three}");
}

#[test]
fn capture_prints_precompact_hook_output() {
    require_model();
    let (_dir, db) = sqlite_db();
    let stored = add(&db, "decisions", DECISION);
    let urn = stored["urn"].as_str().unwrap().to_owned();
    let candidates = [
        serde_json::json!({"content": DECISION.to_lowercase(), "namespace": "decisions"}),
        serde_json::json!({"content": DECISION_PARAPHRASE, "namespace": "decisions"}),
        serde_json::json!({"content": UNRELATED, "namespace": "patterns", "kind": "lesson"}),
        serde_json::json!({"content": UNRELATED, "namespace": "patterns"}),
    ];
    let input: String = candidates.iter().map(|c| format!("{c}\n")).collect();
    let assert =
        memdedup().args(["--db", &db, "capture", "--judge", "cosine", "-"]).write_stdin(input).assert().success();
    let output = json(&assert.get_output().stdout);
    assert_eq!(output["hookSpecificOutput"]["hookEventName"], "PreCompact");
    let context = output["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(context.starts_with("Auto-captured 1 memory before compaction:\n\n1. **patterns**: Run the"), "{context}");
    assert!(context.contains("   URN: memdedup://global/patterns/"), "{context}");
    assert!(context.contains("Skipped 3 duplicates:"), "{context}");
    assert!(
        context.contains(&format!("- Exact match: \"we decided to use postgresql as the prim...\" (matches {urn})")),
        "{context}"
    );
    assert!(context.contains("- Semantic 9"), "{context}");
    assert!(context.contains(&format!("(similar to {urn})")), "{context}");
    assert_eq!(live_contents(&db, "patterns"), vec![UNRELATED.to_owned()]);
}

#[test]
fn capture_with_a_bad_line_stores_nothing() {
    let (_dir, db) = sqlite_db();
    let input = "{\"content\": \"a perfectly fine memory\", \"namespace\": \"decisions\"}\n{\"content\": 42}\n";
    let assert = memdedup().args(["--db", &db, "capture"]).write_stdin(input).assert().code(2).stdout("");
    let stderr = text(&assert.get_output().stderr);
    assert!(stderr.contains("<stdin>: line 2: invalid candidate"), "{stderr}");
    assert!(!Path::new(&db).exists(), "nothing was opened or written");
}

#[test]
fn defect_3_capture_validates_every_line_first() {
    let (_dir, db) = sqlite_db();
    let good = "{\"content\": \"a perfectly fine memory\", \"namespace\": \"decisions\"}";
    let long_title = format!("{{\"content\": \"b\", \"title\": \"{}\"}}", "t".repeat(70_000));
    let cases = [
        ("{\"content\": \"b\", \"kind\": \"not a kind\"}".to_owned(), "invalid kind \"not a kind\""),
        (long_title, "invalid title: is 70000 bytes"),
        ("{\"content\": \"b\", \"title\": \"a\\u0000b\"}".to_owned(), "invalid title: must not contain NUL"),
        ("{\"content\": \"a\\u0000b\"}".to_owned(), "invalid content: must not contain NUL"),
    ];
    for (bad, message) in cases {
        let input = format!("{good}\n{bad}\n");
        let assert = memdedup().args(["--db", &db, "capture"]).write_stdin(input).assert().code(2).stdout("");
        let stderr = text(&assert.get_output().stderr);
        assert!(stderr.contains(&format!("<stdin>: line 2: {message}")), "{stderr}");
        assert!(!Path::new(&db).exists(), "line 1 was not stored: {message}");
    }
}

#[test]
fn bad_input_is_refused_with_a_clear_message() {
    let (dir, db) = sqlite_db();
    let cases: [(&[&str], i32, &str); 4] = [
        (&["add", "", "--namespace", "decisions"], 1, "invalid content: must not be empty"),
        (&["add", "text", "--namespace", "no spaces"], 2, "invalid namespace \"no spaces\""),
        (&["check", "text", "--namespace", "../etc"], 2, "invalid namespace \"../etc\""),
        (&["show", "twelve"], 2, "`twelve` is not a memory id"),
    ];
    for (args, code, message) in cases {
        let assert = memdedup().args(["--db", &db]).args(args).assert().code(code).stdout("");
        let stderr = text(&assert.get_output().stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    let huge = "x".repeat((1 << 20) + 1);
    let assert = memdedup().args(["--db", &db, "add", "-", "-n", "decisions"]).write_stdin(huge).assert().code(1);
    assert!(text(&assert.get_output().stderr).contains("over the limit of 1048576 bytes"));
    let stats = run_json(&db, &["stats"]);
    assert_eq!(stats["namespaces"], serde_json::json!([]), "nothing was stored: {stats}");

    let (_file_dir, not_a_dir) = temp_file("plain-file", b"not a directory");
    let inside_file = not_a_dir.join("memory.db").display().to_string();
    let assert = memdedup().args(["--db", &inside_file, "list"]).assert().code(1);
    assert!(text(&assert.get_output().stderr).contains("cannot open database"), "unusable path");

    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x42u8; 8192]).unwrap();
    let assert = memdedup().args(["--db", garbage.to_str().unwrap(), "stats"]).assert().code(1);
    let stderr = text(&assert.get_output().stderr);
    assert!(stderr.contains("cannot open database") && stderr.contains("garbage.db"), "{stderr}");
    assert_eq!(std::fs::read(&garbage).unwrap(), vec![0x42u8; 8192], "a foreign file is left as it was");

    let assert = memdedup().args(["--db", "postgres://memdedup:secret@127.0.0.1:1/none", "list"]).assert().code(1);
    let stderr = text(&assert.get_output().stderr);
    assert!(stderr.contains("cannot open database postgres://memdedup:***@127.0.0.1:1/none"), "{stderr}");
    assert!(!stderr.contains("secret"), "{stderr}");
}

#[test]
fn list_and_show_read_back_what_was_stored() {
    require_model();
    let (_dir, db) = sqlite_db();
    let first = add(&db, "decisions", DECISION);
    memdedup()
        .args(["--db", &db, "add", UNRELATED, "-n", "patterns", "--kind", "lesson", "--title", "Test on a fresh db"])
        .assert()
        .success();
    let all = run_json(&db, &["list"]);
    assert_eq!(all.as_array().unwrap().len(), 2);
    let patterns = run_json(&db, &["list", "--namespace", "patterns"]);
    assert_eq!(patterns[0]["kind"], "lesson");
    assert_eq!(patterns[0]["title"], "Test on a fresh db");
    let id = first["stored"].as_i64().unwrap();
    let page = run_json(&db, &["list", "--after", &id.to_string()]);
    assert_eq!(page.as_array().unwrap().len(), 1);
    let shown = memdedup().args(["--db", &db, "show", &id.to_string()]).assert().success();
    let shown = text(&shown.get_output().stdout);
    assert!(shown.starts_with(&format!("memdedup://global/decisions/{id}\n")), "{shown}");
    assert!(shown.trim_end().ends_with(DECISION), "{shown}");
    memdedup().args(["--db", &db, "show", "999"]).assert().code(1);
    memdedup().args(["--db", &db, "show", &format!("memdedup://global/patterns/{id}")]).assert().code(1);
}

/// Runs `scan --db` over `file` and returns the report.
fn scan_with_cache(db: &str, file: &Path, extra: &[&str]) -> Value {
    // The cosine judge: without the model (`--model-dir` elsewhere) the learned one has none.
    let assert = memdedup()
        .args(["--db", db])
        .args(extra)
        .args(["scan", "--judge", "cosine"])
        .arg(file)
        .arg("--json")
        .assert()
        .success();
    json(&assert.get_output().stdout)
}

#[test]
fn scan_db_reuses_cached_embeddings() {
    require_model();
    let (_dir, db) = sqlite_db();
    let first = scan_with_cache(&db, Path::new(EXAMPLE_MEMORIES), &[]);
    let stats = run_json(&db, &["stats"]);
    assert!(stats["cached_embeddings"].as_u64().unwrap() > 0, "{stats}");
    // With every vector cached the model is never loaded: a missing model does not matter.
    let missing_model = PathBuf::from("/nonexistent/memdedup-model");
    let second = scan_with_cache(&db, Path::new(EXAMPLE_MEMORIES), &["--model-dir", missing_model.to_str().unwrap()]);
    assert_eq!(first, second);
    let uncached = memdedup()
        .args(["--model-dir", missing_model.to_str().unwrap(), "scan", "--judge", "cosine", EXAMPLE_MEMORIES])
        .assert()
        .code(1);
    assert!(text(&uncached.get_output().stderr).contains("cargo xtask fetch-model"));
}

/// Unrelated memories (pairwise cosine well below 0.9 with the local model).
pub const UNRELATED_MEMORIES: [&str; 8] = [
    "Always run cargo fmt before committing Rust code to keep the diffs small.",
    "The staging cluster is rebuilt from scratch every Sunday night at 2 AM UTC.",
    "Customer invoices must be archived for seven years to satisfy the tax law.",
    "Prefer composition over inheritance when designing the plugin interfaces.",
    "The on-call engineer must acknowledge every page within fifteen minutes.",
    "Roll out risky database migrations gradually behind a feature flag.",
    "Our mobile app supports iOS 16 and newer; older versions are blocked at login.",
    "Store secrets in the vault, never in environment files checked into git.",
];

/// Candidates with exact repeats (case and spacing changed) and one paraphrase pair.
fn race_candidates(namespace: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for memory in UNRELATED_MEMORIES {
        out.push(serde_json::json!({"content": memory, "namespace": namespace}));
        out.push(serde_json::json!({"content": format!("  {}", memory.to_uppercase()), "namespace": namespace}));
        out.push(serde_json::json!({"content": memory.replace(' ', "   ").to_lowercase(), "namespace": namespace}));
    }
    out.push(serde_json::json!({"content": DECISION, "namespace": namespace}));
    out.push(serde_json::json!({"content": DECISION_PARAPHRASE, "namespace": namespace}));
    out
}

#[test]
fn two_processes_sharing_one_postgres_store_each_text_once() {
    require_model();
    let url = postgres_url();
    let namespace = unique_namespace("race");
    let candidates = race_candidates(&namespace);
    let forward: String = candidates.iter().map(|c| format!("{c}\n")).collect();
    let backward: String = candidates.iter().rev().map(|c| format!("{c}\n")).collect();
    let binary = assert_cmd::cargo::cargo_bin("memdedup");
    let spawn = |input: String| {
        let mut child = StdCommand::new(&binary)
            .args(["--db", &url, "capture", "--judge", "cosine", "-", "--json"])
            .env_remove("DATABASE_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("memdedup starts");
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child
    };
    let children = [spawn(forward), spawn(backward)];
    let mut stored = 0;
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        let report = json(&output.stdout);
        stored += report["results"].as_array().unwrap().iter().filter(|r| !r["stored"].is_null()).count();
    }
    let live = live_contents(&url, &namespace);
    // Eight exact groups plus one paraphrase pair: nine memories, whatever the interleaving.
    assert_eq!(live.len(), 9, "{live:#?}");
    assert_eq!(stored, 9, "each stored memory was stored by exactly one process");
    let mut normalised: Vec<String> =
        live.iter().map(|t| t.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()).collect();
    normalised.sort();
    normalised.dedup();
    assert_eq!(normalised.len(), 9, "no two live rows share a normalised text");
    let decisions = live.iter().filter(|t| *t == DECISION || *t == DECISION_PARAPHRASE).count();
    assert_eq!(decisions, 1, "one of the paraphrase pair, never both");
}

#[test]
fn debug_logs_carry_fingerprints_never_memory_text() {
    require_model();
    let (_dir, db) = sqlite_db();
    let secret = "The staging password rotation happens on the first Monday of every month.";
    for command in ["add", "check", "add"] {
        let assert = memdedup().args(["-vv", "--db", &db, command, secret, "-n", "learnings"]).assert().success();
        let stderr = text(&assert.get_output().stderr);
        assert!(stderr.contains("fingerprint"), "debug logs are on: {stderr}");
        for word in ["password", "rotation", "Monday"] {
            assert!(!stderr.contains(word), "`{command}` logged memory text: {stderr}");
        }
    }
}

#[test]
fn playbook_dedup_db_reuses_cached_embeddings() {
    require_model();
    let (_dir, db) = sqlite_db();
    let (out_dir, _) = temp_file("unused", b"");
    let first_out = out_dir.path().join("first.json");
    let second_out = out_dir.path().join("second.json");
    let playbook = crate::support::EXAMPLE_PLAYBOOK;
    memdedup().args(["--db", &db, "playbook", "dedup", playbook, "-o"]).arg(&first_out).assert().success();
    memdedup()
        .args(["--db", &db, "--model-dir", "/nonexistent/memdedup-model", "playbook", "dedup", playbook, "-o"])
        .arg(&second_out)
        .assert()
        .success();
    assert_eq!(std::fs::read(&first_out).unwrap(), std::fs::read(&second_out).unwrap());
}

#[test]
fn defect_11_show_rejects_urn_path_tricks() {
    require_model();
    let (_dir, db) = sqlite_db();
    add(&db, "decisions", DECISION);
    add(&db, "decisions", UNRELATED);
    memdedup().args(["--db", &db, "show", "memdedup://global/decisions/2"]).assert().success();
    for urn in
        ["memdedup://global/decisions/1/../2", "memdedup://global/decisions/./2", "memdedup://global//decisions/2"]
    {
        let assert = memdedup().args(["--db", &db, "show", urn]).assert().code(2).stdout("");
        let stderr = text(&assert.get_output().stderr);
        assert!(stderr.contains(urn), "{urn}: {stderr}");
    }
}

#[test]
fn defect_11_add_stdin_drops_the_bom_and_zero_width_characters_do_not_make_a_text_new() {
    require_model();
    let (_dir, db) = sqlite_db();
    let added = memdedup()
        .args(["--db", &db, "add", "-", "-n", "decisions", "--json"])
        .write_stdin(format!("\u{feff}{DECISION}"))
        .assert()
        .success();
    let urn = json(&added.get_output().stdout)["urn"].as_str().expect("stored").to_owned();
    assert_eq!(live_contents(&db, "decisions"), vec![DECISION.to_owned()], "no byte-order mark is stored");
    let disguised = DECISION.replacen("PostgreSQL", "Postgre\u{200b}SQL", 1).replacen(' ', " \u{2060}", 1);
    let again = add(&db, "decisions", &disguised);
    assert_eq!(again["check"]["reason"], "ExactMatch", "{again}");
    assert_eq!(again["check"]["matched_urn"], urn.as_str());
}

#[test]
fn defect_8_memories_stored_without_the_model_are_counted_and_reembedded() {
    require_model();
    let (_dir, db) = sqlite_db();
    let missing = tempfile::tempdir().expect("temporary directory");
    let no_model = missing.path().display().to_string();
    // The model is missing: the memory is stored anyway (fail-open), without a vector.
    let stored = memdedup()
        .args([
            "--db",
            &db,
            "--model-dir",
            &no_model,
            "add",
            "--judge",
            "cosine",
            DECISION,
            "-n",
            "decisions",
            "--json",
        ])
        .assert()
        .success();
    let stored = json(&stored.get_output().stdout);
    assert_eq!(stored["embedded"], false, "{stored}");
    let stats = run_json(&db, &["stats"]);
    assert_eq!(stats["namespaces"][0]["unembedded"], 1, "{stats}");
    let human = memdedup().args(["--db", &db, "stats"]).assert().success();
    let human = text(&human.get_output().stdout);
    assert!(human.contains("1 awaiting a vector") && human.contains("memdedup reembed"), "{human}");
    // Without the model, a paraphrase is not caught: the stored memory has no vector.
    let blind = memdedup()
        .args([
            "--db",
            &db,
            "--model-dir",
            &no_model,
            "check",
            "--judge",
            "cosine",
            DECISION_PARAPHRASE,
            "-n",
            "decisions",
            "--json",
        ])
        .assert()
        .success();
    assert_eq!(json(&blind.get_output().stdout)["is_duplicate"], false);

    // reembed without a model fails, naming the fix, and changes nothing.
    let failed = memdedup().args(["--db", &db, "--model-dir", &no_model, "reembed"]).assert().failure();
    assert!(text(&failed.get_output().stderr).contains("cargo xtask fetch-model"));
    assert_eq!(run_json(&db, &["stats"])["namespaces"][0]["unembedded"], 1);

    // With the model: one memory embedded, and the paraphrase is now a semantic duplicate.
    let report = run_json(&db, &["reembed"]);
    assert_eq!((report["embedded"].as_u64(), report["examined"].as_u64()), (Some(1), Some(1)), "{report}");
    assert_eq!(run_json(&db, &["stats"])["namespaces"][0]["unembedded"], 0);
    let check = run_json(&db, &["check", "--judge", "cosine", DECISION_PARAPHRASE, "-n", "decisions"]);
    assert_eq!(check["reason"], "SemanticSimilar", "{check}");
    // Nothing left: a second run embeds nothing.
    assert_eq!(run_json(&db, &["reembed", "-n", "decisions"])["embedded"], 0);
}

#[test]
fn the_index_memory_budget_is_read_from_the_config_and_env_and_checked() {
    let (_dir, db) = sqlite_db();
    let (_config_dir, good) = temp_file("memdedup.toml", b"[store]\nindex_memory_mb = 1\n");
    let listed = memdedup().args(["--db", &db, "--config"]).arg(&good).args(["list", "--json"]).assert().success();
    assert_eq!(text(&listed.get_output().stdout).trim(), "[]");

    let (_bad_dir, bad) = temp_file("memdedup.toml", b"[store]\nindex_memory_mb = 0\n");
    let refused = memdedup().args(["--db", &db, "--config"]).arg(&bad).args(["list", "--json"]).assert().failure();
    let stderr = text(&refused.get_output().stderr);
    assert!(stderr.contains("memdedup.toml") && stderr.contains("`store.index_memory_mb`"), "{stderr}");
    assert!(stderr.contains("must be a positive number of MiB, not 0"), "{stderr}");

    let by_env = memdedup()
        .env("MEMDEDUP_INDEX_MEMORY_MB", "lots")
        .args(["--db", &db, "--config"])
        .arg(&good)
        .args(["list", "--json"])
        .assert()
        .failure();
    let stderr = text(&by_env.get_output().stderr);
    assert!(stderr.contains("`MEMDEDUP_INDEX_MEMORY_MB` must be a whole number of MiB, not \"lots\""), "{stderr}");
}
