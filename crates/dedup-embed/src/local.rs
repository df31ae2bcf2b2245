//! [`LocalEmbedder`]: all-MiniLM-L6-v2 (int8 weights) run offline through ONNX Runtime.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use parking_lot::FairMutex;

use async_trait::async_trait;

use self::model::Model;
use crate::{Embedder, Embedding, Error, ModelDir, Result};

mod model;
mod pair;

pub use self::pair::{JUDGE_EMBEDDER_FILE, PAIR_JUDGE_MODEL_FILE, PAIR_JUDGE_SETTINGS_FILE, PairJudgeModel};

/// Model id reported by [`LocalEmbedder`], and the key of its cached vectors.
pub const LOCAL_MODEL_ID: &str = "all-MiniLM-L6-v2-int8";
pub(crate) const LOCAL_DIMS: usize = 384;

/// Tuning for [`LocalEmbedder`].
///
/// By default every input runs on one session whose intra-op threads spread each inference
/// over all cores, in batches of `batch_size` texts, shortest first. With `sessions: Some(n)`
/// (n ≥ 2), inputs larger than one batch are split over `n` single-threaded *worker*
/// sessions in parallel instead: on 2 cores that embeds about 12 % more texts per second
/// than one session, but each worker costs about 65 MB (its arena and kernel state; the
/// weights are shared), so the default favours memory. Each session loads on first use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalOptions {
    /// Texts per inference call (default 8: short memories gain little from larger
    /// batches, and small batches pad less).
    pub batch_size: usize,
    /// Single-threaded worker sessions for inputs larger than one batch (at most 8;
    /// default none: the one multi-threaded session does everything).
    pub sessions: Option<usize>,
    /// Intra-op threads of the latency session (default: available cores, at most 8).
    pub threads: Option<usize>,
    /// Tokens per inference window (default 256, the length the model was trained
    /// with). A longer text is embedded as overlapping windows of this many tokens whose
    /// vectors are averaged, weighted by their token counts, so every part of it counts.
    pub max_length: usize,
    /// Most windows one text is embedded from (default 32, about 28 KB of English): a
    /// longer text is embedded from this many windows spread evenly over it, so that one
    /// huge text costs a bounded amount of work and cannot hold the model for long.
    pub max_windows: usize,
    /// Repack the weight matrices for the CPU's kernels when a session loads (default
    /// true): every later inference is about 15 % faster, but the load takes about 80 ms
    /// and 40 MB more. A process that embeds a few texts and exits (a hook's `check`)
    /// starts faster without it.
    pub prepack: bool,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self { batch_size: 8, sessions: None, threads: None, max_length: 256, max_windows: 32, prepack: true }
    }
}

/// One inference session, loaded on first use; a failed load is remembered.
/// A session's model behind a fair lock: each release hands the model to the longest
/// waiter, so a short request waits for at most one batch of each request ahead of it.
type Session = OnceLock<std::result::Result<FairMutex<Model>, Error>>;

/// The sessions of one model directory, shared by every [`LocalEmbedder`] in the process,
/// so each is loaded at most once (FM-ACE-006): index 0 is the latency session, the rest
/// are workers. The first embedder created for a directory fixes their number and threads.
fn shared_sessions(dir: &ModelDir, options: &LocalOptions) -> Arc<[Session]> {
    static REGISTRY: OnceLock<Mutex<HashMap<PathBuf, Arc<[Session]>>>> = OnceLock::new();
    let registry = REGISTRY.get_or_init(Default::default);
    let mut registry = registry.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let count = options.sessions.map_or(0, |n| n.clamp(1, 8));
    registry.entry(dir.path().to_path_buf()).or_insert_with(|| (0..=count).map(|_| Session::new()).collect()).clone()
}

/// Embeds texts with all-MiniLM-L6-v2 (384 dims, mean pooling, L2 normalised) from the
/// local model cache, with no network access.
///
/// Construction is cheap and never fails; the model is loaded on first use, once per
/// process and model directory, on a blocking thread. A missing or corrupt model surfaces
/// then as [`Error::ModelMissing`] / [`Error::ModelCorrupt`], naming
/// `cargo xtask fetch-model`. Inference always runs off the async executor.
#[derive(Clone)]
pub struct LocalEmbedder {
    dir: ModelDir,
    options: LocalOptions,
    sessions: Arc<[Session]>,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("dir", &self.dir)
            .field("options", &self.options)
            .field("sessions_loaded", &self.sessions_loaded())
            .finish()
    }
}

impl LocalEmbedder {
    /// An embedder for the model in `dir`, with default options.
    pub fn new(dir: ModelDir) -> Self {
        Self::with_options(dir, LocalOptions::default())
    }

    /// An embedder for the model in `dir`.
    pub fn with_options(dir: ModelDir, options: LocalOptions) -> Self {
        let sessions = shared_sessions(&dir, &options);
        Self { dir, options, sessions }
    }

    /// The model directory in use.
    pub fn model_dir(&self) -> &ModelDir {
        &self.dir
    }

    /// Loads the latency session now (on the calling thread) instead of on first use.
    pub fn load_blocking(&self) -> Result<()> {
        self.session(0).map(|_| ())
    }

    /// How many inference sessions of this model directory are loaded in the process.
    pub fn sessions_loaded(&self) -> usize {
        self.sessions.iter().filter(|s| s.get().is_some_and(Result::is_ok)).count()
    }

    /// Session `i` (0 = latency, others = workers), loading it if needed.
    fn session(&self, i: usize) -> Result<&FairMutex<Model>> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = if i == 0 { self.options.threads.unwrap_or(cores).clamp(1, 8) } else { 1 };
        match self.sessions[i].get_or_init(|| {
            Model::load(&self.dir, self.options.max_length, threads, self.options.prepack).map(FairMutex::new)
        }) {
            Ok(session) => Ok(session),
            Err(e) => Err(clone_error(e)),
        }
    }

    /// The latency session, or a loaded worker when the latency session is busy.
    fn single_batch_session(&self) -> Result<&FairMutex<Model>> {
        let latency = self.session(0)?;
        if latency.try_lock().is_some() {
            return Ok(latency);
        }
        let loaded_workers = self.sessions[1..].iter().filter_map(|s| s.get()?.as_ref().ok());
        for worker in loaded_workers {
            if worker.try_lock().is_some() {
                return Ok(worker);
            }
        }
        Ok(latency)
    }

    /// Embeds on the calling thread. Prefer [`Embedder::embed`] from async code.
    ///
    /// A text longer than one window (`max_length` tokens, with `[CLS]` and `[SEP]`) is
    /// cut into windows of at most `max_length - 2` tokens that overlap by an eighth,
    /// each window is embedded as a text of its own, and the text's vector is the mean of
    /// the windows' vectors weighted by their token counts, renormalised. A text of `n`
    /// tokens so costs about `n / (0.875 * (max_length - 2))` inferences instead of one,
    /// and a difference anywhere in it moves its vector (truncation would ignore
    /// everything past the first window). A text of more than `max_windows` windows is
    /// embedded from `max_windows` of them spread evenly from its first to its last.
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Embedding>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let window = self.options.max_length.saturating_sub(2).max(8);
        // Wordpiece tokens never outnumber characters: most texts need no tokenizing here.
        if texts.iter().all(|t| t.chars().count() <= window) {
            return self.embed_pieces(texts);
        }
        let plans = self.window_plans(texts, window)?;
        let pieces: Vec<String> = plans.iter().flat_map(|plan| plan.iter().map(|(text, _)| text.clone())).collect();
        let vectors = self.embed_pieces(&pieces)?;
        let mut vectors = vectors.into_iter();
        let mut out = Vec::with_capacity(texts.len());
        for plan in &plans {
            let mut sum = vec![0.0f32; LOCAL_DIMS];
            for (_, weight) in plan {
                let vector = vectors.next().ok_or_else(|| Error::Inference("a window's vector is missing".into()))?;
                for (acc, value) in sum.iter_mut().zip(vector.as_slice()) {
                    *acc += *weight as f32 * value;
                }
            }
            out.push(Embedding::new(sum)?);
        }
        Ok(out)
    }

    /// The windows of each text with their token counts: the text itself (weight 1) when
    /// it fits in one window, else overlapping spans of at most `window` tokens.
    fn window_plans(&self, texts: &[String], window: usize) -> Result<Vec<Vec<(String, usize)>>> {
        let session = self.session(0)?;
        // The session's tokenizer truncates at `max_length`; a copy without truncation sees
        // the whole text. Copied once per call that holds a long text.
        let mut tokenizer = session.lock().tokenizer().clone();
        tokenizer.with_truncation(None).map_err(|e| Error::Inference(format!("tokenizer: {e}")))?;
        let step = window - window / 8;
        texts
            .iter()
            .map(|text| {
                if text.chars().count() <= window {
                    return Ok(vec![(text.clone(), 1)]);
                }
                let encoding =
                    tokenizer.encode(text.as_str(), false).map_err(|e| Error::Inference(format!("tokenizer: {e}")))?;
                let offsets = encoding.get_offsets();
                if offsets.len() <= window {
                    return Ok(vec![(text.clone(), 1)]);
                }
                let mut plan = Vec::new();
                let mut start = 0;
                loop {
                    let end = (start + window).min(offsets.len());
                    let span = text.get(offsets[start].0..offsets[end - 1].1).filter(|s| !s.trim().is_empty());
                    if let Some(span) = span {
                        plan.push((span.to_owned(), end - start));
                    }
                    if end == offsets.len() {
                        break;
                    }
                    start += step;
                }
                if plan.is_empty() {
                    plan.push((text.clone(), 1));
                }
                Ok(spread(plan, self.options.max_windows))
            })
            .collect()
    }

    /// Embeds texts that each fit in one window (longer ones are truncated).
    fn embed_pieces(&self, texts: &[String]) -> Result<Vec<Embedding>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // Shortest first: batches then hold texts of similar length and pad less.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let sorted: Vec<&str> = order.iter().map(|&i| texts[i].as_str()).collect();
        let batch_size = self.options.batch_size.max(1);
        let batches: Vec<&[&str]> = sorted.chunks(batch_size).collect();
        let workers = (self.sessions.len() - 1).min(batches.len());
        let vectors = if batches.len() <= 1 || workers <= 1 {
            run_batches(self.single_batch_session()?, &batches)?
        } else {
            // Batch k goes to session k mod n; each session (loaded by its own thread if
            // needed) works through its share.
            let per_session: Vec<Vec<Vec<f32>>> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..workers)
                    .map(|w| {
                        let mine: Vec<&[&str]> = batches.iter().skip(w).step_by(workers).copied().collect();
                        scope.spawn(move || run_batches(self.session(w + 1)?, &mine))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().map_err(|_| Error::Inference("inference thread panicked".into()))?)
                    .collect::<Result<_>>()
            })?;
            // Re-interleave: batch k's vectors come next from session k mod n.
            let mut cursors = vec![0usize; workers];
            let mut out = Vec::with_capacity(sorted.len());
            for (k, batch) in batches.iter().enumerate() {
                let w = k % workers;
                let range = cursors[w]..cursors[w] + batch.len();
                let got = per_session[w]
                    .get(range)
                    .ok_or_else(|| Error::Inference("a session returned fewer vectors than texts".into()))?;
                out.extend(got.iter().cloned());
                cursors[w] += batch.len();
            }
            out
        };
        if vectors.len() != texts.len() {
            return Err(Error::Inference(format!("{} vectors for {} texts", vectors.len(), texts.len())));
        }
        let mut out: Vec<Option<Embedding>> = vec![None; texts.len()];
        for (slot, vector) in order.into_iter().zip(vectors) {
            out[slot] = Some(Embedding::new(vector)?);
        }
        Ok(out.into_iter().flatten().collect())
    }
}

/// Runs `batches` in order on one session.
/// Runs `batches` on `session`, taking its lock for one batch at a time, so that a short
/// request waiting for the session runs between the batches of a long one.
fn run_batches(session: &FairMutex<Model>, batches: &[&[&str]]) -> Result<Vec<Vec<f32>>> {
    let mut out = Vec::with_capacity(batches.iter().map(|b| b.len()).sum());
    for batch in batches {
        let mut model = session.lock();
        out.extend(model.embed(batch)?);
        // Hand the model to the longest waiter, not back to this thread.
        parking_lot::FairMutexGuard::unlock_fair(model);
    }
    Ok(out)
}

/// At most `max` of `plan`'s windows, evenly spaced from the first to the last (all of
/// them when there are no more than `max`; at least one).
fn spread<T>(plan: Vec<T>, max: usize) -> Vec<T> {
    let max = max.max(1);
    let n = plan.len();
    if n <= max {
        return plan;
    }
    let keep: std::collections::BTreeSet<usize> =
        (0..max).map(|k| if max == 1 { 0 } else { k * (n - 1) / (max - 1) }).collect();
    plan.into_iter().enumerate().filter(|(i, _)| keep.contains(i)).map(|(_, w)| w).collect()
}

fn clone_error(e: &Error) -> Error {
    match e {
        Error::ModelMissing { dir, missing } => Error::ModelMissing { dir: dir.clone(), missing: missing.clone() },
        Error::ModelCorrupt { dir, reason } => Error::ModelCorrupt { dir: dir.clone(), reason: reason.clone() },
        other => Error::Inference(other.to_string()),
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn model_id(&self) -> &str {
        LOCAL_MODEL_ID
    }

    fn dims(&self) -> usize {
        LOCAL_DIMS
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Embedding>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let this = self.clone();
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || this.embed_blocking(&texts))
            .await
            .map_err(|e| Error::Inference(format!("inference task failed: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn defect_6_a_long_text_is_embedded_from_at_most_max_windows_spread_over_it() {
        let plan: Vec<usize> = (0..1000).collect();
        let kept = spread(plan, 32);
        assert_eq!(kept.len(), 32);
        assert_eq!((kept[0], kept[31]), (0, 999), "the first and the last window are kept");
        assert!(kept.windows(2).all(|w| w[1] > w[0] && w[1] - w[0] <= 33), "{kept:?}");
        assert_eq!(spread((0..5).collect::<Vec<_>>(), 32), [0, 1, 2, 3, 4]);
        assert_eq!(spread((0..5).collect::<Vec<_>>(), 1), [0]);
        assert_eq!(spread((0..5).collect::<Vec<_>>(), 0), [0]);
    }
}
