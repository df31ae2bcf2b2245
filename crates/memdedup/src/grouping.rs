//! Grouping on the blocking pool: the all-pairs, judged and learned groupings are CPU
//! work, so inside a Tokio runtime they run on `spawn_blocking` and never stall an async
//! worker; outside one they run in place.

use std::sync::Arc;

use dedup_core::{
    Linkage, LocalJudge, PairScorer, RejectedPair, group_by_cosine, group_judged, group_learned, learned_candidates,
    similar_pairs,
};

use crate::{Embedding, Group, Result, Threshold};

/// Runs `work` on the blocking pool when inside a runtime (a panic there is resumed here).
async fn off_executor<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.spawn_blocking(work).await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())),
        Err(_) => work(),
    }
}

/// All-pairs grouping by cosine (single linkage).
pub(crate) async fn group_off_executor(embeddings: Vec<Embedding>, threshold: Threshold) -> Result<Vec<Group>> {
    off_executor(move || crate::group_by_similarity(&embeddings, threshold).map_err(Into::into)).await
}

/// Grouping by the learned judge, on the blocking pool: candidates from the embeddings,
/// the model's logits for them in batches, then the verdicts and the linkage.
pub(crate) async fn learned_off_executor(
    texts: Vec<String>,
    embeddings: Vec<Embedding>,
    scorer: Arc<dyn PairScorer>,
    linkage: Linkage,
    threshold: Threshold,
) -> Result<(dedup_core::GuardedGrouping, Vec<RejectedPair>)> {
    let work = move || -> Result<_> {
        let settings = scorer.settings();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        // Each memory's nearest neighbours above the floor, as a check reads them, then the
        // rest of the pairs of the groups they confirm.
        let all = similar_pairs(&embeddings, settings.candidate_floor)?;
        let (candidates, scores) = learned_candidates(&refs, &all, settings, |pairs| scorer.scores(pairs))
            .map_err(|e| crate::Error::Embedder(dedup_embed::Error::Inference(e)))?;
        let judged = group_learned(&refs, &candidates, &scores, settings, threshold.as_f32(), linkage)?;
        Ok((judged.grouping, judged.rejected))
    };
    off_executor(work).await
}

/// Judged (or cosine with a linkage) grouping, on the blocking pool.
pub(crate) async fn judged_off_executor(
    texts: Vec<String>,
    embeddings: Vec<Embedding>,
    judge: Option<Arc<LocalJudge>>,
    linkage: Linkage,
    threshold: Threshold,
) -> Result<(dedup_core::GuardedGrouping, Vec<RejectedPair>)> {
    let threshold = threshold.as_f32();
    let work = move || -> Result<_> {
        match judge {
            Some(judge) => {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let judged = group_judged(&refs, &embeddings, &judge, threshold, linkage)?;
                Ok((judged.grouping, judged.rejected))
            }
            None => Ok((group_by_cosine(&embeddings, threshold, linkage)?, Vec::new())),
        }
    };
    off_executor(work).await
}
