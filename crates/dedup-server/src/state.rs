//! What every handler shares.

use std::sync::Arc;

use dedup_embed::Embedder;
use dedup_store::Store;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::ServerConfig;

/// The server's shared state: the store, the embedder (if any), the configuration and
/// the metrics handle. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<Store>,
    embedder: Option<Arc<dyn Embedder>>,
    config: ServerConfig,
    metrics: Option<PrometheusHandle>,
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
        AppState { inner: Arc::new(Inner { store, embedder, config, metrics }) }
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
}
