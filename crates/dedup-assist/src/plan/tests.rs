//! Tests of pass planning: candidates, deferral, packing by budget, bootstrap clusters.

use std::collections::{BTreeMap, HashMap};

use chrono::Utc;
use dedup_core::{ContentHash, JudgeMode, JudgeRules, MemoryStatus};
use dedup_store::{Lifecycle, Memory, MemoryId, Scope};

use super::*;

fn memory(id: i64, verified: bool) -> Memory {
    let content = format!("memory number {id}");
    Memory {
        id: MemoryId::new(id),
        scope: Scope::default(),
        kind: "lesson".into(),
        title: None,
        content_hash: ContentHash::of(&content),
        content,
        lifecycle: Lifecycle::Active,
        helpful: 0,
        harmful: 0,
        occurrence_count: 1,
        dedup_verified: verified,
        dedup_attempts: 0,
        dedup_last_error: None,
        deprecated: false,
        merged_into: None,
        metadata: serde_json::Map::new(),
        unique_content: true,
        embeds_title: false,
        vector_pending: false,
        created_at: Utc::now(),
        updated_at: Utc::now(),
    }
}

fn id(n: i64) -> MemoryId {
    MemoryId::new(n)
}

/// Memories 1..=verified are verified, the rest up to `total` unverified.
fn memories(verified: i64, total: i64) -> BTreeMap<MemoryId, Memory> {
    (1..=total).map(|n| (id(n), memory(n, n <= verified))).collect()
}

/// Symmetric neighbour lists from `(a, b, similarity)` links, highest first.
fn links(pairs: &[(i64, i64, f32)]) -> HashMap<MemoryId, Vec<Neighbour>> {
    let mut out: HashMap<MemoryId, Vec<Neighbour>> = HashMap::new();
    for &(a, b, similarity) in pairs {
        out.entry(id(a)).or_default().push(Neighbour { id: id(b), similarity });
        out.entry(id(b)).or_default().push(Neighbour { id: id(a), similarity });
    }
    for list in out.values_mut() {
        list.sort_by(|x, y| y.similarity.total_cmp(&x.similarity));
    }
    out
}

fn options(batch_size: usize) -> PlanOptions {
    PlanOptions { max_candidates: 8, batch_size, batch_chars: 16_000, rules: JudgeRules::default() }
}

fn plan(
    mode: JudgeMode,
    memories: &BTreeMap<MemoryId, Memory>,
    neighbours: &HashMap<MemoryId, Vec<Neighbour>>,
    queue: &[i64],
    options: PlanOptions,
) -> PassPlan {
    let queue: Vec<MemoryId> = queue.iter().map(|&n| id(n)).collect();
    plan_pass(&PassInput { mode, memories, neighbours, queue: &queue, options, batch_prefix: "run-pass1" })
}

fn ids(batch: &PlannedBatch) -> Vec<i64> {
    batch.batch.memories.iter().map(|m| m.id).collect()
}

#[test]
fn unverified_memories_sharing_a_candidate_share_a_batch() {
    // 1 and 2 verified; 3 and 4 both close to 1; 5 close to 2.
    let memories = memories(2, 5);
    let neighbours = links(&[(3, 1, 0.9), (4, 1, 0.8), (5, 2, 0.7)]);
    let plan = plan(JudgeMode::Incremental, &memories, &neighbours, &[3, 4, 5], options(2));
    assert_eq!(plan.batches.len(), 2, "{plan:#?}");
    assert_eq!(ids(&plan.batches[0]), [1, 3, 4]);
    assert_eq!(plan.batches[0].unverified, [id(3), id(4)]);
    assert_eq!(ids(&plan.batches[1]), [2, 5]);
    for batch in &plan.batches {
        for edge in &batch.batch.candidate_edges {
            let target = batch.batch.memories.iter().find(|m| m.id == edge.target_id).unwrap();
            assert_eq!(target.status, MemoryStatus::Verified);
        }
    }
    assert_eq!(plan.batches[0].batch.batch_id, "run-pass1-batch1");
}

#[test]
fn an_unverified_memory_waits_for_a_lower_unverified_neighbour() {
    let memories = memories(1, 3);
    // 2 and 3 are unverified duplicates of each other; only 3 has a verified candidate.
    let neighbours = links(&[(2, 3, 0.9), (3, 1, 0.6)]);
    let plan = plan(JudgeMode::Incremental, &memories, &neighbours, &[2, 3], options(10));
    assert_eq!(plan.no_candidates, [id(2)]);
    assert_eq!(plan.deferred, [id(3)]);
    assert!(plan.batches.is_empty());
}

#[test]
fn candidates_are_capped_and_closest_first() {
    let memories = memories(10, 11);
    let pairs: Vec<(i64, i64, f32)> = (1..=10).map(|v| (11, v, 0.5 + v as f32 / 100.0)).collect();
    let neighbours = links(&pairs);
    let mut options = options(10);
    options.max_candidates = 3;
    let plan = plan(JudgeMode::Incremental, &memories, &neighbours, &[11], options);
    let edges = &plan.batches[0].batch.candidate_edges;
    let targets: Vec<i64> = edges.iter().map(|e| e.target_id).collect();
    assert_eq!(targets, [10, 9, 8]);
}

#[test]
fn a_candidate_is_in_one_batch_per_pass() {
    // 3, 4, 5 all share candidate 1, but a batch holds two: 5 waits for the next pass.
    let memories = memories(2, 5);
    let neighbours = links(&[(3, 1, 0.9), (4, 1, 0.8), (5, 1, 0.7), (5, 2, 0.6)]);
    let plan = plan(JudgeMode::Incremental, &memories, &neighbours, &[3, 4, 5], options(2));
    assert_eq!(plan.batches.len(), 1, "{plan:#?}");
    assert_eq!(plan.batches[0].unverified, [id(3), id(4)]);
    assert_eq!(plan.deferred, [id(5)]);
}

#[test]
fn the_character_budget_splits_batches() {
    let memories = memories(3, 6);
    let neighbours = links(&[(4, 1, 0.9), (5, 2, 0.9), (6, 3, 0.9)]);
    let mut options = options(10);
    // Each item costs two memories (~110 characters each) and an edge.
    options.batch_chars = 600;
    let plan = plan(JudgeMode::Incremental, &memories, &neighbours, &[4, 5, 6], options);
    assert!(plan.batches.len() >= 2, "{plan:#?}");
    for batch in &plan.batches {
        assert!(batch.batch.to_payload().len() <= 600 + 200, "{}", batch.batch.to_payload().len());
    }
    let decided: usize = plan.batches.iter().map(|b| b.unverified.len()).sum();
    assert_eq!(decided, 3);
}

#[test]
fn bootstrap_clusters_by_strongest_links_and_every_member_is_decided() {
    let memories = memories(0, 6);
    // 1-2-3 strongly linked, 4-5 linked, 6 alone.
    let neighbours = links(&[(1, 2, 0.95), (2, 3, 0.9), (1, 3, 0.85), (4, 5, 0.7)]);
    let plan = plan(JudgeMode::Bootstrap, &memories, &neighbours, &[1, 2, 3, 4, 5, 6], options(10));
    assert_eq!(plan.no_candidates, [id(6)]);
    assert_eq!(plan.batches.len(), 1);
    let batch = &plan.batches[0];
    assert_eq!(ids(batch), [1, 2, 3, 4, 5]);
    assert_eq!(batch.unverified.len(), 5);
    assert_eq!(batch.batch.mode, JudgeMode::Bootstrap);
    assert_eq!(batch.batch.candidate_edges[0].similarity, 0.95, "strongest first");
    assert_eq!(batch.batch.candidate_edges.len(), 4);
}

#[test]
fn bootstrap_cuts_a_large_component_at_its_weakest_links() {
    let memories = memories(0, 4);
    // A chain 1-2 (0.95), 3-4 (0.9) joined by a weak 2-3 (0.55); batches of two.
    let neighbours = links(&[(1, 2, 0.95), (3, 4, 0.9), (2, 3, 0.55)]);
    let plan = plan(JudgeMode::Bootstrap, &memories, &neighbours, &[1, 2, 3, 4], options(2));
    assert_eq!(plan.batches.len(), 2, "{plan:#?}");
    assert_eq!(ids(&plan.batches[0]), [1, 2]);
    assert_eq!(ids(&plan.batches[1]), [3, 4]);
}

#[test]
fn bootstrap_skips_clusters_without_an_unverified_member() {
    let mut memories = memories(0, 4);
    for n in [1, 2] {
        memories.get_mut(&id(n)).unwrap().dedup_verified = true;
    }
    let neighbours = links(&[(1, 2, 0.9), (3, 4, 0.9)]);
    let plan = plan(JudgeMode::Bootstrap, &memories, &neighbours, &[3, 4], options(10));
    assert_eq!(plan.batches.len(), 1);
    assert_eq!(ids(&plan.batches[0]), [3, 4]);
}
