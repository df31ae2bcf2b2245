//! The `Store` handle: one async API over the SQLite and Postgres backends.
//!
//! The SQL lives in the backend modules; the queries both backends share are written once
//! in [`shared`] and stamped out per backend. This module holds what is backend-neutral:
//! input validation, error classification and the per-scope vector indexes with their
//! change watermarks.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use dedup_core::{ContentHash, Embedding};

use crate::scope::{validate_kind, validate_name};
use crate::{
    DbLocation, Edge, Error, InsertOutcome, ListFilter, MAX_CONTENT_BYTES, MAX_TITLE_BYTES, Memory, MemoryId,
    MemoryUpdate, Neighbour, NewMemory, Result, Scope, SearchFilter, StoreStats, StoredVector,
};

/// Runs `$body` with `$b` bound to the backend, whichever it is. Defined before the
/// modules below so they can use it too.
macro_rules! dispatch {
    ($store:expr, $b:ident => $body:expr) => {
        match &$store.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite($b) => $body,
            #[cfg(feature = "postgres")]
            Backend::Postgres($b) => $body,
        }
    };
}

#[macro_use]
mod shared;
#[macro_use]
mod facts;
#[macro_use]
mod upkeep;
#[macro_use]
mod dedup_queue;
#[macro_use]
mod merges;
mod index_state;
mod recall;
mod records;
mod registry;
#[macro_use]
mod review;
#[macro_use]
mod changes;

pub use changes::MAX_CHANGES_LISTED;
use index_state::{FreshIndex, IndexHandle, IndexKey, IndexState, top_k};
use records::{CachedRecord, MemoryRecord, VectorRecord, decode_cached, decode_vector, dims_i32};
pub use registry::IndexUsage;
use registry::{IndexLoads, IndexRegistry};
pub use upkeep::RecentCapture;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

/// Longest model id the store accepts, in bytes.
const MAX_MODEL_BYTES: usize = 256;
/// Indexes with more components than this are searched on a blocking thread.
const BLOCKING_SEARCH_COMPONENTS: usize = 1 << 22;

/// How a [`Store`] is opened.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreOptions {
    /// How long to wait for a lock held by another connection or process before failing
    /// with [`Error::Locked`](crate::Error::Locked). Default 5 s.
    pub busy_timeout: Duration,
    /// Most connections in the pool. Default 8.
    pub max_connections: u32,
    /// How long to wait for a connection (and a Postgres server) when opening. Default 5 s.
    pub connect_timeout: Duration,
    /// Most heap bytes the in-process vector indexes of this handle may hold together
    /// ([`VectorIndex::memory_bytes`](crate::VectorIndex::memory_bytes)). Past it, the indexes of the least recently used
    /// scopes that nothing holds are dropped, and loaded again from the database when next
    /// searched. One index larger than the budget is still served. Default
    /// [`DEFAULT_INDEX_MEMORY_BYTES`] (1 GiB, about half a million 384-dimension vectors).
    pub index_memory_bytes: usize,
}

/// The default [`StoreOptions::index_memory_bytes`]: 1 GiB.
pub const DEFAULT_INDEX_MEMORY_BYTES: usize = 1 << 30;

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            busy_timeout: Duration::from_secs(5),
            max_connections: 8,
            connect_timeout: Duration::from_secs(5),
            index_memory_bytes: DEFAULT_INDEX_MEMORY_BYTES,
        }
    }
}

/// A handle to one database. Cheap to share behind an `Arc`; all methods take `&self`.
///
/// Every handle keeps its own in-process vector index per (scope, model), loaded on first
/// use and brought up to date before each search from the scope's change watermark, so
/// several handles (or processes) on one database see each other's writes. Together the
/// indexes stay within [`StoreOptions::index_memory_bytes`]: the least recently used are
/// dropped and loaded again when needed.
pub struct Store {
    location: DbLocation,
    backend: Backend,
    indexes: IndexRegistry,
    busy_timeout: Duration,
    store_id: String,
}

enum Backend {
    #[cfg(feature = "sqlite")]
    Sqlite(sqlite::SqliteBackend),
    #[cfg(feature = "postgres")]
    Postgres(postgres::PgBackend),
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("location", &self.location)
            .field("backend", &self.backend())
            .field("indexes", &self.indexes.len())
            .finish()
    }
}

impl Store {
    /// Opens (creating if needed) the database and applies pending migrations.
    ///
    /// A SQLite file gets its parent directory created, WAL journaling, `synchronous =
    /// NORMAL`, foreign keys and `options.busy_timeout`. Fails with
    /// [`Error::Open`](crate::Error::Open) when the database cannot be reached or is not
    /// a database, [`Error::Locked`](crate::Error::Locked) when another process holds it
    /// locked for longer than the busy timeout, and
    /// [`Error::Migrate`](crate::Error::Migrate) when the schema cannot be brought up to
    /// date.
    pub async fn open(location: &DbLocation, options: &StoreOptions) -> Result<Store> {
        let backend = match location {
            #[cfg(feature = "sqlite")]
            DbLocation::Sqlite(path) => Backend::Sqlite(sqlite::SqliteBackend::open(path, location, options).await?),
            #[cfg(feature = "postgres")]
            DbLocation::Postgres(url) => Backend::Postgres(postgres::PgBackend::open(url, location, options).await?),
            #[allow(unreachable_patterns)]
            other => {
                return Err(Error::InvalidLocation {
                    location: other.redacted(),
                    reason: format!("this build has no {} support (cargo feature `{0}`)", other.backend()),
                });
            }
        };
        let store_id = match &backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(b) => b.store_id().await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(b) => b.store_id().await,
        }
        .map_err(|e| match e {
            Error::Database(source) => open_error(location, options.busy_timeout, source),
            other => other,
        })?;
        tracing::debug!(location = %location, backend = location.backend(), store_id, "store opened");
        Ok(Store {
            location: location.clone(),
            backend,
            indexes: IndexRegistry::new(options.index_memory_bytes),
            busy_timeout: options.busy_timeout,
            store_id,
        })
    }

    /// Where the database is.
    pub fn location(&self) -> &DbLocation {
        &self.location
    }

    /// "sqlite" or "postgres".
    pub fn backend(&self) -> &'static str {
        self.location.backend()
    }

    /// The live memory of `scope` whose content hash is `hash`, if any.
    pub async fn find_exact(&self, scope: &Scope, hash: &ContentHash) -> Result<Option<MemoryId>> {
        let result = dispatch!(self, b => b.find_exact(scope, hash).await);
        self.classify(result)
    }

    /// The `k` live memories of `scope` most similar to `query` among those embedded with
    /// `model`, highest first (ties by lower id). Exact over all of them; sees every
    /// committed write, including other processes'.
    ///
    /// Fails with [`Error::InvalidVector`](crate::Error::InvalidVector) when `query` has
    /// other dimensions than the scope's vectors of `model`.
    pub async fn search(&self, scope: &Scope, model: &str, query: &Embedding, k: usize) -> Result<Vec<Neighbour>> {
        self.search_filtered(scope, model, query, k, &SearchFilter::default(), None).await
    }

    /// Like [`Store::search`], among the memories `filter` selects, compared on the
    /// dimensions it keeps (`query` is truncated the same way), and only hits scoring at
    /// least `min_score` when given.
    pub async fn search_filtered(
        &self,
        scope: &Scope,
        model: &str,
        query: &Embedding,
        k: usize,
        filter: &SearchFilter,
        min_score: Option<f32>,
    ) -> Result<Vec<Neighbour>> {
        validate_model(model)?;
        validate_filter(filter)?;
        if let Some(score) = min_score.filter(|s| !s.is_finite()) {
            return Err(Error::InvalidVector(dedup_core::Error::InvalidThreshold(f64::from(score))));
        }
        let query = filter.comparable(query)?;
        let (key, handle) = self.indexes.handle(scope, model, filter);
        let loads = self.indexes.loads();
        let fresh = dispatch!(self, b => b.fresh_index(Arc::clone(&handle), &key, loads).await);
        let guard = self.classify(fresh)?;
        self.indexes.settle(&key, &handle, guard.memory_bytes());
        drop(handle);
        top_k(guard, &query, k, min_score).await.map(|(_, neighbours)| neighbours)
    }

    /// Stores `memory` unless it duplicates a live memory of its scope, atomically.
    ///
    /// Under the scope's write lock: an exact-hash match gives
    /// [`InsertOutcome::ExactDuplicate`]; else, when `vector` and `threshold` are both
    /// given, the best match among memories embedded with the same model scoring at least
    /// `threshold` gives [`InsertOutcome::SemanticDuplicate`]; else the memory is stored
    /// with `vector` and [`InsertOutcome::Inserted`] returned.
    ///
    /// Input is validated before anything is written: content not blank, at most
    /// [`MAX_CONTENT_BYTES`], no NUL; title at most 1 KiB, no NUL; a valid kind; metadata
    /// without NUL; `vector` of the same dimensions as the scope's stored vectors of its
    /// model; a finite `threshold`.
    pub async fn insert_checked(
        &self,
        memory: NewMemory,
        vector: Option<StoredVector>,
        threshold: Option<f32>,
    ) -> Result<InsertOutcome> {
        self.insert_checked_filtered(memory, vector, threshold, &SearchFilter::default()).await
    }

    /// Like [`Store::insert_checked`], with the semantic check among the memories
    /// `filter` selects, on the dimensions it keeps (the stored vector is the full one).
    /// A memory that [allows repeats](NewMemory::allow_repeats) skips the exact check.
    pub async fn insert_checked_filtered(
        &self,
        memory: NewMemory,
        vector: Option<StoredVector>,
        threshold: Option<f32>,
        filter: &SearchFilter,
    ) -> Result<InsertOutcome> {
        let prepared = PreparedMemory::new(memory)?;
        validate_filter(filter)?;
        if let Some(vector) = &vector {
            validate_model(&vector.model)?;
        }
        if let Some(threshold) = threshold.filter(|t| !t.is_finite()) {
            return Err(Error::InvalidVector(dedup_core::Error::InvalidThreshold(f64::from(threshold))));
        }
        let indexed = match &vector {
            Some(vector) => {
                let comparable = filter.comparable(&vector.embedding)?;
                let (key, handle) = self.indexes.handle(&prepared.memory.scope, &vector.model, filter);
                Some(IndexedInsert { key, handle, comparable, loads: self.indexes.loads_handle() })
            }
            None => None,
        };
        let slot = indexed.as_ref().map(|i| (i.key.clone(), Arc::clone(&i.handle)));
        let result = dispatch!(self, b => b.insert_checked(&prepared, vector.as_ref(), threshold, indexed).await);
        if let Some((key, handle)) = slot {
            let bytes = handle.read().await.memory_bytes();
            self.indexes.settle(&key, &handle, bytes);
        }
        let outcome = self.classify(result)?;
        tracing::debug!(
            fingerprint = prepared.hash.fingerprint(),
            scope = %prepared.memory.scope,
            outcome = ?outcome,
            "insert_checked"
        );
        Ok(outcome)
    }

    /// Retires a live memory: it no longer blocks an equal text, no longer shows in
    /// searches or default listings, and records `merged_into` (a live or deprecated
    /// memory of the same scope) when given. Bumps the scope's change watermark.
    ///
    /// Returns false when the memory was already deprecated (nothing changes then).
    /// Fails with [`Error::NotFound`](crate::Error::NotFound) for an unknown `id` or
    /// `merged_into`, and [`Error::InvalidMerge`](crate::Error::InvalidMerge) when
    /// `merged_into` is `id` itself or in another scope.
    pub async fn deprecate(&self, id: MemoryId, merged_into: Option<MemoryId>) -> Result<bool> {
        if merged_into == Some(id) {
            return Err(Error::InvalidMerge { id, into: id, reason: "a memory cannot be merged into itself" });
        }
        let result = dispatch!(self, b => b.deprecate(id, merged_into).await);
        let Some((scope, version)) = self.classify(result)? else { return Ok(false) };
        tracing::debug!(%id, merged_into = ?merged_into.map(MemoryId::get), %scope, "deprecated");
        self.forget(&scope, id, version).await;
        Ok(true)
    }

    /// Drops `id` from this handle's indexes of `scope` after a write at `version`.
    async fn forget(&self, scope: &Scope, id: MemoryId, version: i64) {
        for handle in self.indexes.handles_of(scope) {
            handle.write().await.apply_removal(id, version);
        }
    }

    /// Changes a memory in place, under its scope's lock, and returns it as stored.
    ///
    /// A content change recomputes the content hash and replaces the memory's vector with
    /// `vector` (or removes it when `vector` is `None`); it fails with
    /// [`Error::Conflict`](crate::Error::Conflict) when the new text equals another live
    /// memory's of the scope (for memories kept unique). Title, lifecycle and metadata
    /// changes leave the vector alone. A new text also puts the memory back in the
    /// assisted-dedup queue (unverified, no last error): it has not been judged. Fails
    /// with [`Error::NotFound`](crate::Error::NotFound)
    /// for an unknown id; the same validation as [`Store::insert_checked`] applies.
    pub async fn update(&self, id: MemoryId, update: MemoryUpdate, vector: Option<StoredVector>) -> Result<Memory> {
        let prepared = PreparedUpdate::new(update, vector)?;
        let result = dispatch!(self, b => b.update(id, &prepared).await);
        let (memory, _) = self.classify(result)?;
        // Indexes of the scope read a changed vector on their next refresh.
        tracing::debug!(%id, "updated");
        Ok(memory)
    }

    /// Deletes a memory for good: its row, vector and edges. Memories merged into it keep
    /// their history without the link. Returns false when there was no such memory.
    ///
    /// Fails with [`Error::Conflict`](crate::Error::Conflict) when the merge log names it
    /// as the survivor of a merge (deprecate it instead).
    pub async fn delete(&self, id: MemoryId) -> Result<bool> {
        let result = dispatch!(self, b => b.delete(id).await);
        let Some((scope, version)) = self.classify(result)? else { return Ok(false) };
        self.forget(&scope, id, version).await;
        tracing::debug!(%id, %scope, "deleted");
        Ok(true)
    }

    /// The edges that start or end at `id`, oldest first.
    pub async fn edges_of(&self, id: MemoryId) -> Result<Vec<Edge>> {
        let result = dispatch!(self, b => b.edges_of(id).await);
        self.classify(result)
    }

    /// The memory with this id (live or deprecated), if any.
    pub async fn get(&self, id: MemoryId) -> Result<Option<Memory>> {
        let result = dispatch!(self, b => b.get(id).await);
        self.classify(result)
    }

    /// Memories matching `filter`, in id order.
    ///
    /// Fails with [`Error::InvalidName`](crate::Error::InvalidName) when the filter names
    /// an invalid domain or namespace.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<Memory>> {
        if let Some(domain) = &filter.domain {
            validate_name("domain", domain)?;
        }
        if let Some(namespace) = &filter.namespace {
            validate_name("namespace", namespace)?;
        }
        if let Some(kind) = &filter.kind {
            validate_kind(kind)?;
        }
        let result = dispatch!(self, b => b.list(filter).await);
        self.classify(result)
    }

    /// Adds one to a memory's occurrence count (a duplicate of it was seen).
    ///
    /// Fails with [`Error::NotFound`](crate::Error::NotFound) for an unknown id.
    pub async fn note_occurrence(&self, id: MemoryId) -> Result<()> {
        let result = dispatch!(self, b => b.note_occurrence(id).await);
        self.classify(result)
    }

    /// Counts one skipped duplicate in `scope` for `reason` ("exact", "semantic" or
    /// "recent"; any name valid as a namespace is accepted).
    pub async fn record_skip(&self, scope: &Scope, reason: &str) -> Result<()> {
        validate_name("reason", reason)?;
        let result = dispatch!(self, b => b.record_skip(scope, reason).await);
        self.classify(result)
    }

    /// Per-scope counts and skip totals.
    pub async fn stats(&self) -> Result<StoreStats> {
        let result = dispatch!(self, b => b.stats().await);
        let (namespaces, cached_embeddings) = self.classify(result)?;
        Ok(StoreStats { backend: self.backend(), location: self.location.redacted(), namespaces, cached_embeddings })
    }

    /// Cached embeddings of `model` for these raw-text hashes; missing ones are absent.
    pub async fn cached_embeddings(
        &self,
        model: &str,
        hashes: &[ContentHash],
    ) -> Result<HashMap<ContentHash, Embedding>> {
        validate_model(model)?;
        if hashes.is_empty() {
            return Ok(HashMap::new());
        }
        let result = dispatch!(self, b => b.cached_embeddings(model, hashes).await);
        self.classify(result)
    }

    /// Adds embeddings of `model` to the cache (existing entries are kept), in one
    /// transaction.
    pub async fn cache_embeddings(&self, model: &str, entries: &[(ContentHash, Embedding)]) -> Result<()> {
        validate_model(model)?;
        if entries.is_empty() {
            return Ok(());
        }
        let result = dispatch!(self, b => b.cache_embeddings(model, entries).await);
        self.classify(result)
    }

    /// Adds an edge of type `kind` (a valid name, like a namespace) from `source` to
    /// `target`; false if it existed.
    ///
    /// Fails with [`Error::NotFound`](crate::Error::NotFound) when either memory does not
    /// exist.
    pub async fn add_edge(&self, source: MemoryId, target: MemoryId, kind: &str) -> Result<bool> {
        validate_name("kind", kind)?;
        let result = dispatch!(self, b => b.add_edge(source, target, kind).await);
        self.classify(result)
    }

    /// What the in-process vector indexes of this handle hold now, and how often they were
    /// loaded and dropped since it was opened.
    pub fn index_usage(&self) -> IndexUsage {
        self.indexes.usage()
    }

    /// Closes the connection pool, waiting for in-flight queries.
    pub async fn close(&self) {
        dispatch!(self, b => b.pool.close().await);
    }

    /// Turns a driver error meaning "locked by someone else" into [`Error::Locked`].
    fn classify<T>(&self, result: Result<T>) -> Result<T> {
        result.map_err(|error| match error {
            Error::Database(source) => {
                lock_error(&self.location, self.busy_timeout, &source).unwrap_or(Error::Database(source))
            }
            other => other,
        })
    }
}

/// [`Error::Locked`] if `source` says the database is locked by another connection:
/// SQLite's `SQLITE_BUSY` / `SQLITE_LOCKED` (with their extended codes), Postgres's
/// `lock_not_available`.
fn lock_error(location: &DbLocation, busy_timeout: Duration, source: &sqlx::Error) -> Option<Error> {
    let code = source.as_database_error()?.code()?;
    let locked = match location {
        DbLocation::Sqlite(_) => code.parse::<i32>().is_ok_and(|code| matches!(code & 0xff, 5 | 6)),
        DbLocation::Postgres(_) => code == "55P03",
    };
    locked.then(|| Error::Locked {
        location: location.redacted(),
        waited_ms: u64::try_from(busy_timeout.as_millis()).unwrap_or(u64::MAX),
    })
}

/// The error for a database that cannot be opened.
fn open_error(location: &DbLocation, busy_timeout: Duration, source: sqlx::Error) -> Error {
    lock_error(location, busy_timeout, &source).unwrap_or_else(|| Error::Open { location: location.redacted(), source })
}

/// The error for migrations that cannot be applied.
fn migrate_error(location: &DbLocation, busy_timeout: Duration, source: sqlx::migrate::MigrateError) -> Error {
    use sqlx::migrate::MigrateError;
    if let MigrateError::Execute(inner) | MigrateError::ExecuteMigration(inner, _) = &source
        && let Some(locked) = lock_error(location, busy_timeout, inner)
    {
        return locked;
    }
    Error::Migrate { location: location.redacted(), source }
}

/// Checks a search filter's kind and dimensions.
fn validate_filter(filter: &SearchFilter) -> Result<()> {
    if let Some(kind) = &filter.kind {
        validate_kind(kind)?;
    }
    if filter.dims == Some(0) {
        return Err(Error::InvalidVector(dedup_core::Error::EmptyVector));
    }
    Ok(())
}

/// An insert's place in an index: the index and the vector as that index compares it.
pub(crate) struct IndexedInsert {
    key: IndexKey,
    handle: IndexHandle,
    comparable: Embedding,
    loads: Arc<IndexLoads>,
}

/// A validated [`MemoryUpdate`] with what the update needs computed once.
pub(crate) struct PreparedUpdate {
    update: MemoryUpdate,
    hash: Option<ContentHash>,
    metadata_json: Option<String>,
    vector: Option<StoredVector>,
    now: DateTime<Utc>,
    /// Set for an edit recorded in the memory's history.
    note: Option<changes::ChangeNote>,
}

impl PreparedUpdate {
    fn new(update: MemoryUpdate, vector: Option<StoredVector>) -> Result<PreparedUpdate> {
        if let Some(content) = &update.content {
            validate_text("content", content, MAX_CONTENT_BYTES)?;
        }
        if let Some(Some(title)) = &update.title {
            validate_text("title", title, MAX_TITLE_BYTES)?;
        }
        let metadata_json = update.metadata.as_ref().map(metadata_json).transpose()?;
        if let Some(vector) = &vector {
            validate_model(&vector.model)?;
        }
        let hash = update.content.as_deref().map(ContentHash::of);
        Ok(PreparedUpdate { update, hash, metadata_json, vector, now: now(), note: None })
    }

    /// Whether the memory's vector changes (new content, or a new vector for the old one).
    fn changes_vector(&self) -> bool {
        self.update.content.is_some() || self.vector.is_some()
    }
}

/// Metadata as stored: a JSON object without NUL, at most [`MAX_CONTENT_BYTES`].
fn metadata_json(metadata: &serde_json::Map<String, serde_json::Value>) -> Result<String> {
    let metadata = serde_json::Value::Object(metadata.clone());
    if has_nul(&metadata) {
        return Err(Error::InvalidContent { what: "metadata", reason: "must not contain NUL characters".to_owned() });
    }
    let json = metadata.to_string();
    if json.len() > MAX_CONTENT_BYTES {
        return Err(Error::InvalidContent {
            what: "metadata",
            reason: format!("is {} bytes as JSON, over the limit of {MAX_CONTENT_BYTES} bytes", json.len()),
        });
    }
    Ok(json)
}

/// A validated [`NewMemory`] with what the insert needs computed once.
pub(crate) struct PreparedMemory {
    memory: NewMemory,
    hash: ContentHash,
    metadata_json: String,
    now: DateTime<Utc>,
}

impl PreparedMemory {
    fn new(memory: NewMemory) -> Result<PreparedMemory> {
        memory.scope.check_writable()?;
        let metadata_json = validated_metadata_json(&memory)?;
        let hash = ContentHash::of(&memory.content);
        Ok(PreparedMemory { memory, hash, metadata_json, now: now() })
    }
}

impl Store {
    /// Checks `memory` as every insert does, without a database: a valid kind; content
    /// not blank, at most [`MAX_CONTENT_BYTES`], no NUL; title at most 1 KiB, no NUL;
    /// metadata without NUL. Callers storing a batch use it to reject the whole batch
    /// before writing any of it.
    pub fn validate_memory(memory: &NewMemory) -> Result<()> {
        validated_metadata_json(memory).map(drop)
    }
}

/// The checks of [`Store::validate_memory`], returning the metadata as stored.
fn validated_metadata_json(memory: &NewMemory) -> Result<String> {
    validate_kind(&memory.kind)?;
    validate_text("content", &memory.content, MAX_CONTENT_BYTES)?;
    if let Some(title) = &memory.title {
        validate_text("title", title, MAX_TITLE_BYTES)?;
    }
    metadata_json(&memory.metadata)
}

/// Checks content or a title: not too long, not blank (content only; zero-width
/// characters count as blank), no NUL.
fn validate_text(what: &'static str, text: &str, max_bytes: usize) -> Result<()> {
    let reason = if text.len() > max_bytes {
        Some(format!("is {} bytes, over the limit of {max_bytes} bytes", text.len()))
    } else if what == "content" && dedup_core::is_blank(text) {
        // Zero-width characters alone are blank too: they normalise to nothing.
        Some("must not be empty or blank".to_owned())
    } else if text.contains('\0') {
        Some("must not contain NUL characters".to_owned())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidContent { what, reason }),
        None => Ok(()),
    }
}

/// Whether any key or string in `value` holds a NUL (which Postgres cannot store).
fn has_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(has_nul),
        serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// Checks a model id: 1 to 256 bytes, no control characters.
fn validate_model(model: &str) -> Result<()> {
    let reason = if model.is_empty() {
        Some("must not be empty")
    } else if model.len() > MAX_MODEL_BYTES {
        Some("must be at most 256 bytes")
    } else if model.chars().any(char::is_control) {
        Some("must not contain control characters")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidName { what: "model", name: model.to_owned(), reason }),
        None => Ok(()),
    }
}

/// The current time at the precision both backends store (microseconds).
fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// A stable advisory-lock key for a scope: the first 8 bytes of
/// `sha256("memdedup-scope:{domain}/{namespace}")`, big-endian.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn scope_lock_key(scope: &Scope) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("memdedup-scope:{}/{}", scope.domain(), scope.namespace_name()).as_bytes());
    let mut key = [0u8; 8];
    key.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_lock_keys_are_stable_and_distinct() {
        let a = Scope::new("global", "a").unwrap();
        let b = Scope::new("global", "b").unwrap();
        assert_eq!(scope_lock_key(&a), scope_lock_key(&a.clone()));
        assert_ne!(scope_lock_key(&a), scope_lock_key(&b));
    }

    #[test]
    fn content_validation_names_the_problem() {
        let scope = Scope::default();
        let err = |m: NewMemory| PreparedMemory::new(m).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(err(NewMemory::new(scope.clone(), " \n")), "invalid content: must not be empty or blank");
        assert!(err(NewMemory::new(scope.clone(), "a\0b")).contains("NUL"));
        assert_eq!(
            err(NewMemory::new(scope.clone(), "\u{200b}\u{feff} \u{2060}")),
            "invalid content: must not be empty or blank"
        );
        assert_eq!(
            err(NewMemory::new(scope.clone(), "a\u{200b}")),
            "",
            "visible text with a zero-width character is fine"
        );
        assert!(err(NewMemory::new(scope.clone(), "x".repeat(MAX_CONTENT_BYTES + 1))).contains("over the limit"));
        assert!(err(NewMemory::new(scope.clone(), "ok").with_title("t".repeat(1025))).starts_with("invalid title"));
        assert!(err(NewMemory::new(scope.clone(), "ok").with_kind("no kind")).starts_with("invalid kind"));
        let mut metadata = serde_json::Map::new();
        metadata.insert("k".to_owned(), serde_json::json!(["a\0"]));
        assert!(err(NewMemory::new(scope.clone(), "ok").with_metadata(metadata)).starts_with("invalid metadata"));
        assert!(PreparedMemory::new(NewMemory::new(scope, "x".repeat(MAX_CONTENT_BYTES))).is_ok());
    }

    #[test]
    fn model_ids_with_slashes_are_valid() {
        assert!(validate_model("sentence-transformers/all-MiniLM-L6-v2").is_ok());
        assert!(validate_model("").is_err());
        assert!(validate_model("a\nb").is_err());
    }

    /// A driver error with just a code, as SQLite and Postgres report them.
    #[derive(Debug)]
    struct CodedError(&'static str);

    impl fmt::Display for CodedError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "code {}", self.0)
        }
    }

    impl std::error::Error for CodedError {}

    impl sqlx::error::DatabaseError for CodedError {
        fn message(&self) -> &str {
            "coded"
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.0.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    #[test]
    fn lock_errors_are_recognised_by_backend() {
        let sqlite = DbLocation::Sqlite("/tmp/x.db".into());
        let postgres = DbLocation::Postgres("postgres://u:pw@h/db".into());
        let locked = |location: &DbLocation, code: &'static str| {
            let error = sqlx::Error::Database(Box::new(CodedError(code)));
            lock_error(location, Duration::from_millis(250), &error)
        };
        // SQLITE_BUSY, SQLITE_LOCKED and their extended codes (BUSY_SNAPSHOT, LOCKED_SHAREDCACHE).
        for code in ["5", "6", "517", "262"] {
            let error = locked(&sqlite, code);
            assert!(matches!(&error, Some(Error::Locked { waited_ms: 250, .. })), "{code}: {error:?}");
        }
        // SQLITE_NOTADB, SQLITE_CONSTRAINT_UNIQUE (2067), a SQLSTATE that is not a number.
        for code in ["26", "2067", "55P03"] {
            assert!(locked(&sqlite, code).is_none(), "{code}");
        }
        let error = locked(&postgres, "55P03");
        assert!(error.is_some_and(
            |e| e.to_string() == "database postgres://u:***@h/db is locked by another process (waited 250 ms)"
        ));
        assert!(locked(&postgres, "23505").is_none());
        assert!(lock_error(&sqlite, Duration::ZERO, &sqlx::Error::RowNotFound).is_none());
    }
}
