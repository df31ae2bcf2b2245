//! Reading input files: UTF-8 check, JSONL or JSON array of memories.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result, bail};
use memdedup::CollectionItem;
use serde_json::Value;

/// Largest input accepted, to fail clearly instead of exhausting memory.
const MAX_INPUT_BYTES: u64 = 1 << 30;

/// Display name of an input path (`<stdin>` for `-`).
pub(crate) fn display_name(path: &Path) -> String {
    if path == Path::new("-") { "<stdin>".into() } else { path.display().to_string() }
}

/// Reads a whole file (or stdin for `-`) as UTF-8 text, exactly as it is (a byte-order
/// mark stays; parsers skip it with [`without_bom`]).
pub(crate) fn read_text(path: &Path) -> Result<String> {
    let name = display_name(path);
    let mut bytes = Vec::new();
    if path == Path::new("-") {
        std::io::stdin().lock().take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes).context("cannot read stdin")?;
    } else {
        let file = std::fs::File::open(path).with_context(|| format!("cannot open {name}"))?;
        file.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes).with_context(|| format!("cannot read {name}"))?;
    }
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        bail!("{name} is larger than {} MiB", MAX_INPUT_BYTES >> 20);
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        anyhow::anyhow!("{name} is not valid UTF-8: invalid byte at offset {at} (line {line})")
    })
}

/// `text` without a leading UTF-8 byte-order mark.
pub(crate) fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Parses memories from JSONL (one object per line, blank lines skipped) or, when the
/// first non-blank character is `[`, from one JSON array.
pub(crate) fn parse_collection(text: &str, name: &str) -> Result<Vec<CollectionItem>> {
    let text = without_bom(text);
    if text.trim_start().starts_with('[') {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "{name}: malformed JSON at line {}, column {}: {}",
                e.line(),
                e.column(),
                strip_position(&e)
            )
        })?;
        let Value::Array(values) = value else { bail!("{name}: expected a JSON array") };
        values.into_iter().enumerate().map(|(i, v)| item_from_value(v, &format!("{name}: item [{i}]"))).collect()
    } else {
        let mut items = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(line).map_err(|e| {
                anyhow::anyhow!(
                    "{name}: malformed JSON at line {}, column {}: {}",
                    n + 1,
                    e.column(),
                    strip_position(&e)
                )
            })?;
            items.push(item_from_value(value, &format!("{name}: line {}", n + 1))?);
        }
        Ok(items)
    }
}

/// serde_json's message without its " at line L column C" suffix (we print our own).
fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

fn item_from_value(value: Value, place: &str) -> Result<CollectionItem> {
    let Value::Object(mut object) = value else {
        bail!("{place}: expected a JSON object with `id` and `text`, got {}", kind(&value));
    };
    let id = match object.remove("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id,
        Some(other) => bail!("{place}: field `id` must be a string or a number, got {}", kind(&other)),
        None => bail!("{place}: missing field `id`"),
    };
    let text = match object.remove("text") {
        Some(Value::String(text)) => text,
        Some(other) => bail!("{place}: field `text` must be a string, got {}", kind(&other)),
        None => bail!("{place}: missing field `text`"),
    };
    let namespace = match object.remove("namespace") {
        None | Some(Value::Null) => None,
        Some(Value::String(ns)) => Some(ns),
        Some(other) => bail!("{place}: field `namespace` must be a string, got {}", kind(&other)),
    };
    Ok(CollectionItem { id, text, namespace })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_and_array_forms_agree() {
        let jsonl =
            "{\"id\": 1, \"text\": \"a\"}\n\n{\"id\": \"x\", \"text\": \"b\", \"namespace\": \"n\", \"extra\": true}\n";
        let array = "[{\"id\": 1, \"text\": \"a\"}, {\"id\": \"x\", \"text\": \"b\", \"namespace\": \"n\"}]";
        let a = parse_collection(jsonl, "f").unwrap();
        assert_eq!(a, parse_collection(array, "f").unwrap());
        assert_eq!(a[0].id, serde_json::json!(1));
        assert_eq!(a[1].namespace.as_deref(), Some("n"));
    }

    #[test]
    fn errors_name_the_place() {
        let err = |t: &str| parse_collection(t, "f.jsonl").unwrap_err().to_string();
        assert_eq!(err("{\"id\": 1}\n"), "f.jsonl: line 1: missing field `text`");
        assert_eq!(
            err("{\"id\": 1, \"text\": \"a\"}\n{\"id\": 2, \"text\": 5}"),
            "f.jsonl: line 2: field `text` must be a string, got a number"
        );
        assert_eq!(
            err("{\"text\": \"a\", \"id\": [1]}"),
            "f.jsonl: line 1: field `id` must be a string or a number, got an array"
        );
        assert!(
            err("{\"id\": 1, \"text\": \"a\"}\n{\"id\": 2,, }")
                .starts_with("f.jsonl: malformed JSON at line 2, column 10")
        );
        assert_eq!(
            err("[{\"id\": 1, \"text\": \"a\"}, 3]"),
            "f.jsonl: item [1]: expected a JSON object with `id` and `text`, got a number"
        );
        assert!(err("[{\"id\": 1,\n \"text\": }]").starts_with("f.jsonl: malformed JSON at line 2, column 10"));
    }
}
