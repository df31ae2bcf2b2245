//! The crate's one error type.

/// Everything that can go wrong in the store.
///
/// [`Error::is_unavailable`] separates "the database cannot be reached or used right
/// now" from "the request itself is wrong".
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A domain, namespace or kind name is empty, too long or has characters outside
    /// `[A-Za-z0-9_.-]`.
    #[error("invalid {what} {name:?}: {reason}")]
    InvalidName {
        /// Which name: "domain", "namespace" or "kind".
        what: &'static str,
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// Memory content (or a title) is empty, too large or holds a NUL character.
    #[error("invalid {what}: {reason}")]
    InvalidContent {
        /// Which field: "content", "title" or "metadata".
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// A `--db` value or `DATABASE_URL` that is neither a file path nor a Postgres URL.
    #[error("invalid database location {location:?}: {reason}")]
    InvalidLocation {
        /// The rejected value.
        location: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A vector did not match the dimensions of the vectors already stored for its model
    /// in that scope, or was not a valid embedding.
    #[error("invalid vector: {0}")]
    InvalidVector(#[from] dedup_core::Error),
    /// No memory has this id.
    #[error("no memory with id {0}")]
    NotFound(crate::MemoryId),
    /// No fact has this id (seed 002's `KeyError`).
    #[error("no fact with id {0:?}")]
    FactNotFound(String),
    /// A change would make two live records equal where the store keeps them unique: an
    /// edited memory's text equals another live memory's of its scope, or an edited
    /// fact's content equals another fact's.
    #[error("conflict: {reason}")]
    Conflict {
        /// What collided with what.
        reason: String,
    },
    /// An edit with [`MemoryUpdate::unique_in_kind`](crate::MemoryUpdate::unique_in_kind)
    /// would give a memory the title and text of another live memory of its scope and
    /// kind; nothing was written.
    #[error("conflict: memory {id}'s new title and text equal live memory {existing}'s of the same kind")]
    DuplicateEdit {
        /// The memory being edited.
        id: crate::MemoryId,
        /// The live memory it would duplicate.
        existing: crate::MemoryId,
    },
    /// A memory cannot be merged into the one named: itself, or a memory of another
    /// scope.
    #[error("cannot merge memory {id} into {into}: {reason}")]
    InvalidMerge {
        /// The memory being retired.
        id: crate::MemoryId,
        /// The memory it was to be merged into.
        into: crate::MemoryId,
        /// Why not.
        reason: &'static str,
    },
    /// A merge plan groups two memories that an undone merge marked never to merge again
    /// (the mark may be newer than the plan). Nothing was written;
    /// [`Store::clear_never_merge`](crate::Store::clear_never_merge) lifts the marks.
    #[error("cannot merge memory {id} into {into}: an undone merge marked the pair never to merge")]
    MergeBlocked {
        /// The memory being retired.
        id: crate::MemoryId,
        /// The memory it was to be merged into.
        into: crate::MemoryId,
    },
    /// A merge plan no longer matches the database: a member changed, was deprecated or
    /// deleted, or moved scope since the plan was read. Nothing was written; read the
    /// members again and make a new plan.
    #[error("merge conflict on memory {id}: {reason}")]
    MergeConflict {
        /// The member that differs.
        id: crate::MemoryId,
        /// What differs, naming the field.
        reason: String,
    },
    /// No merge in the ledger has this id.
    #[error("no merge with id {0}")]
    MergeNotFound(crate::MergeId),
    /// No change in the memory history has this id.
    #[error("no change with id {0} in the memory history")]
    ChangeNotFound(crate::ChangeId),
    /// A change cannot be undone: it was undone already, it is not an edit or a deletion,
    /// or the memory changed since (nothing was written).
    #[error("cannot undo change {id}: {reason}")]
    ChangeNotUndoable {
        /// The change.
        id: crate::ChangeId,
        /// Why, in words.
        reason: String,
    },
    /// The memory is not live (forgotten, merged or deprecated): it cannot be edited or
    /// forgotten.
    #[error("memory {id} is not live: {reason}")]
    NotLive {
        /// The memory.
        id: crate::MemoryId,
        /// What it is instead.
        reason: String,
    },
    /// No review entry has this id.
    #[error("no review entry with id {0}")]
    ReviewNotFound(crate::ReviewId),
    /// The review entry was decided already, or one of its memories changed since it was
    /// queued: it cannot be decided.
    #[error("review entry {id} cannot be decided: it is {status}")]
    ReviewClosed {
        /// The entry.
        id: crate::ReviewId,
        /// Where it stands.
        status: crate::ReviewStatus,
    },
    /// A merge cannot be undone without losing a later change: it was undone already, a
    /// member was deleted or changed since (its fields, vector or edges), a later merge
    /// changed a member, or a text to be made live again is now held by another live
    /// memory. Nothing was written.
    #[error("cannot undo merge {merge}: {reason}")]
    UndoRefused {
        /// The merge.
        merge: crate::MergeId,
        /// What stands in the way, naming the memory and the change.
        reason: String,
    },
    /// The database could not be opened: missing directory, unreadable file, not a
    /// database, unreachable server, bad credentials.
    #[error("cannot open database {location}: {source}")]
    Open {
        /// The database location (passwords removed).
        location: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The database is locked by another process for longer than the busy timeout.
    #[error("database {location} is locked by another process (waited {waited_ms} ms)")]
    Locked {
        /// The database location.
        location: String,
        /// How long the store waited.
        waited_ms: u64,
    },
    /// Applying the schema migrations failed.
    #[error("cannot migrate database {location}: {source}")]
    Migrate {
        /// The database location (passwords removed).
        location: String,
        /// The migrator's error.
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// A query failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A stored row could not be decoded (for example a vector blob of the wrong length).
    #[error("corrupt row in {table}: {reason}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// What was wrong.
        reason: String,
    },
}

impl Error {
    /// Whether the error means the database is unavailable (a "service is down" error)
    /// rather than that the request was wrong.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Open { .. } | Error::Locked { .. } | Error::Database(_) | Error::Migrate { .. })
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
