//! `POST /v1/nodes/check-similar` over loopback HTTP: throughput and latency with 8 and
//! 32 concurrent clients against 10k and 100k stored lessons (SQLite, local model).
//!
//! Run with `cargo xtask bench` (or `cargo bench -p memdedup --bench http`).
//! MEMDEDUP_BENCH_SIZES=10000 limits the sizes; MEMDEDUP_BENCH_CLIENTS=8 the client
//! counts. The stored lessons have synthetic unit vectors under the local model's id, so
//! every check searches all of them; each request embeds a real text with the real
//! model. Server and clients share the machine's cores.

mod support;

use std::sync::Arc;
use std::time::Instant;

use dedup_server::{AppState, ServerConfig};
use memdedup::{DbLocation, Embedder, LocalEmbedder, ModelDir, NewMemory, Scope, Store, StoreOptions};
use support::{Lcg, fill_synthetic, list_env, ms, percentile, sentence};

/// Requests per client, after a warm-up.
const REQUESTS_PER_CLIENT: usize = 50;

fn main() {
    let sizes = list_env("MEMDEDUP_BENCH_SIZES", &[10_000, 100_000]);
    let clients = list_env("MEMDEDUP_BENCH_CLIENTS", &[8, 32]);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        let dir = ModelDir::locate(None).expect("model directory");
        let embedder: Arc<dyn Embedder> = Arc::new(LocalEmbedder::new(dir));
        embedder.embed_one("warm up the model").await.expect("the local model loads (cargo xtask fetch-model)");
        println!("POST /v1/nodes/check-similar, loopback HTTP, local model, SQLite, {}", support::cpu_model());
        println!(
            "{:>8}  {:>7}  {:>9}  {:>10}  {:>10}  {:>10}  {:>10}",
            "stored", "clients", "requests", "req/s", "p50", "p99", "max"
        );
        for &n in &sizes {
            bench_size(n, &clients, embedder.clone()).await;
        }
    });
}

async fn bench_size(n: usize, clients: &[usize], embedder: Arc<dyn Embedder>) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let location = DbLocation::Sqlite(dir.path().join("bench.db"));
    let store = Arc::new(Store::open(&location, &StoreOptions::default()).await.expect("store opens"));
    let scope = Scope::namespace("default").expect("valid namespace");
    let mut rng = Lcg(n as u64);
    let fill = fill_synthetic(&store, embedder.as_ref(), n, &mut rng, |i, text| {
        NewMemory::new(scope.clone(), format!("stored lesson {i}: {text}"))
            .with_kind("custom:lesson")
            .with_title(format!("lesson {i}"))
    })
    .await;

    let config = ServerConfig { addr: "127.0.0.1:0".parse().expect("address"), ..ServerConfig::default() };
    // As `memdedup serve` does: concurrent requests share inference batches.
    let batching: Arc<dyn Embedder> = Arc::new(memdedup::BatchingEmbedder::new(embedder.clone(), 32));
    let state = AppState::new(store.clone(), Some(batching.clone()), config, None);
    let listener = dedup_server::bind(&state).await.expect("bind");
    let url = format!("http://{}/v1/nodes/check-similar", listener.local_addr().expect("address"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(dedup_server::serve(listener, state, async {
        stopped.await.ok();
    }));
    let http = reqwest::Client::new();
    // The first check loads the index of the subtype; a one-off per process.
    let load_started = Instant::now();
    post(&http, &url, &sentence(&mut rng)).await;
    let load = load_started.elapsed();
    eprintln!("{n} stored: fill {:.1} s, index load {:.0} ms", fill.as_secs_f64(), load.as_secs_f64() * 1e3);

    for &c in clients {
        let texts: Vec<Vec<String>> =
            (0..c).map(|_| (0..REQUESTS_PER_CLIENT + 2).map(|_| sentence(&mut rng)).collect()).collect();
        let started = Instant::now();
        let tasks: Vec<_> = texts
            .into_iter()
            .map(|texts| {
                let http = http.clone();
                let url = url.clone();
                tokio::spawn(async move {
                    let mut latencies = Vec::with_capacity(REQUESTS_PER_CLIENT);
                    for (i, text) in texts.iter().enumerate() {
                        let sent = Instant::now();
                        post(&http, &url, text).await;
                        // The first two requests of each client warm its connection.
                        if i >= 2 {
                            latencies.push(sent.elapsed());
                        }
                    }
                    latencies
                })
            })
            .collect();
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await.expect("client task"));
        }
        let elapsed = started.elapsed();
        let total = c * (REQUESTS_PER_CLIENT + 2);
        let throughput = total as f64 / elapsed.as_secs_f64();
        println!(
            "{n:>8}  {c:>7}  {:>9}  {throughput:>10.1}  {:>10}  {:>10}  {:>10}",
            latencies.len(),
            ms(percentile(&mut latencies, 0.50)),
            ms(percentile(&mut latencies, 0.99)),
            ms(percentile(&mut latencies, 1.0)),
        );
        let alone = embedder_alone(&batching, c, &mut rng).await;
        println!(
            "{:>8}  {c:>7}  embedder alone (same batching, no HTTP, no search): {alone:.1} texts/s; \
             check-similar at {:.0} % of it",
            "",
            100.0 * throughput / alone
        );
    }
    stop.send(()).ok();
    server.await.expect("server task").expect("server stops");
}

/// Texts per second that `clients` concurrent callers get from the server's embedder
/// alone, each embedding as many texts as an HTTP client sends.
async fn embedder_alone(batching: &Arc<dyn Embedder>, clients: usize, rng: &mut Lcg) -> f64 {
    let texts: Vec<Vec<String>> =
        (0..clients).map(|_| (0..REQUESTS_PER_CLIENT + 2).map(|_| sentence(rng)).collect()).collect();
    let started = Instant::now();
    let tasks: Vec<_> = texts
        .into_iter()
        .map(|texts| {
            let batching = Arc::clone(batching);
            tokio::spawn(async move {
                for text in &texts {
                    batching.embed_one(text).await.expect("embeds");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("embedding task");
    }
    (clients * (REQUESTS_PER_CLIENT + 2)) as f64 / started.elapsed().as_secs_f64()
}

async fn post(http: &reqwest::Client, url: &str, text: &str) {
    let body = serde_json::json!({"title": "A lesson", "content": text, "subtype": "custom:lesson"});
    let response = http.post(url).json(&body).send().await.expect("request");
    assert!(response.status().is_success(), "{}", response.status());
    let answer: serde_json::Value = response.json().await.expect("JSON");
    assert!(answer["recommendation"].is_string(), "{answer}");
}
