//! `memory_check`, `memory_add`, `memory_search` and `memory_get`: the checker chain and the
//! store's memories.

use memdedup::crates::store::parse_memory_ref;
use memdedup::{Memory, NewMemory, Scope, Store};
use serde::Serialize;

use crate::access::Access;
use crate::args::{MemoryAddArgs, MemoryCheckArgs, MemoryGetArgs, MemorySearchArgs, ScopeArgs, in_range, text_arg};
use crate::context::McpContext;
use crate::reply::{ToolError, ToolResult, plural, success};

/// Most memories `memory_search` returns.
pub const MAX_SEARCH_RESULTS: u32 = 50;
/// How many memories `memory_search` returns when not told.
const DEFAULT_SEARCH_RESULTS: u32 = 5;
/// Most `merged_into` links `memory_get` follows (a longer chain means a cycle).
const MAX_MERGE_HOPS: usize = 64;

/// A verdict with the scope it was reached in and its one-line explanation.
#[derive(Serialize)]
struct Explained<'a, T> {
    #[serde(flatten)]
    value: &'a T,
    scope: &'a Scope,
    explanation: &'a str,
}

fn scope_of(namespace: &Option<String>, domain: &Option<String>) -> Result<Scope, ToolError> {
    ScopeArgs { namespace: namespace.clone(), domain: domain.clone() }.scope()
}

pub(crate) async fn check(context: &McpContext, access: &Access, args: MemoryCheckArgs) -> ToolResult {
    let scope = scope_of(&args.namespace, &args.domain)?;
    text_arg("content", &args.content)?;
    access.check(&scope)?;
    let result = context
        .service
        .check_duplicate(&args.content, &scope)
        .await
        .map_err(|e| ToolError::failed("the duplicate check failed", e))?;
    // A check that failed open leaves "unique" unproven: say so, as the CLI warns.
    let explanation = result.explanation_noting_failures(&scope);
    success(&Explained { value: &result, scope: &scope, explanation: &explanation }, explanation.clone())
}

pub(crate) async fn add(context: &McpContext, access: &Access, args: MemoryAddArgs) -> ToolResult {
    let scope = scope_of(&args.namespace, &args.domain)?;
    text_arg("content", &args.content)?;
    let mut memory = NewMemory::new(scope.clone(), args.content);
    if let Some(kind) = args.kind {
        memory = memory.with_kind(kind);
    }
    if let Some(title) = args.title {
        memory = memory.with_title(title);
    }
    // Everything the store would refuse (a bad kind, a long title) is refused before anything runs.
    Store::validate_memory(&memory).map_err(|e| ToolError::InvalidArgument(e.to_string()))?;
    access.check(&scope)?;
    let outcome = context.service.add(memory).await.map_err(|e| ToolError::failed("cannot add the memory", e))?;
    let explanation = outcome.explanation(&scope);
    success(&Explained { value: &outcome, scope: &scope, explanation: &explanation }, explanation.clone())
}

/// One memory found by `memory_search`.
#[derive(Serialize)]
struct Found {
    urn: String,
    id: i64,
    /// The scope it lives in (when all namespaces are searched, hits come from several).
    scope: Scope,
    score: f32,
    kind: String,
    title: Option<String>,
    content: String,
}

/// The result of `memory_search`.
#[derive(Serialize)]
struct Recalled {
    /// The scope searched; absent when every namespace the caller may see was.
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<Scope>,
    /// The scopes searched.
    searched: Vec<Scope>,
    model: String,
    results: Vec<Found>,
}

pub(crate) async fn search(context: &McpContext, access: &Access, args: MemorySearchArgs) -> ToolResult {
    text_arg("query", &args.query)?;
    let limit = in_range("limit", args.limit.unwrap_or(DEFAULT_SEARCH_RESULTS), 1..=MAX_SEARCH_RESULTS)?;
    let store = context.service.store();
    // One namespace when named, else every namespace (of the domain, when named) that
    // holds memories and that the caller may see.
    let (named, scopes) = match &args.namespace {
        Some(_) => {
            let scope = scope_of(&args.namespace, &args.domain)?;
            access.check(&scope)?;
            (Some(scope.clone()), vec![scope])
        }
        None => {
            if let Some(domain) = &args.domain {
                Scope::new(domain, memdedup::DEFAULT_NAMESPACE)
                    .map_err(|e| ToolError::InvalidArgument(e.to_string()))?;
            }
            let scopes = store
                .scopes_with_memories(args.domain.as_deref())
                .await
                .map_err(|e| ToolError::failed("cannot list the namespaces", e))?
                .into_iter()
                .filter(|s| access.allows(s.namespace_name()))
                .collect();
            (None, scopes)
        }
    };
    let Some(embedder) = context.service.embedder() else {
        return Err(ToolError::NotConfigured(
            "memory_search needs the embedding model, and this server runs without one (install it with \
             `cargo xtask fetch-model`)"
                .to_owned(),
        ));
    };
    let query = embedder.embed_one(&args.query).await.map_err(|e| ToolError::failed("cannot embed the query", e))?;
    let hits = store
        .search_scopes(&scopes, embedder.model_id(), &query, limit)
        .await
        .map_err(|e| ToolError::failed("the search failed", e))?;
    let results: Vec<Found> = hits
        .into_iter()
        .map(|(memory, score)| Found {
            urn: memory.urn(),
            id: memory.id.get(),
            scope: memory.scope.clone(),
            score,
            kind: memory.kind,
            title: memory.title,
            content: memory.content,
        })
        .collect();
    let place = match &named {
        Some(scope) => format!("in {scope}"),
        None => format!("in {}", plural(scopes.len(), "namespace")),
    };
    let text = match results.first() {
        Some(best) => format!(
            "{} {place}; the closest is {} at cosine {:.4}",
            plural(results.len(), "memory"),
            best.urn,
            best.score
        ),
        None => format!("no memory {place} to recall"),
    };
    success(&Recalled { scope: named, searched: scopes, model: embedder.model_id().to_owned(), results }, text)
}

/// The result of `memory_get`.
#[derive(Serialize)]
struct Got {
    urn: String,
    memory: Memory,
    /// The URNs followed through `merged_into`, from the one asked for.
    merged_from: Vec<String>,
}

pub(crate) async fn get(context: &McpContext, access: &Access, args: MemoryGetArgs) -> ToolResult {
    let (id, urn_scope) = parse_memory_ref(args.id.trim()).map_err(ToolError::InvalidArgument)?;
    if let Some(scope) = &urn_scope {
        access.check(scope)?;
    }
    let store = context.service.store();
    // A memory in a namespace the caller may not use reads as missing, in the same words,
    // so a limited token cannot learn which ids exist elsewhere (or where).
    let read = |id| async move {
        store
            .get(id)
            .await
            .map_err(|e| ToolError::failed("cannot read the memory", e))?
            .filter(|memory| access.allows(memory.scope.namespace_name()))
            .ok_or_else(|| ToolError::NotFound(format!("no memory with id {id}")))
    };
    let mut memory = read(id).await?;
    if urn_scope.as_ref().is_some_and(|scope| *scope != memory.scope) {
        return Err(ToolError::NotFound(format!("no memory {} (memory {id} is {})", args.id.trim(), memory.urn())));
    }
    let mut merged_from = Vec::new();
    while let (true, Some(into)) = (memory.deprecated, memory.merged_into) {
        if merged_from.len() >= MAX_MERGE_HOPS {
            return Err(ToolError::Failed(format!(
                "memory {id} leads through more than {MAX_MERGE_HOPS} merges; the merge links form a cycle"
            )));
        }
        merged_from.push(memory.urn());
        memory = read(into).await?;
    }
    let urn = memory.urn();
    let text = match merged_from.first() {
        Some(first) => format!("{first} was merged into {urn}: {}", snippet(&memory.content, 200)),
        None => format!("{urn}: {}", snippet(&memory.content, 200)),
    };
    success(&Got { urn, memory, merged_from }, text)
}

/// The first `max` characters of `text` on one line, with `…` when cut.
pub(crate) fn snippet(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    }
}
