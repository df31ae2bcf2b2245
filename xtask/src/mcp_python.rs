//! `cargo xtask mcp-python`: the official Python MCP SDK (`mcp` from PyPI) in a cached
//! virtualenv, for the tests that drive `memdedup mcp` and `/mcp` with a second, independent
//! MCP client. `cargo xtask ci` runs it before the tests and hands them the interpreter in
//! [`PYTHON_ENV_VAR`].

use std::path::PathBuf;

use anyhow::Result;

/// The pinned SDK.
pub const MCP: &str = "mcp==2.3.0";
/// The variable the tests read the venv's interpreter from.
pub const PYTHON_ENV_VAR: &str = "MEMDEDUP_MCP_PYTHON";

pub const HELP: &str = "\
Creates a virtualenv in $MEMDEDUP_MCP_PYTHON_DIR, else $XDG_CACHE_HOME/memdedup/mcp-python,
else ~/.cache/memdedup/mcp-python, pip-installs the pinned Python MCP SDK (mcp==2.3.0) unless
that version is there, and prints the venv's python. The tests in tests/cli/mcp_python.rs use
it (from $MEMDEDUP_MCP_PYTHON, else that default path). Needs python3 with venv and pip.";

/// Creates the venv unless it exists and installs the pinned SDK unless it is there;
/// returns the venv's python.
pub fn ensure() -> Result<PathBuf> {
    let venv = crate::venv::cache_dir("MEMDEDUP_MCP_PYTHON_DIR", "mcp-python")?;
    crate::venv::ensure(&venv, &[MCP], "the Python MCP SDK")
}
