//! Pair-level quality of a grouping against labels: which pairs of items a grouping puts
//! together, compared with which pairs share a labelled cluster.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// One labelled item, as a quality measurement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    /// The duplicate cluster it belongs to; items of one cluster say the same thing.
    pub cluster: String,
    /// For a hard negative: the cluster it is close to without belonging to it.
    pub near: Option<String>,
}

/// How a grouping compares with the labels, counted over unordered pairs of items.
///
/// **Invariants:** `true_pairs + false_pairs` is the number of pairs the grouping puts
/// together; `true_pairs + missed_pairs` the number of labelled duplicate pairs; the
/// listed pairs are `(lower index, higher index)`, in index order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairScore {
    /// Pairs grouped together that share a cluster.
    pub true_pairs: usize,
    /// Pairs grouped together from different clusters.
    pub false_pairs: usize,
    /// Pairs sharing a cluster that the grouping keeps apart.
    pub missed_pairs: usize,
    /// Of the false pairs, those with a hard negative (an item with `near`) in them.
    pub false_pairs_with_hard_negative: usize,
    /// Hard negatives grouped with any member of the cluster they are near.
    pub hard_negatives_merged: usize,
    /// Hard negatives in the labels.
    pub hard_negatives: usize,
    /// `true / (true + false)`; 1 when nothing was grouped.
    pub precision: f64,
    /// `true / (true + missed)`; 1 when there is nothing to find.
    pub recall: f64,
    /// The harmonic mean of precision and recall (0 when both are 0).
    pub f1: f64,
    /// The false pairs.
    pub false_pair_list: Vec<(usize, usize)>,
    /// The missed pairs.
    pub missed_pair_list: Vec<(usize, usize)>,
}

/// Scores `groups` (lists of item indices; items in no group are alone) against
/// `labels`. Indices outside `labels` are ignored.
pub fn score_grouping(labels: &[Labelled], groups: &[Vec<usize>]) -> PairScore {
    let mut group_of: BTreeMap<usize, usize> = BTreeMap::new();
    for (g, members) in groups.iter().enumerate() {
        for &m in members.iter().filter(|&&m| m < labels.len()) {
            group_of.insert(m, g);
        }
    }
    let grouped = |a: usize, b: usize| group_of.get(&a).is_some_and(|g| group_of.get(&b) == Some(g));
    let mut by_cluster: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, l) in labels.iter().enumerate() {
        by_cluster.entry(l.cluster.as_str()).or_default().push(i);
    }

    let mut false_pair_list = Vec::new();
    let mut true_pairs = 0;
    for members in groups {
        let members: BTreeSet<usize> = members.iter().copied().filter(|&m| m < labels.len()).collect();
        let members: Vec<usize> = members.into_iter().collect();
        for (x, &a) in members.iter().enumerate() {
            for &b in &members[x + 1..] {
                if labels[a].cluster == labels[b].cluster {
                    true_pairs += 1;
                } else {
                    false_pair_list.push((a, b));
                }
            }
        }
    }
    false_pair_list.sort_unstable();
    let mut missed_pair_list = Vec::new();
    for members in by_cluster.values() {
        for (x, &a) in members.iter().enumerate() {
            for &b in &members[x + 1..] {
                if !grouped(a, b) {
                    missed_pair_list.push((a, b));
                }
            }
        }
    }
    missed_pair_list.sort_unstable();
    let is_negative = |i: usize| labels[i].near.is_some();
    let false_pairs_with_hard_negative =
        false_pair_list.iter().filter(|&&(a, b)| is_negative(a) || is_negative(b)).count();
    let hard_negatives = labels.iter().filter(|l| l.near.is_some()).count();
    let hard_negatives_merged = labels
        .iter()
        .enumerate()
        .filter(|(i, l)| {
            l.near
                .as_deref()
                .is_some_and(|near| by_cluster.get(near).is_some_and(|members| members.iter().any(|&m| grouped(*i, m))))
        })
        .count();
    let false_pairs = false_pair_list.len();
    let missed_pairs = missed_pair_list.len();
    let precision = ratio(true_pairs, true_pairs + false_pairs);
    let recall = ratio(true_pairs, true_pairs + missed_pairs);
    let f1 = if precision + recall == 0.0 { 0.0 } else { 2.0 * precision * recall / (precision + recall) };
    PairScore {
        true_pairs,
        false_pairs,
        missed_pairs,
        false_pairs_with_hard_negative,
        hard_negatives_merged,
        hard_negatives,
        precision,
        recall,
        f1,
        false_pair_list,
        missed_pair_list,
    }
}

fn ratio(part: usize, whole: usize) -> f64 {
    if whole == 0 { 1.0 } else { part as f64 / whole as f64 }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn labels(clusters: &[&str]) -> Vec<Labelled> {
        clusters.iter().map(|c| Labelled { cluster: (*c).to_owned(), near: None }).collect()
    }

    #[test]
    fn a_perfect_grouping_scores_one() {
        let labels = labels(&["a", "a", "b", "b", "b", "c"]);
        let score = score_grouping(&labels, &[vec![0, 1], vec![2, 3, 4]]);
        assert_eq!((score.true_pairs, score.false_pairs, score.missed_pairs), (4, 0, 0));
        assert_eq!((score.precision, score.recall, score.f1), (1.0, 1.0, 1.0));
    }

    #[test]
    fn chaining_two_clusters_costs_precision() {
        let labels = labels(&["a", "a", "b", "b"]);
        let score = score_grouping(&labels, &[vec![0, 1, 2, 3]]);
        assert_eq!((score.true_pairs, score.false_pairs), (2, 4));
        assert!((score.precision - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(score.recall, 1.0);
        assert_eq!(score.false_pair_list, [(0, 2), (0, 3), (1, 2), (1, 3)]);
    }

    #[test]
    fn missed_pairs_cost_recall() {
        let labels = labels(&["a", "a", "a"]);
        let score = score_grouping(&labels, &[vec![0, 1]]);
        assert_eq!((score.true_pairs, score.missed_pairs), (1, 2));
        assert_eq!(score.missed_pair_list, [(0, 2), (1, 2)]);
        assert!((score.recall - 1.0 / 3.0).abs() < 1e-12);
        let nothing = score_grouping(&labels, &[]);
        assert_eq!((nothing.precision, nothing.recall, nothing.f1), (1.0, 0.0, 0.0));
    }

    #[test]
    fn hard_negatives_merged_with_their_near_cluster_are_counted() {
        let mut labels = labels(&["a", "a", "n", "m"]);
        labels[2].near = Some("a".into());
        labels[3].near = Some("zzz".into());
        let score = score_grouping(&labels, &[vec![0, 1, 2]]);
        assert_eq!(score.false_pairs_with_hard_negative, 2);
        assert_eq!((score.hard_negatives_merged, score.hard_negatives), (1, 2));
    }

    proptest! {
        /// The counts add up whatever the grouping.
        #[test]
        fn counts_add_up(clusters in proptest::collection::vec(0u8..4, 1..12), assign in proptest::collection::vec(0u8..5, 12)) {
            let labels: Vec<Labelled> = clusters.iter().map(|c| Labelled { cluster: c.to_string(), near: None }).collect();
            let mut groups: BTreeMap<u8, Vec<usize>> = BTreeMap::new();
            for (i, slot) in assign.iter().enumerate().take(labels.len()) {
                groups.entry(*slot).or_default().push(i);
            }
            let groups: Vec<Vec<usize>> = groups.into_values().collect();
            let score = score_grouping(&labels, &groups);
            let grouped: usize = groups.iter().map(|g| g.len() * (g.len() - 1) / 2).sum();
            prop_assert_eq!(score.true_pairs + score.false_pairs, grouped);
            let mut labelled = 0;
            for c in 0..4u8 {
                let n = clusters.iter().filter(|&&x| x == c).count();
                labelled += n * n.saturating_sub(1) / 2;
            }
            prop_assert_eq!(score.true_pairs + score.missed_pairs, labelled);
        }
    }
}
