//! memdedup keeps an AI agent's long-term memory free of duplicates.
//!
//! This facade re-exports the types of memdedup's crates and wires them into ready-made
//! operations: [`run_deduplication`] (seed 000's playbook dedup, which never fails),
//! [`deduplicate_playbook`] (the same with a [`DedupReport`] and real errors) and
//! [`scan_collection`] (groups of duplicates in any collection of memories). Embedders are
//! pluggable as `Arc<dyn Embedder>`; the default is the offline [`LocalEmbedder`].
//!
//! For memories that persist, [`Store`] (SQLite or Postgres) holds them and
//! [`DeduplicationService`] answers "is this new memory already known?" (exact → semantic
//! → recent) before storing it; its [`PairJudgeChoice`] (`[dedup] judge`) says whether the
//! cosine threshold alone or the [`LocalJudge`] decides a semantic duplicate.
//! [`ConfigFile`] reads `memdedup.toml`; [`CachedEmbedder`] puts the store's embedding
//! cache in front of any embedder.
//!
//! For conceptual duplicates that similarity alone cannot decide, [`Deduplicator`] runs
//! seed 003's assisted dedup with a [`Judge`] (an LLM through [`LlmJudge`], or offline
//! through [`LocalBatchJudge`], configured by [`JudgeSettings`] from `[judge]` and flags); every merge is logged in the store and
//! can be undone ([`Store::undo_merge`]).
//!
//! **Architecture invariant:** the facade adds wiring, not logic: grouping and merge rules
//! live in `dedup-core`, models in `dedup-embed`. It must not depend on the CLI.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod cached;
mod collection;
mod config;
mod embed;
mod error;
mod grouping;
mod judge;
mod playbook;

#[doc(inline)]
pub use dedup_core::{
    Absorbed, CANONICAL_SECTIONS, DEFAULT_THRESHOLD, Edge, Embedding, Entry, EntryRef, Group, GroupOptions, MergePlan,
    MergedGroup, Playbook, THRESHOLD_ENV_VAR, Threshold, group_by_similarity, group_by_similarity_with,
};
#[doc(inline)]
pub use dedup_core::{
    Contrast, LearnedJudgeSettings, Linkage, LocalJudge, LocalJudgeParams, PairJudgement, PairScorer, PairVerdict,
    RefusedLink, RejectedPair, Relation,
};
#[doc(inline)]
pub use dedup_core::{DiffWord, word_diff};
#[doc(inline)]
pub use dedup_embed::{BatchingEmbedder, Embedder, MODEL_DIR_ENV_VAR, ModelDir};
#[cfg(feature = "local")]
#[doc(inline)]
pub use dedup_embed::{LOCAL_MODEL_ID, LocalEmbedder, LocalOptions, PairJudgeModel};
#[cfg(feature = "openai")]
#[doc(inline)]
pub use dedup_embed::{OpenAiConfig, OpenAiEmbedder};

#[doc(inline)]
pub use dedup_core::{
    ContentHash, FactCategory, FactPolicy, MemoryProfile, TokenCounter, default_token_counter, format_context,
    normalize_content,
};
#[cfg(feature = "redis")]
#[doc(inline)]
pub use dedup_precompact::RedisRecentCaptures;
#[doc(inline)]
pub use dedup_precompact::{
    AddOutcome, CheckFailure, CheckType, DeduplicationConfig, DeduplicationService, DuplicateCheckResult,
    DuplicateReason, EditDuplicate, EditOutcome, EditStatus, HistoryEvent, JUDGE_CANDIDATES, JudgeCandidate,
    LearnedPairJudge, LoadGuard, MemoryHistory, PAIR_JUDGE_ENV_VAR, PAIR_JUDGE_NAMES, PairDecision, PairJudgeChoice,
    RecentCaptureCache, RecentCaptures, ScorerLoader,
};

#[doc(inline)]
pub use dedup_store::{
    Change, ChangeAction, ChangeId, DEFAULT_DOMAIN, DEFAULT_INDEX_MEMORY_BYTES, DbLocation, Fact, FactOutcome,
    FactUpdate, IndexUsage, InsertOutcome, Lifecycle, ListFilter, Memory, MemoryId, MemoryUpdate, NamespaceStats,
    Neighbour, NewFact, NewMemory, Scope, SearchFilter, Store, StoreOptions, StoreStats,
};

#[doc(inline)]
pub use dedup_assist::{
    DedupOptions, Deduplicator, ExhaustedMemory, Judge, JudgeFailure, JudgePrompts, JudgeReply, LlmJudge,
    LocalBatchJudge, MergeSummary, PassReport, Progress, Proposal, RunReport,
};
#[doc(inline)]
pub use dedup_core::{JudgeBatch, JudgeMode, JudgeResponse, TextChoice};
#[doc(inline)]
pub use dedup_store::{MergeFilter, MergeId, MergeRecord, TextSource, UndoReport};

pub use cached::CachedEmbedder;
pub use collection::{CollectionItem, DEFAULT_NAMESPACE, ScanOptions, ScanReport, scan_collection};
pub use config::{
    CLIENT_TOKEN_ENV_VAR, CONFIG_ENV_VAR, CONFIG_FILE_NAME, ClientSettings, ConfigFile, DEFAULT_CLIENT_MAX_REPLY_BYTES,
    DEFAULT_CLIENT_TIMEOUT_MS, EmbedderSettings, INDEX_MEMORY_ENV_VAR, MAX_EMBED_WINDOWS, MAX_HOOK_CANDIDATES,
    MAX_INDEX_MEMORY_MB, SERVER_URL_ENV_VAR,
};
pub use embed::{
    EMBED_CHUNK, EmbedderOptions, default_embedder, embed_texts, local_embedder_with, short_lived_embedder,
};
#[cfg(feature = "local")]
#[doc(inline)]
pub use embed::{attach_learned_judge, learned_pair_judge, pair_judge};
pub use error::{Error, Result};
pub use judge::{JUDGE_ENV_VAR, JUDGE_MODEL_ENV_VAR, JUDGE_URL_ENV_VAR, JudgeKind, JudgeOverrides, JudgeSettings};
pub use playbook::{
    DedupOutcome, DedupReport, PlaybookDedupOptions, deduplicate_playbook, deduplicate_playbook_with,
    run_deduplication, run_deduplication_with,
};

/// The crates behind the facade, for what it does not re-export.
pub mod crates {
    #[doc(inline)]
    pub use dedup_assist as assist;
    #[doc(inline)]
    pub use dedup_core as core;
    #[doc(inline)]
    pub use dedup_embed as embed;
    #[doc(inline)]
    pub use dedup_llm as llm;
    #[doc(inline)]
    pub use dedup_precompact as precompact;
    #[doc(inline)]
    pub use dedup_store as store;
}
