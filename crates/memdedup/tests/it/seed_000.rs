//! Seed 000 (playbook dedup): one test per SCN-DEDUP-* scenario and INV-DEDUP-* invariant,
//! through the facade, with fixed vectors wherever the seed states similarities.

use std::sync::Arc;

use memdedup::crates::embed::Error as EmbedError;
use memdedup::{
    Embedder, Embedding, EntryRef, LocalEmbedder, MODEL_DIR_ENV_VAR, ModelDir, Playbook, THRESHOLD_ENV_VAR, Threshold,
    deduplicate_playbook, run_deduplication, run_deduplication_with,
};
use serde_json::{Value, json};

use crate::support::{
    CountingEmbedder, FailingEmbedder, FixedEmbedder, PanickingEmbedder, ScopedEnv, ScriptedEmbedder, capture_logs,
    dedup_both, entry, find, names, playbook, poll_to_completion, threshold,
};

const PATTERNS: &str = "PATTERNS & APPROACHES";
const MISTAKES: &str = "MISTAKES TO AVOID";
const PREFERENCES: &str = "USER PREFERENCES";
const CONTEXT: &str = "PROJECT CONTEXT";
const OTHERS: &str = "OTHERS";

/// The warning `run_deduplication` logs when it returns the playbook unchanged.
const SKIPPED: &str = "deduplication skipped";

fn assert_close(actual: f32, expected: f64) {
    assert!((f64::from(actual) - expected).abs() < 1e-5, "expected {expected}, got {actual}");
}

/// Fixed vectors for `texts`, orthogonal except for the listed `(i, j, cosine)` links.
fn linked(texts: &[&str], links: &[(usize, usize, f64)]) -> FixedEmbedder {
    let n = texts.len();
    let mut gram = vec![vec![0.0; n]; n];
    for (i, row) in gram.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    for &(i, j, cosine) in links {
        gram[i][j] = cosine;
        gram[j][i] = cosine;
    }
    FixedEmbedder::with_cosines(texts, &gram)
}

/// `run_deduplication_with` without an explicit threshold and with
/// `AGENTIC_CONTEXT_DEDUP_THRESHOLD` unset, i.e. at the default 0.85.
fn dedup_at_default_threshold(input: &Playbook, embedder: FixedEmbedder) -> Playbook {
    let _env = ScopedEnv::set(&[(THRESHOLD_ENV_VAR, None)]);
    assert_eq!(Threshold::resolve(None), Threshold::default());
    run_deduplication_with(input.clone(), None, Arc::new(embedder))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

/// A playbook whose entries would merge under any working embedder: two identical texts.
fn playbook_with_exact_duplicates() -> Playbook {
    playbook(&[
        (PATTERNS, "pat-001", "always use type hints for function parameters", 5, 0),
        (PATTERNS, "pat-002", "always use type hints for function parameters", 3, 1),
        (MISTAKES, "mis-001", "don't use any type in TypeScript", 2, 1),
        (OTHERS, "oth-001", "remember to add type hints always", 1, 0),
    ])
}

#[test]
fn scn_dedup_001_01_merge_two_similar_entries_in_same_section() {
    let (a, b) = ("always use type hints for function parameters", "use type hints on all function parameters");
    let input = playbook(&[(PATTERNS, "pat-001", a, 5, 0), (PATTERNS, "pat-002", b, 3, 1)]);
    let outcome = dedup_both(&input, 0.85, FixedEmbedder::pair(a, b, 0.94));

    // pat-001 survives with summed counters and its own text; pat-002 is gone.
    assert_eq!(outcome.playbook.entries(), vec![(EntryRef::new(PATTERNS, 0), entry("pat-001", a, 8, 1))]);
    assert_eq!(outcome.playbook.section_len(PATTERNS), Some(1));
    assert!(find(&outcome.playbook, "pat-002").is_none());

    let report = &outcome.report;
    assert_eq!((report.entries_before, report.entries_after, report.embedded), (2, 1, 2));
    assert_eq!(report.model, FixedEmbedder::MODEL_ID);
    assert_eq!(report.threshold, threshold(0.85));
    assert_eq!(report.plan.groups.len(), 1);
    let group = &report.plan.groups[0];
    assert_eq!((group.survivor.clone(), group.survivor_name.as_str()), (EntryRef::new(PATTERNS, 0), "pat-001"));
    assert_eq!((group.helpful, group.harmful), (8, 1));
    assert_eq!(group.absorbed.len(), 1);
    let absorbed = &group.absorbed[0];
    assert_eq!(absorbed.entry, EntryRef::new(PATTERNS, 1));
    assert_eq!((absorbed.name.as_str(), absorbed.via.as_str()), ("pat-002", "pat-001"));
    assert_close(absorbed.score, 0.94);
    assert_close(group.weakest_link, 0.94);
}

#[test]
fn scn_dedup_001_02_merge_entries_across_different_sections() {
    let (a, b) = ("avoid using the any type", "don't use any type in TypeScript");
    // MISTAKES comes first in the file: canonical order, not file order, picks the survivor.
    let input = Playbook::from_value(json!({
        "version": "1.0",
        "last_updated": "2024-01-01T00:00:00Z",
        "sections": {
            MISTAKES: [{"name": "mis-001", "text": b, "helpful": 2, "harmful": 1}],
            PATTERNS: [{"name": "pat-001", "text": a, "helpful": 4, "harmful": 0}],
        }
    }))
    .expect("valid playbook");
    let outcome = dedup_both(&input, 0.85, FixedEmbedder::pair(a, b, 0.90));

    assert_eq!(outcome.playbook.entries(), vec![(EntryRef::new(PATTERNS, 0), entry("pat-001", a, 6, 1))]);
    assert_eq!(outcome.playbook.section_len(PATTERNS), Some(1));
    assert_eq!(outcome.playbook.section_len(MISTAKES), Some(0));
    assert_eq!(outcome.playbook.section_names(), input.section_names());

    let group = &outcome.report.plan.groups[0];
    assert_eq!(outcome.report.plan.groups.len(), 1);
    assert_eq!(group.survivor, EntryRef::new(PATTERNS, 0));
    assert_eq!(group.absorbed.len(), 1);
    assert_eq!(group.absorbed[0].entry, EntryRef::new(MISTAKES, 0));
    assert_eq!(group.absorbed[0].name, "mis-001");
}

#[test]
fn scn_dedup_001_03_no_merge_when_below_threshold() {
    let (a, b) = ("use type hints for parameters", "prefer composition over inheritance");
    let input = playbook(&[(PATTERNS, "pat-001", a, 5, 0), (PATTERNS, "pat-002", b, 3, 0)]);
    let outcome = dedup_both(&input, 0.85, FixedEmbedder::pair(a, b, 0.19));

    assert_eq!(outcome.playbook, input);
    assert!(outcome.report.plan.is_empty());
    // They were compared, and found different.
    assert_eq!((outcome.report.embedded, outcome.report.entries_after), (2, 2));
}

#[test]
fn scn_dedup_002_01_transitive_duplicates_grouped() {
    let (a, b, c) = (
        "run migrations before the server",
        "run DB migrations before starting the server",
        "start the server after DB setup",
    );
    let embedder =
        FixedEmbedder::with_cosines(&[a, b, c], &[vec![1.0, 0.90, 0.80], vec![0.90, 1.0, 0.88], vec![0.80, 0.88, 1.0]]);
    // The premise: A–C alone would not link.
    assert!(embedder.cosine(a, c) < 0.85);
    let input = playbook(&[(PATTERNS, "A", a, 1, 0), (PATTERNS, "B", b, 2, 1), (PATTERNS, "C", c, 4, 2)]);
    let outcome = dedup_both(&input, 0.85, embedder);

    assert_eq!(outcome.playbook.entries(), vec![(EntryRef::new(PATTERNS, 0), entry("A", a, 7, 3))]);
    let group = &outcome.report.plan.groups[0];
    assert_eq!(outcome.report.plan.groups.len(), 1);
    let absorbed: Vec<(&str, &str)> = group.absorbed.iter().map(|x| (x.name.as_str(), x.via.as_str())).collect();
    assert_eq!(absorbed, [("B", "A"), ("C", "B")]);
    assert_close(group.absorbed[0].score, 0.90);
    assert_close(group.absorbed[1].score, 0.88);
    // The weakest link is the B–C bridge, not the A–C pair.
    assert_close(group.weakest_link, 0.88);
}

#[test]
fn scn_dedup_002_02_multiple_independent_groups_merged() {
    let texts = [
        "run migrations before the server",
        "run DB migrations before starting the server",
        "the user prefers tabs",
        "indent with tabs, never spaces",
    ];
    let embedder = FixedEmbedder::with_cosines(
        &texts,
        &[
            vec![1.0, 0.95, 0.10, 0.10],
            vec![0.95, 1.0, 0.10, 0.10],
            vec![0.10, 0.10, 1.0, 0.92],
            vec![0.10, 0.10, 0.92, 1.0],
        ],
    );
    let input = playbook(&[
        (PATTERNS, "pat-001", texts[0], 3, 0),
        (CONTEXT, "ctx-001", texts[1], 1, 1),
        (PREFERENCES, "pref-001", texts[2], 2, 0),
        (OTHERS, "oth-001", texts[3], 5, 4),
    ]);
    let out = dedup_at_default_threshold(&input, embedder.clone());

    assert_eq!(
        out.entries(),
        vec![
            (EntryRef::new(PATTERNS, 0), entry("pat-001", texts[0], 4, 1)),
            (EntryRef::new(PREFERENCES, 0), entry("pref-001", texts[2], 7, 4)),
        ]
    );
    let outcome = dedup_both(&input, 0.85, embedder);
    let survivors: Vec<(&str, usize)> =
        outcome.report.plan.groups.iter().map(|g| (g.survivor_name.as_str(), g.absorbed.len())).collect();
    assert_eq!(survivors, [("pat-001", 1), ("pref-001", 1)]);
}

#[test]
fn scn_dedup_003_01_dependencies_missing_returns_playbook_unmodified() {
    let empty = tempfile::tempdir().expect("a temporary directory");
    let input = playbook_with_exact_duplicates();
    let embedder = Arc::new(LocalEmbedder::new(ModelDir::new(empty.path())));

    let (out, logs) = capture_logs(|| run_deduplication_with(input.clone(), Some(0.85), embedder));

    assert_eq!(out, input);
    assert!(logs.contains("WARN"), "no warning logged: {logs:?}");
    assert!(logs.contains(SKIPPED), "the warning does not say dedup was skipped: {logs:?}");
    assert!(logs.contains("not installed"), "the warning does not give the reason: {logs:?}");
    assert!(logs.contains("cargo xtask fetch-model"), "the warning does not say how to fix it: {logs:?}");
}

#[test]
fn scn_dedup_003_01_dependencies_missing_through_default_entry_point() {
    let empty = tempfile::tempdir().expect("a temporary directory");
    let dir = empty.path().to_str().expect("a UTF-8 temporary path");
    let input = playbook_with_exact_duplicates();
    let _env = ScopedEnv::set(&[(MODEL_DIR_ENV_VAR, Some(dir)), (THRESHOLD_ENV_VAR, None)]);

    let (out, logs) = capture_logs(|| run_deduplication(input.clone(), None));

    assert_eq!(out, input);
    assert!(logs.contains("WARN") && logs.contains(SKIPPED), "no skip warning logged: {logs:?}");
    assert!(logs.contains(dir), "the warning does not name the model directory: {logs:?}");
}

#[test]
fn scn_dedup_003_02_exception_during_processing_returns_playbook_unmodified() {
    let input = playbook_with_exact_duplicates();

    let (out, logs) = capture_logs(|| {
        run_deduplication_with(input.clone(), Some(0.85), Arc::new(FailingEmbedder::inference("CUDA out of memory")))
    });
    assert_eq!(out, input);
    assert!(logs.contains(SKIPPED), "no skip warning logged: {logs:?}");
    assert!(logs.contains("CUDA out of memory"), "the exception details are not logged: {logs:?}");

    let (out, logs) = capture_logs(|| run_deduplication_with(input.clone(), Some(0.85), Arc::new(PanickingEmbedder)));
    assert_eq!(out, input);
    assert!(logs.contains(SKIPPED) && logs.contains("panicked"), "the panic is not logged: {logs:?}");

    // The rich variant reports the failure as "unavailable" instead of hiding it.
    let failing = FailingEmbedder::inference("CUDA out of memory");
    let err = runtime()
        .block_on(deduplicate_playbook(&input, &failing, threshold(0.85), &|_, _| {}))
        .expect_err("a failing embedder must fail the rich variant");
    assert!(err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("CUDA out of memory"), "{err}");
}

#[test]
fn scn_dedup_004_01_env_var_overrides_default_threshold() {
    let (a, b) = ("never trade during low-volume weekends", "avoid trading on weekends when volume is low");
    let embedder = FixedEmbedder::pair(a, b, 0.87);
    let input = playbook(&[(PATTERNS, "pat-001", a, 1, 0), (MISTAKES, "mis-001", b, 1, 0)]);

    {
        let _env = ScopedEnv::set(&[(THRESHOLD_ENV_VAR, Some("0.90"))]);
        assert_eq!(Threshold::resolve(None).get(), 0.90);
        let out = run_deduplication_with(input.clone(), None, Arc::new(embedder.clone()));
        assert_eq!(out, input, "0.87 < 0.90 from the environment: nothing may merge");
        // An explicit threshold still beats the environment.
        let out = run_deduplication_with(input.clone(), Some(0.85), Arc::new(embedder.clone()));
        assert_eq!(names(&out), ["pat-001"]);
    }
    // Control: without the variable the same pair merges at the default 0.85.
    assert_eq!(names(&dedup_at_default_threshold(&input, embedder.clone())), ["pat-001"]);

    // The same resolution without touching the environment.
    let resolved = Threshold::resolve_with(None, Some("0.90"));
    assert_eq!(resolved.get(), 0.90);
    let outcome = dedup_both(&input, resolved.get(), embedder);
    assert_eq!(outcome.playbook, input);
    assert_eq!(outcome.report.threshold, resolved);
    assert!(outcome.report.plan.is_empty());
}

/// Checks that deduplicating `input` is a no-op that embeds nothing, through every entry
/// point, including the default one with no model installed.
fn assert_no_op_without_embedding(input: &Playbook) {
    let counting = CountingEmbedder::new(PanickingEmbedder);
    let calls = counting.calls();
    let out = run_deduplication_with(input.clone(), None, Arc::new(counting));
    assert_eq!(out, *input);
    assert_eq!(calls.calls(), 0, "the embedder was called");

    let counting = CountingEmbedder::new(PanickingEmbedder);
    let calls = counting.calls();
    let outcome = runtime()
        .block_on(deduplicate_playbook(input, &counting, threshold(0.85), &|_, _| {}))
        .expect("nothing to embed, nothing to fail");
    assert_eq!(outcome.playbook, *input);
    assert_eq!((outcome.report.embedded, outcome.report.model.as_str()), (0, ""));
    assert!(outcome.report.plan.is_empty());
    assert_eq!(outcome.report.entries_before, input.len());
    assert_eq!(calls.calls(), 0, "the embedder was called");

    // The default entry point does not even look for a model.
    let empty = tempfile::tempdir().expect("a temporary directory");
    let dir = empty.path().to_str().expect("a UTF-8 temporary path");
    let _env = ScopedEnv::set(&[(MODEL_DIR_ENV_VAR, Some(dir))]);
    let (out, logs) = capture_logs(|| run_deduplication(input.clone(), Some(0.85)));
    assert_eq!(out, *input);
    assert!(!logs.contains(SKIPPED), "a model was looked for: {logs:?}");
}

#[test]
fn scn_dedup_005_01_empty_playbook_is_a_no_op() {
    let input = playbook(&[]);
    assert_eq!(input.section_names().len(), 5);
    assert_no_op_without_embedding(&input);
}

#[test]
fn scn_dedup_005_02_single_entry_is_a_no_op() {
    let input = playbook(&[(CONTEXT, "ctx-001", "the API server runs on port 8080", 2, 1)]);
    assert_no_op_without_embedding(&input);
}

#[test]
fn scn_dedup_006_01_counter_summing_during_merge() {
    let (a, b) = ("always add type hints", "remember to add type hints always");
    let embedder = FixedEmbedder::pair(a, b, 0.91);
    let input = playbook(&[(PATTERNS, "pat-001", a, 10, 2), (OTHERS, "oth-001", b, 3, 0)]);

    let out = dedup_at_default_threshold(&input, embedder.clone());
    assert_eq!(out.entries(), vec![(EntryRef::new(PATTERNS, 0), entry("pat-001", a, 13, 2))]);
    assert_eq!(out.section_len(OTHERS), Some(0));

    let outcome = dedup_both(&input, 0.85, embedder);
    assert_eq!(outcome.playbook, out);
    let group = &outcome.report.plan.groups[0];
    assert_eq!((group.helpful, group.harmful), (13, 2));
    assert_eq!(group.absorbed[0].entry, EntryRef::new(OTHERS, 0));
    assert_eq!(group.absorbed[0].name, "oth-001");
}

#[test]
fn inv_dedup_001_no_crash_on_missing_dependencies_or_failures() {
    let input = playbook_with_exact_duplicates();
    let texts: Vec<String> = input.entries().into_iter().map(|(_, e)| e.text).collect();
    let known = FixedEmbedder::new(texts.iter().map(|t| (t.as_str(), vec![1.0, 0.0, 0.0])));
    let partial = FixedEmbedder::new([(texts[0].as_str(), vec![1.0, 0.0, 0.0])]);
    let errors: Vec<fn() -> EmbedError> = vec![
        || EmbedError::ModelMissing { dir: "/nowhere".into(), missing: "model.onnx".into() },
        || EmbedError::ModelCorrupt { dir: "/nowhere".into(), reason: "bad checksum".into() },
        || EmbedError::NoCacheDir,
        || EmbedError::Inference("out of memory".into()),
        || EmbedError::Unavailable { attempts: 3, last_error: "connection refused".into() },
        || EmbedError::Rejected { status: 400, message: "input too long".into() },
        || EmbedError::Malformed("no data".into()),
        || EmbedError::Config("no API key".into()),
    ];
    let mut embedders: Vec<Arc<dyn Embedder>> =
        errors.into_iter().map(|e| Arc::new(FailingEmbedder::new(e)) as Arc<dyn Embedder>).collect();
    embedders.push(Arc::new(PanickingEmbedder));
    embedders.push(Arc::new(partial));
    // Broken contracts: one vector short, and mixed dimensions.
    let short = known.clone();
    embedders.push(Arc::new(ScriptedEmbedder::new(move |t| {
        let mut out = poll_to_completion(short.embed(t))?;
        out.pop();
        Ok(out)
    })));
    embedders.push(Arc::new(ScriptedEmbedder::new(|t| {
        t.iter()
            .enumerate()
            .map(|(i, _)| Ok(Embedding::new(vec![1.0; 2 + i % 2])?))
            .collect::<Result<Vec<_>, EmbedError>>()
    })));
    let failures = embedders.len();

    let (outs, logs) = capture_logs(|| {
        embedders.into_iter().map(|e| run_deduplication_with(input.clone(), Some(0.85), e)).collect::<Vec<_>>()
    });
    for (i, out) in outs.iter().enumerate() {
        assert_eq!(*out, input, "failure case {i} changed the playbook");
    }
    assert_eq!(logs.matches(SKIPPED).count(), failures, "one warning per failure: {logs}");
    assert!(logs.contains("connection refused") && logs.contains("vectors for"), "{logs}");

    // The embedder works, but the merge overflows a counter.
    let overflow = playbook(&[(PATTERNS, "pat-001", &texts[0], u64::MAX, 0), (OTHERS, "oth-001", &texts[3], 1, 0)]);
    let out = run_deduplication_with(overflow.clone(), Some(0.85), Arc::new(known));
    assert_eq!(out, overflow);
}

#[tokio::test]
async fn inv_dedup_001_no_crash_inside_an_async_runtime() {
    let input = playbook_with_exact_duplicates();
    assert_eq!(run_deduplication_with(input.clone(), Some(0.85), Arc::new(PanickingEmbedder)), input);
    assert_eq!(run_deduplication_with(input.clone(), Some(0.85), Arc::new(FailingEmbedder::model_missing())), input);
    // And it still works there.
    let texts: Vec<String> = input.entries().into_iter().map(|(_, e)| e.text).collect();
    let embedder = FixedEmbedder::new([
        (texts[0].as_str(), vec![1.0, 0.0, 0.0]),
        (texts[2].as_str(), vec![0.0, 1.0, 0.0]),
        (texts[3].as_str(), vec![0.0, 0.0, 1.0]),
    ]);
    let out = run_deduplication_with(input, Some(0.85), Arc::new(embedder));
    assert_eq!(names(&out), ["pat-001", "mis-001", "oth-001"]);
    assert_eq!(find(&out, "pat-001").map(|(_, e)| (e.helpful, e.harmful)), Some((8, 1)));
}

#[test]
fn inv_dedup_002_counters_summed_and_non_negative() {
    let texts = ["keep secrets out of git", "never commit secrets to git", "no secrets in the repository"];
    let embedder =
        FixedEmbedder::with_cosines(&texts, &[vec![1.0, 0.93, 0.9], vec![0.93, 1.0, 0.91], vec![0.9, 0.91, 1.0]]);
    // Counters of every size, including absent ones (which count as 0).
    let input = Playbook::from_value(json!({
        "sections": {
            PATTERNS: [{"name": "pat-001", "text": texts[0]}],
            MISTAKES: [{"name": "mis-001", "text": texts[1], "helpful": 0, "harmful": u64::MAX / 2}],
            OTHERS: [{"name": "oth-001", "text": texts[2], "helpful": 41, "harmful": u64::MAX / 2}],
        }
    }))
    .expect("valid playbook");
    let outcome = dedup_both(&input, 0.85, embedder);

    let survivor = outcome.playbook.to_value()["sections"][PATTERNS][0].clone();
    assert_eq!(survivor, json!({"name": "pat-001", "text": texts[0], "helpful": 41, "harmful": u64::MAX - 1}));
    let group = &outcome.report.plan.groups[0];
    assert_eq!((group.helpful, group.harmful), (41, u64::MAX - 1));
    for (_, list) in outcome.playbook.to_value()["sections"].as_object().expect("sections object") {
        for e in list.as_array().expect("entry list") {
            for counter in ["helpful", "harmful"] {
                assert!(e[counter].is_u64(), "{counter} of {e} is not a non-negative integer");
            }
        }
    }

    // A sum that does not fit is refused, not wrapped: the playbook stays as it was.
    let overflow = Playbook::from_value(json!({
        "sections": {
            PATTERNS: [{"name": "pat-001", "text": texts[0], "helpful": u64::MAX}],
            MISTAKES: [{"name": "mis-001", "text": texts[1], "helpful": 1}],
        }
    }))
    .expect("valid playbook");
    let fixed = FixedEmbedder::pair(texts[0], texts[1], 0.95);
    assert_eq!(run_deduplication_with(overflow.clone(), Some(0.85), Arc::new(fixed.clone())), overflow);
    let err = runtime()
        .block_on(deduplicate_playbook(&overflow, &fixed, threshold(0.85), &|_, _| {}))
        .expect_err("an overflowing sum must be an error");
    assert!(!err.is_unavailable(), "an overflow is an input problem: {err:?}");
    assert!(err.to_string().contains("overflow"), "{err}");
}

#[test]
fn inv_dedup_003_sections_remain_canonical() {
    let texts = [
        "prefer composition over inheritance",
        "document every public module",
        "don't swallow errors",
        "the user wants short answers",
        "favour composition to inheritance",
        "deploy on Fridays is fine",
        "never ignore errors silently",
    ];
    // p1 ~ o1 and m1 ~ n1; everything else is unrelated.
    let embedder = linked(&texts, &[(0, 4, 0.95), (2, 6, 0.93)]);
    // File order differs from canonical order, PROJECT CONTEXT is absent, NOTES is not canonical.
    let input = Playbook::from_value(json!({
        "version": "1.0",
        "sections": {
            OTHERS: [{"name": "o1", "text": texts[4]}, {"name": "o2", "text": texts[5]}],
            "NOTES": [{"name": "n1", "text": texts[6]}],
            PATTERNS: [{"name": "p1", "text": texts[0]}, {"name": "p2", "text": texts[1]}],
            MISTAKES: [{"name": "m1", "text": texts[2]}],
            PREFERENCES: [{"name": "u1", "text": texts[3]}],
        }
    }))
    .expect("valid playbook");
    let outcome = dedup_both(&input, 0.85, embedder);
    let out = &outcome.playbook;

    // Sections: none created, renamed, reordered or dropped (even when emptied).
    assert_eq!(out.section_names(), input.section_names());
    assert_eq!(out.section_len("NOTES"), Some(0));
    assert_eq!(out.section_len(CONTEXT), None);
    // Survivors stay where they were; the others are removed from their own sections.
    assert_eq!(names(out), ["p1", "p2", "m1", "u1", "o2"]);
    for (at, e) in out.entries() {
        let (before, _) = find(&input, &e.name).expect("only known entries remain");
        assert_eq!(at.section, before.section, "{} moved", e.name);
    }
    for section in input.section_names() {
        let kept: Vec<String> =
            out.entries().into_iter().filter(|(at, _)| at.section == section).map(|(_, e)| e.name).collect();
        let mut original = input.entries().into_iter().filter(|(at, _)| at.section == section).map(|(_, e)| e.name);
        assert!(kept.iter().all(|name| original.any(|o| o == *name)), "{section} was reordered: {kept:?}");
    }
    assert_eq!(outcome.report.non_canonical_sections, ["NOTES"]);
    let absorbed: Vec<EntryRef> =
        outcome.report.plan.groups.iter().flat_map(|g| g.absorbed.iter().map(|a| a.entry.clone())).collect();
    // In flat order of survivors: p1 (absorbing o1), then m1 (absorbing n1).
    assert_eq!(absorbed, [EntryRef::new(OTHERS, 0), EntryRef::new("NOTES", 0)]);
}

/// A small deterministic generator for reproducible "random" vectors.
struct Lcg(u64);

impl Lcg {
    fn next_f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

#[test]
fn inv_dedup_004_no_pair_reaches_threshold_after_dedup() {
    let mut rng = Lcg(42);
    let texts: Vec<String> = (0..40).map(|i| format!("memory number {i}")).collect();
    let embedder = FixedEmbedder::new(texts.iter().map(|t| (t.as_str(), (0..3).map(|_| rng.next_f32()).collect())));
    let rows: Vec<_> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| (memdedup::CANONICAL_SECTIONS[i % 5], t.as_str(), t.as_str(), i as u64, 0))
        .collect();
    let input = playbook(&rows);
    let outcome = dedup_both(&input, 0.9, embedder.clone());

    // The data must exercise the rule: several merges, some of them chains.
    assert!(outcome.report.plan.absorbed_count() >= 5, "{:?}", outcome.report.plan);
    assert!(outcome.report.plan.groups.iter().any(|g| g.absorbed.iter().any(|a| a.via != g.survivor_name)));
    let remaining: Vec<String> = outcome.playbook.entries().into_iter().map(|(_, e)| e.text).collect();
    assert!(remaining.len() >= 2);
    for (i, a) in remaining.iter().enumerate() {
        for b in &remaining[i + 1..] {
            let cosine = embedder.cosine(a, b);
            assert!(cosine < 0.9, "{a:?} and {b:?} both survive at cosine {cosine}");
        }
    }
}

#[test]
fn inv_dedup_005_playbook_structure_preserved() {
    let (a, b) = ("always add type hints", "remember to add type hints always");
    let input = Playbook::from_value(json!({
        "schema": "ace/playbook",
        "version": {"major": 2, "tags": ["beta"]},
        "sections": {
            PATTERNS: [{"name": "pat-001", "text": a, "helpful": 1, "source": {"session": "abc"}, "harmful": 0}],
            OTHERS: [{"name": "oth-001", "text": b, "helpful": 2}],
        },
        "last_updated": 1_717_171_717,
        "z_unknown": [true, null],
    }))
    .expect("valid playbook");
    let outcome = dedup_both(&input, 0.85, FixedEmbedder::pair(a, b, 0.9));
    assert_eq!(outcome.report.plan.absorbed_count(), 1);

    let (before, after) = (input.to_value(), outcome.playbook.to_value());
    let keys = |v: &Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    assert_eq!(keys(&after), keys(&before));
    for key in ["schema", "version", "last_updated", "z_unknown"] {
        assert_eq!(after[key], before[key], "{key} changed");
    }
    assert_eq!(keys(&after["sections"]), keys(&before["sections"]));
    // The survivor keeps its unknown fields and key order; only counters change.
    assert_eq!(
        after["sections"][PATTERNS][0],
        json!({"name": "pat-001", "text": a, "helpful": 3, "source": {"session": "abc"}, "harmful": 0})
    );
    assert_eq!(keys(&after["sections"][PATTERNS][0]), ["name", "text", "helpful", "source", "harmful"]);
}

#[test]
fn threshold_outside_unit_interval_is_clamped() {
    let texts = ["north", "north-east", "south"];
    // Cosines: north / north-east 0.71, north-east / south -0.71, north / south -1.
    let vectors = [vec![1.0, 0.0], vec![1.0, 1.0], vec![-1.0, 0.0]];
    let embedder = FixedEmbedder::new(texts.iter().copied().zip(vectors));
    let input =
        playbook(&[(PATTERNS, "n", texts[0], 1, 0), (PATTERNS, "ne", texts[1], 1, 0), (OTHERS, "s", texts[2], 1, 0)]);

    // Below 0 clamps to 0: the positive cosine links, the negative ones do not.
    let out = run_deduplication_with(input.clone(), Some(-3.0), Arc::new(embedder.clone()));
    assert_eq!(names(&out), ["n", "s"]);
    assert_eq!(find(&out, "n").map(|(_, e)| e.helpful), Some(2));
    // Above 1 clamps to 1: only identical directions could link.
    let out = run_deduplication_with(input.clone(), Some(7.0), Arc::new(embedder));
    assert_eq!(out, input);
}

#[test]
fn identical_texts_merge_even_at_threshold_one() {
    let text = "always run the database migrations before starting the API server";
    // Components whose normalised dot product with themselves rounds below 1 in f32.
    let embedder = FixedEmbedder::new([(text, vec![0.1, 0.2, 0.3, 0.7, -0.11])]);
    let input = playbook(&[(PATTERNS, "pat-001", text, 1, 0), (OTHERS, "oth-001", text, 2, 3)]);
    for threshold in [1.0, 7.0] {
        let out = run_deduplication_with(input.clone(), Some(threshold), Arc::new(embedder.clone()));
        assert_eq!(out.entries(), vec![(EntryRef::new(PATTERNS, 0), entry("pat-001", text, 3, 3))], "at {threshold}");
    }
}
