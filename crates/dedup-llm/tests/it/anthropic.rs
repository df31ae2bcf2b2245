//! `AnthropicChat`: request shape, reply parsing, configuration.

use anyhow::{Result, bail};
use dedup_llm::fake::{FakeLlm, FakeReply, Wire, fake_token_count};
use dedup_llm::{
    AnthropicChat, AnthropicChatConfig, ChatModel, ChatRequest, Error, FinishReason, JsonSchema, TokenUsage,
};
use serde_json::json;

use crate::{KEY, MODEL, anthropic, anthropic_config};

fn request() -> ChatRequest {
    ChatRequest {
        system: "You are terse.".into(),
        user: "Say hi.".into(),
        json_schema: Some(JsonSchema { name: "x".into(), schema: json!({"type": "object"}) }),
        max_tokens: 99,
        temperature: 0.0,
    }
}

#[tokio::test]
async fn request_shape() -> Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::text("hi")]);
    anthropic(&fake).complete(&request()).await?;

    let sent = &fake.requests()[0];
    assert_eq!(sent.wire, Wire::Anthropic);
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(
        sent.body,
        json!({
            "model": MODEL,
            "system": "You are terse.",
            "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 99,
            "temperature": 0.0
        }),
        "exactly these fields: no schema, temperature 0 passed through"
    );
    assert_eq!((sent.system.as_str(), sent.user.as_str()), ("You are terse.", "Say hi."));
    Ok(())
}

#[tokio::test]
async fn blank_system_is_left_out_and_the_version_is_configurable() -> Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::text("hi")]);
    let mut config = anthropic_config(&fake);
    config.anthropic_version = "2099-01-01".into();

    AnthropicChat::new(config)?.complete(&ChatRequest { system: String::new(), ..request() }).await?;

    let sent = &fake.requests()[0];
    assert!(sent.body.get("system").is_none(), "{}", sent.body);
    assert_eq!(sent.header("anthropic-version"), Some("2099-01-01"));
    Ok(())
}

#[tokio::test]
async fn reply_text_finish_reason_usage_and_model_are_parsed() -> Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::text("{\"ok\": true}")]);
    let client = anthropic(&fake);
    assert_eq!((client.provider(), client.model()), ("anthropic", MODEL));

    let reply = client.complete(&request()).await?;

    assert_eq!(reply.text, "{\"ok\": true}");
    assert_eq!(reply.finish_reason, FinishReason::Stop);
    assert_eq!(reply.model, MODEL);
    let expected = TokenUsage {
        input_tokens: fake_token_count("You are terse.") + fake_token_count("Say hi."),
        output_tokens: fake_token_count("{\"ok\": true}"),
    };
    assert_eq!(reply.usage, expected);
    Ok(())
}

#[tokio::test]
async fn only_text_blocks_make_the_reply() -> Result<()> {
    let body = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "x"},
            {"type": "text", "text": "Hello, "},
            {"type": "tool_use", "id": "t", "name": "n", "input": {}},
            {"type": "text", "text": "world"}
        ],
        "stop_reason": "stop_sequence", "stop_sequence": "END",
        "usage": {"input_tokens": 12, "output_tokens": 34}
    });
    let fake = FakeLlm::scripted(vec![FakeReply::raw(200, body.to_string())]);

    let reply = anthropic(&fake).complete(&request()).await?;

    assert_eq!(reply.text, "Hello, world");
    assert_eq!(reply.finish_reason, FinishReason::Stop);
    assert_eq!(reply.usage, TokenUsage { input_tokens: 12, output_tokens: 34 });
    assert_eq!(reply.model, "claude-test");
    Ok(())
}

#[tokio::test]
async fn truncated_reply_has_finish_reason_length() -> Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::text("{\"facts\": [").finish_length()]);
    let reply = anthropic(&fake).complete(&request()).await?;
    assert_eq!(reply.finish_reason, FinishReason::Length);
    Ok(())
}

#[tokio::test]
async fn a_success_that_is_not_a_message_is_malformed() -> Result<()> {
    for body in ["<html>", r#"{"content": "text, not blocks"}"#, r#"{"type": "message"}"#] {
        let fake = FakeLlm::scripted(vec![FakeReply::raw(200, body)]);
        match anthropic(&fake).complete(&request()).await {
            Err(Error::Malformed { endpoint, .. }) => assert!(endpoint.ends_with("/v1/messages"), "{endpoint}"),
            other => bail!("{body}: expected Malformed, got {other:?}"),
        }
    }
    Ok(())
}

#[test]
fn invalid_configurations_are_rejected() {
    let valid = || AnthropicChatConfig::new("claude-3-5-haiku-latest", "sk-ant-1");
    let cases = [
        ("empty model", AnthropicChatConfig { model: String::new(), ..valid() }),
        ("blank key", AnthropicChatConfig { api_key: "  ".into(), ..valid() }),
        ("bad URL", AnthropicChatConfig { base_url: "not a url".into(), ..valid() }),
        ("bad version", AnthropicChatConfig { anthropic_version: "a\nb".into(), ..valid() }),
        ("zero timeout", AnthropicChatConfig { timeout: std::time::Duration::ZERO, ..valid() }),
    ];
    for (case, config) in cases {
        match AnthropicChat::new(config) {
            Err(Error::Config(message)) => assert!(!message.is_empty(), "{case}"),
            other => panic!("{case}: expected Config, got {other:?}"),
        }
    }
    assert!(AnthropicChat::new(valid()).is_ok());
}

#[test]
fn config_defaults_match_the_documentation() {
    let config = AnthropicChatConfig::new("claude-3-5-haiku-latest", "k");
    assert_eq!(config.base_url, "https://api.anthropic.com/v1");
    assert_eq!(config.anthropic_version, "2023-06-01");
    assert_eq!(config.timeout, std::time::Duration::from_secs(60));
    assert_eq!(config.retry, dedup_llm::RetryPolicy::default());
}
