//! The host agent as judge: `review_list` gives the pairs the learned judge was unsure of
//! as seed 003 batches, `review_decide` applies the agent's verdict, validated exactly as
//! an LLM judge's reply is; refused replies change nothing, and a token limited to some
//! namespaces can neither list nor decide the others.

use serde_json::{Value, json};

use crate::mcp_support::{HttpServer, McpClient, call_err, call_ok, close, http_client, stdio_client};
use crate::pairs::review_pairs as pairs;
use crate::support::{require_model, run_json, sqlite_db};

/// Queues the pairs (through `memdedup add`, whose default judge is the learned one) in
/// `namespaces` instead of the pairs' own when given.
fn queue(db: &str, namespaces: [&str; 2]) {
    for ((_, first, second), namespace) in pairs().into_iter().zip(namespaces) {
        run_json(db, &["add", "-n", namespace, first]);
        let added = run_json(db, &["add", "-n", namespace, second]);
        assert_eq!(added["check"]["verdict"], "uncertain", "{added}");
    }
}

/// The statuses of the queue's entries, by namespace.
fn statuses(db: &str) -> Vec<(String, String)> {
    let all = run_json(db, &["review", "--all"]);
    let mut out: Vec<(String, String)> = all
        .as_array()
        .expect("an array")
        .iter()
        .map(|r| {
            (
                r["scope"]["namespace"].as_str().unwrap_or_default().to_owned(),
                r["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The batch of `namespace` in a `review_list` result, with its two memory ids.
fn batch<'a>(listed: &'a Value, text: &str) -> (&'a Value, i64, i64) {
    let batch = listed["batches"]
        .as_array()
        .expect("batches")
        .iter()
        .find(|b| b["memories"].as_array().is_some_and(|m| m.iter().any(|m| m["text"] == text)))
        .unwrap_or_else(|| panic!("no batch holds {text:?}: {listed}"));
    let ids: Vec<i64> = batch["memories"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), 2, "{batch}");
    (batch, ids[0], ids[1])
}

fn group(ids: [i64; 2], confidence: f64) -> Value {
    json!({"ids": ids, "canonical_text": pairs()[0].1, "confidence": confidence, "reason": "the same claim"})
}

async fn refused(client: &McpClient, batch_id: &Value, response: Value, needle: &str) {
    let message =
        call_err(client, "review_decide", json!({"batch_id": batch_id, "response": response}), "invalid_argument")
            .await;
    assert!(message.contains(needle), "{needle:?} not in: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_tools_apply_a_valid_verdict_and_refuse_bad_ones_with_nothing_applied() {
    require_model();
    let (_dir, db) = sqlite_db();
    queue(&db, ["lessons", "ops"]);
    let client = stdio_client(&db).await;
    let listed = call_ok(&client, "review_list", json!({})).await;
    assert_eq!((listed["pending"].as_u64(), listed["left_out"].as_u64()), (Some(2), Some(0)), "{listed}");
    assert!(listed["instructions"].as_str().is_some_and(|i| i.contains("BOOTSTRAP")), "{listed}");
    assert_eq!(listed["response_schema"]["required"], json!(["groups", "no_match_ids", "notes"]));
    let (lessons, a, b) = batch(&listed, pairs()[0].1);
    assert_eq!(lessons["mode"], "bootstrap");
    assert_eq!(lessons["candidate_edges"][0]["source_id"], a, "{lessons}");
    let lessons_id = lessons["batch_id"].clone();

    // Bad verdicts: refused with the reason, nothing applied.
    refused(&client, &lessons_id, json!({"groups": [group([a, 999], 0.9)], "no_match_ids": [b]}), "999").await;
    refused(&client, &lessons_id, json!({"groups": [group([a, b], 0.5)], "no_match_ids": []}), "confidence").await;
    refused(
        &client,
        &lessons_id,
        json!({"groups": [], "no_match_ids": [a]}),
        &format!("id {b} is in neither a group nor no_match_ids"),
    )
    .await;
    refused(&client, &lessons_id, json!({"groups": "none"}), "not seed 003's reply").await;
    let message = call_err(
        &client,
        "review_decide",
        json!({"batch_id": "review:abc", "response": {"groups": []}}),
        "invalid_argument",
    )
    .await;
    assert!(message.contains("not a batch id from review_list"), "{message}");
    assert_eq!(statuses(&db), [("lessons".to_owned(), "pending".to_owned()), ("ops".to_owned(), "pending".to_owned())]);
    assert_eq!(run_json(&db, &["merges"]).as_array().map(Vec::len), Some(0));

    // A valid verdict: the pair is merged through the ledger.
    let decided = call_ok(
        &client,
        "review_decide",
        json!({"batch_id": lessons_id, "response": {"groups": [group([a, b], 0.92)], "no_match_ids": [], "notes": []}}),
    )
    .await;
    let merge_id = decided["decided"][0]["merge_id"].as_i64().expect("a merge id");
    assert_eq!(decided["decided"][0]["decision"], "merge", "{decided}");
    // The other batch: kept apart.
    let (ops, c, d) = batch(&listed, pairs()[1].1);
    let decided = call_ok(
        &client,
        "review_decide",
        json!({"batch_id": ops["batch_id"], "response": {"groups": [], "no_match_ids": [c, d]}}),
    )
    .await;
    assert_eq!(decided["decided"][0]["decision"], "apart", "{decided}");
    assert_eq!(statuses(&db), [("lessons".to_owned(), "merged".to_owned()), ("ops".to_owned(), "apart".to_owned())]);
    // Deciding a batch again is refused; the merge is undone like any other.
    refused(&client, &lessons_id, json!({"groups": [], "no_match_ids": [a, b]}), "is merged now").await;
    let undone = call_ok(&client, "merge_undo", json!({"merge_id": merge_id})).await;
    assert_eq!(undone["undone"].as_array().map(Vec::len), Some(1), "{undone}");
    assert_eq!(call_ok(&client, "review_list", json!({})).await["pending"], 0);
    close(client).await;
}

const TOKENS: &str = r#"
[[server.tokens]]
token = "review-admin-token-1"

[[server.tokens]]
token = "review-agent-token-2"
namespaces = ["agents"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_tools_keep_a_token_to_its_namespaces() {
    require_model();
    let (dir, db) = sqlite_db();
    queue(&db, ["agents", "other"]);
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, TOKENS).expect("write memdedup.toml");
    let config = config.display().to_string();
    let mut server = HttpServer::start(&["--config", &config, "--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let admin = http_client(&server.mcp_url(), Some("review-admin-token-1")).await.expect("admin");
    let agent = http_client(&server.mcp_url(), Some("review-agent-token-2")).await.expect("agent");
    let everything = call_ok(&admin, "review_list", json!({})).await;
    assert_eq!(everything["batches"].as_array().map(Vec::len), Some(2), "{everything}");
    let (other, c, d) = batch(&everything, pairs()[1].1);
    let mine = call_ok(&agent, "review_list", json!({})).await;
    assert_eq!((mine["pending"].as_u64(), mine["batches"].as_array().map(Vec::len)), (Some(1), Some(1)), "{mine}");
    batch(&mine, pairs()[0].1);
    let message = call_err(&agent, "review_list", json!({"namespace": "other"}), "forbidden").await;
    assert!(message.contains("may not use namespace"), "{message}");
    let response = json!({"groups": [], "no_match_ids": [c, d]});
    let message =
        call_err(&agent, "review_decide", json!({"batch_id": other["batch_id"], "response": response}), "not_found")
            .await;
    assert!(message.starts_with("no review entry with id"), "{message}");
    assert_eq!(
        statuses(&db),
        [("agents".to_owned(), "pending".to_owned()), ("other".to_owned(), "pending".to_owned())]
    );
    close(agent).await;
    close(admin).await;
    server.stop_gracefully();
}
