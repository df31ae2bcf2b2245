//! Running the built `memdedup` binary, checking for the local model, and reading results.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use assert_cmd::Command;
use serde_json::Value;
use sqlx::Connection;

/// The example playbook shipped with the workspace.
pub const EXAMPLE_PLAYBOOK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/playbook.json");
/// The example memory collection shipped with the workspace.
pub const EXAMPLE_MEMORIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/memories.jsonl");

/// The variable the playbook threshold defaults to.
pub const THRESHOLD_ENV_VAR: &str = "AGENTIC_CONTEXT_DEDUP_THRESHOLD";

/// Variables that change the binary's behaviour or output and must not leak in from the
/// shell running the tests. The model location variables are kept on purpose; tests that
/// use a database pass `--db` explicitly.
pub const CLEARED_ENV_VARS: [&str; 22] = [
    THRESHOLD_ENV_VAR,
    "MEMDEDUP_INDEX_MEMORY_MB",
    "MEMDEDUP_DEDUP_JUDGE",
    "MEMDEDUP_LOG",
    "MEMDEDUP_CONFIG",
    "DATABASE_URL",
    "SUBCOG_DEDUP_ENABLED",
    "SUBCOG_DEDUP_THRESHOLD_DECISIONS",
    "SUBCOG_DEDUP_THRESHOLD_PATTERNS",
    "SUBCOG_DEDUP_THRESHOLD_LEARNINGS",
    "SUBCOG_DEDUP_THRESHOLD_DEFAULT",
    "SUBCOG_DEDUP_TIME_WINDOW_SECS",
    "SUBCOG_DEDUP_CACHE_CAPACITY",
    "SUBCOG_DEDUP_REDIS_URL",
    "MEMDEDUP_JUDGE",
    "MEMDEDUP_JUDGE_URL",
    "MEMDEDUP_JUDGE_MODEL",
    "MEMDEDUP_JUDGE_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "MEMDEDUP_SERVER_URL",
    "MEMDEDUP_API_TOKEN",
];

/// The hint every model-related failure must carry.
pub const FETCH_MODEL: &str = "cargo xtask fetch-model";

/// The built `memdedup` binary with a clean environment for the threshold and logging.
pub fn memdedup() -> Command {
    let mut cmd = Command::cargo_bin("memdedup").expect("the memdedup binary is built for integration tests");
    for name in CLEARED_ENV_VARS {
        cmd.env_remove(name);
    }
    // No memdedup.toml from the directory the tests run in.
    cmd.current_dir(std::env::temp_dir());
    cmd
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

/// A namespace no other test or run uses, for tests sharing one Postgres database.
pub fn unique_namespace(prefix: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// Panics, naming the fetch command, unless the binary can load the local model.
///
/// The binary locates the model itself (`MEMDEDUP_MODEL_DIR`, `MEMDEDUP_HOME`,
/// `XDG_CACHE_HOME`, `~/.cache`), so the check asks it once per test run.
pub fn require_model() {
    static CHECK: OnceLock<Result<(), String>> = OnceLock::new();
    let check = CHECK.get_or_init(|| {
        let output = memdedup().args(["similarity", "a", "b"]).output().expect("memdedup runs");
        if output.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&output.stderr).into_owned()) }
    });
    if let Err(stderr) = check {
        panic!(
            "this test needs the local embedding model; install it with `{FETCH_MODEL}`\n`memdedup similarity a b` said:\n{stderr}"
        );
    }
}

/// Parses bytes that must hold exactly one JSON document.
pub fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("expected one JSON document: {e}\n{}", String::from_utf8_lossy(bytes)))
}

/// Reads and parses a JSON file.
pub fn json_file(path: &Path) -> Value {
    json(&std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display())))
}

/// Bytes as text, for assertions on human output.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("output is UTF-8")
}

/// The key set of a JSON object.
pub fn keys(value: &Value) -> BTreeSet<&str> {
    value.as_object().unwrap_or_else(|| panic!("expected an object, got {value}")).keys().map(String::as_str).collect()
}

/// A key set from a list, to compare with [`keys`].
pub fn key_set<'a>(names: &[&'a str]) -> BTreeSet<&'a str> {
    names.iter().copied().collect()
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

/// A fresh temporary directory holding `contents` as `name`.
pub fn temp_file(name: &str, contents: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join(name);
    std::fs::write(&path, contents).expect("temporary file is writable");
    (dir, path)
}

/// A fresh temporary directory holding a copy of the example playbook as `playbook.json`.
pub fn example_playbook_copy() -> (tempfile::TempDir, PathBuf) {
    temp_file("playbook.json", &std::fs::read(EXAMPLE_PLAYBOOK).expect("example playbook exists"))
}

/// Every entry of a playbook document, section by section in file order.
pub fn entries(playbook: &Value) -> Vec<(&str, &Value)> {
    playbook["sections"]
        .as_object()
        .expect("playbook has sections")
        .iter()
        .flat_map(|(section, list)| {
            list.as_array().expect("a section is a list").iter().map(move |entry| (section.as_str(), entry))
        })
        .collect()
}

/// The entry called `name`, if any.
pub fn entry<'a>(playbook: &'a Value, name: &str) -> Option<&'a Value> {
    entries(playbook).into_iter().map(|(_, e)| e).find(|e| e["name"] == name)
}

/// Sum of one counter over all entries (absent counts as 0).
pub fn counter_sum(playbook: &Value, counter: &str) -> u64 {
    entries(playbook).iter().map(|(_, e)| e[counter].as_u64().unwrap_or(0)).sum()
}

/// Asserts `actual` is within `tolerance` of `expected`.
#[track_caller]
pub fn assert_close(actual: f64, expected: f64, tolerance: f64) {
    assert!((actual - expected).abs() <= tolerance, "{actual} is not within {tolerance} of {expected}");
}

/// A fresh SQLite database path in its own temporary directory.
pub fn sqlite_db() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("memory.db").display().to_string();
    (dir, path)
}

/// Runs `memdedup --db DB args… --json`, expecting success, and parses stdout.
pub fn run_json(db: &str, args: &[&str]) -> Value {
    let assert = memdedup().args(["--db", db]).args(args).arg("--json").assert().success();
    json(&assert.get_output().stdout)
}

/// The installed learned judge's band: (uncertain_threshold, duplicate_threshold).
pub fn learned_band() -> (f64, f64) {
    let path = installed_model_dir().join("pair_judge.json");
    let settings: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap();
    (settings["uncertain_threshold"].as_f64().unwrap(), settings["duplicate_threshold"].as_f64().unwrap())
}

/// Where the binary finds the model without `MEMDEDUP_MODEL_DIR` (the rule of `ModelDir::locate`).
pub fn installed_model_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = match non_empty("MEMDEDUP_HOME") {
        Some(home) => home,
        None => non_empty("XDG_CACHE_HOME")
            .unwrap_or_else(|| non_empty("HOME").expect("HOME is set").join(".cache"))
            .join("memdedup"),
    };
    base.join("models").join("all-minilm-l6-v2-int8")
}

/// A tool an xtask command installs in the cache (the Python MCP SDK's venv, the MCP
/// Inspector): `$env_var` when set, else `relative` below `$XDG_CACHE_HOME/memdedup`
/// (`~/.cache/memdedup`). Panics naming `install` when it is missing.
pub fn cached_tool(env_var: &str, relative: &str, install: &str) -> PathBuf {
    let path = match std::env::var_os(env_var).filter(|v| !v.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
                .expect("HOME or XDG_CACHE_HOME is set");
            cache.join("memdedup").join(relative)
        }
    };
    assert!(
        path.is_file(),
        "{} does not exist: run `{install}` (cargo xtask ci does) or set {env_var}",
        path.display()
    );
    path
}

/// Whether `actual` shows `expected`: its pieces between `…`/`...`, without whitespace,
/// in order. A decimal number of three or more fractional digits in `expected` (a
/// probability, a cosine) matches one within 0.005 (and shown to as many digits): ONNX Runtime
/// chooses its kernels and fusions by instruction set, so the models' results differ a
/// little from one CPU to another (seen: a probability the docs show as 0.450 printed as
/// 0.446 on another machine of the same kind, 0.556 as 0.555).
pub fn shows(actual: &str, expected: &str) -> Result<(), String> {
    let squeeze = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<Vec<char>>();
    let actual = squeeze(actual);
    let mut from = 0;
    for piece in expected.split(['…']).flat_map(|p| p.split("...")) {
        let piece = squeeze(piece);
        if piece.is_empty() {
            continue;
        }
        match (from..=actual.len()).find_map(|at| matches_at(&actual[at..], &piece).map(|len| at + len)) {
            Some(end) => from = end,
            None => return Err(piece.into_iter().collect()),
        }
    }
    Ok(())
}

/// The length of `actual`'s prefix that shows `piece` (see [`shows`]), if it does.
fn matches_at(actual: &[char], piece: &[char]) -> Option<usize> {
    let (mut i, mut j) = (0, 0);
    while j < piece.len() {
        let starts_number = j == 0 || !piece[j - 1].is_ascii_digit() && piece[j - 1] != '.';
        if let Some((expected, digits, piece_len)) = decimal(&piece[j..]).filter(|&(_, d, _)| starts_number && d >= 3) {
            let (value, actual_digits, actual_len) = decimal(&actual[i..])?;
            if actual_digits < digits || (value - expected).abs() > 0.005 + 1e-9 {
                return None;
            }
            i += actual_len;
            j += piece_len;
        } else {
            if actual.get(i) != Some(&piece[j]) {
                return None;
            }
            i += 1;
            j += 1;
        }
    }
    Some(i)
}

/// A decimal number (`-`? digits `.` digits) at the start of `s`: its value, how many
/// fractional digits it has and how many characters it takes.
fn decimal(s: &[char]) -> Option<(f64, usize, usize)> {
    let sign = usize::from(s.first() == Some(&'-'));
    let whole = s[sign..].iter().take_while(|c| c.is_ascii_digit()).count();
    if whole == 0 || s.get(sign + whole) != Some(&'.') {
        return None;
    }
    let fraction = s[sign + whole + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
    let len = sign + whole + 1 + fraction;
    let text: String = s[..len].iter().collect();
    (fraction > 0).then(|| text.parse().ok().map(|v| (v, fraction, len))).flatten()
}

/// A database created on the `DATABASE_URL` server for one test, dropped afterwards.
pub struct PgDatabase {
    admin_url: String,
    name: String,
    /// The test database's URL.
    pub url: String,
}

impl PgDatabase {
    pub async fn create() -> PgDatabase {
        let admin_url = postgres_url();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let name = format!("memdedup_cli_{}_{}", std::process::id(), nanos % 1_000_000_000_000);
        let mut admin = sqlx::PgConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to DATABASE_URL to create a test database: {e}"));
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("CREATE DATABASE");
        admin.close().await.expect("close the admin connection");
        let url = with_database(&admin_url, &name);
        PgDatabase { admin_url, name, url }
    }

    /// [`PgDatabase::create`] from a test without a runtime.
    pub fn create_blocking() -> PgDatabase {
        std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(PgDatabase::create())
        })
        .join()
        .expect("creating the test database")
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // On a thread of its own: Drop cannot await, and the test's runtime may be busy.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await?;
                admin.close().await?;
                anyhow::Ok(())
            })
        })
        .join();
        if let Ok(Err(error)) = dropped {
            eprintln!("warning: could not drop test database {}: {error:#}", self.name);
        }
    }
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").expect("DATABASE_URL is a URL") + 3;
    let authority_end = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..authority_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}
