//! Benchmark of `VectorIndex`: insert time, memory and `top_k(k = 5)` latency at 384
//! dimensions, against a brute-force `f32` scan on one thread and on rayon.
//!
//! `cargo bench -p dedup-store --bench index`; `MEMDEDUP_BENCH_SIZES=1000,10000` limits
//! the sizes (default 1000, 10000, 100000).

use std::time::{Duration, Instant};

use dedup_core::Embedding;
use dedup_store::{MemoryId, VectorIndex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

const DIMS: usize = 384;
const K: usize = 5;
const QUERIES: usize = 200;

fn main() {
    let sizes: Vec<usize> = match std::env::var("MEMDEDUP_BENCH_SIZES") {
        Ok(list) => {
            list.split(',').map(|s| s.trim().parse().expect("MEMDEDUP_BENCH_SIZES: comma-separated counts")).collect()
        }
        Err(_) => vec![1_000, 10_000, 100_000],
    };
    println!(
        "VectorIndex, {DIMS} dims, top_k(k = {K}), {QUERIES} queries, {} rayon threads",
        rayon::current_num_threads()
    );
    println!("  isotropic: random unit vectors (unrelated cosine ~0 ± 0.05)");
    println!("  shared:    a common direction plus noise (unrelated cosine ~0.35, like sentence embeddings)");
    println!("  near queries are a stored vector plus noise (cosine ~0.95); far queries are fresh vectors");
    println!("  index: hot = searches back to back (p50/p99), hot 1t = the same on one thread (p50),");
    println!("         cold = each search right after the two f32 scans (p50)");
    println!("  f32: brute-force scan on one thread (p50/p99) and on rayon (p50); times in ms");
    println!();
    println!(
        "{:>7} {:<9} {:>7} {:>7} {:<5} {:>13} {:>8} {:>8} {:>13} {:>9}",
        "n", "data", "insert", "memory", "query", "hot p50/p99", "hot 1t", "cold", "f32 p50/p99", "f32 ray"
    );
    for &n in &sizes {
        for data in [Data::Isotropic, Data::Shared] {
            run(n, data);
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Data {
    Isotropic,
    Shared,
}

fn run(n: usize, data: Data) {
    let mut rng = StdRng::seed_from_u64(0x5eed ^ n as u64);
    let mean: Vec<f32> = unit(&mut rng);
    let sample = |rng: &mut StdRng| match data {
        Data::Isotropic => unit(rng),
        Data::Shared => normalise(mean.iter().zip(unit(rng)).map(|(m, x)| 0.6 * m + 0.8 * x).collect()),
    };
    let vectors: Vec<Embedding> = (0..n).map(|_| Embedding::new(sample(&mut rng)).expect("unit vector")).collect();

    let start = Instant::now();
    let mut index = VectorIndex::new(DIMS);
    index.reserve(n);
    for (j, e) in vectors.iter().enumerate() {
        index.upsert(MemoryId::new(j as i64), e).expect("dims match");
    }
    let insert = start.elapsed();
    let flat: Vec<f32> = vectors.iter().flat_map(|e| e.as_slice().iter().copied()).collect();

    let near: Vec<Embedding> = (0..QUERIES)
        .map(|_| {
            let base = vectors[rng.random_range(0..n)].as_slice();
            let noise = unit(&mut rng);
            Embedding::new(base.iter().zip(noise).map(|(b, x)| b + 0.3 * x).collect()).expect("finite")
        })
        .collect();
    let far: Vec<Embedding> = (0..QUERIES).map(|_| Embedding::new(sample(&mut rng)).expect("unit vector")).collect();

    for (name, queries) in [("near", &near), ("far", &far)] {
        // Hot: searches back to back, as a store serving one scope does.
        for query in queries.iter().take(5) {
            std::hint::black_box(index.top_k(query, K, None).expect("dims match"));
        }
        let mut hot = Vec::new();
        for query in queries {
            let start = Instant::now();
            std::hint::black_box(index.top_k(query, K, None).expect("dims match"));
            hot.push(start.elapsed());
        }
        // The same on one thread, for the parallel speed-up.
        let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("thread pool");
        let mut hot_1t = Vec::new();
        one_thread.install(|| {
            for query in queries {
                let start = Instant::now();
                std::hint::black_box(index.top_k(query, K, None).expect("dims match"));
                hot_1t.push(start.elapsed());
            }
        });
        // Cold: each search right after two f32 scans that push the codes out of cache.
        let (mut cold, mut single_times, mut rayon_times) = (Vec::new(), Vec::new(), Vec::new());
        for query in queries {
            let start = Instant::now();
            let hits = std::hint::black_box(index.top_k(query, K, None).expect("dims match"));
            cold.push(start.elapsed());

            let start = Instant::now();
            let single = std::hint::black_box(scan_single(&flat, query.as_slice()));
            single_times.push(start.elapsed());

            let start = Instant::now();
            let parallel = std::hint::black_box(scan_rayon(&flat, query.as_slice()));
            rayon_times.push(start.elapsed());

            let ids: Vec<usize> = hits.iter().map(|h| h.id.get() as usize).collect();
            assert_eq!(ids, single.iter().map(|&(j, _)| j).collect::<Vec<_>>(), "index disagrees with the f32 scan");
            assert_eq!(ids, parallel.iter().map(|&(j, _)| j).collect::<Vec<_>>(), "rayon scan disagrees");
        }
        let (insert_cell, memory) = if name == "near" {
            (format!("{:.0} ms", ms(insert)), format!("{:.0} MB", index.memory_bytes() as f64 / 1e6))
        } else {
            (String::new(), String::new())
        };
        println!(
            "{n:>7} {:<9} {insert_cell:>7} {memory:>7} {name:<5} {:>13} {:>8} {:>8} {:>13} {:>9}",
            format!("{data:?}").to_lowercase(),
            p50_p99(&mut hot),
            format!("{:.2}", ms(percentile(&mut hot_1t, 0.5))),
            format!("{:.2}", ms(percentile(&mut cold, 0.5))),
            p50_p99(&mut single_times),
            format!("{:.2}", ms(percentile(&mut rayon_times, 0.5))),
        );
    }
}

/// The top `K` of one contiguous `f32` scan, score descending then position ascending.
fn scan_single(flat: &[f32], query: &[f32]) -> Vec<(usize, f32)> {
    top(flat.chunks_exact(DIMS).enumerate().map(|(j, row)| (j, dot(row, query))))
}

/// The same scan over rayon chunks of 4096 rows, merged.
fn scan_rayon(flat: &[f32], query: &[f32]) -> Vec<(usize, f32)> {
    const ROWS: usize = 4096;
    let parts: Vec<Vec<(usize, f32)>> = flat
        .par_chunks(ROWS * DIMS)
        .enumerate()
        .map(|(c, chunk)| top(chunk.chunks_exact(DIMS).enumerate().map(|(j, row)| (c * ROWS + j, dot(row, query)))))
        .collect();
    top(parts.into_iter().flatten())
}

fn top(scores: impl Iterator<Item = (usize, f32)>) -> Vec<(usize, f32)> {
    let mut best: Vec<(usize, f32)> = Vec::with_capacity(K + 1);
    for (j, s) in scores {
        if best.len() < K || better((j, s), best[best.len() - 1]) {
            let at = best.partition_point(|&b| better(b, (j, s)));
            best.insert(at, (j, s));
            best.truncate(K);
        }
    }
    best
}

fn better(a: (usize, f32), b: (usize, f32)) -> bool {
    a.1 > b.1 || (a.1 == b.1 && a.0 < b.0)
}

/// Eight-lane `f32` dot product, as the index scores.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    for (a, b) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for lane in 0..8 {
            acc[lane] += a[lane] * b[lane];
        }
    }
    acc.iter().fold(0.0, |sum, &lane| sum + lane)
}

fn unit(rng: &mut StdRng) -> Vec<f32> {
    // Box–Muller: Gaussian components give directions uniform on the sphere.
    let gaussian = (0..DIMS / 2).flat_map(|_| {
        let (u, v): (f64, f64) = (rng.random::<f64>().max(f64::MIN_POSITIVE), rng.random());
        let r = (-2.0 * u.ln()).sqrt();
        let t = std::f64::consts::TAU * v;
        [(r * t.cos()) as f32, (r * t.sin()) as f32]
    });
    normalise(gaussian.collect())
}

fn normalise(v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    v.into_iter().map(|x| (f64::from(x) / norm) as f32).collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    times[((times.len() - 1) as f64 * p).round() as usize]
}

fn p50_p99(times: &mut [Duration]) -> String {
    format!("{:.2}/{:.2}", ms(percentile(times, 0.5)), ms(percentile(times, 0.99)))
}
