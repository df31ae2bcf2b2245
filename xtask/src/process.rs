//! Running external programs (cargo, python3, the built CLI) with errors that name the command.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// A `cargo` command: the cargo that runs xtask (`$CARGO`), else `cargo` from `PATH`.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")))
}

/// The command line as one readable string, for messages.
pub fn describe(cmd: &Command) -> String {
    let program = PathBuf::from(cmd.get_program());
    // `$CARGO` is an absolute path into the toolchain; `cargo` reads better.
    let name = match program.file_name() {
        Some(name) if name == "cargo" => "cargo".into(),
        _ => program.display().to_string(),
    };
    std::iter::once(name).chain(cmd.get_args().map(|a| a.to_string_lossy().into_owned())).collect::<Vec<_>>().join(" ")
}

/// Runs `cmd` with inherited stdin, stdout and stderr; fails unless it exits with 0.
pub fn run(cmd: &mut Command) -> Result<()> {
    let line = describe(cmd);
    let status = cmd.status().with_context(|| format!("could not start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(())
}

/// Runs `cmd` and returns its stdout; on failure the error carries its stderr.
pub fn output(cmd: &mut Command) -> Result<String> {
    let line = describe(cmd);
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("could not start `{line}`"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!("`{line}` failed ({}):\n{}", out.status, stderr.trim_end());
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{line}` printed non-UTF-8 output"))
}

/// Runs `cmd` with `input` on its stdin and returns its stdout; on failure the error
/// carries its stderr.
pub fn output_with_stdin(cmd: &mut Command, input: &str) -> Result<String> {
    use std::io::Write;
    let line = describe(cmd);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{line}`"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).with_context(|| format!("writing the input of `{line}`"))?;
    }
    let out = child.wait_with_output().with_context(|| format!("waiting for `{line}`"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!("`{line}` failed ({}):\n{}", out.status, stderr.trim_end());
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{line}` printed non-UTF-8 output"))
}

/// Whether `cmd` can be started and exits with 0 (its output is discarded).
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// The directory cargo builds into: `$CARGO_TARGET_DIR`, else what `cargo metadata` says.
pub fn target_dir(root: &std::path::Path) -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return Ok(if dir.is_absolute() { dir } else { root.join(dir) });
    }
    let json = output(cargo().args(["metadata", "--format-version", "1", "--no-deps"]).current_dir(root))?;
    let meta: serde_json::Value = serde_json::from_str(&json).context("parsing `cargo metadata` output")?;
    let dir = meta["target_directory"].as_str().context("`cargo metadata` output has no target_directory")?;
    Ok(PathBuf::from(dir))
}
