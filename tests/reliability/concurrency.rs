//! Sixteen `memdedup add` processes started at once on a store that does not exist yet:
//! the first open creates the schema exactly once and every write lands.

use std::process::{Child, Stdio};

use crate::support::{PgDatabase, live_count, memdedup};

/// Processes started at once per round.
const PROCESSES: usize = 16;
/// Rounds, each on a new database.
const ROUNDS: usize = 5;

/// Starts [`PROCESSES`] `add`s of distinct two-word texts (under the three words of the
/// semantic check, so no model loads and the processes overlap tightly) on `db`, waits
/// for all, and asserts every one succeeded and stored its memory.
fn sixteen_adds_at_once(db: &str, round: usize) {
    let children: Vec<Child> = (0..PROCESSES)
        .map(|i| {
            memdedup()
                .args(["--db", db, "add", "--namespace", "concurrent"])
                .arg(format!("round{round} note{i}"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("memdedup starts")
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output().expect("the process is reaped");
        assert!(
            output.status.success(),
            "round {round}: process {i} of {PROCESSES} on a new store exited {}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(live_count(db), PROCESSES as u64, "round {round}: every process's memory is stored");
}

#[test]
fn sixteen_processes_first_use_of_a_new_sqlite_file() {
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().expect("temporary directory");
        let db = dir.path().join("new.db");
        sixteen_adds_at_once(db.to_str().expect("UTF-8 temp path"), round);
    }
    eprintln!("concurrency (sqlite): {ROUNDS} rounds of {PROCESSES} processes on a new file, failures: 0, losses: 0");
}

#[test]
fn sixteen_processes_first_use_of_a_new_postgres_database() {
    for round in 0..ROUNDS {
        let database = PgDatabase::create();
        sixteen_adds_at_once(&database.url, round);
    }
    eprintln!(
        "concurrency (postgres): {ROUNDS} rounds of {PROCESSES} processes on a new database, failures: 0, losses: 0"
    );
}
