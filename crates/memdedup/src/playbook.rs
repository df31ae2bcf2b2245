//! Playbook deduplication (seed 000): cross-section groups, first entry wins, counters summed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use dedup_core::{Linkage, LocalJudge, RefusedLink, RejectedPair};

use crate::grouping::{group_off_executor, judged_off_executor};
use crate::{Embedder, MergePlan, Playbook, Result, Threshold, default_embedder, embed_texts};

/// What a playbook deduplication did, for people and for `--json`.
#[derive(Debug, Clone, PartialEq)]
pub struct DedupReport {
    /// The embedder's model id (empty when nothing was embedded).
    pub model: String,
    /// The threshold in force.
    pub threshold: Threshold,
    /// Entries before deduplication.
    pub entries_before: usize,
    /// Entries after deduplication.
    pub entries_after: usize,
    /// The merges: survivors, absorbed entries with section, name and link score, and
    /// each group's weakest link.
    pub plan: MergePlan,
    /// Sections outside the canonical five, deduplicated after them in file order.
    pub non_canonical_sections: Vec<String>,
    /// Texts actually embedded (0 when the playbook had fewer than two entries).
    pub embedded: usize,
    /// Links the linkage refused (indices into [`Playbook::entries`]), with the reason.
    pub refused: Vec<RefusedLink>,
    /// Pairs the local judge kept apart (indices into [`Playbook::entries`]), with its
    /// reasons; empty without a judge.
    pub rejected: Vec<RejectedPair>,
}

/// How a playbook is deduplicated: the seed's cosine threshold, or the local judge.
#[derive(Debug, Clone, PartialEq)]
pub struct PlaybookDedupOptions {
    /// Entries link when their cosine is >= this (with a judge: pairs from the lower of
    /// this and the judge's duplicate floor are judged).
    pub threshold: Threshold,
    /// The local judge deciding each pair; `None` links on cosine alone.
    pub judge: Option<Arc<LocalJudge>>,
    /// How groups may be joined (default [`Linkage::Single`]).
    pub linkage: Linkage,
}

impl PlaybookDedupOptions {
    /// Cosine alone at `threshold`, single linkage (seed 000).
    pub fn new(threshold: Threshold) -> PlaybookDedupOptions {
        PlaybookDedupOptions { threshold, judge: None, linkage: Linkage::Single }
    }
}

/// A deduplicated playbook and its report.
#[derive(Debug, Clone, PartialEq)]
pub struct DedupOutcome {
    /// The playbook after merging.
    pub playbook: Playbook,
    /// What changed and why.
    pub report: DedupReport,
}

/// Deduplicates `playbook` across all its sections (REQ-DEDUP-001..003): entries whose
/// texts are connected through cosine >= `threshold` form a group; the first entry in
/// flat order (canonical sections, then others in file order) survives in place with its
/// text and the summed `helpful` / `harmful` counters; the others are removed.
///
/// With fewer than two entries nothing is embedded (REQ-DEDUP-006). `progress(done,
/// total)` is called as texts are embedded. The input is not modified; on error nothing
/// is lost.
pub async fn deduplicate_playbook(
    playbook: &Playbook,
    embedder: &dyn Embedder,
    threshold: Threshold,
    progress: &(dyn Fn(usize, usize) + Send + Sync),
) -> Result<DedupOutcome> {
    deduplicate_playbook_with(playbook, embedder, PlaybookDedupOptions::new(threshold), progress).await
}

/// [`deduplicate_playbook`] with a judge and a linkage: groups are formed only from the
/// pairs the judge confirms, joined as `options.linkage` allows; the report lists the
/// pairs the judge kept apart and the links the linkage refused.
pub async fn deduplicate_playbook_with(
    playbook: &Playbook,
    embedder: &dyn Embedder,
    options: PlaybookDedupOptions,
    progress: &(dyn Fn(usize, usize) + Send + Sync),
) -> Result<DedupOutcome> {
    let threshold = options.threshold;
    let non_canonical_sections = playbook.non_canonical_sections();
    if !non_canonical_sections.is_empty() {
        tracing::warn!(
            sections = ?non_canonical_sections,
            "playbook has sections outside the canonical five; they are kept and deduplicated after them"
        );
    }
    let entries = playbook.entries();
    let mut report = DedupReport {
        model: String::new(),
        threshold,
        entries_before: entries.len(),
        entries_after: entries.len(),
        plan: MergePlan::default(),
        non_canonical_sections,
        embedded: 0,
        refused: Vec::new(),
        rejected: Vec::new(),
    };
    if entries.len() < 2 {
        return Ok(DedupOutcome { playbook: playbook.clone(), report });
    }
    let texts: Vec<&str> = entries.iter().map(|(_, e)| e.text.as_str()).collect();
    let embeddings = embed_texts(embedder, &texts, progress).await?;
    report.model = embedder.model_id().to_owned();
    report.embedded = texts.len();
    let groups = if options.judge.is_none() && options.linkage == Linkage::Single {
        group_off_executor(embeddings, threshold).await?
    } else {
        let texts = texts.iter().map(|t| (*t).to_owned()).collect();
        let (grouping, rejected) =
            judged_off_executor(texts, embeddings, options.judge, options.linkage, threshold).await?;
        report.refused = grouping.refused;
        report.rejected = rejected;
        grouping.groups
    };
    let plan = MergePlan::new(&entries, &groups)?;
    let mut deduped = playbook.clone();
    plan.apply(&mut deduped)?;
    report.entries_after = deduped.len();
    report.plan = plan;
    Ok(DedupOutcome { playbook: deduped, report })
}

/// Seed 000's `run_deduplication(playbook, threshold)` with the default local embedder.
///
/// Never fails and never panics: if the model is unavailable, embedding fails, or
/// anything else goes wrong, it logs a warning (to stderr when no `tracing` subscriber is
/// installed) and returns the playbook unchanged (REQ-DEDUP-005, INV-DEDUP-001). With
/// fewer than two entries it returns at once and loads no model (REQ-DEDUP-006).
/// `threshold` is resolved explicit > `AGENTIC_CONTEXT_DEDUP_THRESHOLD` > 0.85, clamped to
/// `[0, 1]` (REQ-DEDUP-004).
pub fn run_deduplication(playbook: Playbook, threshold: Option<f64>) -> Playbook {
    if playbook.len() < 2 {
        return playbook;
    }
    match default_embedder(None) {
        Ok(embedder) => run_deduplication_with(playbook, threshold, embedder),
        Err(e) => {
            warn_skipped(&e.to_string());
            playbook
        }
    }
}

/// [`run_deduplication`] with a chosen embedder; the same never-fail contract.
///
/// Callable from synchronous code and from inside an async runtime alike (it then runs on
/// a separate thread, so it never blocks the caller's executor in a way that panics).
pub fn run_deduplication_with(playbook: Playbook, threshold: Option<f64>, embedder: Arc<dyn Embedder>) -> Playbook {
    if playbook.len() < 2 {
        return playbook;
    }
    let threshold = Threshold::resolve(threshold);
    let attempt = || -> std::result::Result<Playbook, String> {
        let run = || -> std::result::Result<Playbook, String> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start a runtime: {e}"))?;
            runtime
                .block_on(deduplicate_playbook(&playbook, embedder.as_ref(), threshold, &|_, _| {}))
                .map(|outcome| outcome.playbook)
                .map_err(|e| e.to_string())
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| s.spawn(run).join()).unwrap_or_else(|payload| Err(panic_message(&*payload)))
        } else {
            run()
        }
    };
    match catch_unwind(AssertUnwindSafe(attempt)) {
        Ok(Ok(deduped)) => deduped,
        Ok(Err(reason)) => {
            warn_skipped(&reason);
            playbook
        }
        Err(payload) => {
            warn_skipped(&panic_message(&*payload));
            playbook
        }
    }
}

/// "deduplication panicked: MESSAGE" from a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".into());
    format!("deduplication panicked: {message}")
}

fn warn_skipped(reason: &str) {
    tracing::warn!(%reason, "deduplication skipped; playbook returned unchanged");
    if !tracing::dispatcher::has_been_set() {
        eprintln!("memdedup: warning: deduplication skipped, playbook returned unchanged: {reason}");
    }
}
