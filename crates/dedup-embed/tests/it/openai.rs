//! `OpenAiEmbedder` against a fake OpenAI-compatible server on 127.0.0.1.
//!
//! The fake speaks the `/v1/embeddings` wire format, records every request, and answers
//! from a per-test script of replies (then with deterministic vectors derived from each
//! text's bytes, so tests can assert exact normalised values).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use dedup_embed::{Embedder, Embedding, Error, OpenAiConfig, OpenAiEmbedder};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const MODEL: &str = "fake-embed-v1";
/// Dimensions the fake answers with when the request does not ask for any.
const NATIVE_DIMS: usize = 8;

/// What the fake answers to one request.
enum Reply {
    /// 200 with deterministic vectors, in `index` order (the answer once the script is used
    /// up).
    Vectors,
    /// 200 with deterministic vectors listed in reverse `index` order.
    VectorsReversed,
    /// 200 with deterministic vectors of this many dimensions, whatever was asked.
    VectorsWithDims(usize),
    /// 200 with this JSON body.
    Json(Value),
    /// This status and body, with a `Retry-After` header when given.
    Status { status: u16, retry_after: Option<&'static str>, body: String },
    /// Waits this long, then answers like [`Reply::Vectors`].
    Stall(Duration),
}

impl Reply {
    /// An OpenAI-style error reply.
    fn openai_error(status: u16, retry_after: Option<&'static str>, message: &str) -> Self {
        let body = json!({
            "error": { "message": message, "type": "test_error", "param": null, "code": null }
        });
        Reply::Status { status, retry_after, body: body.to_string() }
    }
}

/// One request as the fake saw it.
#[derive(Clone, Debug)]
struct Recorded {
    path: String,
    body: Value,
    authorization: Option<String>,
    at: Instant,
}

impl Recorded {
    fn inputs(&self) -> Vec<String> {
        inputs_of(&self.body)
    }
}

struct FakeState {
    script: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

/// A fake embeddings server, stopped on drop.
struct FakeServer {
    base_url: String,
    state: Arc<FakeState>,
    task: JoinHandle<()>,
}

impl FakeServer {
    /// Starts a fake that answers with `script` first, then with [`Reply::Vectors`].
    async fn start(script: Vec<Reply>) -> Result<Self> {
        let state = Arc::new(FakeState { script: Mutex::new(script.into()), requests: Mutex::new(Vec::new()) });
        let app = Router::new()
            .route("/v1/embeddings", post(embeddings))
            .fallback(unknown_path)
            .with_state(Arc::clone(&state));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            // The server runs until the test drops it; errors would show as failed requests.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { base_url: format!("http://{addr}/v1"), state, task })
    }

    /// A configuration for this fake with fast retries.
    fn config(&self) -> OpenAiConfig {
        fast_retries(OpenAiConfig::new(&self.base_url, MODEL))
    }

    fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    fn request_count(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn fast_retries(mut config: OpenAiConfig) -> OpenAiConfig {
    config.initial_backoff = Duration::from_millis(10);
    config.max_backoff = Duration::from_millis(50);
    config.timeout = Duration::from_secs(5);
    config
}

async fn embeddings(State(state): State<Arc<FakeState>>, headers: HeaderMap, body: String) -> Response {
    record(&state, "/v1/embeddings", &headers, &body);
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let inputs = inputs_of(&request);
    let asked_dims = request["dimensions"].as_u64().map(|d| d as usize);
    let dims = asked_dims.unwrap_or(NATIVE_DIMS);
    let reply = state.script.lock().unwrap().pop_front().unwrap_or(Reply::Vectors);
    match reply {
        Reply::Vectors => axum::Json(list_body(&inputs, dims, false)).into_response(),
        Reply::VectorsReversed => axum::Json(list_body(&inputs, dims, true)).into_response(),
        Reply::VectorsWithDims(dims) => axum::Json(list_body(&inputs, dims, false)).into_response(),
        Reply::Json(value) => axum::Json(value).into_response(),
        Reply::Status { status, retry_after, body } => {
            let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
            if let Some(seconds) = retry_after {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(seconds));
            }
            response
        }
        Reply::Stall(delay) => {
            tokio::time::sleep(delay).await;
            axum::Json(list_body(&inputs, dims, false)).into_response()
        }
    }
}

/// Records a request to any other path and answers 404 with an empty body.
async fn unknown_path(
    State(state): State<Arc<FakeState>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    record(&state, uri.path(), &headers, &body);
    StatusCode::NOT_FOUND
}

fn record(state: &FakeState, path: &str, headers: &HeaderMap, body: &str) {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    state.requests.lock().unwrap().push(Recorded {
        path: path.to_owned(),
        body: serde_json::from_str(body).unwrap_or(Value::Null),
        authorization,
        at: Instant::now(),
    });
}

fn inputs_of(request: &Value) -> Vec<String> {
    request["input"]
        .as_array()
        .map(|items| items.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// A successful response body for `inputs`.
fn list_body(inputs: &[String], dims: usize, reversed: bool) -> Value {
    let mut data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| json!({ "object": "embedding", "index": index, "embedding": fake_vector(text, dims) }))
        .collect();
    if reversed {
        data.reverse();
    }
    json!({
        "object": "list",
        "data": data,
        "model": MODEL,
        "usage": { "prompt_tokens": 3, "total_tokens": 3 }
    })
}

/// The fake's raw vector for `text`: positive components mixed from the text's bytes, so
/// it is never zero and differs between texts.
fn fake_vector(text: &str, dims: usize) -> Vec<f32> {
    (0..dims)
        .map(|j| {
            let mix = text
                .bytes()
                .enumerate()
                .fold(j as u32 * 7 + 1, |acc, (i, b)| acc.wrapping_mul(31).wrapping_add(u32::from(b) * (i as u32 + 1)));
            1.0 + (mix % 17) as f32
        })
        .collect()
}

/// What the embedder must return for `text`: the fake's vector divided by its L2 norm.
fn expected_embedding(text: &str, dims: usize) -> Vec<f32> {
    let raw = fake_vector(text, dims);
    let norm = raw.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt();
    raw.iter().map(|&v| (f64::from(v) / norm) as f32).collect()
}

fn assert_close(actual: &[f32], expected: &[f32]) -> Result<()> {
    ensure!(actual.len() == expected.len(), "dims {} != {}", actual.len(), expected.len());
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        ensure!((a - e).abs() < 1e-6, "component {i}: {a} != {e}\nactual {actual:?}\nexpected {expected:?}");
    }
    Ok(())
}

fn texts(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The error of `result`, or a test failure naming what came back instead.
fn expect_err(result: dedup_embed::Result<Vec<Embedding>>) -> Result<Error> {
    match result {
        Ok(embeddings) => bail!("expected an error, got {} embeddings", embeddings.len()),
        Err(error) => Ok(error),
    }
}

#[tokio::test]
async fn happy_path_batches_texts_and_keeps_input_order() -> Result<()> {
    let server = FakeServer::start(vec![]).await?;
    let mut config = server.config();
    config.batch_size = 2;
    let embedder = OpenAiEmbedder::new(config)?;
    let input = texts(&["alpha", "bravo", "charlie", "delta", "echo"]);

    let embeddings = embedder.embed(&input).await?;

    let requests = server.requests();
    let batches: Vec<Vec<String>> = requests.iter().map(Recorded::inputs).collect();
    assert_eq!(batches, vec![texts(&["alpha", "bravo"]), texts(&["charlie", "delta"]), texts(&["echo"])]);
    for request in &requests {
        assert_eq!(request.path, "/v1/embeddings");
        assert_eq!(request.body["model"], MODEL);
        assert_eq!(request.body["encoding_format"], "float");
    }
    assert_eq!(embeddings.len(), input.len());
    for (text, embedding) in input.iter().zip(&embeddings) {
        assert_close(embedding.as_slice(), &expected_embedding(text, NATIVE_DIMS))
            .with_context(|| format!("embedding of {text:?}"))?;
        let norm: f32 = embedding.as_slice().iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm of {text:?} is {norm}");
    }
    // The fake's vectors differ between texts, so the order check above has teeth.
    assert_ne!(embeddings[0], embeddings[1]);
    assert_eq!(embedder.dims(), NATIVE_DIMS);
    Ok(())
}

#[tokio::test]
async fn out_of_order_indices_are_put_back_in_input_order() -> Result<()> {
    let server = FakeServer::start(vec![Reply::VectorsReversed]).await?;
    let embedder = OpenAiEmbedder::new(server.config())?;
    let input = texts(&["first", "second", "third"]);

    let embeddings = embedder.embed(&input).await?;

    assert_eq!(embeddings.len(), 3);
    for (text, embedding) in input.iter().zip(&embeddings) {
        assert_close(embedding.as_slice(), &expected_embedding(text, NATIVE_DIMS))
            .with_context(|| format!("embedding of {text:?}"))?;
    }
    Ok(())
}

#[tokio::test]
async fn dimensions_are_sent_only_when_configured() -> Result<()> {
    let server = FakeServer::start(vec![]).await?;
    let mut shortened = server.config();
    shortened.dimensions = Some(4);
    let shortened = OpenAiEmbedder::new(shortened)?;
    let native = OpenAiEmbedder::new(server.config())?;
    assert_eq!(shortened.dims(), 4, "configured dims are known before any request");

    let short = shortened.embed(&texts(&["memory"])).await?;
    let full = native.embed(&texts(&["memory"])).await?;

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body["dimensions"], 4);
    let native_body = requests[1].body.as_object().context("request body is an object")?;
    assert!(!native_body.contains_key("dimensions"), "unexpected dimensions in {native_body:?}");
    assert_close(short[0].as_slice(), &expected_embedding("memory", 4))?;
    assert_close(full[0].as_slice(), &expected_embedding("memory", NATIVE_DIMS))?;
    Ok(())
}

#[tokio::test]
async fn bearer_auth_header_is_sent_only_with_a_key() -> Result<()> {
    let server = FakeServer::start(vec![]).await?;
    let mut with_key = server.config();
    with_key.api_key = Some("sk-test-123".into());
    OpenAiEmbedder::new(with_key)?.embed(&texts(&["a"])).await?;
    OpenAiEmbedder::new(server.config())?.embed(&texts(&["b"])).await?;

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].authorization.as_deref(), Some("Bearer sk-test-123"));
    assert_eq!(requests[1].authorization, None);
    Ok(())
}

#[tokio::test]
async fn base_url_with_trailing_slash_reaches_the_same_endpoint() -> Result<()> {
    let server = FakeServer::start(vec![]).await?;
    let mut config = server.config();
    config.base_url = format!("{}/", server.base_url);

    let embeddings = OpenAiEmbedder::new(config)?.embed(&texts(&["slash"])).await?;

    assert_eq!(embeddings.len(), 1);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/embeddings");
    Ok(())
}

#[tokio::test]
async fn empty_input_makes_no_request() -> Result<()> {
    let server = FakeServer::start(vec![]).await?;
    let embedder = OpenAiEmbedder::new(server.config())?;

    let embeddings = embedder.embed(&[]).await?;

    assert!(embeddings.is_empty());
    assert_eq!(server.request_count(), 0);
    Ok(())
}

#[tokio::test]
async fn bad_request_is_rejected_with_the_server_message_without_retry() -> Result<()> {
    let message = "This model's maximum context length is 8192 tokens.";
    let server = FakeServer::start(vec![Reply::openai_error(400, None, message)]).await?;
    let embedder = OpenAiEmbedder::new(server.config())?;

    let error = expect_err(embedder.embed(&texts(&["too long"])).await)?;

    match &error {
        Error::Rejected { status: 400, message: got } => assert_eq!(got, message),
        other => bail!("expected Rejected(400), got {other:?}"),
    }
    assert!(!error.is_unavailable());
    assert_eq!(server.request_count(), 1, "a 400 must not be retried");
    Ok(())
}

#[tokio::test]
async fn unauthorized_with_plain_text_body_is_rejected_with_truncated_body() -> Result<()> {
    let body = "denied ".repeat(300);
    let server = FakeServer::start(vec![Reply::Status { status: 401, retry_after: None, body: body.clone() }]).await?;
    let embedder = OpenAiEmbedder::new(server.config())?;

    let error = expect_err(embedder.embed(&texts(&["x"])).await)?;

    match &error {
        Error::Rejected { status: 401, message } => {
            assert!(message.starts_with("denied denied"), "message: {message}");
            assert!(message.len() < 520, "message not truncated: {} bytes", message.len());
        }
        other => bail!("expected Rejected(401), got {other:?}"),
    }
    assert_eq!(server.request_count(), 1);
    Ok(())
}

#[tokio::test]
async fn too_many_requests_waits_for_retry_after() -> Result<()> {
    let server = FakeServer::start(vec![Reply::openai_error(429, Some("1"), "Rate limit reached")]).await?;
    let mut config = server.config();
    config.max_backoff = Duration::from_secs(5);

    let embeddings = OpenAiEmbedder::new(config)?.embed(&texts(&["throttled"])).await?;

    assert_close(embeddings[0].as_slice(), &expected_embedding("throttled", NATIVE_DIMS))?;
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "one retry after the 429");
    let waited = requests[1].at.duration_since(requests[0].at);
    assert!(waited >= Duration::from_millis(950), "retried after only {waited:?}");
    assert!(waited < Duration::from_secs(4), "retried after {waited:?}");
    Ok(())
}

#[tokio::test]
async fn retry_after_is_capped_by_max_backoff() -> Result<()> {
    let server = FakeServer::start(vec![Reply::openai_error(503, Some("120"), "Service overloaded")]).await?;
    let embedder = OpenAiEmbedder::new(server.config())?;

    // Fail fast rather than sit out the 120 s the server asked for.
    let embeddings = tokio::time::timeout(Duration::from_secs(3), embedder.embed(&texts(&["busy"])))
        .await
        .context("waited far longer than the 50 ms max_backoff")??;

    assert_eq!(embeddings.len(), 1);
    assert_eq!(server.request_count(), 2);
    Ok(())
}

#[tokio::test]
async fn server_errors_are_retried_until_success() -> Result<()> {
    let server = FakeServer::start(vec![
        Reply::openai_error(500, None, "internal error"),
        Reply::openai_error(500, None, "internal error"),
    ])
    .await?;

    let embeddings = OpenAiEmbedder::new(server.config())?.embed(&texts(&["flaky"])).await?;

    assert_close(embeddings[0].as_slice(), &expected_embedding("flaky", NATIVE_DIMS))?;
    assert_eq!(server.request_count(), 3);
    Ok(())
}

#[tokio::test]
async fn persistent_503_is_unavailable_after_max_retries() -> Result<()> {
    let script = (0..10).map(|_| Reply::openai_error(503, None, "engine overloaded")).collect();
    let server = FakeServer::start(script).await?;
    let mut config = server.config();
    config.max_retries = 2;

    let error = expect_err(OpenAiEmbedder::new(config)?.embed(&texts(&["down"])).await)?;

    match &error {
        Error::Unavailable { attempts: 3, last_error } => {
            assert!(last_error.contains("503"), "last_error: {last_error}");
            assert!(last_error.contains("engine overloaded"), "last_error: {last_error}");
        }
        other => bail!("expected Unavailable after 3 attempts, got {other:?}"),
    }
    assert!(error.is_unavailable());
    assert_eq!(server.request_count(), 3);
    Ok(())
}

#[tokio::test]
async fn connection_refused_is_unavailable() -> Result<()> {
    // Bind then drop a listener, so the port very likely has nothing listening.
    let port = TcpListener::bind("127.0.0.1:0").await?.local_addr()?.port();
    let mut config = fast_retries(OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"), MODEL));
    config.max_retries = 1;

    let error = expect_err(OpenAiEmbedder::new(config)?.embed(&texts(&["anyone?"])).await)?;

    match &error {
        Error::Unavailable { attempts: 2, last_error } => {
            assert!(last_error.contains(&format!("127.0.0.1:{port}")), "last_error: {last_error}");
        }
        other => bail!("expected Unavailable after 2 attempts, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn timeouts_are_retried() -> Result<()> {
    let server = FakeServer::start(vec![Reply::Stall(Duration::from_secs(3))]).await?;
    let mut config = server.config();
    config.timeout = Duration::from_millis(300);
    let started = Instant::now();

    let embeddings = OpenAiEmbedder::new(config)?.embed(&texts(&["slow"])).await?;

    assert_eq!(embeddings.len(), 1);
    assert_eq!(server.request_count(), 2);
    assert!(started.elapsed() < Duration::from_secs(2), "did not time out: {:?}", started.elapsed());
    Ok(())
}

#[tokio::test]
async fn zero_vector_is_an_invalid_vector() -> Result<()> {
    let body = json!({
        "object": "list",
        "data": [{ "object": "embedding", "index": 0, "embedding": [0.0, 0.0, 0.0] }],
        "model": MODEL
    });
    let server = FakeServer::start(vec![Reply::Json(body)]).await?;

    let error = expect_err(OpenAiEmbedder::new(server.config())?.embed(&texts(&["void"])).await)?;

    assert!(
        matches!(error, Error::InvalidVector(dedup_core::Error::ZeroVector)),
        "expected InvalidVector(ZeroVector), got {error:?}"
    );
    Ok(())
}

#[tokio::test]
async fn wrong_vector_count_is_malformed() -> Result<()> {
    let body = json!({
        "object": "list",
        "data": [{ "object": "embedding", "index": 0, "embedding": [1.0, 2.0] }],
        "model": MODEL
    });
    let server = FakeServer::start(vec![Reply::Json(body)]).await?;

    let error = expect_err(OpenAiEmbedder::new(server.config())?.embed(&texts(&["one", "two"])).await)?;

    match &error {
        Error::Malformed(message) => {
            assert!(message.contains("expected 2 embeddings, got 1"), "message: {message}")
        }
        other => bail!("expected Malformed, got {other:?}"),
    }
    assert_eq!(server.request_count(), 1, "a malformed answer must not be retried");
    Ok(())
}

#[tokio::test]
async fn repeated_index_is_malformed() -> Result<()> {
    let body = json!({
        "object": "list",
        "data": [
            { "object": "embedding", "index": 0, "embedding": [1.0, 2.0] },
            { "object": "embedding", "index": 0, "embedding": [3.0, 4.0] }
        ],
        "model": MODEL
    });
    let server = FakeServer::start(vec![Reply::Json(body)]).await?;

    let error = expect_err(OpenAiEmbedder::new(server.config())?.embed(&texts(&["one", "two"])).await)?;

    assert!(matches!(&error, Error::Malformed(m) if m.contains("index 0")), "got {error:?}");
    Ok(())
}

#[tokio::test]
async fn non_json_success_body_is_malformed() -> Result<()> {
    let server = FakeServer::start(vec![Reply::Status {
        status: 200,
        retry_after: None,
        body: "<html>proxy login</html>".into(),
    }])
    .await?;

    let error = expect_err(OpenAiEmbedder::new(server.config())?.embed(&texts(&["x"])).await)?;

    assert!(matches!(error, Error::Malformed(_)), "expected Malformed, got {error:?}");
    Ok(())
}

#[tokio::test]
async fn wrong_dims_is_malformed() -> Result<()> {
    let server = FakeServer::start(vec![Reply::VectorsWithDims(3)]).await?;
    let mut config = server.config();
    config.dimensions = Some(4);

    let error = expect_err(OpenAiEmbedder::new(config)?.embed(&texts(&["short"])).await)?;

    match &error {
        Error::Malformed(message) => {
            assert!(message.contains("3 dimensions, expected 4"), "message: {message}")
        }
        other => bail!("expected Malformed, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn learned_dims_are_enforced_on_later_responses() -> Result<()> {
    let server = FakeServer::start(vec![Reply::Vectors, Reply::VectorsWithDims(5)]).await?;
    let embedder = OpenAiEmbedder::new(server.config())?;

    embedder.embed(&texts(&["first"])).await?;
    assert_eq!(embedder.dims(), NATIVE_DIMS);
    let error = expect_err(embedder.embed(&texts(&["second"])).await)?;

    assert!(matches!(error, Error::Malformed(_)), "expected Malformed, got {error:?}");
    assert_eq!(embedder.dims(), NATIVE_DIMS, "learned dims must not change");
    Ok(())
}

#[tokio::test]
async fn connect_learns_dims_with_one_probe() -> Result<()> {
    let server = FakeServer::start(vec![]).await?;
    let unprobed = OpenAiEmbedder::new(server.config())?;
    assert_eq!(unprobed.dims(), 0, "dims are unknown before any response");
    assert_eq!(server.request_count(), 0, "new() must not contact the server");

    let embedder = OpenAiEmbedder::connect(server.config()).await?;

    assert_eq!(embedder.dims(), NATIVE_DIMS);
    assert_eq!(server.request_count(), 1);
    let embeddings = embedder.embed(&texts(&["after connect"])).await?;
    assert_eq!(embeddings[0].dims(), NATIVE_DIMS);
    Ok(())
}

#[tokio::test]
async fn connect_fails_when_the_server_ignores_configured_dims() -> Result<()> {
    let server = FakeServer::start(vec![Reply::VectorsWithDims(6)]).await?;
    let mut config = server.config();
    config.dimensions = Some(4);

    let result = OpenAiEmbedder::connect(config).await;

    match result {
        Err(Error::Malformed(message)) => assert!(message.contains("expected 4"), "{message}"),
        Err(other) => bail!("expected Malformed, got {other:?}"),
        Ok(embedder) => bail!("connect succeeded with dims {}", embedder.dims()),
    }
    Ok(())
}

#[tokio::test]
async fn model_id_is_the_configured_model() -> Result<()> {
    let embedder = OpenAiEmbedder::new(OpenAiConfig::new("http://127.0.0.1:9/v1", MODEL))?;
    assert_eq!(embedder.model_id(), MODEL);
    Ok(())
}

#[test]
fn invalid_configurations_are_rejected() {
    let valid = || OpenAiConfig::new("https://api.openai.com/v1", "text-embedding-3-small");
    let cases: Vec<(&str, OpenAiConfig)> = vec![
        ("empty model", OpenAiConfig { model: " ".into(), ..valid() }),
        ("not a URL", OpenAiConfig { base_url: "api.openai.com/v1".into(), ..valid() }),
        ("ftp scheme", OpenAiConfig { base_url: "ftp://example.com/v1".into(), ..valid() }),
        ("empty base URL", OpenAiConfig { base_url: String::new(), ..valid() }),
        ("zero batch size", OpenAiConfig { batch_size: 0, ..valid() }),
        ("zero dimensions", OpenAiConfig { dimensions: Some(0), ..valid() }),
        ("zero timeout", OpenAiConfig { timeout: Duration::ZERO, ..valid() }),
    ];
    for (case, config) in cases {
        match OpenAiEmbedder::new(config) {
            Err(Error::Config(message)) => assert!(!message.is_empty(), "{case}"),
            Err(other) => panic!("{case}: expected Config, got {other:?}"),
            Ok(_) => panic!("{case}: accepted"),
        }
    }
    assert!(OpenAiEmbedder::new(valid()).is_ok(), "the valid baseline must pass");
}

#[test]
fn config_defaults_match_the_documentation() {
    let config = OpenAiConfig::new("http://127.0.0.1:11434/v1", "nomic-embed-text");
    assert_eq!(config.batch_size, 96);
    assert_eq!(config.timeout, Duration::from_secs(30));
    assert_eq!(config.max_retries, 5);
    assert_eq!(config.initial_backoff, Duration::from_millis(500));
    assert_eq!(config.max_backoff, Duration::from_secs(20));
    assert_eq!(config.dimensions, None);
    assert_eq!(config.api_key, None);
}

#[test]
fn debug_output_never_shows_the_api_key() -> Result<()> {
    let mut config = OpenAiConfig::new("https://user:hunter2@proxy.example/v1", MODEL);
    config.api_key = Some("sk-secret-key-42".into());
    let embedder = OpenAiEmbedder::new(config.clone())?;

    for shown in [format!("{config:?}"), format!("{embedder:?}"), format!("{config:#?}")] {
        assert!(!shown.contains("sk-secret-key-42"), "API key leaked: {shown}");
        assert!(!shown.contains("hunter2"), "URL password leaked: {shown}");
        assert!(shown.contains("<redacted>"), "no redaction marker: {shown}");
        assert!(shown.contains(MODEL), "model missing: {shown}");
    }
    Ok(())
}

#[test]
fn api_key_from_env_reads_the_variable() {
    let absent =
        OpenAiConfig::new("http://127.0.0.1:9/v1", MODEL).api_key_from_env("MEMDEDUP_TEST_VARIABLE_THAT_IS_NEVER_SET");
    assert_eq!(absent.api_key, None);

    // Tests cannot set variables (no unsafe), so read one the environment already has.
    let expected = std::env::var("PATH").ok().filter(|v| !v.is_empty());
    let mut config = OpenAiConfig::new("http://127.0.0.1:9/v1", MODEL);
    config.api_key = Some("stale".into());
    let present = config.api_key_from_env("PATH");
    assert_eq!(present.api_key, expected);
}
