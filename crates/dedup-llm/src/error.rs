//! The crate's one error type.

use dedup_core::FactError;

/// Everything that can go wrong talking to a chat model.
///
/// No variant ever holds an API key: clients scrub their key from server messages before
/// keeping them, and endpoints are shown without any URL password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The client configuration is unusable: a bad base URL, an empty model name, a zero
    /// timeout, a key that cannot be sent in a header.
    #[error("invalid chat model configuration: {0}")]
    Config(String),
    /// The request itself is unusable (zero `max_tokens`, a temperature that is not a
    /// number, a confidence threshold outside `[0, 1]`); nothing was sent.
    #[error("invalid chat request: {0}")]
    InvalidRequest(String),
    /// The API refused the request with a 4xx other than 429; retrying would not help.
    #[error("chat API {endpoint} rejected the request (HTTP {status}): {message}")]
    Rejected {
        /// The endpoint, e.g. `https://api.openai.com/v1/chat/completions`.
        endpoint: String,
        /// HTTP status code.
        status: u16,
        /// The server's error message (`error.message` of its JSON body, else the body).
        message: String,
    },
    /// The API stayed unreachable, throttled or failing (429, 5xx, timeouts, connection
    /// errors) through every retry.
    #[error("chat API {endpoint} unavailable after {attempts} attempts: {last_error}")]
    Unavailable {
        /// The endpoint.
        endpoint: String,
        /// How many attempts were made.
        attempts: u32,
        /// The last failure seen.
        last_error: String,
    },
    /// A 2xx answer that is not the provider's wire format.
    #[error("malformed reply from chat API {endpoint}: {reason}")]
    Malformed {
        /// The endpoint.
        endpoint: String,
        /// What is wrong with the reply.
        reason: String,
    },
    /// The model stopped at its token limit, so its reply is cut short and cannot be
    /// trusted as structured output.
    #[error("the reply of model {model} was cut off at max_tokens = {max_tokens}; raise max_tokens")]
    Truncated {
        /// The model that answered.
        model: String,
        /// The limit it hit.
        max_tokens: u32,
    },
    /// The model's fact-extraction reply is not the expected JSON, or a fact in it is
    /// invalid; no fact of that reply is used.
    #[error(transparent)]
    Facts(#[from] FactError),
}

impl Error {
    /// True when the failure is about the service (down, throttled, unreachable) rather
    /// than about the request or the reply: callers that fail open skip the model's work
    /// on these.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
