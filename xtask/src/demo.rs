//! `cargo xtask demo`: build the CLI and run it on the example playbook and memories, then
//! capture and check candidate memories against a fresh SQLite memory store.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::process::{self, cargo};

/// Fetches the model if needed, builds `memdedup` in release mode, dedups
/// `examples/playbook.json` into `$TMPDIR/memdedup-demo/` and scans `examples/memories.jsonl`
/// (with the learned judge, the default, then by cosine alone).
pub fn run(root: &Path) -> Result<()> {
    crate::model::fetch_model(None)?;
    let bin = build_cli(root)?;

    let input = root.join("examples/playbook.json");
    let out_dir = std::env::temp_dir().join("memdedup-demo");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let output = out_dir.join("playbook.deduped.json");
    let before = section_counts(&input)?;

    println!("\n==> memdedup playbook dedup examples/playbook.json -o {}", output.display());
    process::run(
        Command::new(&bin).args(["playbook", "dedup", "examples/playbook.json", "-o"]).arg(&output).current_dir(root),
    )?;
    let after = section_counts(&output)?;
    println!("\nentries per section (before -> after):");
    for (section, n) in &before {
        let m = after.iter().find(|(s, _)| s == section).map_or(0, |(_, m)| *m);
        println!("  {section:<24} {n:>3} -> {m:>3}");
    }
    let total_before: usize = before.iter().map(|(_, n)| n).sum();
    let total_after: usize = after.iter().map(|(_, n)| n).sum();
    println!(
        "  {:<24} {total_before:>3} -> {total_after:>3}  ({} absorbed into survivors)",
        "total",
        total_before.saturating_sub(total_after)
    );
    println!("deduplicated playbook written to {}", output.display());

    println!("\n==> memdedup scan examples/memories.jsonl   (the learned pair judge, the default)");
    process::run(Command::new(&bin).args(["scan", "examples/memories.jsonl"]).current_dir(root))?;
    println!("\n==> memdedup scan examples/memories.jsonl --judge cosine   (seed 004's cosine threshold)");
    process::run(Command::new(&bin).args(["scan", "examples/memories.jsonl", "--judge", "cosine"]).current_dir(root))?;
    // The learned pair judge reads both texts together: a paraphrase, an opposite.
    for (first, second) in [
        ("always use type hints for function parameters", "use type hints on all function parameters"),
        (
            "Always run the migrations before starting the API server.",
            "Never run the migrations before starting the API server.",
        ),
    ] {
        println!("\n==> memdedup similarity \"{first}\" \"{second}\" --judge learned");
        process::run(Command::new(&bin).args(["similarity", first, second, "--judge", "learned"]).current_dir(root))?;
    }

    // The check-before-store path, on a fresh SQLite memory store.
    let db = out_dir.join("memory.db");
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", db.display()));
        if file.exists() {
            std::fs::remove_file(&file).with_context(|| format!("removing {}", file.display()))?;
        }
    }
    let with_db = || {
        let mut cmd = Command::new(&bin);
        cmd.arg("--db").arg(&db).current_dir(root).env_remove("DATABASE_URL");
        cmd
    };
    println!("\n==> memdedup --db {} capture examples/candidates.jsonl", db.display());
    process::run(with_db().args(["capture", "examples/candidates.jsonl"]))?;
    let paraphrase = "We went with PostgreSQL as the primary database of the billing service.";
    println!("\n==> memdedup --db {} check \"{paraphrase}\" --namespace decisions", db.display());
    process::run(with_db().args(["check", paraphrase, "--namespace", "decisions"]))?;

    // The PreCompact hook on an example Claude Code transcript, twice: the second time
    // everything is already known.
    let transcript = root.join("examples/transcript.jsonl");
    let hook_input = serde_json::json!({
        "session_id": "demo", "transcript_path": transcript, "hook_event_name": "PreCompact",
        "trigger": "manual", "cwd": root,
    })
    .to_string();
    for round in ["", " (again: nothing new)"] {
        println!(
            "\n==> memdedup --db {} hook pre-compact < hook input for examples/transcript.jsonl{round}",
            db.display()
        );
        let output = process::output_with_stdin(with_db().args(["hook", "pre-compact"]), &hook_input)?;
        let value: serde_json::Value = serde_json::from_str(output.trim()).context("the hook printed no JSON")?;
        let context = value["hookSpecificOutput"]["additionalContext"].as_str().context("no additionalContext")?;
        println!("{context}");
    }
    println!("\n==> memdedup --db {} stats", db.display());
    process::run(with_db().arg("stats"))?;

    // A pair the learned judge is unsure of is stored, linked, and queued for review.
    for text in ["The user drinks coffee without sugar.", "User takes their coffee unsweetened."] {
        println!("\n==> memdedup --db {} add \"{text}\" --namespace preferences", db.display());
        process::run(with_db().args(["add", text, "--namespace", "preferences"]))?;
    }
    println!("\n==> memdedup --db {} review   (the pairs waiting for a person or an agent)", db.display());
    process::run(with_db().args(["review", "--list"]))?;
    Ok(())
}

/// `cargo build --release -p memdedup-cli`; returns the path of the `memdedup` binary.
pub fn build_cli(root: &Path) -> Result<PathBuf> {
    println!("==> cargo build --release -p memdedup-cli");
    process::run(cargo().args(["build", "--release", "-p", "memdedup-cli"]).current_dir(root))?;
    let bin = process::target_dir(root)?.join("release").join(format!("memdedup{}", std::env::consts::EXE_SUFFIX));
    anyhow::ensure!(
        bin.is_file(),
        "the build succeeded but {} does not exist (is the binary still named `memdedup`?)",
        bin.display()
    );
    Ok(bin)
}

/// Entry counts per section of a playbook file, in file order.
pub fn section_counts(path: &Path) -> Result<Vec<(String, usize)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
    let sections =
        doc["sections"].as_object().with_context(|| format!("{} has no `sections` object", path.display()))?;
    Ok(sections.iter().map(|(name, entries)| (name.clone(), entries.as_array().map_or(0, Vec::len))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_playbook_has_the_expected_shape() {
        let counts = section_counts(&crate::project_root().join("examples/playbook.json")).unwrap();
        let names: Vec<&str> = counts.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            names,
            [
                "PATTERNS & APPROACHES",
                "MISTAKES TO AVOID",
                "USER PREFERENCES",
                "PROJECT CONTEXT",
                "OTHERS",
                "TEAM NOTES"
            ]
        );
        assert!(counts.iter().all(|(_, n)| *n > 0), "{counts:?}");
        let total: usize = counts.iter().map(|(_, n)| n).sum();
        assert!((20..=30).contains(&total), "{total} entries");
    }

    #[test]
    fn example_memories_are_jsonl_with_the_scanner_fields() {
        let path = crate::project_root().join("examples/memories.jsonl");
        let text = std::fs::read_to_string(path).unwrap();
        let mut lines = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            for field in ["id", "namespace", "text"] {
                assert!(v[field].is_string(), "missing {field}: {line}");
            }
            lines += 1;
        }
        assert!(lines >= 10, "{lines} memories");
    }
}
