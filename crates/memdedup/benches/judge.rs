//! The learned pair judge's cost per pair: `PairJudgeModel::scores` over candidate pairs
//! of real memory texts (`tests/fixtures/labelled/holdout.jsonl`, pairs of one namespace
//! whose cosine reaches the judge's candidate floor, as the judge is asked to read them),
//! all pairs in one call (what `scan` and `dedup` do) and one pair per call (what a
//! `check` with one close neighbour does), with 2 threads.
//!
//! Run with `cargo xtask bench` (or `cargo bench -p memdedup --bench judge`).
//! MEMDEDUP_BENCH_PAIRS=N changes the number of pairs (default 256).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use memdedup::{Embedder, LocalEmbedder, ModelDir, PairJudgeModel};
use support::{Lcg, cpu_model, list_env, peak_rss_mib};

const ROUNDS: usize = 5;

fn main() {
    let wanted = list_env("MEMDEDUP_BENCH_PAIRS", &[256])[0];
    let dir = ModelDir::locate(None).expect("model directory");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let pairs = runtime.block_on(candidate_pairs(dir.clone(), wanted));
    let started = Instant::now();
    let judge = PairJudgeModel::load(&dir, 2).expect("the pair judge loads (cargo xtask fetch-model)");
    judge.scores(&[("warm up", "the judge")]).expect("scores");
    let load = started.elapsed();
    let refs: Vec<(&str, &str)> = pairs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let per_pair = |d: Duration| d.as_secs_f64() * 1000.0 / refs.len() as f64;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut all_at_once = Vec::new();
    let mut one_by_one = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for pair in &refs {
            judge.scores(std::slice::from_ref(pair)).expect("scores");
        }
        one_by_one.push(per_pair(t.elapsed()));
        let t = Instant::now();
        let scores = judge.scores(&refs).expect("scores");
        all_at_once.push(per_pair(t.elapsed()));
        assert_eq!(scores.len(), refs.len());
    }
    let settings = judge.settings();
    println!(
        "pair judge ({} weights, max {} tokens), {} candidate pairs of holdout.jsonl (cosine >= {}), {ROUNDS} rounds, {}",
        settings.weights,
        settings.max_len,
        refs.len(),
        settings.candidate_floor,
        cpu_model()
    );
    println!("  load and first pair: {:.0} ms", load.as_secs_f64() * 1000.0);
    println!("  all pairs in one call: {:.2} ms per pair (median)", median(all_at_once));
    println!("  one pair per call:     {:.2} ms per pair (median)", median(one_by_one));
    println!("  peak RSS: {:.0} MiB (both models loaded)", peak_rss_mib());
}

/// Up to `wanted` pairs of texts of one namespace of holdout.jsonl whose cosine reaches
/// the judge's candidate floor, drawn with a fixed seed.
async fn candidate_pairs(dir: ModelDir, wanted: usize) -> Vec<(String, String)> {
    let floor = PairJudgeModel::read_settings(&dir).expect("the pair judge's settings").candidate_floor;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/labelled/holdout.jsonl");
    let mut rows: Vec<(String, String)> = std::fs::read_to_string(path)
        .expect("holdout.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            (v["namespace"].as_str().unwrap_or("").to_owned(), v["text"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    rows.sort();
    let embedder = Arc::new(LocalEmbedder::new(dir));
    let texts: Vec<String> = rows.iter().map(|(_, t)| t.clone()).collect();
    let vectors = embedder.embed(&texts).await.expect("the local model embeds (cargo xtask fetch-model)");
    let mut candidates = Vec::new();
    for i in 0..rows.len() {
        for j in i + 1..rows.len() {
            let cosine = vectors[i].cosine(&vectors[j]).expect("same dimensions");
            if rows[i].0 == rows[j].0 && cosine >= floor {
                candidates.push((rows[i].1.clone(), rows[j].1.clone()));
            }
        }
    }
    let mut rng = Lcg(13);
    let mut out = Vec::with_capacity(wanted);
    while out.len() < wanted && !candidates.is_empty() {
        let k = rng.below(candidates.len());
        out.push(candidates.swap_remove(k));
    }
    out
}
