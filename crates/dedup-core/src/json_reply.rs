//! Finding the JSON object in a language model's reply, which models like to wrap in
//! Markdown fences or explanations.

/// The first JSON object in `text`: the first `{…}`, balanced with respect to braces
/// outside JSON strings, that parses as JSON. `None` when there is none.
///
/// Tolerates what models wrap around their answer: ```` ```json ```` fences, prose before
/// and after, a second object afterwards (only the first is returned). Braces inside
/// strings, escaped quotes and nesting are handled; a candidate that is balanced but not
/// JSON (`{like this}` in prose) is skipped and the search goes on from the next `{`.
///
/// A `{` that is never closed ends the search with `None`: the reply was cut off (or is
/// not JSON), and an object nested inside the unfinished one must not pass for the answer.
///
/// The returned slice borrows from `text` and starts with `{` and ends with `}`. Each
/// candidate start costs a scan to its closing brace, so a pathological text made of
/// thousands of unclosed `{` takes quadratic time; model replies, bounded by their token
/// limit, are far from that.
pub fn extract_json_object(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(offset) = bytes[start..].iter().position(|&b| b == b'{') {
        let open = start + offset;
        let close = open + matching_brace(&bytes[open..])?;
        // Both ends are ASCII braces, so the slice falls on character boundaries.
        let candidate = &text[open..=close];
        if serde_json::from_str::<serde::de::IgnoredAny>(candidate).is_ok() {
            return Some(candidate);
        }
        start = open + 1;
    }
    None
}

/// The index of the `}` that closes the `{` at `bytes[0]`, skipping braces inside JSON
/// strings; `None` when the text ends first.
fn matching_brace(bytes: &[u8]) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (index, &byte) in bytes.iter().enumerate() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(index);
                }
            }
            _ => {}
        }
    }
    None
}

/// The JSON type of `value` with its article ("a string", "null"), for error messages.
pub fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn bare_object() {
        assert_eq!(extract_json_object(r#"{"a": 1}"#), Some(r#"{"a": 1}"#));
        assert_eq!(extract_json_object("  {}\n"), Some("{}"));
    }

    #[test]
    fn fenced_object() {
        let reply = "```json\n{\"facts\": [{\"content\": \"x\"}]}\n```";
        assert_eq!(extract_json_object(reply), Some("{\"facts\": [{\"content\": \"x\"}]}"));
        let plain_fence = "```\n{\"ok\": true}\n```\n";
        assert_eq!(extract_json_object(plain_fence), Some("{\"ok\": true}"));
    }

    #[test]
    fn prose_before_and_after() {
        let reply = "Sure! Here is the JSON you asked for:\n{\"groups\": []}\nLet me know if you need more.";
        assert_eq!(extract_json_object(reply), Some("{\"groups\": []}"));
    }

    #[test]
    fn braces_and_escaped_quotes_inside_strings() {
        let object = r#"{"text": "a } b { c \" } \\", "n": {"deep": "}}"}}"#;
        let reply = format!("prefix {object} suffix }}");
        assert_eq!(extract_json_object(&reply), Some(object));
    }

    #[test]
    fn nested_objects_return_the_outer_one() {
        let object = r#"{"a": {"b": {"c": [1, {"d": 2}]}}}"#;
        assert_eq!(extract_json_object(&format!("x {object} y")), Some(object));
    }

    #[test]
    fn two_objects_return_the_first() {
        assert_eq!(extract_json_object(r#"{"first": 1} and {"second": 2}"#), Some(r#"{"first": 1}"#));
    }

    #[test]
    fn balanced_non_json_is_skipped() {
        let reply = r#"Use {placeholders} like {this}, then: {"real": true}"#;
        assert_eq!(extract_json_object(reply), Some(r#"{"real": true}"#));
        // A non-JSON wrapper around an object: the inner object is found.
        assert_eq!(extract_json_object(r#"{note: {"x": 1}}"#), Some(r#"{"x": 1}"#));
    }

    #[test]
    fn truncated_or_absent_objects_give_none() {
        assert_eq!(extract_json_object(r#"{"facts": [{"content": "cut off"#), None);
        assert_eq!(extract_json_object(r#"```json\n{"a": {"b": 1}"#), None);
        assert_eq!(extract_json_object("no JSON here"), None);
        assert_eq!(extract_json_object(""), None);
        assert_eq!(extract_json_object("[1, 2, 3]"), None, "arrays are not objects");
        assert_eq!(extract_json_object("}{"), None);
        assert_eq!(extract_json_object(r#"{"groups": [{"ids": [1, 2]}, {"ids": [3"#), None, "no inner object");
        assert_eq!(extract_json_object(r#"{"a": 1,}"#), None, "trailing comma is not JSON");
    }

    #[test]
    fn unicode_around_and_inside() {
        let object = r#"{"note": "naïve café 🚀 {"}"#;
        let reply = format!("Voilà — 🚀 {object} ✓");
        assert_eq!(extract_json_object(&reply), Some(object));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[ -~{}\"\\\\é🚀]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z{}\"]{0,4}", inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    fn arb_object() -> impl Strategy<Value = Value> {
        proptest::collection::btree_map("[a-z{}\" ]{0,6}", arb_json(), 0..4)
            .prop_map(|map| Value::Object(map.into_iter().collect()))
    }

    proptest! {
        #[test]
        fn any_object_is_found_in_brace_free_prose(
            object in arb_object(),
            before in "[a-zA-Z0-9 .,:!\"'`\n]{0,40}",
            after in "[a-zA-Z0-9 .,:!\"'`\n{}]{0,40}",
            pretty in any::<bool>(),
            fenced in any::<bool>(),
        ) {
            let json = if pretty { serde_json::to_string_pretty(&object) } else { serde_json::to_string(&object) };
            let json = json.unwrap();
            let reply = if fenced { format!("{before}```json\n{json}\n```{after}") } else { format!("{before}{json}{after}") };
            let found = extract_json_object(&reply);
            prop_assert_eq!(found, Some(json.as_str()));
            prop_assert_eq!(serde_json::from_str::<Value>(found.unwrap()).unwrap(), object);
        }

        #[test]
        fn result_is_always_a_json_object_slice(text in "[ -~\n]{0,80}") {
            if let Some(found) = extract_json_object(&text) {
                prop_assert!(text.contains(found));
                prop_assert!(serde_json::from_str::<Value>(found).unwrap().is_object());
            }
        }

        #[test]
        fn any_proper_prefix_of_an_object_gives_none(object in arb_object(), cut in 0usize..1000) {
            let json = serde_json::to_string(&object).unwrap();
            let mut end = cut % json.len();
            while !json.is_char_boundary(end) {
                end -= 1;
            }
            prop_assert_eq!(extract_json_object(&json[..end]), None);
        }
    }
}
