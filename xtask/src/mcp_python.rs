//! `cargo xtask mcp-python`: the official Python MCP SDK (`mcp` from PyPI) in a cached
//! virtualenv, for the tests that drive `memdedup mcp` and `/mcp` with a second, independent
//! MCP client. `cargo xtask ci` runs it before the tests and hands them the interpreter in
//! [`PYTHON_ENV_VAR`].

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::process;

/// The pinned SDK.
pub const MCP: &str = "mcp==2.3.0";
/// The variable the tests read the venv's interpreter from.
pub const PYTHON_ENV_VAR: &str = "MEMDEDUP_MCP_PYTHON";

pub const HELP: &str = "\
Creates a virtualenv in $MEMDEDUP_MCP_PYTHON_DIR, else $XDG_CACHE_HOME/memdedup/mcp-python,
else ~/.cache/memdedup/mcp-python, pip-installs the pinned Python MCP SDK (mcp==2.3.0) unless
that version is there, and prints the venv's python. The tests in tests/cli/mcp_python.rs use
it (from $MEMDEDUP_MCP_PYTHON, else that default path). Needs python3 with venv and pip.";

/// The venv's directory.
pub fn venv_dir() -> Result<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("MEMDEDUP_MCP_PYTHON_DIR") {
        return Ok(dir);
    }
    let cache = var("XDG_CACHE_HOME")
        .or_else(|| var("HOME").map(|home| home.join(".cache")))
        .context("cannot find a cache directory: set MEMDEDUP_MCP_PYTHON_DIR, XDG_CACHE_HOME or HOME")?;
    Ok(cache.join("memdedup").join("mcp-python"))
}

/// Creates the venv unless it exists and installs the pinned SDK unless it is there;
/// returns the venv's python.
pub fn ensure() -> Result<PathBuf> {
    let venv = venv_dir()?;
    let python = venv.join("bin").join("python");
    if !python.is_file() {
        if let Some(parent) = venv.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        println!("==> python3 -m venv {}", venv.display());
        process::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .context("could not create the virtualenv for the MCP SDK (Debian: apt-get install python3-venv)")?;
    }
    let wanted = MCP.split_once("==").map_or(MCP, |(_, version)| version);
    if installed_version(&python).as_deref() != Some(wanted) {
        println!("==> pip install {MCP} into {}", venv.display());
        process::run(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", MCP])
                .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
        )
        .with_context(|| format!("pip could not install {MCP}"))?;
    }
    let version = installed_version(&python);
    if version.as_deref() != Some(wanted) {
        anyhow::bail!("{} has mcp {version:?} after installing {MCP}", python.display());
    }
    Ok(python)
}

/// The installed `mcp` version, if any.
fn installed_version(python: &Path) -> Option<String> {
    let script =
        "import importlib.metadata as m\ntry:\n    print(m.version('mcp'))\nexcept m.PackageNotFoundError:\n    pass";
    let output = Command::new(python).args(["-c", script]).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_owned()).filter(|v| !v.is_empty())
}
