//! The provider-neutral request and reply of one chat completion, and the [`ChatModel`]
//! trait every client implements.

use std::fmt;
use std::ops::{Add, AddAssign};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::Result;

/// One single-turn chat request: a system prompt and one user message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The system prompt; a blank one is not sent.
    pub system: String,
    /// The user message.
    pub user: String,
    /// The JSON shape the reply must have. OpenAI-compatible clients with
    /// `structured_output` enabled send it as a strict `json_schema` response format;
    /// otherwise it is not sent, and the prompt must ask for the JSON itself.
    pub json_schema: Option<JsonSchema>,
    /// Most tokens the model may generate; at least 1.
    pub max_tokens: u32,
    /// Sampling temperature, sent as given (0 for the most deterministic output).
    pub temperature: f32,
}

impl ChatRequest {
    /// Default [`ChatRequest::max_tokens`].
    pub const DEFAULT_MAX_TOKENS: u32 = 1024;

    /// A request with no schema, [`ChatRequest::DEFAULT_MAX_TOKENS`] and temperature 0.
    pub fn new(system: impl Into<String>, user: impl Into<String>) -> ChatRequest {
        ChatRequest {
            system: system.into(),
            user: user.into(),
            json_schema: None,
            max_tokens: ChatRequest::DEFAULT_MAX_TOKENS,
            temperature: 0.0,
        }
    }

    /// This request with `schema` as its reply's JSON shape.
    pub fn with_json_schema(mut self, schema: JsonSchema) -> ChatRequest {
        self.json_schema = Some(schema);
        self
    }

    /// Checks what every provider requires: `max_tokens` at least 1, a finite,
    /// non-negative temperature.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_tokens == 0 {
            return Err(crate::Error::InvalidRequest("max_tokens must be at least 1".into()));
        }
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(crate::Error::InvalidRequest(format!(
                "temperature must be a non-negative number, not {}",
                self.temperature
            )));
        }
        Ok(())
    }
}

/// A named JSON Schema for a structured reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonSchema {
    /// The schema's name (OpenAI wants `[a-zA-Z0-9_-]`, at most 64 characters).
    pub name: String,
    /// The JSON Schema document.
    pub schema: serde_json::Value,
}

/// What a chat model answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatReply {
    /// The generated text: the first choice's message (OpenAI), or the text blocks joined
    /// (Anthropic). Empty when the model produced no text.
    pub text: String,
    /// Why the model stopped.
    pub finish_reason: FinishReason,
    /// Tokens read and written, as the server counted them (zeros when it did not say).
    pub usage: TokenUsage,
    /// The model that answered, as the server named it (else the configured model).
    pub model: String,
}

/// Why a model stopped generating.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FinishReason {
    /// It finished: OpenAI `stop`, Anthropic `end_turn` or `stop_sequence`.
    Stop,
    /// It hit `max_tokens` and the text is cut short: OpenAI `length`, Anthropic
    /// `max_tokens`.
    Length,
    /// Anything else, as the server spelled it (`content_filter`, `tool_calls`,
    /// `refusal`, ...); empty when the server gave no reason.
    Other(String),
}

impl FinishReason {
    /// Maps a wire value of either provider to a reason.
    pub fn from_wire(reason: &str) -> FinishReason {
        match reason {
            "stop" | "end_turn" | "stop_sequence" => FinishReason::Stop,
            "length" | "max_tokens" => FinishReason::Length,
            other => FinishReason::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FinishReason::Stop => f.write_str("stop"),
            FinishReason::Length => f.write_str("length"),
            FinishReason::Other(other) => f.write_str(other),
        }
    }
}

/// Tokens a request cost. Adding usages saturates rather than overflowing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Tokens of the prompt (OpenAI `prompt_tokens`, Anthropic `input_tokens`).
    pub input_tokens: u64,
    /// Tokens generated (OpenAI `completion_tokens`, Anthropic `output_tokens`).
    pub output_tokens: u64,
}

impl TokenUsage {
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

impl AddAssign for TokenUsage {
    fn add_assign(&mut self, other: TokenUsage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
    }
}

impl Add for TokenUsage {
    type Output = TokenUsage;

    fn add(mut self, other: TokenUsage) -> TokenUsage {
        self += other;
        self
    }
}

/// A chat model behind some API. Object-safe, so configuration can pick one at run time
/// as `Arc<dyn ChatModel>`.
///
/// Implementations retry what is worth retrying themselves; an `Err` from
/// [`ChatModel::complete`] is final.
#[async_trait]
pub trait ChatModel: Send + Sync + fmt::Debug {
    /// The wire format spoken: `"openai"` or `"anthropic"`.
    fn provider(&self) -> &'static str;

    /// The configured model name.
    fn model(&self) -> &str;

    /// Sends one request and returns the model's reply. A reply cut off at `max_tokens`
    /// is returned with [`FinishReason::Length`], not as an error.
    async fn complete(&self, request: &ChatRequest) -> Result<ChatReply>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reasons_of_both_providers() {
        assert_eq!(FinishReason::from_wire("stop"), FinishReason::Stop);
        assert_eq!(FinishReason::from_wire("end_turn"), FinishReason::Stop);
        assert_eq!(FinishReason::from_wire("stop_sequence"), FinishReason::Stop);
        assert_eq!(FinishReason::from_wire("length"), FinishReason::Length);
        assert_eq!(FinishReason::from_wire("max_tokens"), FinishReason::Length);
        assert_eq!(FinishReason::from_wire("content_filter"), FinishReason::Other("content_filter".into()));
        assert_eq!(FinishReason::from_wire("tool_use").to_string(), "tool_use");
    }

    #[test]
    fn usage_adds_and_saturates() {
        let mut usage = TokenUsage { input_tokens: 10, output_tokens: 5 };
        usage += TokenUsage { input_tokens: 1, output_tokens: 2 };
        assert_eq!(usage, TokenUsage { input_tokens: 11, output_tokens: 7 });
        assert_eq!(usage.total(), 18);
        let huge = TokenUsage { input_tokens: u64::MAX, output_tokens: 1 } + usage;
        assert_eq!(huge.input_tokens, u64::MAX);
        assert_eq!(huge.total(), u64::MAX);
    }

    #[test]
    fn requests_are_validated() {
        assert!(ChatRequest::new("s", "u").validate().is_ok());
        let zero = ChatRequest { max_tokens: 0, ..ChatRequest::new("s", "u") };
        assert!(zero.validate().unwrap_err().to_string().contains("max_tokens"));
        for temperature in [f32::NAN, f32::INFINITY, -0.5] {
            let bad = ChatRequest { temperature, ..ChatRequest::new("s", "u") };
            assert!(bad.validate().is_err(), "{temperature}");
        }
    }
}
