//! MCP `memory_check` round trips over stdio and over streamable HTTP, against the REST
//! `POST /v1/memory/check` (the same checker chain) and `POST /v1/nodes/check-similar` in
//! the same run: one client, sequential calls, p50 and p99 latency of the whole round trip
//! (client encode, transport, server check with one embedding by the local model, reply
//! decode).
//!
//! Run with `cargo xtask bench` (or `cargo bench -p memdedup-cli --bench mcp`). The
//! release `memdedup` binary serves all three: `memdedup mcp` for stdio and one
//! `memdedup serve` (with a bearer token) for `/mcp` and the REST route, over one SQLite
//! file holding [`STORED`] memories and as many nodes. MEMDEDUP_BENCH_CALLS sets the calls
//! per transport (default 300).

use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

/// Memories (and nodes) stored before timing.
const STORED: usize = 1_000;
const WARM_UP: usize = 20;
const TOKEN: &str = "bench-token-0123456789";

const SUBJECTS: [&str; 12] = [
    "the billing service",
    "the search index",
    "the nightly backup",
    "the deploy pipeline",
    "the login page",
    "the payment webhook",
    "the cache layer",
    "the mobile app",
    "the data warehouse",
    "the API gateway",
    "the audit log",
    "the feature flags",
];
const ACTIONS: [&str; 10] = [
    "must be reviewed by two people before release",
    "should retry three times with exponential backoff",
    "needs its secrets rotated every month",
    "is owned by the platform team since the reorganisation",
    "breaks when the clock skews by more than a minute",
    "gets load-tested before every major sale",
    "logs only hashed identifiers, never raw emails",
    "was moved to the new region last quarter",
    "must stay behind the VPN for compliance reasons",
    "runs its migrations in a separate deploy step",
];

/// A distinct sentence of 60+ characters (so the semantic check runs).
fn sentence(i: usize) -> String {
    format!(
        "Note {i}: {} {} (checked in review {}).",
        SUBJECTS[i % SUBJECTS.len()],
        ACTIONS[(i / SUBJECTS.len()) % ACTIONS.len()],
        i * 7 + 3
    )
}

fn main() {
    let calls: usize = std::env::var("MEMDEDUP_BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(run(calls));
}

async fn run(calls: usize) {
    let binary = env!("CARGO_BIN_EXE_memdedup");
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("bench.db").display().to_string();
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, format!("[server]\naddr = \"127.0.0.1:0\"\n\n[[server.tokens]]\ntoken = \"{TOKEN}\"\n"))
        .expect("config written");
    let config = config.display().to_string();

    let mut server = tokio::process::Command::new(binary)
        .args(["--config", &config, "--db", &db, "serve"])
        .env_remove("MEMDEDUP_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("memdedup serve starts");
    let mut lines = tokio::io::BufReader::new(server.stderr.take().expect("stderr")).lines();
    let base = loop {
        let line = lines.next_line().await.expect("stderr readable").expect("serve printed its address");
        if let Some(rest) = line.strip_prefix("memdedup: listening on ") {
            break rest.split_whitespace().next().expect("address").to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let http = reqwest::Client::new();
    let mcp_http = connect_http(&base).await;
    let started = Instant::now();
    for i in 0..STORED {
        let text = sentence(i);
        call(&mcp_http, "memory_add", json!({"content": text, "namespace": "bench"})).await;
        let node = json!({"type": "concept", "subtype": "custom:lesson", "content_title": format!("note {i}"),
                          "content_body": text, "namespace": "bench"});
        let status = http.post(format!("{base}/v1/nodes")).bearer_auth(TOKEN).json(&node).send().await.expect("POST");
        assert!(status.status().is_success(), "POST /v1/nodes: {}", status.status());
    }
    eprintln!("stored {STORED} memories and {STORED} nodes in {:.1} s", started.elapsed().as_secs_f64());

    let transport = TokioChildProcess::new(tokio::process::Command::new(binary).configure(|c| {
        c.args(["--db", &db, "mcp"]).env_remove("MEMDEDUP_LOG");
    }))
    .expect("memdedup mcp starts");
    let mcp_stdio = ().serve(transport).await.expect("stdio session");

    let query = |i: usize| format!("Reminder {i}: {} {}.", SUBJECTS[(i + 5) % 12], ACTIONS[(i + 3) % 10]);
    let rest = |i: usize| {
        let http = http.clone();
        let url = format!("{base}/v1/nodes/check-similar");
        async move {
            let body = json!({"title": format!("q {i}"), "content": query(i), "subtype": "custom:lesson",
                              "namespace": "bench"});
            let reply = http.post(url).bearer_auth(TOKEN).json(&body).send().await.expect("check-similar");
            assert!(reply.status().is_success(), "check-similar: {}", reply.status());
            reply.json::<Value>().await.expect("JSON reply");
        }
    };
    let memory_check = |i: usize| {
        let http = http.clone();
        let url = format!("{base}/v1/memory/check");
        async move {
            let body = json!({"content": query(i), "namespace": "bench"});
            let reply = http.post(url).bearer_auth(TOKEN).json(&body).send().await.expect("memory/check");
            assert!(reply.status().is_success(), "memory/check: {}", reply.status());
            let reply = reply.json::<Value>().await.expect("JSON reply");
            assert!(reply["degraded"].as_array().is_some_and(Vec::is_empty), "a check failed open: {reply}");
        }
    };
    let mut rows = Vec::new();
    rows.push(("REST POST /v1/nodes/check-similar", time(calls, rest).await));
    rows.push(("REST POST /v1/memory/check", time(calls, memory_check).await));
    rows.push((
        "MCP memory_check, streamable HTTP",
        time(calls, |i| {
            let client = &mcp_http;
            async move {
                call(client, "memory_check", json!({"content": query(i), "namespace": "bench"})).await;
            }
        })
        .await,
    ));
    rows.push((
        "MCP memory_check, stdio",
        time(calls, |i| {
            let client = &mcp_stdio;
            async move {
                call(client, "memory_check", json!({"content": query(i), "namespace": "bench"})).await;
            }
        })
        .await,
    ));

    println!("memory_check round trip, one client, {calls} sequential calls after {WARM_UP} warm-up, {STORED} stored");
    println!("{:<36}  {:>9}  {:>9}  {:>9}", "transport", "p50 ms", "p99 ms", "mean ms");
    for (name, mut samples) in rows {
        samples.sort();
        let mean = samples.iter().sum::<Duration>().as_secs_f64() / samples.len() as f64;
        println!(
            "{name:<36}  {:>9.2}  {:>9.2}  {:>9.2}",
            ms(percentile(&samples, 0.50)),
            ms(percentile(&samples, 0.99)),
            mean * 1e3
        );
    }
    let _ = mcp_stdio.cancel().await;
    let _ = mcp_http.cancel().await;
    let _ = server.kill().await;
}

async fn connect_http(base: &str) -> RunningService<RoleClient, ()> {
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{base}/mcp")).auth_header(TOKEN);
    ().serve(StreamableHttpClientTransport::from_config(config)).await.expect("HTTP session")
}

/// Calls `tool` and panics on a tool error (a benchmark of failures would mislead).
async fn call(client: &RunningService<RoleClient, ()>, tool: &str, arguments: Value) -> Value {
    let arguments = arguments.as_object().cloned().expect("arguments are an object");
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert_ne!(result.is_error, Some(true), "{tool} failed: {:?}", result.content);
    result.structured_content.unwrap_or(Value::Null)
}

/// `calls` timed calls of `one(i)` after [`WARM_UP`] untimed ones.
async fn time<F, Fut>(calls: usize, one: F) -> Vec<Duration>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for i in 0..WARM_UP {
        one(1_000_000 + i).await;
    }
    let mut samples = Vec::with_capacity(calls);
    for i in 0..calls {
        let started = Instant::now();
        one(i).await;
        samples.push(started.elapsed());
    }
    samples
}

/// The `q`-quantile of sorted samples (nearest rank).
fn percentile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
