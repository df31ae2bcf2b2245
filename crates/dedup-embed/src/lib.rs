//! Embedders for memdedup: turn memory texts into [`Embedding`]s.
//!
//! [`Embedder`] is the object-safe trait every backend implements, so configuration can
//! pick one at run time as `Arc<dyn Embedder>`. [`LocalEmbedder`] runs all-MiniLM-L6-v2
//! offline through ONNX Runtime from the model cache that `cargo xtask fetch-model` fills
//! ([`ModelDir`] finds it). [`OpenAiEmbedder`] speaks the OpenAI-compatible
//! `/v1/embeddings` wire format (OpenAI, Ollama, vLLM, TEI).
//!
//! Backends are features: `local` (the ONNX model) and `openai` (the HTTP client); the
//! trait, [`ModelDir`] and the pinned-file list ([`model_lock`], [`ModelLock`]) are always
//! there. Without features the crate pulls in no async runtime, HTTP stack or ONNX
//! Runtime, so `xtask` can use its model lock and model-dir lookup and stay quick to build.
//!
//! **Architecture invariant:** this crate depends on `dedup-core` only among memdedup's
//! crates; it knows nothing of storage. CPU-heavy inference never runs on an async worker
//! thread.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

#[cfg(feature = "batching")]
mod batching;
mod error;
#[cfg(feature = "local")]
mod local;
mod model_dir;
#[cfg(feature = "openai")]
mod openai;

use async_trait::async_trait;
#[cfg(feature = "batching")]
pub use batching::{BatchingEmbedder, DEFAULT_MAX_BATCHED_CHARS};
pub use dedup_core::Embedding;
pub use error::{Error, Result};
#[cfg(feature = "local")]
pub use local::{
    JUDGE_EMBEDDER_FILE, LOCAL_MODEL_ID, LocalEmbedder, LocalOptions, PAIR_JUDGE_MODEL_FILE, PAIR_JUDGE_SETTINGS_FILE,
    PairJudgeModel,
};
pub use model_dir::{
    HOME_ENV_VAR, MODEL_DIR_ENV_VAR, MODEL_DIR_NAME, ModelDir, ModelFile, ModelLock, PinnedWheel, RepoFile, model_lock,
};
#[cfg(feature = "openai")]
pub use openai::{OpenAiConfig, OpenAiEmbedder};

/// Something that turns texts into unit-normalised embeddings.
///
/// Implementations must return exactly one embedding per input text, in input order, all
/// with [`Embedder::dims`] dimensions.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// A stable identifier of the model, e.g. `all-MiniLM-L6-v2-int8`. Cached vectors are
    /// keyed by it.
    fn model_id(&self) -> &str;

    /// Dimensions of every embedding this embedder returns.
    fn dims(&self) -> usize;

    /// Embeds a batch of texts.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Embedding>>;

    /// Embeds one text.
    async fn embed_one(&self, text: &str) -> Result<Embedding> {
        let mut out = self.embed(&[text.to_owned()]).await?;
        out.pop().ok_or(Error::Malformed("the embedder returned no vector for one text".into()))
    }
}
