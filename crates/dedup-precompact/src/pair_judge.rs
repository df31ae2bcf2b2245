//! [`PairJudgeChoice`]: what decides whether a semantic neighbour is a duplicate — the
//! cosine threshold alone, or the local judge with the threshold as its veto line — and
//! [`PairJudgeChoice::decide`], the pure choice among judged candidates.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use dedup_core::{LocalJudge, LocalJudgeParams, PairJudgement, PairVerdict};

use crate::{Error, Result};

/// The names [`PairJudgeChoice::from_name`] accepts.
pub const PAIR_JUDGE_NAMES: [&str; 2] = ["cosine", "local"];

/// Most semantic neighbours the local judge looks at per check.
pub const JUDGE_CANDIDATES: usize = 16;

/// What decides whether new content duplicates a close memory.
///
/// - [`PairJudgeChoice::Cosine`] (the default): a neighbour is a duplicate when its cosine
///   reaches the threshold.
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
}

impl fmt::Debug for PairJudgeChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PairJudgeChoice::Cosine => f.write_str("Cosine"),
            PairJudgeChoice::Local(judge) => f.debug_tuple("Local").field(judge.params()).finish(),
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
    /// there was a candidate.
    pub nearest: Option<(Id, PairJudgement)>,
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
            "learned" => Err(Error::config(
                origin,
                "the learned pair judge decides `scan`, `eval` and `similarity` so far; the checker chain \
                 (check, add, capture, the hook, MCP, HTTP) takes \"cosine\" or \"local\""
                    .to_owned(),
            )),
            _ => Err(Error::config(origin, format!("expected \"cosine\" or \"local\", got {name:?}"))),
        }
    }

    /// `cosine` or `local`, as outputs name the judge.
    pub fn name(&self) -> &'static str {
        match self {
            PairJudgeChoice::Cosine => PAIR_JUDGE_NAMES[0],
            PairJudgeChoice::Local(_) => PAIR_JUDGE_NAMES[1],
        }
    }

    /// The local judge, when it is the choice.
    pub fn local_judge(&self) -> Option<&LocalJudge> {
        match self {
            PairJudgeChoice::Cosine => None,
            PairJudgeChoice::Local(judge) => Some(judge),
        }
    }

    /// The lowest cosine at which a neighbour is judged against `threshold`: the threshold
    /// itself for the cosine judge, the lower of it and the judge's `duplicate_floor` for
    /// the local one.
    pub fn floor(&self, threshold: f32) -> f32 {
        match self {
            PairJudgeChoice::Cosine => threshold,
            PairJudgeChoice::Local(judge) => judge.params().duplicate_floor.min(threshold),
        }
    }

    /// How many neighbours a check looks at: the nearest only for the cosine judge.
    pub fn candidates(&self) -> usize {
        match self {
            PairJudgeChoice::Cosine => 1,
            PairJudgeChoice::Local(_) => JUDGE_CANDIDATES,
        }
    }

    /// Judges new content `new` against an existing text at `cosine`, with `threshold`
    /// as the veto line.
    ///
    /// The cosine judge: a duplicate at or above the threshold, else unique. The local
    /// judge: at or above the threshold, a duplicate unless a vetoing contrast makes the
    /// pair related; below it, the judge's own verdict.
    pub fn judge_pair(&self, new: &str, existing: &str, cosine: f32, threshold: f32) -> PairJudgement {
        let Some(judge) = self.local_judge() else {
            let (verdict, reason) = if cosine >= threshold {
                (PairVerdict::Duplicate, format!("cosine {cosine:.3} reaches the threshold {threshold:.2}"))
            } else {
                (PairVerdict::Unique, format!("cosine {cosine:.3} is below the threshold {threshold:.2}"))
            };
            return PairJudgement {
                verdict,
                cosine,
                reasons: vec![reason],
                contrasts: Vec::new(),
                probability: None,
                relation: None,
            };
        };
        let floor = judge.params().duplicate_floor;
        if cosine >= threshold && cosine < floor {
            // A threshold under the judge's floor: only a veto can keep the pair apart.
            let mut judgement = judge.judge(new, existing, floor);
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
        judge.judge(new, existing, cosine)
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
        let floor = self.floor(threshold);
        let mut decision = PairDecision { duplicate: None, nearest: None };
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

#[cfg(test)]
mod tests;
