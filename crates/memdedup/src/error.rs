//! The facade's error type: "your input is wrong" versus "a service is unavailable".

/// Errors of the facade's operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input is invalid (malformed playbook, bad vectors, mixed dimensions).
    #[error(transparent)]
    Input(#[from] dedup_core::Error),
    /// Embedding failed: model missing or corrupt, API down or rejecting the request.
    #[error(transparent)]
    Embedder(#[from] dedup_embed::Error),
    /// The embedder returned vectors of different dimensions.
    #[error("embedder {model} returned vectors of {got} dims after vectors of {expected} dims")]
    EmbedderDimensions {
        /// The embedder's model id.
        model: String,
        /// Dimensions of the first vector.
        expected: usize,
        /// Dimensions of an offending vector.
        got: usize,
    },
    /// The memory store failed or rejected the request.
    #[error(transparent)]
    Store(#[from] dedup_store::Error),
    /// The duplicate checker failed or its configuration is invalid.
    #[error(transparent)]
    Dedup(#[from] dedup_precompact::Error),
    /// The config file is unreadable or invalid.
    #[error("invalid configuration in {origin}: {message}")]
    Config {
        /// The file.
        origin: String,
        /// What is wrong, naming the key.
        message: String,
    },
    /// The embedder broke its contract: a wrong number of vectors.
    #[error("embedder {model} returned {got} vectors for {expected} texts")]
    EmbedderContract {
        /// The embedder's model id.
        model: String,
        /// Texts sent.
        expected: usize,
        /// Vectors received.
        got: usize,
    },
}

impl Error {
    /// True when the failure is about the environment (no model, service down), so a
    /// fail-open caller should skip deduplication rather than report bad input.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Embedder(e) => e.is_unavailable(),
            Error::EmbedderContract { .. } | Error::EmbedderDimensions { .. } => true,
            Error::Store(e) => e.is_unavailable(),
            Error::Dedup(e) => e.is_unavailable(),
            Error::Input(_) | Error::Config { .. } => false,
        }
    }
}

/// `Result` with the facade's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
