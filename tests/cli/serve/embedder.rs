//! `serve` with an OpenAI-compatible embedder (a local fake speaking the real wire
//! format) and with a bad `[embedder]` table.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::support::{memdedup, text};

/// One request to the fake embeddings API, as it saw it.
#[derive(Debug, Clone)]
struct EmbeddingsCall {
    authorization: Option<String>,
    body: Value,
}

/// A fake OpenAI-compatible `POST /v1/embeddings`: the real wire format, unit vectors of
/// `dimensions` (default 16) derived from each input's bytes, so equal texts get equal
/// vectors and different texts nearly orthogonal ones. Records every request.
struct FakeEmbeddings {
    base_url: String,
    calls: Arc<Mutex<Vec<EmbeddingsCall>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeEmbeddings {
    async fn start() -> FakeEmbeddings {
        use axum::http::HeaderMap;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&calls);
        let app = axum::Router::new().route(
            "/v1/embeddings",
            axum::routing::post(move |headers: HeaderMap, axum::Json(body): axum::Json<Value>| {
                let recorded = Arc::clone(&recorded);
                async move {
                    let authorization =
                        headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
                    recorded.lock().unwrap().push(EmbeddingsCall { authorization, body: body.clone() });
                    let dims = body["dimensions"].as_u64().unwrap_or(16) as usize;
                    let inputs: Vec<String> = match &body["input"] {
                        Value::String(one) => vec![one.clone()],
                        Value::Array(many) => many.iter().map(|v| v.as_str().unwrap_or_default().to_owned()).collect(),
                        _ => Vec::new(),
                    };
                    let data: Vec<Value> = inputs
                        .iter()
                        .enumerate()
                        .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": fake_vector(text, dims)}))
                        .collect();
                    axum::Json(json!({
                        "object": "list",
                        "data": data,
                        "model": body["model"],
                        "usage": {"prompt_tokens": 1, "total_tokens": 1}
                    }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake");
        let addr = listener.local_addr().expect("the fake's address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeEmbeddings { base_url: format!("http://{addr}/v1"), calls, task }
    }

    fn calls(&self) -> Vec<EmbeddingsCall> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for FakeEmbeddings {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Components in [-1, 1) from a splitmix64 stream seeded by the text's bytes (FNV-1a).
fn fake_vector(text: &str, dims: usize) -> Vec<f32> {
    let mut state =
        text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    (0..dims)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// `memdedup serve` with `[embedder] kind = "openai"`: the same `[embedder]` table the
/// other commands read, against a fake speaking the OpenAI wire format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_12_serve_uses_the_openai_compatible_embedder() {
    const KEY_VAR: &str = "MEMDEDUP_TEST_EMBEDDINGS_KEY";
    let fake = FakeEmbeddings::start().await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("memdedup.toml");
    std::fs::write(
        &config,
        format!(
            "[embedder]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-embed-v1\"\ndimensions = 24\n\
             api_key_env = \"{KEY_VAR}\"\n",
            fake.base_url
        ),
    )
    .expect("write the config");
    let db = dir.path().join("memory.db").display().to_string();
    let config_path = config.display().to_string();
    let server = Server::start(
        &["--config", &config_path, "--db", &db, "serve", "--addr", "127.0.0.1:0"],
        &[(KEY_VAR, "sk-test-0123456789")],
    );
    let http = client();
    let (status, health) = call(http.get(server.url("/healthz"))).await;
    assert_eq!(status, 200, "{health}");
    assert_eq!((&health["embedder"], &health["embedder_model"]), (&json!(true), &json!("fake-embed-v1")), "{health}");

    let lesson = lesson_body("Never trade weekends", "Low volume weekends increase slippage risk", "default");
    let (status, first) = call(http.post(server.url("/v1/nodes")).json(&lesson)).await;
    assert_eq!((status, &first["dedup"]["status"]), (201, &json!("checked")), "{first}");
    let (status, again) = call(http.post(server.url("/v1/nodes")).json(&lesson)).await;
    assert_eq!((status, &again["created"], &again["id"]), (200, &json!(false), &first["id"]), "{again}");
    let other = lesson_body("Size positions small", "Small positions survive overnight gaps", "default");
    let (status, created) = call(http.post(server.url("/v1/nodes")).json(&other)).await;
    assert_eq!(status, 201, "{created}");
    let (status, stderr) = server.stop("TERM");
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("sk-test-0123456789"), "the API key is never logged:\n{stderr}");

    let calls = fake.calls();
    let inputs: Vec<String> = calls
        .iter()
        .flat_map(|c| c.body["input"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    assert!(
        inputs.iter().any(|i| i == "Never trade weekends. Low volume weekends increase slippage risk"),
        "the node text was embedded by the API: {inputs:?}"
    );
    for call in &calls {
        assert_eq!(call.authorization.as_deref(), Some("Bearer sk-test-0123456789"), "{call:?}");
        assert_eq!((&call.body["model"], &call.body["dimensions"]), (&json!("fake-embed-v1"), &json!(24)), "{call:?}");
    }
}

/// A bad `[embedder]` table stops `serve` before it opens anything, naming the key.
#[test]
fn defect_12_serve_names_a_bad_embedder_table() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("memdedup.toml");
    let db = dir.path().join("memory.db");
    for (table, expected) in [
        ("kind = \"openai\"\nmodel = \"m\"\n", "`embedder.base_url` is required"),
        ("kind = \"openai\"\nbase_url = \"ftp://x\"\nmodel = \"m\"\n", "embedder"),
        ("kind = \"cloud\"\n", "`embedder.kind` \"cloud\""),
    ] {
        std::fs::write(&config, format!("[embedder]\n{table}")).expect("write the config");
        let refused = memdedup()
            .args(["--config", &config.display().to_string(), "--db", &db.display().to_string()])
            .args(["serve", "--addr", "127.0.0.1:0"])
            .timeout(Duration::from_secs(60))
            .assert()
            .failure();
        let stderr = text(&refused.get_output().stderr);
        assert!(stderr.contains(expected) && stderr.contains("memdedup.toml"), "{table}: {stderr}");
        assert!(!stderr.contains(LISTENING), "{stderr}");
        assert!(!db.exists(), "nothing was opened");
    }
}
