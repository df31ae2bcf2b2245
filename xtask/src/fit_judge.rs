//! `cargo xtask fit-judge`: fits the local judge's parameters on the tuning half of the
//! labelled corpus and writes them to crates/dedup-core/src/local_judge/params.json.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// Per-command help text.
pub const HELP: &str = "\
Builds the CLI, fetches the model if needed, and runs
`memdedup eval tests/fixtures/labelled/tune.jsonl --judge local --sweep --json`, which
evaluates the local judge with complete linkage at duplicate floors 0.30 to 0.80 and every
set of vetoes. Picks the setting with the best pair F0.5 — precision weighs twice as much
as recall, because a wrong merge loses a memory while a missed one only costs context —
(ties: fewer hard negatives merged, then the higher floor, then fewer vetoes) and writes
it, with its scores, to
crates/dedup-core/src/local_judge/params.json, the judge's built-in parameters. Only the
tuning half is read; the held-out half stays unseen.";

/// The file fitted on, relative to the workspace root.
const TUNE: &str = "tests/fixtures/labelled/tune.jsonl";
/// Where the parameters go, relative to the workspace root.
const PARAMS: &str = "crates/dedup-core/src/local_judge/params.json";

/// Fits and writes the parameters.
pub fn run(root: &Path) -> Result<()> {
    crate::model::fetch_model(None)?;
    let bin = crate::demo::build_cli(root)?;
    let report =
        crate::eval::eval_json(&bin, root, &root.join(TUNE), &["--judge", "local", "--sweep", "--worst", "0"])?;
    let rows = report["results"].as_array().context("the sweep printed no results")?;
    let best = best_row(rows).context("the sweep printed no rows")?;
    let params = params_json(best, rows.len())?;
    let text = format!("{}\n", serde_json::to_string_pretty(&params)?);
    let path = root.join(PARAMS);
    let temp = path.with_extension("json.tmp");
    std::fs::write(&temp, &text).with_context(|| format!("cannot write {}", temp.display()))?;
    std::fs::rename(&temp, &path).with_context(|| format!("cannot replace {}", path.display()))?;
    println!("wrote {PARAMS}:\n{text}");
    Ok(())
}

/// F-beta at beta 0.5: precision weighs twice as much as recall.
fn f_half(row: &Value) -> f64 {
    let (p, r) = (row["precision"].as_f64().unwrap_or(0.0), row["recall"].as_f64().unwrap_or(0.0));
    if p + r == 0.0 { 0.0 } else { 1.25 * p * r / (0.25 * p + r) }
}

/// The row with the best F0.5; ties go to fewer hard negatives merged, then the higher
/// floor, then fewer vetoes.
fn best_row(rows: &[Value]) -> Option<&Value> {
    let key = |row: &Value| {
        (
            f_half(row),
            -(row["hard_negatives_merged"].as_f64().unwrap_or(f64::MAX)),
            row["duplicate_floor"].as_f64().unwrap_or(0.0),
            -(row["vetoes"].as_array().map_or(0, Vec::len) as f64),
        )
    };
    rows.iter().max_by(|a, b| key(a).partial_cmp(&key(b)).unwrap_or(std::cmp::Ordering::Equal))
}

/// The parameter file for `row`, recording what it scored.
fn params_json(row: &Value, settings: usize) -> Result<Value> {
    let field = |key: &str| row.get(key).cloned().with_context(|| format!("`{key}` missing in {row}"));
    let round = |key: &str| -> Result<Value> {
        let x = field(key)?.as_f64().with_context(|| format!("`{key}` is not a number in {row}"))?;
        Ok(json!((x * 1000.0).round() / 1000.0))
    };
    Ok(json!({
        "duplicate_floor": round("duplicate_floor")?,
        "related_floor": round("related_floor")?,
        "vetoes": field("vetoes")?,
        "fitted": {
            "by": "cargo xtask fit-judge",
            "on": TUNE,
            "linkage": field("linkage")?,
            "settings_tried": settings,
            "precision": round("precision")?,
            "recall": round("recall")?,
            "f1": round("f1")?,
            "f_half": (f_half(row) * 1000.0).round() / 1000.0,
            "hard_negatives_merged": field("hard_negatives_merged")?,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(floor: f64, precision: f64, recall: f64, merged: u64, vetoes: &[&str]) -> Value {
        json!({"duplicate_floor": floor, "related_floor": 0.4, "vetoes": vetoes, "linkage": "complete",
            "precision": precision, "recall": recall, "f1": 2.0 * precision * recall / (precision + recall),
            "hard_negatives_merged": merged})
    }

    #[test]
    fn the_best_f_half_wins_and_ties_prefer_safer_settings() {
        // The same F1, but the first is more precise: F0.5 prefers it.
        let rows = [row(0.5, 0.8, 0.4, 10, &[]), row(0.55, 0.4, 0.8, 12, &["a"]), row(0.6, 0.3, 0.3, 9, &["a"])];
        assert_eq!(best_row(&rows).unwrap()["duplicate_floor"], 0.5);
        assert!((f_half(&rows[0]) - 0.6667).abs() < 1e-3, "{}", f_half(&rows[0]));
        let tie = [row(0.5, 0.6, 0.5, 9, &["a"]), row(0.55, 0.6, 0.5, 9, &["a", "b"]), row(0.55, 0.6, 0.5, 9, &["a"])];
        assert_eq!(best_row(&tie).unwrap(), &tie[2]);
        assert!(best_row(&[]).is_none());
        assert_eq!(f_half(&json!({})), 0.0);
    }

    #[test]
    fn the_parameter_file_records_its_scores() {
        let params = params_json(&row(0.55, 0.5, 0.5, 9, &["negation_flip"]), 512).unwrap();
        assert_eq!(params["duplicate_floor"], 0.55);
        assert_eq!(params["vetoes"], json!(["negation_flip"]));
        assert_eq!(params["fitted"]["f1"], 0.5);
        assert_eq!(params["fitted"]["f_half"], 0.5);
        assert_eq!(params["fitted"]["settings_tried"], 512);
        assert!(params_json(&json!({}), 1).unwrap_err().to_string().contains("`duplicate_floor` missing"));
    }
}
