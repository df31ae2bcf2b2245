//! Generated credentials of every kind the detector knows, inside generated prose, through
//! `memdedup capture`: none reaches the database, stdout or stderr verbatim (defect 1).

use std::io::Write;
use std::process::Stdio;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use crate::support::{memdedup, seed};

/// Candidates per generated batch, and batches.
const PER_BATCH: usize = 40;
const BATCHES: u32 = 4;

/// Characters a generated credential body is drawn from.
const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER_DIGITS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const BASE64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+";

fn drawn(alphabet: &'static str, len: usize) -> impl Strategy<Value = String> {
    let chars: Vec<char> = alphabet.chars().collect();
    proptest::collection::vec(proptest::sample::select(chars), len).prop_map(|c| c.into_iter().collect())
}

/// A credential in a vendor's format: (what the text says, the secret value in it).
fn credential() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        drawn(UPPER_DIGITS, 16).prop_map(|b| {
            let v = format!("AKIA{b}");
            (format!("the deploy user is {v}"), v)
        }),
        drawn(BASE64, 40).prop_map(|b| (format!("aws_secret_access_key = {b}"), b)),
        drawn(ALNUM, 36).prop_map(|b| {
            let v = format!("ghp_{b}");
            (format!("use {v} for the bot"), v)
        }),
        (drawn(ALNUM, 20), drawn(ALNUM, 12)).prop_map(|(a, b)| {
            let v = format!("glpat-{a}{b}");
            (format!("the runner token is {v}"), v)
        }),
        drawn(ALNUM, 24).prop_map(|b| {
            let v = format!("xoxb-123456789012-1234567890123-{b}");
            (format!("slack bot token {v}"), v)
        }),
        drawn(ALNUM, 40).prop_map(|b| {
            let v = format!("sk-proj-{b}");
            (format!("the old key {v} was rotated"), v)
        }),
        drawn(ALNUM, 14).prop_map(|b| {
            let v = format!("Zq9{b}");
            (format!("DATABASE_URL=postgres://app:{v}@db.internal:5432/prod"), v)
        }),
        drawn(ALNUM, 14).prop_map(|b| {
            let v = format!("Xk7!{b}");
            (format!("the admin password = {v}"), v)
        }),
    ]
}

/// A sentence of filler around the credential.
fn sentence() -> impl Strategy<Value = String> {
    let words = ["staging", "billing", "runner", "cluster", "release", "nightly", "replica", "gateway"];
    proptest::collection::vec(proptest::sample::select(words.to_vec()), 3..8)
        .prop_map(|w| format!("Remember the {} setup.", w.join(" ")))
}

#[test]
fn defect_1_generated_credentials_never_reach_the_database_or_the_output() {
    let mut rng_seed = [0u8; 32];
    rng_seed[..8].copy_from_slice(&seed(61).to_le_bytes());
    let config = Config { cases: BATCHES, failure_persistence: None, max_shrink_iters: 0, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &rng_seed));
    let batch = proptest::collection::vec((sentence(), credential(), sentence()), PER_BATCH);
    let result = runner.run(&batch, |batch| {
        let dir = tempfile::tempdir().expect("temporary directory");
        let db = dir.path().join("m.db");
        let no_model = dir.path().join("no-model");
        let mut jsonl = String::new();
        for (i, (before, (said, _), after)) in batch.iter().enumerate() {
            let content = format!("{before} Note {i}: {said}. {after}");
            jsonl.push_str(&serde_json::json!({"content": content, "namespace": "learnings"}).to_string());
            jsonl.push('\n');
        }
        let mut child = memdedup()
            .arg("--db")
            .arg(&db)
            .arg("--model-dir")
            .arg(&no_model)
            .args(["capture", "-", "--json"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("memdedup starts");
        child.stdin.take().expect("stdin").write_all(jsonl.as_bytes()).expect("written");
        let out = child.wait_with_output().expect("memdedup ends");
        prop_assert!(out.status.success(), "capture failed: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let report: serde_json::Value = serde_json::from_str(&stdout).expect("capture --json prints JSON");
        let results = report["results"].as_array().expect("results");
        prop_assert_eq!(results.len(), PER_BATCH);
        for (i, result) in results.iter().enumerate() {
            prop_assert!(result["stored"].is_number(), "candidate {} was not stored", i);
            let redacted = result["check"]["redacted"].as_array().map_or(0, Vec::len);
            prop_assert!(redacted > 0, "candidate {} ({:?}) was not redacted", i, batch[i].1.1);
        }
        // Every file of the database (with its WAL), byte for byte.
        let mut stored = Vec::new();
        for entry in std::fs::read_dir(dir.path()).expect("listable").flatten() {
            if entry.path().is_file() {
                stored.extend(std::fs::read(entry.path()).expect("readable"));
            }
        }
        let stored = String::from_utf8_lossy(&stored);
        for (_, (_, secret), _) in &batch {
            prop_assert!(!stored.contains(secret.as_str()), "stored verbatim: {}", secret);
            prop_assert!(!stdout.contains(secret.as_str()), "printed: {}", secret);
            prop_assert!(!String::from_utf8_lossy(&out.stderr).contains(secret.as_str()), "logged: {}", secret);
        }
        Ok(())
    });
    if let Err(error) = result {
        panic!("{error}\nreplay with MEMDEDUP_RELIABILITY_SEED={}", crate::support::base_seed());
    }
}
