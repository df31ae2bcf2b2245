//! `memdedup mcp` driven by the MCP Inspector CLI from npm (pinned in tests/mcp-inspector/,
//! installed by `cargo xtask mcp-inspector`, which `cargo xtask ci` runs), one process per
//! call as a user would run it: every tool with its optional integers, an id as
//! `memory_add` returns it, and arguments of the wrong type or unknown (defect 15).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::support::{cached_tool, require_model, sqlite_db, temp_file};

/// The Inspector: `$MEMDEDUP_MCP_INSPECTOR`, else the default of `cargo xtask mcp-inspector`.
fn inspector() -> PathBuf {
    cached_tool("MEMDEDUP_MCP_INSPECTOR", "mcp-inspector/node_modules/.bin/mcp-inspector", "cargo xtask mcp-inspector")
}

/// One `tools/call` through the Inspector CLI: the tool's result as JSON.
fn call(db: &str, config: &str, tool: &str, args: &[(&str, &str)]) -> Value {
    let binary = assert_cmd::cargo::cargo_bin("memdedup");
    let mut cmd = Command::new(inspector());
    cmd.args(["--cli", "-e", &format!("MEMDEDUP_CONFIG={config}")]).arg(&binary).args([
        "--db",
        db,
        "mcp",
        "--method",
        "tools/call",
        "--tool-name",
        tool,
    ]);
    for (name, value) in args {
        cmd.args(["--tool-arg", &format!("{name}={value}")]);
    }
    let output = cmd.current_dir(std::env::temp_dir()).output().expect("the Inspector runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    // With `isError: true` the Inspector prints the result, then its own error line.
    let result = stdout.split("\n{\"error\"").next().unwrap_or_default();
    serde_json::from_str(result.trim()).unwrap_or_else(|e| {
        panic!("{tool} {args:?}: no JSON result ({e}):\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr))
    })
}

fn ok(result: &Value) -> &Value {
    assert_eq!(result["isError"], false, "{result}");
    &result["structuredContent"]
}

#[test]
fn defect_15_every_tool_works_from_the_inspector_cli() {
    require_model();
    let (_dir, db) = sqlite_db();
    let (_config_dir, config) = temp_file("memdedup.toml", b"[dedup]\njudge = \"cosine\"\n");
    let config = config.to_str().expect("a UTF-8 path");

    let added = call(
        &db,
        config,
        "memory_add",
        &[("content", "Always run the linter before pushing."), ("namespace", "notes")],
    );
    let id = ok(&added)["stored"].as_i64().unwrap_or_else(|| panic!("stored: {added}"));
    // The id as `memory_add` gave it (the Inspector sends `1` as a number).
    let got = call(&db, config, "memory_get", &[("id", &id.to_string())]);
    assert_eq!(ok(&got)["memory"]["content"], "Always run the linter before pushing.", "{got}");

    let calls: [(&str, &[(&str, &str)]); 6] = [
        ("memory_search", &[("query", "linting before a push"), ("namespace", "notes"), ("limit", "2")]),
        ("memory_check", &[("content", "Lint before you push."), ("namespace", "notes")]),
        ("dedup_scan", &[("namespace", "notes"), ("limit", "10")]),
        ("merges_list", &[("limit", "5")]),
        ("facts_add", &[("content", "User prefers tabs"), ("category", "preference"), ("confidence", "0.9")]),
        ("facts_context", &[("max_tokens", "100")]),
    ];
    for (tool, args) in calls {
        let result = call(&db, config, tool, args);
        assert!(ok(&result).is_object(), "{tool}: {result}");
    }
    // The lifecycle tools, with the ids the Inspector sends as numbers.
    let id_text = id.to_string();
    let updated =
        call(&db, config, "memory_update", &[("id", &id_text), ("content", "Run the linter before each push.")]);
    let change = ok(&updated)["change"].as_i64().unwrap_or_else(|| panic!("a change: {updated}")).to_string();
    let history = call(&db, config, "memory_history", &[("id", &id_text)]);
    assert_eq!(ok(&history)["events"][0]["action"], "edited", "{history}");
    let undone = call(&db, config, "memory_undo", &[("change", &change)]);
    assert_eq!(ok(&undone)["memory"]["content"], "Always run the linter before pushing.", "{undone}");
    let deleted = call(&db, config, "memory_delete", &[("id", &id_text)]);
    let change = ok(&deleted)["change"].as_i64().unwrap_or_else(|| panic!("a change: {deleted}")).to_string();
    assert!(ok(&call(&db, config, "memory_undo", &[("change", &change)])).is_object());
    let searched = call(&db, config, "memory_search", &[("query", "lint"), ("namespace", "notes"), ("limit", "1")]);
    assert_eq!(ok(&searched)["results"].as_array().map(Vec::len), Some(1), "{searched}");

    // Wrong types and unknown arguments are tool errors with structured content.
    for (tool, args, needle) in [
        ("memory_search", &[("query", "x"), ("bogus", "1")][..], "unknown field `bogus`"),
        ("memory_search", &[("query", "x"), ("limit", "-1")][..], "`limit`: invalid value"),
        ("merge_undo", &[("merge_id", "[1]")][..], "`merge_id`: invalid type"),
    ] {
        let result = call(&db, config, tool, args);
        assert_eq!(result["isError"], true, "{result}");
        assert_eq!(result["structuredContent"]["error"]["kind"], "invalid_argument", "{result}");
        let message = result["structuredContent"]["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{tool}: {message}");
    }
}

/// Optional numbers are typed `integer`, not `["integer", "null"]`, which clients that
/// build forms or convert arguments from the schema (the Inspector among them) read as
/// text; no tool argument has a union type.
#[test]
fn defect_15_tool_schemas_have_no_union_types() {
    let (_dir, db) = sqlite_db();
    let (_config_dir, config) = temp_file("memdedup.toml", b"[dedup]\njudge = \"cosine\"\n");
    let binary = assert_cmd::cargo::cargo_bin("memdedup");
    let output = Command::new(inspector())
        .args(["--cli", "-e", &format!("MEMDEDUP_CONFIG={}", config.display())])
        .arg(&binary)
        .args(["--db", &db, "mcp", "--method", "tools/list"])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("the Inspector runs");
    let listed: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", String::from_utf8_lossy(&output.stdout)));
    let tools = listed["tools"].as_array().expect("tools");
    assert!(tools.len() >= 10, "{listed}");
    let mut integers = 0;
    for tool in tools {
        let properties = tool["inputSchema"]["properties"].as_object().cloned().unwrap_or_default();
        for (name, schema) in properties {
            assert!(!schema["type"].is_array(), "{}.{name} has a union type: {schema}", tool["name"]);
            integers += usize::from(schema["type"] == "integer");
        }
    }
    assert!(integers >= 5, "the optional integers are typed integer: {listed}");
}
