//! `cargo xtask bench --compare`: `memdedup scan` side by side with a plain Python reference
//! (xtask/compare/reference_scan.py: the same model through onnxruntime, tokenizers and numpy)
//! on generated 2,000- and 20,000-memory JSONL files, as cold processes under GNU time, and
//! whether both find the same groups.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::process;
use crate::temp_dir::TempDir;

/// The reference's pinned packages: the ONNX Runtime memdedup loads (model.lock), and
/// current tokenizers and numpy.
pub const PACKAGES: [&str; 3] = ["onnxruntime==1.31.1", "tokenizers==0.23.3", "numpy==2.4.6"];
/// The reference script, relative to the workspace root.
const SCRIPT: &str = "xtask/compare/reference_scan.py";
/// `memdedup scan`'s default threshold, passed explicitly to both sides.
const THRESHOLD: &str = "0.85";
/// Memories per generated file.
const SIZES: [usize; 2] = [2000, 20_000];
const SEED: u64 = 2027;
/// Rounds of (memdedup, reference), alternating.
const ROUNDS: usize = 3;

/// One cold run: wall seconds, peak RSS in KiB, and the groups it printed.
struct Run {
    secs: f64,
    kib: u64,
    groups: Groups,
}

/// Groups as a set of id sets; ids are kept as their JSON text (`7`, `"a"`).
type Groups = BTreeSet<BTreeSet<String>>;

/// Runs the comparison at every size and prints a summary table.
pub fn run(root: &Path, gnu_time: &str) -> Result<()> {
    let model_dir = crate::model::fetch_model(None)?;
    let bin = crate::demo::build_cli(root)?;
    let venv = crate::venv::cache_dir("MEMDEDUP_COMPARE_PYTHON_DIR", "compare-python")?;
    let python = crate::venv::ensure(&venv, &PACKAGES, "the Python reference")?;
    let script = root.join(SCRIPT);
    anyhow::ensure!(script.is_file(), "{} is missing", script.display());
    let scratch = TempDir::new("memdedup-compare")?;
    let mut rows = Vec::new();
    for size in SIZES {
        let input = scratch.path().join(format!("memories-{size}.jsonl"));
        std::fs::write(&input, memories_jsonl(size, SEED)?).with_context(|| format!("writing {}", input.display()))?;
        println!(
            "\n==> {size} memories, threshold {THRESHOLD}: memdedup scan and the Python reference, {ROUNDS} rounds"
        );
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for round in 1..=ROUNDS {
            let mut scan = Command::new(&bin);
            scan.arg("--model-dir").arg(&model_dir).arg("scan").arg(&input).args(["--json", "--threshold", THRESHOLD]);
            let a = timed(gnu_time, scan, scratch.path(), root, memdedup_groups)?;
            let mut reference = Command::new(&python);
            reference.arg(&script).arg(&model_dir).arg(&input).arg(THRESHOLD);
            let b = timed(gnu_time, reference, scratch.path(), root, reference_groups)?;
            println!(
                "  round {round}: memdedup {:>6.2} s {:>7.1} MiB | python {:>6.2} s {:>7.1} MiB",
                a.secs,
                mib(a.kib),
                b.secs,
                mib(b.kib)
            );
            ours.push(a);
            theirs.push(b);
        }
        let (a, b) = (&ours[0].groups, &theirs[0].groups);
        let stable = ours.iter().all(|r| &r.groups == a) && theirs.iter().all(|r| &r.groups == b);
        let verdict = match groups_differ(a, b) {
            0 => format!("identical ({} groups)", a.len()),
            n => format!("differ: {n} of {} memdedup / {} python groups have no twin", a.len(), b.len()),
        };
        let verdict = if stable { verdict } else { format!("{verdict}; not the same in every round") };
        println!("  groups: {verdict}");
        rows.push((size, median(&ours), median(&theirs), verdict));
    }
    println!(
        "\n| memories | memdedup wall | python wall | python / memdedup wall | memdedup RSS | python RSS | memdedup / python RSS | groups |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---|");
    for (size, (a_secs, a_kib), (b_secs, b_kib), verdict) in rows {
        println!(
            "| {size} | {a_secs:.2} s | {b_secs:.2} s | {:.2}x | {:.0} MiB | {:.0} MiB | {:.2}x | {verdict} |",
            b_secs / a_secs,
            mib(a_kib),
            mib(b_kib),
            a_kib as f64 / b_kib as f64
        );
    }
    Ok(())
}

/// `size` generated memories as JSONL lines `{"id": N, "text": ...}`, ids from 0: the
/// synthetic playbook's entries, about 15% of them paraphrases of earlier ones.
pub fn memories_jsonl(size: usize, seed: u64) -> Result<String> {
    let generated = crate::synthetic_playbook::generate(size, seed);
    let sections = generated.doc["sections"].as_object().context("the synthetic playbook has sections")?;
    let mut jsonl = String::new();
    for (i, entry) in sections.values().flat_map(|list| list.as_array().into_iter().flatten()).enumerate() {
        jsonl.push_str(&format!("{}\n", serde_json::json!({"id": i, "text": entry["text"]})));
    }
    Ok(jsonl)
}

/// Runs `cmd` under GNU time with stdout to a file and parses that file with `parse`.
fn timed(gnu_time: &str, cmd: Command, scratch: &Path, root: &Path, parse: fn(&str) -> Result<Groups>) -> Result<Run> {
    let timing = scratch.join("time.txt");
    let stdout_path = scratch.join("stdout.json");
    let stdout = std::fs::File::create(&stdout_path).with_context(|| format!("creating {}", stdout_path.display()))?;
    let mut timed = Command::new(gnu_time);
    timed
        .args(["-f", "%e %M", "-o"])
        .arg(&timing)
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(stdout);
    let line = process::describe(&timed);
    let out = timed.output().with_context(|| format!("could not start `{line}`"))?;
    if !out.status.success() {
        bail!("`{line}` failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim_end());
    }
    let measured = std::fs::read_to_string(&timing).with_context(|| format!("reading {}", timing.display()))?;
    let (secs, kib) =
        super::parse_time_output(&measured).with_context(|| format!("unexpected {gnu_time} output: {measured:?}"))?;
    let printed =
        std::fs::read_to_string(&stdout_path).with_context(|| format!("reading {}", stdout_path.display()))?;
    let groups = parse(&printed).with_context(|| format!("reading the groups `{line}` printed"))?;
    Ok(Run { secs, kib, groups })
}

/// The groups of `memdedup scan --json`: `{"groups": [{"members": [id, ...], ...}, ...]}`.
fn memdedup_groups(json: &str) -> Result<Groups> {
    let doc: Value = serde_json::from_str(json).context("not JSON")?;
    let groups = doc["groups"].as_array().context("no `groups` array")?;
    groups.iter().map(|g| id_set(&g["members"])).collect()
}

/// The groups of the reference: `{"groups": [[id, ...], ...]}`.
fn reference_groups(json: &str) -> Result<Groups> {
    let doc: Value = serde_json::from_str(json).context("not JSON")?;
    let groups = doc["groups"].as_array().context("no `groups` array")?;
    groups.iter().map(id_set).collect()
}

fn id_set(members: &Value) -> Result<BTreeSet<String>> {
    let members = members.as_array().context("a group is not an array of ids")?;
    Ok(members.iter().map(Value::to_string).collect())
}

/// How many groups of either side have no identical group on the other.
fn groups_differ(a: &Groups, b: &Groups) -> usize {
    a.symmetric_difference(b).count()
}

/// Median wall seconds and median peak RSS (each on its own) of the runs.
fn median(runs: &[Run]) -> (f64, u64) {
    let mut secs: Vec<f64> = runs.iter().map(|r| r.secs).collect();
    let mut kib: Vec<u64> = runs.iter().map(|r| r.kib).collect();
    secs.sort_by(f64::total_cmp);
    kib.sort_unstable();
    (secs[secs.len() / 2], kib[kib.len() / 2])
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(groups: &[&[&str]]) -> Groups {
        groups.iter().map(|g| g.iter().map(|id| (*id).to_owned()).collect()).collect()
    }

    #[test]
    fn both_outputs_parse_to_the_same_sets() {
        let ours = r#"{"model":"m","threshold":0.85,"items":5,"duplicates":3,"groups":[
            {"survivor":3,"members":[3,1],"weakest_link":0.9,"edges":[[3,1,0.9]]},
            {"survivor":"b","members":["b",4,"a"],"weakest_link":0.9,"edges":[]}]}"#;
        let theirs = r#"{"groups": [["a", "b", 4], [1, 3]]}"#;
        let expected = set(&[&["1", "3"], &["\"a\"", "\"b\"", "4"]]);
        assert_eq!(memdedup_groups(ours).unwrap(), expected);
        assert_eq!(reference_groups(theirs).unwrap(), expected);
        assert_eq!(groups_differ(&memdedup_groups(ours).unwrap(), &reference_groups(theirs).unwrap()), 0);
    }

    #[test]
    fn a_number_id_and_its_string_differ() {
        assert_ne!(
            reference_groups(r#"{"groups":[[1,2]]}"#).unwrap(),
            reference_groups(r#"{"groups":[["1",2]]}"#).unwrap()
        );
    }

    #[test]
    fn differing_groups_are_counted_on_both_sides() {
        let a = set(&[&["1", "2"], &["3", "4"], &["5", "6"]]);
        let b = set(&[&["1", "2"], &["3", "4", "7"]]);
        assert_eq!(groups_differ(&a, &b), 3);
        assert_eq!(groups_differ(&a, &a), 0);
    }

    #[test]
    fn malformed_output_is_an_error() {
        assert!(memdedup_groups("not json").is_err());
        assert!(memdedup_groups(r#"{"groups":[{"members":7}]}"#).is_err());
        assert!(reference_groups(r#"{"items":3}"#).is_err());
    }

    #[test]
    fn median_of_each_measure() {
        let run = |secs, kib| Run { secs, kib, groups: Groups::new() };
        assert_eq!(median(&[run(3.0, 10), run(1.0, 30), run(2.0, 20)]), (2.0, 20));
    }

    #[test]
    fn generated_memories_are_deterministic_jsonl() {
        let text = memories_jsonl(50, 1).unwrap();
        assert_eq!(text, memories_jsonl(50, 1).unwrap());
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 50);
        assert_eq!(lines[0]["id"], 0);
        assert!(lines.iter().all(|l| l["text"].as_str().is_some_and(|t| !t.is_empty())));
    }
}
