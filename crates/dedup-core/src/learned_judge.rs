//! The learned pair judge's decision: from a cross-encoder's relation logits and the
//! pair's cosine to a calibrated P(duplicate), a relation and a verdict.
//!
//! The model (run by dedup-embed) reads both texts together and scores four relations
//! ([`Relation`]). [`LearnedJudgeSettings`] (the `judge.json` that `cargo xtask
//! train-judge` writes beside the model) turns the duplicate log-odds and the cosine into
//! a probability with a logistic decision fitted on a calibration split, and holds the
//! bands: a duplicate at or above `duplicate_threshold` (chosen for precision >= 0.98 on
//! held-out data), **uncertain** between `uncertain_threshold` and it (never merged
//! automatically; reported for review), related or unique below. Pairs under
//! `candidate_floor` are never judged: they are unique by their cosine alone.
//!
//! **Invariants:** the decision depends only on the logits, the cosine and the settings;
//! a text is a duplicate of itself (texts equal after [`normalize_content`] are
//! duplicates without asking the model).

use serde::{Deserialize, Serialize};

use crate::{Contrast, Error, PairJudgement, PairVerdict, Result, TextFeatures, contrast_features, normalize_content};

/// The relations the model scores, in the order of its logits.
pub const RELATIONS: [Relation; 4] =
    [Relation::Unique, Relation::Related, Relation::Contradiction, Relation::Duplicate];

/// How two texts relate, as the learned judge reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// Different topics.
    Unique,
    /// The same topic, another claim (a condition, a narrower rule, another number...).
    Related,
    /// Claims that cannot both hold (an opposite, a negation).
    Contradiction,
    /// The same claim.
    Duplicate,
}

impl Relation {
    /// `unique`, `related`, `contradiction` or `duplicate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Relation::Unique => "unique",
            Relation::Related => "related",
            Relation::Contradiction => "contradiction",
            Relation::Duplicate => "duplicate",
        }
    }
}

/// The logistic decision over the model's duplicate log-odds and the cosine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// The inputs, in order: must be `["duplicate_log_odds", "cosine"]`.
    pub features: Vec<String>,
    /// One weight per feature.
    pub weights: Vec<f64>,
    /// The intercept.
    pub bias: f64,
}

/// What `cargo xtask train-judge` writes beside the model (`judge.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearnedJudgeSettings {
    /// The file format, 1.
    pub format: u32,
    /// The model file's name.
    pub model_file: String,
    /// The model file's sha256 (lowercase hex).
    pub model_sha256: String,
    /// `int8` or `fp32`.
    pub weights: String,
    /// Most tokens of a pair (both texts, truncated longest first).
    pub max_len: usize,
    /// How a pair is ordered before it is encoded (free-form, for people).
    pub order: String,
    /// The relation of each logit; must be `unique, related, contradiction, duplicate`.
    pub relations: Vec<Relation>,
    /// The calibrated decision.
    pub decision: Decision,
    /// Pairs whose cosine is below this are not judged (unique).
    pub candidate_floor: f32,
    /// P(duplicate) at or above this is a duplicate.
    pub duplicate_threshold: f32,
    /// P(duplicate) at or above this (and below `duplicate_threshold`) is uncertain.
    pub uncertain_threshold: f32,
    /// The precision `duplicate_threshold` was chosen for on the calibration split.
    pub precision_target: f64,
    /// The training seed.
    pub seed: u64,
    /// The checkpoint the model was trained from.
    pub base: String,
}

impl LearnedJudgeSettings {
    /// Parses and checks a `judge.json`.
    pub fn parse(text: &str) -> Result<LearnedJudgeSettings> {
        let settings: LearnedJudgeSettings =
            serde_json::from_str(text).map_err(|e| Error::InvalidJudgeParams(e.to_string()))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks the format, the relations, the decision's shape and the bands.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidJudgeParams(m));
        if self.format != 1 {
            return bad(format!("format {} is not 1", self.format));
        }
        if self.relations != RELATIONS {
            return bad(format!("relations {:?} are not unique, related, contradiction, duplicate", self.relations));
        }
        if self.decision.features != ["duplicate_log_odds", "cosine"] || self.decision.weights.len() != 2 {
            return bad("the decision must weigh exactly duplicate_log_odds and cosine".into());
        }
        if !self.decision.weights.iter().chain([&self.decision.bias]).all(|w| w.is_finite()) {
            return bad("the decision's weights must be finite".into());
        }
        if !(0.0..=1.0).contains(&self.candidate_floor) {
            return bad(format!("candidate_floor {} is outside [0, 1]", self.candidate_floor));
        }
        if !(0.0..=1.0).contains(&self.duplicate_threshold)
            || !(0.0..=self.duplicate_threshold).contains(&self.uncertain_threshold)
        {
            return bad(format!(
                "need 0 <= uncertain_threshold ({}) <= duplicate_threshold ({}) <= 1",
                self.uncertain_threshold, self.duplicate_threshold
            ));
        }
        if self.max_len < 8 {
            return bad(format!("max_len {} is too short", self.max_len));
        }
        Ok(())
    }

    /// The calibrated P(duplicate) of a pair with these relation logits and cosine.
    pub fn probability(&self, logits: &[f32; 4], cosine: f32) -> f32 {
        let w = &self.decision.weights;
        let z = w[0] * duplicate_log_odds(logits) + w[1] * f64::from(cosine) + self.decision.bias;
        (1.0 / (1.0 + (-z).exp())) as f32
    }

    /// The verdict on two texts from the model's logits for them and their cosine, with
    /// reasons; the text contrasts found are listed as explanation, never as causes.
    pub fn judge(&self, first: &str, second: &str, logits: &[f32; 4], cosine: f32) -> PairJudgement {
        let (a, b) = (TextFeatures::new(first), TextFeatures::new(second));
        if a.normalized == b.normalized {
            return PairJudgement {
                verdict: PairVerdict::Duplicate,
                cosine,
                reasons: vec!["the texts are the same after normalisation".to_owned()],
                contrasts: Vec::new(),
                probability: Some(1.0),
                relation: Some(Relation::Duplicate),
            };
        }
        self.decide(logits, cosine, contrast_features(&a, &b))
    }

    /// The verdict of a pair below the candidate floor: unique, without the model.
    pub fn below_floor(&self, first: &str, second: &str, cosine: f32) -> PairJudgement {
        if normalize_content(first) == normalize_content(second) {
            return self.judge(first, second, &[0.0; 4], cosine);
        }
        PairJudgement {
            verdict: PairVerdict::Unique,
            cosine,
            reasons: vec![format!("cosine {cosine:.3} is below the candidate floor {:.2}", self.candidate_floor)],
            contrasts: Vec::new(),
            probability: None,
            relation: Some(Relation::Unique),
        }
    }

    /// The verdict from logits, cosine and the contrasts found (explanation only).
    pub fn decide(&self, logits: &[f32; 4], cosine: f32, contrasts: Vec<Contrast>) -> PairJudgement {
        let p = self.probability(logits, cosine);
        let relation = strongest_relation(logits);
        let (verdict, mut reasons) = if p >= self.duplicate_threshold {
            (
                PairVerdict::Duplicate,
                vec![format!(
                    "learned judge: P(duplicate) {p:.3} reaches {:.3} (cosine {cosine:.3})",
                    self.duplicate_threshold
                )],
            )
        } else if p >= self.uncertain_threshold {
            (
                PairVerdict::Uncertain,
                vec![format!(
                    "learned judge: P(duplicate) {p:.3} is in the uncertain band [{:.3}, {:.3}): not merged, to review",
                    self.uncertain_threshold, self.duplicate_threshold
                )],
            )
        } else {
            let verdict = if relation == Relation::Unique { PairVerdict::Unique } else { PairVerdict::Related };
            let reads = match relation {
                Relation::Contradiction => "they contradict each other",
                Relation::Related => "same topic, another claim",
                Relation::Unique => "different topics",
                Relation::Duplicate => "close, but not sure enough",
            };
            (
                verdict,
                vec![format!(
                    "learned judge: P(duplicate) {p:.3} is below {:.3}; {reads} (cosine {cosine:.3})",
                    self.uncertain_threshold
                )],
            )
        };
        reasons.extend(contrasts.iter().map(|c| format!("noted: {c}")));
        PairJudgement { verdict, cosine, reasons, contrasts, probability: Some(p), relation: Some(relation) }
    }
}

/// What runs the learned judge's model: its settings and the relation logits of pairs of
/// texts. dedup-embed's `PairJudgeModel` is the implementation; the checker chain and the
/// scans take any (a test double, another runtime).
///
/// `logits` is CPU-heavy: async callers run it on a blocking thread.
pub trait PairScorer: Send + Sync + std::fmt::Debug {
    /// The judge's calibrated settings.
    fn settings(&self) -> &LearnedJudgeSettings;
    /// The relation logits of each pair, in input order; the error says why the model
    /// could not run.
    fn logits(&self, pairs: &[(&str, &str)]) -> std::result::Result<Vec<[f32; 4]>, String>;
}

/// log P(duplicate) - log P(not duplicate) from the four relation logits.
fn duplicate_log_odds(logits: &[f32; 4]) -> f64 {
    let others = [logits[0], logits[1], logits[2]].map(f64::from);
    let max = others.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + others.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
    f64::from(logits[3]) - lse
}

/// The relation with the highest logit (the first on ties).
fn strongest_relation(logits: &[f32; 4]) -> Relation {
    let mut best = 0;
    for i in 1..4 {
        if logits[i] > logits[best] {
            best = i;
        }
    }
    RELATIONS[best]
}

#[cfg(test)]
mod tests;
