//! Shape checks: no source file grows past [`MAX_LINES`], and no two top-level modules of a
//! crate import each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path};

use anyhow::{Context, Result};

use super::{Failure, Member, failure, rust_files};

/// The most lines a Rust file may have before it must be split by concept.
pub const MAX_LINES: usize = 800;

/// No `.rs` file under a member's `src/` or `tests/`, or under the workspace's `tests/`,
/// passes [`MAX_LINES`].
pub fn check_file_length(root: &Path, members: &[Member]) -> Result<Vec<Failure>> {
    let mut dirs: Vec<_> =
        members.iter().flat_map(|m| [root.join(&m.dir).join("src"), root.join(&m.dir).join("tests")]).collect();
    dirs.push(root.join("tests"));
    let mut failures = Vec::new();
    for dir in dirs {
        for path in rust_files(&dir)? {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            if let Some(rule) = length_problem(&text) {
                failures.push(failure(path.strip_prefix(root).unwrap_or(&path).display().to_string(), rule));
            }
        }
    }
    Ok(failures)
}

fn length_problem(text: &str) -> Option<String> {
    let lines = text.lines().count();
    (lines > MAX_LINES).then(|| format!("{lines} lines: split the file by concept to at most {MAX_LINES} lines"))
}

/// Within each member's `src/`, the graph of `crate::<module>` references between
/// top-level modules has no cycle. A top-level module is a file `src/<m>.rs` with the
/// files under `src/<m>/`; references inside one module, to the crate root, in comments,
/// and through `super::` are not counted.
pub fn check_import_cycles(root: &Path, members: &[Member]) -> Result<Vec<Failure>> {
    let mut failures = Vec::new();
    for member in members {
        let src = root.join(&member.dir).join("src");
        let mut files = Vec::new();
        for path in rust_files(&src)? {
            let rel = path.strip_prefix(&src).unwrap_or(&path).to_path_buf();
            let Some(module) = top_level_module(&rel) else { continue };
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            files.push((module, text));
        }
        let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
        let mut graph: Graph = modules.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
        for (module, text) in &files {
            for target in crate_references(text) {
                if target != *module && modules.contains(&target) {
                    graph.entry(module.clone()).or_default().insert(target);
                }
            }
        }
        for cycle in cycles(&graph) {
            failures.push(failure(
                format!("{} ({})", member.name, member.dir.join("src").display()),
                format!(
                    "modules {} import each other; move what they share into one of them or a \
                     new module both use",
                    cycle.join(" and ")
                ),
            ));
        }
    }
    Ok(failures)
}

/// `a` for `a.rs`, `a/mod.rs` and `a/b/c.rs`; none for the crate root and `bin/`.
fn top_level_module(rel: &Path) -> Option<String> {
    let first = match rel.components().next()? {
        Component::Normal(first) => first.to_str()?,
        _ => return None,
    };
    let is_file = rel.components().count() == 1;
    let name = if is_file { first.strip_suffix(".rs")? } else { first };
    (!matches!(name, "lib" | "main" | "bin")).then(|| name.to_owned())
}

/// The first path segment after each `crate::` outside comments, including each item of
/// a grouped `crate::{a::X, b}`.
fn crate_references(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let preceded_by_ident =
                rest[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            rest = &rest[at + "crate::".len()..];
            if preceded_by_ident {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or("");
                found.extend(inner.split(',').filter_map(|item| leading_ident(item.trim())));
            } else if let Some(ident) = leading_ident(rest) {
                found.insert(ident);
            }
        }
    }
    found
}

fn leading_ident(s: &str) -> Option<String> {
    let ident: String = s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!ident.is_empty()).then_some(ident)
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The strongly connected groups of two or more modules, each sorted.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    let reach: BTreeMap<&str, BTreeSet<&str>> = graph.keys().map(|m| (m.as_str(), reachable(graph, m))).collect();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::new();
    for (m, from_m) in &reach {
        if seen.contains(m) || !from_m.contains(m) {
            continue;
        }
        let group: BTreeSet<&str> =
            from_m.iter().copied().filter(|other| reach.get(other).is_some_and(|r| r.contains(m))).collect();
        seen.extend(&group);
        out.push(group.into_iter().map(str::to_owned).collect());
    }
    out
}

/// Every module reachable from `start` by one or more edges.
fn reachable<'g>(graph: &'g Graph, start: &str) -> BTreeSet<&'g str> {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<&str> = graph.get(start).into_iter().flatten().map(String::as_str).collect();
    while let Some(m) = stack.pop() {
        if seen.insert(m) {
            stack.extend(graph.get(m).into_iter().flatten().map(String::as_str));
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn files_stay_under_the_line_limit() {
        let root = crate::project_root();
        let members = super::super::members(&root).unwrap();
        let lines: Vec<String> = check_file_length(&root, &members).unwrap().iter().map(ToString::to_string).collect();
        assert!(lines.is_empty(), "tidy failures:\n{}", lines.join("\n"));
    }

    #[test]
    fn no_module_imports_form_a_cycle() {
        let root = crate::project_root();
        let members = super::super::members(&root).unwrap();
        let lines: Vec<String> =
            check_import_cycles(&root, &members).unwrap().iter().map(ToString::to_string).collect();
        assert!(lines.is_empty(), "tidy failures:\n{}", lines.join("\n"));
    }

    #[test]
    fn the_length_rule_counts_lines() {
        assert!(length_problem(&"x\n".repeat(MAX_LINES)).is_none());
        let rule = length_problem(&"x\n".repeat(MAX_LINES + 1)).unwrap();
        assert!(rule.starts_with("801 lines"), "{rule}");
    }

    #[test]
    fn references_are_read_from_code_only() {
        let text = "use crate::store::{Store, Tx};\nuse crate::{judge::Judge, run};\n\
                    // crate::commented::Out\nlet x = crate::config::load(); // crate::trailing\n\
                    let y = dedup_core::crate_like::x; let z = my_crate::other;\n";
        let refs: Vec<String> = crate_references(text).into_iter().collect();
        assert_eq!(refs, ["config", "judge", "run", "store"]);
    }

    #[test]
    fn top_level_modules_group_their_files() {
        let module = |p: &str| top_level_module(&PathBuf::from(p));
        assert_eq!(module("store.rs").as_deref(), Some("store"));
        assert_eq!(module("store/merges.rs").as_deref(), Some("store"));
        assert_eq!(module("store/a/b.rs").as_deref(), Some("store"));
        assert_eq!(module("lib.rs"), None);
        assert_eq!(module("main.rs"), None);
        assert_eq!(module("bin/tool.rs"), None);
    }

    #[test]
    fn cycles_are_found_whatever_their_length() {
        let graph = |edges: &[(&str, &str)]| -> Graph {
            let mut g = Graph::new();
            for (a, b) in edges {
                g.entry((*a).to_owned()).or_default().insert((*b).to_owned());
                g.entry((*b).to_owned()).or_default();
            }
            g
        };
        assert!(cycles(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
        assert_eq!(cycles(&graph(&[("a", "b"), ("b", "a"), ("c", "a")])), [["a", "b"]]);
        assert_eq!(
            cycles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("d", "e"), ("e", "d")])),
            [vec!["a", "b", "c"], vec!["d", "e"]]
        );
    }
}
