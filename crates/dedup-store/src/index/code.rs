//! Integer codes of stored vectors and queries (both int8), and the bound that makes the
//! approximate scores computed from them safe to prune with.
//!
//! # The bound
//!
//! A stored vector `x` is kept as `x̂ = s·c` with `s = max|xᵢ| / 127` and `cᵢ = round(xᵢ / s)`
//! (int8), plus `r ≥ ‖x − x̂‖` computed in `f64` at insert time. A query `q` is coded as
//! `q̂ = sq·qq` with `sq = max|qᵢ| / 127` and `qqᵢ = round(qᵢ / sq)` (int8), plus
//! `eq ≥ ‖q − q̂‖` and `nq ≥ ‖q‖`. The approximate score is `a = sq·s·Σ cᵢ·qqᵢ = q̂·x̂`,
//! with the sum exact in integers.
//!
//! In real arithmetic, `q·x − q̂·x̂ = q·(x − x̂) + (q − q̂)·x̂`, so by Cauchy–Schwarz
//!
//! ```text
//! |q·x − q̂·x̂| ≤ ‖q‖·‖x − x̂‖ + ‖q − q̂‖·‖x̂‖ ≤ nq·r + eq·(1 + r)
//! ```
//!
//! using `‖x̂‖ ≤ ‖x‖ + r` and `‖x‖ ≤ 1`. [`Embedding`](dedup_core::Embedding) is unit
//! length only up to `f32` rounding, so the stored `r` also absorbs `max(0, ‖x‖ − 1)`;
//! with that, `‖x‖ ≤ 1 + r` and `‖x̂‖ ≤ 1 + r` hold for every vector, whatever its norm.
//!
//! The exact score the index returns is not the real `q·x` but [`dot`](super::dot) in
//! `f32`. Each product passes through at most `m = ⌈dims / LANES⌉ + 2·LANES` roundings
//! (one multiply, one add per chunk into its lane, the lane reduction and the remainder),
//! so `|dot(q, x) − q·x| ≤ γₘ·Σ|qᵢxᵢ| ≤ γₘ·nq·(1 + r)` with `γₘ = m·u / (1 − m·u)`,
//! `u = 2⁻²⁴`.
//!
//! Computing `a` (three `f32` roundings of a value at most `(nq + eq)(1 + r)` in size), the
//! bound `b` and `a ± b` in `f32` adds well under `1e-6·(1 + r)` for unit vectors;
//! [`FLOAT_SLACK`] allows ten times that. Altogether
//!
//! ```text
//! |dot(q, x) − a| ≤ b = r·(nq + eq + γₘ·nq + slack) + (eq + γₘ·nq + slack) = α·r + β
//! ```
//!
//! and `α`, `β` depend on the query alone. Every `f64` quantity is rounded up before it
//! becomes an `f32` ([`round_up`]).

use super::DOT_LANES;

/// Stored codes and query codes are padded with zeros to a multiple of this many
/// components, so the integer kernel has no remainder loop.
pub(super) const CODE_LANES: usize = 32;

/// Absolute allowance, per unit of `1 + r`, for the `f32` arithmetic of the approximate
/// score and its bound (the analysis above needs about a tenth of it).
const FLOAT_SLACK: f64 = 1e-5;

/// Largest int8 code magnitude (never −128; see [`QUERY_CODE_MAX`]).
pub(super) const CODE_MAX: f32 = 127.0;

/// Largest int8 query code magnitude. Not −128, so that `|c|·qq` pairs summed in 16 bits
/// cannot saturate (`2·127·127 < 2¹⁵`) in the SSSE3 kernel (`index/scan.rs`).
pub(super) const QUERY_CODE_MAX: f32 = 127.0;

/// The padded length of a code for `dims`-dimensional vectors: a non-zero multiple of
/// [`CODE_LANES`].
pub(super) fn code_stride(dims: usize) -> usize {
    dims.next_multiple_of(CODE_LANES).max(CODE_LANES)
}

/// What [`encode`] stores beside the codes of one vector.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct CodeParams {
    /// `s`: a code times `s` approximates the component.
    pub(super) scale: f32,
    /// `r`: an upper bound on `‖x − s·c‖ + max(0, ‖x‖ − 1)`.
    pub(super) residual: f32,
}

/// Writes the int8 code of `values` into `code` (the padded row, zero past
/// `values.len()`) and returns its scale and residual bound.
pub(super) fn encode(values: &[f32], code: &mut [i8]) -> CodeParams {
    debug_assert!(code.len() >= values.len());
    let max = values.iter().fold(0.0f32, |max, v| max.max(v.abs()));
    let scale = max / CODE_MAX;
    code.fill(0);
    if scale > 0.0 {
        for (c, &v) in code.iter_mut().zip(values) {
            // Clamped, so the cast cannot saturate unexpectedly; the residual below is
            // computed from the codes actually stored, whatever the rounding did.
            *c = round_to_integer(v / scale).clamp(-CODE_MAX, CODE_MAX) as i8;
        }
    }
    let (residual, norm) = residual_and_norm(values, scale, code.iter().map(|&c| f64::from(c)));
    let excess = (norm - 1.0).max(0.0);
    CodeParams { scale, residual: round_up(residual + excess) }
}

/// A query coded for the scan: int8 components and the coefficients of its error bound.
#[derive(Debug, Clone)]
pub(super) struct QueryCode {
    /// `qq`, padded with zeros to the stored codes' stride.
    pub(super) codes: Vec<i8>,
    /// `sq`.
    scale: f32,
    /// `α`: the bound's factor on a stored vector's residual.
    alpha: f32,
    /// `β`: the bound's constant term.
    beta: f32,
}

impl QueryCode {
    /// Codes `query` for a scan over codes of length `stride`.
    pub(super) fn new(query: &[f32], stride: usize) -> QueryCode {
        debug_assert!(stride >= query.len());
        let max = query.iter().fold(0.0f32, |max, v| max.max(v.abs()));
        let scale = max / QUERY_CODE_MAX;
        let mut codes = vec![0i8; stride];
        if scale > 0.0 {
            for (c, &v) in codes.iter_mut().zip(query) {
                *c = round_to_integer(v / scale).clamp(-QUERY_CODE_MAX, QUERY_CODE_MAX) as i8;
            }
        }
        let (residual, norm) = residual_and_norm(query, scale, codes.iter().map(|&c| f64::from(c)));
        let (eq, nq) = (f64::from(round_up(residual)), f64::from(round_up(norm)));
        let roundings = query.len().div_ceil(DOT_LANES) + 2 * DOT_LANES;
        let unit_roundoff = f64::from(f32::EPSILON) / 2.0;
        let gamma = roundings as f64 * unit_roundoff / (1.0 - roundings as f64 * unit_roundoff);
        QueryCode {
            codes,
            scale,
            alpha: round_up(nq + eq + gamma * nq + FLOAT_SLACK),
            beta: round_up(eq + gamma * nq + FLOAT_SLACK),
        }
    }

    /// The approximate score `a` of a stored vector from the integer dot product of its
    /// code with [`QueryCode::codes`], and the bound `b` with `|dot(q, x) − a| ≤ b`.
    #[inline(always)]
    pub(super) fn approx(&self, code_dot: f32, params: CodeParams) -> (f32, f32) {
        (self.scale * params.scale * code_dot, self.alpha * params.residual + self.beta)
    }
}

/// `(‖x − scale·c‖, ‖x‖)` in `f64`, where `scale·c` is exact (an `f32` times an integer
/// of at most 8 bits fits in the 53-bit mantissa). Summed in four lanes, which only
/// changes the `f64` rounding that [`round_up`] allows for.
fn residual_and_norm(values: &[f32], scale: f32, codes: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut residual, mut norm) = ([0.0f64; 4], [0.0f64; 4]);
    for (i, (&v, c)) in values.iter().zip(codes).enumerate() {
        let (v, approx) = (f64::from(v), f64::from(scale) * c);
        residual[i % 4] += (v - approx) * (v - approx);
        norm[i % 4] += v * v;
    }
    (residual.iter().sum::<f64>().sqrt(), norm.iter().sum::<f64>().sqrt())
}

/// `y` rounded to the nearest integer, ties to even, for `|y| < 2²²`: adding and
/// subtracting `1.5·2²³` leaves no fraction bits. Unlike `f32::round` it needs no libm
/// call on baseline x86-64. Any rounding would keep the bounds valid (residuals are
/// computed from the codes actually stored); nearest gives the smallest residuals.
fn round_to_integer(y: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0;
    (y + SHIFT) - SHIFT
}

/// `value` as an `f32` no smaller than it, with room for the `f64` rounding that
/// computed it.
fn round_up(value: f64) -> f32 {
    (value * (1.0 + 1e-6) + 1e-7) as f32
}
