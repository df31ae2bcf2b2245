//! `memdedup scan --judge cosine` (seed behaviour) with the real model: the `--json` contract, input forms,
//! namespaces. The default judge's scan is tested in judge_learned.rs.

use std::io::Read;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::support::{EXAMPLE_MEMORIES, assert_close, json, key_set, keys, memdedup, require_model, temp_file, text};

/// The namespace an item is scanned in (`None` is the default namespace).
fn namespace(item: &Value) -> Option<&str> {
    item.get("namespace").and_then(Value::as_str)
}

/// Parses JSONL into its items.
fn jsonl_items(jsonl: &str) -> Vec<Value> {
    jsonl.lines().filter(|l| !l.trim().is_empty()).map(|l| json(l.as_bytes())).collect()
}

/// Runs `memdedup scan --json FILE args…` and returns the report.
fn scan_json(file: &std::path::Path, args: &[&str]) -> Value {
    let assert = memdedup().args(["scan", "--judge", "cosine"]).arg(file).arg("--json").args(args).assert().success();
    json(&assert.get_output().stdout)
}

/// Checks every rule of the documented `--json` shape against the items scanned.
#[track_caller]
fn check_report(report: &Value, items: &[Value], cross_namespace: bool) {
    assert_eq!(keys(report), key_set(&["model", "threshold", "items", "duplicates", "groups"]));
    assert!(report["model"].as_str().is_some_and(|m| !m.is_empty()), "model: {report}");
    let threshold = report["threshold"].as_f64().expect("threshold is a number");
    assert_eq!(report["items"].as_u64(), Some(items.len() as u64));
    let groups = report["groups"].as_array().expect("groups is a list");
    let position = |id: &Value| {
        items.iter().position(|item| &item["id"] == id).unwrap_or_else(|| panic!("{id} is not an input id"))
    };
    let mut seen = std::collections::HashSet::new();
    let mut duplicates = 0;
    for group in groups {
        assert_eq!(keys(group), key_set(&["survivor", "members", "weakest_link", "edges"]));
        let members = group["members"].as_array().expect("members is a list");
        assert!(members.len() >= 2, "a group has two or more members: {group}");
        assert_eq!(group["survivor"], members[0], "the survivor comes first");
        let places: Vec<usize> = members.iter().map(position).collect();
        assert!(places.windows(2).all(|w| w[0] < w[1]), "members are in input order: {group}");
        assert!(places.iter().all(|p| seen.insert(*p)), "an item is in one group at most");
        if !cross_namespace {
            let ns = namespace(&items[places[0]]);
            assert!(places.iter().all(|&p| namespace(&items[p]) == ns), "a group stays in one namespace: {group}");
        }
        duplicates += members.len() - 1;

        let edges = group["edges"].as_array().expect("edges is a list");
        assert_eq!(edges.len(), members.len() - 1, "edges form a tree: {group}");
        let mut component: Vec<usize> = (0..members.len()).collect();
        let root = |component: &[usize], mut i: usize| {
            while component[i] != i {
                i = component[i];
            }
            i
        };
        let mut weakest = f64::INFINITY;
        for edge in edges {
            let [a, b, score] = edge.as_array().expect("an edge is a list").as_slice() else {
                panic!("an edge is [id, id, score]: {edge}");
            };
            let score = score.as_f64().expect("an edge score is a number");
            assert!(score >= threshold - 1e-4 && score <= 1.0, "edge score {score} out of range");
            weakest = weakest.min(score);
            let index = |id: &Value| members.iter().position(|m| m == id).expect("edge ends are members");
            let (ra, rb) = (root(&component, index(a)), root(&component, index(b)));
            assert_ne!(ra, rb, "edges form a tree: {group}");
            component[ra] = rb;
        }
        assert_close(group["weakest_link"].as_f64().expect("weakest_link is a number"), weakest, 1e-9);
    }
    assert_eq!(report["duplicates"].as_u64(), Some(duplicates as u64));
}

/// Rounds every non-integer number to 2 decimals, so a snapshot does not depend on the
/// last digits of float arithmetic.
fn round_floats(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            let rounded = (n.as_f64().unwrap_or(f64::NAN) * 100.0).round() / 100.0;
            *value = json!(rounded);
        }
        Value::Array(values) => values.iter_mut().for_each(round_floats),
        Value::Object(map) => map.values_mut().for_each(round_floats),
        _ => {}
    }
}

#[test]
fn json_report_of_the_examples_has_the_documented_shape() {
    require_model();
    let items = jsonl_items(&std::fs::read_to_string(EXAMPLE_MEMORIES).unwrap());

    let report = scan_json(EXAMPLE_MEMORIES.as_ref(), &[]);

    check_report(&report, &items, false);
    assert_eq!(report["threshold"], 0.85);
    assert!(report["duplicates"].as_u64() > Some(0));
}

#[test]
fn lower_threshold_builds_larger_groups_of_the_same_shape() {
    require_model();
    let items = jsonl_items(&std::fs::read_to_string(EXAMPLE_MEMORIES).unwrap());

    let report = scan_json(EXAMPLE_MEMORIES.as_ref(), &["--threshold", "0.7"]);

    check_report(&report, &items, false);
    assert_eq!(report["threshold"], 0.7);
    let largest = report["groups"].as_array().unwrap().iter().map(|g| g["members"].as_array().unwrap().len()).max();
    assert!(largest >= Some(3), "expected a group of three or more at 0.7: {report}");
}

const MIXED_IDS: &str = r#"{"id": 7, "namespace": "n", "text": "Always run the database migrations before starting the API server.", "extra": {"deep": [1, 2]}}
{"id": "007", "namespace": "n", "text": "The user runs a marathon every spring."}
{"id": "seven", "namespace": "n", "text": "Always run the database migrations before starting the API server.", "score": 0.3}

{"id": 12345678901234567890, "namespace": "n", "text": "Always run the database migrations before starting the API server."}
{"id": -3.5, "namespace": "n", "text": "Always run the database migrations before starting the API server.", "tags": ["x"]}
"#;

#[test]
fn ids_are_echoed_unchanged_in_input_order() {
    require_model();
    let (_dir, file) = temp_file("mixed.jsonl", MIXED_IDS.as_bytes());

    let report = scan_json(&file, &[]);

    check_report(&report, &jsonl_items(MIXED_IDS), false);
    assert_eq!(report["items"], 5);
    assert_eq!(report["groups"].as_array().map(Vec::len), Some(1));
    assert_eq!(report["groups"][0]["survivor"], json!(7));
    assert_eq!(report["groups"][0]["members"], json!([7, "seven", 12345678901234567890_u64, -3.5]));
    assert_eq!(report["groups"][0]["weakest_link"], 1.0);
}

#[test]
fn dash_reads_standard_input() {
    require_model();

    let assert =
        memdedup().args(["scan", "--judge", "cosine", "-", "--json"]).write_stdin(MIXED_IDS).assert().success();

    let report = json(&assert.get_output().stdout);
    check_report(&report, &jsonl_items(MIXED_IDS), false);
    assert_eq!(report["groups"][0]["members"], json!([7, "seven", 12345678901234567890_u64, -3.5]));
}

#[test]
fn json_array_input_gives_the_same_report_as_jsonl() {
    require_model();
    let items = jsonl_items(MIXED_IDS);
    let (_dir, jsonl) = temp_file("items.jsonl", MIXED_IDS.as_bytes());
    let (_dir2, array) = temp_file("items.json", serde_json::to_string_pretty(&items).unwrap().as_bytes());

    let from_array = scan_json(&array, &[]);

    check_report(&from_array, &items, false);
    assert_eq!(from_array, scan_json(&jsonl, &[]));
}

const SAME_TEXT_THREE_NAMESPACES: &str = r#"{"id": 1, "namespace": "a", "text": "The integration tests need Docker running locally."}
{"id": 2, "namespace": "b", "text": "The integration tests need Docker running locally."}
{"id": 3, "text": "The integration tests need Docker running locally."}
"#;

#[test]
fn namespaces_stay_apart_unless_cross_namespace() {
    require_model();
    let items = jsonl_items(SAME_TEXT_THREE_NAMESPACES);
    let (_dir, file) = temp_file("ns.jsonl", SAME_TEXT_THREE_NAMESPACES.as_bytes());

    let apart = scan_json(&file, &[]);
    check_report(&apart, &items, false);
    assert_eq!(apart["groups"], json!([]));
    assert_eq!(apart["duplicates"], 0);

    let across = scan_json(&file, &["--cross-namespace"]);
    check_report(&across, &items, true);
    assert_eq!(across["groups"].as_array().map(Vec::len), Some(1));
    assert_eq!(across["groups"][0]["members"], json!([1, 2, 3]));
    assert_eq!(across["duplicates"], 2);
}

#[test]
fn human_output_mentions_the_counts_and_members() {
    require_model();
    let jsonl = r#"{"id": "a1", "namespace": "x", "text": "Purge the CDN after deploying the frontend."}
{"id": "a2", "namespace": "x", "text": "Purge the CDN after deploying the frontend."}
{"id": "b1", "namespace": "y", "text": "The user runs a marathon every spring."}
{"id": "b2", "namespace": "y", "text": "The user runs a marathon every spring."}
{"id": "c1", "namespace": "y", "text": "We chose Kafka as the event bus for order events."}
"#;
    let (_dir, file) = temp_file("items.jsonl", jsonl.as_bytes());

    let assert = memdedup().args(["scan", "--judge", "cosine"]).arg(&file).assert().success();

    let stdout = text(&assert.get_output().stdout);
    for expected in ["5 items", "2 duplicates", "2 groups", "a1", "a2", "b1", "b2", "[x]", "[y]"] {
        assert!(stdout.contains(expected), "expected {expected:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("c1"), "an item without duplicates is not listed:\n{stdout}");
}

#[test]
fn json_report_snapshot() {
    require_model();
    let jsonl = r#"{"id": "m1", "namespace": "lessons", "text": "always use type hints for function parameters"}
{"id": "m2", "namespace": "lessons", "text": "Prefer composition over inheritance when modelling domain objects."}
{"id": "m3", "namespace": "lessons", "text": "use type hints on all function parameters"}
{"id": "m4", "namespace": "preferences", "text": "The user prefers tabs over spaces for indentation."}
{"id": "m5", "namespace": "preferences", "text": "The user writes documentation in British English."}
{"id": "m6", "namespace": "preferences", "text": "User likes indenting with tabs rather than spaces."}
{"id": "m7", "namespace": "facts", "text": "The integration tests need Docker running locally."}
{"id": "m8", "namespace": "facts", "text": "The user runs a marathon every spring."}
{"id": "m9", "namespace": "facts", "text": "The integration tests need Docker running locally."}
"#;
    let (_dir, file) = temp_file("items.jsonl", jsonl.as_bytes());

    let mut report = scan_json(&file, &[]);

    check_report(&report, &jsonl_items(jsonl), false);
    round_floats(&mut report);
    insta::assert_json_snapshot!(report);
}

#[test]
fn closed_stdout_is_not_a_crash() {
    require_model();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_memdedup"))
        .args(["scan", EXAMPLE_MEMORIES])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memdedup starts");
    // Close the reading end before the report is printed, as `memdedup scan … | head -0` would.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child.stderr.take().expect("stderr is piped").read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();

    assert!(!stderr.contains("panicked"), "memdedup panicked on a closed stdout:\n{stderr}");
    assert_ne!(status.code(), Some(101), "exit code 101 is a panic");
}

#[test]
fn defect_11_ids_beyond_u64_are_echoed_exactly() {
    require_model();
    let memory = "Always run the database migrations before starting the API server.";
    let jsonl = format!(
        "{{\"id\": 18446744073709551616, \"text\": \"{memory}\"}}\n{{\"id\": 18446744073709551617, \"text\": \"{memory}\"}}\n\
         {{\"id\": 1.50, \"text\": \"{memory}\"}}\n"
    );
    let (_dir, file) = temp_file("big.jsonl", jsonl.as_bytes());
    for array in [false, true] {
        let input = if array { format!("[{}]", jsonl.trim_end().replace('\n', ",")) } else { jsonl.clone() };
        std::fs::write(&file, &input).unwrap();
        let assert = memdedup().args(["scan", "--judge", "cosine"]).arg(&file).arg("--json").assert().success();
        let stdout = text(&assert.get_output().stdout);
        assert!(
            stdout.contains("\"members\":[18446744073709551616,18446744073709551617,1.50]"),
            "two ids stay two, as written: {stdout}"
        );
        json(stdout.as_bytes());
        let human = memdedup().args(["scan", "--judge", "cosine"]).arg(&file).assert().success();
        let human = text(&human.get_output().stdout);
        assert!(human.contains("18446744073709551617  ") && !human.contains("e19"), "{human}");
    }
}
