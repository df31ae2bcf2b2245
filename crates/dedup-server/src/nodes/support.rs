//! What the nodes handlers share: ids and views, scope and input checks, the similarity
//! search and how its matches are described, the background backfill.

use std::time::Instant;

use dedup_core::Embedding;
use dedup_precompact::metrics as dedup_metrics;
use dedup_store::{ListFilter, Memory, MemoryId, Neighbour, Scope, SearchFilter, StoredVector};
use serde_json::Value;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

use super::wire::*;

/// The text a node is embedded as: its title and body ([`dedup_store::titled_text`], so
/// a backfill embeds the same text).
pub fn node_text(title: &str, body: &str) -> String {
    dedup_store::titled_text(title, body)
}

/// Most nodes one successful create backfills in the background.
pub(super) const BACKFILL_BATCH: usize = 16;

/// Embeds, in the background, nodes of `scope` stored while the embedder was down (up to
/// [`BACKFILL_BATCH`]), now that an embedding has just succeeded. Failures are logged.
pub(super) fn backfill_in_background(state: &AppState, scope: &Scope) {
    let (state, scope) = (state.clone(), scope.clone());
    tokio::spawn(async move {
        let filter = ListFilter {
            domain: Some(scope.domain().to_owned()),
            namespace: Some(scope.namespace_name().to_owned()),
            vector_pending: true,
            limit: BACKFILL_BATCH,
            ..ListFilter::default()
        };
        let pending = match state.store().list(&filter).await {
            Ok(pending) => pending,
            Err(error) => return tracing::warn!(%scope, %error, "backfill: listing failed"),
        };
        let mut embedded = 0usize;
        for memory in pending {
            let Some((model, Ok(embedding))) = state.embed(&memory.embedding_text()).await else { break };
            let vector = StoredVector { model, embedding };
            match state.store().attach_vector(memory.id, &memory.content_hash, &vector).await {
                Ok(true) => embedded += 1,
                Ok(false) => {}
                Err(error) => tracing::warn!(node = %node_id(memory.id), %error, "backfill: vector not attached"),
            }
        }
        if embedded > 0 {
            dedup_metrics::backfilled(embedded);
            tracing::info!(%scope, embedded, "backfilled vectors of nodes stored while the embedder was down");
        }
    });
}

/// The seed's feedback line for a duplicate (§5, §2.7).
pub fn duplicate_message(duplicate: &SimilarMatch) -> String {
    let mut message = format!("Duplicate: already stored as \"{}\" ({})", duplicate.title, duplicate.node_id);
    if duplicate.lifecycle != "ACTIVE" {
        message.push_str(&format!(
            " [{}]. Use PATCH /v1/nodes/{} with state_lifecycle ACTIVE to reactivate if needed",
            duplicate.lifecycle, duplicate.node_id
        ));
    }
    // Truncation, as the seed's int(similarity * 100).
    #[allow(clippy::cast_possible_truncation)]
    let percent = (duplicate.similarity * 100.0).floor() as i64;
    message.push_str(&format!(". Not created. ({percent}% similar)"));
    message
}

/// `n_<number>`.
pub fn node_id(id: MemoryId) -> String {
    format!("n_{id}")
}

/// Parses `n_<number>` (or a bare number).
pub(super) fn parse_node_id(text: &str) -> ApiResult<MemoryId> {
    let digits = text.strip_prefix("n_").unwrap_or(text);
    digits
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .map(MemoryId::new)
        .ok_or_else(|| ApiError::bad_request(format!("invalid node id {text:?}: expected n_<number>")))
}

/// The live node `id` of the server's domain that the token may see. Anything else is
/// 404; for a node a merge absorbed, the 404 names the node that absorbed it (message and
/// `merged_into`) when that node is in the domain and visible to the token too.
pub(super) async fn find_node(state: &AppState, principal: &Principal, id: &str) -> ApiResult<Memory> {
    let parsed = parse_node_id(id)?;
    let not_found = || ApiError::not_found(format!("no node {id}"));
    // A node outside the domain or the token's namespaces is reported like a missing one.
    let visible =
        |m: &Memory| m.scope.domain() == state.config().domain && principal.allow(m.scope.namespace_name()).is_ok();
    let memory = state.store().get(parsed).await?.filter(|m| visible(m)).ok_or_else(not_found)?;
    if !memory.deprecated {
        return Ok(memory);
    }
    let Some(survivor) = memory.merged_into else { return Err(not_found()) };
    match state.store().get(survivor).await?.filter(|m| visible(m)) {
        Some(_) => Err(ApiError::not_found(format!("node {} was merged into {}", node_id(parsed), node_id(survivor)))
            .with_merged_into(node_id(survivor))),
        None => Err(not_found()),
    }
}

pub(super) async fn load_node(state: &AppState, id: MemoryId) -> ApiResult<NodeView> {
    let memory = state.store().get(id).await?.ok_or_else(|| ApiError::internal(format!("node {id} vanished")))?;
    Ok(node_view(memory))
}

pub(super) fn node_view(memory: Memory) -> NodeView {
    let mut metadata = memory.metadata;
    let node_type = match metadata.remove(TYPE_KEY) {
        Some(Value::String(node_type)) => node_type,
        _ => "concept".to_owned(),
    };
    NodeView {
        id: node_id(memory.id),
        node_type,
        subtype: memory.kind,
        content_title: memory.title.unwrap_or_default(),
        content_body: memory.content,
        namespace: memory.scope.namespace_name().to_owned(),
        state_lifecycle: memory.lifecycle.as_str().to_owned(),
        occurrence_count: memory.occurrence_count,
        metadata,
        created_at: memory.created_at,
        updated_at: memory.updated_at,
    }
}

pub(super) fn edge_view(edge: dedup_store::Edge) -> EdgeView {
    EdgeView {
        source_id: node_id(edge.source),
        target_id: node_id(edge.target),
        edge_type: edge.kind,
        created_at: edge.created_at,
    }
}

/// The scope of a request's namespace (default `default`), if the token may use it.
pub(crate) fn scope_of(state: &AppState, namespace: Option<&str>, principal: &Principal) -> ApiResult<Scope> {
    scope_in(state, None, namespace, principal)
}

/// Like [`scope_of`], in `domain` when given (else the configured one).
pub(crate) fn scope_in(
    state: &AppState,
    domain: Option<&str>,
    namespace: Option<&str>,
    principal: &Principal,
) -> ApiResult<Scope> {
    let namespace = namespace.unwrap_or(dedup_store::DEFAULT_NAMESPACE);
    let scope = Scope::new(domain.unwrap_or(&state.config().domain), namespace)?;
    principal.allow(namespace)?;
    Ok(scope)
}

/// 400 when a title is over [`MAX_TITLE_BYTES`] (or the configured text limit, if lower)
/// or holds NUL.
pub(crate) fn check_title(state: &AppState, what: &str, title: &str) -> ApiResult<()> {
    let limit = state.config().max_text_bytes.min(MAX_TITLE_BYTES);
    if title.len() > limit {
        return Err(ApiError::bad_request(format!(
            "{what} is {} bytes, over the limit of {limit} bytes for a title",
            title.len()
        )));
    }
    check_text(state, what, title)
}

/// 400 when a text field is over the configured limit or holds NUL.
pub(crate) fn check_text(state: &AppState, what: &str, text: &str) -> ApiResult<()> {
    let limit = state.config().max_text_bytes;
    if text.len() > limit {
        return Err(ApiError::bad_request(format!("{what} is {} bytes, over the limit of {limit} bytes", text.len())));
    }
    if text.contains('\0') {
        return Err(ApiError::bad_request(format!("{what} must not contain NUL characters")));
    }
    Ok(())
}

/// The subtype as stored and compared: seed 001 writes custom subtypes as
/// `custom:<name>`, so a bare name (no `:`) means the same subtype and is stored with the
/// prefix; `lesson` and `custom:lesson` are one subtype. 400 for an invalid name.
pub(super) fn canonical_subtype(subtype: &str) -> ApiResult<String> {
    let canonical = if subtype.contains(':') { subtype.to_owned() } else { format!("custom:{subtype}") };
    let valid = canonical.len() <= 64
        && subtype.starts_with(|c: char| c.is_ascii_alphanumeric())
        && subtype.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if valid {
        Ok(canonical)
    } else {
        Err(ApiError::bad_request(format!(
            "invalid subtype {subtype:?}: 1-64 ASCII letters, digits, '_', '-', '.' or ':', starting with a letter or \
             digit (a name without ':' is stored as custom:<name>)"
        )))
    }
}

pub(super) fn filter(state: &AppState, subtype: &str) -> SearchFilter {
    SearchFilter::kind(subtype).with_dims(state.config().nodes.comparison_dims)
}

/// `local` with the local judge; nothing with the cosine one (seed 001's shape).
pub(super) fn judge_name(state: &AppState) -> Option<String> {
    state.pair_judge().local_judge().map(|_| state.pair_judge().name().to_owned())
}

/// How often the gate re-asks the store after the local judge kept apart a node that
/// raced in under the lock, before storing without the semantic recheck.
pub(super) const LOCK_RETRIES: usize = 8;

/// The nodes of `subtype` nearest `embedding`, from the connect threshold or the pair
/// judge's floor, whichever is lower.
pub(super) async fn search(
    state: &AppState,
    scope: &Scope,
    subtype: &str,
    model: &str,
    embedding: &Embedding,
    limit: usize,
) -> dedup_store::Result<Vec<Neighbour>> {
    let nodes = &state.config().nodes;
    let min_score = Some(nodes.connect_threshold.min(state.pair_judge().floor(nodes.duplicate_threshold)));
    state.store().search_filtered(scope, model, embedding, limit, &filter(state, subtype), min_score).await
}

/// The neighbours as matches, judged against `new_text` (a node's [`node_text`]): a
/// duplicate when the pair judge says so, else a connection at or above the connect
/// threshold; the rest are dropped.
pub(super) async fn describe_matches(
    state: &AppState,
    new_text: &str,
    neighbours: &[Neighbour],
) -> ApiResult<Vec<SimilarMatch>> {
    let nodes = &state.config().nodes;
    let mut matches = Vec::with_capacity(neighbours.len());
    for neighbour in neighbours {
        // A node deleted since the search is no match.
        let Some(memory) = state.store().get(neighbour.id).await? else { continue };
        let title = memory.title.unwrap_or_else(|| "Untitled".to_owned());
        let judgement = state.pair_judge().judge_pair(
            new_text,
            &node_text(&title, &memory.content),
            neighbour.score,
            nodes.duplicate_threshold,
        );
        let action = if judgement.is_duplicate() {
            Action::Duplicate
        } else if neighbour.score >= nodes.connect_threshold {
            Action::Connect
        } else {
            continue;
        };
        matches.push(SimilarMatch {
            node_id: node_id(neighbour.id),
            title,
            similarity: round4(neighbour.score),
            action,
            lifecycle: memory.lifecycle.as_str().to_owned(),
            reasons: if state.pair_judge().local_judge().is_some() { judgement.reasons } else { Vec::new() },
        });
    }
    Ok(matches)
}

pub(super) fn recommend(matches: &[SimilarMatch]) -> Recommendation {
    if matches.iter().any(|m| m.action == Action::Duplicate) {
        Recommendation::DuplicateFound
    } else if matches.is_empty() {
        Recommendation::Unique
    } else {
        Recommendation::SimilarFound
    }
}

pub(super) fn record_check(scope: &Scope, matches: &[SimilarMatch], started: Instant) {
    let duplicate = matches.iter().any(|m| m.action == Action::Duplicate);
    dedup_metrics::check_completed(scope.namespace_name(), duplicate);
    dedup_metrics::check_duration("total", started.elapsed().as_secs_f64() * 1e3);
    if let Some(best) = matches.first() {
        #[allow(clippy::cast_possible_truncation)]
        dedup_metrics::similarity(scope.namespace_name(), best.similarity as f32);
    }
}

/// Rounds to 4 decimals, as the seed's `Math.round(similarity * 10000) / 10000`.
pub(super) fn round4(score: f32) -> f64 {
    (f64::from(score) * 10_000.0).round() / 10_000.0
}
