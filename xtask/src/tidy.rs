//! `cargo xtask tidy`: house rules and architecture invariants, also run as unit tests.
//!
//! Each check returns every [`Failure`] it finds rather than stopping at the first, so one
//! run shows all that needs fixing. Crates that do not exist yet are skipped; the rules
//! for the ones that do are enforced in full.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::process;

mod shape;

/// Heavy crates: an async runtime, a database driver, an HTTP stack, ONNX Runtime.
const HEAVY: [&str; 7] = ["tokio", "async-std", "sqlx", "reqwest", "ort", "tokenizers", "hyper"];

/// The members whose normal dependency tree must hold none of [`HEAVY`], and why.
const HEAVY_FORBIDDEN: [(&str, &str); 2] = [
    ("dedup-core", "no async runtime, database, HTTP or ONNX in the pure core"),
    ("xtask", "xtask must stay quick to build: depend on dedup-embed without features"),
];

/// The only workspace members allowed a direct normal dependency on `anyhow`.
const ANYHOW_ALLOWED: [&str; 2] = ["memdedup-cli", "xtask"];

/// For each crate, the only memdedup crates it may depend on (directly or not).
const INTERNAL_DEPS_ALLOWED: [(&str, &[&str]); 9] = [
    ("dedup-core", &[]),
    ("dedup-embed", &["dedup-core"]),
    ("dedup-store", &["dedup-core"]),
    ("dedup-llm", &["dedup-core"]),
    ("dedup-precompact", &["dedup-core", "dedup-embed", "dedup-store"]),
    ("dedup-assist", &["dedup-core", "dedup-embed", "dedup-store", "dedup-llm"]),
    ("dedup-server", &["dedup-core", "dedup-embed", "dedup-store", "dedup-precompact", "dedup-llm"]),
    (
        "dedup-mcp",
        &[
            "dedup-core",
            "dedup-embed",
            "dedup-store",
            "dedup-precompact",
            "dedup-llm",
            "dedup-assist",
            "dedup-server",
            "memdedup",
        ],
    ),
    ("xtask", &["dedup-core", "dedup-embed"]),
];

/// One broken rule: where, and which rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// A file path relative to the workspace root, or a crate name.
    pub location: String,
    /// The rule, stated so the fix is obvious.
    pub rule: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.rule)
    }
}

fn failure(location: impl Into<String>, rule: impl Into<String>) -> Failure {
    Failure { location: location.into(), rule: rule.into() }
}

/// A workspace member as tidy sees it.
#[derive(Debug, Clone)]
pub struct Member {
    /// The `[package] name`.
    pub name: String,
    /// Its directory, relative to the workspace root (`crates/x` or `xtask`).
    pub dir: PathBuf,
}

/// A tidy check: every failure it finds in the workspace.
type Check = fn(&Path, &[Member]) -> Result<Vec<Failure>>;

/// Runs every check, prints each failure, and fails if there was any.
pub fn run(root: &Path) -> Result<()> {
    let members = members(root)?;
    let mut failures = Vec::new();
    let checks: [(&str, Check); 7] = [
        ("folder names", check_folder_names),
        ("module docs", check_module_docs),
        ("dependency rules", check_dependencies),
        ("error types", check_error_types),
        ("release profile", check_release_profile),
        ("file length", shape::check_file_length),
        ("import cycles", shape::check_import_cycles),
    ];
    for (name, check) in checks {
        let found = check(root, &members).with_context(|| format!("tidy check `{name}`"))?;
        println!(
            "tidy: {name}: {}",
            if found.is_empty() { "ok".to_owned() } else { format!("{} failure(s)", found.len()) }
        );
        failures.extend(found);
    }
    if failures.is_empty() {
        return Ok(());
    }
    for f in &failures {
        eprintln!("tidy: {f}");
    }
    bail!("tidy found {} failure(s)", failures.len())
}

/// The release binary ships lean: `[profile.release]` keeps no debug info and strips what
/// the standard library brings, and `[profile.profiling]` (inheriting release) is where
/// line tables live.
pub fn check_release_profile(root: &Path, _members: &[Member]) -> Result<Vec<Failure>> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).context("reading Cargo.toml")?;
    Ok(release_profile_failures(&manifest))
}

fn release_profile_failures(manifest: &str) -> Vec<Failure> {
    let Ok(doc) = manifest.parse::<toml::Table>() else {
        return vec![failure("Cargo.toml", "does not parse as TOML")];
    };
    let profile = |name: &str| doc.get("profile").and_then(|p| p.get(name)).and_then(toml::Value::as_table);
    let mut found = Vec::new();
    let release = profile("release");
    let debug = release.and_then(|r| r.get("debug"));
    if !matches!(debug, Some(toml::Value::Boolean(false)) | Some(toml::Value::Integer(0)) | None)
        && debug.and_then(toml::Value::as_str) != Some("none")
    {
        found.push(failure("Cargo.toml [profile.release]", "must not keep debug info (debug = false)"));
    }
    let strip = release.and_then(|r| r.get("strip"));
    if !matches!(strip.and_then(toml::Value::as_str), Some("debuginfo" | "symbols"))
        && strip.and_then(toml::Value::as_bool) != Some(true)
    {
        found.push(failure("Cargo.toml [profile.release]", "must strip debug info (strip = \"debuginfo\")"));
    }
    if profile("profiling").and_then(|p| p.get("inherits")).and_then(toml::Value::as_str) != Some("release") {
        found.push(failure("Cargo.toml [profile.profiling]", "must exist and inherit release"));
    }
    found
}

/// The workspace members that exist: every `crates/*` folder with a `Cargo.toml`, plus
/// `xtask`. Folders without a manifest are crates not written yet and are skipped.
pub fn members(root: &Path) -> Result<Vec<Member>> {
    let mut dirs = Vec::new();
    let crates = root.join("crates");
    for entry in std::fs::read_dir(&crates).with_context(|| format!("listing {}", crates.display()))? {
        let entry = entry?;
        if entry.path().join("Cargo.toml").is_file() {
            dirs.push(PathBuf::from("crates").join(entry.file_name()));
        }
    }
    dirs.sort();
    dirs.push(PathBuf::from("xtask"));
    dirs.into_iter()
        .map(|dir| {
            let manifest = root.join(&dir).join("Cargo.toml");
            let text = std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
            let name = package_name(&text).with_context(|| format!("{} has no [package] name", manifest.display()))?;
            Ok(Member { name, dir })
        })
        .collect()
}

/// The `name = "..."` of a manifest's `[package]` table.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package
            && let Some((key, value)) = line.split_once('=')
            && key.trim() == "name"
        {
            return Some(value.trim().trim_matches('"').to_owned());
        }
    }
    None
}

/// Folder name = crate name.
pub fn check_folder_names(_root: &Path, members: &[Member]) -> Result<Vec<Failure>> {
    Ok(members
        .iter()
        .filter(|m| m.dir.file_name().is_some_and(|f| f != m.name.as_str()))
        .map(|m| {
            failure(m.dir.display().to_string(), format!("the folder name must equal the crate name (`{}`)", m.name))
        })
        .collect())
}

/// Every crate root (`src/lib.rs`, `src/main.rs`) opens with a `//!` paragraph; every
/// other `.rs` file under a member's `src/` starts with a `//!` line.
pub fn check_module_docs(root: &Path, members: &[Member]) -> Result<Vec<Failure>> {
    let mut failures = Vec::new();
    for member in members {
        let src = root.join(&member.dir).join("src");
        for path in rust_files(&src)? {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let rel = path.strip_prefix(root).unwrap_or(&path).display().to_string();
            let is_crate_root = path.parent() == Some(src.as_path())
                && path.file_name().is_some_and(|f| f == "lib.rs" || f == "main.rs");
            if let Some(rule) = module_doc_problem(&text, is_crate_root) {
                failures.push(failure(rel, rule));
            }
        }
    }
    Ok(failures)
}

/// What is wrong with a file's opening docs, if anything.
fn module_doc_problem(text: &str, is_crate_root: bool) -> Option<&'static str> {
    let first = text.lines().next().unwrap_or("");
    let opens_with_text = first.strip_prefix("//!").is_some_and(|rest| !rest.trim().is_empty());
    match (opens_with_text, is_crate_root) {
        (true, _) => None,
        (false, true) => Some(
            "a crate root must open with a `//!` paragraph: the crate's role, its main \
             types and what it must not depend on",
        ),
        (false, false) => Some("a module must start with a `//!` line saying what it is"),
    }
}

/// All `.rs` files under `dir`, sorted; none if `dir` does not exist.
fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if !dir.is_dir() {
        return Ok(out);
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The dependency rules, read from `cargo tree` for each member (normal edges only, all
/// features, all targets):
/// - the [`HEAVY_FORBIDDEN`] members (`dedup-core`, `xtask`) have none of [`HEAVY`]
///   anywhere in their tree;
/// - `dedup-core`, `dedup-embed`, `dedup-store`, `dedup-llm` and `xtask` reach only the
///   memdedup crates that [`INTERNAL_DEPS_ALLOWED`] lists (so embed, store and llm never
///   depend on each other);
/// - only [`ANYHOW_ALLOWED`] members have `anyhow` as a direct normal dependency.
///
/// One `cargo tree` per crate: with several `-p`, a subtree already printed under one root
/// is not repeated under the next (`(*)`), so later roots would look smaller than they are.
pub fn check_dependencies(root: &Path, members: &[Member]) -> Result<Vec<Failure>> {
    let internal: BTreeSet<&str> = members.iter().map(|m| m.name.as_str()).collect();
    let mut failures = Vec::new();
    for m in members {
        let mut cmd = process::cargo();
        cmd.args([
            "tree",
            "--edges",
            "normal",
            "--prefix",
            "depth",
            "--all-features",
            "--target",
            "all",
            "--color",
            "never",
            "--package",
            &m.name,
        ])
        .current_dir(root);
        let trees = parse_cargo_tree(&process::output(&mut cmd)?)?;
        let tree = trees.get(&m.name).with_context(|| format!("`cargo tree` printed no tree for `{}`", m.name))?;
        failures.extend(dependency_failures(&m.name, tree, &internal));
    }
    Ok(failures)
}

/// One crate's normal dependencies: name → smallest depth at which it appears.
type Tree = BTreeMap<String, usize>;

/// Parses `cargo tree --prefix depth` output for several roots: each depth-0 line starts
/// the tree of the crate it names.
fn parse_cargo_tree(output: &str) -> Result<BTreeMap<String, Tree>> {
    let mut trees: BTreeMap<String, Tree> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in output.lines().filter(|l| !l.trim().is_empty()) {
        let digits = line.bytes().take_while(u8::is_ascii_digit).count();
        let depth: usize = line[..digits].parse().with_context(|| format!("unexpected `cargo tree` line: `{line}`"))?;
        let name = line[digits..]
            .split_whitespace()
            .next()
            .with_context(|| format!("unexpected `cargo tree` line: `{line}`"))?
            .to_owned();
        if depth == 0 {
            trees.entry(name.clone()).or_default();
            current = Some(name);
        } else {
            let root = current.as_ref().with_context(|| format!("`cargo tree` line before any root: `{line}`"))?;
            let tree = trees.entry(root.clone()).or_default();
            let d = tree.entry(name).or_insert(depth);
            *d = (*d).min(depth);
        }
    }
    Ok(trees)
}

fn dependency_failures(krate: &str, tree: &Tree, internal: &BTreeSet<&str>) -> Vec<Failure> {
    let mut failures = Vec::new();
    if let Some((_, why)) = HEAVY_FORBIDDEN.iter().find(|(k, _)| *k == krate) {
        for dep in HEAVY.iter().filter(|d| tree.contains_key(**d)) {
            failures.push(failure(
                krate,
                format!(
                    "must not depend on `{dep}`, even indirectly ({why}); \
                     see `cargo tree -e normal -i {dep} -p {krate}`"
                ),
            ));
        }
    }
    if let Some((_, allowed)) = INTERNAL_DEPS_ALLOWED.iter().find(|(k, _)| *k == krate) {
        for dep in tree.keys().filter(|d| internal.contains(d.as_str())) {
            if !allowed.contains(&dep.as_str()) {
                failures.push(failure(
                    krate,
                    format!(
                        "must not depend on `{dep}` (among memdedup crates it may use only: {})",
                        if allowed.is_empty() { "none".to_owned() } else { allowed.join(", ") }
                    ),
                ));
            }
        }
    }
    if tree.get("anyhow") == Some(&1) && !ANYHOW_ALLOWED.contains(&krate) {
        failures.push(failure(
            krate,
            format!(
                "must not have `anyhow` as a normal dependency (only {} may; library crates \
                 return their own thiserror `Error`; dev-dependencies are fine)",
                ANYHOW_ALLOWED.join(" and ")
            ),
        ));
    }
    failures
}

/// Every library crate (one with `src/lib.rs`) defines exactly one `pub enum Error`.
pub fn check_error_types(root: &Path, members: &[Member]) -> Result<Vec<Failure>> {
    let mut failures = Vec::new();
    for member in members {
        let src = root.join(&member.dir).join("src");
        if !src.join("lib.rs").is_file() {
            continue;
        }
        let mut found = Vec::new();
        for path in rust_files(&src)? {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let rel = path.strip_prefix(root).unwrap_or(&path).display().to_string();
            found.extend(std::iter::repeat_n(rel, count_pub_enum_error(&text)));
        }
        if found.len() != 1 {
            failures.push(failure(
                &member.name,
                format!(
                    "a library crate must define exactly one `pub enum Error` (found {}{})",
                    found.len(),
                    if found.is_empty() { String::new() } else { format!(": {}", found.join(", ")) }
                ),
            ));
        }
    }
    Ok(failures)
}

/// Lines declaring `pub enum Error` (not `ErrorKind`, not commented out).
fn count_pub_enum_error(text: &str) -> usize {
    text.lines()
        .map(str::trim_start)
        .filter(|l| {
            l.strip_prefix("pub enum Error").is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '{', '<']))
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (PathBuf, Vec<Member>) {
        let root = crate::project_root();
        let members = members(&root).unwrap();
        (root, members)
    }

    fn assert_none(failures: Vec<Failure>) {
        let lines: Vec<String> = failures.iter().map(ToString::to_string).collect();
        assert!(lines.is_empty(), "tidy failures:\n{}", lines.join("\n"));
    }

    // The checks themselves, on the real workspace.

    #[test]
    fn folder_names_are_crate_names() {
        let (root, members) = workspace();
        assert_none(check_folder_names(&root, &members).unwrap());
    }

    #[test]
    fn every_module_has_docs() {
        let (root, members) = workspace();
        assert_none(check_module_docs(&root, &members).unwrap());
    }

    #[test]
    fn dependency_rules_hold() {
        let (root, members) = workspace();
        assert_none(check_dependencies(&root, &members).unwrap());
    }

    #[test]
    fn each_library_has_one_error_type() {
        let (root, members) = workspace();
        assert_none(check_error_types(&root, &members).unwrap());
    }

    // The checks catch what they should.

    #[test]
    fn members_include_xtask_and_existing_crates() {
        let (_, members) = workspace();
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        assert!(names.contains(&"xtask"), "{names:?}");
        assert!(names.contains(&"dedup-core"), "{names:?}");
    }

    #[test]
    fn package_name_reads_only_the_package_table() {
        let manifest =
            "[workspace]\nname = \"no\"\n[package]\nversion = \"1\"\nname = \"yes\"\n[dependencies]\nname = \"dep\"\n";
        assert_eq!(package_name(manifest).as_deref(), Some("yes"));
        assert_eq!(package_name("[dependencies]\nname = \"x\"\n"), None);
    }

    #[test]
    fn module_docs_rules() {
        assert_eq!(module_doc_problem("//! Does things.\nfn f() {}\n", false), None);
        assert_eq!(module_doc_problem("//! Crate.\n//!\n//! More.\n", true), None);
        assert!(module_doc_problem("//!\n//! Late text.\n", false).is_some());
        assert!(module_doc_problem("/// Item doc.\nfn f() {}\n", false).is_some());
        assert!(module_doc_problem("\n//! Not first.\n", false).is_some());
        assert!(module_doc_problem("", true).unwrap().contains("crate root"));
    }

    #[test]
    fn cargo_tree_output_is_split_per_root() {
        let out = "0dedup-core v0.1.0 (/w/crates/dedup-core)\n1serde v1.0.0\n2serde_derive v1.0.0 (proc-macro)\n\n\
                   0dedup-embed v0.1.0 (/w/crates/dedup-embed)\n1dedup-core v0.1.0 (/w/crates/dedup-core)\n2serde v1.0.0\n1serde v1.0.0 (*)\n";
        let trees = parse_cargo_tree(out).unwrap();
        assert_eq!(trees.len(), 2);
        assert_eq!(trees["dedup-core"].get("serde_derive"), Some(&2));
        assert_eq!(trees["dedup-embed"].get("serde"), Some(&1), "smallest depth wins");
        assert!(!trees["dedup-core"].contains_key("dedup-core"));
        assert!(parse_cargo_tree("serde v1\n").is_err());
    }

    #[test]
    fn dependency_rules_catch_violations() {
        let internal: BTreeSet<&str> =
            ["dedup-core", "dedup-embed", "dedup-store", "dedup-llm", "memdedup-cli", "xtask"].into();
        let tree = |deps: &[(&str, usize)]| -> Tree { deps.iter().map(|(n, d)| ((*n).to_owned(), *d)).collect() };
        let core = dependency_failures("dedup-core", &tree(&[("serde", 1), ("tokio", 3)]), &internal);
        assert_eq!(core.len(), 1);
        assert!(core[0].rule.contains("`tokio`"), "{}", core[0]);
        let embed = tree(&[("dedup-core", 1), ("dedup-store", 2)]);
        assert_eq!(dependency_failures("dedup-embed", &embed, &internal).len(), 1);
        let store = tree(&[("dedup-core", 1), ("dedup-embed", 1)]);
        assert_eq!(dependency_failures("dedup-store", &store, &internal).len(), 1);
        let llm = tree(&[("dedup-core", 1), ("reqwest", 1), ("dedup-embed", 1), ("dedup-store", 2)]);
        assert_eq!(dependency_failures("dedup-llm", &llm, &internal).len(), 2);
        assert!(dependency_failures("dedup-llm", &tree(&[("dedup-core", 1), ("axum", 1)]), &internal).is_empty());
        let light_xtask = tree(&[("dedup-embed", 1), ("dedup-core", 2), ("anyhow", 1)]);
        assert!(dependency_failures("xtask", &light_xtask, &internal).is_empty());
        let heavy_xtask = tree(&[("dedup-embed", 1), ("tokio", 2), ("dedup-store", 1)]);
        let rules: Vec<String> =
            dependency_failures("xtask", &heavy_xtask, &internal).into_iter().map(|f| f.rule).collect();
        assert_eq!(rules.len(), 2, "{rules:?}");
        assert!(rules.iter().any(|r| r.contains("`tokio`") && r.contains("quick to build")), "{rules:?}");
        assert!(rules.iter().any(|r| r.contains("`dedup-store`")), "{rules:?}");
        let lib_anyhow = tree(&[("anyhow", 1)]);
        assert_eq!(dependency_failures("memdedup", &lib_anyhow, &internal).len(), 1);
        assert!(dependency_failures("memdedup-cli", &lib_anyhow, &internal).is_empty());
        assert!(dependency_failures("xtask", &lib_anyhow, &internal).is_empty());
        let indirect_anyhow = tree(&[("fastembed", 1), ("anyhow", 2)]);
        assert!(dependency_failures("dedup-embed", &indirect_anyhow, &internal).is_empty());
    }

    #[test]
    fn error_type_count() {
        assert_eq!(count_pub_enum_error("#[non_exhaustive]\npub enum Error {\n}\n"), 1);
        assert_eq!(count_pub_enum_error("    pub enum Error<E> {}\n"), 1);
        assert_eq!(count_pub_enum_error("pub enum ErrorKind {}\n// pub enum Error\n"), 0);
        assert_eq!(count_pub_enum_error("pub(crate) enum Error {}\n"), 0);
        assert_eq!(count_pub_enum_error("pub enum Error {}\npub enum Error {}\n"), 2);
    }

    #[test]
    fn the_release_profile_must_be_lean_with_a_profiling_profile_beside_it() {
        let lean =
            "[profile.release]\ndebug = false\nstrip = \"debuginfo\"\n[profile.profiling]\ninherits = \"release\"\n";
        assert!(release_profile_failures(lean).is_empty());
        let fat = "[profile.release]\ndebug = \"line-tables-only\"\n";
        let rules: Vec<String> = release_profile_failures(fat).iter().map(ToString::to_string).collect();
        assert_eq!(rules.len(), 3, "{rules:?}");
        assert!(rules[0].contains("debug = false") && rules[1].contains("strip") && rules[2].contains("profiling"));
    }
}
