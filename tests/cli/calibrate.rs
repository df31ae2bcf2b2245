//! `memdedup calibrate` with the real model: consistent rows, the recommendation the rows
//! imply, `--write` that keeps the rest of the config file, and clear errors that write
//! nothing.

use std::path::PathBuf;

use memdedup::ConfigFile;
use serde_json::Value;

use crate::support::{json, memdedup, require_model, temp_file, text};

fn dev_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/memories_dev.jsonl")
}

/// A config file with a comment and keys calibrate does not touch.
const CONFIG: &str = "# hand-written settings, keep me\n[store]\ndb = \"/tmp/never-opened.db\"\n\n[dedup]\ntime_window_secs = 60 # five minutes is too long\n\n[dedup.thresholds]\nops = 0.91\n";

fn f(value: &Value) -> f64 {
    value.as_f64().unwrap_or_else(|| panic!("expected a number, got {value}"))
}

fn u(value: &Value) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("expected a count, got {value}"))
}

/// Checks one sweep of rows and that `recommendation` is what they imply for `target`.
fn check_rows(rows: &[Value], recommendation: &Value, target: f64, what: &str) {
    assert_eq!(rows.len(), 50, "{what}: 0.50 to 0.99 by 0.01");
    let labelled = u(&rows[0]["true_pairs"]) + u(&rows[0]["missed_pairs"]);
    let mut last_recall = f64::INFINITY;
    for (i, row) in rows.iter().enumerate() {
        assert!((f(&row["threshold"]) - (0.50 + i as f64 / 100.0)).abs() < 1e-9, "{what}: {row}");
        let (precision, recall, f1) = (f(&row["precision"]), f(&row["recall"]), f(&row["f1"]));
        for value in [precision, recall, f1] {
            assert!((0.0..=1.0).contains(&value), "{what}: {row}");
        }
        let (tp, fp, missed) = (u(&row["true_pairs"]), u(&row["false_pairs"]), u(&row["missed_pairs"]));
        assert_eq!(tp + missed, labelled, "{what}: {row}");
        if tp + fp > 0 {
            assert!((precision - tp as f64 / (tp + fp) as f64).abs() < 1e-9, "{what}: {row}");
        }
        assert!(recall <= last_recall, "{what}: a higher threshold cannot find more pairs: {row}");
        last_recall = recall;
    }
    if labelled < 2 {
        assert_eq!(recommendation["basis"], "too_few_pairs", "{what}: {recommendation}");
        assert!(recommendation["threshold"].is_null(), "{what}: {recommendation}");
        return;
    }
    let reaching = rows.iter().find(|r| u(&r["true_pairs"]) > 0 && f(&r["precision"]) + 1e-9 >= target);
    match reaching {
        Some(row) => {
            assert_eq!(recommendation["reaches_target"], true, "{what}: {recommendation}");
            assert_eq!(recommendation["threshold"], row["threshold"], "{what}: the lowest reaching {target}");
        }
        None => {
            assert_eq!(recommendation["basis"], "best_f1", "{what}: {recommendation}");
            let best = rows.iter().map(|r| f(&r["f1"])).fold(0.0, f64::max);
            assert_eq!(f(&recommendation["f1"]), best, "{what}: {recommendation}");
        }
    }
}

#[test]
fn calibrate_rows_add_up_and_the_recommendation_is_the_lowest_threshold_reaching_the_target() {
    require_model();
    let (dir, config) = temp_file("memdedup.toml", CONFIG.as_bytes());
    for target in [0.95, 0.8] {
        let out = memdedup()
            .args(["calibrate", "--json", "--target-precision", &target.to_string(), "--config"])
            .arg(&config)
            .arg(dev_fixture())
            .assert()
            .success();
        let report = json(&out.get_output().stdout);
        assert_eq!(report["target_precision"], target);
        assert_eq!(report["items"], 50);
        assert!(report["model"].as_str().is_some_and(|m| !m.is_empty()), "{report}");
        check_rows(report["rows"].as_array().unwrap(), &report["recommendation"], target, "overall");
        let namespaces = report["namespaces"].as_array().unwrap();
        let names: Vec<&str> = namespaces.iter().map(|ns| ns["namespace"].as_str().unwrap()).collect();
        assert_eq!(names, ["curiosity", "decisions", "facts", "lessons", "preferences"]);
        for ns in namespaces {
            let name = ns["namespace"].as_str().unwrap();
            check_rows(ns["rows"].as_array().unwrap(), &ns["recommendation"], target, name);
            let own = &ns["recommendation"]["threshold"];
            let applies = if own.is_null() { &report["recommendation"]["threshold"] } else { own };
            assert_eq!(&ns["applies"], applies, "{ns}");
        }
        // One labelled pair in `decisions`: the overall threshold is written for it, since
        // its built-in 0.92 would apply otherwise; `facts` (also one pair) just uses the default.
        let planned = &report["config"];
        assert_eq!(planned["written"], false);
        assert_eq!(planned["path"], config.display().to_string());
        assert_eq!(planned["default_threshold"], report["recommendation"]["threshold"]);
        assert_eq!(planned["thresholds"]["decisions"], report["recommendation"]["threshold"]);
        assert!(planned["thresholds"]["facts"].is_null(), "{planned}");
    }
    // Without --write nothing is written, and the human table says what would be.
    let out = memdedup().args(["calibrate", "--config"]).arg(&config).arg(dev_fixture()).assert().success();
    let human = text(&out.get_output().stdout);
    for expected in ["50 memories", "     0.50", "     0.95", "recommended: ", "per namespace:", "would write to"] {
        assert!(human.contains(expected), "{expected}: {human}");
    }
    assert!(human.contains("  decisions    uses the overall"), "{human}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), CONFIG);
    assert_eq!(crate::support::dir_listing(dir.path()), ["memdedup.toml"]);
}

#[test]
fn calibrate_write_keeps_the_rest_of_the_config_file_and_the_new_values_load() {
    require_model();
    let (dir, config) = temp_file("memdedup.toml", CONFIG.as_bytes());
    let out = memdedup()
        .args(["calibrate", "--json", "--write", "--target-precision", "0.9", "--config"])
        .arg(&config)
        .arg(dev_fixture())
        .assert()
        .success();
    let report = json(&out.get_output().stdout);
    assert_eq!(report["config"]["written"], true);
    let written = std::fs::read_to_string(&config).unwrap();
    for kept in [
        "# hand-written settings, keep me\n[store]\ndb = \"/tmp/never-opened.db\"\n",
        "time_window_secs = 60 # five minutes is too long\n",
        "ops = 0.91\n",
    ] {
        assert!(written.contains(kept), "{kept:?} is gone:\n{written}");
    }
    assert_eq!(crate::support::dir_listing(dir.path()), ["memdedup.toml"], "no temporary file left");

    let loaded = ConfigFile::load(Some(&config)).unwrap().dedup_config().unwrap();
    let overall = f(&report["recommendation"]["threshold"]);
    assert!((f64::from(loaded.default_threshold) - overall).abs() < 1e-6, "{written}");
    assert_eq!(loaded.recent_window.as_secs(), 60);
    assert_eq!(loaded.threshold_for("ops"), 0.91);
    for ns in report["namespaces"].as_array().unwrap() {
        let name = ns["namespace"].as_str().unwrap();
        assert!((f64::from(loaded.threshold_for(name)) - f(&ns["applies"])).abs() < 1e-6, "{name}: {written}");
    }

    // Human output names the file written.
    let out = memdedup().args(["calibrate", "--write", "--config"]).arg(&config).arg(dev_fixture()).assert().success();
    assert!(text(&out.get_output().stdout).contains(&format!("wrote {}:", config.display())));
}

#[test]
fn calibrate_write_without_a_config_file_creates_memdedup_toml_in_the_working_directory() {
    require_model();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let mut cmd = memdedup();
    // No config from $MEMDEDUP_HOME or ~/.config; the model stays where it was found.
    if std::env::var_os("MEMDEDUP_MODEL_DIR").is_none() {
        cmd.env("MEMDEDUP_MODEL_DIR", crate::support::installed_model_dir());
    }
    cmd.env("MEMDEDUP_HOME", &home).env("XDG_CONFIG_HOME", &home).current_dir(dir.path());
    let out = cmd.args(["calibrate", "--write", "--namespace", "lessons"]).arg(dev_fixture()).assert().success();
    let human = text(&out.get_output().stdout);
    assert!(human.contains("wrote memdedup.toml:"), "{human}");
    let written = std::fs::read_to_string(dir.path().join("memdedup.toml")).unwrap();
    assert!(written.starts_with("[dedup.thresholds]\nlessons = 0."), "only the namespace is set: {written}");
}

#[test]
fn calibrate_namespace_restricts_the_sweep_and_an_unknown_one_is_an_error() {
    require_model();
    let (_dir, config) = temp_file("memdedup.toml", CONFIG.as_bytes());
    let out = memdedup()
        .args(["calibrate", "--json", "--namespace", "lessons", "--config"])
        .arg(&config)
        .arg(dev_fixture())
        .assert()
        .success();
    let report = json(&out.get_output().stdout);
    assert_eq!(report["items"], 34);
    assert_eq!(report["namespaces"].as_array().unwrap().len(), 1);
    assert_eq!(report["namespaces"][0]["rows"], report["rows"]);
    assert!(report["config"]["default_threshold"].is_null(), "{report}");
    assert_eq!(report["config"]["thresholds"]["lessons"], report["recommendation"]["threshold"]);

    let out = memdedup()
        .args(["calibrate", "--write", "--namespace", "trading", "--config"])
        .arg(&config)
        .arg(dev_fixture())
        .assert()
        .failure()
        .code(1);
    let stderr = text(&out.get_output().stderr);
    assert!(
        stderr.contains("no memories in namespace \"trading\"")
            && stderr.contains("\"curiosity\", \"decisions\", \"facts\", \"lessons\", \"preferences\""),
        "{stderr}"
    );
    assert!(out.get_output().stdout.is_empty());
    assert_eq!(std::fs::read_to_string(&config).unwrap(), CONFIG);
}

#[test]
fn calibrate_refuses_bad_labelled_files_and_writes_nothing() {
    let (dir, config) = temp_file("memdedup.toml", CONFIG.as_bytes());
    for (contents, expected) in [
        ("", "has no labelled memories"),
        ("{\"id\": 1, \"cluster\": \"a\", \"text\": \"x\"}\nnot json\n", "line 2: not a labelled memory"),
        ("{\"id\": 1, \"text\": \"x\"}\n", "line 1: not a labelled memory: missing field `cluster`"),
        (
            "{\"id\": 1, \"cluster\": \"a\", \"text\": \"x\"}\n{\"id\": 2, \"cluster\": \"b\", \"text\": \"y\", \"near\": \"zz\"}\n",
            "line 2: `near` names cluster \"zz\"",
        ),
    ] {
        let labels = dir.path().join("labels.jsonl");
        std::fs::write(&labels, contents).unwrap();
        let out =
            memdedup().args(["calibrate", "--write", "--config"]).arg(&config).arg(&labels).assert().failure().code(1);
        let stderr = text(&out.get_output().stderr);
        assert!(
            stderr.contains(&format!("{}", labels.display())) && stderr.contains(expected),
            "{contents:?}: {stderr}"
        );
        assert!(out.get_output().stdout.is_empty());
        assert_eq!(std::fs::read_to_string(&config).unwrap(), CONFIG, "{contents:?}");
    }
    assert_eq!(crate::support::dir_listing(dir.path()), ["labels.jsonl", "memdedup.toml"]);
    for bad in ["0", "1.5", "high"] {
        let out = memdedup().args(["calibrate", "--target-precision", bad, "x.jsonl"]).assert().failure().code(2);
        let stderr = text(&out.get_output().stderr);
        assert!(stderr.contains("(0, 1]") || stderr.contains("not a number"), "{bad}: {stderr}");
    }
}
