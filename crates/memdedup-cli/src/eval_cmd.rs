//! `memdedup eval`: how well the grouping matches a labelled file of memories.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};
use memdedup::crates::core::{Labelled, PairScore, score_grouping};
use memdedup::{Embedding, Threshold, group_by_similarity};
use serde_json::{Value, json};

use crate::cli::{EvalArgs, GlobalArgs};
use crate::input::{display_name, read_text};
use crate::labelled::{Item, parse_labelled};
use crate::output::{emit, snippet};
use crate::progress::embedding_bar;

/// The thresholds evaluated when none is given.
const DEFAULT_THRESHOLDS: [f64; 6] = [0.65, 0.70, 0.75, 0.80, 0.85, 0.90];

/// Two items by index, and their cosine.
type ScoredPair = (usize, usize, f64);

pub(crate) async fn run(global: &GlobalArgs, args: &EvalArgs) -> Result<()> {
    let name = display_name(&args.file);
    let items = parse_labelled(&read_text(&args.file)?, &name)?;
    let thresholds: Vec<Threshold> = if args.threshold.is_empty() {
        DEFAULT_THRESHOLDS.iter().map(|&t| Threshold::new(t)).collect::<Result<_, _>>()?
    } else {
        args.threshold.iter().map(|&t| Threshold::new(t)).collect::<Result<_, _>>()?
    };
    let embedder = crate::open::collection_embedder(global).await??;
    let texts: Vec<&str> = items.iter().map(|i| i.text.as_str()).collect();
    let bar = embedding_bar(texts.len(), global.quiet);
    let progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let embeddings = memdedup::embed_texts(embedder.as_ref(), &texts, &progress).await;
    bar.finish_and_clear();
    let embeddings = embeddings.with_context(|| format!("cannot embed {name}"))?;
    let labels: Vec<Labelled> = items.iter().map(|i| i.label.clone()).collect();
    let mut results = Vec::new();
    for threshold in thresholds {
        let groups = group_within_namespaces(&items, &embeddings, threshold)?;
        results.push((threshold, score_grouping(&labels, &groups)));
    }
    let summary = Summary { name: &name, model: embedder.model_id(), items: &items, embeddings: &embeddings };
    if args.json {
        emit(&format!("{}\n", summary.json(&results, args.worst)))
    } else {
        emit(&summary.human(&results, args.worst))
    }
}

/// Groups at `threshold`, each namespace on its own (as `scan` does by default).
fn group_within_namespaces(items: &[Item], embeddings: &[Embedding], threshold: Threshold) -> Result<Vec<Vec<usize>>> {
    let mut partitions: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        partitions.entry(item.namespace.as_str()).or_default().push(i);
    }
    let mut groups = Vec::new();
    for members in partitions.values() {
        let vectors: Vec<Embedding> = members.iter().map(|&i| embeddings[i].clone()).collect();
        for group in group_by_similarity(&vectors, threshold)? {
            groups.push(group.members.iter().map(|&m| members[m]).collect());
        }
    }
    Ok(groups)
}

struct Summary<'a> {
    name: &'a str,
    model: &'a str,
    items: &'a [Item],
    embeddings: &'a [Embedding],
}

impl Summary<'_> {
    fn cosine(&self, a: usize, b: usize) -> f64 {
        self.embeddings[a].cosine(&self.embeddings[b]).map_or(f64::NAN, f64::from)
    }

    /// The false pairs with the highest cosine, then the missed pairs with the lowest.
    fn worst(&self, score: &PairScore, n: usize) -> (Vec<ScoredPair>, Vec<ScoredPair>) {
        let mut false_pairs: Vec<_> = score.false_pair_list.iter().map(|&(a, b)| (a, b, self.cosine(a, b))).collect();
        false_pairs.sort_by(|x, y| y.2.total_cmp(&x.2).then((x.0, x.1).cmp(&(y.0, y.1))));
        false_pairs.truncate(n);
        let mut missed: Vec<_> = score.missed_pair_list.iter().map(|&(a, b)| (a, b, self.cosine(a, b))).collect();
        missed.sort_by(|x, y| x.2.total_cmp(&y.2).then((x.0, x.1).cmp(&(y.0, y.1))));
        missed.truncate(n);
        (false_pairs, missed)
    }

    fn counts(&self) -> (usize, usize) {
        let clusters: BTreeSet<&str> = self.items.iter().map(|i| i.label.cluster.as_str()).collect();
        (clusters.len(), self.items.iter().filter(|i| i.label.near.is_some()).count())
    }

    fn pair_json(&self, (a, b, cosine): ScoredPair) -> Value {
        json!({
            "a": self.items[a].id, "b": self.items[b].id, "cosine": (cosine * 10_000.0).round() / 10_000.0,
            "clusters": [self.items[a].label.cluster, self.items[b].label.cluster],
        })
    }

    fn json(&self, results: &[(Threshold, PairScore)], worst: usize) -> Value {
        let (clusters, negatives) = self.counts();
        let rows: Vec<Value> = results
            .iter()
            .map(|(threshold, s)| {
                let (false_pairs, missed) = self.worst(s, worst);
                json!({
                    "threshold": threshold.get(),
                    "precision": s.precision, "recall": s.recall, "f1": s.f1,
                    "true_pairs": s.true_pairs, "false_pairs": s.false_pairs, "missed_pairs": s.missed_pairs,
                    "false_pairs_with_hard_negative": s.false_pairs_with_hard_negative,
                    "hard_negatives_merged": s.hard_negatives_merged,
                    "worst_false_pairs": false_pairs.into_iter().map(|p| self.pair_json(p)).collect::<Vec<_>>(),
                    "worst_missed_pairs": missed.into_iter().map(|p| self.pair_json(p)).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "file": self.name, "model": self.model, "items": self.items.len(), "clusters": clusters,
            "hard_negatives": negatives, "judge": "cosine", "results": rows,
        })
    }

    fn human(&self, results: &[(Threshold, PairScore)], worst: usize) -> String {
        let (clusters, negatives) = self.counts();
        let mut out = format!(
            "{}: {} memories in {clusters} clusters, {negatives} hard negatives; judge: cosine ({})\n\n",
            self.name,
            self.items.len(),
            self.model
        );
        out.push_str(
            "threshold  precision  recall     F1  false pairs  with a hard negative  negatives merged  missed\n",
        );
        for (threshold, s) in results {
            out.push_str(&format!(
                "{:>9.2}  {:>9.3}  {:>6.3}  {:>5.3}  {:>11}  {:>20}  {:>16}  {:>6}\n",
                threshold.get(),
                s.precision,
                s.recall,
                s.f1,
                s.false_pairs,
                s.false_pairs_with_hard_negative,
                format!("{}/{}", s.hard_negatives_merged, s.hard_negatives),
                s.missed_pairs
            ));
        }
        let Some((threshold, best)) = results.iter().max_by(|a, b| a.1.f1.total_cmp(&b.1.f1)) else { return out };
        let (false_pairs, missed) = self.worst(best, worst);
        if !false_pairs.is_empty() || !missed.is_empty() {
            out.push_str(&format!("\nworst mistakes at {} (the best F1):\n", threshold.get()));
        }
        let line = |kind: &str, (a, b, cosine): ScoredPair| {
            format!(
                "  {kind:<6} {cosine:.4}  {} {:?}\n{:>17} {} {:?}\n",
                self.items[a].id,
                snippet(&self.items[a].text, 80),
                "",
                self.items[b].id,
                snippet(&self.items[b].text, 80)
            )
        };
        for pair in false_pairs {
            out.push_str(&line("false", pair));
        }
        for pair in missed {
            out.push_str(&line("missed", pair));
        }
        out
    }
}
