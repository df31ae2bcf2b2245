//! A fake LLM server for tests (feature `fake-server`): one in-process HTTP server on
//! `127.0.0.1` speaking both wire formats this crate's clients use.
//!
//! [`FakeLlm::start`] serves `POST /v1/chat/completions` (OpenAI-compatible) and
//! `POST /v1/messages` (Anthropic) on a free loopback port and answers every request with
//! what a handler returns; [`FakeLlm::scripted`] answers with a list of replies in order,
//! then with 500s. Every request is recorded as a [`FakeRequest`]: which wire format, its
//! headers (names lower-cased), its JSON body, and the system prompt and user message
//! pulled out of either format. Point a client at [`FakeLlm::base_url`]
//! (`http://127.0.0.1:PORT/v1`).
//!
//! [`FakeReply`] builds the answers:
//!
//! - [`FakeReply::text`] is a 200 reply in the request's own format, close enough to the
//!   real APIs that the production clients parse it unchanged: a `chat.completion` with
//!   one choice (`finish_reason` `stop`), or a `message` with one text block
//!   (`stop_reason` `end_turn`). Its usage is derived from lengths with
//!   [`fake_token_count`] (characters / 4, rounded up): input from the system prompt and
//!   user message, output from the text. [`FakeReply::finish_length`] makes it a reply
//!   cut at the token limit (`length` / `max_tokens`).
//! - [`FakeReply::status`] is an error status with the provider's error body
//!   (`{"error": {"message": …}}`, inside `{"type": "error", …}` for Anthropic);
//!   [`FakeReply::retry_after`] adds a `Retry-After` header.
//! - [`FakeReply::raw`] is any status with a body sent as is.
//! - [`FakeReply::delay`] makes any reply wait before it is sent, to provoke client
//!   timeouts.
//!
//! A request whose body is not a JSON object is recorded and answered with 400 without
//! calling the handler; any other path answers 404. The server stops when the
//! [`FakeLlm`] is dropped.
//!
//! ```no_run
//! # async fn demo() {
//! use std::sync::Arc;
//! use dedup_llm::fake::{FakeLlm, FakeReply, FakeRequest};
//!
//! let fake = FakeLlm::start(Arc::new(|request: &FakeRequest| FakeReply::text(format!("echo: {}", request.user))));
//! let scripted = FakeLlm::scripted(vec![FakeReply::status(429, "slow down").retry_after(1), FakeReply::text("{}")]);
//! # let _ = (fake.base_url(), scripted.request_count());
//! # }
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// What answers the fake's requests.
pub type FakeHandler = Arc<dyn Fn(&FakeRequest) -> FakeReply + Send + Sync>;

/// Which wire format a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wire {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
}

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct FakeRequest {
    /// The wire format (by path).
    pub wire: Wire,
    /// Every header, names lower-cased; repeated headers are joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The JSON body (`null` when it was not JSON).
    pub body: Value,
    /// The system prompt: the `system` messages (OpenAI) or the `system` field
    /// (Anthropic), text parts joined by newlines; empty when absent.
    pub system: String,
    /// The user messages' text, joined by newlines.
    pub user: String,
    /// When the fake received it.
    pub received_at: Instant,
}

impl FakeRequest {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }
}

/// What the fake answers to one request; see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeReply {
    status: u16,
    body: FakeBody,
    finish_length: bool,
    retry_after: Option<u64>,
    delay: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq)]
enum FakeBody {
    Text(String),
    Error(String),
    Raw(String),
}

impl FakeReply {
    /// 200 with `text` as the model's reply, in the request's wire format.
    pub fn text(text: impl Into<String>) -> FakeReply {
        FakeReply::new(200, FakeBody::Text(text.into()))
    }

    /// Status `code` with the provider's JSON error body carrying `message`.
    pub fn status(code: u16, message: impl Into<String>) -> FakeReply {
        FakeReply::new(code, FakeBody::Error(message.into()))
    }

    /// Status `code` with `body` sent as is (`Content-Type: application/json`).
    pub fn raw(code: u16, body: impl Into<String>) -> FakeReply {
        FakeReply::new(code, FakeBody::Raw(body.into()))
    }

    /// Marks a [`FakeReply::text`] reply as cut at the token limit (`finish_reason`
    /// `length`, `stop_reason` `max_tokens`).
    pub fn finish_length(mut self) -> FakeReply {
        self.finish_length = true;
        self
    }

    /// Adds `Retry-After: {seconds}`.
    pub fn retry_after(mut self, seconds: u64) -> FakeReply {
        self.retry_after = Some(seconds);
        self
    }

    /// Waits `delay` before answering.
    pub fn delay(mut self, delay: Duration) -> FakeReply {
        self.delay = Some(delay);
        self
    }

    fn new(status: u16, body: FakeBody) -> FakeReply {
        FakeReply { status, body, finish_length: false, retry_after: None, delay: None }
    }

    /// The HTTP response for `request`. A status outside 100-999 is served as 500.
    fn render(self, request: &FakeRequest) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = match self.body {
            FakeBody::Text(text) => reply_body(request, &text, self.finish_length).to_string(),
            FakeBody::Error(message) => error_body(request.wire, &message).to_string(),
            FakeBody::Raw(raw) => raw,
        };
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The fake's token count of `text`: its characters divided by 4, rounded up.
pub fn fake_token_count(text: &str) -> u64 {
    u64::try_from(text.chars().count().div_ceil(4)).unwrap_or(u64::MAX)
}

/// A running fake LLM server; stopped on drop.
pub struct FakeLlm {
    addr: SocketAddr,
    state: Arc<FakeState>,
    task: JoinHandle<()>,
}

struct FakeState {
    handler: FakeHandler,
    requests: Mutex<Vec<FakeRequest>>,
}

impl FakeLlm {
    /// Starts a fake on a free port of 127.0.0.1 that answers every request with
    /// `handler`'s reply.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, or when no loopback port can be bound: test set-up
    /// failures, not outcomes to handle.
    pub fn start(handler: FakeHandler) -> FakeLlm {
        let listener = match std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(tokio::net::TcpListener::from_std)
        {
            Ok(listener) => listener,
            Err(error) => panic!("the fake LLM server cannot listen on 127.0.0.1: {error}"),
        };
        let addr = match listener.local_addr() {
            Ok(addr) => addr,
            Err(error) => panic!("the fake LLM server has no local address: {error}"),
        };
        let state = Arc::new(FakeState { handler, requests: Mutex::new(Vec::new()) });
        let app = Router::new()
            .route("/v1/chat/completions", post(openai))
            .route("/v1/messages", post(anthropic))
            .fallback(unknown_path)
            .with_state(Arc::clone(&state));
        let task = tokio::spawn(async move {
            // Runs until dropped; a failure shows up as failed requests in the test.
            let _ = axum::serve(listener, app).await;
        });
        FakeLlm { addr, state, task }
    }

    /// Starts a fake that answers with `replies` in order, then with
    /// `500 the fake LLM's script is exhausted`.
    ///
    /// # Panics
    ///
    /// As [`FakeLlm::start`].
    pub fn scripted(replies: Vec<FakeReply>) -> FakeLlm {
        let script = Mutex::new(VecDeque::from(replies));
        FakeLlm::start(Arc::new(move |_: &FakeRequest| {
            script
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front()
                .unwrap_or_else(|| FakeReply::status(500, "the fake LLM's script is exhausted"))
        }))
    }

    /// `http://127.0.0.1:PORT/v1`: the `base_url` for either client.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<FakeRequest> {
        self.state.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many requests were received so far.
    pub fn request_count(&self) -> usize {
        self.state.requests.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl fmt::Debug for FakeLlm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeLlm").field("addr", &self.addr).field("requests", &self.request_count()).finish()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn openai(State(state): State<Arc<FakeState>>, headers: HeaderMap, body: Bytes) -> Response {
    serve(&state, Wire::OpenAi, &headers, &body).await
}

async fn anthropic(State(state): State<Arc<FakeState>>, headers: HeaderMap, body: Bytes) -> Response {
    serve(&state, Wire::Anthropic, &headers, &body).await
}

async fn unknown_path() -> Response {
    let body = error_body(Wire::OpenAi, "the fake LLM serves only POST /v1/chat/completions and POST /v1/messages");
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// Records the request, asks the handler, waits if asked, answers.
async fn serve(state: &FakeState, wire: Wire, headers: &HeaderMap, body: &[u8]) -> Response {
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let (system, user) = match wire {
        Wire::OpenAi => {
            (messages_text(&body["messages"], &["system", "developer"]), messages_text(&body["messages"], &["user"]))
        }
        Wire::Anthropic => (content_text(&body["system"]), messages_text(&body["messages"], &["user"])),
    };
    let mut names = BTreeMap::<String, String>::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        names
            .entry(name.as_str().to_ascii_lowercase())
            .and_modify(|joined| {
                joined.push_str(", ");
                joined.push_str(&value);
            })
            .or_insert(value);
    }
    let request = FakeRequest { wire, headers: names, body, system, user, received_at: Instant::now() };
    state.requests.lock().unwrap_or_else(PoisonError::into_inner).push(request.clone());
    if !request.body.is_object() {
        return FakeReply::status(400, "the request body is not a JSON object").render(&request);
    }
    let reply = (state.handler)(&request);
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    reply.render(&request)
}

/// The text of the messages with one of `roles`, joined by newlines.
fn messages_text(messages: &Value, roles: &[&str]) -> String {
    let Some(messages) = messages.as_array() else {
        return String::new();
    };
    messages
        .iter()
        .filter(|m| m["role"].as_str().is_some_and(|role| roles.contains(&role)))
        .map(|m| content_text(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A content value's text: a string, or the `text` of each part of an array, joined by
/// newlines.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// A successful reply carrying `text` in `request`'s wire format.
fn reply_body(request: &FakeRequest, text: &str, cut: bool) -> Value {
    let model = request.body["model"].as_str().unwrap_or("fake-model");
    let input = fake_token_count(&request.system) + fake_token_count(&request.user);
    let output = fake_token_count(text);
    match request.wire {
        Wire::OpenAi => json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": if cut { "length" } else { "stop" }
            }],
            "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}
        }),
        Wire::Anthropic => json!({
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": if cut { "max_tokens" } else { "end_turn" },
            "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": output}
        }),
    }
}

/// The provider's error body carrying `message`.
fn error_body(wire: Wire, message: &str) -> Value {
    match wire {
        Wire::OpenAi => json!({"error": {"message": message, "type": "fake_error", "param": null, "code": null}}),
        Wire::Anthropic => json!({"type": "error", "error": {"type": "fake_error", "message": message}}),
    }
}
