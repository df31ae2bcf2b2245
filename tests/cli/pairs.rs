//! Pairs for the tests of the review flow, chosen by what they say rather than by how one
//! model reads them, so that a better model does not break the tests of the flow: a pair
//! every correct judge holds for review, and paraphrases picked at run time from those
//! the installed learned judge is unsure of.

use std::sync::OnceLock;

use serde_json::Value;

use crate::support::{json, memdedup};

/// A text and a rewording that changes its period ("every month" / "every week"): another
/// claim at cosine 0.98 with the local model, above every namespace's threshold. Cosine
/// alone calls it a duplicate; a judge that reads the period does not, so `add` stores the
/// second text and holds the pair for review, and the right decision on it is "apart".
pub const HELD_PAIR: [&str; 2] = [
    "Rotate the API keys every month, and revoke the old keys at once.",
    "Rotate the API keys every week, and revoke the old keys at once.",
];

/// Paraphrases with few words in common (cosine 0.55 to 0.80 with the local model, under
/// every namespace's threshold), the kind a learned judge is often unsure of.
const UNSURE_CANDIDATES: [[&str; 2]; 8] = [
    ["The user prefers short answers.", "Keep replies brief for this user."],
    ["Avoid trading in the first minutes after the open.", "Don't place orders right when the market opens."],
    ["The user drinks coffee without sugar.", "User takes their coffee unsweetened."],
    ["Tests must pass before merging.", "Don't merge a pull request with a failing test suite."],
    ["Use UTC for all timestamps in logs.", "Log times should be in UTC."],
    ["Deploys happen on Tuesdays.", "We ship to production every Tuesday."],
    ["The build breaks if Node is older than 18.", "Node 18 or newer is required to build."],
    ["The staging database is reset every night.", "Each night the staging DB gets wiped."],
];

/// `memdedup ARGS…`, expecting success, with stdout parsed.
fn run(args: &[&str]) -> Value {
    json(&memdedup().args(args).assert().success().get_output().stdout)
}

/// Above this cosine a namespace threshold could take part in the verdict.
const BAND_ALONE_BELOW: f64 = 0.88;

/// How the installed learned judge reads a candidate: (pair, verdict, P, cosine).
type Reading = ([&'static str; 2], String, f64, f64);

/// How the installed learned judge reads each candidate.
fn readings() -> &'static [Reading] {
    static READINGS: OnceLock<Vec<Reading>> = OnceLock::new();
    READINGS.get_or_init(|| {
        UNSURE_CANDIDATES
            .iter()
            .map(|pair| {
                let value = run(&["similarity", "--judge", "learned", "--json", pair[0], pair[1]]);
                let judgement = &value["judgement"];
                assert_eq!(judgement["judge"], "learned", "the learned judge must be installed: {value}");
                let verdict = judgement["verdict"].as_str().unwrap_or_default().to_owned();
                let p = judgement["probability"].as_f64().unwrap_or(f64::NAN);
                (*pair, verdict, p, value["cosine"].as_f64().unwrap_or(f64::NAN))
            })
            .collect()
    })
}

/// The first `n` paraphrases (in a fixed order) that the installed learned judge puts in
/// its uncertain band by P(duplicate) alone, at a cosine no namespace threshold reaches.
/// A reviewer's right decision on them is "merge". Asked once per test run.
pub fn unsure_pairs(n: usize) -> Vec<[&'static str; 2]> {
    let readings = readings();
    let unsure: Vec<[&'static str; 2]> = readings
        .iter()
        .filter(|(_, verdict, _, cosine)| verdict == "uncertain" && *cosine < BAND_ALONE_BELOW)
        .map(|(pair, ..)| *pair)
        .collect();
    assert!(
        unsure.len() >= n,
        "the tests need {n} paraphrases the learned judge is unsure of; it reads the candidates so \
         (add more to UNSURE_CANDIDATES in tests/cli/pairs.rs):\n{}",
        readings.iter().map(|(pair, v, p, c)| format!("  {v} P {p:.3} cosine {c:.3}: {pair:?}\n")).collect::<String>()
    );
    unsure.into_iter().take(n).collect()
}

/// The first of [`unsure_pairs`].
pub fn unsure_pair() -> [&'static str; 2] {
    unsure_pairs(1)[0]
}

/// Two pairs for the review tests, by namespace: in `lessons` a paraphrase the learned
/// judge is unsure of (a reviewer merges it), in `ops` [`HELD_PAIR`] (kept apart).
pub fn review_pairs() -> [(&'static str, &'static str, &'static str); 2] {
    let [first, second] = unsure_pair();
    [("lessons", first, second), ("ops", HELD_PAIR[0], HELD_PAIR[1])]
}

#[test]
fn the_held_pair_reaches_every_threshold_and_two_pairs_are_unsure() {
    crate::support::require_model();
    let value = run(&["similarity", "--json", HELD_PAIR[0], HELD_PAIR[1]]);
    let cosine = value["cosine"].as_f64().expect("a cosine");
    assert!(cosine >= 0.95, "the held pair must reach every namespace threshold (0.88 to 0.92): {value}");
    for (pair, _, _, cosine) in readings() {
        assert!(*cosine >= 0.30, "{pair:?} must be a candidate of the judge (cosine {cosine})");
    }
    assert_eq!(unsure_pairs(2).len(), 2);
}
