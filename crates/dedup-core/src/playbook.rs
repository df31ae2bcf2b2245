//! [`Playbook`]: the agent playbook document, validated on load and round-tripped losslessly.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::LazyLock;

use serde_json::{Map, Value};

use crate::Result;
use validate::{describe, invalid, parse_without_duplicate_keys, read_entry, validate};

/// The canonical section names, in the order seed 000 iterates them (REQ-DEDUP-001).
pub const CANONICAL_SECTIONS: [&str; 5] =
    ["PATTERNS & APPROACHES", "MISTAKES TO AVOID", "USER PREFERENCES", "PROJECT CONTEXT", "OTHERS"];

/// The agent playbook: `{"version", "last_updated", "sections": {NAME: [entries]}}`.
///
/// **Invariants**, established by [`Playbook::from_value`] and kept by every method:
/// - the document is a JSON object whose `sections` member is an object mapping each
///   section name to an array of entry objects;
/// - every entry has a string `name` and a string `text`; `helpful` and `harmful`, when
///   present, are integers in `0..=u64::MAX` (absent means 0);
/// - everything else (`version`, `last_updated` of any type, unknown top-level keys,
///   unknown entry fields) is kept unchanged, and every object keeps its key order, so
///   [`Playbook::to_json_pretty`] writes back what was read;
/// - [`Playbook::entries`] lists the canonical sections first, in [`CANONICAL_SECTIONS`]
///   order (those present), then the other sections in file order; entries within a
///   section are in list order;
/// - [`Playbook::apply_merges`] only rewrites counters and removes entries: it never
///   creates, renames or reorders sections, nor moves an entry between sections
///   (INV-DEDUP-003, INV-DEDUP-005).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Playbook {
    doc: Map<String, Value>,
}

/// The position of one entry: a section name and an index into that section's list.
///
/// Displays as `sections.NAME[i]`, the path used in error messages. The derived `Ord`
/// sorts by section name, then index; it is not [`Playbook::entries`] order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryRef {
    /// The section's name, exactly as it appears in the document.
    pub section: String,
    /// The 0-based index in the section's list.
    pub index: usize,
}

impl EntryRef {
    /// The entry at `index` of `section`.
    pub fn new(section: impl Into<String>, index: usize) -> Self {
        Self { section: section.into(), index }
    }
}

impl fmt::Display for EntryRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sections.{}[{}]", self.section, self.index)
    }
}

/// A read-only copy of one entry's known fields.
///
/// Counters absent from the document read as 0. Other fields of the entry are not shown
/// here but stay in the [`Playbook`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's identifier, e.g. `pat-001`.
    pub name: String,
    /// The key point itself; this is what gets embedded.
    pub text: String,
    /// How many times the entry was judged helpful.
    pub helpful: u64,
    /// How many times the entry was judged harmful.
    pub harmful: u64,
}

impl Playbook {
    /// Parses and validates a playbook document.
    ///
    /// Fails with [`Error::MalformedJson`](crate::Error::MalformedJson) when `json` is not well-formed JSON, and with
    /// [`Error::InvalidPlaybook`](crate::Error::InvalidPlaybook) when it does not have the playbook shape or when any
    /// object in it (the top level, `sections`, an entry, anything nested) has a key
    /// written twice: JSON parsers keep only one of the two, so a write-back would lose
    /// the other. That error names the key's path and the line and column of its second
    /// occurrence.
    pub fn parse(json: &str) -> Result<Self> {
        Self::from_value(parse_without_duplicate_keys(json)?)
    }

    /// Validates an already-parsed document and takes ownership of it.
    ///
    /// Fails with [`Error::InvalidPlaybook`](crate::Error::InvalidPlaybook) naming the first offending path.
    pub fn from_value(value: Value) -> Result<Self> {
        let Value::Object(doc) = value else {
            return Err(invalid("$", format!("must be an object, got {}", describe(&value))));
        };
        validate(&doc)?;
        Ok(Self { doc })
    }

    /// The whole document, including fields this crate does not interpret.
    pub fn to_value(&self) -> Value {
        Value::Object(self.doc.clone())
    }

    /// The whole document as JSON indented by two spaces, with a trailing newline.
    pub fn to_json_pretty(&self) -> String {
        let mut out = match serde_json::to_string_pretty(&self.doc) {
            Ok(text) => text,
            // A `Map<String, Value>` always serialises: its keys are strings and a `Value`
            // cannot hold a non-finite number.
            Err(err) => unreachable!("serialising a JSON map failed: {err}"),
        };
        out.push('\n');
        out
    }

    /// Every entry with its position: the canonical sections first, in
    /// [`CANONICAL_SECTIONS`] order (only those present), then every other section in file
    /// order; within a section, list order (REQ-DEDUP-001).
    pub fn entries(&self) -> Vec<(EntryRef, Entry)> {
        let mut out = Vec::with_capacity(self.len());
        for name in self.iteration_order() {
            for (index, entry) in self.section(name).iter().enumerate() {
                out.push((EntryRef::new(name, index), read_entry(entry)));
            }
        }
        out
    }

    /// Names of the sections not in [`CANONICAL_SECTIONS`], in file order.
    pub fn non_canonical_sections(&self) -> Vec<String> {
        self.sections().keys().filter(|name| !is_canonical(name)).cloned().collect()
    }

    /// Total number of entries across all sections.
    pub fn len(&self) -> usize {
        self.sections().values().map(|list| list.as_array().map_or(0, Vec::len)).sum()
    }

    /// Whether no section holds any entry (there may still be empty sections).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Names of all sections, in file order.
    pub fn section_names(&self) -> Vec<String> {
        self.sections().keys().cloned().collect()
    }

    /// Number of entries in section `name`, or `None` if there is no such section.
    pub fn section_len(&self, name: &str) -> Option<usize> {
        self.sections().get(name).and_then(Value::as_array).map(Vec::len)
    }

    /// The entry at `at`, or `None` if the section or index does not exist.
    pub fn get(&self, at: &EntryRef) -> Option<Entry> {
        self.section(&at.section).get(at.index).map(read_entry)
    }

    /// Sets the counters of the entries in `updates` to the given `(helpful, harmful)`,
    /// then removes the entries in `removals`.
    ///
    /// All refs address the document as it is before the call. A counter key that was
    /// absent is added at the end of its entry; one that was present keeps its position.
    /// Sections are never created, renamed or reordered, even when they become empty.
    ///
    /// Every ref is checked first, and nothing changes when one fails: an unknown
    /// section, an index out of range, an entry updated twice or removed twice, or an
    /// entry both updated and removed is an [`Error::InvalidPlaybook`](crate::Error::InvalidPlaybook) naming that ref.
    pub fn apply_merges(&mut self, updates: &[(EntryRef, u64, u64)], removals: &[EntryRef]) -> Result<()> {
        let mut updated = HashSet::with_capacity(updates.len());
        for (at, _, _) in updates {
            self.check_ref(at)?;
            if !updated.insert(at) {
                return Err(invalid(at.to_string(), "entry is updated more than once"));
            }
        }
        let mut removed: BTreeMap<&str, HashSet<usize>> = BTreeMap::new();
        for at in removals {
            self.check_ref(at)?;
            if updated.contains(at) {
                return Err(invalid(at.to_string(), "entry is both updated and removed"));
            }
            if !removed.entry(at.section.as_str()).or_default().insert(at.index) {
                return Err(invalid(at.to_string(), "entry is removed more than once"));
            }
        }

        // Everything is valid: the lookups below cannot miss.
        let Some(sections) = self.doc.get_mut("sections").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        for (at, helpful, harmful) in updates {
            let entry = sections
                .get_mut(&at.section)
                .and_then(Value::as_array_mut)
                .and_then(|list| list.get_mut(at.index))
                .and_then(Value::as_object_mut);
            if let Some(fields) = entry {
                // `insert` keeps the position of an existing key and appends a new one.
                fields.insert("helpful".to_owned(), Value::from(*helpful));
                fields.insert("harmful".to_owned(), Value::from(*harmful));
            }
        }
        for (name, indices) in removed {
            if let Some(list) = sections.get_mut(name).and_then(Value::as_array_mut) {
                // Indices refer to the list before any removal, so filter in one pass.
                let mut index = 0;
                list.retain(|_| {
                    let keep = !indices.contains(&index);
                    index += 1;
                    keep
                });
            }
        }
        Ok(())
    }

    /// The `sections` object (the type invariant guarantees there is one).
    fn sections(&self) -> &Map<String, Value> {
        static NO_SECTIONS: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);
        self.doc.get("sections").and_then(Value::as_object).unwrap_or(&NO_SECTIONS)
    }

    /// The entries of section `name`; empty if there is no such section.
    fn section(&self, name: &str) -> &[Value] {
        self.sections().get(name).and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// Section names in [`Playbook::entries`] order.
    fn iteration_order(&self) -> Vec<&str> {
        let sections = self.sections();
        CANONICAL_SECTIONS
            .iter()
            .copied()
            .filter(|name| sections.contains_key(*name))
            .chain(sections.keys().map(String::as_str).filter(|name| !is_canonical(name)))
            .collect()
    }

    /// Fails unless `at` names an existing section and an index inside it.
    fn check_ref(&self, at: &EntryRef) -> Result<()> {
        let Some(len) = self.section_len(&at.section) else {
            return Err(invalid(format!("sections.{}", at.section), "no such section"));
        };
        if at.index >= len {
            return Err(invalid(at.to_string(), format!("index out of range: the section has {len} entries")));
        }
        Ok(())
    }
}

fn is_canonical(name: &str) -> bool {
    CANONICAL_SECTIONS.contains(&name)
}

#[cfg(test)]
mod tests;
mod validate;
