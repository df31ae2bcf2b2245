//! Unit tests of the metric names, labels, units and the hit-rate arithmetic.

use ::metrics::with_local_recorder;
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

use super::*;

/// One emitted metric: kind, name, labels sorted by key, unit, description and value.
#[derive(Debug, PartialEq)]
struct Emitted {
    kind: MetricKind,
    name: String,
    labels: Vec<(String, String)>,
    unit: Option<Unit>,
    description: Option<String>,
    value: DebugValue,
}

/// Runs `f` with a fresh local recorder and returns what it emitted, sorted by name and
/// labels.
fn emitted(f: impl FnOnce()) -> Vec<Emitted> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    with_local_recorder(&recorder, f);
    let mut all: Vec<Emitted> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, unit, description, value)| {
            let mut labels: Vec<(String, String)> =
                key.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
            labels.sort();
            Emitted {
                kind: key.kind(),
                name: key.key().name().to_owned(),
                labels,
                unit,
                description: description.map(|d| d.into_owned()),
                value,
            }
        })
        .collect();
    all.sort_by(|a, b| (&a.name, &a.labels).cmp(&(&b.name, &b.labels)));
    all
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())).collect()
}

type Row = (String, Vec<(String, String)>, DebugValue);

/// (name, labels, value) of each emitted metric.
fn summary(all: impl IntoIterator<Item = Emitted>) -> Vec<Row> {
    all.into_iter().map(|e| (e.name, e.labels, e.value)).collect()
}

fn row(name: &str, label_pairs: &[(&str, &str)], value: DebugValue) -> Row {
    (name.to_owned(), labels(label_pairs), value)
}

fn histogram(values: &[f64]) -> DebugValue {
    DebugValue::Histogram(values.iter().map(|&v| v.into()).collect())
}

#[test]
fn names_match_the_seed() {
    assert_eq!(
        [CHECKS_TOTAL, SKIPPED_TOTAL, CHECK_DURATION_MS, SIMILARITY_SCORE, CACHE_SIZE, CACHE_HIT_RATE],
        [
            "dedup_checks_total",
            "dedup_skipped_total",
            "dedup_check_duration_ms",
            "dedup_similarity_score",
            "dedup_cache_size",
            "dedup_cache_hit_rate"
        ]
    );
    assert_eq!(CHECK_FAILURES_TOTAL, "dedup_check_failures_total");
}

#[test]
fn counters_carry_namespace_result_and_reason() {
    let all = emitted(|| {
        check_completed("decisions", true);
        check_completed("decisions", true);
        check_completed("decisions", false);
        check_completed("patterns", false);
        skipped("decisions", "exact");
        skipped("decisions", "semantic");
        skipped("learnings", "recent");
    });
    assert!(all.iter().all(|e| e.kind == MetricKind::Counter), "{all:?}");
    assert_eq!(
        summary(all),
        vec![
            row(CHECKS_TOTAL, &[("namespace", "decisions"), ("result", "duplicate")], DebugValue::Counter(2)),
            row(CHECKS_TOTAL, &[("namespace", "decisions"), ("result", "unique")], DebugValue::Counter(1)),
            row(CHECKS_TOTAL, &[("namespace", "patterns"), ("result", "unique")], DebugValue::Counter(1)),
            row(SKIPPED_TOTAL, &[("namespace", "decisions"), ("reason", "exact")], DebugValue::Counter(1)),
            row(SKIPPED_TOTAL, &[("namespace", "decisions"), ("reason", "semantic")], DebugValue::Counter(1)),
            row(SKIPPED_TOTAL, &[("namespace", "learnings"), ("reason", "recent")], DebugValue::Counter(1)),
        ]
    );
}

#[test]
fn histograms_carry_check_type_and_namespace() {
    let all = emitted(|| {
        for (check_type, ms) in [("exact", 0.5), ("semantic", 12.0), ("recent", 0.1), ("total", 13.0)] {
            check_duration(check_type, ms);
        }
        similarity("decisions", 0.5);
        similarity("decisions", 0.75);
    });
    assert!(all.iter().all(|e| e.kind == MetricKind::Histogram), "{all:?}");
    assert_eq!(
        summary(all),
        vec![
            row(CHECK_DURATION_MS, &[("check_type", "exact")], histogram(&[0.5])),
            row(CHECK_DURATION_MS, &[("check_type", "recent")], histogram(&[0.1])),
            row(CHECK_DURATION_MS, &[("check_type", "semantic")], histogram(&[12.0])),
            row(CHECK_DURATION_MS, &[("check_type", "total")], histogram(&[13.0])),
            row(SIMILARITY_SCORE, &[("namespace", "decisions")], histogram(&[0.5, 0.75])),
        ]
    );
}

#[test]
fn gauges_and_failures() {
    let mut all = emitted(|| {
        cache_size(42);
        cache_lookup(true);
        check_failed("exact");
        check_failed("semantic");
        check_failed("semantic");
        check_failed("recent");
    });
    let names: Vec<(&str, MetricKind)> = all.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    assert_eq!(
        names,
        vec![
            (CACHE_HIT_RATE, MetricKind::Gauge),
            (CACHE_SIZE, MetricKind::Gauge),
            (CHECK_FAILURES_TOTAL, MetricKind::Counter),
            (CHECK_FAILURES_TOTAL, MetricKind::Counter),
            (CHECK_FAILURES_TOTAL, MetricKind::Counter),
        ]
    );
    assert!(all.iter().filter(|e| e.kind == MetricKind::Gauge).all(|e| e.labels.is_empty()), "{all:?}");
    assert_eq!(all[1].value, DebugValue::Gauge(42.0.into()));
    // The hit rate is process-wide, shared with other tests: only its range is certain.
    match &all[0].value {
        DebugValue::Gauge(rate) => assert!((0.0..=1.0).contains(&rate.into_inner()) && rate.into_inner() > 0.0),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        summary(all.drain(2..)),
        vec![
            row(CHECK_FAILURES_TOTAL, &[("check_type", "exact")], DebugValue::Counter(1)),
            row(CHECK_FAILURES_TOTAL, &[("check_type", "recent")], DebugValue::Counter(1)),
            row(CHECK_FAILURES_TOTAL, &[("check_type", "semantic")], DebugValue::Counter(2)),
        ]
    );
}

#[test]
fn hit_rate_is_hits_over_lookups() {
    let rate = HitRate::new();
    assert_eq!(rate.observe(false), 0.0);
    assert_eq!(rate.observe(true), 0.5);
    assert_eq!(rate.observe(true), 2.0 / 3.0);
    assert_eq!(rate.observe(true), 0.75);
    assert_eq!(rate.observe(false), 0.6);
}

#[test]
fn descriptions_and_units_are_registered() {
    let all = emitted(|| {
        describe_all();
        check_completed("decisions", false);
        skipped("decisions", "exact");
        check_duration("total", 1.0);
        similarity("decisions", 0.95);
        cache_size(1);
        cache_lookup(false);
        check_failed("recent");
    });
    assert_eq!(all.len(), 7, "{all:?}");
    for e in &all {
        assert!(e.description.as_deref().is_some_and(|d| !d.is_empty()), "{} has no description", e.name);
    }
    let unit = |name: &str| all.iter().find(|e| e.name == name).and_then(|e| e.unit);
    assert_eq!(unit(CHECK_DURATION_MS), Some(Unit::Milliseconds));
    assert_eq!(unit(CHECKS_TOTAL), Some(Unit::Count));
    assert_eq!(unit(SKIPPED_TOTAL), Some(Unit::Count));
    assert_eq!(unit(CACHE_SIZE), Some(Unit::Count));
    assert_eq!(unit(CHECK_FAILURES_TOTAL), Some(Unit::Count));
    assert_eq!(unit(SIMILARITY_SCORE), None);
    assert_eq!(unit(CACHE_HIT_RATE), None);
    // `describe` itself runs once per process and must not panic when called again.
    describe();
    describe();
}
