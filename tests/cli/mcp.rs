//! `memdedup mcp`: the MCP server over stdio, driven by the official Rust client against
//! a fresh SQLite database and the real local model.

use std::collections::BTreeSet;
use std::process::Stdio;

use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use crate::mcp_support::{
    BASE_TOOLS, DECISION, DECISION_PARAPHRASE, DOCS, LUNCH, UNRELATED, add_stored, assert_mentions, call, call_err,
    call_ok, close, db_state, live_contents, mcp_command, sorted, spawn_collecting_stderr, stdio_client,
    stdio_client_with, tools, within,
};
use crate::support::{FETCH_MODEL, require_model, run_json, sqlite_db};

/// The members of a tool's input schema that must be given.
fn required(schema: &serde_json::Map<String, Value>) -> BTreeSet<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().map(|n| n.as_str().expect("a required name").to_owned()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_initialises_and_lists_the_base_tools_with_strict_schemas() {
    let (_dir, db) = sqlite_db();
    let client = stdio_client(&db).await;
    let info = client.peer_info().expect("the server sent its info");
    let server = info.server_info.as_ref().expect("the server names itself");
    assert_eq!(server.name, "memdedup");
    assert_eq!(server.version, env!("CARGO_PKG_VERSION"));
    assert!(info.capabilities.tools.is_some(), "the server offers tools: {info:?}");
    assert!(info.instructions.as_deref().is_some_and(|i| i.contains("memory_add")), "{info:?}");

    let listed = tools(&client).await;
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(sorted(&names), sorted(&BASE_TOOLS), "no facts_extract without a language model");
    let expected_required: [(&str, &[&str]); 17] = [
        ("memory_check", &["content"]),
        ("memory_add", &["content"]),
        ("memory_search", &["query"]),
        ("memory_get", &["id"]),
        ("memory_update", &["content", "id"]),
        ("memory_delete", &["id"]),
        ("memory_history", &["id"]),
        ("memory_undo", &["change"]),
        ("dedup_scan", &[]),
        ("dedup_run", &[]),
        ("merges_list", &[]),
        ("merge_undo", &[]),
        ("review_list", &[]),
        ("review_decide", &["batch_id", "response"]),
        ("review_run", &[]),
        ("facts_add", &["category", "confidence", "content"]),
        ("facts_context", &[]),
    ];
    for (name, must) in expected_required {
        let tool = listed.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{name} is listed"));
        let schema = tool.input_schema.as_ref();
        assert_eq!(schema.get("type"), Some(&json!("object")), "{name}: {schema:?}");
        assert_eq!(schema.get("additionalProperties"), Some(&json!(false)), "{name} refuses unknown members");
        let must: BTreeSet<String> = must.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(required(schema), must, "{name}'s required members");
        let properties = schema.get("properties").and_then(Value::as_object).expect("properties");
        assert!(must.iter().all(|m| properties.contains_key(m)), "{name}: {properties:?}");
        assert!(tool.description.as_deref().is_some_and(|d| d.len() > 40), "{name} is described");
    }
    let annotations = |name: &str| listed.iter().find(|t| t.name == name).and_then(|t| t.annotations.clone());
    assert_eq!(annotations("memory_check").and_then(|a| a.read_only_hint), Some(true));
    assert_eq!(annotations("dedup_scan").and_then(|a| a.read_only_hint), Some(true));
    assert_eq!(annotations("dedup_run").and_then(|a| a.destructive_hint), Some(true));
    assert_eq!(annotations("memory_add").and_then(|a| a.read_only_hint), Some(false));
    assert_eq!(annotations("memory_delete").and_then(|a| a.destructive_hint), Some(true));
    assert_eq!(annotations("memory_history").and_then(|a| a.read_only_hint), Some(true));
    close(client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_round_trip_check_add_duplicate_paraphrase_search_get() {
    require_model();
    let (_dir, db) = sqlite_db();
    let client = stdio_client(&db).await;
    let ns = "decisions";

    let check = call_ok(&client, "memory_check", json!({"content": DECISION, "namespace": ns})).await;
    assert_eq!((&check["is_duplicate"], &check["verdict"]), (&json!(false), &json!("unique")), "{check}");
    assert_eq!(check["matched_urn"], Value::Null, "{check}");
    assert_eq!(check["scope"], json!({"domain": "global", "namespace": ns}), "{check}");
    assert!(check["explanation"].as_str().is_some_and(|e| e.starts_with("unique in global/decisions")), "{check}");
    assert!(live_contents(&db, ns).is_empty(), "memory_check stores nothing");

    let first = call_ok(&client, "memory_add", json!({"content": DECISION, "namespace": ns})).await;
    let id = first["stored"].as_i64().expect("stored");
    let urn = first["urn"].as_str().expect("a URN").to_owned();
    assert_eq!(urn, format!("memdedup://global/{ns}/{id}"));
    assert_eq!((&first["check"]["is_duplicate"], &first["embedded"]), (&json!(false), &json!(true)), "{first}");
    assert_eq!(first["explanation"], format!("stored {urn}"));

    // The same text again: not stored, an exact match of the first.
    let exact = call_ok(&client, "memory_add", json!({"content": DECISION, "namespace": ns})).await;
    assert_eq!((&exact["stored"], &exact["urn"]), (&Value::Null, &Value::Null), "{exact}");
    let check = &exact["check"];
    assert_eq!((&check["is_duplicate"], &check["verdict"]), (&json!(true), &json!("duplicate")), "{exact}");
    assert_eq!((&check["reason"], &check["matched_urn"]), (&json!("ExactMatch"), &json!(urn)), "{exact}");
    assert!(exact["explanation"].as_str().unwrap().starts_with(&format!("not stored: duplicate of {urn}: exact")));

    // A paraphrase: the real model scores it above the namespace's threshold.
    let paraphrase = call_ok(&client, "memory_add", json!({"content": DECISION_PARAPHRASE, "namespace": ns})).await;
    let check = &paraphrase["check"];
    assert_eq!(paraphrase["stored"], Value::Null, "{paraphrase}");
    assert_eq!((&check["is_duplicate"], &check["verdict"]), (&json!(true), &json!("duplicate")), "{paraphrase}");
    assert_eq!((&check["reason"], &check["matched_urn"]), (&json!("SemanticSimilar"), &json!(urn)), "{paraphrase}");
    let (score, threshold) = (check["similarity_score"].as_f64().unwrap(), check["threshold"].as_f64().unwrap());
    assert!(score >= threshold && score < 1.0 && threshold > 0.5, "{paraphrase}");
    assert_eq!(live_contents(&db, ns), [DECISION], "neither duplicate was stored");

    let (unrelated_id, unrelated_urn) = add_stored(&client, ns, UNRELATED).await;
    assert_ne!(unrelated_id, id);
    let query = "Which database does the billing service use?";
    let found = call_ok(&client, "memory_search", json!({"query": query, "namespace": ns})).await;
    let results = found["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "{found}");
    assert_eq!((&results[0]["urn"], &results[0]["content"]), (&json!(urn), &json!(DECISION)), "{found}");
    assert_eq!(results[1]["urn"], json!(unrelated_urn), "{found}");
    assert!(results[0]["score"].as_f64() > results[1]["score"].as_f64(), "best first: {found}");
    assert!(found["model"].as_str().is_some_and(|m| !m.is_empty()), "{found}");
    let top = call_ok(&client, "memory_search", json!({"query": query, "namespace": ns, "limit": 1})).await;
    assert_eq!(top["results"].as_array().map(Vec::len), Some(1), "{top}");
    let elsewhere = call_ok(&client, "memory_search", json!({"query": query, "namespace": "learnings"})).await;
    assert_eq!(elsewhere["results"], json!([]), "memories are only found in their namespace: {elsewhere}");
    // Without a namespace every namespace that holds memories is searched, each hit with
    // its scope (issue: recall across the namespaces the hook fills).
    let (lesson_id, _) =
        add_stored(&client, "learnings", "Turns out the billing database needs a nightly vacuum.").await;
    let everywhere = call_ok(&client, "memory_search", json!({"query": query})).await;
    assert_eq!(everywhere.get("scope"), None, "{everywhere}");
    let searched: BTreeSet<&str> =
        everywhere["searched"].as_array().expect("searched").iter().filter_map(|s| s["namespace"].as_str()).collect();
    assert_eq!(searched, BTreeSet::from([ns, "learnings"]), "{everywhere}");
    let hits = everywhere["results"].as_array().expect("results");
    assert_eq!(hits.len(), 3, "{everywhere}");
    assert!(hits.windows(2).all(|w| w[0]["score"].as_f64() >= w[1]["score"].as_f64()), "best first: {everywhere}");
    let lesson = hits.iter().find(|h| h["id"] == lesson_id).expect("the lesson is recalled");
    assert_eq!(lesson["scope"]["namespace"], "learnings", "{everywhere}");

    let by_id = call_ok(&client, "memory_get", json!({"id": id.to_string()})).await;
    let by_urn = call_ok(&client, "memory_get", json!({"id": urn})).await;
    assert_eq!(by_id, by_urn);
    assert_eq!((&by_id["urn"], &by_id["merged_from"]), (&json!(urn), &json!([])), "{by_id}");
    assert_eq!((&by_id["memory"]["id"], &by_id["memory"]["content"]), (&json!(id), &json!(DECISION)), "{by_id}");
    assert_eq!(by_id["memory"]["occurrence_count"], 3, "the two skipped duplicates count: {by_id}");
    close(client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_dedup_scan_writes_nothing_run_merges_and_undo_restores() {
    require_model();
    let (_dir, db) = sqlite_db();
    let client = stdio_client(&db).await;
    let ns = "lessons";
    let (docs_a, urn_a) = add_stored(&client, ns, DOCS[0]).await;
    let (docs_b, urn_b) = add_stored(&client, ns, DOCS[1]).await;
    add_stored(&client, ns, LUNCH).await;
    let mut expected_live = vec![DOCS[0].to_owned(), DOCS[1].to_owned(), LUNCH.to_owned()];
    expected_live.sort();

    let before = db_state(&db, &[]);
    let scan = call_ok(&client, "dedup_scan", json!({"namespace": ns})).await;
    assert_eq!((&scan["dry_run"], &scan["merged"]), (&json!(true), &json!(0)), "{scan}");
    let proposals = scan["proposals"].as_array().expect("proposals");
    assert_eq!(proposals.len(), 1, "{scan}");
    assert_eq!((&proposals[0]["survivor"], &proposals[0]["absorbed"]), (&json!(docs_a), &json!([docs_b])), "{scan}");
    assert_eq!(db_state(&db, &[]), before, "dedup_scan writes nothing");

    let run = call_ok(&client, "dedup_run", json!({"namespace": ns})).await;
    assert_eq!((&run["dry_run"], &run["merged"], &run["absorbed"]), (&json!(false), &json!(1), &json!(1)), "{run}");
    let merge = &run["merges"][0];
    assert_eq!((&merge["survivor"], &merge["absorbed"]), (&json!(docs_a), &json!([docs_b])), "{run}");
    let merge_id = merge["merge_id"].as_i64().expect("a merge id");
    let run_id = run["run_id"].as_str().expect("a run id").to_owned();
    assert_eq!(live_contents(&db, ns).len(), 2, "one of the paraphrases was absorbed");

    let absorbed = call_ok(&client, "memory_get", json!({"id": docs_b.to_string()})).await;
    assert_eq!((&absorbed["urn"], &absorbed["merged_from"]), (&json!(urn_a), &json!([urn_b])), "{absorbed}");
    assert_eq!(absorbed["memory"]["id"], docs_a, "{absorbed}");

    let ledger = call_ok(&client, "merges_list", json!({})).await;
    assert_eq!(ledger["total"], 1, "{ledger}");
    let record = &ledger["merges"][0];
    assert_eq!((&record["id"], &record["run_id"]), (&json!(merge_id), &json!(run_id)), "{ledger}");
    assert_eq!((&record["survivor"], &record["absorbed"]), (&json!(docs_a), &json!([docs_b])), "{ledger}");
    assert_eq!(record["undone_at"], Value::Null, "{ledger}");
    let by_run = call_ok(&client, "merges_list", json!({"run_id": run_id})).await;
    assert_eq!(by_run["total"], 1, "{by_run}");
    let other_run = call_ok(&client, "merges_list", json!({"run_id": "no-such-run"})).await;
    assert_eq!((&other_run["total"], &other_run["merges"]), (&json!(0), &json!([])), "{other_run}");

    let undone = call_ok(&client, "merge_undo", json!({"merge_id": merge_id})).await;
    assert_eq!(undone["undone"].as_array().map(Vec::len), Some(1), "{undone}");
    assert_eq!(live_contents(&db, ns), expected_live, "undo restores the absorbed memory");
    let restored = call_ok(&client, "memory_get", json!({"id": urn_b})).await;
    assert_eq!((&restored["urn"], &restored["merged_from"]), (&json!(urn_b), &json!([])), "{restored}");
    assert_eq!(restored["memory"]["content"], DOCS[1], "{restored}");

    let after_undo = db_state(&db, &[]);
    let message = call_err(&client, "merge_undo", json!({"merge_id": merge_id}), "invalid_argument").await;
    assert!(message.contains(&merge_id.to_string()), "{message}");
    let message = call_err(&client, "merge_undo", json!({"run_id": run_id}), "invalid_argument").await;
    assert!(message.contains("undone already"), "{message}");
    assert_eq!(db_state(&db, &[]), after_undo, "a refused undo changes nothing");

    let live_ledger = call_ok(&client, "merges_list", json!({})).await;
    assert_eq!((&live_ledger["total"], &live_ledger["merges"]), (&json!(0), &json!([])), "{live_ledger}");
    let all = call_ok(&client, "merges_list", json!({"include_undone": true})).await;
    assert_eq!(all["total"], 1, "{all}");
    assert_eq!(all["merges"][0]["id"], merge_id, "{all}");
    assert!(all["merges"][0]["undone_at"].is_string(), "{all}");

    // Undo keeps the pair from being merged again, unless told otherwise.
    let again = call_ok(&client, "dedup_run", json!({"namespace": ns})).await;
    assert_eq!(again["merged"], 0, "{again}");
    assert_eq!(live_contents(&db, ns), expected_live);
    let other = "lessons-again";
    for text in DOCS {
        add_stored(&client, other, text).await;
    }
    let first = call_ok(&client, "dedup_run", json!({"namespace": other})).await;
    let first_run = first["run_id"].as_str().expect("a run id");
    assert_eq!(first["merged"], 1, "{first}");
    call_ok(&client, "merge_undo", json!({"run_id": first_run, "allow_remerge": true})).await;
    assert_eq!(live_contents(&db, other).len(), 2);
    let remerged = call_ok(&client, "dedup_run", json!({"namespace": other})).await;
    assert_eq!(remerged["merged"], 1, "allow_remerge lets the next run merge them again: {remerged}");
    assert_eq!(live_contents(&db, other).len(), 1);
    close(client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_facts_add_skips_duplicates_and_low_confidence_and_builds_the_context() {
    let (_dir, db) = sqlite_db();
    let client = stdio_client(&db).await;
    let fact = "Prefers dark mode in every editor";
    let added =
        call_ok(&client, "facts_add", json!({"content": fact, "category": "preference", "confidence": 0.9})).await;
    assert_eq!(added["outcome"], "added", "{added}");
    let id = added["fact"]["id"].as_str().expect("a fact id").to_owned();
    assert!(id.starts_with("fact_"), "{added}");
    assert_eq!((&added["fact"]["content"], &added["evicted"]), (&json!(fact), &json!([])), "{added}");

    let duplicate = call_ok(
        &client,
        "facts_add",
        json!({"content": fact.to_uppercase(), "category": "preference", "confidence": 0.95}),
    )
    .await;
    assert_eq!((&duplicate["outcome"], &duplicate["existing"]["id"]), (&json!("duplicate"), &json!(id)), "{duplicate}");
    let low = call_ok(
        &client,
        "facts_add",
        json!({"content": "Might like green tea in the afternoon", "category": "preference", "confidence": 0.3}),
    )
    .await;
    assert_eq!((&low["outcome"], &low["threshold"]), (&json!("low_confidence"), &json!(0.5)), "the default: {low}");
    let other = call_ok(
        &client,
        "facts_add",
        json!({"content": "Works on the billing team", "category": "context", "confidence": 0.6, "namespace": "work"}),
    )
    .await;
    assert_eq!(other["outcome"], "added", "{other}");

    let stored = run_json(&db, &["facts", "list"]);
    let stored = stored.as_array().expect("facts list prints an array");
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!((&stored[0]["id"], &stored[0]["content"]), (&json!(id), &json!(fact)));

    let context = call_ok(&client, "facts_context", json!({})).await;
    let text = context["context"].as_str().expect("context text");
    assert!(text.contains(fact) && !text.contains("billing") && !text.contains("green tea"), "{context}");
    assert_eq!(context["facts"], 1, "{context}");
    let tokens = context["tokens"].as_u64().unwrap();
    assert!(tokens > 0 && tokens <= context["max_tokens"].as_u64().unwrap(), "{context}");
    let small = call_ok(&client, "facts_context", json!({"max_tokens": 3})).await;
    assert!(small["tokens"].as_u64().unwrap() <= 3, "{small}");
    let work = call_ok(&client, "facts_context", json!({"namespace": "work"})).await;
    assert!(work["context"].as_str().unwrap().contains("Works on the billing team"), "{work}");
    let empty = call_ok(&client, "facts_context", json!({"namespace": "empty"})).await;
    assert_eq!((&empty["context"], &empty["facts"]), (&json!(""), &json!(0)), "{empty}");
    close(client).await;
}

/// With `MEMDEDUP_LOG=debug` the server logs to stderr, and never the text of a memory,
/// a query or a fact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_debug_logs_never_contain_memory_text() {
    require_model();
    let (_dir, db) = sqlite_db();
    let memory = "Zanzibar quokkas insist on marmalade sandwiches aboard the Stone Town ferry.";
    let fact = "Collects vintage quokka marmalade jars";
    for args in [&[][..], &["-vv"][..]] {
        let envs: &[(&str, &str)] = if args.is_empty() { &[("MEMDEDUP_LOG", "debug")] } else { &[] };
        let (transport, collected) = spawn_collecting_stderr(mcp_command(&db, args, envs));
        let client = within("initialize", ().serve(transport)).await.expect("the server initialises");
        call_ok(&client, "memory_check", json!({"content": memory})).await;
        call_ok(&client, "memory_add", json!({"content": memory})).await;
        call_ok(&client, "memory_add", json!({"content": memory.to_uppercase()})).await;
        call_ok(&client, "memory_search", json!({"query": "marmalade quokkas on the ferry"})).await;
        call_ok(&client, "facts_add", json!({"content": fact, "category": "preference", "confidence": 0.9})).await;
        call_ok(&client, "facts_context", json!({})).await;
        close(client).await;
        let stderr = within("the server's exit", collected).await.expect("stderr is read");
        assert!(stderr.contains("MCP server on stdio"), "the server logs to stderr ({args:?}):\n{stderr}");
        assert!(stderr.contains("DEBUG"), "debug logging is on ({args:?}):\n{stderr}");
        for secret in ["Zanzibar", "ZANZIBAR", "quokka", "QUOKKA", "marmalade", "MARMALADE", "Stone Town"] {
            assert!(!stderr.contains(secret), "{secret:?} leaked into the logs ({args:?}):\n{stderr}");
        }
    }
    let live = run_json(&db, &["list", "--limit", "0"]);
    assert_eq!(live.as_array().map(Vec::len), Some(1), "the memory was stored once: {live}");
}

/// Without the local model the server still starts: the exact check and storing work
/// (fail-open, as `memdedup add`), and what needs the model fails naming the fetch command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_without_the_model_stores_fail_open_and_names_the_fetch_command() {
    let (_dir, db) = sqlite_db();
    let empty = tempfile::tempdir().expect("temporary directory");
    let model_dir = empty.path().display().to_string();
    let transport = TokioChildProcess::new(mcp_command(&db, &["--model-dir", &model_dir], &[])).expect("starts");
    let client = within("initialize", ().serve(transport)).await.expect("the server starts without the model");
    assert_eq!(tools(&client).await.len(), BASE_TOOLS.len());

    let added = call_ok(&client, "memory_add", json!({"content": DECISION})).await;
    assert_eq!((&added["stored"], &added["embedded"]), (&json!(1), &json!(false)), "{added}");
    assert_eq!(added["check"]["degraded"][0]["check"], "semantic", "{added}");
    assert!(added["check"]["degraded"][0]["error"].as_str().unwrap().contains(FETCH_MODEL), "{added}");
    assert!(added["explanation"].as_str().unwrap().contains("without an embedding"), "{added}");
    let again = call_ok(&client, "memory_add", json!({"content": DECISION})).await;
    assert_eq!((&again["stored"], &again["check"]["reason"]), (&Value::Null, &json!("ExactMatch")), "{again}");
    // "unique" without the semantic check is not the whole answer, and the check says so.
    let reply = call(&client, "memory_check", json!({"content": DECISION_PARAPHRASE})).await;
    assert_eq!((reply.is_error, &reply.structured["verdict"]), (false, &json!("unique")), "{reply:?}");
    assert_mentions(
        &reply.text,
        &["unique in global/default", "the semantic check failed and was skipped", FETCH_MODEL],
    );
    assert_eq!(reply.structured["explanation"], json!(reply.text), "{reply:?}");

    let before = db_state(&db, &[]);
    for (tool, args) in [("memory_search", json!({"query": "database"})), ("dedup_run", json!({}))] {
        let message = call_err(&client, tool, args, "failed").await;
        assert!(message.contains(FETCH_MODEL), "{tool}: {message}");
    }
    assert_eq!(db_state(&db, &[]), before, "the failed calls wrote nothing");
    let fact = json!({"content": "Prefers tea", "category": "preference", "confidence": 0.9});
    assert_eq!(call_ok(&client, "facts_add", fact).await["outcome"], "added");
    close(client).await;
}

/// Defect 13: AGENTS.md's per-project recipe (`MEMDEDUP_HOME` in the server's env, no
/// model there) finds the model in the default cache: semantic dedup works and
/// `memory_search` answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_13_mcp_with_a_project_memdedup_home_finds_the_model_in_the_default_cache() {
    require_model();
    let home = tempfile::tempdir().expect("temporary directory");
    let db = home.path().join("memdedup.db").display().to_string();
    let home_dir = home.path().display().to_string();
    let client = stdio_client_with(&db, &[("MEMDEDUP_HOME", home_dir.as_str())]).await;
    let first = call_ok(&client, "memory_add", json!({"content": DECISION})).await;
    assert_eq!((&first["stored"], &first["embedded"]), (&json!(1), &json!(true)), "{first}");
    let again = call_ok(&client, "memory_add", json!({"content": DECISION_PARAPHRASE})).await;
    assert_eq!((&again["stored"], &again["check"]["reason"]), (&Value::Null, &json!("SemanticSimilar")), "{again}");
    let found = call_ok(&client, "memory_search", json!({"query": "billing database"})).await;
    assert_eq!(found["results"][0]["id"], 1, "{found}");
    close(client).await;
}

/// The wire format without the SDK: newline-delimited JSON-RPC on stdout and nothing
/// else, camelCase result members, and a clean exit when the client closes stdin, after
/// answering every request (one that loads the model too).
#[test]
fn mcp_stdio_speaks_plain_json_rpc_and_exits_cleanly_when_stdin_closes() {
    use std::io::Write;
    let (_dir, db) = sqlite_db();
    let mut child = mcp_command(&db, &[], &[])
        .as_std_mut()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memdedup mcp starts");
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "memory_get", "arguments": {"id": "abc"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "facts_add",
            "arguments": {"content": "Prefers tea", "category": "preference", "confidence": 0.9}}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "memory_add",
            "arguments": {"content": DECISION}}}),
    ];
    let mut stdin = child.stdin.take().expect("stdin is piped");
    for message in &messages {
        writeln!(stdin, "{message}").expect("the server reads stdin");
    }
    drop(stdin);
    let (done, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let output = exited
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the server exits once stdin is closed")
        .expect("the server's output is readable");
    assert!(output.status.success(), "{:?}\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).expect("stdout is UTF-8");
    let mut replies: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON-RPC ({e}): {line:?}\n{stdout}")))
        .collect();
    // Requests are served concurrently: replies may come in any order, matched by id.
    replies.sort_by_key(|reply| reply["id"].as_i64());
    let ids: Vec<&Value> = replies.iter().map(|r| &r["id"]).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5].map(|id| json!(id)).iter().collect::<Vec<_>>(), "one reply per request:\n{stdout}");
    assert_eq!(replies[0]["result"]["serverInfo"]["name"], "memdedup", "{stdout}");
    assert_eq!(replies[1]["result"]["tools"].as_array().map(Vec::len), Some(BASE_TOOLS.len()), "{stdout}");
    let refused = &replies[2]["result"];
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(refused["structuredContent"]["error"]["kind"], "invalid_argument", "{refused}");
    assert_eq!(refused["content"][0]["type"], "text", "{refused}");
    let added = &replies[3]["result"];
    assert_ne!(added["isError"], true, "{added}");
    assert_eq!(added["structuredContent"]["outcome"], "added", "{added}");
    assert_eq!(replies[4]["result"]["structuredContent"]["stored"], 1, "{stdout}");
    let facts = run_json(&db, &["facts", "list"]);
    assert_eq!(facts.as_array().map(Vec::len), Some(1), "{facts}");
    assert_eq!(live_contents(&db, "default"), [DECISION], "calls in flight at the end of stdin are finished");
}

/// With no judge configured, the MCP tools decide with the learned judge, and a pair it
/// holds for review is stored and named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_default_judge_is_the_learned_one() {
    require_model();
    let (_dir, db) = sqlite_db();
    let mut command = mcp_command(&db, &[], &[]);
    command.env_remove("MEMDEDUP_DEDUP_JUDGE");
    let transport = TokioChildProcess::new(command).expect("starts");
    let client = within("initialize", ().serve(transport)).await.expect("the stdio server initialises");
    let (_, urn) = add_stored(&client, "decisions", DECISION).await;
    let check =
        call_ok(&client, "memory_check", json!({"content": DECISION_PARAPHRASE, "namespace": "decisions"})).await;
    assert_eq!(check["judge"], "learned", "{check}");
    assert!(check["probability"].as_f64().is_some(), "the learned judge states its probability: {check}");
    if check["verdict"] == "uncertain" {
        assert_eq!(check["likely_duplicate"], json!(urn), "{check}");
    }
    close(client).await;
}
