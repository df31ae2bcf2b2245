//! The local judge: decides whether two memories are duplicates, related or unique from
//! what the local model and the texts already give — their cosine and the contrast
//! signals of [`contrast`] — with no model call of its own.
//!
//! A pair is a duplicate when its cosine reaches [`LocalJudgeParams::duplicate_floor`]
//! and no vetoing contrast (other numbers, the opposite word, a negation, an added
//! condition, another entity) separates the texts; a vetoed or weaker pair is related
//! when its cosine reaches [`LocalJudgeParams::related_floor`], else unique. Texts equal
//! after [`normalize_content`] are always duplicates. Every verdict lists its reasons.
//!
//! The parameters are a small JSON file: the built-in one (`local_judge/params.json`) is
//! fitted on the tuning half of the labelled corpus by `cargo xtask fit-judge`.
//!
//! **Invariants:** the verdict is symmetric (`judge(a, b, c)` and `judge(b, a, c)` agree);
//! a text is a duplicate of itself; the verdict depends only on the two texts, the cosine
//! and the parameters.

use serde::{Deserialize, Serialize};

use crate::contrast::{CONTRAST_KINDS, Contrast, TextFeatures, contrast_features};
use crate::{Error, Relation, Result, normalize_content};

/// The built-in parameters, as `cargo xtask fit-judge` wrote them.
pub const BUILTIN_PARAMS: &str = include_str!("local_judge/params.json");

/// What the local judge needs to know: where its cosine bands start and which contrasts
/// veto a duplicate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalJudgeParams {
    /// The lowest cosine at which a pair can be a duplicate, in [0, 1].
    pub duplicate_floor: f32,
    /// The lowest cosine at which a pair is related, in [0, `duplicate_floor`].
    pub related_floor: f32,
    /// The contrast signals (names from [`CONTRAST_KINDS`]) that turn a duplicate into
    /// "related".
    pub vetoes: Vec<String>,
    /// How the parameters were obtained (free-form; written by the fitting command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted: Option<serde_json::Value>,
}

impl LocalJudgeParams {
    /// The built-in parameters.
    pub fn builtin() -> LocalJudgeParams {
        // The file is part of the crate and checked by a test.
        LocalJudgeParams::parse(BUILTIN_PARAMS).unwrap_or_else(|e| panic!("built-in judge parameters: {e}"))
    }

    /// Parses and checks a parameter file's text.
    pub fn parse(text: &str) -> Result<LocalJudgeParams> {
        let params: LocalJudgeParams =
            serde_json::from_str(text).map_err(|e| Error::InvalidJudgeParams(e.to_string()))?;
        params.validate()?;
        Ok(params)
    }

    /// Checks ranges and signal names.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidJudgeParams(m));
        if !(0.0..=1.0).contains(&self.duplicate_floor) {
            return bad(format!("duplicate_floor {} is outside [0, 1]", self.duplicate_floor));
        }
        if !(0.0..=self.duplicate_floor).contains(&self.related_floor) {
            return bad(format!(
                "related_floor {} is outside [0, duplicate_floor {}]",
                self.related_floor, self.duplicate_floor
            ));
        }
        if let Some(unknown) = self.vetoes.iter().find(|v| !CONTRAST_KINDS.contains(&v.as_str())) {
            return bad(format!("unknown veto {unknown:?} (known: {})", CONTRAST_KINDS.join(", ")));
        }
        Ok(())
    }
}

/// A verdict on a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairVerdict {
    /// The two texts say the same thing.
    Duplicate,
    /// Close, but not the same claim (or not close enough to be sure).
    Related,
    /// Unrelated.
    Unique,
    /// The learned judge is not sure enough to merge (its uncertain band): never merged
    /// automatically, reported for review.
    Uncertain,
}

impl PairVerdict {
    /// `duplicate`, `related`, `unique` or `uncertain`.
    pub fn as_str(self) -> &'static str {
        match self {
            PairVerdict::Duplicate => "duplicate",
            PairVerdict::Related => "related",
            PairVerdict::Unique => "unique",
            PairVerdict::Uncertain => "uncertain",
        }
    }
}

/// A verdict with what decided it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairJudgement {
    /// The verdict.
    pub verdict: PairVerdict,
    /// The cosine the judge was given.
    pub cosine: f32,
    /// Why, in words: the first reason decided the verdict.
    pub reasons: Vec<String>,
    /// The contrasts found between the texts (vetoing or not).
    pub contrasts: Vec<Contrast>,
    /// The learned judge's calibrated P(duplicate); `None` for the other judges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probability: Option<f32>,
    /// The relation the learned judge read; `None` for the other judges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relation: Option<Relation>,
}

impl PairJudgement {
    /// Whether the verdict is a duplicate.
    pub fn is_duplicate(&self) -> bool {
        self.verdict == PairVerdict::Duplicate
    }

    /// Names the two texts in the reasons that describe a contrast: `only the first text
    /// negates ("not")` becomes `only the new text negates ("not")`, `specifics differ: 5
    /// vs 1` becomes `specifics differ: 5 in the new text, 1 in the stored text` (with
    /// `first` = "the new text", `second` = "the stored text"). For verdicts shown beside
    /// the texts in another order than the judge read them, or without them.
    pub fn name_sides(&mut self, first: &str, second: &str) {
        for contrast in &self.contrasts {
            let (positional, named) = (contrast.to_string(), contrast.describe(first, second));
            for reason in &mut self.reasons {
                if reason.contains(&positional) {
                    *reason = reason.replace(&positional, &named);
                }
            }
        }
    }
}

/// The local judge: deterministic, cheap (a few microseconds per pair on top of the
/// embeddings), explainable.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalJudge {
    params: LocalJudgeParams,
}

impl Default for LocalJudge {
    fn default() -> Self {
        LocalJudge::new(LocalJudgeParams::builtin())
    }
}

impl LocalJudge {
    /// A judge with these parameters (already validated by [`LocalJudgeParams::parse`];
    /// [`LocalJudgeParams::validate`] them first when built by hand).
    pub fn new(params: LocalJudgeParams) -> LocalJudge {
        LocalJudge { params }
    }

    /// The judge's parameters.
    pub fn params(&self) -> &LocalJudgeParams {
        &self.params
    }

    /// Judges a pair of texts whose embeddings have cosine `cosine`.
    pub fn judge(&self, first: &str, second: &str, cosine: f32) -> PairJudgement {
        if cosine < self.params.related_floor && normalize_content(first) != normalize_content(second) {
            // Below the related floor the contrasts cannot change the verdict.
            return self.decide(cosine, Vec::new());
        }
        self.judge_features(&TextFeatures::new(first), &TextFeatures::new(second), cosine)
    }

    /// [`LocalJudge::judge`] from features computed once per text (for judging one text
    /// against many).
    pub fn judge_features(&self, first: &TextFeatures, second: &TextFeatures, cosine: f32) -> PairJudgement {
        if first.normalized == second.normalized {
            return PairJudgement {
                verdict: PairVerdict::Duplicate,
                cosine,
                reasons: vec!["the texts are the same after normalisation".to_owned()],
                contrasts: Vec::new(),
                probability: None,
                relation: None,
            };
        }
        // Below the related floor the contrasts cannot change the verdict.
        let contrasts = if cosine < self.params.related_floor { Vec::new() } else { contrast_features(first, second) };
        self.decide(cosine, contrasts)
    }

    /// The verdict on a pair of different texts from their cosine and their contrasts (as
    /// [`contrast`](crate::contrast()) finds them), with reasons. [`LocalJudge::judge`] is
    /// this plus the same-text rule and a shortcut below `related_floor`.
    pub fn decide(&self, cosine: f32, contrasts: Vec<Contrast>) -> PairJudgement {
        let p = &self.params;
        let verdict = self.verdict(cosine, &contrasts);
        let mut reasons = match verdict {
            PairVerdict::Unique => vec![format!("cosine {cosine:.3} is below {:.2}", p.related_floor)],
            PairVerdict::Related if cosine < p.duplicate_floor => {
                vec![format!("cosine {cosine:.3} is below {:.2}", p.duplicate_floor)]
            }
            // The local judge has no uncertain band; `verdict` never gives it.
            PairVerdict::Related | PairVerdict::Uncertain => {
                contrasts.iter().filter(|c| self.vetoes(c)).map(ToString::to_string).collect()
            }
            PairVerdict::Duplicate => {
                vec![format!("cosine {cosine:.3} reaches {:.2} and nothing sets the texts apart", p.duplicate_floor)]
            }
        };
        if verdict == PairVerdict::Duplicate {
            // Contrasts that do not veto are listed as noted, not as causes.
            reasons.extend(contrasts.iter().map(|c| format!("noted, not decisive: {c}")));
        }
        PairJudgement { verdict, cosine, reasons, contrasts, probability: None, relation: None }
    }

    /// Only the verdict of [`LocalJudge::decide`] (for sweeps over many parameters).
    pub fn verdict(&self, cosine: f32, contrasts: &[Contrast]) -> PairVerdict {
        let p = &self.params;
        if cosine < p.related_floor {
            PairVerdict::Unique
        } else if cosine < p.duplicate_floor || contrasts.iter().any(|c| self.vetoes(c)) {
            PairVerdict::Related
        } else {
            PairVerdict::Duplicate
        }
    }

    fn vetoes(&self, contrast: &Contrast) -> bool {
        self.params.vetoes.iter().any(|v| v == contrast.kind())
    }
}

#[cfg(test)]
mod tests;
