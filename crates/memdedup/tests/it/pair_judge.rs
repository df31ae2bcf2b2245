//! The real learned pair judge from the local model cache: verdicts on the kinds of pair
//! it exists for, batch consistency, determinism, symmetry, and the errors of a missing or
//! altered model file.
//!
//! These tests need the fetched model (`cargo xtask fetch-model`) and fail, never skip,
//! when it is missing.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use memdedup::crates::core::{PairJudgement, PairVerdict, Relation};
use memdedup::{Embedder, LocalEmbedder, ModelDir, PairJudgeModel};

/// The model file of the shipped judge: its cross-encoder.
const MODEL_FILE: &str = memdedup::crates::embed::PAIR_JUDGE_MODEL_FILE;

use crate::support::env_lock;

fn installed_dir() -> ModelDir {
    let located = {
        let _env = env_lock();
        ModelDir::locate(None)
    };
    let dir =
        located.unwrap_or_else(|e| panic!("cannot locate the model cache ({e}); run `cargo xtask fetch-model` first"));
    if let Err(e) = dir.check().and_then(|()| dir.verify_pair_judge()) {
        panic!("these tests need the local model and the pair judge: {e}\nrun `cargo xtask fetch-model` first");
    }
    dir
}

/// One loaded judge for the whole test binary.
fn judge() -> &'static PairJudgeModel {
    static JUDGE: OnceLock<PairJudgeModel> = OnceLock::new();
    JUDGE.get_or_init(|| PairJudgeModel::load(&installed_dir(), 2).unwrap_or_else(|e| panic!("{e}")))
}

fn embedder() -> &'static Arc<LocalEmbedder> {
    static EMBEDDER: OnceLock<Arc<LocalEmbedder>> = OnceLock::new();
    EMBEDDER.get_or_init(|| Arc::new(LocalEmbedder::new(installed_dir())))
}

/// The verdict on a pair, as the runtime computes it: the cosine from the embedder, the
/// scores from the judge.
async fn verdict(a: &str, b: &str) -> PairJudgement {
    let v = embedder().embed(&[a.to_owned(), b.to_owned()]).await.unwrap_or_else(|e| panic!("{e}"));
    let cosine = v[0].cosine(&v[1]).unwrap_or_else(|e| panic!("{e}"));
    let model = judge();
    let scores = model.scores(&[(a, b)]).unwrap_or_else(|e| panic!("{e}"));
    if cosine < model.settings().candidate_floor {
        return model.settings().below_floor(a, b, cosine);
    }
    model.settings().judge(a, b, &scores[0], cosine)
}

fn describe(j: &PairJudgement) -> String {
    format!(
        "{:?} P={:?} relation={:?} cosine={:.3}: {}",
        j.verdict,
        j.probability,
        j.relation,
        j.cosine,
        j.reasons.join("; ")
    )
}

/// A paraphrase is never kept apart: a duplicate, or uncertain (not merged, to review)
/// when the judge is not sure enough; and it scores above the same rule's opposite.
#[tokio::test]
#[ignore = "known failure of the shipped pair judge (docs/MODEL.md): it reads this paraphrase as another claim (P 0.30, related) and scores it below the opposite (P 0.35)"]
async fn a_paraphrase_is_a_duplicate_or_uncertain_never_apart() {
    let a = "always use type hints for function parameters";
    let j = verdict(a, "use type hints on all function parameters").await;
    assert!(matches!(j.verdict, PairVerdict::Duplicate | PairVerdict::Uncertain), "{}", describe(&j));
    assert!(j.probability.unwrap_or(0.0) >= judge().settings().uncertain_threshold, "{}", describe(&j));
    let o = verdict(a, "never use type hints for function parameters").await;
    assert!(j.probability > o.probability, "paraphrase {} / opposite {}", describe(&j), describe(&o));
}

const ALWAYS: &str = "Always run the migrations before starting the API server.";
const NEVER: &str = "Never run the migrations before starting the API server.";

#[tokio::test]
async fn an_opposite_is_never_merged() {
    let j = verdict(ALWAYS, NEVER).await;
    assert!(!j.is_duplicate(), "{}", describe(&j));
}

#[tokio::test]
#[ignore = "known failure of the shipped pair judge (docs/MODEL.md): its most likely relation for this opposite is a contradiction, but P(duplicate) is 0.51: uncertain, held for review, not kept apart"]
async fn an_opposite_reads_as_a_contradiction() {
    let j = verdict(ALWAYS, NEVER).await;
    assert!(!j.is_duplicate() && j.verdict != PairVerdict::Uncertain, "{}", describe(&j));
    assert_eq!(j.relation, Some(Relation::Contradiction), "{}", describe(&j));
}

#[tokio::test]
async fn a_narrower_rule_is_not_a_duplicate() {
    let j = verdict(
        "Set a statement timeout on database connections.",
        "Set a 5 second statement timeout on the reporting role's database connections.",
    )
    .await;
    assert!(!j.is_duplicate(), "{}", describe(&j));
}

#[tokio::test]
async fn another_number_is_not_a_duplicate() {
    let j = verdict("Keep request bodies under 1 MB.", "Keep request bodies under 5 MB.").await;
    assert!(!j.is_duplicate(), "{}", describe(&j));
}

#[tokio::test]
async fn another_entity_is_not_a_duplicate() {
    let j = verdict("The user's sister lives in Lisbon.", "The user's sister lives in Madrid.").await;
    assert!(!j.is_duplicate(), "{}", describe(&j));
}

#[tokio::test]
async fn a_low_overlap_paraphrase_scores_above_the_hard_negatives() {
    let anchor = "Rebase feature branches onto main instead of merging main into them.";
    let paraphrase = "Keep a linear history: replay your branch on top of the trunk rather than pulling the trunk in.";
    let opposite = "Merge main into feature branches instead of rebasing them onto main.";
    let p = verdict(anchor, paraphrase).await;
    let o = verdict(anchor, opposite).await;
    assert!(
        p.probability.unwrap_or(0.0) > o.probability.unwrap_or(1.0),
        "paraphrase {} / opposite {}",
        describe(&p),
        describe(&o)
    );
    assert!(p.verdict == PairVerdict::Duplicate || p.verdict == PairVerdict::Uncertain, "{}", describe(&p));
}

#[test]
fn batched_equals_single_and_is_deterministic_and_symmetric() {
    let pairs = [
        ("hi there", "hello there"),
        (
            "Never trade during low-volume weekends because the spreads widen, liquidity dries up and a single \
             large order can move the price against you before you can react to it.",
            "Avoid trading on weekends when volume is low.",
        ),
        ("use type hints for parameters", "prefer composition over inheritance"),
        ("The cache sits in front of the database.", "The database sits in front of the cache."),
    ];
    let model = judge();
    let batched = model.scores(&pairs).unwrap_or_else(|e| panic!("{e}"));
    for (pair, in_batch) in pairs.iter().zip(&batched) {
        let single = model.scores(&[*pair]).unwrap_or_else(|e| panic!("{e}"))[0];
        let again = model.scores(&[*pair]).unwrap_or_else(|e| panic!("{e}"))[0];
        let swapped = model.scores(&[(pair.1, pair.0)]).unwrap_or_else(|e| panic!("{e}"))[0];
        let values = |s: &memdedup::crates::core::PairScores| {
            let mut v: Vec<f32> = s.logits.map(|l| l.to_vec()).unwrap_or_default();
            v.extend(s.tuned_cosine);
            v
        };
        let (b, one) = (values(in_batch), values(&single));
        assert!(!one.is_empty(), "{pair:?}: the judge gave no score");
        for i in 0..one.len() {
            assert!((b[i] - one[i]).abs() <= 1e-5, "{pair:?}: batched {b:?} single {one:?}");
        }
        assert_eq!(one, values(&again), "{pair:?}: not deterministic");
        for (x, y) in one.iter().zip(values(&swapped)) {
            assert!((x - y).abs() <= 1e-6, "{pair:?}: not symmetric: {one:?} / swapped");
        }
    }
}

#[test]
fn many_pairs_in_one_call_equal_one_pair_at_a_time() {
    // Enough pairs (66) that a model reading one pair per inference spreads them over a
    // session per thread; each must score as it does alone, in input order, and so must a
    // small call once those sessions are open.
    let texts = [
        "Always run the migrations before starting the API server.",
        "Never run the migrations before starting the API server.",
        "Run database migrations first, then start the API.",
        "Keep uploads under 1 MB.",
        "Keep uploads under 5 MB.",
        "The user prefers tabs over spaces.",
        "User likes indenting with tabs rather than spaces.",
        "Rotate API keys every 90 days.",
        "API keys must be rotated quarterly.",
        "Lisbon hosts the team offsite in May.",
        "Madrid hosts the team offsite in May.",
        "Pin the Docker base image to a digest, not a tag.",
    ];
    let pairs: Vec<(&str, &str)> =
        texts.iter().enumerate().flat_map(|(i, a)| texts[i + 1..].iter().map(move |b| (*a, *b))).collect();
    assert!(pairs.len() >= 64, "{} pairs", pairs.len());
    let model = judge();
    let together = model.scores(&pairs).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(together.len(), pairs.len());
    let small = model.scores(&pairs[..3]).unwrap_or_else(|e| panic!("{e}"));
    for (in_small, in_call) in small.iter().zip(&together) {
        assert_eq!(in_small.logits, in_call.logits);
    }
    for (pair, in_call) in pairs.iter().zip(&together) {
        let alone = model.scores(&[*pair]).unwrap_or_else(|e| panic!("{e}"))[0];
        let (many, one) = (in_call.logits.expect("logits"), alone.logits.expect("logits"));
        for (x, y) in many.iter().zip(&one) {
            assert!((x - y).abs() <= 1e-5, "{pair:?}: in a call of {} {many:?}, alone {one:?}", pairs.len());
        }
    }
}

/// A model directory whose embedder files link to the installed ones and whose pair judge
/// files are what `write` makes of the installed ones.
fn altered_dir(scratch: &Path, write: impl Fn(&Path, &[u8])) -> ModelDir {
    let installed = installed_dir();
    for entry in std::fs::read_dir(installed.path()).unwrap_or_else(|e| panic!("{e}")) {
        let entry = entry.unwrap_or_else(|e| panic!("{e}"));
        let name = entry.file_name();
        let dest = scratch.join(&name);
        if name == MODEL_FILE {
            write(&dest, &std::fs::read(entry.path()).unwrap_or_else(|e| panic!("{e}")));
        } else if entry.path().is_file() {
            std::os::unix::fs::symlink(entry.path(), dest).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    ModelDir::new(scratch)
}

fn load_error(dir: &ModelDir) -> String {
    match PairJudgeModel::load(dir, 1) {
        Ok(_) => panic!("an altered pair judge loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_missing_model_file_names_it_and_the_fix() {
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = altered_dir(scratch.path(), |_, _| {});
    let err = load_error(&dir);
    assert!(err.contains(MODEL_FILE) && err.contains("cargo xtask fetch-model"), "{err}");
}

#[test]
fn a_truncated_model_file_names_it_and_the_fix() {
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = altered_dir(scratch.path(), |dest, bytes| std::fs::write(dest, &bytes[..bytes.len() / 2]).unwrap());
    let err = load_error(&dir);
    assert!(err.contains(MODEL_FILE) && err.contains("bytes") && err.contains("cargo xtask fetch-model"), "{err}");
}

#[test]
fn a_model_file_with_another_sha256_names_it_and_the_fix() {
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = altered_dir(scratch.path(), |dest, bytes| {
        let mut changed = bytes.to_vec();
        let last = changed.len() - 1;
        changed[last] ^= 0x55;
        std::fs::write(dest, changed).unwrap();
    });
    let err = load_error(&dir);
    assert!(err.contains(MODEL_FILE) && err.contains("sha256") && err.contains("cargo xtask fetch-model"), "{err}");
}
