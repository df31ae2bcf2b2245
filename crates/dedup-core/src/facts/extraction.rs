//! Reading the facts a language model extracted from a conversation turn (seed 002): the
//! reply's JSON contract and its validation: fact by fact ([`read_extracted_facts`]), or
//! all or nothing ([`parse_extracted_facts`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{FactCategory, FactError};
use crate::json_reply::{extract_json_object, json_type};

/// The longest fact [`parse_extracted_facts`] accepts, in characters (after trimming).
/// A fact is one short statement; anything longer is a model rambling.
pub const MAX_FACT_CONTENT_CHARS: usize = 1_000;

/// One fact as a model extracted it, validated.
///
/// **Invariants** (established by [`parse_extracted_facts`]): `content` is trimmed, not
/// empty and at most [`MAX_FACT_CONTENT_CHARS`] characters; `confidence` is finite and in
/// `[0, 1]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractedFact {
    /// The fact, one self-contained statement.
    pub content: String,
    /// What the fact is about.
    pub category: FactCategory,
    /// How sure the model is, from 0 (a guess) to 1 (stated outright).
    pub confidence: f64,
}

/// Parses a model's fact-extraction reply: the first JSON object in `reply` (found by
/// [`extract_json_object`], so fences and prose around it are fine), shaped as
///
/// ```json
/// {"facts": [{"content": "…", "category": "preference", "confidence": 0.9}]}
/// ```
///
/// Every fact must have a non-blank string `content` of at most
/// [`MAX_FACT_CONTENT_CHARS`] characters (it is trimmed), a `category` naming one of the
/// six [`FactCategory`] values (ASCII case and surrounding spaces ignored), and a numeric
/// `confidence` in `[0, 1]`. Other members are ignored. An empty `facts` list is valid.
///
/// All or nothing: when the reply has no JSON object ([`FactError::MalformedReply`]) or
/// any fact is invalid ([`FactError::InvalidExtractedFact`], naming the first bad fact's
/// index and what is wrong), no fact is returned, so bad model output changes nothing.
pub fn parse_extracted_facts(reply: &str) -> Result<Vec<ExtractedFact>, FactError> {
    let read = read_extracted_facts(reply)?;
    match read.invalid.into_iter().next() {
        Some(InvalidFact { index, reason }) => Err(FactError::InvalidExtractedFact { index, reason }),
        None => Ok(read.facts),
    }
}

/// The longest [`InvalidFact::reason`], in characters: a reason quotes the model's
/// category name, which is the model's to make long.
const MAX_INVALID_REASON_CHARS: usize = 200;

/// One fact of a reply that [`read_extracted_facts`] skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidFact {
    /// Its 0-based position in the reply's `facts` list.
    pub index: usize,
    /// What is wrong with it (never its content; at most 200 characters).
    pub reason: String,
}

/// A reply read fact by fact: the valid facts, in the reply's order, and the invalid ones.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ExtractedFacts {
    /// The valid facts.
    pub facts: Vec<ExtractedFact>,
    /// The facts skipped, with why.
    pub invalid: Vec<InvalidFact>,
}

/// Reads a reply like [`parse_extracted_facts`] but fact by fact: a fact that is invalid
/// (an unknown category, a confidence out of range, a blank content…) is skipped and
/// reported in [`ExtractedFacts::invalid`], so one bad fact does not cost the turn's
/// others. A reply that is not the expected JSON object still fails as a whole
/// ([`FactError::MalformedReply`]).
pub fn read_extracted_facts(reply: &str) -> Result<ExtractedFacts, FactError> {
    let object = extract_json_object(reply)
        .ok_or_else(|| FactError::MalformedReply { reason: "the reply contains no JSON object".to_owned() })?;
    let value: Value = serde_json::from_str(object)
        .map_err(|e| FactError::MalformedReply { reason: format!("the reply's JSON object is invalid: {e}") })?;
    let facts = match value.get("facts") {
        Some(Value::Array(facts)) => facts,
        Some(other) => {
            return Err(FactError::MalformedReply {
                reason: format!("`facts` must be an array, not {}", json_type(other)),
            });
        }
        None => return Err(FactError::MalformedReply { reason: "the JSON object has no `facts` member".to_owned() }),
    };
    let mut read = ExtractedFacts::default();
    for (index, fact) in facts.iter().enumerate() {
        match parse_fact(fact) {
            Ok(fact) => read.facts.push(fact),
            Err(reason) => {
                let reason = match reason.char_indices().nth(MAX_INVALID_REASON_CHARS) {
                    Some((cut, _)) => format!("{}…", &reason[..cut]),
                    None => reason,
                };
                read.invalid.push(InvalidFact { index, reason });
            }
        }
    }
    Ok(read)
}

/// One element of `facts`, or what is wrong with it.
fn parse_fact(fact: &Value) -> Result<ExtractedFact, String> {
    let Value::Object(fields) = fact else {
        return Err(format!("must be an object, not {}", json_type(fact)));
    };
    let content = match fields.get("content") {
        Some(Value::String(content)) => content.trim(),
        Some(other) => return Err(format!("`content` must be a string, not {}", json_type(other))),
        None => return Err("missing `content`".to_owned()),
    };
    if content.is_empty() {
        return Err("`content` is blank".to_owned());
    }
    let chars = content.chars().count();
    if chars > MAX_FACT_CONTENT_CHARS {
        return Err(format!("`content` has {chars} characters, more than the limit of {MAX_FACT_CONTENT_CHARS}"));
    }
    let category = match fields.get("category") {
        Some(Value::String(name)) => name.parse::<FactCategory>().map_err(|e| format!("`category`: {e}"))?,
        Some(other) => return Err(format!("`category` must be a string, not {}", json_type(other))),
        None => return Err("missing `category`".to_owned()),
    };
    let confidence = match fields.get("confidence") {
        Some(Value::Number(number)) => {
            number.as_f64().ok_or_else(|| format!("`confidence` {number} is not a number"))?
        }
        Some(other) => return Err(format!("`confidence` must be a number, not {}", json_type(other))),
        None => return Err("missing `confidence`".to_owned()),
    };
    if !confidence.is_finite() || !(0.0..=1.0).contains(&confidence) {
        return Err(format!("`confidence` {confidence} is not in [0, 1]"));
    }
    Ok(ExtractedFact { content: content.to_owned(), category, confidence })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn error_of(reply: &str) -> FactError {
        parse_extracted_facts(reply).unwrap_err()
    }

    #[test]
    fn valid_reply_in_fences_with_prose() {
        let reply = "Here are the facts:\n```json\n{\"facts\": [\
            {\"content\": \" User prefers Rust \", \"category\": \"preference\", \"confidence\": 0.9},\
            {\"content\": \"Works on billing\", \"category\": \"Context\", \"confidence\": 1, \"extra\": true}\
        ]}\n```\nDone.";
        let facts = parse_extracted_facts(reply).unwrap();
        assert_eq!(
            facts,
            [
                ExtractedFact {
                    content: "User prefers Rust".into(),
                    category: FactCategory::Preference,
                    confidence: 0.9
                },
                ExtractedFact { content: "Works on billing".into(), category: FactCategory::Context, confidence: 1.0 },
            ]
        );
    }

    #[test]
    fn empty_list_is_valid() {
        assert_eq!(parse_extracted_facts(r#"{"facts": []}"#).unwrap(), []);
    }

    #[test]
    fn malformed_replies_are_rejected() {
        for (reply, needle) in [
            ("I could not find any facts.", "no JSON object"),
            (r#"{"facts": [{"content": "cut"#, "no JSON object"),
            (r#"{"items": []}"#, "no `facts` member"),
            (r#"{"facts": {"content": "x"}}"#, "must be an array, not an object"),
        ] {
            let error = error_of(reply);
            assert!(matches!(error, FactError::MalformedReply { .. }), "{reply}: {error:?}");
            assert!(error.to_string().contains(needle), "{reply}: {error}");
        }
    }

    #[test]
    fn any_invalid_fact_rejects_the_whole_reply_naming_its_index() {
        let good = json!({"content": "ok", "category": "goal", "confidence": 0.7});
        let long = "x".repeat(MAX_FACT_CONTENT_CHARS + 1);
        let cases = [
            (json!({"content": "x", "category": "mood", "confidence": 0.5}), "unknown fact category \"mood\""),
            (json!({"content": "x", "category": "goal", "confidence": 1.5}), "`confidence` 1.5 is not in [0, 1]"),
            (json!({"content": "x", "category": "goal", "confidence": -0.1}), "is not in [0, 1]"),
            (json!({"content": "x", "category": "goal", "confidence": "0.5"}), "must be a number, not a string"),
            (json!({"content": "   ", "category": "goal", "confidence": 0.5}), "`content` is blank"),
            (json!({"content": long, "category": "goal", "confidence": 0.5}), "more than the limit"),
            (json!({"category": "goal", "confidence": 0.5}), "missing `content`"),
            (json!({"content": "x", "confidence": 0.5}), "missing `category`"),
            (json!({"content": "x", "category": "goal"}), "missing `confidence`"),
            (json!({"content": 3, "category": "goal", "confidence": 0.5}), "`content` must be a string"),
            (json!({"content": "x", "category": null, "confidence": 0.5}), "`category` must be a string, not null"),
            (json!("just text"), "must be an object, not a string"),
        ];
        for (bad, needle) in cases {
            let reply = json!({"facts": [good.clone(), good.clone(), bad.clone()]}).to_string();
            match error_of(&reply) {
                FactError::InvalidExtractedFact { index: 2, reason } => assert!(reason.contains(needle), "{reason}"),
                other => panic!("{bad}: expected fact 2 to be invalid, got {other:?}"),
            }
        }
        let message =
            error_of(&json!({"facts": [{"content": "x", "category": "mood", "confidence": 0.5}]}).to_string())
                .to_string();
        assert!(message.starts_with("invalid extracted fact 0: `category`: unknown fact category"), "{message}");
    }

    #[test]
    fn read_skips_invalid_facts_and_keeps_the_rest() {
        let reply = json!({"facts": [
            {"content": "Likes Rust", "category": "preference", "confidence": 0.9},
            {"content": "Is happy", "category": "mood", "confidence": 0.9},
            {"content": "Works on billing", "category": "context", "confidence": 2},
            {"content": "Wants a raise", "category": "goal", "confidence": 0.8},
            {"content": "x", "category": "y".repeat(1_000), "confidence": 0.5},
        ]})
        .to_string();
        let read = read_extracted_facts(&reply).unwrap();
        let kept: Vec<&str> = read.facts.iter().map(|f| f.content.as_str()).collect();
        assert_eq!(kept, ["Likes Rust", "Wants a raise"]);
        let skipped: Vec<usize> = read.invalid.iter().map(|f| f.index).collect();
        assert_eq!(skipped, [1, 2, 4]);
        assert!(read.invalid[0].reason.contains("unknown fact category \"mood\""), "{:?}", read.invalid);
        assert!(read.invalid[2].reason.chars().count() <= MAX_INVALID_REASON_CHARS + 1, "{:?}", read.invalid[2]);
        // The strict reader still refuses the reply, naming the first bad fact.
        assert!(matches!(parse_extracted_facts(&reply), Err(FactError::InvalidExtractedFact { index: 1, .. })));
        assert!(matches!(read_extracted_facts("no json"), Err(FactError::MalformedReply { .. })));
    }

    #[test]
    fn huge_numbers_are_rejected() {
        let error = error_of(r#"{"facts": [{"content": "x", "category": "goal", "confidence": 1e308}]}"#);
        assert!(matches!(error, FactError::InvalidExtractedFact { index: 0, .. }), "{error:?}");
    }

    proptest! {
        #[test]
        fn valid_facts_round_trip(
            facts in proptest::collection::vec(
                (
                    "[a-zA-Zß🚀 .]{0,30}[a-z]",
                    proptest::sample::select(FactCategory::ALL.to_vec()),
                    // Three decimals, as models write them: they parse back exactly.
                    (0u32..=1000).prop_map(|n| f64::from(n) / 1000.0),
                ),
                0..6,
            )
        ) {
            let facts: Vec<ExtractedFact> = facts
                .into_iter()
                .map(|(content, category, confidence)| ExtractedFact {
                    content: content.trim().to_owned(),
                    category,
                    confidence,
                })
                .collect();
            let reply = format!("```json\n{}\n```", json!({ "facts": facts }));
            prop_assert_eq!(parse_extracted_facts(&reply).unwrap(), facts);
        }

        #[test]
        fn out_of_range_confidence_is_always_rejected(confidence in prop_oneof![-1e6..-1e-9f64, 1.000_001..1e6f64]) {
            let reply = json!({"facts": [{"content": "x", "category": "goal", "confidence": confidence}]}).to_string();
            let rejected = matches!(error_of(&reply), FactError::InvalidExtractedFact { index: 0, .. });
            prop_assert!(rejected);
        }
    }
}
