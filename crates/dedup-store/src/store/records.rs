//! Rows as the backends select them, decoded and checked into the crate's types.

use std::collections::HashMap;
use std::fmt;

use chrono::{DateTime, Utc};
use dedup_core::{ContentHash, Embedding};

use crate::{Error, Lifecycle, Memory, MemoryId, Result, Scope};

/// A `memories` row as selected by the backends.
#[derive(sqlx::FromRow)]
pub(crate) struct MemoryRecord {
    pub(super) id: i64,
    pub(super) domain: String,
    pub(super) namespace: String,
    pub(super) kind: String,
    pub(super) title: Option<String>,
    pub(super) content: String,
    pub(super) content_hash: String,
    pub(super) lifecycle: String,
    pub(super) helpful: i64,
    pub(super) harmful: i64,
    pub(super) occurrence_count: i64,
    pub(super) dedup_verified: bool,
    pub(super) dedup_attempts: i64,
    pub(super) dedup_last_error: Option<String>,
    pub(super) deprecated: bool,
    pub(super) merged_into: Option<i64>,
    pub(super) metadata: String,
    pub(super) unique_content: bool,
    pub(super) embeds_title: bool,
    pub(super) vector_pending: bool,
    pub(super) created_at: DateTime<Utc>,
    pub(super) updated_at: DateTime<Utc>,
}

impl TryFrom<MemoryRecord> for Memory {
    type Error = Error;

    fn try_from(row: MemoryRecord) -> Result<Memory> {
        let id = row.id;
        let corrupt = |reason: String| Error::Corrupt { table: "memories", reason: format!("id {id}: {reason}") };
        let counter =
            |name: &str, value: i64| u64::try_from(value).map_err(|_| corrupt(format!("{name} is negative ({value})")));
        let scope = Scope::new(&row.domain, &row.namespace).map_err(|e| corrupt(e.to_string()))?;
        let content_hash = ContentHash::from_hex(&row.content_hash)
            .ok_or_else(|| corrupt(format!("content_hash {:?} is not 64 hex digits", row.content_hash)))?;
        let lifecycle: Lifecycle = row.lifecycle.parse().map_err(corrupt)?;
        let metadata = match serde_json::from_str(&row.metadata) {
            Ok(serde_json::Value::Object(map)) => map,
            Ok(_) => return Err(corrupt("metadata is not a JSON object".to_owned())),
            Err(e) => return Err(corrupt(format!("metadata is not JSON: {e}"))),
        };
        Ok(Memory {
            id: MemoryId::new(id),
            scope,
            kind: row.kind,
            title: row.title,
            content: row.content,
            content_hash,
            lifecycle,
            helpful: counter("helpful", row.helpful)?,
            harmful: counter("harmful", row.harmful)?,
            occurrence_count: counter("occurrence_count", row.occurrence_count)?,
            dedup_verified: row.dedup_verified,
            dedup_attempts: u32::try_from(row.dedup_attempts)
                .map_err(|_| corrupt(format!("dedup_attempts is out of range ({})", row.dedup_attempts)))?,
            dedup_last_error: row.dedup_last_error,
            deprecated: row.deprecated,
            merged_into: row.merged_into.map(MemoryId::new),
            metadata,
            unique_content: row.unique_content,
            embeds_title: row.embeds_title,
            vector_pending: row.vector_pending,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

/// A row of a scope as an index refresh reads it: the memory and its vector of one model.
#[derive(sqlx::FromRow)]
pub(crate) struct VectorRecord {
    pub(super) id: i64,
    pub(super) deprecated: bool,
    pub(super) dims: Option<i64>,
    pub(super) vector: Option<Vec<u8>>,
}

/// Decodes a stored vector, checking it against its `dims` column.
pub(super) fn decode_vector(table: &'static str, key: &dyn fmt::Display, dims: i64, bytes: &[u8]) -> Result<Embedding> {
    let corrupt = |reason: String| Error::Corrupt { table, reason: format!("{key}: {reason}") };
    if usize::try_from(dims).ok().and_then(|d| d.checked_mul(4)) != Some(bytes.len()) {
        return Err(corrupt(format!("vector of {} bytes does not hold {dims} f32 values", bytes.len())));
    }
    Embedding::from_le_bytes(bytes).map_err(|e| corrupt(e.to_string()))
}

/// An `embedding_cache` row.
#[derive(sqlx::FromRow)]
pub(crate) struct CachedRecord {
    pub(super) text_hash: String,
    pub(super) dims: i64,
    pub(super) vector: Vec<u8>,
}

/// Decodes cache rows into `out`.
pub(super) fn decode_cached(rows: Vec<CachedRecord>, out: &mut HashMap<ContentHash, Embedding>) -> Result<()> {
    for row in rows {
        let hash = ContentHash::from_hex(&row.text_hash).ok_or_else(|| Error::Corrupt {
            table: "embedding_cache",
            reason: format!("text_hash {:?} is not 64 hex digits", row.text_hash),
        })?;
        let embedding =
            decode_vector("embedding_cache", &format_args!("text_hash {}", hash.fingerprint()), row.dims, &row.vector)?;
        out.insert(hash, embedding);
    }
    Ok(())
}

/// An embedding's dimensions as the `INTEGER` column stores them.
pub(super) fn dims_i32(embedding: &Embedding) -> Result<i32> {
    i32::try_from(embedding.dims()).map_err(|_| Error::InvalidContent {
        what: "vector",
        reason: format!("has {} dimensions, too many to store", embedding.dims()),
    })
}
