//! What a run did: [`RunReport`], with one [`MergeSummary`] per merge and, for a dry run,
//! one [`Proposal`] per group the judge confirmed.

use dedup_core::{JudgeMode, TextChoice};
use dedup_llm::TokenUsage;
use dedup_store::{MemoryId, MergeId};
use serde::Serialize;

/// A merge the run made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MergeSummary {
    /// Its ledger id, for `undo`.
    pub merge_id: MergeId,
    /// The memory that stays.
    pub survivor: MemoryId,
    /// The memories folded into it.
    pub absorbed: Vec<MemoryId>,
    /// Where the survivor's text came from.
    pub text: TextChoice,
    /// The judge's confidence.
    pub confidence: f64,
    /// The judge's reason.
    pub reason: String,
}

/// A merge a dry run would make.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Proposal {
    /// The batch that proposed it.
    pub batch_id: String,
    /// The memory that would stay.
    pub survivor: MemoryId,
    /// The memories that would be folded into it.
    pub absorbed: Vec<MemoryId>,
    /// The text the survivor would have.
    pub final_text: String,
    /// Where that text comes from.
    pub text: TextChoice,
    /// What the judge proposed.
    pub canonical_text: String,
    /// The judge's confidence.
    pub confidence: f64,
    /// The judge's reason.
    pub reason: String,
}

/// A memory the run gave up on: its batches failed `max_attempts` times.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExhaustedMemory {
    /// The memory.
    pub id: MemoryId,
    /// Failed attempts.
    pub attempts: u32,
    /// The last failure.
    pub last_error: Option<String>,
}

/// One pass of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PassReport {
    /// 1-based.
    pub pass: usize,
    /// The scope it worked on, as `domain/namespace`.
    pub scope: String,
    /// Bootstrap or incremental.
    pub mode: JudgeMode,
    /// Batches sent to the judge.
    pub batches: usize,
    /// Groups merged (or proposed, in a dry run).
    pub merged: usize,
    /// Memories verified (no duplicate).
    pub marked_verified: usize,
    /// Memories left for a later pass.
    pub deferred: usize,
    /// Batches whose reply was unusable.
    pub failed_batches: usize,
}

/// What an assisted dedup run did. Counts are over memories unless named otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct RunReport {
    /// Names the run in the merge ledger (`memdedup undo --run`).
    pub run_id: String,
    /// Whether nothing was written (`--scan`).
    pub dry_run: bool,
    /// Unverified memories the run decided or sent to the judge.
    pub processed: u64,
    /// Groups merged.
    pub merged: u64,
    /// Memories absorbed by those merges.
    pub absorbed: u64,
    /// Memories marked verified: no duplicate among their candidates.
    pub marked_verified: u64,
    /// Unverified memories the run did not get to (deferred past the last pass, or over
    /// `--limit`); the next run takes them.
    pub skipped: u64,
    /// Unverified memories whose batch failed in this run and that are still unverified;
    /// a run tries each memory's batch at most once, the next run retries.
    pub failed: u64,
    /// Memories left unverified and below the attempt limit: a later run retries them.
    pub retryable: u64,
    /// Groups not merged because a member changed while the judge was deciding; retried.
    pub conflicts: u64,
    /// Judge calls made.
    pub judge_calls: u64,
    /// Tokens the judge calls used.
    pub tokens: TokenUsage,
    /// Characters of payload sent to the judge.
    pub chars_sent: u64,
    /// The passes, in order.
    pub passes: Vec<PassReport>,
    /// The merges made, in order.
    pub merges: Vec<MergeSummary>,
    /// The merges a dry run would make.
    pub proposals: Vec<Proposal>,
    /// Memories given up on (attempts exhausted); reported, not retried.
    pub exhausted: Vec<ExhaustedMemory>,
    /// Distinct failure messages, first ones first (at most 20).
    pub errors: Vec<String>,
    /// The judge's notes on pairs it did not merge, first ones first (at most 200): with
    /// the learned judge, the pairs it was unsure of (to review); with the rules judge,
    /// close pairs it kept apart.
    pub notes: Vec<String>,
}

impl RunReport {
    /// Most distinct error messages kept.
    pub const MAX_ERRORS: usize = 20;
    /// Most judge notes kept.
    pub const MAX_NOTES: usize = 200;

    pub(crate) fn note(&mut self, note: &str) {
        if self.notes.len() < Self::MAX_NOTES && !self.notes.iter().any(|n| n == note) {
            self.notes.push(note.to_owned());
        }
    }

    pub(crate) fn note_error(&mut self, message: String) {
        if self.errors.len() < Self::MAX_ERRORS && !self.errors.contains(&message) {
            self.errors.push(message);
        }
    }
}
