//! Grouping by a pair judge: every pair whose cosine reaches a floor is judged, groups are
//! formed only from the pairs the judge confirms, and the hub guard of
//! [`group_confirmed`] keeps one entry from chaining distinct ones.
//!
//! Judging runs on rayon and each verdict depends only on its pair, so the result does not
//! depend on the number of threads.

use rayon::prelude::*;

use crate::{
    Edge, Embedding, Error, GuardedGrouping, LearnedJudgeSettings, Linkage, LocalJudge, PairJudgement, PairScores,
    PairVerdict, Result, TextFeatures, group_confirmed,
};

/// A pair the judge was asked about and did not confirm, though its cosine reached the
/// judge's duplicate floor: what a cosine threshold would have merged and the judge kept
/// apart.
#[derive(Debug, Clone, PartialEq)]
pub struct RejectedPair {
    /// The earlier item's index.
    pub a: usize,
    /// The later item's index.
    pub b: usize,
    /// The verdict and its reasons.
    pub judgement: PairJudgement,
}

/// The outcome of [`group_judged`].
#[derive(Debug, Clone, PartialEq)]
pub struct JudgedGrouping {
    /// The groups and the links the linkage refused.
    pub grouping: GuardedGrouping,
    /// Pairs at or above the judge's duplicate floor that it did not confirm, by indices.
    pub rejected: Vec<RejectedPair>,
    /// How many pairs were judged.
    pub judged: usize,
}

/// Rows per tile of [`similar_pairs`]: a tile's scores are one small matrix product.
const TILE: usize = 256;

/// The edges among `edges` (over `items` items) that are one of the `k` strongest of at
/// least one of their two items (ties by the other item's index): what a model that
/// judges pairs one by one can afford to read in a large collection. The order of
/// `edges` is kept.
pub fn keep_nearest(edges: &[Edge], items: usize, k: usize) -> Vec<Edge> {
    let mut by_item: Vec<Vec<(f32, usize, usize)>> = vec![Vec::new(); items];
    for (i, e) in edges.iter().enumerate() {
        if e.a < items && e.b < items {
            by_item[e.a].push((e.score, e.b, i));
            by_item[e.b].push((e.score, e.a, i));
        }
    }
    let mut keep = vec![false; edges.len()];
    for list in &mut by_item {
        list.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
        for &(_, _, i) in list.iter().take(k) {
            keep[i] = true;
        }
    }
    edges.iter().zip(keep).filter(|(_, kept)| *kept).map(|(e, _)| *e).collect()
}

/// Most members a component of confirmed duplicates may have for [`completion_pairs`] to
/// ask for the rest of its pairs (a component of `m` costs up to `m (m - 1) / 2` pairs).
pub const MAX_COMPLETED_COMPONENT: usize = 64;

/// The pairs to judge in a second round, so that a linkage that needs every pair of a
/// group confirmed ([`Linkage::Complete`], [`Linkage::Survivor`]) can confirm groups
/// larger than a text's few nearest neighbours reach: the pairs of `all` (every pair at
/// or above the candidate floor, over `items` items) that join two members of one
/// component of `duplicates` (the links the first round confirmed) and are not in
/// `judged` (the first round's pairs). Components of more than
/// [`MAX_COMPLETED_COMPONENT`] members are left as they are. The order of `all` is kept.
pub fn completion_pairs(items: usize, all: &[Edge], judged: &[Edge], duplicates: &[Edge]) -> Vec<Edge> {
    if duplicates.is_empty() {
        return Vec::new();
    }
    let mut sets = crate::group::DisjointSets::new(items);
    for e in duplicates.iter().filter(|e| e.a < items && e.b < items) {
        sets.union(e.a, e.b);
    }
    let mut size = vec![0usize; items];
    for i in 0..items {
        size[sets.find(i)] += 1;
    }
    let done: std::collections::HashSet<(usize, usize)> = judged.iter().map(|e| (e.a.min(e.b), e.a.max(e.b))).collect();
    all.iter()
        .filter(|e| e.a < items && e.b < items && e.a != e.b)
        .filter(|e| {
            let root = sets.find(e.a);
            root == sets.find(e.b)
                && (2..=MAX_COMPLETED_COMPONENT).contains(&size[root])
                && !done.contains(&(e.a.min(e.b), e.a.max(e.b)))
        })
        .copied()
        .collect()
}

/// The pairs the learned judge reads in a collection of `texts`, and their scores, in
/// two rounds: first each text's [`LearnedJudgeSettings::candidates`] nearest neighbours
/// among `all` (every pair at or above the candidate floor, as [`similar_pairs`] gives
/// them), then the [`completion_pairs`] of the duplicates that round confirmed. `score`
/// runs the models on a list of pairs. The result goes to [`group_learned`].
pub fn learned_candidates<E>(
    texts: &[&str],
    all: &[Edge],
    settings: &LearnedJudgeSettings,
    mut score: impl FnMut(&[(&str, &str)]) -> std::result::Result<Vec<PairScores>, E>,
) -> std::result::Result<(Vec<Edge>, Vec<PairScores>), E> {
    let items = texts.len();
    let mut candidates = keep_nearest(all, items, settings.candidates);
    let text_pairs = |edges: &[Edge]| -> Vec<(&str, &str)> { edges.iter().map(|e| (texts[e.a], texts[e.b])).collect() };
    let mut scores = score(&text_pairs(&candidates))?;
    let duplicates: Vec<Edge> = candidates
        .iter()
        .zip(&scores)
        .filter(|(e, s)| settings.judge(texts[e.a], texts[e.b], s, e.score).is_duplicate())
        .map(|(e, _)| *e)
        .collect();
    let more = completion_pairs(items, all, &candidates, &duplicates);
    if !more.is_empty() {
        scores.extend(score(&text_pairs(&more))?);
        candidates.extend(more);
    }
    Ok((candidates, scores))
}

/// Every pair `(a, b)`, `a < b`, whose cosine reaches `floor`, in index order.
///
/// The scores come tile by tile from one matrix product each (as in
/// [`group_by_similarity`](crate::group_by_similarity)), tiles in parallel on rayon.
/// Fails when the embeddings do not all have the same dimensions.
pub fn similar_pairs(embeddings: &[Embedding], floor: f32) -> Result<Vec<Edge>> {
    let Some(first) = embeddings.first() else { return Ok(Vec::new()) };
    let dims = first.dims();
    if let Some(bad) = embeddings.iter().find(|e| e.dims() != dims) {
        return Err(Error::DimensionMismatch { expected: dims, actual: bad.dims() });
    }
    let n = embeddings.len();
    let matrix: Vec<f32> = embeddings.iter().flat_map(|e| e.as_slice().iter().copied()).collect();
    let blocks = n.div_ceil(TILE);
    let tiles: Vec<(usize, usize)> = (0..blocks).flat_map(|bi| (bi..blocks).map(move |bj| (bi, bj))).collect();
    let found: Vec<Vec<Edge>> = tiles
        .par_iter()
        .map(|&(bi, bj)| {
            let (r0, r1) = (bi * TILE, ((bi + 1) * TILE).min(n));
            let (c0, c1) = (bj * TILE, ((bj + 1) * TILE).min(n));
            let (rows, cols) = (r1 - r0, c1 - c0);
            let mut scores = vec![0.0f32; rows * cols];
            crate::group::product_with_transpose(
                &matrix[r0 * dims..r1 * dims],
                rows,
                &matrix[c0 * dims..c1 * dims],
                cols,
                dims,
                &mut scores,
            );
            let mut edges = Vec::new();
            for i in 0..rows {
                for j in 0..cols {
                    let (a, b, score) = (r0 + i, c0 + j, scores[i * cols + j]);
                    if a < b && score >= floor {
                        edges.push(Edge { a, b, score });
                    }
                }
            }
            edges
        })
        .collect();
    let mut edges: Vec<Edge> = found.into_iter().flatten().collect();
    edges.sort_by_key(|e| (e.a, e.b));
    Ok(edges)
}

/// Groups `texts` (with their `embeddings`) from the pairs `judge` confirms: every pair
/// whose cosine reaches the lower of the judge's duplicate floor and `floor` is judged;
/// confirmed pairs are the links; `linkage` decides how groups may be joined, asking the
/// judge about any other pair it needs.
///
/// Fails when the slices differ in length or the embeddings in dimensions.
pub fn group_judged(
    texts: &[&str],
    embeddings: &[Embedding],
    judge: &LocalJudge,
    floor: f32,
    linkage: Linkage,
) -> Result<JudgedGrouping> {
    if texts.len() != embeddings.len() {
        return Err(Error::DimensionMismatch { expected: texts.len(), actual: embeddings.len() });
    }
    let floor = floor.min(judge.params().duplicate_floor);
    let candidates = similar_pairs(embeddings, floor)?;
    let features: Vec<TextFeatures> = texts.par_iter().map(|t| TextFeatures::new(t)).collect();
    let judged: Vec<(Edge, PairJudgement)> = candidates
        .into_par_iter()
        .map(|e| (e, judge.judge_features(&features[e.a], &features[e.b], e.score)))
        .collect();
    let count = judged.len();
    let mut links = Vec::new();
    let mut rejected = Vec::new();
    for (edge, judgement) in judged {
        if judgement.verdict == PairVerdict::Duplicate {
            links.push(edge);
        } else if edge.score >= judge.params().duplicate_floor {
            rejected.push(RejectedPair { a: edge.a, b: edge.b, judgement });
        }
    }
    let duplicate_floor = judge.params().duplicate_floor;
    let check = |a: usize, b: usize| {
        let cosine = embeddings[a].cosine(&embeddings[b]).map_err(|e| e.to_string())?;
        if cosine < duplicate_floor && features[a].normalized != features[b].normalized {
            // No contrast can make this pair a duplicate: say so without looking for one.
            return Err(format!("cosine {cosine:.3} is below {duplicate_floor:.2}"));
        }
        let judgement = judge.judge_features(&features[a], &features[b], cosine);
        if judgement.is_duplicate() { Ok(cosine) } else { Err(judgement.reasons.join("; ")) }
    };
    let grouping = group_confirmed(texts.len(), &links, linkage, check)?;
    Ok(JudgedGrouping { grouping, rejected, judged: count })
}

/// Groups from the learned judge's verdicts: `candidates` are the pairs it read (from
/// [`learned_candidates`]), `scores` the models' scores for each of them, in the same
/// order. Pairs the judge calls duplicates are the links; `linkage` decides how groups
/// may be joined, and a pair it needs that was not read is below the floor or outside
/// every text's nearest neighbours and its completion round, so never a duplicate (unless
/// the judge needs no model for it: [`same_without_model`](crate::same_without_model)). The rejected pairs are those the judge left uncertain plus
/// those it kept apart whose cosine reaches `report_from` (what a cosine threshold would
/// have merged).
///
/// Fails when `scores` and `candidates` differ in length or an index is out of range.
pub fn group_learned(
    texts: &[&str],
    candidates: &[Edge],
    scores: &[PairScores],
    settings: &LearnedJudgeSettings,
    report_from: f32,
    linkage: Linkage,
) -> Result<JudgedGrouping> {
    if candidates.len() != scores.len() {
        return Err(Error::DimensionMismatch { expected: candidates.len(), actual: scores.len() });
    }
    if let Some(bad) = candidates.iter().find(|e| e.a.max(e.b) >= texts.len()) {
        return Err(Error::DimensionMismatch { expected: texts.len(), actual: bad.a.max(bad.b) + 1 });
    }
    let mut verdicts = std::collections::HashMap::with_capacity(candidates.len());
    let mut links = Vec::new();
    let mut rejected = Vec::new();
    for (edge, scores) in candidates.iter().zip(scores) {
        let judgement = settings.judge(texts[edge.a], texts[edge.b], scores, edge.score);
        if judgement.is_duplicate() {
            links.push(*edge);
        } else if judgement.verdict == PairVerdict::Uncertain || edge.score >= report_from {
            rejected.push(RejectedPair { a: edge.a, b: edge.b, judgement: judgement.clone() });
        }
        verdicts.insert((edge.a.min(edge.b), edge.a.max(edge.b)), judgement);
    }
    let check = |a: usize, b: usize| match verdicts.get(&(a.min(b), a.max(b))) {
        Some(j) if j.is_duplicate() => Ok(j.cosine),
        Some(j) => Err(j.reasons.first().cloned().unwrap_or_else(|| j.verdict.as_str().to_owned())),
        None if crate::same_without_model(texts[a], texts[b]) => Ok(1.0),
        None => Err(format!(
            "not judged: cosine below the candidate floor {:.2}, or neither text among the other's {} nearest",
            settings.candidate_floor, settings.candidates
        )),
    };
    let grouping = group_confirmed(texts.len(), &links, linkage, check)?;
    Ok(JudgedGrouping { grouping, rejected, judged: candidates.len() })
}

/// Groups by cosine alone with a linkage: pairs whose cosine reaches `threshold` are the
/// links, and in [`Linkage::Survivor`] and [`Linkage::Complete`] mode every pair a group
/// needs must reach it too. With [`Linkage::Single`] this is [`group_by_similarity`](crate::group_by_similarity)'s
/// grouping.
///
/// Fails when the embeddings differ in dimensions.
pub fn group_by_cosine(embeddings: &[Embedding], threshold: f32, linkage: Linkage) -> Result<GuardedGrouping> {
    let floor = threshold - crate::SCORE_TOLERANCE;
    let links = similar_pairs(embeddings, floor)?;
    let check = |a: usize, b: usize| {
        let cosine = embeddings[a].cosine(&embeddings[b]).map_err(|e| e.to_string())?;
        if cosine >= floor { Ok(cosine) } else { Err(format!("cosine {cosine:.3} is below {threshold:.2}")) }
    };
    group_confirmed(embeddings.len(), &links, linkage, check)
}

#[cfg(test)]
mod tests;
