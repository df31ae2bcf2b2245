//! The checks behind [`Playbook::from_json`](super::Playbook::from_json): document shape,
//! entry fields, duplicate keys and syntax errors, each naming the path it is about.

use serde_json::{Map, Value};

use super::Entry;
use crate::strict_json::StrictJsonError;
use crate::{Error, Result};

/// Checks the document shape described on [`Playbook`].
pub(super) fn validate(doc: &Map<String, Value>) -> Result<()> {
    let sections = match doc.get("sections") {
        Some(Value::Object(sections)) => sections,
        Some(other) => {
            return Err(invalid("sections", format!("must be an object, got {}", describe(other))));
        }
        None => return Err(invalid("sections", "missing required field")),
    };
    for (name, list) in sections {
        let Value::Array(entries) = list else {
            return Err(invalid(format!("sections.{name}"), format!("must be an array, got {}", describe(list))));
        };
        for (index, entry) in entries.iter().enumerate() {
            let path = format!("sections.{name}[{index}]");
            let Value::Object(fields) = entry else {
                return Err(invalid(path, format!("must be an object, got {}", describe(entry))));
            };
            check_string(fields, &path, "name")?;
            check_string(fields, &path, "text")?;
            check_counter(fields, &path, "helpful")?;
            check_counter(fields, &path, "harmful")?;
        }
    }
    Ok(())
}

/// Fails unless `fields[key]` is present and a string.
fn check_string(fields: &Map<String, Value>, entry_path: &str, key: &str) -> Result<()> {
    match fields.get(key) {
        Some(Value::String(_)) => Ok(()),
        Some(other) => {
            Err(invalid(format!("{entry_path}.{key}"), format!("must be a string, got {}", describe(other))))
        }
        None => Err(invalid(format!("{entry_path}.{key}"), "missing required field")),
    }
}

/// Fails if `fields[key]` is present and not an integer in `0..=u64::MAX`.
fn check_counter(fields: &Map<String, Value>, entry_path: &str, key: &str) -> Result<()> {
    match fields.get(key) {
        None => Ok(()),
        Some(value) if value.as_u64().is_some() => Ok(()),
        Some(other) => Err(invalid(
            format!("{entry_path}.{key}"),
            format!("must be a non-negative integer, got {}", describe(other)),
        )),
    }
}

/// The known fields of a validated entry.
pub(super) fn read_entry(entry: &Value) -> Entry {
    let string = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let counter = |key: &str| entry.get(key).and_then(Value::as_u64).unwrap_or(0);
    Entry { name: string("name"), text: string("text"), helpful: counter("helpful"), harmful: counter("harmful") }
}

/// A short description of a value for error messages: scalars as written, containers
/// by kind, long strings cut.
pub(super) fn describe(value: &Value) -> String {
    const MAX_CHARS: usize = 40;
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.chars().count() > MAX_CHARS => {
            let head: String = s.chars().take(MAX_CHARS).collect();
            format!("a string starting {head:?}")
        }
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

pub(super) fn invalid(path: impl Into<String>, message: impl Into<String>) -> Error {
    Error::InvalidPlaybook { path: path.into(), message: message.into() }
}

/// Parses `json`, refusing an object that has a key twice (the error names its path)
/// instead of keeping the last value silently.
pub(super) fn parse_without_duplicate_keys(json: &str) -> Result<Value> {
    match crate::strict_json::from_str(json) {
        Ok(value) => Ok(value),
        Err(StrictJsonError::DuplicateKey { path, key, line, column }) => {
            Err(invalid(path, format!("duplicate key {key:?} at line {line}, column {column}")))
        }
        Err(StrictJsonError::Malformed(err)) => Err(malformed(&err)),
    }
}

/// Maps a syntax error, dropping serde_json's " at line L column C" suffix from the
/// message since the position has fields of its own.
fn malformed(err: &serde_json::Error) -> Error {
    let (line, column) = (err.line(), err.column());
    let full = err.to_string();
    let suffix = format!(" at line {line} column {column}");
    let message = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
    Error::MalformedJson { line, column, message }
}
