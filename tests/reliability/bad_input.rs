//! A generated bad-input corpus for every parser of the binary (playbook JSON, memory
//! JSONL/JSON, capture JSONL, config TOML), run through proptest: never a panic, an exit
//! code of 0, 1 or 2, an error naming the place, and never a partial write.

use std::cell::Cell;
use std::process::Output;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::support::{EXAMPLE_MEMORIES, EXAMPLE_PLAYBOOK, base_seed, check_sqlite, memdedup, require_model, run, seed};

/// The ways an input is spoiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    Truncate,
    FlipBytes,
    NonUtf8,
    Nul,
    HugeString,
    WrongType,
    DuplicateKey,
    DeepNesting,
    NonFinite,
    OutOfRange,
}

pub const MUTATIONS: [Mutation; 10] = [
    Mutation::Truncate,
    Mutation::FlipBytes,
    Mutation::NonUtf8,
    Mutation::Nul,
    Mutation::HugeString,
    Mutation::WrongType,
    Mutation::DuplicateKey,
    Mutation::DeepNesting,
    Mutation::NonFinite,
    Mutation::OutOfRange,
];

/// The syntax of an input, which decides how structural mutations apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// One JSON document.
    Json,
    /// One JSON object per line; structural mutations hit one line.
    Jsonl,
    /// A TOML document; structural mutations hit one `key = value` line.
    Toml,
}

/// One generated case: which mutation, and the seed of its random choices.
pub fn cases() -> impl Strategy<Value = (Mutation, u64)> {
    (proptest::sample::select(MUTATIONS.to_vec()), any::<u64>())
}

/// Out-of-range or non-numeric threshold arguments.
const BAD_THRESHOLDS: [&str; 7] = ["1.5", "-0.1", "NaN", "inf", "1e999", "abc", ""];
/// Wrong-typed JSON values.
const WRONG_TYPES: [&str; 10] = ["42", "-1", "1.5", "true", "null", "\"str\"", "[]", "{}", "[1,\"a\"]", "{\"a\":{}}"];
/// Numbers out of every sensible range, and literals JSON does not have.
const NON_FINITE: [&str; 8] = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e-400", "nan", "inf"];
const OUT_OF_RANGE: [&str; 7] = ["-1", "1.5", "1e300", "-1e300", "18446744073709551616", "2147483648", "-0.0001"];

/// Spoils `valid` by `mutation`, with random choices drawn from `seed`.
pub fn mutate(valid: &[u8], syntax: Syntax, mutation: Mutation, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut bytes = valid.to_vec();
    let quote_after = |rng: &mut StdRng, bytes: &[u8]| -> usize {
        let quotes: Vec<usize> = bytes.iter().enumerate().filter(|(_, b)| **b == b'"').map(|(i, _)| i + 1).collect();
        if quotes.is_empty() { rng.random_range(0..=bytes.len()) } else { quotes[rng.random_range(0..quotes.len())] }
    };
    match mutation {
        Mutation::Truncate => {
            bytes.truncate(rng.random_range(0..bytes.len().max(1)));
            bytes
        }
        Mutation::FlipBytes => {
            for _ in 0..rng.random_range(1..=4) {
                let at = rng.random_range(0..bytes.len());
                bytes[at] ^= rng.random_range(1..=255u8);
            }
            bytes
        }
        Mutation::NonUtf8 => {
            let bad: [&[u8]; 5] = [b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"];
            let at =
                if rng.random_bool(0.5) { quote_after(&mut rng, &bytes) } else { rng.random_range(0..=bytes.len()) };
            bytes.splice(at..at, bad[rng.random_range(0..bad.len())].iter().copied());
            bytes
        }
        Mutation::Nul => {
            let at = quote_after(&mut rng, &bytes);
            let nul: &[u8] = match (syntax, rng.random_bool(0.5)) {
                (_, true) => b"\0",
                (Syntax::Toml, false) => b"\\u0000",
                (_, false) => b"\\u0000",
            };
            bytes.splice(at..at, nul.iter().copied());
            bytes
        }
        Mutation::HugeString => {
            let at = quote_after(&mut rng, &bytes);
            let len = [70_000, 1_100_000][rng.random_range(0..2)];
            bytes.splice(at..at, std::iter::repeat_n(b'x', len));
            bytes
        }
        Mutation::WrongType => structural(valid, syntax, &mut rng, |rng, original| {
            let pick = WRONG_TYPES[rng.random_range(0..WRONG_TYPES.len())];
            if pick == original { "[[]]".to_owned() } else { pick.to_owned() }
        }),
        Mutation::DeepNesting => structural(valid, syntax, &mut rng, |rng, _| {
            let depth = [64, 300, 100_000][rng.random_range(0..3)];
            format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
        }),
        Mutation::NonFinite => {
            structural(valid, syntax, &mut rng, |rng, _| NON_FINITE[rng.random_range(0..NON_FINITE.len())].to_owned())
        }
        Mutation::OutOfRange => structural(valid, syntax, &mut rng, |rng, _| {
            OUT_OF_RANGE[rng.random_range(0..OUT_OF_RANGE.len())].to_owned()
        }),
        Mutation::DuplicateKey => duplicate_key(valid, syntax, &mut rng),
    }
}

/// Replaces one value (of one line, for JSONL and TOML) with `replacement(original)`.
fn structural(
    valid: &[u8],
    syntax: Syntax,
    rng: &mut StdRng,
    replacement: impl Fn(&mut StdRng, &str) -> String,
) -> Vec<u8> {
    let text = String::from_utf8_lossy(valid);
    match syntax {
        Syntax::Json => replace_json_value(&text, rng, &replacement).into_bytes(),
        Syntax::Jsonl | Syntax::Toml => {
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            let candidates: Vec<usize> = (0..lines.len())
                .filter(|&i| match syntax {
                    Syntax::Jsonl => lines[i].trim_start().starts_with('{'),
                    _ => lines[i].contains(" = "),
                })
                .collect();
            if candidates.is_empty() {
                return valid.to_vec();
            }
            let i = candidates[rng.random_range(0..candidates.len())];
            lines[i] = match syntax {
                Syntax::Jsonl => replace_json_value(&lines[i], rng, &replacement),
                _ => {
                    let (key, value) = lines[i].split_once(" = ").expect("a key = value line");
                    format!("{key} = {}", replacement(rng, value))
                }
            };
            let mut out = lines.join("\n");
            out.push('\n');
            out.into_bytes()
        }
    }
}

/// Parses `text` as JSON, replaces one random value with raw text, and prints it back.
fn replace_json_value(text: &str, rng: &mut StdRng, replacement: &impl Fn(&mut StdRng, &str) -> String) -> String {
    const PLACEHOLDER: &str = "@@reliability-placeholder@@";
    let Ok(mut value) = serde_json::from_str::<Value>(text) else { return text.to_owned() };
    let mut pointers = Vec::new();
    collect_pointers(&value, String::new(), &mut pointers);
    let pointer = &pointers[rng.random_range(0..pointers.len())];
    let slot = value.pointer_mut(pointer).expect("a collected pointer resolves");
    let original = slot.to_string();
    *slot = Value::String(PLACEHOLDER.to_owned());
    let raw = replacement(rng, &original);
    serde_json::to_string_pretty(&value).expect("a value prints").replace(&format!("\"{PLACEHOLDER}\""), &raw)
}

fn collect_pointers(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                collect_pointers(child, format!("{at}/{}", key.replace('~', "~0").replace('/', "~1")), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                collect_pointers(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Writes one key (JSON) or one `key = value` line (TOML) twice in the same object.
fn duplicate_key(valid: &[u8], syntax: Syntax, rng: &mut StdRng) -> Vec<u8> {
    let text = String::from_utf8_lossy(valid).into_owned();
    if syntax == Syntax::Toml {
        let lines: Vec<&str> = text.lines().collect();
        let keyed: Vec<usize> =
            (0..lines.len()).filter(|&i| lines[i].contains(" = ") || lines[i].starts_with('[')).collect();
        let i = keyed[rng.random_range(0..keyed.len())];
        let mut out: Vec<&str> = lines.clone();
        out.insert(i + 1, lines[i]);
        return (out.join("\n") + "\n").into_bytes();
    }
    // Every `"key":` in the text; a copy with another value goes right before one.
    let bytes = text.as_bytes();
    let mut keys = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'"' {
            let end = (i + 1..bytes.len()).find(|&j| bytes[j] == b'"' && bytes[j - 1] != b'\\');
            let Some(end) = end else { break };
            let after = text[end + 1..].trim_start();
            if after.starts_with(':') {
                keys.push((i, text[i..=end].to_owned()));
            }
            i = end + 1;
        } else {
            i += 1;
        }
    }
    if keys.is_empty() {
        return valid.to_vec();
    }
    let (at, key) = &keys[rng.random_range(0..keys.len())];
    let value = WRONG_TYPES[rng.random_range(0..WRONG_TYPES.len())];
    let mut out = text.clone();
    out.insert_str(*at, &format!("{key}: {value}, "));
    out.into_bytes()
}

/// What a run may print and how it may end, whatever the input.
fn check_outcome(output: &Output, what: &str) -> Result<bool, TestCaseError> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let Some(code) = output.status.code() else {
        return Err(TestCaseError::fail(format!("{what}: killed by a signal ({}):\n{}", output.status, cut(&stderr))));
    };
    if code == 101 || stderr.contains("panicked") {
        return Err(TestCaseError::fail(format!("{what}: panicked (exit {code}):\n{}", cut(&stderr))));
    }
    if ![0, 1, 2].contains(&code) {
        return Err(TestCaseError::fail(format!("{what}: exit code {code} is not 0, 1 or 2:\n{}", cut(&stderr))));
    }
    if code == 0 {
        return Ok(true);
    }
    let Some(message) = stderr.lines().find(|l| l.starts_with("error: ")) else {
        return Err(TestCaseError::fail(format!("{what}: exit {code} without an `error: ` line:\n{}", cut(&stderr))));
    };
    // An unavailable model is the expected refusal of a well-formed input in the runs
    // that point --model-dir at an empty directory: there is no place to name.
    let model_refusal =
        message.contains("embedding model is unavailable") || message.contains("model is not installed");
    if !model_refusal && !names_a_place(&stderr) {
        return Err(TestCaseError::fail(format!("{what}: the error names no place in the input:\n{}", cut(&stderr))));
    }
    Ok(false)
}

/// Whether an error message says where the input is malformed: a line, a column, a
/// byte offset, an array item, a JSON path, a key or a field (config keys are named by
/// their dotted path, `dedup.thresholds.decisions`).
fn names_a_place(stderr: &str) -> bool {
    [
        "line ",
        "column ",
        "offset ",
        "item [",
        "invalid playbook at ",
        " key ",
        "field `",
        "--threshold",
        "unknown field",
        ": dedup.",
        ": embedder.",
        ": store.",
        ": server.",
        "`dedup.",
        "`embedder.",
        "`store.",
        "`server.",
        "table `",
        "key `",
    ]
    .iter()
    .any(|marker| stderr.contains(marker))
}

fn cut(text: &str) -> String {
    if text.len() <= 2_000 {
        return text.to_owned();
    }
    let end = (0..=2_000).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// A lossy, shortened view of an input for failure messages.
pub fn show(input: &[u8]) -> String {
    cut(&String::from_utf8_lossy(input))
}

/// Runs `cases` generated inputs through `body` with a seeded proptest runner and prints
/// the group's summary; `body` returns whether the input was accepted.
pub fn run_corpus(group: &str, salt: u64, cases: u32, body: impl Fn(Mutation, u64) -> Result<bool, TestCaseError>) {
    let seed = seed(salt);
    let mut rng_seed = [0u8; 32];
    rng_seed[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config { cases, failure_persistence: None, max_shrink_iters: 32, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &rng_seed));
    let (tried, accepted) = (Cell::new(0usize), Cell::new(0usize));
    let result = runner.run(&self::cases(), |(mutation, case_seed)| {
        tried.set(tried.get() + 1);
        let ok = body(mutation, case_seed)?;
        accepted.set(accepted.get() + usize::from(ok));
        Ok(())
    });
    if let Err(error) = result {
        panic!("bad input ({group}): {error}\nreplay with MEMDEDUP_RELIABILITY_SEED={}", base_seed());
    }
    eprintln!(
        "bad input ({group}): {} inputs tried, {} rejected, {} accepted, panics: 0, partial writes: 0 (MEMDEDUP_RELIABILITY_SEED={})",
        tried.get(),
        tried.get() - accepted.get(),
        accepted.get(),
        base_seed()
    );
}

/// An empty directory for `--model-dir`, so well-formed inputs stop at the model and
/// every case stays a few milliseconds.
fn no_model() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

#[test]
fn bad_playbooks_never_panic_and_never_change_the_file() {
    require_model();
    let valid = std::fs::read(EXAMPLE_PLAYBOOK).expect("example playbook exists");
    let empty = no_model();
    run_corpus("playbook dedup", 11, 200, |mutation, case_seed| {
        let input = mutate(&valid, Syntax::Json, mutation, case_seed);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("playbook.json");
        std::fs::write(&path, &input).unwrap();
        let mut rng = StdRng::seed_from_u64(case_seed);
        let mut cmd = memdedup();
        // One case in four runs --dry-run with the real model; the others --in-place
        // without a model, which must leave the file byte for byte as it was.
        let dry_run = rng.random_ratio(1, 4);
        if dry_run {
            cmd.args(["playbook", "dedup", "--dry-run", "--json"]).arg(&path);
        } else {
            cmd.arg("--model-dir").arg(empty.path()).args(["playbook", "dedup", "--in-place"]).arg(&path);
        }
        if mutation == Mutation::OutOfRange && rng.random_bool(0.5) {
            cmd.arg(format!("--threshold={}", BAD_THRESHOLDS[rng.random_range(0..BAD_THRESHOLDS.len())]));
        }
        let output = run(&mut cmd);
        let what = format!("{mutation:?} playbook {cmd:?}\ninput: {}", show(&input));
        let ok = check_outcome(&output, &what)?;
        prop_assert!(std::fs::read(&path).unwrap() == input, "{what}: the playbook file changed");
        Ok(ok)
    });
}

#[test]
fn bad_memory_collections_never_panic_and_name_the_place() {
    let valid_jsonl = std::fs::read(EXAMPLE_MEMORIES).expect("example memories exist");
    let objects: Vec<Value> =
        String::from_utf8_lossy(&valid_jsonl).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let valid_array = serde_json::to_vec_pretty(&objects).unwrap();
    let empty = no_model();
    run_corpus("scan", 12, 200, |mutation, case_seed| {
        let (input, syntax) = if case_seed % 3 == 0 {
            (mutate(&valid_array, Syntax::Json, mutation, case_seed), "JSON array")
        } else {
            (mutate(&valid_jsonl, Syntax::Jsonl, mutation, case_seed), "JSONL")
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memories.jsonl");
        std::fs::write(&path, &input).unwrap();
        let mut cmd = memdedup();
        cmd.arg("--model-dir").arg(empty.path()).args(["scan", "--json"]).arg(&path);
        if mutation == Mutation::OutOfRange && case_seed % 2 == 0 {
            cmd.arg(format!("--threshold={}", BAD_THRESHOLDS[(case_seed / 2) as usize % BAD_THRESHOLDS.len()]));
        }
        let output = run(&mut cmd);
        check_outcome(&output, &format!("{mutation:?} {syntax} {cmd:?}\ninput: {}", show(&input)))
    });
}

#[test]
fn bad_capture_batches_store_nothing() {
    let valid = concat!(
        r#"{"content":"Run the migrations before the API starts.","namespace":"patterns","kind":"memory","title":"Migrations first"}"#,
        "\n",
        r#"{"content":"Prefer small pull requests.","namespace":"decisions","domain":"global"}"#,
        "\n",
        r#"{"content":"Staging shares nothing with production.","title":"Staging"}"#,
        "\n"
    )
    .as_bytes()
    .to_vec();
    let empty = no_model();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("capture.db");
    let created = run(memdedup().arg("--db").arg(&db).arg("stats"));
    assert!(created.status.success(), "stats creates the store:\n{}", String::from_utf8_lossy(&created.stderr));
    run_corpus("capture", 13, 150, |mutation, case_seed| {
        let input = mutate(&valid, Syntax::Jsonl, mutation, case_seed);
        let batch = dir.path().join("batch.jsonl");
        std::fs::write(&batch, &input).unwrap();
        let before = check_sqlite(&db, "capture corpus").live;
        let mut cmd = memdedup();
        cmd.arg("--model-dir").arg(empty.path()).arg("--db").arg(&db).arg("capture").arg(&batch);
        let output = run(&mut cmd);
        let what = format!("{mutation:?} capture batch\ninput: {}", show(&input));
        let ok = check_outcome(&output, &what)?;
        let after = check_sqlite(&db, "capture corpus").live;
        if !ok {
            prop_assert_eq!(&after, &before, "{}: a rejected batch changed the store", what);
        }
        Ok(ok)
    });
}

/// A config file that is not UTF-8 names the offset and line of the first bad byte, like
/// every other input (it once said only "stream did not contain valid UTF-8").
#[test]
fn config_file_not_utf8_names_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memdedup.toml");
    std::fs::write(&path, b"[dedup]\nmin_se\xedantic_length = 50\n").unwrap();
    let output = run(memdedup().arg("--config").arg(&path).arg("--db").arg(dir.path().join("m.db")).arg("stats"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(names_a_place(&stderr), "the error names no place in the config file:\n{stderr}");
}

#[test]
fn bad_config_files_never_panic_and_name_the_key() {
    let empty = no_model();
    let valid = format!(
        r#"[embedder]
model_dir = "{}"

[dedup]
enabled = true
default_threshold = 0.90
time_window_secs = 300
cache_capacity = 1000
min_semantic_length = 50

[dedup.thresholds]
decisions = 0.92
patterns = 0.90
learnings = 0.88
"#,
        empty.path().display()
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("config.db");
    run_corpus("config TOML", 14, 150, |mutation, case_seed| {
        let input = mutate(valid.as_bytes(), Syntax::Toml, mutation, case_seed);
        let path = dir.path().join("memdedup.toml");
        std::fs::write(&path, &input).unwrap();
        let mut cmd = memdedup();
        cmd.arg("--config").arg(&path).arg("--db").arg(&db);
        if case_seed % 2 == 0 {
            cmd.arg("stats");
        } else {
            cmd.args(["check", "--namespace", "decisions", "a short note"]);
        }
        let output = run(&mut cmd);
        check_outcome(&output, &format!("{mutation:?} config {cmd:?}\ninput: {}", show(&input)))
    });
}
