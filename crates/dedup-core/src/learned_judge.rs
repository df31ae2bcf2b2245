//! The learned pair judge's decision: from a pair's learned scores and its cosine to a
//! calibrated P(duplicate), a relation and a verdict.
//!
//! The models (run by dedup-embed) give [`PairScores`]: a fine-tuned embedder's cosine
//! (`tuned_cosine`), and, when the judge has one, a cross-encoder's logits over four
//! relations ([`Relation`]) read from both texts together. [`LearnedJudgeSettings`] (the
//! `judge.json` that `cargo xtask train-judge` writes beside the models) names the
//! features its decision weighs, turns them into a probability with a logistic decision
//! fitted on a calibration split, and holds the
//! bands: a duplicate at or above `duplicate_threshold` (chosen for precision >= 0.98 on
//! held-out data), **uncertain** between `uncertain_threshold` and it (never merged
//! automatically; reported for review), related or unique below. Pairs under
//! `candidate_floor` are never judged: they are unique by their cosine alone.
//!
//! **Invariants:** the decision depends only on the scores, the cosine and the settings;
//! a text is a duplicate of itself (texts equal after [`normalize_content`], or with the
//! same [`wording`](crate::wording), are duplicates without asking the model).

use serde::{Deserialize, Serialize};

use crate::{
    Contrast, Error, PairJudgement, PairVerdict, Result, TextFeatures, contrast_features, normalize_content,
    same_wording,
};

/// Without a cross-encoder, a pair below the uncertain band at this cosine or more reads
/// as related (same topic, another claim), under it as unique.
pub const RELATED_COSINE: f32 = 0.5;

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

/// The nearest neighbours judged per text when `judge.json` does not say
/// ([`LearnedJudgeSettings::candidates`]).
pub const DEFAULT_CANDIDATES: usize = 8;

/// The most nearest neighbours a `judge.json` may ask for per text.
pub const MAX_CANDIDATES: usize = 64;

fn default_candidates() -> usize {
    DEFAULT_CANDIDATES
}

/// The features a decision may weigh: the cross-encoder's duplicate log-odds, the
/// embedder's cosine (the one stored vectors give), and the fine-tuned embedder's cosine.
pub const FEATURES: [&str; 3] = ["duplicate_log_odds", "cosine", "tuned_cosine"];

/// The weights forms a judge's models may have (`weights` in `judge.json`).
pub const WEIGHTS_FORMS: [&str; 3] = ["fp32", "int8", "int8-dynamic"];

/// What the judge's models say about one pair of texts.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PairScores {
    /// The cross-encoder's relation logits, in [`RELATIONS`] order (when the judge has a
    /// cross-encoder).
    pub logits: Option<[f32; 4]>,
    /// The cosine of the two texts under the fine-tuned embedder (when the judge has one).
    pub tuned_cosine: Option<f32>,
}

/// The logistic decision over the pair's features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// The inputs, in order, each one of [`FEATURES`] at most once.
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
    /// The cross-encoder's file name, when the decision weighs `duplicate_log_odds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_file: Option<String>,
    /// The cross-encoder's sha256 (lowercase hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_sha256: Option<String>,
    /// The fine-tuned embedder's file name, when the decision weighs `tuned_cosine`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedder_file: Option<String>,
    /// The fine-tuned embedder's sha256 (lowercase hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedder_sha256: Option<String>,
    /// Most tokens of one text for the fine-tuned embedder (the rest is cut).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedder_max_len: Option<usize>,
    /// How the models hold and compute their weights, one of [`WEIGHTS_FORMS`]: `fp32`;
    /// `int8` (int8 weights, f32 maths); `int8-dynamic` (int8 maths, the activations
    /// quantised with scales computed over each inference, so such a model reads one pair
    /// or text at a time: see [`LearnedJudgeSettings::reads_one_at_a_time`]).
    pub weights: String,
    /// Most tokens of a pair for the cross-encoder (both texts, truncated longest first).
    pub max_len: usize,
    /// How a pair is ordered before it is encoded (free-form, for people).
    pub order: String,
    /// The relation of each logit; must be `unique, related, contradiction, duplicate`.
    pub relations: Vec<Relation>,
    /// The calibrated decision.
    pub decision: Decision,
    /// Pairs whose cosine is below this are not judged (unique).
    pub candidate_floor: f32,
    /// How many nearest neighbours above `candidate_floor` are judged per text (each costs
    /// one model pair): chosen on the calibration data, where the duplicates a check or a
    /// scan finds are nearly always among a text's few nearest and the farther neighbours
    /// the judge merges are mostly false. [`DEFAULT_CANDIDATES`] when the file predates it.
    #[serde(default = "default_candidates")]
    pub candidates: usize,
    /// P(duplicate) at or above this is a duplicate.
    pub duplicate_threshold: f32,
    /// P(duplicate) at or above this (and below `duplicate_threshold`) is uncertain.
    pub uncertain_threshold: f32,
    /// The precision `duplicate_threshold` was chosen for on the calibration split.
    pub precision_target: f64,
    /// How `duplicate_threshold` was chosen, in words (when the precision target was out
    /// of reach, what was done instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_rule: Option<String>,
    /// The contrasts (of [`crate::CONTRAST_KINDS`]) that hold a pair reaching
    /// `duplicate_threshold` for review instead of merging it: chosen on the calibration
    /// data where pairs showing them are clearly less often duplicates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub review_contrasts: Vec<String>,
    /// The training seed.
    pub seed: u64,
    /// The checkpoint the model was trained from.
    pub base: String,
}

/// The reason the learned judge gives for a pair of the same [`wording`](crate::wording).
pub const SAME_WORDING_REASON: &str =
    "the texts have the same words, numbers and signs in the same order; only case, punctuation or markup differ";

/// Whether the learned judge takes two texts as duplicates without its models: the same
/// text after [`normalize_content`], or the same [`wording`](crate::wording) (only case,
/// punctuation or markup differ).
pub fn same_without_model(first: &str, second: &str) -> bool {
    normalize_content(first) == normalize_content(second) || same_wording(first, second)
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
        let features = &self.decision.features;
        if features.is_empty()
            || features.iter().any(|f| !FEATURES.contains(&f.as_str()))
            || (1..features.len()).any(|i| features[..i].contains(&features[i]))
            || self.decision.weights.len() != features.len()
        {
            return bad(format!(
                "the decision must weigh distinct features among {} with one weight each, got {features:?} and {} weights",
                FEATURES.join(", "),
                self.decision.weights.len()
            ));
        }
        if self.uses("duplicate_log_odds") != (self.model_file.is_some() && self.model_sha256.is_some()) {
            return bad(
                "model_file and model_sha256 are needed exactly when the decision weighs duplicate_log_odds".into()
            );
        }
        if self.uses("tuned_cosine")
            != (self.embedder_file.is_some() && self.embedder_sha256.is_some() && self.embedder_max_len.is_some())
        {
            return bad(
                "embedder_file, embedder_sha256 and embedder_max_len are needed exactly when the decision weighs tuned_cosine"
                    .into(),
            );
        }
        if self.embedder_max_len.is_some_and(|n| n < 8) {
            return bad(format!("embedder_max_len {:?} is too short", self.embedder_max_len));
        }
        if !self.decision.weights.iter().chain([&self.decision.bias]).all(|w| w.is_finite()) {
            return bad("the decision's weights must be finite".into());
        }
        if !(0.0..=1.0).contains(&self.candidate_floor) {
            return bad(format!("candidate_floor {} is outside [0, 1]", self.candidate_floor));
        }
        if !(1..=MAX_CANDIDATES).contains(&self.candidates) {
            return bad(format!("candidates {} is outside [1, {MAX_CANDIDATES}]", self.candidates));
        }
        if !(0.0..=1.0).contains(&self.duplicate_threshold)
            || !(0.0..=self.duplicate_threshold).contains(&self.uncertain_threshold)
        {
            return bad(format!(
                "need 0 <= uncertain_threshold ({}) <= duplicate_threshold ({}) <= 1",
                self.uncertain_threshold, self.duplicate_threshold
            ));
        }
        if let Some(kind) = self.review_contrasts.iter().find(|k| !crate::CONTRAST_KINDS.contains(&k.as_str())) {
            return bad(format!(
                "review_contrasts names {kind:?}, which is not one of {}",
                crate::CONTRAST_KINDS.join(", ")
            ));
        }
        if !WEIGHTS_FORMS.contains(&self.weights.as_str()) {
            return bad(format!("weights {:?} is not one of {}", self.weights, WEIGHTS_FORMS.join(", ")));
        }
        if self.max_len < 8 {
            return bad(format!("max_len {} is too short", self.max_len));
        }
        Ok(())
    }

    /// A short name of the judge's models: the first 16 hex digits of each one's sha256
    /// (embedder, then cross-encoder), joined by `+`.
    pub fn models_fingerprint(&self) -> String {
        [&self.embedder_sha256, &self.model_sha256]
            .into_iter()
            .flatten()
            .map(|sha| sha.chars().take(16).collect::<String>())
            .collect::<Vec<_>>()
            .join("+")
    }

    /// Whether the decision weighs `feature` (one of [`FEATURES`]).
    pub fn uses(&self, feature: &str) -> bool {
        self.decision.features.iter().any(|f| f == feature)
    }

    /// Whether the models must read one pair (or text) per inference: a dynamic int8
    /// model scales its activations by what the whole inference holds, so batching would
    /// make a pair's verdict depend on the pairs judged with it.
    pub fn reads_one_at_a_time(&self) -> bool {
        self.weights == "int8-dynamic"
    }

    /// Whether the judge runs a cross-encoder (its decision weighs `duplicate_log_odds`).
    pub fn uses_cross_encoder(&self) -> bool {
        self.uses("duplicate_log_odds")
    }

    /// Whether the judge runs a fine-tuned embedder (its decision weighs `tuned_cosine`).
    pub fn uses_embedder(&self) -> bool {
        self.uses("tuned_cosine")
    }

    /// The calibrated P(duplicate) of a pair with these scores and cosine. A feature the
    /// scores lack counts as 0 (a scorer always gives what the settings use).
    pub fn probability(&self, scores: &PairScores, cosine: f32) -> f32 {
        let value = |feature: &str| match feature {
            "duplicate_log_odds" => scores.logits.as_ref().map_or(0.0, duplicate_log_odds),
            "cosine" => f64::from(cosine),
            _ => f64::from(scores.tuned_cosine.unwrap_or(0.0)),
        };
        let z = self.decision.features.iter().zip(&self.decision.weights).map(|(f, w)| w * value(f)).sum::<f64>()
            + self.decision.bias;
        (1.0 / (1.0 + (-z).exp())) as f32
    }

    /// The verdict on two texts from the models' scores for them and their cosine, with
    /// reasons; the text contrasts found are listed as explanation, and those of
    /// [`LearnedJudgeSettings::review_contrasts`] hold a duplicate for review.
    pub fn judge(&self, first: &str, second: &str, scores: &PairScores, cosine: f32) -> PairJudgement {
        let (a, b) = (TextFeatures::new(first), TextFeatures::new(second));
        let same = if a.normalized == b.normalized {
            Some("the texts are the same after normalisation")
        } else if same_wording(first, second) {
            Some(SAME_WORDING_REASON)
        } else {
            None
        };
        if let Some(reason) = same {
            return PairJudgement {
                verdict: PairVerdict::Duplicate,
                cosine,
                reasons: vec![reason.to_owned()],
                contrasts: Vec::new(),
                probability: Some(1.0),
                relation: Some(Relation::Duplicate),
            };
        }
        self.decide(scores, cosine, contrast_features(&a, &b))
    }

    /// The verdict of a pair below the candidate floor: unique, without the model.
    pub fn below_floor(&self, first: &str, second: &str, cosine: f32) -> PairJudgement {
        if same_without_model(first, second) {
            return self.judge(first, second, &PairScores::default(), cosine);
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

    /// The verdict from the scores, the cosine and the contrasts found: explanation, except
    /// that one of [`LearnedJudgeSettings::review_contrasts`] holds a duplicate for review
    /// (uncertain).
    ///
    /// Below the uncertain band the relation is the cross-encoder's when the judge has one;
    /// without one, a pair at cosine [`RELATED_COSINE`] or more is related, else unique.
    pub fn decide(&self, scores: &PairScores, cosine: f32, contrasts: Vec<Contrast>) -> PairJudgement {
        let p = self.probability(scores, cosine);
        let tuned = scores.tuned_cosine.map(|t| format!(", tuned cosine {t:.3}")).unwrap_or_default();
        let relation = match &scores.logits {
            Some(logits) => strongest_relation(logits),
            None if p >= self.duplicate_threshold => Relation::Duplicate,
            None if cosine >= RELATED_COSINE => Relation::Related,
            None => Relation::Unique,
        };
        let held = contrasts.iter().find(|c| self.review_contrasts.iter().any(|k| k == c.kind()));
        let (verdict, mut reasons) = if p >= self.duplicate_threshold {
            match held {
                None => (
                    PairVerdict::Duplicate,
                    vec![format!(
                        "learned judge: P(duplicate) {p:.3} reaches {:.3} (cosine {cosine:.3}{tuned})",
                        self.duplicate_threshold
                    )],
                ),
                Some(contrast) => (
                    PairVerdict::Uncertain,
                    vec![format!(
                        "learned judge: P(duplicate) {p:.3} reaches {:.3}, but {contrast}: not merged, to review (cosine {cosine:.3}{tuned})",
                        self.duplicate_threshold
                    )],
                ),
            }
        } else if p >= self.uncertain_threshold {
            (
                PairVerdict::Uncertain,
                vec![format!(
                    "learned judge: P(duplicate) {p:.3} is in the uncertain band [{:.3}, {:.3}): not merged, to review (cosine {cosine:.3}{tuned})",
                    self.uncertain_threshold, self.duplicate_threshold
                )],
            )
        } else {
            let verdict = if relation == Relation::Unique { PairVerdict::Unique } else { PairVerdict::Related };
            let reads = match (relation, scores.logits.is_some()) {
                (Relation::Contradiction, _) => "they contradict each other",
                (Relation::Related, true) => "same topic, another claim",
                (Relation::Related, false) => "close, but another claim",
                (Relation::Unique, _) => "different topics",
                (Relation::Duplicate, _) => "close, but not sure enough",
            };
            (
                verdict,
                vec![format!(
                    "learned judge: P(duplicate) {p:.3} is below {:.3}; {reads} (cosine {cosine:.3}{tuned})",
                    self.uncertain_threshold
                )],
            )
        };
        reasons.extend(contrasts.iter().map(|c| format!("noted: {c}")));
        PairJudgement { verdict, cosine, reasons, contrasts, probability: Some(p), relation: Some(relation) }
    }
}

/// What runs the learned judge's models: its settings and the scores of pairs of texts.
/// dedup-embed's `PairJudgeModel` is the implementation; the checker chain and the scans
/// take any (a test double, another runtime).
///
/// `scores` is CPU-heavy: async callers run it on a blocking thread.
pub trait PairScorer: Send + Sync + std::fmt::Debug {
    /// The judge's calibrated settings.
    fn settings(&self) -> &LearnedJudgeSettings;
    /// The scores of each pair, in input order, with every feature the settings use; the
    /// error says why a model could not run.
    fn scores(&self, pairs: &[(&str, &str)]) -> std::result::Result<Vec<PairScores>, String>;
    /// Gets ready for calls of many pairs (a long-lived process calls it once, off the
    /// request path); the default does nothing.
    fn prepare_for_many(&self) {}
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
