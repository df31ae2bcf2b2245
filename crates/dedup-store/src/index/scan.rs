//! The pruning scan: approximate scores of every stored code, keeping only the vectors
//! whose upper bound can still reach the `k` best exact scores.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::ops::Range;

use rayon::prelude::*;

use super::code::{CodeParams, QueryCode};

/// Below this many stored vectors the scan runs on the calling thread.
pub(super) const PARALLEL_MIN_LEN: usize = 20_000;

/// Stored vectors per rayon task (about 3 MiB of codes at 384 dimensions).
const CHUNK_LEN: usize = 8_192;

/// Integer products summed in `i32` before widening: `512 · 127 · 32767 < 2³¹`.
const I32_BLOCK: usize = 512;

/// The int8 codes of every stored vector, row by row, with their parameters.
#[derive(Debug, Clone, Copy)]
pub(super) struct CodeTable<'a> {
    /// Row `j` is `codes[j * stride..(j + 1) * stride]`.
    pub(super) codes: &'a [i8],
    /// `s` of row `j`.
    pub(super) scales: &'a [f32],
    /// `r` of row `j`.
    pub(super) residuals: &'a [f32],
    /// Padded row length, a multiple of [`CODE_LANES`](super::code::CODE_LANES).
    pub(super) stride: usize,
}

impl CodeTable<'_> {
    fn len(&self) -> usize {
        self.scales.len()
    }
}

/// The positions of every stored vector that may be among the `k` best with a score of at
/// least `floor`, in ascending order.
///
/// A vector is left out only when its upper bound is below `floor` or below the `k`-th
/// largest lower bound, so its exact score is below `floor` or strictly below `k` other
/// exact scores. The result depends on the scores alone, not on the thread count.
pub(super) fn candidates(table: CodeTable<'_>, query: &QueryCode, k: usize, floor: f32) -> Vec<usize> {
    let len = table.len();
    let k = k.min(len);
    let scanned = if len < PARALLEL_MIN_LEN {
        scan(table, query, 0..len, k, floor)
    } else {
        let parts: Vec<Scanned> = (0..len.div_ceil(CHUNK_LEN))
            .into_par_iter()
            .map(|chunk| scan(table, query, chunk * CHUNK_LEN..((chunk + 1) * CHUNK_LEN).min(len), k, floor))
            .collect();
        let mut parts = parts.into_iter();
        let first = parts.next().unwrap_or_else(|| Scanned::new(k));
        parts.fold(first, Scanned::merge)
    };
    let cut = scanned.lower.threshold().max(floor);
    scanned.candidates.into_iter().filter(|c| c.upper >= cut).map(|c| c.pos).collect()
}

/// A vector that passed the running cut of its scan.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    pos: usize,
    upper: f32,
}

/// What scanning one range of rows found.
#[derive(Debug)]
struct Scanned {
    lower: LowerBounds,
    candidates: Vec<Candidate>,
}

impl Scanned {
    fn new(k: usize) -> Scanned {
        Scanned { lower: LowerBounds::new(k), candidates: Vec::new() }
    }

    /// Both ranges' findings; `other`'s rows come after `self`'s.
    fn merge(mut self, other: Scanned) -> Scanned {
        for Reverse(bound) in other.lower.heap {
            self.lower.offer(bound.0);
        }
        self.candidates.extend(other.candidates);
        self
    }
}

/// The `k` largest lower bounds seen so far.
#[derive(Debug)]
struct LowerBounds {
    k: usize,
    heap: BinaryHeap<Reverse<TotalF32>>,
}

impl LowerBounds {
    fn new(k: usize) -> LowerBounds {
        LowerBounds { k, heap: BinaryHeap::with_capacity(k + 1) }
    }

    /// The `k`-th largest bound, or −∞ while fewer than `k` were offered.
    fn threshold(&self) -> f32 {
        match self.heap.peek() {
            Some(Reverse(TotalF32(min))) if self.heap.len() >= self.k => *min,
            _ => f32::NEG_INFINITY,
        }
    }

    /// Keeps `bound` if it is among the `k` largest. Only a bound above
    /// [`LowerBounds::threshold`] changes anything.
    fn offer(&mut self, bound: f32) {
        if self.heap.len() < self.k {
            self.heap.push(Reverse(TotalF32(bound)));
        } else if let Some(mut min) = self.heap.peek_mut()
            && bound > min.0.0
        {
            *min = Reverse(TotalF32(bound));
        }
    }
}

/// An `f32` ordered by [`f32::total_cmp`].
#[derive(Debug, Clone, Copy)]
struct TotalF32(f32);

impl PartialEq for TotalF32 {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for TotalF32 {}

impl PartialOrd for TotalF32 {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TotalF32 {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Scans `rows` with the fastest kernel this CPU runs.
fn scan(table: CodeTable<'_>, query: &QueryCode, rows: Range<usize>, k: usize, floor: f32) -> Scanned {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        return scan_avx2_dispatch(table, query, rows, k, floor);
    }
    scan_portable(table, query, rows, k, floor)
}

/// Whether the CPU has AVX2, asked once.
#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    static HAS_AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS_AVX2.get_or_init(|| std::arch::is_x86_feature_detected!("avx2"))
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn scan_avx2_dispatch(table: CodeTable<'_>, query: &QueryCode, rows: Range<usize>, k: usize, floor: f32) -> Scanned {
    debug_assert!(has_avx2());
    // SAFETY: the only caller, `scan`, checked `has_avx2()`, i.e. the running CPU supports
    // AVX2, the one target feature `scan_avx2` enables.
    unsafe { scan_avx2(table, query, rows, k, floor) }
}

/// [`scan_rows`] compiled for AVX2: the int8 × int16 products become `vpmovsxbw` +
/// `vpmaddwd` on 256-bit registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scan_avx2(table: CodeTable<'_>, query: &QueryCode, rows: Range<usize>, k: usize, floor: f32) -> Scanned {
    scan_rows(table, query, rows, k, floor)
}

/// [`scan_rows`] for the baseline target (SSE2 `pmaddwd` on x86-64).
fn scan_portable(table: CodeTable<'_>, query: &QueryCode, rows: Range<usize>, k: usize, floor: f32) -> Scanned {
    scan_rows(table, query, rows, k, floor)
}

/// The scan proper, inlined into each kernel so it is compiled for its target features.
///
/// The running cut only rises towards the final one (a range's `k`-th lower bound is at
/// most the overall one), so every vector the final cut keeps is collected here.
#[inline(always)]
fn scan_rows(table: CodeTable<'_>, query: &QueryCode, rows: Range<usize>, k: usize, floor: f32) -> Scanned {
    let mut scanned = Scanned::new(k);
    // `scanned.lower.threshold()` and the cut derived from it, kept in registers: after
    // the first rows almost no lower bound beats the k-th, and the heap is not touched.
    let (mut kth, mut cut) = (f32::NEG_INFINITY, floor);
    let stride = table.stride;
    let codes = &table.codes[rows.start * stride..rows.end * stride];
    let params = table.scales[rows.clone()].iter().zip(&table.residuals[rows.clone()]);
    for ((pos, code), (&scale, &residual)) in rows.zip(codes.chunks_exact(stride)).zip(params) {
        let (approx, bound) = query.approx(code_dot(code, &query.codes), CodeParams { scale, residual });
        let upper = approx + bound;
        if upper >= cut {
            scanned.candidates.push(Candidate { pos, upper });
        }
        let lower = approx - bound;
        if lower > kth {
            scanned.lower.offer(lower);
            kth = scanned.lower.threshold();
            cut = kth.max(floor);
        }
    }
    scanned
}

/// `Σ cᵢ·qqᵢ` exactly (as an `f32`, rounded once). `code` and `query` have the same
/// length, a multiple of [`CODE_LANES`](super::code::CODE_LANES).
#[inline(always)]
pub(super) fn code_dot(code: &[i8], query: &[i16]) -> f32 {
    if code.len() <= I32_BLOCK {
        return block_dot(code, query) as f32;
    }
    let blocks = code.chunks(I32_BLOCK).zip(query.chunks(I32_BLOCK));
    blocks.map(|(code, query)| i64::from(block_dot(code, query))).sum::<i64>() as f32
}

/// `Σ cᵢ·qqᵢ` of at most [`I32_BLOCK`] products, which cannot overflow `i32`. Written as
/// 32 independent lanes of widening multiplies so LLVM emits `pmaddwd`.
#[inline(always)]
fn block_dot(code: &[i8], query: &[i16]) -> i32 {
    const LANES: usize = super::code::CODE_LANES;
    debug_assert!(code.len() <= I32_BLOCK && code.len() == query.len() && code.len().is_multiple_of(LANES));
    let mut acc = [0i32; LANES];
    for (code, query) in code.chunks_exact(LANES).zip(query.chunks_exact(LANES)) {
        for lane in 0..LANES {
            acc[lane] += i32::from(code[lane]) * i32::from(query[lane]);
        }
    }
    acc.iter().sum()
}
