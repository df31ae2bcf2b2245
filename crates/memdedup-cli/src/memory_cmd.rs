//! `memdedup check`, `add`, `list`, `show` and `stats`: the persistent memory store.

use std::path::Path;

use anyhow::{Context, Result, bail};
use memdedup::{ListFilter, Memory, MemoryId, NewMemory, Scope};
use serde_json::Value;

use crate::UsageError;
use crate::checker::Checker;
use crate::cli::{AddArgs, CheckArgs, GlobalArgs, JsonArgs, ListArgs, ShowArgs};
use crate::input::{parse_memory_id, read_text, without_bom};
use crate::open::{config_file, open_store, scope};
use crate::output::{emit, plural, snippet};
use crate::precompact::is_hook_failure_scope;
use crate::verdict::{add_json, add_line, verdict_line, warn_degraded, with_scope};

/// The text argument, or stdin for `-` (without a leading byte-order mark, which is
/// an encoding marker, not text).
fn text_arg(text: &str) -> Result<String> {
    if text == "-" { read_text(Path::new("-")).map(|t| without_bom(&t).to_owned()) } else { Ok(text.to_owned()) }
}

pub(crate) async fn check(global: &GlobalArgs, args: &CheckArgs) -> Result<()> {
    let scope = scope(&args.scope)?;
    let text = text_arg(&args.text)?;
    let mut checker = Checker::open(global, &args.judge).await?;
    let result = checker.check(&text, &scope).await;
    checker.close().await;
    let result = result?;
    warn_degraded(&result);
    if args.json {
        emit(&format!("{}\n", with_scope(&result, &scope)))?;
    } else {
        emit(&format!("{}\n", verdict_line(&result, &scope)))?;
    }
    Ok(())
}

pub(crate) async fn add(global: &GlobalArgs, args: &AddArgs) -> Result<()> {
    let scope = scope(&args.scope)?;
    let text = text_arg(&args.text)?;
    let mut memory = NewMemory::new(scope.clone(), text).with_kind(&args.kind);
    if let Some(title) = &args.title {
        memory = memory.with_title(title);
    }
    let mut checker = Checker::open(global, &args.judge).await?;
    let outcome = checker.add(memory).await;
    checker.close().await;
    let outcome = outcome?;
    warn_degraded(&outcome.check);
    if args.json {
        emit(&format!("{}\n", add_json(&outcome, &scope)))?;
    } else {
        emit(&format!("{}\n", add_line(&outcome, &scope)))?;
    }
    Ok(())
}

pub(crate) async fn list(global: &GlobalArgs, args: &ListArgs) -> Result<()> {
    if let Some(ns) = &args.namespace {
        Scope::namespace(ns).map_err(|e| UsageError(e.to_string()))?;
    }
    let config = config_file(global)?;
    let store = open_store(global, &config).await?;
    let filter = ListFilter {
        domain: args.domain.clone(),
        namespace: args.namespace.clone(),
        include_deprecated: args.all,
        after: args.after.map(MemoryId::new),
        limit: args.limit,
        ..ListFilter::default()
    };
    let memories = store.list(&filter).await?;
    if args.json {
        let values: Vec<Value> = memories.iter().map(memory_json).collect();
        emit(&format!("{}\n", Value::Array(values)))?;
    } else if memories.is_empty() {
        emit("no memories\n")?;
    } else {
        let mut out = String::new();
        for m in &memories {
            let flag = if m.deprecated { " [deprecated]" } else { "" };
            out.push_str(&format!(
                "{:>6}  {:<28}  {:<10}  {}{flag}\n",
                m.id.get(),
                m.scope.to_string(),
                m.kind,
                snippet(&m.content, 60)
            ));
        }
        emit(&out)?;
    }
    store.close().await;
    Ok(())
}

pub(crate) fn memory_json(m: &Memory) -> Value {
    let mut value = serde_json::to_value(m).unwrap_or(Value::Null);
    value["urn"] = Value::String(m.urn());
    value
}

pub(crate) async fn show(global: &GlobalArgs, args: &ShowArgs) -> Result<()> {
    let (id, scope) = parse_memory_id(&args.id)?;
    let config = config_file(global)?;
    let store = open_store(global, &config).await?;
    let Some(memory) = store.get(id).await? else { bail!("no memory with id {id} in {}", store.location()) };
    if let Some(scope) = scope
        && scope != memory.scope
    {
        bail!("{} does not exist: memory {id} is {}", args.id, memory.urn());
    }
    if args.json {
        emit(&format!("{}\n", memory_json(&memory)))?;
    } else {
        emit(&show_text(&memory))?;
    }
    store.close().await;
    Ok(())
}

fn show_text(m: &Memory) -> String {
    let mut out = format!("{}\n", m.urn());
    let mut field = |name: &str, value: String| out.push_str(&format!("  {name:<17}{value}\n"));
    field("kind", m.kind.clone());
    if let Some(title) = &m.title {
        field("title", title.clone());
    }
    field("lifecycle", m.lifecycle.as_str().to_owned());
    field("helpful/harmful", format!("{}/{}", m.helpful, m.harmful));
    field("occurrences", m.occurrence_count.to_string());
    field("content hash", m.content_hash.to_string());
    field("deprecated", m.deprecated.to_string());
    if let Some(survivor) = m.merged_into {
        field("merged into", m.scope.urn(survivor));
    }
    field("created", m.created_at.to_rfc3339());
    field("updated", m.updated_at.to_rfc3339());
    if !m.metadata.is_empty() {
        field("metadata", Value::Object(m.metadata.clone()).to_string());
    }
    out.push('\n');
    out.push_str(&m.content);
    if !m.content.ends_with('\n') {
        out.push('\n');
    }
    out
}

pub(crate) async fn stats(global: &GlobalArgs, args: &JsonArgs) -> Result<()> {
    let config = config_file(global)?;
    let store = open_store(global, &config).await?;
    let stats = store.stats().await.context("cannot read statistics")?;
    if args.json {
        emit(&format!("{}\n", serde_json::to_value(&stats)?))?;
    } else {
        let mut out = format!("{} database {}\n", stats.backend, stats.location);
        // The hook's failure counters share the skip table; they are not duplicates.
        let (hook, namespaces): (Vec<_>, Vec<_>) =
            stats.namespaces.iter().partition(|n| is_hook_failure_scope(&n.domain, &n.namespace));
        let live: u64 = namespaces.iter().map(|n| n.live).sum();
        let skipped: u64 = namespaces.iter().flat_map(|n| n.skipped.values()).sum();
        out.push_str(&format!(
            "{} live in {}, {} skipped, {} cached embeddings\n",
            plural(usize::try_from(live).unwrap_or(usize::MAX), "memory"),
            plural(namespaces.len(), "namespace"),
            plural(usize::try_from(skipped).unwrap_or(usize::MAX), "duplicate"),
            stats.cached_embeddings
        ));
        for n in &namespaces {
            let reasons: Vec<String> = n.skipped.iter().map(|(reason, count)| format!("{reason} {count}")).collect();
            let reasons = if reasons.is_empty() { String::new() } else { format!("; skipped: {}", reasons.join(", ")) };
            let pending =
                if n.unembedded == 0 { String::new() } else { format!(", {} awaiting a vector", n.unembedded) };
            out.push_str(&format!(
                "  {}/{}: {} live, {} deprecated{pending}{reasons}\n",
                n.domain, n.namespace, n.live, n.deprecated
            ));
        }
        for n in hook.iter().filter(|n| !n.skipped.is_empty()) {
            let reasons: Vec<String> = n.skipped.iter().map(|(reason, count)| format!("{reason} {count}")).collect();
            out.push_str(&format!("pre-compact hook failures: {}\n", reasons.join(", ")));
        }
        let pending: u64 = stats.namespaces.iter().map(|n| n.unembedded).sum();
        if pending > 0 {
            out.push_str(&format!(
                "{} stored while the embedder was down: semantic checks miss them until `memdedup reembed`\n",
                plural(usize::try_from(pending).unwrap_or(usize::MAX), "memory")
            ));
        }
        emit(&out)?;
    }
    store.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defect_11_urn_parsing_rejects_path_tricks() {
        let (id, scope) = parse_memory_id("memdedup://global/decisions/12").unwrap();
        assert_eq!((id, scope), (MemoryId::new(12), Some(Scope::new("global", "decisions").unwrap())));
        assert_eq!(parse_memory_id("7").unwrap(), (MemoryId::new(7), None));
        for raw in [
            "memdedup://global/decisions/1/../2",
            "memdedup://global/decisions/../2",
            "memdedup://global/../decisions/2",
            "memdedup://global/decisions//2",
            "memdedup://global/decisions/2/",
            "memdedup:///decisions/2",
            "memdedup://2",
            "memdedup://global/decisions/+2",
            "memdedup://global/decisions/-2",
            "memdedup://global/decisions/ 2",
            "memdedup://global/decisions/%32",
            "+2",
            "",
        ] {
            let err = parse_memory_id(raw).unwrap_err();
            assert!(err.downcast_ref::<UsageError>().is_some(), "{raw}: {err}");
        }
    }
}
