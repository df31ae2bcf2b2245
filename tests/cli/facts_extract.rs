//! `memdedup facts extract`: seed 002's extraction scenarios through a fake LLM server
//! speaking the real OpenAI wire format, on a temporary SQLite database.

use std::path::Path;

use assert_cmd::Command;
use dedup_llm::fake::{FakeLlm, FakeReply};
use serde_json::{Value, json};

use crate::support::{json, memdedup, text};

/// The key the binary sends; it must never appear in its output.
const API_KEY: &str = "sk-cli-extraction-secret-4242";

const TURN_USER: &str = "I'm moving our billing service from Python to Rust; please always use tabs.";
const TURN_ASSISTANT: &str = "Got it: tabs from now on.";

/// A temporary directory with a turn file and a database path in it.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new() -> Workspace {
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::write(
            dir.path().join("turn.json"),
            json!({"user": TURN_USER, "assistant": TURN_ASSISTANT}).to_string(),
        )
        .expect("turn file");
        Workspace { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn db(&self) -> String {
        self.path("facts.db")
    }

    fn turn(&self) -> String {
        self.path("turn.json")
    }

    fn write(&self, name: &str, contents: &str) -> String {
        std::fs::write(self.dir.path().join(name), contents).expect("writable");
        self.path(name)
    }

    /// `memdedup --db DB facts …` with the fake as the judge (from the environment).
    fn facts(&self, fake: &FakeLlm) -> Command {
        let mut cmd = memdedup();
        for name in
            ["MEMDEDUP_JUDGE", "MEMDEDUP_JUDGE_URL", "MEMDEDUP_JUDGE_MODEL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"]
        {
            cmd.env_remove(name);
        }
        cmd.env("MEMDEDUP_JUDGE", "openai")
            .env("MEMDEDUP_JUDGE_URL", fake.base_url())
            .env("MEMDEDUP_JUDGE_MODEL", "fake-extractor")
            .env("MEMDEDUP_JUDGE_API_KEY", API_KEY)
            .args(["--db", &self.db(), "facts"]);
        cmd
    }

    /// The stored facts of global/default as (content, category, confidence).
    fn stored(&self) -> Vec<(String, String, f64)> {
        if !Path::new(&self.db()).exists() {
            return Vec::new();
        }
        let out = memdedup().args(["--db", &self.db(), "facts", "list", "--json"]).assert().success();
        json(&out.get_output().stdout)
            .as_array()
            .expect("a JSON array")
            .iter()
            .map(|f| {
                (
                    f["content"].as_str().unwrap_or_default().to_owned(),
                    f["category"].as_str().unwrap_or_default().to_owned(),
                    f["confidence"].as_f64().unwrap_or(-1.0),
                )
            })
            .collect()
    }
}

fn fact(content: &str, category: &str, confidence: f64) -> Value {
    json!({"content": content, "category": category, "confidence": confidence})
}

fn reply(facts: &[Value]) -> FakeReply {
    FakeReply::text(json!({ "facts": facts }).to_string())
}

fn triple(content: &str, category: &str, confidence: f64) -> (String, String, f64) {
    (content.to_owned(), category.to_owned(), confidence)
}

/// The fact id after `prefix` on the line starting with it.
fn id_after<'a>(out: &'a str, prefix: &str) -> &'a str {
    let line = out.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix:?} line in:\n{out}"));
    line[prefix.len()..].split_whitespace().next().unwrap_or_default()
}

/// Extract facts from conversation turn: the LLM gets the turn, each fact is stored with
/// content, category and confidence, and the run reports what it did and cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scn_fact_extraction_extract_facts_from_conversation_turn() {
    let fake = FakeLlm::scripted(vec![FakeReply::text(format!(
        "Sure:\n```json\n{}\n```",
        json!({"facts": [
            fact("User is migrating the billing service from Python to Rust", "context", 0.95),
            fact("User prefers tabs for indentation", "preference", 0.9),
        ]})
    ))]);
    let ws = Workspace::new();
    let out = ws.facts(&fake).args(["extract", &ws.turn()]).assert().success();
    let out = text(&out.get_output().stdout);

    let first = id_after(&out, "added ");
    assert!(first.starts_with("fact_") && first.len() == 13, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].ends_with(" (context, 0.95): User is migrating the billing service from Python to Rust"), "{out}");
    assert!(
        lines[1].starts_with("added fact_")
            && lines[1].ends_with(" (preference, 0.90): User prefers tabs for indentation"),
        "{out}"
    );
    let tokens: Vec<u64> = lines[2]
        .strip_prefix("1 turn, 1 LLM call, ")
        .and_then(|rest| rest.strip_suffix(" output tokens"))
        .and_then(|rest| rest.split_once(" input + "))
        .and_then(|(input, output)| Some(vec![input.parse().ok()?, output.parse().ok()?]))
        .unwrap_or_else(|| panic!("no usage line: {out}"));
    assert!(tokens.iter().all(|&n| n > 0), "{out}");
    assert_eq!(
        ws.stored(),
        [
            triple("User is migrating the billing service from Python to Rust", "context", 0.95),
            triple("User prefers tabs for indentation", "preference", 0.9),
        ]
    );
    // The configured LLM was called once, with the conversation text and the key.
    assert_eq!(fake.request_count(), 1);
    let request = &fake.requests()[0];
    assert!(request.user.contains(TURN_USER) && request.user.contains(TURN_ASSISTANT), "{}", request.user);
    assert_eq!(request.body["model"], "fake-extractor");
    assert_eq!(request.header("authorization"), Some(format!("Bearer {API_KEY}").as_str()));
}

/// Fact categories: the six are accepted; a fact outside the set is skipped and reported
/// (its index and why, never its text) and the turn's other facts are stored (defect 11).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scn_fact_extraction_fact_categories() {
    let categories = ["preference", "knowledge", "context", "behavior", "goal", "correction"];
    let all: Vec<Value> = categories.iter().map(|c| fact(&format!("A {c} fact"), c, 0.8)).collect();
    let fake = FakeLlm::scripted(vec![
        reply(&all),
        reply(&[fact("User likes Rust", "preference", 0.9), fact("User is happy", "mood", 0.9)]),
        reply(&[fact("User likes Go", "preference", 0.9), fact("User is sad", "mood", 0.9)]),
    ]);
    let ws = Workspace::new();
    let out = ws.facts(&fake).args(["extract", &ws.turn(), "--json"]).assert().success();
    let report = json(&out.get_output().stdout);
    let got: Vec<&str> =
        report["facts"].as_array().expect("facts").iter().filter_map(|f| f["category"].as_str()).collect();
    assert_eq!(got, categories);
    assert_eq!(report["skipped_invalid"], json!([]));
    assert_eq!(ws.stored().len(), 6);

    let out = ws.facts(&fake).args(["extract", &ws.turn()]).assert().success();
    let stdout = text(&out.get_output().stdout);
    assert!(stdout.contains("skipped invalid fact 1 of turn 1 (not stored): "), "{stdout}");
    assert!(stdout.contains("unknown fact category \"mood\""), "{stdout}");
    assert!(!stdout.contains("User is happy"), "the invalid fact's text is not printed: {stdout}");
    let contents: Vec<String> = ws.stored().into_iter().map(|f| f.0).collect();
    assert!(contents.contains(&"User likes Rust".to_owned()), "the turn's valid fact is stored");
    assert_eq!(contents.len(), 7);

    let out = ws.facts(&fake).args(["extract", &ws.turn(), "--json"]).assert().success();
    let report = json(&out.get_output().stdout);
    let skipped = report["skipped_invalid"].as_array().expect("skipped_invalid");
    assert_eq!((skipped.len(), &skipped[0]["turn"], &skipped[0]["index"]), (1, &json!(1), &json!(1)), "{report}");
    assert_eq!(ws.stored().len(), 8);
}

/// Confidence thresholds: below 0.5 a fact is not stored; it is reported by count and
/// category, and logged without its text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scn_fact_extraction_confidence_thresholds() {
    let low = "User might own a cat";
    let fake = FakeLlm::scripted(vec![
        reply(&[
            fact("User prefers tabs", "preference", 0.9),
            fact("User works on billing", "context", 0.5),
            fact(low, "knowledge", 0.49),
        ]),
        reply(&[fact("User wants a migration plan", "goal", 0.8)]),
    ]);
    let ws = Workspace::new();
    let out = ws.facts(&fake).args(["-v", "extract", &ws.turn()]).assert().success();
    let stdout = text(&out.get_output().stdout);
    let stderr = text(&out.get_output().stderr);
    assert!(
        stdout
            .contains("skipped 1 low-confidence fact below the confidence threshold 0.50 (not stored): knowledge 1\n"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("added fact_").count(), 2, "{stdout}");
    assert!(stderr.contains("skipped a low-confidence fact"), "{stderr}");
    assert!(!stdout.contains(low) && !stderr.contains(low), "the skipped fact's text was printed:\n{stdout}\n{stderr}");
    assert_eq!(
        ws.stored(),
        [triple("User prefers tabs", "preference", 0.9), triple("User works on billing", "context", 0.5)]
    );

    // The threshold is a flag.
    let out = ws.facts(&fake).args(["extract", &ws.turn(), "--min-confidence", "0.85", "--json"]).assert().success();
    let report = json(&out.get_output().stdout);
    assert_eq!(report["facts"], json!([]));
    assert_eq!(report["skipped_low_confidence"], json!({"count": 1, "categories": {"goal": 1}}));
    assert_eq!(ws.stored().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_model_output_exits_1_and_stores_nothing() {
    let ws = Workspace::new();
    for bad in [
        FakeReply::text("I found no facts, sorry."),
        FakeReply::text(r#"{"facts": [{"content": "cut off"#),
        FakeReply::raw(200, "not the OpenAI wire format"),
    ] {
        let fake = FakeLlm::scripted(vec![bad]);
        let out = ws.facts(&fake).args(["extract", &ws.turn()]).assert().code(1);
        let stderr = text(&out.get_output().stderr);
        assert!(stderr.contains("error: fact extraction failed on turn 1 of 1; nothing was stored: "), "{stderr}");
    }
    assert!(ws.stored().is_empty());

    // A transcript is all or nothing: turn 1's facts are not stored when turn 2's reply is bad.
    let transcript = ws.write("chat.txt", "user: I use tabs\nassistant: ok\nuser: I like Rust\nassistant: noted\n");
    let fake = FakeLlm::scripted(vec![reply(&[fact("User uses tabs", "preference", 0.9)]), FakeReply::text("{}")]);
    let out = ws.facts(&fake).args(["extract", "--transcript", &transcript]).assert().code(1);
    let stderr = text(&out.get_output().stderr);
    assert!(stderr.contains("failed on turn 2 of 2; nothing was stored"), "{stderr}");
    assert_eq!(fake.request_count(), 2);
    assert!(ws.stored().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_fact_in_another_case_is_reported_as_a_duplicate() {
    let ws = Workspace::new();
    let out = memdedup()
        .args(["--db", &ws.db(), "facts", "add", "User prefers tabs", "-c", "preference", "--confidence", "0.7"])
        .assert()
        .success();
    let existing = id_after(&text(&out.get_output().stdout), "added ").to_owned();
    let fake = FakeLlm::scripted(vec![
        reply(&[fact("USER PREFERS TABS", "preference", 0.95)]),
        reply(&[fact("user prefers TABS", "preference", 0.95)]),
    ]);
    let out = ws.facts(&fake).args(["extract", &ws.turn()]).assert().success();
    let stdout = text(&out.get_output().stdout);
    assert!(
        stdout.starts_with(&format!("duplicate of {existing} (preference, 0.95): USER PREFERS TABS\n")),
        "{stdout}"
    );

    let out = ws.facts(&fake).args(["extract", &ws.turn(), "--json"]).assert().success();
    let report = json(&out.get_output().stdout);
    assert_eq!(report["facts"][0]["outcome"], "duplicate");
    assert_eq!(report["facts"][0]["duplicate_of"], json!(existing));
    assert_eq!(ws.stored(), [triple("User prefers tabs", "preference", 0.7)], "the stored fact is unchanged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_prints_the_facts_and_stores_nothing() {
    let ws = Workspace::new();
    let fake = FakeLlm::scripted(vec![
        reply(&[fact("User prefers tabs", "preference", 0.9), fact("Maybe a cat", "knowledge", 0.2)]),
        reply(&[fact("User prefers tabs", "preference", 0.9)]),
    ]);
    let out = ws.facts(&fake).args(["extract", &ws.turn(), "--dry-run"]).assert().success();
    let stdout = text(&out.get_output().stdout);
    assert!(stdout.starts_with("extracted (preference, 0.90): User prefers tabs\n"), "{stdout}");
    assert!(stdout.contains("skipped 1 low-confidence fact"), "{stdout}");
    assert!(stdout.trim_end().ends_with("; dry run: nothing stored"), "{stdout}");
    assert!(!Path::new(&ws.db()).exists(), "a dry run opened (and created) the database");

    let out = ws.facts(&fake).args(["extract", &ws.turn(), "--dry-run", "--json"]).assert().success();
    let report = json(&out.get_output().stdout);
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["facts"][0]["outcome"], "extracted");
    assert!(report["facts"][0].get("id").is_none(), "{report}");
    assert!(ws.stored().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_never_appears_in_output() {
    let ws = Workspace::new();
    let fake = FakeLlm::scripted(vec![
        reply(&[fact("User prefers tabs", "preference", 0.9)]),
        FakeReply::status(401, format!("Incorrect API key provided: {API_KEY}")),
    ]);
    let ok = ws.facts(&fake).args(["-vv", "extract", &ws.turn(), "--json"]).assert().success();
    let refused = ws.facts(&fake).args(["-vv", "extract", &ws.turn()]).assert().code(1);
    let refused_stderr = text(&refused.get_output().stderr);
    assert!(refused_stderr.contains("rejected the request (HTTP 401)"), "{refused_stderr}");
    for output in [ok.get_output(), refused.get_output()] {
        for stream in [&output.stdout, &output.stderr] {
            assert!(!text(stream).contains(API_KEY), "the key leaked:\n{}", text(stream));
        }
    }
    // The key was sent both times, so its absence above is the binary's doing.
    for request in fake.requests() {
        assert_eq!(request.header("authorization"), Some(format!("Bearer {API_KEY}").as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_judge_configured_extract_exits_1_naming_the_flag() {
    let ws = Workspace::new();
    let out = memdedup()
        .env_remove("MEMDEDUP_JUDGE")
        .args(["--db", &ws.db(), "facts", "extract", &ws.turn()])
        .assert()
        .code(1);
    let stderr = text(&out.get_output().stderr);
    assert!(stderr.contains("no judge is configured: pass --judge openai|anthropic"), "{stderr}");
    // Defect 18: it suggests no offline judge, which extraction would refuse.
    assert!(!stderr.contains("local") && !stderr.contains("learned"), "{stderr}");
    assert!(ws.stored().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judge_flags_win_over_the_environment() {
    let ws = Workspace::new();
    let fake = FakeLlm::scripted(vec![reply(&[fact("User prefers tabs", "preference", 0.9)])]);
    let out = ws
        .facts(&fake)
        .env("MEMDEDUP_JUDGE_URL", "http://127.0.0.1:1/v1")
        .args(["extract", &ws.turn(), "--judge", "openai", "--judge-url", &fake.base_url(), "--judge-model", "flagged"])
        .arg("-n")
        .arg("agents")
        .arg("--source")
        .arg("thread-7")
        .assert()
        .success();
    assert!(text(&out.get_output().stdout).contains("added fact_"));
    assert_eq!(fake.requests()[0].body["model"], "flagged");
    let listed = memdedup().args(["--db", &ws.db(), "facts", "list", "-n", "agents", "--json"]).assert().success();
    let listed = json(&listed.get_output().stdout);
    assert_eq!(listed[0]["scope"], json!({"domain": "global", "namespace": "agents"}));
    assert_eq!(listed[0]["source"], "thread-7");
}

/// Transcript parsing: `user:` / `assistant:` lines start messages, other lines continue
/// them, and each user message with the reply after it is one turn and one LLM call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_is_one_llm_call_per_turn() {
    let ws = Workspace::new();
    let transcript = ws.write(
        "chat.txt",
        "User: I use Neovim.\nIt has to start fast.\nAssistant: Noted.\n\nuser: Tabs, please.\nassistant: Tabs it is.\n",
    );
    let fake = FakeLlm::scripted(vec![
        reply(&[fact("User uses Neovim", "context", 0.9)]),
        reply(&[fact("User prefers tabs", "preference", 0.9)]),
    ]);
    let out = ws.facts(&fake).args(["extract", "--transcript", &transcript, "--json"]).assert().success();
    let report = json(&out.get_output().stdout);
    assert_eq!((&report["turns"], &report["llm_calls"]), (&json!(2), &json!(2)), "{report}");
    let turns: Vec<&Value> = report["facts"].as_array().expect("facts").iter().map(|f| &f["turn"]).collect();
    assert_eq!(turns, [&json!(1), &json!(2)]);
    let requests = fake.requests();
    assert!(requests[0].user.contains("<user>\nI use Neovim.\nIt has to start fast.\n</user>"), "{}", requests[0].user);
    assert!(requests[0].user.contains("<assistant>\nNoted.\n</assistant>"), "{}", requests[0].user);
    assert!(!requests[0].user.contains("Tabs"), "{}", requests[0].user);
    assert!(requests[1].user.contains("<user>\nTabs, please.\n</user>"), "{}", requests[1].user);
    assert_eq!(ws.stored().len(), 2);

    // Text before the first label is refused before any call.
    let bad = ws.write("bad.txt", "hello\nuser: hi\n");
    let fake = FakeLlm::scripted(vec![]);
    let out = ws.facts(&fake).args(["extract", "--transcript", &bad]).assert().code(1);
    assert!(text(&out.get_output().stderr).contains("line 1 comes before the first `user:`"));
    assert_eq!(fake.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_read_from_stdin_and_must_have_both_members() {
    let ws = Workspace::new();
    let fake = FakeLlm::scripted(vec![reply(&[fact("User prefers tabs", "preference", 0.9)])]);
    let turn = json!({"user": "Tabs, always.", "assistant": "Sure."}).to_string();
    ws.facts(&fake).args(["extract", "-"]).write_stdin(turn).assert().success();
    assert!(fake.requests()[0].user.contains("Tabs, always."));

    let out = ws.facts(&fake).args(["extract", "-"]).write_stdin(r#"{"user": "only"}"#).assert().code(1);
    assert!(text(&out.get_output().stderr).contains("<stdin> is not a conversation turn"));
    // Neither or both inputs is a usage error.
    ws.facts(&fake).args(["extract"]).assert().code(2);
    ws.facts(&fake).args(["extract", &ws.turn(), "--transcript", &ws.turn()]).assert().code(2);
    assert_eq!(fake.request_count(), 1);
}
