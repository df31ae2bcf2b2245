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

/// Integer products summed in `i32` before widening: `65536 · 127 · 127 < 2³¹`.
const I32_BLOCK: usize = 65_536;

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
    match x86::kernel() {
        x86::Kernel::Avx512Vnni => return x86::scan_avx512(table, query, rows, k, floor),
        x86::Kernel::Avx2 => return x86::scan_avx2(table, query, rows, k, floor),
        x86::Kernel::Ssse3 => return x86::scan_ssse3(table, query, rows, k, floor),
        x86::Kernel::Baseline => {}
    }
    scan_rows(table, query, rows, k, floor, code_dot)
}

/// The scan proper, inlined into each kernel so it is compiled for its target features.
///
/// The running cut only rises towards the final one (a range's `k`-th lower bound is at
/// most the overall one), so every vector the final cut keeps is collected here.
#[inline(always)]
fn scan_rows(
    table: CodeTable<'_>,
    query: &QueryCode,
    rows: Range<usize>,
    k: usize,
    floor: f32,
    code_dot: impl Fn(&[i8], &[i8]) -> f32,
) -> Scanned {
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
///
/// Every kernel computes this same integer sum, so the scan's result does not depend on
/// which one runs.
#[inline(always)]
pub(super) fn code_dot(code: &[i8], query: &[i8]) -> f32 {
    if code.len() <= I32_BLOCK {
        return block_dot(code, query) as f32;
    }
    let blocks = code.chunks(I32_BLOCK).zip(query.chunks(I32_BLOCK));
    blocks.map(|(code, query)| i64::from(block_dot(code, query))).sum::<i64>() as f32
}

/// `Σ cᵢ·qqᵢ` of at most [`I32_BLOCK`] products, which cannot overflow `i32`. Written as
/// 32 independent lanes of widening multiplies so LLVM emits `pmaddwd`.
#[inline(always)]
fn block_dot(code: &[i8], query: &[i8]) -> i32 {
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

/// The x86-64 kernels beyond the baseline, chosen once per process from what the CPU
/// reports.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use std::arch::x86_64::*;
    use std::ops::Range;
    use std::sync::OnceLock;

    use super::{CodeTable, I32_BLOCK, QueryCode, Scanned, code_dot, scan_rows};

    /// The kernels, fastest first.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Kernel {
        /// `vpdpbusd` on 512-bit registers: 64 products per instruction, summed in 32 bits.
        Avx512Vnni,
        /// `vpmaddubsw` on 256-bit registers: 32 products per instruction.
        Avx2,
        /// `pmaddubsw` on 128-bit registers: 16 products per instruction.
        Ssse3,
        /// [`scan_rows`] for the baseline target (SSE2 `pmaddwd`).
        Baseline,
    }

    /// The kernel this CPU runs, asked once.
    pub(super) fn kernel() -> Kernel {
        static KERNEL: OnceLock<Kernel> = OnceLock::new();
        *KERNEL.get_or_init(|| {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni")
            {
                Kernel::Avx512Vnni
            } else if std::arch::is_x86_feature_detected!("avx2") {
                Kernel::Avx2
            } else if std::arch::is_x86_feature_detected!("ssse3") {
                Kernel::Ssse3
            } else {
                Kernel::Baseline
            }
        })
    }

    pub(super) fn scan_avx512(
        table: CodeTable<'_>,
        query: &QueryCode,
        rows: Range<usize>,
        k: usize,
        floor: f32,
    ) -> Scanned {
        assert_eq!(kernel(), Kernel::Avx512Vnni);
        // SAFETY: `kernel()` found AVX-512 F, BW and VNNI on the running CPU, the target
        // features `scan_rows_avx512` enables.
        unsafe { scan_rows_avx512(table, query, rows, k, floor) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    fn scan_rows_avx512(table: CodeTable<'_>, query: &QueryCode, rows: Range<usize>, k: usize, floor: f32) -> Scanned {
        let offset = 128 * query.codes.iter().map(|&q| i32::from(q)).sum::<i32>();
        scan_rows(table, query, rows, k, floor, |code, query| code_dot_avx512(code, query, offset))
    }

    /// [`code_dot`] with `vpdpbusd`, which multiplies unsigned by signed bytes: the codes
    /// are read as `cᵢ + 128` (their top bit flipped), and `offset = 128·Σ qqᵢ` taken off.
    /// No intermediate saturates: each 32-bit lane sums products of at most `255·127`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) fn code_dot_avx512(code: &[i8], query: &[i8], offset: i32) -> f32 {
        debug_assert!(code.len() == query.len() && code.len().is_multiple_of(32));
        if code.len() > I32_BLOCK {
            // Too long for one 32-bit sum; not a real embedding size.
            return code_dot(code, query);
        }
        let flip = _mm512_set1_epi8(i8::MIN);
        let mut acc = _mm512_setzero_si512();
        let wide = code.len() - code.len() % 64;
        for (code, query) in code[..wide].chunks_exact(64).zip(query[..wide].chunks_exact(64)) {
            acc = _mm512_dpbusd_epi32(acc, _mm512_xor_si512(load512(code), flip), load512(query));
        }
        let mut sum = _mm512_reduce_add_epi32(acc);
        if wide < code.len() {
            let (code, query) = (&code[wide..], &query[wide..]);
            sum += code.iter().zip(query).map(|(&c, &q)| (i32::from(c) + 128) * i32::from(q)).sum::<i32>();
        }
        (sum - offset) as f32
    }

    /// The 64 bytes of `bytes` as a vector.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn load512(bytes: &[i8]) -> __m512i {
        assert_eq!(bytes.len(), 64);
        // SAFETY: `bytes` holds the 64 bytes read; `loadu` needs no alignment.
        unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) }
    }

    pub(super) fn scan_avx2(
        table: CodeTable<'_>,
        query: &QueryCode,
        rows: Range<usize>,
        k: usize,
        floor: f32,
    ) -> Scanned {
        assert!(matches!(kernel(), Kernel::Avx512Vnni | Kernel::Avx2));
        // SAFETY: `kernel()` found AVX2 on the running CPU (AVX-512 BW machines have it
        // too), the one target feature `scan_rows_avx2` enables.
        unsafe { scan_rows_avx2(table, query, rows, k, floor) }
    }

    #[target_feature(enable = "avx2")]
    fn scan_rows_avx2(table: CodeTable<'_>, query: &QueryCode, rows: Range<usize>, k: usize, floor: f32) -> Scanned {
        scan_rows(table, query, rows, k, floor, |code, query| code_dot_avx2(code, query))
    }

    /// [`code_dot`] with `vpmaddubsw`, as [`code_dot_ssse3`] on 256-bit registers.
    #[target_feature(enable = "avx2")]
    pub(super) fn code_dot_avx2(code: &[i8], query: &[i8]) -> f32 {
        if code.len() > I32_BLOCK {
            return code_dot(code, query);
        }
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_si256();
        for (code, query) in code.chunks_exact(32).zip(query.chunks_exact(32)) {
            let (c, q) = (load256(code), load256(query));
            acc = _mm256_add_epi32(
                acc,
                _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(c), _mm256_sign_epi8(q, c)), ones),
            );
        }
        let sum = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256::<1>(acc));
        let sum = _mm_add_epi32(sum, _mm_shuffle_epi32::<0b01_00_11_10>(sum));
        let sum = _mm_add_epi32(sum, _mm_shuffle_epi32::<0b10_11_00_01>(sum));
        _mm_cvtsi128_si32(sum) as f32
    }

    /// The 32 bytes of `bytes` as a vector.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn load256(bytes: &[i8]) -> __m256i {
        assert_eq!(bytes.len(), 32);
        // SAFETY: `bytes` holds the 32 bytes read; `loadu` needs no alignment.
        unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
    }

    pub(super) fn scan_ssse3(
        table: CodeTable<'_>,
        query: &QueryCode,
        rows: Range<usize>,
        k: usize,
        floor: f32,
    ) -> Scanned {
        assert_ne!(kernel(), Kernel::Baseline);
        // SAFETY: `kernel()` found SSSE3 (or AVX2, which implies it) on the running CPU,
        // the one target feature `scan_rows_ssse3` enables.
        unsafe { scan_rows_ssse3(table, query, rows, k, floor) }
    }

    #[target_feature(enable = "ssse3")]
    fn scan_rows_ssse3(table: CodeTable<'_>, query: &QueryCode, rows: Range<usize>, k: usize, floor: f32) -> Scanned {
        scan_rows(table, query, rows, k, floor, |code, query| code_dot_ssse3(code, query))
    }

    /// [`code_dot`] with `pmaddubsw`: `|cᵢ|` (unsigned) times `qqᵢ` with `cᵢ`'s sign, in
    /// pairs summed to 16 bits (at most `2·127·127`, no saturation: neither code is −128),
    /// then widened to 32-bit lanes by `pmaddwd` against ones.
    #[target_feature(enable = "ssse3")]
    pub(super) fn code_dot_ssse3(code: &[i8], query: &[i8]) -> f32 {
        if code.len() <= I32_BLOCK {
            return block_dot_ssse3(code, query) as f32;
        }
        let blocks = code.chunks(I32_BLOCK).zip(query.chunks(I32_BLOCK));
        blocks.map(|(code, query)| i64::from(block_dot_ssse3(code, query))).sum::<i64>() as f32
    }

    #[target_feature(enable = "ssse3")]
    #[inline]
    fn block_dot_ssse3(code: &[i8], query: &[i8]) -> i32 {
        debug_assert!(code.len() <= I32_BLOCK && code.len() == query.len() && code.len().is_multiple_of(32));
        let ones = _mm_set1_epi16(1);
        let (mut even, mut odd) = (_mm_setzero_si128(), _mm_setzero_si128());
        for (code, query) in code.chunks_exact(32).zip(query.chunks_exact(32)) {
            let (c0, c1, q0, q1) = (load(&code[..16]), load(&code[16..]), load(&query[..16]), load(&query[16..]));
            even =
                _mm_add_epi32(even, _mm_madd_epi16(_mm_maddubs_epi16(_mm_abs_epi8(c0), _mm_sign_epi8(q0, c0)), ones));
            odd = _mm_add_epi32(odd, _mm_madd_epi16(_mm_maddubs_epi16(_mm_abs_epi8(c1), _mm_sign_epi8(q1, c1)), ones));
        }
        let sum = _mm_add_epi32(even, odd);
        let sum = _mm_add_epi32(sum, _mm_shuffle_epi32::<0b01_00_11_10>(sum));
        let sum = _mm_add_epi32(sum, _mm_shuffle_epi32::<0b10_11_00_01>(sum));
        _mm_cvtsi128_si32(sum)
    }

    /// The 16 bytes of `bytes` as a vector.
    #[target_feature(enable = "ssse3")]
    #[inline]
    fn load(bytes: &[i8]) -> __m128i {
        assert_eq!(bytes.len(), 16);
        // SAFETY: `bytes` holds the 16 bytes read; `loadu` needs no alignment.
        unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic codes in `-127..=127`, extremes included.
    fn codes(len: usize, seed: u64) -> Vec<i8> {
        let mut state = seed;
        (0..len)
            .map(|i| match i % 7 {
                0 => 127,
                1 => -127,
                _ => {
                    state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    (((state >> 33) % 255) as i32 - 127) as i8
                }
            })
            .collect()
    }

    /// Every x86-64 kernel the running CPU has, each checked against the exact sum.
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[allow(unsafe_code)]
    fn every_kernel_sums_exactly_what_the_portable_one_does() {
        let has = |feature: &str| match feature {
            "ssse3" => std::arch::is_x86_feature_detected!("ssse3"),
            "avx2" => std::arch::is_x86_feature_detected!("avx2"),
            _ => x86::kernel() == x86::Kernel::Avx512Vnni,
        };
        // Every x86-64 CPU this project runs on has SSSE3 (2006); say so if not.
        assert!(has("ssse3"), "this CPU has no SSSE3: the SSSE3 kernel cannot be tested here");
        let mut cases: Vec<(Vec<i8>, Vec<i8>)> = [(32, 1), (64, 2), (96, 3), (384, 4), (1536, 5)]
            .iter()
            .map(|&(n, s)| (codes(n, s), codes(n, s + 100)))
            .collect();
        // All extremes: the 16-bit pair sums of `pmaddubsw` at their largest, both signs.
        cases.push((vec![127; 384], vec![-127; 384]));
        cases.push((vec![-127; 384], vec![-127; 384]));
        cases.push((vec![127; 384], vec![127; 384]));
        for (code, query) in &cases {
            let expected: i64 = code.iter().zip(query).map(|(&c, &q)| i64::from(c) * i64::from(q)).sum();
            let len = code.len();
            assert_eq!(code_dot(code, query), expected as f32, "portable, {len}");
            // SAFETY (all three): each kernel is called only when the CPU has its features.
            assert_eq!(unsafe { x86::code_dot_ssse3(code, query) }, expected as f32, "ssse3, {len}");
            if has("avx2") {
                assert_eq!(unsafe { x86::code_dot_avx2(code, query) }, expected as f32, "avx2, {len}");
            }
            if has("avx512") {
                let offset = 128 * query.iter().map(|&q| i32::from(q)).sum::<i32>();
                assert_eq!(unsafe { x86::code_dot_avx512(code, query, offset) }, expected as f32, "avx512, {len}");
            }
        }
    }

    /// Sums too long for one `i32` are split into blocks, whatever the kernel.
    #[test]
    fn long_codes_sum_in_blocks() {
        let (code, query) = (vec![127i8; I32_BLOCK + 64], vec![127i8; I32_BLOCK + 64]);
        assert_eq!(code_dot(&code, &query), ((I32_BLOCK + 64) as i64 * 127 * 127) as f32);
    }
}
