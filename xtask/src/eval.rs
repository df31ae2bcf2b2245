//! `cargo xtask eval`: the quality table — `memdedup eval --json` over the labelled corpus
//! halves and the development fixture, one Markdown table on stdout.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::process;

/// Per-command help text.
pub const HELP: &str = "\
Builds the CLI, fetches the model if needed, and runs `memdedup eval --json` over
tests/fixtures/labelled/tune.jsonl, tests/fixtures/labelled/holdout.jsonl,
tests/fixtures/labelled/holdout2.jsonl and tests/fixtures/memories_dev.jsonl: with the cosine judge at the thresholds 0.65 to 0.90,
then with the local judge at its built-in parameters, then with the learned pair judge
(threshold: its calibrated P(duplicate); pairs it leaves uncertain are not merged and are
counted in the note). Prints one Markdown table (file, judge, threshold or duplicate floor, pair precision, recall, F1, false pairs, false pairs
with a hard negative, hard negatives merged, missed pairs), as docs/QUALITY.md shows it.
Files that do not exist are skipped with a note.";

/// The labelled files, relative to the workspace root.
const FILES: [&str; 4] = [
    "tests/fixtures/labelled/tune.jsonl",
    "tests/fixtures/labelled/holdout.jsonl",
    "tests/fixtures/labelled/holdout2.jsonl",
    "tests/fixtures/memories_dev.jsonl",
];
/// The cosine thresholds of the table.
const THRESHOLDS: [&str; 6] = ["0.65", "0.70", "0.75", "0.80", "0.85", "0.90"];

/// Runs the evaluation and prints the table.
pub fn run(root: &Path) -> Result<()> {
    crate::model::fetch_model(None)?;
    let bin = crate::demo::build_cli(root)?;
    println!(
        "| file | judge | threshold | precision | recall | F1 | false pairs | with a hard negative | hard negatives merged | missed |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut notes = Vec::new();
    for file in FILES {
        let path = root.join(file);
        if !path.is_file() {
            notes.push(format!("{file} does not exist; skipped"));
            continue;
        }
        let mut cosine: Vec<&str> = Vec::new();
        for t in THRESHOLDS {
            cosine.extend(["--threshold", t]);
        }
        let mut report = Value::Null;
        let mut uncertain = 0;
        for judge_args in [cosine, vec!["--judge", "local"], vec!["--judge", "learned"]] {
            report = eval_json(&bin, root, &path, &judge_args)?;
            for row in report["results"].as_array().context("no results")? {
                println!("{}", table_row(file, &report, row)?);
                uncertain += row["uncertain_pairs"].as_u64().unwrap_or(0);
            }
        }
        notes.push(format!("{file}: the learned judge left {uncertain} pairs uncertain (not merged; to review)"));
        notes.push(format!(
            "{file}: {} memories, {} clusters, {} hard negatives",
            report["items"], report["clusters"], report["hard_negatives"]
        ));
    }
    println!();
    for note in notes {
        println!("{note}");
    }
    Ok(())
}

/// `memdedup eval --json --quiet FILE ARGS...`, parsed.
pub(crate) fn eval_json(bin: &Path, root: &Path, file: &Path, args: &[&str]) -> Result<Value> {
    let mut cmd = Command::new(bin);
    cmd.args(["eval", "--json", "--quiet"]).arg(file).args(args).current_dir(root).stdin(Stdio::null());
    let line = process::describe(&cmd);
    let out = cmd.output().with_context(|| format!("could not start `{line}`"))?;
    if !out.status.success() {
        bail!("`{line}` failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim_end());
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("`{line}` printed no JSON"))
}

/// One Markdown row of the table.
fn table_row(file: &str, report: &Value, row: &Value) -> Result<String> {
    let number = |key: &str| row[key].as_f64().with_context(|| format!("`{key}` missing in {row}"));
    let count = |key: &str| row[key].as_u64().with_context(|| format!("`{key}` missing in {row}"));
    let name = Path::new(file).file_name().and_then(|n| n.to_str()).unwrap_or(file);
    let judge = match row["judge"].as_str() {
        Some("local") => format!("local, {} linkage", row["linkage"].as_str().unwrap_or("?")),
        Some("learned") => format!("learned, {} linkage", row["linkage"].as_str().unwrap_or("?")),
        _ => "cosine".to_owned(),
    };
    let threshold = row["threshold"]
        .as_f64()
        .or_else(|| row["duplicate_floor"].as_f64())
        .or_else(|| row["duplicate_threshold"].as_f64());
    Ok(format!(
        "| {name} | {judge} | {:.2} | {:.3} | {:.3} | {:.3} | {} | {} | {}/{} | {} |",
        threshold.with_context(|| format!("`threshold` missing in {row}"))?,
        number("precision")?,
        number("recall")?,
        number("f1")?,
        count("false_pairs")?,
        count("false_pairs_with_hard_negative")?,
        count("hard_negatives_merged")?,
        report["hard_negatives"].as_u64().unwrap_or(0),
        count("missed_pairs")?
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rows_are_formatted_from_the_eval_json() {
        let report = json!({"judge": "cosine", "hard_negatives": 15});
        let row = json!({"judge": "cosine", "threshold": 0.7, "precision": 0.5666, "recall": 0.9444, "f1": 0.7083,
            "false_pairs": 13, "false_pairs_with_hard_negative": 13, "hard_negatives_merged": 6, "missed_pairs": 1});
        assert_eq!(
            table_row("tests/fixtures/memories_dev.jsonl", &report, &row).unwrap(),
            "| memories_dev.jsonl | cosine | 0.70 | 0.567 | 0.944 | 0.708 | 13 | 13 | 6/15 | 1 |"
        );
        assert!(table_row("f", &report, &json!({})).unwrap_err().to_string().contains("`threshold` missing"));
        let local = json!({"judge": "local", "linkage": "complete", "duplicate_floor": 0.55, "precision": 0.8,
            "recall": 0.6667, "f1": 0.7273, "false_pairs": 3, "false_pairs_with_hard_negative": 3,
            "hard_negatives_merged": 2, "missed_pairs": 6});
        assert_eq!(
            table_row("memories_dev.jsonl", &report, &local).unwrap(),
            "| memories_dev.jsonl | local, complete linkage | 0.55 | 0.800 | 0.667 | 0.727 | 3 | 3 | 2/15 | 6 |"
        );
    }
}
