//! The ledger's record of a merge group at one moment (`before_state`, `after_state`):
//! every member's row and vector row and every edge touching the group, and how two such
//! records (or a plan and a row) are compared, dedup bookkeeping aside.

use std::collections::{BTreeSet, HashSet};

use chrono::{DateTime, Utc};
use dedup_core::ContentHash;
use serde::{Deserialize, Serialize};

use crate::{Error, Lifecycle, Memory, MemoryId, MergeId, Result, Scope};

/// The first field of [`Memory`], dedup bookkeeping aside, on which `a` and `b` differ.
pub(in crate::store) fn changed_field(a: &Memory, b: &Memory) -> Option<&'static str> {
    // Destructured so that a new field of `Memory` cannot be left out unnoticed.
    let Memory {
        id,
        scope,
        kind,
        title,
        content,
        content_hash,
        lifecycle,
        helpful,
        harmful,
        occurrence_count,
        dedup_verified: _,
        dedup_attempts: _,
        dedup_last_error: _,
        deprecated,
        merged_into,
        metadata,
        unique_content,
        embeds_title,
        vector_pending,
        created_at,
        updated_at,
    } = a;
    [
        ("id", *id == b.id),
        ("scope", *scope == b.scope),
        ("kind", *kind == b.kind),
        ("title", *title == b.title),
        ("content", *content == b.content),
        ("content_hash", *content_hash == b.content_hash),
        ("lifecycle", *lifecycle == b.lifecycle),
        ("helpful", *helpful == b.helpful),
        ("harmful", *harmful == b.harmful),
        ("occurrence_count", *occurrence_count == b.occurrence_count),
        ("deprecated", *deprecated == b.deprecated),
        ("merged_into", *merged_into == b.merged_into),
        ("metadata", *metadata == b.metadata),
        ("unique_content", *unique_content == b.unique_content),
        ("embeds_title", *embeds_title == b.embeds_title),
        ("vector_pending", *vector_pending == b.vector_pending),
        ("created_at", *created_at == b.created_at),
        ("updated_at", *updated_at == b.updated_at),
    ]
    .into_iter()
    .find(|(_, same)| !same)
    .map(|(field, _)| field)
}

/// The members of a merge and every edge touching one of them, at one moment: the
/// ledger's `before_state` and `after_state`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LedgerState {
    /// The survivor first, then the absorbed memories in plan order.
    pub(in crate::store) members: Vec<MemberState>,
    pub(in crate::store) edges: BTreeSet<EdgeState>,
}

impl LedgerState {
    pub(in crate::store) fn ids(&self) -> Vec<MemoryId> {
        self.members.iter().map(|m| MemoryId::new(m.id)).collect()
    }

    pub(in crate::store) fn to_json(&self) -> Result<String> {
        serde_json::to_string(self)
            .map_err(|e| Error::Corrupt { table: "merge_log", reason: format!("cannot encode a member state: {e}") })
    }

    pub(in crate::store) fn from_json(merge: MergeId, json: &str) -> Result<LedgerState> {
        serde_json::from_str(json)
            .map_err(|e| Error::Corrupt { table: "merge_log", reason: format!("merge {merge}: bad member state: {e}") })
    }

    /// Why the members as they are now (`current`, in member order, with the edges
    /// touching them) are not as this state has them, if they are not; dedup bookkeeping
    /// aside.
    pub(in crate::store) fn difference(
        &self,
        merge: MergeId,
        current: &[Option<MemberState>],
        edges: &BTreeSet<EdgeState>,
    ) -> Result<Option<String>> {
        for (recorded, now) in self.members.iter().zip(current) {
            let id = recorded.id;
            let Some(now) = now else { return Ok(Some(format!("memory {id} no longer exists"))) };
            if let Some(field) = changed_field(&recorded.memory()?, &now.memory()?) {
                return Ok(Some(format!("memory {id}'s {field} changed since merge {merge}")));
            }
            if recorded.vector != now.vector {
                return Ok(Some(format!("memory {id}'s vector changed since merge {merge}")));
            }
        }
        let members: HashSet<i64> = self.members.iter().map(|m| m.id).collect();
        let member_end = |edge: &EdgeState| if members.contains(&edge.source) { edge.source } else { edge.target };
        if let Some(edge) = edges.difference(&self.edges).next() {
            return Ok(Some(format!(
                "memory {} has an edge added since merge {merge} ({} -{}-> {})",
                member_end(edge),
                edge.source,
                edge.kind,
                edge.target
            )));
        }
        if let Some(edge) = self.edges.difference(edges).next() {
            return Ok(Some(format!(
                "memory {} lost an edge since merge {merge} ({} -{}-> {})",
                member_end(edge),
                edge.source,
                edge.kind,
                edge.target
            )));
        }
        Ok(None)
    }
}

/// One member's row (every column but `change_seq`) and vector row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MemberState {
    pub(in crate::store) id: i64,
    pub(in crate::store) domain: String,
    pub(in crate::store) namespace: String,
    pub(in crate::store) kind: String,
    pub(in crate::store) title: Option<String>,
    pub(in crate::store) content: String,
    pub(in crate::store) content_hash: String,
    pub(in crate::store) lifecycle: String,
    pub(in crate::store) helpful: u64,
    pub(in crate::store) harmful: u64,
    pub(in crate::store) occurrence_count: u64,
    pub(in crate::store) dedup_verified: bool,
    pub(in crate::store) dedup_attempts: u32,
    pub(in crate::store) dedup_last_error: Option<String>,
    pub(in crate::store) deprecated: bool,
    pub(in crate::store) merged_into: Option<i64>,
    pub(in crate::store) metadata: serde_json::Map<String, serde_json::Value>,
    pub(in crate::store) unique_content: bool,
    pub(in crate::store) embeds_title: bool,
    pub(in crate::store) vector_pending: bool,
    pub(in crate::store) created_at: DateTime<Utc>,
    pub(in crate::store) updated_at: DateTime<Utc>,
    pub(in crate::store) vector: Option<VectorState>,
}

impl MemberState {
    pub(in crate::store) fn new(memory: Memory, vector: Option<VectorState>) -> MemberState {
        MemberState {
            id: memory.id.get(),
            domain: memory.scope.domain().to_owned(),
            namespace: memory.scope.namespace_name().to_owned(),
            kind: memory.kind,
            title: memory.title,
            content: memory.content,
            content_hash: memory.content_hash.as_str().to_owned(),
            lifecycle: memory.lifecycle.as_str().to_owned(),
            helpful: memory.helpful,
            harmful: memory.harmful,
            occurrence_count: memory.occurrence_count,
            dedup_verified: memory.dedup_verified,
            dedup_attempts: memory.dedup_attempts,
            dedup_last_error: memory.dedup_last_error,
            deprecated: memory.deprecated,
            merged_into: memory.merged_into.map(MemoryId::get),
            metadata: memory.metadata,
            unique_content: memory.unique_content,
            embeds_title: memory.embeds_title,
            vector_pending: memory.vector_pending,
            created_at: memory.created_at,
            updated_at: memory.updated_at,
            vector,
        }
    }

    /// The row as a [`Memory`].
    pub(in crate::store) fn memory(&self) -> Result<Memory> {
        let id = self.id;
        let corrupt = |reason: String| Error::Corrupt { table: "merge_log", reason: format!("memory {id}: {reason}") };
        let lifecycle: Lifecycle = self.lifecycle.parse().map_err(corrupt)?;
        Ok(Memory {
            id: MemoryId::new(id),
            scope: Scope::new(&self.domain, &self.namespace).map_err(|e| corrupt(e.to_string()))?,
            kind: self.kind.clone(),
            title: self.title.clone(),
            content: self.content.clone(),
            content_hash: ContentHash::from_hex(&self.content_hash)
                .ok_or_else(|| corrupt(format!("content_hash {:?} is not 64 hex digits", self.content_hash)))?,
            lifecycle,
            helpful: self.helpful,
            harmful: self.harmful,
            occurrence_count: self.occurrence_count,
            dedup_verified: self.dedup_verified,
            dedup_attempts: self.dedup_attempts,
            dedup_last_error: self.dedup_last_error.clone(),
            deprecated: self.deprecated,
            merged_into: self.merged_into.map(MemoryId::new),
            metadata: self.metadata.clone(),
            unique_content: self.unique_content,
            embeds_title: self.embeds_title,
            vector_pending: self.vector_pending,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }

    /// Whether making this state current makes the row hold its scope's unique text.
    pub(in crate::store) fn holds_unique_text(&self) -> bool {
        !self.deprecated && self.unique_content
    }
}

/// An `embeddings` row, the vector kept as its exact stored bytes (hex in the ledger).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub(crate) struct VectorState {
    pub(in crate::store) model: String,
    pub(in crate::store) dims: i64,
    #[serde(with = "hex_bytes")]
    pub(in crate::store) vector: Vec<u8>,
}

/// An `edges` row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, sqlx::FromRow)]
pub(crate) struct EdgeState {
    pub(in crate::store) source: i64,
    pub(in crate::store) target: i64,
    pub(in crate::store) kind: String,
    pub(in crate::store) created_at: DateTime<Utc>,
}

/// Bytes as lowercase hex in JSON.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer, de};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        let mut hex = String::with_capacity(bytes.len() * 2);
        for byte in bytes {
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
        }
        serializer.serialize_str(&hex)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let hex = String::deserialize(deserializer)?;
        if !hex.len().is_multiple_of(2) {
            return Err(de::Error::custom("odd number of hex digits"));
        }
        (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                    .ok_or_else(|| de::Error::custom("not a hex digit"))
            })
            .collect()
    }
}

/// Every pair of `ids`, lower id first, sorted.
pub(in crate::store) fn pairs_of(ids: &[MemoryId]) -> Vec<(MemoryId, MemoryId)> {
    let mut sorted = ids.to_vec();
    sorted.sort();
    sorted.dedup();
    let mut pairs = Vec::with_capacity(sorted.len() * sorted.len().saturating_sub(1) / 2);
    for (i, &low) in sorted.iter().enumerate() {
        for &high in &sorted[i + 1..] {
            pairs.push((low, high));
        }
    }
    pairs
}
