//! What the benchmarks share: a deterministic generator and machine facts.

#![allow(dead_code)]

use std::time::Duration;

/// A small deterministic generator (PCG-style LCG).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }

    /// Uniform in [-0.5, 0.5).
    pub fn unit(&mut self) -> f32 {
        self.next_u32() as f32 / (1u64 << 31) as f32 - 0.5
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        self.next_u32() as usize % n
    }
}

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Peak resident set size of this process so far, in MiB (Linux).
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Words of the synthetic memory sentences.
const WORDS: &[&str] = &[
    "always",
    "never",
    "run",
    "tests",
    "before",
    "commit",
    "database",
    "migration",
    "cache",
    "retry",
    "timeout",
    "deploy",
    "review",
    "lock",
    "index",
    "query",
    "schema",
    "token",
    "budget",
    "prompt",
    "agent",
    "memory",
    "config",
    "logging",
    "metrics",
    "error",
    "handler",
    "service",
    "client",
    "server",
    "release",
    "branch",
    "rollback",
    "backup",
    "secret",
    "vault",
    "queue",
    "worker",
    "batch",
    "stream",
    "latency",
    "throughput",
    "user",
    "session",
];

/// A sentence of 12 to 20 words.
pub fn sentence(rng: &mut Lcg) -> String {
    let len = 12 + rng.below(9);
    let words: Vec<&str> = (0..len).map(|_| WORDS[rng.below(WORDS.len())]).collect();
    format!("{}.", words.join(" "))
}

/// A comma-separated list of numbers from the environment variable `name`, or `default`.
pub fn list_env(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// The `p` quantile (0..=1) of `samples`, sorting them.
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index.min(samples.len() - 1)]
}

/// Stores `n` memories made by `make(i, sentence)`, each with a random unit vector
/// under `embedder`'s model id (so every search of that model in their scope scans them
/// all), one insert at a time. Returns how long it took.
pub async fn fill_synthetic(
    store: &memdedup::Store,
    embedder: &dyn memdedup::Embedder,
    n: usize,
    rng: &mut Lcg,
    make: impl Fn(usize, String) -> memdedup::NewMemory,
) -> Duration {
    let started = std::time::Instant::now();
    for i in 0..n {
        let vector: Vec<f32> = (0..embedder.dims()).map(|_| rng.unit()).collect();
        let memory = make(i, sentence(rng));
        let vector = memdedup::crates::store::StoredVector {
            model: embedder.model_id().to_owned(),
            embedding: memdedup::Embedding::new(vector).expect("random vector"),
        };
        store.insert_checked(memory, Some(vector), None).await.expect("insert");
    }
    started.elapsed()
}
