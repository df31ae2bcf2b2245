//! [`PairJudgeChoice`]: what decides whether a semantic neighbour is a duplicate — the
//! learned judge's calibrated probability, the cosine threshold alone, or the local judge
//! with the threshold as its veto line — and [`PairJudgeChoice::decide`], the choice
//! among judged candidates.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use dedup_core::{LocalJudge, LocalJudgeParams, PairJudgement, PairVerdict};

use crate::learned::LearnedPairJudge;
use crate::{Error, Result};

/// The names [`PairJudgeChoice::from_name`] accepts.
pub const PAIR_JUDGE_NAMES: [&str; 3] = ["cosine", "local", "learned"];

/// Most semantic neighbours the local judge looks at per check.
pub const JUDGE_CANDIDATES: usize = 16;

/// What decides whether new content duplicates a close memory.
///
/// - [`PairJudgeChoice::Cosine`] (the default): a neighbour is a duplicate when its cosine
///   reaches the threshold.
/// - [`PairJudgeChoice::Learned`]: neighbours whose cosine reaches the model's candidate
///   floor are read with the new content by the model; a duplicate when the calibrated
///   P(duplicate) reaches the model's duplicate threshold (the namespace's cosine
///   threshold plays no part), **uncertain** in the band below it (never a duplicate,
///   reported), else related or unique. Without a usable model it decides like `Cosine`
///   and says so ([`PairDecision::fallback`]).
/// - [`PairJudgeChoice::Local`]: neighbours whose cosine reaches the lower of the judge's
///   `duplicate_floor` and the threshold are judged. At or above the threshold a pair is
///   a duplicate unless one of the judge's vetoing contrasts separates the texts (then it
///   is related); below it, in the gray band, it is a duplicate only when the judge says
///   so.
#[derive(Clone, Default, PartialEq)]
pub enum PairJudgeChoice {
    /// The cosine threshold alone.
    #[default]
    Cosine,
    /// The local judge, with its parameters.
    Local(Arc<LocalJudge>),
    /// The learned judge, with its model.
    Learned(LearnedPairJudge),
}

impl fmt::Debug for PairJudgeChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PairJudgeChoice::Cosine => f.write_str("Cosine"),
            PairJudgeChoice::Local(judge) => f.debug_tuple("Local").field(judge.params()).finish(),
            PairJudgeChoice::Learned(judge) => judge.fmt(f),
        }
    }
}

/// One neighbour to judge: a memory, its cosine with the new content, and its text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JudgeCandidate<'a, Id> {
    /// The memory (or node) the neighbour is.
    pub id: Id,
    /// Its cosine with the new content.
    pub cosine: f32,
    /// Its text, as the judge compares it.
    pub text: &'a str,
}

/// What [`PairJudgeChoice::decide`] found among the candidates.
#[derive(Debug, Clone, PartialEq)]
pub struct PairDecision<Id> {
    /// The duplicate: the candidate of highest cosine that the judge confirms.
    pub duplicate: Option<(Id, PairJudgement)>,
    /// Otherwise the verdict on the candidate of highest cosine (related or unique), when
    /// there was a candidate; with the learned judge, the uncertain candidate of highest
    /// probability comes first.
    pub nearest: Option<(Id, PairJudgement)>,
    /// Why the learned judge could not decide, when cosine decided in its place.
    pub fallback: Option<String>,
}

impl<Id: Copy> PairDecision<Id> {
    /// The judgement that explains the outcome: the duplicate's, else the nearest's.
    pub fn judgement(&self) -> Option<&PairJudgement> {
        self.duplicate.as_ref().or(self.nearest.as_ref()).map(|(_, j)| j)
    }
}

impl PairJudgeChoice {
    /// The local judge with the built-in parameters.
    pub fn local_builtin() -> PairJudgeChoice {
        PairJudgeChoice::Local(Arc::new(LocalJudge::default()))
    }

    /// The local judge with the parameters of the JSON file at `path`, or the built-in
    /// ones when `path` is `None`. `origin` names the setting in errors
    /// (`memdedup.toml: dedup.judge_params`, `--judge-params`).
    pub fn local(path: Option<&Path>, origin: &str) -> Result<PairJudgeChoice> {
        let Some(path) = path else { return Ok(PairJudgeChoice::local_builtin()) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::config(origin, format!("cannot read {}: {e}", path.display())))?;
        let params =
            LocalJudgeParams::parse(&text).map_err(|e| Error::config(origin, format!("{}: {e}", path.display())))?;
        Ok(PairJudgeChoice::Local(Arc::new(LocalJudge::new(params))))
    }

    /// The judge named `name` (`cosine` or `local`, any case); the local one with the
    /// parameters of `params` (see [`PairJudgeChoice::local`]). `origin` names the setting
    /// in errors; `params_origin` names the parameter file's.
    pub fn from_name(name: &str, origin: &str, params: Option<&Path>, params_origin: &str) -> Result<PairJudgeChoice> {
        match name.trim().to_ascii_lowercase().as_str() {
            "cosine" => Ok(PairJudgeChoice::Cosine),
            "local" => PairJudgeChoice::local(params, params_origin),
            // The model is attached by whoever opens the service (it knows the model
            // directory); until then the judge decides by cosine and says so.
            "learned" => Ok(PairJudgeChoice::Learned(LearnedPairJudge::default())),
            _ => Err(Error::config(origin, format!("expected \"learned\", \"cosine\" or \"local\", got {name:?}"))),
        }
    }

    /// `cosine`, `local` or `learned`, as outputs name the judge.
    pub fn name(&self) -> &'static str {
        match self {
            PairJudgeChoice::Cosine => PAIR_JUDGE_NAMES[0],
            PairJudgeChoice::Local(_) => PAIR_JUDGE_NAMES[1],
            PairJudgeChoice::Learned(_) => PAIR_JUDGE_NAMES[2],
        }
    }

    /// The learned judge, when it is the choice.
    pub fn learned(&self) -> Option<&LearnedPairJudge> {
        match self {
            PairJudgeChoice::Learned(judge) => Some(judge),
            _ => None,
        }
    }

    /// Whether the judge reads the neighbours' texts (the local judge, and the learned
    /// one when it has a model).
    pub fn reads_texts(&self) -> bool {
        match self {
            PairJudgeChoice::Cosine => false,
            PairJudgeChoice::Local(_) => true,
            PairJudgeChoice::Learned(judge) => judge.floor().is_some(),
        }
    }

    /// The local judge, when it is the choice.
    pub fn local_judge(&self) -> Option<&LocalJudge> {
        match self {
            PairJudgeChoice::Local(judge) => Some(judge),
            _ => None,
        }
    }

    /// The lowest cosine at which a neighbour is judged against `threshold`: the threshold
    /// itself for the cosine judge, the lower of it and the judge's `duplicate_floor` for
    /// the local one, the model's candidate floor for the learned one (the threshold when
    /// it has no model).
    pub fn floor(&self, threshold: f32) -> f32 {
        match self {
            PairJudgeChoice::Cosine => threshold,
            PairJudgeChoice::Local(judge) => judge.params().duplicate_floor.min(threshold),
            PairJudgeChoice::Learned(judge) => judge.floor().unwrap_or(threshold),
        }
    }

    /// How many neighbours a check looks at: the nearest only for the cosine judge (and
    /// the learned one without a model), the model's `candidates` for the learned one.
    pub fn candidates(&self) -> usize {
        match self {
            PairJudgeChoice::Cosine => 1,
            PairJudgeChoice::Local(_) => JUDGE_CANDIDATES,
            PairJudgeChoice::Learned(judge) if judge.floor().is_some() => judge.candidates(),
            PairJudgeChoice::Learned(_) => 1,
        }
    }

    /// Judges new content `new` against an existing text at `cosine`, with `threshold`
    /// as the veto line.
    ///
    /// The cosine judge: a duplicate at or above the threshold, else unique. The local
    /// judge: at or above the threshold, a duplicate unless a vetoing contrast makes the
    /// pair related; below it, the judge's own verdict.
    ///
    /// The learned judge runs its model on the one pair (CPU work: async callers with
    /// many pairs use [`PairJudgeChoice::decide`] on a blocking thread); without a model,
    /// or when it fails, the cosine verdict with the reason in front.
    pub fn judge_pair(&self, new: &str, existing: &str, cosine: f32, threshold: f32) -> PairJudgement {
        let judge = match self {
            PairJudgeChoice::Cosine => return cosine_judgement(cosine, threshold),
            PairJudgeChoice::Learned(learned) => {
                return match learned_judgements(learned, new, &[(existing, cosine)]) {
                    Ok(mut judged) => judged
                        .pop()
                        .map_or_else(|| cosine_judgement(cosine, threshold), |j| held_on_disagreement(j, threshold)),
                    Err(fallback) => {
                        let mut judgement = cosine_judgement(cosine, threshold);
                        judgement.reasons.insert(0, fallback);
                        judgement
                    }
                };
            }
            PairJudgeChoice::Local(judge) => judge,
        };
        let floor = judge.params().duplicate_floor;
        if cosine >= threshold && cosine < floor {
            // A threshold under the judge's floor: only a veto can keep the pair apart.
            let mut judgement = judge.judge(new, existing, floor);
            judgement.name_sides(NEW_SIDE, STORED_SIDE);
            judgement.cosine = cosine;
            if judgement.verdict == PairVerdict::Duplicate {
                let decided =
                    format!("cosine {cosine:.3} reaches the threshold {threshold:.2} and nothing sets the texts apart");
                match judgement.reasons.first_mut() {
                    Some(first) if !first.starts_with("the texts are the same") => *first = decided,
                    Some(_) => {}
                    None => judgement.reasons.push(decided),
                }
            }
            return judgement;
        }
        let mut judgement = judge.judge(new, existing, cosine);
        judgement.name_sides(NEW_SIDE, STORED_SIDE);
        judgement
    }

    /// Judges every candidate at or above [`PairJudgeChoice::floor`] and picks the
    /// duplicate of highest cosine the judge confirms (the first of equal cosines, in the
    /// candidates' order); without one, reports the verdict on the candidate of highest
    /// cosine. Candidates below the floor are ignored.
    pub fn decide<Id: Copy>(
        &self,
        new: &str,
        candidates: &[JudgeCandidate<'_, Id>],
        threshold: f32,
    ) -> PairDecision<Id> {
        if let PairJudgeChoice::Learned(learned) = self {
            return decide_learned(learned, new, candidates, threshold);
        }
        let floor = self.floor(threshold);
        let mut decision = PairDecision { duplicate: None, nearest: None, fallback: None };
        for candidate in candidates.iter().filter(|c| c.cosine >= floor) {
            let judgement = self.judge_pair(new, candidate.text, candidate.cosine, threshold);
            let slot = if judgement.is_duplicate() { &mut decision.duplicate } else { &mut decision.nearest };
            if slot.as_ref().is_none_or(|(_, best)| candidate.cosine > best.cosine) {
                *slot = Some((candidate.id, judgement));
            }
        }
        if decision.duplicate.is_some() {
            decision.nearest = None;
        }
        decision
    }
}

/// How a verdict's reasons name the texts it compared (the pair is read new text
/// first, but a review lists the older memory first).
const NEW_SIDE: &str = "the new text";
/// See [`NEW_SIDE`].
const STORED_SIDE: &str = "the stored text";

/// The cosine judge's verdict at `threshold`.
fn cosine_judgement(cosine: f32, threshold: f32) -> PairJudgement {
    let (verdict, reason) = if cosine >= threshold {
        (PairVerdict::Duplicate, format!("cosine {cosine:.3} reaches the threshold {threshold:.2}"))
    } else {
        (PairVerdict::Unique, format!("cosine {cosine:.3} is below the threshold {threshold:.2}"))
    };
    PairJudgement { verdict, cosine, reasons: vec![reason], contrasts: Vec::new(), probability: None, relation: None }
}

/// A learned verdict of related or unique on a pair whose cosine reaches the namespace's
/// `threshold` (where the cosine judge would call it a duplicate) becomes uncertain: the
/// two judges disagree, so the pair is kept and named for review rather than passed over.
fn held_on_disagreement(mut judgement: PairJudgement, threshold: f32) -> PairJudgement {
    if matches!(judgement.verdict, PairVerdict::Related | PairVerdict::Unique) && judgement.cosine >= threshold {
        judgement.verdict = PairVerdict::Uncertain;
        judgement.reasons.insert(
            0,
            format!(
                "cosine {:.3} reaches the threshold {threshold:.2} but the learned judge disagrees: not merged, to review",
                judgement.cosine
            ),
        );
    }
    judgement
}

/// The learned judge's verdicts on `new` against each (text, cosine); the error is the
/// sentence a result gives when cosine decides instead.
fn learned_judgements(
    learned: &LearnedPairJudge,
    new: &str,
    existing: &[(&str, f32)],
) -> std::result::Result<Vec<PairJudgement>, String> {
    let unusable = |why: &str| format!("the learned judge is unavailable ({why}); cosine decided");
    let scorer = learned.scorer().map_err(unusable)?;
    let settings = scorer.settings();
    let (judged, below): (Vec<usize>, Vec<usize>) =
        (0..existing.len()).partition(|&i| existing[i].1 >= settings.candidate_floor);
    let pairs: Vec<(&str, &str)> = judged.iter().map(|&i| (new, existing[i].0)).collect();
    let scores = if pairs.is_empty() { Vec::new() } else { scorer.scores(&pairs).map_err(|e| unusable(&e))? };
    if scores.len() != pairs.len() {
        return Err(unusable(&format!("the model gave {} results for {} pairs", scores.len(), pairs.len())));
    }
    let mut out: Vec<Option<PairJudgement>> = vec![None; existing.len()];
    for (&i, scores) in judged.iter().zip(&scores) {
        let mut judgement = settings.judge(new, existing[i].0, scores, existing[i].1);
        judgement.name_sides(NEW_SIDE, STORED_SIDE);
        out[i] = Some(judgement);
    }
    for i in below {
        out[i] = Some(settings.below_floor(new, existing[i].0, existing[i].1));
    }
    Ok(out.into_iter().flatten().collect())
}

/// [`PairJudgeChoice::decide`] for the learned judge: the duplicate of highest probability
/// (then cosine); else the uncertain candidate of highest probability, else the judged
/// candidate of highest cosine. Cosine decides (at `threshold`) when the model cannot.
fn decide_learned<Id: Copy>(
    learned: &LearnedPairJudge,
    new: &str,
    candidates: &[JudgeCandidate<'_, Id>],
    threshold: f32,
) -> PairDecision<Id> {
    let floor = learned.floor().unwrap_or(threshold);
    // Nothing for the model to read, and nothing cosine would call a duplicate in its
    // place: the verdict is known without loading the model (a check with no close
    // neighbour never pays for it).
    if candidates.iter().all(|c| c.cosine < floor.min(threshold)) {
        return PairDecision { duplicate: None, nearest: None, fallback: None };
    }
    let close: Vec<&JudgeCandidate<'_, Id>> = candidates.iter().filter(|c| c.cosine >= floor).collect();
    let texts: Vec<(&str, f32)> = close.iter().map(|c| (c.text, c.cosine)).collect();
    let judged = match learned_judgements(learned, new, &texts) {
        Ok(judged) => judged,
        Err(fallback) => {
            let mut decision = PairJudgeChoice::Cosine.decide(new, candidates, threshold);
            decision.fallback = Some(fallback);
            return decision;
        }
    };
    let key = |j: &PairJudgement| (j.probability.unwrap_or(0.0), j.cosine);
    let mut decision = PairDecision { duplicate: None, nearest: None, fallback: None };
    for (candidate, judgement) in close.iter().zip(judged) {
        let judgement = held_on_disagreement(judgement, threshold);
        if judgement.is_duplicate() {
            if decision.duplicate.as_ref().is_none_or(|(_, best)| key(&judgement) > key(best)) {
                decision.duplicate = Some((candidate.id, judgement));
            }
            continue;
        }
        let better = match &decision.nearest {
            None => true,
            Some((_, best)) => {
                match (judgement.verdict == PairVerdict::Uncertain, best.verdict == PairVerdict::Uncertain) {
                    (true, false) => true,
                    (false, true) => false,
                    (true, true) => key(&judgement) > key(best),
                    (false, false) => judgement.cosine > best.cosine,
                }
            }
        };
        if better {
            decision.nearest = Some((candidate.id, judgement));
        }
    }
    if decision.duplicate.is_some() {
        decision.nearest = None;
    }
    decision
}

#[cfg(test)]
mod tests;
