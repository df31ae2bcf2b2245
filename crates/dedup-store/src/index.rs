//! The in-process vector index of one scope and model: exact top-k cosine search.

use dedup_core::Embedding;

use crate::{MemoryId, Neighbour};

/// Every vector of one scope and model, searchable by exact cosine similarity.
///
/// Vectors are unit-normalised ([`Embedding`]), so cosine is a dot product. Results are
/// exact: the same as scoring every stored vector in `f32` and sorting.
#[derive(Debug, Clone)]
pub struct VectorIndex {
    dims: usize,
}

impl VectorIndex {
    /// An empty index for vectors of `dims` dimensions.
    pub fn new(dims: usize) -> VectorIndex {
        VectorIndex { dims }
    }

    /// The dimensions of every vector in the index.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        unimplemented!()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `id` is in the index.
    pub fn contains(&self, _id: MemoryId) -> bool {
        unimplemented!()
    }

    /// Adds `embedding` under `id`, replacing any vector already stored under it.
    pub fn upsert(&mut self, _id: MemoryId, _embedding: &Embedding) -> dedup_core::Result<()> {
        unimplemented!()
    }

    /// Removes `id`; returns whether it was present.
    pub fn remove(&mut self, _id: MemoryId) -> bool {
        unimplemented!()
    }

    /// The `k` vectors most similar to `query` with a score of at least `min_score`
    /// (when given), highest first, ties broken by lower id.
    pub fn top_k(&self, _query: &Embedding, _k: usize, _min_score: Option<f32>) -> dedup_core::Result<Vec<Neighbour>> {
        unimplemented!()
    }

    /// Bytes of heap the index holds.
    pub fn memory_bytes(&self) -> usize {
        unimplemented!()
    }
}
