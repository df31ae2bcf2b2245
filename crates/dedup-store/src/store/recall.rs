//! Recall over several scopes: the scopes that hold live memories, and the live memories
//! of a set of scopes nearest a query vector, best first.

use dedup_core::Embedding;

use super::Store;
use crate::{HOOK_FAILURE_NAMESPACE, Memory, Result, Scope};

impl Store {
    /// Every scope with live memories (of `domain`, when given), in (domain, namespace)
    /// order; the reserved hook-failure namespace, which holds none, is never listed.
    pub async fn scopes_with_memories(&self, domain: Option<&str>) -> Result<Vec<Scope>> {
        let stats = self.stats().await?;
        Ok(stats
            .namespaces
            .iter()
            .filter(|n| n.live > 0 && n.namespace != HOOK_FAILURE_NAMESPACE)
            .filter(|n| domain.is_none_or(|d| d == n.domain))
            .filter_map(|n| Scope::new(&n.domain, &n.namespace).ok())
            .collect())
    }

    /// The live memories of `scopes` nearest `query` (vectors of `model`), at most `k`,
    /// best first (ties by id), each with its cosine. A memory merged away or deleted since
    /// an index saw it is left out.
    pub async fn search_scopes(
        &self,
        scopes: &[Scope],
        model: &str,
        query: &Embedding,
        k: usize,
    ) -> Result<Vec<(Memory, f32)>> {
        let mut neighbours = Vec::new();
        for scope in scopes {
            neighbours.extend(self.search(scope, model, query, k).await?);
        }
        neighbours.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        let mut found = Vec::new();
        for neighbour in neighbours {
            if found.len() == k {
                break;
            }
            if let Some(memory) = self.get(neighbour.id).await?.filter(|m| !m.deprecated) {
                found.push((memory, neighbour.score));
            }
        }
        Ok(found)
    }
}
