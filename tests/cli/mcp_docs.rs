//! docs/AGENTS.md as a new user would try it: every JSON block parses, the `.mcp.json`
//! server entry launches a working MCP server, the PreCompact hook command runs and prints
//! valid hook output, and the Python example stores a memory.

use std::path::PathBuf;
use std::process::Command;

use rmcp::ServiceExt;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::Value;

use crate::support::sqlite_db;

fn agents_doc() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/AGENTS.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fenced blocks of `markdown` with their info strings.
fn fenced_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in markdown.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) => current = Some((info.trim().to_owned(), String::new())),
            (Some(_), Some(_)) => blocks.extend(current.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

fn json_blocks() -> Vec<Value> {
    fenced_blocks(&agents_doc())
        .into_iter()
        .filter(|(info, _)| info == "json")
        .map(|(_, body)| {
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("a json block does not parse: {e}\n{body}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn agents_doc_mcp_json_entry_launches_the_server() {
    let blocks = json_blocks();
    let entry = blocks
        .iter()
        .find_map(|b| b["mcpServers"]["memdedup"].get("command").map(|_| &b["mcpServers"]["memdedup"]))
        .expect("a stdio .mcp.json entry");
    assert_eq!(entry["command"], "memdedup", "{entry}");
    let args: Vec<String> = entry["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
    let (_dir, db) = sqlite_db();
    let binary = assert_cmd::cargo::cargo_bin("memdedup");
    let transport = TokioChildProcess::new(tokio::process::Command::new(&binary).configure(|c| {
        c.arg("--db").arg(&db).args(&args).env_remove("MEMDEDUP_JUDGE").env_remove("MEMDEDUP_CONFIG");
        c.current_dir(std::env::temp_dir());
    }))
    .expect("the server starts");
    let client = ().serve(transport).await.expect("initialize");
    let tools = client.list_all_tools().await.expect("list tools");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(names.contains(&"memory_add") && names.contains(&"memory_search"), "{names:?}");
    let _ = client.cancel().await;

    let http = blocks
        .iter()
        .map(|b| &b["mcpServers"]["memdedup"])
        .find(|e| e["type"] == "http")
        .expect("an HTTP .mcp.json entry");
    assert!(http["url"].as_str().unwrap().ends_with("/mcp"), "{http}");
    assert!(http["headers"]["Authorization"].as_str().unwrap().starts_with("Bearer "), "{http}");
}

/// The words of the command docs/AGENTS.md configures for the hook `event`, after `memdedup`.
fn hook_command(event: &str) -> Vec<String> {
    let blocks = json_blocks();
    let hook = blocks
        .iter()
        .find_map(|b| b["hooks"][event][0]["hooks"][0].get("command"))
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("a {event} hook entry"));
    let words: Vec<String> = hook.split_whitespace().map(str::to_owned).collect();
    assert_eq!(words[0], "memdedup", "{hook}");
    words[1..].to_vec()
}

#[test]
fn agents_doc_precompact_hook_command_runs() {
    let words = hook_command("PreCompact");
    let (dir, db) = sqlite_db();
    let transcript = dir.path().join("transcript.jsonl");
    let line = serde_json::json!({"type": "user", "message": {"role": "user",
        "content": "We decided to use PostgreSQL for the billing service instead of MySQL."}});
    std::fs::write(&transcript, format!("{line}\n")).unwrap();
    let input = serde_json::json!({"session_id": "s1", "transcript_path": transcript, "hook_event_name": "PreCompact",
        "trigger": "manual", "cwd": dir.path()});
    let output = crate::support::memdedup()
        .arg("--db")
        .arg(&db)
        .args(&words)
        .write_stdin(input.to_string())
        .output()
        .expect("the hook runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let printed: Value = serde_json::from_slice(&output.stdout).expect("hook output is JSON");
    assert_eq!(printed["hookSpecificOutput"]["hookEventName"], "PreCompact", "{printed}");
    let context = printed["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(context.contains("memdedup://global/decisions/"), "{context}");
    let summary = printed["systemMessage"].as_str().expect("a summary for the user");
    assert!(summary.starts_with("memdedup: captured 1 memory before compaction"), "{summary}");
}

/// The SessionStart entry of docs/AGENTS.md runs as written and puts back, in Claude
/// Code's hook format, what the PreCompact hook stored.
#[test]
fn agents_doc_session_start_hook_command_runs() {
    let words = hook_command("SessionStart");
    let (_dir, db) = sqlite_db();
    let text = "We decided to use PostgreSQL for the billing service instead of MySQL.";
    crate::support::run_json(&db, &["add", "-n", "decisions", text]);
    let input = serde_json::json!({"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup"});
    let output = crate::support::memdedup()
        .arg("--db")
        .arg(&db)
        .args(&words)
        .write_stdin(input.to_string())
        .output()
        .expect("the hook runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let printed: Value = serde_json::from_slice(&output.stdout).expect("hook output is JSON");
    assert_eq!(printed["hookSpecificOutput"]["hookEventName"], "SessionStart", "{printed}");
    let context = printed["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(context.contains(&format!("## Decisions\n- {text}")), "{context}");
    assert!(printed["systemMessage"].as_str().is_some_and(|m| m.contains("recalled 1 memory")), "{printed}");
}

#[test]
fn agents_doc_python_example_stores_a_memory() {
    let doc = agents_doc();
    let (_, script) = fenced_blocks(&doc).into_iter().find(|(info, _)| info == "python").expect("a python example");
    let (_dir, db) = sqlite_db();
    let binary = assert_cmd::cargo::cargo_bin("memdedup");
    // As a user with `memdedup` on PATH and the database given on the command line.
    let marker = r#"StdioServerParameters(command="memdedup", args=["mcp"])"#;
    assert!(script.contains(marker), "the example launches `memdedup mcp`:\n{script}");
    let script = script.replace(
        marker,
        &format!("StdioServerParameters(command={:?}, args=[\"--db\", {db:?}, \"mcp\"])", binary.display().to_string()),
    );
    let output = Command::new(crate::mcp_python::python())
        .args(["-c", &script])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines, ["stored memdedup://global/decisions/1", "memdedup://global/decisions/1"], "{stdout}");
}
