//! `memdedup hook pre-compact`: Claude Code transcripts written by the tests, the real
//! model and a temporary SQLite store; the LLM path through a fake OpenAI-compatible
//! server. Every failure path must still exit 0 with valid hook output.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use dedup_llm::fake::{FakeLlm, FakeReply, FakeRequest};
use serde_json::{Value, json};

use crate::support::{json, memdedup, require_model, run_json};

const DECISION: &str = "We decided to use PostgreSQL as the main database for the billing service.";
const LESSON: &str = "Turns out the flaky test depended on the local timezone of the runner.";
const PATTERN: &str = "Never commit generated protobuf files in this repo, CI builds them.";
const PREFERENCE: &str = "I prefer small commits with one clear purpose each.";

/// A temporary directory with a database and transcripts.
struct Session {
    dir: tempfile::TempDir,
}

impl Session {
    fn new() -> Session {
        Session { dir: tempfile::tempdir().expect("temporary directory") }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn db(&self) -> String {
        self.path("memory.db").display().to_string()
    }

    /// Writes a transcript of these JSONL lines; its path.
    fn transcript(&self, name: &str, lines: &[String]) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).expect("writable");
        path
    }

    /// `memdedup --db DB hook pre-compact EXTRA…` with `stdin`; exits 0 whatever happens.
    fn hook(&self, stdin: impl Into<Vec<u8>>, extra: &[&str]) -> Ran {
        self.hook_with(memdedup(), stdin, extra)
    }

    fn hook_with(&self, mut cmd: Command, stdin: impl Into<Vec<u8>>, extra: &[&str]) -> Ran {
        let out = cmd.args(["--db", &self.db(), "hook", "pre-compact"]).args(extra).write_stdin(stdin).output();
        let out = out.expect("memdedup runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "the hook must exit 0; stderr:\n{stderr}");
        Ran { stdout: json(&out.stdout), stderr }
    }

    /// The live memories as (namespace, kind, content), in id order.
    fn stored(&self) -> Vec<(String, String, String)> {
        if !Path::new(&self.db()).exists() {
            return Vec::new();
        }
        let list = run_json(&self.db(), &["list", "--limit", "0"]);
        list.as_array()
            .expect("list prints an array")
            .iter()
            .map(|m| {
                let field = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (field(&m["scope"]["namespace"]), field(&m["kind"]), field(&m["content"]))
            })
            .collect()
    }

    /// The failure counts `stats --json` shows for the hook.
    fn failure_counts(&self) -> Value {
        let stats = run_json(&self.db(), &["stats"]);
        stats["namespaces"]
            .as_array()
            .expect("namespaces")
            .iter()
            .find(|n| n["namespace"] == "hook.pre-compact")
            .map(|n| n["skipped"].clone())
            .unwrap_or_else(|| json!({}))
    }
}

/// One run's stdout (parsed) and stderr.
struct Ran {
    stdout: Value,
    stderr: String,
}

impl Ran {
    /// The hook output's text, after checking its shape.
    fn context(&self) -> &str {
        assert_eq!(self.stdout["hookSpecificOutput"]["hookEventName"], "PreCompact", "{}", self.stdout);
        self.stdout["hookSpecificOutput"]["additionalContext"].as_str().expect("additionalContext is text")
    }
}

/// Claude Code's hook input for a transcript.
pub(crate) fn input(transcript: &Path) -> String {
    json!({
        "session_id": "abc123",
        "transcript_path": transcript,
        "hook_event_name": "PreCompact",
        "trigger": "auto",
        "custom_instructions": "",
        "cwd": "/tmp",
    })
    .to_string()
}

pub(crate) fn user(text: &str) -> String {
    json!({"type": "user", "message": {"role": "user", "content": text}, "uuid": "u", "sessionId": "abc123"})
        .to_string()
}

pub(crate) fn assistant(text: &str) -> String {
    json!({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})
        .to_string()
}

fn short_transcript() -> Vec<String> {
    vec![
        json!({"type": "summary", "summary": "Billing work", "leafUuid": "x"}).to_string(),
        user(&format!("Let's set up the billing service. {DECISION} What next?")),
        assistant(&format!("Good. I ran the tests twice.\n\n{LESSON}\n\n```sh\ncargo test\n```")),
        user(&format!("{PATTERN} Also, {PREFERENCE}")),
        assistant("Understood, noted all of that."),
    ]
}

fn contents(stored: &[(String, String, String)]) -> Vec<&str> {
    stored.iter().map(|(_, _, c)| c.as_str()).collect()
}

#[test]
fn a_short_transcript_captures_each_kind_in_its_namespace() {
    require_model();
    let s = Session::new();
    let transcript = s.transcript("t.jsonl", &short_transcript());
    let ran = s.hook(input(&transcript), &[]);
    let context = ran.context();
    assert!(
        context.starts_with("Auto-captured 4 memories before compaction:\n\n1. **decisions**: We decided"),
        "{context}"
    );
    assert!(context.contains("   URN: memdedup://global/learnings/"), "{context}");
    assert!(!context.contains("Skipped") && !context.contains("\n\nmemdedup: "), "{context}");
    let stored = s.stored();
    let triple = |ns: &str, kind: &str, content: &str| (ns.to_owned(), kind.to_owned(), content.to_owned());
    assert_eq!(
        stored,
        [
            triple("decisions", "decision", DECISION),
            triple("learnings", "lesson", LESSON),
            triple("patterns", "pattern", PATTERN),
            triple("preferences", "preference", "I prefer small commits with one clear purpose each."),
        ]
    );
    assert!(!ran.stderr.contains("PostgreSQL"), "no memory text in logs:\n{}", ran.stderr);
}

#[test]
fn the_same_transcript_twice_stores_nothing_new() {
    require_model();
    let s = Session::new();
    let transcript = s.transcript("t.jsonl", &short_transcript());
    s.hook(input(&transcript), &[]);
    let first = s.stored();
    assert_eq!(first.len(), 4);
    let again = s.hook(input(&transcript), &[]);
    let context = again.context();
    assert!(context.starts_with("Skipped 4 duplicates:\n- Exact match: \"We decided"), "{context}");
    assert_eq!(context.matches("Exact match").count(), 4, "{context}");
    assert_eq!(s.stored(), first);
    let report = s.hook(input(&transcript), &["--json"]).stdout;
    assert_eq!((report["stored"].as_u64(), report["skipped"].as_u64()), (Some(0), Some(4)), "{report}");
}

#[test]
fn tool_calls_tool_results_thinking_and_side_lines_are_not_captured() {
    require_model();
    let s = Session::new();
    let hidden = "We decided to rewrite everything in assembly for speed reasons.";
    let lines = vec![
        json!({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": hidden, "signature": "sig"},
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": format!("echo '{hidden}'")}},
        ]}})
        .to_string(),
        json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": hidden},
            {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": hidden}]},
        ]}})
        .to_string(),
        json!({"type": "summary", "summary": hidden, "leafUuid": "x"}).to_string(),
        json!({"type": "user", "isMeta": true, "message": {"role": "user", "content": hidden}}).to_string(),
        json!({"type": "assistant", "isSidechain": true, "message": {"content": [{"type": "text", "text": hidden}]}})
            .to_string(),
        json!({"type": "system", "subtype": "compact_boundary", "content": hidden}).to_string(),
        assistant(LESSON),
    ];
    let transcript = s.transcript("tools.jsonl", &lines);
    let report = s.hook(input(&transcript), &["--json"]).stdout;
    assert_eq!(report["transcript"]["messages"], 1, "{report}");
    assert_eq!(report["transcript"]["malformed_lines"], 0, "{report}");
    assert_eq!(contents(&s.stored()), [LESSON]);
}

#[test]
fn malformed_lines_are_skipped_and_counted() {
    require_model();
    let s = Session::new();
    let mut lines = vec!["{\"type\": \"user\", \"message\": ".to_owned(), "not json at all".to_owned()];
    lines.push(json!({"type": "assistant"}).to_string());
    lines.push(assistant(LESSON));
    lines.push("[]".to_owned());
    let transcript = s.transcript("bad-lines.jsonl", &lines);
    let ran = s.hook(input(&transcript), &["--json"]);
    assert_eq!(ran.stdout["transcript"]["lines"], 5, "{}", ran.stdout);
    assert_eq!(ran.stdout["transcript"]["malformed_lines"], 4, "{}", ran.stdout);
    assert_eq!(ran.stdout["failures"], json!([]), "malformed lines are not a failure");
    assert!(ran.stderr.contains("skipped 4 malformed transcript lines"), "{}", ran.stderr);
    assert_eq!(contents(&s.stored()), [LESSON]);
}

/// Forty decisions on unrelated subjects, so none is a semantic duplicate of another.
/// Forty decisions without a concrete detail (a number, path, flag or code span), so
/// [`topic_decision`] alone decides which carry one.
const TOPICS: [&str; 40] = [
    "to host the docs on a static site generator",
    "that invoices are rounded to whole cents",
    "to run database migrations before each deploy",
    "to page the on-call engineer only for customer impact",
    "that the mobile app supports the two latest iOS versions",
    "to store user avatars in object storage",
    "to write commit messages in the imperative mood",
    "that feature flags expire after ninety days",
    "to encrypt backups with a key kept offline",
    "to translate the checkout page into Portuguese",
    "that the API rate limit is six hundred requests per minute",
    "to review pull requests within one working day",
    "to pin the Rust toolchain for every crate",
    "that passwords are hashed with a memory-hard function",
    "to log request ids in every service",
    "to archive closed tickets after a year",
    "that the office closes between Christmas and New Year",
    "to retry webhook deliveries for up to three days",
    "to measure page load time with real user monitoring",
    "that the search index is rebuilt every night",
    "to keep the design tokens in a shared package",
    "that large refunds need a second approval",
    "to run the load test before every major release",
    "to name branches after their ticket number",
    "that the data warehouse keeps raw events for two years",
    "to send the newsletter on the first Monday of the month",
    "that GPU instances shut down after an idle hour",
    "to support dark mode in the admin dashboard",
    "to document every public endpoint with OpenAPI",
    "that interns pair with a mentor for their first month",
    "to compress images to WebP on upload",
    "that the SLA for enterprise tickets is four hours",
    "to schedule the security audit every spring",
    "to replace the cron jobs with a workflow engine",
    "that the analytics cookie banner defaults to reject",
    "to track technical debt as labelled issues",
    "that the staging cluster scales to zero at night",
    "to accept payments through SEPA direct debit",
    "that the style guide forbids abbreviations in names",
    "to publish release notes in the changelog file",
];

/// The decision of topic `i` of [`TOPICS`]: the first three carry a concrete detail.
fn topic_decision(i: usize) -> String {
    if i < 3 { format!("We decided {} from release 2.{i}.", TOPICS[i]) } else { format!("We decided {}.", TOPICS[i]) }
}

fn long_transcript(s: &Session) -> PathBuf {
    let noise = "x".repeat(20_000);
    let mut lines = Vec::new();
    for i in 0..TOPICS.len() {
        lines.push(user(&topic_decision(i)));
        lines.push(
            json!({"type": "assistant", "message": {"content": [
                {"type": "text", "text": "Noted, I will update the changelog."},
                {"type": "tool_use", "id": format!("t{i}"), "name": "Read", "input": {"file_path": noise}},
            ]}})
            .to_string(),
        );
    }
    s.transcript("long.jsonl", &lines)
}

#[test]
fn defect_14_a_long_transcript_keeps_the_most_memorable_and_says_what_was_dropped() {
    require_model();
    let s = Session::new();
    let transcript = long_transcript(&s);
    assert!(std::fs::metadata(&transcript).unwrap().len() > 800_000);
    let report = s.hook(input(&transcript), &["--json"]).stdout;
    assert_eq!(report["candidates"].as_array().map(Vec::len), Some(20), "{report}");
    assert_eq!(report["max_candidates"], 20, "{report}");
    let dropped: Vec<&str> =
        report["dropped"].as_array().expect("a list").iter().filter_map(|c| c["content"].as_str()).collect();
    let expected_dropped: Vec<String> = (3..23).map(topic_decision).collect();
    assert_eq!(dropped, expected_dropped, "the least memorable, in conversation order");
    // The three early decisions with a detail are kept over later plain ones.
    let expected: Vec<String> = (0..3).chain(23..40).map(topic_decision).collect();
    assert_eq!(contents(&s.stored()), expected.iter().map(String::as_str).collect::<Vec<_>>());

    // The hook output says how many were left out (and names no memory text for them).
    let s = Session::new();
    let transcript = long_transcript(&s);
    let ran = s.hook(input(&transcript), &[]);
    let context = ran.context();
    assert!(
        context.ends_with(
            "\n\nmemdedup: 20 more candidates over the cap of 20 (--max-candidates, [hook] max_candidates) \
             were not captured; the most memorable were kept."
        ),
        "{context}"
    );
    assert!(!context.contains(&topic_decision(3)), "{context}");
}

#[test]
fn defect_14_the_cap_is_a_flag_and_a_setting() {
    require_model();
    let s = Session::new();
    let transcript = long_transcript(&s);
    let report = s.hook(input(&transcript), &["--json", "--max-candidates", "4"]).stdout;
    assert_eq!((report["max_candidates"].as_u64(), report["dropped"].as_array().map(Vec::len)), (Some(4), Some(36)));
    let expected: Vec<String> = [0, 1, 2, 39].into_iter().map(topic_decision).collect();
    assert_eq!(contents(&s.stored()), expected.iter().map(String::as_str).collect::<Vec<_>>());

    let s = Session::new();
    let transcript = long_transcript(&s);
    let config = s.path("memdedup.toml");
    std::fs::write(&config, "[hook]\nmax_candidates = 2\n").expect("writable");
    let config = config.display().to_string();
    let report = s.hook(input(&transcript), &["--config", &config, "--json"]).stdout;
    assert_eq!(report["max_candidates"], 2, "{report}");
    assert_eq!(s.stored().len(), 2);
    // The flag wins over the setting.
    let s2 = Session::new();
    let transcript = long_transcript(&s2);
    let report = s2.hook(input(&transcript), &["--config", &config, "--json", "--max-candidates", "3"]).stdout;
    assert_eq!(report["max_candidates"], 3, "{report}");
    // Out of range is brought into range with a warning: the hook still exits 0.
    let s3 = Session::new();
    let transcript = long_transcript(&s3);
    let ran = s3.hook(input(&transcript), &["--json", "--max-candidates", "0"]);
    assert!(ran.stderr.contains("--max-candidates 0 is outside 1..=200; using 1"), "{}", ran.stderr);
    assert_eq!(ran.stdout["max_candidates"], 1);
}

/// The failure message each bad input gives, and the reason it is counted under.
#[test]
fn every_failure_exits_zero_with_hook_output_and_is_counted() {
    let s = Session::new();
    let missing = s.path("missing.jsonl");
    let cases: [(Vec<u8>, &str); 5] = [
        (Vec::new(), "no hook input on stdin"),
        (b"{not json".to_vec(), "the hook input is not JSON"),
        (b"{\"session_id\": \"s\"}".to_vec(), "the hook input has no transcript_path"),
        (input(&missing).into_bytes(), "cannot read the transcript"),
        (input(s.dir.path()).into_bytes(), "cannot read the transcript"),
    ];
    for (stdin, expected) in cases {
        let ran = s.hook(stdin, &[]);
        let context = ran.context();
        assert!(context.starts_with("No memories were captured before compaction.\n\nmemdedup: "), "{context}");
        assert!(context.contains(expected), "{expected}: {context}");
        assert!(ran.stderr.contains(expected), "logged: {}", ran.stderr);
    }
    assert_eq!(s.failure_counts(), json!({"input": 3, "transcript": 2}));
    let stats = memdedup().args(["--db", &s.db(), "stats"]).assert().success();
    let stats = String::from_utf8_lossy(&stats.get_output().stdout).into_owned();
    assert!(stats.contains("0 memories live in 0 namespaces, 0 duplicates skipped"), "{stats}");
    assert!(stats.contains("pre-compact hook failures: input 3, transcript 2"), "{stats}");
}

#[test]
fn a_transcript_that_is_not_utf8_captures_nothing_and_exits_zero() {
    let s = Session::new();
    let path = s.path("binary.jsonl");
    std::fs::write(&path, b"\xff\xfe\x00garbage\n\x80\x81\n").expect("writable");
    let ran = s.hook(input(&path), &["--json"]);
    assert_eq!(ran.stdout["transcript"]["malformed_lines"], 2, "{}", ran.stdout);
    assert_eq!(ran.stdout["candidates"], json!([]));
    let ran = s.hook(input(&path), &[]);
    assert_eq!(ran.context(), "No memories to capture before compaction.");
}

#[test]
fn a_store_that_cannot_open_still_gives_hook_output() {
    require_model();
    let s = Session::new();
    std::fs::write(s.db(), "this is not a SQLite database, it is plain text padding the header").expect("writable");
    let transcript = s.transcript("t.jsonl", &short_transcript());
    let ran = s.hook(input(&transcript), &[]);
    let context = ran.context();
    assert!(context.contains("memdedup: cannot open the memory store"), "{context}");
    assert!(!ran.stderr.contains("PostgreSQL") && !context.contains("PostgreSQL"), "no memory text:\n{context}");
}

#[test]
fn a_broken_config_file_is_one_store_failure() {
    let s = Session::new();
    let config = s.path("memdedup.toml");
    std::fs::write(&config, "[judge\nkind = ").expect("writable");
    let transcript = s.transcript("t.jsonl", &short_transcript());
    let config = config.display().to_string();
    let report = s.hook(input(&transcript), &["--config", &config, "--json"]).stdout;
    assert_eq!(report["analyser"], "offline", "{report}");
    assert_eq!(report["failures"].as_array().map(Vec::len), Some(1), "{report}");
    assert_eq!(report["failures"][0]["reason"], "store", "{report}");
    let message = report["failures"][0]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("cannot open the memory store: "), "{message}");
    assert!(message.contains("memdedup.toml"), "{message}");
    let ran = s.hook(input(&transcript), &["--config", &config]);
    assert!(ran.context().starts_with("No memories were captured before compaction.\n\nmemdedup: cannot open"));
}

#[test]
fn without_the_model_exact_checks_still_keep_duplicates_out() {
    let s = Session::new();
    let transcript = s.transcript("t.jsonl", &short_transcript());
    let no_model = s.path("no-model").display().to_string();
    let ran = s.hook(input(&transcript), &["--model-dir", &no_model]);
    let context = ran.context();
    assert!(context.starts_with("Auto-captured 4 memories"), "{context}");
    assert!(context.contains("memdedup: the embedding model is unavailable"), "{context}");
    let again = s.hook(input(&transcript), &["--model-dir", &no_model]);
    assert!(again.context().starts_with("Skipped 4 duplicates:"), "{}", again.context());
    assert_eq!(s.stored().len(), 4);
    // The second run stopped at the exact check every time, so nothing was degraded.
    assert_eq!(s.failure_counts(), json!({"embedder": 1}));
    assert!(!again.context().contains("\n\nmemdedup: "), "{}", again.context());
}

#[test]
fn an_open_stdin_is_cut_off_by_the_timeout() {
    let s = Session::new();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("memdedup"))
        .args(["--db", &s.db(), "hook", "pre-compact", "--timeout", "2"])
        .env_remove("MEMDEDUP_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("memdedup starts");
    let _stdin_kept_open = child.stdin.take();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waitable") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the hook ignored its 2 s timeout");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
    let mut stdout = Vec::new();
    child.stdout.take().expect("stdout").read_to_end(&mut stdout).expect("readable");
    let context = json(&stdout)["hookSpecificOutput"]["additionalContext"].as_str().unwrap_or_default().to_owned();
    assert!(context.contains("stopped after the 2 s time budget"), "{context}");
}

/// A config file choosing the fake as an OpenAI-compatible judge, without retries.
fn llm_config(s: &Session, fake: &FakeLlm) -> String {
    let path = s.path("memdedup.toml");
    let text = format!(
        "[judge]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-extractor\"\nmax_retries = 0\n",
        fake.base_url()
    );
    std::fs::write(&path, text).expect("writable");
    path.display().to_string()
}

fn facts_reply(facts: Value) -> FakeReply {
    FakeReply::text(json!({ "facts": facts }).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_facts_are_captured_in_the_namespace_of_their_category() {
    require_model();
    let fake = FakeLlm::start(Arc::new(|request: &FakeRequest| {
        if request.user.contains("tabs") {
            facts_reply(json!([
                {"content": "User prefers tabs for indentation", "category": "preference", "confidence": 0.9},
                {"content": "User guesses the build is slow", "category": "knowledge", "confidence": 0.2},
            ]))
        } else {
            facts_reply(json!([
                {"content": "User is migrating billing from Python to Rust", "category": "context", "confidence": 0.95},
                {"content": "User corrected that the staging database is Postgres 16", "category": "correction", "confidence": 0.8},
            ]))
        }
    }));
    let s = Session::new();
    let config = llm_config(&s, &fake);
    let lines = vec![
        user("I'm moving billing from Python to Rust."),
        assistant("Sounds good."),
        json!({"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "SECRET TOOL OUTPUT"},
            {"type": "text", "text": "Please use tabs."},
        ]}})
        .to_string(),
        assistant("Tabs it is."),
    ];
    let transcript = s.transcript("t.jsonl", &lines);
    let ran = s.hook(input(&transcript), &["--config", &config, "--json"]);
    let report = &ran.stdout;
    assert_eq!(report["analyser"], "llm", "{report}");
    assert_eq!(report["llm_calls"], 2, "{report}");
    assert_eq!(report["failures"], json!([]), "{report}");
    assert_eq!(fake.request_count(), 2);
    assert!(fake.requests().iter().all(|r| !r.user.contains("SECRET TOOL OUTPUT")));
    let mut stored = s.stored();
    stored.sort();
    let triple = |ns: &str, kind: &str, content: &str| (ns.to_owned(), kind.to_owned(), content.to_owned());
    assert_eq!(
        stored,
        [
            triple("context", "context", "User is migrating billing from Python to Rust"),
            triple("learnings", "correction", "User corrected that the staging database is Postgres 16"),
            triple("preferences", "preference", "User prefers tabs for indentation"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_llm_falls_back_to_the_offline_analyser() {
    require_model();
    for (reply, expected) in [
        (FakeReply::status(500, "down"), "the LLM was unavailable after 1 attempt"),
        (FakeReply::text("I cannot answer in JSON, sorry."), "the LLM's reply was not the expected JSON"),
    ] {
        let fake = FakeLlm::start(Arc::new(move |_: &FakeRequest| reply.clone()));
        let s = Session::new();
        let config = llm_config(&s, &fake);
        let transcript = s.transcript("t.jsonl", &short_transcript());
        let report = s.hook(input(&transcript), &["--config", &config, "--json"]).stdout;
        assert_eq!(report["analyser"], "offline", "{report}");
        assert_eq!(report["failures"][0]["reason"], "llm", "{report}");
        let message = report["failures"][0]["message"].as_str().unwrap_or_default();
        assert_eq!(message, format!("{expected}; the offline analyser was used"), "{report}");
        assert!(fake.request_count() >= 1);
        assert_eq!(s.stored().len(), 4, "the offline candidates are stored");
        assert_eq!(s.failure_counts(), json!({"llm": 1}));
        let ran = s.hook(input(&transcript), &["--config", &config]);
        assert!(ran.context().ends_with(&format!("\n\nmemdedup: {expected}; the offline analyser was used.")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_llm_is_abandoned_within_the_time_budget() {
    require_model();
    let fake = FakeLlm::start(Arc::new(|_: &FakeRequest| facts_reply(json!([])).delay(Duration::from_secs(30))));
    let s = Session::new();
    let config = llm_config(&s, &fake);
    let transcript = s.transcript("t.jsonl", &short_transcript());
    let started = Instant::now();
    let report = s.hook(input(&transcript), &["--config", &config, "--json", "--timeout", "6"]).stdout;
    assert!(started.elapsed() < Duration::from_secs(6), "took {:?}", started.elapsed());
    assert_eq!(report["analyser"], "offline", "{report}");
    let message = report["failures"][0]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("the LLM did not answer within 2 s"), "{report}");
    assert_eq!(s.stored().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_never_asks_the_configured_llm() {
    require_model();
    let fake = FakeLlm::scripted(vec![]);
    let s = Session::new();
    let config = llm_config(&s, &fake);
    let transcript = s.transcript("t.jsonl", &short_transcript());
    let report = s.hook(input(&transcript), &["--config", &config, "--json", "--offline"]).stdout;
    assert_eq!(report["analyser"], "offline", "{report}");
    assert_eq!(report["failures"], json!([]), "{report}");
    assert_eq!(fake.request_count(), 0);
    assert_eq!(s.stored().len(), 4);
}

#[test]
fn defect_17_hook_input_with_a_bom_and_a_timeout_out_of_range_still_capture_and_exit_0() {
    require_model();
    let s = Session::new();
    let transcript = s.transcript("t.jsonl", &short_transcript());
    let with_bom = format!("\u{feff}{}", input(&transcript));
    // `hook` asserts exit 0.
    let ran = s.hook(with_bom.clone(), &["--timeout", "100000"]);
    assert!(ran.context().starts_with("Auto-captured 4 memories before compaction"), "{}", ran.context());
    assert!(ran.stderr.contains("--timeout 100000 is outside 1..=600 s; using 600 s"), "{}", ran.stderr);
    assert_eq!(s.stored().len(), 4);
    // A budget of 0 becomes 1 s: the hook answers (exit 0) whatever it managed.
    let ran = s.hook(with_bom, &["--timeout", "0"]);
    assert!(ran.stderr.contains("--timeout 0 is outside 1..=600 s; using 1 s"), "{}", ran.stderr);
    assert!(ran.context().contains("memdedup"), "{}", ran.context());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_18_hook_judge_is_the_pair_judge_as_on_add_and_extractor_picks_the_llm() {
    require_model();
    let judges = |report: &Value| -> Vec<String> {
        let results = report["results"].as_array().expect("results");
        results.iter().map(|r| r["check"]["judge"].as_str().unwrap_or_default().to_owned()).collect()
    };
    // `--judge local` decides duplicates, as on `add`; the offline analyser finds candidates.
    for judge in ["local", "cosine"] {
        let s = Session::new();
        let transcript = s.transcript("t.jsonl", &short_transcript());
        let report = s.hook(input(&transcript), &["--json", "--judge", judge]).stdout;
        assert_eq!(report["analyser"], "offline", "{report}");
        assert_eq!(judges(&report), [judge; 4], "{report}");
    }
    // With an LLM configured, `--judge local` no longer means "offline": the LLM is asked.
    let fake = FakeLlm::start(Arc::new(|_: &FakeRequest| {
        facts_reply(
            json!([{"content": "User prefers tabs for indentation", "category": "preference", "confidence": 0.9}]),
        )
    }));
    let s = Session::new();
    let config = llm_config(&s, &fake);
    let transcript = s.transcript("t.jsonl", &short_transcript());
    let report = s.hook(input(&transcript), &["--config", &config, "--json", "--judge", "local"]).stdout;
    assert_eq!(report["analyser"], "llm", "{report}");
    assert_eq!(judges(&report), ["local"], "{report}");
    let asked = fake.request_count();
    assert!(asked >= 1);
    // `--extractor offline` never asks it.
    let s = Session::new();
    let config = llm_config(&s, &fake);
    let transcript = s.transcript("t.jsonl", &short_transcript());
    let report = s.hook(input(&transcript), &["--config", &config, "--json", "--extractor", "offline"]).stdout;
    assert_eq!(report["analyser"], "offline", "{report}");
    assert_eq!(fake.request_count(), asked);
    // `--extractor openai` with its URL and model, no config file.
    let s = Session::new();
    let transcript = s.transcript("t.jsonl", &short_transcript());
    let url = fake.base_url();
    let args = ["--json", "--extractor", "openai", "--extractor-url", &url, "--extractor-model", "m"];
    let report = s.hook(input(&transcript), &args).stdout;
    assert_eq!(report["analyser"], "llm", "{report}");
    // The former spelling still works, with a warning.
    let s = Session::new();
    let transcript = s.transcript("t.jsonl", &short_transcript());
    let ran = s.hook(input(&transcript), &["--json", "--judge", "openai", "--judge-url", &url, "--judge-model", "m"]);
    assert_eq!(ran.stdout["analyser"], "llm", "{}", ran.stdout);
    assert!(
        ran.stderr.contains("warning: --judge openai|anthropic is now --extractor openai|anthropic"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("warning: --judge-url is now --extractor-url"), "{}", ran.stderr);
}
