//! Fact extraction (seed 002) through both clients: one test per scenario, then the
//! replies that must change nothing.

use anyhow::{Result, bail};
use dedup_core::{ContentHash, DEFAULT_CONFIDENCE_THRESHOLD, FactCategory};
use dedup_llm::fake::{FakeLlm, FakeReply};
use dedup_llm::{
    ChatModel, ConversationTurn, EXTRACTION_SYSTEM_PROMPT, Error, ExtractedFact, OpenAiChat, TokenUsage, extract_facts,
};
use serde_json::json;

use crate::{anthropic, capture_logs, openai, openai_config};

fn turn() -> ConversationTurn {
    ConversationTurn {
        user: "I'm moving our billing service from Python to Rust; please always use tabs.".into(),
        assistant: "Got it: tabs from now on. Want a migration plan for the billing service?".into(),
    }
}

fn fact(content: &str, category: &str, confidence: f64) -> serde_json::Value {
    json!({"content": content, "category": category, "confidence": confidence})
}

fn facts_reply(facts: &[serde_json::Value]) -> String {
    json!({ "facts": facts }).to_string()
}

#[tokio::test]
async fn scn_fact_extraction_extract_facts_from_conversation_turn() -> Result<()> {
    let reply = format!(
        "Here are the facts:\n```json\n{}\n```",
        facts_reply(&[
            fact("User is migrating the billing service from Python to Rust", "context", 0.95),
            fact("User prefers tabs for indentation", "preference", 0.9),
        ])
    );
    let fake = FakeLlm::scripted(vec![FakeReply::text(reply.clone()), FakeReply::text(reply)]);
    let clients: [Box<dyn ChatModel>; 2] = [Box::new(openai(&fake)), Box::new(anthropic(&fake))];

    for client in &clients {
        let extraction = extract_facts(client.as_ref(), &turn(), DEFAULT_CONFIDENCE_THRESHOLD).await?;

        // Each fact has content, category and a confidence in [0, 1].
        assert_eq!(
            extraction.kept,
            [
                ExtractedFact {
                    content: "User is migrating the billing service from Python to Rust".into(),
                    category: FactCategory::Context,
                    confidence: 0.95,
                },
                ExtractedFact {
                    content: "User prefers tabs for indentation".into(),
                    category: FactCategory::Preference,
                    confidence: 0.9,
                },
            ]
        );
        assert!(extraction.skipped_low_confidence.is_empty());
        assert!(extraction.usage.input_tokens > 0 && extraction.usage.output_tokens > 0, "{:?}", extraction.usage);
    }

    // The configured LLM was called once per extraction with the conversation text.
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    for sent in &requests {
        assert_eq!(sent.system, EXTRACTION_SYSTEM_PROMPT);
        assert!(sent.user.contains(&turn().user), "{}", sent.user);
        assert!(sent.user.contains(&turn().assistant), "{}", sent.user);
        assert_eq!(sent.body["temperature"], json!(0.0));
    }
    Ok(())
}

#[tokio::test]
async fn scn_fact_extraction_fact_categories() -> Result<()> {
    // Every allowed category is accepted...
    let all: Vec<_> = FactCategory::ALL.iter().map(|c| fact(&format!("A {c} fact"), c.as_str(), 0.8)).collect();
    let fake = FakeLlm::scripted(vec![
        FakeReply::text(facts_reply(&all)),
        FakeReply::text(facts_reply(&[fact("Likes Rust", "preference", 0.9), fact("Is happy", "mood", 0.9)])),
    ]);
    let client = openai(&fake);

    let extraction = extract_facts(&client, &turn(), 0.5).await?;
    let categories: Vec<FactCategory> = extraction.kept.iter().map(|f| f.category).collect();
    assert_eq!(categories, FactCategory::ALL);

    // ...and one outside the set is skipped and reported, the others kept (defect 11).
    let extraction = extract_facts(&client, &turn(), 0.5).await?;
    let kept: Vec<&str> = extraction.kept.iter().map(|f| f.content.as_str()).collect();
    assert_eq!(kept, ["Likes Rust"]);
    assert_eq!(extraction.skipped_invalid.len(), 1, "{extraction:?}");
    assert_eq!(extraction.skipped_invalid[0].index, 1);
    let reason = &extraction.skipped_invalid[0].reason;
    assert!(reason.contains("unknown fact category \"mood\""), "{reason}");
    Ok(())
}

#[tokio::test]
async fn scn_fact_extraction_confidence_thresholds() -> Result<()> {
    let logs = capture_logs();
    let low = "User might own a cat";
    let fake = FakeLlm::scripted(vec![FakeReply::text(facts_reply(&[
        fact("User prefers tabs", "preference", 0.9),
        fact("User works on billing", "context", 0.5),
        fact(low, "knowledge", 0.49),
    ]))]);

    let extraction = extract_facts(&openai(&fake), &turn(), DEFAULT_CONFIDENCE_THRESHOLD).await?;

    // Below the default threshold of 0.5: not kept (so never persisted)...
    let kept: Vec<f64> = extraction.kept.iter().map(|f| f.confidence).collect();
    assert_eq!(kept, [0.9, 0.5], "a confidence equal to the threshold is kept");
    assert_eq!(extraction.skipped_low_confidence.len(), 1);
    assert_eq!(extraction.skipped_low_confidence[0].content, low);
    // ...and logged, by fingerprint, never by text.
    let text = logs.text();
    assert!(text.contains("skipped a low-confidence fact"), "{text}");
    assert!(text.contains(ContentHash::of(low).fingerprint()), "{text}");
    assert!(text.contains("confidence=0.49"), "{text}");
    assert!(!text.contains(low), "fact text leaked into the log: {text}");
    assert_eq!(text.matches("skipped a low-confidence fact").count(), 1);

    // The threshold is configurable.
    let fake = FakeLlm::scripted(vec![FakeReply::text(facts_reply(&[fact("x", "goal", 0.7)]))]);
    let strict = extract_facts(&openai(&fake), &turn(), 0.8).await?;
    assert!(strict.kept.is_empty());
    assert_eq!(strict.skipped_low_confidence.len(), 1);
    Ok(())
}

#[tokio::test]
async fn malformed_and_out_of_range_replies_change_nothing() -> Result<()> {
    let cases = [
        ("I found no facts, sorry.".to_owned(), "no JSON object"),
        (r#"{"facts": [{"content": "cut off"#.to_owned(), "no JSON object"),
        (r#"{"result": []}"#.to_owned(), "no `facts` member"),
    ];
    for (reply, needle) in cases {
        let fake = FakeLlm::scripted(vec![FakeReply::text(reply.clone())]);
        match extract_facts(&openai(&fake), &turn(), 0.5).await {
            Err(error @ Error::Facts(_)) => assert!(error.to_string().contains(needle), "{reply}: {error}"),
            other => bail!("{reply}: expected a fact error, got {other:?}"),
        }
    }
    // An invalid fact is skipped and reported; the reply's other facts are kept.
    let cases = [
        (facts_reply(&[fact("ok", "goal", 0.9), fact("too sure", "goal", 1.2)]), 1, "`confidence` 1.2"),
        (facts_reply(&[fact("negative", "goal", -0.1)]), 0, "`confidence` -0.1"),
        (facts_reply(&[fact("ok", "goal", 0.9), fact("", "goal", 0.9)]), 1, "`content` is blank"),
    ];
    for (reply, index, needle) in cases {
        let fake = FakeLlm::scripted(vec![FakeReply::text(reply.clone())]);
        let extraction = extract_facts(&openai(&fake), &turn(), 0.5).await?;
        assert_eq!(extraction.skipped_invalid.len(), 1, "{reply}: {extraction:?}");
        assert_eq!(extraction.skipped_invalid[0].index, index, "{reply}");
        assert!(extraction.skipped_invalid[0].reason.contains(needle), "{reply}: {extraction:?}");
        assert!(extraction.kept.iter().all(|f| f.content == "ok"), "{reply}: {extraction:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_truncated_reply_is_an_error() -> Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::text(facts_reply(&[fact("x", "goal", 0.9)])).finish_length()]);
    match extract_facts(&anthropic(&fake), &turn(), 0.5).await {
        Err(Error::Truncated { max_tokens, .. }) => assert_eq!(max_tokens, dedup_llm::EXTRACTION_MAX_TOKENS),
        other => bail!("expected Truncated, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn bad_thresholds_and_blank_turns_make_no_request() -> Result<()> {
    let fake = FakeLlm::scripted(vec![]);
    let client = openai(&fake);
    for threshold in [-0.1, 1.1, f64::NAN] {
        let error = extract_facts(&client, &turn(), threshold).await.unwrap_err();
        assert!(matches!(error, Error::InvalidRequest(_)), "{threshold}: {error:?}");
    }
    let blank = ConversationTurn { user: " ".into(), assistant: "\n".into() };
    let extraction = extract_facts(&client, &blank, 0.5).await?;
    assert!(extraction.kept.is_empty() && extraction.skipped_low_confidence.is_empty());
    assert_eq!(extraction.usage, TokenUsage::default());
    assert_eq!(fake.request_count(), 0);
    Ok(())
}

#[tokio::test]
async fn structured_output_sends_the_extraction_schema() -> Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::text(facts_reply(&[]))]);
    let mut config = openai_config(&fake);
    config.structured_output = true;

    let extraction = extract_facts(&OpenAiChat::new(config)?, &turn(), 0.5).await?;

    assert!(extraction.kept.is_empty());
    let format = &fake.requests()[0].body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["name"], "extracted_facts");
    assert_eq!(format["json_schema"]["strict"], true);
    Ok(())
}
