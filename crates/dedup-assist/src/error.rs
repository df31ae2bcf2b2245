//! The crate's one error type.

/// Everything that can stop an assisted dedup run. A judge's bad reply is not an error:
/// it is recorded on the memories of its batch and reported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The options or prompts are invalid.
    #[error("invalid assisted dedup configuration: {0}")]
    Config(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] dedup_store::Error),
    /// The embedder failed while the run needed vectors it could not do without.
    #[error("embedder failed: {0}")]
    Embed(#[from] dedup_embed::Error),
    /// A background task of the run panicked or was cancelled.
    #[error("a judge call task failed: {0}")]
    Task(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
