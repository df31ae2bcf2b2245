//! `memdedup dedup`, `merges` and `undo` with the real local model, against a fake LLM
//! judge served from the test process, on SQLite (and Postgres for the concurrency test).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command as StdCommand, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use dedup_llm::fake::{FakeLlm, FakeReply, FakeRequest};
use serde_json::{Value, json};

use crate::support::{
    json, memdedup, postgres_url, require_model, run_json, sqlite_db, temp_file, text, unique_namespace,
};

/// A cluster of paraphrases (seed 003) and the canonical text a correct judge proposes.
struct Cluster {
    canonical: &'static str,
    members: &'static [&'static str],
}

const DOCS: Cluster = Cluster {
    canonical: "Update the documentation whenever the code changes.",
    members: &[
        "Update the docs after every code change.",
        "After changing code, bring the documentation up to date.",
        "Keep documentation in sync by updating it whenever the code changes.",
    ],
};
const NO_COMPAT: Cluster = Cluster {
    canonical: "Do not add migration or compatibility code while a project is dev-only.",
    members: &[
        "Do not add migration or compatibility code for dev-only projects.",
        "Dev-only projects need no migration scripts or backward-compatibility shims.",
        "No migration or compat code is needed while a project is dev-only.",
    ],
};
const RENAME_DB: Cluster = Cluster {
    canonical: "When renaming terminology, also update the database content that uses the old terms.",
    members: &[
        "When renaming terminology, also update the stored database content, not just the code.",
        "Renaming a term means updating the existing rows in the database too.",
        "After a terminology rename, rewrite the database content to use the new names.",
    ],
};
const CLUSTERS: [&Cluster; 3] = [&DOCS, &NO_COMPAT, &RENAME_DB];
/// One more paraphrase of DOCS, whose canonical text the DOCS survivor holds after a run.
const LATE_DOCS: Cluster = Cluster {
    canonical: DOCS.canonical,
    members: &["Whenever you touch the code, remember to refresh the docs as well."],
};

/// Close to the clusters, but different rules: a correct judge never merges them.
const NEGATIVES: [&str; 2] = [
    "Do not update docs for internal refactors that change no behaviour.",
    "Update the changelog after every release.",
];

/// Far from everything else: below the candidate floor, so verified without a judge call.
const UNRELATED: &str = "The office cafeteria serves lunch between noon and two on weekdays.";

/// The reason the truthful judge gives for every group.
const REASON: &str = "Same rule, phrased differently.";

/// A fake LLM server with the runtime it runs on; the server stops first when dropped.
struct FakeJudge {
    server: FakeLlm,
    _runtime: tokio::runtime::Runtime,
}

impl FakeJudge {
    fn start(handler: impl Fn(&FakeRequest) -> FakeReply + Send + Sync + 'static) -> FakeJudge {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the fake judge");
        let server = {
            let _entered = runtime.enter();
            FakeLlm::start(Arc::new(handler))
        };
        FakeJudge { server, _runtime: runtime }
    }

    /// A judge that answers like a correct one: members of one cluster are duplicates,
    /// anything else duplicates nothing. Each answer waits `delay`, if any.
    fn truthful(clusters: &'static [&'static Cluster], delay: Option<Duration>) -> FakeJudge {
        FakeJudge::start(move |request| {
            let reply = FakeReply::text(truthful_answer(clusters, &request.user).to_string());
            match delay {
                Some(delay) => reply.delay(delay),
                None => reply,
            }
        })
    }

    fn url(&self) -> String {
        self.server.base_url()
    }

    /// The batch payloads the judge was sent.
    fn payloads(&self) -> Vec<String> {
        self.server.requests().into_iter().map(|r| r.user).collect()
    }
}

fn normalized(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

/// The cluster `text` belongs to (a member or the canonical text), if any.
fn cluster_of(clusters: &[&Cluster], text: &str) -> Option<usize> {
    let text = normalized(text);
    clusters
        .iter()
        .position(|c| normalized(c.canonical) == text || c.members.iter().any(|member| normalized(member) == text))
}

/// A correct judge's reply to a batch payload, following the mode's rules (seed 003 §3.1).
fn truthful_answer(clusters: &[&Cluster], payload: &str) -> Value {
    let batch: Value = serde_json::from_str(payload).expect("the user message is the batch payload");
    let bootstrap = batch["mode"] == "bootstrap";
    let memories = batch["memories"].as_array().expect("a batch lists its memories");
    let mut by_cluster: BTreeMap<usize, Vec<&Value>> = BTreeMap::new();
    for memory in memories {
        if let Some(cluster) = cluster_of(clusters, memory["text"].as_str().expect("a memory has a text")) {
            by_cluster.entry(cluster).or_default().push(memory);
        }
    }
    let mut groups = Vec::new();
    let mut grouped = BTreeSet::new();
    for (cluster, members) in by_cluster {
        let has_unverified = members.iter().any(|m| m["status"] == "unverified");
        if members.len() < 2 || (!bootstrap && !has_unverified) {
            continue;
        }
        let ids: BTreeSet<i64> = members.iter().map(|m| m["id"].as_i64().expect("an id")).collect();
        grouped.extend(ids.iter().copied());
        groups.push(json!({
            "ids": ids,
            "canonical_text": clusters[cluster].canonical,
            "confidence": 0.95,
            "reason": REASON,
        }));
    }
    groups.sort_by_key(|g| g["ids"][0].as_i64());
    let no_match: BTreeSet<i64> = memories
        .iter()
        .filter(|m| bootstrap || m["status"] == "unverified")
        .map(|m| m["id"].as_i64().expect("an id"))
        .filter(|id| !grouped.contains(id))
        .collect();
    json!({"groups": groups, "no_match_ids": no_match, "notes": []})
}

/// Runs `memdedup --db DB args…`, expecting success, and returns stdout.
fn run_text(db: &str, args: &[&str]) -> String {
    let assert = memdedup().args(["--db", db]).args(args).assert().success();
    text(&assert.get_output().stdout)
}

/// Adds `text` to `namespace` and returns its id; the text must be stored (checked by
/// cosine, so that paraphrases are stored for dedup to find).
fn add(db: &str, namespace: &str, text: &str) -> i64 {
    let added = run_json(db, &["add", text, "-n", namespace, "--judge", "cosine"]);
    added["stored"].as_i64().unwrap_or_else(|| panic!("`{text}` was not stored: {added}"))
}

/// Every memory of `namespace`, deprecated ones too, by id.
fn all_memories(db: &str, namespace: &str) -> BTreeMap<i64, Value> {
    let list = run_json(db, &["list", "--all", "-n", namespace, "--limit", "0"]);
    list.as_array().expect("list prints an array").iter().map(|m| (m["id"].as_i64().unwrap(), m.clone())).collect()
}

/// The live memories of `namespace`.
fn live_memories(db: &str, namespace: &str) -> Vec<Value> {
    let list = run_json(db, &["list", "-n", namespace, "--limit", "0"]);
    list.as_array().expect("list prints an array").clone()
}

fn ids(values: &Value) -> Vec<i64> {
    values.as_array().expect("an array of ids").iter().map(|v| v.as_i64().expect("an id")).collect()
}

/// `memdedup --db DB dedup -n NAMESPACE` asking the fake judge at `url`.
fn dedup(db: &str, url: &str, namespace: &str) -> Command {
    let mut cmd = memdedup();
    cmd.args(["--db", db, "dedup", "--judge", "openai", "--judge-url", url, "--judge-model", "m", "-n", namespace]);
    cmd
}

/// The memories of the DOCS and NO_COMPAT clusters, the negatives and the unrelated memory,
/// each added with `memdedup add`; their ids in that order.
fn seed(db: &str, namespace: &str) -> Vec<i64> {
    require_model();
    let texts = DOCS.members.iter().chain(NO_COMPAT.members).chain(&NEGATIVES).chain([&UNRELATED]);
    texts.map(|t| add(db, namespace, t)).collect()
}

/// The run summary's keys the brief of `dedup --json` promises.
const SUMMARY_KEYS: [&str; 9] =
    ["run_id", "merged", "processed", "marked_verified", "skipped", "failed", "retryable", "judge_calls", "tokens"];

#[test]
fn dedup_merges_the_groups_the_judge_confirms_and_show_names_the_survivor() {
    let (_dir, db) = sqlite_db();
    let ns = "lessons";
    let seeded = seed(&db, ns);
    let judge = FakeJudge::truthful(&CLUSTERS, None);
    let assert = dedup(&db, &judge.url(), ns).arg("--json").assert().success();
    let report = json(&assert.get_output().stdout);
    for key in SUMMARY_KEYS {
        assert!(report.get(key).is_some(), "the summary has no `{key}`: {report}");
    }
    let run_id = report["run_id"].as_str().expect("a run id").to_owned();
    assert!(run_id.starts_with("run-"), "{report}");
    assert_eq!((report["merged"].as_u64(), report["absorbed"].as_u64()), (Some(2), Some(4)), "{report}");
    assert_eq!(report["processed"], seeded.len(), "every memory was unverified: {report}");
    assert_eq!((report["failed"].as_u64(), report["retryable"].as_u64()), (Some(0), Some(0)), "{report}");
    assert_eq!(report["skipped"], 0, "{report}");
    assert!(report["judge_calls"].as_u64().unwrap() >= 1, "{report}");
    assert_eq!(report["judge_calls"], judge.payloads().len(), "{report}");
    assert!(report["tokens"]["input_tokens"].as_u64().unwrap() > 0, "{report}");
    assert!(report["tokens"]["output_tokens"].as_u64().unwrap() > 0, "{report}");

    // The unrelated memory had no candidate: verified without a judge call, and counted.
    assert!(judge.payloads().iter().all(|p| !p.contains(UNRELATED)), "the unrelated memory reached the judge");
    let live = live_memories(&db, ns);
    assert!(live.iter().all(|m| m["dedup_verified"] == true), "every live memory is verified: {live:#?}");
    assert_eq!(report["marked_verified"], live.len(), "each live memory was marked verified once: {report}");

    let mut contents: Vec<&str> = live.iter().map(|m| m["content"].as_str().unwrap()).collect();
    contents.sort_unstable();
    let mut expected = vec![DOCS.canonical, NO_COMPAT.canonical, NEGATIVES[0], NEGATIVES[1], UNRELATED];
    expected.sort_unstable();
    assert_eq!(contents, expected);

    let merges = report["merges"].as_array().expect("the merges of the run");
    assert_eq!(merges.len(), 2, "{report}");
    for merge in merges {
        let survivor = merge["survivor"].as_i64().unwrap();
        let absorbed = ids(&merge["absorbed"]);
        assert_eq!(absorbed.len(), 2, "{merge}");
        let survivor_urn = format!("memdedup://global/{ns}/{survivor}");
        for id in absorbed {
            let shown = run_text(&db, &["show", &id.to_string()]);
            let line = shown.lines().find(|l| l.trim_start().starts_with("merged into")).unwrap_or_else(|| {
                panic!("`show {id}` does not say what it was merged into:\n{shown}");
            });
            assert!(line.trim_end().ends_with(&survivor_urn), "{line}");
            let shown = run_json(&db, &["show", &id.to_string()]);
            assert_eq!((shown["merged_into"].as_i64(), &shown["deprecated"]), (Some(survivor), &json!(true)));
        }
        let shown = run_json(&db, &["show", &survivor.to_string()]);
        assert_eq!(shown["merged_into"], Value::Null, "{shown}");
        assert_eq!(shown["occurrence_count"], 3, "the survivor counts its group's occurrences: {shown}");
    }

    // The ledger: every merge of the run, filtered by run, and named in the human output.
    let ledger = run_json(&db, &["merges"]);
    let ledger = ledger.as_array().expect("merges prints an array");
    assert_eq!(ledger.len(), 2, "{ledger:#?}");
    assert!(ledger.iter().all(|m| m["run_id"] == run_id.as_str()), "{ledger:#?}");
    assert_eq!(run_json(&db, &["merges", "--run", &run_id]).as_array().unwrap().len(), 2);
    assert_eq!(run_json(&db, &["merges", "--run", "run-that-never-was"]), json!([]));
    assert_eq!(run_json(&db, &["merges", "-n", "another-namespace"]), json!([]));
    let human = run_text(&db, &["merges", "--run", &run_id]);
    for merge in merges {
        let absorbed: Vec<String> = ids(&merge["absorbed"]).iter().map(ToString::to_string).collect();
        let line = format!("memory {} absorbed {}", merge["survivor"], absorbed.join(", "));
        assert!(human.contains(&line), "`{line}` missing from:\n{human}");
    }
    assert!(human.contains(&run_id) && human.contains("judge openai m, confidence 0.95"), "{human}");
}

#[test]
fn undo_of_a_run_restores_the_members_and_blocks_the_pairs() {
    let (_dir, db) = sqlite_db();
    let ns = "lessons";
    seed(&db, ns);
    let before = all_memories(&db, ns);
    let judge = FakeJudge::truthful(&CLUSTERS, None);
    let report = json(&dedup(&db, &judge.url(), ns).arg("--json").assert().success().get_output().stdout);
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    let merges = report["merges"].as_array().unwrap().clone();
    assert_eq!(merges.len(), 2, "{report}");
    let members: BTreeSet<i64> = merges
        .iter()
        .flat_map(|m| std::iter::once(m["survivor"].as_i64().unwrap()).chain(ids(&m["absorbed"])))
        .collect();
    assert_ne!(all_memories(&db, ns), before, "the run changed the store");

    let undone = run_json(&db, &["undo", "--run", &run_id]);
    let undone = undone.as_array().expect("undo prints an array of reports");
    assert_eq!(undone.len(), 2, "{undone:#?}");
    let after = all_memories(&db, ns);
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    for id in &members {
        assert_eq!(after[id], before[id], "memory {id} is not back as it was before the run");
    }
    for (id, memory) in &after {
        for field in ["content", "helpful", "harmful", "occurrence_count", "metadata", "deprecated", "merged_into"] {
            assert_eq!(memory[field], before[id][field], "memory {id}'s {field}");
        }
    }

    // The ledger keeps the undone merges, shown with --all only.
    assert_eq!(run_json(&db, &["merges"]), json!([]));
    let all = run_json(&db, &["merges", "--all"]);
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
    assert!(all.as_array().unwrap().iter().all(|m| !m["undone_at"].is_null()), "{all}");
    let human = run_text(&db, &["merges", "--all"]);
    assert_eq!(human.matches(" UNDONE ").count(), 2, "{human}");
    assert_eq!(run_text(&db, &["merges"]), "no merges\n");

    // Undoing the run again is an error, and so is a run that never was.
    let again = memdedup().args(["--db", &db, "undo", "--run", &run_id]).assert().code(1).stdout("");
    let stderr = text(&again.get_output().stderr);
    assert!(stderr.contains(&format!("cannot undo run {run_id}: its 2 merges were undone already")), "{stderr}");
    let unknown = memdedup().args(["--db", &db, "undo", "--run", "run-typo"]).assert().code(1).stdout("");
    let stderr = text(&unknown.get_output().stderr);
    assert!(stderr.contains("the merge ledger has no merge of that run"), "{stderr}");
    assert_eq!(all_memories(&db, ns), after, "failed undos change nothing");

    // The undone pairs are never offered to the judge again: nothing is merged.
    let calls = judge.payloads().len();
    let rerun = json(&dedup(&db, &judge.url(), ns).arg("--json").assert().success().get_output().stdout);
    assert_eq!(rerun["merged"], 0, "{rerun}");
    for payload in &judge.payloads()[calls..] {
        let batch: Value = serde_json::from_str(payload).unwrap();
        for edge in batch["candidate_edges"].as_array().unwrap() {
            let (a, b) = (edge["source_id"].as_i64().unwrap(), edge["target_id"].as_i64().unwrap());
            let same_group = merges.iter().any(|m| {
                let group: Vec<i64> =
                    std::iter::once(m["survivor"].as_i64().unwrap()).chain(ids(&m["absorbed"])).collect();
                group.contains(&a) && group.contains(&b)
            });
            assert!(!same_group, "the undone pair ({a}, {b}) was offered to the judge again");
        }
    }
    assert_eq!(live_memories(&db, ns).len(), before.len(), "every memory is live");

    // Two groups of three: three blocked pairs each, cleared once.
    let cleared = run_json(&db, &["merges", "--clear-blocks", "-n", ns]);
    assert_eq!(cleared, json!({"scope": format!("global/{ns}"), "cleared": 6}));
    assert_eq!(
        run_text(&db, &["merges", "--clear-blocks", "-n", ns]),
        format!("cleared 0 blocked pairs in global/{ns}\n")
    );
}

#[test]
fn undo_of_a_merge_is_refused_after_a_later_change() {
    let (_dir, db) = sqlite_db();
    let ns = "lessons";
    seed(&db, ns);
    let judge = FakeJudge::truthful(&CLUSTERS, None);
    let report = json(&dedup(&db, &judge.url(), ns).arg("--json").assert().success().get_output().stdout);
    let merges = report["merges"].as_array().unwrap();
    let docs = merges
        .iter()
        .find(|m| run_json(&db, &["show", &m["survivor"].to_string()])["content"] == DOCS.canonical)
        .unwrap_or_else(|| panic!("no merge made the DOCS survivor: {report}"));
    let (merge_id, survivor) = (docs["merge_id"].as_i64().unwrap(), docs["survivor"].as_i64().unwrap());
    let other = merges.iter().find(|m| m["merge_id"] != docs["merge_id"]).unwrap()["merge_id"].as_i64().unwrap();

    // `add` of the survivor's text counts an occurrence on it: the merge's result changed.
    let again = run_json(&db, &["add", DOCS.canonical, "-n", ns]);
    assert_eq!(again["check"]["matched_urn"], format!("memdedup://global/{ns}/{survivor}"), "{again}");
    let before = all_memories(&db, ns);
    let refused = memdedup().args(["--db", &db, "undo", &merge_id.to_string()]).assert().code(1).stdout("");
    let stderr = text(&refused.get_output().stderr);
    assert!(stderr.contains(&format!("cannot undo merge {merge_id}")), "{stderr}");
    assert!(
        stderr.contains(&format!("memory {survivor}'s occurrence_count changed since merge {merge_id}")),
        "{stderr}"
    );
    assert_eq!(all_memories(&db, ns), before, "a refused undo changes nothing");

    // A later merge into the same survivor must be undone first.
    let late_id = add(&db, ns, LATE_DOCS.members[0]);
    let late_judge = FakeJudge::truthful(&[&LATE_DOCS], None);
    let second = json(&dedup(&db, &late_judge.url(), ns).arg("--json").assert().success().get_output().stdout);
    let later = &second["merges"][0];
    assert_eq!((later["survivor"].as_i64(), ids(&later["absorbed"])), (Some(survivor), vec![late_id]), "{second}");
    let later_id = later["merge_id"].as_i64().unwrap();
    let refused = memdedup().args(["--db", &db, "undo", &merge_id.to_string()]).assert().code(1).stdout("");
    let stderr = text(&refused.get_output().stderr);
    assert!(
        stderr
            .contains(&format!("memory {survivor} was changed by merge {later_id} since: undo merge {later_id} first")),
        "{stderr}"
    );

    // The later merge and an unrelated one can be undone on their own.
    let undone = run_text(&db, &["undo", &later_id.to_string()]);
    assert!(undone.starts_with(&format!("undid merge {later_id}: restored memories {late_id}")), "{undone}");
    let undone = run_json(&db, &["undo", &other.to_string(), "--allow-remerge"]);
    assert_eq!(undone[0]["blocked_pairs"], json!([]), "{undone}");
    let refused = memdedup().args(["--db", &db, "undo", &other.to_string()]).assert().code(1);
    assert!(text(&refused.get_output().stderr).contains("it was undone already"));
    let refused = memdedup().args(["--db", &db, "undo", "4x"]).assert().code(2);
    assert!(text(&refused.get_output().stderr).contains("`4x` is not a merge id"));
}

#[test]
fn dedup_scan_writes_nothing_and_prints_the_proposed_groups() {
    let (_dir, db) = sqlite_db();
    let ns = "lessons";
    seed(&db, ns);
    let before = all_memories(&db, ns);
    let judge = FakeJudge::truthful(&CLUSTERS, None);
    let human = text(&dedup(&db, &judge.url(), ns).arg("--scan").assert().success().get_output().stdout);
    assert!(human.starts_with("dry run run-"), "{human}");
    assert!(human.contains("(nothing written): the judge confirms 2 groups"), "{human}");
    for cluster in [&DOCS, &NO_COMPAT] {
        let ids: Vec<i64> = cluster
            .members
            .iter()
            .map(|t| before.values().find(|m| m["content"] == *t).unwrap()["id"].as_i64().unwrap())
            .collect();
        // All unverified and seen once: the lowest id survives.
        let line = format!("memory {} would absorb {}, {} (confidence 0.95)", ids[0], ids[1], ids[2]);
        assert!(human.contains(&line), "`{line}` missing from:\n{human}");
        assert!(human.contains(&format!("  text: {}", cluster.canonical)), "{human}");
    }
    assert_eq!(human.matches(&format!("  reason: {REASON}")).count(), 2, "{human}");
    assert!(!human.contains("undo with"), "{human}");
    assert_eq!(all_memories(&db, ns), before, "a scan writes nothing");

    let scan = json(&dedup(&db, &judge.url(), ns).args(["--scan", "--json"]).assert().success().get_output().stdout);
    assert_eq!((scan["dry_run"].as_bool(), scan["merged"].as_u64()), (Some(true), Some(0)), "{scan}");
    let proposals = scan["proposals"].as_array().unwrap();
    assert_eq!(proposals.len(), 2, "{scan}");
    assert!(proposals.iter().all(|p| p["confidence"] == 0.95 && p["reason"] == REASON), "{scan}");
    assert_eq!(all_memories(&db, ns), before, "a scan writes nothing");
    assert_eq!(run_json(&db, &["merges", "--all"]), json!([]));

    // The human summary of a real run.
    let human = text(&dedup(&db, &judge.url(), ns).assert().success().get_output().stdout);
    let run_id = human.strip_prefix("run ").and_then(|rest| rest.split(':').next()).unwrap_or_default();
    assert!(run_id.starts_with("run-"), "{human}");
    assert!(human.starts_with(&format!("run {run_id}: 2 groups merged (4 memories absorbed)\n")), "{human}");
    assert_eq!(
        human.matches(" (confidence 0.95; the judge's canonical text): Same rule, phrased differently.\n").count(),
        2,
        "{human}"
    );
    assert!(human.contains("processed 9, marked verified 5, skipped 0, failed 0, retryable 0\n"), "{human}");
    assert!(human.contains("2 passes (bootstrap, incremental), "), "{human}");
    // Defect "the undo hint omits --db": the hint names the store and works as pasted.
    let hint = human.lines().last().and_then(|l| l.strip_prefix("undo with: ")).unwrap_or_default().to_owned();
    assert_eq!(hint, format!("memdedup --db {db} undo --run {run_id}"), "{human}");
    let bin = assert_cmd::cargo::cargo_bin("memdedup");
    let pasted = std::process::Command::new("sh")
        .arg("-c")
        .arg(hint.replacen("memdedup", &bin.display().to_string(), 1))
        .env("MEMDEDUP_HOME", tempfile::tempdir().unwrap().path())
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(pasted.status.success(), "{hint}: {}", text(&pasted.stderr));
    assert!(text(&pasted.stdout).contains("undid"), "{}", text(&pasted.stdout));
}

#[test]
fn dedup_without_a_judge_runs_the_learned_one() {
    crate::support::require_model();
    let (_dir, db) = sqlite_db();
    for text in ["The user prefers dark mode in every editor.", "The user likes a dark theme in their editors."] {
        crate::support::run_json(&db, &["add", text, "--judge", "cosine"]);
    }
    let (_config_dir, empty) = temp_file("memdedup.toml", b"");
    // The run's own ids aside, the same report.
    let scan = |extra: &[&str]| {
        let out = memdedup()
            .env_remove("MEMDEDUP_JUDGE")
            .args(["--db", &db, "--config"])
            .arg(&empty)
            .args(["dedup", "--scan", "--json"])
            .args(extra)
            .assert()
            .success();
        let mut report = crate::support::json(&out.get_output().stdout);
        report["run_id"] = Value::Null;
        for proposal in report["proposals"].as_array_mut().unwrap() {
            proposal["batch_id"] = Value::Null;
        }
        report
    };
    let by_default = scan(&[]);
    assert_eq!(by_default, scan(&["--judge", "learned"]), "no judge configured: the learned one decides");
}

#[test]
fn dedup_refuses_invalid_flags_as_usage_errors() {
    let (dir, db) = sqlite_db();
    let url = "http://127.0.0.1:9/v1";
    let cases: [(&[&str], &str); 6] = [
        (&["--min-sim", "2"], "2 is outside [-1, 1]"),
        (&["--min-sim", "NaN"], "NaN is outside [-1, 1]"),
        (&["--batch-size", "0"], "invalid value '0' for '--batch-size <N>'"),
        (&["--min-confidence", "1.5"], "1.5 is outside [0, 1]"),
        (&["--limit", "0"], "invalid value '0' for '--limit <N>'"),
        (&["--judge", "gemini"], "invalid value 'gemini' for '--judge <learned|local|openai|anthropic>'"),
    ];
    for (flags, message) in cases {
        let mut cmd = memdedup();
        cmd.args(["--db", &db, "dedup", "--judge-url", url, "--judge-model", "m", "-n", "lessons"]);
        if !flags.contains(&"--judge") {
            cmd.args(["--judge", "openai"]);
        }
        let assert = cmd.args(flags).assert().code(2).stdout("");
        let stderr = text(&assert.get_output().stderr);
        assert!(stderr.contains(message), "{flags:?}: {stderr}");
    }
    // The flag spelled in another case is the same judge; a bad value elsewhere is still
    // named, but as configuration (exit 1).
    let assert = memdedup().env("MEMDEDUP_JUDGE", "gemini").args(["--db", &db, "dedup"]).assert().code(1);
    assert!(
        text(&assert.get_output().stderr)
            .contains("judge \"gemini\" is not \"learned\", \"local\", \"openai\", \"anthropic\" or \"agent\"")
    );
    let clash = memdedup().args(["--db", &db, "undo", "3", "--run", "run-x"]).assert().code(2);
    assert!(text(&clash.get_output().stderr).contains("cannot be used with"));
    memdedup().args(["--db", &db, "undo"]).assert().code(2);
    assert!(!Path::new(&db).exists(), "nothing was opened: {:?}", crate::support::dir_listing(dir.path()));
}

#[test]
fn dedup_never_prints_or_stores_the_api_key() {
    let (_dir, db) = sqlite_db();
    let ns = "lessons";
    let ids = seed(&db, ns);
    let secret = format!("sk-memdedup-test-{}", unique_namespace("secret"));
    let judge = FakeJudge::start(|request| {
        let auth = request.header("authorization").unwrap_or("none").to_owned();
        FakeReply::status(401, format!("Incorrect API key provided: {auth}"))
    });
    let assert =
        dedup(&db, &judge.url(), ns).env("MEMDEDUP_JUDGE_API_KEY", &secret).args(["--json", "-v"]).assert().code(1);
    let (stdout, stderr) = (text(&assert.get_output().stdout), text(&assert.get_output().stderr));
    assert!(stderr.contains("every judge call failed"), "{stderr}");
    assert!(stderr.contains("401"), "the failure is named: {stderr}");
    let requests = judge.server.requests();
    assert!(!requests.is_empty());
    assert!(
        requests.iter().all(|r| r.header("authorization") == Some(format!("Bearer {secret}").as_str())),
        "the key was sent to the judge"
    );
    assert!(!stdout.contains(&secret) && !stdout.contains("sk-memdedup-test"), "{stdout}");
    assert!(!stderr.contains(&secret) && !stderr.contains("sk-memdedup-test"), "{stderr}");
    let mut recorded = 0;
    for id in ids {
        let shown = run_json(&db, &["show", &id.to_string()]);
        assert!(!shown.to_string().contains("sk-memdedup-test"), "{shown}");
        if let Some(error) = shown["dedup_last_error"].as_str() {
            assert!(error.contains("401"), "{error}");
            recorded += 1;
        }
    }
    assert!(recorded > 0, "the failure was recorded on the memories");
}

#[test]
fn dedup_with_a_judge_answering_garbage_fails_and_leaves_the_memories_retryable() {
    let (_dir, db) = sqlite_db();
    let ns = "lessons";
    let ids = seed(&db, ns);
    let judge = FakeJudge::start(|_| FakeReply::text("Sure! These all look like duplicates to me."));
    let assert = dedup(&db, &judge.url(), ns).arg("--json").assert().code(1);
    let stderr = text(&assert.get_output().stderr);
    assert!(stderr.contains("every judge call failed"), "{stderr}");
    assert!(stderr.contains("the reply holds no JSON object"), "{stderr}");
    let report = json(&assert.get_output().stdout);
    assert_eq!(report["merged"], 0, "{report}");
    assert!(report["failed"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["failed"], report["retryable"], "{report}");
    let sent: BTreeSet<i64> = judge
        .payloads()
        .iter()
        .flat_map(|p| {
            let batch: Value = serde_json::from_str(p).unwrap();
            batch["memories"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(report["failed"], sent.len(), "{report}");
    for id in ids {
        let shown = run_json(&db, &["show", &id.to_string()]);
        assert_eq!(shown["deprecated"], false, "{shown}");
        if sent.contains(&id) {
            assert_eq!(shown["dedup_verified"], false, "{shown}");
            assert_eq!(shown["dedup_attempts"], 1, "{shown}");
            assert!(shown["dedup_last_error"].as_str().unwrap().contains("the reply holds no JSON object"), "{shown}");
        } else {
            assert_eq!(shown["content"], UNRELATED, "only the memory without candidates was not sent: {shown}");
            assert_eq!((&shown["dedup_verified"], &shown["dedup_attempts"]), (&json!(true), &json!(0)), "{shown}");
        }
    }
}

/// Twenty memories unlike each other and unlike the clusters.
const LATE_ARRIVALS: [&str; 20] = [
    "Rotate the TLS certificates of the public gateway every ninety days.",
    "The marketing site is built with Hugo and deployed from the main branch.",
    "Ask the data team before deleting any table in the analytics warehouse.",
    "Payroll runs on the twenty-fifth of each month in the Berlin office.",
    "Our Kafka topics keep messages for seven days before compaction.",
    "Use British spelling in all customer-facing copy.",
    "The CI runners have 8 GB of memory; keep test parallelism at four.",
    "Never store credit card numbers; the payment provider tokenises them.",
    "Feature flags older than six months must be removed or made permanent.",
    "The Android app targets API level 34 and uses Jetpack Compose.",
    "Incident reviews are blameless and published within a week.",
    "Grafana dashboards live in the observability repository as JSON.",
    "Translate new UI strings into German, French and Japanese before launch.",
    "The search index is rebuilt nightly from the product catalogue.",
    "Interns get read-only access to production logs during their first month.",
    "Load tests run against the staging cluster with ten thousand virtual users.",
    "Python services pin dependencies with uv lock files.",
    "Legal must approve any change to the privacy policy page.",
    "The warehouse robots are serviced every other Tuesday morning.",
    "Time zones are stored as IANA names, never as fixed offsets.",
];

#[test]
fn dedup_concurrent_with_add_from_another_process_loses_nothing_postgres() {
    require_model();
    let url = postgres_url();
    let ns = unique_namespace("dedup-race");
    let seed_texts: Vec<&str> =
        CLUSTERS.iter().flat_map(|c| c.members.iter().copied()).chain(NEGATIVES).chain([UNRELATED]).collect();
    let lines: String = seed_texts.iter().map(|t| format!("{}\n", json!({"content": t, "namespace": ns}))).collect();
    let captured = memdedup()
        .args(["--db", &url, "capture", "-", "--json", "--judge", "cosine"])
        .write_stdin(lines)
        .assert()
        .success();
    let captured = json(&captured.get_output().stdout);
    let stored = captured["results"].as_array().unwrap().iter().filter(|r| !r["stored"].is_null()).count();
    assert_eq!(stored, seed_texts.len(), "every seed memory is new: {captured}");

    let judge = FakeJudge::truthful(&CLUSTERS, Some(Duration::from_millis(300)));
    let mut running = StdCommand::new(assert_cmd::cargo::cargo_bin("memdedup"))
        .args(["--db", &url, "dedup", "--judge", "openai", "--judge-url", &judge.url(), "--judge-model", "m"])
        .args(["-n", &ns, "--batch-size", "2", "--in-flight", "2", "--json"])
        .env_remove("MEMDEDUP_JUDGE_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("MEMDEDUP_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memdedup dedup starts");
    let started = Instant::now();
    while judge.server.request_count() == 0 {
        assert!(running.try_wait().unwrap().is_none(), "dedup ended before asking the judge");
        assert!(started.elapsed() < Duration::from_secs(60), "dedup never asked the judge");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut added = Vec::new();
    let mut overlapped = 0;
    for text in LATE_ARRIVALS {
        added.push(add(&url, &ns, text));
        if running.try_wait().unwrap().is_none() {
            overlapped += 1;
        }
    }
    let output = running.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(overlapped > 0, "every add finished after the dedup run: the test raced nothing");
    let report = json(&output.stdout);
    assert!(report["merged"].as_u64().unwrap() >= 3, "{report}");

    let all = all_memories(&url, &ns);
    assert_eq!(all.len(), seed_texts.len() + LATE_ARRIVALS.len(), "no row was lost or added: {all:#?}");
    let live_ids: BTreeSet<i64> =
        all.values().filter(|m| m["deprecated"] == false).map(|m| m["id"].as_i64().unwrap()).collect();
    // A memory absorbed into a survivor that a later merge absorbed in turn keeps pointing
    // at that survivor: the chain of `merged_into` ends at a live memory.
    for memory in all.values() {
        let mut at = memory;
        for _ in 0..all.len() {
            if at["deprecated"] == false {
                break;
            }
            let into = at["merged_into"].as_i64().unwrap_or_else(|| panic!("deprecated but not merged: {at}"));
            at = all.get(&into).unwrap_or_else(|| panic!("merged into a memory that does not exist: {at}"));
        }
        assert!(live_ids.contains(&at["id"].as_i64().unwrap()), "the merged_into chain of {memory} has no end");
    }
    for (text, id) in LATE_ARRIVALS.iter().zip(&added) {
        let memory = &all[id];
        assert_eq!((&memory["content"], &memory["deprecated"]), (&json!(text), &json!(false)), "{memory}");
    }
    for cluster in CLUSTERS {
        let survivors: Vec<&Value> = all
            .values()
            .filter(|m| m["deprecated"] == false && cluster_of(&[cluster], m["content"].as_str().unwrap()).is_some())
            .collect();
        assert_eq!(survivors.len(), 1, "one survivor per cluster: {survivors:#?}");
    }

    // A second run converges: every live memory is verified, nothing more to merge.
    let second = json(&dedup(&url, &judge.url(), &ns).arg("--json").assert().success().get_output().stdout);
    assert_eq!((second["merged"].as_u64(), second["retryable"].as_u64()), (Some(0), Some(0)), "{second}");
    let live = live_memories(&url, &ns);
    assert_eq!(live.len(), live_ids.len());
    let unverified: Vec<&Value> = live.iter().filter(|m| m["dedup_verified"] != true).collect();
    assert!(unverified.is_empty(), "{unverified:#?}");
}
