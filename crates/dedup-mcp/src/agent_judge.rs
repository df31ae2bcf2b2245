//! `[judge] kind = "agent"`: the MCP client's own model as seed 003's judge, asked through
//! MCP sampling (`sampling/createMessage`) with the judge's system prompt and the batch
//! as the user message. The reply is read as an LLM judge's is; the Deduplicator (or
//! `review_run`) validates it against the contract.
//!
//! Sampling is deprecated by the MCP specification (SEP-2577) and refused on protocol
//! versions that forbid server-to-client requests; clients that negotiate an earlier one
//! and declare the `sampling` capability (the official Python SDK with a sampling
//! callback) answer it.
#![allow(deprecated)]

use async_trait::async_trait;
use memdedup::crates::llm::TokenUsage;
use memdedup::{Judge, JudgeBatch, JudgeFailure, JudgePrompts, JudgeReply, JudgeResponse};
use rmcp::RoleServer;
use rmcp::model::{CreateMessageRequestParams, Role, SamplingMessage, SamplingMessageContentBlock};
use rmcp::service::{Peer, RequestContext};

use crate::reply::ToolError;

/// Most tokens the client's model may answer with.
const MAX_TOKENS: u32 = 4096;
/// Longest reply read, in bytes.
const MAX_REPLY_BYTES: usize = 1 << 20;

/// The judge that asks the MCP client's model.
pub(crate) struct AgentJudge {
    peer: Peer<RoleServer>,
    prompts: JudgePrompts,
    model: String,
}

impl std::fmt::Debug for AgentJudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentJudge").field("model", &self.model).finish_non_exhaustive()
    }
}

impl AgentJudge {
    /// The judge of the client behind `request`, or a `not_configured` error pointing at
    /// the two-step tools when the client does not offer sampling.
    pub(crate) fn of(request: &RequestContext<RoleServer>) -> Result<AgentJudge, ToolError> {
        let info = request.peer.peer_info();
        let samples = info.as_ref().is_some_and(|info| info.capabilities.sampling.is_some());
        if !samples {
            return Err(ToolError::NotConfigured(
                "asking your own model needs MCP sampling, and this client does not offer it (the `sampling` \
                 capability): list the pairs with review_list and decide them with review_decide instead"
                    .to_owned(),
            ));
        }
        let model = info.map(|i| i.client_info.name.clone()).unwrap_or_default();
        Ok(AgentJudge { peer: request.peer.clone(), prompts: JudgePrompts::default(), model })
    }
}

#[async_trait]
impl Judge for AgentJudge {
    fn name(&self) -> &str {
        "agent"
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn judge(&self, batch: &JudgeBatch) -> Result<JudgeReply, JudgeFailure> {
        let message = SamplingMessage::new(Role::User, SamplingMessageContentBlock::text(batch.to_payload()));
        let mut params = CreateMessageRequestParams::new(vec![message], MAX_TOKENS);
        params.system_prompt = Some(self.prompts.system_for(batch.mode));
        params.temperature = Some(0.0);
        let result = self
            .peer
            .create_message(params)
            .await
            .map_err(|e| JudgeFailure::new(format!("the client's model did not answer: {e}")))?;
        let text: String =
            serde_json::to_value(&result.message.content).ok().map(|content| texts(&content)).unwrap_or_default();
        if text.len() > MAX_REPLY_BYTES {
            return Err(JudgeFailure::new(format!("the reply is over {MAX_REPLY_BYTES} bytes")));
        }
        let json = memdedup::crates::core::extract_json_object(&text).ok_or_else(|| {
            JudgeFailure::new(format!("the reply holds no JSON object ({} characters)", text.chars().count()))
        })?;
        let response: JudgeResponse = serde_json::from_str(json)
            .map_err(|e| JudgeFailure::new(format!("the reply is not in the response shape: {e}")))?;
        Ok(JudgeReply { response, usage: TokenUsage::default() })
    }
}

/// The text of a sampling reply's content (one block or several), joined.
fn texts(content: &serde_json::Value) -> String {
    match content {
        serde_json::Value::Array(blocks) => blocks.iter().map(texts).collect::<Vec<_>>().join("\n"),
        serde_json::Value::Object(block) if block.get("type").and_then(|t| t.as_str()) == Some("text") => {
            block.get("text").and_then(|t| t.as_str()).unwrap_or_default().to_owned()
        }
        _ => String::new(),
    }
}
