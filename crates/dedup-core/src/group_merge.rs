//! Seed 003 §4–§5 in memdedup's terms: which member of a judged duplicate group survives,
//! which text it keeps, and how the members' metadata combine.

use std::cmp::Reverse;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::specifics::{Specific, missing_specifics, sentence_count, specifics};

/// What [`choose_survivor`] and [`choose_text`] need to know of one member.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemberView<'a> {
    /// The memory's id.
    pub id: i64,
    /// Whether an earlier pass verified it.
    pub verified: bool,
    /// How often it was seen.
    pub occurrence_count: u64,
    /// Its text.
    pub text: &'a str,
}

/// The survivor of a group (seed 003 §4): verified first, then the highest occurrence
/// count, then the lowest id. Returns an index into `members`; `None` when it is empty.
pub fn choose_survivor(members: &[MemberView<'_>]) -> Option<usize> {
    (0..members.len()).max_by_key(|&i| {
        let m = &members[i];
        (m.verified, m.occurrence_count, Reverse(m.id))
    })
}

/// The limits a survivor's text is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextLimits {
    /// Most sentences (seed 003 §5: 1–2).
    pub max_sentences: usize,
    /// Most bytes (the store's content limit).
    pub max_bytes: usize,
}

/// Where the survivor's text comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "source")]
pub enum TextChoice {
    /// The judge's canonical text, which passed the specificity guard.
    Canonical,
    /// An existing member's text, because the canonical text failed the guard.
    Existing {
        /// The member whose text it is.
        from: i64,
        /// Why the canonical text was not used.
        rejected_because: String,
    },
}

/// Seed 003 §5's specificity guard: why `canonical` may not replace the group's texts, or
/// `None` when it may. It must be non-blank, within the limits, and keep every code span,
/// number, path and flag of every original.
pub fn canonical_text_problem(canonical: &str, originals: &[&str], limits: &TextLimits) -> Option<String> {
    let canonical = canonical.trim();
    if canonical.is_empty() {
        return Some("it is empty".to_owned());
    }
    if canonical.len() > limits.max_bytes {
        return Some(format!("it is {} bytes, over the limit of {}", canonical.len(), limits.max_bytes));
    }
    let sentences = sentence_count(canonical);
    if sentences > limits.max_sentences {
        return Some(format!("it has {sentences} sentences, over the limit of {}", limits.max_sentences));
    }
    let missing = missing_specifics(canonical, originals.iter().copied());
    if missing.is_empty() {
        return None;
    }
    let shown: Vec<String> = missing.iter().take(5).map(describe).collect();
    Some(format!("it drops {}", shown.join(", ")))
}

fn describe(specific: &Specific) -> String {
    match specific {
        Specific::Code(s) => format!("the code span `{s}`"),
        Specific::Number(s) => format!("the number {s}"),
        Specific::Path(s) => format!("the path {s}"),
        Specific::Flag(s) => format!("the flag {s}"),
    }
}

/// The deterministic best existing text of a group (seed 003 §5's fallback): the member
/// text within the byte limit with the most specifics, then the most code spans, then
/// within the sentence limit, then the longest, then the lowest id. Returns an index into
/// `members`; `None` when it is empty.
pub fn best_existing_text(members: &[MemberView<'_>], limits: &TextLimits) -> Option<usize> {
    (0..members.len()).max_by_key(|&i| {
        let m = &members[i];
        let found = specifics(m.text);
        let code = found.iter().filter(|s| matches!(s, Specific::Code(_))).count();
        (
            m.text.len() <= limits.max_bytes,
            found.len(),
            code,
            sentence_count(m.text) <= limits.max_sentences,
            m.text.chars().count(),
            Reverse(m.id),
        )
    })
}

/// The survivor's text: the judge's `canonical` text when it passes
/// [`canonical_text_problem`], else [`best_existing_text`]. `None` when `members` is
/// empty.
pub fn choose_text(canonical: &str, members: &[MemberView<'_>], limits: &TextLimits) -> Option<(String, TextChoice)> {
    let originals: Vec<&str> = members.iter().map(|m| m.text).collect();
    let best = best_existing_text(members, limits)?;
    Some(match canonical_text_problem(canonical, &originals, limits) {
        None => (canonical.trim().to_owned(), TextChoice::Canonical),
        Some(problem) => {
            (members[best].text.to_owned(), TextChoice::Existing { from: members[best].id, rejected_because: problem })
        }
    })
}

/// How one metadata key combines across a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyRule {
    /// A requirement that must all hold (AND-gated): keep what every member requires;
    /// drop the key when nothing is common.
    Intersection,
    /// Alternatives of which one must hold (OR-gated): keep every member's; drop the key
    /// when a member has none (it applies everywhere, so the merge must too).
    Union,
    /// Descriptive labels: every member's.
    Labels,
}

fn rule_of(key: &str) -> Option<KeyRule> {
    match key {
        "tags" | "mcp_servers" => Some(KeyRule::Intersection),
        "repos" | "os" | "paths" => Some(KeyRule::Union),
        "categories" => Some(KeyRule::Labels),
        _ => None,
    }
}

/// The survivor's metadata after a merge (seed 003 §4's prerequisite policy), at the top
/// level and inside a `prerequisites` object alike:
///
/// - `tags`, `mcp_servers` (AND-gated): intersection; dropped when empty.
/// - `repo` / `repos`, `os`, `paths` (OR-gated): `repo` is normalised to `repos`; union
///   when every member has the key, dropped when one has none (that member applied
///   everywhere, and the merged memory must apply wherever any member did).
/// - `categories`: union.
/// - any other key: the survivor's value; at the top level, when the survivor has none, the
///   first other member's (in the order given) that has one. Inside `prerequisites` an
///   unknown requirement only the absorbed members had is dropped rather than imposed.
///
/// List values keep first-seen order, survivor first; a string value counts as a list of
/// one. `survivor` is first in `members`' order of precedence; `absorbed` follow.
pub fn merge_metadata(survivor: &Map<String, Value>, absorbed: &[&Map<String, Value>]) -> Map<String, Value> {
    let all: Vec<&Map<String, Value>> = std::iter::once(survivor).chain(absorbed.iter().copied()).collect();
    let mut merged = merge_level(&all, true);
    let prerequisites: Vec<Option<&Map<String, Value>>> =
        all.iter().map(|m| m.get("prerequisites").and_then(Value::as_object)).collect();
    if prerequisites.iter().any(Option::is_some) {
        let empty = Map::new();
        let levels: Vec<&Map<String, Value>> = prerequisites.iter().map(|p| p.unwrap_or(&empty)).collect();
        let inner = merge_level(&levels, false);
        if inner.is_empty() {
            merged.remove("prerequisites");
        } else {
            merged.insert("prerequisites".to_owned(), Value::Object(inner));
        }
    }
    merged
}

/// Merges one level of metadata. `top` says whether unknown keys may come from absorbed
/// members.
fn merge_level(all: &[&Map<String, Value>], top: bool) -> Map<String, Value> {
    let normalised: Vec<Map<String, Value>> = all.iter().map(|m| normalise_repos(m)).collect();
    let mut keys: Vec<&String> = Vec::new();
    for map in &normalised {
        for key in map.keys() {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    let mut merged = Map::new();
    for key in keys {
        if top && key == "prerequisites" {
            if let Some(value) = normalised[0].get(key) {
                merged.insert(key.clone(), value.clone());
            }
            continue;
        }
        let values: Vec<Option<&Value>> = normalised.iter().map(|m| m.get(key)).collect();
        let value = match rule_of(key) {
            Some(KeyRule::Intersection) => {
                let lists: Vec<Vec<Value>> = values.iter().map(|v| v.map(as_list).unwrap_or_default()).collect();
                let common: Vec<Value> =
                    lists[0].iter().filter(|item| lists[1..].iter().all(|l| l.contains(item))).cloned().collect();
                (!common.is_empty()).then_some(Value::Array(common))
            }
            Some(KeyRule::Union) if values.iter().any(Option::is_none) => None,
            Some(KeyRule::Union | KeyRule::Labels) => {
                let mut union: Vec<Value> = Vec::new();
                for item in values.iter().flatten().flat_map(|v| as_list(v)) {
                    if !union.contains(&item) {
                        union.push(item);
                    }
                }
                (!union.is_empty()).then_some(Value::Array(union))
            }
            None if top => values.iter().flatten().next().map(|v| (*v).clone()),
            None => values[0].cloned(),
        };
        if let Some(value) = value {
            merged.insert(key.clone(), value);
        }
    }
    merged
}

/// `map` with `repo` folded into `repos`.
fn normalise_repos(map: &Map<String, Value>) -> Map<String, Value> {
    if !map.contains_key("repo") {
        return map.clone();
    }
    let mut repos: Vec<Value> = map.get("repos").map(as_list).unwrap_or_default();
    for item in map.get("repo").map(as_list).unwrap_or_default() {
        if !repos.contains(&item) {
            repos.push(item);
        }
    }
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "repo" if !map.contains_key("repos") => {
                out.insert("repos".to_owned(), Value::Array(repos.clone()));
            }
            "repo" => {}
            "repos" => {
                out.insert("repos".to_owned(), Value::Array(repos.clone()));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    out
}

fn as_list(value: &Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items.clone(),
        Value::Null => Vec::new(),
        other => vec![other.clone()],
    }
}

#[cfg(test)]
mod tests;
