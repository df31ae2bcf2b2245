//! SIGKILL at random points of `memdedup review decide ID merge`: after every kill the
//! store is intact and the pair is either untouched (both live, the entry pending, no
//! merge) or merged whole (one live, the merge in the ledger, the entry merged or
//! expired), never half; a rerun or `undo` then gives the expected state.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::Value;

use crate::kill_trials::{FIRST_SPAN, Tally, average, draw_delay, kill_after};
use crate::support::{check_sqlite, memdedup, require_model, run, seed};

/// Kill trials of `review decide merge`.
const TRIALS: usize = 24;

/// A pair the learned judge is unsure of, so `add` queues it (review entry 1).
const PAIR: [&str; 2] = ["always use type hints for function parameters", "use type hints on all function parameters"];

fn json_of(db: &Path, args: &[&str], context: &str) -> Value {
    let output = run(memdedup().arg("--db").arg(db).args(args).arg("--json"));
    assert!(output.status.success(), "{context}: {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{context}: {args:?} printed no JSON: {e}"))
}

/// Copies the template database (with its WAL, if any) to a fresh file of `dir`.
fn copy_template(template: &Path, dir: &Path) -> PathBuf {
    let db = dir.join("review.db");
    for suffix in ["", "-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{suffix}", template.display()));
        if from.exists() {
            std::fs::copy(&from, format!("{}{suffix}", db.display())).expect("the template copies");
        }
    }
    db
}

#[test]
fn kill_during_review_merge_merges_whole_or_not_at_all() {
    require_model();
    let mut rng = StdRng::seed_from_u64(seed(5));
    let template_dir = tempfile::tempdir().expect("temporary directory");
    let template = template_dir.path().join("template.db");
    for text in PAIR {
        let output = run(memdedup().arg("--db").arg(&template).args(["add", text, "-n", "lessons"]));
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let queued = json_of(&template, &["review"], "template");
    assert_eq!(queued[0]["id"], 1, "the pair is queued: {queued}");

    let mut typical = Duration::ZERO;
    let mut tally = Tally::default();
    for trial in 0..TRIALS {
        let context = format!("review trial {trial} (MEMDEDUP_RELIABILITY_SEED={})", crate::support::base_seed());
        let dir = tempfile::tempdir().expect("temporary directory");
        let db = copy_template(&template, dir.path());
        let decide = || {
            let mut cmd = memdedup();
            cmd.arg("--db").arg(&db).args(["review", "decide", "1", "merge"]);
            cmd
        };
        let delay = draw_delay(&mut rng, if typical.is_zero() { FIRST_SPAN } else { typical });
        tally.trials += 1;
        let landed = kill_after(&mut decide(), delay);
        tally.landed += usize::from(landed);

        let state = check_sqlite(&db, &context);
        let merges = json_of(&db, &["merges"], &context);
        let entry = json_of(&db, &["review", "--all"], &context)[0].clone();
        match state.live.len() {
            2 => {
                assert_eq!(merges, Value::Array(vec![]), "{context}: both live, yet a merge: {merges}");
                assert_eq!(entry["status"], "pending", "{context}: {entry}");
                tally.partial += usize::from(landed);
                let started = std::time::Instant::now();
                let output = run(&mut decide());
                assert!(
                    output.status.success(),
                    "{context}: the rerun failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
                typical = average(typical, started.elapsed());
            }
            1 => {
                assert_eq!(state.live, [PAIR[0]], "{context}: the older memory survives");
                assert_eq!(merges.as_array().map(Vec::len), Some(1), "{context}: one merge: {merges}");
                let status = entry["status"].as_str().unwrap_or_default();
                assert!(status == "merged" || status == "expired", "{context}: {entry}");
            }
            n => panic!("{context}: {n} live memories after the kill: {:?}", state.live),
        }
        // Whole in the end, and undoable.
        assert_eq!(check_sqlite(&db, &context).live, [PAIR[0]], "{context}");
        let output = run(memdedup().arg("--db").arg(&db).args(["undo", "1"]));
        assert!(output.status.success(), "{context}: undo failed: {}", String::from_utf8_lossy(&output.stderr));
        assert_eq!(check_sqlite(&db, &context).live.len(), 2, "{context}: undo restores both");
    }
    tally.report("review decide merge", "killed before the merge committed");
}
