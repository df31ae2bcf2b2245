//! Test embedders, playbook builders, log capture and environment control shared by the suite.

use std::collections::HashMap;
use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use async_trait::async_trait;
use memdedup::crates::embed::Error as EmbedError;
use memdedup::{
    CANONICAL_SECTIONS, DedupOutcome, Embedder, Embedding, Entry, EntryRef, Playbook, Threshold, deduplicate_playbook,
    run_deduplication_with,
};
use serde_json::{Map, Value, json};

/// Result type of [`Embedder::embed`].
pub type EmbedResult<T> = std::result::Result<T, EmbedError>;

// --- Embedders -------------------------------------------------------------------------

/// Maps each known text to a chosen vector; an unknown text is an inference error.
///
/// **Invariant:** every vector has the same, non-zero number of dimensions.
#[derive(Debug, Clone)]
pub struct FixedEmbedder {
    vectors: HashMap<String, Vec<f32>>,
    dims: usize,
}

impl FixedEmbedder {
    /// Model id the fixed embedder reports.
    pub const MODEL_ID: &'static str = "fixed-test-vectors";

    /// An embedder answering each text of `pairs` with its vector.
    pub fn new<T: Into<String>>(pairs: impl IntoIterator<Item = (T, Vec<f32>)>) -> Self {
        let vectors: HashMap<String, Vec<f32>> = pairs.into_iter().map(|(t, v)| (t.into(), v)).collect();
        let dims = vectors.values().next().map_or(1, Vec::len);
        assert!(
            vectors.values().all(|v| v.len() == dims && dims > 0),
            "fixed vectors must all have the same non-zero dimensions"
        );
        Self { vectors, dims }
    }

    /// An embedder whose `texts` have exactly the pairwise cosines of `gram`.
    pub fn with_cosines(texts: &[&str], gram: &[Vec<f64>]) -> Self {
        assert_eq!(texts.len(), gram.len(), "one row of cosines per text");
        Self::new(texts.iter().copied().zip(vectors_with_cosines(gram)))
    }

    /// An embedder for two texts at cosine `cosine`.
    pub fn pair(a: &str, b: &str, cosine: f64) -> Self {
        Self::with_cosines(&[a, b], &[vec![1.0, cosine], vec![cosine, 1.0]])
    }

    /// The embedding of a known text, as the embedder returns it.
    pub fn embedding(&self, text: &str) -> Embedding {
        let values = self.vectors.get(text).unwrap_or_else(|| panic!("no fixed vector for {text:?}"));
        Embedding::new(values.clone()).unwrap_or_else(|e| panic!("fixed vector for {text:?} is invalid: {e}"))
    }

    /// Cosine of two known texts, computed the way the grouping sees it (unit `f32`
    /// vectors).
    pub fn cosine(&self, a: &str, b: &str) -> f32 {
        self.embedding(a).cosine(&self.embedding(b)).unwrap_or_else(|e| panic!("cosine of {a:?} and {b:?}: {e}"))
    }
}

#[async_trait]
impl Embedder for FixedEmbedder {
    fn model_id(&self) -> &str {
        Self::MODEL_ID
    }

    fn dims(&self) -> usize {
        self.dims
    }

    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Embedding>> {
        texts
            .iter()
            .map(|text| {
                let values = self
                    .vectors
                    .get(text)
                    .ok_or_else(|| EmbedError::Inference(format!("no fixed vector for text {text:?}")))?;
                Ok(Embedding::new(values.clone())?)
            })
            .collect()
    }
}

/// Unit vectors whose pairwise dot products are exactly `gram` (a symmetric positive
/// definite matrix with ones on the diagonal): the rows of its Cholesky factor.
pub fn vectors_with_cosines(gram: &[Vec<f64>]) -> Vec<Vec<f32>> {
    let n = gram.len();
    let mut l = vec![vec![0.0f64; n]; n];
    for i in 0..n {
        assert_eq!(gram[i].len(), n, "the cosine matrix must be square");
        assert!((gram[i][i] - 1.0).abs() < 1e-12, "cosine of a text with itself must be 1");
        for j in 0..=i {
            assert!((gram[i][j] - gram[j][i]).abs() < 1e-12, "the cosine matrix must be symmetric");
            let dot: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let d = gram[i][i] - dot;
                assert!(d > 0.0, "these cosines are impossible together (matrix not positive definite)");
                l[i][i] = d.sqrt();
            } else {
                l[i][j] = (gram[i][j] - dot) / l[j][j];
            }
        }
    }
    l.into_iter().map(|row| row.into_iter().map(|x| x as f32).collect()).collect()
}

/// How many times an embedder was called, and with how many texts in all.
#[derive(Debug, Clone, Default)]
pub struct EmbedCalls {
    calls: Arc<AtomicUsize>,
    texts: Arc<AtomicUsize>,
}

impl EmbedCalls {
    /// Calls to `embed` so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Texts passed to `embed` so far.
    pub fn texts(&self) -> usize {
        self.texts.load(Ordering::SeqCst)
    }
}

/// Wraps an embedder and counts its calls; [`CountingEmbedder::calls`] keeps counting
/// after the embedder is moved into an `Arc<dyn Embedder>`.
pub struct CountingEmbedder {
    inner: Box<dyn Embedder>,
    calls: EmbedCalls,
}

impl CountingEmbedder {
    /// Counts the calls made to `inner`.
    pub fn new(inner: impl Embedder + 'static) -> Self {
        Self { inner: Box::new(inner), calls: EmbedCalls::default() }
    }

    /// A handle on the counters.
    pub fn calls(&self) -> EmbedCalls {
        self.calls.clone()
    }
}

#[async_trait]
impl Embedder for CountingEmbedder {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Embedding>> {
        self.calls.calls.fetch_add(1, Ordering::SeqCst);
        self.calls.texts.fetch_add(texts.len(), Ordering::SeqCst);
        self.inner.embed(texts).await
    }
}

/// Always fails with the error its factory makes.
pub struct FailingEmbedder {
    error: Box<dyn Fn() -> EmbedError + Send + Sync>,
}

impl FailingEmbedder {
    /// Fails with whatever `error` returns.
    pub fn new(error: impl Fn() -> EmbedError + Send + Sync + 'static) -> Self {
        Self { error: Box::new(error) }
    }

    /// Fails as if the model files were not installed.
    pub fn model_missing() -> Self {
        Self::new(|| EmbedError::ModelMissing { dir: "/nonexistent/model".into(), missing: "model.onnx".into() })
    }

    /// Fails as if inference broke (`RuntimeError` in the seed).
    pub fn inference(message: &'static str) -> Self {
        Self::new(move || EmbedError::Inference(message.to_owned()))
    }
}

#[async_trait]
impl Embedder for FailingEmbedder {
    fn model_id(&self) -> &str {
        "failing"
    }

    fn dims(&self) -> usize {
        3
    }

    async fn embed(&self, _texts: &[String]) -> EmbedResult<Vec<Embedding>> {
        Err((self.error)())
    }
}

/// Panics inside `embed`.
pub struct PanickingEmbedder;

/// The message [`PanickingEmbedder`] panics with.
pub const PANIC_MESSAGE: &str = "encode() blew up: tensor shape mismatch";

#[async_trait]
impl Embedder for PanickingEmbedder {
    fn model_id(&self) -> &str {
        "panicking"
    }

    fn dims(&self) -> usize {
        3
    }

    async fn embed(&self, _texts: &[String]) -> EmbedResult<Vec<Embedding>> {
        panic!("{PANIC_MESSAGE}")
    }
}

/// What a [`ScriptedEmbedder`] answers for a batch of texts.
type Script = dyn Fn(&[String]) -> EmbedResult<Vec<Embedding>> + Send + Sync;

/// Answers with whatever its script returns for the texts: for embedders that break
/// their contract (wrong count, mixed dimensions).
pub struct ScriptedEmbedder {
    script: Box<Script>,
}

impl ScriptedEmbedder {
    /// Answers every call with `script(texts)`.
    pub fn new(script: impl Fn(&[String]) -> EmbedResult<Vec<Embedding>> + Send + Sync + 'static) -> Self {
        Self { script: Box::new(script) }
    }
}

#[async_trait]
impl Embedder for ScriptedEmbedder {
    fn model_id(&self) -> &str {
        "scripted"
    }

    fn dims(&self) -> usize {
        3
    }

    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Embedding>> {
        (self.script)(texts)
    }
}

// --- Playbooks ---------------------------------------------------------------------------

/// One entry to put in a playbook: `(section, name, text, helpful, harmful)`.
pub type Row<'a> = (&'a str, &'a str, &'a str, u64, u64);

/// A playbook with `version`, `last_updated`, all five canonical sections (in canonical
/// order, empty unless `rows` fill them), then any other section named by `rows` in
/// order of first appearance. Entries keep `rows` order within their section.
pub fn playbook(rows: &[Row<'_>]) -> Playbook {
    let mut sections = Map::new();
    for name in CANONICAL_SECTIONS {
        sections.insert(name.to_owned(), Value::Array(Vec::new()));
    }
    for &(section, name, text, helpful, harmful) in rows {
        let list = sections.entry(section.to_owned()).or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = list {
            list.push(json!({"name": name, "text": text, "helpful": helpful, "harmful": harmful}));
        }
    }
    let doc = json!({
        "version": "1.0",
        "last_updated": "2024-01-01T00:00:00Z",
        "sections": Value::Object(sections),
    });
    Playbook::from_value(doc).unwrap_or_else(|e| panic!("test playbook must be valid: {e}"))
}

/// The entry called `name`, with its position.
pub fn find(playbook: &Playbook, name: &str) -> Option<(EntryRef, Entry)> {
    playbook.entries().into_iter().find(|(_, e)| e.name == name)
}

/// Names of all entries, in flat (canonical) order.
pub fn names(playbook: &Playbook) -> Vec<String> {
    playbook.entries().into_iter().map(|(_, e)| e.name).collect()
}

/// An entry as [`Playbook::entries`] reports it.
pub fn entry(name: &str, text: &str, helpful: u64, harmful: u64) -> Entry {
    Entry { name: name.to_owned(), text: text.to_owned(), helpful, harmful }
}

/// A valid threshold.
pub fn threshold(value: f64) -> Threshold {
    Threshold::new(value).unwrap_or_else(|e| panic!("threshold {value}: {e}"))
}

/// Deduplicates `input` through both entry points, [`run_deduplication_with`] (the
/// seed's never-fail contract) and [`deduplicate_playbook`] (with its report), checks
/// that they agree and that the input was not touched, and returns the rich outcome.
pub fn dedup_both(input: &Playbook, threshold_value: f64, embedder: FixedEmbedder) -> DedupOutcome {
    let untouched = input.clone();
    let simple = run_deduplication_with(input.clone(), Some(threshold_value), Arc::new(embedder.clone()));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a runtime: {e}"));
    let outcome = runtime
        .block_on(deduplicate_playbook(input, &embedder, threshold(threshold_value), &|_, _| {}))
        .unwrap_or_else(|e| panic!("deduplication failed: {e}"));
    assert_eq!(simple, outcome.playbook, "run_deduplication_with and deduplicate_playbook disagree");
    assert_eq!(*input, untouched, "the input playbook was modified");
    outcome
}

/// Drives a future to completion on the calling thread, without an async runtime.
///
/// Without a tokio runtime the facade groups on the calling thread, so inside a rayon
/// pool's `install` the grouping really runs on that pool. Only for futures that make
/// progress on every poll (like [`FixedEmbedder`]'s).
pub fn poll_to_completion<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}

// --- Logs --------------------------------------------------------------------------------

/// Serialises log captures: scoped subscribers on several threads at once can race in
/// `tracing`'s callsite interest cache.
static LOG_LOCK: Mutex<()> = Mutex::new(());

/// A `tracing` writer that records into a shared buffer.
#[derive(Debug, Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Runs `f` with a subscriber scoped to the calling thread and returns its result and the
/// events it logged at INFO and above, one per line, without colours.
pub fn capture_logs<R>(f: impl FnOnce() -> R) -> (R, String) {
    let _serial = LOG_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let buffer = LogBuffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(buffer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let logs = String::from_utf8_lossy(&buffer.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned();
    (out, logs)
}

// --- Environment -------------------------------------------------------------------------

/// Held by every test that reads or writes the process environment.
static ENV_LOCK: Mutex<()> = Mutex::new(());

/// Takes the environment lock without changing anything, for tests that only read it.
pub fn env_lock() -> MutexGuard<'static, ()> {
    ENV_LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Environment variables set (or removed) for the guard's lifetime, under [`env_lock`];
/// the previous values come back on drop, even when the test panics.
pub struct ScopedEnv {
    saved: Vec<(String, Option<OsString>)>,
    _lock: MutexGuard<'static, ()>,
}

impl ScopedEnv {
    /// Sets each `(name, Some(value))` and removes each `(name, None)`.
    pub fn set(vars: &[(&str, Option<&str>)]) -> Self {
        let lock = env_lock();
        let saved = vars.iter().map(|(name, _)| ((*name).to_owned(), std::env::var_os(name))).collect();
        for (name, value) in vars {
            set_var(name, value.map(OsString::from));
        }
        Self { saved, _lock: lock }
    }
}

impl Drop for ScopedEnv {
    fn drop(&mut self) {
        for (name, value) in self.saved.drain(..).rev() {
            set_var(&name, value);
        }
    }
}

/// Sets or removes one environment variable. Callers hold [`ENV_LOCK`].
#[allow(unsafe_code)]
fn set_var(name: &str, value: Option<OsString>) {
    // SAFETY: edition 2024 makes environment writes unsafe because another thread could
    // read the environment at the same time. In this test binary every test that reads
    // or writes the environment (threshold and model-dir resolution, model loading)
    // holds ENV_LOCK, which the only caller of this function holds too; the other tests
    // touch no environment variable.
    unsafe {
        match value {
            Some(value) => std::env::set_var(name, value),
            None => std::env::remove_var(name),
        }
    }
}
