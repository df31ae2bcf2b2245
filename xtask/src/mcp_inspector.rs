//! `cargo xtask mcp-inspector`: the MCP Inspector CLI (`@modelcontextprotocol/inspector`
//! from npm, pinned with its lock file in tests/mcp-inspector/) in a cached directory, for
//! the tests that drive `memdedup mcp` with it. `cargo xtask ci` runs it before the tests
//! and hands them the executable in [`INSPECTOR_ENV_VAR`].

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::process;

/// The variable the tests read the Inspector's executable from.
pub const INSPECTOR_ENV_VAR: &str = "MEMDEDUP_MCP_INSPECTOR";

pub const HELP: &str = "\
Installs the MCP Inspector CLI pinned by tests/mcp-inspector/package-lock.json with `npm ci
--ignore-scripts` into $MEMDEDUP_MCP_INSPECTOR_DIR, else $XDG_CACHE_HOME/memdedup/mcp-inspector,
else ~/.cache/memdedup/mcp-inspector, unless that lock file is installed there already, and
prints the executable. The tests in tests/cli/mcp_inspector.rs use it (from
$MEMDEDUP_MCP_INSPECTOR, else that default path). Needs Node.js and npm.";

/// Installs the pinned Inspector unless it is there; returns its executable.
pub fn ensure(root: &Path) -> Result<PathBuf> {
    let dir = crate::venv::cache_dir("MEMDEDUP_MCP_INSPECTOR_DIR", "mcp-inspector")?;
    let source = root.join("tests").join("mcp-inspector");
    let lock = std::fs::read(source.join("package-lock.json"))
        .with_context(|| format!("reading {}", source.join("package-lock.json").display()))?;
    let executable = dir.join("node_modules").join(".bin").join("mcp-inspector");
    let installed_lock = dir.join("installed-lock.json");
    if executable.is_file() && std::fs::read(&installed_lock).ok().as_deref() == Some(lock.as_slice()) {
        return Ok(executable);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(source.join(file), dir.join(file))
            .with_context(|| format!("copying {file} to {}", dir.display()))?;
    }
    println!("==> npm ci (the MCP Inspector CLI) in {}", dir.display());
    process::run(Command::new("npm").args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"]).current_dir(&dir))
        .context("npm could not install the MCP Inspector CLI (Debian: apt-get install npm)")?;
    anyhow::ensure!(executable.is_file(), "npm ci left no {}", executable.display());
    std::fs::write(&installed_lock, &lock).with_context(|| format!("writing {}", installed_lock.display()))?;
    Ok(executable)
}
