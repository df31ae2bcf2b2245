//! Output: stdout that tolerates a closed pipe, output files (atomic for regular files,
//! written through for pipes and devices), number formatting.

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

/// Writes `contents` to `path`, the way its kind of file needs:
///
/// - a regular file, or a path that does not exist yet, is replaced atomically: a new
///   file beside it (created with the usual permissions for new files, named
///   `.NAME.memdedup-PID-N.tmp`), synced, then renamed over it. An existing file keeps its
///   permissions. On any error the temporary file is removed and `path` is untouched;
/// - a symbolic link is followed to the file it names, which is replaced as above, so
///   the link stays a link;
/// - a FIFO, a device (`/dev/stdout`, `/dev/null`) or any other special file, and a file
///   reached through a `/proc` descriptor link, is opened for writing and written
///   directly: renaming over it would replace the pipe, device or descriptor with a
///   plain file. Write errors (a full device) are reported.
///
/// Temporary files of earlier runs on the same file that were killed before renaming
/// (their process is gone) are removed first.
pub(crate) fn write_output(path: &Path, contents: &str) -> Result<()> {
    match resolve_destination(path)? {
        Destination::Regular(target) => replace_atomically(&target, contents),
        Destination::Special { append } => write_directly(path, contents, append),
    }
}

/// How [`write_output`] writes a path.
#[derive(Debug, PartialEq)]
enum Destination {
    /// Replace this file (the end of any symlink chain) by rename.
    Regular(PathBuf),
    /// Open the given path and write through it; `append` for a regular file reached
    /// through a descriptor link, so output goes where the descriptor points.
    Special { append: bool },
}

/// Most symbolic links followed before giving up (as Linux's `ELOOP`).
const MAX_LINKS: usize = 40;

fn resolve_destination(path: &Path) -> Result<Destination> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        if current.starts_with("/proc") {
            // `/dev/stdout` and `/dev/fd/N` lead to `/proc/self/fd/N`, whose "target" names
            // an open descriptor, not a path that can be replaced.
            let meta = std::fs::metadata(&current).with_context(|| format!("cannot write {}", path.display()))?;
            return Ok(Destination::Special { append: meta.is_file() });
        }
        let meta = match std::fs::symlink_metadata(&current) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Destination::Regular(current)),
            Err(e) => return Err(e).with_context(|| format!("cannot write {}", path.display())),
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            let link =
                std::fs::read_link(&current).with_context(|| format!("cannot read link {}", current.display()))?;
            current = match current.parent() {
                Some(dir) if link.is_relative() => dir.join(link),
                _ => link,
            };
        } else if kind.is_file() {
            return Ok(Destination::Regular(current));
        } else if kind.is_dir() {
            anyhow::bail!("cannot write {}: it is a directory", path.display());
        } else {
            return Ok(Destination::Special { append: false });
        }
    }
    anyhow::bail!("cannot write {}: more than {MAX_LINKS} symbolic links to follow", path.display())
}

/// Writes through an existing special file, without creating, truncating or renaming.
fn write_directly(path: &Path, contents: &str, append: bool) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .append(append)
        .open(path)
        .with_context(|| format!("cannot open {} for writing", path.display()))?;
    file.write_all(contents.as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
    file.flush().with_context(|| format!("cannot write {}", path.display()))
}

/// Replaces the regular file (or creates the file) `path` by a synced temporary file
/// renamed over it.
fn replace_atomically(path: &Path, contents: &str) -> Result<()> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let file_name = path.file_name().map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    let prefix = temp_prefix(&file_name);
    remove_stale_temps(dir, &prefix);
    let tmp: PathBuf =
        dir.join(format!("{prefix}{}-{}.tmp", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
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
        std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
        // Make the rename itself durable; a directory that cannot be synced is no error.
        if let Ok(dir) = std::fs::File::open(dir) {
            dir.sync_all().ok();
        }
        Ok(())
    })();
    if result.is_err() {
        std::fs::remove_file(&tmp).ok();
    }
    result
}

/// The start of every temporary file name for `file_name`; the writer's pid and a
/// counter follow, then `.tmp`.
fn temp_prefix(file_name: &str) -> String {
    format!(".{file_name}.memdedup-")
}

/// Removes the temporary files for one target left by runs that were killed before
/// their rename: those whose pid names no running process. Without `/proc` to ask,
/// only temporary files older than a day count as left behind. Failures are ignored:
/// cleaning up is a courtesy, the write does not depend on it.
fn remove_stale_temps(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let can_ask_proc = Path::new("/proc/self").exists();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| temp_pid(n, prefix)) else { continue };
        let stale = if can_ask_proc {
            pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists()
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() > 24 * 3600))
        };
        if stale && entry.file_type().is_ok_and(|t| t.is_file()) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {
                    tracing::debug!(path = %entry.path().display(), "removed a temporary file left by a killed run")
                }
                Err(e) => tracing::debug!(path = %entry.path().display(), %e, "cannot remove a stale temporary file"),
            }
        }
    }
}

/// The pid in `.NAME.memdedup-PID-N.tmp`, if `name` is one of our temporary files.
fn temp_pid(name: &str, prefix: &str) -> Option<u32> {
    let (pid, counter) = name.strip_prefix(prefix)?.strip_suffix(".tmp")?.split_once('-')?;
    counter.parse::<u32>().ok()?;
    pid.parse().ok()
}

/// A score rounded to 4 decimals, for output.
pub(crate) fn score(value: f32) -> f64 {
    (f64::from(value) * 10_000.0).round() / 10_000.0
}

/// `1 item`, `2 items`, `2 entries`, `2 passes`.
pub(crate) fn plural(n: usize, noun: &str) -> String {
    match (n, noun.strip_suffix('y')) {
        (1, _) => format!("1 {noun}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        (_, None) if noun.ends_with('s') => format!("{n} {noun}es"),
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

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn temporary_file_names_carry_the_pid() {
        let prefix = temp_prefix("playbook.json");
        assert_eq!(temp_pid(".playbook.json.memdedup-4242-0.tmp", &prefix), Some(4242));
        assert_eq!(temp_pid(".playbook.json.memdedup-4242-x.tmp", &prefix), None);
        assert_eq!(temp_pid(".other.json.memdedup-4242-0.tmp", &prefix), None);
        assert_eq!(temp_pid(".playbook.json.memdedup-4242-0", &prefix), None);
    }

    #[test]
    fn destinations_by_kind_of_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.json");
        assert_eq!(resolve_destination(&file).unwrap(), Destination::Regular(file.clone()));
        std::fs::write(&file, "{}").unwrap();
        assert_eq!(resolve_destination(&file).unwrap(), Destination::Regular(file.clone()));
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink("a.json", &link).unwrap();
        assert_eq!(resolve_destination(&link).unwrap(), Destination::Regular(file.clone()));
        let dangling = dir.path().join("dangling.json");
        std::os::unix::fs::symlink("sub/new.json", &dangling).unwrap();
        assert_eq!(resolve_destination(&dangling).unwrap(), Destination::Regular(dir.path().join("sub/new.json")));
        assert_eq!(resolve_destination(Path::new("/dev/null")).unwrap(), Destination::Special { append: false });
        assert!(resolve_destination(dir.path()).unwrap_err().to_string().contains("is a directory"));
        let loop_link = dir.path().join("loop");
        std::os::unix::fs::symlink("loop", &loop_link).unwrap();
        assert!(resolve_destination(&loop_link).unwrap_err().to_string().contains("symbolic links"));
    }
}
