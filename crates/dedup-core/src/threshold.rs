//! [`Threshold`]: a similarity cut-off, resolved explicit > environment > default (REQ-DEDUP-004).

use crate::{Error, Result};

/// The seed's default cosine threshold for playbook and collection dedup.
pub const DEFAULT_THRESHOLD: f64 = 0.85;

/// The environment variable that overrides the default threshold.
pub const THRESHOLD_ENV_VAR: &str = "AGENTIC_CONTEXT_DEDUP_THRESHOLD";

/// A cosine-similarity threshold.
///
/// **Invariant:** the value is a finite number in `[0, 1]`; out-of-range inputs are
/// clamped to the nearest bound at construction.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Threshold(f64);

impl Threshold {
    /// Clamps `value` into `[0, 1]`. Fails only for NaN.
    pub fn new(value: f64) -> Result<Self> {
        if value.is_nan() {
            return Err(Error::InvalidThreshold(value));
        }
        Ok(Self(value.clamp(0.0, 1.0)))
    }

    /// Resolves the threshold in force: `explicit` if given, else the value of
    /// [`THRESHOLD_ENV_VAR`] read from the process environment, else [`DEFAULT_THRESHOLD`].
    ///
    /// An environment value that does not parse as a number is ignored with a warning;
    /// one outside `[0, 1]` is clamped with a warning naming the variable, the value and
    /// the bound used, since a clamped 0 merges everything and a clamped 1 nothing.
    pub fn resolve(explicit: Option<f64>) -> Self {
        Self::resolve_with(explicit, std::env::var(THRESHOLD_ENV_VAR).ok().as_deref())
    }

    /// [`Threshold::resolve`] with the environment value passed in, for callers that
    /// read configuration themselves (and for tests).
    pub fn resolve_with(explicit: Option<f64>, env_value: Option<&str>) -> Self {
        if let Some(value) = explicit.and_then(|v| Self::new(v).ok()) {
            return value;
        }
        if let Some(raw) = env_value {
            match raw
                .trim()
                .parse::<f64>()
                .map_err(|e| e.to_string())
                .and_then(|v| Self::new(v).map_err(|e| e.to_string()))
            {
                Ok(value) => {
                    if raw.trim().parse::<f64>().is_ok_and(|given| given != value.get()) {
                        tracing::warn!(
                            variable = THRESHOLD_ENV_VAR,
                            value = raw,
                            clamped = value.get(),
                            "threshold from the environment is outside [0, 1]; clamped to {}",
                            value.get()
                        );
                    }
                    return value;
                }
                Err(reason) => tracing::warn!(
                    variable = THRESHOLD_ENV_VAR,
                    value = raw,
                    %reason,
                    "ignoring unparsable threshold from the environment; using the default"
                ),
            }
        }
        Self(DEFAULT_THRESHOLD)
    }

    /// The value, in `[0, 1]`.
    pub fn get(self) -> f64 {
        self.0
    }

    /// The value as `f32`, for comparisons against `f32` cosines.
    pub fn as_f32(self) -> f32 {
        self.0 as f32
    }
}

impl Default for Threshold {
    fn default() -> Self {
        Self(DEFAULT_THRESHOLD)
    }
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_explicit_env_default() {
        assert_eq!(Threshold::resolve_with(Some(0.7), Some("0.9")).get(), 0.7);
        assert_eq!(Threshold::resolve_with(None, Some("0.9")).get(), 0.9);
        assert_eq!(Threshold::resolve_with(None, None).get(), DEFAULT_THRESHOLD);
    }

    #[test]
    fn clamps_out_of_range() {
        assert_eq!(Threshold::new(1.5).unwrap().get(), 1.0);
        assert_eq!(Threshold::new(-0.2).unwrap().get(), 0.0);
        assert_eq!(Threshold::resolve_with(None, Some("7")).get(), 1.0);
        assert_eq!(Threshold::resolve_with(Some(-3.0), None).get(), 0.0);
    }

    #[test]
    fn defect_11_out_of_range_env_threshold_is_clamped() {
        // The warning itself is checked end to end by the CLI suite.
        assert_eq!(Threshold::resolve_with(None, Some("-1")).get(), 0.0);
        assert_eq!(Threshold::resolve_with(None, Some(" 1e9 ")).get(), 1.0);
        assert_eq!(Threshold::resolve_with(None, Some("1.0")).get(), 1.0);
    }

    #[test]
    fn unparsable_env_is_ignored() {
        assert_eq!(Threshold::resolve_with(None, Some("high")).get(), DEFAULT_THRESHOLD);
        assert_eq!(Threshold::resolve_with(None, Some("NaN")).get(), DEFAULT_THRESHOLD);
        assert_eq!(Threshold::resolve_with(None, Some(" 0.9 ")).get(), 0.9);
    }

    #[test]
    fn nan_is_an_error() {
        assert!(Threshold::new(f64::NAN).is_err());
    }
}
