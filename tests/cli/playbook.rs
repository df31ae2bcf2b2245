//! `memdedup playbook dedup` with the real model: outputs, reports, thresholds.

use std::path::Path;

use predicates::prelude::PredicateBooleanExt;
use predicates::str::contains;
use serde_json::{Value, json};

use crate::support::{
    EXAMPLE_PLAYBOOK, THRESHOLD_ENV_VAR, assert_close, counter_sum, dir_listing, entries, entry, example_playbook_copy,
    json, json_file, key_set, keys, memdedup, require_model, temp_file, text,
};

/// SCN-DEDUP-001-01: two near-identical entries in PATTERNS & APPROACHES.
fn type_hints_playbook() -> Value {
    json!({
        "version": "1.0",
        "last_updated": "2026-11-14T09:30:00Z",
        "sections": {
            "PATTERNS & APPROACHES": [
                {"name": "pat-001", "text": "always use type hints for function parameters", "helpful": 5, "harmful": 0},
                {"name": "pat-002", "text": "use type hints on all function parameters", "helpful": 3, "harmful": 1}
            ]
        }
    })
}

fn type_hints_playbook_file() -> (tempfile::TempDir, std::path::PathBuf) {
    temp_file("playbook.json", type_hints_playbook().to_string().as_bytes())
}

/// The first number on the line of `report` that contains `marker`, after the marker.
fn score_on_line(report: &str, marker: &str) -> f64 {
    let line = report
        .lines()
        .find(|line| line.contains(marker))
        .unwrap_or_else(|| panic!("no line with {marker:?} in the report:\n{report}"));
    line[line.find(marker).unwrap_or(0) + marker.len()..]
        .split_whitespace()
        .find_map(|token| token.trim_matches(|c| c == '(' || c == ')').parse().ok())
        .unwrap_or_else(|| panic!("no score on line {line:?}"))
}

#[test]
fn dedup_to_output_file_merges_and_keeps_unknown_fields() {
    require_model();
    let input = json_file(Path::new(EXAMPLE_PLAYBOOK));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");

    let assert = memdedup().args(["playbook", "dedup", EXAMPLE_PLAYBOOK, "-o"]).arg(&out).assert().success();

    let output = json_file(&out);
    assert!(entries(&output).len() < entries(&input).len(), "nothing was merged");
    assert_eq!(keys(&output), keys(&input));
    assert_eq!(output["owner"], "demo");
    assert_eq!(output["last_updated"], input["last_updated"]);
    let section_names = |v: &Value| v["sections"].as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(section_names(&output), section_names(&input), "sections are kept in file order");
    assert_eq!(entry(&output, "mis-001").expect("mis-001 survives")["source"], "retro-2026-10");
    let pat_001 = entry(&output, "pat-001").expect("pat-001 survives");
    assert_eq!((&pat_001["helpful"], &pat_001["harmful"]), (&json!(8), &json!(1)));
    assert!(entry(&output, "pref-003").is_none(), "pref-003 is absorbed by pat-001");
    assert_eq!(counter_sum(&output, "helpful"), counter_sum(&input, "helpful"));
    assert_eq!(counter_sum(&output, "harmful"), counter_sum(&input, "harmful"));

    let report = text(&assert.get_output().stdout);
    assert!(report.contains("pat-001 [PATTERNS & APPROACHES] helpful 8 harmful 1"), "{report}");
    assert_close(score_on_line(&report, "<- pref-003 [USER PREFERENCES]"), 0.9401, 0.005);
    let summary = format!("24 entries -> {} entries; wrote {}", entries(&output).len(), out.display());
    assert!(report.contains(&summary), "expected {summary:?} in:\n{report}");
}

#[test]
fn dry_run_json_prints_one_report_and_writes_nothing() {
    require_model();
    let (dir, file) = example_playbook_copy();
    let before = std::fs::read(&file).unwrap();
    let input = json(&before);

    let assert = memdedup().args(["playbook", "dedup", "--dry-run", "--json"]).arg(&file).assert().success();

    let report = json(&assert.get_output().stdout);
    assert_eq!(
        keys(&report),
        key_set(&[
            "input",
            "output",
            "dry_run",
            "model",
            "threshold",
            "entries_before",
            "entries_after",
            "merged",
            "non_canonical_sections",
            "skipped",
        ])
    );
    assert_eq!(report["input"], file.display().to_string());
    assert_eq!(report["output"], Value::Null);
    assert_eq!(report["dry_run"], true);
    assert!(report["model"].as_str().is_some_and(|m| !m.is_empty()), "{report}");
    assert_eq!(report["threshold"], 0.85);
    assert_eq!(report["entries_before"], entries(&input).len());
    assert_eq!(report["non_canonical_sections"], json!(["TEAM NOTES"]));
    assert_eq!(report["skipped"], Value::Null);

    let at = |place: &Value| {
        &input["sections"][place["section"].as_str().unwrap()][place["index"].as_u64().unwrap() as usize]
    };
    let merged = report["merged"].as_array().expect("merged is a list");
    assert!(!merged.is_empty());
    let mut absorbed_total = 0;
    for group in merged {
        assert_eq!(keys(group), key_set(&["survivor", "helpful", "harmful", "weakest_link", "absorbed"]));
        assert_eq!(keys(&group["survivor"]), key_set(&["section", "index", "name"]));
        let survivor = at(&group["survivor"]);
        assert_eq!(survivor["name"], group["survivor"]["name"], "survivor place and name agree");
        let absorbed = group["absorbed"].as_array().expect("absorbed is a list");
        assert!(!absorbed.is_empty());
        absorbed_total += absorbed.len();
        let mut names = vec![group["survivor"]["name"].clone()];
        let (mut helpful, mut harmful) = (survivor["helpful"].as_u64().unwrap(), survivor["harmful"].as_u64().unwrap());
        let mut weakest = f64::INFINITY;
        for a in absorbed {
            assert_eq!(keys(a), key_set(&["section", "index", "name", "via", "score"]));
            let original = at(a);
            assert_eq!(original["name"], a["name"], "absorbed place and name agree");
            assert!(names.contains(&a["via"]), "{} is absorbed via a member of its group", a["name"]);
            names.push(a["name"].clone());
            helpful += original["helpful"].as_u64().unwrap();
            harmful += original["harmful"].as_u64().unwrap();
            let score = a["score"].as_f64().expect("score is a number");
            assert!((0.85..=1.0).contains(&score), "score {score} is below the threshold");
            weakest = weakest.min(score);
        }
        assert_eq!((group["helpful"].as_u64(), group["harmful"].as_u64()), (Some(helpful), Some(harmful)));
        assert_close(group["weakest_link"].as_f64().unwrap(), weakest, 1e-9);
    }
    assert_eq!(report["entries_after"], entries(&input).len() - absorbed_total);
    let pat_001 = merged.iter().find(|g| g["survivor"]["name"] == "pat-001").expect("pat-001 absorbs a duplicate");
    assert_eq!(pat_001["absorbed"][0]["name"], "pref-003");
    assert_close(pat_001["absorbed"][0]["score"].as_f64().unwrap(), 0.9401, 0.005);

    assert_eq!(std::fs::read(&file).unwrap(), before, "the input is unchanged");
    assert_eq!(dir_listing(dir.path()), ["playbook.json"], "no file is created");
}

#[test]
fn dry_run_ignores_the_output_path() {
    require_model();
    let (dir, file) = example_playbook_copy();
    let out = dir.path().join("out.json");

    memdedup()
        .args(["playbook", "dedup", "--dry-run"])
        .arg(&file)
        .arg("-o")
        .arg(&out)
        .assert()
        .success()
        .stdout(contains("would merge").and(contains("dry run, nothing written")));

    assert_eq!(dir_listing(dir.path()), ["playbook.json"]);
}

#[test]
fn json_report_with_output_names_the_written_file() {
    require_model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");

    let assert = memdedup().args(["playbook", "dedup", EXAMPLE_PLAYBOOK, "--json", "-o"]).arg(&out).assert().success();

    let report = json(&assert.get_output().stdout);
    assert_eq!(report["output"], out.display().to_string());
    assert_eq!(report["dry_run"], false);
    assert_eq!(report["entries_after"], entries(&json_file(&out)).len());
}

#[test]
fn in_place_replaces_the_file_without_leftovers() {
    require_model();
    let (dir, file) = example_playbook_copy();
    let before = json_file(&file);

    memdedup().args(["playbook", "dedup", "--in-place"]).arg(&file).assert().success().stdout(contains("wrote"));

    let after = json_file(&file);
    assert!(entries(&after).len() < entries(&before).len());
    assert!(entry(&after, "pref-003").is_none());
    assert_eq!(dir_listing(dir.path()), ["playbook.json"], "no .memdedup-*.tmp file is left behind");
}

#[cfg(unix)]
#[test]
fn in_place_keeps_the_file_permissions() {
    use std::os::unix::fs::PermissionsExt;
    require_model();
    let (_dir, file) = example_playbook_copy();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();

    memdedup().args(["playbook", "dedup", "--in-place"]).arg(&file).assert().success();

    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o640);
}

#[cfg(unix)]
#[test]
fn new_output_file_gets_the_same_permissions_as_any_new_file() {
    use std::os::unix::fs::PermissionsExt;
    require_model();
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("reference.json");
    std::fs::write(&reference, "{}").unwrap();
    let out = dir.path().join("out.json");

    memdedup().args(["playbook", "dedup", EXAMPLE_PLAYBOOK, "-o"]).arg(&out).assert().success();

    let mode = |p: &Path| format!("{:o}", std::fs::metadata(p).unwrap().permissions().mode() & 0o777);
    assert_eq!(mode(&out), mode(&reference), "the output file's mode follows the umask like any new file");
}

#[test]
fn without_output_the_playbook_goes_to_stdout_and_the_report_to_stderr() {
    require_model();
    let input = json_file(Path::new(EXAMPLE_PLAYBOOK));

    let assert = memdedup().args(["playbook", "dedup", EXAMPLE_PLAYBOOK]).assert().success();

    let output = json(&assert.get_output().stdout);
    assert!(entries(&output).len() < entries(&input).len());
    let stderr = text(&assert.get_output().stderr);
    assert!(stderr.contains("pat-001") && stderr.contains("<- pref-003"), "{stderr}");
    assert!(stderr.contains("24 entries ->"), "{stderr}");
}

#[test]
fn quiet_prints_no_report_and_no_warning() {
    require_model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");

    memdedup()
        .args(["--quiet", "playbook", "dedup", EXAMPLE_PLAYBOOK, "-o"])
        .arg(&out)
        .assert()
        .success()
        .stdout("")
        .stderr("");

    assert!(out.exists());
}

#[test]
fn json_without_a_destination_is_a_usage_error() {
    memdedup()
        .args(["playbook", "dedup", EXAMPLE_PLAYBOOK, "--json"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(contains("--json prints the report on stdout").and(contains("-o OUT, --in-place or --dry-run")));
}

#[test]
fn threshold_one_merges_nothing_and_copies_the_input_bytes() {
    require_model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");

    memdedup()
        .args(["playbook", "dedup", EXAMPLE_PLAYBOOK, "--threshold", "1.0", "-o"])
        .arg(&out)
        .assert()
        .success()
        .stdout(contains("no duplicates among 24 entries"));

    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(EXAMPLE_PLAYBOOK).unwrap());
}

#[test]
fn scn_dedup_001_01_merge_two_similar_entries_in_same_section() {
    require_model();
    let (dir, file) = type_hints_playbook_file();
    let out = dir.path().join("out.json");

    memdedup().args(["playbook", "dedup", "--threshold", "0.85"]).arg(&file).arg("-o").arg(&out).assert().success();

    let mut expected = type_hints_playbook();
    expected["sections"]["PATTERNS & APPROACHES"] = json!([
        {"name": "pat-001", "text": "always use type hints for function parameters", "helpful": 8, "harmful": 1}
    ]);
    assert_eq!(json_file(&out), expected);
}

#[test]
fn scn_dedup_001_03_no_merge_when_below_threshold() {
    require_model();
    let playbook = json!({"sections": {"PATTERNS & APPROACHES": [
        {"name": "pat-001", "text": "use type hints for parameters", "helpful": 5, "harmful": 0},
        {"name": "pat-002", "text": "prefer composition over inheritance", "helpful": 3, "harmful": 0}
    ]}});
    let (dir, file) = temp_file("playbook.json", playbook.to_string().as_bytes());
    let out = dir.path().join("out.json");

    memdedup().args(["playbook", "dedup", "--threshold", "0.85"]).arg(&file).arg("-o").arg(&out).assert().success();

    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&file).unwrap());
}

/// `--dry-run --json` on the type-hints playbook with the threshold variable set to `env`.
fn dry_run_report_with_env(env: &str, extra_args: &[&str]) -> (Value, String) {
    let (_dir, file) = type_hints_playbook_file();
    let assert = memdedup()
        .env(THRESHOLD_ENV_VAR, env)
        .args(["playbook", "dedup", "--dry-run", "--json"])
        .args(extra_args)
        .arg(&file)
        .assert()
        .success();
    let output = assert.get_output();
    (json(&output.stdout), text(&output.stderr))
}

#[test]
fn scn_dedup_004_01_env_var_overrides_default_threshold() {
    require_model();
    let (report, _) = dry_run_report_with_env("0.99", &[]);
    assert_eq!(report["threshold"], 0.99);
    assert_eq!(report["merged"], json!([]), "the pair scores about 0.94, below 0.99");
    assert_eq!(report["entries_after"], 2);
}

#[test]
fn threshold_flag_overrides_the_env_var() {
    require_model();
    let (report, _) = dry_run_report_with_env("0.99", &["--threshold", "0.85"]);
    assert_eq!(report["threshold"], 0.85);
    assert_eq!(report["merged"].as_array().map(Vec::len), Some(1));
    assert_eq!(report["entries_after"], 1);
}

#[test]
fn non_numeric_threshold_env_var_is_ignored_with_a_warning() {
    require_model();
    let (report, stderr) = dry_run_report_with_env("abc", &[]);
    assert_eq!(report["threshold"], 0.85, "the default applies");
    assert_eq!(report["entries_after"], 1);
    assert!(stderr.contains(THRESHOLD_ENV_VAR) && stderr.contains("abc"), "no warning:\n{stderr}");
}

#[test]
fn out_of_range_threshold_env_var_is_clamped() {
    require_model();
    let (report, _) = dry_run_report_with_env("1.5", &[]);
    assert_eq!(report["threshold"], 1.0);
    assert_eq!(report["merged"], json!([]));
}

#[test]
fn defect_11_out_of_range_threshold_env_var_warns_when_clamped() {
    require_model();
    let (report, stderr) = dry_run_report_with_env("-1", &[]);
    assert_eq!(report["threshold"], 0.0, "clamped as the seed says");
    assert!(
        stderr.contains(THRESHOLD_ENV_VAR) && stderr.contains("-1"),
        "the warning names the variable and value:\n{stderr}"
    );
    assert!(stderr.contains("clamped to 0"), "the warning names the value used:\n{stderr}");
    let (_, stderr) = dry_run_report_with_env("0.9", &[]);
    assert!(!stderr.contains("clamped"), "an in-range value is not warned about:\n{stderr}");
}
