//! `memdedup hook session-start`: puts the project's most useful memories back into the
//! agent's context when a Claude Code session starts (a SessionStart hook). Claude Code
//! adds `hookSpecificOutput.additionalContext` of a SessionStart hook to the model's
//! context; the hook never blocks the session: whatever fails, it prints valid output
//! and exits 0.

use std::io::{IsTerminal, Read};

use anyhow::Result;
use memdedup::crates::core::{FactView, default_token_counter, format_context};
use memdedup::crates::store::{Fact, Store};
use memdedup::{ListFilter, Memory, Scope};
use serde::Serialize;
use serde_json::{Value, json};

use super::{MAX_HOOK_INPUT_BYTES, off_thread};
use crate::cli::GlobalArgs;
use crate::cli::hook::SessionStartArgs;
use crate::open::{config_file, open_store};
use crate::output::snippet;

/// The namespaces recalled, in the order they are given, with their heading. Lessons
/// (`learnings`, `patterns`) share one section.
const SECTIONS: [(&str, &[&str]); 4] = [
    ("What the user told us", &["context"]),
    ("Decisions", &["decisions"]),
    ("Preferences", &["preferences"]),
    ("Lessons", &["learnings", "patterns"]),
];
/// Most memories of one namespace read (the most used are kept).
const MAX_READ_PER_NAMESPACE: usize = 1000;
/// Longest memory text shown, in characters (longer ones are cut with `…`).
const MAX_MEMORY_CHARS: usize = 400;
/// The share of the budget the user's facts and profile may take.
const FACTS_SHARE: usize = 4;

/// What the hook recalled, for `--json` and the tests.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Recall {
    /// The text given to the agent.
    pub context: String,
    /// Its size in cl100k_base tokens.
    pub tokens: usize,
    /// The budget.
    pub max_tokens: usize,
    /// Memories shown, by id.
    pub shown: Vec<i64>,
    /// Live memories of the recalled namespaces left out for the budget.
    pub left_out: usize,
    /// Facts about the user shown (the profile counts as one).
    pub facts: usize,
    /// What failed, if anything.
    pub error: Option<String>,
}

pub(crate) async fn session_start(global: &GlobalArgs, args: &SessionStartArgs) -> Result<()> {
    if let Some(event) = read_event().await.filter(|e| e != "SessionStart") {
        tracing::warn!("session-start hook: the hook input is for {event:?}, not SessionStart; recalling anyway");
    }
    let max_tokens = args.max_tokens.clamp(1, 100_000);
    let mut recall = Recall { max_tokens, ..Recall::default() };
    if let Err(error) = gather(global, args, &mut recall).await {
        tracing::warn!(%error, "session-start hook: no memories recalled");
        recall.error = Some(format!("{error:#}"));
    }
    let output = if args.json { serde_json::to_value(&recall)? } else { hook_output(&recall) };
    crate::output::emit(&format!("{output}\n"))
}

/// The hook's JSON: the recalled text as additional context, and a one-line note for the
/// user (`systemMessage`) saying what was recalled or what failed.
fn hook_output(recall: &Recall) -> Value {
    let note = match &recall.error {
        Some(error) => format!("memdedup: no memories recalled ({error})"),
        None if recall.context.is_empty() => return json!({}),
        None => format!(
            "memdedup: recalled {} {} and {} {} ({} tokens){}",
            recall.shown.len(),
            if recall.shown.len() == 1 { "memory" } else { "memories" },
            recall.facts,
            if recall.facts == 1 { "fact" } else { "facts" },
            recall.tokens,
            if recall.left_out > 0 { format!("; {} left out for the budget", recall.left_out) } else { String::new() }
        ),
    };
    if recall.context.is_empty() {
        return json!({"systemMessage": note});
    }
    json!({
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": recall.context},
        "systemMessage": note,
    })
}

/// The hook input's `hook_event_name`, when stdin holds a hook input (it is optional).
async fn read_event() -> Option<String> {
    if std::io::stdin().is_terminal() {
        return None;
    }
    let bytes = off_thread(|| {
        let mut bytes = Vec::new();
        std::io::stdin().lock().take(MAX_HOOK_INPUT_BYTES).read_to_end(&mut bytes).map(|_| bytes)
    })
    .await?
    .ok()?;
    let value: Value = serde_json::from_slice(bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes)).ok()?;
    value.get("hook_event_name").and_then(Value::as_str).map(str::to_owned)
}

/// How much a memory has been used: seen again (each duplicate skipped counts) and
/// marked helpful, less marked harmful.
fn use_score(memory: &Memory) -> i64 {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    count(memory.occurrence_count)
        .saturating_add(count(memory.helpful).saturating_mul(2))
        .saturating_sub(count(memory.harmful))
}

async fn gather(global: &GlobalArgs, args: &SessionStartArgs, recall: &mut Recall) -> Result<()> {
    let config = config_file(global)?;
    let store = open_store(global, &config).await?;
    let result = fill(&store, args, recall).await;
    store.close().await;
    result
}

async fn fill(store: &Store, args: &SessionStartArgs, recall: &mut Recall) -> Result<()> {
    let counter = default_token_counter();
    let budget = recall.max_tokens;
    let mut parts: Vec<String> = Vec::new();
    let intro = "Memories of this project, kept by memdedup (most used first):";
    let mut used = counter.count(intro) + 2;

    // The user's profile and facts first, within a share of the budget.
    let facts_scope = Scope::new(&args.domain, memdedup::DEFAULT_NAMESPACE)?;
    let profile = store.profile(&facts_scope).await?;
    let facts: Vec<Fact> = store.list_facts(&facts_scope).await?;
    let views: Vec<FactView<'_>> = facts.iter().map(Fact::view).collect();
    let about = format_context(&profile, &views, budget / FACTS_SHARE, counter);
    if !about.trim().is_empty() {
        recall.facts = views.iter().filter(|f| about.contains(f.content)).count() + usize::from(!profile.is_empty());
        used += counter.count(&about);
        parts.push(about.trim_end().to_owned());
    }

    for (heading, namespaces) in SECTIONS {
        let mut memories = Vec::new();
        for namespace in namespaces {
            let filter = ListFilter {
                domain: Some(args.domain.clone()),
                namespace: Some((*namespace).to_owned()),
                limit: MAX_READ_PER_NAMESPACE,
                ..ListFilter::default()
            };
            memories.extend(store.list(&filter).await?);
        }
        // Most used first; of equals, the newer.
        memories.sort_by_key(|m| (std::cmp::Reverse(use_score(m)), std::cmp::Reverse(m.id)));
        let header = format!("## {heading}");
        let mut lines = Vec::new();
        let mut section_tokens = counter.count(&header) + 1;
        for memory in &memories {
            let line = format!("- {}", snippet(&memory.content, MAX_MEMORY_CHARS));
            let cost = counter.count(&line) + 1;
            if used + section_tokens + cost > budget {
                recall.left_out += 1;
                continue;
            }
            section_tokens += cost;
            lines.push(line);
            recall.shown.push(memory.id.get());
        }
        if !lines.is_empty() {
            used += section_tokens;
            parts.push(format!("{header}\n{}", lines.join("\n")));
        }
    }
    if !parts.is_empty() {
        recall.context = format!("{intro}\n\n{}", parts.join("\n\n"));
        recall.tokens = counter.count(&recall.context);
    }
    Ok(())
}
