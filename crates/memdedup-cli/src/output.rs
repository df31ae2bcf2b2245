//! Atomic file output and number formatting.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

/// Writes `contents` to `path` atomically: a temporary file in the same directory, flushed
/// and synced, then renamed over `path`. An existing file keeps its permissions.
pub(crate) fn write_atomically(path: &Path, contents: &str) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".memdedup-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    tmp.write_all(contents.as_bytes()).with_context(|| format!("cannot write {}", tmp.path().display()))?;
    tmp.as_file().sync_all().context("cannot flush the output")?;
    if let Ok(meta) = std::fs::metadata(path) {
        tmp.as_file().set_permissions(meta.permissions()).ok();
    }
    tmp.persist(path).map_err(|e| e.error).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// A score rounded to 4 decimals, for output.
pub(crate) fn score(value: f32) -> f64 {
    (f64::from(value) * 10_000.0).round() / 10_000.0
}

/// First `max` characters of `text` on one line, with an ellipsis when cut.
pub(crate) fn snippet(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}
