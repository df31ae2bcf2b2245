//! SIGKILL at random points of `playbook dedup --in-place`, `capture` and `add`: after
//! every kill the file is the old or the new one, the database is intact and holds whole
//! memories only, and a rerun gives the uninterrupted result.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::support::{EXAMPLE_PLAYBOOK, check_sqlite, dir_listing, memdedup, require_model, run, seed};

/// Trials per command; 3 × 100 = 300 kills in all.
const TRIALS: usize = 100;
/// The delay before the kill is drawn from 0 to this share of the typical (moving
/// average) uninterrupted run, so most kills land while the process works and a few
/// after it ends.
const DELAY_SPAN: f64 = 1.1;
/// How often a process about to be killed is polled for an early exit.
const POLL: Duration = Duration::from_millis(2);
/// The first delay span, before any run has been timed.
pub(crate) const FIRST_SPAN: Duration = Duration::from_millis(400);
/// Probability that a trial of `add` or `capture` starts on a database file that does
/// not exist yet, so kills also land during schema creation.
const FRESH_DB_SHARE: f64 = 0.25;

/// Words for texts that are unlike each other (cosine far below the thresholds).
const WORDS: [&str; 48] = [
    "harbor", "quartz", "violin", "lantern", "orchid", "glacier", "compiler", "saddle", "meadow", "turbine", "pepper",
    "ledger", "falcon", "canyon", "biscuit", "magnet", "tundra", "sonnet", "kernel", "pigment", "anchor", "walnut",
    "circuit", "harvest", "marble", "pelican", "thimble", "voltage", "juniper", "cobalt", "raffle", "summit",
    "trolley", "sapphire", "blizzard", "cactus", "mortar", "nebula", "paddle", "quiver", "riddle", "scaffold",
    "timber", "umbrella", "vortex", "wagon", "yodel", "zephyr",
];

/// What one group of trials saw, for the summary line.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) trials: usize,
    /// Kills that reached a process still running (the others came after it exited).
    pub(crate) landed: usize,
    /// Kills that left an intermediate state behind: a temporary file, part of a batch,
    /// or an open store without the new memory.
    pub(crate) partial: usize,
}

impl Tally {
    pub(crate) fn report(&self, group: &str, partial: &str) {
        eprintln!(
            "kill trials ({group}): {}, kills landed while running: {}, {partial}: {}, losses: 0 (MEMDEDUP_RELIABILITY_SEED={})",
            self.trials,
            self.landed,
            self.partial,
            crate::support::base_seed()
        );
    }
}

/// Spawns `cmd` quietly and SIGKILLs it `delay` after the start unless it has exited
/// by then. Returns whether the kill landed on a running process.
pub(crate) fn kill_after(cmd: &mut Command, delay: Duration) -> bool {
    let started = Instant::now();
    let mut child: Child =
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("memdedup starts");
    // Polls the exit status, so a process that ends early costs no waiting.
    loop {
        if child.try_wait().expect("status is readable").is_some() {
            return false;
        }
        let left = delay.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(POLL));
    }
    child.kill().expect("SIGKILL is delivered");
    child.wait().expect("the process is reaped");
    true
}

/// Runs `cmd` uninterrupted and returns how long it took; panics unless it succeeds.
fn run_timed(cmd: &mut Command, context: &str) -> Duration {
    let started = Instant::now();
    let output = run(cmd);
    assert!(output.status.success(), "{context}: the rerun failed:\n{}", String::from_utf8_lossy(&output.stderr));
    started.elapsed()
}

/// A delay drawn from 0 to [`DELAY_SPAN`] × `typical`.
pub(crate) fn draw_delay(rng: &mut StdRng, typical: Duration) -> Duration {
    typical.mul_f64(rng.random_range(0.0..DELAY_SPAN))
}

/// A moving average of uninterrupted run times (the last runs count most).
pub(crate) fn average(typical: Duration, latest: Duration) -> Duration {
    if typical.is_zero() { latest } else { typical.mul_f64(0.7) + latest.mul_f64(0.3) }
}

/// A text of 12 random words: well over the three words that trigger the semantic check,
/// and unlike every other such text.
fn random_text(rng: &mut StdRng, tag: &str) -> String {
    let words: Vec<&str> = (0..12).map(|_| WORDS[rng.random_range(0..WORDS.len())]).collect();
    format!("{tag}: {}.", words.join(" "))
}

fn playbook_command(path: &Path) -> Command {
    let mut cmd = memdedup();
    cmd.args(["playbook", "dedup", "--in-place", "--quiet"]).arg(path);
    cmd
}

#[test]
fn kill_during_playbook_dedup_in_place_leaves_old_or_new_file() {
    require_model();
    let seed = seed(1);
    let mut rng = StdRng::seed_from_u64(seed);
    let old = std::fs::read(EXAMPLE_PLAYBOOK).expect("example playbook exists");
    // The uninterrupted result, computed once.
    let reference = tempfile::tempdir().expect("temporary directory");
    let reference_path = reference.path().join("playbook.json");
    std::fs::write(&reference_path, &old).unwrap();
    let mut typical = run_timed(&mut playbook_command(&reference_path), "reference run");
    let new = std::fs::read(&reference_path).unwrap();
    assert_ne!(new, old, "the example playbook has duplicates to merge");

    let mut tally = Tally::default();
    for trial in 0..TRIALS {
        let context = format!("playbook trial {trial} (MEMDEDUP_RELIABILITY_SEED={})", crate::support::base_seed());
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("playbook.json");
        std::fs::write(&path, &old).unwrap();
        let delay = draw_delay(&mut rng, if typical.is_zero() { FIRST_SPAN } else { typical });
        tally.trials += 1;
        tally.landed += usize::from(kill_after(&mut playbook_command(&path), delay));

        let after = std::fs::read(&path).unwrap_or_else(|e| panic!("{context}: the playbook is gone: {e}"));
        assert!(after == old || after == new, "{context}: killed after {delay:?}, the playbook is neither old nor new");
        serde_json::from_slice::<serde_json::Value>(&after)
            .unwrap_or_else(|e| panic!("{context}: the playbook is not valid JSON: {e}"));
        let leftovers: Vec<String> = dir_listing(dir.path()).into_iter().filter(|n| n != "playbook.json").collect();
        for name in &leftovers {
            assert!(
                name.starts_with(".playbook.json.memdedup-") && name.ends_with(".tmp"),
                "{context}: unexpected file {name} beside the playbook"
            );
        }
        tally.partial += usize::from(!leftovers.is_empty());

        typical = average(typical, run_timed(&mut playbook_command(&path), &context));
        assert!(std::fs::read(&path).unwrap() == new, "{context}: the rerun did not give the uninterrupted result");
        assert_eq!(
            dir_listing(dir.path()),
            ["playbook.json"],
            "{context}: files left beside the playbook after a rerun"
        );
    }
    tally.report("playbook dedup --in-place", "temporary files left (removed by the rerun)");
}

/// A database directory and file for `add`/`capture` trials, renewed now and then.
struct TrialDb {
    dir: tempfile::TempDir,
    /// The live memories the database holds before the trial (contents, id order).
    live: Vec<String>,
}

impl TrialDb {
    fn fresh() -> TrialDb {
        TrialDb { dir: tempfile::tempdir().expect("temporary directory"), live: Vec::new() }
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("memories.db")
    }
}

#[test]
fn kill_during_add_stores_the_memory_whole_or_not_at_all() {
    require_model();
    let seed = seed(2);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut db = TrialDb::fresh();
    let mut typical = Duration::ZERO;
    let mut tally = Tally::default();
    for trial in 0..TRIALS {
        let context = format!("add trial {trial} (MEMDEDUP_RELIABILITY_SEED={})", crate::support::base_seed());
        if trial > 0 && rng.random_bool(FRESH_DB_SHARE) {
            db = TrialDb::fresh();
        }
        let text = random_text(&mut rng, &format!("note {trial}"));
        let add = || {
            let mut cmd = memdedup();
            // Random word salads: the cosine judge, so that no two are read as one claim.
            cmd.arg("--db").arg(db.path()).args(["add", "--judge", "cosine", "--namespace", "trials"]).arg(&text);
            cmd
        };
        let delay = draw_delay(&mut rng, if typical.is_zero() { FIRST_SPAN } else { typical });
        tally.trials += 1;
        let landed = kill_after(&mut add(), delay);
        tally.landed += usize::from(landed);

        if db.path().exists() {
            let state = check_sqlite(&db.path(), &context);
            let mut with_new = db.live.clone();
            with_new.push(text.clone());
            assert!(
                state.live == db.live || state.live == with_new,
                "{context}: killed after {delay:?}, the store holds {:?}, expected {:?} or that plus the new text",
                state.live,
                db.live
            );
            tally.partial += usize::from(landed && state.live == db.live);
        }

        typical = average(typical, run_timed(&mut add(), &context));
        db.live.push(text);
        let state = check_sqlite(&db.path(), &context);
        assert_eq!(state.live, db.live, "{context}: the rerun did not give the uninterrupted result");
    }
    tally.report("add", "killed after the store was created, before the commit");
}

#[test]
fn kill_during_capture_stores_a_prefix_of_the_batch_and_a_rerun_completes_it() {
    require_model();
    let seed = seed(3);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut db = TrialDb::fresh();
    let mut typical = Duration::ZERO;
    let mut tally = Tally::default();
    for trial in 0..TRIALS {
        let context = format!("capture trial {trial} (MEMDEDUP_RELIABILITY_SEED={})", crate::support::base_seed());
        if trial > 0 && rng.random_bool(FRESH_DB_SHARE) {
            db = TrialDb::fresh();
        }
        // Four distinct candidates, the first repeated at the end: stored once.
        let texts: Vec<String> = (0..4).map(|i| random_text(&mut rng, &format!("capture {trial}.{i}"))).collect();
        let mut batch: String =
            texts.iter().map(|t| format!("{}\n", serde_json::json!({"content": t, "namespace": "trials"}))).collect();
        batch.push_str(&format!("{}\n", serde_json::json!({"content": texts[0], "namespace": "trials"})));
        let batch_path = db.dir.path().join(format!("batch-{trial}.jsonl"));
        std::fs::write(&batch_path, &batch).unwrap();
        let capture = || {
            let mut cmd = memdedup();
            // Random word salads: the cosine judge, so that no two are read as one claim.
            cmd.arg("--db").arg(db.path()).args(["capture", "--judge", "cosine"]).arg(&batch_path);
            cmd
        };
        let delay = draw_delay(&mut rng, if typical.is_zero() { FIRST_SPAN } else { typical });
        tally.trials += 1;
        tally.landed += usize::from(kill_after(&mut capture(), delay));

        if db.path().exists() {
            let state = check_sqlite(&db.path(), &context);
            let stored = state.live.len().checked_sub(db.live.len());
            let prefix_ok = stored.is_some_and(|k| {
                k <= texts.len()
                    && state.live[..db.live.len()] == db.live[..]
                    && state.live[db.live.len()..] == texts[..k]
            });
            assert!(
                prefix_ok,
                "{context}: killed after {delay:?}, the store holds {:?}; expected {:?} followed by a prefix of {texts:?}",
                state.live, db.live
            );
            tally.partial += usize::from(stored.is_some_and(|k| k > 0 && k < texts.len()));
        }

        typical = average(typical, run_timed(&mut capture(), &context));
        db.live.extend(texts.iter().cloned());
        let state = check_sqlite(&db.path(), &context);
        assert_eq!(state.live, db.live, "{context}: the rerun did not give the uninterrupted result");
    }
    tally.report("capture", "batches cut part way");
}
