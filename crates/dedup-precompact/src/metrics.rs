//! Seed 004's metrics, emitted through the `metrics` facade: names and labels exactly as
//! the seed lists them, plus `dedup_check_failures_total` for checks that failed open.
//!
//! Labels carry namespace names and check types only, never memory text or ids.

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use ::metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

/// Counter `dedup_checks_total{namespace, result=duplicate|unique}`: completed checks.
pub const CHECKS_TOTAL: &str = "dedup_checks_total";
/// Counter `dedup_skipped_total{namespace, reason=exact|semantic|recent}`: content not
/// stored because it was a duplicate.
pub const SKIPPED_TOTAL: &str = "dedup_skipped_total";
/// Histogram `dedup_check_duration_ms{check_type=exact|semantic|recent|total}`.
pub const CHECK_DURATION_MS: &str = "dedup_check_duration_ms";
/// Histogram `dedup_similarity_score{namespace}`: the score of semantic matches.
pub const SIMILARITY_SCORE: &str = "dedup_similarity_score";
/// Gauge `dedup_cache_size`: live entries of the recent-capture cache.
pub const CACHE_SIZE: &str = "dedup_cache_size";
/// Gauge `dedup_cache_hit_rate`: recent-capture hits over lookups since the process
/// started, from 0 to 1.
pub const CACHE_HIT_RATE: &str = "dedup_cache_hit_rate";
/// Counter `dedup_check_failures_total{check_type=exact|semantic|recent}`: checks skipped
/// because their backend failed (fail open).
pub const CHECK_FAILURES_TOTAL: &str = "dedup_check_failures_total";

/// Counter `dedup_backfilled_total`: memories stored while the embedder was down that a
/// backfill has since embedded.
pub const BACKFILLED_TOTAL: &str = "dedup_backfilled_total";

/// Counter `dedup_secrets_redacted_total`: credentials replaced by `[REDACTED:<kind>]`
/// before a text was checked or stored.
pub const SECRETS_REDACTED_TOTAL: &str = "dedup_secrets_redacted_total";

/// The values of the `reason` label of [`SKIPPED_TOTAL`].
pub const SKIP_REASONS: [&str; 3] = ["exact", "semantic", "recent"];
/// The values of the `check_type` label of [`CHECK_DURATION_MS`] (the first three are
/// also those of [`CHECK_FAILURES_TOTAL`]).
pub const CHECK_TYPES: [&str; 4] = ["exact", "semantic", "recent", "total"];

/// Registers descriptions and units for every metric, once per process. Call it after the
/// recorder is installed.
pub fn describe() {
    static ONCE: Once = Once::new();
    ONCE.call_once(describe_all);
}

fn describe_all() {
    describe_counter!(CHECKS_TOTAL, Unit::Count, "Duplicate checks completed, by namespace and result");
    describe_counter!(SKIPPED_TOTAL, Unit::Count, "Captures skipped as duplicates, by namespace and reason");
    describe_histogram!(CHECK_DURATION_MS, Unit::Milliseconds, "Time spent per duplicate check, by check type");
    describe_histogram!(SIMILARITY_SCORE, "Cosine similarity of semantic duplicate matches, by namespace");
    describe_gauge!(CACHE_SIZE, Unit::Count, "Live entries in the recent-capture cache");
    describe_gauge!(CACHE_HIT_RATE, "Recent-capture cache hits per lookup since the process started");
    describe_counter!(
        BACKFILLED_TOTAL,
        Unit::Count,
        "Memories stored while the embedder was down that a backfill has since embedded"
    );
    describe_counter!(
        SECRETS_REDACTED_TOTAL,
        Unit::Count,
        "Credentials redacted from texts before they were checked or stored"
    );
    describe_counter!(
        CHECK_FAILURES_TOTAL,
        Unit::Count,
        "Duplicate checks skipped because their backend failed (fail open), by check type"
    );
}

/// A check of content for `namespace` finished: it found a duplicate or not.
pub fn check_completed(namespace: &str, duplicate: bool) {
    let result = if duplicate { "duplicate" } else { "unique" };
    counter!(CHECKS_TOTAL, "namespace" => namespace.to_owned(), "result" => result).increment(1);
}

/// Content for `namespace` was not stored; `reason` is "exact", "semantic" or "recent".
pub fn skipped(namespace: &str, reason: &'static str) {
    debug_assert!(SKIP_REASONS.contains(&reason), "unknown skip reason {reason:?}");
    counter!(SKIPPED_TOTAL, "namespace" => namespace.to_owned(), "reason" => reason).increment(1);
}

/// One check took `ms` milliseconds; `check_type` is "exact", "semantic", "recent" or
/// "total".
pub fn check_duration(check_type: &'static str, ms: f64) {
    debug_assert!(CHECK_TYPES.contains(&check_type), "unknown check type {check_type:?}");
    histogram!(CHECK_DURATION_MS, "check_type" => check_type).record(ms);
}

/// A semantic match in `namespace` scored `score`.
pub fn similarity(namespace: &str, score: f32) {
    histogram!(SIMILARITY_SCORE, "namespace" => namespace.to_owned()).record(f64::from(score));
}

/// The recent-capture cache holds `n` live entries.
pub fn cache_size(n: usize) {
    #[allow(clippy::cast_precision_loss)]
    gauge!(CACHE_SIZE).set(n as f64);
}

/// A recent-capture lookup hit or missed; updates the process-wide hit rate.
pub fn cache_lookup(hit: bool) {
    static HIT_RATE: HitRate = HitRate::new();
    gauge!(CACHE_HIT_RATE).set(HIT_RATE.observe(hit));
}

/// A check's backend failed and the check was skipped; `check_type` is "exact",
/// "semantic" or "recent".
pub fn check_failed(check_type: &'static str) {
    debug_assert!(CHECK_TYPES[..3].contains(&check_type), "unknown check type {check_type:?}");
    counter!(CHECK_FAILURES_TOTAL, "check_type" => check_type).increment(1);
}

/// A backfill embedded `n` memories.
pub fn backfilled(n: usize) {
    counter!(BACKFILLED_TOTAL).increment(n as u64);
}

/// `n` credentials were redacted from a text.
pub fn secrets_redacted(n: usize) {
    counter!(SECRETS_REDACTED_TOTAL).increment(n as u64);
}

/// Hits and lookups counted without a lock.
struct HitRate {
    hits: AtomicU64,
    lookups: AtomicU64,
}

impl HitRate {
    const fn new() -> HitRate {
        HitRate { hits: AtomicU64::new(0), lookups: AtomicU64::new(0) }
    }

    /// Counts one lookup and returns hits / lookups after it, from 0 to 1.
    fn observe(&self, hit: bool) -> f64 {
        // The two counts are separate atomics: under concurrent lookups a rate can be off
        // by one lookup for a moment, so it is clamped to 1.
        let hits = if hit { self.hits.fetch_add(1, Ordering::Relaxed) + 1 } else { self.hits.load(Ordering::Relaxed) };
        let lookups = self.lookups.fetch_add(1, Ordering::Relaxed) + 1;
        #[allow(clippy::cast_precision_loss)]
        let rate = hits as f64 / lookups as f64;
        rate.min(1.0)
    }
}

#[cfg(test)]
mod tests;
