//! The `Store` handle: one async API over the SQLite and Postgres backends.

use std::collections::HashMap;
use std::time::Duration;

use dedup_core::{ContentHash, Embedding};

use crate::{
    DbLocation, InsertOutcome, ListFilter, Memory, MemoryId, Neighbour, NewMemory, Result, Scope, StoreStats,
    StoredVector,
};

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
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            busy_timeout: Duration::from_secs(5),
            max_connections: 8,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// A handle to one database. Cheap to share behind an `Arc`; all methods take `&self`.
#[derive(Debug)]
pub struct Store {
    location: DbLocation,
}

impl Store {
    /// Opens (creating if needed) the database and applies pending migrations.
    pub async fn open(location: &DbLocation, options: &StoreOptions) -> Result<Store> {
        let _ = options;
        Ok(Store { location: location.clone() })
    }

    /// Where the database is.
    pub fn location(&self) -> &DbLocation {
        &self.location
    }

    /// The live memory of `scope` whose content hash is `hash`, if any.
    pub async fn find_exact(&self, scope: &Scope, hash: &ContentHash) -> Result<Option<MemoryId>> {
        let _ = (scope, hash);
        unimplemented!()
    }

    /// The `k` live memories of `scope` most similar to `query` among those embedded with
    /// `model`, highest first. Exact over all of them; sees every committed write,
    /// including other processes'.
    pub async fn search(&self, scope: &Scope, model: &str, query: &Embedding, k: usize) -> Result<Vec<Neighbour>> {
        let _ = (scope, model, query, k);
        unimplemented!()
    }

    /// Stores `memory` unless it duplicates a live memory of its scope, atomically.
    ///
    /// Under the scope's write lock: an exact-hash match gives
    /// [`InsertOutcome::ExactDuplicate`]; else, when `vector` and `threshold` are both
    /// given, the best match among memories embedded with the same model scoring at least
    /// `threshold` gives [`InsertOutcome::SemanticDuplicate`]; else the memory is stored
    /// with `vector` and [`InsertOutcome::Inserted`] returned.
    pub async fn insert_checked(
        &self,
        memory: NewMemory,
        vector: Option<StoredVector>,
        threshold: Option<f32>,
    ) -> Result<InsertOutcome> {
        let _ = (memory, vector, threshold);
        unimplemented!()
    }

    /// The memory with this id (live or deprecated), if any.
    pub async fn get(&self, id: MemoryId) -> Result<Option<Memory>> {
        let _ = id;
        unimplemented!()
    }

    /// Memories matching `filter`, in id order.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<Memory>> {
        let _ = filter;
        unimplemented!()
    }

    /// Adds one to a memory's occurrence count (a duplicate of it was seen).
    pub async fn note_occurrence(&self, id: MemoryId) -> Result<()> {
        let _ = id;
        unimplemented!()
    }

    /// Counts one skipped duplicate in `scope` for `reason` ("exact", "semantic" or
    /// "recent").
    pub async fn record_skip(&self, scope: &Scope, reason: &str) -> Result<()> {
        let _ = (scope, reason);
        unimplemented!()
    }

    /// Per-scope counts and skip totals.
    pub async fn stats(&self) -> Result<StoreStats> {
        unimplemented!()
    }

    /// Cached embeddings of `model` for these raw-text hashes; missing ones are absent.
    pub async fn cached_embeddings(
        &self,
        model: &str,
        hashes: &[ContentHash],
    ) -> Result<HashMap<ContentHash, Embedding>> {
        let _ = (model, hashes);
        unimplemented!()
    }

    /// Adds embeddings of `model` to the cache (existing entries are kept).
    pub async fn cache_embeddings(&self, model: &str, entries: &[(ContentHash, Embedding)]) -> Result<()> {
        let _ = (model, entries);
        unimplemented!()
    }

    /// Adds an edge of type `kind` from `source` to `target`; false if it existed.
    pub async fn add_edge(&self, source: MemoryId, target: MemoryId, kind: &str) -> Result<bool> {
        let _ = (source, target, kind);
        unimplemented!()
    }

    /// Closes the connection pool, waiting for in-flight queries.
    pub async fn close(&self) {}
}
