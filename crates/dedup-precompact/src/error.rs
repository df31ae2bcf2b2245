//! The crate's one error type: bad configuration or input versus an unavailable backend.

/// Everything that can go wrong in the check-before-store chain.
///
/// [`Error::is_unavailable`] separates "a backend (database, embedder, recent-capture
/// cache) cannot be used right now", on which checks fail open, from "the configuration or
/// the request is wrong". Messages never contain memory text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value (environment variable or config file key) is invalid.
    #[error("invalid configuration: {origin}: {message}")]
    Config {
        /// Where the value came from: a variable name such as
        /// `SUBCOG_DEDUP_THRESHOLD_DECISIONS`, or a file and key such as
        /// `memdedup.toml: dedup.thresholds.decisions`.
        origin: String,
        /// What is wrong with it, including the rejected value where that is not a secret.
        message: String,
    },
    /// The store refused the request (empty or oversized content, bad namespace) or is
    /// unavailable.
    #[error(transparent)]
    Store(#[from] dedup_store::Error),
    /// The embedder refused the request or is unavailable.
    #[error(transparent)]
    Embedder(#[from] dedup_embed::Error),
    /// The memory holds credentials and `[dedup] secrets = "refuse"` refuses it.
    #[error(
        "the text holds credentials ({kinds}) and is refused ([dedup] secrets = \"refuse\"): \
         remove them, or name where they are kept instead"
    )]
    SecretRefused {
        /// The kinds found, comma separated (never the values).
        kinds: String,
    },
    /// The recent-capture cache failed (for example Redis is down or timed out).
    #[error("recent-capture cache unavailable: {0}")]
    RecentCache(String),
}

impl Error {
    /// Whether the error means a backend is unavailable (a "service is down" error) rather
    /// than that the configuration or the request is wrong.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Store(e) => e.is_unavailable(),
            Error::Embedder(e) => e.is_unavailable(),
            Error::RecentCache(_) => true,
            Error::Config { .. } | Error::SecretRefused { .. } => false,
        }
    }

    /// A [`Error::Config`] from where the value came from and what is wrong with it.
    pub(crate) fn config(origin: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Config { origin: origin.into(), message: message.into() }
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_origin_and_unavailability_is_classified() {
        let config = Error::config("SUBCOG_DEDUP_CACHE_CAPACITY", "expected an integer, got \"many\"");
        assert_eq!(
            config.to_string(),
            "invalid configuration: SUBCOG_DEDUP_CACHE_CAPACITY: expected an integer, got \"many\""
        );
        assert!(!config.is_unavailable());

        let recent = Error::RecentCache("connection refused".into());
        assert_eq!(recent.to_string(), "recent-capture cache unavailable: connection refused");
        assert!(recent.is_unavailable());

        let bad_namespace = Error::from(dedup_store::Scope::namespace("a b").unwrap_err());
        assert!(!bad_namespace.is_unavailable(), "{bad_namespace}");
        let no_cache_dir = Error::from(dedup_embed::Error::NoCacheDir);
        assert!(no_cache_dir.is_unavailable(), "{no_cache_dir}");
        let rejected = Error::from(dedup_embed::Error::Config("no model".into()));
        assert!(!rejected.is_unavailable(), "{rejected}");
    }
}
