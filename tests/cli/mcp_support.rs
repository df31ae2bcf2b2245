//! Driving the MCP server of the built `memdedup` binary with the official Rust client
//! (`rmcp`): over stdio (`memdedup mcp`) and over streamable HTTP (`/mcp` of `serve`).

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::serve::Server;
use crate::support::{CLEARED_ENV_VARS, run_json};

/// A connected MCP client.
pub type McpClient = RunningService<RoleClient, ()>;

/// How long one MCP exchange may take (the first one that embeds loads the model).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// The tools the server offers when no language model is configured.
pub const BASE_TOOLS: [&str; 17] = [
    "memory_check",
    "memory_add",
    "memory_search",
    "memory_get",
    "memory_update",
    "memory_delete",
    "memory_history",
    "memory_undo",
    "dedup_scan",
    "dedup_run",
    "merges_list",
    "merge_undo",
    "review_list",
    "review_decide",
    "review_run",
    "facts_add",
    "facts_context",
];

/// A decision and a paraphrase of it that the local model scores above the `decisions`
/// threshold (as in memory.rs), and an unrelated decision. All longer than the semantic
/// check's minimum length.
pub const DECISION: &str = "We decided to use PostgreSQL as the primary database for the billing service.";
pub const DECISION_PARAPHRASE: &str = "We decided to use PostgreSQL as the main database for the billing service.";
pub const UNRELATED: &str = "Run the integration tests against a disposable database before every release.";

/// Two paraphrases of one rule, at cosine 0.85 (under the default threshold, so both are
/// stored) that the learned judge merges (P(duplicate) 0.73), and a memory far from them.
pub const DOCS: [&str; 2] =
    ["Update the docs after every code change.", "Whenever code is changed, the docs must be brought up to date."];
pub const LUNCH: &str = "The office cafeteria serves lunch between noon and two on weekdays.";

/// `memdedup [ARGS…] --db DB mcp` as a tokio command with a clean environment plus `envs`.
/// The pair judge is cosine (MEMDEDUP_DEDUP_JUDGE, which `envs` may override): these tests
/// are about the protocol and the seed's verdicts; `mcp_stdio_default_judge_is_the_learned_one`
/// covers the default.
pub fn mcp_command(db: &str, args: &[&str], envs: &[(&str, &str)]) -> tokio::process::Command {
    tokio::process::Command::new(assert_cmd::cargo::cargo_bin("memdedup")).configure(|cmd| {
        for name in CLEARED_ENV_VARS {
            cmd.env_remove(name);
        }
        cmd.env("MEMDEDUP_DEDUP_JUDGE", "cosine");
        cmd.envs(envs.iter().copied()).args(args).args(["--db", db, "mcp"]).current_dir(std::env::temp_dir());
    })
}

/// A client of `memdedup --db DB mcp`, initialised.
pub async fn stdio_client(db: &str) -> McpClient {
    stdio_client_with(db, &[]).await
}

/// A client of `memdedup --db DB mcp` run with `envs`, initialised.
pub async fn stdio_client_with(db: &str, envs: &[(&str, &str)]) -> McpClient {
    let transport = TokioChildProcess::new(mcp_command(db, &[], envs)).expect("memdedup mcp starts");
    within("initialize", ().serve(transport)).await.expect("the stdio server initialises")
}

/// A client of the streamable HTTP endpoint `url`, sending `token` as a bearer token.
/// Errors as the client reports them (a refused token fails the initialisation).
pub async fn http_client(url: &str, token: Option<&str>) -> Result<McpClient, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(token) = token {
        config = config.auth_header(token);
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    within("initialize", ().serve(transport)).await.map_err(|e| e.to_string())
}

/// `future`, or a panic naming `what` after [`CALL_TIMEOUT`].
pub async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(CALL_TIMEOUT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {CALL_TIMEOUT:?}"))
}

/// Every tool the server lists.
pub async fn tools(client: &McpClient) -> Vec<Tool> {
    within("tools/list", client.list_all_tools()).await.expect("tools/list answers")
}

/// The names of the listed tools, sorted (the order of the list is not part of MCP).
pub async fn tool_names(client: &McpClient) -> Vec<String> {
    sorted(&tools(client).await.iter().map(|tool| tool.name.as_ref()).collect::<Vec<_>>())
}

/// `names`, sorted.
pub fn sorted(names: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = names.iter().map(|&n| n.to_owned()).collect();
    names.sort();
    names
}

/// A tool call's result: whether it is an error, its text blocks joined, and its
/// structured content (`Null` when absent).
#[derive(Debug, Clone)]
pub struct Reply {
    pub is_error: bool,
    pub text: String,
    pub structured: Value,
}

impl Reply {
    /// The `kind` of a memdedup tool error (`invalid_argument`, `forbidden`, …).
    pub fn kind(&self) -> Option<&str> {
        self.structured["error"]["kind"].as_str()
    }
}

/// Calls `tool` with `args` (a JSON object); an error when the call itself fails (a
/// JSON-RPC error rather than a tool result).
pub async fn try_call(client: &McpClient, tool: &str, args: Value) -> Result<Reply, String> {
    let arguments = args.as_object().unwrap_or_else(|| panic!("arguments must be an object: {args}")).clone();
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let result = within(tool, client.call_tool(params)).await.map_err(|e| e.to_string())?;
    let text: Vec<String> = result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect();
    assert_eq!(text.len(), result.content.len(), "{tool}: every content block is text: {result:?}");
    Ok(Reply {
        is_error: result.is_error.unwrap_or(false),
        text: text.join("\n"),
        structured: result.structured_content.unwrap_or(Value::Null),
    })
}

/// Calls `tool` with `args` (a JSON object), expecting a tool result (success or error).
pub async fn call(client: &McpClient, tool: &str, args: Value) -> Reply {
    try_call(client, tool, args.clone()).await.unwrap_or_else(|e| panic!("{tool} {args}: the call itself failed: {e}"))
}

/// Calls `tool`, expecting success with one text block and structured content; returns
/// the structured content.
pub async fn call_ok(client: &McpClient, tool: &str, args: Value) -> Value {
    let reply = call(client, tool, args.clone()).await;
    assert!(!reply.is_error, "{tool} {args} failed: {reply:?}");
    assert!(!reply.text.is_empty() && !reply.text.starts_with("error:"), "{tool}: {reply:?}");
    assert!(reply.structured.is_object(), "{tool} returns structured content: {reply:?}");
    reply.structured
}

/// Calls `tool`, expecting a memdedup tool error of `kind`: `isError`, the text
/// `error: MESSAGE`, and `{"error": {"kind", "message"}}` saying the same. Returns the message.
pub async fn call_err(client: &McpClient, tool: &str, args: Value, kind: &str) -> String {
    let reply = call(client, tool, args.clone()).await;
    assert!(reply.is_error, "{tool} {args} should fail: {reply:?}");
    assert_eq!(reply.kind(), Some(kind), "{tool} {args}: {reply:?}");
    let message = reply.structured["error"]["message"].as_str().expect("the error has a message").to_owned();
    assert_eq!(reply.text, format!("error: {message}"), "{tool} {args}");
    message
}

/// Asserts `text` contains every one of `needles`.
#[track_caller]
pub fn assert_mentions(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} is not in: {text}");
    }
}

/// Everything a tool could write, as the CLI reads it: every memory (merged ones too),
/// the whole merge ledger, and the facts of `fact_namespaces`.
pub fn db_state(db: &str, fact_namespaces: &[&str]) -> Value {
    let facts: Vec<Value> = fact_namespaces.iter().map(|ns| run_json(db, &["facts", "list", "-n", ns])).collect();
    json!({
        "memories": run_json(db, &["list", "--all", "--limit", "0"]),
        "merges": run_json(db, &["merges", "--all"]),
        "facts": facts,
    })
}

/// The live memories of `namespace`, by content, sorted.
pub fn live_contents(db: &str, namespace: &str) -> Vec<String> {
    let list = run_json(db, &["list", "-n", namespace, "--limit", "0"]);
    let mut contents: Vec<String> = list
        .as_array()
        .expect("list prints an array")
        .iter()
        .map(|m| m["content"].as_str().expect("a memory has content").to_owned())
        .collect();
    contents.sort();
    contents
}

/// Adds `content` to `namespace`, expecting it stored; returns (id, URN).
pub async fn add_stored(client: &McpClient, namespace: &str, content: &str) -> (i64, String) {
    let added = call_ok(client, "memory_add", json!({"content": content, "namespace": namespace})).await;
    let id = added["stored"].as_i64().unwrap_or_else(|| panic!("{content:?} was not stored: {added}"));
    let urn = added["urn"].as_str().expect("a stored memory has a URN").to_owned();
    assert_eq!(urn, format!("memdedup://global/{namespace}/{id}"), "{added}");
    (id, urn)
}

/// Closes the session (and, over stdio, waits for the server to exit).
pub async fn close(client: McpClient) {
    within("closing the session", client.cancel()).await.expect("the session closes");
}

/// A running `memdedup serve` for the MCP tests; stopped with SIGTERM when dropped.
pub struct HttpServer {
    server: Option<Server>,
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
}

impl HttpServer {
    /// Runs `memdedup ARGS…` (with `serve --addr 127.0.0.1:0`) with `envs` and waits for
    /// the listening line. The pair judge is cosine unless `envs` sets
    /// MEMDEDUP_DEDUP_JUDGE, as for [`mcp_command`].
    pub fn start(args: &[&str], envs: &[(&str, &str)]) -> HttpServer {
        let envs: Vec<(&str, &str)> =
            [("MEMDEDUP_DEDUP_JUDGE", "cosine")].into_iter().chain(envs.iter().copied()).collect();
        let server = Server::start(args, &envs);
        HttpServer { base_url: server.url(""), server: Some(server) }
    }

    /// The MCP endpoint.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base_url)
    }

    /// Stops the server with SIGTERM, expecting it to exit by itself, successfully;
    /// returns all it wrote on stderr.
    pub fn stop_gracefully(&mut self) -> String {
        let server = self.server.take().expect("the server was not stopped");
        let (status, stderr) = server.stop("TERM");
        assert!(status.success(), "the server did not stop gracefully ({status}):\n{stderr}");
        stderr
    }
}

/// Starts `command` (a `memdedup mcp`) as an MCP transport, its stderr read to the end by a
/// task whose result is all of it.
pub fn spawn_collecting_stderr(
    command: tokio::process::Command,
) -> (TokioChildProcess, tokio::task::JoinHandle<String>) {
    use tokio::io::AsyncReadExt;
    let (transport, stderr) =
        TokioChildProcess::builder(command).stderr(std::process::Stdio::piped()).spawn().expect("memdedup mcp starts");
    let mut stderr = stderr.expect("stderr is piped");
    let collected = tokio::spawn(async move {
        let mut text = String::new();
        stderr.read_to_string(&mut text).await.expect("stderr is UTF-8");
        text
    });
    (transport, collected)
}
