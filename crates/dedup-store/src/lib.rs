//! The persistent memory store of memdedup: memories, their embeddings, an embedding
//! cache, edges and the merge ledger, in SQLite (the embedded default) or Postgres (for many
//! processes or hosts sharing one memory), behind one async API, [`Store`].
//!
//! Exact duplicates are impossible by construction: a unique index over
//! (domain, namespace, [`ContentHash`](dedup_core::ContentHash)) among live rows, and
//! [`Store::insert_checked`] turns a losing concurrent insert into
//! [`InsertOutcome::ExactDuplicate`]. Semantic search ([`Store::search`]) is exact top-k
//! cosine over every live memory of one [`Scope`], served from an in-process
//! [`VectorIndex`] that is loaded lazily and kept current through a per-scope change
//! watermark, so writes by other processes are visible before the next search. The
//! indexes of a handle share a memory budget ([`StoreOptions::index_memory_bytes`]): the
//! least recently used are dropped and loaded again on use ([`Store::index_usage`]).
//! Check-then-insert for one scope is serialised (a SQLite write transaction, a Postgres
//! advisory transaction lock), so concurrent paraphrases resolve as if run one by one.
//!
//! Assisted dedup keeps its queue in the memories themselves ([`Store::unverified`],
//! [`Store::mark_verified`]) and merges each confirmed group with [`Store::apply_merge`]
//! from a [`MergePlan`]: one transaction that refuses a stale plan and snapshots the
//! group into the merge ledger, so that [`Store::undo_merge`] restores it exactly.
//!
//! **Architecture invariant:** this crate depends on `dedup-core` only among memdedup's
//! crates. It stores vectors; it never computes them (no embedder, no model).
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
compile_error!("dedup-store needs at least one backend feature: `sqlite` or `postgres`");

mod change;
mod error;
mod facts;
mod index;
mod location;
mod memory;
mod merges;
mod review;
mod scope;
mod store;

pub use change::{Change, ChangeAction, ChangeId, MAX_CHANGE_SOURCE_BYTES};
pub use error::{Error, Result};
pub use facts::{Fact, FactOutcome, FactUpdate, MAX_SOURCE_BYTES, NewFact};
pub use index::VectorIndex;
pub use location::{DATABASE_URL_ENV_VAR, DbLocation, MEMDEDUP_HOME_ENV_VAR};
pub use memory::{
    Edge, InsertOutcome, Lifecycle, ListFilter, MAX_CONTENT_BYTES, MAX_TITLE_BYTES, Memory, MemoryId, MemoryUpdate,
    NamespaceStats, Neighbour, NewMemory, SearchFilter, StoreStats, StoredVector, titled_text,
};
pub use merges::{
    DedupCounts, MAX_DEDUP_ERROR_CHARS, MAX_MERGE_MEMBERS, MAX_RUN_ID_CHARS, MergeFilter, MergeId, MergePlan,
    MergeRecord, TextSource, UndoReport,
};
pub use review::{
    MAX_REVIEW_REASON_CHARS, MAX_REVIEW_REASONS, NewReview, Review, ReviewDecision, ReviewFilter, ReviewId,
    ReviewStatus,
};
pub use scope::{DEFAULT_DOMAIN, DEFAULT_NAMESPACE, HOOK_FAILURE_NAMESPACE, Scope, parse_memory_ref};
pub use store::{DEFAULT_INDEX_MEMORY_BYTES, IndexUsage, MAX_CHANGES_LISTED, RecentCapture, Store, StoreOptions};
