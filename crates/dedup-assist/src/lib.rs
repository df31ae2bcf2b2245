//! Assisted conceptual dedup for memdedup (seed 003): a [`Judge`] confirms which memories
//! are the same lesson in other words, and confirmed groups are merged transactionally,
//! logged in the store's merge ledger and can be undone exactly.
//!
//! The [`Deduplicator`] runs seed 003's loop over one (domain, namespace) at a time:
//! unverified memories are paired with candidates from the verified pool (embedding
//! similarity at least [`DedupOptions::min_sim`], at most
//! [`DedupOptions::max_candidates`] each), packed into batches by a character budget so
//! shared candidates give the judge cross-pair visibility, judged (several calls in flight,
//! results applied one at a time), validated with [`dedup_core::validate_response`] and
//! merged through [`dedup_store::Store::apply_merge`]; survivors are re-queued and passes
//! repeat until nothing changes. A store without a verified pool starts in bootstrap mode.
//! [`LlmJudge`] asks a chat model from `dedup-llm` with [`JudgePrompts`];
//! [`LocalBatchJudge`] asks no model: `dedup-core`'s local judge decides each candidate
//! pair from its texts and cosine, and confirmed pairs form groups by complete linkage.
//!
//! **Architecture invariant:** this crate sits above `dedup-store`, `dedup-embed` and
//! `dedup-llm` and below the facade, the CLI and the HTTP service; it never talks SQL or
//! HTTP itself. The contract of a judge's reply and the merge policy are pure code in
//! `dedup-core`.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod error;
mod judge;
mod local_judge;
mod plan;
mod report;
mod run;

pub use error::{Error, Result};
pub use judge::{Judge, JudgeFailure, JudgePrompts, JudgeReply, LlmJudge};
pub use local_judge::{LEARNED_JUDGE_NAME, LOCAL_JUDGE_NAME, LocalBatchJudge};
pub use report::{ExhaustedMemory, MergeSummary, PassReport, Proposal, RunReport};
pub use run::{DedupOptions, Deduplicator, Progress};
