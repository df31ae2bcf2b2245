//! The local judge through the CLI with the real model: `eval --judge local` (and its
//! sweep), `scan --judge local` with the hub guard, `playbook dedup --judge local`, and
//! clear errors for bad parameters.

use std::path::PathBuf;

use serde_json::Value;

use crate::support::{json, memdedup, require_model, temp_file, text};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// A near copy with another time, a paraphrase, and an opposite action: cosine puts
/// each pair together at 0.85; the local judge keeps apart the two that say otherwise.
const NEAR_COPIES: &str = "\
{\"id\": 1, \"text\": \"The user has a standing 1:1 with their manager every Thursday at 14:00.\"}
{\"id\": 2, \"text\": \"The user has a standing 1:1 with their manager every Thursday at 16:00.\"}
{\"id\": 3, \"text\": \"Every Thursday at 14:00 the user has a standing 1:1 with their manager.\"}
{\"id\": 4, \"text\": \"Go long BTC when funding turns negative.\"}
{\"id\": 5, \"text\": \"Go short BTC when funding turns negative.\"}
";

fn members(report: &Value) -> Vec<Vec<u64>> {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["members"].as_array().unwrap().iter().map(|m| m.as_u64().unwrap()).collect())
        .collect()
}

#[test]
fn scan_with_the_local_judge_keeps_other_numbers_and_opposites_apart_with_reasons() {
    require_model();
    let (_dir, path) = temp_file("near.jsonl", NEAR_COPIES.as_bytes());
    let cosine = json(
        &memdedup().args(["scan", "--judge", "cosine"]).arg(&path).arg("--json").assert().success().get_output().stdout,
    );
    assert_eq!(members(&cosine), [vec![1, 2, 3], vec![4, 5]], "cosine alone merges them: {cosine}");
    assert!(cosine.get("judge").is_none(), "the seed's shape is unchanged: {cosine}");

    let judged = json(
        &memdedup().args(["scan", "--judge", "local", "--json"]).arg(&path).assert().success().get_output().stdout,
    );
    assert_eq!(members(&judged), [vec![1, 3]], "{judged}");
    assert_eq!(judged["judge"], "local");
    assert_eq!(judged["linkage"], "complete");
    let rejected = judged["rejected"].as_array().unwrap();
    let reasons = |a: u64, b: u64| -> Vec<String> {
        let pair = rejected.iter().find(|p| p["a"] == a && p["b"] == b).unwrap_or_else(|| panic!("{a}/{b}: {judged}"));
        assert_eq!(pair["verdict"], "related");
        pair["reasons"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_owned()).collect()
    };
    assert!(reasons(1, 2).contains(&"specifics differ: 14:00 vs 16:00".to_owned()));
    assert!(reasons(4, 5).contains(&"opposite words: long vs short".to_owned()));

    let human = text(&memdedup().args(["scan", "--judge", "local"]).arg(&path).assert().success().get_output().stdout);
    assert!(human.contains("kept apart by the judge (3)"), "{human}");
    assert!(human.contains("4 / 5"), "{human}");

    // `[dedup] judge` in memdedup.toml chooses the judge too; the flag wins.
    let (_config_dir, config) = temp_file("memdedup.toml", b"[dedup]\njudge = \"local\"\n");
    let configured = json(
        &memdedup()
            .arg("--config")
            .arg(&config)
            .arg("scan")
            .arg(&path)
            .arg("--json")
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(members(&configured), [vec![1, 3]], "{configured}");
    let overridden = json(
        &memdedup()
            .arg("--config")
            .arg(&config)
            .args(["scan", "--judge", "cosine", "--json"])
            .arg(&path)
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(members(&overridden), [vec![1, 2, 3], vec![4, 5]], "{overridden}");
}

#[test]
fn the_hub_guard_refuses_a_chain_and_says_why() {
    require_model();
    // 2 is a duplicate of 1 and of 3 (it gives no numbers), but 1 and 3 differ in theirs.
    let items = "\
{\"id\": 1, \"text\": \"Canary releases get 5% of traffic for 30 minutes before full rollout.\"}
{\"id\": 2, \"text\": \"Canary releases get a small slice of traffic for a while before full rollout.\"}
{\"id\": 3, \"text\": \"Canary releases get 10% of traffic for 60 minutes before full rollout.\"}
";
    let (_dir, path) = temp_file("chain.jsonl", items.as_bytes());
    let scan = |linkage: &str| {
        let out =
            memdedup().args(["scan", "--judge", "local", "--linkage", linkage, "--json"]).arg(&path).assert().success();
        json(&out.get_output().stdout)
    };
    let single = scan("single");
    assert_eq!(members(&single), [vec![1, 2, 3]], "the hub chains 1 and 3: {single}");
    assert_eq!(single["refused"].as_array().unwrap().len(), 0);
    for linkage in ["survivor", "complete"] {
        let guarded = scan(linkage);
        assert_eq!(guarded["linkage"], linkage);
        assert_eq!(members(&guarded), [vec![1, 2]], "{guarded}");
        let refused = guarded["refused"].as_array().unwrap();
        assert_eq!(refused.len(), 1, "{guarded}");
        assert_eq!((refused[0]["member"].as_u64(), refused[0]["survivor"].as_u64()), (Some(3), Some(1)));
        assert!(refused[0]["reason"].as_str().unwrap().contains("specifics differ"), "{guarded}");
    }
    let human = text(
        &memdedup()
            .args(["scan", "--judge", "local", "--linkage", "complete"])
            .arg(&path)
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert!(human.contains("links refused by the complete linkage (1)"), "{human}");
}

#[test]
fn eval_with_the_local_judge_merges_fewer_hard_negatives_than_cosine() {
    require_model();
    let file = fixture("memories_dev.jsonl");
    let cosine = json(
        &memdedup().args(["eval", "--json", "--threshold", "0.7"]).arg(&file).assert().success().get_output().stdout,
    );
    let local = json(
        &memdedup()
            .args(["eval", "--json", "--judge", "local", "--worst", "3"])
            .arg(&file)
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(local["judge"], "local");
    let (c, l) = (&cosine["results"][0], &local["results"][0]);
    assert_eq!(l["linkage"], "complete");
    assert!(l["duplicate_floor"].as_f64().is_some());
    assert!(l["hard_negatives_merged"].as_u64() < c["hard_negatives_merged"].as_u64(), "local {l} vs cosine {c}");
    assert!(l["precision"].as_f64() > c["precision"].as_f64(), "local {l} vs cosine {c}");
    for pair in l["worst_false_pairs"].as_array().unwrap().iter().chain(l["worst_missed_pairs"].as_array().unwrap()) {
        assert!(!pair["reasons"].as_array().unwrap().is_empty(), "every listed mistake says why: {pair}");
    }
    let human = text(&memdedup().args(["eval", "--judge", "local"]).arg(&file).assert().success().get_output().stdout);
    assert!(human.contains("judge: local (duplicate floor") && human.contains("because: "), "{human}");
}

#[test]
fn eval_sweep_covers_the_grid_and_a_parameter_file_is_used() {
    require_model();
    let file = fixture("memories_dev.jsonl");
    let sweep = json(
        &memdedup()
            .args(["eval", "--json", "--judge", "local", "--sweep", "--worst", "0"])
            .arg(&file)
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    let rows = sweep["results"].as_array().unwrap();
    assert_eq!(rows.len(), 11 * 256, "11 floors times every set of 8 vetoes");
    // Without vetoes the judge is cosine at its floor with complete linkage: never more
    // precise than with every veto at the same floor.
    let at = |floor: f64, vetoes: usize| {
        rows.iter()
            .find(|r| {
                (r["duplicate_floor"].as_f64().unwrap() - floor).abs() < 1e-6
                    && r["vetoes"].as_array().unwrap().len() == vetoes
            })
            .unwrap()
    };
    assert!(at(0.6, 8)["false_pairs"].as_u64() <= at(0.6, 0)["false_pairs"].as_u64());

    let (_dir, params) = temp_file("params.json", br#"{"duplicate_floor": 0.99, "related_floor": 0.5, "vetoes": []}"#);
    let strict = json(
        &memdedup()
            .args(["eval", "--json", "--judge", "local", "--judge-params"])
            .arg(&params)
            .arg(&file)
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(strict["results"][0]["duplicate_floor"].as_f64().map(|f| (f * 100.0).round()), Some(99.0));
    assert_eq!(strict["results"][0]["false_pairs"], 0, "{strict}");
}

#[test]
fn bad_judge_flags_and_parameter_files_give_clear_errors() {
    let file = fixture("memories_dev.jsonl");
    let (_dir, bad) = temp_file("params.json", br#"{"duplicate_floor": 2, "related_floor": 0.5, "vetoes": []}"#);
    let (_dir2, unknown) =
        temp_file("veto.json", br#"{"duplicate_floor": 0.6, "related_floor": 0.5, "vetoes": ["vibes"]}"#);
    let (_dir3, garbage) = temp_file("garbage.json", b"not json");
    for (args, expected) in [
        (
            vec!["eval", "--judge", "local", "--judge-params", bad.to_str().unwrap()],
            "duplicate_floor 2 is outside [0, 1]",
        ),
        (vec!["eval", "--judge", "local", "--judge-params", unknown.to_str().unwrap()], "unknown veto \"vibes\""),
        (
            vec!["scan", "--judge", "local", "--judge-params", garbage.to_str().unwrap()],
            "garbage.json: invalid judge parameters",
        ),
        (vec!["scan", "--judge-params", bad.to_str().unwrap()], "--judge-params"),
        (vec!["eval", "--judge-params", bad.to_str().unwrap()], "--judge-params needs --judge local"),
        (vec!["eval", "--judge", "local", "--sweep"], "--sweep needs --judge local and --json"),
        (vec!["scan", "--judge", "local", "--judge-params", "/nonexistent/params.json"], "/nonexistent/params.json"),
    ] {
        let mut cmd = memdedup();
        cmd.args(&args);
        if args[0] == "eval" {
            cmd.arg(&file);
        } else {
            cmd.arg(fixture("memories_dev.jsonl"));
        }
        let out = cmd.assert().failure().code(1);
        let stderr = text(&out.get_output().stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(out.get_output().stdout.is_empty(), "{args:?}");
    }
    for command in ["scan", "eval"] {
        let out = memdedup().args([command, "--judge", "llm"]).arg(&file).assert().failure().code(2);
        assert!(text(&out.get_output().stderr).contains("invalid value 'llm'"), "{command}");
    }
}

#[test]
fn playbook_dedup_with_the_local_judge_keeps_vetoed_entries() {
    require_model();
    let playbook = r#"{"sections": {"STRATEGIES & INSIGHTS": [
        {"name": "s1", "text": "The user has a standing 1:1 with their manager every Thursday at 14:00.", "helpful": 1, "harmful": 0},
        {"name": "s2", "text": "The user has a standing 1:1 with their manager every Thursday at 16:00.", "helpful": 2, "harmful": 0},
        {"name": "s3", "text": "Every Thursday at 14:00 the user has a standing 1:1 with their manager.", "helpful": 3, "harmful": 0}
    ]}}"#;
    let (_dir, path) = temp_file("playbook.json", playbook.as_bytes());
    let run = |judge: &str| {
        let out = memdedup()
            .args(["playbook", "dedup", "--dry-run", "--json", "--threshold", "0.9", "--judge", judge])
            .arg(&path)
            .assert()
            .success();
        json(&out.get_output().stdout)
    };
    let cosine = run("cosine");
    assert_eq!(cosine["entries_after"], 1, "{cosine}");
    let local = run("local");
    assert_eq!(local["entries_after"], 2, "{local}");
    assert_eq!(local["merged"][0]["survivor"]["name"], "s1");
    assert_eq!(local["merged"][0]["absorbed"][0]["name"], "s3");
    assert_eq!(local["merged"][0]["helpful"], 4);
    let rejected = local["rejected"].as_array().unwrap();
    assert!(rejected.iter().any(|p| p["a"] == "s1" && p["b"] == "s2"), "{local}");
}
