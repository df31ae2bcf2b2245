//! The wire shapes of seed 001's nodes API: requests, replies and their OpenAPI schemas.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// The seed's message for a check-similar request without content, title or subtype.
pub const CHECK_SIMILAR_REQUIRED: &str = "content, title, and subtype are required";
/// Metadata key holding a node's `type`.
pub(super) const TYPE_KEY: &str = "type";
/// Largest `limit` of check-similar.
pub(super) const MAX_MATCHES: usize = 100;
/// Longest node title in bytes: the store's limit, or `max_text_bytes` when that is lower.
pub use dedup_store::MAX_TITLE_BYTES;
/// Default and largest page of `GET /v1/nodes`.
pub(super) const DEFAULT_PAGE: usize = 50;
pub(super) const MAX_PAGE: usize = 500;

/// `POST /v1/nodes/check-similar` request (seed 001 §3).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckSimilarRequest {
    /// The full content text (a node's `content_body`).
    #[schema(example = "Weekend trading is risky due to low volume and slippage")]
    pub content: Option<String>,
    /// The title (a node's `content_title`).
    #[schema(example = "Avoid weekend trading")]
    pub title: Option<String>,
    /// The subtype compared with, e.g. `custom:lesson`.
    #[schema(example = "custom:lesson")]
    pub subtype: Option<String>,
    /// Most matches returned (default 5, at most 100).
    pub limit: Option<i64>,
    /// The namespace searched (default `default`).
    pub namespace: Option<String>,
}

/// What a match means: `duplicate` (>= duplicate threshold) or `connect` (>= connect
/// threshold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Near-identical content exists.
    Duplicate,
    /// Similar content exists; link to it.
    Connect,
}

/// One similar node.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SimilarMatch {
    /// Its id, `n_<number>`.
    #[schema(example = "n_12")]
    pub node_id: String,
    /// Its title.
    pub title: String,
    /// Cosine similarity on the compared dimensions, rounded to 4 decimals.
    #[schema(example = 0.9712)]
    pub similarity: f64,
    /// The tier.
    pub action: Action,
    /// Its lifecycle: ACTIVE, WEAK or DORMANT.
    #[schema(example = "ACTIVE")]
    pub lifecycle: String,
    /// With the local judge: why it is (or is not) a duplicate, in words, the first
    /// reason deciding. Absent with the cosine judge (seed 001's shape).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(example = json!(["cosine 0.971 reaches 0.55 and nothing sets the texts apart"]))]
    pub reasons: Vec<String>,
}

/// The overall verdict of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Recommendation {
    /// A match is a duplicate.
    DuplicateFound,
    /// Matches exist, none a duplicate.
    SimilarFound,
    /// No match.
    Unique,
}

/// `POST /v1/nodes/check-similar` response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CheckSimilarResponse {
    /// Matches at or above the connect threshold, most similar first.
    pub matches: Vec<SimilarMatch>,
    /// `duplicate_found`, `similar_found` or `unique`.
    pub recommendation: Recommendation,
    /// `local` when the local judge decided the duplicates (`[dedup] judge` of
    /// memdedup.toml); absent with the cosine judge (seed 001's shape).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "local")]
    pub judge: Option<String>,
}

/// A node as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeView {
    /// `n_<number>`.
    #[schema(example = "n_12")]
    pub id: String,
    /// The node type, e.g. `concept`.
    #[serde(rename = "type")]
    pub node_type: String,
    /// The subtype, e.g. `custom:lesson`.
    pub subtype: String,
    /// The title.
    pub content_title: String,
    /// The body.
    pub content_body: String,
    /// Its namespace.
    pub namespace: String,
    /// ACTIVE, WEAK or DORMANT.
    pub state_lifecycle: String,
    /// How many times it was stored (1 plus duplicates folded into it).
    pub occurrence_count: u64,
    /// Any other fields the node was created with.
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// `POST /v1/nodes` request: seed 001's node shape. Other fields are kept in `metadata`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateNodeRequest {
    /// The node type, e.g. `concept`.
    #[serde(rename = "type")]
    #[schema(example = "concept")]
    pub node_type: Option<String>,
    /// The subtype, e.g. `custom:lesson`.
    #[schema(example = "custom:lesson")]
    pub subtype: Option<String>,
    /// The title.
    #[schema(example = "Never trade weekends")]
    pub content_title: Option<String>,
    /// The body.
    #[schema(example = "Low volume weekends increase slippage risk")]
    pub content_body: Option<String>,
    /// The namespace (default `default`).
    pub namespace: Option<String>,
    /// Any other fields, kept with the node.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extra: Map<String, Value>,
}

/// What the dedup gate did for a create.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DedupReport {
    /// `checked`, `skipped` (the check failed: fail-open) or `not_eligible` (the subtype
    /// is not deduplicated).
    #[schema(example = "checked")]
    pub status: &'static str,
    /// Why the check was skipped, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The verdict, when checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<Recommendation>,
    /// Matches found, most similar first.
    pub matches: Vec<SimilarMatch>,
    /// Nodes the new node was linked to with `relates_to`.
    pub linked: Vec<String>,
    /// `local` when the local judge decided the duplicates; absent with the cosine judge.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "local")]
    pub judge: Option<String>,
}

/// `POST /v1/nodes` response: 201 with the new node, or 200 with the existing duplicate.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreateNodeResponse {
    /// Whether a node was created.
    pub created: bool,
    /// The new node, or the existing node it duplicates.
    #[serde(flatten)]
    pub node: NodeView,
    /// The duplicated node, when not created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<SimilarMatch>,
    /// The seed's feedback line, when not created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What the dedup gate did.
    pub dedup: DedupReport,
}

/// `GET /v1/nodes` query.
#[derive(Debug, Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListNodesQuery {
    /// Only this namespace (required for tokens limited to some namespaces).
    pub namespace: Option<String>,
    /// Only this subtype.
    pub subtype: Option<String>,
    /// Only this lifecycle: ACTIVE, WEAK or DORMANT.
    pub lifecycle: Option<String>,
    /// Page size (default 50, at most 500).
    pub limit: Option<usize>,
    /// The `next_after` of the previous page.
    pub after: Option<String>,
}

/// `GET /v1/nodes` response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeList {
    /// The page, in id order.
    pub data: Vec<NodeView>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// `PATCH /v1/nodes/{id}` request; absent fields stay as they are.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateNodeRequest {
    /// New title (re-embeds).
    pub content_title: Option<String>,
    /// New body (re-embeds).
    pub content_body: Option<String>,
    /// New lifecycle, e.g. `ACTIVE` to reactivate a DORMANT node.
    pub state_lifecycle: Option<String>,
    /// Fields to set in the node's metadata (`null` removes one).
    #[schema(value_type = Object)]
    pub metadata: Option<Map<String, Value>>,
}

/// `POST /v1/edges` request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEdgeRequest {
    /// Where the edge starts.
    pub source_id: Option<String>,
    /// Where it ends.
    pub target_id: Option<String>,
    /// Its type (default `relates_to`).
    #[serde(rename = "type")]
    pub edge_type: Option<String>,
}

/// An edge.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EdgeView {
    /// Where it starts.
    pub source_id: String,
    /// Where it ends.
    pub target_id: String,
    /// Its type.
    #[serde(rename = "type")]
    pub edge_type: String,
    /// When it was made.
    pub created_at: DateTime<Utc>,
}

/// `POST /v1/edges` response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreateEdgeResponse {
    /// False when the edge existed already.
    pub created: bool,
    /// The edge.
    #[serde(flatten)]
    pub edge: EdgeView,
}

/// `GET /v1/nodes/{id}/edges` response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EdgeList {
    /// Edges starting or ending at the node, oldest first.
    pub data: Vec<EdgeView>,
}
