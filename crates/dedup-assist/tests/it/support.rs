//! Stores on both backends, a deterministic embedder, judges on a fake LLM server, and
//! helpers to read a scope's whole state.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dedup_assist::{DedupOptions, Deduplicator, Judge, LlmJudge, RunReport};
use dedup_core::{
    ContentHash, Embedding, JudgeBatch, JudgeGroup, JudgeMode, JudgeResponse, MemoryStatus, normalize_content,
};
use dedup_embed::Embedder;
use dedup_llm::fake::{FakeLlm, FakeReply, FakeRequest};
use dedup_llm::{AnthropicChat, AnthropicChatConfig, OpenAiChat, OpenAiChatConfig};
use dedup_store::{
    DbLocation, Edge, InsertOutcome, ListFilter, Memory, MemoryId, NewMemory, Scope, Store, StoreOptions, StoredVector,
};
use rand::{Rng, SeedableRng};

/// Which database a test body runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A store for one test: a fresh SQLite file, or the shared disposable Postgres database
/// with a domain no other test uses.
pub struct TestStore {
    pub store: Arc<Store>,
    pub domain: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestStore {
    pub async fn open(backend: Backend) -> TestStore {
        let domain = format!("t{:016x}", rand::rng().random::<u64>());
        let (location, dir) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temporary directory");
                (DbLocation::Sqlite(dir.path().join("memory.db")), Some(dir))
            }
            Backend::Postgres => (DbLocation::Postgres(postgres_url()), None),
        };
        let store = Store::open(&location, &StoreOptions::default()).await.expect("the test database opens");
        TestStore { store: Arc::new(store), domain, _dir: dir }
    }

    pub fn scope(&self) -> Scope {
        Scope::new(&self.domain, "agent").expect("valid test scope")
    }

    /// Stores `text` (unverified) with its vector from `embedder`.
    pub async fn add(&self, embedder: &dyn Embedder, text: &str) -> MemoryId {
        self.add_memory(embedder, NewMemory::new(self.scope(), text).with_kind("lesson")).await
    }

    pub async fn add_memory(&self, embedder: &dyn Embedder, memory: NewMemory) -> MemoryId {
        let embedding = embedder.embed_one(&memory.content).await.expect("embeds");
        let vector = StoredVector { model: embedder.model_id().to_owned(), embedding };
        match self.store.insert_checked(memory, Some(vector), None).await.expect("inserts") {
            InsertOutcome::Inserted(id) => id,
            other => panic!("expected an insert, got {other:?}"),
        }
    }

    /// Marks memories verified, as an earlier run would have.
    pub async fn verify(&self, ids: &[MemoryId]) {
        let mut rows = Vec::new();
        for id in ids {
            let memory = self.store.get(*id).await.expect("reads").expect("exists");
            rows.push((memory.id, memory.content_hash));
        }
        self.store.mark_verified(&rows).await.expect("marks verified");
    }

    /// Every memory of the scope (live and deprecated) with its vector and edges.
    pub async fn state(&self, model: &str) -> ScopeState {
        let filter = ListFilter {
            domain: Some(self.domain.clone()),
            namespace: Some("agent".into()),
            include_deprecated: true,
            ..ListFilter::default()
        };
        let memories = self.store.list(&filter).await.expect("lists");
        let ids: Vec<MemoryId> = memories.iter().map(|m| m.id).collect();
        let vectors = self.store.vectors(model, &ids).await.expect("reads vectors");
        let mut edges = BTreeMap::new();
        for id in &ids {
            edges.insert(*id, self.store.edges_of(*id).await.expect("reads edges"));
        }
        ScopeState {
            memories: memories.into_iter().map(|m| (m.id, m)).collect(),
            vectors: vectors.into_iter().map(|(id, e)| (id, e.as_slice().to_vec())).collect(),
            edges,
        }
    }

    pub async fn live(&self) -> Vec<Memory> {
        let filter =
            ListFilter { domain: Some(self.domain.clone()), namespace: Some("agent".into()), ..ListFilter::default() };
        self.store.list(&filter).await.expect("lists")
    }

    /// The merges of this test's scope.
    pub async fn merges(&self) -> Vec<dedup_store::MergeRecord> {
        let filter = dedup_store::MergeFilter { domain: Some(self.domain.clone()), ..Default::default() };
        self.store.merges(&filter).await.expect("reads the ledger")
    }

    pub async fn get(&self, id: MemoryId) -> Memory {
        self.store.get(id).await.expect("reads").expect("exists")
    }
}

/// A scope's complete state, comparable with `==`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScopeState {
    pub memories: BTreeMap<MemoryId, Memory>,
    pub vectors: BTreeMap<MemoryId, Vec<f32>>,
    pub edges: BTreeMap<MemoryId, Vec<Edge>>,
}

pub fn postgres_url() -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "Postgres tests need a server: run them with `cargo xtask ci` (it starts a disposable one) or set DATABASE_URL"
        ),
    }
}

/// Runs one async test body against SQLite and against Postgres, as two tests.
#[macro_export]
macro_rules! backend_tests {
    ($(async fn $name:ident($db:ident) $body:block)*) => {
        mod sqlite {
            #[allow(unused_imports)]
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let $db = $crate::support::TestStore::open($crate::support::Backend::Sqlite).await;
                $body
            })*
        }
        mod postgres {
            #[allow(unused_imports)]
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let $db = $crate::support::TestStore::open($crate::support::Backend::Postgres).await;
                $body
            })*
        }
    };
}

/// Dimensions of [`TableEmbedder`] vectors.
pub const DIMS: usize = 64;

/// A deterministic embedder: a pseudo-random unit vector per normalised text (nearly
/// orthogonal to each other), except texts placed at a chosen cosine to another.
#[derive(Default)]
pub struct TableEmbedder {
    overrides: HashMap<String, Embedding>,
}

impl TableEmbedder {
    pub fn new() -> TableEmbedder {
        TableEmbedder::default()
    }

    /// Makes `text` embed at cosine `cosine` to `anchor` (which keeps its own vector).
    pub fn near(mut self, anchor: &str, text: &str, cosine: f32) -> TableEmbedder {
        let base = self.vector(anchor);
        let noise = random_vector(&format!("noise:{text}"));
        let along: f32 = base.as_slice().iter().zip(noise.as_slice()).map(|(a, b)| a * b).sum();
        let orth: Vec<f32> = noise.as_slice().iter().zip(base.as_slice()).map(|(n, b)| n - along * b).collect();
        let orth = Embedding::new(orth).expect("orthogonal part is non-zero");
        let sin = (1.0 - cosine * cosine).max(0.0).sqrt();
        let mixed: Vec<f32> = base.as_slice().iter().zip(orth.as_slice()).map(|(b, o)| cosine * b + sin * o).collect();
        self.overrides.insert(normalize_content(text), Embedding::new(mixed).expect("unit mix"));
        self
    }

    /// Makes `text` embed as the normalised weighted sum of its anchors' vectors.
    pub fn blend(mut self, text: &str, anchors: &[(&str, f32)]) -> TableEmbedder {
        let mut sum = vec![0.0f32; DIMS];
        for (anchor, weight) in anchors {
            for (s, v) in sum.iter_mut().zip(self.vector(anchor).as_slice()) {
                *s += weight * v;
            }
        }
        self.overrides.insert(normalize_content(text), Embedding::new(sum).expect("non-zero blend"));
        self
    }

    fn vector(&self, text: &str) -> Embedding {
        self.overrides.get(&normalize_content(text)).cloned().unwrap_or_else(|| random_vector(text))
    }
}

/// A unit vector determined by the normalised text.
pub fn random_vector(text: &str) -> Embedding {
    let digest = ContentHash::of(text);
    let seed = u64::from_str_radix(&digest.as_str()[..16], 16).expect("hex");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let values: Vec<f32> = (0..DIMS).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    Embedding::new(values).expect("random vector is non-zero")
}

#[async_trait]
impl Embedder for TableEmbedder {
    fn model_id(&self) -> &str {
        "table-64"
    }

    fn dims(&self) -> usize {
        DIMS
    }

    async fn embed(&self, texts: &[String]) -> dedup_embed::Result<Vec<Embedding>> {
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }
}

/// The local model; tests that need it fail with the fetch command when it is missing.
pub fn local_embedder() -> Arc<dyn Embedder> {
    let dir = dedup_embed::ModelDir::locate(None)
        .unwrap_or_else(|e| panic!("cannot locate the model cache ({e}); run `cargo xtask fetch-model` first"));
    if let Err(e) = dir.check() {
        panic!("this test needs the local model: {e}\nrun `cargo xtask fetch-model` first");
    }
    Arc::new(dedup_embed::LocalEmbedder::new(dir))
}

/// A judge on the fake server speaking the OpenAI wire format, with fast retries.
pub fn openai_judge(server: &FakeLlm) -> Arc<dyn Judge> {
    let mut config = OpenAiChatConfig::new(server.base_url(), "fake-model");
    config.api_key = Some("sk-test-secret-key".into());
    config.retry.initial_backoff = Duration::from_millis(5);
    config.retry.max_backoff = Duration::from_millis(20);
    config.retry.max_retries = 2;
    config.timeout = Duration::from_secs(5);
    Arc::new(LlmJudge::new(Arc::new(OpenAiChat::new(config).expect("valid config"))))
}

/// A judge on the fake server speaking the Anthropic wire format.
pub fn anthropic_judge(server: &FakeLlm) -> Arc<dyn Judge> {
    let mut config = AnthropicChatConfig::new("fake-haiku", "sk-ant-test-secret");
    config.base_url = server.base_url();
    config.retry.initial_backoff = Duration::from_millis(5);
    config.retry.max_backoff = Duration::from_millis(20);
    config.retry.max_retries = 2;
    Arc::new(LlmJudge::new(Arc::new(AnthropicChat::new(config).expect("valid config"))))
}

/// The batch a recorded request carried.
pub fn batch_of(request: &FakeRequest) -> JudgeBatch {
    serde_json::from_str(&request.user).expect("the user message is the batch payload")
}

/// Labelled texts: a judge that knows the truth. Texts with the same label are
/// duplicates; unlabelled texts duplicate nothing.
#[derive(Debug, Clone, Default)]
pub struct Truth {
    labels: HashMap<String, &'static str>,
    canonical: HashMap<&'static str, String>,
}

impl Truth {
    pub fn new() -> Truth {
        Truth::default()
    }

    /// A cluster: its canonical text (labelled too) and its members.
    pub fn cluster(mut self, label: &'static str, canonical: &str, members: &[&str]) -> Truth {
        self.canonical.insert(label, canonical.to_owned());
        self.labels.insert(normalize_content(canonical), label);
        for text in members {
            self.labels.insert(normalize_content(text), label);
        }
        self
    }

    pub fn label(&self, text: &str) -> Option<&'static str> {
        self.labels.get(&normalize_content(text)).copied()
    }

    /// The reply a correct judge gives to `batch`, following the mode's rules.
    pub fn answer(&self, batch: &JudgeBatch) -> JudgeResponse {
        let mut by_label: BTreeMap<&'static str, Vec<&dedup_core::JudgeMemory>> = BTreeMap::new();
        for memory in &batch.memories {
            if let Some(label) = self.label(&memory.text) {
                by_label.entry(label).or_default().push(memory);
            }
        }
        let mut groups = Vec::new();
        let mut grouped = Vec::new();
        for (label, members) in by_label {
            let has_unverified = members.iter().any(|m| m.status == MemoryStatus::Unverified);
            if members.len() < 2 || (batch.mode == JudgeMode::Incremental && !has_unverified) {
                continue;
            }
            grouped.extend(members.iter().map(|m| m.id));
            groups.push(JudgeGroup {
                ids: members.iter().map(|m| m.id).collect(),
                canonical_text: self.canonical[label].clone(),
                confidence: 0.95,
                reason: "Same rule, phrased differently.".into(),
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

    /// A fake server that answers like a correct judge.
    pub fn server(self) -> FakeLlm {
        let truth = Arc::new(self);
        FakeLlm::start(Arc::new(move |request: &FakeRequest| {
            let answer = truth.answer(&batch_of(request));
            FakeReply::text(serde_json::to_string(&answer).expect("serialises"))
        }))
    }
}

/// Runs a deduplicator with `options` and returns its report.
pub async fn run(
    db: &TestStore,
    embedder: Arc<dyn Embedder>,
    judge: Arc<dyn Judge>,
    options: DedupOptions,
) -> RunReport {
    Deduplicator::new(db.store.clone(), embedder, judge, options)
        .expect("valid options")
        .run(&db.scope())
        .await
        .expect("the run completes")
}
