//! Choosing a threshold from scored rows: the lowest one whose pair precision reaches a
//! target, else the one with the best F1.

/// Fewer labelled duplicate pairs than this give no recommendation of their own.
pub(crate) const MIN_LABELLED_PAIRS: usize = 2;

/// Precision within this of the target counts as reaching it (`19 / 20` against `0.95`).
const PRECISION_TOLERANCE: f64 = 1e-9;

/// How grouping at one threshold scores against the labels, counted over pairs.
///
/// **Invariant:** `true_pairs + missed_pairs` is the same in every row of one sweep (the
/// labelled duplicate pairs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Row {
    pub threshold: f64,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    pub true_pairs: usize,
    pub false_pairs: usize,
    pub missed_pairs: usize,
}

impl Row {
    /// The labelled duplicate pairs.
    pub(crate) fn labelled_pairs(&self) -> usize {
        self.true_pairs + self.missed_pairs
    }
}

/// The threshold recommended for one set of rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Recommendation {
    /// The lowest threshold whose precision reaches the target and that finds at least
    /// one true pair: the highest recall at that precision.
    ReachesTarget(Row),
    /// No threshold reaches the target: the row of best F1 (ties: higher precision, then
    /// higher threshold).
    BestF1(Row),
    /// Fewer than [`MIN_LABELLED_PAIRS`] labelled duplicate pairs: nothing to choose by.
    TooFewPairs { labelled_pairs: usize },
}

impl Recommendation {
    /// The recommended row, if there is one.
    pub(crate) fn row(&self) -> Option<&Row> {
        match self {
            Recommendation::ReachesTarget(row) | Recommendation::BestF1(row) => Some(row),
            Recommendation::TooFewPairs { .. } => None,
        }
    }

    /// The recommended threshold, if there is one.
    pub(crate) fn threshold(&self) -> Option<f64> {
        self.row().map(|row| row.threshold)
    }
}

/// Recommends a threshold from `rows` (any order) for pair precision `target`.
///
/// Recall cannot grow with the threshold (grouping at a higher threshold only splits
/// groups), so the lowest threshold reaching the target has the highest recall among
/// those that do. A threshold that groups nothing true has precision 1 by convention and
/// is never chosen for it.
pub(crate) fn recommend(rows: &[Row], target: f64) -> Recommendation {
    let labelled_pairs = rows.first().map_or(0, Row::labelled_pairs);
    if labelled_pairs < MIN_LABELLED_PAIRS {
        return Recommendation::TooFewPairs { labelled_pairs };
    }
    let mut sorted: Vec<Row> = rows.to_vec();
    sorted.sort_by(|a, b| a.threshold.total_cmp(&b.threshold));
    if let Some(row) = sorted.iter().find(|r| r.true_pairs > 0 && r.precision + PRECISION_TOLERANCE >= target) {
        return Recommendation::ReachesTarget(*row);
    }
    let best = sorted.iter().max_by(|a, b| {
        a.f1.total_cmp(&b.f1).then(a.precision.total_cmp(&b.precision)).then(a.threshold.total_cmp(&b.threshold))
    });
    match best {
        Some(row) => Recommendation::BestF1(*row),
        None => Recommendation::TooFewPairs { labelled_pairs },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row at `threshold` with these pair counts; the ratios follow from them.
    fn row(threshold: f64, true_pairs: usize, false_pairs: usize, missed_pairs: usize) -> Row {
        let ratio = |part: usize, whole: usize| if whole == 0 { 1.0 } else { part as f64 / whole as f64 };
        let precision = ratio(true_pairs, true_pairs + false_pairs);
        let recall = ratio(true_pairs, true_pairs + missed_pairs);
        let f1 = if precision + recall == 0.0 { 0.0 } else { 2.0 * precision * recall / (precision + recall) };
        Row { threshold, precision, recall, f1, true_pairs, false_pairs, missed_pairs }
    }

    #[test]
    fn the_lowest_threshold_reaching_the_target_is_recommended() {
        // 10 labelled pairs; precision climbs as the threshold rises, recall falls.
        let rows = [
            row(0.70, 10, 5, 0),
            row(0.75, 9, 1, 1), // precision 0.90
            row(0.80, 9, 0, 1), // precision 1
            row(0.85, 5, 0, 5),
        ];
        assert_eq!(recommend(&rows, 0.95).threshold(), Some(0.80));
        assert_eq!(recommend(&rows, 0.90).threshold(), Some(0.75));
        assert!(matches!(recommend(&rows, 0.90), Recommendation::ReachesTarget(_)));
        // Row order does not matter.
        let mut reversed = rows;
        reversed.reverse();
        assert_eq!(recommend(&reversed, 0.95).threshold(), Some(0.80));
    }

    #[test]
    fn precision_equal_to_the_target_reaches_it() {
        let rows = [row(0.60, 19, 2, 1), row(0.65, 19, 1, 1), row(0.70, 10, 0, 10)];
        assert_eq!(recommend(&rows, 0.95), Recommendation::ReachesTarget(rows[1]));
    }

    #[test]
    fn a_threshold_that_groups_nothing_true_is_not_recommended_for_its_precision() {
        // At 0.90 nothing is grouped: precision 1 by convention, recall 0.
        let rows = [row(0.80, 3, 2, 1), row(0.85, 2, 1, 2), row(0.90, 0, 0, 4)];
        let recommendation = recommend(&rows, 0.95);
        assert!(matches!(recommendation, Recommendation::BestF1(_)), "{recommendation:?}");
        assert_eq!(recommendation.threshold(), Some(0.80));
    }

    #[test]
    fn without_a_threshold_reaching_the_target_the_best_f1_is_recommended() {
        let rows = [row(0.70, 4, 6, 0), row(0.75, 3, 2, 1), row(0.80, 1, 1, 3)];
        let recommendation = recommend(&rows, 0.95);
        assert_eq!(recommendation, Recommendation::BestF1(rows[1]));
        // F1 ties go to the higher precision, then to the higher threshold.
        let tied = [row(0.70, 2, 2, 2), row(0.75, 2, 2, 2)];
        assert_eq!(recommend(&tied, 0.99).threshold(), Some(0.75));
    }

    #[test]
    fn fewer_than_two_labelled_pairs_give_no_recommendation() {
        let rows = [row(0.70, 1, 0, 0), row(0.80, 0, 0, 1)];
        assert_eq!(recommend(&rows, 0.95), Recommendation::TooFewPairs { labelled_pairs: 1 });
        assert_eq!(recommend(&[row(0.70, 0, 3, 0)], 0.5), Recommendation::TooFewPairs { labelled_pairs: 0 });
        assert_eq!(recommend(&[], 0.5), Recommendation::TooFewPairs { labelled_pairs: 0 });
        assert_eq!(recommend(&[row(0.70, 2, 0, 0)], 0.5).threshold(), Some(0.70));
    }
}
