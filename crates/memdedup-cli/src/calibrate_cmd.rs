//! `memdedup calibrate`: recommend thresholds from a labelled file, overall and per
//! namespace, and optionally write them into `memdedup.toml`.

mod config_update;
mod recommend;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use memdedup::crates::core::{Labelled, PairScore, score_grouping};
use memdedup::{CONFIG_FILE_NAME, Embedding, Threshold, group_by_similarity};
use serde_json::{Value, json};

use self::config_update::ThresholdUpdate;
use self::recommend::{MIN_LABELLED_PAIRS, Recommendation, Row, recommend};
use crate::cli::{CalibrateArgs, GlobalArgs};
use crate::input::{display_name, read_text};
use crate::labelled::{Item, parse_labelled};
use crate::output::emit;

/// The thresholds swept, in hundredths: 0.50 to 0.99 by 0.01.
const SWEEP: std::ops::RangeInclusive<u32> = 50..=99;
/// The human table shows every row whose hundredths are a multiple of this.
const TABLE_STEP: u32 = 5;

pub(crate) async fn run(global: &GlobalArgs, args: &CalibrateArgs) -> Result<()> {
    let name = display_name(&args.file);
    let mut items = parse_labelled(&read_text(&args.file)?, &name)?;
    if let Some(wanted) = &args.namespace {
        let present: BTreeSet<&str> = items.iter().map(|i| i.namespace.as_str()).collect();
        if !present.contains(wanted.as_str()) {
            let list = present.iter().map(|ns| format!("{ns:?}")).collect::<Vec<_>>().join(", ");
            bail!("{name} has no memories in namespace {wanted:?} (its namespaces: {list})");
        }
        items.retain(|i| &i.namespace == wanted);
    }
    // The file memdedup would load, found before the model runs so a bad one fails fast.
    let config = crate::open::config_file(global)?;
    let config_path = config.path().map_or_else(|| PathBuf::from(CONFIG_FILE_NAME), Path::to_path_buf);
    let own_thresholds: BTreeSet<String> = config.dedup_config()?.similarity_thresholds.into_keys().collect();

    let (model, embeddings) = crate::labelled::embed_items(global, &items, &name).await?;

    let sweep = tokio::task::block_in_place(|| Sweep::run(&items, &embeddings))?;
    let overall = recommend(&sweep.overall, args.target_precision);
    let namespaces: Vec<NamespaceResult> = sweep
        .namespaces
        .into_iter()
        .map(|(namespace, (items, rows))| {
            let recommendation = recommend(&rows, args.target_precision);
            NamespaceResult { namespace, items, rows, recommendation }
        })
        .collect();
    let plan = WritePlan::new(args.namespace.as_deref(), &overall, &namespaces, &own_thresholds);
    let report = Report {
        name: &name,
        model: &model,
        target: args.target_precision,
        items: items.len(),
        rows: &sweep.overall,
        overall,
        namespaces: &namespaces,
        plan: &plan,
        config_path: &config_path,
    };

    let mut warnings = Vec::new();
    if args.write {
        if plan.update.is_empty() {
            bail!("nothing to write to {}: {}", config_path.display(), report.no_recommendation_reason());
        }
        warnings = config_update::write(&config_path, &plan.update)?;
    }
    let out = if args.json { format!("{}\n", report.json(args.write)) } else { report.human(args.write) };
    emit(&out)?;
    if !global.quiet {
        for warning in warnings {
            eprintln!("warning: {warning}");
        }
    }
    Ok(())
}

/// Scores at every threshold of [`SWEEP`], overall and per namespace.
struct Sweep {
    overall: Vec<Row>,
    /// namespace → (its memories, its rows).
    namespaces: BTreeMap<String, (usize, Vec<Row>)>,
}

impl Sweep {
    /// Groups each namespace on its own (as `scan` and `eval` do) at every threshold.
    fn run(items: &[Item], embeddings: &[Embedding]) -> Result<Sweep> {
        let mut partitions: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            partitions.entry(item.namespace.as_str()).or_default().push(i);
        }
        let labels: Vec<Labelled> = items.iter().map(|i| i.label.clone()).collect();
        let partitions: Vec<Partition<'_>> = partitions
            .into_iter()
            .map(|(namespace, members)| Partition {
                namespace,
                vectors: members.iter().map(|&i| embeddings[i].clone()).collect(),
                labels: members.iter().map(|&i| labels[i].clone()).collect(),
                members,
            })
            .collect();
        let mut overall = Vec::new();
        let mut namespaces: BTreeMap<String, (usize, Vec<Row>)> = BTreeMap::new();
        for hundredths in SWEEP {
            let threshold = Threshold::new(f64::from(hundredths) / 100.0)?;
            let mut groups = Vec::new();
            for p in &partitions {
                let local: Vec<Vec<usize>> =
                    group_by_similarity(&p.vectors, threshold)?.into_iter().map(|g| g.members).collect();
                let entry = namespaces.entry(p.namespace.to_owned()).or_insert_with(|| (p.members.len(), Vec::new()));
                entry.1.push(row(threshold, &score_grouping(&p.labels, &local)));
                groups.extend(local.into_iter().map(|g| g.into_iter().map(|m| p.members[m]).collect::<Vec<_>>()));
            }
            overall.push(row(threshold, &score_grouping(&labels, &groups)));
        }
        Ok(Sweep { overall, namespaces })
    }
}

/// One namespace's memories: their indices in the file, vectors and labels, in file order.
struct Partition<'a> {
    namespace: &'a str,
    members: Vec<usize>,
    vectors: Vec<Embedding>,
    labels: Vec<Labelled>,
}

fn row(threshold: Threshold, score: &PairScore) -> Row {
    Row {
        threshold: threshold.get(),
        precision: score.precision,
        recall: score.recall,
        f1: score.f1,
        true_pairs: score.true_pairs,
        false_pairs: score.false_pairs,
        missed_pairs: score.missed_pairs,
    }
}

struct NamespaceResult {
    namespace: String,
    items: usize,
    rows: Vec<Row>,
    recommendation: Recommendation,
}

/// What `--write` sets, and why each namespace gets what it gets.
struct WritePlan {
    update: ThresholdUpdate,
    /// Namespaces without a recommendation of their own that are written the overall
    /// threshold, because one of their own (built in or configured) would apply otherwise.
    fallbacks: BTreeSet<String>,
}

impl WritePlan {
    /// Without `--namespace`: the overall threshold as `default_threshold`, and each
    /// namespace's own recommendation. With it: only that namespace's threshold.
    fn new(
        only: Option<&str>,
        overall: &Recommendation,
        namespaces: &[NamespaceResult],
        own_thresholds: &BTreeSet<String>,
    ) -> WritePlan {
        let mut update = ThresholdUpdate::default();
        let mut fallbacks = BTreeSet::new();
        if let Some(only) = only {
            if let Some(t) = overall.threshold() {
                update.namespaces.insert(only.to_owned(), t);
            }
            return WritePlan { update, fallbacks };
        }
        update.default_threshold = overall.threshold();
        for ns in namespaces {
            match (ns.recommendation.threshold(), overall.threshold()) {
                (Some(t), _) => {
                    update.namespaces.insert(ns.namespace.clone(), t);
                }
                (None, Some(t)) if own_thresholds.contains(&ns.namespace) => {
                    update.namespaces.insert(ns.namespace.clone(), t);
                    fallbacks.insert(ns.namespace.clone());
                }
                (None, _) => {}
            }
        }
        WritePlan { update, fallbacks }
    }
}

struct Report<'a> {
    name: &'a str,
    model: &'a str,
    target: f64,
    items: usize,
    rows: &'a [Row],
    overall: Recommendation,
    namespaces: &'a [NamespaceResult],
    plan: &'a WritePlan,
    config_path: &'a Path,
}

impl Report<'_> {
    fn labelled_pairs(&self) -> usize {
        self.rows.first().map_or(0, Row::labelled_pairs)
    }

    fn no_recommendation_reason(&self) -> String {
        match self.overall {
            Recommendation::TooFewPairs { labelled_pairs } => too_few(labelled_pairs),
            _ => "no namespace has a recommendation".to_owned(),
        }
    }

    fn json(&self, written: bool) -> Value {
        let namespaces: Vec<Value> = self
            .namespaces
            .iter()
            .map(|ns| {
                let applies = ns.recommendation.threshold().or(self.overall.threshold());
                json!({
                    "namespace": ns.namespace,
                    "items": ns.items,
                    "labelled_pairs": ns.rows.first().map_or(0, Row::labelled_pairs),
                    "recommendation": recommendation_json(&ns.recommendation),
                    "applies": applies,
                    "rows": ns.rows.iter().map(row_json).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "file": self.name,
            "model": self.model,
            "target_precision": self.target,
            "items": self.items,
            "labelled_pairs": self.labelled_pairs(),
            "recommendation": recommendation_json(&self.overall),
            "rows": self.rows.iter().map(row_json).collect::<Vec<_>>(),
            "namespaces": namespaces,
            "config": {
                "path": self.config_path.display().to_string(),
                "written": written && !self.plan.update.is_empty(),
                "default_threshold": self.plan.update.default_threshold,
                "thresholds": self.plan.update.namespaces,
            },
        })
    }

    fn human(&self, written: bool) -> String {
        let mut out = format!(
            "{}: {} memories, {} labelled duplicate pairs, {} namespace{}; model {}; target precision {}\n\n",
            self.name,
            self.items,
            self.labelled_pairs(),
            self.namespaces.len(),
            if self.namespaces.len() == 1 { "" } else { "s" },
            self.model,
            self.target
        );
        out.push_str("threshold  precision  recall     F1  true pairs  false pairs  missed\n");
        let recommended = self.overall.threshold();
        for row in self.rows {
            let is_recommended = recommended.is_some_and(|t| (t - row.threshold).abs() < 1e-9);
            let on_step = ((row.threshold * 100.0).round() as u32).is_multiple_of(TABLE_STEP);
            if !on_step && !is_recommended {
                continue;
            }
            out.push_str(&format!(
                "{:>9.2}  {:>9.3}  {:>6.3}  {:>5.3}  {:>10}  {:>11}  {:>6}{}\n",
                row.threshold,
                row.precision,
                row.recall,
                row.f1,
                row.true_pairs,
                row.false_pairs,
                row.missed_pairs,
                if is_recommended { "  <- recommended" } else { "" }
            ));
        }
        out.push_str(&format!("\nrecommended: {}\n", self.describe(&self.overall)));
        if self.namespaces.len() > 1 || self.namespaces.iter().any(|ns| ns.recommendation != self.overall) {
            out.push_str("\nper namespace:\n");
            let width = self.namespaces.iter().map(|ns| ns.namespace.len()).max().unwrap_or(0);
            for ns in self.namespaces {
                let text = match (ns.recommendation, self.overall.threshold()) {
                    (Recommendation::TooFewPairs { labelled_pairs }, Some(t)) => {
                        format!("uses the overall {t:.2}: {}", too_few(labelled_pairs))
                    }
                    (Recommendation::TooFewPairs { labelled_pairs }, None) => {
                        format!("no recommendation: {}", too_few(labelled_pairs))
                    }
                    (recommendation, _) => self.describe(&recommendation),
                };
                out.push_str(&format!("  {:<width$}  {text}\n", ns.namespace));
            }
        }
        out.push('\n');
        let update = &self.plan.update;
        if update.is_empty() {
            out.push_str(&format!("nothing to write: {}\n", self.no_recommendation_reason()));
            return out;
        }
        let path = self.config_path.display();
        if written {
            out.push_str(&format!("wrote {path}:\n"));
        } else {
            out.push_str(&format!("would write to {path} (with --write):\n"));
        }
        let misses = |recommendation: &Recommendation| match recommendation {
            Recommendation::BestF1(_) => format!("  (best F1, below precision {})", self.target),
            _ => String::new(),
        };
        if let Some(t) = update.default_threshold {
            out.push_str(&format!("  [dedup] default_threshold = {t:.2}{}\n", misses(&self.overall)));
        }
        for (ns, t) in &update.namespaces {
            let own = self.namespaces.iter().find(|r| &r.namespace == ns).map(|r| &r.recommendation);
            let note = match own {
                _ if self.plan.fallbacks.contains(ns) => {
                    format!("  (the overall value; its own threshold would apply otherwise){}", misses(&self.overall))
                }
                Some(recommendation) => misses(recommendation),
                None => misses(&self.overall),
            };
            out.push_str(&format!("  [dedup.thresholds] {} = {t:.2}{note}\n", toml_key(ns)));
        }
        out
    }

    fn describe(&self, recommendation: &Recommendation) -> String {
        let target = self.target;
        match recommendation {
            Recommendation::ReachesTarget(row) => {
                format!("{:.2}, the lowest threshold with precision >= {target} ({})", row.threshold, scores(row))
            }
            Recommendation::BestF1(row) => {
                format!("{:.2}, the best F1 ({}); NO threshold reaches precision {target}", row.threshold, scores(row))
            }
            Recommendation::TooFewPairs { labelled_pairs } => format!("none: {}", too_few(*labelled_pairs)),
        }
    }
}

fn scores(row: &Row) -> String {
    format!("precision {:.3}, recall {:.3}, F1 {:.3}", row.precision, row.recall, row.f1)
}

fn too_few(labelled_pairs: usize) -> String {
    let plural = if labelled_pairs == 1 { "" } else { "s" };
    format!("{labelled_pairs} labelled duplicate pair{plural}, at least {MIN_LABELLED_PAIRS} needed")
}

/// A namespace as a TOML key: bare when it can be, quoted otherwise.
fn toml_key(namespace: &str) -> String {
    toml_edit::Key::new(namespace).to_string()
}

fn row_json(row: &Row) -> Value {
    json!({
        "threshold": row.threshold,
        "precision": row.precision,
        "recall": row.recall,
        "f1": row.f1,
        "true_pairs": row.true_pairs,
        "false_pairs": row.false_pairs,
        "missed_pairs": row.missed_pairs,
    })
}

fn recommendation_json(recommendation: &Recommendation) -> Value {
    match recommendation {
        Recommendation::ReachesTarget(row) | Recommendation::BestF1(row) => json!({
            "threshold": row.threshold,
            "reaches_target": matches!(recommendation, Recommendation::ReachesTarget(_)),
            "basis": if matches!(recommendation, Recommendation::ReachesTarget(_)) { "target_precision" } else { "best_f1" },
            "precision": row.precision,
            "recall": row.recall,
            "f1": row.f1,
        }),
        Recommendation::TooFewPairs { labelled_pairs } => json!({
            "threshold": null,
            "reaches_target": false,
            "basis": "too_few_pairs",
            "labelled_pairs": labelled_pairs,
        }),
    }
}
