//! What every handler shares, and what the server knows about its embedder's health.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dedup_core::Embedding;
use dedup_embed::Embedder;
use dedup_llm::ChatModel;
use dedup_precompact::{DeduplicationService, PairJudgeChoice};
use dedup_store::Store;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::ServerConfig;

/// The text embedded to learn whether the embedder works.
const PROBE_TEXT: &str = "memdedup health probe";
/// How long a probe may take before the embedder counts as down.
pub const EMBEDDER_PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a successful embedding (a probe's or a request's) vouches for the embedder.
pub const EMBEDDER_OK_FOR: Duration = Duration::from_secs(60);
/// How long a failed embedding stands before `/healthz` tries again.
pub const EMBEDDER_DOWN_FOR: Duration = Duration::from_secs(10);

/// The server's shared state: the store, the embedder (if any), the chat model of fact
/// extraction (if any), the checker chain of the memory routes (if any), the
/// configuration and the metrics handle. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
    chat: Option<Arc<dyn ChatModel>>,
    pair_judge: PairJudgeChoice,
    memory: Option<Arc<DeduplicationService>>,
}

struct Inner {
    store: Arc<Store>,
    embedder: Option<Arc<dyn Embedder>>,
    config: ServerConfig,
    metrics: Option<PrometheusHandle>,
    /// The last embedding attempt's outcome and when it happened.
    health: Mutex<Option<(Instant, Result<(), String>)>>,
    /// Held by the one probe in flight, so concurrent health checks share it.
    probe: tokio::sync::Mutex<()>,
    /// Held while a node edit checks for duplicates and writes, so two edits of this
    /// process cannot both pass the check with the same text.
    node_edits: tokio::sync::Mutex<()>,
}

/// Whether the embedder can produce an embedding, as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedderStatus {
    /// True when the last embedding (a request's or a probe's, at most
    /// [`EMBEDDER_OK_FOR`] ago) succeeded.
    pub available: bool,
    /// The model id, when an embedder is configured.
    pub model: Option<String>,
    /// Why it is not available.
    pub error: Option<String>,
}

impl AppState {
    /// State over `store`; without an `embedder` the nodes API stores nodes without
    /// vectors and says dedup was skipped. `metrics` renders `GET /metrics` (absent: 404).
    pub fn new(
        store: Arc<Store>,
        embedder: Option<Arc<dyn Embedder>>,
        config: ServerConfig,
        metrics: Option<PrometheusHandle>,
    ) -> AppState {
        AppState {
            inner: Arc::new(Inner {
                store,
                embedder,
                config,
                metrics,
                health: Mutex::new(None),
                probe: tokio::sync::Mutex::new(()),
                node_edits: tokio::sync::Mutex::new(()),
            }),
            chat: None,
            pair_judge: PairJudgeChoice::Cosine,
            memory: None,
        }
    }

    /// This state with `chat` as the model `POST /v1/facts/extract` asks; without one
    /// that route answers 503 `not_configured`.
    pub fn with_chat_model(mut self, chat: Arc<dyn ChatModel>) -> AppState {
        self.chat = Some(chat);
        self
    }

    /// This state with `judge` deciding which similar nodes are duplicates (check-similar
    /// and the dedup gate of `POST /v1/nodes`); the default is the cosine threshold alone.
    pub fn with_pair_judge(mut self, judge: PairJudgeChoice) -> AppState {
        self.pair_judge = judge;
        self
    }

    /// This state with `service` (the checker chain over the same store) answering
    /// `POST /v1/memory/check` and `POST /v1/memory/add`; without one those routes answer
    /// 503 `not_configured`.
    pub fn with_memory_service(mut self, service: Arc<DeduplicationService>) -> AppState {
        self.memory = Some(service);
        self
    }

    /// The checker chain of the memory routes, if one is configured.
    pub fn memory_service(&self) -> Option<&DeduplicationService> {
        self.memory.as_deref()
    }

    /// What decides which similar nodes are duplicates.
    pub fn pair_judge(&self) -> &PairJudgeChoice {
        &self.pair_judge
    }

    /// The chat model of fact extraction, if one is configured.
    pub fn chat_model(&self) -> Option<&Arc<dyn ChatModel>> {
        self.chat.as_ref()
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The embedder, if one is configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.inner.embedder.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The Prometheus handle, if metrics are recorded.
    pub fn metrics(&self) -> Option<&PrometheusHandle> {
        self.inner.metrics.as_ref()
    }

    pub(crate) fn node_edits(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.node_edits
    }

    /// Embeds `text` with the configured embedder (`None` without one) and remembers
    /// whether it worked, so `/healthz` needs no embedding of its own while requests
    /// succeed.
    pub(crate) async fn embed(&self, text: &str) -> Option<(String, dedup_embed::Result<Embedding>)> {
        let embedder = self.embedder()?;
        let result = embedder.embed_one(text).await;
        self.observe(result.as_ref().map(|_| ()).map_err(ToString::to_string));
        Some((embedder.model_id().to_owned(), result))
    }

    fn observe(&self, outcome: Result<(), String>) {
        *self.inner.health.lock().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), outcome));
    }

    /// The last outcome, if it is recent enough to stand.
    fn fresh_observation(&self) -> Option<Result<(), String>> {
        let health = self.inner.health.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, outcome) = health.as_ref()?;
        let lasts = if outcome.is_ok() { EMBEDDER_OK_FOR } else { EMBEDDER_DOWN_FOR };
        (at.elapsed() < lasts).then(|| outcome.clone())
    }

    /// Whether the embedder can embed: the last outcome while it stands (a success for
    /// [`EMBEDDER_OK_FOR`], a failure for [`EMBEDDER_DOWN_FOR`]), else the outcome of a
    /// probe embedding one short text (at most [`EMBEDDER_PROBE_TIMEOUT`]). Concurrent
    /// callers share one probe, so at most one probe runs per interval however often
    /// this is asked. The local model loads on its first embedding: the first probe
    /// loads it.
    pub async fn embedder_status(&self) -> EmbedderStatus {
        let Some(embedder) = self.embedder() else {
            return EmbedderStatus {
                available: false,
                model: None,
                error: Some("no embedder is configured".to_owned()),
            };
        };
        let model = Some(embedder.model_id().to_owned());
        let outcome = match self.fresh_observation() {
            Some(outcome) => outcome,
            None => {
                let _probe = self.inner.probe.lock().await;
                // Another caller may have probed while this one waited.
                match self.fresh_observation() {
                    Some(outcome) => outcome,
                    None => {
                        let outcome =
                            match tokio::time::timeout(EMBEDDER_PROBE_TIMEOUT, embedder.embed_one(PROBE_TEXT)).await {
                                Ok(Ok(_)) => Ok(()),
                                Ok(Err(e)) => Err(e.to_string()),
                                Err(_) => Err(format!(
                                    "the embedder gave no embedding within {} s",
                                    EMBEDDER_PROBE_TIMEOUT.as_secs()
                                )),
                            };
                        self.observe(outcome.clone());
                        outcome
                    }
                }
            }
        };
        EmbedderStatus { available: outcome.is_ok(), model, error: outcome.err() }
    }
}
