//! [`PairJudgeModel`]: the learned pair judge's models, run through the same ONNX Runtime
//! as the embedder. Its settings ([`LearnedJudgeSettings`]) say which it has and turn
//! their [`PairScores`] into a verdict:
//! - a fine-tuned embedder ([`JUDGE_EMBEDDER_FILE`]): one unit vector per text, the pair's
//!   `tuned_cosine` their dot product;
//! - a cross-encoder ([`PAIR_JUDGE_MODEL_FILE`]): both texts read together ("[CLS] a [SEP]
//!   b [SEP]"), scoring the four [`Relation`](dedup_core::Relation)s.
//!
//! **Invariants:** the scores of (a, b) and (b, a) are the same (a pair is fed to the
//! cross-encoder in canonical order, the text that sorts first by Unicode code point first;
//! a cosine is symmetric); a pair's scores do not depend on the other pairs judged with it
//! (models with int8 weights and f32 maths read batches, equal to one pair at a time up
//! to f32 rounding; a dynamic int8 model, whose activation scales depend on everything
//! one inference holds, reads one pair or text per inference, and a call of many pairs is
//! spread over one single-threaded session per thread, each pair still read alone); every model
//! file is checked against its pinned sha256 before it is optimised and loaded (a later
//! process reads the cached optimised graph, whose key changes with the file's size and
//! modification time, and checks the file's size only).

use std::sync::{Mutex, OnceLock, PoisonError};

use dedup_core::{LearnedJudgeSettings, PairScores};
use ort::value::Tensor;
use tokenizers::{EncodeInput, PaddingParams, PaddingStrategy, Tokenizer, TruncationParams, TruncationStrategy};

use super::model::{Graph, GraphSession, Tuning, environment, open_session, optimized_graph_path, read_tokenizer};
use crate::{Error, ModelDir, Result, model_lock};

/// The model file's name in the model directory.
pub const PAIR_JUDGE_MODEL_FILE: &str = "pair_judge.onnx";
/// The fine-tuned embedder's file name in the model directory.
pub const JUDGE_EMBEDDER_FILE: &str = "judge_embedder.onnx";
/// The settings file's name in the model directory (`judge.json` as train-judge wrote it).
pub const PAIR_JUDGE_SETTINGS_FILE: &str = "pair_judge.json";
/// The cross-encoder's graph and the prefix of its cached optimised form.
const CROSS_ENCODER_GRAPH: Graph = Graph { file: PAIR_JUDGE_MODEL_FILE, cache_prefix: "pair_judge.optimized" };
/// The fine-tuned embedder's graph and the prefix of its cached optimised form.
const JUDGE_EMBEDDER_GRAPH: Graph = Graph { file: JUDGE_EMBEDDER_FILE, cache_prefix: "judge_embedder.optimized" };
/// Pairs per inference call of a model that may batch: larger batches pad more and gain
/// little on short memories.
const BATCH: usize = 16;
/// Texts per inference call of the fine-tuned embedder.
const TEXT_BATCH: usize = 32;
/// Pairs in one call from which a model that reads one pair per inference spreads them
/// over single-threaded sessions, one per thread (two small inferences side by side use
/// two cores better than one inference on two threads: 2.3 against 3.7 ms a pair). Opening
/// those sessions costs about as much as reading 50 pairs, so a call with fewer pairs (a
/// check reads at most 8) spreads only once they are open.
const SPREAD_FROM: usize = 64;

/// One ONNX session and the tokenizer that feeds it.
struct Runner {
    session: Mutex<GraphSession>,
    tokenizer: Tokenizer,
    /// At most this many pairs (or texts) per inference.
    batch: usize,
    /// For a model that reads one pair per inference and may use several threads: the
    /// single-threaded sessions a call of many pairs is spread over.
    spread: Option<Spread>,
}

/// Single-threaded sessions of one graph, opened on the first call that needs them.
struct Spread {
    open: Box<dyn Fn() -> std::result::Result<GraphSession, String> + Send + Sync>,
    count: usize,
    sessions: OnceLock<std::result::Result<Vec<Mutex<GraphSession>>, String>>,
}

impl Spread {
    /// Whether the sessions were opened (by an earlier call of many pairs).
    fn is_open(&self) -> bool {
        matches!(self.sessions.get(), Some(Ok(_)))
    }

    fn sessions(&self) -> Result<&[Mutex<GraphSession>]> {
        let opened = self.sessions.get_or_init(|| (0..self.count).map(|_| (self.open)().map(Mutex::new)).collect());
        opened.as_deref().map_err(|e| Error::Inference(format!("pair judge: {e}")))
    }
}

/// The models of the learned pair judge, loaded once and shared.
pub struct PairJudgeModel {
    cross_encoder: Option<Runner>,
    embedder: Option<Runner>,
    settings: LearnedJudgeSettings,
}

impl std::fmt::Debug for PairJudgeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairJudgeModel").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl PairJudgeModel {
    /// Loads the pair judge installed in `dir` with `threads` intra-op threads, after
    /// checking every file of it against its pinned size and sha256. A missing or altered
    /// file is an [`Error::PairJudgeMissing`] / [`Error::PairJudgeCorrupt`] naming it and
    /// the command that installs it.
    pub fn load(dir: &ModelDir, threads: usize) -> Result<PairJudgeModel> {
        PairJudgeModel::load_tuned(dir, threads, true)
    }

    /// [`PairJudgeModel::load`] for a process that judges a few pairs and exits (a cold
    /// `check`): without `prepack`, ONNX Runtime does not repack the weights for its
    /// kernels, which costs more at load than a few pairs gain (a cold check 6-12 ms
    /// faster, 10 MiB smaller). The sessions a call of many pairs is spread over are
    /// prepacked either way.
    pub fn load_for_few(dir: &ModelDir, threads: usize) -> Result<PairJudgeModel> {
        PairJudgeModel::load_tuned(dir, threads, false)
    }

    fn load_tuned(dir: &ModelDir, threads: usize, prepack: bool) -> Result<PairJudgeModel> {
        dir.check()?;
        // A model whose optimised graph is cached was hashed by the process that built the
        // cache (its key changes with the file's size and modification time), and its
        // file is not read again: hashing 23 MB on every start was a sixth of a cold check.
        let cached = |name: &str| {
            [CROSS_ENCODER_GRAPH, JUDGE_EMBEDDER_GRAPH]
                .into_iter()
                .find(|graph| graph.file == name)
                .and_then(|graph| optimized_graph_path(dir, graph))
                .is_some_and(|path| path.is_file())
        };
        dir.verify_pair_judge_hashing(|name| !cached(name))?;
        let settings_path = dir.file(PAIR_JUDGE_SETTINGS_FILE);
        let corrupt =
            |path: &std::path::Path, reason: String| Error::PairJudgeCorrupt { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(&settings_path).map_err(|e| corrupt(&settings_path, e.to_string()))?;
        let settings = LearnedJudgeSettings::parse(&text).map_err(|e| corrupt(&settings_path, e.to_string()))?;
        let lock = model_lock()?;
        // Each model the settings name must be the one the lock pins (and verify_pair_judge
        // has just checked), under the name the runtime loads.
        let pinned = |expected_name: &str, file: &Option<String>, sha: &Option<String>| -> Result<()> {
            let (Some(file), Some(sha)) = (file, sha) else { return Ok(()) };
            if file != expected_name {
                return Err(corrupt(
                    &settings_path,
                    format!("it names the model {file:?}, expected {expected_name:?}"),
                ));
            }
            if lock.repo_files.iter().find(|f| f.name == *file).map(|f| &f.sha256) != Some(sha) {
                return Err(corrupt(
                    &settings_path,
                    format!("it is for a {file} with sha256 {sha}, not the pinned one"),
                ));
            }
            Ok(())
        };
        pinned(PAIR_JUDGE_MODEL_FILE, &settings.model_file, &settings.model_sha256)?;
        pinned(JUDGE_EMBEDDER_FILE, &settings.embedder_file, &settings.embedder_sha256)?;
        let environment = environment(dir)?;
        let open = |graph: Graph, output: &str| -> Result<Mutex<GraphSession>> {
            let path = dir.file(graph.file);
            let tuning = Tuning { threads: threads.max(1), prepack };
            let (session, source) =
                open_session(dir, graph, &environment, tuning).map_err(|reason| corrupt(&path, reason))?;
            tracing::debug!(model = %graph.file, source = %source, "pair judge model loaded");
            let outputs = session.session().outputs();
            if outputs.len() != 1 || outputs[0].name() != output {
                return Err(corrupt(&path, format!("the model must have one output, `{output}`")));
            }
            Ok(Mutex::new(session))
        };
        let one_at_a_time = settings.reads_one_at_a_time();
        let spread = |graph: Graph| {
            (one_at_a_time && threads > 1).then(|| {
                let (dir, environment) = (dir.clone(), environment.clone());
                let open = move || {
                    let tuning = Tuning { threads: 1, prepack: true };
                    open_session(&dir, graph, &environment, tuning).map(|(session, _)| session)
                };
                Spread { open: Box::new(open), count: threads, sessions: OnceLock::new() }
            })
        };
        let cross_encoder = if settings.uses_cross_encoder() {
            let tokenizer = judge_tokenizer(dir, settings.max_len)?;
            let batch = if one_at_a_time { 1 } else { BATCH };
            let session = open(CROSS_ENCODER_GRAPH, "logits")?;
            Some(Runner { session, tokenizer, batch, spread: spread(CROSS_ENCODER_GRAPH) })
        } else {
            None
        };
        let embedder = match settings.embedder_max_len {
            Some(max_len) if settings.uses_embedder() => {
                let tokenizer = judge_tokenizer(dir, max_len)?;
                let batch = if one_at_a_time { 1 } else { TEXT_BATCH };
                let session = open(JUDGE_EMBEDDER_GRAPH, "embedding")?;
                Some(Runner { session, tokenizer, batch, spread: None })
            }
            _ => None,
        };
        Ok(PairJudgeModel { cross_encoder, embedder, settings })
    }

    /// The settings of the pair judge installed in `dir`, read without loading (or
    /// verifying) the model: what a caller needs to know before the first pair.
    pub fn read_settings(dir: &ModelDir) -> Result<LearnedJudgeSettings> {
        let path = dir.file(PAIR_JUDGE_SETTINGS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Error::PairJudgeMissing { path }),
            Err(e) => return Err(Error::PairJudgeCorrupt { path, reason: e.to_string() }),
        };
        LearnedJudgeSettings::parse(&text).map_err(|e| Error::PairJudgeCorrupt { path, reason: e.to_string() })
    }

    /// The settings the model was calibrated with.
    pub fn settings(&self) -> &LearnedJudgeSettings {
        &self.settings
    }

    /// The scores of each pair, in input order: the cross-encoder's logits and the
    /// fine-tuned embedder's cosine, each when the judge has that model. CPU-heavy: call
    /// it off the async executor.
    pub fn scores(&self, pairs: &[(&str, &str)]) -> Result<Vec<PairScores>> {
        let mut out = vec![PairScores::default(); pairs.len()];
        if let Some(runner) = &self.cross_encoder {
            for (scores, logits) in out.iter_mut().zip(runner.logits(pairs)?) {
                scores.logits = Some(logits);
            }
        }
        if let Some(runner) = &self.embedder {
            let mut texts: Vec<&str> = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
            texts.sort_unstable();
            texts.dedup();
            let vectors = runner.embed(&texts)?;
            let vector = |text: &str| texts.binary_search(&text).map(|i| &vectors[i]).ok();
            for (scores, &(a, b)) in out.iter_mut().zip(pairs) {
                let (Some(a), Some(b)) = (vector(a), vector(b)) else {
                    return Err(Error::Inference("judge embedder: a text has no vector".into()));
                };
                let cosine: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                scores.tuned_cosine = Some(cosine.clamp(-1.0, 1.0));
            }
        }
        Ok(out)
    }

    /// The cross-encoder's relation logits of each pair, in input order; an error when
    /// the judge has no cross-encoder.
    pub fn logits(&self, pairs: &[(&str, &str)]) -> Result<Vec<[f32; 4]>> {
        match &self.cross_encoder {
            Some(runner) => runner.logits(pairs),
            None => Err(Error::Inference("this pair judge has no cross-encoder".into())),
        }
    }
}

impl Runner {
    /// The cross-encoder's relation logits of each pair, in input order (batched,
    /// shortest pairs together, unless the model reads one pair at a time).
    fn logits(&self, pairs: &[(&str, &str)]) -> Result<Vec<[f32; 4]>> {
        let canonical: Vec<(&str, &str)> = pairs.iter().map(|&(a, b)| if a <= b { (a, b) } else { (b, a) }).collect();
        let mut order: Vec<usize> = (0..canonical.len()).collect();
        order.sort_by_key(|&i| canonical[i].0.len() + canonical[i].1.len());
        let mut out = vec![[0.0f32; 4]; canonical.len()];
        let read = |session: &Mutex<GraphSession>, indices: &[usize]| -> Result<Vec<(usize, [f32; 4])>> {
            let mut read = Vec::with_capacity(indices.len());
            for chunk in indices.chunks(self.batch) {
                let batch: Vec<EncodeInput<'_>> =
                    chunk.iter().map(|&i| EncodeInput::Dual(canonical[i].0.into(), canonical[i].1.into())).collect();
                let values = self.run(session, batch, "logits", 4)?;
                for (&i, logits) in chunk.iter().zip(values.chunks_exact(4)) {
                    read.push((i, [logits[0], logits[1], logits[2], logits[3]]));
                }
            }
            Ok(read)
        };
        let parts = match &self.spread {
            // One pair per inference either way, so where a pair is read does not change
            // its logits; the pairs are dealt out in turn, so each session gets long and
            // short ones.
            Some(spread) if order.len() >= SPREAD_FROM || (order.len() > 1 && spread.is_open()) => {
                let sessions = spread.sessions()?;
                let shares: Vec<Vec<usize>> = (0..sessions.len())
                    .map(|k| order.iter().skip(k).step_by(sessions.len()).copied().collect())
                    .collect();
                std::thread::scope(|scope| {
                    let handles: Vec<_> = sessions
                        .iter()
                        .zip(&shares)
                        .map(|(session, share)| scope.spawn(move || read(session, share)))
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| {
                            h.join().unwrap_or_else(|_| Err(Error::Inference("pair judge: a thread panicked".into())))
                        })
                        .collect::<Result<Vec<_>>>()
                })?
            }
            _ => vec![read(&self.session, &order)?],
        };
        for (i, logits) in parts.into_iter().flatten() {
            out[i] = logits;
        }
        Ok(out)
    }

    /// The fine-tuned embedder's unit vector of each text, in input order (batched,
    /// shortest texts together).
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(self.batch) {
            let batch: Vec<EncodeInput<'_>> = chunk.iter().map(|&i| EncodeInput::Single(texts[i].into())).collect();
            let values = self.run(&self.session, batch, "embedding", crate::local::LOCAL_DIMS)?;
            for (&i, vector) in chunk.iter().zip(values.chunks_exact(crate::local::LOCAL_DIMS)) {
                let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
                out[i] = vector.iter().map(|v| v / norm).collect();
            }
        }
        Ok(out)
    }

    /// One inference over a batch in `session`; the output `name` must be `[rows, width]`.
    fn run(
        &self,
        session: &Mutex<GraphSession>,
        batch: Vec<EncodeInput<'_>>,
        name: &str,
        width: usize,
    ) -> Result<Vec<f32>> {
        let inference = |e: &dyn std::fmt::Display| Error::Inference(format!("pair judge: {e}"));
        let encodings = self.tokenizer.encode_batch(batch, true).map_err(|e| inference(&e))?;
        let rows = encodings.len();
        let len = encodings.first().map_or(0, |e| e.get_ids().len());
        let (mut ids, mut mask, mut types) = (Vec::new(), Vec::new(), Vec::new());
        for encoding in &encodings {
            if encoding.get_ids().len() != len {
                return Err(inference(&"the tokenizer returned rows of different lengths"));
            }
            ids.extend(encoding.get_ids().iter().map(|&v| i64::from(v)));
            mask.extend(encoding.get_attention_mask().iter().map(|&v| i64::from(v)));
            types.extend(encoding.get_type_ids().iter().map(|&v| i64::from(v)));
        }
        let shape = [rows as i64, len as i64];
        let tensor = |values: Vec<i64>| Tensor::from_array((shape, values)).map_err(|e| inference(&e));
        let inputs = ort::inputs![
            "input_ids" => tensor(ids)?,
            "attention_mask" => tensor(mask)?,
            "token_type_ids" => tensor(types)?,
        ];
        let mut session = session.lock().unwrap_or_else(PoisonError::into_inner);
        let outputs = session.run(inputs).map_err(|e| inference(&e))?;
        let (out_shape, values) = outputs[0].try_extract_tensor::<f32>().map_err(|e| inference(&e))?;
        if out_shape.len() != 2 || out_shape[0] != rows as i64 || out_shape[1] != width as i64 {
            return Err(inference(&format!(
                "the model returned {name} of shape {:?}, expected [{rows}, {width}]",
                &out_shape[..]
            )));
        }
        Ok(values.to_vec())
    }
}

impl dedup_core::PairScorer for PairJudgeModel {
    fn settings(&self) -> &LearnedJudgeSettings {
        PairJudgeModel::settings(self)
    }

    fn scores(&self, pairs: &[(&str, &str)]) -> std::result::Result<Vec<PairScores>, String> {
        PairJudgeModel::scores(self, pairs).map_err(|e| e.to_string())
    }

    /// Opens the single-threaded sessions a call of several pairs is spread over, so that
    /// from then on a check's few pairs are spread too.
    fn prepare_for_many(&self) {
        if let Some(spread) = self.cross_encoder.as_ref().and_then(|runner| runner.spread.as_ref())
            && let Err(error) = spread.sessions()
        {
            tracing::warn!(%error, "the pair judge's worker sessions did not open; pairs are read one by one");
        }
    }
}

/// The embedder's WordPiece tokenizer set up for the judge's models: a text, or both texts
/// of a pair (truncated longest first), cut to `max_len` tokens in all, a batch padded to
/// its longest row.
fn judge_tokenizer(dir: &ModelDir, max_len: usize) -> Result<Tokenizer> {
    let corrupt = |reason: String| Error::ModelCorrupt { dir: dir.path().to_path_buf(), reason };
    let mut tokenizer = read_tokenizer(dir).map_err(|e| corrupt(format!("cannot read tokenizer.json: {e}")))?;
    let pad_id = tokenizer.token_to_id("[PAD]").unwrap_or(0);
    tokenizer.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::BatchLongest,
        pad_token: "[PAD]".into(),
        pad_id,
        ..PaddingParams::default()
    }));
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: max_len,
            strategy: TruncationStrategy::LongestFirst,
            ..TruncationParams::default()
        }))
        .map_err(|e| corrupt(format!("tokenizer: {e}")))?;
    Ok(tokenizer)
}
