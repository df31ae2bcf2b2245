//! Cached Python virtualenvs with pinned packages, for the tools xtask runs in Python (the
//! MCP SDK client of the tests, the reference of `bench --compare`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::process;

/// `$OVERRIDE_VAR`, else `$XDG_CACHE_HOME/memdedup/NAME`, else `~/.cache/memdedup/NAME`.
pub fn cache_dir(override_var: &str, name: &str) -> Result<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var(override_var) {
        return Ok(dir);
    }
    let cache = var("XDG_CACHE_HOME")
        .or_else(|| var("HOME").map(|home| home.join(".cache")))
        .with_context(|| format!("cannot find a cache directory: set {override_var}, XDG_CACHE_HOME or HOME"))?;
    Ok(cache.join("memdedup").join(name))
}

/// Creates the venv at `venv` unless it exists and pip-installs `packages` (each
/// `name==version`) unless they are all there at those versions; returns its python.
/// `purpose` names what the venv is for in errors.
pub fn ensure(venv: &Path, packages: &[&str], purpose: &str) -> Result<PathBuf> {
    let python = venv.join("bin").join("python");
    if !python.is_file() {
        if let Some(parent) = venv.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        println!("==> python3 -m venv {}", venv.display());
        process::run(Command::new("python3").args(["-m", "venv"]).arg(venv)).with_context(|| {
            format!("could not create the virtualenv for {purpose} (Debian: apt-get install python3-venv)")
        })?;
    }
    if installed(&python, packages) != packages {
        println!("==> pip install {} into {}", packages.join(" "), venv.display());
        process::run(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet"])
                .args(packages)
                .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
        )
        .with_context(|| format!("pip could not install the packages of {purpose}"))?;
        let now = installed(&python, packages);
        anyhow::ensure!(now == packages, "{} has {now:?} after installing {packages:?}", python.display());
    }
    Ok(python)
}

/// `name==version` of each of `packages` as installed (`name==` when missing).
fn installed(python: &Path, packages: &[&str]) -> Vec<String> {
    let names: Vec<&str> = packages.iter().map(|p| p.split_once("==").map_or(*p, |(name, _)| name)).collect();
    let script = "import importlib.metadata as m, sys\nfor name in sys.argv[1:]:\n    try:\n        \
                  print(name + '==' + m.version(name))\n    except m.PackageNotFoundError:\n        print(name + '==')";
    let output = Command::new(python).args(["-c", script]).args(&names).output();
    let text = output.ok().and_then(|o| String::from_utf8(o.stdout).ok()).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}
