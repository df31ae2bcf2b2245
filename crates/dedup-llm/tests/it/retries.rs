//! Retries, shared by both clients: throttling with `Retry-After`, server errors,
//! timeouts, connection failures, and the 4xx that must not be retried.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use dedup_llm::fake::{FakeLlm, FakeReply, Wire};
use dedup_llm::{
    AnthropicChat, AnthropicChatConfig, ChatModel, ChatRequest, Error, OpenAiChat, OpenAiChatConfig, RetryPolicy,
};

use crate::{KEY, MODEL, anthropic_config, fast_retry, openai_config};

const WIRES: [Wire; 2] = [Wire::OpenAi, Wire::Anthropic];

/// A client of `wire` for `fake` with `retry` and `timeout`.
fn client(wire: Wire, fake: &FakeLlm, retry: RetryPolicy, timeout: Duration) -> Box<dyn ChatModel> {
    match wire {
        Wire::OpenAi => {
            let config = OpenAiChatConfig { retry, timeout, ..openai_config(fake) };
            Box::new(OpenAiChat::new(config).unwrap())
        }
        Wire::Anthropic => {
            let config = AnthropicChatConfig { retry, timeout, ..anthropic_config(fake) };
            Box::new(AnthropicChat::new(config).unwrap())
        }
    }
}

fn fast(wire: Wire, fake: &FakeLlm) -> Box<dyn ChatModel> {
    client(wire, fake, fast_retry(), Duration::from_secs(5))
}

fn request() -> ChatRequest {
    ChatRequest::new("system", "user")
}

#[tokio::test]
async fn too_many_requests_honours_retry_after() -> Result<()> {
    for wire in WIRES {
        let fake =
            FakeLlm::scripted(vec![FakeReply::status(429, "rate limited").retry_after(1), FakeReply::text("ok")]);
        let retry = RetryPolicy { max_backoff: Duration::from_secs(5), ..fast_retry() };
        let started = Instant::now();

        let reply = client(wire, &fake, retry, Duration::from_secs(5)).complete(&request()).await?;

        let elapsed = started.elapsed();
        assert_eq!(reply.text, "ok");
        let requests = fake.requests();
        assert_eq!(requests.len(), 2, "{wire:?}: a second attempt after the 429");
        let waited = requests[1].received_at.duration_since(requests[0].received_at);
        assert!(waited >= Duration::from_millis(950), "{wire:?}: retried after only {waited:?}");
        assert!(elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(4), "{wire:?}: took {elapsed:?}");
    }
    Ok(())
}

#[tokio::test]
async fn retry_after_is_capped_at_max_backoff() -> Result<()> {
    for wire in WIRES {
        let fake = FakeLlm::scripted(vec![FakeReply::status(503, "busy").retry_after(120), FakeReply::text("ok")]);
        let reply = tokio::time::timeout(Duration::from_secs(3), fast(wire, &fake).complete(&request())).await??;
        assert_eq!(reply.text, "ok", "{wire:?}");
    }
    Ok(())
}

#[tokio::test]
async fn server_error_then_success() -> Result<()> {
    for wire in WIRES {
        // 529 is Anthropic's "overloaded"; any 5xx is retried.
        let fake = FakeLlm::scripted(vec![
            FakeReply::status(500, "internal error"),
            FakeReply::status(529, "overloaded"),
            FakeReply::text("finally"),
        ]);
        let reply = fast(wire, &fake).complete(&request()).await?;
        assert_eq!(reply.text, "finally", "{wire:?}");
        assert_eq!(fake.request_count(), 3, "{wire:?}");
    }
    Ok(())
}

#[tokio::test]
async fn persistent_server_errors_are_unavailable_with_the_attempt_count() -> Result<()> {
    for wire in WIRES {
        let fake = FakeLlm::scripted(vec![]); // 500 forever
        let retry = RetryPolicy { max_retries: 2, ..fast_retry() };

        let error = client(wire, &fake, retry, Duration::from_secs(5)).complete(&request()).await.unwrap_err();

        match &error {
            Error::Unavailable { endpoint, attempts: 3, last_error } => {
                assert!(endpoint.starts_with(&fake.base_url()), "{endpoint}");
                assert!(last_error.contains("500"), "{last_error}");
                assert!(last_error.contains("script is exhausted"), "{last_error}");
            }
            other => bail!("{wire:?}: expected Unavailable after 3 attempts, got {other:?}"),
        }
        assert!(error.is_unavailable());
        assert!(error.to_string().contains("unavailable after 3 attempts"), "{error}");
        assert_eq!(fake.request_count(), 3, "{wire:?}");
    }
    Ok(())
}

#[tokio::test]
async fn bad_request_is_rejected_with_the_server_message_and_no_retry() -> Result<()> {
    for wire in WIRES {
        for status in [400, 401, 404, 422] {
            let fake = FakeLlm::scripted(vec![FakeReply::status(status, "model `nope` does not exist")]);

            let error = fast(wire, &fake).complete(&request()).await.unwrap_err();

            match &error {
                Error::Rejected { status: got, message, .. } => {
                    assert_eq!(*got, status);
                    assert_eq!(message, "model `nope` does not exist");
                }
                other => bail!("{wire:?} {status}: expected Rejected, got {other:?}"),
            }
            assert!(!error.is_unavailable());
            assert_eq!(fake.request_count(), 1, "{wire:?} {status}: no retry");
        }
    }
    Ok(())
}

#[tokio::test]
async fn timeouts_are_retried_then_unavailable() -> Result<()> {
    for wire in WIRES {
        let fake = FakeLlm::start(std::sync::Arc::new(|_: &dedup_llm::fake::FakeRequest| {
            FakeReply::text("too late").delay(Duration::from_secs(3))
        }));
        let retry = RetryPolicy { max_retries: 1, ..fast_retry() };
        let started = Instant::now();

        let error = client(wire, &fake, retry, Duration::from_millis(200)).complete(&request()).await.unwrap_err();

        match &error {
            Error::Unavailable { attempts: 2, .. } => {}
            other => bail!("{wire:?}: expected Unavailable after 2 attempts, got {other:?}"),
        }
        assert_eq!(fake.request_count(), 2, "{wire:?}");
        assert!(started.elapsed() < Duration::from_secs(2), "{wire:?}: did not time out: {:?}", started.elapsed());
    }
    Ok(())
}

#[tokio::test]
async fn a_timeout_then_success() -> Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::text("slow").delay(Duration::from_secs(3)), FakeReply::text("fast")]);
    let reply = client(Wire::OpenAi, &fake, fast_retry(), Duration::from_millis(200)).complete(&request()).await?;
    assert_eq!(reply.text, "fast");
    assert_eq!(fake.request_count(), 2);
    Ok(())
}

#[tokio::test]
async fn connection_refused_is_unavailable() -> Result<()> {
    // Bind then drop a listener, so the port very likely has nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut config = OpenAiChatConfig::new(format!("http://127.0.0.1:{port}/v1"), MODEL);
    config.api_key = Some(KEY.into());
    config.retry = RetryPolicy { max_retries: 1, ..fast_retry() };

    let error = OpenAiChat::new(config)?.complete(&request()).await.unwrap_err();

    match &error {
        Error::Unavailable { attempts: 2, last_error, .. } => {
            assert!(last_error.contains(&format!("127.0.0.1:{port}")), "{last_error}");
        }
        other => bail!("expected Unavailable after 2 attempts, got {other:?}"),
    }
    Ok(())
}
