//! [`Embedding`]: a unit-normalised vector, so that cosine similarity is a dot product.

use crate::{Error, Result};

/// A dense embedding vector.
///
/// **Invariant:** the vector is non-empty, every component is finite, and its L2 norm is 1
/// (up to `f32` rounding). Construction enforces this, so [`Embedding::cosine`] is a plain
/// dot product.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedding {
    values: Vec<f32>,
}

impl Embedding {
    /// Normalises `values` to unit length.
    ///
    /// Fails on an empty vector, a NaN or infinite component, or a zero vector.
    pub fn new(mut values: Vec<f32>) -> Result<Self> {
        if values.is_empty() {
            return Err(Error::EmptyVector);
        }
        if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(Error::NonFiniteComponent { index, value });
        }
        // Accumulate in f64: large finite f32 components would overflow an f32 sum.
        let norm = values.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt();
        if norm == 0.0 || !norm.is_finite() {
            return Err(Error::ZeroVector);
        }
        for v in &mut values {
            *v = (f64::from(*v) / norm) as f32;
        }
        Ok(Self { values })
    }

    /// Number of dimensions.
    pub fn dims(&self) -> usize {
        self.values.len()
    }

    /// The unit-normalised components.
    pub fn as_slice(&self) -> &[f32] {
        &self.values
    }

    /// Consumes the embedding and returns its unit-normalised components.
    pub fn into_vec(self) -> Vec<f32> {
        self.values
    }

    /// Dot product of two unit vectors, i.e. their cosine similarity.
    ///
    /// Fails when the dimensions differ.
    pub fn cosine(&self, other: &Embedding) -> Result<f32> {
        if self.dims() != other.dims() {
            return Err(Error::DimensionMismatch { expected: self.dims(), actual: other.dims() });
        }
        Ok(dot(&self.values, &other.values))
    }

    /// Matryoshka comparison: the first `dims` components, renormalised.
    ///
    /// Asking for all dimensions returns a copy. Fails for `dims == 0`, for more dimensions
    /// than the vector has, and when the prefix is all zeros.
    pub fn truncate(&self, dims: usize) -> Result<Embedding> {
        if dims == 0 || dims > self.dims() {
            return Err(Error::InvalidTruncation { dims: self.dims(), requested: dims });
        }
        Embedding::new(self.values[..dims].to_vec())
    }

    /// Little-endian `f32` bytes, the storage format.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        self.values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// Reads little-endian `f32` bytes (as written by [`Embedding::to_le_bytes`]) and
    /// renormalises.
    pub fn from_le_bytes(bytes: &[u8]) -> Result<Embedding> {
        if !bytes.len().is_multiple_of(4) {
            return Err(Error::DimensionMismatch { expected: bytes.len() / 4 * 4, actual: bytes.len() });
        }
        let values = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Embedding::new(values)
    }
}

/// Dot product written so that LLVM vectorises it: eight independent accumulators over
/// fixed-size chunks, then the remainder.
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let chunks = n / LANES;
    for (ca, cb) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        for i in 0..LANES {
            acc[i] += ca[i] * cb[i];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for i in chunks * LANES..n {
        sum += a[i] * b[i];
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_on_construction() {
        let e = Embedding::new(vec![3.0, 4.0]).unwrap();
        assert!((e.as_slice()[0] - 0.6).abs() < 1e-6);
        assert!((e.as_slice()[1] - 0.8).abs() < 1e-6);
    }

    #[test]
    fn rejects_empty_nan_inf_and_zero() {
        assert_eq!(Embedding::new(vec![]), Err(Error::EmptyVector));
        assert!(matches!(Embedding::new(vec![1.0, f32::NAN]), Err(Error::NonFiniteComponent { index: 1, .. })));
        assert!(matches!(Embedding::new(vec![f32::INFINITY]), Err(Error::NonFiniteComponent { index: 0, .. })));
        assert_eq!(Embedding::new(vec![0.0, 0.0]), Err(Error::ZeroVector));
    }

    #[test]
    fn huge_finite_components_do_not_overflow() {
        let e = Embedding::new(vec![f32::MAX, f32::MAX]).unwrap();
        assert!((e.as_slice()[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
    }

    #[test]
    fn cosine_is_dot_and_checks_dims() {
        let a = Embedding::new(vec![1.0, 0.0]).unwrap();
        let b = Embedding::new(vec![1.0, 1.0]).unwrap();
        assert!((a.cosine(&b).unwrap() - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        let c = Embedding::new(vec![1.0, 0.0, 0.0]).unwrap();
        assert_eq!(a.cosine(&c), Err(Error::DimensionMismatch { expected: 2, actual: 3 }));
    }

    #[test]
    fn truncate_renormalises() {
        let e = Embedding::new(vec![1.0, 1.0, 5.0]).unwrap();
        let t = e.truncate(2).unwrap();
        assert_eq!(t.dims(), 2);
        assert!((t.as_slice()[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert!(e.truncate(0).is_err());
        assert!(e.truncate(4).is_err());
        assert_eq!(e.truncate(3).unwrap(), e);
        assert_eq!(Embedding::new(vec![0.0, 1.0]).unwrap().truncate(1), Err(Error::ZeroVector));
    }

    #[test]
    fn bytes_round_trip() {
        let e = Embedding::new(vec![0.1, -0.2, 0.3, 0.4, 0.5]).unwrap();
        assert_eq!(Embedding::from_le_bytes(&e.to_le_bytes()).unwrap(), e);
        assert!(Embedding::from_le_bytes(&[0, 0, 0]).is_err());
    }

    #[test]
    fn dot_matches_naive_for_odd_lengths() {
        for n in [1usize, 7, 8, 9, 17, 384] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.7).cos()).collect();
            let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - naive).abs() < 1e-4, "n={n}");
        }
    }
}
