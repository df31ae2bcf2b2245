//! Similarity grouping: connected components of the graph "cosine >= threshold".
//!
//! All pairs are compared tile by tile: a tile is the product of two blocks of at most
//! [`GroupOptions::tile_size`] rows, computed as one small matrix product (SIMD
//! micro-kernels from `matrixmultiply`) into a scratch buffer that each worker reuses, so
//! memory stays bounded whatever the input size; tiles run in parallel on rayon.
//!
//! Only edges that can matter are kept: each worker keeps a maximum spanning forest of the
//! edges it has seen (the strongest links that connect each component), and forests are
//! merged pairwise. Because edges are totally ordered (score descending, then indices),
//! that forest is unique, so the result does not depend on the number of threads or on
//! how rayon splits the work. Each group then reports its spanning edges and its weakest
//! link: the lowest similarity that had to be crossed to join the group, i.e. the highest
//! threshold at which it would still be one group.

use std::cmp::Ordering;

use rayon::prelude::*;

use crate::{Embedding, Error, Result, Threshold};

mod guard;

pub use guard::{GuardedGrouping, Linkage, RefusedLink, group_confirmed};

/// Scores within this distance below the threshold count as reaching it, so that f32
/// rounding never splits identical texts at threshold 1.0.
pub const SCORE_TOLERANCE: f32 = 2e-6;

/// Tuning for [`group_by_similarity_with`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupOptions {
    /// Two items are linked when their cosine is `>=` this.
    pub threshold: Threshold,
    /// Rows per tile side (default 256). Larger tiles amortise more but need
    /// `tile_size²` floats of scratch per worker.
    pub tile_size: usize,
}

impl GroupOptions {
    /// Default tiling at the given threshold.
    pub fn new(threshold: Threshold) -> Self {
        Self { threshold, tile_size: 256 }
    }
}

/// A link between two input items whose cosine reached the threshold (or, for
/// [`group_confirmed`], that a judge confirmed as duplicates).
///
/// **Invariant:** `a < b` (input indices).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Edge {
    /// Index of the earlier item.
    pub a: usize,
    /// Index of the later item.
    pub b: usize,
    /// Their cosine similarity, or the score the caller gave a confirmed pair.
    pub score: f32,
}

/// One group of two or more items that are connected through links >= threshold.
///
/// **Invariants:** `members` are input indices in ascending (input) order, at least two;
/// `edges` form a maximum spanning tree of the group (`members.len() - 1` edges, strongest
/// first); `weakest_link` is the lowest score among them. Groups from [`group_confirmed`]
/// in [`Linkage::Survivor`] mode span the group with a star around the survivor instead.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Input indices of the members, in input order. The first one is the survivor.
    pub members: Vec<usize>,
    /// The strongest links that connect the group, strongest first.
    pub edges: Vec<Edge>,
    /// The lowest similarity among `edges`: raise the threshold above it and the group
    /// splits. A weakest link far below the direct similarities suggests chaining through
    /// a hub.
    pub weakest_link: f32,
}

impl Group {
    /// A group of `members` (in input order) joined by the spanning tree `edges`, which
    /// this sorts strongest first under the same total order as the spanning forest.
    fn from_tree(members: Vec<usize>, mut edges: Vec<Edge>) -> Self {
        edges.sort_by(|x, y| y.score.total_cmp(&x.score).then(x.a.cmp(&y.a)).then(x.b.cmp(&y.b)));
        let weakest_link = edges.iter().map(|e| e.score).fold(f32::INFINITY, f32::min);
        Group { members, edges, weakest_link }
    }

    /// The member that survives a first-entry-wins merge.
    pub fn survivor(&self) -> usize {
        self.members[0]
    }

    /// For each member except the survivor, in input order: `(member, via, score)`, where
    /// `via` is the member it is linked to on the path towards the survivor in the
    /// spanning tree, and `score` their similarity.
    pub fn links(&self) -> Vec<(usize, usize, f32)> {
        let mut out = Vec::with_capacity(self.members.len().saturating_sub(1));
        let mut reached = vec![self.survivor()];
        let mut frontier = vec![self.survivor()];
        while let Some(node) = frontier.pop() {
            for e in &self.edges {
                let other = if e.a == node {
                    e.b
                } else if e.b == node {
                    e.a
                } else {
                    continue;
                };
                if !reached.contains(&other) {
                    reached.push(other);
                    frontier.push(other);
                    out.push((other, node, e.score));
                }
            }
        }
        out.sort_by_key(|&(member, _, _)| member);
        out
    }
}

/// Groups `embeddings` into connected components of the graph "cosine >= threshold",
/// with default tiling. Returns only groups of two or more, ordered by first member.
///
/// Fails when the embeddings do not all have the same dimensions.
pub fn group_by_similarity(embeddings: &[Embedding], threshold: Threshold) -> Result<Vec<Group>> {
    group_by_similarity_with(embeddings, GroupOptions::new(threshold))
}

/// [`group_by_similarity`] with explicit [`GroupOptions`].
pub fn group_by_similarity_with(embeddings: &[Embedding], options: GroupOptions) -> Result<Vec<Group>> {
    let n = embeddings.len();
    if n < 2 {
        return Ok(Vec::new());
    }
    let dims = embeddings[0].dims();
    if let Some(bad) = embeddings.iter().find(|e| e.dims() != dims) {
        return Err(Error::DimensionMismatch { expected: dims, actual: bad.dims() });
    }
    if u32::try_from(n).is_err() {
        return Err(Error::DimensionMismatch { expected: u32::MAX as usize, actual: n });
    }
    let matrix: Vec<f32> = embeddings.iter().flat_map(|e| e.as_slice().iter().copied()).collect();
    let forest = spanning_forest(&matrix, n, dims, options);
    Ok(assemble_groups(n, forest))
}

/// An edge in compact form for the hot path: (score, a, b) with a < b.
#[derive(Debug, Clone, Copy)]
struct RawEdge {
    score: f32,
    a: u32,
    b: u32,
}

/// The total order that makes the spanning forest unique: strongest first, then by indices.
fn edge_order(x: &RawEdge, y: &RawEdge) -> Ordering {
    y.score.total_cmp(&x.score).then(x.a.cmp(&y.a)).then(x.b.cmp(&y.b))
}

/// A worker's state: the edges kept so far plus a reusable tile buffer.
struct Accumulator {
    edges: Vec<RawEdge>,
    cap: usize,
    scratch: Vec<f32>,
}

fn spanning_forest(matrix: &[f32], n: usize, dims: usize, options: GroupOptions) -> Vec<RawEdge> {
    let tile = options.tile_size.max(1);
    let blocks = n.div_ceil(tile);
    // f32 rounding: the dot product of a unit vector with itself can come out a few ulps
    // below 1, so scores within SCORE_TOLERANCE of the threshold count as reaching it.
    let threshold = options.threshold.as_f32() - SCORE_TOLERANCE;
    let base_cap = 4 * n + 4096;
    let tiles: Vec<(usize, usize)> = (0..blocks).flat_map(|bi| (bi..blocks).map(move |bj| (bi, bj))).collect();
    let new_acc = || Accumulator { edges: Vec::new(), cap: base_cap, scratch: Vec::new() };
    tiles
        .par_iter()
        .fold(new_acc, |mut acc, &(bi, bj)| {
            compare_tile(matrix, n, dims, tile, bi, bj, threshold, &mut acc);
            if acc.edges.len() > acc.cap {
                acc.edges = kruskal(std::mem::take(&mut acc.edges));
                acc.cap = acc.cap.max(2 * acc.edges.len());
            }
            acc
        })
        .map(|acc| kruskal(acc.edges))
        .reduce(Vec::new, |mut x, y| {
            x.extend(y);
            kruskal(x)
        })
}

/// Compares rows of block `bi` with rows of block `bj` (`bi <= bj`) and appends every pair
/// with score >= threshold to `acc.edges`.
#[allow(clippy::too_many_arguments)]
fn compare_tile(
    matrix: &[f32],
    n: usize,
    dims: usize,
    tile: usize,
    bi: usize,
    bj: usize,
    threshold: f32,
    acc: &mut Accumulator,
) {
    let (r0, r1) = (bi * tile, ((bi + 1) * tile).min(n));
    let (c0, c1) = (bj * tile, ((bj + 1) * tile).min(n));
    let (rows, cols) = (r1 - r0, c1 - c0);
    acc.scratch.resize(rows * cols, 0.0);
    let a = &matrix[r0 * dims..r1 * dims];
    let b = &matrix[c0 * dims..c1 * dims];
    product_with_transpose(a, rows, b, cols, dims, &mut acc.scratch[..rows * cols]);
    for i in 0..rows {
        let row = &acc.scratch[i * cols..(i + 1) * cols];
        let start = if bi == bj { i + 1 } else { 0 };
        // Edges are rare: test 16 scores at a time with a vectorisable max and look at
        // single scores only in chunks that hold one.
        const CHUNK: usize = 16;
        for (k, chunk) in row[start..].chunks(CHUNK).enumerate() {
            if chunk.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m }) < threshold {
                continue;
            }
            for (offset, &score) in chunk.iter().enumerate() {
                if score >= threshold {
                    let j = start + k * CHUNK + offset;
                    acc.edges.push(RawEdge { score, a: (r0 + i) as u32, b: (c0 + j) as u32 });
                }
            }
        }
    }
}

/// `out = a × bᵀ`, where `a` is `rows × dims` and `b` is `cols × dims`, both row-major, and
/// `out` is `rows × cols` row-major.
pub(crate) fn product_with_transpose(a: &[f32], rows: usize, b: &[f32], cols: usize, dims: usize, out: &mut [f32]) {
    assert!(a.len() == rows * dims && b.len() == cols * dims && out.len() == rows * cols);
    // SAFETY: the assertion above guarantees that every index the kernel touches is in
    // bounds: `a` is rows×dims with strides (dims, 1); `b` read as the dims×cols matrix bᵀ
    // with strides (1, dims); `out` is rows×cols with strides (cols, 1). The three slices do
    // not overlap (`out` is borrowed mutably).
    #[allow(unsafe_code)]
    unsafe {
        matrixmultiply::sgemm(
            rows,
            dims,
            cols,
            1.0,
            a.as_ptr(),
            dims as isize,
            1,
            b.as_ptr(),
            1,
            dims as isize,
            0.0,
            out.as_mut_ptr(),
            cols as isize,
            1,
        );
    }
}

/// Reduces `edges` to their maximum spanning forest under [`edge_order`].
fn kruskal(mut edges: Vec<RawEdge>) -> Vec<RawEdge> {
    if edges.len() < 2 {
        return edges;
    }
    edges.sort_unstable_by(edge_order);
    let mut vertices: Vec<u32> = edges.iter().flat_map(|e| [e.a, e.b]).collect();
    vertices.sort_unstable();
    vertices.dedup();
    let local = |v: u32| vertices.binary_search(&v).unwrap_or_else(|i| i);
    let mut sets = DisjointSets::new(vertices.len());
    edges.retain(|e| sets.union(local(e.a), local(e.b)));
    edges
}

fn assemble_groups(n: usize, forest: Vec<RawEdge>) -> Vec<Group> {
    let mut sets = DisjointSets::new(n);
    for e in &forest {
        sets.union(e.a as usize, e.b as usize);
    }
    // Group id per root, assigned in order of first member so output is ordered.
    let mut group_of_root = vec![usize::MAX; n];
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut sizes = vec![0usize; n];
    for i in 0..n {
        sizes[sets.find(i)] += 1;
    }
    for i in 0..n {
        let root = sets.find(i);
        if sizes[root] < 2 {
            continue;
        }
        if group_of_root[root] == usize::MAX {
            group_of_root[root] = members.len();
            members.push(Vec::new());
        }
        members[group_of_root[root]].push(i);
    }
    let mut edges: Vec<Vec<Edge>> = vec![Vec::new(); members.len()];
    for e in forest {
        let g = group_of_root[sets.find(e.a as usize)];
        edges[g].push(Edge { a: e.a as usize, b: e.b as usize, score: e.score });
    }
    members.into_iter().zip(edges).map(|(members, edges)| Group::from_tree(members, edges)).collect()
}

/// Union-find with path halving and union by size.
pub(crate) struct DisjointSets {
    parent: Vec<usize>,
    size: Vec<usize>,
}

impl DisjointSets {
    pub(crate) fn new(n: usize) -> Self {
        Self { parent: (0..n).collect(), size: vec![1; n] }
    }

    pub(crate) fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    /// Joins the sets of `x` and `y`; returns false when they were already one set.
    pub(crate) fn union(&mut self, x: usize, y: usize) -> bool {
        let (mut rx, mut ry) = (self.find(x), self.find(y));
        if rx == ry {
            return false;
        }
        if self.size[rx] < self.size[ry] {
            std::mem::swap(&mut rx, &mut ry);
        }
        self.parent[ry] = rx;
        self.size[rx] += self.size[ry];
        true
    }
}

#[cfg(test)]
mod tests;
