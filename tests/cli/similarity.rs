//! `memdedup similarity` with the real model.

use crate::support::{assert_close, json, key_set, keys, memdedup, require_model, run_json, sqlite_db, text};

/// The cosine `memdedup similarity` prints for two texts.
fn cosine(first: &str, second: &str) -> f64 {
    let assert = memdedup().args(["similarity", first, second]).assert().success();
    let stdout = text(&assert.get_output().stdout);
    stdout.trim().parse().unwrap_or_else(|e| panic!("{stdout:?} is not a number: {e}"))
}

#[test]
fn prints_one_number_with_four_decimals() {
    require_model();

    let assert = memdedup()
        .args(["similarity", "Purge the CDN after a deploy.", "The user runs a marathon."])
        .assert()
        .success();

    let stdout = text(&assert.get_output().stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
    let number = stdout.trim_end();
    let decimals = number.split_once('.').map(|(_, d)| d).unwrap_or_else(|| panic!("{number:?} has no decimals"));
    assert_eq!(decimals.len(), 4, "{number:?}");
    assert!(decimals.chars().all(|c| c.is_ascii_digit()), "{number:?}");
    let value: f64 = number.parse().expect("a number");
    assert!((-1.0..=1.0).contains(&value), "{value}");
}

#[test]
fn json_gives_the_model_and_the_cosine() {
    require_model();

    let assert = memdedup().args(["similarity", "--json", "a cat", "a dog"]).assert().success();

    let report = json(&assert.get_output().stdout);
    assert_eq!(keys(&report), key_set(&["model", "cosine"]));
    assert!(report["model"].as_str().is_some_and(|m| !m.is_empty()), "{report}");
    let value = report["cosine"].as_f64().expect("cosine is a number");
    assert!((-1.0..=1.0).contains(&value), "{value}");
}

#[test]
fn type_hints_pair_matches_the_reference_cosine() {
    require_model();
    let value = cosine("always use type hints for function parameters", "use type hints on all function parameters");
    assert_close(value, 0.9401, 0.005);
}

#[test]
fn other_reference_pairs_match_their_cosines() {
    require_model();
    let pairs = [
        ("avoid using the any type", "don't use any type in TypeScript", 0.6713),
        ("use type hints for parameters", "prefer composition over inheritance", 0.1864),
        ("Never trade during low-volume weekends", "Avoid trading on weekends when volume is low", 0.8731),
    ];
    for (first, second, expected) in pairs {
        assert_close(cosine(first, second), expected, 0.005);
    }
}

#[test]
fn identical_texts_score_one() {
    require_model();
    assert_close(cosine("Use git bisect to find a regression.", "Use git bisect to find a regression."), 1.0, 1e-4);
}

/// Defect 12: `similarity` and `check` embed long texts the same way (windows), so two
/// 3,000-character texts that differ in their last sentence get the same cosine from
/// both, and `similarity` does not print 1.0000 for them.
#[test]
fn defect_12_similarity_and_check_agree_on_long_texts_that_differ_at_the_end() {
    require_model();
    let body: String = (0..40)
        .map(|i| {
            format!("Step {i} of the runbook writes the record to the primary database and retries with backoff. ")
        })
        .collect();
    let (first, second) =
        (format!("{body}Finally the cache is flushed nightly."), format!("{body}Finally the cache is never flushed."));
    assert!(first.len() > 2_800, "{}", first.len());

    let printed = cosine(&first, &second);
    let (_dir, db) = sqlite_db();
    run_json(&db, &["add", "--judge", "cosine", &first]);
    let check = run_json(&db, &["check", "--judge", "cosine", &second]);
    let from_check = check["similarity_score"].as_f64().expect("check gives a similarity score");

    assert!(printed < 1.0, "similarity printed {printed} for texts that differ");
    assert_close(printed, from_check, 2e-4);
}

/// Defect 6: `[embedder] max_windows` bounds the windows a long text is embedded from.
/// With one window, two long texts that differ only past their first window embed alike;
/// with the default 32, the different ending moves the vector.
#[test]
fn defect_6_max_windows_is_a_setting() {
    require_model();
    let body: String = (0..120).map(|i| format!("Step {i} of the runbook checks the replica lag first. ")).collect();
    let first = format!("{body}The ending says to page the database team right away.");
    let second = format!("{body}{}", "Instead the cache is flushed and the release is rolled back. ".repeat(30));
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("memdedup.toml");
    std::fs::write(&config, "[embedder]\nmax_windows = 1\n").expect("writable");
    let with = |config: Option<&std::path::Path>| -> f64 {
        let mut cmd = memdedup();
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
        let out = cmd.args(["similarity", "--json", &first, &second]).output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        json(&out.stdout)["cosine"].as_f64().expect("a cosine")
    };
    let one_window = with(Some(&config));
    let default = with(None);
    assert!(one_window >= 0.9999, "one window (shown at most 0.9999 for different texts): {one_window}");
    assert!(default < 0.99, "32 windows: {default}");
    std::fs::write(&config, "[embedder]\nmax_windows = 0\n").expect("writable");
    let out = memdedup().arg("--config").arg(&config).args(["similarity", &first, &second]).output().expect("runs");
    assert_eq!(out.status.code(), Some(1), "a bad config file is invalid input");
    assert!(String::from_utf8_lossy(&out.stderr).contains("`embedder.max_windows` must be an integer from 1 to 1024"));
}
