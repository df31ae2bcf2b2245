//! Collection scan: groups of duplicates in any list of memories, per namespace.

use std::collections::BTreeMap;
use std::sync::Arc;

use dedup_core::{Linkage, LocalJudge, PairScorer, RefusedLink, RejectedPair};

use crate::grouping::{group_off_executor, judged_off_executor, learned_off_executor};
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
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Items link when their cosine is >= this (with a judge: pairs from the lower of this
    /// and the judge's duplicate floor are judged).
    pub threshold: Threshold,
    /// Group across namespaces too (default: only within one).
    pub cross_namespace: bool,
    /// The local judge deciding each pair; `None` links on cosine alone (the seed's way).
    pub judge: Option<Arc<LocalJudge>>,
    /// The learned pair judge deciding each pair whose cosine reaches its candidate floor
    /// (wins over `judge`); pairs it leaves uncertain are never linked and are reported
    /// in [`ScanReport::rejected`].
    pub learned: Option<Arc<dyn PairScorer>>,
    /// How groups may be joined (default [`Linkage::Single`]: chains of links).
    pub linkage: Linkage,
}

impl PartialEq for ScanOptions {
    /// Equal settings; learned judges are equal when they are the same one.
    fn eq(&self, other: &ScanOptions) -> bool {
        let same_learned = match (&self.learned, &other.learned) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        self.threshold == other.threshold
            && self.cross_namespace == other.cross_namespace
            && self.judge == other.judge
            && same_learned
            && self.linkage == other.linkage
    }
}

impl ScanOptions {
    /// Cosine alone at `threshold`, within namespaces, single linkage.
    pub fn new(threshold: Threshold) -> ScanOptions {
        ScanOptions { threshold, cross_namespace: false, judge: None, learned: None, linkage: Linkage::Single }
    }
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
    /// Links the linkage refused (item indices), with the reason.
    pub refused: Vec<RefusedLink>,
    /// Pairs at or above the judge's duplicate floor that the judge kept apart (item
    /// indices), with its reasons; empty without a judge.
    pub rejected: Vec<RejectedPair>,
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
    let (mut refused, mut rejected) = (Vec::new(), Vec::new());
    for indices in partitions.into_values().filter(|p| p.len() >= 2) {
        let part: Vec<_> = indices.iter().map(|&i| embeddings[i].clone()).collect();
        let map = |e: &Edge| Edge { a: indices[e.a], b: indices[e.b], score: e.score };
        if options.judge.is_none() && options.learned.is_none() && options.linkage == Linkage::Single {
            for g in group_off_executor(part, options.threshold).await? {
                groups.push(Group {
                    members: g.members.iter().map(|&m| indices[m]).collect(),
                    edges: g.edges.iter().map(map).collect(),
                    weakest_link: g.weakest_link,
                });
            }
            continue;
        }
        let texts: Vec<String> = indices.iter().map(|&i| items[i].text.clone()).collect();
        let (grouping, part_rejected) = match &options.learned {
            Some(scorer) => {
                learned_off_executor(texts, part, scorer.clone(), options.linkage, options.threshold).await?
            }
            None => judged_off_executor(texts, part, options.judge.clone(), options.linkage, options.threshold).await?,
        };
        for g in grouping.groups {
            groups.push(Group {
                members: g.members.iter().map(|&m| indices[m]).collect(),
                edges: g.edges.iter().map(map).collect(),
                weakest_link: g.weakest_link,
            });
        }
        refused.extend(grouping.refused.into_iter().map(|r| RefusedLink {
            member: indices[r.member],
            other: indices[r.other],
            survivor: indices[r.survivor],
            reason: r.reason,
        }));
        rejected.extend(part_rejected.into_iter().map(|r| RejectedPair { a: indices[r.a], b: indices[r.b], ..r }));
    }
    groups.sort_by_key(|g| g.members[0]);
    refused.sort_by_key(|r| (r.survivor, r.member));
    rejected.sort_by_key(|r| (r.a, r.b));
    let duplicates = groups.iter().map(|g| g.members.len() - 1).sum();
    Ok(ScanReport {
        model: embedder.model_id().to_owned(),
        threshold: options.threshold,
        items: items.len(),
        duplicates,
        groups,
        refused,
        rejected,
    })
}
