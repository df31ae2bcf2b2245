//! `memdedup eval` with the real model: metrics that add up, and clear errors for bad
//! labelled files.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::support::{json, memdedup, require_model, temp_file, text};

fn dev_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/memories_dev.jsonl")
}

/// Labelled duplicate pairs of a JSONL file, counted from its `cluster` fields.
fn labelled_pairs(path: &PathBuf) -> u64 {
    let mut sizes: BTreeMap<String, u64> = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap().lines().filter(|l| !l.trim().is_empty()) {
        let item = json(line.as_bytes());
        *sizes.entry(item["cluster"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    sizes.values().map(|n| n * (n - 1) / 2).sum()
}

#[test]
fn eval_reports_pair_metrics_per_threshold_that_add_up() {
    require_model();
    let fixture = dev_fixture();
    let out = memdedup()
        .args(["eval", "--json", "--threshold", "0.7", "--threshold", "0.8", "--threshold", "0.9", "--worst", "3"])
        .arg(&fixture)
        .assert()
        .success();
    let report = json(&out.get_output().stdout);
    assert_eq!(report["items"], 50);
    assert_eq!(report["clusters"], 33);
    assert_eq!(report["hard_negatives"], 15);
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    let labelled = labelled_pairs(&fixture);
    let mut last_recall = f64::INFINITY;
    for row in results {
        let tp = row["true_pairs"].as_u64().unwrap();
        let fp = row["false_pairs"].as_u64().unwrap();
        let missed = row["missed_pairs"].as_u64().unwrap();
        assert_eq!(tp + missed, labelled, "{row}");
        let precision = row["precision"].as_f64().unwrap();
        let recall = row["recall"].as_f64().unwrap();
        if tp + fp > 0 {
            assert!((precision - tp as f64 / (tp + fp) as f64).abs() < 1e-9, "{row}");
        }
        assert!((recall - tp as f64 / labelled as f64).abs() < 1e-9, "{row}");
        assert!(recall <= last_recall, "a higher threshold cannot find more pairs: {row}");
        last_recall = recall;
        assert!(row["false_pairs_with_hard_negative"].as_u64().unwrap() <= fp);
        let worst = row["worst_false_pairs"].as_array().unwrap();
        assert!(worst.len() <= 3 && worst.len() as u64 <= fp);
        let cosines: Vec<f64> = worst.iter().map(|p| p["cosine"].as_f64().unwrap()).collect();
        assert!(cosines.windows(2).all(|w| w[0] >= w[1]), "worst first: {cosines:?}");
        for pair in worst {
            let clusters = pair["clusters"].as_array().unwrap();
            assert_ne!(clusters[0], clusters[1], "a false pair joins two clusters: {pair}");
        }
    }
    // The human table has one row per threshold and names the worst mistakes.
    let out = memdedup().args(["eval", "--threshold", "0.7", "--threshold", "0.9"]).arg(&fixture).assert().success();
    let human = text(&out.get_output().stdout);
    assert!(human.contains("50 memories in 33 clusters, 15 hard negatives"), "{human}");
    assert!(human.contains("     0.70") && human.contains("     0.90"), "{human}");
    assert!(human.contains("worst mistakes at"), "{human}");
}

#[test]
fn eval_refuses_bad_labelled_files_with_the_line() {
    for (contents, expected) in [
        ("", "has no labelled memories"),
        ("{\"id\": 1, \"text\": \"x\"}\n", "line 1: not a labelled memory: missing field `cluster`"),
        (
            "{\"id\": 1, \"cluster\": \"a\", \"text\": \"x\"}\n{\"id\": 2, \"cluster\": \"b\", \"text\": \"y\", \"near\": \"zz\"}\n",
            "line 2: `near` names cluster \"zz\"",
        ),
        (
            "{\"id\": 1, \"cluster\": \"a\", \"text\": \"x\"}\n{\"id\": 1, \"cluster\": \"a\", \"text\": \"y\"}\n",
            "line 2: id \"1\" appears twice",
        ),
        ("{\"id\": 1, \"cluster\": 7, \"text\": \"x\"}\n", "line 1: not a labelled memory"),
    ] {
        let (_dir, path) = temp_file("labels.jsonl", contents.as_bytes());
        let out = memdedup().arg("eval").arg(&path).assert().failure().code(1);
        let stderr = text(&out.get_output().stderr);
        assert!(stderr.contains(expected), "{contents:?}: {stderr}");
        assert!(out.get_output().stdout.is_empty());
    }
    let out = memdedup().args(["eval", "--threshold", "1.5", "x.jsonl"]).assert().failure().code(2);
    assert!(text(&out.get_output().stderr).contains("outside [0, 1]"));
}
