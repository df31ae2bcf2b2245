//! Memories and the values the store API takes and returns.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use dedup_core::{ContentHash, Embedding};
use serde::{Deserialize, Serialize};

use crate::Scope;

/// Largest memory content the store accepts, in bytes (1 MiB).
pub const MAX_CONTENT_BYTES: usize = 1 << 20;

/// Longest memory title the store accepts, in bytes (1 KiB).
pub const MAX_TITLE_BYTES: usize = 1024;

/// A memory's id: unique within one database, assigned by the store, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryId(i64);

impl MemoryId {
    /// Wraps a raw id.
    pub const fn new(id: i64) -> MemoryId {
        MemoryId(id)
    }

    /// The raw id.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for MemoryId {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<MemoryId, Self::Err> {
        s.parse().map(MemoryId)
    }
}

/// Where a memory is in its life: seed 001's lifecycle states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Lifecycle {
    /// In use.
    #[default]
    Active,
    /// Kept, but ranked down.
    Weak,
    /// Kept for history; not injected into prompts.
    Dormant,
}

impl Lifecycle {
    /// The stored spelling: `ACTIVE`, `WEAK` or `DORMANT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Active => "ACTIVE",
            Lifecycle::Weak => "WEAK",
            Lifecycle::Dormant => "DORMANT",
        }
    }
}

impl FromStr for Lifecycle {
    type Err = String;

    fn from_str(s: &str) -> Result<Lifecycle, String> {
        match s.to_ascii_uppercase().as_str() {
            "ACTIVE" => Ok(Lifecycle::Active),
            "WEAK" => Ok(Lifecycle::Weak),
            "DORMANT" => Ok(Lifecycle::Dormant),
            _ => Err(format!("unknown lifecycle {s:?} (expected ACTIVE, WEAK or DORMANT)")),
        }
    }
}

/// A stored memory, as read back from the store.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Memory {
    /// Its id.
    pub id: MemoryId,
    /// Its (domain, namespace).
    pub scope: Scope,
    /// What kind of memory it is ("memory", "lesson", "decision", …).
    pub kind: String,
    /// An optional short title.
    pub title: Option<String>,
    /// The text, exactly as stored.
    pub content: String,
    /// SHA-256 of the normalised content.
    pub content_hash: ContentHash,
    /// Lifecycle state.
    pub lifecycle: Lifecycle,
    /// Times this memory helped.
    pub helpful: u64,
    /// Times this memory harmed.
    pub harmful: u64,
    /// Times this memory was seen: 1 when stored, plus one per duplicate folded into it.
    pub occurrence_count: u64,
    /// Whether an assisted dedup pass has verified it.
    pub dedup_verified: bool,
    /// How many assisted dedup passes tried it.
    pub dedup_attempts: u32,
    /// The last error of an assisted dedup pass, if any.
    pub dedup_last_error: Option<String>,
    /// Whether it was retired (merged into another memory or deleted softly).
    pub deprecated: bool,
    /// The memory it was merged into, if any.
    pub merged_into: Option<MemoryId>,
    /// Free-form metadata (a JSON object).
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Whether its text is kept unique in its scope (false for kinds that may repeat, see
    /// [`NewMemory::allow_repeats`]).
    pub unique_content: bool,
    /// Whether its vector embeds the title with the content (see
    /// [`NewMemory::embed_title`] and [`Memory::embedding_text`]).
    pub embeds_title: bool,
    /// Whether it was stored without the vector its writer wanted (the embedder was down)
    /// and still has none: a backfill embeds it.
    pub vector_pending: bool,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

impl Memory {
    /// Its URN: `memdedup://{domain}/{namespace}/{id}`.
    pub fn urn(&self) -> String {
        self.scope.urn(self.id)
    }

    /// The text its vector embeds: [`titled_text`] of the title and content when it
    /// [`embeds_title`](Memory::embeds_title), else the content alone. A backfill embeds
    /// this, so a vector computed later matches one its writer would have stored.
    pub fn embedding_text(&self) -> Cow<'_, str> {
        match (&self.title, self.embeds_title) {
            (Some(title), true) => Cow::Owned(titled_text(title, &self.content)),
            _ => Cow::Borrowed(&self.content),
        }
    }
}

/// The text a titled memory is embedded as: `"{title}. {body}"`, without the added period
/// when the title already ends a sentence (`.`, `!`, `?`, `:`), and the body alone when the
/// title is blank.
pub fn titled_text(title: &str, body: &str) -> String {
    let title = title.trim();
    if title.is_empty() {
        body.to_owned()
    } else if title.ends_with(['.', '!', '?', ':']) {
        format!("{title} {body}")
    } else {
        format!("{title}. {body}")
    }
}

/// A memory to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    /// Its (domain, namespace).
    pub scope: Scope,
    /// Its kind; validated like a namespace name. Defaults to "memory".
    pub kind: String,
    /// An optional title (at most 1 KiB, no NUL).
    pub title: Option<String>,
    /// The text: not blank, at most [`MAX_CONTENT_BYTES`], no NUL.
    pub content: String,
    /// Free-form metadata.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Whether an equal text already live in the scope makes this one a duplicate (the
    /// default). See [`NewMemory::allow_repeats`].
    pub unique_content: bool,
    /// Whether the vector stored with it embeds [`titled_text`] of its title and content
    /// rather than the content alone (false by default). See [`NewMemory::embed_title`].
    pub embeds_title: bool,
    /// Whether it is stored without the vector its writer wanted (the embedder was down),
    /// so that a backfill embeds it later. See [`NewMemory::vector_pending`].
    pub vector_pending: bool,
}

impl NewMemory {
    /// A memory of kind "memory" with no title and no metadata.
    pub fn new(scope: Scope, content: impl Into<String>) -> NewMemory {
        NewMemory {
            scope,
            kind: "memory".to_owned(),
            title: None,
            content: content.into(),
            metadata: serde_json::Map::new(),
            unique_content: true,
            embeds_title: false,
            vector_pending: false,
        }
    }

    /// Lets this memory repeat the text of a live memory of its scope, and keeps it out
    /// of exact-duplicate lookups: for kinds where every record is distinct by
    /// definition (seed 001's episodes, signals, trades).
    pub fn allow_repeats(mut self) -> NewMemory {
        self.unique_content = false;
        self
    }

    /// Records that the vector stored with this memory embeds [`titled_text`] of its title
    /// and content (as the HTTP service's nodes do), so that a later backfill embeds the
    /// same text ([`Memory::embedding_text`]).
    pub fn embed_title(mut self) -> NewMemory {
        self.embeds_title = true;
        self
    }

    /// Marks this memory, stored without a vector, as awaiting one: its writer wanted a
    /// vector but the embedder was down. A backfill
    /// ([`ListFilter::vector_pending`], [`Store::attach_vector`](crate::Store::attach_vector))
    /// embeds it later. Ignored when a vector is stored with it.
    pub fn vector_pending(mut self) -> NewMemory {
        self.vector_pending = true;
        self
    }

    /// Sets the kind.
    pub fn with_kind(mut self, kind: impl Into<String>) -> NewMemory {
        self.kind = kind.into();
        self
    }

    /// Sets the title.
    pub fn with_title(mut self, title: impl Into<String>) -> NewMemory {
        self.title = Some(title.into());
        self
    }

    /// Sets the metadata.
    pub fn with_metadata(mut self, metadata: serde_json::Map<String, serde_json::Value>) -> NewMemory {
        self.metadata = metadata;
        self
    }
}

/// An embedding together with the id of the model that computed it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVector {
    /// The model id (for example `sentence-transformers/all-MiniLM-L6-v2`).
    pub model: String,
    /// The vector.
    pub embedding: Embedding,
}

/// What [`Store::insert_checked`](crate::Store::insert_checked) did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum InsertOutcome {
    /// A new memory was stored.
    Inserted(MemoryId),
    /// A live memory with the same content hash exists in the scope; nothing was stored.
    ExactDuplicate(MemoryId),
    /// A live memory of the scope is at least as similar as the threshold; nothing was
    /// stored.
    SemanticDuplicate {
        /// The most similar memory.
        id: MemoryId,
        /// Its cosine similarity to the new content.
        score: f32,
    },
}

impl InsertOutcome {
    /// The id stored or matched.
    pub fn id(self) -> MemoryId {
        match self {
            InsertOutcome::Inserted(id) | InsertOutcome::ExactDuplicate(id) => id,
            InsertOutcome::SemanticDuplicate { id, .. } => id,
        }
    }
}

/// One search hit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Neighbour {
    /// The memory.
    pub id: MemoryId,
    /// Cosine similarity to the query.
    pub score: f32,
}

/// Which memories a similarity search compares with, and on how many dimensions.
///
/// The default compares with every live memory of the scope embedded by the model, on all
/// dimensions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SearchFilter {
    /// Only memories of this kind, if set.
    pub kind: Option<String>,
    /// Compare on the first `dims` dimensions, renormalised (Matryoshka truncation), when
    /// set and smaller than the vectors' dimensions.
    pub dims: Option<usize>,
}

impl SearchFilter {
    /// Only memories of `kind`.
    pub fn kind(kind: impl Into<String>) -> SearchFilter {
        SearchFilter { kind: Some(kind.into()), dims: None }
    }

    /// Compares on at most `dims` dimensions.
    pub fn with_dims(mut self, dims: usize) -> SearchFilter {
        self.dims = Some(dims);
        self
    }

    /// `embedding` as this filter compares it: truncated to `dims` and renormalised when
    /// it has more.
    pub fn comparable(&self, embedding: &Embedding) -> Result<Embedding, dedup_core::Error> {
        match self.dims {
            Some(dims) if dims < embedding.dims() => embedding.truncate(dims),
            _ => Ok(embedding.clone()),
        }
    }
}

/// A change to a stored memory; `None` fields stay as they are.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MemoryUpdate {
    /// New text (validated like [`NewMemory::content`]). Its vector is replaced by the
    /// one passed along, or removed when none is.
    pub content: Option<String>,
    /// New title; `Some(None)` removes it.
    pub title: Option<Option<String>>,
    /// New lifecycle state.
    pub lifecycle: Option<Lifecycle>,
    /// New metadata (replaces the old object).
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Refuse the edit with [`Error::DuplicateEdit`](crate::Error::DuplicateEdit) when it would give
    /// the memory the same title and text (after the content hash's normalisation) as
    /// another live memory of its scope and kind: the HTTP service's nodes, which may
    /// repeat a text under another title but never both. Checked under the scope's write
    /// lock, so two processes editing at once cannot both pass.
    pub unique_in_kind: bool,
}

/// A typed link between two memories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Edge {
    /// Where it starts.
    pub source: MemoryId,
    /// Where it ends.
    pub target: MemoryId,
    /// Its type, e.g. `relates_to`.
    pub kind: String,
    /// When it was made.
    pub created_at: DateTime<Utc>,
}

/// Which memories [`Store::list`](crate::Store::list) returns; always in id order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ListFilter {
    /// Only this domain, if set.
    pub domain: Option<String>,
    /// Only this namespace, if set.
    pub namespace: Option<String>,
    /// Also return deprecated memories.
    pub include_deprecated: bool,
    /// Only this kind, if set.
    pub kind: Option<String>,
    /// Only this lifecycle state, if set.
    pub lifecycle: Option<Lifecycle>,
    /// Only ids greater than this (for paging).
    pub after: Option<MemoryId>,
    /// At most this many (0 means no limit).
    pub limit: usize,
    /// Only live memories that have no vector, for a backfill.
    pub without_vector: bool,
    /// Only live memories stored without the vector their writer wanted (the embedder
    /// was down) that still have none; found through an index, so cheap to ask often.
    pub vector_pending: bool,
}

/// Counts for one scope.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NamespaceStats {
    /// The scope's domain.
    pub domain: String,
    /// The scope's namespace.
    pub namespace: String,
    /// Live (not deprecated) memories.
    pub live: u64,
    /// Deprecated memories.
    pub deprecated: u64,
    /// Live memories stored without the vector their writer wanted (the embedder was
    /// down) that still have none: invisible to semantic checks until a backfill embeds
    /// them.
    pub unembedded: u64,
    /// Duplicates skipped in this scope, by reason ("exact", "semantic", "recent").
    pub skipped: BTreeMap<String, u64>,
}

/// What [`Store::stats`](crate::Store::stats) reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreStats {
    /// "sqlite" or "postgres".
    pub backend: &'static str,
    /// The database location (passwords removed).
    pub location: String,
    /// One entry per scope that has memories or skips, in (domain, namespace) order.
    pub namespaces: Vec<NamespaceStats>,
    /// Rows in the embedding cache.
    pub cached_embeddings: u64,
}
