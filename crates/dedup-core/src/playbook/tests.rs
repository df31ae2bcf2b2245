//! Tests of [`Playbook`]: loading, validation errors and lossless round trips.

use super::*;
use crate::Error;
use proptest::prelude::*;
use serde_json::json;

/// A document already in `to_json_pretty` form: non-canonical file order, a custom
/// section, unknown keys everywhere, a `version` that is an object and a
/// `last_updated` that is a number.
const FIXTURE: &str = r#"{
  "schema": "ace/playbook",
  "version": {
    "major": 2,
    "tags": [
      "beta",
      null,
      1.5
    ]
  },
  "sections": {
    "OTHERS": [
      {
        "text": "remember to add type hints always",
        "name": "oth-001",
        "helpful": 3,
        "source": {
          "session": "abc",
          "turn": 7
        }
      }
    ],
    "NOTES": [
      {
        "name": "note-001",
        "text": "the CI runs on Tuesdays",
        "tags": [
          "ci"
        ]
      },
      {
        "name": "note-002",
        "text": "ünïcödé and \"quotes\" survive",
        "harmful": 2
      }
    ],
    "PATTERNS & APPROACHES": [
      {
        "name": "pat-001",
        "text": "always add type hints",
        "helpful": 10,
        "harmful": 2,
        "created": "2024-01-01"
      },
      {
        "name": "pat-002",
        "text": "prefer composition over inheritance",
        "helpful": 0,
        "harmful": 0
      }
    ],
    "MISTAKES TO AVOID": []
  },
  "last_updated": 1717171717,
  "z_unknown": true
}
"#;

fn fixture() -> Playbook {
    match Playbook::parse(FIXTURE) {
        Ok(playbook) => playbook,
        Err(err) => panic!("fixture must parse: {err}"),
    }
}

fn keys(value: &Value) -> Vec<&str> {
    value.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default()
}

fn names(playbook: &Playbook) -> Vec<String> {
    playbook.entries().into_iter().map(|(_, e)| e.name).collect()
}

fn parse_err(json: &str) -> Error {
    match Playbook::parse(json) {
        Ok(playbook) => panic!("expected an error, parsed {playbook:?}"),
        Err(err) => err,
    }
}

fn assert_invalid(json: &str, path: &str, message: &str) {
    let err = parse_err(json);
    assert_eq!(err, Error::InvalidPlaybook { path: path.to_owned(), message: message.to_owned() });
    assert_eq!(err.to_string(), format!("invalid playbook at {path}: {message}"));
}

// --- round trip -------------------------------------------------------------------

#[test]
fn round_trip_is_byte_for_byte_for_pretty_input() {
    let playbook = fixture();
    let written = playbook.to_json_pretty();
    assert_eq!(written, FIXTURE);
    let reread = Playbook::parse(&written).unwrap();
    assert_eq!(reread, playbook);
    assert_eq!(reread.to_json_pretty(), FIXTURE);
}

#[test]
fn round_trip_keeps_unknown_fields_and_key_order() {
    let value = Playbook::parse(&fixture().to_json_pretty()).unwrap().to_value();
    assert_eq!(keys(&value), ["schema", "version", "sections", "last_updated", "z_unknown"]);
    assert_eq!(value["version"], json!({"major": 2, "tags": ["beta", null, 1.5]}));
    assert_eq!(value["last_updated"], json!(1717171717));
    assert_eq!(keys(&value["sections"]), ["OTHERS", "NOTES", "PATTERNS & APPROACHES", "MISTAKES TO AVOID"]);
    assert_eq!(keys(&value["sections"]["OTHERS"][0]), ["text", "name", "helpful", "source"]);
    assert_eq!(value["sections"]["OTHERS"][0]["source"], json!({"session": "abc", "turn": 7}));
    assert_eq!(value["sections"]["NOTES"][0]["tags"], json!(["ci"]));
}

#[test]
fn round_trip_of_compact_input_preserves_value() {
    let compact = r#"{"version":"1.0","sections":{"USER PREFERENCES":[{"name":"u","text":"x","extra":{"b":1,"a":2}}]},"last_updated":null}"#;
    let original: Value = serde_json::from_str(compact).unwrap();
    let written = Playbook::parse(compact).unwrap().to_json_pretty();
    assert!(written.ends_with("}\n"));
    assert!(written.starts_with("{\n  \"version\": \"1.0\",\n"));
    let reread = Playbook::parse(&written).unwrap();
    assert_eq!(reread.to_value(), original);
    assert_eq!(keys(&reread.to_value()["sections"]["USER PREFERENCES"][0]["extra"]), ["b", "a"]);
    assert_eq!(reread.to_json_pretty(), written);
}

#[test]
fn version_and_last_updated_are_optional_and_untyped() {
    for doc in [
        r#"{"sections": {}}"#,
        r#"{"version": [1, 2], "last_updated": {"at": 0}, "sections": {}}"#,
        r#"{"version": false, "last_updated": -3.25, "sections": {}}"#,
    ] {
        let playbook = Playbook::parse(doc).unwrap();
        let original: Value = serde_json::from_str(doc).unwrap();
        assert_eq!(playbook.to_value(), original);
    }
}

#[test]
fn from_value_and_to_value_agree() {
    let value = fixture().to_value();
    assert_eq!(Playbook::from_value(value.clone()).unwrap(), fixture());
    assert_eq!(Playbook::from_value(value).unwrap().to_value(), fixture().to_value());
}

// --- reading ------------------------------------------------------------------------

#[test]
fn entries_list_canonical_sections_first_then_others_in_file_order() {
    let playbook = fixture();
    let entries = playbook.entries();
    let order: Vec<String> = entries.iter().map(|(at, _)| at.to_string()).collect();
    assert_eq!(
        order,
        [
            "sections.PATTERNS & APPROACHES[0]",
            "sections.PATTERNS & APPROACHES[1]",
            "sections.OTHERS[0]",
            "sections.NOTES[0]",
            "sections.NOTES[1]",
        ]
    );
    assert_eq!(
        entries[0].1,
        Entry { name: "pat-001".to_owned(), text: "always add type hints".to_owned(), helpful: 10, harmful: 2 }
    );
}

#[test]
fn entries_order_follows_canonical_list_not_file_order() {
    let playbook = Playbook::parse(
        r#"{"sections": {
                "ZETA": [{"name": "z", "text": "z"}],
                "OTHERS": [{"name": "o", "text": "o"}],
                "PROJECT CONTEXT": [{"name": "c", "text": "c"}],
                "ALPHA": [{"name": "a", "text": "a"}],
                "USER PREFERENCES": [{"name": "u1", "text": "u"}, {"name": "u2", "text": "u"}],
                "MISTAKES TO AVOID": [{"name": "m", "text": "m"}],
                "PATTERNS & APPROACHES": [{"name": "p", "text": "p"}]
            }}"#,
    )
    .unwrap();
    assert_eq!(names(&playbook), ["p", "m", "u1", "u2", "c", "o", "z", "a"]);
    assert_eq!(playbook.non_canonical_sections(), ["ZETA", "ALPHA"]);
}

#[test]
fn section_names_are_case_sensitive() {
    let playbook = Playbook::parse(r#"{"sections": {"others": [{"name": "o", "text": "o"}]}}"#).unwrap();
    assert_eq!(playbook.non_canonical_sections(), ["others"]);
}

#[test]
fn absent_counters_read_as_zero() {
    let playbook = fixture();
    let note = playbook.get(&EntryRef::new("NOTES", 0)).unwrap();
    assert_eq!((note.helpful, note.harmful), (0, 0));
    let other = playbook.get(&EntryRef::new("OTHERS", 0)).unwrap();
    assert_eq!((other.helpful, other.harmful), (3, 0));
}

#[test]
fn counts_and_lookups() {
    let playbook = fixture();
    assert_eq!(playbook.len(), 5);
    assert!(!playbook.is_empty());
    assert_eq!(playbook.section_names(), ["OTHERS", "NOTES", "PATTERNS & APPROACHES", "MISTAKES TO AVOID"]);
    assert_eq!(playbook.non_canonical_sections(), ["NOTES"]);
    assert_eq!(playbook.section_len("NOTES"), Some(2));
    assert_eq!(playbook.section_len("MISTAKES TO AVOID"), Some(0));
    assert_eq!(playbook.section_len("USER PREFERENCES"), None);
    assert_eq!(
        playbook.get(&EntryRef::new("NOTES", 1)).map(|e| e.text),
        Some("ünïcödé and \"quotes\" survive".to_owned())
    );
    assert_eq!(playbook.get(&EntryRef::new("NOTES", 2)), None);
    assert_eq!(playbook.get(&EntryRef::new("MISSING", 0)), None);
}

#[test]
fn empty_sections_make_an_empty_playbook() {
    let playbook = Playbook::parse(r#"{"sections": {"OTHERS": [], "PROJECT CONTEXT": []}}"#).unwrap();
    assert!(playbook.is_empty());
    assert_eq!(playbook.len(), 0);
    assert!(playbook.entries().is_empty());
    assert_eq!(playbook.section_names(), ["OTHERS", "PROJECT CONTEXT"]);
}

#[test]
fn counters_accept_the_full_u64_range() {
    let playbook = Playbook::parse(
        r#"{"sections": {"OTHERS": [{"name": "o", "text": "t", "helpful": 18446744073709551615, "harmful": 0}]}}"#,
    )
    .unwrap();
    assert_eq!(playbook.entries()[0].1.helpful, u64::MAX);
}

#[test]
fn entry_ref_displays_as_its_path() {
    assert_eq!(EntryRef::new("PATTERNS & APPROACHES", 3).to_string(), "sections.PATTERNS & APPROACHES[3]");
}

// --- errors -------------------------------------------------------------------------

#[test]
fn error_top_level_not_an_object() {
    assert_invalid("[]", "$", "must be an object, got an array");
    assert_invalid("\"playbook\"", "$", "must be an object, got \"playbook\"");
}

#[test]
fn error_missing_sections() {
    assert_invalid(r#"{"version": 1}"#, "sections", "missing required field");
}

#[test]
fn error_sections_not_an_object() {
    assert_invalid(r#"{"sections": []}"#, "sections", "must be an object, got an array");
    assert_invalid(r#"{"sections": null}"#, "sections", "must be an object, got null");
}

#[test]
fn error_section_not_an_array() {
    assert_invalid(
        r#"{"sections": {"PATTERNS & APPROACHES": {"name": "p"}}}"#,
        "sections.PATTERNS & APPROACHES",
        "must be an array, got an object",
    );
}

#[test]
fn error_entry_not_an_object() {
    assert_invalid(
        r#"{"sections": {"OTHERS": [{"name": "o", "text": "t"}, "just text"]}}"#,
        "sections.OTHERS[1]",
        "must be an object, got \"just text\"",
    );
}

#[test]
fn error_missing_text() {
    assert_invalid(
        r#"{"sections": {"OTHERS": [
                {"name": "o0", "text": "t"},
                {"name": "o1", "text": "t"},
                {"name": "o2", "text": "t"},
                {"name": "o3"}
            ]}}"#,
        "sections.OTHERS[3].text",
        "missing required field",
    );
}

#[test]
fn error_missing_name() {
    assert_invalid(r#"{"sections": {"OTHERS": [{"text": "t"}]}}"#, "sections.OTHERS[0].name", "missing required field");
}

#[test]
fn error_name_not_a_string() {
    assert_invalid(
        r#"{"sections": {"OTHERS": [{"name": 42, "text": "t"}]}}"#,
        "sections.OTHERS[0].name",
        "must be a string, got 42",
    );
}

#[test]
fn error_text_not_a_string_is_described_briefly() {
    assert_invalid(
        r#"{"sections": {"OTHERS": [{"name": "o", "text": ["a", "b"]}]}}"#,
        "sections.OTHERS[0].text",
        "must be a string, got an array",
    );
}

#[test]
fn error_negative_helpful() {
    assert_invalid(
        r#"{"sections": {"PATTERNS & APPROACHES": [{"name": "p", "text": "t", "helpful": -1}]}}"#,
        "sections.PATTERNS & APPROACHES[0].helpful",
        "must be a non-negative integer, got -1",
    );
}

#[test]
fn error_float_harmful() {
    assert_invalid(
        r#"{"sections": {"OTHERS": [{"name": "o", "text": "t", "harmful": 1.5}]}}"#,
        "sections.OTHERS[0].harmful",
        "must be a non-negative integer, got 1.5",
    );
    assert_invalid(
        r#"{"sections": {"OTHERS": [{"name": "o", "text": "t", "harmful": 2.0}]}}"#,
        "sections.OTHERS[0].harmful",
        "must be a non-negative integer, got 2.0",
    );
}

#[test]
fn error_counter_of_other_types() {
    assert_invalid(
        r#"{"sections": {"OTHERS": [{"name": "o", "text": "t", "helpful": "3"}]}}"#,
        "sections.OTHERS[0].helpful",
        "must be a non-negative integer, got \"3\"",
    );
    assert_invalid(
        r#"{"sections": {"OTHERS": [{"name": "o", "text": "t", "helpful": null}]}}"#,
        "sections.OTHERS[0].helpful",
        "must be a non-negative integer, got null",
    );
    assert_invalid(
        r#"{"sections": {"OTHERS": [{"name": "o", "text": "t", "helpful": 18446744073709551616}]}}"#,
        "sections.OTHERS[0].helpful",
        "must be a non-negative integer, got 1.8446744073709552e+19",
    );
}

#[test]
fn error_long_strings_are_cut_in_messages() {
    let long = "x".repeat(100);
    let err = parse_err(&format!(r#"{{"sections": {{"OTHERS": ["{long}"]}}}}"#));
    assert_eq!(
        err.to_string(),
        format!(
            "invalid playbook at sections.OTHERS[0]: must be an object, got a string starting \"{}\"",
            "x".repeat(40)
        )
    );
}

#[test]
fn error_first_problem_in_file_order_is_reported() {
    assert_invalid(
        r#"{"sections": {"NOTES": [{"name": 1}], "OTHERS": 7}}"#,
        "sections.NOTES[0].name",
        "must be a string, got 1",
    );
}

#[test]
fn error_malformed_json_has_line_and_column() {
    let err = parse_err("{\n  \"sections\": {\n    \"OTHERS\": [,]\n  }\n}");
    assert_eq!(err, Error::MalformedJson { line: 3, column: 16, message: "expected value".to_owned() });
    assert_eq!(err.to_string(), "malformed JSON at line 3, column 16: expected value");
}

#[test]
fn error_truncated_and_trailing_input() {
    assert_eq!(
        parse_err("{\"sections\": {}"),
        Error::MalformedJson { line: 1, column: 15, message: "EOF while parsing an object".to_owned() }
    );
    assert_eq!(
        parse_err("{\"sections\": {}} x"),
        Error::MalformedJson { line: 1, column: 18, message: "trailing characters".to_owned() }
    );
}

#[test]
fn defect_4_duplicate_keys_are_an_error_naming_key_and_line() {
    let sections = "{\"sections\": {\n  \"OTHERS\": [{\"name\": \"keep-me\", \"text\": \"a\"}],\n  \"OTHERS\": []\n}}";
    assert_invalid(sections, "sections.OTHERS", "duplicate key \"OTHERS\" at line 3, column 10");
    let top = "{\"sections\": {},\n\"version\": 1, \"sections\": {}}";
    assert_invalid(top, "sections", "duplicate key \"sections\" at line 2, column 24");
    let entry = "{\"sections\": {\"OTHERS\": [\n {\"name\": \"a\", \"text\": \"a\"},\n {\"name\": \"b\", \"text\": \"b\", \"text\": \"c\"}]}}";
    assert_invalid(entry, "sections.OTHERS[1].text", "duplicate key \"text\" at line 3, column 34");
    let nested = "{\"sections\": {}, \"meta\": {\"list\": [{}, {\"x\": 1, \"x\": 2}]}}";
    assert_invalid(nested, "meta.list[1].x", "duplicate key \"x\" at line 1, column 51");
    // The same key in different objects is fine, and syntax errors stay syntax errors.
    assert!(
        Playbook::parse(
            "{\"sections\": {\"A\": [{\"name\": \"n\", \"text\": \"t\"}], \"B\": [{\"name\": \"n\", \"text\": \"t\"}]}}"
        )
        .is_ok()
    );
    assert!(matches!(
        parse_err("{\"sections\": {}, \"sections\""),
        Error::MalformedJson { .. } | Error::InvalidPlaybook { .. }
    ));
    assert!(matches!(parse_err("{\"sections\": {} x"), Error::MalformedJson { .. }));
}

#[test]
fn error_from_value_top_level() {
    assert_eq!(
        Playbook::from_value(json!(3)),
        Err(Error::InvalidPlaybook { path: "$".to_owned(), message: "must be an object, got 3".to_owned() })
    );
}

// --- apply_merges -------------------------------------------------------------------

#[test]
fn apply_merges_updates_counters_and_removes_several_in_one_section() {
    let mut playbook = Playbook::parse(
        r#"{"version": "1", "sections": {
                "OTHERS": [
                    {"name": "o0", "text": "t"},
                    {"name": "o1", "text": "t"},
                    {"name": "o2", "text": "t", "note": "kept"},
                    {"name": "o3", "text": "t"},
                    {"name": "o4", "text": "t"}
                ],
                "PATTERNS & APPROACHES": [
                    {"helpful": 1, "name": "p0", "text": "t", "harmful": 0, "z": 1}
                ]
            }, "last_updated": "today"}"#,
    )
    .unwrap();
    playbook
        .apply_merges(
            &[(EntryRef::new("PATTERNS & APPROACHES", 0), 9, 4), (EntryRef::new("OTHERS", 2), 7, 1)],
            &[EntryRef::new("OTHERS", 1), EntryRef::new("OTHERS", 4), EntryRef::new("OTHERS", 3)],
        )
        .unwrap();

    assert_eq!(names(&playbook), ["p0", "o0", "o2"]);
    let value = playbook.to_value();
    // Present counters keep their position; absent ones are appended.
    assert_eq!(keys(&value["sections"]["PATTERNS & APPROACHES"][0]), ["helpful", "name", "text", "harmful", "z"]);
    assert_eq!(
        value["sections"]["PATTERNS & APPROACHES"][0],
        json!({"helpful": 9, "name": "p0", "text": "t", "harmful": 4, "z": 1})
    );
    assert_eq!(keys(&value["sections"]["OTHERS"][1]), ["name", "text", "note", "helpful", "harmful"]);
    assert_eq!(
        playbook.get(&EntryRef::new("OTHERS", 1)),
        Some(Entry { name: "o2".to_owned(), text: "t".to_owned(), helpful: 7, harmful: 1 })
    );
    assert_eq!(keys(&value), ["version", "sections", "last_updated"]);
}

#[test]
fn scn_dedup_006_01_cross_section_merge_applied() {
    let mut playbook = Playbook::parse(
        r#"{"version": "1.0", "last_updated": "2024-01-01", "sections": {
                "PATTERNS & APPROACHES": [{"name": "pat-001", "text": "always add type hints", "helpful": 10, "harmful": 2}],
                "OTHERS": [{"name": "oth-001", "text": "remember to add type hints always", "helpful": 3, "harmful": 0}]
            }}"#,
    )
    .unwrap();
    playbook
        .apply_merges(&[(EntryRef::new("PATTERNS & APPROACHES", 0), 13, 2)], &[EntryRef::new("OTHERS", 0)])
        .unwrap();
    assert_eq!(
        playbook.entries(),
        [(
            EntryRef::new("PATTERNS & APPROACHES", 0),
            Entry { name: "pat-001".to_owned(), text: "always add type hints".to_owned(), helpful: 13, harmful: 2 }
        )]
    );
    assert_eq!(playbook.section_len("OTHERS"), Some(0));
}

#[test]
fn inv_dedup_003_apply_merges_keeps_every_section() {
    let mut playbook = fixture();
    let before = playbook.section_names();
    let all: Vec<EntryRef> = playbook.entries().into_iter().map(|(at, _)| at).collect();
    playbook.apply_merges(&[], &all).unwrap();
    assert!(playbook.is_empty());
    assert_eq!(playbook.section_names(), before);
}

#[test]
fn inv_dedup_005_apply_merges_keeps_top_level_untouched() {
    let mut playbook = fixture();
    let before = playbook.to_value();
    playbook.apply_merges(&[(EntryRef::new("NOTES", 0), 1, 1)], &[EntryRef::new("NOTES", 1)]).unwrap();
    let after = playbook.to_value();
    assert_eq!(keys(&after), keys(&before));
    for key in ["schema", "version", "last_updated", "z_unknown"] {
        assert_eq!(after[key], before[key]);
    }
}

#[test]
fn apply_merges_with_nothing_to_do_changes_nothing() {
    let mut playbook = fixture();
    playbook.apply_merges(&[], &[]).unwrap();
    assert_eq!(playbook.to_json_pretty(), FIXTURE);
}

/// Asserts that `apply_merges` fails with `path: message` and leaves the fixture as is.
fn assert_merge_rejected(updates: &[(EntryRef, u64, u64)], removals: &[EntryRef], path: &str, message: &str) {
    let mut playbook = fixture();
    let err = playbook.apply_merges(updates, removals).unwrap_err();
    assert_eq!(err, Error::InvalidPlaybook { path: path.to_owned(), message: message.to_owned() });
    assert_eq!(playbook, fixture(), "document changed after {err}");
    assert_eq!(playbook.to_json_pretty(), FIXTURE);
}

#[test]
fn apply_merges_is_all_or_nothing() {
    // Each case pairs a valid update and removal with one bad ref, listed last so the
    // valid ones would already have been applied by a non-atomic implementation.
    let update = (EntryRef::new("PATTERNS & APPROACHES", 0), 99, 99);
    let removal = EntryRef::new("NOTES", 0);
    assert_merge_rejected(
        std::slice::from_ref(&update),
        &[removal.clone(), EntryRef::new("NOTES", 2)],
        "sections.NOTES[2]",
        "index out of range: the section has 2 entries",
    );
    assert_merge_rejected(
        std::slice::from_ref(&update),
        &[removal.clone(), EntryRef::new("OTHERS", usize::MAX)],
        "sections.OTHERS[18446744073709551615]",
        "index out of range: the section has 1 entries",
    );
    assert_merge_rejected(
        std::slice::from_ref(&update),
        &[removal.clone(), EntryRef::new("USER PREFERENCES", 0)],
        "sections.USER PREFERENCES",
        "no such section",
    );
    assert_merge_rejected(
        &[update.clone(), (EntryRef::new("MISTAKES TO AVOID", 0), 1, 1)],
        std::slice::from_ref(&removal),
        "sections.MISTAKES TO AVOID[0]",
        "index out of range: the section has 0 entries",
    );
    assert_merge_rejected(
        std::slice::from_ref(&update),
        &[removal.clone(), update.0.clone()],
        "sections.PATTERNS & APPROACHES[0]",
        "entry is both updated and removed",
    );
    assert_merge_rejected(
        std::slice::from_ref(&update),
        &[removal.clone(), removal.clone()],
        "sections.NOTES[0]",
        "entry is removed more than once",
    );
    assert_merge_rejected(
        &[update.clone(), update.clone()],
        &[removal],
        "sections.PATTERNS & APPROACHES[0]",
        "entry is updated more than once",
    );
}

proptest! {
    /// Removing any subset leaves exactly the other entries, in order, and keeps
    /// every section.
    #[test]
    fn removals_keep_exactly_the_rest_in_order(
        sizes in prop::collection::vec(0usize..6, 1..5),
        mask in prop::collection::vec(any::<bool>(), 30),
    ) {
        let sections: Map<String, Value> = sizes
            .iter()
            .enumerate()
            .map(|(s, &n)| {
                let list: Vec<Value> = (0..n)
                    .map(|i| json!({"name": format!("s{s}-{i}"), "text": "t"}))
                    .collect();
                (format!("S{s}"), Value::Array(list))
            })
            .collect();
        let mut playbook =
            Playbook::from_value(json!({"sections": Value::Object(sections)})).unwrap();
        let all = playbook.entries();
        let (removed, kept): (Vec<_>, Vec<_>) = all
            .iter()
            .enumerate()
            .partition(|(k, _)| mask[*k]);
        let removals: Vec<EntryRef> = removed.into_iter().map(|(_, (at, _))| at.clone()).collect();
        playbook.apply_merges(&[], &removals).unwrap();
        let expected: Vec<String> = kept.into_iter().map(|(_, (_, e))| e.name.clone()).collect();
        prop_assert_eq!(names(&playbook), expected);
        prop_assert_eq!(playbook.section_names().len(), sizes.len());
    }
}
