//! [`PairJudgeModel`]: the learned pair judge's cross-encoder, run through the same ONNX
//! Runtime as the embedder. It reads both texts of a pair together ("[CLS] a [SEP] b
//! [SEP]") and scores the four [`Relation`](dedup_core::Relation)s; its settings
//! ([`LearnedJudgeSettings`]) turn the scores into a verdict.
//!
//! **Invariants:** a pair is always fed in canonical order (the text that sorts first by
//! Unicode code point first), so the logits of (a, b) and (b, a) are the same; the model
//! holds int8 weights but computes in f32, so a pair's logits do not depend on the other
//! pairs of its batch (up to f32 rounding); the model file is checked against its pinned
//! sha256 before it is loaded.

use std::sync::{Mutex, PoisonError};

use dedup_core::LearnedJudgeSettings;
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;
use tokenizers::{EncodeInput, PaddingParams, PaddingStrategy, Tokenizer, TruncationParams, TruncationStrategy};

use super::model::environment;
use crate::{Error, ModelDir, Result, model_lock};

/// The model file's name in the model directory.
pub const PAIR_JUDGE_MODEL_FILE: &str = "pair_judge.onnx";
/// The settings file's name in the model directory (`judge.json` as train-judge wrote it).
pub const PAIR_JUDGE_SETTINGS_FILE: &str = "pair_judge.json";
/// Pairs per inference call: larger batches pad more and gain little on short memories.
const BATCH: usize = 16;

/// The cross-encoder of the learned pair judge, loaded once and shared.
pub struct PairJudgeModel {
    session: Mutex<Session>,
    tokenizer: Tokenizer,
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
        dir.check()?;
        dir.verify_pair_judge()?;
        let settings_path = dir.file(PAIR_JUDGE_SETTINGS_FILE);
        let model_path = dir.file(PAIR_JUDGE_MODEL_FILE);
        let corrupt =
            |path: &std::path::Path, reason: String| Error::PairJudgeCorrupt { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(&settings_path).map_err(|e| corrupt(&settings_path, e.to_string()))?;
        let settings = LearnedJudgeSettings::parse(&text).map_err(|e| corrupt(&settings_path, e.to_string()))?;
        let pinned = model_lock()?.repo_files.iter().find(|f| f.name == PAIR_JUDGE_MODEL_FILE).map(|f| &f.sha256);
        if pinned != Some(&settings.model_sha256) {
            return Err(corrupt(
                &settings_path,
                format!("it is for a model with sha256 {}, not the pinned one", settings.model_sha256),
            ));
        }
        let tokenizer = pair_tokenizer(dir, settings.max_len)?;
        let environment = environment(dir)?;
        let text = |e: ort::Error<ort::session::builder::SessionBuilder>| e.to_string();
        let session = Session::builder(&environment)
            .map_err(|e| e.to_string())
            .and_then(|b| b.with_intra_threads(threads.max(1)).map_err(text))
            .and_then(|b| b.with_intra_op_spinning(false).map_err(text))
            .and_then(|b| b.with_optimization_level(GraphOptimizationLevel::Level2).map_err(text))
            .and_then(|mut b| b.commit_from_file(&model_path).map_err(|e| e.to_string()))
            .map_err(|reason| corrupt(&model_path, reason))?;
        let outputs = session.outputs();
        if outputs.len() != 1 || outputs[0].name() != "logits" {
            return Err(corrupt(&model_path, "the model must have one output, `logits`".into()));
        }
        Ok(PairJudgeModel { session: Mutex::new(session), tokenizer, settings })
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

    /// The relation logits of each pair, in input order (batched, shortest pairs
    /// together). CPU-heavy: call it off the async executor.
    pub fn logits(&self, pairs: &[(&str, &str)]) -> Result<Vec<[f32; 4]>> {
        let canonical: Vec<(&str, &str)> = pairs.iter().map(|&(a, b)| if a <= b { (a, b) } else { (b, a) }).collect();
        let mut order: Vec<usize> = (0..canonical.len()).collect();
        order.sort_by_key(|&i| canonical[i].0.len() + canonical[i].1.len());
        let mut out = vec![[0.0f32; 4]; canonical.len()];
        for chunk in order.chunks(BATCH) {
            let batch: Vec<(&str, &str)> = chunk.iter().map(|&i| canonical[i]).collect();
            for (&i, logits) in chunk.iter().zip(self.run(&batch)?) {
                out[i] = logits;
            }
        }
        Ok(out)
    }

    /// One inference over a batch of (already ordered) pairs.
    fn run(&self, batch: &[(&str, &str)]) -> Result<Vec<[f32; 4]>> {
        let inference = |e: &dyn std::fmt::Display| Error::Inference(format!("pair judge: {e}"));
        let inputs: Vec<EncodeInput<'_>> = batch.iter().map(|&(a, b)| EncodeInput::Dual(a.into(), b.into())).collect();
        let encodings = self.tokenizer.encode_batch(inputs, true).map_err(|e| inference(&e))?;
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
        let mut session = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        let outputs = session.run(inputs).map_err(|e| inference(&e))?;
        let (out_shape, values) = outputs[0].try_extract_tensor::<f32>().map_err(|e| inference(&e))?;
        if out_shape.len() != 2 || out_shape[0] != rows as i64 || out_shape[1] != 4 {
            return Err(inference(&format!("the model returned shape {:?}, expected [{rows}, 4]", &out_shape[..])));
        }
        Ok(values.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect())
    }
}

impl dedup_core::PairScorer for PairJudgeModel {
    fn settings(&self) -> &LearnedJudgeSettings {
        PairJudgeModel::settings(self)
    }

    fn logits(&self, pairs: &[(&str, &str)]) -> std::result::Result<Vec<[f32; 4]>, String> {
        PairJudgeModel::logits(self, pairs).map_err(|e| e.to_string())
    }
}

/// The embedder's WordPiece tokenizer set up for pairs: both texts truncated longest
/// first to `max_len` tokens in all, a batch padded to its longest pair.
fn pair_tokenizer(dir: &ModelDir, max_len: usize) -> Result<Tokenizer> {
    let path = dir.file("tokenizer.json");
    let corrupt = |reason: String| Error::ModelCorrupt { dir: dir.path().to_path_buf(), reason };
    let mut tokenizer = Tokenizer::from_file(&path).map_err(|e| corrupt(format!("cannot read tokenizer.json: {e}")))?;
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
