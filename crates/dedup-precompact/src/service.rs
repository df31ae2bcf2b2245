//! `DeduplicationService`: the exact → semantic → recent checker chain over a `Store`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dedup_core::{ContentHash, Embedding, PairVerdict, SecretAction, redact_secrets};
use dedup_embed::Embedder;
use dedup_store::{
    InsertOutcome, MAX_CONTENT_BYTES, MemoryId, Neighbour, NewMemory, NewReview, Scope, Store, StoredVector,
};
use serde::Serialize;

use crate::metrics;
use crate::{DeduplicationConfig, JudgeCandidate, PairDecision, PairJudgeChoice, RecentCaptures, Result};

mod lifecycle;
mod result;

pub use lifecycle::{EditDuplicate, EditOutcome, EditStatus, HistoryEvent, MemoryHistory};
pub use result::{AddOutcome, CheckFailure, CheckType, DuplicateCheckResult, DuplicateReason};

/// The note a check carries when the semantic check could not run for want of a model:
/// a paraphrase of a stored memory is then not caught.
pub const NO_EMBEDDER_NOTE: &str = "no embedding model is loaded, so the semantic check did not run and a \
     paraphrase of a stored memory would not be caught (install the model: `cargo xtask fetch-model`, or set \
     `[embedder] model_dir`)";

/// Seed 004's deduplication service: checks new content against a scope's memories,
/// exact → semantic → recent, stopping at the first hit, and stores what is new.
#[derive(Clone)]
pub struct DeduplicationService {
    store: Arc<Store>,
    embedder: Option<Arc<dyn Embedder>>,
    recent: Arc<dyn RecentCaptures>,
    config: DeduplicationConfig,
}

impl fmt::Debug for DeduplicationService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeduplicationService")
            .field("store", &self.store.location())
            .field("embedder", &self.embedder.as_ref().map(|e| e.model_id().to_owned()))
            .field("recent", &self.recent.backend())
            .field("config", &self.config)
            .finish()
    }
}

/// Everything one pass of the chain learnt, including the vector to store.
struct ChainOutcome {
    result: DuplicateCheckResult,
    hash: ContentHash,
    vector: ChainVector,
    /// The cosine from which the store's check under the write lock reports a neighbour:
    /// the threshold for the cosine judge; for the local judge, just above the closest
    /// memory it kept apart (or its floor), so only memories it has not judged come back.
    lock_threshold: f32,
}

/// What the semantic check left for the store.
#[derive(Default)]
struct ChainVector {
    vector: Option<StoredVector>,
    /// Whether a failure of the semantic check means the vector must not be stored.
    rejected: bool,
    /// Whether the embedder itself failed (so the memory awaits a vector).
    embedder_failed: bool,
}

impl DeduplicationService {
    /// A service with all three checkers and the recent-capture cache kept in the store
    /// ([`StoreRecentCaptures`](crate::StoreRecentCaptures)), sized by `config`.
    pub fn new(store: Arc<Store>, embedder: Arc<dyn Embedder>, config: DeduplicationConfig) -> DeduplicationService {
        DeduplicationService::build(store, Some(embedder), config)
    }

    /// A service with the exact and recent checkers only (no embeddings).
    pub fn without_embeddings(store: Arc<Store>, config: DeduplicationConfig) -> DeduplicationService {
        DeduplicationService::build(store, None, config)
    }

    fn build(
        store: Arc<Store>,
        embedder: Option<Arc<dyn Embedder>>,
        config: DeduplicationConfig,
    ) -> DeduplicationService {
        metrics::describe();
        let recent =
            Arc::new(crate::StoreRecentCaptures::new(Arc::clone(&store), config.recent_window, config.cache_capacity));
        DeduplicationService { store, embedder, recent, config }
    }

    /// Replaces the recent-capture cache (with a shared Redis one, or the in-process
    /// [`RecentCaptureCache`](crate::RecentCaptureCache)).
    pub fn with_recent_captures(mut self, recent: Arc<dyn RecentCaptures>) -> DeduplicationService {
        self.recent = recent;
        self
    }

    /// Uses the Redis recent-capture cache when the configuration names one
    /// (`redis_url`), under the key prefix `memdedup:{store id}` so that stores sharing
    /// one Redis never see each other's captures. If Redis cannot be reached the store's
    /// cache stays, the failure is logged and counted (fail-open), and later checks do not
    /// retry.
    pub async fn connect_recent_cache(self) -> DeduplicationService {
        let Some(url) = self.config.redis_url.clone() else { return self };
        #[cfg(feature = "redis")]
        {
            let prefix = format!("{}:{}", crate::RedisRecentCaptures::DEFAULT_PREFIX, self.store.store_id());
            let connected = crate::RedisRecentCaptures::connect(
                &url,
                &prefix,
                self.config.recent_window,
                self.config.cache_capacity,
            )
            .await;
            match connected {
                Ok(redis) => self.with_recent_captures(Arc::new(redis)),
                Err(error) => {
                    metrics::check_failed(CheckType::Recent.label());
                    tracing::warn!(%error, "the shared recent-capture cache is unavailable; using the store's");
                    self
                }
            }
        }
        #[cfg(not(feature = "redis"))]
        {
            metrics::check_failed(CheckType::Recent.label());
            tracing::warn!(
                redis_url = %crate::config::redact_url(&url),
                "built without the `redis` feature; the recent-capture cache is the store's"
            );
            self
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &DeduplicationConfig {
        &self.config
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The embedder, if the semantic checker is on.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// Checks whether `content` duplicates a memory of `scope`: exact → semantic →
    /// recent, stopping at the first hit. Embeds only when the exact check misses.
    ///
    /// Fails only for invalid input (blank, over 1 MiB, NUL characters); a failing
    /// checker is skipped and reported in [`DuplicateCheckResult::degraded`].
    ///
    /// Credentials in `content` are handled first, by [`DeduplicationConfig::secrets`]:
    /// redacted (the check runs on the redacted text, which is what `add` would store),
    /// refused ([`Error::SecretRefused`](crate::Error::SecretRefused)), or left.
    pub async fn check_duplicate(&self, content: &str, scope: &Scope) -> Result<DuplicateCheckResult> {
        let (content, redacted) = self.screen(content)?;
        let mut result = self.run_chain(&content, scope).await?.result;
        result.redacted = redacted;
        Ok(result)
    }

    /// `content` under the secret policy: the text to check and store, and the kinds of
    /// credentials redacted from it.
    fn screen(&self, content: &str) -> Result<(String, Vec<String>)> {
        if self.config.secrets == SecretAction::Allow {
            return Ok((content.to_owned(), Vec::new()));
        }
        let (redacted, kinds) = redact_secrets(content);
        if kinds.is_empty() {
            return Ok((redacted, Vec::new()));
        }
        if self.config.secrets == SecretAction::Refuse {
            let mut kinds: Vec<&str> = kinds;
            kinds.dedup();
            return Err(crate::Error::SecretRefused { kinds: kinds.join(", ") });
        }
        metrics::secrets_redacted(kinds.len());
        Ok((redacted, kinds.into_iter().map(str::to_owned).collect()))
    }

    /// `memory` under the secret policy: its content, title and string metadata with
    /// credentials redacted (or refused), and the kinds redacted.
    fn screen_memory(&self, mut memory: NewMemory) -> Result<(NewMemory, Vec<String>)> {
        let (content, mut redacted) = self.screen(&memory.content)?;
        memory.content = content;
        if let Some(title) = memory.title.take() {
            let (title, kinds) = self.screen(&title)?;
            memory.title = Some(title);
            redacted.extend(kinds);
        }
        for value in memory.metadata.values_mut() {
            self.screen_json(value, &mut redacted)?;
        }
        Ok((memory, redacted))
    }

    fn screen_json(&self, value: &mut serde_json::Value, redacted: &mut Vec<String>) -> Result<()> {
        match value {
            serde_json::Value::String(text) => {
                let (clean, kinds) = self.screen(text)?;
                if !kinds.is_empty() {
                    *text = clean;
                    redacted.extend(kinds);
                }
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    self.screen_json(item, redacted)?;
                }
            }
            serde_json::Value::Object(map) => {
                for item in map.values_mut() {
                    self.screen_json(item, redacted)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Remembers that `content` was just captured in `scope` as memory `id`, for the
    /// recent-capture check. Never fails: a cache failure is logged and counted.
    pub async fn record_capture(&self, content: &str, scope: &Scope, id: MemoryId) {
        // The hash of what was stored: the text after redaction.
        let content =
            if self.config.secrets == SecretAction::Allow { content.to_owned() } else { redact_secrets(content).0 };
        self.record_hash(&ContentHash::of(&content), scope, id).await;
    }

    async fn record_hash(&self, hash: &ContentHash, scope: &Scope, id: MemoryId) {
        let urn = scope.urn(id);
        if let Err(error) = self.recent.record(scope, hash, id, &urn).await {
            metrics::check_failed(CheckType::Recent.label());
            tracing::warn!(fingerprint = hash.fingerprint(), %urn, %error, "recording a capture failed");
        }
        if let Ok(len) = self.recent.len().await {
            metrics::cache_size(len);
        }
    }

    /// Checks `memory` and stores it unless it is a duplicate.
    ///
    /// The store repeats the exact and semantic checks under the scope's write lock, so
    /// two concurrent paraphrases give the same result as one after the other. The
    /// embedding computed for the check is the one stored. A duplicate increments the
    /// matched memory's occurrence count and is counted in the store's skip statistics.
    /// Checker failures fail open: the memory is stored and the failure counted.
    pub async fn add(&self, memory: NewMemory) -> Result<AddOutcome> {
        let (memory, redacted) = self.screen_memory(memory)?;
        let chain = self.run_chain(&memory.content, &memory.scope).await?;
        let scope = memory.scope.clone();
        let mut result = chain.result;
        result.redacted = redacted;
        if result.is_duplicate {
            self.note_skip(&scope, &result).await;
            return Ok(AddOutcome { stored: None, urn: None, check: result, embedded: false });
        }
        let semantic_ran =
            chain.vector.vector.is_some() && !result.degraded.iter().any(|f| f.check == CheckType::Semantic);
        let mut lock_threshold = semantic_ran.then_some(chain.lock_threshold);
        let vector = if chain.vector.rejected { None } else { chain.vector.vector };
        let embedded = vector.is_some();
        // The embedder failed: store now, and let a backfill add the vector later.
        let memory = if chain.vector.embedder_failed { memory.vector_pending() } else { memory };
        let mut retries = 0;
        let outcome = loop {
            let outcome = self.store.insert_checked(memory.clone(), vector.clone(), lock_threshold).await?;
            let InsertOutcome::SemanticDuplicate { id, score } = outcome else { break outcome };
            if !self.config.pair_judge.reads_texts() {
                break outcome;
            }
            // A memory the judge has not seen raced in: judge it like the chain would.
            match self.store.get(id).await {
                Ok(Some(existing)) => {
                    let judgement =
                        self.config.pair_judge.judge_pair(&memory.content, &existing.content, score, result.threshold);
                    if judgement.is_duplicate() {
                        result.reasons = judgement.reasons;
                        break outcome;
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(urn = %scope.urn(id), %error, "reading a memory to judge failed; storing without the recheck");
                    lock_threshold = None;
                    continue;
                }
            }
            retries += 1;
            lock_threshold = if retries < LOCK_RETRIES { Some(score.next_up()) } else { None };
        };
        match outcome {
            InsertOutcome::Inserted(id) => {
                self.record_hash(&chain.hash, &scope, id).await;
                self.queue_for_review(&result, &scope, id).await;
                if embedded {
                    // The embedder works (again): catch up on what was stored without it.
                    self.backfill_quietly(&scope).await;
                }
                tracing::debug!(fingerprint = chain.hash.fingerprint(), urn = %scope.urn(id), "stored");
                Ok(AddOutcome { stored: Some(id), urn: Some(scope.urn(id)), check: result, embedded })
            }
            InsertOutcome::ExactDuplicate(id) => {
                mark_duplicate(&mut result, &scope, DuplicateReason::ExactMatch, id, 1.0);
                result.reasons = vec![EXACT_REASON.to_owned()];
                if !self.config.enabled {
                    // The checks are off, but the store itself keeps one live copy of a text.
                    result.notes.push(DISABLED_EXACT_NOTE.to_owned());
                }
                self.note_skip(&scope, &result).await;
                Ok(AddOutcome { stored: None, urn: None, check: result, embedded: false })
            }
            InsertOutcome::SemanticDuplicate { id, score } => {
                mark_duplicate(&mut result, &scope, DuplicateReason::SemanticSimilar, id, score);
                if self.config.pair_judge.local_judge().is_none() {
                    result.reasons = vec![format!("cosine {score:.3} reaches the threshold {:.2}", result.threshold)];
                }
                result.nearest = Some(Neighbour { id, score });
                metrics::similarity(scope.namespace_name(), score);
                self.note_skip(&scope, &result).await;
                Ok(AddOutcome { stored: None, urn: None, check: result, embedded: false })
            }
        }
    }

    /// Counts a skipped duplicate: metrics, the store's skip statistics and the matched
    /// memory's occurrence count. Failures here are logged, never returned.
    async fn note_skip(&self, scope: &Scope, result: &DuplicateCheckResult) {
        let Some(reason) = result.reason else { return };
        metrics::skipped(scope.namespace_name(), reason.label());
        if let Err(error) = self.store.record_skip(scope, reason.label()).await {
            tracing::warn!(%scope, %error, "counting a skipped duplicate failed");
        }
        if let Some(id) = result.matched_memory_id
            && reason != DuplicateReason::RecentCapture
            && let Err(error) = self.store.note_occurrence(id).await
        {
            tracing::warn!(urn = %scope.urn(id), %error, "counting an occurrence failed");
        }
    }

    async fn run_chain(&self, content: &str, scope: &Scope) -> Result<ChainOutcome> {
        validate_content(content)?;
        let started = Instant::now();
        let hash = ContentHash::of(content);
        let namespace = scope.namespace_name();
        let mut result = DuplicateCheckResult {
            is_duplicate: false,
            reason: None,
            similarity_score: None,
            matched_memory_id: None,
            matched_urn: None,
            check_duration_ms: 0,
            check_duration_us: 0,
            threshold: self.config.threshold_for(namespace),
            nearest: None,
            captured_secs_ago: None,
            not_run: Vec::new(),
            degraded: Vec::new(),
            fingerprint: hash.fingerprint().to_owned(),
            judge: self.config.pair_judge.name(),
            verdict: PairVerdict::Unique,
            reasons: Vec::new(),
            probability: None,
            likely_duplicate: None,
            likely_duplicate_pair: None,
            notes: Vec::new(),
            redacted: Vec::new(),
        };
        let mut lock_threshold = self.config.pair_judge.floor(result.threshold);
        let mut vector = ChainVector::default();
        if !self.config.enabled {
            result.not_run = vec![CheckType::Exact, CheckType::Semantic, CheckType::Recent];
            return Ok(ChainOutcome { result: finish(result, started, namespace), hash, vector, lock_threshold });
        }

        // 1. Exact: the content hash among the scope's live memories.
        let exact_started = Instant::now();
        let exact = self.store.find_exact(scope, &hash).await;
        metrics::check_duration(CheckType::Exact.label(), elapsed_ms(exact_started));
        match exact {
            Ok(Some(id)) => {
                mark_duplicate(&mut result, scope, DuplicateReason::ExactMatch, id, 1.0);
                result.reasons = vec![EXACT_REASON.to_owned()];
                return Ok(ChainOutcome { result: finish(result, started, namespace), hash, vector, lock_threshold });
            }
            Ok(None) => {}
            Err(error) => self.fail_open(&mut result, CheckType::Exact, &error.to_string(), &hash),
        }

        // 2. Semantic: embed (only now that the exact check missed) and search the scope.
        let long_enough = content.trim().chars().count() >= self.config.min_semantic_length
            && content.split_whitespace().count() >= self.config.min_semantic_words;
        match (&self.embedder, long_enough) {
            (Some(embedder), true) => {
                let semantic_started = Instant::now();
                let semantic = self.semantic_check(embedder.as_ref(), content, scope).await;
                metrics::check_duration(CheckType::Semantic.label(), elapsed_ms(semantic_started));
                match semantic {
                    Ok((found, neighbours)) => {
                        vector.vector = Some(found);
                        result.nearest = neighbours.first().copied();
                        match self.judge_neighbours(content, &neighbours, result.threshold).await {
                            Ok(decision) => {
                                if let Some(fallback) = decision.fallback {
                                    result.judge = PairJudgeChoice::Cosine.name();
                                    result.notes.push(fallback);
                                }
                                if let Some((id, judgement)) = decision.duplicate {
                                    let score = judgement.cosine;
                                    mark_duplicate(&mut result, scope, DuplicateReason::SemanticSimilar, id, score);
                                    result.probability = judgement.probability;
                                    result.reasons = judgement.reasons;
                                    metrics::similarity(namespace, score);
                                    return Ok(ChainOutcome {
                                        result: finish(result, started, namespace),
                                        hash,
                                        vector,
                                        lock_threshold,
                                    });
                                }
                                // A memory closer than every one judged that races in is
                                // judged again under the write lock.
                                let judged_max = neighbours
                                    .iter()
                                    .map(|n| n.score)
                                    .filter(|&score| score >= self.config.pair_judge.floor(result.threshold))
                                    .fold(f32::NEG_INFINITY, f32::max);
                                if judged_max.is_finite() {
                                    lock_threshold = lock_threshold.max(judged_max.next_up());
                                }
                                if let Some((id, judgement)) = decision.nearest {
                                    result.verdict = judgement.verdict;
                                    result.probability = judgement.probability;
                                    if judgement.verdict == PairVerdict::Uncertain {
                                        result.likely_duplicate = Some(scope.urn(id));
                                        result.likely_duplicate_pair = Some((id, judgement.cosine));
                                    }
                                    result.reasons = judgement.reasons;
                                }
                            }
                            Err(error) => self.fail_open(&mut result, CheckType::Semantic, &error, &hash),
                        }
                    }
                    Err(failure) => {
                        let error = failure.error;
                        vector = ChainVector {
                            embedder_failed: failure.vector.is_none(),
                            vector: failure.vector,
                            rejected: failure.vector_rejected,
                        };
                        self.fail_open(&mut result, CheckType::Semantic, &error, &hash);
                    }
                }
            }
            (None, true) => {
                result.not_run.push(CheckType::Semantic);
                result.notes.push(NO_EMBEDDER_NOTE.to_owned());
            }
            (_, false) => result.not_run.push(CheckType::Semantic),
        }

        // 3. Recent: captured in this scope within the window.
        let recent_started = Instant::now();
        let recent = match self.recent.check(scope, &hash).await {
            Ok(Some(hit)) => Ok(self.still_holds(hit, scope, &hash).await),
            other => other,
        };
        metrics::check_duration(CheckType::Recent.label(), elapsed_ms(recent_started));
        match recent {
            Ok(hit) => {
                metrics::cache_lookup(hit.is_some());
                if let Some(hit) = hit {
                    result.is_duplicate = true;
                    result.verdict = PairVerdict::Duplicate;
                    result.reasons = vec![format!("the same content was captured {} s ago", hit.age.as_secs())];
                    result.reason = Some(DuplicateReason::RecentCapture);
                    result.matched_memory_id = Some(hit.memory_id);
                    result.matched_urn = Some(hit.urn);
                    result.captured_secs_ago = Some(hit.age.as_secs());
                }
            }
            Err(error) => self.fail_open(&mut result, CheckType::Recent, &error.to_string(), &hash),
        }
        Ok(ChainOutcome { result: finish(result, started, namespace), hash, vector, lock_threshold })
    }

    /// A recent capture `hit` of `hash`, unless its memory was since forgotten or edited to
    /// another text: the capture window remembers what was captured, not what the user
    /// took back. A merged memory still counts (its survivor holds the text); a memory the
    /// store does not have in this scope (another writer's capture), or a store that cannot
    /// answer, keeps the hit.
    async fn still_holds(&self, hit: crate::RecentHit, scope: &Scope, hash: &ContentHash) -> Option<crate::RecentHit> {
        match self.store.get(hit.memory_id).await {
            Ok(Some(memory)) if memory.scope != *scope => Some(hit),
            Ok(Some(memory)) if memory.deprecated && memory.merged_into.is_none() => None,
            Ok(Some(memory)) if memory.content_hash != *hash => None,
            Ok(_) | Err(_) => Some(hit),
        }
    }

    /// Embeds `content` and finds its nearest live memories in `scope` (as many as the
    /// pair judge looks at), most similar first.
    async fn semantic_check(
        &self,
        embedder: &dyn Embedder,
        content: &str,
        scope: &Scope,
    ) -> Result<(StoredVector, Vec<Neighbour>), SemanticFailure> {
        let embedding: Embedding = embedder.embed_one(content).await.map_err(|error| SemanticFailure {
            vector: None,
            error: format!("embedder: {error}"),
            vector_rejected: false,
        })?;
        let vector = StoredVector { model: embedder.model_id().to_owned(), embedding };
        match self.store.search(scope, &vector.model, &vector.embedding, self.config.pair_judge.candidates()).await {
            Ok(neighbours) => Ok((vector, neighbours)),
            Err(error) => {
                // A vector the index cannot take (other dimensions than the scope's stored
                // vectors of this model) must not be stored either.
                let vector_rejected =
                    matches!(error, dedup_store::Error::InvalidVector(_) | dedup_store::Error::Corrupt { .. });
                Err(SemanticFailure { vector: Some(vector), error: format!("vector search: {error}"), vector_rejected })
            }
        }
    }

    /// Judges `neighbours` (most similar first) against `content` with the configured
    /// pair judge; the local judge reads the texts of those at or above its floor. Fails
    /// (with a message for [`DuplicateCheckResult::degraded`]) when the store cannot give
    /// a text.
    async fn judge_neighbours(
        &self,
        content: &str,
        neighbours: &[Neighbour],
        threshold: f32,
    ) -> Result<PairDecision<MemoryId>, String> {
        let judge = &self.config.pair_judge;
        let floor = judge.floor(threshold);
        let close: Vec<Neighbour> = neighbours.iter().copied().filter(|n| n.score >= floor).collect();
        let mut texts = Vec::with_capacity(close.len());
        if judge.reads_texts() {
            for neighbour in &close {
                match self.store.get(neighbour.id).await {
                    Ok(Some(memory)) => texts.push(memory.content),
                    // Deleted since the search: nothing to judge.
                    Ok(None) => texts.push(String::new()),
                    Err(error) => return Err(format!("reading a neighbour to judge: {error}")),
                }
            }
        } else {
            texts.resize(close.len(), String::new());
        }
        let kept: Vec<(MemoryId, f32, String)> = close
            .iter()
            .zip(texts)
            .filter(|(_, text)| !judge.reads_texts() || !text.is_empty())
            .map(|(n, text)| (n.id, n.score, text))
            .collect();
        let decide = {
            let (judge, content) = (judge.clone(), content.to_owned());
            move || {
                let candidates: Vec<JudgeCandidate<'_, MemoryId>> =
                    kept.iter().map(|(id, cosine, text)| JudgeCandidate { id: *id, cosine: *cosine, text }).collect();
                judge.decide(&content, &candidates, threshold)
            }
        };
        if judge.learned().is_none() || close.is_empty() {
            return Ok(decide());
        }
        // The learned judge runs a model: off the async executor.
        tokio::task::spawn_blocking(decide).await.map_err(|e| format!("the pair judge stopped: {e}"))
    }

    /// Embeds memories of `scope` (or of every scope) stored without the vector their
    /// writer wanted because the embedder was down, in batches of `batch` (at least 1), at
    /// most `limit` of them (0: all). With `all_missing`, every live memory without a
    /// vector counts, including ones stored before this was tracked, or too short for the
    /// semantic check.
    ///
    /// Each memory's [`embedding_text`](dedup_store::Memory::embedding_text) is embedded
    /// and attached only if the memory is unchanged meanwhile
    /// ([`Store::attach_vector`]). Fails when the service has no embedder, the embedder
    /// fails, or the store does; what was attached before the failure stays attached.
    pub async fn backfill(
        &self,
        scope: Option<&Scope>,
        all_missing: bool,
        batch: usize,
        limit: usize,
    ) -> Result<Backfill> {
        let Some(embedder) = &self.embedder else {
            return Err(crate::Error::config("backfill", "no embedder is configured"));
        };
        let batch = batch.max(1);
        let mut report = Backfill::default();
        let mut after = None;
        loop {
            let want = if limit == 0 { batch } else { batch.min(limit - report.examined) };
            if want == 0 {
                break;
            }
            let filter = dedup_store::ListFilter {
                domain: scope.map(|s| s.domain().to_owned()),
                namespace: scope.map(|s| s.namespace_name().to_owned()),
                vector_pending: !all_missing,
                without_vector: all_missing,
                after,
                limit: want,
                ..dedup_store::ListFilter::default()
            };
            let memories = self.store.list(&filter).await?;
            let Some(last) = memories.last() else { break };
            after = Some(last.id);
            let texts: Vec<String> = memories.iter().map(|m| m.embedding_text().into_owned()).collect();
            let vectors = embedder.embed(&texts).await?;
            for (memory, embedding) in memories.iter().zip(vectors) {
                report.examined += 1;
                let vector = StoredVector { model: embedder.model_id().to_owned(), embedding };
                match self.store.attach_vector(memory.id, &memory.content_hash, &vector).await {
                    Ok(true) => report.embedded += 1,
                    Ok(false) => report.changed += 1,
                    Err(dedup_store::Error::InvalidVector(error)) => {
                        tracing::warn!(urn = %memory.urn(), %error, "backfill: vector refused");
                        report.refused += 1;
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            if memories.len() < want {
                break;
            }
        }
        metrics::backfilled(report.embedded);
        Ok(report)
    }

    /// Queues the pair of a stored memory and the memory the judge was unsure it
    /// duplicates, for review (fail-open: a queue that cannot be written is logged).
    async fn queue_for_review(&self, result: &DuplicateCheckResult, scope: &Scope, id: MemoryId) {
        let Some((other, cosine)) = result.likely_duplicate_pair else { return };
        let review = NewReview {
            scope: scope.clone(),
            a: id,
            b: other,
            cosine,
            probability: result.probability,
            judge: result.judge.to_owned(),
            reasons: result.reasons.clone(),
            source: "add".to_owned(),
        };
        match self.store.enqueue_review(&review).await {
            Ok(Some(entry)) => tracing::debug!(review = %entry, memory = %id, %other, "queued for review"),
            Ok(None) => {}
            Err(error) => tracing::warn!(memory = %id, %other, "the pair could not be queued for review: {error}"),
        }
    }

    /// A bounded backfill of `scope` after a successful embedding; failures are logged.
    async fn backfill_quietly(&self, scope: &Scope) {
        match self.backfill(Some(scope), false, AUTO_BACKFILL, AUTO_BACKFILL).await {
            Ok(report) if report.embedded > 0 => {
                tracing::info!(%scope, embedded = report.embedded, "backfilled vectors of memories stored while the embedder was down");
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%scope, %error, "backfill failed"),
        }
    }

    fn fail_open(&self, result: &mut DuplicateCheckResult, check: CheckType, error: &str, hash: &ContentHash) {
        metrics::check_failed(check.label());
        tracing::warn!(
            check = check.label(),
            fingerprint = hash.fingerprint(),
            error,
            "dedup check failed, proceeding"
        );
        result.degraded.push(CheckFailure { check, error: error.to_owned() });
    }
}

/// Memories a store's successful add backfills at most, so one add never waits long.
const AUTO_BACKFILL: usize = 16;

/// What [`DeduplicationService::backfill`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Backfill {
    /// Memories looked at.
    pub examined: usize,
    /// Memories that got their vector.
    pub embedded: usize,
    /// Memories edited, deleted or embedded by someone else meanwhile: left alone.
    pub changed: usize,
    /// Memories whose vector the store refused (other dimensions than the scope's
    /// vectors of the same model).
    pub refused: usize,
}

struct SemanticFailure {
    vector: Option<StoredVector>,
    error: String,
    vector_rejected: bool,
}

/// The reason given for an exact match.
const EXACT_REASON: &str = "the same text after normalisation (same content hash)";

/// How often [`DeduplicationService::add`] re-asks the store after the local judge kept
/// apart a memory that raced in under the lock, before storing without the semantic
/// recheck.
const LOCK_RETRIES: usize = 8;

fn mark_duplicate(result: &mut DuplicateCheckResult, scope: &Scope, reason: DuplicateReason, id: MemoryId, score: f32) {
    result.is_duplicate = true;
    result.verdict = PairVerdict::Duplicate;
    result.reason = Some(reason);
    result.similarity_score = Some(score);
    result.matched_memory_id = Some(id);
    result.matched_urn = Some(scope.urn(id));
}

fn finish(mut result: DuplicateCheckResult, started: Instant, namespace: &str) -> DuplicateCheckResult {
    let elapsed = started.elapsed();
    result.check_duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    result.check_duration_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    metrics::check_duration("total", elapsed_ms(started));
    metrics::check_completed(namespace, result.is_duplicate);
    tracing::debug!(
        fingerprint = result.fingerprint,
        duplicate = result.is_duplicate,
        reason = result.reason.map(DuplicateReason::label),
        urn = result.matched_urn.as_deref(),
        us = result.check_duration_us,
        "dedup check"
    );
    result
}

fn elapsed_ms(started: Instant) -> f64 {
    Duration::as_secs_f64(&started.elapsed()) * 1000.0
}

/// Why an exact repeat is refused although deduplication is disabled.
const DISABLED_EXACT_NOTE: &str = "deduplication is disabled (SUBCOG_DEDUP_ENABLED=false, [dedup] enabled = false): \
     no check ran, but the store keeps a single live copy of each exact text in a namespace";

/// Rejects content no memory may have, before any checker runs.
fn validate_content(content: &str) -> Result<()> {
    let reason = if content.len() > MAX_CONTENT_BYTES {
        Some(format!("is {} bytes, over the limit of {MAX_CONTENT_BYTES} bytes (1 MiB)", content.len()))
    } else if dedup_core::is_blank(content) {
        Some("must not be empty or blank".to_owned())
    } else if content.contains('\0') {
        Some("must not contain NUL characters".to_owned())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(dedup_store::Error::InvalidContent { what: "content", reason }.into()),
        None => Ok(()),
    }
}
