//! `memdedup scan`.

use anyhow::{Context, Result};
use memdedup::{CollectionItem, ScanOptions, ScanReport, Threshold};
use serde_json::json;

use crate::cli::{GlobalArgs, ScanArgs};
use crate::input::{display_name, parse_collection, read_text};
use crate::output::{emit, plural, score, snippet};
use crate::progress::embedding_bar;

pub(crate) async fn run(global: &GlobalArgs, args: &ScanArgs) -> Result<()> {
    let name = display_name(&args.file);
    let items = parse_collection(&read_text(&args.file)?, &name)?;
    let options = ScanOptions { threshold: Threshold::new(args.threshold)?, cross_namespace: args.cross_namespace };
    let embedder = crate::memory_cmd::collection_embedder(global).await??;
    let bar = embedding_bar(items.len(), global.quiet);
    let progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let report = memdedup::scan_collection(&items, embedder.as_ref(), options, &progress).await;
    bar.finish_and_clear();
    let report = report.with_context(|| format!("cannot scan {name}"))?;
    if args.json {
        emit(&format!("{}\n", report_json(&items, &report)))?;
    } else {
        emit(&report_human(&items, &report))?;
    }
    Ok(())
}

/// The `--json` contract (docs/CLI.md): one object, groups of two or more only.
fn report_json(items: &[CollectionItem], r: &ScanReport) -> serde_json::Value {
    let groups: Vec<_> = r
        .groups
        .iter()
        .map(|g| {
            json!({
                "survivor": items[g.members[0]].id,
                "members": g.members.iter().map(|&m| items[m].id.clone()).collect::<Vec<_>>(),
                "weakest_link": score(g.weakest_link),
                "edges": g.edges.iter().map(|e| json!([items[e.a].id, items[e.b].id, score(e.score)])).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "model": r.model,
        "threshold": r.threshold.get(),
        "items": r.items,
        "duplicates": r.duplicates,
        "groups": groups,
    })
}

fn report_human(items: &[CollectionItem], r: &ScanReport) -> String {
    let id = |i: usize| match &items[i].id {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut out = format!(
        "{}, {} in {} (threshold {}, model {})\n",
        plural(r.items, "item"),
        plural(r.duplicates, "duplicate"),
        plural(r.groups.len(), "group"),
        r.threshold,
        r.model
    );
    for (n, g) in r.groups.iter().enumerate() {
        let survivor = g.members[0];
        let ns = items[survivor].namespace.as_deref().unwrap_or(memdedup::DEFAULT_NAMESPACE);
        out.push_str(&format!(
            "\ngroup {} [{ns}] weakest link {:.4}\n  {}  {}\n",
            n + 1,
            g.weakest_link,
            id(survivor),
            snippet(&items[survivor].text, 70)
        ));
        for (m, via, link) in g.links() {
            let via = if via == survivor { String::new() } else { format!(" via {}", id(via)) };
            out.push_str(&format!("  {}  {}  ({link:.4}{via})\n", id(m), snippet(&items[m].text, 70)));
        }
    }
    out
}
