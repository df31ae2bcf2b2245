//! How the facade's rich entry points classify failures: "your input is wrong" versus "a
//! service is unavailable".

use memdedup::crates::embed::Error as EmbedError;
use memdedup::{Embedding, Error, Playbook, deduplicate_playbook};

use crate::support::{FailingEmbedder, FixedEmbedder, ScriptedEmbedder, playbook, poll_to_completion, threshold};

fn two_entries() -> Playbook {
    playbook(&[("OTHERS", "a", "first text", 1, 0), ("OTHERS", "b", "second text", 1, 0)])
}

fn dedup_error(embedder: &dyn memdedup::Embedder) -> Error {
    match poll_to_completion(deduplicate_playbook(&two_entries(), embedder, threshold(0.85), &|_, _| {})) {
        Ok(outcome) => panic!("expected an error, got {outcome:?}"),
        Err(e) => e,
    }
}

#[test]
fn embedder_errors_keep_their_kind() {
    let cases: [(fn() -> EmbedError, bool); 5] = [
        (|| EmbedError::ModelMissing { dir: "/nowhere".into(), missing: "model.onnx".into() }, true),
        (|| EmbedError::Unavailable { attempts: 3, last_error: "connection refused".into() }, true),
        (|| EmbedError::Inference("out of memory".into()), true),
        (|| EmbedError::Rejected { status: 400, message: "input too long".into() }, false),
        (|| EmbedError::Config("no API key".into()), false),
    ];
    for (make, unavailable) in cases {
        let expected = make().to_string();
        let err = dedup_error(&FailingEmbedder::new(make));
        assert!(matches!(err, Error::Embedder(_)), "{err:?}");
        assert_eq!(err.is_unavailable(), unavailable, "{err:?}");
        assert_eq!(err.to_string(), expected);
    }
}

#[test]
fn embedder_returning_too_few_vectors_breaks_its_contract() {
    let fixed = FixedEmbedder::new([("first text", vec![1.0, 0.0]), ("second text", vec![0.0, 1.0])]);
    let short = ScriptedEmbedder::new(move |texts| {
        let mut out = poll_to_completion(memdedup::Embedder::embed(&fixed, texts))?;
        out.pop();
        Ok(out)
    });
    let err = dedup_error(&short);
    assert!(matches!(err, Error::EmbedderContract { expected: 2, got: 1, .. }), "{err:?}");
    assert!(err.is_unavailable());
    assert_eq!(err.to_string(), "embedder scripted returned 1 vectors for 2 texts");
}

/// Mixed dimensions from the embedder are a broken embedder contract, a service problem
/// rather than bad input.
#[test]
fn embedder_returning_mixed_dimensions_breaks_its_contract() {
    let mixed = ScriptedEmbedder::new(|texts| {
        (0..texts.len()).map(|i| Ok(Embedding::new(vec![1.0; 2 + i])?)).collect::<Result<Vec<_>, EmbedError>>()
    });
    let err = dedup_error(&mixed);
    assert!(err.is_unavailable(), "mixed dimensions from the embedder are reported as bad input: {err:?}");
    assert!(matches!(err, Error::EmbedderDimensions { expected: 2, got: 3, .. }), "{err:?}");
}

#[test]
fn counter_overflow_is_an_input_error() {
    let input = playbook(&[("OTHERS", "a", "same", u64::MAX, 0), ("OTHERS", "b", "same", 1, 0)]);
    let fixed = FixedEmbedder::new([("same", vec![1.0, 0.0])]);
    let err = poll_to_completion(deduplicate_playbook(&input, &fixed, threshold(0.85), &|_, _| {}))
        .expect_err("the sum overflows");
    assert!(matches!(err, Error::Input(_)), "{err:?}");
    assert!(!err.is_unavailable());
    assert_eq!(err.to_string(), "counter overflow while merging `helpful` of a");
}
