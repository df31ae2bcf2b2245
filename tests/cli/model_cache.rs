//! The optimised graphs the local models cache beside themselves (the embedder's and the
//! pair judge's): written on first use, loaded by later processes with the same answers,
//! rebuilt when unusable.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{json, memdedup, require_model, text};

const FIRST: &str = "always use type hints for function parameters";
const SECOND: &str = "use type hints on all function parameters";

/// The model directory the binary finds by default, from its debug log.
fn installed_model_dir() -> PathBuf {
    require_model();
    let output = memdedup().env("MEMDEDUP_LOG", "debug").args(["similarity", "a", "b"]).output().expect("runs");
    let stderr = text(&output.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("loaded local embedding model"))
        .unwrap_or_else(|| panic!("no load line in the debug log:\n{stderr}"));
    let dir = line.split(" dir=").nth(1).unwrap_or_else(|| panic!("no dir in {line:?}"));
    PathBuf::from(dir.trim())
}

/// A directory that links every pinned file of the installed models and holds no cache.
fn model_copy() -> tempfile::TempDir {
    let installed = installed_model_dir();
    let copy = tempfile::tempdir().expect("temp dir");
    for entry in std::fs::read_dir(&installed).expect("model dir is readable") {
        let entry = entry.expect("dir entry");
        let name = entry.file_name();
        if name.to_string_lossy().contains(".optimized-") {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), copy.path().join(&name)).expect("symlink");
    }
    copy
}

/// `memdedup similarity --json` of the two texts with the models in `dir` and `extra`
/// arguments: its JSON reply and the debug log.
fn similarity_json(dir: &Path, extra: &[&str]) -> (Value, String) {
    let output = memdedup()
        .env("MEMDEDUP_LOG", "debug")
        .args(["similarity", "--json"])
        .args(extra)
        .arg("--model-dir")
        .arg(dir)
        .args([FIRST, SECOND])
        .output()
        .expect("runs");
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    (json(&output.stdout), stderr)
}

/// The cosine of the two texts with the model in `dir`, and the debug log.
fn similarity(dir: &Path) -> (f64, String) {
    let (reply, stderr) = similarity_json(dir, &[]);
    let cosine = reply["cosine"].as_f64().unwrap_or_else(|| panic!("no cosine:\n{stderr}"));
    (cosine, stderr)
}

fn cached_graphs(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("readable")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("model.optimized")))
        .collect();
    found.sort();
    found
}

#[test]
fn first_use_caches_the_optimised_graph_and_later_processes_load_it_with_the_same_vectors() {
    let dir = model_copy();
    assert!(cached_graphs(dir.path()).is_empty());

    let (first, log) = similarity(dir.path());
    assert!(log.contains("optimised now and cached"), "{log}");
    let cached = cached_graphs(dir.path());
    assert_eq!(cached.len(), 1, "one cached graph and no staging file left: {cached:?}");
    assert!(cached[0].extension().is_some_and(|e| e == "ort"), "{cached:?}");

    let (again, log) = similarity(dir.path());
    assert!(log.contains("source=cached optimised graph"), "{log}");
    assert_eq!(first, again, "the cached graph must give the same vectors");
    assert!((first - 0.9401).abs() <= 0.005, "{first}");
    assert_eq!(cached_graphs(dir.path()), cached);
}

#[test]
fn an_unusable_cached_graph_is_rebuilt_and_the_answer_is_unchanged() {
    let dir = model_copy();
    let (first, _) = similarity(dir.path());
    let cached = cached_graphs(dir.path());
    assert_eq!(cached.len(), 1, "{cached:?}");
    std::fs::write(&cached[0], b"not an onnx graph").expect("overwrite the cache");

    let (again, log) = similarity(dir.path());
    assert!(log.contains("unusable; rebuilding"), "{log}");
    assert_eq!(first, again);
    let size = std::fs::metadata(&cached[0]).expect("rebuilt").len();
    assert!(size > 1_000_000, "the rebuilt cache has {size} bytes");
}

/// The learned judge's P(duplicate) of the two texts with the models in `dir`, and the
/// debug log.
fn judged(dir: &Path) -> (f64, String) {
    let (reply, stderr) = similarity_json(dir, &["--judge", "learned"]);
    let probability = reply["judgement"]["probability"].as_f64().unwrap_or_else(|| panic!("no probability:\n{stderr}"));
    (probability, stderr)
}

#[test]
fn the_pair_judge_caches_its_optimised_graph_too_with_the_same_verdict() {
    let dir = model_copy();
    let pair_graphs = || -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .expect("readable")
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("pair_judge.optimized-")))
            .collect();
        found.sort();
        found
    };
    assert!(pair_graphs().is_empty());
    let (first, log) = judged(dir.path());
    let loaded = |log: &str| -> String {
        log.lines().find(|l| l.contains("pair judge model loaded")).unwrap_or_else(|| panic!("{log}")).to_owned()
    };
    assert!(loaded(&log).contains("optimised now and cached"), "{log}");
    let cached = pair_graphs();
    assert_eq!(cached.len(), 1, "one cached graph and no staging file left: {cached:?}");
    let (again, log) = judged(dir.path());
    assert!(loaded(&log).contains("source=cached optimised graph"), "{log}");
    assert_eq!(first, again, "the cached graph must give the same verdict");
    assert!(first > 0.0 && first < 1.0, "{first}");
    assert_eq!(pair_graphs(), cached);
}
