//! Chat-model clients for memdedup: send one system prompt and one user message to a
//! language model and get its reply, its finish reason and its token usage.
//!
//! [`ChatModel`] is the object-safe trait every client implements, so configuration can
//! pick one at run time as `Arc<dyn ChatModel>`. [`OpenAiChat`] speaks the
//! OpenAI-compatible `/v1/chat/completions` wire format (OpenAI, Ollama, vLLM, llama.cpp
//! server, LM Studio), with optional strict JSON-schema output; [`AnthropicChat`] speaks
//! Anthropic's `/v1/messages`. Both retry throttling, server errors, timeouts and
//! connection failures with `dedup-core`'s [`RetryPolicy`] (full-jitter backoff, honouring
//! `Retry-After`) and keep the API key out of `Debug` output, logs and errors.
//! [`extract_facts`] is seed 002's fact extraction on top of any [`ChatModel`]; the reply's
//! JSON contract and its validation live in `dedup-core` ([`parse_extracted_facts`]).
//! With the `fake-server` feature, the `fake` module is an in-process fake server
//! speaking both wire formats, for tests here and in the crates above.
//!
//! **Architecture invariant:** among memdedup's crates this crate depends on `dedup-core`
//! only: it knows nothing of storage, embedders or merges, and stores nothing it
//! extracts.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod anthropic;
mod chat;
mod error;
mod extraction;
#[cfg(feature = "fake-server")]
pub mod fake;
mod openai;
mod transport;

pub use anthropic::{AnthropicChat, AnthropicChatConfig};
pub use chat::{ChatModel, ChatReply, ChatRequest, FinishReason, JsonSchema, TokenUsage};
#[doc(inline)]
pub use dedup_core::{ExtractedFact, RetryPolicy, parse_extracted_facts};
pub use error::{Error, Result};
pub use extraction::{
    ConversationTurn, EXTRACTION_MAX_TOKENS, EXTRACTION_SYSTEM_PROMPT, FactExtraction, extract_facts,
    extraction_request, extraction_schema,
};
pub use openai::{OpenAiChat, OpenAiChatConfig};

/// The most bytes of one chat reply read unless a client's `max_reply_bytes` says
/// otherwise: a judge's or an extraction's reply is a few KiB, so 4 MiB only stops a
/// broken or hostile server from filling memory.
pub const DEFAULT_MAX_REPLY_BYTES: usize = 4 << 20;

/// The API key variable shared by every provider; it wins over the provider's own.
pub const JUDGE_API_KEY_ENV_VAR: &str = "MEMDEDUP_JUDGE_API_KEY";
/// The OpenAI key variable, read for provider `"openai"`.
pub const OPENAI_API_KEY_ENV_VAR: &str = "OPENAI_API_KEY";
/// The Anthropic key variable, read for provider `"anthropic"`.
pub const ANTHROPIC_API_KEY_ENV_VAR: &str = "ANTHROPIC_API_KEY";

/// The API key for `provider` (`"openai"` or `"anthropic"`, as [`ChatModel::provider`]
/// names them) from the environment: [`JUDGE_API_KEY_ENV_VAR`] when set, else
/// [`OPENAI_API_KEY_ENV_VAR`] or [`ANTHROPIC_API_KEY_ENV_VAR`].
///
/// Blank, unset and non-UTF-8 variables count as unset; the key is returned trimmed. For
/// any other provider only [`JUDGE_API_KEY_ENV_VAR`] is read.
pub fn api_key_from_env(provider: &str) -> Option<String> {
    api_key_from(provider, |name| std::env::var(name).ok())
}

/// [`api_key_from_env`] with `lookup` standing in for the environment.
fn api_key_from(provider: &str, lookup: impl Fn(&str) -> Option<String>) -> Option<String> {
    let read = |name: &str| lookup(name).map(|value| value.trim().to_owned()).filter(|value| !value.is_empty());
    let provider_var = match provider {
        "openai" => Some(OPENAI_API_KEY_ENV_VAR),
        "anthropic" => Some(ANTHROPIC_API_KEY_ENV_VAR),
        _ => None,
    };
    read(JUDGE_API_KEY_ENV_VAR).or_else(|| provider_var.and_then(read))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn api_keys_come_from_the_judge_variable_then_the_provider_one() {
        let both = env(&[("MEMDEDUP_JUDGE_API_KEY", "judge"), ("OPENAI_API_KEY", "oa"), ("ANTHROPIC_API_KEY", "an")]);
        assert_eq!(api_key_from("openai", &both).as_deref(), Some("judge"));
        assert_eq!(api_key_from("anthropic", &both).as_deref(), Some("judge"));

        let providers =
            env(&[("MEMDEDUP_JUDGE_API_KEY", "  "), ("OPENAI_API_KEY", " oa\n"), ("ANTHROPIC_API_KEY", "an")]);
        assert_eq!(api_key_from("openai", &providers).as_deref(), Some("oa"));
        assert_eq!(api_key_from("anthropic", &providers).as_deref(), Some("an"));
        assert_eq!(api_key_from("other", &providers), None);

        assert_eq!(api_key_from("openai", env(&[("OPENAI_API_KEY", "")])), None);
        assert_eq!(api_key_from("anthropic", env(&[("OPENAI_API_KEY", "oa")])), None);
    }

    #[test]
    fn api_key_from_env_reads_the_process_environment() {
        // Tests cannot set variables (no unsafe); an unknown provider with no judge key
        // set reads nothing else.
        if std::env::var(JUDGE_API_KEY_ENV_VAR).is_err() {
            assert_eq!(api_key_from_env("no-such-provider"), None);
        }
    }
}
