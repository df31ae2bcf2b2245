//! The in-process vector index of one (scope, model, filter), its watermark, and exact
//! top-k over it off the async workers when it is large.

use std::sync::Arc;

use dedup_core::Embedding;
use tokio::sync::{OwnedRwLockReadGuard, RwLock};

use super::BLOCKING_SEARCH_COMPONENTS;
use super::records::{VectorRecord, decode_vector};
use crate::{Error, MemoryId, Neighbour, Result, Scope, SearchFilter, VectorIndex};

/// The in-process index of one (scope, model) and the watermark it reflects.
#[derive(Debug, Default)]
pub(super) struct IndexState {
    /// The scope version the index reflects; `None` until first loaded.
    pub(super) version: Option<i64>,
    /// The vectors; `None` while the scope has none of this model (dimensions unknown).
    pub(super) index: Option<VectorIndex>,
}

pub(super) type IndexHandle = Arc<RwLock<IndexState>>;

impl IndexState {
    /// Heap bytes of the index (0 while there is none).
    pub(super) fn memory_bytes(&self) -> usize {
        self.index.as_ref().map_or(0, VectorIndex::memory_bytes)
    }

    /// Whether the index reflects `version` (or something newer).
    pub(super) fn is_current(&self, version: i64) -> bool {
        self.version.is_some_and(|v| v >= version)
    }

    /// Applies rows read after `version` was read: a full load (replacing the index) when
    /// `full`, else a delta of changed rows. Every row is decoded and checked before the
    /// index changes, so a corrupt row leaves it as it was.
    pub(super) fn apply(
        &mut self,
        rows: Vec<VectorRecord>,
        full: bool,
        version: i64,
        filter: &SearchFilter,
    ) -> Result<()> {
        let mut dims = if full { None } else { self.index.as_ref().map(VectorIndex::dims) };
        let mut changes = Vec::with_capacity(rows.len());
        for row in rows {
            let id = MemoryId::new(row.id);
            let embedding = match (row.deprecated, row.dims, row.vector) {
                (false, Some(stored_dims), Some(bytes)) => {
                    let embedding = decode_vector("embeddings", &format_args!("memory {id}"), stored_dims, &bytes)?;
                    let embedding = filter.comparable(&embedding)?;
                    match dims {
                        Some(dims) if dims != embedding.dims() => {
                            return Err(Error::Corrupt {
                                table: "embeddings",
                                reason: format!(
                                    "memory {id} has a {}-dim vector, other vectors of its model and scope have {dims}",
                                    embedding.dims()
                                ),
                            });
                        }
                        _ => dims = Some(embedding.dims()),
                    }
                    Some(embedding)
                }
                _ => None,
            };
            changes.push((id, embedding));
        }
        if full {
            self.index = None;
            if let Some(dims) = dims {
                let mut index = VectorIndex::new(dims);
                index.reserve(changes.len());
                self.index = Some(index);
            }
        }
        for (id, embedding) in changes {
            match embedding {
                Some(embedding) => {
                    self.index.get_or_insert_with(|| VectorIndex::new(embedding.dims())).upsert(id, &embedding)?;
                }
                None => {
                    if let Some(index) = &mut self.index {
                        index.remove(id);
                    }
                }
            }
        }
        self.version = Some(version);
        Ok(())
    }

    /// After a committed insert at `version`: adds its vector if the index was exactly one
    /// version behind; otherwise the next refresh reads it.
    /// `embedding` is `None` when the memory is not of this index's kind.
    pub(super) fn apply_insert(&mut self, id: MemoryId, embedding: Option<&Embedding>, version: i64) -> Result<()> {
        if self.version != Some(version - 1) {
            return Ok(());
        }
        if let Some(embedding) = embedding {
            let index = self.index.get_or_insert_with(|| VectorIndex::new(embedding.dims()));
            index.upsert(id, embedding)?;
        }
        self.version = Some(version);
        Ok(())
    }

    /// After a committed write at `version` that removed `id` (or its vector) from the
    /// scope: drops it if the index was exactly one version behind.
    pub(super) fn apply_removal(&mut self, id: MemoryId, version: i64) {
        if self.version == Some(version - 1) {
            if let Some(index) = &mut self.index {
                index.remove(id);
            }
            self.version = Some(version);
        }
    }

    /// Checks that `embedding` can join this index.
    pub(super) fn check_dims(&self, embedding: &Embedding) -> Result<()> {
        match &self.index {
            Some(index) if index.dims() != embedding.dims() => {
                Err(Error::InvalidVector(dedup_core::Error::DimensionMismatch {
                    expected: index.dims(),
                    actual: embedding.dims(),
                }))
            }
            _ => Ok(()),
        }
    }
}

/// Exact top-k over a held index, on a blocking thread when the index is large.
pub(super) async fn top_k<G>(
    guard: G,
    query: &Embedding,
    k: usize,
    min_score: Option<f32>,
) -> Result<(G, Vec<Neighbour>)>
where
    G: std::ops::Deref<Target = IndexState> + Send + 'static,
{
    let Some(index) = &guard.index else { return Ok((guard, Vec::new())) };
    if index.dims() != query.dims() {
        return Err(Error::InvalidVector(dedup_core::Error::DimensionMismatch {
            expected: index.dims(),
            actual: query.dims(),
        }));
    }
    if k == 0 || index.is_empty() {
        return Ok((guard, Vec::new()));
    }
    if index.len().saturating_mul(index.dims()) < BLOCKING_SEARCH_COMPONENTS {
        let neighbours = index.top_k(query, k, min_score)?;
        return Ok((guard, neighbours));
    }
    let query = query.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let neighbours = match &guard.index {
            Some(index) => index.top_k(&query, k, min_score),
            None => Ok(Vec::new()),
        };
        (guard, neighbours)
    })
    .await;
    match joined {
        Ok((guard, neighbours)) => Ok((guard, neighbours?)),
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    }
}

/// What one in-process index holds: the live memories of a scope embedded by a model,
/// narrowed and truncated by a filter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct IndexKey {
    pub(super) scope: Scope,
    pub(super) model: String,
    pub(super) filter: SearchFilter,
}

/// A read guard on an index that was current when taken.
pub(super) type FreshIndex = OwnedRwLockReadGuard<IndexState>;
