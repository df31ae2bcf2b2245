//! Integration tests for `dedup-llm`: both clients and fact extraction against the fake
//! LLM server (`dedup_llm::fake`) on 127.0.0.1. One binary, one module per topic.

mod anthropic;
mod extraction;
mod openai;
mod retries;
mod secrets;

use std::cell::RefCell;
use std::io;
use std::sync::OnceLock;
use std::time::Duration;

use dedup_llm::fake::FakeLlm;
use dedup_llm::{AnthropicChat, AnthropicChatConfig, OpenAiChat, OpenAiChatConfig, RetryPolicy};

/// The model name the tests configure.
pub const MODEL: &str = "fake-chat-1";
/// The API key the tests configure; it must never show up anywhere.
pub const KEY: &str = "sk-test-SECRET-0123456789";

/// Three retries with millisecond backoffs, so failing tests stay fast.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy { max_retries: 3, initial_backoff: Duration::from_millis(5), max_backoff: Duration::from_millis(50) }
}

/// An OpenAI client configuration for `fake` with the test key and fast retries.
pub fn openai_config(fake: &FakeLlm) -> OpenAiChatConfig {
    let mut config = OpenAiChatConfig::new(fake.base_url(), MODEL);
    config.api_key = Some(KEY.to_owned());
    config.retry = fast_retry();
    config.timeout = Duration::from_secs(5);
    config
}

/// An Anthropic client configuration for `fake` with the test key and fast retries.
pub fn anthropic_config(fake: &FakeLlm) -> AnthropicChatConfig {
    let mut config = AnthropicChatConfig::new(MODEL, KEY);
    config.base_url = fake.base_url();
    config.retry = fast_retry();
    config.timeout = Duration::from_secs(5);
    config
}

/// An OpenAI client for `fake` (see [`openai_config`]).
pub fn openai(fake: &FakeLlm) -> OpenAiChat {
    OpenAiChat::new(openai_config(fake)).expect("valid OpenAI test configuration")
}

/// An Anthropic client for `fake` (see [`anthropic_config`]).
pub fn anthropic(fake: &FakeLlm) -> AnthropicChat {
    AnthropicChat::new(anthropic_config(fake)).expect("valid Anthropic test configuration")
}

/// The log lines of one test thread, from [`capture_logs`].
#[derive(Clone, Copy)]
pub struct Logs;

impl Logs {
    /// Everything this thread logged (at `info` and above) since [`capture_logs`].
    pub fn text(&self) -> String {
        THREAD_LOGS.with(|buffer| String::from_utf8_lossy(&buffer.borrow()).into_owned())
    }
}

thread_local! {
    static THREAD_LOGS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Writes each log line to the buffer of the thread that logged it.
struct ThreadWriter;

impl io::Write for ThreadWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        THREAD_LOGS.with(|buffer| buffer.borrow_mut().extend_from_slice(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Starts capturing this thread's log events (`info` and above).
///
/// One global subscriber, installed by the first caller, writes every event to the buffer
/// of the thread that emitted it; tests run on tokio's current-thread runtime, so the
/// client's events land in the test's own buffer. (Scoped `set_default` subscribers race
/// with tests running in parallel: tracing caches callsite interest globally.)
pub fn capture_logs() -> Logs {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| ThreadWriter)
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber in this test binary");
    });
    THREAD_LOGS.with(|buffer| buffer.borrow_mut().clear());
    Logs
}
