//! memdedup over the Model Context Protocol: the tools an agent uses to keep its memory
//! free of duplicates, on the official Rust SDK (`rmcp`).
//!
//! [`MemdedupMcp`] is one MCP server over a [`McpContext`] (the checker chain, the judge of
//! assisted dedup, the chat model of fact extraction). It serves
//! - **stdio** with [`serve_stdio`]: what an agent's configuration launches
//!   (`memdedup mcp`);
//! - **streamable HTTP** with [`http_router`]: the route `/mcp` ([`http_service`], the
//!   SDK's tower service, with the server's JSON errors) that `memdedup serve` merges
//!   into its routes, behind the bearer-token middleware of `dedup-server`. A token
//!   limited to some namespaces (a [`Principal`]) limits every tool the same way.
//!
//! The tools: `memory_check`, `memory_add`, `memory_search`, `memory_get`, `dedup_scan`,
//! `dedup_run`, `merges_list`, `merge_undo`, `facts_add`, `facts_context`, and
//! `facts_extract` when a chat model is configured. Input schemas come from the argument
//! types; results are structured JSON plus one line of text. A bad argument or a failure
//! is an MCP tool error (`isError: true`) with a message naming the argument and the
//! problem, and writes nothing. Memory text never goes to the logs.
//!
//! **Architecture invariant:** sits above the facade (`memdedup`) and `dedup-server`
//! (whose [`Principal`] it reads); nothing but the binary depends on it.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod access;
mod agent_judge;
mod args;
mod context;
mod error;
mod http;
mod lifecycle_tools;
mod memory_tools;
mod ops_tools;
mod reply;
mod review_tools;
mod server;

pub use args::{
    DedupArgs, FactsAddArgs, FactsContextArgs, FactsExtractArgs, MemoryAddArgs, MemoryCheckArgs, MemoryGetArgs,
    MemorySearchArgs, MergeUndoArgs, MergesListArgs,
};
pub use context::McpContext;
pub use dedup_server::Principal;
pub use error::{Error, Result};
pub use http::http_router;
pub use memory_tools::MAX_SEARCH_RESULTS;
pub use server::{MemdedupMcp, TOOL_NAMES, http_service, serve_stdio};
pub use tokio_util::sync::CancellationToken;
