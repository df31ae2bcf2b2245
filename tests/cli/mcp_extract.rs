//! The MCP tools with a language model configured: `facts_extract` over stdio, offered
//! only then (here with a fake OpenAI-compatible server), storing the confident facts and
//! nothing when the model fails; and a judge that cannot be made.

use dedup_llm::fake::{FakeLlm, FakeReply};
use rmcp::ServiceExt;
use serde_json::{Value, json};

use crate::mcp_support::{
    BASE_TOOLS, HttpServer, call_err, call_ok, close, db_state, http_client, mcp_command, sorted,
    spawn_collecting_stderr, stdio_client_with, tool_names, within,
};
use crate::support::{run_json, sqlite_db};

/// The key the server sends to the model; it must never reach a tool result.
const API_KEY: &str = "sk-mcp-extraction-secret-7319";

const USER: &str = "I'm moving our billing service from Python to Rust; please always use tabs.";
const ASSISTANT: &str = "Got it: tabs from now on.";

fn fact(content: &str, category: &str, confidence: f64) -> Value {
    json!({"content": content, "category": category, "confidence": confidence})
}

fn reply(facts: &[Value]) -> FakeReply {
    FakeReply::text(json!({ "facts": facts }).to_string())
}

/// The stored facts of global/`namespace` as (content, category, confidence).
fn stored(db: &str, namespace: &str) -> Vec<(String, String, f64)> {
    let facts = run_json(db, &["facts", "list", "-n", namespace]);
    let mut facts: Vec<(String, String, f64)> = facts
        .as_array()
        .expect("facts list prints an array")
        .iter()
        .map(|f| {
            (
                f["content"].as_str().unwrap_or_default().to_owned(),
                f["category"].as_str().unwrap_or_default().to_owned(),
                f["confidence"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect();
    facts.sort_by(|a, b| a.0.cmp(&b.0));
    facts
}

fn triple(content: &str, category: &str, confidence: f64) -> (String, String, f64) {
    (content.to_owned(), category.to_owned(), confidence)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_facts_extract_with_a_fake_llm_stores_confident_facts_and_nothing_on_failure() {
    let migrating = "User is migrating the billing service from Python to Rust";
    let tabs = "User prefers tabs for indentation";
    let fake = FakeLlm::scripted(vec![
        reply(&[
            fact(migrating, "context", 0.95),
            fact(tabs, "preference", 0.9),
            fact("User is tired", "context", 0.2),
        ]),
        reply(&[fact("User works on payments", "context", 0.9)]),
        reply(&[fact("User has a cat named Rust", "knowledge", 0.9)]),
        FakeReply::status(401, format!("Incorrect API key provided: {API_KEY}")),
    ]);
    let (_dir, db) = sqlite_db();
    let url = fake.base_url();
    let envs = [
        ("MEMDEDUP_JUDGE", "openai"),
        ("MEMDEDUP_JUDGE_URL", url.as_str()),
        ("MEMDEDUP_JUDGE_MODEL", "fake-extractor"),
        ("MEMDEDUP_JUDGE_API_KEY", API_KEY),
    ];
    let client = stdio_client_with(&db, &envs).await;
    let mut with_extract: Vec<&str> = BASE_TOOLS.to_vec();
    with_extract.push("facts_extract");
    assert_eq!(tool_names(&client).await, sorted(&with_extract), "facts_extract is offered with a language model");

    let ns = "profile";
    let extracted =
        call_ok(&client, "facts_extract", json!({"user": USER, "assistant": ASSISTANT, "namespace": ns})).await;
    assert_eq!(extracted["dry_run"], false, "{extracted}");
    let facts = extracted["facts"].as_array().expect("facts");
    let contents: Vec<&str> = facts.iter().map(|f| f["content"].as_str().unwrap()).collect();
    assert_eq!(contents, [migrating, tabs], "{extracted}");
    assert!(facts.iter().all(|f| f["outcome"]["outcome"] == "added"), "{extracted}");
    let skipped = extracted["skipped_low_confidence"].as_array().expect("skipped facts");
    assert_eq!(skipped.len(), 1, "{extracted}");
    assert_eq!(skipped[0]["content"], "User is tired", "{extracted}");
    assert!(extracted["usage"]["input_tokens"].as_u64() > Some(0), "{extracted}");
    let mut expected = vec![triple(migrating, "context", 0.95), triple(tabs, "preference", 0.9)];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(stored(&db, ns), expected);

    // The model saw the turn.
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let said = &requests[0].user;
    assert!(said.contains("billing service from Python to Rust") && said.contains("tabs from now on"), "{said}");
    assert_eq!(requests[0].header("authorization"), Some(format!("Bearer {API_KEY}").as_str()));

    let dry =
        call_ok(&client, "facts_extract", json!({"user": USER, "assistant": "", "namespace": ns, "dry_run": true}))
            .await;
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert_eq!(dry["facts"][0]["content"], "User works on payments", "{dry}");
    assert!(dry["facts"][0].get("outcome").is_none(), "{dry}");
    assert_eq!(stored(&db, ns), expected, "a dry run stores nothing");

    // Into another namespace, then a failure of the model.
    call_ok(&client, "facts_extract", json!({"user": "My cat is named Rust.", "assistant": "Cute!"})).await;
    assert_eq!(stored(&db, "default"), [triple("User has a cat named Rust", "knowledge", 0.9)]);
    let message =
        call_err(&client, "facts_extract", json!({"user": USER, "assistant": ASSISTANT, "namespace": ns}), "failed")
            .await;
    assert!(message.contains("nothing was stored") && message.contains("401"), "{message}");
    assert!(!message.contains(API_KEY), "the key leaked into the tool error: {message}");
    assert_eq!(stored(&db, ns), expected, "a failed extraction stores nothing");
    assert_eq!(fake.request_count(), 4);

    // Bad turns are refused before the model is asked.
    let message = call_err(&client, "facts_extract", json!({"user": " ", "assistant": ""}), "invalid_argument").await;
    assert!(message.contains("`user` and `assistant` are both empty"), "{message}");
    let big = "a".repeat(1024 * 1024 + 1);
    let message = call_err(&client, "facts_extract", json!({"user": big, "assistant": "ok"}), "invalid_argument").await;
    assert!(message.contains("`user` is 1048577 bytes"), "{message}");
    let message = call_err(
        &client,
        "facts_extract",
        json!({"user": "hi", "assistant": "ok", "namespace": "bad ns"}),
        "invalid_argument",
    )
    .await;
    assert!(message.contains("bad ns"), "{message}");
    assert_eq!(fake.request_count(), 4, "no refused call reached the model");
    close(client).await;
}

/// An anthropic judge without an API key cannot be made: `memdedup mcp` and `memdedup
/// serve` still start (warning once per tool they lose), the dedup tools answer
/// `not_configured` with the reason, and the other tools work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_with_an_anthropic_judge_without_a_key_serves_every_tool_but_assisted_dedup() {
    let (_dir, db) = sqlite_db();
    let envs = [("MEMDEDUP_JUDGE", "anthropic")];
    let (transport, collected) = spawn_collecting_stderr(mcp_command(&db, &[], &envs));
    let stdio = within("initialize", ().serve(transport)).await.expect("the server starts without the judge");
    let mut server = HttpServer::start(&["--db", &db, "serve", "--addr", "127.0.0.1:0"], &envs);
    let http = http_client(&server.mcp_url(), None).await.expect("/mcp is served");

    for (client, namespace) in [(&stdio, "over-stdio"), (&http, "over-http")] {
        assert_eq!(tool_names(client).await, sorted(&BASE_TOOLS), "no facts_extract without a model");
        let added = call_ok(client, "memory_add", json!({"content": "Short note", "namespace": namespace})).await;
        assert!(added["stored"].is_i64(), "{added}");
        let before = db_state(&db, &[]);
        for tool in ["dedup_scan", "dedup_run"] {
            let message = call_err(client, tool, json!({"namespace": namespace}), "not_configured").await;
            assert!(message.contains("the anthropic judge needs an API key"), "{tool}: {message}");
        }
        assert_eq!(db_state(&db, &[]), before);
    }
    close(http).await;
    close(stdio).await;
    for stderr in [within("the server's exit", collected).await.expect("stderr"), server.stop_gracefully()] {
        for off in ["warning: dedup_scan and dedup_run are off", "warning: facts_extract is off"] {
            assert!(stderr.contains(off), "{off:?} is not in:\n{stderr}");
        }
    }
}
