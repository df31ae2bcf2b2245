//! `memdedup search`: recall from one namespace or from every namespace that holds memories.

use std::collections::BTreeSet;

use crate::support::{memdedup, require_model, run_json, sqlite_db, text};

#[test]
fn search_recalls_across_namespaces_best_first_with_each_scope() {
    require_model();
    let (_dir, db) = sqlite_db();
    for (namespace, memory) in [
        ("decisions", "We decided to use PostgreSQL as the primary database for the billing service."),
        ("learnings", "Turns out the billing database needs a nightly vacuum."),
        ("preferences", "I prefer short commit messages in the imperative mood."),
    ] {
        memdedup().args(["--db", &db, "add", memory, "-n", namespace]).assert().success();
    }
    let found = run_json(&db, &["search", "Which database does billing use?"]);
    let searched: BTreeSet<&str> =
        found["searched"].as_array().expect("searched").iter().filter_map(|s| s["namespace"].as_str()).collect();
    assert_eq!(searched, BTreeSet::from(["decisions", "learnings", "preferences"]), "{found}");
    assert_eq!(found.get("scope"), None, "{found}");
    let hits = found["results"].as_array().expect("results");
    assert_eq!(hits.len(), 3, "{found}");
    assert!(hits.windows(2).all(|w| w[0]["score"].as_f64() >= w[1]["score"].as_f64()), "best first: {found}");
    assert_eq!(hits[2]["scope"]["namespace"], "preferences", "the unrelated one is last: {found}");
    // One namespace, and the limit.
    let one = run_json(&db, &["search", "billing database", "-n", "learnings", "--limit", "1"]);
    assert_eq!(one["scope"]["namespace"], "learnings", "{one}");
    assert_eq!(one["results"].as_array().map(Vec::len), Some(1), "{one}");
    let human = memdedup().args(["--db", &db, "search", "billing database", "--limit", "2"]).assert().success();
    let human = text(&human.get_output().stdout);
    assert!(human.starts_with("2 memories in 3 namespaces\n"), "{human}");
    assert!(human.contains("memdedup://global/"), "{human}");
    // Bad input is a usage error.
    memdedup().args(["--db", &db, "search", "  "]).assert().code(2);
    memdedup().args(["--db", &db, "search", "x", "-n", "bad ns"]).assert().code(2);
    memdedup().args(["--db", &db, "search", "x", "--limit", "0"]).assert().code(2);
}
