//! `memdedup eval`: how well the grouping matches a labelled file of memories.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, bail};
use memdedup::crates::core::{
    CONTRAST_KINDS, Contrast, Edge, Labelled, LearnedJudgeSettings, Linkage, LocalJudge, LocalJudgeParams,
    PairJudgement, PairScore, PairVerdict, SCORE_TOLERANCE, TextFeatures, contrast_features, group_confirmed,
    learned_candidates, score_grouping,
};
use memdedup::{Embedding, Threshold};
use serde_json::{Value, json};

use crate::cli::{EvalArgs, GlobalArgs, LinkageArg, PairJudgeArg};
use crate::input::{display_name, read_text};
use crate::judging::{linkage, linkage_name};
use crate::labelled::{Item, parse_labelled};
use crate::output::{emit, snippet};

/// The thresholds evaluated when none is given.
const DEFAULT_THRESHOLDS: [f64; 6] = [0.65, 0.70, 0.75, 0.80, 0.85, 0.90];

pub(crate) async fn run(global: &GlobalArgs, args: &EvalArgs) -> Result<()> {
    let name = display_name(&args.file);
    let items = parse_labelled(&read_text(&args.file)?, &name)?;
    if args.sweep && (args.judge != PairJudgeArg::Local || !args.json) {
        bail!("--sweep needs --judge local and --json");
    }
    let thresholds: Vec<Threshold> = if args.threshold.is_empty() {
        DEFAULT_THRESHOLDS.iter().map(|&t| Threshold::new(t)).collect::<Result<_, _>>()?
    } else {
        args.threshold.iter().map(|&t| Threshold::new(t)).collect::<Result<_, _>>()?
    };
    let local = crate::judging::local_judge(args.judge, args.judge_params.as_deref())?;
    let learned = match args.judge {
        PairJudgeArg::Learned => Some(crate::open::pair_judge(global)?),
        _ => None,
    };
    let (model, embeddings) = crate::labelled::embed_items(global, &items, &name).await?;
    let labels: Vec<Labelled> = items.iter().map(|i| i.label.clone()).collect();
    let settings: Vec<Setting> = match args.judge {
        PairJudgeArg::Cosine => thresholds
            .iter()
            .map(|&t| Setting::Cosine { threshold: t, linkage: linkage(args.linkage.unwrap_or(LinkageArg::Single)) })
            .collect(),
        PairJudgeArg::Local if args.sweep => sweep_settings(linkage(args.linkage.unwrap_or(LinkageArg::Complete))),
        PairJudgeArg::Local => vec![Setting::Local {
            judge: local.unwrap_or_default(),
            linkage: linkage(args.linkage.unwrap_or(LinkageArg::Complete)),
        }],
        PairJudgeArg::Learned => vec![Setting::Learned {
            settings: Box::new(
                learned.as_ref().map(|m| m.settings().clone()).ok_or_else(|| anyhow::anyhow!("no pair judge"))?,
            ),
            linkage: linkage(args.linkage.unwrap_or(LinkageArg::Complete)),
        }],
    };
    let floor = settings.iter().map(Setting::floor).fold(1.0f32, f32::min);
    let mut pairs = PairTable::new(&items, &embeddings, floor);
    if let Some(model) = learned {
        pairs.judge_learned(&items, model).await?;
    }
    let mut results = Vec::new();
    for setting in settings {
        let (groups, refused) = pairs.group(&setting)?;
        let score = score_grouping(&labels, &groups);
        let uncertain = pairs.uncertain(&setting);
        results.push(Outcome { setting, score, refused, uncertain });
    }
    let summary = Summary { name: &name, model: &model, items: &items, pairs: &pairs };
    if args.json {
        emit(&format!("{}\n", summary.json(&results, args.worst)))
    } else {
        emit(&summary.human(&results, args.worst))
    }
}

/// How pairs are judged and grouped in one row of the table.
enum Setting {
    /// A duplicate is a pair whose cosine reaches the threshold.
    Cosine { threshold: Threshold, linkage: Linkage },
    /// The local judge decides.
    Local { judge: LocalJudge, linkage: Linkage },
    /// The learned pair judge decides (its verdicts are in [`PairInfo::learned`]).
    Learned { settings: Box<LearnedJudgeSettings>, linkage: Linkage },
}

impl Setting {
    /// The lowest cosine at which this setting can confirm a pair of different texts.
    fn floor(&self) -> f32 {
        match self {
            Setting::Cosine { threshold, .. } => threshold.as_f32() - SCORE_TOLERANCE,
            Setting::Local { judge, .. } => judge.params().related_floor.min(judge.params().duplicate_floor),
            Setting::Learned { settings, .. } => settings.candidate_floor,
        }
    }

    fn linkage(&self) -> Linkage {
        match self {
            Setting::Cosine { linkage, .. } | Setting::Local { linkage, .. } | Setting::Learned { linkage, .. } => {
                *linkage
            }
        }
    }

    /// Whether the setting confirms `pair` as a duplicate.
    fn confirms(&self, pair: &PairInfo) -> bool {
        match self {
            Setting::Cosine { threshold, .. } => pair.cosine >= threshold.as_f32() - SCORE_TOLERANCE,
            Setting::Local { judge, .. } => {
                pair.same_text || judge.verdict(pair.cosine, &pair.contrasts) == PairVerdict::Duplicate
            }
            Setting::Learned { .. } => {
                pair.same_text || pair.same_wording || pair.learned.as_ref().is_some_and(PairJudgement::is_duplicate)
            }
        }
    }

    /// Why the setting decided as it did on `pair` (`None`: the pair was not compared,
    /// being in different namespaces or below every floor).
    fn reasons(&self, pair: Option<&PairInfo>) -> Vec<String> {
        let Some(pair) = pair else { return vec!["below the lowest cosine compared".to_owned()] };
        match self {
            Setting::Cosine { threshold, .. } => {
                let relation = if self.confirms(pair) { "reaches" } else { "is below" };
                vec![format!("cosine {:.3} {relation} {}", pair.cosine, threshold.get())]
            }
            Setting::Local { judge, .. } if pair.same_text => {
                vec!["the texts are the same after normalisation".to_owned()]
            }
            Setting::Local { judge, .. } => judge.decide(pair.cosine, pair.contrasts.clone()).reasons,
            Setting::Learned { .. } if pair.same_text => vec!["the texts are the same after normalisation".to_owned()],
            Setting::Learned { .. } if pair.same_wording && pair.learned.is_none() => {
                vec![memdedup::crates::core::SAME_WORDING_REASON.to_owned()]
            }
            Setting::Learned { settings, .. } => match &pair.learned {
                Some(judgement) => judgement.reasons.clone(),
                None if pair.cosine < settings.candidate_floor => vec![format!(
                    "cosine {:.3} is below the candidate floor {:.2}",
                    pair.cosine, settings.candidate_floor
                )],
                None => vec![format!(
                    "not judged: neither memory is among the other's {} nearest (cosine {:.3})",
                    settings.candidates, pair.cosine
                )],
            },
        }
    }

    fn json(&self) -> Value {
        match self {
            Setting::Cosine { threshold, linkage } => {
                json!({"judge": "cosine", "threshold": threshold.get(), "linkage": linkage_name(*linkage)})
            }
            Setting::Local { judge, linkage } => json!({
                "judge": "local", "duplicate_floor": judge.params().duplicate_floor,
                "related_floor": judge.params().related_floor, "vetoes": judge.params().vetoes,
                "linkage": linkage_name(*linkage),
            }),
            Setting::Learned { settings, linkage } => json!({
                "judge": "learned", "candidate_floor": settings.candidate_floor, "candidates": settings.candidates,
                "duplicate_threshold": settings.duplicate_threshold,
                "uncertain_threshold": settings.uncertain_threshold, "linkage": linkage_name(*linkage),
            }),
        }
    }

    fn label(&self) -> String {
        match self {
            Setting::Cosine { threshold, .. } => format!("{:.2}", threshold.get()),
            Setting::Local { judge, .. } => format!("local {:.2}", judge.params().duplicate_floor),
            Setting::Learned { settings, .. } => format!("P>={:.2}", settings.duplicate_threshold),
        }
    }
}

/// The grid `--sweep` evaluates: duplicate floors 0.30 to 0.80 by 0.05, each with every
/// set of vetoes.
fn sweep_settings(linkage: Linkage) -> Vec<Setting> {
    let mut settings = Vec::new();
    for step in 0..11u8 {
        let duplicate_floor = 0.30 + 0.05 * f32::from(step);
        for mask in 0..(1u32 << CONTRAST_KINDS.len()) {
            let vetoes = CONTRAST_KINDS
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, k)| (*k).to_owned())
                .collect();
            let params =
                LocalJudgeParams { duplicate_floor, related_floor: duplicate_floor.min(0.3), vetoes, fitted: None };
            settings.push(Setting::Local { judge: LocalJudge::new(params), linkage });
        }
    }
    settings
}

/// One row of the table.
struct Outcome {
    setting: Setting,
    score: PairScore,
    /// Links the linkage refused.
    refused: usize,
    /// Pairs in the learned judge's uncertain band (never merged; to review).
    uncertain: usize,
}

/// A compared pair: same namespace, cosine at least the lowest floor of the settings.
struct PairInfo {
    cosine: f32,
    same_text: bool,
    /// The same wording (`dedup_core::wording`; only case, punctuation or markup differ): the
    /// learned judge takes the pair as a duplicate without its model.
    same_wording: bool,
    contrasts: Vec<Contrast>,
    /// The learned judge's verdict, when it judged the pair (cosine at its candidate floor).
    learned: Option<PairJudgement>,
}

/// Every compared pair, by `(lower index, higher index)`.
struct PairTable {
    n: usize,
    pairs: BTreeMap<(usize, usize), PairInfo>,
    /// Cosines of every pair within a namespace (also those below the floor), for reports.
    embeddings: Vec<Embedding>,
}

impl PairTable {
    fn new(items: &[Item], embeddings: &[Embedding], floor: f32) -> PairTable {
        let features: Vec<TextFeatures> = items.iter().map(|i| TextFeatures::new(&i.text)).collect();
        let wordings: Vec<String> = items.iter().map(|i| memdedup::crates::core::wording(&i.text)).collect();
        let mut pairs = BTreeMap::new();
        for a in 0..items.len() {
            for b in a + 1..items.len() {
                if items[a].namespace != items[b].namespace {
                    continue;
                }
                let cosine = embeddings[a].cosine(&embeddings[b]).unwrap_or(f32::NAN);
                let same_text = features[a].normalized == features[b].normalized;
                if !(cosine >= floor || same_text) {
                    continue;
                }
                let contrasts = if same_text { Vec::new() } else { contrast_features(&features[a], &features[b]) };
                let same_wording = !wordings[a].is_empty() && wordings[a] == wordings[b];
                pairs.insert((a, b), PairInfo { cosine, same_text, same_wording, contrasts, learned: None });
            }
        }
        PairTable { n: items.len(), pairs, embeddings: embeddings.to_vec() }
    }

    /// Asks the learned judge about the pairs a scan would read: each memory's nearest
    /// neighbours at or above its candidate floor, then the rest of the pairs of the groups
    /// they confirm ([`learned_candidates`]), on the blocking pool.
    async fn judge_learned(&mut self, items: &[Item], model: std::sync::Arc<memdedup::PairJudgeModel>) -> Result<()> {
        let floor = model.settings().candidate_floor;
        let all: Vec<Edge> = self
            .pairs
            .iter()
            .filter(|(_, p)| p.cosine >= floor)
            .map(|(&(a, b), p)| Edge { a, b, score: p.cosine })
            .collect();
        let texts: Vec<String> = items.iter().map(|i| i.text.clone()).collect();
        let (judged, model) = tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let read = learned_candidates(&refs, &all, model.settings(), |pairs| model.scores(pairs));
            (read.map(|(edges, scores)| (texts, edges, scores)), model)
        })
        .await?;
        let (texts, edges, scores) = judged.map_err(|e| anyhow::anyhow!("the pair judge failed: {e}"))?;
        for (edge, scores) in edges.iter().zip(&scores) {
            if let Some(pair) = self.pairs.get_mut(&(edge.a.min(edge.b), edge.a.max(edge.b))) {
                pair.learned = Some(model.settings().judge(&texts[edge.a], &texts[edge.b], scores, pair.cosine));
            }
        }
        Ok(())
    }

    /// Pairs `setting` leaves in the uncertain band.
    fn uncertain(&self, setting: &Setting) -> usize {
        match setting {
            Setting::Learned { .. } => self
                .pairs
                .values()
                .filter(|p| p.learned.as_ref().is_some_and(|j| j.verdict == PairVerdict::Uncertain))
                .count(),
            _ => 0,
        }
    }

    fn get(&self, a: usize, b: usize) -> Option<&PairInfo> {
        self.pairs.get(&(a.min(b), a.max(b)))
    }

    fn cosine(&self, a: usize, b: usize) -> f64 {
        self.embeddings[a].cosine(&self.embeddings[b]).map_or(f64::NAN, f64::from)
    }

    /// The groups `setting` forms, and how many links its linkage refused.
    fn group(&self, setting: &Setting) -> Result<(Vec<Vec<usize>>, usize)> {
        let links: Vec<Edge> = self
            .pairs
            .iter()
            .filter(|(_, p)| setting.confirms(p))
            .map(|(&(a, b), p)| Edge { a, b, score: p.cosine })
            .collect();
        let check = |a: usize, b: usize| match self.get(a, b) {
            Some(p) if setting.confirms(p) => Ok(p.cosine),
            other => Err(setting.reasons(other).join("; ")),
        };
        let grouped = group_confirmed(self.n, &links, setting.linkage(), check)?;
        Ok((grouped.groups.into_iter().map(|g| g.members).collect(), grouped.refused.len()))
    }
}

struct Summary<'a> {
    name: &'a str,
    model: &'a str,
    items: &'a [Item],
    pairs: &'a PairTable,
}

/// A listed pair: two items, their cosine, and why the setting decided as it did.
struct ListedPair {
    a: usize,
    b: usize,
    cosine: f64,
    reasons: Vec<String>,
}

impl Summary<'_> {
    /// The false pairs with the highest cosine, then the missed pairs with the lowest.
    fn worst(&self, outcome: &Outcome, n: usize) -> (Vec<ListedPair>, Vec<ListedPair>) {
        let listed = |list: &[(usize, usize)], highest_first: bool| {
            let mut pairs: Vec<(usize, usize, f64)> =
                list.iter().map(|&(a, b)| (a, b, self.pairs.cosine(a, b))).collect();
            pairs.sort_by(|x, y| {
                let by_cosine = if highest_first { y.2.total_cmp(&x.2) } else { x.2.total_cmp(&y.2) };
                by_cosine.then((x.0, x.1).cmp(&(y.0, y.1)))
            });
            pairs.truncate(n);
            pairs
                .into_iter()
                .map(|(a, b, cosine)| ListedPair {
                    a,
                    b,
                    cosine,
                    reasons: outcome.setting.reasons(self.pairs.get(a, b)),
                })
                .collect::<Vec<_>>()
        };
        (listed(&outcome.score.false_pair_list, true), listed(&outcome.score.missed_pair_list, false))
    }

    fn counts(&self) -> (usize, usize) {
        let clusters: BTreeSet<&str> = self.items.iter().map(|i| i.label.cluster.as_str()).collect();
        (clusters.len(), self.items.iter().filter(|i| i.label.near.is_some()).count())
    }

    fn pair_json(&self, pair: ListedPair) -> Value {
        json!({
            "a": self.items[pair.a].id, "b": self.items[pair.b].id,
            "cosine": (pair.cosine * 10_000.0).round() / 10_000.0,
            "clusters": [self.items[pair.a].label.cluster, self.items[pair.b].label.cluster],
            "reasons": pair.reasons,
        })
    }

    fn json(&self, results: &[Outcome], worst: usize) -> Value {
        let (clusters, negatives) = self.counts();
        let rows: Vec<Value> = results
            .iter()
            .map(|outcome| {
                let s = &outcome.score;
                let (false_pairs, missed) = self.worst(outcome, worst);
                let mut row = outcome.setting.json();
                let fields = json!({
                    "precision": s.precision, "recall": s.recall, "f1": s.f1,
                    "true_pairs": s.true_pairs, "false_pairs": s.false_pairs, "missed_pairs": s.missed_pairs,
                    "false_pairs_with_hard_negative": s.false_pairs_with_hard_negative,
                    "hard_negatives_merged": s.hard_negatives_merged,
                    "refused_links": outcome.refused, "uncertain_pairs": outcome.uncertain,
                    "worst_false_pairs": false_pairs.into_iter().map(|p| self.pair_json(p)).collect::<Vec<_>>(),
                    "worst_missed_pairs": missed.into_iter().map(|p| self.pair_json(p)).collect::<Vec<_>>(),
                });
                if let (Some(row), Value::Object(fields)) = (row.as_object_mut(), fields) {
                    row.extend(fields);
                }
                row
            })
            .collect();
        let judge = results.first().map_or("cosine", |o| match o.setting {
            Setting::Cosine { .. } => "cosine",
            Setting::Local { .. } => "local",
            Setting::Learned { .. } => "learned",
        });
        json!({
            "file": self.name, "model": self.model, "items": self.items.len(), "clusters": clusters,
            "hard_negatives": negatives, "judge": judge, "results": rows,
        })
    }

    fn human(&self, results: &[Outcome], worst: usize) -> String {
        let (clusters, negatives) = self.counts();
        let judge = match results.first().map(|o| &o.setting) {
            Some(Setting::Local { judge, linkage }) => format!(
                "local (duplicate floor {:.2}, vetoes: {}, {} linkage)",
                judge.params().duplicate_floor,
                if judge.params().vetoes.is_empty() { "none".to_owned() } else { judge.params().vetoes.join(", ") },
                linkage_name(*linkage)
            ),
            Some(Setting::Cosine { linkage, .. }) => format!("cosine, {} linkage", linkage_name(*linkage)),
            Some(Setting::Learned { settings, linkage }) => format!(
                "learned (duplicate at P >= {:.3}, uncertain from {:.3}, the {} nearest from cosine {:.2}, {} linkage)",
                settings.duplicate_threshold,
                settings.uncertain_threshold,
                settings.candidates,
                settings.candidate_floor,
                linkage_name(*linkage)
            ),
            None => "cosine".to_owned(),
        };
        let mut out = format!(
            "{}: {} memories in {clusters} clusters, {negatives} hard negatives; judge: {judge} ({})\n\n",
            self.name,
            self.items.len(),
            self.model
        );
        out.push_str(
            "threshold  precision  recall     F1  false pairs  with a hard negative  negatives merged  missed\n",
        );
        for outcome in results {
            let s = &outcome.score;
            out.push_str(&format!(
                "{:>9}  {:>9.3}  {:>6.3}  {:>5.3}  {:>11}  {:>20}  {:>16}  {:>6}\n",
                outcome.setting.label(),
                s.precision,
                s.recall,
                s.f1,
                s.false_pairs,
                s.false_pairs_with_hard_negative,
                format!("{}/{}", s.hard_negatives_merged, s.hard_negatives),
                s.missed_pairs
            ));
        }
        let Some(best) = results.iter().max_by(|a, b| a.score.f1.total_cmp(&b.score.f1)) else { return out };
        if best.refused > 0 {
            out.push_str(&format!("\n{} links refused by the linkage\n", best.refused));
        }
        if best.uncertain > 0 {
            out.push_str(&format!("\n{} pairs in the uncertain band (not merged; to review)\n", best.uncertain));
        }
        let (false_pairs, missed) = self.worst(best, worst);
        if !false_pairs.is_empty() || !missed.is_empty() {
            out.push_str(&format!("\nworst mistakes at {} (the best F1):\n", best.setting.label()));
        }
        let line = |kind: &str, pair: &ListedPair| {
            format!(
                "  {kind:<6} {:.4}  {} {:?}\n{:>17} {} {:?}\n{:>17} because: {}\n",
                pair.cosine,
                self.items[pair.a].id,
                snippet(&self.items[pair.a].text, 80),
                "",
                self.items[pair.b].id,
                snippet(&self.items[pair.b].text, 80),
                "",
                pair.reasons.join("; ")
            )
        };
        for pair in &false_pairs {
            out.push_str(&line("false", pair));
        }
        for pair in &missed {
            out.push_str(&line("missed", pair));
        }
        out
    }
}
