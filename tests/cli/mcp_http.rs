//! The MCP tools over streamable HTTP at `/mcp` of `memdedup serve`: bearer tokens guard
//! the endpoint, and a token limited to some namespaces limits every tool the same way.

use serde_json::{Value, json};

use crate::mcp_support::{
    BASE_TOOLS, DECISION, DECISION_PARAPHRASE, DOCS, HttpServer, LUNCH, McpClient, UNRELATED, add_stored, call_err,
    call_ok, close, db_state, http_client, live_contents, sorted, tool_names, try_call,
};
use crate::support::{require_model, sqlite_db};

/// A token limited to the namespace `agents`, and one that may use every namespace.
const AGENTS_TOKEN: &str = "agents-token-0123";
const ADMIN_TOKEN: &str = "admin-token-4567";

/// A configuration with the two tokens above.
const TOKENS: &str = r#"
[[server.tokens]]
token = "agents-token-0123"
namespaces = ["agents"]

[[server.tokens]]
token = "admin-token-4567"
"#;

/// Runs `dedup_run` on `namespace`, expecting one merge; returns (merge id, run id).
async fn merge_one(client: &McpClient, namespace: &str) -> (i64, String) {
    let run = call_ok(client, "dedup_run", json!({"namespace": namespace})).await;
    assert_eq!(run["merged"], 1, "{run}");
    (run["merges"][0]["merge_id"].as_i64().expect("a merge id"), run["run_id"].as_str().expect("a run").to_owned())
}

/// The ids of the merges `merges_list` returns for `args`.
async fn merge_ids(client: &McpClient, args: Value) -> Vec<i64> {
    let listed = call_ok(client, "merges_list", args).await;
    let ids: Vec<i64> =
        listed["merges"].as_array().expect("merges").iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(listed["total"], ids.len(), "{listed}");
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_bearer_tokens_refuse_strangers_and_limit_namespaces() {
    require_model();
    let (dir, db) = sqlite_db();
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, TOKENS).expect("write memdedup.toml");
    let config = config.display().to_string();
    let mut server = HttpServer::start(
        &["--config", &config, "--db", &db, "serve", "--addr", "127.0.0.1:0"],
        &[("MEMDEDUP_LOG", "debug")],
    );
    let url = server.mcp_url();

    for token in [None, Some("wrong-token-9999"), Some("")] {
        let error = http_client(&url, token).await.err().unwrap_or_else(|| panic!("{token:?} was let in"));
        // The SDK reads a 401 with `WWW-Authenticate: Bearer` as "Auth required".
        assert!(error.contains("401") || error.contains("Auth required"), "{token:?}: {error}");
    }

    // The unlimited token: check, add, exact duplicate, paraphrase, as over stdio.
    let admin = http_client(&url, Some(ADMIN_TOKEN)).await.expect("the admin token is accepted");
    assert_eq!(tool_names(&admin).await, sorted(&BASE_TOOLS));
    let check = call_ok(&admin, "memory_check", json!({"content": DECISION, "namespace": "other"})).await;
    assert_eq!((&check["is_duplicate"], &check["verdict"]), (&json!(false), &json!("unique")), "{check}");
    let (other_id, other_urn) = add_stored(&admin, "other", DECISION).await;
    let exact = call_ok(&admin, "memory_add", json!({"content": DECISION, "namespace": "other"})).await;
    assert_eq!((&exact["stored"], &exact["check"]["reason"]), (&Value::Null, &json!("ExactMatch")), "{exact}");
    assert_eq!(exact["check"]["matched_urn"], json!(other_urn), "{exact}");
    let paraphrase = call_ok(&admin, "memory_add", json!({"content": DECISION_PARAPHRASE, "namespace": "other"})).await;
    assert_eq!(paraphrase["stored"], Value::Null, "{paraphrase}");
    assert_eq!(
        (&paraphrase["check"]["verdict"], &paraphrase["check"]["matched_urn"]),
        (&json!("duplicate"), &json!(other_urn))
    );
    assert_eq!(live_contents(&db, "other"), [DECISION]);

    // A merge in `other` by the admin, one in `agents` by the limited token.
    for text in DOCS {
        add_stored(&admin, "other", text).await;
    }
    let (other_merge, other_run) = merge_one(&admin, "other").await;
    let agents = http_client(&url, Some(AGENTS_TOKEN)).await.expect("the agents token is accepted");
    assert_eq!(tool_names(&agents).await, sorted(&BASE_TOOLS));
    for text in DOCS {
        add_stored(&agents, "agents", text).await;
    }
    let (agents_merge, _) = merge_one(&agents, "agents").await;
    let (agents_id, agents_urn) = add_stored(&agents, "agents", LUNCH).await;
    let got = call_ok(&agents, "memory_get", json!({"id": agents_urn})).await;
    assert_eq!(got["memory"]["id"], agents_id, "{got}");
    // Unverified memories in `other`, which a scan of every namespace would judge.
    add_stored(&admin, "other", UNRELATED).await;
    // Without a namespace, the limited token searches only the namespaces it may use.
    let found = call_ok(&agents, "memory_search", json!({"query": "the billing database"})).await;
    let searched: Vec<&str> =
        found["searched"].as_array().expect("searched").iter().filter_map(|s| s["namespace"].as_str()).collect();
    assert_eq!(searched, ["agents"], "{found}");
    assert!(
        found["results"].as_array().expect("results").iter().all(|r| r["scope"]["namespace"] == "agents"),
        "{found}"
    );

    // Everything the limited token asks of `other` (or of `default`) is forbidden and writes nothing.
    let before = db_state(&db, &["other", "default"]);
    let other_id_text = other_id.to_string();
    let forbidden = [
        ("memory_add", json!({"content": UNRELATED, "namespace": "other"})),
        ("memory_add", json!({"content": "A memory for the default namespace, long enough to embed."})),
        ("memory_check", json!({"content": DECISION, "namespace": "other"})),
        ("memory_search", json!({"query": "database", "namespace": "other"})),
        ("memory_get", json!({"id": other_urn})),
        ("memory_update", json!({"id": other_urn, "content": "A new text for a memory of another namespace."})),
        ("memory_delete", json!({"id": other_urn})),
        ("memory_history", json!({"id": other_urn})),
        ("dedup_scan", json!({"namespace": "other"})),
        ("dedup_run", json!({"namespace": "other"})),
        ("merges_list", json!({"namespace": "other"})),
        ("merge_undo", json!({"merge_id": other_merge})),
        ("merge_undo", json!({"run_id": other_run})),
        (
            "facts_add",
            json!({"content": "Likes tea", "category": "preference", "confidence": 0.9, "namespace": "other"}),
        ),
        ("facts_add", json!({"content": "Likes tea", "category": "preference", "confidence": 0.9})),
        ("facts_context", json!({"namespace": "other"})),
    ];
    for (tool, args) in forbidden {
        let message = call_err(&agents, tool, args.clone(), "forbidden").await;
        assert!(message.contains("agents") && message.contains("may not use namespace"), "{tool} {args}: {message}");
        assert_eq!(db_state(&db, &["other", "default"]), before, "{tool} {args} wrote something");
    }

    // A memory of another namespace, asked for by id, reads as missing: in the same words as
    // an id that does not exist, so the token learns nothing about it.
    let hidden = call_err(&agents, "memory_get", json!({"id": other_id_text}), "not_found").await;
    let missing = call_err(&agents, "memory_get", json!({"id": "999999"}), "not_found").await;
    assert_eq!(hidden.replace(&other_id_text, "N"), missing.replace("999999", "N"));
    assert!(!hidden.contains("other"), "{hidden}");
    for tool in ["memory_update", "memory_delete", "memory_history"] {
        let mut args = json!({"id": other_id_text});
        if tool == "memory_update" {
            args["content"] = json!("A new text for a memory of another namespace.");
        }
        let hidden = call_err(&agents, tool, args, "not_found").await;
        assert_eq!(hidden.replace(&other_id_text, "N"), missing.replace("999999", "N"), "{tool}");
    }

    // Lists show the limited token only its namespaces.
    assert_eq!(merge_ids(&agents, json!({})).await, [agents_merge]);
    assert_eq!(merge_ids(&agents, json!({"include_undone": true})).await, [agents_merge]);
    assert_eq!(merge_ids(&agents, json!({"run_id": other_run})).await, Vec::<i64>::new());
    let all = merge_ids(&admin, json!({})).await;
    assert_eq!(all, [other_merge, agents_merge], "merges are numbered in the order they were made");
    let latest = call_ok(&admin, "merges_list", json!({"limit": 1})).await;
    assert_eq!((&latest["total"], &latest["merges"][0]["id"]), (&json!(2), &json!(agents_merge)), "{latest}");
    assert_eq!(latest["merges"].as_array().map(Vec::len), Some(1), "{latest}");
    let scope_of_passes = |report: &Value| -> Vec<String> {
        report["passes"].as_array().expect("passes").iter().map(|p| p["scope"].as_str().unwrap().to_owned()).collect()
    };
    let everything = call_ok(&admin, "dedup_scan", json!({"all_namespaces": true})).await;
    assert!(scope_of_passes(&everything).contains(&"global/other".to_owned()), "{everything}");
    let limited = call_ok(&agents, "dedup_scan", json!({"all_namespaces": true})).await;
    assert!(scope_of_passes(&limited).iter().all(|s| s == "global/agents"), "{limited}");
    assert_eq!(db_state(&db, &["other", "default"]), before, "scans write nothing");

    // The limited token may undo its own merge.
    let undone = call_ok(&agents, "merge_undo", json!({"merge_id": agents_merge})).await;
    assert_eq!(undone["undone"].as_array().map(Vec::len), Some(1), "{undone}");
    assert_eq!(live_contents(&db, "agents").len(), 3);
    // A change made in another namespace cannot be undone (nor found) by the limited token.
    let edited =
        call_ok(&admin, "memory_update", json!({"id": other_id_text, "content": "Another namespace's edited text."}))
            .await;
    let change = edited["change"].as_i64().expect("a change id");
    let hidden = call_err(&agents, "memory_undo", json!({"change": change}), "not_found").await;
    let missing_change = call_err(&agents, "memory_undo", json!({"change": 999_999}), "not_found").await;
    assert_eq!(hidden.replace(&change.to_string(), "N"), missing_change.replace("999999", "N"));
    assert!(live_contents(&db, "other").contains(&"Another namespace's edited text.".to_owned()));
    close(agents).await;
    close(admin).await;

    let stderr = server.stop_gracefully();
    assert!(stderr.contains("/mcp"), "requests are logged:\n{stderr}");
    for secret in ["PostgreSQL", "billing", "cafeteria", "documentation", "Likes tea"] {
        assert!(!stderr.contains(secret), "{secret:?} leaked into the logs:\n{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_without_tokens_serves_clients_without_a_token_on_loopback_hosts_only() {
    let (_dir, db) = sqlite_db();
    let mut server = HttpServer::start(&["--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let url = server.mcp_url();
    let client = http_client(&url, None).await.expect("no token is needed");
    assert_eq!(tool_names(&client).await, sorted(&BASE_TOOLS));
    let info = client.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().map(|s| s.name.as_str()), Some("memdedup"));
    let (id, urn) = add_stored(&client, "notes", "Short note kept over HTTP").await;
    let got = call_ok(&client, "memory_get", json!({"id": id.to_string()})).await;
    assert_eq!((&got["urn"], &got["memory"]["content"]), (&json!(urn), &json!("Short note kept over HTTP")));
    assert_eq!(live_contents(&db, "notes"), ["Short note kept over HTTP"]);

    // Without tokens only loopback host names are served (no DNS rebinding).
    let http = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    let port = server.base_url.rsplit(':').next().expect("a port").to_owned();
    let mut statuses = Vec::new();
    for host in [format!("localhost:{port}"), format!("attacker.example:{port}")] {
        let response = http
            .post(&url)
            .header("host", &host)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
            .await
            .expect("the server answers");
        statuses.push((host, response.status().as_u16()));
    }
    assert_eq!(statuses[0].1, 200, "{statuses:?}");
    assert!((400..500).contains(&statuses[1].1), "a foreign Host is refused: {statuses:?}");

    // A graceful stop does not wait for the open session to hang up.
    let stderr = server.stop_gracefully();
    assert!(stderr.contains("memdedup: stopped"), "{stderr}");
    drop(client);
}

/// `[server] max_body_bytes` bounds the requests of `/mcp` as it bounds the REST API's:
/// a larger tool call is refused with 413 and stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_refuses_requests_over_max_body_bytes() {
    let (dir, db) = sqlite_db();
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, "[server]\nmax_body_bytes = 4096\n").expect("write memdedup.toml");
    let config = config.display().to_string();
    let server = HttpServer::start(&["--config", &config, "--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let client = http_client(&server.mcp_url(), None).await.expect("initialises");
    add_stored(&client, "notes", "A short note fits in the body limit").await;
    let long = "word ".repeat(2000);
    let outcome = try_call(&client, "memory_add", json!({"content": long, "namespace": "notes"})).await;
    match outcome {
        Err(error) => assert!(error.contains("413"), "{error}"),
        Ok(reply) => panic!("a 10 kB call went through a 4 kB body limit: {reply:?}"),
    }
    assert_eq!(live_contents(&db, "notes"), ["A short note fits in the body limit"]);
}

/// The fact tools of `/mcp` keep the server's fact policy (`[server.facts]`), as the
/// REST routes of the same server do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_fact_tools_follow_the_server_facts_policy() {
    let (dir, db) = sqlite_db();
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, "[server.facts]\nmin_confidence = 0.9\nmax_facts = 2\n").expect("write memdedup.toml");
    let config = config.display().to_string();
    let server = HttpServer::start(&["--config", &config, "--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let client = http_client(&server.mcp_url(), None).await.expect("initialises");
    let add =
        |content: &str, confidence: f64| json!({"content": content, "category": "goal", "confidence": confidence});
    let low = call_ok(&client, "facts_add", add("Wants to learn Haskell", 0.8)).await;
    assert_eq!((&low["outcome"], &low["threshold"]), (&json!("low_confidence"), &json!(0.9)), "{low}");
    let mut ids = Vec::new();
    for (content, confidence) in [("Wants to run a marathon", 0.95), ("Wants to learn Rust", 0.96)] {
        let added = call_ok(&client, "facts_add", add(content, confidence)).await;
        assert_eq!((&added["outcome"], &added["evicted"]), (&json!("added"), &json!([])), "{added}");
        ids.push(added["fact"]["id"].as_str().unwrap().to_owned());
    }
    let third = call_ok(&client, "facts_add", add("Wants to write a book", 0.97)).await;
    assert_eq!(third["outcome"], "added", "{third}");
    assert_eq!(
        third["evicted"].as_array().map(|e| e.iter().map(|f| f["id"].clone()).collect::<Vec<_>>()),
        Some(vec![json!(ids[0])]),
        "the least confident fact makes room: {third}"
    );
    let context = call_ok(&client, "facts_context", json!({})).await;
    assert_eq!(context["facts"], 2, "{context}");
    close(client).await;
}

/// Eight concurrent `memory_add` calls of one decision and its paraphrase, over four
/// sessions, store one memory; every other call names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_concurrent_adds_over_several_sessions_store_one_memory() {
    require_model();
    let (_dir, db) = sqlite_db();
    let server = HttpServer::start(&["--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(std::sync::Arc::new(http_client(&server.mcp_url(), None).await.expect("initialises")));
    }
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let client = std::sync::Arc::clone(&clients[i % clients.len()]);
            let content = if i % 2 == 0 { DECISION } else { DECISION_PARAPHRASE };
            tokio::spawn(async move {
                call_ok(&client, "memory_add", json!({"content": content, "namespace": "decisions"})).await
            })
        })
        .collect();
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.expect("the call's task"));
    }
    let stored: Vec<&Value> = replies.iter().filter(|r| !r["stored"].is_null()).collect();
    assert_eq!(stored.len(), 1, "{replies:#?}");
    let urn = &stored[0]["urn"];
    for reply in replies.iter().filter(|r| r["stored"].is_null()) {
        assert_eq!((&reply["check"]["is_duplicate"], &reply["check"]["matched_urn"]), (&json!(true), urn), "{reply}");
    }
    assert_eq!(live_contents(&db, "decisions").len(), 1);
}

/// Sends one JSON-RPC message to `/mcp` as `token`, in `session`: the status, the session
/// id the server names, and the JSON-RPC reply (from a JSON or an event-stream body).
async fn post_raw(
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    message: Value,
) -> (u16, Option<String>, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&message);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = response.text().await.expect("a body");
    let reply = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .chain(std::iter::once(body.as_str()))
        .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok().filter(|v| v.get("jsonrpc").is_some()))
        .unwrap_or(Value::Null);
    (status, session, reply)
}

/// The token of each request decides what it may do, not the token that opened the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_each_request_is_limited_by_its_own_token_not_the_sessions() {
    let (dir, db) = sqlite_db();
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, TOKENS).expect("write memdedup.toml");
    let config = config.display().to_string();
    let server = HttpServer::start(&["--config", &config, "--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let url = server.mcp_url();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    let (status, session, reply) = post_raw(&url, Some(ADMIN_TOKEN), None, initialize).await;
    assert_eq!(status, 200, "{reply}");
    let session = session.expect("the server opens a session");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = post_raw(&url, Some(ADMIN_TOKEN), Some(&session), initialized).await;
    assert!((200..300).contains(&status), "{status}");

    let add = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "memory_add",
            "arguments": {"content": "Short note for the other namespace", "namespace": "other"}}})
    };
    let (status, _, reply) = post_raw(&url, Some(AGENTS_TOKEN), Some(&session), add(2)).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert_eq!(reply["result"]["structuredContent"]["error"]["kind"], "forbidden", "{reply}");
    let (status, _, _) = post_raw(&url, None, Some(&session), add(3)).await;
    assert_eq!(status, 401, "a session id is no credential");
    assert!(live_contents(&db, "other").is_empty(), "nothing was stored in other");
    let (status, _, reply) = post_raw(&url, Some(ADMIN_TOKEN), Some(&session), add(4)).await;
    assert_eq!((status, &reply["result"]["structuredContent"]["stored"]), (200, &json!(1)), "{reply}");
    assert_eq!(live_contents(&db, "other"), ["Short note for the other namespace"]);

    // Neither the event stream nor ending the session is open to a request without a token.
    let http = reqwest::Client::new();
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = http
            .request(method.clone(), &url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .send()
            .await
            .expect("the server answers");
        assert_eq!(response.status().as_u16(), 401, "{method} /mcp without a token");
    }
    let (status, _, reply) = post_raw(&url, Some(ADMIN_TOKEN), Some(&session), add(5)).await;
    assert_eq!((status, &reply["result"]["structuredContent"]["check"]["reason"]), (200, &json!("ExactMatch")));
}

/// Defect 8: `/mcp` answers HTTP-level errors as the REST routes do, with the JSON error
/// body: malformed JSON 400 (not 415), a body over `max_body_bytes` 413, a missing
/// content type 415; a 401 names the scheme (`WWW-Authenticate: Bearer`); ending a
/// session answers 204.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_8_mcp_http_errors_are_json_and_ending_a_session_is_204() {
    let (dir, db) = sqlite_db();
    let config = dir.path().join("memdedup.toml");
    std::fs::write(
        &config,
        format!("[server]\nmax_body_bytes = 4096\n\n[[server.tokens]]\ntoken = \"{ADMIN_TOKEN}\"\n"),
    )
    .expect("write memdedup.toml");
    let config = config.display().to_string();
    let server = HttpServer::start(&["--config", &config, "--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let url = server.mcp_url();
    let http = reqwest::Client::new();
    let post = |body: &'static str, content_type: Option<&'static str>| {
        let mut request =
            http.post(&url).bearer_auth(ADMIN_TOKEN).header("accept", "application/json, text/event-stream").body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        request
    };
    let json_error = |response: reqwest::Response| async move {
        let status = response.status().as_u16();
        let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(content_type.as_deref(), Some("application/json"), "{status} {body}");
        (status, body)
    };

    let (status, body) =
        json_error(post("{\"jsonrpc\": \"2.0\", \"id\": 1,", Some("application/json")).send().await.unwrap()).await;
    assert_eq!((status, &body["code"]), (400, &json!("invalid_request")), "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.starts_with("invalid JSON body")), "{body}");

    let big: &'static str = Box::leak(format!("{{\"pad\": \"{}\"}}", "x".repeat(8_000)).into_boxed_str());
    let (status, body) = json_error(post(big, Some("application/json")).send().await.unwrap()).await;
    assert_eq!((status, &body["code"]), (413, &json!("payload_too_large")), "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("4096")), "{body}");

    let (status, body) = json_error(post("{}", None).send().await.unwrap()).await;
    assert_eq!((status, &body["code"]), (415, &json!("unsupported_media_type")), "{body}");

    let response = http.post(&url).header("content-type", "application/json").body("{}").send().await.unwrap();
    assert_eq!(
        response.headers().get("www-authenticate").and_then(|v| v.to_str().ok()),
        Some("Bearer realm=\"memdedup\"")
    );
    let (status, body) = json_error(response).await;
    assert_eq!((status, &body["code"]), (401, &json!("unauthorized")), "{body}");

    // A session, then its end.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (status, session, _) = post_raw(&url, Some(ADMIN_TOKEN), None, initialize).await;
    assert_eq!(status, 200);
    let session = session.expect("a session id");
    let ended = http
        .delete(&url)
        .bearer_auth(ADMIN_TOKEN)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status().as_u16(), 204);
}
