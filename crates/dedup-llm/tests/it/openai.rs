//! `OpenAiChat`: request shape, reply parsing, configuration.

use std::sync::Arc;

use anyhow::{Result, bail};
use dedup_core::extract_json_object;
use dedup_llm::fake::{FakeLlm, FakeReply, FakeRequest, Wire, fake_token_count};
use dedup_llm::{ChatModel, ChatRequest, Error, FinishReason, JsonSchema, OpenAiChat, OpenAiChatConfig, TokenUsage};
use serde_json::json;

use crate::{KEY, MODEL, anthropic_config, openai, openai_config};

fn schema() -> JsonSchema {
    JsonSchema { name: "verdict".into(), schema: json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}) }
}

fn request() -> ChatRequest {
    ChatRequest {
        system: "You are terse.".into(),
        user: "Say hi.".into(),
        json_schema: Some(schema()),
        max_tokens: 77,
        temperature: 0.0,
    }
}

#[tokio::test]
async fn request_shape_without_structured_output() -> Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::text("hi")]);
    openai(&fake).complete(&request()).await?;

    let sent = &fake.requests()[0];
    assert_eq!(sent.wire, Wire::OpenAi);
    assert_eq!(sent.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(sent.body["model"], MODEL);
    assert_eq!(sent.body["max_tokens"], 77);
    assert_eq!(sent.body["temperature"], json!(0.0), "temperature 0 is sent, not dropped");
    assert_eq!(
        sent.body["messages"],
        json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}])
    );
    assert!(sent.body.get("response_format").is_none(), "no response_format without structured output: {}", sent.body);
    assert_eq!((sent.system.as_str(), sent.user.as_str()), ("You are terse.", "Say hi."));
    Ok(())
}

#[tokio::test]
async fn structured_output_sends_a_strict_json_schema() -> Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::text("{\"ok\": true}"), FakeReply::text("{}")]);
    let mut config = openai_config(&fake);
    config.structured_output = true;
    let client = OpenAiChat::new(config)?;

    client.complete(&request()).await?;
    client.complete(&ChatRequest { json_schema: None, ..request() }).await?;

    let requests = fake.requests();
    assert_eq!(
        requests[0].body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema().schema, "strict": true}})
    );
    assert!(requests[1].body.get("response_format").is_none(), "no schema, no response_format");
    Ok(())
}

#[tokio::test]
async fn no_key_no_authorization_and_blank_system_is_left_out() -> Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::text("hi")]);
    let mut config = openai_config(&fake);
    config.api_key = None;
    let request = ChatRequest { system: "  ".into(), temperature: 0.7, ..request() };

    OpenAiChat::new(config)?.complete(&request).await?;

    let sent = &fake.requests()[0];
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.body["messages"], json!([{"role": "user", "content": "Say hi."}]));
    let temperature = sent.body["temperature"].as_f64().unwrap();
    assert!((temperature - 0.7).abs() < 1e-6, "{temperature}");
    Ok(())
}

#[tokio::test]
async fn reply_text_finish_reason_usage_and_model_are_parsed() -> Result<()> {
    let fake = FakeLlm::start(Arc::new(|req: &FakeRequest| FakeReply::text(format!("echo: {}", req.user))));
    let client = openai(&fake);
    assert_eq!((client.provider(), client.model()), ("openai", MODEL));

    let reply = client.complete(&request()).await?;

    assert_eq!(reply.text, "echo: Say hi.");
    assert_eq!(reply.finish_reason, FinishReason::Stop);
    assert_eq!(reply.model, MODEL);
    let expected = TokenUsage {
        input_tokens: fake_token_count("You are terse.") + fake_token_count("Say hi."),
        output_tokens: fake_token_count("echo: Say hi."),
    };
    assert_eq!(reply.usage, expected);
    Ok(())
}

#[tokio::test]
async fn missing_usage_counts_zero_and_null_content_is_empty() -> Result<()> {
    let body = json!({
        "model": "served-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null}, "finish_reason": "content_filter"}]
    });
    let fake = FakeLlm::scripted(vec![FakeReply::raw(200, body.to_string())]);

    let reply = openai(&fake).complete(&request()).await?;

    assert_eq!(reply.text, "");
    assert_eq!(reply.usage, TokenUsage::default());
    assert_eq!(reply.finish_reason, FinishReason::Other("content_filter".into()));
    assert_eq!(reply.model, "served-model", "the server's model name is reported");
    Ok(())
}

#[tokio::test]
async fn fenced_json_survives_to_extract_json_object() -> Result<()> {
    let text = "Here you go:\n```json\n{\"ok\": true, \"note\": \"a } in a string\"}\n```\nAnything else?";
    let fake = FakeLlm::scripted(vec![FakeReply::text(text)]);

    let reply = openai(&fake).complete(&request()).await?;

    assert_eq!(reply.text, text);
    assert_eq!(extract_json_object(&reply.text), Some("{\"ok\": true, \"note\": \"a } in a string\"}"));
    Ok(())
}

#[tokio::test]
async fn truncated_reply_has_finish_reason_length() -> Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::text("{\"ok\": tr").finish_length()]);

    let reply = openai(&fake).complete(&request()).await?;

    assert_eq!(reply.finish_reason, FinishReason::Length);
    assert_eq!(reply.text, "{\"ok\": tr");
    Ok(())
}

#[tokio::test]
async fn a_success_that_is_not_a_chat_completion_is_malformed() -> Result<()> {
    for body in ["not json at all", r#"{"choices": []}"#, r#"{"data": [1, 2]}"#] {
        let fake = FakeLlm::scripted(vec![FakeReply::raw(200, body)]);
        match openai(&fake).complete(&request()).await {
            Err(Error::Malformed { endpoint, reason }) => {
                assert!(endpoint.ends_with("/v1/chat/completions"), "{endpoint}");
                assert!(!reason.is_empty());
            }
            other => bail!("{body}: expected Malformed, got {other:?}"),
        }
        assert_eq!(fake.request_count(), 1, "{body}: a malformed success is not retried");
    }
    Ok(())
}

/// Defect 4: a reply over `max_reply_bytes` fails the call without reading it all, and
/// is not retried (the default cap is 4 MiB; a judge's reply is a few KiB).
#[tokio::test]
async fn defect_4_a_reply_over_max_reply_bytes_fails_the_call() -> Result<()> {
    assert_eq!(dedup_llm::DEFAULT_MAX_REPLY_BYTES, 4 << 20);
    assert_eq!(OpenAiChatConfig::new("http://127.0.0.1:1/v1", MODEL).max_reply_bytes, 4 << 20);
    let huge = "x".repeat(64 << 10);
    let fake = FakeLlm::scripted(vec![FakeReply::text(&huge), FakeReply::text(&huge)]);
    let mut config = openai_config(&fake);
    config.max_reply_bytes = 16 << 10;
    match OpenAiChat::new(config)?.complete(&request()).await {
        Err(Error::Malformed { reason, .. }) => {
            assert!(reason.contains("over 16384 bytes (max_reply_bytes)"), "{reason}")
        }
        other => bail!("expected the long reply to fail, got {other:?}"),
    }
    assert_eq!(fake.request_count(), 1, "a reply over the cap is not retried");

    let fake = FakeLlm::scripted(vec![FakeReply::text(&huge)]);
    let mut config = anthropic_config(&fake);
    config.max_reply_bytes = 16 << 10;
    let error = dedup_llm::AnthropicChat::new(config)?.complete(&request()).await.unwrap_err().to_string();
    assert!(error.contains("max_reply_bytes"), "{error}");

    // A reply within the cap is read.
    let fake = FakeLlm::scripted(vec![FakeReply::text(&huge)]);
    let reply = openai(&fake).complete(&request()).await?;
    assert_eq!(reply.text.len(), huge.len());
    Ok(())
}

#[tokio::test]
async fn invalid_requests_are_refused_before_sending() -> Result<()> {
    let fake = FakeLlm::scripted(vec![]);
    let client = openai(&fake);
    for bad in [ChatRequest { max_tokens: 0, ..request() }, ChatRequest { temperature: f32::NAN, ..request() }] {
        let error = client.complete(&bad).await.unwrap_err();
        assert!(matches!(error, Error::InvalidRequest(_)), "{error:?}");
    }
    assert_eq!(fake.request_count(), 0);
    Ok(())
}

#[test]
fn invalid_configurations_are_rejected() {
    let valid = || OpenAiChatConfig::new(OpenAiChatConfig::OPENAI_BASE_URL, "gpt-4o-mini");
    let cases = [
        ("empty model", OpenAiChatConfig { model: " ".into(), ..valid() }),
        ("not a URL", OpenAiChatConfig { base_url: "api.openai.com/v1".into(), ..valid() }),
        ("ftp scheme", OpenAiChatConfig { base_url: "ftp://example.com/v1".into(), ..valid() }),
        ("query", OpenAiChatConfig { base_url: "https://example.com/v1?key=1".into(), ..valid() }),
        ("zero timeout", OpenAiChatConfig { timeout: std::time::Duration::ZERO, ..valid() }),
        ("key with a newline", OpenAiChatConfig { api_key: Some("sk-1\nX: y".into()), ..valid() }),
    ];
    for (case, config) in cases {
        match OpenAiChat::new(config) {
            Err(Error::Config(message)) => assert!(!message.is_empty(), "{case}"),
            other => panic!("{case}: expected Config, got {other:?}"),
        }
    }
    assert!(OpenAiChat::new(valid()).is_ok());
}

#[test]
fn config_defaults_match_the_documentation() {
    let config = OpenAiChatConfig::new("http://127.0.0.1:11434/v1", "qwen2.5:7b");
    assert_eq!(config.timeout, std::time::Duration::from_secs(60));
    assert_eq!(config.retry, dedup_llm::RetryPolicy::default());
    assert_eq!(config.api_key, None);
    assert!(!config.structured_output);
}
