//! The MCP server: the tool router, the server's self-description, and its transports.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use tokio_util::sync::CancellationToken;

use crate::access::Access;
use crate::agent_judge::AgentJudge;
use crate::args::{
    DedupArgs, FactsAddArgs, FactsContextArgs, FactsExtractArgs, MemoryAddArgs, MemoryCheckArgs, MemoryGetArgs,
    MemoryIdArgs, MemorySearchArgs, MemoryUndoArgs, MemoryUpdateArgs, MergeUndoArgs, MergesListArgs, Parameters,
    ReviewDecideArgs, ReviewListArgs,
};
use crate::context::McpContext;
use crate::reply::{ToolError, into_call_result};
use crate::{lifecycle_tools, memory_tools, ops_tools, review_tools};

/// Every tool's name (`facts_extract` only with a chat model). `tools/list` gives them
/// sorted by name, not in this order.
pub const TOOL_NAMES: [&str; 18] = [
    "memory_check",
    "memory_add",
    "memory_search",
    "memory_get",
    "memory_update",
    "memory_delete",
    "memory_history",
    "memory_undo",
    "dedup_scan",
    "dedup_run",
    "merges_list",
    "merge_undo",
    "review_list",
    "review_decide",
    "review_run",
    "facts_add",
    "facts_context",
    "facts_extract",
];

/// What the server tells the model about itself at initialisation.
const INSTRUCTIONS: &str = "memdedup keeps this agent's long-term memory free of duplicates. \
To remember something, call memory_add: it stores the memory unless the namespace already holds it \
(same text, a paraphrase, or one captured moments ago) and says which memory it duplicates and why. \
Call memory_check first only to ask without storing. Use one namespace per kind of memory \
(decisions, learnings, patterns, preferences). Recall with memory_search; open a URN with memory_get. \
Correct a memory with memory_update (refused when the new text duplicates another memory), remove a wrong \
one with memory_delete; memory_history lists a memory's changes and memory_undo reverts one. \
dedup_scan proposes merges of conceptual duplicates already stored (nothing is written); dedup_run \
merges them, and merge_undo restores any merge exactly. review_list gives the pairs a judge was unsure \
of, for you to judge; review_decide applies your verdict. facts_add and facts_context keep short facts \
about the user and the prompt text made of them.";

/// One MCP server session over a shared [`McpContext`]. Cheap to clone.
#[derive(Clone)]
pub struct MemdedupMcp {
    context: Arc<McpContext>,
    tool_router: ToolRouter<MemdedupMcp>,
}

impl std::fmt::Debug for MemdedupMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemdedupMcp").field("context", &self.context).finish_non_exhaustive()
    }
}

impl MemdedupMcp {
    /// The judge of `dedup_scan` and `dedup_run` for this request: the configured one, or
    /// the client's own model when the judge is the agent (an error when the client does
    /// not offer sampling).
    fn judge_for(&self, request: &RequestContext<RoleServer>) -> Result<Arc<dyn memdedup::Judge>, ToolError> {
        if self.context.agent_judge {
            return Ok(Arc::new(AgentJudge::of(request)?));
        }
        Ok(self.context.judge.clone())
    }
}

#[tool_router]
impl MemdedupMcp {
    /// A server over `context`; `facts_extract` is listed only when it has a chat model.
    pub fn new(context: Arc<McpContext>) -> MemdedupMcp {
        let mut tool_router = MemdedupMcp::tool_router();
        if !context.has_chat_model() {
            tool_router.remove_route("facts_extract");
        }
        MemdedupMcp { context, tool_router }
    }

    #[tool(
        name = "memory_check",
        description = "Ask whether a memory is already stored, without storing it. Compares the text with the \
                       namespace's memories: exact match (same normalised text), then semantic similarity with the \
                       local model and the learned pair judge (which reads whether the two texts make the same \
                       claim; it keeps most refinements and opposites apart, not all), then memories captured in the \
                       last minutes. Returns is_duplicate, the verdict (duplicate; uncertain: not a duplicate, but the \
                       likely duplicate is named for review; related; unique), the probability, the matched memory's \
                       URN, the similarity and the reasons.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_check(
        &self,
        Parameters(args): Parameters<MemoryCheckArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { memory_tools::check(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "memory_add",
        description = "Store a memory unless it duplicates one already stored in its namespace. The usual way to \
                       remember something: one call checks and stores. Returns stored (the new URN) or, when not \
                       stored, the duplicate's URN with the evidence (exact match, semantic similarity with its \
                       score, or a recent capture). A close memory the judge reads as another claim (a refinement, \
                       an opposite) is stored and reported as related; one it is unsure of is stored, named as the \
                       likely duplicate and queued for review.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn memory_add(
        &self,
        Parameters(args): Parameters<MemoryAddArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { memory_tools::add(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "memory_search",
        description = "Recall: the stored memories most similar to a query, best first, with their URNs, scopes, \
                       cosine similarity and text; from one namespace when given, else from every namespace you \
                       may use. Merged-away memories are not returned.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_search(
        &self,
        Parameters(args): Parameters<MemorySearchArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { memory_tools::search(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "memory_get",
        description = "One memory by id or URN, with all its fields. A memory that was merged into another leads to \
                       the one it was merged into; `merged_from` lists the URNs followed on the way.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_get(
        &self,
        Parameters(args): Parameters<MemoryGetArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { memory_tools::get(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "memory_update",
        description = "Correct a memory: replace its text. Refused, with the memory named, when the new text \
                       duplicates another memory of the namespace (the same text, or one the pair judge calls a \
                       duplicate); the memory keeps its old text then. Recorded in the memory's history: \
                       memory_undo with the returned change restores the old text.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn memory_update(
        &self,
        Parameters(args): Parameters<MemoryUpdateArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { lifecycle_tools::update(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "memory_delete",
        description = "Delete a memory that is wrong or no longer true: it is no longer stored as live, searched or \
                       listed. Recorded in the memory's history: memory_undo with the returned change brings it \
                       back.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn memory_delete(
        &self,
        Parameters(args): Parameters<MemoryIdArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { lifecycle_tools::delete(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "memory_history",
        description = "A memory's history, oldest first: its edits (text before and after), deletions, restores \
                       and the merges it took part in, each change with the id memory_undo takes.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_history(
        &self,
        Parameters(args): Parameters<MemoryIdArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { lifecycle_tools::history(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "memory_undo",
        description = "Undo a change of a memory's history: a deleted memory comes back, an updated one gets its \
                       text from before. Refused when the memory changed since (updated again, merged, deleted).",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn memory_undo(
        &self,
        Parameters(args): Parameters<MemoryUndoArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { lifecycle_tools::undo(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "dedup_scan",
        description = "Dry run of assisted dedup: find conceptual duplicates already stored in a namespace (similar \
                       memories, confirmed by the judge) and propose merges, writing nothing. Each proposal names \
                       the surviving memory, the ones it would absorb, the merged text and the judge's reason.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn dedup_scan(
        &self,
        Parameters(args): Parameters<DedupArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(
            async {
                let args = args?;
                let judge = self.judge_for(&request)?;
                ops_tools::dedup(&self.context, &Access::of(&request), args, true, judge).await
            }
            .await,
        )
    }

    #[tool(
        name = "dedup_run",
        description = "Assisted dedup for real: merge the conceptual duplicates of a namespace that the judge \
                       confirms into one surviving memory each, in one transaction per group. Every merge is logged \
                       and can be undone exactly with merge_undo (by merge id or by the returned run_id).",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn dedup_run(
        &self,
        Parameters(args): Parameters<DedupArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(
            async {
                let args = args?;
                let judge = self.judge_for(&request)?;
                ops_tools::dedup(&self.context, &Access::of(&request), args, false, judge).await
            }
            .await,
        )
    }

    #[tool(
        name = "merges_list",
        description = "The merge ledger: merges made by dedup runs, most recent last, with survivor, absorbed \
                       memories, merged text, judge, confidence and whether they were undone.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn merges_list(
        &self,
        Parameters(args): Parameters<MergesListArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { ops_tools::merges(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "merge_undo",
        description = "Undo a merge (merge_id) or every merge of a dedup run (run_id): restore every memory it \
                       changed exactly as it was, and keep those memories from being merged again unless \
                       allow_remerge is true.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn merge_undo(
        &self,
        Parameters(args): Parameters<MergeUndoArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { ops_tools::undo(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "review_list",
        description = "The pairs of memories memdedup's judge was unsure of, for you to judge: seed 003 batches \
                       (one per namespace, within max_bytes) of memories and candidate pairs, with the judging \
                       instructions and the reply's JSON schema. Reply to each batch with review_decide.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn review_list(
        &self,
        Parameters(args): Parameters<ReviewListArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { review_tools::list(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "review_decide",
        description = "Your verdict on a batch from review_list, in its reply format: groups (each exactly one \
                       pair to merge, with confidence and reason) and no_match_ids (every other id). Checked as a \
                       judge's reply is (unknown ids, low confidence, missing ids are refused with the reason and \
                       nothing is applied); grouped pairs are merged (undo with merge_undo), the others kept apart \
                       and never proposed again.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn review_decide(
        &self,
        Parameters(args): Parameters<ReviewDecideArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { review_tools::decide(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "review_run",
        description = "Ask your own model (MCP sampling) to judge the pairs review_list would give you, batch by \
                       batch, with the judging instructions; each reply is checked and applied as review_decide \
                       applies one (a refused batch changes nothing and is reported). Needs a client that offers \
                       sampling; otherwise use review_list and review_decide.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn review_run(
        &self,
        Parameters(args): Parameters<ReviewListArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(
            async {
                let args = args?;
                let judge = AgentJudge::of(&request)?;
                review_tools::run(&self.context, &Access::of(&request), args, &judge).await
            }
            .await,
        )
    }

    #[tool(
        name = "facts_add",
        description = "Remember a short fact about the user (a preference, their context, a goal, a correction). \
                       Skipped when the namespace holds the same fact (ignoring case), when the confidence is below \
                       the threshold, or when the namespace is full of more confident facts; otherwise stored, \
                       evicting the least confident fact if the namespace is full.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn facts_add(
        &self,
        Parameters(args): Parameters<FactsAddArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { ops_tools::facts_add(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "facts_context",
        description = "The prompt text made of the user's profile and facts in a namespace, within a token budget: \
                       what to put in a system prompt so the assistant remembers the user.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn facts_context(
        &self,
        Parameters(args): Parameters<FactsContextArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { ops_tools::facts_context(&self.context, &Access::of(&request), args?).await }.await)
    }

    #[tool(
        name = "facts_extract",
        description = "Ask the configured language model for the facts about the user in one conversation turn, \
                       and store the confident ones as facts_add would (dry_run: only say which). Facts already \
                       known are skipped.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = true)
    )]
    async fn facts_extract(
        &self,
        Parameters(args): Parameters<FactsExtractArgs>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        into_call_result(async { ops_tools::facts_extract(&self.context, &Access::of(&request), args?).await }.await)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MemdedupMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("memdedup", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// Serves one MCP session over stdin and stdout until the client closes it. Logs go to
/// stderr; nothing else may write to stdout meanwhile.
pub async fn serve_stdio(context: Arc<McpContext>) -> crate::Result<()> {
    let running = MemdedupMcp::new(context)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| crate::Error::Start(e.to_string()))?;
    running.waiting().await.map_err(|e| crate::Error::Session(e.to_string()))?;
    Ok(())
}

/// The streamable HTTP transport as a tower service, to mount at `/mcp` behind the
/// server's authentication. Sessions live in this process; `shutdown` ends them (and their
/// event streams) so a graceful shutdown does not wait for clients to hang up.
///
/// With `any_host` false only `Host: localhost`, `127.0.0.1` or `::1` is served (what a
/// server without tokens, which may only listen on loopback, should accept: it keeps web
/// pages from reaching it through DNS rebinding); with true any host is (a server with
/// bearer tokens, which guard the route instead).
///
/// A request body over `max_body_bytes` is refused with 413, as the rest of the server
/// refuses one (the SDK's own limit is larger).
pub fn http_service(
    context: Arc<McpContext>,
    shutdown: CancellationToken,
    any_host: bool,
    max_body_bytes: usize,
) -> StreamableHttpService<MemdedupMcp, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(max_body_bytes);
    if any_host {
        config = config.disable_allowed_hosts();
    }
    StreamableHttpService::new(move || Ok(MemdedupMcp::new(context.clone())), Arc::default(), config)
}
