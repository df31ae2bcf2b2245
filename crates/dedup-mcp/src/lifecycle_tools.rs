//! `memory_update`, `memory_delete`, `memory_history` and `memory_undo`: a memory's
//! lifecycle, each change recorded in its history and undone from it.

use memdedup::crates::store::parse_memory_ref;
use memdedup::{ChangeId, EditStatus, HistoryEvent, Memory};
use serde::Serialize;

use crate::access::Access;
use crate::args::{MemoryIdArgs, MemoryUndoArgs, MemoryUpdateArgs, text_arg};
use crate::context::McpContext;
use crate::memory_tools::snippet;
use crate::reply::{ToolError, ToolResult, plural, success};

/// Who the history says made a change over MCP.
const SOURCE: &str = "mcp";

/// The memory `raw` names, if the caller may see it; a memory of a namespace the caller
/// may not use reads as missing, so a limited token cannot learn which ids exist.
async fn visible(context: &McpContext, access: &Access, raw: &str) -> Result<Memory, ToolError> {
    let (id, urn_scope) = parse_memory_ref(raw.trim()).map_err(ToolError::InvalidArgument)?;
    if let Some(scope) = &urn_scope {
        access.check(scope)?;
    }
    let memory = context
        .service
        .store()
        .get(id)
        .await
        .map_err(|e| ToolError::failed("cannot read the memory", e))?
        .filter(|memory| access.allows(memory.scope.namespace_name()))
        .ok_or_else(|| ToolError::NotFound(format!("no memory with id {id}")))?;
    if urn_scope.is_some_and(|scope| scope != memory.scope) {
        return Err(ToolError::NotFound(format!("no memory {} (memory {id} is {})", raw.trim(), memory.urn())));
    }
    Ok(memory)
}

/// A refusal of the layers below: the request's fault (not live, a conflict, undone
/// already) as an invalid argument, an outage as a failure.
fn refused(doing: &str, error: memdedup::crates::precompact::Error) -> ToolError {
    if error.is_unavailable() { ToolError::failed(doing, error) } else { ToolError::InvalidArgument(error.to_string()) }
}

pub(crate) async fn update(context: &McpContext, access: &Access, args: MemoryUpdateArgs) -> ToolResult {
    text_arg("content", &args.content)?;
    let memory = visible(context, access, &args.id).await?;
    let outcome = context
        .service
        .edit(memory.id, &args.content, SOURCE)
        .await
        .map_err(|e| refused(&format!("cannot update memory {}", memory.id), e))?;
    let urn = memory.urn();
    let text = match (&outcome.status, &outcome.duplicate, outcome.change) {
        (EditStatus::Duplicate, Some(duplicate), _) => {
            return Err(ToolError::InvalidArgument(format!(
                "refused: the new text duplicates {} (cosine {:.2}{}); {urn} keeps its text. Delete one of them \
                 with memory_delete, or update the other instead",
                duplicate.urn,
                duplicate.similarity,
                duplicate.reasons.first().map(|r| format!(": {r}")).unwrap_or_default(),
            )));
        }
        (EditStatus::Unchanged, _, _) => format!("{urn} already has this text: nothing changed"),
        (_, _, Some(change)) => format!("updated {urn}; memory_undo with change {change} restores the old text"),
        _ => format!("updated {urn}"),
    };
    success(&outcome, text)
}

/// The result of `memory_delete`.
#[derive(Serialize)]
struct Deleted {
    urn: String,
    /// The change to give `memory_undo` to bring the memory back.
    change: ChangeId,
}

pub(crate) async fn delete(context: &McpContext, access: &Access, args: MemoryIdArgs) -> ToolResult {
    let memory = visible(context, access, &args.id).await?;
    let change = context
        .service
        .forget(memory.id, SOURCE)
        .await
        .map_err(|e| refused(&format!("cannot delete memory {}", memory.id), e))?;
    let urn = memory.urn();
    let text = format!("deleted {urn}; memory_undo with change {change} brings it back");
    success(&Deleted { urn, change }, text)
}

pub(crate) async fn history(context: &McpContext, access: &Access, args: MemoryIdArgs) -> ToolResult {
    let memory = visible(context, access, &args.id).await?;
    let history = context
        .service
        .history(memory.id)
        .await
        .map_err(|e| refused(&format!("cannot read memory {}'s history", memory.id), e))?;
    let changes = history.events.iter().filter(|e| matches!(e, HistoryEvent::Change(_))).count();
    let merges = history.events.len() - changes;
    let text = format!(
        "{}: {} and {} ({})",
        memory.urn(),
        plural(changes, "change"),
        plural(merges, "merge"),
        snippet(&history.memory.content, 120)
    );
    success(&history, text)
}

/// The result of `memory_undo`.
#[derive(Serialize)]
struct Undone {
    /// The change undone.
    undone: ChangeId,
    /// The undo, recorded as a change of its own.
    change: ChangeId,
    urn: String,
    memory: Memory,
}

pub(crate) async fn undo(context: &McpContext, access: &Access, args: MemoryUndoArgs) -> ToolResult {
    let id = ChangeId::new(args.change);
    let store = context.service.store();
    let change = store
        .change(id)
        .await
        .map_err(|e| ToolError::failed("cannot read the memory history", e))?
        .filter(|change| access.allows(change.scope.namespace_name()))
        .ok_or_else(|| ToolError::NotFound(format!("no change with id {id} in the memory history")))?;
    access.check(&change.scope)?;
    let (memory, undo) =
        context.service.undo_change(id, SOURCE).await.map_err(|e| refused(&format!("cannot undo change {id}"), e))?;
    let urn = memory.urn();
    let text =
        format!("undid change {id}: {urn} is live with its text from before ({})", snippet(&memory.content, 120));
    success(&Undone { undone: id, change: undo, urn, memory }, text)
}
