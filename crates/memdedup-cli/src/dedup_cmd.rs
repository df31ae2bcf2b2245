//! `memdedup dedup`: assisted conceptual dedup with a judge (seed 003).

use std::io::IsTerminal;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use memdedup::{
    CachedEmbedder, DedupOptions, Deduplicator, Embedder, JudgeOverrides, Progress, RunReport, Scope, TextChoice,
};

use crate::UsageError;
use crate::cli::GlobalArgs;
use crate::cli::dedup::DedupArgs;
use crate::input::parse_memory_id;
use crate::open::{config_file, model_dir, open_store};
use crate::output::{emit, plural, snippet};
use crate::precompact::is_hook_failure_scope;

pub(crate) async fn run(global: &GlobalArgs, args: &DedupArgs) -> Result<()> {
    let config = config_file(global)?;
    let overrides = JudgeOverrides {
        kind: args.judge.judge.clone(),
        base_url: args.judge.judge_url.clone(),
        model: args.judge.judge_model.clone(),
        params: args.judge_params.clone(),
    };
    let mut settings = config.judge_settings(&overrides)?;
    if global.model_dir.is_some() {
        settings.model_dir = model_dir(global, &config)?;
    }
    let judge = settings.build()?;
    let mut options = DedupOptions::default();
    if let Some(hint) = judge.default_min_confidence() {
        options.rules.min_confidence_hint = hint;
    }
    config.apply_assist_options(&mut options)?;
    apply_flags(args, &mut options);
    options.validate().map_err(|e| UsageError(e.to_string()))?;

    let mut scopes = if args.all_namespaces {
        Vec::new()
    } else {
        vec![Scope::new(&args.domain, &args.namespace).map_err(|e| UsageError(e.to_string()))?]
    };
    let id = args.id.as_deref().map(parse_memory_id).transpose()?;
    let store = open_store(global, &config).await?;
    if args.all_namespaces {
        for namespace in store.stats().await.context("cannot list the namespaces")?.namespaces {
            // The pre-compact hook's failure counters hold no memories.
            if !is_hook_failure_scope(&namespace.domain, &namespace.namespace) {
                scopes.push(Scope::new(&namespace.domain, &namespace.namespace)?);
            }
        }
    }
    if let Some((id, urn_scope)) = id {
        let Some(memory) = store.get(id).await? else { bail!("no memory with id {id} in {}", store.location()) };
        if memory.deprecated {
            bail!(
                "memory {id} is deprecated (merged into {:?}); nothing to decide",
                memory.merged_into.map(|m| m.get())
            );
        }
        if urn_scope.is_some_and(|s| s != memory.scope) {
            bail!("memory {id} is {}", memory.urn());
        }
        options.only_id = Some(id);
        scopes = vec![memory.scope];
    }
    let embedder = crate::open::local_embedder(&config, model_dir(global, &config)?.as_deref(), false)?
        .context("assisted dedup needs the embedding model for its candidates")?;
    let embedder: std::sync::Arc<dyn Embedder> = std::sync::Arc::new(CachedEmbedder::new(embedder, store.clone()));

    let bar = progress_bar(global.quiet);
    let shown = bar.clone();
    let dedup = Deduplicator::new(store.clone(), embedder, judge, options)
        .map_err(|e| UsageError(e.to_string()))?
        .with_progress(move |p: &Progress| {
            shown.set_message(format!(
                "{} pass {} ({}): {}/{} judge calls, {} merged",
                p.scope,
                p.pass,
                p.mode.as_str(),
                p.batches_done,
                p.batches,
                p.merged
            ));
        });
    let result = dedup.run_scopes(&scopes).await;
    bar.finish_and_clear();
    store.close().await;
    let report = result?;
    if args.json {
        emit(&format!("{}\n", serde_json::to_value(&report)?))?;
    } else {
        emit(&summary(&report, &undo_flags(global)))?;
    }
    // Judged by the calls, not the counts: memories without candidates are verified
    // without asking the judge, which says nothing about whether the judge works.
    let failed_calls: usize = report.passes.iter().map(|p| p.failed_batches).sum();
    if report.judge_calls > 0 && failed_calls as u64 == report.judge_calls {
        bail!(
            "every judge call failed ({}); the memories stay unverified for the next run",
            report.errors.first().map_or("no detail", String::as_str)
        );
    }
    for error in report.errors.iter().take(3) {
        tracing::warn!("{error}");
    }
    Ok(())
}

fn apply_flags(args: &DedupArgs, options: &mut DedupOptions) {
    let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    if let Some(n) = args.limit {
        options.limit = Some(size(n));
    }
    if let Some(n) = args.batch_size {
        options.batch_size = size(n);
    }
    if let Some(n) = args.max_candidates {
        options.max_candidates = size(n);
    }
    if let Some(f) = args.min_sim {
        options.min_sim = f;
    }
    if let Some(n) = args.max_passes {
        options.max_passes = size(n);
    }
    if args.single_pass {
        options.max_passes = 1;
    }
    if let Some(n) = args.in_flight {
        options.in_flight = size(n);
    }
    if let Some(n) = args.max_attempts {
        options.max_attempts = u32::try_from(n).unwrap_or(u32::MAX);
    }
    if let Some(f) = args.min_confidence {
        options.rules.min_confidence_hint = f;
    }
    options.dry_run = args.scan;
}

/// A spinner on stderr while the judge works, unless quiet or not a terminal.
fn progress_bar(quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar.set_message("finding candidates");
    bar
}

fn text_source(choice: &TextChoice) -> String {
    match choice {
        TextChoice::Canonical => "the judge's canonical text".to_owned(),
        TextChoice::Existing { from, rejected_because } => {
            format!("memory {from}'s text (the canonical text was not used: {rejected_because})")
        }
    }
}

/// The human-readable run summary.
/// The global flags that chose the store (`--db`, `--config`), as a pasted `undo` needs
/// them, shell-quoted; a database URL's password is replaced, and the note says so.
pub(crate) fn undo_flags(global: &GlobalArgs) -> (String, &'static str) {
    let mut flags = String::new();
    let mut note = "";
    if let Some(config) = &global.config {
        flags.push_str(&format!(" --config {}", shell_quote(&config.display().to_string())));
    }
    if let Some(db) = &global.db {
        let redacted = memdedup::DbLocation::parse(db).map(|l| l.redacted()).unwrap_or_default();
        let shown = if redacted.contains("***") {
            note = "  (put the database password back)";
            redacted
        } else {
            db.clone()
        };
        flags.push_str(&format!(" --db {}", shell_quote(&shown)));
    }
    (flags, note)
}

/// `value` as one shell word: as is when it holds only safe characters, else single-quoted.
fn shell_quote(value: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_./:@%+=,-~".contains(c);
    if !value.is_empty() && value.chars().all(safe) {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', "'\\''"))
    }
}

fn summary(report: &RunReport, (flags, note): &(String, &str)) -> String {
    let mut out = String::new();
    if report.dry_run {
        out.push_str(&format!(
            "dry run {} (nothing written): the judge confirms {}\n",
            report.run_id,
            plural(report.proposals.len(), "group")
        ));
        for (i, p) in report.proposals.iter().enumerate() {
            let absorbed: Vec<String> = p.absorbed.iter().map(ToString::to_string).collect();
            out.push_str(&format!(
                "group {}: memory {} would absorb {} (confidence {:.2})\n  reason: {}\n  text: {}\n  from: {}\n",
                i + 1,
                p.survivor,
                absorbed.join(", "),
                p.confidence,
                p.reason,
                snippet(&p.final_text, 200),
                text_source(&p.text)
            ));
        }
    } else {
        out.push_str(&format!(
            "run {}: {} merged ({} absorbed)\n",
            report.run_id,
            plural(report.merged as usize, "group"),
            plural(report.absorbed as usize, "memory")
        ));
        for m in &report.merges {
            let absorbed: Vec<String> = m.absorbed.iter().map(ToString::to_string).collect();
            out.push_str(&format!(
                "  merge {}: memory {} absorbed {} (confidence {:.2}; {}): {}\n",
                m.merge_id,
                m.survivor,
                absorbed.join(", "),
                m.confidence,
                text_source(&m.text),
                m.reason
            ));
        }
    }
    out.push_str(&format!(
        "processed {}, marked verified {}, skipped {}, failed {}, retryable {}{}\n",
        report.processed,
        report.marked_verified,
        report.skipped,
        report.failed,
        report.retryable,
        if report.conflicts > 0 { format!(", changed meanwhile {}", report.conflicts) } else { String::new() }
    ));
    let modes: Vec<&str> = report.passes.iter().map(|p| p.mode.as_str()).collect();
    out.push_str(&format!(
        "{} ({}), {}, {} input + {} output tokens\n",
        plural(report.passes.len(), "pass"),
        modes.join(", "),
        plural(report.judge_calls as usize, "judge call"),
        report.tokens.input_tokens,
        report.tokens.output_tokens
    ));
    if !report.notes.is_empty() {
        out.push_str(&format!("judge notes ({}), not merged:\n", report.notes.len()));
        for note in &report.notes {
            out.push_str(&format!("  {note}\n"));
        }
    }
    for memory in &report.exhausted {
        out.push_str(&format!(
            "gave up on memory {} after {}: {}\n",
            memory.id,
            plural(memory.attempts as usize, "failed attempt"),
            memory.last_error.as_deref().unwrap_or("no error recorded")
        ));
    }
    if !report.dry_run && report.merged > 0 {
        out.push_str(&format!("undo with: memdedup{flags} undo --run {}{note}\n", report.run_id));
    }
    out
}
