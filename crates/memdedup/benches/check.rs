//! Check-before-store latency: `DeduplicationService::check_duplicate` with the local
//! model against 1k, 10k and 100k stored memories in one namespace (SQLite).
//!
//! Run with `cargo xtask bench` (or `cargo bench -p memdedup --bench check`).
//! MEMDEDUP_BENCH_SIZES=1000,10000 limits the sizes. The stored side has synthetic unit
//! vectors (stored under the local model's id, so every check searches all of them);
//! the queries are real texts embedded by the real model.

mod support;

use std::sync::Arc;
use std::time::Instant;

use memdedup::{
    DbLocation, DeduplicationConfig, DeduplicationService, Embedder, LocalEmbedder, ModelDir, NewMemory, Scope, Store,
    StoreOptions,
};
use support::{Lcg, fill_synthetic, list_env, ms, percentile, sentence};

const QUERIES: usize = 200;

fn main() {
    let sizes = list_env("MEMDEDUP_BENCH_SIZES", &[1_000, 10_000, 100_000]);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        let dir = ModelDir::locate(None).expect("model directory");
        let embedder: Arc<dyn Embedder> = Arc::new(LocalEmbedder::new(dir));
        // Load the model before timing anything.
        embedder.embed_one("warm up the model").await.expect("the local model loads (cargo xtask fetch-model)");
        println!("check_duplicate, local model, SQLite, one namespace, {QUERIES} queries per size");
        println!(
            "{:>8}  {:>10}  {:>9}  {:>9}  {:>9}  {:>11}  {:>11}  {:>9}  {:>10}",
            "stored", "fill s", "miss p50", "miss p99", "miss max", "exact p50", "exact p99", "embed p50", "search p50"
        );
        for &n in &sizes {
            bench_size(n, embedder.clone()).await;
        }
    });
}

async fn bench_size(n: usize, embedder: Arc<dyn Embedder>) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let location = DbLocation::Sqlite(dir.path().join("bench.db"));
    let store = Arc::new(Store::open(&location, &StoreOptions::default()).await.expect("store opens"));
    let scope = Scope::namespace("learnings").expect("valid namespace");
    let model = embedder.model_id().to_owned();
    let mut rng = Lcg(n as u64);
    let fill = fill_synthetic(&store, embedder.as_ref(), n, &mut rng, |i, text| {
        NewMemory::new(scope.clone(), format!("stored memory {i}: {text}"))
    })
    .await;
    let service = DeduplicationService::new(store.clone(), embedder, DeduplicationConfig::default());
    // The first search loads the scope's index; that is a one-off per process.
    let load_started = Instant::now();
    service.check_duplicate(&sentence(&mut rng), &scope).await.expect("check");
    let load = load_started.elapsed();

    let mut misses = Vec::with_capacity(QUERIES);
    for _ in 0..QUERIES {
        let text = sentence(&mut rng);
        let started = Instant::now();
        let result = service.check_duplicate(&text, &scope).await.expect("check");
        misses.push(started.elapsed());
        assert!(result.degraded.is_empty(), "{result:?}");
    }
    // The two costly parts of a miss, measured alone.
    let mut embeds = Vec::with_capacity(QUERIES);
    let mut searches = Vec::with_capacity(QUERIES);
    for _ in 0..QUERIES {
        let text = sentence(&mut rng);
        let started = Instant::now();
        let query = service.embedder().expect("embedder").embed_one(&text).await.expect("embed");
        embeds.push(started.elapsed());
        let started = Instant::now();
        store.search(&scope, &model, &query, 1).await.expect("search");
        searches.push(started.elapsed());
    }
    let mut exact = Vec::with_capacity(QUERIES);
    let stored = store
        .list(&memdedup::ListFilter { namespace: Some("learnings".into()), limit: QUERIES, ..Default::default() })
        .await
        .expect("list");
    for memory in stored.iter().cycle().take(QUERIES) {
        let started = Instant::now();
        let result = service.check_duplicate(&memory.content, &scope).await.expect("check");
        exact.push(started.elapsed());
        assert!(result.is_duplicate);
    }
    println!(
        "{n:>8}  {:>10.1}  {:>9}  {:>9}  {:>9}  {:>11}  {:>11}  {:>9}  {:>10}   (index load {:.0} ms)",
        fill.as_secs_f64(),
        ms(percentile(&mut misses, 0.50)),
        ms(percentile(&mut misses, 0.99)),
        ms(percentile(&mut misses, 1.0)),
        ms(percentile(&mut exact, 0.50)),
        ms(percentile(&mut exact, 0.99)),
        ms(percentile(&mut embeds, 0.50)),
        ms(percentile(&mut searches, 0.50)),
        load.as_secs_f64() * 1000.0,
    );
    store.close().await;
}
