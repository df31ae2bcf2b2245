//! `CachedEmbedder`: an embedder that looks vectors up in the store's cache first.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use dedup_core::ContentHash;
use dedup_store::Store;

use crate::{Embedder, Embedding};

/// Wraps an embedder with the store's embedding cache, keyed by (model id, SHA-256 of the
/// exact text).
///
/// Texts found in the cache are not embedded; the rest are embedded by the inner embedder
/// and added to the cache. A failing cache never fails an embedding: lookups that fail
/// count as misses and writes that fail are logged.
pub struct CachedEmbedder {
    inner: Arc<dyn Embedder>,
    store: Arc<Store>,
    hits: AtomicUsize,
    misses: AtomicUsize,
}

impl CachedEmbedder {
    /// Wraps `inner` with the cache of `store`.
    pub fn new(inner: Arc<dyn Embedder>, store: Arc<Store>) -> CachedEmbedder {
        CachedEmbedder { inner, store, hits: AtomicUsize::new(0), misses: AtomicUsize::new(0) }
    }

    /// Texts served from the cache so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::Relaxed)
    }

    /// Texts the inner embedder computed so far.
    pub fn misses(&self) -> usize {
        self.misses.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl Embedder for CachedEmbedder {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    async fn embed(&self, texts: &[String]) -> dedup_embed::Result<Vec<Embedding>> {
        let model = self.inner.model_id().to_owned();
        let hashes: Vec<ContentHash> = texts.iter().map(|t| ContentHash::of_raw(t)).collect();
        let mut cached = match self.store.cached_embeddings(&model, &hashes).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(%error, "embedding cache lookup failed; embedding everything");
                HashMap::new()
            }
        };
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| !cached.contains_key(&hashes[i])).collect();
        self.hits.fetch_add(texts.len() - missing.len(), Ordering::Relaxed);
        self.misses.fetch_add(missing.len(), Ordering::Relaxed);
        if !missing.is_empty() {
            let batch: Vec<String> = missing.iter().map(|&i| texts[i].clone()).collect();
            let computed = self.inner.embed(&batch).await?;
            if computed.len() != batch.len() {
                return Err(dedup_embed::Error::Malformed(format!(
                    "the embedder returned {} vectors for {} texts",
                    computed.len(),
                    batch.len()
                )));
            }
            let entries: Vec<(ContentHash, Embedding)> =
                missing.iter().zip(computed).map(|(&i, v)| (hashes[i].clone(), v)).collect();
            if let Err(error) = self.store.cache_embeddings(&model, &entries).await {
                tracing::warn!(%error, "embedding cache write failed");
            }
            cached.extend(entries);
        }
        hashes
            .iter()
            .map(|h| {
                cached
                    .get(h)
                    .cloned()
                    .ok_or_else(|| dedup_embed::Error::Malformed("embedding cache lost a vector".into()))
            })
            .collect()
    }
}
