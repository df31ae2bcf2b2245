//! Algebraic rules of playbook dedup over random playbooks: grouping postcondition, counter
//! conservation, idempotence, removal only, a naive oracle, and independence from the
//! number of threads.
//!
//! Entries get low-dimensional vectors scattered around a few random centres, so that
//! near-duplicates, chains and unrelated entries are all common.

use std::collections::HashMap;
use std::sync::Arc;

use memdedup::{CANONICAL_SECTIONS, DedupOutcome, Playbook, deduplicate_playbook, run_deduplication_with};
use proptest::prelude::*;

use crate::support::{FixedEmbedder, Row, playbook, poll_to_completion, threshold};

/// A random playbook: each entry has a section, a vector and counters.
#[derive(Debug, Clone)]
struct Case {
    /// `(section index, vector, helpful, harmful)`, in generation order.
    rows: Vec<(usize, Vec<f32>, u64, u64)>,
    threshold: f64,
}

impl Case {
    fn text(i: usize) -> String {
        format!("entry {i}")
    }

    fn name(i: usize) -> String {
        format!("e{i}")
    }

    fn playbook(&self) -> Playbook {
        let owned: Vec<(String, String)> = (0..self.rows.len()).map(|i| (Self::name(i), Self::text(i))).collect();
        let rows: Vec<Row<'_>> = self
            .rows
            .iter()
            .zip(&owned)
            .map(|((s, _, h, x), (name, text))| (CANONICAL_SECTIONS[*s], name.as_str(), text.as_str(), *h, *x))
            .collect();
        playbook(&rows)
    }

    fn embedder(&self) -> FixedEmbedder {
        FixedEmbedder::new(self.rows.iter().enumerate().map(|(i, (_, v, _, _))| (Self::text(i), v.clone())))
    }

    fn dedup(&self, input: &Playbook) -> Playbook {
        run_deduplication_with(input.clone(), Some(self.threshold), Arc::new(self.embedder()))
    }
}

/// Playbooks of `entries` entries in 3 to 6 dimensions, around 1 to 5 centres.
fn cases(entries: std::ops::Range<usize>, thresholds: std::ops::Range<f64>) -> impl Strategy<Value = Case> {
    (3usize..=6, 1usize..=5)
        .prop_flat_map(move |(dims, centres)| {
            // Centres have norm > 0.5 and noise at most 0.15 per component (< 0.37 in all),
            // so no vector is zero.
            let centre = prop::collection::vec(-1.0f32..1.0, dims)
                .prop_filter("centre too short", |v| v.iter().map(|x| x * x).sum::<f32>() > 0.25);
            let row = (0usize..5, 0..centres, prop::collection::vec(-0.15f32..0.15, dims), 0u64..1000, 0u64..1000);
            (prop::collection::vec(centre, centres), prop::collection::vec(row, entries.clone()), thresholds.clone())
        })
        .prop_map(|(centres, rows, threshold)| Case {
            rows: rows
                .into_iter()
                .map(|(section, c, noise, helpful, harmful)| {
                    let vector = centres[c].iter().zip(&noise).map(|(a, b)| a + b).collect();
                    (section, vector, helpful, harmful)
                })
                .collect(),
            threshold,
        })
}

/// Sum of `(helpful, harmful)` over the whole playbook.
fn totals(playbook: &Playbook) -> (u64, u64) {
    playbook.entries().iter().fold((0, 0), |(h, x), (_, e)| (h + e.helpful, x + e.harmful))
}

/// Entry names per section, in list order.
fn layout(playbook: &Playbook) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = playbook.section_names().into_iter().map(|s| (s, Vec::new())).collect();
    for (at, e) in playbook.entries() {
        out.entry(at.section).or_default().push(e.name);
    }
    out
}

/// The expected result, computed naively in `f64`: connected components over all pairs,
/// first entry in flat order survives with summed counters. `None` when some cosine is
/// too close to the threshold for `f32` rounding to be irrelevant.
fn oracle(case: &Case) -> Option<Playbook> {
    let input = case.playbook();
    let vectors: HashMap<String, &Vec<f32>> =
        case.rows.iter().enumerate().map(|(i, (_, v, _, _))| (Case::text(i), v)).collect();
    let flat = input.entries();
    let unit: Vec<Vec<f64>> = flat
        .iter()
        .map(|(_, e)| {
            let v = vectors[&e.text];
            let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
            v.iter().map(|&x| f64::from(x) / norm).collect()
        })
        .collect();
    let n = flat.len();
    let mut component: Vec<usize> = (0..n).collect();
    fn root(component: &mut [usize], mut i: usize) -> usize {
        while component[i] != i {
            i = component[i];
        }
        i
    }
    for i in 0..n {
        for j in i + 1..n {
            let cosine: f64 = unit[i].iter().zip(&unit[j]).map(|(a, b)| a * b).sum();
            if (cosine - case.threshold).abs() < 1e-4 {
                return None;
            }
            if cosine >= case.threshold {
                let (ri, rj) = (root(&mut component, i), root(&mut component, j));
                // The smaller index is the root, so each root is its component's first entry.
                component[ri.max(rj)] = ri.min(rj);
            }
        }
    }
    let mut sums = vec![(0u64, 0u64); n];
    for (i, (_, e)) in flat.iter().enumerate() {
        let r = root(&mut component, i);
        sums[r] = (sums[r].0 + e.helpful, sums[r].1 + e.harmful);
    }
    let rows: Vec<Row<'_>> = flat
        .iter()
        .enumerate()
        .filter(|&(i, _)| root(&mut component, i) == i)
        .map(|(i, (at, e))| (at.section.as_str(), e.name.as_str(), e.text.as_str(), sums[i].0, sums[i].1))
        .collect();
    Some(playbook(&rows))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_two_survivors_reach_the_threshold(case in cases(0..24, 0.80..0.99)) {
        let embedder = case.embedder();
        let out = case.dedup(&case.playbook());
        let texts: Vec<String> = out.entries().into_iter().map(|(_, e)| e.text).collect();
        for (i, a) in texts.iter().enumerate() {
            for b in &texts[i + 1..] {
                let cosine = embedder.cosine(a, b);
                // Slack for the rounding difference between this dot product and the tiled one.
                prop_assert!(
                    f64::from(cosine) < case.threshold + 1e-5,
                    "{} and {} both survive at cosine {} >= {}", a, b, cosine, case.threshold
                );
            }
        }
    }

    #[test]
    fn helpful_and_harmful_totals_are_conserved(case in cases(0..24, 0.80..0.99)) {
        let input = case.playbook();
        prop_assert_eq!(totals(&case.dedup(&input)), totals(&input));
    }

    #[test]
    fn dedup_twice_equals_dedup_once(case in cases(0..24, 0.80..0.99)) {
        let once = case.dedup(&case.playbook());
        let twice = case.dedup(&once);
        prop_assert_eq!(twice, once);
    }

    #[test]
    fn entries_are_only_removed_never_moved(case in cases(0..24, 0.80..0.99)) {
        let input = case.playbook();
        let out = case.dedup(&input);
        prop_assert_eq!(out.section_names(), input.section_names());
        let (before, after) = (layout(&input), layout(&out));
        for (section, kept) in &after {
            let mut original = before[section].iter();
            for name in kept {
                // Each kept name must appear later in the same section's original list.
                prop_assert!(original.any(|o| o == name), "{} moved or reordered in {}", name, section);
            }
        }
        let texts: HashMap<String, String> = input.entries().into_iter().map(|(_, e)| (e.name, e.text)).collect();
        for (_, e) in out.entries() {
            prop_assert_eq!(&texts[&e.name], &e.text);
        }
    }

    #[test]
    fn result_matches_a_naive_connected_components_oracle(case in cases(0..24, 0.80..0.99)) {
        let expected = oracle(&case);
        prop_assume!(expected.is_some());
        prop_assert_eq!(Some(case.dedup(&case.playbook())), expected);
    }
}

/// Deduplicates inside a rayon pool of `threads` threads. Without a tokio runtime the
/// facade groups on the calling thread, so the all-pairs comparison runs on that pool.
/// Also returns what `run_deduplication_with` gives there (it starts its own runtime and
/// groups on a blocking thread, i.e. in rayon's global pool).
fn dedup_in_pool(case: &Case, input: &Playbook, threads: usize) -> (DedupOutcome, Playbook) {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a rayon pool");
    let embedder = case.embedder();
    pool.install(|| {
        let outcome = poll_to_completion(deduplicate_playbook(input, &embedder, threshold(case.threshold), &|_, _| {}))
            .unwrap_or_else(|e| panic!("deduplication failed: {e}"));
        (outcome, case.dedup(input))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// More than one 256-row tile, so the comparison really splits across workers.
    #[test]
    fn output_does_not_depend_on_thread_count(case in cases(257..450, 0.95..0.999)) {
        let input = case.playbook();
        let (one, simple_one) = dedup_in_pool(&case, &input, 1);
        let (four, simple_four) = dedup_in_pool(&case, &input, 4);
        prop_assert_eq!(&one, &four);
        prop_assert_eq!(&simple_one, &one.playbook);
        prop_assert_eq!(&simple_four, &four.playbook);
    }
}
