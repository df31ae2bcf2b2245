//! memdedup's HTTP service: dedup over the network for agents written in any language.
//!
//! - **Nodes** (seed 001): `POST /v1/nodes/check-similar` compares new content with every
//!   live node of its subtype in its namespace and answers in tiers (duplicate >= 0.95,
//!   connect >= 0.90, on the first 512 dimensions renormalised); `POST /v1/nodes` runs that
//!   gate for dedup-eligible subtypes before storing, embedding once and checking again
//!   under the namespace's write lock, so racing requests (also to other processes on one
//!   Postgres) never create a duplicate. Read, list, update (an edit that would duplicate
//!   another node is refused with 409), delete and edges complete it.
//! - **Facts** (seed 002): facts about the user with casefolded dedup, a confidence
//!   threshold and a size limit; profile summaries; the prompt context within a token
//!   budget counted with the cl100k_base BPE. `POST /v1/facts/extract` asks the chat
//!   model configured with [`AppState::with_chat_model`] (`dedup-llm`) for the facts of
//!   a conversation turn and stores the confident ones.
//! - **Memory**: `POST /v1/memory/check` and `POST /v1/memory/add` run `dedup-precompact`'s
//!   checker chain (exact, semantic, recent capture) given with
//!   [`AppState::with_memory_service`], in one request each: what the CLI's client mode
//!   asks instead of loading the model.
//! - **Operations**: bearer tokens limited to namespaces, JSON errors with 4xx for client
//!   mistakes, `/metrics` (Prometheus), `/healthz` (whether the embedder can embed, not
//!   merely whether one is configured), `/v1/openapi.json`, request ids, and graceful
//!   shutdown.
//!
//! **Architecture invariant:** sits above `dedup-embed`, `dedup-store` and `dedup-llm`
//! (and uses `dedup-precompact`'s checker chain and metrics); nothing below depends on it.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod auth;
mod config;
mod deadline;
mod error;
mod extract;
mod fact_extraction;
mod facts;
mod lifecycle;
mod memory;
mod nodes;
mod ops;
mod review;
mod server;
mod state;
mod ui;

use utoipa::OpenApi;

pub use auth::Principal;
pub use config::{DEFAULT_ADDR, FactsConfig, NodesConfig, ServerConfig, TOKEN_ENV_VAR, TokenConfig};
pub use deadline::BodyDeadline;
pub use error::{ApiError, ApiResult, Error, ErrorBody};
pub use memory::{MemoryAddRequest, MemoryCheckRequest};
pub use nodes::{CHECK_SIMILAR_REQUIRED, MAX_TITLE_BYTES, duplicate_message, node_id, node_text};
pub use ops::{HTTP_REQUEST_DURATION_SECONDS, HTTP_REQUESTS_TOTAL, install_prometheus};
pub use server::{
    MAX_REQUEST_ID_BYTES, MAX_URI_BYTES, REQUEST_ID_HEADER, bind, router, router_with, serve, serve_app,
    shutdown_signal,
};
pub use state::{AppState, EMBEDDER_DOWN_FOR, EMBEDDER_OK_FOR, EMBEDDER_PROBE_TIMEOUT, EmbedderStatus};

/// The OpenAPI document, generated from the handlers and their types.
#[derive(OpenApi)]
#[openapi(
    info(title = "memdedup", description = "Memory deduplication over HTTP: the checker chain, nodes with tiers, facts, metrics."),
    paths(
        nodes::check_similar, nodes::create_node, nodes::list_nodes, nodes::get_node, nodes::update_node,
        nodes::delete_node, nodes::create_edge, nodes::node_edges,
        facts::create_fact, facts::list_facts, facts::update_fact, facts::delete_fact,
        facts::get_profile, facts::put_profile, facts::context, fact_extraction::extract,
        memory::check, memory::add, lifecycle::edit, lifecycle::forget, lifecycle::history, lifecycle::undo,
        review::list, review::decide,
        ops::healthz, ops::metrics, ops::openapi,
    ),
    modifiers(&BearerAuth),
    tags((name = "nodes", description = "Seed 001: search-before-store with tiers"),
         (name = "facts", description = "Seed 002: the fact memory"),
         (name = "memory", description = "The checker chain (exact, semantic, recent capture): check, or check and store"),
         (name = "review", description = "The pairs a judge was unsure of, decided by a person or an agent"),
         (name = "operations", description = "Health, metrics, this document")),
)]
pub struct ApiDoc;

/// Declares the bearer-token scheme.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}
