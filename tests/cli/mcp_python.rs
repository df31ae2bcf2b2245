//! The MCP server driven by a second, independent client: the official Python SDK (`mcp`
//! from PyPI, installed by `cargo xtask mcp-python`, which `cargo xtask ci` runs), over
//! stdio and over streamable HTTP at `/mcp`. The client script is tests/cli/mcp_client.py;
//! tests/cli/mcp_sampling_client.py is a client whose sampling callback is the judge
//! (`[judge] kind = "agent"`).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::pairs::unsure_pair;
use crate::serve::Server;
use crate::support::{cached_tool, require_model, sqlite_db, temp_file};

/// The tools listed without a chat model.
const TOOLS: [&str; 17] = [
    "dedup_run",
    "dedup_scan",
    "facts_add",
    "facts_context",
    "memory_add",
    "memory_check",
    "memory_delete",
    "memory_get",
    "memory_history",
    "memory_search",
    "memory_undo",
    "memory_update",
    "merge_undo",
    "merges_list",
    "review_decide",
    "review_list",
    "review_run",
];

/// The venv's python: `$MEMDEDUP_MCP_PYTHON`, else the default venv of `cargo xtask mcp-python`.
pub(crate) fn python() -> PathBuf {
    cached_tool("MEMDEDUP_MCP_PYTHON", "mcp-python/bin/python", "cargo xtask mcp-python")
}

fn client_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/cli/mcp_client.py")
}

/// Runs the client script with `args` and parses what it printed.
/// The client's JSON report and its stderr.
fn run_client(args: &[&str]) -> (Value, String) {
    run_script(&client_script(), args, &[])
}

/// Runs the Python `script` with `args`; its JSON report and its stderr.
fn run_script(script: &std::path::Path, args: &[&str], envs: &[(&str, &str)]) -> (Value, String) {
    let output = Command::new(python())
        .arg(script)
        .args(args)
        .envs(envs.iter().copied())
        .env_remove("MEMDEDUP_LOG")
        .env_remove("MEMDEDUP_JUDGE")
        .env_remove("MEMDEDUP_CONFIG")
        .env_remove("DATABASE_URL")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("the python client runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the python client failed ({}):\n{stdout}\n{stderr}", output.status);
    let report =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("the client printed no JSON ({e}):\n{stdout}"));
    (report, stderr.into_owned())
}

/// What every transport must show: the tools, then check → add → duplicate → search →
/// dedup_run → undo.
fn assert_round_trip(out: &Value) {
    assert_eq!(out["server_name"], "memdedup", "{out}");
    let tools: Vec<&str> = out["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(tools, TOOLS, "no facts_extract without a chat model");
    assert_eq!(out["add_schema"]["required"], serde_json::json!(["content"]), "{}", out["add_schema"]);
    assert_eq!(out["add_schema"]["additionalProperties"], false, "{}", out["add_schema"]);

    let ok = |step: &str| -> &Value {
        let call = &out[step];
        assert_eq!(call["is_error"], false, "{step}: {call}");
        &call["structured"]
    };
    assert_eq!(ok("check")["is_duplicate"], false);
    let first = ok("add")["urn"].as_str().expect("the first memory is stored").to_owned();
    assert!(first.starts_with("memdedup://global/lessons/"), "{first}");
    let duplicate = ok("duplicate");
    assert_eq!((&duplicate["stored"], &duplicate["check"]["reason"]), (&Value::Null, &"ExactMatch".into()));
    assert_eq!(duplicate["check"]["matched_urn"], first.as_str());
    let paraphrase = ok("add_paraphrase");
    assert_eq!(paraphrase["stored"], Value::Null, "{paraphrase}");
    assert_eq!(paraphrase["check"]["reason"], "SemanticSimilar", "{paraphrase}");
    assert_eq!(paraphrase["check"]["matched_urn"], first.as_str());
    assert!(out["add_paraphrase"]["text"].as_str().unwrap().contains("semantically similar"), "{paraphrase}");
    let restated = ok("add_restated")["urn"].as_str().expect("the restatement is stored").to_owned();

    let found: Vec<&str> =
        ok("search")["results"].as_array().unwrap().iter().map(|r| r["urn"].as_str().unwrap()).collect();
    assert_eq!(found.len(), 2, "the two stored memories, not the skipped duplicates: {found:?}");
    assert!(found.contains(&first.as_str()) && found.contains(&restated.as_str()), "{found:?}");

    let bad = &out["bad_type"];
    assert_eq!(bad["is_error"], true, "{bad}");
    assert!(bad["text"].as_str().unwrap().contains("expected a string"), "{bad}");

    let run = ok("dedup_run");
    assert_eq!((run["merged"].as_u64(), run["absorbed"].as_u64()), (Some(1), Some(1)), "{run}");
    let undone = ok("undo");
    assert_eq!(undone["undone"].as_array().map(Vec::len), Some(1), "{undone}");
    let after: Vec<&str> =
        ok("search_after_undo")["results"].as_array().unwrap().iter().map(|r| r["urn"].as_str().unwrap()).collect();
    assert_eq!(after.len(), 2, "both memories are live again after the undo: {after:?}");

    // The lifecycle.
    let refused = &out["update_duplicate"];
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(refused["text"].as_str().unwrap().contains(&format!("duplicates {restated}")), "{refused}");
    let updated = ok("update");
    assert_eq!((updated["status"].as_str(), updated["memory"]["content"].as_str()), (Some("edited"), Some(UPDATED)));
    let events = ok("history")["events"].as_array().expect("events").clone();
    assert!(
        events.iter().any(|e| e["event"] == "change" && e["action"] == "edited" && e["source"] == "mcp"),
        "{events:?}"
    );
    assert!(events.iter().any(|e| e["event"] == "merge"), "the undone merge is in the history: {events:?}");
    assert_eq!(
        ok("undo_update")["memory"]["content"],
        "Update the project documentation after every change to the code."
    );
    assert_eq!(ok("delete")["urn"], first.as_str());
    let left: Vec<&str> =
        ok("search_after_delete")["results"].as_array().unwrap().iter().map(|r| r["urn"].as_str().unwrap()).collect();
    assert_eq!(left, [restated.as_str()], "the deleted memory is not recalled");
    assert_eq!(ok("undo_delete")["urn"], first.as_str());
}

/// The text `mcp_client.py` updates the first memory to.
const UPDATED: &str = "Release notes are written by the person who merges the change.";

#[test]
fn python_sdk_client_round_trip_over_stdio() {
    let (_dir, db) = sqlite_db();
    let binary = assert_cmd::cargo::cargo_bin("memdedup");
    // The round trip pins the cosine judge (its restated rule is a paraphrase the learned
    // judge would refuse).
    let (_config_dir, config) = temp_file("memdedup.toml", b"[dedup]\njudge = \"cosine\"\n");
    let (out, _) = run_client(&["stdio", binary.to_str().unwrap(), &db, config.to_str().unwrap()]);
    assert_round_trip(&out);
}

#[test]
fn python_sdk_client_round_trip_over_http_with_a_token() {
    let (_dir, db) = sqlite_db();
    let (_config_dir, config) = temp_file(
        "memdedup.toml",
        b"[dedup]\njudge = \"cosine\"\n\n[server]\naddr = \"127.0.0.1:0\"\n\n[[server.tokens]]\ntoken = \"python-client-token-1\"\n",
    );
    let server = Server::start(&["--config", config.to_str().unwrap(), "--db", &db, "serve"], &[]);
    let url = server.url("/mcp");
    let (out, client_stderr) = run_client(&["http", &url, "python-client-token-1"]);
    assert_round_trip(&out);
    // Defect 8: ending the session answers 204, which the SDK takes as success.
    assert!(!client_stderr.contains("Session termination failed"), "{client_stderr}");
    let (status, stderr) = server.stop("TERM");
    assert!(status.success(), "the server stops cleanly with MCP sessions open: {status}\n{stderr}");
    for text in ["Update the project documentation", "Whenever anyone modifies the code"] {
        assert!(!stderr.contains(text), "memory text in the server's log:\n{stderr}");
    }
}

fn sampling_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/cli/mcp_sampling_client.py")
}

/// Runs the sampling client with `args`, telling it the pair `queue_a_pair` queued (a
/// duplicate by its label); its JSON report.
fn run_sampling_client(args: &[&str]) -> Value {
    let queued = serde_json::to_string(&unsure_pair()).expect("JSON");
    run_script(&sampling_script(), args, &[("MEMDEDUP_TEST_QUEUED_PAIR", &queued)]).0
}

/// `[judge] kind = "agent"`: dedup_run asks the client's model through MCP sampling with
/// seed 003's prompt and batch, applies the labelled verdict, and a client without the
/// sampling capability is told to use review_list.
fn assert_agent_judged(out: &Value, db: &str) {
    let run = &out["dedup_run"];
    assert_eq!(run["is_error"], false, "{run}");
    let report = &run["structured"];
    assert_eq!((report["merged"].as_u64(), report["absorbed"].as_u64()), (Some(1), Some(1)), "{report}");
    assert_eq!(report["merges"][0]["reason"], "labels: the same rule", "{report}");
    let sampled = out["sampled"].as_array().expect("sampling calls");
    assert!(!sampled.is_empty(), "the client's model was asked");
    assert!(sampled[0]["system"].as_str().is_some_and(|s| s.contains("You are deduplicating")), "{sampled:?}");
    let merges = crate::support::run_json(db, &["merges"]);
    assert_eq!(merges[0]["judge"], "agent", "{merges}");
    for step in ["without_sampling", "review_run_without_sampling"] {
        let refused = &out[step];
        assert_eq!(refused["is_error"], true, "{step}: {refused}");
        assert_eq!(refused["structured"]["error"]["kind"], "not_configured", "{step}: {refused}");
        assert!(refused["text"].as_str().unwrap().contains("review_list"), "{step}: {refused}");
    }
    // review_run: the queued pair judged by the client's model, merged through the ledger.
    let reviewed = &out["review_run"];
    assert_eq!(reviewed["is_error"], false, "{reviewed}");
    assert_eq!(reviewed["structured"]["decided"][0]["decision"], "merge", "{reviewed}");
    let queue = crate::support::run_json(db, &["review", "--all"]);
    assert_eq!(queue[0]["status"], "merged", "{queue}");
}

/// Queues a paraphrase the learned judge is unsure of (tests/cli/pairs.rs) in `rules`, for
/// `review_run` to judge.
fn queue_a_pair(db: &str) {
    let [first, second] = unsure_pair();
    crate::support::run_json(db, &["add", "-n", "rules", first]);
    let added = crate::support::run_json(db, &["add", "-n", "rules", second]);
    assert_eq!(added["check"]["verdict"], "uncertain", "{added}");
}

const AGENT_JUDGE: &[u8] = b"[dedup]\njudge = \"cosine\"\n\n[judge]\nkind = \"agent\"\n";

#[test]
fn python_sdk_sampling_makes_the_agent_the_judge_over_stdio() {
    require_model();
    let (_dir, db) = sqlite_db();
    let binary = assert_cmd::cargo::cargo_bin("memdedup");
    let (_config_dir, config) = temp_file("memdedup.toml", AGENT_JUDGE);
    queue_a_pair(&db);
    let out = run_sampling_client(&["stdio", binary.to_str().unwrap(), &db, config.to_str().unwrap()]);
    assert_agent_judged(&out, &db);
}

#[test]
fn python_sdk_sampling_makes_the_agent_the_judge_over_http() {
    require_model();
    let (_dir, db) = sqlite_db();
    let mut config = AGENT_JUDGE.to_vec();
    config.extend_from_slice(
        b"\n[server]\naddr = \"127.0.0.1:0\"\n\n[[server.tokens]]\ntoken = \"sampling-client-token-1\"\n",
    );
    let (_config_dir, config) = temp_file("memdedup.toml", &config);
    queue_a_pair(&db);
    let server = Server::start(&["--config", config.to_str().unwrap(), "--db", &db, "serve"], &[]);
    let out = run_sampling_client(&["http", &server.url("/mcp"), "sampling-client-token-1"]);
    assert_agent_judged(&out, &db);
    let (status, _) = server.stop("TERM");
    assert!(status.success(), "{status}");
}
