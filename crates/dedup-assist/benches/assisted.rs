//! Assisted dedup at scale: one run over 10,000 synthetic memories (20 % in planted
//! conceptual clusters) with a judge on a fake LLM server that answers correctly after a
//! fixed 200 ms, for 1, 4 and 16 judge calls in flight.
//!
//! Run with `cargo xtask bench` (or `cargo bench -p dedup-assist --bench assisted`).
//! `MEMDEDUP_BENCH_MEMORIES=2000` and `MEMDEDUP_BENCH_IN_FLIGHT=1,4,16` change the size and
//! the settings; `MEMDEDUP_BENCH_JUDGE_MS=200` the judge's latency.
//!
//! The memories sit in 100 topics: members of a topic are at cosine about 0.56 to each
//! other (so every memory has candidates above the 0.50 floor, as in a real store where
//! lessons share a subject), and a planted cluster's paraphrases are at about 0.92 to its
//! first member. The store is built once (SQLite, vectors stored, all unverified) and
//! copied for each setting; each setting runs in a child process of its own so that its
//! peak resident memory is its own.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use dedup_assist::{DedupOptions, Deduplicator, LlmJudge};
use dedup_core::{Embedding, JudgeBatch, JudgeGroup, JudgeMode, JudgeResponse, MemoryStatus, normalize_content};
use dedup_embed::Embedder;
use dedup_llm::fake::{FakeLlm, FakeReply, FakeRequest};
use dedup_llm::{OpenAiChat, OpenAiChatConfig};
use dedup_store::{DbLocation, NewMemory, Scope, Store, StoreOptions, StoredVector};

const DIMS: usize = 384;
const TOPICS: usize = 100;
const CHILD_ENV: &str = "MEMDEDUP_BENCH_CHILD";

fn main() {
    let memories = env_usize("MEMDEDUP_BENCH_MEMORIES", 10_000);
    let judge_ms = env_usize("MEMDEDUP_BENCH_JUDGE_MS", 200) as u64;
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (db, in_flight) = spec.split_once('|').expect("child spec");
        child(Path::new(db), in_flight.parse().expect("in flight"), memories, judge_ms);
        return;
    }
    let settings: Vec<usize> = std::env::var("MEMDEDUP_BENCH_IN_FLIGHT")
        .ok()
        .map(|s| s.split(',').map(|n| n.trim().parse().expect("a number")).collect())
        .unwrap_or_else(|| vec![1, 4, 16]);
    let dir = tempfile::tempdir().expect("temporary directory");
    let template = dir.path().join("template.db");
    let started = Instant::now();
    let corpus = Corpus::new(memories);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(corpus.fill(&template));
    println!(
        "assisted dedup: {memories} memories ({} in {} planted clusters), {TOPICS} topics, judge latency {judge_ms} ms, SQLite; store built in {:.1} s",
        corpus.clustered(),
        corpus.clusters,
        started.elapsed().as_secs_f64()
    );
    println!(
        "{:>9}  {:>8}  {:>6}  {:>6}  {:>7}  {:>8}  {:>11}  {:>12}  {:>9}",
        "in flight", "wall s", "calls", "passes", "merged", "absorbed", "chars/mem", "verified end", "peak MiB"
    );
    for in_flight in settings {
        let db = dir.path().join(format!("run-{in_flight}.db"));
        std::fs::copy(&template, &db).expect("copy the store");
        let exe = std::env::current_exe().expect("bench binary");
        let out =
            Command::new(exe).env(CHILD_ENV, format!("{}|{in_flight}", db.display())).output().expect("run the child");
        if !out.status.success() {
            panic!("child failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// One setting's run, in its own process.
fn child(db: &Path, in_flight: usize, memories: usize, judge_ms: u64) {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let corpus = Corpus::new(memories);
        let store = Arc::new(
            Store::open(&DbLocation::Sqlite(db.to_path_buf()), &StoreOptions::default()).await.expect("store"),
        );
        let labels = Arc::new(corpus.labels());
        let delay = Duration::from_millis(judge_ms);
        let server = FakeLlm::start(Arc::new(move |request: &FakeRequest| {
            let batch: JudgeBatch = serde_json::from_str(&request.user).expect("payload");
            FakeReply::text(serde_json::to_string(&answer(&batch, &labels)).expect("json")).delay(delay)
        }));
        let mut config = OpenAiChatConfig::new(server.base_url(), "fake");
        config.timeout = Duration::from_secs(60);
        let judge = Arc::new(LlmJudge::new(Arc::new(OpenAiChat::new(config).expect("client"))));
        let embedder: Arc<dyn Embedder> = Arc::new(corpus.embedder());
        let options = DedupOptions { in_flight, ..DedupOptions::default() };
        let started = Instant::now();
        let report = Deduplicator::new(store.clone(), embedder, judge, options)
            .expect("options")
            .run(&Corpus::scope())
            .await
            .expect("run");
        let wall = started.elapsed().as_secs_f64();
        let counts = store.dedup_counts(&Corpus::scope()).await.expect("counts");
        println!(
            "{:>9}  {:>8.1}  {:>6}  {:>6}  {:>7}  {:>8}  {:>11.0}  {:>12}  {:>9.1}",
            in_flight,
            wall,
            report.judge_calls,
            report.passes.len(),
            report.merged,
            report.absorbed,
            report.chars_sent as f64 / report.processed.max(1) as f64,
            format!("{}/{}", counts.verified, counts.live),
            peak_rss_kib() as f64 / 1024.0
        );
    });
}

/// The judge's truth: memories with the same cluster label are duplicates.
fn answer(batch: &JudgeBatch, labels: &HashMap<String, usize>) -> JudgeResponse {
    let mut by_label: HashMap<usize, Vec<&dedup_core::JudgeMemory>> = HashMap::new();
    for m in &batch.memories {
        if let Some(&label) = labels.get(&normalize_content(&m.text)) {
            by_label.entry(label).or_default().push(m);
        }
    }
    let mut groups = Vec::new();
    let mut grouped = Vec::new();
    let mut clusters: Vec<_> = by_label.into_iter().collect();
    clusters.sort_by_key(|(label, _)| *label);
    for (_, members) in clusters {
        let unverified = members.iter().any(|m| m.status == MemoryStatus::Unverified);
        if members.len() < 2 || (batch.mode == JudgeMode::Incremental && !unverified) {
            continue;
        }
        let canonical = members.iter().min_by_key(|m| m.id).map(|m| m.text.clone()).unwrap_or_default();
        grouped.extend(members.iter().map(|m| m.id));
        groups.push(JudgeGroup {
            ids: members.iter().map(|m| m.id).collect(),
            canonical_text: canonical,
            confidence: 0.95,
            reason: "Same lesson.".into(),
        });
    }
    let no_match_ids = batch
        .memories
        .iter()
        .filter(|m| !grouped.contains(&m.id))
        .filter(|m| batch.mode == JudgeMode::Bootstrap || m.status == MemoryStatus::Unverified)
        .map(|m| m.id)
        .collect();
    JudgeResponse { groups, no_match_ids, notes: vec![], uncertain: vec![] }
}

/// The synthetic memories: texts, vectors and cluster labels, all from a fixed seed.
struct Corpus {
    texts: Vec<String>,
    vectors: Vec<Embedding>,
    labels: Vec<Option<usize>>,
    clusters: usize,
}

impl Corpus {
    fn scope() -> Scope {
        Scope::namespace("bench").expect("scope")
    }

    fn new(n: usize) -> Corpus {
        let mut rng = Lcg(2026);
        let topics: Vec<Vec<f32>> = (0..TOPICS).map(|_| rng.unit(DIMS)).collect();
        let mut texts = Vec::with_capacity(n);
        let mut vectors = Vec::with_capacity(n);
        let mut labels = Vec::with_capacity(n);
        let mut clusters = 0;
        let clustered_target = n / 5;
        let mut clustered = 0;
        while texts.len() < n {
            let topic = rng.below(TOPICS);
            let base = blend(&[(&topics[topic], 0.75), (&rng.unit(DIMS), 0.66)]);
            let size = if clustered < clustered_target { 2 + rng.below(4) } else { 1 };
            let size = size.min(n - texts.len());
            let label = (size > 1).then(|| {
                clusters += 1;
                clusters
            });
            for member in 0..size {
                let vector = if member == 0 { base.clone() } else { blend(&[(&base, 0.92), (&rng.unit(DIMS), 0.39)]) };
                texts.push(format!("{} lesson {} about {}", words(texts.len()), words(member), words(topic)));
                vectors.push(Embedding::new(vector).expect("unit"));
                labels.push(label);
            }
            if size > 1 {
                clustered += size;
            }
        }
        Corpus { texts, vectors, labels, clusters }
    }

    fn clustered(&self) -> usize {
        self.labels.iter().filter(|l| l.is_some()).count()
    }

    fn labels(&self) -> HashMap<String, usize> {
        self.texts.iter().zip(&self.labels).filter_map(|(t, l)| l.map(|l| (normalize_content(t), l))).collect()
    }

    fn embedder(&self) -> TableEmbedder {
        TableEmbedder {
            table: self.texts.iter().zip(&self.vectors).map(|(t, v)| (normalize_content(t), v.clone())).collect(),
        }
    }

    async fn fill(&self, path: &Path) {
        let store =
            Store::open(&DbLocation::Sqlite(path.to_path_buf()), &StoreOptions::default()).await.expect("store");
        for (text, vector) in self.texts.iter().zip(&self.vectors) {
            let memory = NewMemory::new(Corpus::scope(), text.clone()).with_kind("lesson");
            let vector = StoredVector { model: "synthetic-384".into(), embedding: vector.clone() };
            store.insert_checked(memory, Some(vector), None).await.expect("insert");
        }
        store.close().await;
    }
}

/// Digit-free words for an index, so that texts carry no numbers the specificity guard
/// would insist on.
fn words(mut n: usize) -> String {
    let mut out = String::new();
    loop {
        out.push((b'a' + (n % 26) as u8) as char);
        n /= 26;
        if n == 0 {
            break;
        }
    }
    out
}

fn blend(parts: &[(&Vec<f32>, f32)]) -> Vec<f32> {
    let mut sum = vec![0.0f32; DIMS];
    for (v, w) in parts {
        for (s, x) in sum.iter_mut().zip(v.iter()) {
            *s += w * x;
        }
    }
    let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
    sum.iter().map(|x| x / norm).collect()
}

/// A small deterministic generator (no dependency for the bench's data).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A random unit vector (components approximately normal by summing uniforms).
    fn unit(&mut self, dims: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dims)
            .map(|_| (0..4).map(|_| (self.next() as f64 / (1u64 << 53) as f64) as f32 - 0.5).sum::<f32>())
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm).collect()
    }
}

/// Texts to their planted vectors; anything else (never asked here) to a fixed vector.
struct TableEmbedder {
    table: HashMap<String, Embedding>,
}

#[async_trait]
impl Embedder for TableEmbedder {
    fn model_id(&self) -> &str {
        "synthetic-384"
    }

    fn dims(&self) -> usize {
        DIMS
    }

    async fn embed(&self, texts: &[String]) -> dedup_embed::Result<Vec<Embedding>> {
        Ok(texts
            .iter()
            .map(|t| {
                self.table.get(&normalize_content(t)).cloned().unwrap_or_else(|| {
                    let mut v = vec![0.0; DIMS];
                    v[0] = 1.0;
                    Embedding::new(v).expect("unit")
                })
            })
            .collect())
    }
}

/// Peak resident memory of this process (VmHWM), in KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}
