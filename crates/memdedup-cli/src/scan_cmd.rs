//! `memdedup scan`.

use anyhow::{Context, Result};
use memdedup::{ScanOptions, ScanReport, Threshold};
use serde_json::json;

use crate::cli::{GlobalArgs, ScanArgs};
use crate::input::{Collection, display_name, parse_collection, read_text};
use crate::judging::{Judging, linkage_name};
use crate::output::{emit, plural, score, snippet};
use crate::progress::embedding_bar;

/// The cosine threshold of a scan without `--threshold`.
const DEFAULT_SCAN_THRESHOLD: f64 = 0.85;

pub(crate) async fn run(global: &GlobalArgs, args: &ScanArgs) -> Result<()> {
    let name = display_name(&args.file);
    let collection = parse_collection(&read_text(&args.file)?, &name)?;
    let items = &collection.items;
    // A cosine threshold alone asks for the cosine judge; otherwise the learned judge is the default.
    let default_learned = args.threshold.is_none();
    let (judge, learned, linkage) = match crate::judging::learned_from_args(global, &args.judging, default_learned)? {
        Some((scorer, linkage)) => (None, Some(scorer), linkage),
        None => {
            let (judge, linkage) = crate::judging::from_args(global, &args.judging)?;
            (judge, None, linkage)
        }
    };
    let options = ScanOptions {
        threshold: Threshold::new(args.threshold.unwrap_or(DEFAULT_SCAN_THRESHOLD))?,
        cross_namespace: args.cross_namespace,
        judge,
        learned,
        linkage,
    };
    let judging =
        Judging { local: options.judge.is_some(), learned: options.learned.is_some(), linkage: options.linkage };
    let embedder = crate::open::collection_embedder(global).await??;
    let bar = embedding_bar(items.len(), global.quiet);
    let progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let report = memdedup::scan_collection(items, embedder.as_ref(), options, &progress).await;
    bar.finish_and_clear();
    let report = report.with_context(|| format!("cannot scan {name}"))?;
    if args.json {
        emit(&format!("{}\n", report_json(&collection, &report, judging)))?;
    } else {
        emit(&report_human(&collection, &report, judging))?;
    }
    Ok(())
}

/// The `--json` contract (docs/CLI.md): one object, groups of two or more only. Written
/// as text so that ids are printed as [`Collection::ids`] holds them (a number id exactly
/// as written, however long).
fn report_json(collection: &Collection, r: &ScanReport, judging: Judging) -> String {
    let ids = &collection.ids;
    let groups: Vec<String> = r
        .groups
        .iter()
        .map(|g| {
            let members: Vec<&str> = g.members.iter().map(|&m| ids[m].as_str()).collect();
            let edges: Vec<String> =
                g.edges.iter().map(|e| format!("[{},{},{}]", ids[e.a], ids[e.b], json!(score(e.score)))).collect();
            format!(
                "{{\"survivor\":{},\"members\":[{}],\"weakest_link\":{},\"edges\":[{}]}}",
                ids[g.members[0]],
                members.join(","),
                json!(score(g.weakest_link)),
                edges.join(",")
            )
        })
        .collect();
    let judged = if judging.is_plain() {
        String::new()
    } else {
        let refused: Vec<String> = r
            .refused
            .iter()
            .map(|l| {
                format!(
                    "{{\"member\":{},\"other\":{},\"survivor\":{},\"reason\":{}}}",
                    ids[l.member],
                    ids[l.other],
                    ids[l.survivor],
                    json!(l.reason)
                )
            })
            .collect();
        let rejected: Vec<String> = r
            .rejected
            .iter()
            .map(|p| {
                let probability = match p.judgement.probability {
                    Some(probability) => format!(",\"probability\":{}", json!(score(probability))),
                    None => String::new(),
                };
                format!(
                    "{{\"a\":{},\"b\":{},\"cosine\":{},\"verdict\":{}{probability},\"reasons\":{}}}",
                    ids[p.a],
                    ids[p.b],
                    json!(score(p.judgement.cosine)),
                    json!(p.judgement.verdict.as_str()),
                    json!(p.judgement.reasons)
                )
            })
            .collect();
        format!(
            ",\"judge\":{},\"linkage\":{},\"refused\":[{}],\"rejected\":[{}]",
            json!(judging.judge()),
            json!(linkage_name(judging.linkage)),
            refused.join(","),
            rejected.join(",")
        )
    };
    format!(
        "{{\"model\":{},\"threshold\":{},\"items\":{},\"duplicates\":{},\"groups\":[{}]{judged}}}",
        json!(r.model),
        json!(r.threshold.get()),
        r.items,
        r.duplicates,
        groups.join(",")
    )
}

fn report_human(collection: &Collection, r: &ScanReport, judging: Judging) -> String {
    let items = &collection.items;
    let id = |i: usize| match &items[i].id {
        serde_json::Value::String(s) => s.clone(),
        _ => collection.ids[i].clone(),
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
    if judging.is_plain() {
        return out;
    }
    out.push_str(&format!("\njudge {}, {} linkage\n", judging.judge(), linkage_name(judging.linkage)));
    let (uncertain, apart): (Vec<_>, Vec<_>) =
        r.rejected.iter().partition(|p| p.judgement.verdict == memdedup::PairVerdict::Uncertain);
    for (title, list) in [("uncertain, not merged: to review", uncertain), ("kept apart by the judge", apart)] {
        if list.is_empty() {
            continue;
        }
        out.push_str(&format!("\n{title} ({}):\n", list.len()));
        for p in list {
            out.push_str(&format!(
                "  {} / {}  ({:.4}): {}\n",
                id(p.a),
                id(p.b),
                p.judgement.cosine,
                p.judgement.reasons.join("; ")
            ));
        }
    }
    if !r.refused.is_empty() {
        out.push_str(&format!(
            "\nlinks refused by the {} linkage ({}):\n",
            linkage_name(judging.linkage),
            r.refused.len()
        ));
        for l in &r.refused {
            out.push_str(&format!(
                "  {} not joined to the group of {} (checked against {}): {}\n",
                id(l.member),
                id(l.survivor),
                id(l.other),
                l.reason
            ));
        }
    }
    out
}
