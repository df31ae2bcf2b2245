//! The real all-MiniLM-L6-v2 model from the local cache: reference similarities, batch
//! consistency, vector shape, and seed scenarios through the default entry point.
//!
//! These tests need the fetched model and fail (never skip) when it is missing.

use std::sync::Arc;

use memdedup::{
    Embedder, Embedding, EntryRef, LOCAL_MODEL_ID, LocalEmbedder, LocalOptions, ModelDir, run_deduplication,
    run_deduplication_with,
};

use crate::support::{entry, env_lock, playbook};

const PATTERNS: &str = "PATTERNS & APPROACHES";

/// The installed model directory; panics with the fetch command when it is missing.
fn installed_model() -> ModelDir {
    let located = {
        let _env = env_lock();
        ModelDir::locate(None)
    };
    let dir =
        located.unwrap_or_else(|e| panic!("cannot locate the model cache ({e}); run `cargo xtask fetch-model` first"));
    if let Err(e) = dir.check() {
        panic!("these tests need the local model: {e}\nrun `cargo xtask fetch-model` first");
    }
    dir
}

fn embedder() -> LocalEmbedder {
    LocalEmbedder::new(installed_model())
}

async fn embed(embedder: &LocalEmbedder, texts: &[&str]) -> Vec<Embedding> {
    let texts: Vec<String> = texts.iter().map(|&t| t.to_owned()).collect();
    embedder.embed(&texts).await.unwrap_or_else(|e| panic!("embedding failed: {e}"))
}

fn cosine(a: &Embedding, b: &Embedding) -> f32 {
    a.cosine(b).unwrap_or_else(|e| panic!("{e}"))
}

/// Pairs and their cosines under the reference all-MiniLM-L6-v2 implementation.
const REFERENCE_PAIRS: [(&str, &str, f32); 4] = [
    ("always use type hints for function parameters", "use type hints on all function parameters", 0.9401),
    ("avoid using the any type", "don't use any type in TypeScript", 0.6713),
    ("use type hints for parameters", "prefer composition over inheritance", 0.1864),
    ("Never trade during low-volume weekends", "Avoid trading on weekends when volume is low", 0.8731),
];

#[tokio::test]
async fn reference_pairs_score_their_reference_cosines() {
    let embedder = embedder();
    for (a, b, expected) in REFERENCE_PAIRS {
        let v = embed(&embedder, &[a, b]).await;
        let got = cosine(&v[0], &v[1]);
        assert!((got - expected).abs() <= 0.005, "{a:?} / {b:?}: cosine {got}, reference {expected}");
    }
}

#[tokio::test]
async fn batch_and_single_embeddings_agree() {
    let embedder = embedder();
    // Very different lengths, so the batch is padded.
    let texts = [
        "hi",
        "use type hints on all function parameters",
        "Never trade during low-volume weekends because the spreads widen, liquidity dries up and \
         a single large order can move the price against you before you can react to it",
        "prefer composition over inheritance",
    ];
    let batch = embed(&embedder, &texts).await;
    assert_eq!(batch.len(), texts.len());
    for (text, in_batch) in texts.iter().zip(&batch) {
        let single = embedder.embed_one(text).await.unwrap_or_else(|e| panic!("embedding failed: {e}"));
        let worst =
            in_batch.as_slice().iter().zip(single.as_slice()).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst <= 1e-5, "{text:?}: batch and single embeddings differ by up to {worst}");
    }
}

#[tokio::test]
async fn large_inputs_split_over_sessions_keep_input_order() {
    // Small batches, so the input spreads over several sessions in parallel; lengths vary
    // so that sorting by length reorders the texts.
    let options = LocalOptions { batch_size: 8, sessions: Some(2), ..LocalOptions::default() };
    let embedder = LocalEmbedder::with_options(installed_model(), options);
    let texts: Vec<String> =
        (0..60).map(|i| format!("{}note {i} about topic {}", "very ".repeat((i * 7) % 5), i % 13)).collect();
    let batch = embedder.embed(&texts).await.unwrap_or_else(|e| panic!("embedding failed: {e}"));
    assert_eq!(batch.len(), texts.len());
    for (text, in_batch) in texts.iter().zip(&batch) {
        let single = embedder.embed_one(text).await.unwrap_or_else(|e| panic!("embedding failed: {e}"));
        let cosine = cosine(in_batch, &single);
        assert!(cosine > 0.9999, "{text:?}: its vector from the large input has cosine {cosine} with its own");
    }
}

#[tokio::test]
async fn every_vector_has_384_dims_and_unit_norm() {
    let embedder = embedder();
    assert_eq!((embedder.model_id(), embedder.dims()), (LOCAL_MODEL_ID, 384));
    let texts = ["", "a", "the user prefers tabs over spaces", "ünïcödé, emoji 🚀 and \"quotes\""];
    for v in embed(&embedder, &texts).await {
        assert_eq!(v.dims(), 384);
        let norm = v.as_slice().iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        assert!(v.as_slice().iter().all(|x| x.is_finite()));
    }
}

/// Runs the default entry point, holding the environment lock so that no other test points
/// the model directory elsewhere meanwhile.
fn run_default(input: &memdedup::Playbook) -> memdedup::Playbook {
    let _ = installed_model();
    let _env = env_lock();
    run_deduplication(input.clone(), Some(0.85))
}

#[test]
fn scn_dedup_001_01_real_model_merges_paraphrased_entries() {
    let (a, b, _) = REFERENCE_PAIRS[0];
    let input = playbook(&[(PATTERNS, "pat-001", a, 5, 0), (PATTERNS, "pat-002", b, 3, 1)]);
    let out = run_default(&input);
    assert_eq!(out.entries(), vec![(EntryRef::new(PATTERNS, 0), entry("pat-001", a, 8, 1))]);
    assert_eq!(out.section_len(PATTERNS), Some(1));
}

#[test]
fn scn_dedup_001_03_real_model_keeps_unrelated_entries() {
    let (a, b, _) = REFERENCE_PAIRS[2];
    let input = playbook(&[(PATTERNS, "pat-001", a, 5, 0), (PATTERNS, "pat-002", b, 3, 0)]);
    assert_eq!(run_default(&input), input);
}

/// How many inference sessions `embedder` reports as loaded.
fn loaded_sessions(embedder: &LocalEmbedder) -> usize {
    embedder.sessions_loaded()
}

#[test]
fn model_is_loaded_once_per_directory() {
    let dir = installed_model();
    let first = LocalEmbedder::new(dir.clone());
    first.load_blocking().unwrap_or_else(|e| panic!("the model does not load: {e}"));
    // A second embedder for the same directory finds the model already loaded; one for
    // another directory does not. (`Debug` is the only public view of the load state.)
    let second = LocalEmbedder::new(dir);
    assert!(loaded_sessions(&second) >= 1, "{second:?}");
    let elsewhere = tempfile::tempdir().expect("a temporary directory");
    let other = LocalEmbedder::new(ModelDir::new(elsewhere.path()));
    assert_eq!(loaded_sessions(&other), 0, "{other:?}");

    let text = "keep secrets out of git".to_owned();
    let a = first.embed_blocking(std::slice::from_ref(&text)).unwrap_or_else(|e| panic!("{e}"));
    let b = second.embed_blocking(std::slice::from_ref(&text)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a, b);

    // Both work through the never-fail entry point too.
    let (x, y, _) = REFERENCE_PAIRS[0];
    let input = playbook(&[(PATTERNS, "pat-001", x, 1, 0), (PATTERNS, "pat-002", y, 1, 0)]);
    for embedder in [first, second] {
        let out = run_deduplication_with(input.clone(), Some(0.85), Arc::new(embedder));
        assert_eq!(out.len(), 1);
    }
}

/// 40 sentences of an operations runbook, then `last`.
fn runbook(last: &str) -> String {
    let mut text = String::new();
    for i in 1..=40 {
        text.push_str(&format!(
            "Step {i}: check that service number {i} reports healthy on its dashboard and that its error rate \
             stayed under one percent during the previous hour. "
        ));
    }
    text.push_str(last);
    text
}

#[tokio::test]
async fn defect_5_long_texts_are_compared_by_their_whole_text() {
    let embedder = embedder();
    let always = runbook("ALWAYS deploy on Fridays.");
    let never = runbook("NEVER deploy on Fridays.");
    let v = embed(&embedder, &[&always, &never, &runbook("ALWAYS deploy on Fridays.")]).await;
    // Deterministic, and the last sentence, far past the first 256 tokens, moves the vector.
    assert_eq!(v[0], v[2]);
    let score = cosine(&v[0], &v[1]);
    assert!(score < 0.99995, "a change in the last sentence must count: cosine {score}");
    eprintln!("long texts differing in their last sentence: cosine {score:.6}");

    // Every part counts equally: a change at the start moves the vector about as much as one at the end.
    let start_changed = format!("NEVER deploy on Fridays. {}", runbook(""));
    let start_kept = format!("ALWAYS deploy on Fridays. {}", runbook(""));
    let w = embed(&embedder, &[&start_kept, &start_changed]).await;
    let at_start = cosine(&w[0], &w[1]);
    assert!((at_start - score).abs() < 0.02, "start {at_start} vs end {score}");

    // A text that fits in one window is embedded as before (one inference, same vector).
    let short = "always use type hints for function parameters";
    let alone = embed(&embedder, &[short]).await;
    let mixed = embed(&embedder, &[short, &always]).await;
    assert!((cosine(&alone[0], &mixed[0]) - 1.0).abs() < 1e-5);
}
