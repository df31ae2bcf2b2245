//! Planning one pass: which unverified memories go to the judge, with which candidates,
//! packed into which batches (seed 003 §2 and §8). Pure: it works on a snapshot of the
//! scope and the neighbours the runner found.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use dedup_core::{CandidateEdge, JudgeBatch, JudgeMemory, JudgeMode, JudgeRules, MemoryStatus};
use dedup_store::{Memory, MemoryId};

/// Characters a payload spends per memory beyond its text and metadata.
const MEMORY_OVERHEAD_CHARS: usize = 90;
/// Characters a payload spends per candidate edge.
const EDGE_CHARS: usize = 60;

/// A neighbour of a memory: another live memory of its scope and kind at or above
/// `min_sim`, not a pair an undo blocked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Neighbour {
    pub id: MemoryId,
    pub similarity: f32,
}

/// How batches are sized.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PlanOptions {
    /// Candidates per unverified memory (incremental) or neighbours per memory
    /// (bootstrap).
    pub max_candidates: usize,
    /// Most memories to decide per batch.
    pub batch_size: usize,
    /// Character budget of one payload.
    pub batch_chars: usize,
    /// The rules sent with every batch.
    pub rules: JudgeRules,
}

/// One pass's input.
pub(crate) struct PassInput<'a> {
    pub mode: JudgeMode,
    /// The scope's live, eligible memories as read at the start of the pass.
    pub memories: &'a BTreeMap<MemoryId, Memory>,
    /// Neighbours of every memory in `queue` (and, in bootstrap mode, of every memory),
    /// highest similarity first.
    pub neighbours: &'a HashMap<MemoryId, Vec<Neighbour>>,
    /// The unverified memories to decide this pass, in id order.
    pub queue: &'a [MemoryId],
    pub options: PlanOptions,
    /// Prefix of batch ids, e.g. `run-…-pass2`.
    pub batch_prefix: &'a str,
}

/// What a pass will do.
#[derive(Debug, Default)]
pub(crate) struct PassPlan {
    /// Batches for the judge.
    pub batches: Vec<PlannedBatch>,
    /// Unverified memories without any candidate: verified without asking.
    pub no_candidates: Vec<MemoryId>,
    /// Unverified memories left for a later pass: an unverified neighbour is decided first,
    /// or their candidates are in another batch of this pass.
    pub deferred: Vec<MemoryId>,
}

/// One batch and the unverified memories it decides.
#[derive(Debug)]
pub(crate) struct PlannedBatch {
    pub batch: JudgeBatch,
    pub unverified: Vec<MemoryId>,
}

/// Plans one pass in `input.mode`.
pub(crate) fn plan_pass(input: &PassInput<'_>) -> PassPlan {
    match input.mode {
        JudgeMode::Incremental => plan_incremental(input),
        JudgeMode::Bootstrap => plan_bootstrap(input),
    }
}

fn is_verified(input: &PassInput<'_>, id: MemoryId) -> bool {
    input.memories.get(&id).is_some_and(|m| m.dedup_verified)
}

/// Seed 003 §2: each unverified memory against verified candidates only. An unverified
/// memory with a lower-id unverified neighbour decided in this pass waits for the next
/// pass, when that neighbour is verified and can be its candidate: two new duplicates of
/// each other are then still found, and neither can consume the other's bridge.
fn plan_incremental(input: &PassInput<'_>) -> PassPlan {
    let mut plan = PassPlan::default();
    let mut decided: BTreeSet<MemoryId> = BTreeSet::new();
    let mut items: Vec<(MemoryId, Vec<Neighbour>)> = Vec::new();
    for &id in input.queue {
        let neighbours = input.neighbours.get(&id).map(Vec::as_slice).unwrap_or_default();
        if neighbours.iter().any(|n| n.id < id && decided.contains(&n.id)) {
            plan.deferred.push(id);
            continue;
        }
        decided.insert(id);
        let candidates: Vec<Neighbour> = neighbours
            .iter()
            .filter(|n| n.id != id && is_verified(input, n.id))
            .take(input.options.max_candidates)
            .copied()
            .collect();
        if candidates.is_empty() {
            plan.no_candidates.push(id);
        } else {
            items.push((id, candidates));
        }
    }

    // Unverified memories sharing a candidate go to the same batch when they fit, so the
    // judge sees the bridge; a candidate is in at most one batch per pass.
    let components = components_by_shared_candidates(&items);
    let mut packer = Packer::new(input, JudgeMode::Incremental);
    let mut claimed: BTreeSet<MemoryId> = BTreeSet::new();
    for component in components {
        let fits_whole = packer.fits_in_empty(&component, input);
        if fits_whole && !packer.fits(&component, input) {
            packer.close();
        }
        for (id, candidates) in component {
            if candidates.iter().any(|c| claimed.contains(&c.id) && !packer.holds(c.id)) {
                plan.deferred.push(id);
                continue;
            }
            let mut candidates = candidates;
            if !packer.fits(&[(id, candidates.clone())], input) {
                packer.close();
                if candidates.iter().any(|c| claimed.contains(&c.id)) {
                    plan.deferred.push(id);
                    continue;
                }
                // One memory whose candidates exceed the budget alone: keep the closest.
                while candidates.len() > 1 && !packer.fits(&[(id, candidates.clone())], input) {
                    candidates.pop();
                }
            }
            claimed.extend(candidates.iter().map(|c| c.id));
            packer.add(id, &candidates, input);
        }
    }
    packer.close();
    plan.batches = packer.finish();
    plan
}

/// Seed 003 §8: a candidate graph over every live memory, components with the strongest
/// links first; a component larger than a batch is cut by joining its strongest links
/// first up to the batch size.
fn plan_bootstrap(input: &PassInput<'_>) -> PassPlan {
    let mut plan = PassPlan::default();
    let queued: BTreeSet<MemoryId> = input.queue.iter().copied().collect();
    // Undirected edges, each once, strongest first.
    let mut edges: BTreeMap<(MemoryId, MemoryId), f32> = BTreeMap::new();
    for (&id, neighbours) in input.neighbours {
        if !input.memories.contains_key(&id) {
            continue;
        }
        for n in neighbours
            .iter()
            .filter(|n| n.id != id && input.memories.contains_key(&n.id))
            .take(input.options.max_candidates)
        {
            let key = (id.min(n.id), id.max(n.id));
            let entry = edges.entry(key).or_insert(n.similarity);
            *entry = entry.max(n.similarity);
        }
    }
    let mut sorted: Vec<((MemoryId, MemoryId), f32)> = edges.into_iter().collect();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));

    // Capped union-find: join along the strongest links while the cluster fits a batch.
    let mut clusters = CappedUnion::default();
    let cap = input.options.batch_size.max(2);
    for &((a, b), _) in &sorted {
        clusters.join(a, b, cap);
    }
    let mut by_root: BTreeMap<MemoryId, Vec<MemoryId>> = BTreeMap::new();
    for &((a, b), _) in &sorted {
        for id in [a, b] {
            let root = clusters.root(id);
            let members = by_root.entry(root).or_default();
            if !members.contains(&id) {
                members.push(id);
            }
        }
    }
    let strongest: HashMap<MemoryId, f32> = {
        let mut best = HashMap::new();
        for &((a, b), sim) in &sorted {
            if clusters.root(a) == clusters.root(b) {
                let root = clusters.root(a);
                best.entry(root).or_insert(sim);
            }
        }
        best
    };
    let mut groups: Vec<(f32, Vec<MemoryId>)> = by_root
        .into_iter()
        .map(|(root, mut members)| {
            members.sort_unstable();
            (strongest.get(&root).copied().unwrap_or(0.0), members)
        })
        .filter(|(_, members)| members.len() > 1 && members.iter().any(|id| queued.contains(id)))
        .collect();
    groups.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));

    let in_groups: BTreeSet<MemoryId> = groups.iter().flat_map(|(_, m)| m.iter().copied()).collect();
    for &id in input.queue {
        if !in_groups.contains(&id) {
            plan.no_candidates.push(id);
        }
    }
    let mut packer = Packer::new(input, JudgeMode::Bootstrap);
    for (_, members) in groups {
        let cost = packer.bootstrap_cost(&members, input);
        if packer.is_open() && (packer.size + members.len() > cap || packer.chars + cost > input.options.batch_chars) {
            packer.close();
        }
        packer.add_bootstrap(&members, cost, &sorted, input);
    }
    packer.close();
    plan.batches = packer.finish();
    plan
}

/// Groups items (unverified memory, its candidates) into connected components of the
/// "shares a candidate" relation, each in id order, components by smallest id.
fn components_by_shared_candidates(items: &[(MemoryId, Vec<Neighbour>)]) -> Vec<Vec<(MemoryId, Vec<Neighbour>)>> {
    let mut owner: HashMap<MemoryId, usize> = HashMap::new();
    let mut parent: Vec<usize> = (0..items.len()).collect();
    fn find(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for (i, (_, candidates)) in items.iter().enumerate() {
        for c in candidates {
            match owner.get(&c.id) {
                Some(&j) => {
                    let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                    parent[a.max(b)] = a.min(b);
                }
                None => {
                    owner.insert(c.id, i);
                }
            }
        }
    }
    let mut components: BTreeMap<usize, Vec<(MemoryId, Vec<Neighbour>)>> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let root = find(&mut parent, i);
        components.entry(root).or_default().push(item.clone());
    }
    components.into_values().collect()
}

/// Union-find whose sets never grow past a cap.
#[derive(Default)]
struct CappedUnion {
    parent: HashMap<MemoryId, MemoryId>,
    size: HashMap<MemoryId, usize>,
}

impl CappedUnion {
    fn root(&mut self, id: MemoryId) -> MemoryId {
        let mut current = id;
        while let Some(&p) = self.parent.get(&current) {
            if p == current {
                break;
            }
            current = p;
        }
        self.parent.insert(id, current);
        current
    }

    fn join(&mut self, a: MemoryId, b: MemoryId, cap: usize) {
        let (ra, rb) = (self.root(a), self.root(b));
        if ra == rb {
            return;
        }
        let (sa, sb) = (*self.size.get(&ra).unwrap_or(&1), *self.size.get(&rb).unwrap_or(&1));
        if sa + sb > cap {
            return;
        }
        let (keep, gone) = if ra < rb { (ra, rb) } else { (rb, ra) };
        self.parent.insert(gone, keep);
        self.parent.insert(keep, keep);
        self.size.insert(keep, sa + sb);
    }
}

/// Fills batches up to the size and character budgets.
struct Packer<'a> {
    snapshot: &'a BTreeMap<MemoryId, Memory>,
    mode: JudgeMode,
    prefix: &'a str,
    rules: JudgeRules,
    done: Vec<PlannedBatch>,
    memories: BTreeSet<MemoryId>,
    unverified: Vec<MemoryId>,
    edges: Vec<CandidateEdge>,
    size: usize,
    chars: usize,
    open: bool,
}

impl<'a> Packer<'a> {
    fn new(input: &PassInput<'a>, mode: JudgeMode) -> Packer<'a> {
        Packer {
            snapshot: input.memories,
            mode,
            prefix: input.batch_prefix,
            rules: input.options.rules,
            done: Vec::new(),
            memories: BTreeSet::new(),
            unverified: Vec::new(),
            edges: Vec::new(),
            size: 0,
            chars: 0,
            open: false,
        }
    }

    fn is_open(&self) -> bool {
        self.open
    }

    fn holds(&self, id: MemoryId) -> bool {
        self.memories.contains(&id)
    }

    /// Characters `items` add to the current batch.
    fn cost(&self, items: &[(MemoryId, Vec<Neighbour>)], input: &PassInput<'_>) -> usize {
        let mut new: BTreeSet<MemoryId> = BTreeSet::new();
        let mut edges = 0;
        for (id, candidates) in items {
            new.insert(*id);
            new.extend(candidates.iter().map(|c| c.id));
            edges += candidates.len();
        }
        new.retain(|id| !self.memories.contains(id));
        new.iter().map(|id| memory_chars(input, *id)).sum::<usize>() + edges * EDGE_CHARS
    }

    fn fits(&self, items: &[(MemoryId, Vec<Neighbour>)], input: &PassInput<'_>) -> bool {
        !self.open
            || (self.size + items.len() <= input.options.batch_size
                && self.chars + self.cost(items, input) <= input.options.batch_chars)
    }

    fn fits_in_empty(&self, items: &[(MemoryId, Vec<Neighbour>)], input: &PassInput<'_>) -> bool {
        let empty = Packer::new(input, self.mode);
        items.len() <= input.options.batch_size && empty.cost(items, input) <= input.options.batch_chars
    }

    fn add(&mut self, id: MemoryId, candidates: &[Neighbour], input: &PassInput<'_>) {
        let cost = self.cost(&[(id, candidates.to_vec())], input);
        self.open = true;
        self.size += 1;
        self.chars += cost;
        self.memories.insert(id);
        self.unverified.push(id);
        for c in candidates {
            self.memories.insert(c.id);
            self.edges.push(CandidateEdge { source_id: id.get(), target_id: c.id.get(), similarity: c.similarity });
        }
    }

    fn bootstrap_cost(&self, members: &[MemoryId], input: &PassInput<'_>) -> usize {
        members.iter().map(|id| memory_chars(input, *id)).sum::<usize>() + members.len() * EDGE_CHARS
    }

    fn add_bootstrap(
        &mut self,
        members: &[MemoryId],
        cost: usize,
        edges: &[((MemoryId, MemoryId), f32)],
        input: &PassInput<'_>,
    ) {
        self.open = true;
        self.size += members.len();
        self.chars += cost;
        let set: BTreeSet<MemoryId> = members.iter().copied().collect();
        for &id in members {
            self.memories.insert(id);
            if !is_verified(input, id) || input.queue.contains(&id) {
                self.unverified.push(id);
            }
        }
        for &((a, b), sim) in edges {
            if set.contains(&a) && set.contains(&b) {
                self.edges.push(CandidateEdge { source_id: a.get(), target_id: b.get(), similarity: sim });
            }
        }
    }

    fn close(&mut self) {
        if !self.open {
            return;
        }
        self.open = false;
        let memories = std::mem::take(&mut self.memories);
        let mut edges = std::mem::take(&mut self.edges);
        edges.sort_by(|a, b| {
            b.similarity.total_cmp(&a.similarity).then((a.source_id, a.target_id).cmp(&(b.source_id, b.target_id)))
        });
        let mut unverified = std::mem::take(&mut self.unverified);
        unverified.sort_unstable();
        self.size = 0;
        self.chars = 0;
        let number = self.done.len() + 1;
        let memories = memories
            .iter()
            .filter_map(|id| self.snapshot.get(id))
            .map(|m| {
                let mut view = judge_memory(m);
                view.status = if unverified.binary_search(&m.id).is_ok() {
                    MemoryStatus::Unverified
                } else {
                    MemoryStatus::Verified
                };
                view
            })
            .collect();
        self.done.push(PlannedBatch {
            batch: JudgeBatch {
                mode: self.mode,
                batch_id: format!("{}-batch{number}", self.prefix),
                rules: self.rules,
                memories,
                candidate_edges: edges,
            },
            unverified,
        });
    }

    fn finish(self) -> Vec<PlannedBatch> {
        self.done
    }
}

/// Characters one memory takes in a payload.
fn memory_chars(input: &PassInput<'_>, id: MemoryId) -> usize {
    input.memories.get(&id).map_or(MEMORY_OVERHEAD_CHARS, |m| {
        m.content.len()
            + m.kind.len()
            + serde_json::Value::Object(m.metadata.clone()).to_string().len()
            + MEMORY_OVERHEAD_CHARS
    })
}

/// A memory as the judge sees it.
pub(crate) fn judge_memory(memory: &Memory) -> JudgeMemory {
    let mut metadata = memory.metadata.clone();
    if let Some(title) = &memory.title {
        metadata.insert("title".to_owned(), serde_json::Value::String(title.clone()));
    }
    JudgeMemory {
        id: memory.id.get(),
        status: if memory.dedup_verified { MemoryStatus::Verified } else { MemoryStatus::Unverified },
        text: memory.content.clone(),
        kind: memory.kind.clone(),
        metadata,
        occurrence_count: memory.occurrence_count,
    }
}

#[cfg(test)]
mod tests;
