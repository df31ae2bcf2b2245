//! The [`Deduplicator`]: seed 003's passes over one scope, from candidates to merges.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use dedup_core::{
    ContractLimits, JudgeBatch, JudgeGroup, JudgeMode, JudgeRules, MemberView, TextChoice, TextLimits, UncertainPair,
    ValidatedResponse, choose_survivor, choose_text, merge_metadata, validate_response,
};
use dedup_embed::Embedder;
use dedup_store::{
    ListFilter, MAX_CONTENT_BYTES, Memory, MemoryId, MergePlan, NewReview, Scope, Store, StoredVector, TextSource,
    titled_text,
};
use tokio::task::JoinSet;

use crate::plan::{Neighbour, PassInput, PlanOptions, PlannedBatch, plan_pass};
use crate::report::{ExhaustedMemory, MergeSummary, PassReport, Proposal, RunReport};
use crate::{Error, Judge, JudgeFailure, JudgeReply, Result};

/// How a run behaves. The defaults are seed 003's.
#[derive(Debug, Clone, PartialEq)]
pub struct DedupOptions {
    /// Candidate floor: cosine similarity at least this (default 0.50).
    pub min_sim: f32,
    /// Candidates per unverified memory (default 8).
    pub max_candidates: usize,
    /// Most memories decided per judge call (default 10).
    pub batch_size: usize,
    /// Character budget of one payload (default 16,000, about 4,000 tokens).
    pub batch_chars: usize,
    /// Passes at most (default 10); 1 is `--single-pass`.
    pub max_passes: usize,
    /// Failed attempts after which a memory is reported and no longer retried (default 3).
    pub max_attempts: u32,
    /// Judge calls in flight at once (default 4).
    pub in_flight: usize,
    /// Decide at most this many unverified memories in the run.
    pub limit: Option<usize>,
    /// Decide only this memory (verified or not).
    pub only_id: Option<MemoryId>,
    /// Bootstrap when the verified pool is smaller than this fraction of the unverified
    /// memories (default 1.0: fewer verified than unverified).
    pub bootstrap_ratio: f64,
    /// Confidence hint and group cap sent with every batch.
    pub rules: JudgeRules,
    /// What a reply is held to.
    pub limits: ContractLimits,
    /// Change no memory; report the merges that would be made (`--scan`). Only the first
    /// pass runs. Memories without a vector still get one (stored, as any run stores it),
    /// or they could be no one's candidate and the report would miss their groups.
    pub dry_run: bool,
    /// The run's id; a fresh one when `None`.
    pub run_id: Option<String>,
}

impl Default for DedupOptions {
    fn default() -> DedupOptions {
        DedupOptions {
            min_sim: 0.50,
            max_candidates: 8,
            batch_size: 10,
            batch_chars: 16_000,
            max_passes: 10,
            max_attempts: 3,
            in_flight: 4,
            limit: None,
            only_id: None,
            bootstrap_ratio: 1.0,
            rules: JudgeRules::default(),
            limits: ContractLimits::default(),
            dry_run: false,
            run_id: None,
        }
    }
}

impl DedupOptions {
    /// Checks the options; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(Error::Config(what.to_owned()));
        if !(self.min_sim.is_finite() && (-1.0..=1.0).contains(&self.min_sim)) {
            return bad(&format!("min_sim must be a number in [-1, 1], not {}", self.min_sim));
        }
        if self.max_candidates == 0 {
            return bad("max_candidates must be at least 1");
        }
        if self.batch_size == 0 {
            return bad("batch_size must be at least 1");
        }
        if self.batch_chars < 500 {
            return bad(&format!("batch_chars must be at least 500, not {}", self.batch_chars));
        }
        if self.max_passes == 0 {
            return bad("max_passes must be at least 1");
        }
        if self.max_attempts == 0 {
            return bad("max_attempts must be at least 1");
        }
        if self.in_flight == 0 {
            return bad("in_flight must be at least 1");
        }
        if !(self.bootstrap_ratio.is_finite() && self.bootstrap_ratio >= 0.0) {
            return bad(&format!("bootstrap_ratio must be a number >= 0, not {}", self.bootstrap_ratio));
        }
        let hint = self.rules.min_confidence_hint;
        if !(0.0..=1.0).contains(&hint) {
            return bad(&format!("min_confidence_hint must be in [0, 1], not {hint}"));
        }
        if self.rules.max_groups == 0 {
            return bad("max_groups must be at least 1");
        }
        if let Some(run_id) = &self.run_id
            && (run_id.is_empty() || run_id.len() > 128 || run_id.contains('\0'))
        {
            return bad("run_id must be 1 to 128 bytes without NUL");
        }
        Ok(())
    }
}

/// Where a run is, for progress displays.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The scope.
    pub scope: String,
    /// The pass, 1-based.
    pub pass: usize,
    /// Its mode.
    pub mode: JudgeMode,
    /// Batches of the pass answered so far.
    pub batches_done: usize,
    /// Batches of the pass.
    pub batches: usize,
    /// Groups merged so far in the run.
    pub merged: u64,
}

type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// Runs seed 003's assisted dedup over a store with an embedder and a judge.
pub struct Deduplicator {
    store: Arc<Store>,
    embedder: Arc<dyn Embedder>,
    judge: Arc<dyn Judge>,
    options: DedupOptions,
    progress: Option<ProgressFn>,
}

impl fmt::Debug for Deduplicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deduplicator")
            .field("store", &self.store)
            .field("model", &self.embedder.model_id())
            .field("judge", &self.judge)
            .field("options", &self.options)
            .finish()
    }
}

/// A fresh run id: `run-{UTC time}-{random}`.
fn new_run_id() -> String {
    format!("run-{}-{:06x}", chrono::Utc::now().format("%Y%m%dT%H%M%SZ"), rand::random::<u32>() & 0xff_ffff)
}

impl Deduplicator {
    /// A deduplicator; fails with [`Error::Config`] when `options` are invalid.
    pub fn new(
        store: Arc<Store>,
        embedder: Arc<dyn Embedder>,
        judge: Arc<dyn Judge>,
        options: DedupOptions,
    ) -> Result<Deduplicator> {
        options.validate()?;
        Ok(Deduplicator { store, embedder, judge, options, progress: None })
    }

    /// Calls `progress` after each judge call is applied.
    pub fn with_progress(mut self, progress: impl Fn(&Progress) + Send + Sync + 'static) -> Deduplicator {
        self.progress = Some(Arc::new(progress));
        self
    }

    /// Runs over one scope.
    pub async fn run(&self, scope: &Scope) -> Result<RunReport> {
        self.run_scopes(std::slice::from_ref(scope)).await
    }

    /// Runs over each scope in turn, under one run id; a run never groups memories of
    /// different scopes.
    pub async fn run_scopes(&self, scopes: &[Scope]) -> Result<RunReport> {
        let mut report = RunReport {
            run_id: self.options.run_id.clone().unwrap_or_else(new_run_id),
            dry_run: self.options.dry_run,
            ..RunReport::default()
        };
        let mut failed_ids: HashSet<MemoryId> = HashSet::new();
        for scope in scopes {
            self.run_scope(scope, &mut report, &mut failed_ids).await?;
        }
        Ok(report)
    }

    async fn run_scope(&self, scope: &Scope, report: &mut RunReport, failed_ids: &mut HashSet<MemoryId>) -> Result<()> {
        let never = self.store.never_merge_pairs(scope).await?;
        self.embed_missing(scope).await?;
        let mut decided: HashSet<MemoryId> = HashSet::new();
        let max_passes = if self.options.dry_run { 1 } else { self.options.max_passes };
        for pass in 1..=max_passes {
            let memories = self.snapshot(scope).await?;
            let mut queue: Vec<MemoryId> = match self.options.only_id {
                Some(id) if pass == 1 || memories.get(&id).is_some_and(|m| !m.dedup_verified) => {
                    memories.contains_key(&id).then_some(id).into_iter().collect()
                }
                Some(_) => Vec::new(),
                // A memory whose batch failed in this run waits for the next run: a
                // judge that is down must not use up every attempt in one go.
                None => memories
                    .values()
                    .filter(|m| !m.dedup_verified && m.dedup_attempts < self.options.max_attempts)
                    .filter(|m| !failed_ids.contains(&m.id))
                    .map(|m| m.id)
                    .collect(),
            };
            if let Some(limit) = self.options.limit {
                let left = limit.saturating_sub(decided.len());
                // The first `left` ids not decided yet; survivors re-queued by a merge of
                // this run are decided again without counting twice.
                let mut admitted = 0;
                let all = std::mem::take(&mut queue);
                for id in all {
                    if decided.contains(&id) || admitted < left {
                        if !decided.contains(&id) {
                            admitted += 1;
                        }
                        queue.push(id);
                    }
                }
            }
            if queue.is_empty() {
                break;
            }
            let verified = memories.values().filter(|m| m.dedup_verified).count();
            let unverified = memories.len() - verified;
            let mode = if self.options.only_id.is_none()
                && (verified == 0 || (verified as f64) < self.options.bootstrap_ratio * unverified as f64)
            {
                JudgeMode::Bootstrap
            } else {
                JudgeMode::Incremental
            };
            // Under a limit a bootstrap pass sees only the admitted memories and the
            // verified ones, so its groups decide no unverified memory beyond the limit.
            let planned: BTreeMap<MemoryId, Memory> = if self.options.limit.is_some() && mode == JudgeMode::Bootstrap {
                let admitted: HashSet<MemoryId> = queue.iter().copied().collect();
                memories
                    .iter()
                    .filter(|(id, m)| m.dedup_verified || admitted.contains(id))
                    .map(|(id, m)| (*id, m.clone()))
                    .collect()
            } else {
                memories.clone()
            };
            let queried: Vec<MemoryId> = match mode {
                JudgeMode::Bootstrap => planned.keys().copied().collect(),
                JudgeMode::Incremental => queue.clone(),
            };
            let neighbours = self.neighbours(scope, &planned, &queried, &never, mode).await?;
            let prefix = format!("{}-{}-pass{pass}", report.run_id, scope_label(scope));
            let plan = plan_pass(&PassInput {
                mode,
                memories: &planned,
                neighbours: &neighbours,
                queue: &queue,
                options: PlanOptions {
                    max_candidates: self.options.max_candidates,
                    batch_size: self.options.batch_size,
                    batch_chars: self.options.batch_chars,
                    rules: self.options.rules,
                },
                batch_prefix: &prefix,
            });
            let mut pass_report = PassReport {
                pass,
                scope: scope_label(scope),
                mode,
                batches: plan.batches.len(),
                merged: 0,
                marked_verified: 0,
                deferred: plan.deferred.len(),
                failed_batches: 0,
            };
            tracing::info!(
                run_id = %report.run_id, %scope, pass, mode = mode.as_str(), queue = queue.len(),
                batches = plan.batches.len(), no_candidates = plan.no_candidates.len(), deferred = plan.deferred.len(),
                "assisted dedup pass planned"
            );
            decided.extend(plan.no_candidates.iter().copied());
            decided.extend(plan.batches.iter().flat_map(|b| b.unverified.iter().copied()));
            report.processed = decided.len() as u64;
            let verified_now = self.mark_verified(&memories, &plan.no_candidates).await?;
            pass_report.marked_verified += verified_now;
            report.marked_verified += verified_now as u64;

            let successes = self
                .judge_batches(scope, pass, mode, plan.batches, &memories, &never, report, &mut pass_report, failed_ids)
                .await?;
            let deferred = !plan.deferred.is_empty();
            report.passes.push(pass_report);
            // A usable reply changes what the next pass asks; memories verified for want of
            // verified candidates matter only to the memories deferred until they are. Any
            // other pass would send the failed batches again, unchanged, and spend one more
            // of their attempts in the same run.
            if successes == 0 && !(verified_now > 0 && deferred) {
                break;
            }
        }
        if !self.options.dry_run {
            let left = self.store.unverified(scope, self.options.max_attempts, 0).await?;
            for memory in &left {
                if failed_ids.contains(&memory.id) {
                    report.failed += 1;
                } else {
                    report.skipped += 1;
                }
            }
            report.retryable += left.len() as u64;
            for memory in self.store.exhausted(scope, self.options.max_attempts).await? {
                report.exhausted.push(ExhaustedMemory {
                    id: memory.id,
                    attempts: memory.dedup_attempts,
                    last_error: memory.dedup_last_error,
                });
            }
        }
        Ok(())
    }

    /// The scope's live memories a run may merge: those the store queues (see
    /// [`Store::unverified`](dedup_store::Store::unverified)): unique ones, and titled
    /// ones such as seed 001's nodes. Kinds that allow repeats, like trades and episodes,
    /// are distinct by definition.
    async fn snapshot(&self, scope: &Scope) -> Result<BTreeMap<MemoryId, Memory>> {
        let filter = ListFilter {
            domain: Some(scope.domain().to_owned()),
            namespace: Some(scope.namespace_name().to_owned()),
            ..ListFilter::default()
        };
        Ok(self
            .store
            .list(&filter)
            .await?
            .into_iter()
            .filter(|m| m.unique_content || m.embeds_title)
            .map(|m| (m.id, m))
            .collect())
    }

    /// Embeds and attaches vectors for live memories of the scope that have none, so
    /// every memory can be a candidate. Embeddings are computed once: later runs read them
    /// from the store.
    async fn embed_missing(&self, scope: &Scope) -> Result<()> {
        const CHUNK: usize = 64;
        let filter = ListFilter {
            domain: Some(scope.domain().to_owned()),
            namespace: Some(scope.namespace_name().to_owned()),
            without_vector: true,
            ..ListFilter::default()
        };
        let missing = self.store.list(&filter).await?;
        for chunk in missing.chunks(CHUNK) {
            let texts: Vec<String> = chunk.iter().map(|m| m.embedding_text().into_owned()).collect();
            let vectors = self.embedder.embed(&texts).await?;
            for (memory, embedding) in chunk.iter().zip(vectors) {
                let vector = StoredVector { model: self.embedder.model_id().to_owned(), embedding };
                self.store.attach_vector(memory.id, &memory.content_hash, &vector).await?;
            }
        }
        if !missing.is_empty() {
            tracing::info!(%scope, embedded = missing.len(), "assisted dedup embedded memories without a vector");
        }
        Ok(())
    }

    /// Neighbours of each of `queried`: live eligible memories of the same kind at or
    /// above `min_sim`, not blocked by an undo, highest first. Incremental queries look
    /// far enough to find `max_candidates` verified ones.
    async fn neighbours(
        &self,
        scope: &Scope,
        memories: &BTreeMap<MemoryId, Memory>,
        queried: &[MemoryId],
        never: &HashSet<(MemoryId, MemoryId)>,
        mode: JudgeMode,
    ) -> Result<HashMap<MemoryId, Vec<Neighbour>>> {
        let model = self.embedder.model_id().to_owned();
        let vectors = self.store.vectors(&model, queried).await?;
        let mut out = HashMap::with_capacity(queried.len());
        for &id in queried {
            let (Some(memory), Some(vector)) = (memories.get(&id), vectors.get(&id)) else { continue };
            let mut k = self.options.max_candidates * 4 + 1;
            loop {
                let hits = self
                    .store
                    .search_filtered(scope, &model, vector, k, &Default::default(), Some(self.options.min_sim))
                    .await?;
                let saturated = hits.len() >= k && k < memories.len() + 1;
                let found: Vec<Neighbour> = hits
                    .into_iter()
                    .filter(|hit| hit.id != id)
                    .filter(|hit| memories.get(&hit.id).is_some_and(|other| other.kind == memory.kind))
                    .filter(|hit| !never.contains(&(id.min(hit.id), id.max(hit.id))))
                    .map(|hit| Neighbour { id: hit.id, similarity: hit.score })
                    .collect();
                let verified = found.iter().filter(|n| memories.get(&n.id).is_some_and(|m| m.dedup_verified)).count();
                if mode == JudgeMode::Bootstrap || !saturated || verified >= self.options.max_candidates {
                    out.insert(id, found);
                    break;
                }
                k = k.saturating_mul(4).min(memories.len() + 1);
            }
        }
        Ok(out)
    }

    /// Marks `ids` verified unless their text changed since `memories` was read; the
    /// count marked. A dry run marks nothing and counts what it would mark.
    async fn mark_verified(&self, memories: &BTreeMap<MemoryId, Memory>, ids: &[MemoryId]) -> Result<usize> {
        if self.options.dry_run {
            return Ok(ids.len());
        }
        let rows: Vec<_> =
            ids.iter().filter_map(|id| memories.get(id)).map(|m| (m.id, m.content_hash.clone())).collect();
        if rows.is_empty() {
            return Ok(0);
        }
        Ok(self.store.mark_verified(&rows).await?.len())
    }

    /// Queues the pairs the judge was unsure of for review (`memdedup review`), with source
    /// `dedup`; fail-open: a queue write that fails is logged and the run goes on.
    async fn queue_for_review(&self, scope: &Scope, pairs: &[UncertainPair]) {
        for pair in pairs {
            let review = NewReview {
                scope: scope.clone(),
                a: MemoryId::new(pair.low),
                b: MemoryId::new(pair.high),
                cosine: pair.cosine,
                probability: pair.probability,
                judge: pair.judge.clone(),
                reasons: pair.reasons.clone(),
                source: "dedup".to_owned(),
            };
            if let Err(error) = self.store.enqueue_review(&review).await {
                tracing::warn!(%scope, low = pair.low, high = pair.high, "a pair could not be queued for review: {error}");
            }
        }
    }

    /// Records a failed batch on its unverified memories.
    async fn record_failure(
        &self,
        memories: &BTreeMap<MemoryId, Memory>,
        ids: &[MemoryId],
        message: &str,
        report: &mut RunReport,
        failed_ids: &mut HashSet<MemoryId>,
    ) -> Result<()> {
        report.note_error(message.to_owned());
        failed_ids.extend(ids.iter().copied());
        if self.options.dry_run {
            return Ok(());
        }
        let rows: Vec<_> =
            ids.iter().filter_map(|id| memories.get(id)).map(|m| (m.id, m.content_hash.clone())).collect();
        if !rows.is_empty() {
            self.store.record_dedup_failure(&rows, message).await?;
        }
        Ok(())
    }

    /// Sends the batches to the judge, `in_flight` at a time, and applies each reply as it
    /// arrives, one at a time. Returns how many replies were usable.
    #[allow(clippy::too_many_arguments)]
    async fn judge_batches(
        &self,
        scope: &Scope,
        pass: usize,
        mode: JudgeMode,
        batches: Vec<PlannedBatch>,
        memories: &BTreeMap<MemoryId, Memory>,
        never: &HashSet<(MemoryId, MemoryId)>,
        report: &mut RunReport,
        pass_report: &mut PassReport,
        failed_ids: &mut HashSet<MemoryId>,
    ) -> Result<usize> {
        let total = batches.len();
        let mut pending = batches.into_iter();
        let mut running: JoinSet<(PlannedBatch, Result<JudgeReply, JudgeFailure>)> = JoinSet::new();
        let mut done = 0;
        let mut successes = 0;
        loop {
            while running.len() < self.options.in_flight {
                let Some(planned) = pending.next() else { break };
                report.judge_calls += 1;
                report.chars_sent += planned.batch.to_payload().chars().count() as u64;
                let judge = Arc::clone(&self.judge);
                running.spawn(async move {
                    let result = judge.judge(&planned.batch).await;
                    (planned, result)
                });
            }
            let Some(joined) = running.join_next().await else { break };
            let (planned, result) = joined.map_err(|e| Error::Task(e.to_string()))?;
            done += 1;
            match result {
                Err(failure) => {
                    report.tokens += failure.usage;
                    pass_report.failed_batches += 1;
                    let message = format!("judge call for {} failed: {}", planned.batch.batch_id, failure.message);
                    tracing::warn!(%scope, batch = %planned.batch.batch_id, error = %failure.message, "judge call failed");
                    self.record_failure(memories, &planned.unverified, &message, report, failed_ids).await?;
                }
                Ok(reply) => {
                    report.tokens += reply.usage;
                    match validate_response(&planned.batch, reply.response, &self.options.limits) {
                        Err(error) => {
                            pass_report.failed_batches += 1;
                            let message = format!("{}: {error}", planned.batch.batch_id);
                            tracing::warn!(%scope, batch = %planned.batch.batch_id, %error, "judge reply rejected");
                            self.record_failure(memories, &planned.unverified, &message, report, failed_ids).await?;
                        }
                        Ok(valid) => {
                            successes += 1;
                            for note in &valid.notes {
                                tracing::info!(batch = %planned.batch.batch_id, "judge note");
                                report.note(note);
                            }
                            self.queue_for_review(scope, &valid.uncertain).await;
                            self.apply(&planned, valid, memories, never, report, pass_report, failed_ids).await?;
                        }
                    }
                }
            }
            if let Some(progress) = &self.progress {
                progress(&Progress {
                    scope: scope_label(scope),
                    pass,
                    mode,
                    batches_done: done,
                    batches: total,
                    merged: report.merged,
                });
            }
        }
        Ok(successes)
    }

    /// Applies one validated reply: each group merged in its own transaction, then the
    /// unmatched unverified memories marked verified.
    #[allow(clippy::too_many_arguments)]
    async fn apply(
        &self,
        planned: &PlannedBatch,
        valid: ValidatedResponse,
        memories: &BTreeMap<MemoryId, Memory>,
        never: &HashSet<(MemoryId, MemoryId)>,
        report: &mut RunReport,
        pass_report: &mut PassReport,
        failed_ids: &mut HashSet<MemoryId>,
    ) -> Result<()> {
        let unverified: BTreeSet<MemoryId> = planned.unverified.iter().copied().collect();
        for group in &valid.groups {
            let ids: Vec<MemoryId> = group.ids.iter().map(|&id| MemoryId::new(id)).collect();
            let members: Vec<&Memory> = ids.iter().filter_map(|id| memories.get(id)).collect();
            let group_unverified: Vec<MemoryId> = ids.iter().copied().filter(|id| unverified.contains(id)).collect();
            if let Some((a, b)) = blocked_pair(&ids, never) {
                let message = format!(
                    "{}: the judge grouped memories {a} and {b}, whose merge was undone",
                    planned.batch.batch_id
                );
                self.record_failure(memories, &group_unverified, &message, report, failed_ids).await?;
                continue;
            }
            match self.merge_group(&planned.batch, group, &members, report).await? {
                GroupOutcome::Merged | GroupOutcome::Proposed => pass_report.merged += 1,
                GroupOutcome::Conflict(reason) => {
                    report.conflicts += 1;
                    tracing::info!(batch = %planned.batch.batch_id, %reason, "group not merged: a member changed meanwhile");
                }
                GroupOutcome::Failed(message) => {
                    let message = format!("{}: {message}", planned.batch.batch_id);
                    self.record_failure(memories, &group_unverified, &message, report, failed_ids).await?;
                }
            }
        }
        let no_match: Vec<MemoryId> =
            valid.no_match_ids.iter().map(|&id| MemoryId::new(id)).filter(|id| unverified.contains(id)).collect();
        let marked = self.mark_verified(memories, &no_match).await?;
        pass_report.marked_verified += marked;
        report.marked_verified += marked as u64;
        Ok(())
    }

    /// Merges (or, in a dry run, proposes) one confirmed group.
    async fn merge_group(
        &self,
        batch: &JudgeBatch,
        group: &JudgeGroup,
        members: &[&Memory],
        report: &mut RunReport,
    ) -> Result<GroupOutcome> {
        let views: Vec<MemberView<'_>> = members
            .iter()
            .map(|m| MemberView {
                id: m.id.get(),
                verified: m.dedup_verified,
                occurrence_count: m.occurrence_count,
                text: &m.content,
            })
            .collect();
        let limits =
            TextLimits { max_sentences: self.options.limits.max_canonical_sentences, max_bytes: MAX_CONTENT_BYTES };
        let (Some(survivor_index), Some((text, choice))) =
            (choose_survivor(&views), choose_text(&group.canonical_text, &views, &limits))
        else {
            return Ok(GroupOutcome::Failed("an empty group".to_owned()));
        };
        let survivor = members[survivor_index];
        let absorbed: Vec<&Memory> =
            members.iter().enumerate().filter(|(i, _)| *i != survivor_index).map(|(_, m)| *m).collect();
        let sums = members.iter().try_fold((0u64, 0u64, 0u64), |(h, x, o), m| {
            Some((h.checked_add(m.helpful)?, x.checked_add(m.harmful)?, o.checked_add(m.occurrence_count)?))
        });
        let Some((helpful, harmful, occurrence_count)) = sums else {
            return Ok(GroupOutcome::Failed(format!("counter overflow while merging into memory {}", survivor.id)));
        };
        let metadata = merge_metadata(&survivor.metadata, &absorbed.iter().map(|m| &m.metadata).collect::<Vec<_>>());
        let text_source = if text == survivor.content {
            TextSource::Unchanged
        } else {
            match &choice {
                TextChoice::Canonical => TextSource::Canonical,
                TextChoice::Existing { from, .. } => TextSource::Existing { from: MemoryId::new(*from) },
            }
        };
        if self.options.dry_run {
            report.proposals.push(Proposal {
                batch_id: batch.batch_id.clone(),
                survivor: survivor.id,
                absorbed: absorbed.iter().map(|m| m.id).collect(),
                final_text: text,
                text: choice,
                canonical_text: group.canonical_text.clone(),
                confidence: group.confidence,
                reason: group.reason.clone(),
            });
            return Ok(GroupOutcome::Proposed);
        }
        let (content, vector) = if text_source == TextSource::Unchanged {
            (None, None)
        } else {
            let embed_text = match (&survivor.title, survivor.embeds_title) {
                (Some(title), true) => titled_text(title, &text),
                _ => text.clone(),
            };
            match self.embedder.embed_one(&embed_text).await {
                Ok(embedding) => {
                    (Some(text.clone()), Some(StoredVector { model: self.embedder.model_id().to_owned(), embedding }))
                }
                Err(error) => return Ok(GroupOutcome::Failed(format!("cannot embed the merged text: {error}"))),
            }
        };
        let plan = MergePlan {
            run_id: report.run_id.clone(),
            scope: survivor.scope.clone(),
            survivor: survivor.id,
            absorbed: absorbed.iter().map(|m| m.id).collect(),
            expected: members.iter().map(|m| (*m).clone()).collect(),
            content,
            vector,
            metadata,
            helpful,
            harmful,
            occurrence_count,
            canonical_text: Some(group.canonical_text.clone()),
            text_source,
            confidence: group.confidence,
            reason: group.reason.clone(),
            judge: self.judge.name().to_owned(),
            model: self.judge.model().to_owned(),
        };
        match self.store.apply_merge(&plan).await {
            Ok(record) => {
                report.merged += 1;
                report.absorbed += plan.absorbed.len() as u64;
                report.merges.push(MergeSummary {
                    merge_id: record.id,
                    survivor: survivor.id,
                    absorbed: plan.absorbed.clone(),
                    text: choice,
                    confidence: group.confidence,
                    reason: group.reason.clone(),
                });
                tracing::info!(merge = %record.id, survivor = %survivor.id, absorbed = plan.absorbed.len(), "merged");
                Ok(GroupOutcome::Merged)
            }
            Err(dedup_store::Error::MergeConflict { id, reason }) => {
                Ok(GroupOutcome::Conflict(format!("memory {id}: {reason}")))
            }
            // An undo that committed after this pass read the blocks: the group is skipped
            // like one blocked from the start.
            Err(dedup_store::Error::MergeBlocked { id, into }) => Ok(GroupOutcome::Failed(format!(
                "the judge grouped memories {} and {}, whose merge was undone",
                id.min(into),
                id.max(into)
            ))),
            Err(error) => Err(error.into()),
        }
    }
}

/// What became of one confirmed group.
enum GroupOutcome {
    Merged,
    Proposed,
    /// A member changed since the pass read it; its memories are retried.
    Conflict(String),
    /// The group could not be merged; its unverified memories get a failed attempt.
    Failed(String),
}

/// A pair of `ids` an undo blocked, if any.
fn blocked_pair(ids: &[MemoryId], never: &HashSet<(MemoryId, MemoryId)>) -> Option<(MemoryId, MemoryId)> {
    ids.iter().enumerate().find_map(|(i, &a)| {
        ids[i + 1..].iter().find_map(|&b| {
            let pair = (a.min(b), a.max(b));
            never.contains(&pair).then_some(pair)
        })
    })
}

fn scope_label(scope: &Scope) -> String {
    format!("{}/{}", scope.domain(), scope.namespace_name())
}
