//! `memdedup hook pre-compact`: seed 004's PreCompactHandler for Claude Code. It reads the
//! hook input and the transcript, finds capture candidates (`analyze_content`), runs them
//! through the checker chain (`deduplicate_candidates`), stores the new ones
//! (`capture_candidates`) and prints the hook output.
//!
//! It never blocks the agent: whatever fails, it prints valid hook output saying briefly
//! what failed (never memory text), logs the failure on stderr, counts it in the store
//! (see [`crate::precompact::HOOK_FAILURE_NAMESPACE`]) and exits 0, within `--timeout`.

mod claude_transcript;
mod llm;
mod report;
mod session_start;

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use memdedup::crates::core::{CaptureCandidate, CaptureLimits, MAX_CAPTURE_CANDIDATES, analyze_conversation};
use memdedup::crates::store::Store;
use memdedup::{AddOutcome, CheckType, JudgeOverrides, MAX_HOOK_CANDIDATES, NewMemory, Scope};
use serde::Serialize;
use serde_json::Value;
use tokio::time::timeout_at;

use crate::checker::Checker;
use crate::cli::GlobalArgs;
use crate::cli::hook::{HookCommand, PreCompactArgs};
use crate::open::{config_file, open_store};
use crate::precompact::{HOOK_FAILURE_DOMAIN, HOOK_FAILURE_NAMESPACE};
use crate::verdict::warn_degraded;

use self::claude_transcript::read_transcript;

/// Runs one `hook` subcommand.
pub(crate) async fn run(global: &GlobalArgs, command: &HookCommand) -> Result<()> {
    match command {
        HookCommand::PreCompact(args) => pre_compact(global, args).await,
        HookCommand::SessionStart(args) => session_start::session_start(global, args).await,
    }
}

/// The most hook input read from stdin.
const MAX_HOOK_INPUT_BYTES: u64 = 1 << 20;
/// The most of the time budget kept for counting failures and closing the store.
const WRAP_UP: Duration = Duration::from_secs(2);

/// What a run without embeddings says.
const NO_EMBEDDINGS: &str = "the embedding model is unavailable, so only exact and recent checks ran";

/// One memory to capture and why.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Candidate {
    pub content: String,
    pub namespace: &'static str,
    pub kind: &'static str,
    /// The cue phrase of the offline analyser, or the LLM's category and confidence.
    pub why: String,
}

/// What went wrong; each is one count (per run) in the store under its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Failure {
    /// Stdin is empty, not JSON, or names no transcript.
    Input,
    /// The transcript cannot be read.
    Transcript,
    /// The LLM failed; the offline analyser was used instead.
    Llm,
    /// No embedding model: only the exact and recent checks ran.
    Embedder,
    /// The config file, the store or storing a candidate failed.
    Store,
    /// The time budget ran out.
    Timeout,
}

impl Failure {
    /// The reason it is counted under (`Store::record_skip`).
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Failure::Input => "input",
            Failure::Transcript => "transcript",
            Failure::Llm => "llm",
            Failure::Embedder => "embedder",
            Failure::Store => "store",
            Failure::Timeout => "timeout",
        }
    }
}

/// Everything one run did, filled in as it goes so a timeout still reports it.
#[derive(Default)]
pub(crate) struct Run {
    pub session_id: Option<String>,
    pub trigger: Option<String>,
    pub transcript: Option<report::TranscriptCounts>,
    /// `offline` or `llm`, once candidates were looked for.
    pub analyser: Option<&'static str>,
    pub llm_calls: usize,
    /// Facts of the LLM's replies that were invalid and skipped.
    pub llm_skipped_invalid: usize,
    /// Milliseconds spent reading the transcript and finding the candidates.
    pub analysis_ms: Option<u64>,
    pub candidates: Vec<Candidate>,
    /// Candidates found over the cap and not captured (the least memorable).
    pub dropped: Vec<Candidate>,
    /// The cap on candidates, once candidates were looked for.
    pub max_candidates: Option<usize>,
    pub outcomes: Vec<(String, Scope, AddOutcome)>,
    /// Each failure with a short message that holds no memory text.
    pub failures: Vec<(Failure, String)>,
    pub store: Option<Arc<Store>>,
}

impl Run {
    /// Records a failure; a kind already recorded is only logged again.
    fn fail(&mut self, failure: Failure, message: impl Into<String>) {
        let message = message.into();
        tracing::warn!(reason = failure.reason(), "pre-compact hook: {message}");
        if !self.failed(failure) {
            self.failures.push((failure, message));
        }
    }

    /// Records the cap and the candidates over it.
    fn note_dropped(&mut self, dropped: Vec<Candidate>, cap: usize) {
        if !dropped.is_empty() {
            tracing::info!(dropped = dropped.len(), cap, "pre-compact hook: candidates over the cap were not captured");
        }
        self.dropped = dropped;
        self.max_candidates = Some(cap);
    }

    fn failed(&self, failure: Failure) -> bool {
        self.failures.iter().any(|(f, _)| *f == failure)
    }
}

/// The time budget of `--timeout`, brought into [`TIMEOUT_RANGE`] (with a warning when it
/// was outside: a hook that exits 2 on a bad setting would block the agent).
fn time_budget(global: &GlobalArgs, asked: u64) -> u64 {
    let budget = asked.clamp(*TIMEOUT_RANGE.start(), *TIMEOUT_RANGE.end());
    if budget != asked {
        tracing::warn!(asked, budget, "pre-compact hook: --timeout out of range");
        if !global.quiet {
            eprintln!(
                "warning: --timeout {asked} is outside {}..={} s; using {budget} s",
                TIMEOUT_RANGE.start(),
                TIMEOUT_RANGE.end()
            );
        }
    }
    budget
}

/// The seconds `--timeout` may give.
const TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=600;

async fn pre_compact(global: &GlobalArgs, args: &PreCompactArgs) -> Result<()> {
    let started = Instant::now();
    let budget = time_budget(global, args.timeout);
    for spelling in args.deprecated_spellings() {
        tracing::warn!("pre-compact hook: {spelling}");
        if !global.quiet {
            eprintln!("warning: {spelling}");
        }
    }
    let end = tokio::time::Instant::from_std(started + Duration::from_secs(budget));
    let wrap_up = WRAP_UP.min(Duration::from_secs(budget) / 4);
    let mut run = Run::default();
    if timeout_at(end - wrap_up, pipeline(global, args, end - wrap_up, &mut run)).await.is_err() {
        run.fail(Failure::Timeout, format!("stopped after the {budget} s time budget"));
    }
    if timeout_at(end, count_failures(global, &mut run)).await.is_err() {
        tracing::warn!("pre-compact hook: the failures could not be counted in time");
    }
    let elapsed = started.elapsed();
    tracing::info!(
        candidates = run.candidates.len(),
        stored = run.outcomes.iter().filter(|(_, _, o)| o.stored.is_some()).count(),
        failures = run.failures.len(),
        elapsed_ms = elapsed.as_millis() as u64,
        "pre-compact hook done"
    );
    let output = if args.json { report::json_report(&run, elapsed) } else { report::hook_output(&run) };
    crate::output::emit(&format!("{output}\n"))
}

/// Reads, analyses, checks and stores; every failure is recorded in `run`.
async fn pipeline(global: &GlobalArgs, args: &PreCompactArgs, deadline: tokio::time::Instant, run: &mut Run) {
    let input = match read_hook_input().await.and_then(|bytes| parse_hook_input(&bytes)) {
        Ok(input) => input,
        Err(message) => return run.fail(Failure::Input, message),
    };
    run.session_id = input.session_id;
    run.trigger = input.trigger;
    let path = input.transcript_path;
    let shown = path.display().to_string();
    let reading = Instant::now();
    let transcript = match off_thread(move || read_transcript(&path)).await {
        Some(Ok(transcript)) => transcript,
        Some(Err(e)) => return run.fail(Failure::Transcript, format!("cannot read the transcript {shown}: {e}")),
        None => return run.fail(Failure::Transcript, format!("cannot read the transcript {shown}")),
    };
    if transcript.malformed > 0 {
        tracing::warn!("pre-compact hook: skipped {} malformed transcript lines", transcript.malformed);
    }
    run.transcript = Some(report::TranscriptCounts::of(&transcript));

    run.candidates = find_candidates(global, args, deadline, &transcript.messages, run).await;
    run.analysis_ms = Some(u64::try_from(reading.elapsed().as_millis()).unwrap_or(u64::MAX));
    if run.candidates.is_empty() {
        return;
    }
    let judge = args.pair_judge();
    let mut checker = match Checker::open(global, &judge).await {
        Ok(checker) => checker,
        Err(e) => {
            return run.fail(Failure::Store, format!("cannot open the memory store: {}", crate::format_chain(&e)));
        }
    };
    note_local(&checker, run);
    for candidate in run.candidates.clone() {
        let scope = match Scope::new(memdedup::DEFAULT_DOMAIN, candidate.namespace) {
            Ok(scope) => scope,
            Err(e) => {
                run.fail(Failure::Store, format!("a candidate was not stored: {e}"));
                continue;
            }
        };
        let memory = NewMemory::new(scope.clone(), candidate.content.clone()).with_kind(candidate.kind);
        let added = checker.add(memory).await;
        note_local(&checker, run);
        match added {
            Ok(outcome) => {
                warn_degraded(&outcome.check);
                for degraded in &outcome.check.degraded {
                    match degraded.check {
                        CheckType::Semantic => run.fail(Failure::Embedder, NO_EMBEDDINGS),
                        other => run.fail(Failure::Store, format!("the {} check failed open", other.label())),
                    }
                }
                run.outcomes.push((candidate.content, scope, outcome));
            }
            Err(e) => run.fail(Failure::Store, format!("a candidate was not stored: {e}")),
        }
    }
    if run.store.is_none() {
        // Client mode: the server stored them; nothing local to close.
        checker.close().await;
    }
}

/// Once the run works locally (from the start, or after the server failed): the store
/// failures are counted in and closed at the end, and a missing model is a failure.
fn note_local(checker: &Checker<'_>, run: &mut Run) {
    if let (None, Some(service)) = (&run.store, checker.local_service()) {
        run.store = Some(service.store().clone());
        if service.embedder().is_none() {
            run.fail(Failure::Embedder, NO_EMBEDDINGS);
        }
    }
}

/// The candidates of the LLM when one is chosen and answers within half the time left,
/// else of the offline analyser.
async fn find_candidates(
    global: &GlobalArgs,
    args: &PreCompactArgs,
    deadline: tokio::time::Instant,
    messages: &[memdedup::crates::core::ConversationMessage],
    run: &mut Run,
) -> Vec<Candidate> {
    let max_candidates = max_candidates(global, args);
    if !args.offline {
        match chat_model(global, args) {
            Ok(None) => {}
            Ok(Some(model)) => {
                let turns = llm::last_turns(messages);
                let budget = deadline.saturating_duration_since(tokio::time::Instant::now()) / 2;
                match tokio::time::timeout(budget, llm::extract(model, turns, max_candidates)).await {
                    Ok(Ok(found)) => {
                        run.analyser = Some("llm");
                        run.note_dropped(found.dropped, max_candidates);
                        run.llm_calls = found.calls;
                        run.llm_skipped_invalid = found.skipped_invalid;
                        tracing::info!(
                            calls = found.calls,
                            input_tokens = found.usage.input_tokens,
                            output_tokens = found.usage.output_tokens,
                            "pre-compact hook: LLM extraction done"
                        );
                        return found.candidates;
                    }
                    Ok(Err(e)) => {
                        run.fail(Failure::Llm, format!("{}; the offline analyser was used", llm::failure_summary(&e)))
                    }
                    Err(_) => run.fail(
                        Failure::Llm,
                        format!("the LLM did not answer within {} s; the offline analyser was used", budget.as_secs()),
                    ),
                }
            }
            Err(message) => run.fail(Failure::Llm, format!("{message}; the offline analyser was used")),
        }
    }
    run.analyser = Some("offline");
    let limits = CaptureLimits { max_candidates, ..CaptureLimits::default() };
    let analysis = analyze_conversation(messages, &limits);
    let candidate = |c: CaptureCandidate| Candidate {
        namespace: c.namespace(),
        kind: c.kind.memory_kind(),
        why: c.cue.to_owned(),
        content: c.content,
    };
    run.note_dropped(analysis.dropped.into_iter().map(candidate).collect(), max_candidates);
    analysis.candidates.into_iter().map(candidate).collect()
}

/// The cap on candidates: `--max-candidates` (brought into 1 to
/// [`MAX_HOOK_CANDIDATES`] with a warning, as `--timeout` is), else `[hook]
/// max_candidates`, else [`MAX_CAPTURE_CANDIDATES`] (a config file that cannot be read is
/// the store's failure, reported when it opens).
fn max_candidates(global: &GlobalArgs, args: &PreCompactArgs) -> usize {
    let cap = match args.max_candidates {
        Some(asked) => {
            let cap = asked.clamp(1, MAX_HOOK_CANDIDATES);
            if cap != asked {
                tracing::warn!(asked, cap, "pre-compact hook: --max-candidates out of range");
                if !global.quiet {
                    eprintln!("warning: --max-candidates {asked} is outside 1..={MAX_HOOK_CANDIDATES}; using {cap}");
                }
            }
            cap
        }
        None => match config_file(global).ok().and_then(|c| c.hook_max_candidates().ok().flatten()) {
            Some(configured) => configured,
            None => MAX_CAPTURE_CANDIDATES as u64,
        },
    };
    usize::try_from(cap).unwrap_or(MAX_CAPTURE_CANDIDATES)
}

/// The chat model of the extractor when an LLM is chosen (`--extractor`, then
/// `MEMDEDUP_JUDGE`, then `[judge] kind`); `None` for the offline analyser.
fn chat_model(
    global: &GlobalArgs,
    args: &PreCompactArgs,
) -> Result<Option<Arc<dyn memdedup::crates::llm::ChatModel>>, String> {
    let (kind, base_url, model) = args.extractor_choice();
    if kind.as_deref() == Some("offline") {
        return Ok(None);
    }
    let overrides = JudgeOverrides { kind, base_url, model, params: None };
    let describe = |e: &dyn std::fmt::Display| format!("the LLM extractor is misconfigured ({e})");
    // A config file that cannot be read is the store's failure, reported when it opens.
    let Ok(config) = config_file(global) else {
        return Ok(None);
    };
    match config.judge_settings_if_chosen(&overrides).map_err(|e| describe(&e))? {
        Some(settings) if !settings.kind.is_offline() => settings.chat_model().map(Some).map_err(|e| describe(&e)),
        _ => Ok(None),
    }
}

/// Counts each kind of failure once in the store: the one the run opened, else one
/// opened for this (not when opening it is what failed).
async fn count_failures(global: &GlobalArgs, run: &mut Run) {
    if run.failures.is_empty() {
        if let Some(store) = run.store.take() {
            store.close().await;
        }
        return;
    }
    let store = match run.store.take() {
        Some(store) => Some(store),
        None if run.failed(Failure::Store) => None,
        None => match config_file(global) {
            Ok(config) => open_store(global, &config).await.ok(),
            Err(_) => None,
        },
    };
    let Some(store) = store else {
        tracing::warn!("pre-compact hook: no store to count the failures in");
        return;
    };
    let scope = Scope::new(HOOK_FAILURE_DOMAIN, HOOK_FAILURE_NAMESPACE);
    let mut reasons: Vec<&'static str> = run.failures.iter().map(|(f, _)| f.reason()).collect();
    reasons.sort_unstable();
    reasons.dedup();
    if let Ok(scope) = scope {
        for reason in reasons {
            if let Err(e) = store.record_skip(&scope, reason).await {
                tracing::warn!("pre-compact hook: cannot count a failure: {e}");
            }
        }
    }
    store.close().await;
}

/// Stdin, up to one byte over [`MAX_HOOK_INPUT_BYTES`], read on a thread of its own so
/// the deadline applies even when stdin is never closed.
async fn read_hook_input() -> Result<Vec<u8>, String> {
    if std::io::stdin().is_terminal() {
        return Err("no hook input: stdin is a terminal".to_owned());
    }
    let read = off_thread(|| {
        let mut bytes = Vec::new();
        std::io::stdin().lock().take(MAX_HOOK_INPUT_BYTES + 1).read_to_end(&mut bytes).map(|_| bytes)
    })
    .await;
    match read {
        Some(Ok(bytes)) => Ok(bytes),
        Some(Err(e)) => Err(format!("cannot read the hook input on stdin: {e}")),
        None => Err("cannot read the hook input on stdin".to_owned()),
    }
}

/// What the hook input says.
#[derive(Debug, PartialEq)]
struct HookInput {
    transcript_path: PathBuf,
    session_id: Option<String>,
    trigger: Option<String>,
}

/// Reads Claude Code's hook input. Only `transcript_path` is required; other members
/// are used when they are strings and ignored otherwise. A `transcript_path` starting
/// with `~/` is in `$HOME`; a relative one is relative to `cwd` when it is given.
fn parse_hook_input(bytes: &[u8]) -> Result<HookInput, String> {
    if bytes.len() as u64 > MAX_HOOK_INPUT_BYTES {
        return Err(format!("the hook input is larger than {} MiB", MAX_HOOK_INPUT_BYTES >> 20));
    }
    // A byte-order mark (some Windows tools write one) is not part of the JSON.
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("no hook input on stdin".to_owned());
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("the hook input is not JSON: {e}"))?;
    let Value::Object(members) = value else {
        return Err("the hook input is not a JSON object".to_owned());
    };
    let text = |name: &str| members.get(name).and_then(Value::as_str).map(str::to_owned);
    if let Some(event) = text("hook_event_name").filter(|e| e != "PreCompact") {
        tracing::warn!("pre-compact hook: the hook input is for {event:?}, not PreCompact; capturing anyway");
    }
    let raw =
        text("transcript_path").filter(|p| !p.trim().is_empty()).ok_or("the hook input has no transcript_path")?;
    let mut path = match (raw.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(&raw),
    };
    if path.is_relative()
        && let Some(cwd) = text("cwd")
    {
        path = PathBuf::from(cwd).join(path);
    }
    Ok(HookInput { transcript_path: path, session_id: text("session_id"), trigger: text("trigger") })
}

/// Runs `work` on a thread of its own and waits for it without blocking the runtime; a
/// thread still blocked when the process ends does not hold it up. `None` when the thread
/// cannot be started or panics.
async fn off_thread<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (send, receive) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("memdedup-hook-io".to_owned())
        .spawn(move || {
            let _ = send.send(work());
        })
        .ok()?;
    receive.await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_input_needs_a_transcript_path_and_tolerates_the_rest() {
        let input = parse_hook_input(
            br#"{"session_id":"s1","transcript_path":"/t/a.jsonl","hook_event_name":"PreCompact","trigger":"auto","custom_instructions":"","cwd":"/w","extra":[1]}"#,
        )
        .unwrap();
        assert_eq!(
            input,
            HookInput {
                transcript_path: PathBuf::from("/t/a.jsonl"),
                session_id: Some("s1".to_owned()),
                trigger: Some("auto".to_owned())
            }
        );
        let input = parse_hook_input(br#"{"transcript_path":"t.jsonl","cwd":"/w","session_id":5}"#).unwrap();
        assert_eq!((input.transcript_path, input.session_id), (PathBuf::from("/w/t.jsonl"), None));
        for (bad, expected) in [
            (&b""[..], "no hook input on stdin"),
            (b" \n", "no hook input on stdin"),
            (b"{", "the hook input is not JSON"),
            (b"[]", "the hook input is not a JSON object"),
            (b"{\"session_id\":\"s\"}", "the hook input has no transcript_path"),
            (b"{\"transcript_path\":\" \"}", "the hook input has no transcript_path"),
        ] {
            let error = parse_hook_input(bad).unwrap_err();
            assert!(error.starts_with(expected), "{error}");
        }
        let bom =
            parse_hook_input(b"\xEF\xBB\xBF{\"transcript_path\":\"/t.jsonl\"}").expect("defect 17: a BOM is skipped");
        assert_eq!(bom.transcript_path, PathBuf::from("/t.jsonl"));
        let huge = vec![b' '; (MAX_HOOK_INPUT_BYTES + 1) as usize];
        assert!(parse_hook_input(&huge).unwrap_err().contains("larger than 1 MiB"));
    }

    #[test]
    fn failure_reasons_are_valid_names() {
        for failure in
            [Failure::Input, Failure::Transcript, Failure::Llm, Failure::Embedder, Failure::Store, Failure::Timeout]
        {
            let reason = failure.reason();
            assert!(reason.bytes().all(|b| b.is_ascii_lowercase()), "{reason}");
            assert_eq!(serde_json::to_value(failure).unwrap(), reason);
        }
    }
}
