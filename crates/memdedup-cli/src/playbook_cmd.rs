//! `memdedup playbook dedup`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use memdedup::{DedupReport, Playbook, Threshold};

use crate::judging::{Judging, linkage_name};
use serde_json::json;

use crate::UsageError;
use crate::cli::{GlobalArgs, PlaybookDedupArgs};
use crate::input::{display_name, read_text, without_bom};
use crate::output::{emit, plural, score, write_output};
use crate::progress::embedding_bar;

/// Where the deduplicated playbook goes.
enum Destination {
    Stdout,
    File(PathBuf),
    Nowhere,
}

pub(crate) async fn run(global: &GlobalArgs, args: &PlaybookDedupArgs) -> Result<()> {
    let destination = match (&args.output, args.in_place, args.dry_run) {
        (_, _, true) => Destination::Nowhere,
        (Some(out), _, false) => Destination::File(out.clone()),
        (None, true, false) => Destination::File(args.file.clone()),
        (None, false, false) => Destination::Stdout,
    };
    if args.in_place && args.file == std::path::Path::new("-") {
        return Err(UsageError("--in-place needs a file, not `-` (stdin): use -o OUT".into()).into());
    }
    if args.json && matches!(destination, Destination::Stdout) {
        return Err(UsageError(
            "--json prints the report on stdout: choose -o OUT, --in-place or --dry-run for the playbook".into(),
        )
        .into());
    }
    let name = display_name(&args.file);
    let text = read_text(&args.file)?;
    let playbook = Playbook::parse(without_bom(&text)).with_context(|| format!("cannot read playbook {name}"))?;
    let threshold = Threshold::resolve(args.threshold);
    if args.judging.pair.judge.as_deref().is_some_and(|j| j.trim().eq_ignore_ascii_case("learned")) {
        return Err(UsageError(
            "playbook dedup takes --judge cosine or local; the learned judge decides scan, check, add and dedup"
                .to_owned(),
        )
        .into());
    }
    let (judge, linkage) = crate::judging::from_args(global, &args.judging)?;
    let judging = Judging { local: judge.is_some(), learned: false, linkage };
    let names: Vec<String> = playbook.entries().iter().map(|(_, e)| e.name.clone()).collect();
    let embedder = crate::open::collection_embedder(global).await?;
    let bar = embedding_bar(playbook.len(), global.quiet);
    let outcome = match embedder {
        Ok(embedder) => {
            let progress = |done: usize, total: usize| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            };
            let options = memdedup::PlaybookDedupOptions { threshold, judge: judge.clone(), linkage };
            memdedup::deduplicate_playbook_with(&playbook, embedder.as_ref(), options, &progress).await
        }
        Err(e) => Err(e),
    };
    bar.finish_and_clear();
    let (output_text, report, skipped) = match outcome {
        Ok(outcome) if outcome.report.plan.is_empty() => (text.clone(), outcome.report, None),
        Ok(outcome) => (outcome.playbook.to_json_pretty(), outcome.report, None),
        Err(e) if args.fail_open && e.is_unavailable() => {
            tracing::warn!("deduplication skipped, playbook left unchanged: {e}");
            let report = DedupReport {
                model: String::new(),
                threshold,
                entries_before: playbook.len(),
                entries_after: playbook.len(),
                plan: Default::default(),
                non_canonical_sections: playbook.non_canonical_sections(),
                embedded: 0,
                refused: Vec::new(),
                rejected: Vec::new(),
            };
            (text.clone(), report, Some(e.to_string()))
        }
        Err(e) if e.is_unavailable() => {
            return Err(anyhow::Error::new(e).context("cannot deduplicate: the embedding model is unavailable (use --fail-open to pass the playbook through unchanged)"));
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot deduplicate {name}"))),
    };
    let written = match &destination {
        Destination::File(path) => {
            write_output(path, &output_text)?;
            Some(path.display().to_string())
        }
        Destination::Stdout => {
            emit(&output_text)?;
            None
        }
        Destination::Nowhere => None,
    };
    if args.json {
        let mut json = report_json(&name, written.as_deref(), args.dry_run, &report, skipped.as_deref());
        if !judging.is_plain()
            && let Some(object) = json.as_object_mut()
        {
            object.extend(judging_json(judging, &report, &names));
        }
        emit(&format!("{json}\n"))?;
    } else if !global.quiet || matches!(destination, Destination::Nowhere) {
        let mut human = report_human(&report, written.as_deref(), args.dry_run, skipped.as_deref());
        if !judging.is_plain() {
            human.push_str(&judging_human(judging, &report, &names));
        }
        if matches!(destination, Destination::Stdout) { eprint!("{human}") } else { emit(&human)? }
    }
    Ok(())
}

/// The judge's part of the `--json` report: judge, linkage, pairs kept apart, links
/// refused (entries by name).
fn judging_json(judging: Judging, r: &DedupReport, names: &[String]) -> serde_json::Map<String, serde_json::Value> {
    let rejected: Vec<_> = r
        .rejected
        .iter()
        .map(|p| {
            json!({"a": names[p.a], "b": names[p.b], "cosine": score(p.judgement.cosine),
                "verdict": p.judgement.verdict.as_str(), "reasons": p.judgement.reasons})
        })
        .collect();
    let refused: Vec<_> = r
        .refused
        .iter()
        .map(|l| json!({"member": names[l.member], "other": names[l.other], "survivor": names[l.survivor], "reason": l.reason}))
        .collect();
    let mut map = serde_json::Map::new();
    map.insert("judge".into(), json!(judging.judge()));
    map.insert("linkage".into(), json!(linkage_name(judging.linkage)));
    map.insert("rejected".into(), json!(rejected));
    map.insert("refused".into(), json!(refused));
    map
}

/// The judge's part of the human report.
fn judging_human(judging: Judging, r: &DedupReport, names: &[String]) -> String {
    let mut out = format!("judge {}, {} linkage\n", judging.judge(), linkage_name(judging.linkage));
    for p in &r.rejected {
        out.push_str(&format!(
            "  kept apart: {} / {} ({:.4}): {}\n",
            names[p.a],
            names[p.b],
            p.judgement.cosine,
            p.judgement.reasons.join("; ")
        ));
    }
    for l in &r.refused {
        out.push_str(&format!(
            "  not joined to {} (checked against {}): {}: {}\n",
            names[l.survivor], names[l.other], names[l.member], l.reason
        ));
    }
    out
}

fn report_json(
    input: &str,
    output: Option<&str>,
    dry_run: bool,
    r: &DedupReport,
    skipped: Option<&str>,
) -> serde_json::Value {
    let merged: Vec<_> = r
        .plan
        .groups
        .iter()
        .map(|g| {
            json!({
                "survivor": {"section": g.survivor.section, "index": g.survivor.index, "name": g.survivor_name},
                "helpful": g.helpful,
                "harmful": g.harmful,
                "weakest_link": score(g.weakest_link),
                "absorbed": g.absorbed.iter().map(|a| json!({
                    "section": a.entry.section,
                    "index": a.entry.index,
                    "name": a.name,
                    "via": a.via,
                    "score": score(a.score),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "input": input,
        "output": output,
        "dry_run": dry_run,
        "model": r.model,
        "threshold": r.threshold.get(),
        "entries_before": r.entries_before,
        "entries_after": r.entries_after,
        "merged": merged,
        "non_canonical_sections": r.non_canonical_sections,
        "skipped": skipped,
    })
}

fn report_human(r: &DedupReport, written: Option<&str>, dry_run: bool, skipped: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(reason) = skipped {
        out.push_str(&format!("deduplication skipped (playbook unchanged): {reason}\n"));
    } else if r.plan.is_empty() {
        out.push_str(&format!(
            "no duplicates among {} (threshold {})\n",
            plural(r.entries_before, "entry"),
            r.threshold
        ));
    } else {
        let verb = if dry_run { "would merge" } else { "merged" };
        out.push_str(&format!(
            "{verb} {} into {} (threshold {}, model {}):\n",
            plural(r.plan.absorbed_count(), "entry"),
            plural(r.plan.groups.len(), "survivor"),
            r.threshold,
            r.model
        ));
        for g in &r.plan.groups {
            out.push_str(&format!(
                "  {} [{}] helpful {} harmful {}  (weakest link {:.4})\n",
                g.survivor_name, g.survivor.section, g.helpful, g.harmful, g.weakest_link
            ));
            for a in &g.absorbed {
                let via = if a.via == g.survivor_name { String::new() } else { format!(" via {}", a.via) };
                out.push_str(&format!("    <- {} [{}] {:.4}{via}\n", a.name, a.entry.section, a.score));
            }
        }
    }
    out.push_str(&format!("{} -> {}", plural(r.entries_before, "entry"), plural(r.entries_after, "entry")));
    match (written, dry_run) {
        (_, true) => out.push_str(" (dry run, nothing written)\n"),
        (Some(path), false) => out.push_str(&format!("; wrote {path}\n")),
        (None, false) => out.push('\n'),
    }
    out
}
