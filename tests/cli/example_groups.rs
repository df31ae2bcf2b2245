//! The example files keep their groups: `scan` and `playbook dedup` on them give what the
//! recorded reports say (made with the fastembed-based embedder this one replaced), so a
//! change to the embedding path that moves a group shows here.

use serde_json::Value;

use crate::support::{EXAMPLE_MEMORIES, EXAMPLE_PLAYBOOK, json, json_file, memdedup, require_model};

const RECORDED_SCAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/example_scan_report.json");
const RECORDED_PLAYBOOK: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/example_playbook_deduped.json");

/// Survivor and members of every group, in report order.
fn groups(report: &Value) -> Vec<(String, Vec<String>)> {
    let list = report["groups"].as_array().unwrap_or_else(|| panic!("no groups in {report}"));
    list.iter()
        .map(|g| {
            let members = g["members"].as_array().expect("members").iter().map(|m| m.to_string()).collect();
            (g["survivor"].to_string(), members)
        })
        .collect()
}

/// Every edge's score, in report order.
fn edge_scores(report: &Value) -> Vec<f64> {
    let list = report["groups"].as_array().expect("groups");
    list.iter()
        .flat_map(|g| g["edges"].as_array().expect("edges").iter().map(|e| e[2].as_f64().expect("score")))
        .collect()
}

#[test]
fn scan_of_the_example_memories_finds_the_recorded_groups() {
    require_model();
    // The recorded scan is the cosine judge's (seed behaviour).
    let assert = memdedup().args(["scan", "--judge", "cosine", "-q", "--json", EXAMPLE_MEMORIES]).assert().success();
    let report = json(&assert.get_output().stdout);
    let recorded = json_file(std::path::Path::new(RECORDED_SCAN));
    assert_eq!(groups(&report), groups(&recorded));
    assert!(!groups(&report).is_empty());
    let (now, then) = (edge_scores(&report), edge_scores(&recorded));
    assert_eq!(now.len(), then.len());
    for (a, b) in now.iter().zip(&then) {
        assert!((a - b).abs() <= 2e-4, "edge score {a} was {b}");
    }
}

#[test]
fn playbook_dedup_of_the_example_playbook_keeps_the_recorded_entries() {
    require_model();
    let out = tempfile::tempdir().expect("temp dir");
    let path = out.path().join("deduped.json");
    memdedup().args(["playbook", "dedup", "-q", EXAMPLE_PLAYBOOK, "-o"]).arg(&path).assert().success();
    let deduped = json_file(&path);
    let recorded = json_file(std::path::Path::new(RECORDED_PLAYBOOK));
    assert_eq!(deduped["sections"], recorded["sections"]);
    let before: usize = json_file(std::path::Path::new(EXAMPLE_PLAYBOOK))["sections"]
        .as_object()
        .expect("sections")
        .values()
        .map(|v| v.as_array().map_or(0, Vec::len))
        .sum();
    let after: usize =
        deduped["sections"].as_object().expect("sections").values().map(|v| v.as_array().map_or(0, Vec::len)).sum();
    assert!(after < before, "the example playbook has duplicates to merge: {before} -> {after}");
}
