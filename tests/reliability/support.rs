//! Running the built `memdedup` binary, seeding randomness, and inspecting databases.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use sqlx::Connection;

/// The example playbook shipped with the workspace.
pub const EXAMPLE_PLAYBOOK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/playbook.json");
/// The example memory collection shipped with the workspace.
pub const EXAMPLE_MEMORIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/memories.jsonl");

/// The variable that fixes the seed of a run, to replay a failure.
pub const SEED_ENV_VAR: &str = "MEMDEDUP_RELIABILITY_SEED";

/// The hint every model-related failure must carry.
pub const FETCH_MODEL: &str = "cargo xtask fetch-model";

/// Variables that change the binary's behaviour and must not leak in from the shell
/// running the tests. The model location variables are kept on purpose.
const CLEARED_ENV_VARS: [&str; 14] = [
    "AGENTIC_CONTEXT_DEDUP_THRESHOLD",
    "MEMDEDUP_LOG",
    "MEMDEDUP_CONFIG",
    "MEMDEDUP_API_TOKEN",
    "DATABASE_URL",
    "SUBCOG_DEDUP_ENABLED",
    "SUBCOG_DEDUP_THRESHOLD_DECISIONS",
    "SUBCOG_DEDUP_THRESHOLD_PATTERNS",
    "SUBCOG_DEDUP_THRESHOLD_LEARNINGS",
    "SUBCOG_DEDUP_THRESHOLD_DEFAULT",
    "SUBCOG_DEDUP_TIME_WINDOW_SECS",
    "SUBCOG_DEDUP_CACHE_CAPACITY",
    "SUBCOG_DEDUP_MIN_SEMANTIC_LENGTH",
    "SUBCOG_DEDUP_REDIS_URL",
];

/// The built `memdedup` binary.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_memdedup"))
}

/// A command running the binary with a clean environment, in the temporary directory
/// (so no memdedup.toml of the checkout applies).
pub fn memdedup() -> Command {
    let mut cmd = Command::new(binary());
    for name in CLEARED_ENV_VARS {
        cmd.env_remove(name);
    }
    cmd.current_dir(std::env::temp_dir());
    cmd
}

/// Runs `cmd` to completion with stdin closed.
pub fn run(cmd: &mut Command) -> Output {
    cmd.stdin(std::process::Stdio::null()).output().expect("memdedup runs")
}

/// The seed of this run: `MEMDEDUP_RELIABILITY_SEED` if set, else a random one. Every
/// test prints it (and mixes in its own salt) so a failure can be replayed.
pub fn seed(salt: u64) -> u64 {
    base_seed() ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The seed of the whole run, to pass as `MEMDEDUP_RELIABILITY_SEED` to replay it.
pub fn base_seed() -> u64 {
    static BASE: OnceLock<u64> = OnceLock::new();
    *BASE.get_or_init(|| match std::env::var(SEED_ENV_VAR) {
        Ok(value) => {
            value.trim().parse().unwrap_or_else(|_| panic!("{SEED_ENV_VAR} must be an integer, got {value:?}"))
        }
        Err(_) => rand::random(),
    })
}

/// Panics, naming the fetch command, unless the binary can load the local model.
pub fn require_model() {
    static CHECK: OnceLock<Result<(), String>> = OnceLock::new();
    let check = CHECK.get_or_init(|| {
        let output = run(memdedup().args(["similarity", "a", "b"]));
        if output.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&output.stderr).into_owned()) }
    });
    if let Err(stderr) = check {
        panic!(
            "this test needs the local embedding model; install it with `{FETCH_MODEL}`\n`memdedup similarity a b` said:\n{stderr}"
        );
    }
}

/// The admin URL of the disposable Postgres server `cargo xtask ci` starts.
pub fn postgres_url() -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "this test needs a Postgres server: run the suite with `cargo xtask ci` (it starts a disposable one) or set DATABASE_URL"
        ),
    }
}

/// A single-threaded runtime for the few async calls (sqlx) the tests make.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime").block_on(future)
}

/// What a SQLite database holds after a fault: its integrity and its live memories.
#[derive(Debug)]
pub struct SqliteState {
    /// The live memories' contents in id order (empty before the schema exists).
    pub live: Vec<String>,
}

/// Opens `path` (replaying any WAL, as the next process would), asserts that
/// `PRAGMA integrity_check` says `ok` and `PRAGMA foreign_key_check` finds no orphan,
/// and reads the live memories.
pub fn check_sqlite(path: &Path, context: &str) -> SqliteState {
    block_on(async {
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
        let mut conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .unwrap_or_else(|e| panic!("{context}: cannot open {}: {e}", path.display()));
        let integrity: Vec<(String,)> = sqlx::query_as("PRAGMA integrity_check").fetch_all(&mut conn).await.unwrap();
        assert_eq!(integrity, [("ok".to_owned(),)], "{context}: integrity_check of {}", path.display());
        let orphans: Vec<sqlx::sqlite::SqliteRow> =
            sqlx::query("PRAGMA foreign_key_check").fetch_all(&mut conn).await.unwrap();
        assert!(
            orphans.is_empty(),
            "{context}: foreign_key_check of {} found {} orphan rows",
            path.display(),
            orphans.len()
        );
        let has_table: Option<(String,)> =
            sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'memories'")
                .fetch_optional(&mut conn)
                .await
                .unwrap();
        let live = if has_table.is_some() {
            sqlx::query_as::<_, (String,)>("SELECT content FROM memories WHERE NOT deprecated ORDER BY id")
                .fetch_all(&mut conn)
                .await
                .unwrap()
                .into_iter()
                .map(|(c,)| c)
                .collect()
        } else {
            Vec::new()
        };
        conn.close().await.ok();
        SqliteState { live }
    })
}

/// The number of live memories `memdedup stats --json` reports for the store `db`.
pub fn live_count(db: &str) -> u64 {
    let output = run(memdedup().args(["--db", db, "stats", "--json"]));
    assert!(output.status.success(), "stats on {db} failed:\n{}", String::from_utf8_lossy(&output.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&output.stdout).expect("stats --json prints JSON");
    stats["namespaces"].as_array().expect("namespaces").iter().map(|n| n["live"].as_u64().expect("live")).sum()
}

/// A database created on the `DATABASE_URL` server for one test; dropped on drop.
pub struct PgDatabase {
    admin_url: String,
    name: String,
    /// The URL of the new database.
    pub url: String,
}

impl PgDatabase {
    pub fn create() -> PgDatabase {
        let admin_url = postgres_url();
        let name = format!("memdedup_reliability_{:016x}", rand::random::<u64>());
        block_on(async {
            let mut admin = sqlx::PgConnection::connect(&admin_url).await.expect("DATABASE_URL accepts connections");
            sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("CREATE DATABASE");
            admin.close().await.ok();
        });
        let url = with_database(&admin_url, &name);
        PgDatabase { admin_url, name, url }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        block_on(async move {
            if let Ok(mut admin) = sqlx::PgConnection::connect(&admin_url).await {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await;
                admin.close().await.ok();
            }
        });
    }
}

/// `url` with its database name replaced by `name` (query string kept).
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..host_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// Names of the entries of a directory, sorted.
pub fn dir_listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("directory is readable")
        .map(|entry| entry.expect("directory entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
