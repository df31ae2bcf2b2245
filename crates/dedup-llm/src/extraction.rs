//! Fact extraction (seed 002): ask a chat model for the facts of one conversation turn,
//! validate its reply with `dedup-core`, and keep the confident ones.

use dedup_core::{ContentHash, ExtractedFact, FactCategory, InvalidFact, read_extracted_facts};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{ChatModel, ChatRequest, Error, FinishReason, JsonSchema, Result, TokenUsage};

/// The system prompt of fact extraction: the JSON to answer with, the six categories and
/// what confidence means.
pub const EXTRACTION_SYSTEM_PROMPT: &str = "\
You extract durable facts about the user from one turn of a conversation between the user \
and an AI assistant, for the assistant's long-term memory.

Answer with one JSON object and nothing else, in exactly this shape:
{\"facts\": [{\"content\": \"...\", \"category\": \"...\", \"confidence\": 0.0}]}

Rules for each fact:
- content: one short, self-contained statement in English, e.g. \"User prefers tabs over spaces\".
- category: exactly one of these six:
  - preference: something the user likes, dislikes or wants done a certain way
  - knowledge: something the user knows, or a fact about the user's world
  - context: the user's situation: role, project, team, environment, tools
  - behavior: how the user tends to act or work
  - goal: something the user is trying to achieve
  - correction: the user correcting something the assistant got wrong
- confidence: a number from 0.0 to 1.0 saying how sure you are that the fact is true and \
worth remembering: 1.0 when the user stated it outright, about 0.5 when it is implied, \
below 0.3 when it is a guess.

Extract only facts about the user that will still matter in later conversations; skip \
small talk, one-off requests and what the assistant said about itself. If there is \
nothing worth remembering, answer {\"facts\": []}.";

/// The token limit of an extraction request: enough for a few dozen short facts.
pub const EXTRACTION_MAX_TOKENS: u32 = 2048;

/// One turn of a conversation: what the user said and what the assistant answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationTurn {
    /// The user's message.
    pub user: String,
    /// The assistant's reply.
    pub assistant: String,
}

/// The outcome of [`extract_facts`].
///
/// **Invariant:** every fact in `kept` has a confidence at or above the threshold asked
/// for and every fact in `skipped_low_confidence` one below it; together they are the
/// model's facts, in the model's order within each list.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FactExtraction {
    /// The facts to store.
    pub kept: Vec<ExtractedFact>,
    /// The facts below the confidence threshold, not to be stored (each was logged).
    pub skipped_low_confidence: Vec<ExtractedFact>,
    /// The facts of the reply that were invalid (an unknown category, a confidence out of
    /// range…), not to be stored, with why (each was logged). The reply's other facts
    /// stand.
    pub skipped_invalid: Vec<InvalidFact>,
    /// What the model call cost.
    pub usage: TokenUsage,
}

/// The JSON Schema of the reply [`EXTRACTION_SYSTEM_PROMPT`] asks for, strict-mode
/// compatible (every property required, no additional properties).
pub fn extraction_schema() -> JsonSchema {
    let categories: Vec<&str> = FactCategory::ALL.iter().map(|c| c.as_str()).collect();
    JsonSchema {
        name: "extracted_facts".to_owned(),
        schema: json!({
            "type": "object",
            "properties": {
                "facts": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string"},
                            "category": {"type": "string", "enum": categories},
                            "confidence": {"type": "number"}
                        },
                        "required": ["content", "category", "confidence"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["facts"],
            "additionalProperties": false
        }),
    }
}

/// The chat request [`extract_facts`] sends for `turn`: [`EXTRACTION_SYSTEM_PROMPT`], the
/// turn between `<user>` and `<assistant>` tags, [`extraction_schema`], temperature 0 and
/// [`EXTRACTION_MAX_TOKENS`].
pub fn extraction_request(turn: &ConversationTurn) -> ChatRequest {
    let user = format!(
        "Extract the facts worth remembering from this conversation turn.\n\n<user>\n{}\n</user>\n\n<assistant>\n{}\n</assistant>",
        turn.user.trim(),
        turn.assistant.trim()
    );
    ChatRequest {
        system: EXTRACTION_SYSTEM_PROMPT.to_owned(),
        user,
        json_schema: Some(extraction_schema()),
        max_tokens: EXTRACTION_MAX_TOKENS,
        temperature: 0.0,
    }
}

/// Extracts facts from one conversation turn with `model` (seed 002), keeping those with
/// a confidence of at least `min_confidence` (seed 002's default is
/// [`dedup_core::DEFAULT_CONFIDENCE_THRESHOLD`], 0.5).
///
/// Facts below the threshold are logged at `info` (category, confidence and the content
/// hash's fingerprint, never the text) and returned in
/// [`FactExtraction::skipped_low_confidence`]. A turn whose two messages are both blank
/// yields nothing without calling the model. Nothing is stored here.
///
/// An invalid fact of the reply (seed 002 validates every category) is skipped, logged
/// at `warn` (its index and why, never its text) and returned in
/// [`FactExtraction::skipped_invalid`]; the reply's other facts are kept.
///
/// Fails with [`Error::InvalidRequest`] for a threshold outside `[0, 1]`, with
/// [`Error::Truncated`] when the reply was cut at its token limit, with [`Error::Facts`]
/// when the reply is not the expected JSON object, and as [`ChatModel::complete`] fails.
pub async fn extract_facts(
    model: &dyn ChatModel,
    turn: &ConversationTurn,
    min_confidence: f64,
) -> Result<FactExtraction> {
    if !(0.0..=1.0).contains(&min_confidence) {
        return Err(Error::InvalidRequest(format!("the confidence threshold {min_confidence} is not in [0, 1]")));
    }
    if turn.user.trim().is_empty() && turn.assistant.trim().is_empty() {
        return Ok(FactExtraction::default());
    }
    let request = extraction_request(turn);
    let reply = model.complete(&request).await?;
    if reply.finish_reason == FinishReason::Length {
        return Err(Error::Truncated { model: reply.model, max_tokens: request.max_tokens });
    }
    let read = read_extracted_facts(&reply.text)?;
    for invalid in &read.invalid {
        tracing::warn!(
            provider = model.provider(),
            model = model.model(),
            index = invalid.index,
            reason = %invalid.reason,
            "skipped an invalid fact"
        );
    }
    let (kept, skipped_low_confidence): (Vec<_>, Vec<_>) =
        read.facts.into_iter().partition(|fact| fact.confidence >= min_confidence);
    for fact in &skipped_low_confidence {
        tracing::info!(
            provider = model.provider(),
            model = model.model(),
            fact = %ContentHash::of(&fact.content).fingerprint(),
            category = %fact.category,
            confidence = fact.confidence,
            min_confidence,
            "skipped a low-confidence fact"
        );
    }
    Ok(FactExtraction { kept, skipped_low_confidence, skipped_invalid: read.invalid, usage: reply.usage })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_names_every_category_and_the_json_shape() {
        for category in FactCategory::ALL {
            assert!(EXTRACTION_SYSTEM_PROMPT.contains(&format!("- {category}: ")), "{category}");
        }
        assert!(EXTRACTION_SYSTEM_PROMPT.contains(r#"{"facts": [{"content": "...", "category": "...""#));
        assert!(EXTRACTION_SYSTEM_PROMPT.contains("confidence"));
    }

    #[test]
    fn the_request_wraps_the_turn_and_carries_the_schema() {
        let turn = ConversationTurn { user: " I use Neovim \n".into(), assistant: "Noted.".into() };
        let request = extraction_request(&turn);
        assert!(request.user.contains("<user>\nI use Neovim\n</user>"), "{}", request.user);
        assert!(request.user.contains("<assistant>\nNoted.\n</assistant>"), "{}", request.user);
        assert_eq!(request.temperature, 0.0);
        let schema = request.json_schema.unwrap();
        let categories = &schema.schema["properties"]["facts"]["items"]["properties"]["category"]["enum"];
        assert_eq!(categories.as_array().map(Vec::len), Some(6));
    }
}
