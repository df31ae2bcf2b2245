//! `memdedup serve` end to end: real server processes with the local model, driven over
//! HTTP by concurrent clients, Python's `requests`, and the curl examples of docs/HTTP.md.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::Connection;
use tokio::sync::Semaphore;

use crate::support::{memdedup, postgres_url, require_model, sqlite_db, text};

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

/// A database created on the `DATABASE_URL` server for one test, dropped afterwards.
struct PgDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl PgDatabase {
    async fn create() -> PgDatabase {
        let admin_url = postgres_url();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let name = format!("memdedup_serve_{}_{}", std::process::id(), nanos % 1_000_000_000_000);
        let mut admin = sqlx::PgConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to DATABASE_URL to create a test database: {e}"));
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("CREATE DATABASE");
        admin.close().await.expect("close the admin connection");
        let url = with_database(&admin_url, &name);
        PgDatabase { admin_url, name, url }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // On a thread of its own: Drop cannot await, and the test's runtime may be busy.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await?;
                admin.close().await?;
                anyhow::Ok(())
            })
        })
        .join();
        if let Ok(Err(error)) = dropped {
            eprintln!("warning: could not drop test database {}: {error:#}", self.name);
        }
    }
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").expect("DATABASE_URL is a URL") + 3;
    let authority_end = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..authority_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(120)).build().expect("an HTTP client")
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

const SUBJECTS: [&str; 20] = [
    "bitcoin futures",
    "ether options",
    "small-cap stocks",
    "treasury bonds",
    "gold miners",
    "crude oil contracts",
    "the euro against the dollar",
    "the Japanese yen",
    "natural gas",
    "copper",
    "biotech shares",
    "emerging market debt",
    "wheat futures",
    "volatility index products",
    "real estate trusts",
    "airline stocks",
    "semiconductor shares",
    "municipal bonds",
    "silver",
    "shipping companies",
];
const SITUATIONS: [&str; 10] = [
    "during the thin Asian session",
    "right before a central bank decision",
    "after a three-day rally",
    "when funding rates turn negative",
    "on the Friday before a holiday weekend",
    "in the first hour after the open",
    "while an earnings report is pending",
    "after a surprise inflation print",
    "when the order book is thin",
    "during a market-wide liquidation cascade",
];
const ACTIONS: [&str; 7] = [
    "cut the position size in half",
    "wait for a daily close above resistance before entering",
    "never use more than three times leverage",
    "set the stop loss below the previous swing low",
    "take partial profits into strength",
    "stay flat until the spread narrows",
    "hedge with a small put position",
];
/// How many different lessons [`lesson`] makes.
const DISTINCT_LESSONS: usize = SUBJECTS.len() * SITUATIONS.len() * ACTIONS.len();

/// Lesson `n` (title, body): every `n` below [`DISTINCT_LESSONS`] gives a different
/// sentence. With the local model about 2% of them score >= 0.95 with another one (the
/// same subject and situation with a similar action), so the gate merges those.
fn lesson(n: usize) -> (String, String) {
    // 7919 is prime to 1400, so this is a permutation; consecutive lessons differ in subject
    // and action.
    let n = (n * 7919) % DISTINCT_LESSONS;
    let subject = SUBJECTS[n / (SITUATIONS.len() * ACTIONS.len())];
    let situation = SITUATIONS[(n / ACTIONS.len()) % SITUATIONS.len()];
    let action = ACTIONS[n % ACTIONS.len()];
    (format!("Rule for {subject}"), format!("Trading {subject} {situation}: {action}."))
}

/// One request of the load test.
#[derive(Debug, Clone, Copy)]
struct Planned {
    /// Which [`lesson`].
    lesson: usize,
    /// For an exact repeat: the position of the request it repeats.
    repeat_of: Option<usize>,
}

/// `total` requests: 30% (positions 3, 6, 9 of every 10) exact repeats of an earlier
/// request, the rest distinct lessons in order.
fn load_plan(total: usize) -> Vec<Planned> {
    let mut plan: Vec<Planned> = Vec::with_capacity(total);
    let mut originals: Vec<usize> = Vec::new();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for position in 0..total {
        if matches!(position % 10, 3 | 6 | 9) && !originals.is_empty() {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let original = originals[((state >> 33) as usize) % originals.len()];
            plan.push(Planned { lesson: plan[original].lesson, repeat_of: Some(original) });
        } else {
            plan.push(Planned { lesson: originals.len(), repeat_of: None });
            originals.push(position);
        }
    }
    plan
}

/// What a load-test request got back.
#[derive(Debug, Clone)]
struct Outcome {
    status: u16,
    created: Option<bool>,
    id: Option<String>,
    body: String,
}

/// Sums `http_requests_total` samples whose labels contain every one of `labels`.
fn requests_total(metrics: &str, labels: &[&str]) -> u64 {
    metrics
        .lines()
        .filter(|line| line.starts_with("http_requests_total{"))
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

/// Every live node of `namespace`, page by page over `GET /v1/nodes`.
async fn list_all_nodes(http: &reqwest::Client, server: &Server, namespace: &str) -> Vec<Value> {
    let mut nodes = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut url = server.url(&format!("/v1/nodes?namespace={namespace}&limit=500"));
        if let Some(after) = &after {
            url.push_str(&format!("&after={after}"));
        }
        let (status, page) = call(http.get(url)).await;
        assert_eq!(status, 200, "{page}");
        nodes.extend(page["data"].as_array().expect("a page has data").iter().cloned());
        match page["next_after"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return nodes,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_on_one_postgres_load_32_clients_no_duplicates() {
    const REQUESTS: usize = 2_000;
    const CLIENTS: usize = 32;
    const NAMESPACE: &str = "load";
    require_model();
    let database = PgDatabase::create().await;
    // Both start at once: they also race to migrate the fresh database.
    let servers = {
        let url = database.url.clone();
        let start = move || Server::start(&["--db", &url, "serve", "--addr", "127.0.0.1:0"], &[]);
        let other = std::thread::spawn(start.clone());
        let first = start();
        [first, other.join().expect("the second server starts")]
    };
    let http = client();
    for server in &servers {
        assert_embedder(&http, server).await;
    }

    let plan = Arc::new(load_plan(REQUESTS));
    let repeats = plan.iter().filter(|p| p.repeat_of.is_some()).count();
    assert_eq!(repeats, REQUESTS * 3 / 10);
    assert!(plan.len() - repeats <= DISTINCT_LESSONS);
    let done: Arc<Vec<Semaphore>> = Arc::new((0..REQUESTS).map(|_| Semaphore::new(0)).collect());
    let outcomes: Arc<Mutex<Vec<Option<Outcome>>>> = Arc::new(Mutex::new(vec![None; REQUESTS]));
    let next = Arc::new(AtomicUsize::new(0));
    let bases: Arc<[String; 2]> = Arc::new([servers[0].url("/v1/nodes"), servers[1].url("/v1/nodes")]);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (plan, done, outcomes, next, bases, http) =
            (plan.clone(), done.clone(), outcomes.clone(), next.clone(), bases.clone(), http.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let position = next.fetch_add(1, Ordering::SeqCst);
                let Some(planned) = plan.get(position).copied() else { break };
                // A repeat is sent once its original was answered, so it must be refused.
                if let Some(original) = planned.repeat_of {
                    let _answered = done[original].acquire().await.expect("the semaphore stays open");
                }
                let (title, body) = lesson(planned.lesson);
                let request = http.post(&bases[position % 2]).json(&lesson_body(&title, &body, NAMESPACE));
                let outcome = match request.send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let body = response.text().await.unwrap_or_else(|e| format!("<unreadable body: {e}>"));
                        let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                        Outcome {
                            status,
                            created: parsed["created"].as_bool(),
                            id: parsed["id"].as_str().map(str::to_owned),
                            body,
                        }
                    }
                    Err(e) => Outcome { status: 0, created: None, id: None, body: format!("transport error: {e}") },
                };
                outcomes.lock().unwrap()[position] = Some(outcome);
                done[position].add_permits(1);
            }
        }));
    }
    let all = async {
        for task in tasks {
            task.await.expect("a client task does not panic");
        }
    };
    tokio::time::timeout(Duration::from_secs(300), all).await.expect("2,000 requests finish within 5 minutes");
    let elapsed = started.elapsed();
    let outcomes: Vec<Outcome> =
        outcomes.lock().unwrap().iter().map(|o| o.clone().expect("every request was sent")).collect();

    let failures: Vec<String> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, o)| !matches!(o.status, 200 | 201))
        .map(|(position, o)| format!("#{position}: {} {}", o.status, o.body))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {REQUESTS} requests failed; the first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
    for (position, outcome) in outcomes.iter().enumerate() {
        assert_eq!(outcome.created, Some(outcome.status == 201), "#{position}: {}", outcome.body);
        assert!(outcome.id.is_some(), "#{position}: {}", outcome.body);
    }
    let created: Vec<&str> = outcomes.iter().filter(|o| o.status == 201).filter_map(|o| o.id.as_deref()).collect();
    let merged = outcomes.iter().filter(|o| o.status == 200).count();
    let semantic = plan.iter().zip(&outcomes).filter(|(p, o)| p.repeat_of.is_none() && o.status == 200).count();
    println!(
        "load: {REQUESTS} POST /v1/nodes from {CLIENTS} clients over 2 servers in {:.1} s: {:.0} requests/s; \
         {} created, {merged} not created ({repeats} exact repeats, {} semantic merges of distinct lessons)",
        elapsed.as_secs_f64(),
        REQUESTS as f64 / elapsed.as_secs_f64(),
        created.len(),
        semantic,
    );

    for (position, planned) in plan.iter().enumerate() {
        let Some(original) = planned.repeat_of else { continue };
        let (repeat, first) = (&outcomes[position], &outcomes[original]);
        assert_eq!(repeat.created, Some(false), "exact repeat #{position} of #{original} was created: {}", repeat.body);
        if first.status == 201 {
            assert_eq!(repeat.id, first.id, "exact repeat #{position} names another node than #{original}");
        }
    }

    let live = list_all_nodes(&http, &servers[1], NAMESPACE).await;
    assert_eq!(live.len(), created.len(), "live nodes = 201 responses");
    let mut live_ids: Vec<&str> = live.iter().map(|n| n["id"].as_str().expect("a node has an id")).collect();
    live_ids.sort_unstable();
    let mut created_ids = created.clone();
    created_ids.sort_unstable();
    assert_eq!(live_ids, created_ids, "the live nodes are exactly the created ones");
    let mut bodies: Vec<&str> = live.iter().map(|n| n["content_body"].as_str().expect("a node has a body")).collect();
    bodies.sort_unstable();
    let before = bodies.len();
    bodies.dedup();
    assert_eq!(bodies.len(), before, "two live nodes share a content_body");
    for outcome in outcomes.iter().filter(|o| o.status == 200) {
        let id = outcome.id.as_deref().unwrap_or_default();
        assert!(live_ids.binary_search(&id).is_ok(), "a duplicate names {id}, which is not live: {}", outcome.body);
    }
    let occurrences: u64 = live.iter().map(|n| n["occurrence_count"].as_u64().expect("occurrence_count")).sum();
    assert_eq!(occurrences, REQUESTS as u64, "every request is one occurrence of a live node");

    // The database agrees, read without either server.
    let listed = memdedup()
        .args(["--db", &database.url, "list", "--namespace", NAMESPACE, "--limit", "0", "--json"])
        .assert()
        .success();
    let listed = crate::support::json(&listed.get_output().stdout);
    assert_eq!(listed.as_array().expect("list prints an array").len(), created.len());

    for (index, server) in servers.iter().enumerate() {
        let response = http.get(server.url("/metrics")).send().await.expect("GET /metrics");
        assert_eq!(response.status().as_u16(), 200);
        let metrics = response.text().await.expect("metrics text");
        assert!(metrics.contains("http_requests_total"), "server {index}:\n{metrics}");
        let posts = requests_total(&metrics, &["method=\"POST\"", "route=\"/v1/nodes\""]);
        assert_eq!(posts, (REQUESTS / 2) as u64, "server {index} counted its half of the POSTs:\n{metrics}");
    }
    for server in servers {
        let (status, stderr) = server.stop("TERM");
        assert!(status.success() && stderr.contains(STOPPED), "{status}\n{stderr}");
    }
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

/// Seed 001 §4's `NousClient.check_similar`, verbatim, in a minimal client.
const PYTHON_CLIENT: &str = r#"
import json
import sys

import requests


class NousClient:
    def __init__(self, base_url: str):
        self.base_url = base_url.rstrip("/")
        self._session = requests.Session()

    def _url(self, path: str) -> str:
        return f"{self.base_url}/v1{path}"

    def check_similar(
        self,
        content: str,
        title: str,
        subtype: str,
        limit: int = 5,
    ) -> dict:
        """Check if similar nodes exist before storing.

        Compares content embedding against existing nodes of the same subtype.
        Returns similarity matches with recommended actions based on thresholds:
          - duplicate (>= 0.95 cosine): near-identical content exists
          - connect (0.90-0.95 cosine): similar content, should link

        Used by _store_memory_impl() for lesson and curiosity dedup.
        """
        resp = self._session.post(
            self._url("/nodes/check-similar"),
            json={
                "content": content,
                "title": title,
                "subtype": subtype,
                "limit": limit,
            },
        )
        resp.raise_for_status()
        return resp.json()


def main() -> None:
    base_url, title, content = sys.argv[1:4]
    client = NousClient(base_url)
    out = {
        "same": client.check_similar(content, title, "custom:lesson"),
        "other_subtype": client.check_similar(content, title, "custom:curiosity"),
        "unrelated": client.check_similar(
            "Customer invoices must be archived for seven years to satisfy the tax law.",
            "Invoice retention",
            "custom:lesson",
            limit=3,
        ),
    }
    try:
        client.check_similar(content, "", "custom:lesson")
        out["missing_title"] = None
    except requests.HTTPError as error:
        out["missing_title"] = {"status": error.response.status_code, "body": error.response.json()}
    print(json.dumps(out))


main()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_check_similar_against_server() {
    require_model();
    let (dir, db) = sqlite_db();
    let server = Server::start(&["--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let http = client();
    let (title, body) = ("Never trade weekends", "Low volume weekends increase slippage risk");
    let (status, created) = call(http.post(server.url("/v1/nodes")).json(&lesson_body(title, body, "default"))).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("an id").to_owned();

    let script = dir.path().join("nous_client.py");
    std::fs::write(&script, PYTHON_CLIENT).expect("write the Python client");
    let output =
        Command::new("python3").arg(&script).args([server.base_url.as_str(), title, body]).output().unwrap_or_else(
            |e| panic!("this test needs python3 with requests (apt-get install python3-requests): {e}"),
        );
    assert!(
        output.status.success(),
        "the Python client failed (python3 with requests is needed: apt-get install python3-requests):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result = crate::support::json(&output.stdout);

    let same = &result["same"];
    assert_eq!(same["recommendation"], "duplicate_found", "{result}");
    let matches = same["matches"].as_array().expect("matches is a list");
    assert_eq!(matches.len(), 1, "{result}");
    assert_eq!(
        crate::support::keys(&matches[0]),
        crate::support::key_set(&["node_id", "title", "similarity", "action", "lifecycle"])
    );
    assert_eq!(matches[0]["node_id"], id.as_str());
    assert_eq!(matches[0]["title"], title);
    assert_eq!(matches[0]["action"], "duplicate");
    assert_eq!(matches[0]["lifecycle"], "ACTIVE");
    let similarity = matches[0]["similarity"].as_f64().expect("a number");
    assert!((0.9999..=1.0).contains(&similarity), "{result}");
    assert_eq!(crate::support::keys(same), crate::support::key_set(&["matches", "recommendation"]));

    for key in ["other_subtype", "unrelated"] {
        assert_eq!(result[key], json!({"matches": [], "recommendation": "unique"}), "{key}: {result}");
    }
    assert_eq!(result["missing_title"]["status"], 400, "{result}");
    assert_eq!(result["missing_title"]["body"]["error"], "content, title, and subtype are required", "{result}");
    let (status, _) = server.stop("TERM");
    assert!(status.success());
}

/// docs/HTTP.md of the workspace.
fn http_doc_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/HTTP.md")
}

/// The fenced code blocks of `markdown`: (info string, contents).
fn fenced_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in markdown.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => open = Some((info.trim().to_owned(), String::new())),
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some((_, contents)), None) => {
                contents.push_str(line);
                contents.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "docs/HTTP.md has an unclosed code fence");
    blocks
}

/// The shell commands of a block, with backslash continuations joined.
fn commands(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        if line.trim_start().starts_with('#') && current.is_empty() {
            continue;
        }
        match line.trim_end().strip_suffix('\\') {
            Some(start) => {
                current.push_str(start);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// One curl call of the examples: method, path (without the query) and its flags.
#[derive(Debug)]
struct CurlCall {
    command: String,
    method: String,
    path: String,
    fails_on_http_errors: bool,
}

/// The curl calls of one command line (`A=$(curl …)`, `curl … | grep …` included).
fn curl_calls(command: &str) -> Vec<CurlCall> {
    let mut calls = Vec::new();
    for (start, _) in command.match_indices("curl ") {
        let rest = &command[start + "curl ".len()..];
        let args: Vec<&str> = rest.split_whitespace().take_while(|t| !matches!(*t, "|" | "&&" | "||" | ";")).collect();
        let mut method = None;
        let mut sends_data = false;
        let mut fails = false;
        let mut url = None;
        for (i, arg) in args.iter().enumerate() {
            let bare = arg.trim_matches(|c| matches!(c, '"' | '\''));
            if *arg == "-X" || *arg == "--request" {
                method = args.get(i + 1).map(|m| m.trim_matches(|c| matches!(c, '"' | '\'')).to_owned());
            } else if matches!(*arg, "-d" | "--data" | "--data-raw" | "--data-binary" | "--json") {
                sends_data = true;
            } else if matches!(*arg, "--fail" | "--fail-with-body") {
                fails = true;
            } else if arg.starts_with('-') && !arg.starts_with("--") && arg.chars().skip(1).all(char::is_alphabetic) {
                fails |= arg.contains('f');
            } else if let Some(path) = bare.strip_prefix(DOCS_BASE_URL) {
                url = Some(path.trim_end_matches(')').split('?').next().unwrap_or_default().to_owned());
            }
        }
        let method = method.unwrap_or_else(|| if sends_data { "POST" } else { "GET" }.to_owned());
        calls.push(CurlCall {
            command: command.trim().to_owned(),
            method: method.to_uppercase(),
            path: url.unwrap_or_default(),
            fails_on_http_errors: fails,
        });
    }
    calls
}

/// Whether `path` (`/v1/nodes/n_1`, `/v1/facts/$FACT`) is an instance of `template`
/// (`/v1/nodes/{id}`).
fn path_matches(template: &str, path: &str) -> bool {
    let (template, path): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    template.len() == path.len()
        && template.iter().zip(&path).all(|(t, p)| t == p || (t.starts_with('{') && t.ends_with('}') && !p.is_empty()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_http_curl_examples_run() {
    require_model();
    let doc = http_doc_path();
    let markdown = std::fs::read_to_string(&doc).unwrap_or_else(|e| {
        panic!(
            "docs/HTTP.md must exist and document every route with runnable curl examples in ```sh blocks \
             ({}: {e})",
            doc.display()
        )
    });
    let blocks = fenced_blocks(&markdown);
    for (info, contents) in &blocks {
        assert!(
            info == "sh" || !contents.contains("curl "),
            "a curl example in a ```{info} block is never run; use ```sh:\n{contents}"
        );
    }
    let examples: Vec<&String> =
        blocks.iter().filter(|(info, c)| info == "sh" && c.contains("curl")).map(|(_, c)| c).collect();
    assert!(!examples.is_empty(), "docs/HTTP.md has no ```sh block with curl");

    let calls: Vec<CurlCall> = examples.iter().flat_map(|block| commands(block)).flat_map(|c| curl_calls(&c)).collect();
    let without_fail: Vec<&str> =
        calls.iter().filter(|c| !c.fails_on_http_errors).map(|c| c.command.as_str()).collect();
    assert!(
        without_fail.is_empty(),
        "every curl example needs -f or --fail-with-body so an HTTP error fails it:\n{}",
        without_fail.join("\n")
    );

    let (_dir, db) = sqlite_db();
    let server = Server::start(&["--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    for (index, block) in examples.iter().enumerate() {
        let script = block.replace(DOCS_BASE_URL, &server.base_url);
        let expect_error = block.contains("# expect: 4xx");
        let assert = assert_cmd::Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .current_dir(std::env::temp_dir())
            .timeout(Duration::from_secs(60))
            .assert();
        let output = assert.get_output();
        let report = format!(
            "example {} of docs/HTTP.md exited with {}:\n{block}\nstdout:\n{}\nstderr:\n{}",
            index + 1,
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if expect_error {
            // curl's exit code for an HTTP status >= 400; a 5xx is never the expected error.
            assert_eq!(output.status.code(), Some(22), "{report}");
            let body = String::from_utf8_lossy(&output.stdout);
            assert!(!body.contains("\"code\":\"internal\"") && !body.contains("\"code\":\"unavailable\""), "{report}");
        } else {
            assert!(output.status.success(), "{report}");
        }
    }

    println!(
        "docs/HTTP.md: {} examples with {} curl calls ran, {} of them expected to fail",
        examples.len(),
        calls.len(),
        examples.iter().filter(|b| b.contains("# expect: 4xx")).count()
    );

    let http = client();
    let (status, openapi) = call(http.get(server.url("/v1/openapi.json"))).await;
    assert_eq!(status, 200);
    let paths = openapi["paths"].as_object().expect("the OpenAPI document has paths");
    let mut missing = Vec::new();
    for (template, operations) in paths {
        let operations = operations.as_object().expect("a path item is an object");
        for method in operations.keys().filter(|m| matches!(m.as_str(), "get" | "post" | "put" | "patch" | "delete")) {
            let method = method.to_uppercase();
            if !calls.iter().any(|c| c.method == method && path_matches(template, &c.path)) {
                missing.push(format!("{method} {template}"));
            }
        }
    }
    assert!(missing.is_empty(), "routes of /v1/openapi.json without a curl example in docs/HTTP.md: {missing:?}");
    let (status, stderr) = server.stop("TERM");
    assert!(status.success(), "{stderr}");
}

#[test]
fn curl_calls_are_parsed_from_the_examples() {
    let calls = curl_calls(
        "FACT=$(curl -fsS -X POST http://127.0.0.1:3100/v1/facts -H 'Content-Type: application/json' -d '{}' | grep -o x)",
    );
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].method.as_str(), calls[0].path.as_str(), calls[0].fails_on_http_errors),
        ("POST", "/v1/facts", true)
    );
    let calls = curl_calls("curl -sS 'http://127.0.0.1:3100/v1/nodes?namespace=default' | head -n1");
    assert_eq!(
        (calls[0].method.as_str(), calls[0].path.as_str(), calls[0].fails_on_http_errors),
        ("GET", "/v1/nodes", false)
    );
    let calls = curl_calls("curl -sS --fail-with-body -X DELETE \"http://127.0.0.1:3100/v1/facts/$FACT\"");
    assert!(calls[0].fails_on_http_errors);
    assert!(path_matches("/v1/facts/{id}", &calls[0].path));
    assert!(!path_matches("/v1/nodes", "/v1/nodes/n_1"));
    assert_eq!(commands("# a comment\ncurl -f \\\n  http://x\necho\n"), vec!["curl -f    http://x", "echo"]);
    assert_eq!(load_plan(20).iter().filter(|p| p.repeat_of.is_some()).count(), 6);
    let distinct: std::collections::BTreeSet<String> = (0..DISTINCT_LESSONS).map(|n| lesson(n).1).collect();
    assert_eq!(distinct.len(), DISTINCT_LESSONS);
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

/// One request to the fake embeddings API, as it saw it.
#[derive(Debug, Clone)]
struct EmbeddingsCall {
    authorization: Option<String>,
    body: Value,
}

/// A fake OpenAI-compatible `POST /v1/embeddings`: the real wire format, unit vectors of
/// `dimensions` (default 16) derived from each input's bytes, so equal texts get equal
/// vectors and different texts nearly orthogonal ones. Records every request.
struct FakeEmbeddings {
    base_url: String,
    calls: Arc<Mutex<Vec<EmbeddingsCall>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeEmbeddings {
    async fn start() -> FakeEmbeddings {
        use axum::http::HeaderMap;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&calls);
        let app = axum::Router::new().route(
            "/v1/embeddings",
            axum::routing::post(move |headers: HeaderMap, axum::Json(body): axum::Json<Value>| {
                let recorded = Arc::clone(&recorded);
                async move {
                    let authorization =
                        headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
                    recorded.lock().unwrap().push(EmbeddingsCall { authorization, body: body.clone() });
                    let dims = body["dimensions"].as_u64().unwrap_or(16) as usize;
                    let inputs: Vec<String> = match &body["input"] {
                        Value::String(one) => vec![one.clone()],
                        Value::Array(many) => many.iter().map(|v| v.as_str().unwrap_or_default().to_owned()).collect(),
                        _ => Vec::new(),
                    };
                    let data: Vec<Value> = inputs
                        .iter()
                        .enumerate()
                        .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": fake_vector(text, dims)}))
                        .collect();
                    axum::Json(json!({
                        "object": "list",
                        "data": data,
                        "model": body["model"],
                        "usage": {"prompt_tokens": 1, "total_tokens": 1}
                    }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake");
        let addr = listener.local_addr().expect("the fake's address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeEmbeddings { base_url: format!("http://{addr}/v1"), calls, task }
    }

    fn calls(&self) -> Vec<EmbeddingsCall> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for FakeEmbeddings {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Components in [-1, 1) from a splitmix64 stream seeded by the text's bytes (FNV-1a).
fn fake_vector(text: &str, dims: usize) -> Vec<f32> {
    let mut state =
        text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    (0..dims)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// `memdedup serve` with `[embedder] kind = "openai"`: the same `[embedder]` table the
/// other commands read, against a fake speaking the OpenAI wire format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_12_serve_uses_the_openai_compatible_embedder() {
    const KEY_VAR: &str = "MEMDEDUP_TEST_EMBEDDINGS_KEY";
    let fake = FakeEmbeddings::start().await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("memdedup.toml");
    std::fs::write(
        &config,
        format!(
            "[embedder]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-embed-v1\"\ndimensions = 24\n\
             api_key_env = \"{KEY_VAR}\"\n",
            fake.base_url
        ),
    )
    .expect("write the config");
    let db = dir.path().join("memory.db").display().to_string();
    let config_path = config.display().to_string();
    let server = Server::start(
        &["--config", &config_path, "--db", &db, "serve", "--addr", "127.0.0.1:0"],
        &[(KEY_VAR, "sk-test-0123456789")],
    );
    let http = client();
    let (status, health) = call(http.get(server.url("/healthz"))).await;
    assert_eq!(status, 200, "{health}");
    assert_eq!((&health["embedder"], &health["embedder_model"]), (&json!(true), &json!("fake-embed-v1")), "{health}");

    let lesson = lesson_body("Never trade weekends", "Low volume weekends increase slippage risk", "default");
    let (status, first) = call(http.post(server.url("/v1/nodes")).json(&lesson)).await;
    assert_eq!((status, &first["dedup"]["status"]), (201, &json!("checked")), "{first}");
    let (status, again) = call(http.post(server.url("/v1/nodes")).json(&lesson)).await;
    assert_eq!((status, &again["created"], &again["id"]), (200, &json!(false), &first["id"]), "{again}");
    let other = lesson_body("Size positions small", "Small positions survive overnight gaps", "default");
    let (status, created) = call(http.post(server.url("/v1/nodes")).json(&other)).await;
    assert_eq!(status, 201, "{created}");
    let (status, stderr) = server.stop("TERM");
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("sk-test-0123456789"), "the API key is never logged:\n{stderr}");

    let calls = fake.calls();
    let inputs: Vec<String> = calls
        .iter()
        .flat_map(|c| c.body["input"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    assert!(
        inputs.iter().any(|i| i == "Never trade weekends. Low volume weekends increase slippage risk"),
        "the node text was embedded by the API: {inputs:?}"
    );
    for call in &calls {
        assert_eq!(call.authorization.as_deref(), Some("Bearer sk-test-0123456789"), "{call:?}");
        assert_eq!((&call.body["model"], &call.body["dimensions"]), (&json!("fake-embed-v1"), &json!(24)), "{call:?}");
    }
}

/// A bad `[embedder]` table stops `serve` before it opens anything, naming the key.
#[test]
fn defect_12_serve_names_a_bad_embedder_table() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("memdedup.toml");
    let db = dir.path().join("memory.db");
    for (table, expected) in [
        ("kind = \"openai\"\nmodel = \"m\"\n", "`embedder.base_url` is required"),
        ("kind = \"openai\"\nbase_url = \"ftp://x\"\nmodel = \"m\"\n", "embedder"),
        ("kind = \"cloud\"\n", "`embedder.kind` \"cloud\""),
    ] {
        std::fs::write(&config, format!("[embedder]\n{table}")).expect("write the config");
        let refused = memdedup()
            .args(["--config", &config.display().to_string(), "--db", &db.display().to_string()])
            .args(["serve", "--addr", "127.0.0.1:0"])
            .timeout(Duration::from_secs(60))
            .assert()
            .failure();
        let stderr = text(&refused.get_output().stderr);
        assert!(stderr.contains(expected) && stderr.contains("memdedup.toml"), "{table}: {stderr}");
        assert!(!stderr.contains(LISTENING), "{stderr}");
        assert!(!db.exists(), "nothing was opened");
    }
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
