//! [`TempDir`]: a uniquely named scratch directory, removed with everything in it on drop.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

/// A fresh directory under the system temp dir; dropping it deletes it recursively.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `$TMPDIR/<prefix>-<pid>-<nanos>[-n]`, never reusing an existing directory.
    pub fn new(prefix: &str) -> Result<Self> {
        let base = std::env::temp_dir();
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let stem = format!("{prefix}-{}-{nanos}", std::process::id());
        for attempt in 0..100 {
            let path = if attempt == 0 { base.join(&stem) } else { base.join(format!("{stem}-{attempt}")) };
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("creating a temporary directory {}", path.display()));
                }
            }
        }
        anyhow::bail!("could not create a unique temporary directory under {}", base.display())
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!("warning: could not remove temporary directory {}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_on_drop_with_contents() {
        let dir = TempDir::new("xtask-test").unwrap();
        let path = dir.path().to_path_buf();
        std::fs::create_dir(path.join("sub")).unwrap();
        std::fs::write(path.join("sub/file"), b"x").unwrap();
        let other = TempDir::new("xtask-test").unwrap();
        assert_ne!(other.path(), dir.path());
        drop(dir);
        assert!(!path.exists());
    }
}
