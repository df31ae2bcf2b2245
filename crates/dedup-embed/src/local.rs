//! [`LocalEmbedder`]: all-MiniLM-L6-v2 (int8 weights) run offline through ONNX Runtime.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use fastembed::{
    InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel,
};

use crate::{Embedder, Embedding, Error, ModelDir, Result};

/// Model id reported by [`LocalEmbedder`], and the key of its cached vectors.
pub const LOCAL_MODEL_ID: &str = "all-MiniLM-L6-v2-int8";
const LOCAL_DIMS: usize = 384;

/// Tuning for [`LocalEmbedder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalOptions {
    /// Texts per inference call (default 64).
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads (default: all available cores).
    pub threads: Option<usize>,
    /// Token limit per text; longer texts are truncated (default 256, the length the
    /// model was trained with).
    pub max_length: usize,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self { batch_size: 64, threads: None, max_length: 256 }
    }
}

type LoadedModel = std::result::Result<Mutex<TextEmbedding>, Error>;

/// One lazily loaded model per model directory, shared by every [`LocalEmbedder`] in the
/// process, so the model is loaded at most once (FM-ACE-006).
fn shared_cell(dir: &ModelDir) -> Arc<OnceLock<LoadedModel>> {
    static CELLS: OnceLock<Mutex<HashMap<PathBuf, Arc<OnceLock<LoadedModel>>>>> = OnceLock::new();
    let cells = CELLS.get_or_init(Default::default);
    let mut cells = cells.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    cells.entry(dir.path().to_path_buf()).or_default().clone()
}

/// Embeds texts with all-MiniLM-L6-v2 (384 dims, mean pooling, L2 normalised) from the
/// local model cache, with no network access.
///
/// Construction is cheap and never fails; the model is loaded on first use, once per
/// process and model directory, on a blocking thread. A missing or corrupt model surfaces
/// then as [`Error::ModelMissing`] / [`Error::ModelCorrupt`], naming
/// `cargo xtask fetch-model`. Inference always runs off the async executor.
#[derive(Clone)]
pub struct LocalEmbedder {
    dir: ModelDir,
    options: LocalOptions,
    model: Arc<OnceLock<LoadedModel>>,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("dir", &self.dir)
            .field("options", &self.options)
            .field("loaded", &self.model.get().is_some_and(|m| m.is_ok()))
            .finish()
    }
}

impl LocalEmbedder {
    /// An embedder for the model in `dir`, with default options.
    pub fn new(dir: ModelDir) -> Self {
        Self::with_options(dir, LocalOptions::default())
    }

    /// An embedder for the model in `dir`.
    pub fn with_options(dir: ModelDir, options: LocalOptions) -> Self {
        let model = shared_cell(&dir);
        Self { dir, options, model }
    }

    /// The model directory in use.
    pub fn model_dir(&self) -> &ModelDir {
        &self.dir
    }

    /// Loads the model now (on the calling thread) instead of on first use.
    pub fn load_blocking(&self) -> Result<()> {
        self.loaded().map(|_| ())
    }

    fn loaded(&self) -> Result<&Mutex<TextEmbedding>> {
        match self.model.get_or_init(|| load(&self.dir, &self.options).map(Mutex::new)) {
            Ok(model) => Ok(model),
            Err(e) => Err(clone_error(e)),
        }
    }

    /// Embeds on the calling thread. Prefer [`Embedder::embed`] from async code.
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Embedding>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let model = self.loaded()?;
        // Shortest first: batches then hold texts of similar length and pad less.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let sorted: Vec<&str> = order.iter().map(|&i| texts[i].as_str()).collect();
        let vectors = {
            let mut model = model.lock().map_err(|_| Error::Inference("model lock poisoned".into()))?;
            model
                .embed(&sorted, Some(self.options.batch_size.max(1)))
                .map_err(|e| Error::Inference(e.to_string()))?
        };
        if vectors.len() != texts.len() {
            return Err(Error::Inference(format!("{} vectors for {} texts", vectors.len(), texts.len())));
        }
        let mut out: Vec<Option<Embedding>> = vec![None; texts.len()];
        for (slot, vector) in order.into_iter().zip(vectors) {
            out[slot] = Some(Embedding::new(vector)?);
        }
        Ok(out.into_iter().flatten().collect())
    }
}

fn clone_error(e: &Error) -> Error {
    match e {
        Error::ModelMissing { dir, missing } => Error::ModelMissing { dir: dir.clone(), missing: missing.clone() },
        Error::ModelCorrupt { dir, reason } => Error::ModelCorrupt { dir: dir.clone(), reason: reason.clone() },
        other => Error::Inference(other.to_string()),
    }
}

/// Loads the ONNX Runtime library and the model from `dir`.
fn load(dir: &ModelDir, options: &LocalOptions) -> Result<TextEmbedding> {
    dir.check()?;
    let corrupt = |reason: String| Error::ModelCorrupt { dir: dir.path().to_path_buf(), reason };
    let runtime = dir.runtime_library();
    ort::init_from(&runtime).map_err(|e| corrupt(format!("cannot load {}: {e}", runtime.display())))?;
    let read = |name: &str| std::fs::read(dir.file(name)).map_err(|e| corrupt(format!("cannot read {name}: {e}")));
    let tokenizer = TokenizerFiles {
        tokenizer_file: read("tokenizer.json")?,
        config_file: read("config.json")?,
        special_tokens_map_file: read("special_tokens_map.json")?,
        tokenizer_config_file: read("tokenizer_config.json")?,
    };
    // Mean pooling must be explicit: a user-defined model otherwise falls back to CLS
    // pooling, which scores unrelated pairs far too high.
    let model = UserDefinedEmbeddingModel::new(read("model.onnx")?, tokenizer).with_pooling(Pooling::Mean);
    let mut init = InitOptionsUserDefined::new().with_max_length(options.max_length);
    if let Some(threads) = options.threads {
        init = init.with_intra_threads(threads.max(1));
    }
    let started = std::time::Instant::now();
    let model = TextEmbedding::try_new_from_user_defined(model, init).map_err(|e| corrupt(e.to_string()))?;
    tracing::debug!(elapsed_ms = started.elapsed().as_millis() as u64, dir = %dir.path().display(), "loaded local embedding model");
    Ok(model)
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn model_id(&self) -> &str {
        LOCAL_MODEL_ID
    }

    fn dims(&self) -> usize {
        LOCAL_DIMS
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Embedding>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let this = self.clone();
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || this.embed_blocking(&texts))
            .await
            .map_err(|e| Error::Inference(format!("inference task failed: {e}")))?
    }
}
