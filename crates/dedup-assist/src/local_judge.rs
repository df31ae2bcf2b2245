//! [`LocalBatchJudge`]: seed 003's judge answered offline by `dedup-core`'s
//! [`LocalJudge`], from the texts and candidate cosines a batch already carries.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use dedup_core::{
    ContentHash, ContractLimits, JudgeBatch, JudgeGroup, JudgeMemory, JudgeResponse, LocalJudge, LocalJudgeParams,
    MemberView, MemoryStatus, PairJudgement, PairScorer, PairVerdict, TextLimits, UncertainPair, best_existing_text,
    choose_survivor, sentence_count,
};
use dedup_llm::TokenUsage;
use dedup_store::MAX_CONTENT_BYTES;

use crate::{Error, Judge, JudgeFailure, JudgeReply, Result};

/// What [`LocalBatchJudge::name`](Judge::name) answers, and what the merge ledger records.
pub const LOCAL_JUDGE_NAME: &str = "local";
/// What the learned judge ([`LocalBatchJudge::learned`]) answers as its name.
pub const LEARNED_JUDGE_NAME: &str = "learned";

/// A [`Judge`] that asks no model: each candidate edge of a batch is judged by
/// [`LocalJudge::judge`] with the edge's cosine, and groups are formed from the confirmed
/// pairs only.
///
/// - **Confirmed pair:** a candidate edge whose verdict is [`PairVerdict::Duplicate`] and
///   whose cosine reaches the batch's `min_confidence_hint`. Two memories without a
///   candidate edge between them are never confirmed: their cosine is below the
///   candidate floor, or the batch (incremental mode) did not ask about them.
/// - **Groups (complete linkage):** confirmed pairs are taken highest cosine first, ties
///   by ids; a pair starts a group, joins a member to a group, or joins two groups, only
///   when every pair of the resulting group is confirmed. The order of the batch's
///   memories and edges does not matter.
/// - **Canonical text:** the judge writes no text. It proposes the text of the group's
///   survivor ([`choose_survivor`]: verified first, then most occurrences, then lowest
///   id); the runner's specificity guard then keeps it or falls back to the best existing
///   text ([`dedup_core::choose_text`]). When the survivor's text has more sentences than
///   a reply may carry, the best existing text is proposed instead; when no member's text
///   fits, the group is not emitted (its memories are reported as without a match, with a
///   note).
/// - **Confidence:** the lowest cosine among the group's pairs, so never below the hint.
/// - **Reason:** the judge's reasons for the weakest pair, cut to the reply's limit.
///
/// Pairs the judge found related despite a duplicate-level cosine (a vetoing contrast)
/// are listed in the reply's notes. The reply always passes
/// [`dedup_core::validate_response`] in both modes for batches that keep
/// [`JudgeBatch`]'s invariants.
///
/// **The learned judge** ([`LocalBatchJudge::learned`]) works the same way with the
/// learned pair judge's verdicts: a pair is confirmed when the calibrated P(duplicate)
/// reaches the model's duplicate threshold (and the hint); pairs are taken most probable
/// first, the confidence is the lowest probability among the group's pairs, and pairs in
/// the uncertain band are listed in the notes as pairs to review, never merged.
#[derive(Debug, Clone)]
pub struct LocalBatchJudge {
    judge: LocalJudge,
    learned: Option<Arc<dyn PairScorer>>,
    model: String,
    limits: ContractLimits,
}

impl Default for LocalBatchJudge {
    fn default() -> Self {
        LocalBatchJudge::builtin()
    }
}

impl LocalBatchJudge {
    /// The judge with the built-in parameters; its model is `local-judge/builtin`.
    pub fn builtin() -> LocalBatchJudge {
        LocalBatchJudge {
            judge: LocalJudge::default(),
            learned: None,
            model: "local-judge/builtin".to_owned(),
            limits: ContractLimits::default(),
        }
    }

    /// The learned pair judge over `scorer`; its model is `learned-judge/<the first 16 hex
    /// digits of the model file's sha256>`.
    pub fn learned(scorer: Arc<dyn PairScorer>) -> LocalBatchJudge {
        let sha = scorer.settings().models_fingerprint();
        LocalBatchJudge {
            judge: LocalJudge::default(),
            learned: Some(scorer),
            model: format!("learned-judge/{sha}"),
            limits: ContractLimits::default(),
        }
    }

    /// The judge with `params` (validate them first when built by hand); its model is
    /// `local-judge/<16 hex digits of SHA-256 of the parameters as compact JSON>`.
    pub fn with_params(params: LocalJudgeParams) -> LocalBatchJudge {
        let json = serde_json::to_string(&params).unwrap_or_default();
        let digest = ContentHash::of_raw(&json);
        LocalBatchJudge {
            judge: LocalJudge::new(params),
            learned: None,
            model: format!("local-judge/{}", digest.fingerprint()),
            limits: ContractLimits::default(),
        }
    }

    /// The judge with the parameters of a JSON file (see [`LocalJudgeParams`]).
    ///
    /// Fails with [`Error::Config`] naming the file when it cannot be read or holds no
    /// valid parameters.
    pub fn from_params_file(path: &Path) -> Result<LocalBatchJudge> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read judge parameters {}: {e}", path.display())))?;
        let params = LocalJudgeParams::parse(&text).map_err(|e| match e {
            dedup_core::Error::InvalidJudgeParams(message) => {
                Error::Config(format!("invalid judge parameters in {}: {message}", path.display()))
            }
            other => Error::Config(format!("judge parameters {}: {other}", path.display())),
        })?;
        Ok(LocalBatchJudge::with_params(params))
    }

    /// Holds replies to `limits` (use the run's [`crate::DedupOptions::limits`]).
    pub fn with_limits(mut self, limits: ContractLimits) -> LocalBatchJudge {
        self.limits = limits;
        self
    }

    /// The pair judge's parameters.
    pub fn params(&self) -> &LocalJudgeParams {
        self.judge.params()
    }

    /// The verdicts on `pairs` of (first text, second text, cosine): the local judge's,
    /// or the learned one's from its models' scores (all pairs at once).
    fn judge_pairs(&self, pairs: &[(&str, &str, f32)]) -> std::result::Result<Vec<PairJudgement>, String> {
        let Some(scorer) = &self.learned else {
            return Ok(pairs.iter().map(|&(a, b, cosine)| self.judge.judge(a, b, cosine)).collect());
        };
        let settings = scorer.settings();
        let scored: Vec<(&str, &str)> =
            pairs.iter().filter(|p| p.2 >= settings.candidate_floor).map(|&(a, b, _)| (a, b)).collect();
        let scores = if scored.is_empty() { Vec::new() } else { scorer.scores(&scored)? };
        if scores.len() != scored.len() {
            return Err(format!("the model gave {} results for {} pairs", scores.len(), scored.len()));
        }
        let mut scores = scores.into_iter();
        Ok(pairs
            .iter()
            .map(|&(a, b, cosine)| {
                if cosine < settings.candidate_floor {
                    return settings.below_floor(a, b, cosine);
                }
                match scores.next() {
                    Some(s) => settings.judge(a, b, &s, cosine),
                    None => settings.below_floor(a, b, cosine),
                }
            })
            .collect())
    }

    /// A confirmed pair's strength: its probability with the learned judge, else its
    /// cosine.
    fn strength(&self, j: &PairJudgement) -> f32 {
        match (&self.learned, j.probability) {
            (Some(_), Some(p)) => p,
            _ => j.cosine,
        }
    }

    /// The reply to `batch`, computed synchronously (a few microseconds per edge with the
    /// local judge; one model pass per candidate edge with the learned one). Fails only
    /// when the learned judge's model cannot run.
    pub fn try_respond(&self, batch: &JudgeBatch) -> std::result::Result<JudgeResponse, String> {
        let memories: BTreeMap<i64, &JudgeMemory> = batch.memories.iter().map(|m| (m.id, m)).collect();
        let hint = batch.rules.min_confidence_hint;

        // Each unordered pair once, at its highest cosine, judged lower id first.
        let mut cosines: BTreeMap<(i64, i64), f32> = BTreeMap::new();
        for edge in &batch.candidate_edges {
            let (a, b) = (edge.source_id.min(edge.target_id), edge.source_id.max(edge.target_id));
            if a == b || !memories.contains_key(&a) || !memories.contains_key(&b) || !edge.similarity.is_finite() {
                continue;
            }
            let cosine = cosines.entry((a, b)).or_insert(edge.similarity);
            *cosine = cosine.max(edge.similarity);
        }
        let texts: Vec<(&str, &str, f32)> = cosines
            .iter()
            .map(|(&(a, b), &cosine)| (memories[&a].text.as_str(), memories[&b].text.as_str(), cosine))
            .collect();
        let verdicts = self.judge_pairs(&texts)?;
        let mut judged: Vec<((i64, i64), PairJudgement)> = cosines.into_keys().zip(verdicts).collect();
        judged.sort_by(|(x, jx), (y, jy)| self.strength(jy).total_cmp(&self.strength(jx)).then(x.cmp(y)));

        let mut notes = Vec::new();
        let mut uncertain = Vec::new();
        let mut confirmed: BTreeMap<(i64, i64), &PairJudgement> = BTreeMap::new();
        for (pair, j) in &judged {
            if j.is_duplicate() && f64::from(self.strength(j)) >= hint {
                confirmed.insert(*pair, j);
            } else if j.verdict == PairVerdict::Uncertain {
                uncertain.push(UncertainPair {
                    low: pair.0,
                    high: pair.1,
                    cosine: j.cosine,
                    probability: j.probability,
                    judge: if self.learned.is_some() { "learned" } else { "local" }.to_owned(),
                    reasons: j.reasons.clone(),
                });
                notes.push(format!(
                    "memories {} and {} may be duplicates (uncertain, not merged, to review): {}",
                    pair.0,
                    pair.1,
                    j.reasons.join("; ")
                ));
            } else if self.learned.is_none()
                && j.verdict == PairVerdict::Related
                && j.cosine >= self.judge.params().duplicate_floor
            {
                notes.push(format!(
                    "memories {} and {} are related, not duplicates: {}",
                    pair.0,
                    pair.1,
                    j.reasons.join("; ")
                ));
            }
        }

        let groups = complete_linkage(&judged, &confirmed);
        let mut reply_groups = Vec::new();
        let mut grouped = BTreeSet::new();
        for members in groups {
            let Some(group) = self.group_reply(&members, &memories, &confirmed) else {
                notes.push(format!(
                    "memories {} are duplicates, but none of their texts fits in {} sentences; not grouped",
                    join_ids(&members),
                    self.limits.max_canonical_sentences
                ));
                continue;
            };
            if reply_groups.len() >= batch.rules.max_groups {
                notes.push(format!(
                    "memories {} are duplicates, but the batch allows {} groups; not grouped",
                    join_ids(&members),
                    batch.rules.max_groups
                ));
                continue;
            }
            grouped.extend(members.iter().copied());
            reply_groups.push(group);
        }
        let no_match_ids = batch.ids_to_decide().into_iter().filter(|id| !grouped.contains(id)).collect();
        Ok(JudgeResponse { groups: reply_groups, no_match_ids, notes, uncertain })
    }

    /// The reply to `batch` with the local judge; with the learned one whose model fails,
    /// a reply that groups nothing and says why in its notes ([`Judge::judge`] reports
    /// that failure instead).
    pub fn respond(&self, batch: &JudgeBatch) -> JudgeResponse {
        self.try_respond(batch).unwrap_or_else(|error| JudgeResponse {
            groups: Vec::new(),
            no_match_ids: batch.ids_to_decide().into_iter().collect(),
            notes: vec![format!("the learned judge failed: {error}")],
            uncertain: Vec::new(),
        })
    }

    /// The reply group of `members` (ids ascending), or `None` when no member's text fits
    /// the reply's sentence limit.
    fn group_reply(
        &self,
        members: &[i64],
        memories: &BTreeMap<i64, &JudgeMemory>,
        confirmed: &BTreeMap<(i64, i64), &PairJudgement>,
    ) -> Option<JudgeGroup> {
        let views: Vec<MemberView<'_>> = members
            .iter()
            .map(|id| {
                let m = memories[id];
                MemberView {
                    id: m.id,
                    verified: m.status == MemoryStatus::Verified,
                    occurrence_count: m.occurrence_count,
                    text: &m.text,
                }
            })
            .collect();
        let max_sentences = self.limits.max_canonical_sentences;
        let fits = |text: &str| !text.trim().is_empty() && sentence_count(text) <= max_sentences;
        let survivor = views[choose_survivor(&views)?].text;
        let canonical = if fits(survivor) {
            survivor
        } else {
            let limits = TextLimits { max_sentences, max_bytes: MAX_CONTENT_BYTES };
            Some(views[best_existing_text(&views, &limits)?].text).filter(|t| fits(t))?
        };
        // The weakest pair decides the confidence and speaks for the group.
        let (pair, weakest) = pairs(members)
            .filter_map(|pair| confirmed.get(&pair).map(|j| (pair, *j)))
            .min_by(|(x, jx), (y, jy)| self.strength(jx).total_cmp(&self.strength(jy)).then(x.cmp(y)))?;
        let reason = if members.len() == 2 {
            weakest.reasons.join("; ")
        } else {
            format!(
                "all {} pairs confirmed; weakest {}-{}: {}",
                members.len() * (members.len() - 1) / 2,
                pair.0,
                pair.1,
                weakest.reasons.join("; ")
            )
        };
        Some(JudgeGroup {
            ids: members.to_vec(),
            canonical_text: canonical.trim().to_owned(),
            confidence: f64::from(self.strength(weakest)).clamp(0.0, 1.0),
            reason: cut(&reason, self.limits.max_reason_chars),
        })
    }
}

#[async_trait]
impl Judge for LocalBatchJudge {
    fn name(&self) -> &str {
        if self.learned.is_some() { LEARNED_JUDGE_NAME } else { LOCAL_JUDGE_NAME }
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn default_min_confidence(&self) -> Option<f64> {
        match &self.learned {
            Some(scorer) => Some(f64::from(scorer.settings().duplicate_threshold)),
            None => Some(f64::from(self.judge.params().duplicate_floor)),
        }
    }

    async fn judge(&self, batch: &JudgeBatch) -> Result<JudgeReply, JudgeFailure> {
        if self.learned.is_none() {
            return Ok(JudgeReply { response: self.respond(batch), usage: TokenUsage::default() });
        }
        // The model is CPU work: off the async executor.
        let (judge, batch) = (self.clone(), batch.clone());
        let response = tokio::task::spawn_blocking(move || judge.try_respond(&batch))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
            .map_err(|error| JudgeFailure::new(format!("the learned judge failed: {error}")))?;
        Ok(JudgeReply { response, usage: TokenUsage::default() })
    }
}

/// Groups by complete linkage over `judged` (highest cosine first): each confirmed pair
/// joins its two sides' groups when every pair of the union is confirmed. Groups come out
/// with ids ascending, strongest pair first (ties by ids).
fn complete_linkage(
    judged: &[((i64, i64), PairJudgement)],
    confirmed: &BTreeMap<(i64, i64), &PairJudgement>,
) -> Vec<Vec<i64>> {
    let mut group_of: BTreeMap<i64, usize> = BTreeMap::new();
    let mut groups: Vec<Vec<i64>> = Vec::new();
    for ((a, b), _) in judged.iter().filter(|(pair, _)| confirmed.contains_key(pair)) {
        let side = |id: i64, group_of: &BTreeMap<i64, usize>| group_of.get(&id).copied();
        let (ga, gb) = (side(*a, &group_of), side(*b, &group_of));
        if ga.is_some() && ga == gb {
            continue;
        }
        let left = ga.map_or_else(|| vec![*a], |g| groups[g].clone());
        let right = gb.map_or_else(|| vec![*b], |g| groups[g].clone());
        let linked = left.iter().all(|x| right.iter().all(|y| confirmed.contains_key(&(*x.min(y), *x.max(y)))));
        if !linked {
            continue;
        }
        let target = match (ga, gb) {
            (Some(g), _) | (None, Some(g)) => g,
            (None, None) => {
                groups.push(Vec::new());
                groups.len() - 1
            }
        };
        let mut union: Vec<i64> = left.into_iter().chain(right).collect();
        union.sort_unstable();
        union.dedup();
        if let (Some(g), Some(other)) = (ga, gb) {
            let gone = if target == g { other } else { g };
            groups[gone].clear();
        }
        for &id in &union {
            group_of.insert(id, target);
        }
        groups[target] = union;
    }
    // Strongest group first (by its strongest pair), so a group cap keeps the surest.
    let strongest = |group: &Vec<i64>| {
        pairs(group).filter_map(|pair| confirmed.get(&pair).map(|j| j.cosine)).fold(f32::MIN, f32::max)
    };
    let mut groups: Vec<(f32, Vec<i64>)> =
        groups.into_iter().filter(|g| g.len() > 1).map(|g| (strongest(&g), g)).collect();
    groups.sort_by(|(x, gx), (y, gy)| y.total_cmp(x).then(gx.cmp(gy)));
    groups.into_iter().map(|(_, g)| g).collect()
}

/// Every unordered pair of `ids` (ascending), lower id first.
fn pairs(ids: &[i64]) -> impl Iterator<Item = (i64, i64)> + '_ {
    ids.iter().enumerate().flat_map(move |(i, &a)| ids[i + 1..].iter().map(move |&b| (a.min(b), a.max(b))))
}

fn join_ids(ids: &[i64]) -> String {
    ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// `text` cut to `max` characters, ending in an ellipsis when cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests;
