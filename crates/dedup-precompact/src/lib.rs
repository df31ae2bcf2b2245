//! Seed 004's check-before-store chain for memdedup: [`DeduplicationService`] asks, in
//! order and stopping at the first hit, whether new content is an exact duplicate (same
//! [`ContentHash`](dedup_core::ContentHash) in its scope), a semantic duplicate (cosine at
//! least the scope's threshold against every live memory of the scope) or a recent capture
//! (seen within the last few minutes: [`StoreRecentCaptures`] by default, kept in the
//! store so separate processes see each other's, [`RedisRecentCaptures`] shared through
//! Redis, or the in-process [`RecentCaptureCache`]), and answers with a
//! [`DuplicateCheckResult`] that carries its evidence.
//!
//! What makes a semantic neighbour a duplicate is the [`PairJudgeChoice`] of the
//! configuration: the cosine threshold alone (the default), or the local judge
//! ([`LocalJudge`]), which vetoes close pairs that a contrast keeps apart (other numbers,
//! a negation, …) and confirms paraphrases in a gray band below the threshold, giving its
//! reasons in [`DuplicateCheckResult::reasons`].
//!
//! Every check fails open: when the embedder, the index or the recent-capture cache is
//! down, that check is skipped, the failure is counted (metrics and
//! [`DuplicateCheckResult::degraded`]) and the remaining checks decide.
//!
//! **Architecture invariant:** this crate sits above `dedup-embed` and `dedup-store` and
//! talks to them only through `Arc<dyn Embedder>` and `Store`. Logs carry hash
//! fingerprints and URNs, never memory text.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod config;
mod error;
mod learned;
pub mod metrics;
mod pair_judge;
mod recent;
#[cfg(feature = "redis")]
mod redis_recent;
mod service;
mod store_recent;

pub use config::{DeduplicationConfig, ENV_PREFIX, PAIR_JUDGE_ENV_VAR};
pub use dedup_core::{LocalJudge, LocalJudgeParams, PairJudgement, PairVerdict};
pub use error::{Error, Result};
pub use learned::{LearnedPairJudge, LoadGuard, ScorerLoader};
pub use pair_judge::{JUDGE_CANDIDATES, JudgeCandidate, PAIR_JUDGE_NAMES, PairDecision, PairJudgeChoice};
pub use recent::{RecentCaptureCache, RecentCaptures, RecentHit};
#[cfg(feature = "redis")]
pub use redis_recent::RedisRecentCaptures;
pub use service::{
    AddOutcome, Backfill, CheckFailure, CheckType, DeduplicationService, DuplicateCheckResult, DuplicateReason,
    EditDuplicate, EditOutcome, EditStatus, HistoryEvent, MemoryHistory, NO_EMBEDDER_NOTE,
};
pub use store_recent::StoreRecentCaptures;
