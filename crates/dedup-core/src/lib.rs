//! Pure deduplication logic for memdedup, with no I/O and no async runtime.
//!
//! The main types are [`Embedding`] (a unit-normalised `f32` vector), [`Threshold`]
//! (a similarity cut-off in `[0, 1]` resolved from argument, environment and default),
//! [`group_by_similarity`] (connected components of the "cosine >= threshold" graph,
//! computed tile by tile in parallel), [`group_confirmed`] (groups from the links a judge
//! confirmed, where a [`Linkage`] stops a hub from chaining non-duplicates), [`MergePlan`]
//! (seed 000's first-entry-wins merge with summed counters), [`ContentHash`] (SHA-256 of
//! normalised text, the exact-duplicate key) and [`Playbook`] (the agent playbook file,
//! round-tripped without losing fields it does not understand). For seed 002's fact memory, [`fact_key`] is the
//! casefolded duplicate key of a fact, [`FactPolicy`] says which facts a scope keeps and
//! [`format_context`] renders a [`MemoryProfile`] and facts for a prompt within a token
//! budget measured by a [`TokenCounter`]; [`parse_extracted_facts`] validates the facts a
//! model extracted from a conversation. For seed 003's assisted dedup, [`JudgeBatch`] and
//! [`JudgeResponse`] are the judge's payload and reply, [`validate_response`] holds a reply
//! to the contract, and [`choose_survivor`], [`choose_text`] (with its specificity guard
//! over [`specifics`]) and [`merge_metadata`] decide what a confirmed group becomes. For
//! the HTTP clients of other crates, [`RetryPolicy`] computes jittered backoff and honours
//! [`parse_retry_after`], and [`extract_json_object`] finds the JSON object in a model's
//! reply. For seed 004's pre-compact hook, [`analyze_messages`] finds the decisions,
//! lessons, conventions and preferences a conversation states, as [`CaptureCandidate`]s.
//!
//! **Architecture invariant:** this crate depends on no async runtime, no database driver,
//! no HTTP client and no ONNX Runtime. Everything here is deterministic and testable with
//! hand-made vectors.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod api_error;
mod capture;
mod content_hash;
mod contrast;
mod embedding;
mod error;
mod facts;
mod group;
mod group_merge;
mod json_reply;
mod judge;
mod judged;
mod learned_judge;
mod local_judge;
mod merge;
mod playbook;
mod quality;
mod retry;
mod secrets;
mod specifics;
pub mod strict_json;
mod threshold;
mod word_diff;
mod wording;

pub use api_error::{MAX_API_ERROR_TEXT, api_error_message, error_chain, truncate_error_text};
pub use capture::{
    CaptureAnalysis, CaptureCandidate, CaptureKind, CaptureLimits, ConversationMessage, MAX_CANDIDATE_CHARS,
    MAX_CAPTURE_CANDIDATES, MIN_CANDIDATE_CHARS, Speaker, analyze_conversation, analyze_messages,
    analyze_messages_with, memorability,
};
pub use content_hash::{ContentHash, is_blank, normalize_content};
pub use contrast::{CONTRAST_KINDS, Contrast, TextFeatures, contrast, contrast_features};
pub use embedding::Embedding;
pub use error::{Error, Result};
pub use facts::{
    CharEstimate, Cl100kTokens, DEFAULT_CONFIDENCE_THRESHOLD, DEFAULT_MAX_FACTS, DEFAULT_MAX_TOKENS, ExtractedFact,
    ExtractedFacts, FactCategory, FactError, FactPolicy, FactView, HistoryContext, InvalidFact, MAX_FACT_CONTENT_CHARS,
    MemoryProfile, ProfileSection, TRUNCATION_MARKER, TokenCounter, UserContext, default_token_counter, fact_key,
    format_context, parse_extracted_facts, read_extracted_facts,
};
pub use group::{
    Edge, Group, GroupOptions, GuardedGrouping, Linkage, RefusedLink, SCORE_TOLERANCE, group_by_similarity,
    group_by_similarity_with, group_confirmed,
};
pub use group_merge::{
    MemberView, TextChoice, TextLimits, best_existing_text, canonical_text_problem, choose_survivor, choose_text,
    merge_metadata,
};
pub use json_reply::{extract_json_object, json_type};
pub use judge::{
    CandidateEdge, ContractError, ContractLimits, JudgeBatch, JudgeGroup, JudgeMemory, JudgeMode, JudgeResponse,
    JudgeRules, MAX_CANONICAL_SENTENCES, MAX_REASON_CHARS, MemoryStatus, UncertainPair, ValidatedResponse, Violation,
    validate_response,
};
pub use judged::{
    JudgedGrouping, MAX_COMPLETED_COMPONENT, RejectedPair, completion_pairs, group_by_cosine, group_judged,
    group_learned, keep_nearest, learned_candidates, similar_pairs,
};
pub use learned_judge::{
    DEFAULT_CANDIDATES, Decision, FEATURES, LearnedJudgeSettings, MAX_CANDIDATES, PairScorer, PairScores,
    RELATED_COSINE, RELATIONS, Relation, SAME_WORDING_REASON, WEIGHTS_FORMS, same_without_model,
};
pub use local_judge::{LocalJudge, LocalJudgeParams, PairJudgement, PairVerdict};
pub use merge::{Absorbed, MergePlan, MergedGroup, merge_counters};
pub use playbook::{CANONICAL_SECTIONS, Entry, EntryRef, Playbook};
pub use quality::{Labelled, PairScore, score_grouping};
pub use retry::{RetryPolicy, parse_retry_after};
pub use secrets::{REDACTION_PREFIX, SecretAction, SecretFinding, find_secrets, redact_secrets};
pub use specifics::{Specific, missing_specifics, sentence_count, specifics};
pub use threshold::{DEFAULT_THRESHOLD, THRESHOLD_ENV_VAR, Threshold};
pub use word_diff::{DiffWord, word_diff};
pub use wording::{same_wording, wording};
