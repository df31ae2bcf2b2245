//! [`from_str`]: JSON parsed like `serde_json::from_str::<Value>`, except that an object
//! with a key written twice is an error naming the key, its path and its position,
//! instead of the last value winning silently. Playbooks and `scan` input read JSON this
//! way.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why [`from_str`] refused its input.
#[derive(Debug)]
pub enum StrictJsonError {
    /// An object has `key` twice.
    DuplicateKey {
        /// Where, as `a.b[2].key` (the key itself last).
        path: String,
        /// The repeated key.
        key: String,
        /// The 1-based line of the second occurrence.
        line: usize,
        /// The 1-based column just after it.
        column: usize,
    },
    /// Not JSON, as serde_json says.
    Malformed(serde_json::Error),
}

impl fmt::Display for StrictJsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StrictJsonError::DuplicateKey { path, key, line, column } => {
                write!(f, "{path}: duplicate key {key:?} at line {line}, column {column}")
            }
            StrictJsonError::Malformed(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for StrictJsonError {}

/// Parses `json`, failing on the first object key written twice.
pub fn from_str(json: &str) -> Result<Value, StrictJsonError> {
    let duplicate = RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let parsed = StrictValue { duplicate: &duplicate }
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value));
    match (parsed, duplicate.into_inner()) {
        (Ok(value), _) => Ok(value),
        (Err(err), Some(mut reversed_path)) => {
            reversed_path.reverse();
            let key = match reversed_path.last() {
                Some(PathSegment::Key(key)) => key.clone(),
                _ => String::new(),
            };
            let mut path = String::new();
            for segment in &reversed_path {
                match segment {
                    PathSegment::Key(key) if path.is_empty() => path.push_str(key),
                    PathSegment::Key(key) => {
                        path.push('.');
                        path.push_str(key);
                    }
                    PathSegment::Index(index) => path.push_str(&format!("[{index}]")),
                }
            }
            Err(StrictJsonError::DuplicateKey { path, key, line: err.line(), column: err.column() })
        }
        (Err(err), None) => Err(StrictJsonError::Malformed(err)),
    }
}

/// One step of a JSON path.
enum PathSegment {
    Key(String),
    Index(usize),
}

/// A `DeserializeSeed` building a [`Value`] that refuses duplicate keys. On the first
/// one it stores the path to it, innermost segment first (each enclosing level adds its
/// segment as the error passes through it), and fails.
#[derive(Clone, Copy)]
struct StrictValue<'a> {
    duplicate: &'a RefCell<Option<Vec<PathSegment>>>,
}

impl StrictValue<'_> {
    /// Adds `segment` to the path of a duplicate found below it.
    fn on_duplicate_path(self, segment: impl FnOnce() -> PathSegment) {
        if let Some(path) = self.duplicate.borrow_mut().as_mut() {
            path.push(segment());
        }
    }
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> std::result::Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> std::result::Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> std::result::Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> std::result::Result<Value, E> {
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> std::result::Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> std::result::Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        loop {
            match seq.next_element_seed(self) {
                Ok(Some(item)) => items.push(item),
                Ok(None) => return Ok(Value::Array(items)),
                Err(err) => {
                    self.on_duplicate_path(|| PathSegment::Index(items.len()));
                    return Err(err);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> std::result::Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if object.contains_key(&key) {
                let message = format!("duplicate key {key:?}");
                *self.duplicate.borrow_mut() = Some(vec![PathSegment::Key(key)]);
                return Err(serde::de::Error::custom(message));
            }
            match access.next_value_seed(self) {
                Ok(value) => {
                    object.insert(key, value);
                }
                Err(err) => {
                    self.on_duplicate_path(|| PathSegment::Key(key));
                    return Err(err);
                }
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_named_with_its_path_and_position() {
        let err = from_str("{\"a\": [{\"id\": 1, \"id\": 2}]}").unwrap_err();
        let StrictJsonError::DuplicateKey { path, key, line, .. } = &err else { panic!("{err:?}") };
        assert_eq!((path.as_str(), key.as_str(), *line), ("a[0].id", "id", 1));
        assert!(err.to_string().starts_with("a[0].id: duplicate key \"id\" at line 1"), "{err}");
        assert!(matches!(from_str("{\"a\": }"), Err(StrictJsonError::Malformed(_))));
        assert_eq!(from_str("{\"a\": 1, \"b\": {\"a\": 2}}").unwrap(), serde_json::json!({"a": 1, "b": {"a": 2}}));
    }
}
