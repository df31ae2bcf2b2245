//! [`AnthropicChat`]: Anthropic's `POST {base_url}/messages` API.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use dedup_core::RetryPolicy;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use crate::transport::{REDACTED, Transport, TransportConfig, secret_header, shown_url};
use crate::{ChatModel, ChatReply, ChatRequest, Error, FinishReason, Result, TokenUsage};

/// Where and how to reach Anthropic's Messages API.
///
/// Build it with [`AnthropicChatConfig::new`], then adjust the public fields. `Debug` never
/// prints the API key (nor a password embedded in `base_url`).
#[derive(Clone)]
pub struct AnthropicChatConfig {
    /// API root; requests go to `{base_url}/messages`. Default
    /// [`AnthropicChatConfig::DEFAULT_BASE_URL`].
    pub base_url: String,
    /// Model name sent with every request, e.g. `claude-3-5-haiku-latest`.
    pub model: String,
    /// Sent as `x-api-key`; must not be blank.
    pub api_key: String,
    /// Sent as `anthropic-version`. Default [`AnthropicChatConfig::DEFAULT_VERSION`].
    pub anthropic_version: String,
    /// Time limit for one attempt, from connecting to reading the whole body. Default 60 s.
    pub timeout: Duration,
    /// Retries of throttled (429), failing or overloaded (5xx, 529), timed-out and
    /// unreachable attempts.
    pub retry: RetryPolicy,
    /// The most bytes of one reply read; a longer reply fails the call as malformed
    /// (not retried). Default [`DEFAULT_MAX_REPLY_BYTES`](crate::DEFAULT_MAX_REPLY_BYTES).
    pub max_reply_bytes: usize,
}

impl AnthropicChatConfig {
    /// Default [`AnthropicChatConfig::base_url`].
    pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com/v1";
    /// Default [`AnthropicChatConfig::anthropic_version`].
    pub const DEFAULT_VERSION: &str = "2023-06-01";
    /// Default [`AnthropicChatConfig::timeout`].
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

    /// A configuration for `model` with `api_key` at Anthropic's API, with the default
    /// version, timeout and retry policy.
    pub fn new(model: impl Into<String>, api_key: impl Into<String>) -> AnthropicChatConfig {
        AnthropicChatConfig {
            base_url: AnthropicChatConfig::DEFAULT_BASE_URL.to_owned(),
            model: model.into(),
            api_key: api_key.into(),
            anthropic_version: AnthropicChatConfig::DEFAULT_VERSION.to_owned(),
            timeout: AnthropicChatConfig::DEFAULT_TIMEOUT,
            retry: RetryPolicy::default(),
            max_reply_bytes: crate::DEFAULT_MAX_REPLY_BYTES,
        }
    }
}

impl fmt::Debug for AnthropicChatConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicChatConfig")
            .field("base_url", &shown_url(&self.base_url, Some(&self.api_key)))
            .field("model", &self.model)
            .field("api_key", &REDACTED)
            .field("anthropic_version", &self.anthropic_version)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .finish()
    }
}

/// A [`ChatModel`] behind Anthropic's Messages API.
///
/// Each request sends the system prompt (when not blank), one user message,
/// `max_tokens` and `temperature`; the reply is the text of its `text` content blocks,
/// joined. A [`ChatRequest::json_schema`] is not sent: the prompt must ask for the JSON.
pub struct AnthropicChat {
    config: AnthropicChatConfig,
    transport: Transport,
}

impl AnthropicChat {
    /// Validates `config` and builds the HTTP client, without contacting the server.
    ///
    /// Fails with [`Error::Config`] on an empty model name, API key or version, a bad
    /// `base_url`, a zero timeout, or a key or version that cannot be sent in a header.
    pub fn new(config: AnthropicChatConfig) -> Result<AnthropicChat> {
        if config.api_key.trim().is_empty() {
            return Err(Error::Config("the Anthropic API key is empty".into()));
        }
        let version = Some(config.anthropic_version.as_str())
            .filter(|v| !v.trim().is_empty())
            .and_then(|v| HeaderValue::from_str(v).ok())
            .ok_or_else(|| {
                Error::Config(format!("invalid anthropic-version header value {:?}", config.anthropic_version))
            })?;
        let mut headers = HeaderMap::new();
        headers.insert(HeaderName::from_static("x-api-key"), secret_header(&config.api_key)?);
        headers.insert(HeaderName::from_static("anthropic-version"), version);
        let transport = Transport::new(TransportConfig {
            base_url: &config.base_url,
            path: "messages",
            model: &config.model,
            timeout: config.timeout,
            retry: config.retry,
            max_reply_bytes: config.max_reply_bytes,
            headers,
            secret: Some(&config.api_key),
        })?;
        Ok(AnthropicChat { config, transport })
    }

    /// The configuration this client was built from.
    pub fn config(&self) -> &AnthropicChatConfig {
        &self.config
    }
}

impl fmt::Debug for AnthropicChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicChat")
            .field("endpoint", &self.transport.endpoint())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ChatModel for AnthropicChat {
    fn provider(&self) -> &'static str {
        "anthropic"
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatReply> {
        request.validate()?;
        let body = MessagesRequest {
            model: &self.config.model,
            system: Some(request.system.as_str()).filter(|s| !s.trim().is_empty()),
            messages: [Message { role: "user", content: &request.user }],
            max_tokens: request.max_tokens,
            temperature: request.temperature,
        };
        let bytes = self.transport.post(&body).await?;
        let response: MessagesResponse = serde_json::from_slice(&bytes)
            .map_err(|e| self.transport.malformed(format!("not a Messages API reply: {e}")))?;
        let text: String = response
            .content
            .into_iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text),
                ContentBlock::Other => None,
            })
            .collect();
        let usage = response.usage.unwrap_or_default();
        Ok(ChatReply {
            text,
            finish_reason: response
                .stop_reason
                .map_or(FinishReason::Other(String::new()), |r| FinishReason::from_wire(&r)),
            usage: TokenUsage { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens },
            model: response.model.filter(|m| !m.is_empty()).unwrap_or_else(|| self.config.model.clone()),
        })
    }
}

/// The request body of `POST /messages`.
#[derive(Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    messages: [Message<'a>; 1],
    max_tokens: u32,
    temperature: f32,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

/// The parts of a Messages API reply we use; other fields are ignored.
#[derive(Deserialize)]
struct MessagesResponse {
    #[serde(default)]
    model: Option<String>,
    content: Vec<ContentBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<Usage>,
}

/// One block of the reply's `content`; only text blocks carry the answer (others are
/// thinking, tool use, ...).
#[derive(Deserialize)]
#[serde(tag = "type")]
enum ContentBlock {
    #[serde(rename = "text")]
    Text { text: String },
    #[serde(other)]
    Other,
}

#[derive(Default, Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}
