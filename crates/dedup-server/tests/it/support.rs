//! In-process servers on loopback over a throwaway database, a client that checks every
//! response, and embedders whose vectors the tests choose.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use async_trait::async_trait;
use dedup_core::Embedding;
use dedup_embed::{Embedder, LocalEmbedder, ModelDir};
use dedup_llm::ChatModel;
use dedup_precompact::{DeduplicationConfig, DeduplicationService};
use dedup_server::{AppState, ServerConfig, node_text};
use dedup_store::{DbLocation, Store, StoreOptions};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{Value, json};
use sqlx::Connection;
use tokio::sync::{Barrier, Notify, oneshot};
use tokio::task::JoinHandle;

/// Dimensions of [`TableEmbedder`] vectors.
pub const DIMS: usize = 384;
/// The seed's duplicate tier: cosine at or above it.
pub const DUPLICATE: f32 = 0.95;
/// The seed's connect tier: cosine at or above it.
pub const CONNECT: f32 = 0.90;

/// Which database a server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh, empty database for one test: a temporary SQLite file, or a database created
/// on the `DATABASE_URL` server and dropped afterwards.
pub struct TestDb {
    pub location: DbLocation,
    _dir: Option<tempfile::TempDir>,
    postgres: Option<(String, String)>,
}

impl TestDb {
    pub async fn new(backend: Backend) -> anyhow::Result<TestDb> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir()?;
                let path = dir.path().join("memdedup.db");
                let location = DbLocation::parse(path.to_str().context("temporary path is not UTF-8")?)?;
                Ok(TestDb { location, _dir: Some(dir), postgres: None })
            }
            Backend::Postgres => {
                let admin_url = admin_url()?;
                let name = unique_name("memdedup_server_test");
                let mut admin = sqlx::PgConnection::connect(&admin_url)
                    .await
                    .with_context(|| format!("cannot connect to DATABASE_URL {}", redact(&admin_url)))?;
                sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await?;
                admin.close().await?;
                let location = DbLocation::parse(&with_database(&admin_url, &name)?)?;
                Ok(TestDb { location, _dir: None, postgres: Some((admin_url, name)) })
            }
        }
    }

    /// A new store handle on this database: what another process would open.
    pub async fn open(&self) -> anyhow::Result<Arc<Store>> {
        Ok(Arc::new(Store::open(&self.location, &StoreOptions::default()).await?))
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.postgres.take() else { return };
        // Drop cannot await, and the test's runtime may be shutting down: use a thread.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await?;
                admin.close().await?;
                anyhow::Ok(())
            })
        })
        .join();
        if let Ok(Err(error)) = dropped {
            eprintln!("warning: could not drop test database: {error:#}");
        }
    }
}

/// The admin URL of the disposable Postgres server, or an error saying how to get one.
fn admin_url() -> anyhow::Result<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => Ok(url),
        _ => bail!(
            "DATABASE_URL is not set, so the Postgres server tests cannot run: `source /tmp/services.env`, run \
             `cargo xtask ci` (it starts a disposable server), or point DATABASE_URL at a throwaway server"
        ),
    }
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> anyhow::Result<String> {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").context("DATABASE_URL is not a URL")? + 3;
    let authority_end = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..authority_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    Ok(out)
}

fn redact(url: &str) -> String {
    DbLocation::parse(url).map_or_else(|_| "<unparsable>".to_owned(), |l| l.redacted())
}

/// A name no other test of any process uses.
fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("{prefix}_{}_{}_{}", std::process::id(), nanos % 1_000_000_000_000, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// How to start a [`TestServer`].
pub struct ServerBuilder {
    backend: Backend,
    embedder: Option<Arc<dyn Embedder>>,
    chat: Option<Arc<dyn ChatModel>>,
    config: ServerConfig,
    db: Option<TestDb>,
    shared: Option<DbLocation>,
    memory_routes: bool,
    dedup: DeduplicationConfig,
}

impl ServerBuilder {
    /// Serves `/v1/memory/check` and `/v1/memory/add` with the checker chain over the
    /// server's store and embedder (default configuration), as `memdedup serve` does.
    pub fn memory_routes(mut self) -> ServerBuilder {
        self.memory_routes = true;
        self
    }

    /// The checker chain's configuration for the memory routes (default: the seed's).
    pub fn dedup_config(mut self, config: DeduplicationConfig) -> ServerBuilder {
        self.dedup = config;
        self
    }

    pub fn backend(mut self, backend: Backend) -> ServerBuilder {
        self.backend = backend;
        self
    }

    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> ServerBuilder {
        self.embedder = Some(embedder);
        self
    }

    pub fn no_embedder(mut self) -> ServerBuilder {
        self.embedder = None;
        self
    }

    /// The chat model of `POST /v1/facts/extract` (none by default).
    pub fn chat_model(mut self, chat: Arc<dyn ChatModel>) -> ServerBuilder {
        self.chat = Some(chat);
        self
    }

    pub fn config(mut self, change: impl FnOnce(&mut ServerConfig)) -> ServerBuilder {
        change(&mut self.config);
        self
    }

    /// Serves an existing database (a second server on the same memory).
    pub fn db(mut self, db: TestDb) -> ServerBuilder {
        self.db = Some(db);
        self
    }

    /// Serves the database of another server too, through a store handle of its own:
    /// what a second server process on the same memory does.
    pub fn shared(mut self, db: &TestDb) -> ServerBuilder {
        self.shared = Some(db.location.clone());
        self
    }

    pub async fn start(self) -> anyhow::Result<TestServer> {
        let (db, store) = match (self.db, self.shared) {
            (Some(db), _) => {
                let store = db.open().await?;
                (Some(db), store)
            }
            (None, Some(location)) => (None, Arc::new(Store::open(&location, &StoreOptions::default()).await?)),
            (None, None) => {
                let db = TestDb::new(self.backend).await?;
                let store = db.open().await?;
                (Some(db), store)
            }
        };
        let metrics = dedup_server::install_prometheus();
        ensure!(metrics.is_some(), "the Prometheus recorder could not be installed");
        let service = self.memory_routes.then(|| match &self.embedder {
            Some(embedder) => DeduplicationService::new(store.clone(), embedder.clone(), self.dedup.clone()),
            None => DeduplicationService::without_embeddings(store.clone(), self.dedup.clone()),
        });
        let mut state = AppState::new(store, self.embedder, self.config, metrics);
        if let Some(service) = service {
            state = state.with_memory_service(Arc::new(service));
        }
        if let Some(chat) = self.chat {
            state = state.with_chat_model(chat);
        }
        let listener = dedup_server::bind(&state).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(dedup_server::serve(listener, state, async {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
        Ok(TestServer { url: format!("http://{addr}"), client, stop: Some(stop), task: Some(task), db })
    }
}

/// A server on a loopback port, serving a database of its own until dropped.
pub struct TestServer {
    pub url: String,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), dedup_server::Error>>>,
    db: Option<TestDb>,
}

impl TestServer {
    /// A server on SQLite with the seed's defaults and no embedder until one is given.
    pub fn builder() -> ServerBuilder {
        let config = ServerConfig { addr: ([127, 0, 0, 1], 0).into(), ..ServerConfig::default() };
        ServerBuilder {
            backend: Backend::Sqlite,
            embedder: None,
            chat: None,
            config,
            db: None,
            shared: None,
            memory_routes: false,
            dedup: DeduplicationConfig::default(),
        }
    }

    /// A SQLite server with the seed's defaults and `embedder`.
    pub async fn start(embedder: Arc<dyn Embedder>) -> anyhow::Result<TestServer> {
        TestServer::builder().embedder(embedder).start().await
    }

    /// A request to `path`.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.client.request(method, format!("{}{path}", self.url))
    }

    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<Reply> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        send(request).await
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Reply> {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Reply> {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> anyhow::Result<Reply> {
        self.call(Method::PUT, path, Some(body)).await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> anyhow::Result<Reply> {
        self.call(Method::PATCH, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Reply> {
        self.call(Method::DELETE, path, None).await
    }

    /// `POST /v1/nodes` with seed 001's node shape in the default namespace.
    pub async fn create_node(&self, subtype: &str, title: &str, body: &str) -> anyhow::Result<Reply> {
        self.post("/v1/nodes", &node(subtype, title, body)).await
    }

    /// Creates a node that must be created (201) and returns its id.
    pub async fn created(&self, subtype: &str, title: &str, body: &str) -> anyhow::Result<String> {
        let reply = self.create_node(subtype, title, body).await?;
        reply.expect(StatusCode::CREATED)?;
        ensure!(reply.body["created"] == true, "{title:?} was not created: {}", reply.body);
        reply.body["id"].as_str().map(str::to_owned).context("no id")
    }

    /// `POST /v1/nodes/check-similar` for a lesson in the default namespace.
    pub async fn check(&self, title: &str, content: &str) -> anyhow::Result<Reply> {
        self.post("/v1/nodes/check-similar", &json!({"title": title, "content": content, "subtype": "custom:lesson"}))
            .await
    }

    /// Every node of every namespace, read through the list API page by page.
    pub async fn all_nodes(&self) -> anyhow::Result<Vec<Value>> {
        let mut nodes = Vec::new();
        let mut path = "/v1/nodes?limit=500".to_owned();
        loop {
            let page = self.get(&path).await?;
            page.expect(StatusCode::OK)?;
            nodes.extend(page.body["data"].as_array().context("no data")?.iter().cloned());
            match page.body["next_after"].as_str() {
                Some(after) => path = format!("/v1/nodes?limit=500&after={after}"),
                None => return Ok(nodes),
            }
        }
    }

    /// The text of `GET /metrics`.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let reply = self.get("/metrics").await?;
        reply.expect(StatusCode::OK)?;
        Ok(reply.text)
    }

    /// Stops accepting, lets in-flight requests finish, and waits for the server to stop.
    pub async fn shutdown(&mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task).await.context("server did not stop")???;
        }
        Ok(())
    }

    /// The database the server serves (owned by this server, not shared from another).
    pub fn db(&self) -> &TestDb {
        self.db.as_ref().expect("this server owns its database until it is stopped")
    }

    /// Shuts the server down and hands over its database, to serve it again.
    pub async fn stop(mut self) -> anyhow::Result<TestDb> {
        self.shutdown().await?;
        self.db.take().context("the database was taken already")
    }

    /// Starts the shutdown without waiting for it.
    pub fn begin_shutdown(&mut self) -> Option<JoinHandle<Result<(), dedup_server::Error>>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Seed 001's node shape (the curl example of §12).
pub fn node(subtype: &str, title: &str, body: &str) -> Value {
    json!({"type": "concept", "subtype": subtype, "content_title": title, "content_body": body})
}

/// A response: its status, body (JSON, or the text as a JSON string) and request id.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    pub text: String,
    pub request_id: String,
    pub content_type: String,
}

impl Reply {
    /// Fails unless the status is `status`, showing the body.
    pub fn expect(&self, status: StatusCode) -> anyhow::Result<&Reply> {
        ensure!(self.status == status, "expected {status}, got {}: {}", self.status, self.text);
        Ok(self)
    }

    /// Fails unless this is an error response `{"error": ..., "code": code}` with `status`
    /// and no other member; returns the message.
    pub fn expect_error(&self, status: StatusCode, code: &str) -> anyhow::Result<String> {
        self.expect(status)?;
        ensure!(self.content_type.starts_with("application/json"), "error is not JSON: {}", self.content_type);
        let object = self.body.as_object().with_context(|| format!("error body is not an object: {}", self.text))?;
        ensure!(object.len() == 2, "error body has other members: {}", self.text);
        ensure!(self.body["code"] == code, "expected code {code}: {}", self.text);
        self.body["error"].as_str().map(str::to_owned).context("no error message")
    }

    pub fn id(&self) -> String {
        self.body["id"].as_str().unwrap_or_default().to_owned()
    }
}

/// Sends `request` and reads the reply; every response must carry an `x-request-id`.
pub async fn send(request: RequestBuilder) -> anyhow::Result<Reply> {
    let response = request.send().await?;
    let status = response.status();
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let request_id = header(dedup_server::REQUEST_ID_HEADER)
        .with_context(|| format!("a {status} response has no {} header", dedup_server::REQUEST_ID_HEADER))?;
    ensure!(!request_id.is_empty(), "empty request id");
    let content_type = header("content-type").unwrap_or_default();
    let text = response.text().await?;
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()))
    };
    Ok(Reply { status, body, text, request_id, content_type })
}

/// The unit vector with these components (the rest zero), normalised.
pub fn unit(components: &[(usize, f32)]) -> Embedding {
    let mut values = vec![0.0; DIMS];
    for &(axis, value) in components {
        values[axis] = value;
    }
    Embedding::new(values).expect("a non-zero test vector")
}

/// The unit vector along `axis`.
pub fn axis(axis: usize) -> Embedding {
    unit(&[(axis, 1.0)])
}

/// A unit vector whose cosine with [`axis`]`(base)` is `cos`, turned towards `other`
/// (a different axis).
pub fn toward(base: usize, cos: f32, other: usize) -> Embedding {
    unit(&[(base, cos), (other, (1.0 - cos * cos).sqrt())])
}

/// The similarity as the API reports it: rounded to 4 decimals.
pub fn round4(x: f32) -> f64 {
    (f64::from(x) * 10_000.0).round() / 10_000.0
}

/// A deterministic embedder: texts given a vector get it; any other text gets a
/// pseudo-random unit vector of its own (nearly orthogonal to every other in 384
/// dimensions). It can also wait before answering, or until several calls are in flight.
#[derive(Default)]
pub struct TableEmbedder {
    table: RwLock<HashMap<String, Embedding>>,
    delay: Option<Duration>,
    barrier: Option<Barrier>,
    /// Notified whenever a call starts.
    pub entered: Notify,
    calls: AtomicUsize,
}

impl TableEmbedder {
    pub fn new() -> TableEmbedder {
        TableEmbedder::default()
    }

    /// The node with this title and body embeds as `vector` (the server embeds
    /// [`node_text`]).
    pub fn with(self, title: &str, body: &str, vector: Embedding) -> TableEmbedder {
        self.set(title, body, vector);
        self
    }

    /// `text` itself embeds as `vector` (what the memory routes embed).
    pub fn with_text(self, text: &str, vector: Embedding) -> TableEmbedder {
        self.table.write().unwrap_or_else(|e| e.into_inner()).insert(text.to_owned(), vector);
        self
    }

    /// Like [`TableEmbedder::with`], on a shared embedder.
    pub fn set(&self, title: &str, body: &str, vector: Embedding) {
        self.table.write().unwrap_or_else(|e| e.into_inner()).insert(node_text(title, body), vector);
    }

    /// Every call sleeps this long before answering.
    pub fn with_delay(mut self, delay: Duration) -> TableEmbedder {
        self.delay = Some(delay);
        self
    }

    /// Every call waits (at most 5 s) until `n` calls are in flight, so that `n` requests
    /// all embed before any of them stores.
    pub fn with_barrier(mut self, n: usize) -> TableEmbedder {
        self.barrier = Some(Barrier::new(n));
        self
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn vector(&self, text: &str) -> Embedding {
        let known = self.table.read().unwrap_or_else(|e| e.into_inner()).get(text).cloned();
        known.unwrap_or_else(|| random_vector(text))
    }
}

#[async_trait]
impl Embedder for TableEmbedder {
    fn model_id(&self) -> &str {
        "table-384"
    }

    fn dims(&self) -> usize {
        DIMS
    }

    async fn embed(&self, texts: &[String]) -> dedup_embed::Result<Vec<Embedding>> {
        self.calls.fetch_add(texts.len(), Ordering::SeqCst);
        self.entered.notify_waiters();
        if let Some(barrier) = &self.barrier {
            let _ = tokio::time::timeout(Duration::from_secs(5), barrier.wait()).await;
        }
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }
}

/// A unit vector determined by `text`, components uniform in [-1, 1).
pub fn random_vector(text: &str) -> Embedding {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    let mut state = hasher.finish();
    let values = (0..DIMS)
        .map(|_| {
            // splitmix64
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    Embedding::new(values).expect("a random vector is not zero")
}

/// An embedder that is down: every call fails as an unreachable service would.
pub struct FailingEmbedder;

#[async_trait]
impl Embedder for FailingEmbedder {
    fn model_id(&self) -> &str {
        "failing-384"
    }

    fn dims(&self) -> usize {
        DIMS
    }

    async fn embed(&self, _texts: &[String]) -> dedup_embed::Result<Vec<Embedding>> {
        Err(dedup_embed::Error::Unavailable { attempts: 3, last_error: "connection refused".to_owned() })
    }
}

/// The real all-MiniLM-L6-v2 from the local cache; panics, naming the fetch command,
/// when it is not installed.
pub fn local_model() -> Arc<LocalEmbedder> {
    let dir = ModelDir::locate(None)
        .unwrap_or_else(|e| panic!("cannot locate the model cache ({e}); run `cargo xtask fetch-model` first"));
    if let Err(e) = dir.check() {
        panic!("this test needs the local model: {e}\nrun `cargo xtask fetch-model` first");
    }
    Arc::new(LocalEmbedder::new(dir))
}

/// The cosine the model gives two nodes (title, body), on the texts the server embeds,
/// one call per text as the server makes them.
pub async fn model_cosine(model: &LocalEmbedder, a: (&str, &str), b: (&str, &str)) -> anyhow::Result<f32> {
    let a = model.embed_one(&node_text(a.0, a.1)).await?;
    let b = model.embed_one(&node_text(b.0, b.1)).await?;
    Ok(a.cosine(&b)?)
}

/// The tier seed 001 §2.3 gives a cosine: "duplicate", "connect" or "unique".
pub fn tier(cosine: f32) -> &'static str {
    if cosine >= DUPLICATE {
        "duplicate"
    } else if cosine >= CONNECT {
        "connect"
    } else {
        "unique"
    }
}

/// The value of a Prometheus counter or gauge line starting with `prefix` (name and
/// labels), summed over matching lines; 0 when absent.
pub fn metric_value(metrics: &str, name: &str, label: Option<&str>) -> f64 {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| line.starts_with(name) && line[name.len()..].starts_with(['{', ' ']))
        .filter(|line| label.is_none_or(|label| line.contains(label)))
        .filter_map(|line| line.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

#[test]
fn database_urls_are_rewritten() -> anyhow::Result<()> {
    assert_eq!(with_database("postgres://u@h:1/admin", "t")?, "postgres://u@h:1/t");
    assert_eq!(with_database("postgres://u:p@h/admin?sslmode=disable", "t")?, "postgres://u:p@h/t?sslmode=disable");
    Ok(())
}

#[test]
fn table_vectors_have_the_chosen_cosines() -> anyhow::Result<()> {
    for (cos, reported) in [(0.9712f32, 0.9712), (0.9501, 0.9501), (0.9499, 0.9499), (0.9001, 0.9001)] {
        assert_eq!(round4(axis(0).cosine(&toward(0, cos, 7))?), reported);
    }
    assert!(random_vector("a").cosine(&random_vector("b"))?.abs() < 0.3);
    Ok(())
}
