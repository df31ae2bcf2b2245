//! [`OpenAiChat`]: any OpenAI-compatible `POST {base_url}/chat/completions` API (OpenAI,
//! Ollama, vLLM, llama.cpp server, LM Studio).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use dedup_core::RetryPolicy;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde::{Deserialize, Serialize};

use crate::transport::{REDACTED, Transport, TransportConfig, secret_header, shown_url};
use crate::{ChatModel, ChatReply, ChatRequest, FinishReason, Result, TokenUsage};

/// Where and how to reach an OpenAI-compatible chat completions API.
///
/// Build it with [`OpenAiChatConfig::new`], then adjust the public fields. `Debug` never
/// prints the API key (nor a password embedded in `base_url`).
#[derive(Clone)]
pub struct OpenAiChatConfig {
    /// API root, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`, with or
    /// without a trailing slash; requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// Model name sent with every request, e.g. `gpt-4o-mini` or `qwen2.5:7b`.
    pub model: String,
    /// Sent as `Authorization: Bearer {api_key}` when set (local servers need none).
    pub api_key: Option<String>,
    /// Time limit for one attempt, from connecting to reading the whole body. Default 60 s.
    pub timeout: Duration,
    /// Retries of throttled (429), failing (5xx), timed-out and unreachable attempts.
    pub retry: RetryPolicy,
    /// The most bytes of one reply read; a longer reply fails the call as malformed
    /// (not retried). Default [`DEFAULT_MAX_REPLY_BYTES`](crate::DEFAULT_MAX_REPLY_BYTES).
    pub max_reply_bytes: usize,
    /// Send a request's [`ChatRequest::json_schema`] as a strict `json_schema` response
    /// format, for servers that enforce it (OpenAI, recent vLLM, llama.cpp, LM Studio,
    /// Ollama). Off by default: then the schema is not sent and the prompt alone asks for
    /// JSON, which every server accepts.
    pub structured_output: bool,
}

impl OpenAiChatConfig {
    /// OpenAI's own API root.
    pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
    /// Default [`OpenAiChatConfig::timeout`]: generation is slower than embedding.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

    /// A configuration for `model` at `base_url`, with no API key, the default timeout and
    /// retry policy, and `structured_output` off.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiChatConfig {
        OpenAiChatConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: OpenAiChatConfig::DEFAULT_TIMEOUT,
            retry: RetryPolicy::default(),
            max_reply_bytes: crate::DEFAULT_MAX_REPLY_BYTES,
            structured_output: false,
        }
    }
}

impl fmt::Debug for OpenAiChatConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChatConfig")
            .field("base_url", &shown_url(&self.base_url, self.api_key.as_deref()))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| REDACTED))
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .field("structured_output", &self.structured_output)
            .finish()
    }
}

/// A [`ChatModel`] behind an OpenAI-compatible chat completions API.
///
/// Each request sends the system prompt (when not blank) and the user message,
/// `temperature` and `max_tokens`; the reply is the first choice's message.
pub struct OpenAiChat {
    config: OpenAiChatConfig,
    transport: Transport,
}

impl OpenAiChat {
    /// Validates `config` and builds the HTTP client, without contacting the server.
    ///
    /// Fails with [`crate::Error::Config`] on an empty model name, a `base_url` that is
    /// not an `http`/`https` URL (or has a query or fragment), a zero timeout, or an API
    /// key that cannot be sent in a header.
    pub fn new(config: OpenAiChatConfig) -> Result<OpenAiChat> {
        let mut headers = HeaderMap::new();
        let api_key = config.api_key.as_deref().filter(|key| !key.is_empty());
        if let Some(key) = api_key {
            headers.insert(AUTHORIZATION, secret_header(&format!("Bearer {key}"))?);
        }
        let transport = Transport::new(TransportConfig {
            base_url: &config.base_url,
            path: "chat/completions",
            model: &config.model,
            timeout: config.timeout,
            retry: config.retry,
            max_reply_bytes: config.max_reply_bytes,
            headers,
            secret: api_key,
        })?;
        Ok(OpenAiChat { config, transport })
    }

    /// The configuration this client was built from.
    pub fn config(&self) -> &OpenAiChatConfig {
        &self.config
    }
}

impl fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("endpoint", &self.transport.endpoint())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ChatModel for OpenAiChat {
    fn provider(&self) -> &'static str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatReply> {
        request.validate()?;
        let mut messages = Vec::with_capacity(2);
        if !request.system.trim().is_empty() {
            messages.push(Message { role: "system", content: &request.system });
        }
        messages.push(Message { role: "user", content: &request.user });
        let response_format = match &request.json_schema {
            Some(schema) if self.config.structured_output => Some(ResponseFormat {
                kind: "json_schema",
                json_schema: SchemaFormat { name: &schema.name, schema: &schema.schema, strict: true },
            }),
            _ => None,
        };
        let body = CompletionRequest {
            model: &self.config.model,
            messages,
            temperature: request.temperature,
            max_tokens: request.max_tokens,
            response_format,
        };
        let bytes = self.transport.post(&body).await?;
        let response: CompletionResponse = serde_json::from_slice(&bytes)
            .map_err(|e| self.transport.malformed(format!("not a chat completion: {e}")))?;
        let Some(choice) = response.choices.into_iter().next() else {
            return Err(self.transport.malformed("the reply has no choices"));
        };
        let usage = response.usage.unwrap_or_default();
        Ok(ChatReply {
            text: choice.message.content.unwrap_or_default(),
            finish_reason: choice
                .finish_reason
                .map_or(FinishReason::Other(String::new()), |r| FinishReason::from_wire(&r)),
            usage: TokenUsage { input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens },
            model: response.model.filter(|m| !m.is_empty()).unwrap_or_else(|| self.config.model.clone()),
        })
    }
}

/// The request body of `POST /chat/completions`.
#[derive(Serialize)]
struct CompletionRequest<'a> {
    model: &'a str,
    messages: Vec<Message<'a>>,
    temperature: f32,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat<'a>>,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: SchemaFormat<'a>,
}

#[derive(Serialize)]
struct SchemaFormat<'a> {
    name: &'a str,
    schema: &'a serde_json::Value,
    strict: bool,
}

/// The parts of a chat completion we use; other fields are ignored.
#[derive(Deserialize)]
struct CompletionResponse {
    #[serde(default)]
    model: Option<String>,
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ReplyMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ReplyMessage {
    /// `null` when the model answered with a tool call or a refusal only.
    #[serde(default)]
    content: Option<String>,
}

#[derive(Default, Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}
