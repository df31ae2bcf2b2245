//! `POST /v1/facts/extract` (seed 002's fact extraction): ask the configured chat model
//! for the facts of one conversation turn and store the confident ones.

use std::collections::BTreeMap;

use axum::Extension;
use axum::extract::State;
use dedup_core::{ExtractedFact, FactPolicy};
use dedup_llm::{ConversationTurn, extract_facts};
use dedup_store::{FactOutcome, NewFact};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::Body;
use crate::facts::FactJson;
use crate::nodes::{check_text, scope_of};
use crate::state::AppState;

/// The message of the 503 when no chat model is configured.
const NO_CHAT_MODEL: &str = "fact extraction needs a chat model and none is configured: set `[judge]` in \
                             memdedup.toml, or MEMDEDUP_JUDGE with MEMDEDUP_JUDGE_URL and MEMDEDUP_JUDGE_MODEL, and \
                             restart the server";

/// `POST /v1/facts/extract` request: one conversation turn.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtractFactsRequest {
    /// What the user said.
    #[schema(example = "I'm moving our billing service to Rust; please always use tabs.")]
    pub user: String,
    /// What the assistant answered.
    #[schema(example = "Got it: tabs from now on.")]
    pub assistant: String,
    /// The namespace the facts go to (default `default`).
    pub namespace: Option<String>,
    /// Facts below this confidence are skipped (default `[server.facts] min_confidence`,
    /// 0.5); in [0, 1].
    #[schema(example = 0.5)]
    pub min_confidence: Option<f64>,
    /// Extract and answer, store nothing (default false).
    pub dry_run: Option<bool>,
}

/// `POST /v1/facts/extract` response (200).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExtractFactsResponse {
    /// Whether this was a dry run (nothing stored).
    pub dry_run: bool,
    /// The namespace.
    pub namespace: String,
    /// The facts at or above the threshold, in the model's order, each with what
    /// storing it did.
    pub facts: Vec<ExtractedFactResult>,
    /// The facts below the threshold: not stored, and not shown.
    pub skipped_low_confidence: SkippedFacts,
    /// The model's facts that were invalid (an unknown category, a confidence out of
    /// range…): not stored; each with its 0-based index in the reply and why, never its
    /// text. The turn's other facts are stored.
    pub skipped_invalid: Vec<SkippedInvalidFact>,
    /// What the model call cost (zero when the turn was blank and no call was made).
    pub usage: Usage,
}

/// One fact of the model's reply that was invalid.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SkippedInvalidFact {
    /// Its 0-based position in the model's `facts` list.
    pub index: usize,
    /// What is wrong with it.
    #[schema(
        example = "`category`: unknown fact category \"mood\" (expected one of: preference, knowledge, context, behavior, goal, correction)"
    )]
    pub reason: String,
}

/// One extracted fact and what storing it did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExtractedFactResult {
    /// The fact as the model stated it.
    pub content: String,
    /// One of the six categories.
    #[schema(example = "preference")]
    pub category: String,
    /// In [0, 1].
    pub confidence: f64,
    /// `added`, `duplicate` (the namespace has it, ignoring case), `outranked` (the
    /// namespace is full of more confident facts) or, on a dry run, `extracted`.
    #[schema(example = "added")]
    pub outcome: &'static str,
    /// The fact added, or the stored fact it duplicates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fact: Option<FactJson>,
    /// Facts evicted to stay within `max_facts`.
    pub evicted: Vec<FactJson>,
}

/// How many facts fell below the threshold, by category.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct SkippedFacts {
    /// How many.
    pub count: usize,
    /// How many of each category (only categories that occur).
    pub categories: BTreeMap<String, usize>,
}

/// Tokens of the model call.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Reply tokens.
    pub output_tokens: u64,
}

/// Extracts the facts of one conversation turn with the configured chat model and
/// stores those at or above the confidence threshold through the fact memory (casefolded
/// dedup, `max_facts`). A reply that is not the expected JSON, or holds any invalid fact
/// (an unknown category, a confidence outside [0, 1]), is 502 and stores nothing.
#[utoipa::path(post, path = "/v1/facts/extract", tag = "facts", request_body = ExtractFactsRequest,
    responses((status = 200, body = ExtractFactsResponse),
              (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 502, body = ErrorBody, description = "the chat model's reply is unusable or it refused the request; nothing stored"),
              (status = 503, body = ErrorBody, description = "`not_configured`: no chat model is configured; `unavailable`: the chat model or the database is down")))]
pub(crate) async fn extract(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Body(request): Body<ExtractFactsRequest>,
) -> ApiResult<axum::Json<ExtractFactsResponse>> {
    let scope = scope_of(&state, request.namespace.as_deref(), &principal)?;
    check_text(&state, "user", &request.user)?;
    check_text(&state, "assistant", &request.assistant)?;
    let limits = &state.config().facts;
    let min_confidence = request.min_confidence.unwrap_or(limits.min_confidence);
    let policy = FactPolicy::new(min_confidence, limits.max_facts)
        .map_err(|e| ApiError::bad_request(format!("min_confidence: {e}")))?;
    let model = state.chat_model().ok_or_else(|| ApiError::not_configured(NO_CHAT_MODEL))?;
    let dry_run = request.dry_run.unwrap_or(false);

    let turn = ConversationTurn { user: request.user, assistant: request.assistant };
    let extraction = extract_facts(model.as_ref(), &turn, min_confidence).await?;

    let mut facts = Vec::with_capacity(extraction.kept.len());
    for extracted in extraction.kept {
        let result = if dry_run {
            ExtractedFactResult::new(&extracted, "extracted", None, Vec::new())
        } else {
            let new = NewFact::new(scope.clone(), &extracted.content, extracted.category, extracted.confidence);
            match state.store().add_fact(new, &policy).await? {
                FactOutcome::Added { fact, evicted } => ExtractedFactResult::new(
                    &extracted,
                    "added",
                    Some(fact.into()),
                    evicted.into_iter().map(FactJson::from).collect(),
                ),
                FactOutcome::Duplicate { existing } => {
                    ExtractedFactResult::new(&extracted, "duplicate", Some(existing.into()), Vec::new())
                }
                FactOutcome::Outranked { .. } => ExtractedFactResult::new(&extracted, "outranked", None, Vec::new()),
                // Every kept fact meets the threshold the policy applies.
                FactOutcome::LowConfidence { .. } => {
                    return Err(ApiError::internal("an extracted fact fell below the threshold it passed"));
                }
                #[allow(unreachable_patterns)]
                _ => return Err(ApiError::internal("unknown fact outcome")),
            }
        };
        facts.push(result);
    }
    let mut skipped = SkippedFacts { count: extraction.skipped_low_confidence.len(), ..SkippedFacts::default() };
    for fact in &extraction.skipped_low_confidence {
        *skipped.categories.entry(fact.category.as_str().to_owned()).or_default() += 1;
    }
    let usage = Usage { input_tokens: extraction.usage.input_tokens, output_tokens: extraction.usage.output_tokens };
    tracing::info!(
        namespace = scope.namespace_name(),
        dry_run,
        kept = facts.len(),
        added = facts.iter().filter(|f| f.outcome == "added").count(),
        skipped_low_confidence = skipped.count,
        skipped_invalid = extraction.skipped_invalid.len(),
        input_tokens = usage.input_tokens,
        output_tokens = usage.output_tokens,
        "extracted facts"
    );
    Ok(axum::Json(ExtractFactsResponse {
        dry_run,
        namespace: scope.namespace_name().to_owned(),
        facts,
        skipped_low_confidence: skipped,
        skipped_invalid: extraction
            .skipped_invalid
            .into_iter()
            .map(|f| SkippedInvalidFact { index: f.index, reason: f.reason })
            .collect(),
        usage,
    }))
}

impl ExtractedFactResult {
    fn new(
        extracted: &ExtractedFact,
        outcome: &'static str,
        fact: Option<FactJson>,
        evicted: Vec<FactJson>,
    ) -> ExtractedFactResult {
        ExtractedFactResult {
            content: extracted.content.clone(),
            category: extracted.category.as_str().to_owned(),
            confidence: extracted.confidence,
            outcome,
            fact,
            evicted,
        }
    }
}
