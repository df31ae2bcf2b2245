//! One inference session of the local model: the ONNX Runtime session, the tokenizer, and
//! mean pooling. Sessions start from an optimised copy of the graph cached in the model
//! directory, so that a new process does not redo ONNX Runtime's graph optimisations.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

use ort::environment::Environment;
use ort::session::builder::{GraphOptimizationLevel, PrepackedWeights, SessionBuilder};
use ort::session::{InMemorySession, Session, SessionInputValue, SessionOutputs};
use ort::value::Tensor;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::{Error, ModelDir, Result};

/// The embedding model's file and where its optimised graph is cached, in the model
/// directory; see [`optimized_graph_path`].
pub(super) const EMBEDDER_GRAPH: Graph = Graph { file: "model.onnx", cache_prefix: "model.optimized" };

/// A model file of the model directory and the name prefix of its cached optimised graph.
#[derive(Debug, Clone, Copy)]
pub(super) struct Graph {
    pub(super) file: &'static str,
    pub(super) cache_prefix: &'static str,
}

/// A session over a graph this process optimised (it owns its weights), or over the
/// cached graph's bytes (shared by every session of the process, never freed).
pub(super) enum GraphSession {
    Owned(Session),
    Cached(InMemorySession<'static>),
}

impl GraphSession {
    pub(super) fn session(&self) -> &Session {
        match self {
            GraphSession::Owned(session) => session,
            GraphSession::Cached(session) => session,
        }
    }

    pub(super) fn run<'s>(
        &'s mut self,
        inputs: Vec<(Cow<'s, str>, SessionInputValue<'s>)>,
    ) -> ort::Result<SessionOutputs<'s>> {
        match self {
            GraphSession::Owned(session) => session.run(inputs),
            GraphSession::Cached(session) => session.run(inputs),
        }
    }
}

/// The tokenizer and the session of one loaded model.
pub(super) struct Model {
    session: GraphSession,
    tokenizer: Tokenizer,
    token_type_ids: bool,
    dims: usize,
}

impl Model {
    /// Loads the model in `dir` with `threads` intra-op threads.
    /// With `prepack`, ONNX Runtime repacks the weight matrices for its kernels (faster
    /// inference, slower load); without, it reads them where they lie.
    pub(super) fn load(dir: &ModelDir, max_length: usize, threads: usize, prepack: bool) -> Result<Model> {
        dir.check()?;
        let corrupt = |reason: String| Error::ModelCorrupt { dir: dir.path().to_path_buf(), reason };
        let started = Instant::now();
        // The tokenizer parses its JSON while ONNX Runtime starts and loads the graph.
        let (tokenizer, session) = std::thread::scope(|scope| {
            let tokenizer = scope.spawn(|| load_tokenizer(dir, max_length));
            let session = environment(dir)
                .and_then(|env| open_session(dir, EMBEDDER_GRAPH, &env, Tuning { threads, prepack }).map_err(corrupt));
            let tokenizer = tokenizer.join().unwrap_or_else(|_| Err(corrupt("the tokenizer loader panicked".into())));
            (tokenizer, session)
        });
        let (tokenizer, (session, source)) = (tokenizer?, session?);
        let inputs = session.session().inputs();
        let token_type_ids = inputs.iter().any(|input| input.name() == "token_type_ids");
        for name in ["input_ids", "attention_mask"] {
            if !inputs.iter().any(|input| input.name() == name) {
                return Err(corrupt(format!("model.onnx has no `{name}` input")));
            }
        }
        if session.session().outputs().is_empty() {
            return Err(corrupt("model.onnx has no output".into()));
        }
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            threads,
            prepack,
            source = %source,
            dir = %dir.path().display(),
            "loaded local embedding model"
        );
        Ok(Model { session, tokenizer, token_type_ids, dims: super::LOCAL_DIMS })
    }

    /// The tokenizer (truncating at the window length, padding to the longest text).
    pub(super) fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Mean-pooled token vectors of `texts` (one batch), not yet normalised.
    pub(super) fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inference = |e: &dyn std::fmt::Display| Error::Inference(e.to_string());
        let encodings = self.tokenizer.encode_batch(texts.to_vec(), true).map_err(|e| inference(&e))?;
        let batch = encodings.len();
        let len = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids = Vec::with_capacity(batch * len);
        let mut mask = Vec::with_capacity(batch * len);
        let mut types = Vec::with_capacity(batch * len);
        for encoding in &encodings {
            if encoding.get_ids().len() != len {
                return Err(Error::Inference("the tokenizer returned rows of different lengths".into()));
            }
            ids.extend(encoding.get_ids().iter().map(|&id| i64::from(id)));
            mask.extend(encoding.get_attention_mask().iter().map(|&m| i64::from(m)));
            types.extend(encoding.get_type_ids().iter().map(|&t| i64::from(t)));
        }
        let shape = [batch as i64, len as i64];
        let tensor = |values: Vec<i64>| Tensor::from_array((shape, values)).map_err(|e| inference(&e));
        let mut inputs = ort::inputs!["input_ids" => tensor(ids)?, "attention_mask" => tensor(mask.clone())?];
        if self.token_type_ids {
            inputs.push(("token_type_ids".into(), tensor(types)?.into()));
        }
        let outputs = self.session.run(inputs).map_err(|e| inference(&e))?;
        let (out_shape, values) = outputs[0].try_extract_tensor::<f32>().map_err(|e| inference(&e))?;
        let dims = self.dims;
        if out_shape.len() != 3
            || out_shape[0] != batch as i64
            || out_shape[1] != len as i64
            || out_shape[2] != dims as i64
        {
            return Err(Error::Inference(format!(
                "the model returned shape {:?}, expected [{batch}, {len}, {dims}]",
                &out_shape[..]
            )));
        }
        // Mean over the tokens the attention mask keeps (sentence-transformers' pooling).
        let mut out = Vec::with_capacity(batch);
        for row in 0..batch {
            let mut sum = vec![0.0f32; dims];
            let mut count = 0.0f32;
            for token in 0..len {
                if mask[row * len + token] == 0 {
                    continue;
                }
                count += 1.0;
                let at = (row * len + token) * dims;
                for (acc, value) in sum.iter_mut().zip(&values[at..at + dims]) {
                    *acc += value;
                }
            }
            let count = if count == 0.0 { 1.0 } else { count };
            sum.iter_mut().for_each(|v| *v /= count);
            out.push(sum);
        }
        Ok(out)
    }
}

/// The process's ONNX Runtime environment, loading the runtime library of `dir` the first
/// time (one runtime per process: later directories share it).
pub(super) fn environment(dir: &ModelDir) -> Result<Environment> {
    static ENVIRONMENT: OnceLock<std::result::Result<Environment, String>> = OnceLock::new();
    let runtime = dir.runtime_library();
    let built = ENVIRONMENT.get_or_init(|| {
        let builder = ort::init_from(&runtime).map_err(|e| format!("cannot load {}: {e}", runtime.display()))?;
        builder.with_name("memdedup").build().map_err(|e| format!("cannot start ONNX Runtime: {e}"))
    });
    built.clone().map_err(|reason| Error::ModelCorrupt { dir: dir.path().to_path_buf(), reason })
}

/// Reads the tokenizer files: WordPiece with the model's padding token, truncating at
/// `max_length` (at most the model's own limit) and padding a batch to its longest text.
fn load_tokenizer(dir: &ModelDir, max_length: usize) -> Result<Tokenizer> {
    let corrupt = |reason: String| Error::ModelCorrupt { dir: dir.path().to_path_buf(), reason };
    let json = |name: &str| -> Result<serde_json::Value> {
        let bytes = std::fs::read(dir.file(name)).map_err(|e| corrupt(format!("cannot read {name}: {e}")))?;
        serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("{name} is not valid JSON: {e}")))
    };
    let config = json("config.json")?;
    let tokenizer_config = json("tokenizer_config.json")?;
    let mut tokenizer = read_tokenizer(dir).map_err(|e| corrupt(format!("cannot read tokenizer.json: {e}")))?;
    let model_max = tokenizer_config["model_max_length"].as_f64().unwrap_or(f64::MAX);
    let max_length = if model_max < max_length as f64 { model_max as usize } else { max_length };
    let pad_token = tokenizer_config["pad_token"]
        .as_str()
        .or_else(|| tokenizer_config["pad_token"]["content"].as_str())
        .unwrap_or("[PAD]")
        .to_owned();
    let pad_id = config["pad_token_id"]
        .as_u64()
        .and_then(|id| u32::try_from(id).ok())
        .or_else(|| tokenizer.token_to_id(&pad_token))
        .unwrap_or(0);
    tokenizer.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::BatchLongest,
        pad_token,
        pad_id,
        ..PaddingParams::default()
    }));
    tokenizer
        .with_truncation(Some(TruncationParams { max_length, ..TruncationParams::default() }))
        .map_err(|e| corrupt(format!("tokenizer: {e}")))?;
    Ok(tokenizer)
}

/// `tokenizer.json` of `dir` as parsed, before any padding or truncation is set: read once
/// per process and cloned for each user (the embedder and the pair judge's models share
/// the WordPiece vocabulary; parsing it is tens of milliseconds of a cold `check`).
pub(super) fn read_tokenizer(dir: &ModelDir) -> std::result::Result<Tokenizer, String> {
    static READ: OnceLock<Mutex<HashMap<PathBuf, Tokenizer>>> = OnceLock::new();
    let path = dir.file("tokenizer.json");
    let mut read = READ.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(tokenizer) = read.get(&path) {
        return Ok(tokenizer.clone());
    }
    let tokenizer = Tokenizer::from_file(&path).map_err(|e| e.to_string())?;
    read.insert(path, tokenizer.clone());
    Ok(tokenizer)
}

/// How a session runs: intra-op threads, and whether weights are prepacked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tuning {
    pub(super) threads: usize,
    pub(super) prepack: bool,
}

/// A session for the model `graph` of `dir`: from the cached optimised graph when there is
/// one (no optimisation pass, no parsing: ONNX Runtime reads the weights in place from the
/// cached bytes, which every session of the process shares), else from the model file,
/// optimising it and caching the result for the next process. The embedder and the pair
/// judge's models each have their own cache.
///
/// The cache is in ONNX Runtime's own format and holds its *extended* optimisations
/// (constant folding, which turns the int8 weights into the `f32` matrices the kernels
/// use, and operator fusions); these depend on the model and the runtime version, not on
/// the CPU. A cache that cannot be written (a read-only model directory) only costs the
/// next process the optimisation pass; one that cannot be read is rebuilt.
///
/// Also returns where the graph came from, for the debug log.
pub(super) fn open_session(
    dir: &ModelDir,
    graph: Graph,
    environment: &Environment,
    tuning: Tuning,
) -> std::result::Result<(GraphSession, &'static str), String> {
    let cached = optimized_graph_path(dir, graph);
    if let Some(cached) = cached.as_deref().filter(|p| p.is_file()) {
        let session = cached_bytes(cached).and_then(|bytes| {
            builder(environment, tuning)?
                .with_optimization_level(GraphOptimizationLevel::Disable)
                .map_err(|e| e.to_string())?
                .commit_from_memory_directly(bytes)
                .map_err(|e| e.to_string())
        });
        match session {
            Ok(session) => return Ok((GraphSession::Cached(session), "cached optimised graph")),
            Err(e) => {
                tracing::warn!(path = %cached.display(), error = %e, "the cached optimised model is unusable; rebuilding it");
                forget_cached_bytes(cached);
                let _ = std::fs::remove_file(cached);
            }
        }
    }
    let original = dir.file(graph.file);
    let optimise = |staging: Option<&Path>| -> std::result::Result<Session, String> {
        let mut b = builder(environment, tuning)?
            .with_optimization_level(GraphOptimizationLevel::Level2)
            .map_err(|e| e.to_string())?;
        if let Some(staging) = staging {
            b = b
                .with_optimized_model_path(staging)
                .map_err(|e| e.to_string())?
                .with_config_entry("session.save_model_format", "ORT")
                .map_err(|e| e.to_string())?;
        }
        b.commit_from_file(&original).map_err(|e| e.to_string())
    };
    // A staging file of this process and call (sessions may load on several threads at
    // once), created first so that a read-only directory is noticed before ONNX Runtime
    // fails on it.
    static STAGED: AtomicUsize = AtomicUsize::new(0);
    let staging = cached
        .as_deref()
        .map(|c| {
            let n = STAGED.fetch_add(1, Ordering::Relaxed);
            c.with_extension(format!("{}-{n}.tmp", std::process::id()))
        })
        .filter(|staging| std::fs::File::create(staging).is_ok());
    let (session, staging) = match (optimise(staging.as_deref()), staging) {
        (Ok(session), staging) => (session, staging),
        (Err(_), Some(staging)) => {
            let _ = std::fs::remove_file(&staging);
            (optimise(None).map_err(|e| format!("cannot load {}: {e}", graph.file))?, None)
        }
        (Err(e), None) => return Err(format!("cannot load {}: {e}", graph.file)),
    };
    let mut source = "the model file, optimised now";
    if let (Some(staging), Some(cached)) = (staging, cached) {
        // Renaming is atomic: a concurrent process sees either no cache or a whole one.
        match std::fs::rename(&staging, &cached) {
            Ok(()) => {
                source = "the model file, optimised now and cached";
                remove_stale_graphs(dir, graph, &cached);
            }
            Err(e) => {
                tracing::debug!(path = %cached.display(), error = %e, "cannot cache the optimised model");
                let _ = std::fs::remove_file(&staging);
            }
        }
    }
    Ok((GraphSession::Owned(session), source))
}

/// Deletes cached graphs of an earlier version of `graph`'s file or of the runtime (each
/// is 90 MB).
fn remove_stale_graphs(dir: &ModelDir, graph: Graph, current: &Path) {
    let Ok(entries) = std::fs::read_dir(dir.path()) else { return };
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let stale = path != current
            && path.extension().is_some_and(|e| e == "ort" || e == "onnx")
            && path.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{}-", graph.cache_prefix)));
        if stale {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The bytes of the cached graph at `path`, mapped once per process and kept for its
/// life: sessions over them read their weights in place, so they must outlive every
/// session, and sessions live as long as the process.
///
/// Mapped rather than read: reading the 90 MB copied it into fresh memory, page fault by
/// page fault, which was a third of a cold `check`; a mapping shares the page cache's copy.
#[allow(unsafe_code)]
fn cached_bytes(path: &Path) -> std::result::Result<&'static [u8], String> {
    let mut graphs = cached_graphs().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(bytes) = graphs.get(path) {
        return Ok(bytes);
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    // SAFETY: the mapping is read-only and private. memdedup never writes a cached graph in
    // place: it is written under another name and renamed over (`open_session`), or
    // unlinked (`remove_stale_graphs`), and either leaves this mapping's file intact. Only
    // another program truncating the file in place could invalidate the pages (SIGBUS);
    // the cache directory is memdedup's own.
    let map = unsafe { memmap2::MmapOptions::new().populate().map_copy_read_only(&file) }
        .map_err(|e| format!("cannot map: {e}"))?;
    let bytes: &'static [u8] = Box::leak(Box::new(map));
    graphs.insert(path.to_path_buf(), bytes);
    Ok(bytes)
}

/// Stops handing out the bytes read from `path` (they stay allocated: a session may use
/// them).
fn forget_cached_bytes(path: &Path) {
    cached_graphs().lock().unwrap_or_else(PoisonError::into_inner).remove(path);
}

fn cached_graphs() -> &'static Mutex<HashMap<PathBuf, &'static [u8]>> {
    static GRAPHS: OnceLock<Mutex<HashMap<PathBuf, &'static [u8]>>> = OnceLock::new();
    GRAPHS.get_or_init(Default::default)
}

/// A session builder with `tuning`'s intra-op threads. Prepacked weights are shared with
/// the process's other sessions: a second session of the same model then adds its
/// activations, not another copy of every matrix.
fn builder(environment: &Environment, tuning: Tuning) -> std::result::Result<SessionBuilder, String> {
    static PREPACKED: OnceLock<PrepackedWeights> = OnceLock::new();
    // Idle intra-op threads sleep instead of spinning: no slower on an idle machine, and
    // on a busy one (a build beside a scan) spinning threads steal the cores they wait for.
    let text = |e: ort::Error<SessionBuilder>| e.to_string();
    let builder = Session::builder(environment)
        .map_err(|e| e.to_string())?
        .with_intra_threads(tuning.threads)
        .map_err(text)?
        .with_intra_op_spinning(false)
        .map_err(text)?;
    if tuning.prepack {
        builder.with_prepacked_weights(PREPACKED.get_or_init(PrepackedWeights::new)).map_err(text)
    } else {
        builder.with_prepacking(false).map_err(text)
    }
}

/// `<prefix>-<key>.ort` in the model directory (`model.optimized-<key>.ort` for the
/// embedder), where the key changes with the model file (size and modification time) and
/// the runtime library's file name (its version); `None` when the model file cannot be
/// inspected.
pub(super) fn optimized_graph_path(dir: &ModelDir, graph: Graph) -> Option<PathBuf> {
    use sha2::{Digest, Sha256};
    let meta = std::fs::metadata(dir.file(graph.file)).ok()?;
    let modified = meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
    let runtime = dir.runtime_library();
    let runtime = runtime.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut hasher = Sha256::new();
    hasher.update(format!("{}:{}:{}:level2-ort", meta.len(), modified.as_nanos(), runtime));
    let key: String = hasher.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    Some(dir.path().join(format!("{}-{key}.ort", graph.cache_prefix)))
}
