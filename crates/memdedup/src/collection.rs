//! Collection scan: groups of duplicates in any list of memories, per namespace.

use std::collections::BTreeMap;

use crate::playbook::group_off_executor;
use crate::{Edge, Embedder, Group, Result, Threshold, embed_texts};

/// Namespace of items that name none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// One memory of a collection to scan.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectionItem {
    /// The caller's id, echoed back unchanged (string or number). A `Value` holds
    /// integers exactly only within 64 bits: a longer integer read into one becomes a
    /// float, so callers reading ids from text should keep each number's literal beside
    /// the item to print it back (the `memdedup` command does). The scan never reads ids.
    pub id: serde_json::Value,
    /// The memory text.
    pub text: String,
    /// Its namespace; `None` means [`DEFAULT_NAMESPACE`].
    pub namespace: Option<String>,
}

/// How to scan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScanOptions {
    /// Items link when their cosine is >= this.
    pub threshold: Threshold,
    /// Group across namespaces too (default: only within one).
    pub cross_namespace: bool,
}

/// Result of [`scan_collection`].
#[derive(Debug, Clone, PartialEq)]
pub struct ScanReport {
    /// The embedder's model id.
    pub model: String,
    /// The threshold in force.
    pub threshold: Threshold,
    /// Items scanned.
    pub items: usize,
    /// Items that duplicate an earlier one (members of groups other than survivors).
    pub duplicates: usize,
    /// Groups of two or more, ordered by survivor. Member and edge indices point into
    /// the scanned items; all members share one namespace unless the scan was
    /// cross-namespace.
    pub groups: Vec<Group>,
}

/// Finds groups of duplicates among `items`: connected components of "cosine >=
/// threshold", within each namespace unless `options.cross_namespace`.
pub async fn scan_collection(
    items: &[CollectionItem],
    embedder: &dyn Embedder,
    options: ScanOptions,
    progress: &(dyn Fn(usize, usize) + Send + Sync),
) -> Result<ScanReport> {
    let texts: Vec<&str> = items.iter().map(|i| i.text.as_str()).collect();
    let embeddings = if items.len() < 2 { Vec::new() } else { embed_texts(embedder, &texts, progress).await? };
    let mut partitions: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    if embeddings.is_empty() {
        // Nothing to compare.
    } else if options.cross_namespace {
        partitions.insert("", (0..items.len()).collect());
    } else {
        for (i, item) in items.iter().enumerate() {
            partitions.entry(item.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)).or_default().push(i);
        }
    }
    let mut groups = Vec::new();
    for indices in partitions.into_values().filter(|p| p.len() >= 2) {
        let part: Vec<_> = indices.iter().map(|&i| embeddings[i].clone()).collect();
        for g in group_off_executor(part, options.threshold).await? {
            groups.push(Group {
                members: g.members.iter().map(|&m| indices[m]).collect(),
                edges: g.edges.iter().map(|e| Edge { a: indices[e.a], b: indices[e.b], score: e.score }).collect(),
                weakest_link: g.weakest_link,
            });
        }
    }
    groups.sort_by_key(|g| g.members[0]);
    let duplicates = groups.iter().map(|g| g.members.len() - 1).sum();
    Ok(ScanReport {
        model: embedder.model_id().to_owned(),
        threshold: options.threshold,
        items: items.len(),
        duplicates,
        groups,
    })
}
