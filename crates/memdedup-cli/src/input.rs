//! Reading input files: UTF-8 check, JSONL or JSON array of memories (number ids kept
//! exactly as written).

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result, bail};
use memdedup::crates::core::json_type;
use memdedup::{CollectionItem, MemoryId, Scope};
use serde_json::Value;

use crate::UsageError;

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

/// A collection as read: the items in input order, and each item's id as the JSON text
/// to print for it. A number id's text is its literal exactly as written, since a
/// `serde_json::Value` holds integers only up to 64 bits (a longer one would come back as
/// a float, and two distinct ids as one) and re-prints decimals; a string id's text is
/// the string serialised.
#[derive(Debug, PartialEq)]
pub(crate) struct Collection {
    pub items: Vec<CollectionItem>,
    /// `ids[i]` is the JSON text of `items[i].id`.
    pub ids: Vec<String>,
}

/// Parses memories from JSONL (one object per line, blank lines skipped) or, when the
/// first non-blank character is `[`, from one JSON array.
pub(crate) fn parse_collection(text: &str, name: &str) -> Result<Collection> {
    let text = without_bom(text);
    let mut collection = Collection { items: Vec::new(), ids: Vec::new() };
    if text.trim_start().starts_with('[') {
        let value = strict_json(text, name, None)?;
        let Value::Array(values) = value else { bail!("{name}: expected a JSON array") };
        let literals = RawJson::new(text).array_ids();
        for (i, value) in values.into_iter().enumerate() {
            let item = item_from_value(value, &format!("{name}: item [{i}]"))?;
            collection.push(item, literals.get(i).copied().flatten());
        }
    } else {
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value = strict_json(line, name, Some(n + 1))?;
            let item = item_from_value(value, &format!("{name}: line {}", n + 1))?;
            let literal = if item.id.is_number() { RawJson::new(line).object_id().flatten() } else { None };
            collection.push(item, literal);
        }
    }
    Ok(collection)
}

/// `json` parsed refusing a key written twice in one object (as playbooks are); errors
/// name `name` and the line (`line` for one line of JSONL, else the parser's).
fn strict_json(json: &str, name: &str, line: Option<usize>) -> Result<Value> {
    use memdedup::crates::core::strict_json::{self, StrictJsonError};
    strict_json::from_str(json).map_err(|error| match error {
        StrictJsonError::DuplicateKey { path, key, line: at, column } => anyhow::anyhow!(
            "{name}: duplicate key {key:?} at line {}, column {column} ({path}); each key may appear once",
            line.unwrap_or(at)
        ),
        StrictJsonError::Malformed(e) => anyhow::anyhow!(
            "{name}: malformed JSON at line {}, column {}: {}",
            line.unwrap_or(e.line()),
            e.column(),
            strip_position(&e)
        ),
    })
}

impl Collection {
    /// Adds `item`, printing its id as `literal` when that is a number's text.
    fn push(&mut self, item: CollectionItem, literal: Option<&str>) {
        let id = match (&item.id, literal) {
            (Value::Number(_), Some(literal)) => literal.to_owned(),
            (id, _) => id.to_string(),
        };
        self.items.push(item);
        self.ids.push(id);
    }
}

/// A cursor over JSON text that serde_json has already accepted, finding the raw text of
/// `id` members. It never panics: on anything unexpected it gives up (returns `None`),
/// and the caller prints the parsed value instead.
struct RawJson<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> RawJson<'a> {
    fn new(text: &'a str) -> Self {
        RawJson { text, pos: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Moves past the string starting at the cursor.
    fn skip_string(&mut self) -> Option<()> {
        self.pos += 1;
        loop {
            match self.peek()? {
                b'"' => break,
                b'\\' => self.pos += 2,
                _ => self.pos += 1,
            }
        }
        self.pos += 1;
        Some(())
    }

    /// Moves past the value starting at the cursor and returns its text.
    fn value(&mut self) -> Option<&'a str> {
        let start = self.pos;
        match self.peek()? {
            b'"' => self.skip_string()?,
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.skip_string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.checked_sub(1)?;
                            if depth == 0 {
                                self.pos += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    self.pos += 1;
                }
            }
            _ => {
                while !matches!(self.peek(), None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')) {
                    self.pos += 1;
                }
            }
        }
        self.text.get(start..self.pos)
    }

    /// The raw text of the (last, as the parser keeps it) `id` member of the object at
    /// the cursor: `Some(None)` when it has none, `None` when the text is not as expected.
    fn object_id(&mut self) -> Option<Option<&'a str>> {
        self.skip_whitespace();
        if self.peek()? != b'{' {
            return None;
        }
        self.pos += 1;
        let mut id = None;
        loop {
            self.skip_whitespace();
            match self.peek()? {
                b'}' => {
                    self.pos += 1;
                    return Some(id);
                }
                b',' => self.pos += 1,
                _ => {
                    let key = self.value()?;
                    self.skip_whitespace();
                    if self.peek()? != b':' {
                        return None;
                    }
                    self.pos += 1;
                    self.skip_whitespace();
                    let value = self.value()?;
                    if serde_json::from_str::<String>(key).is_ok_and(|key| key == "id") {
                        id = Some(value);
                    }
                }
            }
        }
    }

    /// For each element of the array at the cursor, the raw text of its `id` member;
    /// empty when the text is not as expected, so no id is ever paired with another
    /// element's literal.
    fn array_ids(&mut self) -> Vec<Option<&'a str>> {
        self.try_array_ids().unwrap_or_default()
    }

    fn try_array_ids(&mut self) -> Option<Vec<Option<&'a str>>> {
        let mut ids = Vec::new();
        self.skip_whitespace();
        if self.peek()? != b'[' {
            return None;
        }
        self.pos += 1;
        loop {
            self.skip_whitespace();
            match self.peek()? {
                b']' => return Some(ids),
                b',' => self.pos += 1,
                b'{' => ids.push(self.object_id()?),
                _ => {
                    self.value()?;
                    ids.push(None);
                }
            }
        }
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
        bail!("{place}: expected a JSON object with `id` and `text`, got {}", json_type(&value));
    };
    let id = match object.remove("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id,
        Some(other) => bail!("{place}: field `id` must be a string or a number, got {}", json_type(&other)),
        None => bail!("{place}: missing field `id`"),
    };
    let text = match object.remove("text") {
        Some(Value::String(text)) => text,
        Some(other) => bail!("{place}: field `text` must be a string, got {}", json_type(&other)),
        None => bail!("{place}: missing field `text`"),
    };
    let namespace = match object.remove("namespace") {
        None | Some(Value::Null) => None,
        Some(Value::String(ns)) => Some(ns),
        Some(other) => bail!("{place}: field `namespace` must be a string, got {}", json_type(&other)),
    };
    Ok(CollectionItem { id, text, namespace })
}

/// A memory id, or a URN `memdedup://{domain}/{namespace}/{id}` with its scope. A URN has
/// exactly those three parts, each valid (no `..`, empty or extra segments), and the id
/// is plain decimal digits.
pub(crate) fn parse_memory_id(raw: &str) -> Result<(MemoryId, Option<Scope>)> {
    memdedup::crates::store::parse_memory_ref(raw).map_err(|e| UsageError(e).into())
}

/// Reads a local judge's parameter file (JSON, as `cargo xtask fit-judge` writes it);
/// errors name the file.
pub(crate) fn read_judge_params(path: &Path) -> Result<memdedup::crates::core::LocalJudgeParams> {
    let name = display_name(path);
    let text = read_text(path)?;
    memdedup::crates::core::LocalJudgeParams::parse(without_bom(&text))
        .with_context(|| format!("{name}: cannot use it"))
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
        assert_eq!(a.items[0].id, serde_json::json!(1));
        assert_eq!(a.items[1].namespace.as_deref(), Some("n"));
        assert_eq!(a.ids, ["1", "\"x\""]);
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

    #[test]
    fn defect_11_number_ids_round_trip_exactly() {
        let jsonl = concat!(
            "{\"id\": 18446744073709551616, \"text\": \"a\"}\n",
            "{\"text\": \"b\", \"id\":18446744073709551617}\n",
            "{\"id\": -99999999999999999999, \"text\": \"c\", \"x\": {\"id\": 5}}\n",
            "{\"i\\u0064\": 1.50, \"text\": \"d\"}\n",
            "{\"id\": 2e3, \"text\": \"e\"}\n",
            "{\"id\": \"s\\u00e9\", \"text\": \"f\"}\n",
        );
        let parsed = parse_collection(jsonl, "f").unwrap();
        let expected =
            ["18446744073709551616", "18446744073709551617", "-99999999999999999999", "1.50", "2e3", "\"sé\""];
        assert_eq!(parsed.ids, expected);
        let array = format!("[\n{}\n]", jsonl.trim_end().replace('\n', ",\n  "));
        let from_array = parse_collection(&array, "f").unwrap();
        assert_eq!(from_array.ids, expected);
        let nested = "[{\"text\": \"a\", \"id\": 1E+2, \"m\": [\"]\", {\"id\": 3}]}, {\"id\": 12345678901234567890123, \"text\": \"b\"}]";
        assert_eq!(parse_collection(nested, "f").unwrap().ids, ["1E+2", "12345678901234567890123"]);
        // A repeated id is refused (defect 17), not read as its last value.
        let repeated = parse_collection("{\"id\": 1, \"id\": 2e3, \"text\": \"e\"}\n", "f").unwrap_err().to_string();
        assert!(repeated.contains("duplicate key \"id\" at line 1"), "{repeated}");
    }
}
