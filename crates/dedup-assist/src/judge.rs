//! The [`Judge`] abstraction and the judge backed by a chat model.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use dedup_core::{JudgeBatch, JudgeMode, JudgeResponse};
use dedup_llm::{ChatModel, ChatRequest, FinishReason, JsonSchema, TokenUsage};

use crate::{Error, Result};

/// A judge's answer to one batch, not yet validated against it.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeReply {
    /// The reply in the seed's response shape.
    pub response: JudgeResponse,
    /// Tokens the call used (zero for judges without a model).
    pub usage: TokenUsage,
}

/// Why a judge gave no usable reply. The batch's unverified memories are recorded for a
/// retry; nothing is merged.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeFailure {
    /// What went wrong, safe to store and show (never an API key).
    pub message: String,
    /// Tokens spent on the failed call, when known.
    pub usage: TokenUsage,
}

impl JudgeFailure {
    /// A failure without token usage.
    pub fn new(message: impl Into<String>) -> JudgeFailure {
        JudgeFailure { message: message.into(), usage: TokenUsage::default() }
    }
}

impl fmt::Display for JudgeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Decides which memories of a batch are duplicates: seed 003's judge, an LLM or local
/// code. Object-safe, so configuration picks one at run time (`Arc<dyn Judge>`).
///
/// A judge answers in the seed's response shape; the orchestrator validates every reply
/// with [`dedup_core::validate_response`] before anything is written, so a judge need not
/// (and cannot) make a bad reply harmful.
#[async_trait]
pub trait Judge: Send + Sync + fmt::Debug {
    /// What kind of judge it is: `openai`, `anthropic`, `local`, …
    fn name(&self) -> &str;

    /// The model it asks (empty for judges without one).
    fn model(&self) -> &str;

    /// The `min_confidence_hint` that suits this judge's confidence scale when the user
    /// sets none; `None` keeps seed 003's default ([`dedup_core::JudgeRules::default`]).
    fn default_min_confidence(&self) -> Option<f64> {
        None
    }

    /// Judges one batch.
    async fn judge(&self, batch: &JudgeBatch) -> Result<JudgeReply, JudgeFailure>;
}

/// The prompts of an [`LlmJudge`]: seed 003 §3.1's system prompt and mode snippets by
/// default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgePrompts {
    /// The common system instruction.
    pub system: String,
    /// Appended to the system prompt in incremental mode.
    pub incremental: String,
    /// Appended to the system prompt in bootstrap mode.
    pub bootstrap: String,
}

impl Default for JudgePrompts {
    fn default() -> JudgePrompts {
        JudgePrompts {
            system: include_str!("../prompts/system.txt").to_owned(),
            incremental: include_str!("../prompts/incremental.txt").to_owned(),
            bootstrap: include_str!("../prompts/bootstrap.txt").to_owned(),
        }
    }
}

impl JudgePrompts {
    /// The defaults with each prompt given a file replaced by that file's text.
    ///
    /// Fails with [`Error::Config`] naming the file when one cannot be read, is not UTF-8
    /// or is blank.
    pub fn with_files(
        system: Option<&Path>,
        incremental: Option<&Path>,
        bootstrap: Option<&Path>,
    ) -> Result<JudgePrompts> {
        let mut prompts = JudgePrompts::default();
        for (path, slot) in [
            (system, &mut prompts.system),
            (incremental, &mut prompts.incremental),
            (bootstrap, &mut prompts.bootstrap),
        ] {
            if let Some(path) = path {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::Config(format!("cannot read judge prompt {}: {e}", path.display())))?;
                if text.trim().is_empty() {
                    return Err(Error::Config(format!("judge prompt {} is empty", path.display())));
                }
                *slot = text;
            }
        }
        Ok(prompts)
    }

    /// The system prompt for `mode`.
    pub fn system_for(&self, mode: JudgeMode) -> String {
        let snippet = match mode {
            JudgeMode::Incremental => &self.incremental,
            JudgeMode::Bootstrap => &self.bootstrap,
        };
        format!("{}\n\n{}", self.system.trim_end(), snippet.trim_end())
    }
}

/// A judge that asks a chat model ([`dedup_llm::OpenAiChat`], [`dedup_llm::AnthropicChat`])
/// with seed 003's prompts, at temperature 0, and reads its JSON reply tolerantly (fences
/// and prose around the object are ignored). A reply cut at `max_tokens`, without a JSON
/// object, or not in the response shape is a [`JudgeFailure`].
#[derive(Debug, Clone)]
pub struct LlmJudge {
    chat: Arc<dyn ChatModel>,
    prompts: JudgePrompts,
    max_tokens: u32,
}

impl LlmJudge {
    /// Most tokens a reply may use by default.
    pub const DEFAULT_MAX_TOKENS: u32 = 4096;

    /// A judge asking `chat` with the default prompts.
    pub fn new(chat: Arc<dyn ChatModel>) -> LlmJudge {
        LlmJudge { chat, prompts: JudgePrompts::default(), max_tokens: Self::DEFAULT_MAX_TOKENS }
    }

    /// Uses `prompts` instead of the defaults.
    pub fn with_prompts(mut self, prompts: JudgePrompts) -> LlmJudge {
        self.prompts = prompts;
        self
    }

    /// Caps a reply at `max_tokens`.
    pub fn with_max_tokens(mut self, max_tokens: u32) -> LlmJudge {
        self.max_tokens = max_tokens;
        self
    }

    /// The request sent for `batch`.
    pub fn request_for(&self, batch: &JudgeBatch) -> ChatRequest {
        ChatRequest {
            system: self.prompts.system_for(batch.mode),
            user: batch.to_payload(),
            json_schema: Some(JsonSchema { name: "dedup_groups".to_owned(), schema: JudgeResponse::json_schema() }),
            max_tokens: self.max_tokens,
            temperature: 0.0,
        }
    }
}

#[async_trait]
impl Judge for LlmJudge {
    fn name(&self) -> &str {
        self.chat.provider()
    }

    fn model(&self) -> &str {
        self.chat.model()
    }

    async fn judge(&self, batch: &JudgeBatch) -> Result<JudgeReply, JudgeFailure> {
        let reply = self.chat.complete(&self.request_for(batch)).await.map_err(|e| JudgeFailure::new(e.to_string()))?;
        let usage = reply.usage;
        let fail = |message: String| JudgeFailure { message, usage };
        if reply.finish_reason == FinishReason::Length {
            return Err(fail(format!("the reply was cut off at max_tokens ({}) before it ended", self.max_tokens)));
        }
        let json = dedup_core::extract_json_object(&reply.text).ok_or_else(|| {
            fail(format!("the reply holds no JSON object ({} characters)", reply.text.chars().count()))
        })?;
        let response: JudgeResponse =
            serde_json::from_str(json).map_err(|e| fail(format!("the reply is not in the response shape: {e}")))?;
        Ok(JudgeReply { response, usage })
    }
}
