//! [`OpenAiEmbedder`]: embeddings from any OpenAI-compatible `POST {base_url}/embeddings` API.
//!
//! Works with OpenAI itself and with servers that copy its wire format (Ollama, vLLM, TEI,
//! LiteLLM). Texts go out in batches of [`OpenAiConfig::batch_size`], one batch at a time;
//! throttling (429), server errors (5xx), timeouts and connection failures are retried with
//! exponential backoff and full jitter, honouring `Retry-After` on 429 and 503 (the
//! shared [`RetryPolicy`] of `dedup-core`). Any other 4xx is the caller's fault and fails
//! at once with [`Error::Rejected`].

use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use dedup_core::{Embedding, RetryPolicy, api_error_message, error_chain, parse_retry_after};
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};

use crate::{Embedder, Error, Result};

/// The text sent by [`OpenAiEmbedder::connect`] to learn the model's dimensions.
const PROBE_TEXT: &str = "memdedup dimension probe";

/// Where and how to reach an OpenAI-compatible embeddings API.
///
/// Build it with [`OpenAiConfig::new`], then adjust the public fields. `Debug` never
/// prints the API key (nor a password embedded in `base_url`).
#[derive(Clone)]
pub struct OpenAiConfig {
    /// API root, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`, with or
    /// without a trailing slash; requests go to `{base_url}/embeddings`.
    pub base_url: String,
    /// Model name sent with every request, e.g. `text-embedding-3-small`. Also the
    /// embedder's [`Embedder::model_id`].
    pub model: String,
    /// Dimensions to ask for (the `dimensions` request field, for models that support
    /// shortening). `None` sends no such field and learns the dimensions from the first
    /// response.
    pub dimensions: Option<usize>,
    /// Sent as `Authorization: Bearer {api_key}` when set.
    pub api_key: Option<String>,
    /// Most texts per request. Default 96.
    pub batch_size: usize,
    /// Time limit for one request, from connecting to reading the whole body. Default 30 s.
    pub timeout: Duration,
    /// Retries after the first attempt of a request before giving up. Default 5.
    pub max_retries: u32,
    /// Backoff cap before the first retry; it doubles with every further retry. Default
    /// 500 ms.
    pub initial_backoff: Duration,
    /// Longest wait between two attempts, also the cap on a server's `Retry-After`.
    /// Default 20 s.
    pub max_backoff: Duration,
}

impl OpenAiConfig {
    /// Default [`OpenAiConfig::batch_size`].
    pub const DEFAULT_BATCH_SIZE: usize = 96;
    /// Default [`OpenAiConfig::timeout`].
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
    /// Default [`OpenAiConfig::max_retries`] ([`RetryPolicy::DEFAULT_MAX_RETRIES`]).
    pub const DEFAULT_MAX_RETRIES: u32 = RetryPolicy::DEFAULT_MAX_RETRIES;
    /// Default [`OpenAiConfig::initial_backoff`] ([`RetryPolicy::DEFAULT_INITIAL_BACKOFF`]).
    pub const DEFAULT_INITIAL_BACKOFF: Duration = RetryPolicy::DEFAULT_INITIAL_BACKOFF;
    /// Default [`OpenAiConfig::max_backoff`] ([`RetryPolicy::DEFAULT_MAX_BACKOFF`]).
    pub const DEFAULT_MAX_BACKOFF: Duration = RetryPolicy::DEFAULT_MAX_BACKOFF;

    /// A configuration for `model` at `base_url`, with no API key, no `dimensions` and
    /// the default batch size, timeout and retry policy.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            dimensions: None,
            api_key: None,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            timeout: Self::DEFAULT_TIMEOUT,
            max_retries: Self::DEFAULT_MAX_RETRIES,
            initial_backoff: Self::DEFAULT_INITIAL_BACKOFF,
            max_backoff: Self::DEFAULT_MAX_BACKOFF,
        }
    }

    /// Takes the API key from the environment variable `var` (e.g. `OPENAI_API_KEY`).
    ///
    /// An unset, empty or non-UTF-8 variable leaves no key (`None`), replacing any key set
    /// before.
    pub fn api_key_from_env(mut self, var: &str) -> Self {
        self.api_key = std::env::var(var).ok().filter(|key| !key.is_empty());
        self
    }

    /// The retry fields as a [`RetryPolicy`].
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries,
            initial_backoff: self.initial_backoff,
            max_backoff: self.max_backoff,
        }
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &redact_url_password(&self.base_url))
            .field("model", &self.model)
            .field("dimensions", &self.dimensions)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("batch_size", &self.batch_size)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .finish()
    }
}

/// An [`Embedder`] backed by an OpenAI-compatible embeddings API.
///
/// **Invariant:** every embedding it returns is unit-normalised and has the configured
/// [`OpenAiConfig::dimensions`] or, when none are configured, the dimensions of the
/// server's first answer; results are in input order whatever order the server used.
pub struct OpenAiEmbedder {
    config: OpenAiConfig,
    client: reqwest::Client,
    endpoint: Url,
    /// `endpoint` without any password, for logs and error messages.
    endpoint_display: String,
    /// The configured dimensions, or those learned from the first response.
    dims: OnceLock<usize>,
}

impl OpenAiEmbedder {
    /// Validates `config` and builds the HTTP client, without contacting the server.
    ///
    /// Fails with [`Error::Config`] on an empty model name, a `base_url` that is not an
    /// `http`/`https` URL, a zero batch size, zero dimensions or a zero timeout. When no
    /// dimensions are configured, [`Embedder::dims`] is 0 until the first successful
    /// [`Embedder::embed`]; use [`OpenAiEmbedder::connect`] to learn them up front.
    pub fn new(config: OpenAiConfig) -> Result<Self> {
        if config.model.trim().is_empty() {
            return Err(Error::Config("the embeddings model name is empty".into()));
        }
        if config.batch_size == 0 {
            return Err(Error::Config("the embeddings batch size must be at least 1".into()));
        }
        if config.dimensions == Some(0) {
            return Err(Error::Config("the embedding dimensions must be at least 1".into()));
        }
        if config.timeout.is_zero() {
            return Err(Error::Config("the embeddings request timeout must be positive".into()));
        }
        let endpoint = embeddings_endpoint(&config.base_url)?;
        let endpoint_display = redact_url_password(endpoint.as_str());
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| Error::Config(format!("cannot build the HTTP client: {}", error_chain(&e))))?;
        let dims = config.dimensions.map_or_else(OnceLock::new, OnceLock::from);
        Ok(Self { config, client, endpoint, endpoint_display, dims })
    }

    /// Like [`OpenAiEmbedder::new`], then embeds one short probe text to check that the
    /// server answers and to learn (or check) the dimensions, so [`Embedder::dims`] is
    /// known on return.
    ///
    /// Fails like [`Embedder::embed`] when the probe fails, e.g. with
    /// [`Error::Malformed`] when the server's dimensions differ from the configured ones.
    pub async fn connect(config: OpenAiConfig) -> Result<Self> {
        let embedder = Self::new(config)?;
        embedder.embed(&[PROBE_TEXT.to_owned()]).await?;
        Ok(embedder)
    }

    /// The configuration this embedder was built from.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// Embeds one batch (at most `batch_size` texts, at least one) with retries.
    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Embedding>> {
        let request = EmbeddingsRequest {
            model: &self.config.model,
            input: texts,
            dimensions: self.config.dimensions,
            encoding_format: "float",
        };
        let body = self.post_with_retries(&request).await?;
        let response: EmbeddingsResponse = serde_json::from_slice(&body)
            .map_err(|e| Error::Malformed(format!("cannot parse the response body: {e}")))?;
        let vectors = order_by_index(response.data, texts.len())?;
        self.check_dims(&vectors)?;
        vectors.into_iter().map(|values| Ok(Embedding::new(values)?)).collect()
    }

    /// Checks that all `vectors` have the expected dimensions, learning them from this
    /// response when they are not known yet.
    fn check_dims(&self, vectors: &[Vec<f32>]) -> Result<()> {
        let Some(first) = vectors.first().map(Vec::len) else {
            return Ok(());
        };
        if let Some((index, odd)) = vectors.iter().enumerate().find(|(_, v)| v.len() != first) {
            return Err(Error::Malformed(format!(
                "embedding {index} has {} dimensions but embedding 0 has {first}",
                odd.len()
            )));
        }
        let expected = match self.dims.get() {
            Some(&known) => known,
            // Leave empty vectors to `Embedding::new`, which rejects them; never learn 0.
            None if first == 0 => return Ok(()),
            None => *self.dims.get_or_init(|| first),
        };
        if first != expected {
            return Err(Error::Malformed(format!("the embeddings have {first} dimensions, expected {expected}")));
        }
        Ok(())
    }

    /// Posts `request` until it succeeds, fails for good, or the retries run out; returns
    /// the body of the successful response.
    async fn post_with_retries(&self, request: &EmbeddingsRequest<'_>) -> Result<Vec<u8>> {
        let policy = self.config.retry_policy();
        let max_attempts = policy.max_attempts();
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let failure = match self.post_once(request).await {
                Ok(body) => return Ok(body),
                Err(Attempt::Fatal(error)) => return Err(error),
                Err(Attempt::Retryable(failure)) => failure,
            };
            if attempt >= max_attempts {
                return Err(Error::Unavailable { attempts: attempt, last_error: failure.description });
            }
            let delay = policy.delay(attempt, failure.retry_after, rand::random::<f64>());
            tracing::warn!(
                endpoint = %self.endpoint_display,
                model = %self.config.model,
                texts = request.input.len(),
                attempt,
                max_attempts,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %failure.description,
                "embeddings request failed; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt: the body of a 2xx response, or how the attempt failed.
    async fn post_once(&self, request: &EmbeddingsRequest<'_>) -> Result<Vec<u8>, Attempt> {
        let mut builder = self.client.post(self.endpoint.clone()).json(request);
        if let Some(key) = &self.config.api_key {
            builder = builder.bearer_auth(key);
        }
        let response = builder.send().await.map_err(|e| self.transport_failure(e))?;
        let status = response.status();
        let retry_after = match status {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => retry_after(response.headers()),
            _ => None,
        };
        let body = read_capped(response).await.map_err(|e| match e {
            Some(error) => self.transport_failure(error),
            None => Attempt::Fatal(Error::Malformed(format!(
                "the embeddings reply is over {MAX_REPLY_BYTES} bytes, far more than any batch needs"
            ))),
        })?;
        if status.is_success() {
            return Ok(body);
        }
        let message = api_error_message(&body, status.canonical_reason());
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            Err(Attempt::Retryable(RetryableFailure { description: format!("HTTP {status}: {message}"), retry_after }))
        } else if status.is_client_error() {
            Err(Attempt::Fatal(Error::Rejected { status: status.as_u16(), message }))
        } else {
            Err(Attempt::Fatal(Error::Malformed(format!(
                "unexpected HTTP status {status} from {}: {message}",
                self.endpoint_display
            ))))
        }
    }

    /// Sorts a transport-level error into retryable (timeouts, connection failures, a
    /// body cut short) or fatal (the request could not be built, a redirect loop).
    fn transport_failure(&self, error: reqwest::Error) -> Attempt {
        let is_fatal = error.is_builder() || error.is_redirect();
        let reason = error_chain(&error.without_url());
        let description = format!("POST {}: {reason}", self.endpoint_display);
        if is_fatal {
            Attempt::Fatal(Error::Config(description))
        } else {
            Attempt::Retryable(RetryableFailure { description, retry_after: None })
        }
    }
}

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("config", &self.config)
            .field("dims", &self.dims.get())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    /// The configured model name.
    fn model_id(&self) -> &str {
        &self.config.model
    }

    /// The configured dimensions, or those learned from the first response; **0** while
    /// neither is known (no `dimensions` configured and no successful request yet).
    fn dims(&self) -> usize {
        self.dims.get().copied().unwrap_or(0)
    }

    /// Embeds `texts` in batches of `batch_size`, sent one after another. No request is
    /// made for an empty slice.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Embedding>> {
        let mut embeddings = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.config.batch_size) {
            embeddings.extend(self.embed_batch(batch).await?);
        }
        Ok(embeddings)
    }
}

/// The request body of `POST /embeddings`.
#[derive(Serialize)]
struct EmbeddingsRequest<'a> {
    model: &'a str,
    input: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
    encoding_format: &'static str,
}

/// The parts of a successful response we use; other fields are ignored.
#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    index: usize,
    embedding: Vec<f32>,
}

/// How one attempt failed.
enum Attempt {
    /// Do not retry; return this error.
    Fatal(Error),
    /// Worth another try.
    Retryable(RetryableFailure),
}

struct RetryableFailure {
    /// What went wrong, for logs and [`Error::Unavailable`].
    description: String,
    /// The server's `Retry-After`, when it sent one we honour.
    retry_after: Option<Duration>,
}

/// `{base_url}/embeddings`, after checking that `base_url` is an http(s) URL.
fn embeddings_endpoint(base_url: &str) -> Result<Url> {
    let trimmed = base_url.trim().trim_end_matches('/');
    let shown = redact_url_password(trimmed);
    let base = Url::parse(trimmed).map_err(|e| Error::Config(format!("invalid embeddings base URL `{shown}`: {e}")))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(Error::Config(format!(
            "invalid embeddings base URL `{shown}`: scheme must be http or https, not `{}`",
            base.scheme()
        )));
    }
    if base.host_str().is_none_or(str::is_empty) {
        return Err(Error::Config(format!("invalid embeddings base URL `{shown}`: no host")));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(Error::Config(format!("invalid embeddings base URL `{shown}`: must not have a query or fragment")));
    }
    Url::parse(&format!("{trimmed}/embeddings"))
        .map_err(|e| Error::Config(format!("invalid embeddings base URL `{shown}`: {e}")))
}

/// Puts the vectors of `items` in `index` order, checking that each index in `0..count`
/// appears exactly once.
fn order_by_index(items: Vec<EmbeddingItem>, count: usize) -> Result<Vec<Vec<f32>>> {
    if items.len() != count {
        return Err(Error::Malformed(format!("expected {count} embeddings, got {}", items.len())));
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; count];
    for item in items {
        let slot = slots.get_mut(item.index).ok_or_else(|| {
            Error::Malformed(format!("embedding index {} is out of range for {count} inputs", item.index))
        })?;
        if slot.replace(item.embedding).is_some() {
            return Err(Error::Malformed(format!("embedding index {} appears twice", item.index)));
        }
    }
    // With `count` items, all indices in range and none repeated, every slot is filled.
    slots
        .into_iter()
        .enumerate()
        .map(|(index, slot)| slot.ok_or_else(|| Error::Malformed(format!("embedding index {index} is missing"))))
        .collect()
}

/// The wait a `Retry-After` header asks for, in seconds (fractions allowed) or as an HTTP
/// date; see [`parse_retry_after`].
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    parse_retry_after(headers.get(RETRY_AFTER)?.to_str().ok()?, SystemTime::now())
}

/// `url` with any password replaced by `***`; unparsable input is returned unchanged.
fn redact_url_password(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            if parsed.set_password(Some("***")).is_ok() {
                parsed.to_string()
            } else {
                "<url with credentials>".to_owned()
            }
        }
        _ => url.to_owned(),
    }
}

/// The most bytes of one embeddings reply read: 64 texts of 3,072 dimensions written as
/// JSON floats are about 5 MB, so 64 MiB only stops a broken or hostile server.
const MAX_REPLY_BYTES: usize = 64 << 20;

/// The body of `response`, or `None` as the error when it is over [`MAX_REPLY_BYTES`].
async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, Option<reqwest::Error>> {
    if response.content_length().is_some_and(|n| n > MAX_REPLY_BYTES as u64) {
        return Err(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Some)? {
        if body.len() + chunk.len() > MAX_REPLY_BYTES {
            return Err(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
