//! Output: stdout that tolerates a closed pipe, atomic files, number formatting.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result};

/// Writes `text` to stdout. A closed pipe comes back as an `io::Error` of kind
/// `BrokenPipe`, which `main` treats as a normal end.
pub(crate) fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Writes `contents` to `path` atomically: a new file beside it (created with the usual
/// permissions for new files), synced, then renamed over `path`. An existing file keeps
/// its permissions. On any error the temporary file is removed and `path` is untouched.
pub(crate) fn write_atomically(path: &Path, contents: &str) -> Result<()> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let file_name = path.file_name().map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    let tmp: PathBuf = dir.join(format!(
        ".{file_name}.memdedup-{}-{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| -> Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
        file.write_all(contents.as_bytes()).with_context(|| format!("cannot write {}", tmp.display()))?;
        file.sync_all().with_context(|| format!("cannot flush {}", tmp.display()))?;
        if let Ok(meta) = std::fs::metadata(path) {
            file.set_permissions(meta.permissions()).ok();
        }
        std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
    })();
    if result.is_err() {
        std::fs::remove_file(&tmp).ok();
    }
    result
}

/// A score rounded to 4 decimals, for output.
pub(crate) fn score(value: f32) -> f64 {
    (f64::from(value) * 10_000.0).round() / 10_000.0
}

/// `1 item`, `2 items`.
pub(crate) fn plural(n: usize, noun: &str) -> String {
    match (n, noun.strip_suffix('y')) {
        (1, _) => format!("1 {noun}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        (_, None) => format!("{n} {noun}s"),
    }
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
