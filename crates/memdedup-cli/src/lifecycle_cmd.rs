//! `memdedup edit`, `forget` and `history`: a memory's lifecycle, each change recorded
//! in its history and undone with `memdedup undo --change ID`.

use std::path::Path;

use anyhow::{Result, bail};
use memdedup::{ChangeAction, EditStatus, HistoryEvent, Memory, MemoryId};
use serde_json::json;

use crate::cli::GlobalArgs;
use crate::cli::lifecycle::{EditArgs, ForgetArgs, HistoryArgs};
use crate::input::{parse_memory_id, read_text, without_bom};
use crate::open::open_service;
use crate::output::{emit, snippet};

/// Who the history says made a change from the command line.
const SOURCE: &str = "cli";

/// Memory `raw` (an id or a URN) of the service's store; an error names what is wrong.
async fn memory(dedup: &memdedup::DeduplicationService, raw: &str) -> Result<Memory> {
    let (id, scope) = parse_memory_id(raw)?;
    let Some(memory) = dedup.store().get(id).await? else {
        bail!("no memory with id {id} in {}", dedup.store().location())
    };
    if let Some(scope) = scope
        && scope != memory.scope
    {
        bail!("{raw} does not exist: memory {id} is {}", memory.urn());
    }
    Ok(memory)
}

pub(crate) async fn edit(global: &GlobalArgs, args: &EditArgs) -> Result<()> {
    let text = if args.text == "-" { without_bom(&read_text(Path::new("-"))?).to_owned() } else { args.text.clone() };
    let dedup = open_service(global, &args.judge).await?;
    let result = async {
        let id = memory(&dedup, &args.id).await?.id;
        Ok::<_, anyhow::Error>(dedup.edit(id, &text, SOURCE).await?)
    }
    .await;
    dedup.store().close().await;
    let outcome = result?;
    for note in &outcome.notes {
        eprintln!("memdedup: {note}");
    }
    let id = outcome.memory.id;
    if args.json {
        emit(&format!("{}\n", serde_json::to_value(&outcome)?))?;
    }
    match (outcome.status, &outcome.duplicate) {
        (EditStatus::Duplicate, Some(duplicate)) => {
            let probability = duplicate.probability.map(|p| format!(", P(duplicate) {p:.2}")).unwrap_or_default();
            let why = duplicate.reasons.first().map(|r| format!(": {r}")).unwrap_or_default();
            bail!(
                "refused: the new text duplicates memory {} ({}, cosine {:.2}{probability}){why}; memory {id} is \
                 unchanged. Forget one of them (`memdedup forget ID`) or decide the pair with `memdedup review`",
                duplicate.id,
                duplicate.urn,
                duplicate.similarity,
            )
        }
        _ if args.json => Ok(()),
        (EditStatus::Unchanged, _) => emit(&format!("memory {id} already has this text: nothing changed\n")),
        _ => {
            let undo = outcome.change.map(|c| format!("; undo with `memdedup undo --change {c}`")).unwrap_or_default();
            emit(&format!("edited memory {id} ({}){undo}\n", outcome.memory.urn()))
        }
    }
}

pub(crate) async fn forget(global: &GlobalArgs, args: &ForgetArgs) -> Result<()> {
    let dedup = open_service(global, &crate::cli::PairJudgeArgs::default()).await?;
    let result = async {
        let memory = memory(&dedup, &args.id).await?;
        let change = dedup.forget(memory.id, SOURCE).await?;
        Ok::<_, anyhow::Error>((memory, change))
    }
    .await;
    dedup.store().close().await;
    let (memory, change) = result?;
    if args.json {
        let value = json!({"memory_id": memory.id, "urn": memory.urn(), "change": change, "status": "forgotten"});
        return emit(&format!("{value}\n"));
    }
    emit(&format!(
        "forgot memory {} ({}): it is no longer live or searched; undo with `memdedup undo --change {change}`\n",
        memory.id,
        memory.urn()
    ))
}

pub(crate) async fn history(global: &GlobalArgs, args: &HistoryArgs) -> Result<()> {
    let dedup = open_service(global, &crate::cli::PairJudgeArgs::default()).await?;
    let result = async {
        let memory = memory(&dedup, &args.id).await?;
        Ok::<_, anyhow::Error>(dedup.history(memory.id).await?)
    }
    .await;
    dedup.store().close().await;
    let history = result?;
    if args.json {
        return emit(&format!("{}\n", serde_json::to_value(&history)?));
    }
    emit(&history_text(&history))
}

fn when(at: chrono::DateTime<chrono::Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// The history as `memdedup history` prints it.
fn history_text(history: &memdedup::MemoryHistory) -> String {
    let m = &history.memory;
    let state = match (m.deprecated, m.merged_into) {
        (false, _) => "live".to_owned(),
        (true, Some(into)) => format!("merged into memory {into}"),
        (true, None) => "forgotten".to_owned(),
    };
    let mut out = format!("memory {} ({}), {state}: {}\n", m.id, m.urn(), snippet(&m.content, 70));
    out.push_str(&format!("  {}  created\n", when(m.created_at)));
    for event in &history.events {
        let line = match event {
            HistoryEvent::Change(c) => {
                let what = match c.action {
                    ChangeAction::Edited => format!(
                        "edited: {:?} -> {:?}",
                        snippet(c.before.as_deref().unwrap_or_default(), 50),
                        snippet(c.after.as_deref().unwrap_or_default(), 50)
                    ),
                    ChangeAction::Forgotten => "forgotten".to_owned(),
                    ChangeAction::Restored => "restored".to_owned(),
                };
                let undo = match (c.undone_by, c.undoable()) {
                    (Some(by), _) => format!(" [undone by change {by}]"),
                    (None, true) => format!(" [undo: memdedup undo --change {}]", c.id),
                    (None, false) => String::new(),
                };
                format!("change {} by {}: {what}{undo}", c.id, c.source)
            }
            HistoryEvent::Merge(r) => {
                let role = if r.survivor == m.id {
                    let absorbed: Vec<String> = r.absorbed.iter().map(MemoryId::to_string).collect();
                    format!("absorbed {}", absorbed.join(", "))
                } else {
                    format!("merged into {}", r.survivor)
                };
                let undone = if r.undone_at.is_some() { " [undone]" } else { "" };
                format!("merge {} ({} judge, run {}): {role}{undone}", r.id, r.judge, r.run_id)
            }
        };
        out.push_str(&format!("  {}  {line}\n", when(event.at())));
    }
    out
}
