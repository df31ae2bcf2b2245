//! `memdedup serve` end to end: real server processes with the local model, driven over
//! HTTP by concurrent clients, Python's `requests`, and the curl examples of docs/HTTP.md.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{PgDatabase, memdedup, require_model, sqlite_db, text};

/// What `memdedup serve` prints on stderr once it accepts connections.
const LISTENING: &str = "memdedup: listening on http://";
/// What it prints after a graceful shutdown.
const STOPPED: &str = "memdedup: stopped";
/// The variable adding an unrestricted bearer token.
const TOKEN_ENV_VAR: &str = "MEMDEDUP_API_TOKEN";
/// The base URL the examples of docs/HTTP.md use.
const DOCS_BASE_URL: &str = "http://127.0.0.1:3100";
/// Variables that must not leak into a server from the shell running the tests (the
/// model location variables are kept on purpose, as in `support::memdedup`).
const SERVER_CLEARED_ENV_VARS: [&str; 6] = [
    "DATABASE_URL",
    "MEMDEDUP_CONFIG",
    "MEMDEDUP_LOG",
    TOKEN_ENV_VAR,
    "AGENTIC_CONTEXT_DEDUP_THRESHOLD",
    "MEMDEDUP_DEDUP_JUDGE",
];
/// How long a server may take to load the model and bind.
mod docs;
mod embedder;
mod load;

use load::lesson;

const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a server may take to stop after SIGTERM or SIGINT.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A decision and a paraphrase of it (cosine 0.968 with the local model), as in memory.rs.
const DECISION: &str = "We decided to use PostgreSQL as the primary database for the billing service.";
const DECISION_PARAPHRASE: &str = "We decided to use PostgreSQL as the main database for the billing service.";

/// A running `memdedup serve` process; stopped with SIGTERM when dropped.
pub(crate) struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT` (also for a server listening on 0.0.0.0).
    base_url: String,
    stderr: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

impl Server {
    /// Runs `memdedup ARGS…` (which must include `serve --addr IP:0` or a config with
    /// port 0) with `envs` set, and waits for the listening line.
    pub(crate) fn start(args: &[&str], envs: &[(&str, &str)]) -> Server {
        let binary = assert_cmd::cargo::cargo_bin("memdedup");
        let mut cmd = Command::new(&binary);
        for name in SERVER_CLEARED_ENV_VARS.iter().chain(&crate::support::CLEARED_ENV_VARS) {
            cmd.env_remove(name);
        }
        cmd.envs(envs.iter().copied())
            .args(args)
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let pipe = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (lines, received) = mpsc::channel::<String>();
        let sink = Arc::clone(&stderr);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push_str(&format!("{line}\n"));
                // The receiver is gone once the port is known; keep collecting stderr.
                let _ = lines.send(line);
            }
        });
        let mut server = Server { child: Some(child), base_url: String::new(), stderr, reader: Some(reader) };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match received.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(LISTENING) {
                        let addr = rest.split_whitespace().next().unwrap_or_default();
                        let addr = addr.replace("0.0.0.0:", "127.0.0.1:");
                        server.base_url = format!("http://{addr}");
                        return server;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let (status, stderr) = server.wait_exit();
                    panic!("`memdedup {}` exited ({status}) before listening:\n{stderr}", args.join(" "));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!(
                        "`memdedup {}` printed no listening line within {STARTUP_TIMEOUT:?}:\n{}",
                        args.join(" "),
                        server.stderr_so_far()
                    );
                }
            }
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server was not stopped").id()
    }

    /// Sends `signal` (`TERM`, `INT`) with kill(1).
    fn signal(&self, signal: &str) {
        let status =
            Command::new("kill").args([format!("-{signal}"), self.pid().to_string()]).status().expect("kill(1) runs");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// Sends `signal` and waits for the process to exit: its status and all its stderr.
    pub(crate) fn stop(mut self, signal: &str) -> (ExitStatus, String) {
        self.signal(signal);
        self.wait_exit()
    }

    /// Waits (at most [`STOP_TIMEOUT`], then kills) for the process to exit.
    fn wait_exit(&mut self) -> (ExitStatus, String) {
        let mut child = self.child.take().expect("the server was not stopped");
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("the server's status is readable") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server did not exit within {STOP_TIMEOUT:?}:\n{}", self.stderr_so_far());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        (status, self.stderr_so_far())
    }

    fn stderr_so_far(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if let Ok(None) = child.try_wait() {
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let deadline = Instant::now() + STOP_TIMEOUT;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

fn client() -> reqwest::Client {
    // The server closes a keep-alive connection that sends no request headers within
    // `header_timeout_secs` (10 s); a client that reused one just then would fail with a
    // transport error, so the pool lets idle connections go well before that.
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .pool_idle_timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client")
}

/// Sends `request` and returns the status and the JSON body (`Null` when not JSON).
async fn call(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let body = response.text().await.expect("a response body");
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// Asserts the server at `server` loaded the local model.
async fn assert_embedder(http: &reqwest::Client, server: &Server) {
    let (status, health) = call(http.get(server.url("/healthz"))).await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["embedder"], true, "the server runs without the model (cargo xtask fetch-model): {health}");
}

/// The body of seed 001's `POST /v1/nodes` for a lesson.
fn lesson_body(title: &str, body: &str, namespace: &str) -> Value {
    json!({"type": "concept", "subtype": "custom:lesson", "content_title": title, "content_body": body,
           "namespace": namespace})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_stops_gracefully_on_sigterm() {
    const REQUESTS: usize = 48;
    require_model();
    let (_dir, db) = sqlite_db();
    let server = Server::start(&["--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let http = client();
    assert_embedder(&http, &server).await;

    let (answered, mut first_answer) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut tasks = Vec::new();
    for n in 0..REQUESTS {
        let (http, url, answered) = (http.clone(), server.url("/v1/nodes"), answered.clone());
        tasks.push(tokio::spawn(async move {
            let (title, body) = lesson(n);
            let result = http.post(url).json(&lesson_body(&title, &body, "default")).send().await;
            let result = match result {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let body: Value = response.json().await.unwrap_or(Value::Null);
                    Ok((status, body))
                }
                Err(e) => Err(e),
            };
            let _ = answered.send(());
            (Instant::now(), result)
        }));
    }
    drop(answered);
    // Once one request is answered the others are in flight: stop now.
    first_answer.recv().await.expect("a request is answered");
    let signalled = Instant::now();
    let pid = server.pid();
    let stopping = std::thread::spawn(move || server.stop("TERM"));

    let mut answered_after_signal = 0;
    let mut created = Vec::new();
    let mut dropped = Vec::new();
    let mut not_accepted = 0;
    for task in tasks {
        let (at, result) = task.await.expect("a client task does not panic");
        match result {
            Ok((status, body)) => {
                assert!(matches!(status, 200 | 201), "a request the server accepted got {status}: {body}");
                if at > signalled {
                    answered_after_signal += 1;
                }
                if status == 201 {
                    created.push(body["id"].as_str().expect("a created node has an id").to_owned());
                }
            }
            // A request that never got a connection was not accepted: it may fail.
            Err(e) if e.is_connect() => not_accepted += 1,
            Err(e) => dropped.push(format!("{e:?}")),
        }
    }
    let (status, stderr) = stopping.join().expect("the server stops");
    let stop_took = signalled.elapsed();
    assert!(status.success(), "memdedup serve (pid {pid}) exited with {status} on SIGTERM:\n{stderr}");
    assert!(stderr.trim_end().ends_with(STOPPED), "{stderr}");
    assert!(answered_after_signal > 0, "no request was still in flight when SIGTERM was sent");
    assert!(dropped.is_empty(), "requests in flight at SIGTERM were dropped:\n{}", dropped.join("\n"));
    println!(
        "SIGTERM with {REQUESTS} requests sent: {answered_after_signal} answered after the signal, \
         {not_accepted} refused a connection, the server stopped {:.2} s after it",
        stop_took.as_secs_f64()
    );
    assert!(!created.is_empty());

    let listed = memdedup().args(["--db", &db, "list", "--limit", "0", "--json"]).assert().success();
    let listed = crate::support::json(&listed.get_output().stdout);
    let stored: Vec<String> = listed
        .as_array()
        .expect("list prints an array")
        .iter()
        .map(|m| format!("n_{}", m["id"].as_i64().expect("a memory has an id")))
        .collect();
    for id in &created {
        assert!(stored.contains(id), "{id} was answered 201 but is not in the database: {stored:?}");
    }
    assert_eq!(stored.len(), created.len(), "nothing else was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_non_loopback_without_token() {
    let (_dir, db) = sqlite_db();
    let refused = memdedup()
        .env_remove(TOKEN_ENV_VAR)
        .args(["--db", &db, "serve", "--addr", "0.0.0.0:0"])
        .timeout(Duration::from_secs(60))
        .assert()
        .failure();
    let stderr = text(&refused.get_output().stderr);
    assert!(stderr.contains("non-loopback 0.0.0.0:0 without a token"), "{stderr}");
    assert!(stderr.contains(TOKEN_ENV_VAR) && stderr.contains("server.tokens"), "{stderr}");
    assert!(!stderr.contains(LISTENING), "{stderr}");
    assert!(!Path::new(&db).exists(), "nothing was opened");

    let short = memdedup()
        .env(TOKEN_ENV_VAR, "short")
        .args(["--db", &db, "serve", "--addr", "0.0.0.0:0"])
        .timeout(Duration::from_secs(60))
        .assert()
        .failure();
    let stderr = text(&short.get_output().stderr);
    assert!(stderr.contains("at least 8 characters"), "{stderr}");

    const TOKEN: &str = "an-api-token-for-tests";
    let server = Server::start(&["--db", &db, "serve", "--addr", "0.0.0.0:0"], &[(TOKEN_ENV_VAR, TOKEN)]);
    let http = client();
    let (status, _) = call(http.get(server.url("/healthz"))).await;
    assert_eq!(status, 200, "/healthz needs no token");
    let node = lesson_body("Never trade weekends", "Low volume weekends increase slippage risk", "default");
    for (what, request) in [
        ("no token", http.get(server.url("/v1/nodes"))),
        ("a wrong token", http.get(server.url("/v1/nodes")).bearer_auth("an-api-token-for-test")),
        ("no token", http.post(server.url("/v1/nodes")).json(&node)),
        ("no token", http.get(server.url("/metrics"))),
        ("a basic auth header", http.get(server.url("/v1/nodes")).basic_auth(TOKEN, Some(TOKEN))),
    ] {
        let (status, body) = call(request).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert_eq!(body["code"], "unauthorized", "{what}: {body}");
    }
    let (status, list) = call(http.get(server.url("/v1/nodes")).bearer_auth(TOKEN)).await;
    assert_eq!((status, list["data"].clone()), (200, json!([])), "the unauthorised POST stored nothing: {list}");
    let (status, body) = call(http.post(server.url("/v1/nodes")).bearer_auth(TOKEN).json(&node)).await;
    assert_eq!(status, 201, "with the token: {body}");
    let (status, stderr) = server.stop("TERM");
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains(TOKEN), "the token is never logged: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_server_table_from_config() {
    require_model();
    let (dir, db) = sqlite_db();
    let config = dir.path().join("memdedup.toml");
    std::fs::write(
        &config,
        r#"
[server]
addr = "127.0.0.1:0"
max_text_bytes = 2000

[server.nodes]
duplicate_threshold = 0.99
connect_threshold = 0.60
dedup_subtypes = ["lesson"]

[[server.tokens]]
token = "agents-token-0123"
namespaces = ["agents"]

[[server.tokens]]
token = "admin-token-4567"
"#,
    )
    .expect("write memdedup.toml");
    let config_arg = config.display().to_string();
    // No --addr: the port comes from the file.
    let server = Server::start(&["--config", &config_arg, "--db", &db, "serve"], &[]);
    assert!(server.base_url.starts_with("http://127.0.0.1:"), "{}", server.base_url);
    let http = client();
    let agents = "agents-token-0123";
    let admin = "admin-token-4567";
    let nodes = server.url("/v1/nodes");

    let (status, _) = call(http.get(&nodes)).await;
    assert_eq!(status, 401, "tokens are configured");
    let (status, health) = call(http.get(server.url("/healthz")).bearer_auth(agents)).await;
    assert_eq!((status, &health["embedder"]), (200, &json!(true)), "{health}");

    // Namespaces of the limited token.
    let (status, first) =
        call(http.post(&nodes).bearer_auth(agents).json(&lesson_body("Database choice", DECISION, "agents"))).await;
    assert_eq!(status, 201, "{first}");
    let first_id = first["id"].as_str().expect("an id").to_owned();
    let (status, body) =
        call(http.post(&nodes).bearer_auth(agents).json(&lesson_body("Database choice", DECISION, "other"))).await;
    assert_eq!((status, &body["code"]), (403, &json!("forbidden")), "{body}");
    let (status, body) = call(http.get(&nodes).bearer_auth(agents)).await;
    assert_eq!(status, 403, "a limited token must name its namespace: {body}");
    let (status, body) = call(http.get(format!("{nodes}?namespace=agents")).bearer_auth(agents)).await;
    assert_eq!((status, body["data"].as_array().map(Vec::len)), (200, Some(1)), "{body}");
    let (status, body) =
        call(http.post(&nodes).bearer_auth(admin).json(&lesson_body("Database choice", DECISION, "other"))).await;
    assert_eq!(status, 201, "the unrestricted token may use any namespace: {body}");

    // Thresholds: the paraphrase (0.968) is a duplicate by default, a connect match here.
    let (status, second) = call(http.post(&nodes).bearer_auth(agents).json(&lesson_body(
        "Database choice",
        DECISION_PARAPHRASE,
        "agents",
    )))
    .await;
    assert_eq!(status, 201, "duplicate_threshold 0.99 lets the paraphrase in: {second}");
    assert_eq!(second["dedup"]["recommendation"], "similar_found", "{second}");
    assert_eq!(second["dedup"]["matches"][0]["action"], "connect", "{second}");
    assert_eq!(second["dedup"]["linked"], json!([first_id]), "{second}");
    let unrelated = "Run the integration tests against a disposable database before every release.";
    let check = json!({"title": "Release checks", "content": unrelated, "subtype": "custom:lesson",
                       "namespace": "agents"});
    let (status, body) = call(http.post(server.url("/v1/nodes/check-similar")).bearer_auth(agents).json(&check)).await;
    assert_eq!(status, 200, "{body}");
    let low = body["matches"].as_array().expect("matches").iter().all(|m| m["similarity"].as_f64() >= Some(0.60));
    assert!(low, "connect_threshold 0.60 is the floor of matches: {body}");

    // dedup_subtypes: curiosity is not gated here.
    let curiosity = json!({"type": "concept", "subtype": "custom:curiosity", "content_title": "Weekends",
                           "content_body": "Does negative funding change weekend slippage?", "namespace": "agents"});
    for _ in 0..2 {
        let (status, body) = call(http.post(&nodes).bearer_auth(agents).json(&curiosity)).await;
        assert_eq!((status, &body["dedup"]["status"]), (201, &json!("not_eligible")), "{body}");
    }

    // max_text_bytes.
    let long = "x".repeat(2001);
    let (status, body) = call(http.post(&nodes).bearer_auth(agents).json(&lesson_body("Long", &long, "agents"))).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap_or_default().contains("over the limit of 2000 bytes"), "{body}");

    let (status, stderr) = server.stop("INT");
    assert!(status.success() && stderr.contains(STOPPED), "SIGINT stops gracefully too: {status}\n{stderr}");

    // Bad tables: exit 2 naming the file and the key, before anything is opened.
    let cases: [(&str, &[&str]); 5] = [
        ("[server]\nadr = \"127.0.0.1:0\"\n", &["server.adr", "unknown field `adr`"]),
        ("[server.nodes]\ndup_threshold = 0.9\n", &["server.nodes.dup_threshold", "unknown field"]),
        ("[server.nodes]\nduplicate_threshold = 1.5\n", &["nodes.duplicate_threshold", "1.5"]),
        ("[[server.tokens]]\ntoken = \"short\"\n", &["tokens[0]", "at least 8 characters"]),
        // A value of the wrong type must name its key too, like every other config error.
        ("[server.nodes]\nconnect_threshold = \"high\"\n", &["server.nodes.connect_threshold", "invalid type"]),
    ];
    for (text_of_file, expected) in cases {
        let (bad_dir, bad_db) = sqlite_db();
        let bad = bad_dir.path().join("memdedup.toml");
        std::fs::write(&bad, text_of_file).expect("write memdedup.toml");
        let assert = memdedup()
            .env_remove(TOKEN_ENV_VAR)
            .arg("--config")
            .arg(&bad)
            .args(["--db", &bad_db, "serve", "--addr", "127.0.0.1:0"])
            .timeout(Duration::from_secs(60))
            .assert()
            .code(2);
        let stderr = text(&assert.get_output().stderr);
        for needle in expected {
            assert!(stderr.contains(needle), "{text_of_file:?}: expected {needle:?} in:\n{stderr}");
        }
        if text_of_file.contains("adr") {
            assert!(stderr.contains(&bad.display().to_string()), "the file is named: {stderr}");
        }
        assert!(!stderr.contains(LISTENING), "{stderr}");
        assert!(!Path::new(&bad_db).exists(), "{text_of_file:?}: nothing was opened");
    }
}

/// Request logs at debug level carry request ids, methods, paths and node ids, never the
/// text of a memory or fact.
#[tokio::test]
async fn serve_logs_carry_request_ids_and_no_memory_text() {
    require_model();
    let (_dir, db) = sqlite_db();
    let server = Server::start(&["-vv", "--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let http = client();
    let (title, body) = ("Zanzibar ferry lesson", "Quokka marmalade tastes best before the ferry leaves");
    for _ in 0..2 {
        let (status, reply) = call(http.post(server.url("/v1/nodes")).json(&lesson_body(title, body, "default"))).await;
        assert!(status == 201 || status == 200, "{reply}");
    }
    let check = json!({"title": title, "content": body, "subtype": "custom:lesson"});
    let (status, _) = call(http.post(server.url("/v1/nodes/check-similar")).json(&check)).await;
    assert_eq!(status, 200);
    let fact = json!({"content": "Collects quokka marmalade jars", "category": "preference", "confidence": 0.9});
    let (status, _) = call(http.post(server.url("/v1/facts")).json(&fact)).await;
    assert_eq!(status, 201);
    let (status, stderr) = server.stop("TERM");
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("request_id="), "request spans carry ids:\n{stderr}");
    assert!(stderr.contains("/v1/nodes/check-similar"), "paths are logged:\n{stderr}");
    assert!(stderr.contains("duplicate node not created"), "the verdict is logged:\n{stderr}");
    for secret in ["Quokka", "quokka", "Zanzibar", "marmalade"] {
        assert!(!stderr.contains(secret), "{secret:?} leaked into the logs:\n{stderr}");
    }
}

/// Without the model the server starts, warns at once with the fetch command, and
/// `/healthz` says the embedder cannot embed (and why).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_8_serve_warns_at_startup_when_the_model_is_missing() {
    let (_dir, db) = sqlite_db();
    let empty = tempfile::tempdir().expect("temporary directory");
    let model_dir = empty.path().display().to_string();
    let server = Server::start(&["--model-dir", &model_dir, "--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let startup = server.stderr_so_far();
    let warning =
        startup.lines().find(|l| l.starts_with("warning:")).unwrap_or_else(|| panic!("no warning:\n{startup}"));
    assert!(warning.contains("cargo xtask fetch-model") && warning.contains(&model_dir), "{warning}");
    let before_listening = startup.split(LISTENING).next().unwrap_or_default();
    assert!(before_listening.contains("warning:"), "the warning comes before the listening line:\n{startup}");

    let http = client();
    let (status, health) = call(http.get(server.url("/healthz"))).await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["embedder"], false, "{health}");
    assert!(health["embedder_error"].as_str().is_some_and(|e| e.contains("cargo xtask fetch-model")), "{health}");
    let (status, created) = call(http.post(server.url("/v1/nodes")).json(&lesson_body("T", "B", "default"))).await;
    assert_eq!((status, &created["dedup"]["status"]), (201, &json!("skipped")), "{created}");
    let (status, stderr) = server.stop("TERM");
    assert!(status.success(), "{stderr}");
}

/// `[dedup] judge = "local"`: check-similar and the create gate keep apart a close pair
/// that other numbers separate, and say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_the_local_judge_reports_its_reasons() {
    require_model();
    let (dir, db) = sqlite_db();
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, "[server]\naddr = \"127.0.0.1:0\"\n\n[dedup]\njudge = \"local\"\n")
        .expect("write memdedup.toml");
    let config_arg = config.display().to_string();
    let server = Server::start(&["--config", &config_arg, "--db", &db, "serve"], &[]);
    let http = client();
    assert_embedder(&http, &server).await;
    let standing = "The user has a standing 1:1 with their manager every Thursday at 14:00.";
    let moved = "The user has a standing 1:1 with their manager every Thursday at 16:00.";
    let (status, created) =
        call(http.post(server.url("/v1/nodes")).json(&lesson_body("Weekly 1:1", standing, "default"))).await;
    assert_eq!(status, 201, "{created}");

    let check = json!({"content": moved, "title": "Weekly 1:1", "subtype": "custom:lesson"});
    let (status, similar) = call(http.post(server.url("/v1/nodes/check-similar")).json(&check)).await;
    assert_eq!(status, 200, "{similar}");
    assert_eq!(similar["judge"], "local", "{similar}");
    assert_eq!(similar["recommendation"], "similar_found", "{similar}");
    let first = &similar["matches"][0];
    assert!(first["similarity"].as_f64().unwrap() >= 0.95, "above the duplicate threshold: {similar}");
    assert_eq!(first["action"], "connect", "{similar}");
    let reasons: Vec<&str> = first["reasons"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert!(reasons.iter().any(|r| r.contains("14:00") && r.contains("16:00")), "{similar}");

    let (status, gate) =
        call(http.post(server.url("/v1/nodes")).json(&lesson_body("Weekly 1:1", moved, "default"))).await;
    assert_eq!(status, 201, "the vetoed pair is created: {gate}");
    assert_eq!(gate["dedup"]["judge"], "local", "{gate}");
    assert_eq!(gate["dedup"]["linked"][0], created["id"], "{gate}");
    let (status, again) =
        call(http.post(server.url("/v1/nodes")).json(&lesson_body("Weekly 1:1", moved, "default"))).await;
    assert_eq!(status, 200, "a true duplicate is not created: {again}");
    assert_eq!(again["duplicate_of"]["id"].as_str().or(again["duplicate_of"]["node_id"].as_str()), gate["id"].as_str());
    assert!(!again["duplicate_of"]["reasons"].as_array().unwrap().is_empty(), "{again}");
}
