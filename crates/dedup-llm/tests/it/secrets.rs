//! The API key never shows: not in `Debug` of configurations and clients, not in any
//! error we can provoke, not in logs, even when a server echoes it back.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use dedup_llm::fake::{FakeLlm, FakeReply, FakeRequest};
use dedup_llm::{
    AnthropicChat, AnthropicChatConfig, ChatModel, ChatRequest, ConversationTurn, Error, OpenAiChat, OpenAiChatConfig,
    RetryPolicy, extract_facts,
};

use crate::{KEY, anthropic, anthropic_config, capture_logs, fast_retry, openai, openai_config};

fn assert_hidden(shown: &str) {
    assert!(!shown.contains(KEY), "API key leaked: {shown}");
    assert!(!shown.contains("hunter2"), "URL password leaked: {shown}");
}

#[test]
fn debug_output_never_shows_the_key() -> Result<()> {
    let mut openai_config = OpenAiChatConfig::new("https://user:hunter2@proxy.example/v1", "gpt-4o-mini");
    openai_config.api_key = Some(KEY.into());
    let mut anthropic_config = AnthropicChatConfig::new("claude-test", KEY);
    anthropic_config.base_url = "https://user:hunter2@proxy.example/v1".into();
    let openai = OpenAiChat::new(openai_config.clone())?;
    let anthropic = AnthropicChat::new(anthropic_config.clone())?;

    for shown in [
        format!("{openai_config:?}"),
        format!("{openai_config:#?}"),
        format!("{openai:?}"),
        format!("{anthropic_config:?}"),
        format!("{anthropic_config:#?}"),
        format!("{anthropic:?}"),
    ] {
        assert_hidden(&shown);
        assert!(shown.contains("<redacted>"), "no redaction marker: {shown}");
    }
    Ok(())
}

/// A fake whose every answer quotes the key it was sent, as careless servers do.
fn echoing_fake(status: u16) -> FakeLlm {
    FakeLlm::start(Arc::new(move |request: &FakeRequest| {
        let key = request.header("x-api-key").or(request.header("authorization")).unwrap_or_default().to_owned();
        FakeReply::status(status, format!("Incorrect API key provided: {key}"))
    }))
}

#[tokio::test]
async fn errors_never_show_the_key() -> Result<()> {
    let mut errors: Vec<Error> = Vec::new();
    let request = ChatRequest::new("s", "u");
    for status in [401, 500] {
        let fake = echoing_fake(status);
        errors.push(openai(&fake).complete(&request).await.unwrap_err());
        errors.push(anthropic(&fake).complete(&request).await.unwrap_err());
    }
    let fake = FakeLlm::start(Arc::new(|_: &FakeRequest| FakeReply::raw(200, format!("{{\"choices\": \"{KEY}\"}}"))));
    errors.push(openai(&fake).complete(&request).await.unwrap_err());
    errors.push(anthropic(&fake).complete(&request).await.unwrap_err());
    let slow = FakeLlm::start(Arc::new(|_: &FakeRequest| FakeReply::text("late").delay(Duration::from_secs(2))));
    let timeouts = OpenAiChatConfig {
        timeout: Duration::from_millis(100),
        retry: RetryPolicy { max_retries: 0, ..fast_retry() },
        ..openai_config(&slow)
    };
    errors.push(OpenAiChat::new(timeouts)?.complete(&request).await.unwrap_err());
    let truncated = FakeLlm::scripted(vec![FakeReply::text("{").finish_length()]);
    let turn = ConversationTurn { user: "u".into(), assistant: "a".into() };
    errors.push(extract_facts(&openai(&truncated), &turn, 0.5).await.unwrap_err());
    let bad_key = OpenAiChatConfig { api_key: Some(format!("{KEY}\n")), ..openai_config(&fake) };
    errors.push(OpenAiChat::new(bad_key).unwrap_err());
    let bad_url = OpenAiChatConfig { base_url: format!("ftp://user:hunter2@h/{KEY}"), ..openai_config(&fake) };
    errors.push(OpenAiChat::new(bad_url).unwrap_err());
    let bad_version = AnthropicChatConfig { anthropic_version: "\n".into(), ..anthropic_config(&fake) };
    errors.push(AnthropicChat::new(bad_version).unwrap_err());

    let kinds: Vec<&str> = errors
        .iter()
        .map(|e| match e {
            Error::Rejected { .. } => "rejected",
            Error::Unavailable { .. } => "unavailable",
            Error::Malformed { .. } => "malformed",
            Error::Truncated { .. } => "truncated",
            Error::Config(_) => "config",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "rejected",
            "rejected",
            "unavailable",
            "unavailable",
            "malformed",
            "malformed",
            "unavailable",
            "truncated",
            "config",
            "config",
            "config"
        ]
    );
    for error in &errors {
        assert_hidden(&error.to_string());
        assert_hidden(&format!("{error:?}"));
    }
    // The server's message is kept, with the key scrubbed out of it.
    assert!(errors[0].to_string().contains("Incorrect API key provided: Bearer <redacted>"), "{}", errors[0]);
    Ok(())
}

#[tokio::test]
async fn logs_never_show_the_key() -> Result<()> {
    let logs = capture_logs();
    let fake = echoing_fake(503);

    let error = anthropic(&fake).complete(&ChatRequest::new("s", "u")).await.unwrap_err();

    assert!(matches!(error, Error::Unavailable { attempts: 4, .. }), "{error:?}");
    let text = logs.text();
    assert!(text.contains("chat request failed; retrying"), "no retry logged: {text}");
    assert_hidden(&text);
    Ok(())
}
