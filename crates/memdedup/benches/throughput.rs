//! Throughput benchmarks: local embedding and all-pairs grouping.
//!
//! Run with `cargo xtask bench` (or `cargo bench -p memdedup --bench throughput -- [embed|group]`).
//! Prints one line per measurement; docs/BENCHMARKS.md records the figures.

mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use memdedup::{
    CollectionItem, Embedder, Embedding, GroupOptions, LocalEmbedder, LocalOptions, ModelDir, ScanOptions, Threshold,
    scan_collection,
};
use support::{Lcg, cpu_model, peak_rss_mib};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let want = |name: &str| args.is_empty() || args.iter().any(|a| a == name);
    println!("machine: {} cores, {}", std::thread::available_parallelism().map_or(0, |n| n.get()), cpu_model());
    if want("group") {
        bench_grouping();
    }
    if want("embed") {
        bench_embedding();
    }
}

fn random_unit_vectors(n: usize, dims: usize, seed: u64) -> Vec<Embedding> {
    let mut rng = Lcg(seed);
    let mut out: Vec<Embedding> = Vec::with_capacity(n);
    for i in 0..n {
        // Every 20th vector is a noisy copy of an earlier one, so groups exist.
        let values: Vec<f32> = if i % 20 == 19 {
            let base = out[rng.below(i)].as_slice().to_vec();
            base.iter().map(|v| v + 0.01 * rng.unit()).collect()
        } else {
            (0..dims).map(|_| rng.unit()).collect()
        };
        out.push(Embedding::new(values).expect("finite non-zero vector"));
    }
    out
}

fn bench_grouping() {
    let n = 20_000;
    let dims = 384;
    let vectors = random_unit_vectors(n, dims, 7);
    let pairs = (n as f64) * (n as f64 - 1.0) / 2.0;
    let threshold = Threshold::new(0.85).expect("valid threshold");
    println!("grouping: {n} random {dims}-d unit vectors, {:.0}M pairs, threshold 0.85", pairs / 1e6);
    let before = peak_rss_mib();
    let mut best = Duration::MAX;
    let mut groups = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let mut options = GroupOptions::new(threshold);
        if let Some(tile) = std::env::var("MEMDEDUP_BENCH_TILE").ok().and_then(|t| t.parse().ok()) {
            options.tile_size = tile;
        }
        groups = memdedup::group_by_similarity_with(&vectors, options).expect("grouping");
        best = best.min(started.elapsed());
    }
    println!(
        "  tiled (rayon, sgemm tiles): best of 3 {:.3} s = {:.0}M pairs/s; {} groups; peak RSS {:.0} MiB (inputs alone {:.0} MiB)",
        best.as_secs_f64(),
        pairs / best.as_secs_f64() / 1e6,
        groups.len(),
        peak_rss_mib(),
        before
    );
    if std::env::var_os("MEMDEDUP_BENCH_SKIP_NAIVE").is_some() {
        return;
    }
    let started = Instant::now();
    let mut edges = 0usize;
    for i in 0..n {
        let a = vectors[i].as_slice();
        for b in &vectors[i + 1..] {
            let dot: f32 = a.iter().zip(b.as_slice()).map(|(x, y)| x * y).sum();
            if dot >= 0.85 {
                edges += 1;
            }
        }
    }
    let naive = started.elapsed();
    println!(
        "  naive double loop (one thread, iterator dot): {:.3} s = {:.0}M pairs/s; {} edges; speed-up {:.1}x",
        naive.as_secs_f64(),
        pairs / naive.as_secs_f64() / 1e6,
        black_box(edges),
        naive.as_secs_f64() / best.as_secs_f64()
    );
}

const WORDS: &[&str] = &[
    "always",
    "never",
    "run",
    "the",
    "database",
    "migrations",
    "before",
    "starting",
    "API",
    "server",
    "user",
    "prefers",
    "tabs",
    "over",
    "spaces",
    "for",
    "indentation",
    "trade",
    "during",
    "weekends",
    "when",
    "volume",
    "is",
    "low",
    "use",
    "type",
    "hints",
    "on",
    "function",
    "parameters",
    "avoid",
    "any",
    "in",
    "TypeScript",
    "deploy",
    "frontend",
    "after",
    "tests",
    "pass",
    "cache",
    "invalidate",
    "CDN",
    "retry",
    "requests",
    "with",
    "exponential",
    "backoff",
    "check",
    "logs",
    "first",
    "order",
    "events",
    "are",
    "published",
    "to",
    "Kafka",
    "keep",
    "secrets",
    "out",
    "of",
    "git",
    "rotate",
    "keys",
    "monthly",
    "prefer",
    "composition",
    "inheritance",
    "document",
    "every",
    "public",
    "module",
    "and",
    "its",
    "invariants",
    "measure",
    "latency",
    "p99",
];

fn sentences(n: usize, seed: u64) -> Vec<String> {
    let mut rng = Lcg(seed);
    (0..n)
        .map(|_| {
            let len = 8 + rng.below(13);
            let words: Vec<&str> = (0..len).map(|_| WORDS[rng.below(WORDS.len())]).collect();
            let mut s = words.join(" ");
            s.push('.');
            s
        })
        .collect()
}

/// `scan_collection` as `memdedup scan` runs it (the default embedder, loaded first) on
/// the same texts, against `ceiling`: the best rate of one session at any batch size.
fn bench_scan_path(runtime: &tokio::runtime::Runtime, dir: &ModelDir, texts: &[String], ceiling: f64) {
    let embedder = LocalEmbedder::with_options(dir.clone(), LocalOptions::default());
    embedder.load_blocking().expect("model loads");
    let items: Vec<CollectionItem> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| CollectionItem { id: i.into(), text: text.clone(), namespace: None })
        .collect();
    let options = ScanOptions::new(Threshold::new(0.85).expect("valid threshold"));
    let started = Instant::now();
    let report = runtime.block_on(scan_collection(&items, &embedder, options, &|_, _| {})).expect("scan");
    let rate = texts.len() as f64 / started.elapsed().as_secs_f64();
    black_box(report);
    println!(
        "  scan_collection, default embedder: {rate:.0} sentences/s, {:.0} % of the one-session ceiling ({ceiling:.0}/s)",
        100.0 * rate / ceiling
    );
}

fn bench_embedding() {
    let dir = match ModelDir::locate(None).and_then(|d| d.check().map(|_| d)) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("embedding benchmark needs the model: {e}");
            std::process::exit(1);
        }
    };
    let texts = sentences(2000, 11);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let env_usize = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    let tuned = LocalOptions {
        sessions: env_usize("MEMDEDUP_BENCH_SESSIONS"),
        threads: env_usize("MEMDEDUP_BENCH_THREADS"),
        ..LocalOptions::default()
    };
    println!("embedding: sessions {:?}, threads per session {:?} (None = default)", tuned.sessions, tuned.threads);
    let embedder = LocalEmbedder::with_options(dir.clone(), tuned);
    let started = Instant::now();
    embedder.load_blocking().expect("model loads");
    println!("embedding: model load {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
    // Warm up.
    runtime.block_on(embedder.embed(&texts[..64])).expect("embed");
    let mut ceiling: f64 = 0.0;
    for batch_size in [4, 8, 16, 32, 64] {
        let e = LocalEmbedder::with_options(dir.clone(), LocalOptions { batch_size, ..tuned });
        e.load_blocking().expect("model loads");
        let started = Instant::now();
        let out = runtime.block_on(e.embed(&texts)).expect("embed");
        let rate = texts.len() as f64 / started.elapsed().as_secs_f64();
        assert_eq!(out.len(), texts.len());
        println!("  2000 sentences of 8-20 words, batch {batch_size:>3}, sorted by length: {rate:.0} sentences/s");
        ceiling = ceiling.max(rate);
    }
    if tuned.sessions.is_none() && tuned.threads.is_none() {
        bench_scan_path(&runtime, &dir, &texts, ceiling);
    }
    let mut latencies = Vec::new();
    for text in texts.iter().take(300) {
        let started = Instant::now();
        black_box(runtime.block_on(embedder.embed_one(text)).expect("embed"));
        latencies.push(started.elapsed());
    }
    latencies.sort();
    let p = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3;
    println!("  single text (async embed_one): p50 {:.2} ms, p99 {:.2} ms", p(0.5), p(0.99));
    println!("  peak RSS {:.0} MiB", peak_rss_mib());
}
