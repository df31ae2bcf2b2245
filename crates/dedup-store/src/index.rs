//! The in-process vector index of one scope and model: exact top-k cosine search.
//!
//! Beside each `f32` vector the index keeps an int8 code, its scale and a bound on its
//! rounding error (`index/code.rs`). A search codes the query in int8, scans every code
//! with integer arithmetic (`index/scan.rs`), and uses the error bounds to drop every
//! vector that provably cannot be among the `k` best; only the survivors are scored
//! exactly with [`dot`]. The result is therefore the same as scoring everything in `f32`.

mod code;
mod scan;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;

use dedup_core::Embedding;
use rayon::prelude::*;

use self::code::{CodeParams, QueryCode};
use self::scan::CodeTable;
use crate::{MemoryId, Neighbour};

/// Accumulator lanes of [`dot`]; the error bound in `index/code.rs` depends on it.
const DOT_LANES: usize = 8;

/// Every vector of one scope and model, searchable by exact cosine similarity.
///
/// Vectors are unit-normalised ([`Embedding`]), so cosine is a dot product. Results are
/// exact: the same as scoring every stored vector in `f32` and sorting.
#[derive(Clone)]
pub struct VectorIndex {
    dims: usize,
    /// Length of a code row: `dims` padded to a multiple of 32.
    stride: usize,
    /// Row `j` is `vectors[j * dims..(j + 1) * dims]`.
    vectors: Vec<f32>,
    /// Row `j` is `codes[j * stride..(j + 1) * stride]`, zero past `dims`.
    codes: Vec<i8>,
    scales: Vec<f32>,
    residuals: Vec<f32>,
    ids: Vec<MemoryId>,
    /// **Invariant:** `positions[ids[j]] == j` for every row `j`, and nothing else.
    positions: HashMap<MemoryId, usize>,
}

impl VectorIndex {
    /// An empty index for vectors of `dims` dimensions.
    pub fn new(dims: usize) -> VectorIndex {
        VectorIndex {
            dims,
            stride: code::code_stride(dims),
            vectors: Vec::new(),
            codes: Vec::new(),
            scales: Vec::new(),
            residuals: Vec::new(),
            ids: Vec::new(),
            positions: HashMap::new(),
        }
    }

    /// The dimensions of every vector in the index.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `id` is in the index.
    pub fn contains(&self, id: MemoryId) -> bool {
        self.positions.contains_key(&id)
    }

    /// Adds `embedding` under `id`, replacing any vector already stored under it.
    pub fn upsert(&mut self, id: MemoryId, embedding: &Embedding) -> dedup_core::Result<()> {
        self.check_dims(embedding)?;
        let values = embedding.as_slice();
        let pos = match self.positions.get(&id) {
            Some(&pos) => {
                self.vectors[pos * self.dims..(pos + 1) * self.dims].copy_from_slice(values);
                pos
            }
            None => {
                let pos = self.ids.len();
                self.vectors.extend_from_slice(values);
                self.codes.resize((pos + 1) * self.stride, 0);
                self.scales.push(0.0);
                self.residuals.push(0.0);
                self.ids.push(id);
                self.positions.insert(id, pos);
                pos
            }
        };
        let CodeParams { scale, residual } =
            code::encode(values, &mut self.codes[pos * self.stride..(pos + 1) * self.stride]);
        self.scales[pos] = scale;
        self.residuals[pos] = residual;
        Ok(())
    }

    /// Makes room for `additional` more vectors, so that loading a scope allocates once.
    pub fn reserve(&mut self, additional: usize) {
        self.vectors.reserve(additional.saturating_mul(self.dims));
        self.codes.reserve(additional.saturating_mul(self.stride));
        self.scales.reserve(additional);
        self.residuals.reserve(additional);
        self.ids.reserve(additional);
        self.positions.reserve(additional);
    }

    /// Removes `id`; returns whether it was present.
    pub fn remove(&mut self, id: MemoryId) -> bool {
        let Some(pos) = self.positions.remove(&id) else {
            return false;
        };
        let last = self.ids.len() - 1;
        if pos != last {
            self.vectors.copy_within(last * self.dims..(last + 1) * self.dims, pos * self.dims);
            self.codes.copy_within(last * self.stride..(last + 1) * self.stride, pos * self.stride);
        }
        self.vectors.truncate(last * self.dims);
        self.codes.truncate(last * self.stride);
        self.scales.swap_remove(pos);
        self.residuals.swap_remove(pos);
        self.ids.swap_remove(pos);
        if let Some(&moved) = self.ids.get(pos) {
            self.positions.insert(moved, pos);
        }
        true
    }

    /// The `k` vectors most similar to `query` with a score of at least `min_score`
    /// (when given), highest first, ties broken by lower id.
    pub fn top_k(&self, query: &Embedding, k: usize, min_score: Option<f32>) -> dedup_core::Result<Vec<Neighbour>> {
        self.check_dims(query)?;
        if k == 0 || self.is_empty() {
            return Ok(Vec::new());
        }
        let query = query.as_slice();
        let floor = min_score.unwrap_or(f32::NEG_INFINITY);
        let table =
            CodeTable { codes: &self.codes, scales: &self.scales, residuals: &self.residuals, stride: self.stride };
        let positions = scan::candidates(table, &QueryCode::new(query, self.stride), k, floor);
        let score = |&pos: &usize| Neighbour { id: self.ids[pos], score: dot(query, self.row(pos)) };
        let mut hits: Vec<Neighbour> = if positions.len() < scan::PARALLEL_MIN_LEN {
            positions.iter().map(score).filter(|hit| hit.score >= floor).collect()
        } else {
            positions.par_iter().map(score).filter(|hit| hit.score >= floor).collect()
        };
        if hits.len() > k {
            hits.select_nth_unstable_by(k - 1, rank);
            hits.truncate(k);
        }
        hits.sort_unstable_by(rank);
        Ok(hits)
    }

    /// Bytes of heap the index holds.
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        // A hashbrown table holds one control byte per bucket beside each entry.
        let position_bytes = self.positions.capacity() * (size_of::<(MemoryId, usize)>() + 1);
        self.vectors.capacity() * size_of::<f32>()
            + self.codes.capacity()
            + self.scales.capacity() * size_of::<f32>()
            + self.residuals.capacity() * size_of::<f32>()
            + self.ids.capacity() * size_of::<MemoryId>()
            + position_bytes
    }

    /// The approximate score of the vector stored under `id` and its error bound, as the
    /// scan computes them.
    #[cfg(test)]
    fn approx_score(&self, query: &Embedding, id: MemoryId) -> Option<(f32, f32)> {
        let pos = *self.positions.get(&id)?;
        let query = QueryCode::new(query.as_slice(), self.stride);
        let code_dot = scan::code_dot(&self.codes[pos * self.stride..(pos + 1) * self.stride], &query.codes);
        Some(query.approx(code_dot, CodeParams { scale: self.scales[pos], residual: self.residuals[pos] }))
    }

    fn row(&self, pos: usize) -> &[f32] {
        &self.vectors[pos * self.dims..(pos + 1) * self.dims]
    }

    fn check_dims(&self, embedding: &Embedding) -> dedup_core::Result<()> {
        if embedding.dims() == self.dims {
            Ok(())
        } else {
            Err(dedup_core::Error::DimensionMismatch { expected: self.dims, actual: embedding.dims() })
        }
    }
}

impl fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VectorIndex")
            .field("dims", &self.dims)
            .field("len", &self.len())
            .field("memory_bytes", &self.memory_bytes())
            .finish_non_exhaustive()
    }
}

/// The order of search results: score descending, then id ascending.
fn rank(a: &Neighbour, b: &Neighbour) -> std::cmp::Ordering {
    // Scores are finite (embeddings are), so `partial_cmp` is total; `0.0` and `-0.0` tie.
    b.score.partial_cmp(&a.score).unwrap_or(std::cmp::Ordering::Equal).then(a.id.cmp(&b.id))
}

/// The exact score: the `f32` dot product, summed in [`DOT_LANES`] lanes over fixed-size
/// chunks, then the lanes in order, then the remainder. Every returned score is this
/// function's value; the error bound in `index/code.rs` is derived for this order.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; DOT_LANES];
    for (a, b) in a.chunks_exact(DOT_LANES).zip(b.chunks_exact(DOT_LANES)) {
        for lane in 0..DOT_LANES {
            acc[lane] += a[lane] * b[lane];
        }
    }
    let mut sum = acc.iter().fold(0.0f32, |sum, &lane| sum + lane);
    let tail = a.len() - a.len() % DOT_LANES;
    for (a, b) in a[tail..].iter().zip(&b[tail..]) {
        sum += a * b;
    }
    sum
}
