//! `POST /v1/facts/extract`: seed 002's extraction scenarios through a fake LLM speaking
//! the real OpenAI wire format, then the replies and requests that must store nothing.

use std::sync::Arc;

use dedup_llm::fake::{FakeLlm, FakeReply};
use dedup_llm::{ChatModel, OpenAiChat, OpenAiChatConfig};
use dedup_server::TokenConfig;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Backend, TestServer, send};

/// The key the chat model sends; it must never reach a response.
const API_KEY: &str = "sk-test-extraction-secret-4242";

const USER: &str = "I'm moving our billing service from Python to Rust; please always use tabs.";
const ASSISTANT: &str = "Got it: tabs from now on. Want a migration plan for the billing service?";

/// An OpenAI client of `fake` with [`API_KEY`] and no retries.
fn chat(fake: &FakeLlm) -> Arc<dyn ChatModel> {
    let mut config = OpenAiChatConfig::new(fake.base_url(), "fake-extractor");
    config.api_key = Some(API_KEY.to_owned());
    config.retry.max_retries = 0;
    Arc::new(OpenAiChat::new(config).expect("a valid client configuration"))
}

async fn server_with(fake: &FakeLlm, backend: Backend) -> anyhow::Result<TestServer> {
    TestServer::builder().backend(backend).no_embedder().chat_model(chat(fake)).start().await
}

fn fact(content: &str, category: &str, confidence: f64) -> Value {
    json!({"content": content, "category": category, "confidence": confidence})
}

/// A model reply holding `facts`.
fn reply(facts: &[Value]) -> FakeReply {
    FakeReply::text(json!({ "facts": facts }).to_string())
}

fn turn() -> Value {
    json!({"user": USER, "assistant": ASSISTANT})
}

/// The stored facts of the default namespace as (content, category, confidence).
async fn stored(server: &TestServer) -> anyhow::Result<Vec<(String, String, f64)>> {
    let reply = server.get("/v1/facts").await?;
    reply.expect(StatusCode::OK)?;
    let facts = reply.body["facts"].as_array().cloned().unwrap_or_default();
    Ok(facts
        .iter()
        .map(|f| {
            (
                f["content"].as_str().unwrap_or_default().to_owned(),
                f["category"].as_str().unwrap_or_default().to_owned(),
                f["confidence"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect())
}

fn triple(content: &str, category: &str, confidence: f64) -> (String, String, f64) {
    (content.to_owned(), category.to_owned(), confidence)
}

on_both_backends! {
    /// Extract facts from conversation turn: the configured LLM is called with the turn,
    /// its JSON is parsed, and each fact is stored with content, category and confidence.
    async fn scn_fact_extraction_extract_facts_from_conversation_turn(backend) {
        let fake = FakeLlm::scripted(vec![FakeReply::text(format!(
            "Here are the facts:\n```json\n{}\n```",
            json!({"facts": [
                fact("User is migrating the billing service from Python to Rust", "context", 0.95),
                fact("User prefers tabs for indentation", "preference", 0.9),
            ]})
        ))]);
        let server = server_with(&fake, backend).await?;

        let reply = server.post("/v1/facts/extract", &turn()).await?;
        reply.expect(StatusCode::OK)?;
        let body = &reply.body;
        assert_eq!((&body["dry_run"], &body["namespace"]), (&json!(false), &json!("default")), "{body}");
        let facts = body["facts"].as_array().expect("facts");
        assert_eq!(facts.len(), 2, "{body}");
        for (got, (content, category, confidence)) in facts.iter().zip([
            ("User is migrating the billing service from Python to Rust", "context", 0.95),
            ("User prefers tabs for indentation", "preference", 0.9),
        ]) {
            assert_eq!(got["outcome"], "added", "{got}");
            assert_eq!((&got["content"], &got["category"], &got["confidence"]), (&json!(content), &json!(category), &json!(confidence)));
            assert_eq!(got["fact"]["content"], content);
            assert!(got["fact"]["id"].as_str().is_some_and(|id| id.starts_with("fact_")), "{got}");
        }
        assert_eq!(body["skipped_low_confidence"], json!({"count": 0, "categories": {}}));
        assert!(body["usage"]["input_tokens"].as_u64().is_some_and(|n| n > 0), "{body}");
        assert!(body["usage"]["output_tokens"].as_u64().is_some_and(|n| n > 0), "{body}");

        // Persisted, highest confidence first.
        assert_eq!(
            stored(&server).await?,
            [
                triple("User is migrating the billing service from Python to Rust", "context", 0.95),
                triple("User prefers tabs for indentation", "preference", 0.9),
            ]
        );
        // One call to the model, with the conversation text and the key.
        let requests = fake.requests();
        assert_eq!(requests.len(), 1);
        assert!(requests[0].user.contains(USER) && requests[0].user.contains(ASSISTANT), "{}", requests[0].user);
        assert_eq!(requests[0].header("authorization"), Some(format!("Bearer {API_KEY}").as_str()));
        assert!(!reply.text.contains(API_KEY));
        Ok(())
    }
}

/// Fact categories: the six are stored; a fact with any other category is skipped and
/// reported (index and why, not its text) while the turn's other facts are stored
/// (defect 11: it used to reject the whole turn).
#[tokio::test]
async fn scn_fact_extraction_fact_categories() -> anyhow::Result<()> {
    let categories = ["preference", "knowledge", "context", "behavior", "goal", "correction"];
    let all: Vec<Value> = categories.iter().map(|c| fact(&format!("A {c} fact"), c, 0.8)).collect();
    let fake = FakeLlm::scripted(vec![
        reply(&all),
        reply(&[fact("User likes Rust", "preference", 0.9), fact("User is happy", "mood", 0.9)]),
    ]);
    let server = server_with(&fake, Backend::Sqlite).await?;

    let accepted = server.post("/v1/facts/extract", &turn()).await?;
    accepted.expect(StatusCode::OK)?;
    let got: Vec<&str> =
        accepted.body["facts"].as_array().expect("facts").iter().filter_map(|f| f["category"].as_str()).collect();
    assert_eq!(got, categories);
    assert_eq!(accepted.body["skipped_invalid"], json!([]));
    assert_eq!(stored(&server).await?.len(), 6);

    let partly = server.post("/v1/facts/extract", &turn()).await?;
    partly.expect(StatusCode::OK)?;
    let body = &partly.body;
    let skipped = body["skipped_invalid"].as_array().expect("skipped_invalid");
    assert_eq!(skipped.len(), 1, "{body}");
    assert_eq!(skipped[0]["index"], 1, "{body}");
    let reason = skipped[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("unknown fact category \"mood\""), "{reason}");
    assert!(!body.to_string().contains("User is happy"), "the invalid fact's text is not echoed: {body}");
    let contents: Vec<String> = stored(&server).await?.into_iter().map(|f| f.0).collect();
    assert!(contents.contains(&"User likes Rust".to_owned()), "the valid fact of the turn is stored");
    assert!(!contents.contains(&"User is happy".to_owned()));
    assert_eq!(contents.len(), 7);
    Ok(())
}

/// Confidence thresholds: below 0.5 (the default) a fact is not stored and is reported
/// as skipped, by category, without its text; the threshold is configurable per request.
#[tokio::test]
async fn scn_fact_extraction_confidence_thresholds() -> anyhow::Result<()> {
    let low = "User might own a cat";
    let fake = FakeLlm::scripted(vec![
        reply(&[
            fact("User prefers tabs", "preference", 0.9),
            fact("User works on billing", "context", 0.5),
            fact(low, "knowledge", 0.49),
        ]),
        reply(&[fact("User wants a migration plan", "goal", 0.8), fact("User reads Rust books", "behavior", 0.4)]),
    ]);
    let server = server_with(&fake, Backend::Sqlite).await?;

    let first = server.post("/v1/facts/extract", &turn()).await?;
    first.expect(StatusCode::OK)?;
    let outcomes: Vec<(&str, &str)> = first.body["facts"]
        .as_array()
        .expect("facts")
        .iter()
        .filter_map(|f| Some((f["content"].as_str()?, f["outcome"].as_str()?)))
        .collect();
    assert_eq!(outcomes, [("User prefers tabs", "added"), ("User works on billing", "added")]);
    assert_eq!(first.body["skipped_low_confidence"], json!({"count": 1, "categories": {"knowledge": 1}}));
    assert!(!first.text.contains(low), "a skipped fact's text is not returned: {}", first.text);

    // A stricter threshold for one request.
    let mut strict = turn();
    strict["min_confidence"] = json!(0.85);
    let second = server.post("/v1/facts/extract", &strict).await?;
    second.expect(StatusCode::OK)?;
    assert_eq!(second.body["facts"], json!([]));
    assert_eq!(second.body["skipped_low_confidence"], json!({"count": 2, "categories": {"behavior": 1, "goal": 1}}));

    assert_eq!(
        stored(&server).await?,
        [triple("User prefers tabs", "preference", 0.9), triple("User works on billing", "context", 0.5)]
    );
    Ok(())
}

#[tokio::test]
async fn malformed_model_replies_are_502_and_store_nothing() -> anyhow::Result<()> {
    let cases = [
        FakeReply::text("I found no facts, sorry."),
        FakeReply::text(r#"{"facts": [{"content": "cut off"#),
        FakeReply::text(r#"{"result": []}"#),
        reply(&[fact("User uses tabs", "preference", 0.9)]).finish_length(),
        FakeReply::raw(200, "not the OpenAI wire format"),
    ];
    let count = cases.len();
    let fake = FakeLlm::scripted(cases.into());
    let server = server_with(&fake, Backend::Sqlite).await?;
    for i in 0..count {
        let reply = server.post("/v1/facts/extract", &turn()).await?;
        let message = reply.expect_error(StatusCode::BAD_GATEWAY, "bad_gateway")?;
        assert!(!message.is_empty(), "case {i}");
    }
    assert_eq!(fake.request_count(), count);
    assert!(stored(&server).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_fact_stored_in_another_case_is_reported_as_a_duplicate() -> anyhow::Result<()> {
    let fake = FakeLlm::scripted(vec![reply(&[
        fact("USER PREFERS TABS", "preference", 0.95),
        fact("User works on billing", "context", 0.8),
    ])]);
    let server = server_with(&fake, Backend::Sqlite).await?;
    let existing = server.post("/v1/facts", &fact("User prefers tabs", "preference", 0.7)).await?;
    existing.expect(StatusCode::CREATED)?;
    let existing_id = existing.body["fact"]["id"].clone();

    let reply = server.post("/v1/facts/extract", &turn()).await?;
    reply.expect(StatusCode::OK)?;
    let facts = reply.body["facts"].as_array().expect("facts");
    assert_eq!(facts[0]["outcome"], "duplicate", "{}", reply.body);
    assert_eq!(facts[0]["fact"]["id"], existing_id);
    assert_eq!(facts[0]["fact"]["content"], "User prefers tabs", "the stored fact is unchanged");
    assert_eq!(facts[1]["outcome"], "added");
    assert_eq!(
        stored(&server).await?,
        [triple("User works on billing", "context", 0.8), triple("User prefers tabs", "preference", 0.7)]
    );
    Ok(())
}

#[tokio::test]
async fn dry_run_answers_the_facts_and_stores_nothing() -> anyhow::Result<()> {
    let fake = FakeLlm::scripted(vec![reply(&[fact("User prefers tabs", "preference", 0.9)])]);
    let server = server_with(&fake, Backend::Sqlite).await?;
    let mut body = turn();
    body["dry_run"] = json!(true);
    let reply = server.post("/v1/facts/extract", &body).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["dry_run"], true);
    let facts = reply.body["facts"].as_array().expect("facts");
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0]["outcome"], "extracted");
    assert_eq!(facts[0]["content"], "User prefers tabs");
    assert!(facts[0].get("fact").is_none(), "{}", reply.body);
    assert_eq!(fake.request_count(), 1);
    assert!(stored(&server).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn the_api_key_never_reaches_a_response() -> anyhow::Result<()> {
    let fake = FakeLlm::scripted(vec![
        reply(&[fact("User prefers tabs", "preference", 0.9)]),
        FakeReply::status(401, format!("Incorrect API key provided: {API_KEY}")),
        FakeReply::raw(400, format!(r#"{{"error": {{"message": "bad request for key {API_KEY}"}}}}"#)),
    ]);
    let server = server_with(&fake, Backend::Sqlite).await?;
    let ok = server.post("/v1/facts/extract", &turn()).await?;
    ok.expect(StatusCode::OK)?;
    assert!(!ok.text.contains(API_KEY), "{}", ok.text);
    for _ in 0..2 {
        let refused = server.post("/v1/facts/extract", &turn()).await?;
        let message = refused.expect_error(StatusCode::BAD_GATEWAY, "bad_gateway")?;
        assert!(message.contains("rejected the request"), "{message}");
        assert!(!refused.text.contains(API_KEY), "the key leaked: {}", refused.text);
    }
    // The key was sent every time, so its absence above is the server's doing.
    for request in fake.requests() {
        assert_eq!(request.header("authorization"), Some(format!("Bearer {API_KEY}").as_str()));
    }
    Ok(())
}

#[tokio::test]
async fn without_a_chat_model_extraction_is_503_not_configured() -> anyhow::Result<()> {
    let server = TestServer::builder().no_embedder().start().await?;
    let reply = server.post("/v1/facts/extract", &turn()).await?;
    let message = reply.expect_error(StatusCode::SERVICE_UNAVAILABLE, "not_configured")?;
    assert!(message.contains("[judge]") && message.contains("MEMDEDUP_JUDGE"), "{message}");
    // Invalid bodies are still 400 first.
    let reply = server.post("/v1/facts/extract", &json!({"user": "u"})).await?;
    reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    Ok(())
}

#[tokio::test]
async fn a_chat_model_that_is_down_is_503_unavailable() -> anyhow::Result<()> {
    let fake = FakeLlm::scripted(vec![FakeReply::status(500, "overloaded")]);
    let server = server_with(&fake, Backend::Sqlite).await?;
    let reply = server.post("/v1/facts/extract", &turn()).await?;
    let message = reply.expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable")?;
    assert!(message.contains("unavailable after 1 attempts"), "{message}");
    assert!(stored(&server).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn invalid_bodies_are_400_and_ask_no_model() -> anyhow::Result<()> {
    let fake = FakeLlm::scripted(vec![]);
    let server = server_with(&fake, Backend::Sqlite).await?;
    let mut over = turn();
    over["min_confidence"] = json!(1.5);
    let mut nul = turn();
    nul["user"] = json!("a\u{0}b");
    let cases = [
        (json!({"user": "u"}), "assistant"),
        (json!({"user": "u", "assistant": "a", "system": "s"}), "unknown field `system`"),
        (json!({"user": 1, "assistant": "a"}), "invalid type"),
        (over, "min_confidence"),
        (nul, "NUL"),
        (json!({"user": "u", "assistant": "a", "namespace": "bad name"}), "namespace"),
    ];
    for (body, needle) in cases {
        let reply = server.post("/v1/facts/extract", &body).await?;
        let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
        assert!(message.contains(needle), "{body}: {message}");
    }
    let wrong_type = server.request(Method::POST, "/v1/facts/extract").body(turn().to_string());
    send(wrong_type).await?.expect_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")?;
    assert_eq!(fake.request_count(), 0);
    Ok(())
}

#[tokio::test]
async fn a_namespace_limited_token_extracts_only_into_its_namespaces() -> anyhow::Result<()> {
    const AGENT: &str = "agent-token-9876543210";
    let fake = FakeLlm::scripted(vec![reply(&[fact("User prefers tabs", "preference", 0.9)])]);
    let token: TokenConfig = serde_json::from_value(json!({"token": AGENT, "namespaces": ["agents"]}))?;
    let server =
        TestServer::builder().no_embedder().chat_model(chat(&fake)).config(|c| c.tokens = vec![token]).start().await?;
    let post = |body: Value| send(server.request(Method::POST, "/v1/facts/extract").bearer_auth(AGENT).json(&body));

    let denied = post(turn()).await?;
    let message = denied.expect_error(StatusCode::FORBIDDEN, "forbidden")?;
    assert!(message.contains("agents"), "{message}");
    assert_eq!(fake.request_count(), 0, "the model is not asked for a namespace the token may not use");

    let mut body = turn();
    body["namespace"] = json!("agents");
    let allowed = post(body).await?;
    allowed.expect(StatusCode::OK)?;
    assert_eq!(allowed.body["namespace"], "agents");
    assert_eq!(allowed.body["facts"][0]["fact"]["namespace"], "agents");
    Ok(())
}
