//! Embedding many texts: identical texts once, shortest first, in chunks with progress.

use std::collections::HashMap;
use std::sync::Arc;

use crate::{Embedder, Embedding, Error, ModelDir, Result};

/// Texts per call to the embedder in [`embed_texts`]; progress is reported after each.
pub const EMBED_CHUNK: usize = 256;

/// The default embedder: the offline `LocalEmbedder` from the located model directory
/// (see [`ModelDir::locate`]). Nothing is loaded until first use.
///
/// Without the `local` feature there is no default embedder: the error says so, and the
/// fail-open entry points skip deduplication.
pub fn default_embedder(model_dir: Option<&std::path::Path>) -> Result<Arc<dyn Embedder>> {
    local_embedder_with(model_dir, EmbedderOptions::default())
}

/// [`default_embedder`] tuned for a process that embeds a few texts and exits (a hook's
/// `check`): its sessions skip weight prepacking, which makes every inference about 15 %
/// slower and the load about 80 ms faster.
pub fn short_lived_embedder(model_dir: Option<&std::path::Path>) -> Result<Arc<dyn Embedder>> {
    local_embedder_with(model_dir, EmbedderOptions { short_lived: true, ..EmbedderOptions::default() })
}

/// How [`local_embedder_with`] builds the local embedder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmbedderOptions {
    /// For a process that embeds a few texts and exits: no weight prepacking (see
    /// [`short_lived_embedder`]).
    pub short_lived: bool,
    /// The most 256-token windows one long text is embedded from, spread over it
    /// (`[embedder] max_windows`; default 32): it bounds the work, and the time the model is
    /// held, for one request.
    pub max_windows: Option<usize>,
}

/// The local embedder of the located model directory with `options`.
pub fn local_embedder_with(model_dir: Option<&std::path::Path>, options: EmbedderOptions) -> Result<Arc<dyn Embedder>> {
    let dir = ModelDir::locate(model_dir)?;
    #[cfg(feature = "local")]
    {
        let defaults = crate::LocalOptions::default();
        let local = crate::LocalOptions {
            prepack: !options.short_lived,
            max_windows: options.max_windows.unwrap_or(defaults.max_windows).max(1),
            ..defaults
        };
        Ok(Arc::new(crate::LocalEmbedder::with_options(dir, local)))
    }
    #[cfg(not(feature = "local"))]
    {
        let _ = options;
        Err(Error::Embedder(dedup_embed::Error::Config(format!(
            "memdedup was built without the `local` feature, so there is no default embedder (model dir {})",
            dir.path().display()
        ))))
    }
}

/// The learned pair judge installed in the located model directory (see
/// [`ModelDir::locate`]), checked against its pinned sha256 and loaded now, with one
/// intra-op thread per core (at most 8).
#[cfg(feature = "local")]
pub fn pair_judge(model_dir: Option<&std::path::Path>) -> Result<Arc<crate::PairJudgeModel>> {
    let dir = ModelDir::locate(model_dir)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    Ok(Arc::new(crate::PairJudgeModel::load(&dir, threads)?))
}

/// The learned pair judge of the located model directory, for the checker chain: its
/// settings are read now (a small file), the model is checked and loaded on the first pair
/// it judges (or by [`dedup_precompact::LearnedPairJudge::load_in_background`]). When the
/// judge is not installed the result says why, and checks decide by cosine and say so.
/// `short_lived`: for a process that checks a few texts and exits
/// ([`crate::PairJudgeModel::load_for_few`]).
#[cfg(feature = "local")]
pub fn learned_pair_judge(
    model_dir: Option<&std::path::Path>,
    short_lived: bool,
) -> dedup_precompact::LearnedPairJudge {
    use dedup_precompact::LearnedPairJudge;
    let dir = match ModelDir::locate(model_dir) {
        Ok(dir) => dir,
        Err(error) => return LearnedPairJudge::unavailable(error.to_string()),
    };
    let settings = match crate::PairJudgeModel::read_settings(&dir) {
        Ok(settings) => settings,
        Err(error) => return LearnedPairJudge::unavailable(error.to_string()),
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    LearnedPairJudge::with_loader(
        settings.candidate_floor,
        settings.candidates,
        Box::new(move || {
            let loaded = if short_lived {
                crate::PairJudgeModel::load_for_few(&dir, threads)
            } else {
                crate::PairJudgeModel::load(&dir, threads)
            };
            loaded.map(|model| Arc::new(model) as Arc<dyn dedup_core::PairScorer>).map_err(|e| e.to_string())
        }),
    )
}

/// Attaches the learned judge of the located model directory (see
/// [`learned_pair_judge`]) to `config` when it is the configured judge; other judges are
/// left as they are.
#[cfg(feature = "local")]
pub fn attach_learned_judge(
    config: &mut crate::DeduplicationConfig,
    model_dir: Option<&std::path::Path>,
    short_lived: bool,
) {
    if config.pair_judge.learned().is_some() {
        config.pair_judge = crate::PairJudgeChoice::Learned(learned_pair_judge(model_dir, short_lived));
    }
}

/// Embeds `texts`, returning one embedding per text in input order.
///
/// Identical texts are embedded once. Texts are sent shortest first in chunks of
/// [`EMBED_CHUNK`] (similar lengths pad less), and `progress(done, total)` is called after
/// each chunk with counts of distinct texts.
pub async fn embed_texts(
    embedder: &dyn Embedder,
    texts: &[&str],
    progress: &(dyn Fn(usize, usize) + Send + Sync),
) -> Result<Vec<Embedding>> {
    let mut slot_of: HashMap<&str, usize> = HashMap::with_capacity(texts.len());
    let mut distinct: Vec<&str> = Vec::new();
    let slots: Vec<usize> = texts
        .iter()
        .map(|&t| {
            *slot_of.entry(t).or_insert_with(|| {
                distinct.push(t);
                distinct.len() - 1
            })
        })
        .collect();
    let mut order: Vec<usize> = (0..distinct.len()).collect();
    order.sort_by_key(|&i| (distinct[i].len(), i));
    let mut vectors: Vec<Option<Embedding>> = vec![None; distinct.len()];
    let total = distinct.len();
    let mut done = 0;
    for chunk in order.chunks(EMBED_CHUNK) {
        let batch: Vec<String> = chunk.iter().map(|&i| distinct[i].to_owned()).collect();
        let got = embedder.embed(&batch).await?;
        if got.len() != batch.len() {
            return Err(Error::EmbedderContract {
                model: embedder.model_id().to_owned(),
                expected: batch.len(),
                got: got.len(),
            });
        }
        for (&i, v) in chunk.iter().zip(got) {
            vectors[i] = Some(v);
        }
        done += chunk.len();
        progress(done, total);
    }
    let vectors: Vec<Embedding> = vectors.into_iter().flatten().collect();
    if let Some(first) = vectors.first()
        && let Some(odd) = vectors.iter().find(|v| v.dims() != first.dims())
    {
        return Err(Error::EmbedderDimensions {
            model: embedder.model_id().to_owned(),
            expected: first.dims(),
            got: odd.dims(),
        });
    }
    Ok(slots.into_iter().map(|s| vectors[s].clone()).collect())
}
