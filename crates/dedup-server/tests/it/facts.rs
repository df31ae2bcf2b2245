//! Seed 002's fact memory over HTTP, one test per scenario (the extraction scenarios,
//! `POST /v1/facts/extract`, are in fact_extraction.rs).

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Backend, TestServer};

async fn server() -> anyhow::Result<TestServer> {
    TestServer::builder().no_embedder().start().await
}

async fn server_on(backend: Backend) -> anyhow::Result<TestServer> {
    TestServer::builder().backend(backend).no_embedder().config(|c| c.facts.max_facts = 3).start().await
}

fn fact(content: &str, category: &str, confidence: f64) -> Value {
    json!({"content": content, "category": category, "confidence": confidence})
}

/// Adds a fact that must be added; returns it.
async fn add(server: &TestServer, content: &str, category: &str, confidence: f64) -> anyhow::Result<Value> {
    let reply = server.post("/v1/facts", &fact(content, category, confidence)).await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body["outcome"], "added", "{}", reply.body);
    Ok(reply.body["fact"].clone())
}

async fn list(server: &TestServer) -> anyhow::Result<Vec<Value>> {
    let reply = server.get("/v1/facts").await?;
    reply.expect(StatusCode::OK)?;
    Ok(reply.body["facts"].as_array().unwrap().clone())
}

fn contents(facts: &[Value]) -> Vec<&str> {
    facts.iter().map(|f| f["content"].as_str().unwrap()).collect()
}

/// Create fact: `fact_` + 8 hex digits, an ISO-8601 UTC timestamp, persisted.
#[tokio::test]
async fn scenario_create_fact() -> anyhow::Result<()> {
    let server = server().await?;
    let mut body = fact("Prefers concise answers", "preference", 0.9);
    body["source"] = json!("thread-42");
    let reply = server.post("/v1/facts", &body).await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body.as_object().unwrap().keys().collect::<Vec<_>>(), ["outcome", "fact", "evicted"]);
    assert_eq!(reply.body["outcome"], "added");
    assert_eq!(reply.body["evicted"], json!([]));
    let fact = &reply.body["fact"];
    let keys: Vec<&str> = fact.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["id", "content", "category", "confidence", "source", "namespace", "createdAt", "updatedAt"]);
    let id = fact["id"].as_str().unwrap();
    let hex = id.strip_prefix("fact_").unwrap_or_default();
    assert!(hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    let created = fact["createdAt"].as_str().unwrap();
    let parsed = chrono::DateTime::parse_from_rfc3339(created)?;
    assert_eq!(parsed.offset().local_minus_utc(), 0, "UTC: {created}");
    assert!(created.ends_with('Z'), "{created}");
    assert!((chrono::Utc::now() - parsed.to_utc()).num_seconds().abs() < 60, "{created}");
    assert_eq!(
        (&fact["content"], &fact["category"], &fact["confidence"], &fact["source"], &fact["namespace"]),
        (&json!("Prefers concise answers"), &json!("preference"), &json!(0.9), &json!("thread-42"), &json!("default"))
    );
    assert_eq!(list(&server).await?, std::slice::from_ref(fact), "persisted");

    // Ids are unique.
    let other = add(&server, "Works in UTC+2", "context", 0.7).await?;
    assert_ne!(other["id"], fact["id"]);
    Ok(())
}

/// Fact categories: the six are accepted, anything else is 400 and writes nothing.
#[tokio::test]
async fn scenario_fact_categories() -> anyhow::Result<()> {
    let server = server().await?;
    let categories = ["preference", "knowledge", "context", "behavior", "goal", "correction"];
    for (i, category) in categories.iter().enumerate() {
        let added = add(&server, &format!("Fact number {i}"), category, 0.8).await?;
        assert_eq!(added["category"], *category);
    }
    for bad in ["opinion", "", "preferences", "behaviour"] {
        let reply = server.post("/v1/facts", &fact("Another fact", bad, 0.8)).await?;
        let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
        assert!(message.contains("preference, knowledge, context, behavior, goal, correction"), "{bad}: {message}");
    }
    let reply = server.post("/v1/facts", &json!({"content": "x", "category": 3, "confidence": 0.8})).await?;
    reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    assert_eq!(list(&server).await?.len(), 6);
    Ok(())
}

/// Confidence thresholds: below 0.5 the fact is skipped (200, nothing stored); outside
/// [0, 1] it is invalid.
#[tokio::test]
async fn scenario_confidence_thresholds() -> anyhow::Result<()> {
    let server = server().await?;
    let reply = server.post("/v1/facts", &fact("Maybe likes jazz", "preference", 0.49)).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["outcome"], "low_confidence");
    assert!(reply.body.get("fact").is_none(), "{}", reply.body);
    let message = reply.body["message"].as_str().unwrap();
    assert!(message.contains("0.49") && message.contains("0.5"), "{message}");
    assert!(list(&server).await?.is_empty());

    add(&server, "Likes jazz", "preference", 0.5).await?;
    for bad in [json!(1.5), json!(-0.1), json!("high")] {
        let reply = server.post("/v1/facts", &json!({"content": "Bad", "category": "goal", "confidence": bad})).await?;
        reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    }
    assert_eq!(contents(&list(&server).await?), ["Likes jazz"]);

    // The threshold is configurable.
    let strict = TestServer::builder().no_embedder().config(|c| c.facts.min_confidence = 0.8).start().await?;
    let reply = strict.post("/v1/facts", &fact("Likes jazz", "preference", 0.75)).await?;
    assert_eq!(reply.body["outcome"], "low_confidence");
    Ok(())
}

/// Delete fact by ID: 204 and gone.
#[tokio::test]
async fn scenario_delete_fact_by_id() -> anyhow::Result<()> {
    let server = server().await?;
    let keep = add(&server, "Keeps this", "goal", 0.8).await?;
    let doomed = add(&server, "Deletes this", "goal", 0.7).await?;
    let reply = server.delete(&format!("/v1/facts/{}", doomed["id"].as_str().unwrap())).await?;
    reply.expect(StatusCode::NO_CONTENT)?;
    assert!(reply.text.is_empty());
    assert_eq!(list(&server).await?, [keep]);
    // Its text may be added again.
    add(&server, "Deletes this", "goal", 0.7).await?;
    Ok(())
}

/// Delete non-existent fact: 404 (the seed's KeyError).
#[tokio::test]
async fn scenario_delete_non_existent_fact() -> anyhow::Result<()> {
    let server = server().await?;
    let kept = add(&server, "Stays", "knowledge", 0.9).await?;
    for id in ["fact_00000000", "fact_zzzzzzzz", "nonsense"] {
        let reply = server.delete(&format!("/v1/facts/{id}")).await?;
        let message = reply.expect_error(StatusCode::NOT_FOUND, "not_found")?;
        assert!(message.contains(id), "{message}");
    }
    let id = kept["id"].as_str().unwrap();
    server.delete(&format!("/v1/facts/{id}")).await?.expect(StatusCode::NO_CONTENT)?;
    server.delete(&format!("/v1/facts/{id}")).await?.expect_error(StatusCode::NOT_FOUND, "not_found")?;
    Ok(())
}

/// Update fact: only the given fields change; createdAt never does.
#[tokio::test]
async fn scenario_update_fact() -> anyhow::Result<()> {
    let server = server().await?;
    let original = add(&server, "Uses Vim", "preference", 0.7).await?;
    let path = format!("/v1/facts/{}", original["id"].as_str().unwrap());
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;

    let reply = server.patch(&path, &json!({"confidence": 0.95})).await?;
    reply.expect(StatusCode::OK)?;
    let updated = &reply.body;
    assert_eq!(updated["confidence"], 0.95);
    for same in ["id", "content", "category", "source", "namespace", "createdAt"] {
        assert_eq!(updated[same], original[same], "{same}");
    }
    assert!(updated["updatedAt"].as_str() > original["updatedAt"].as_str(), "{updated}");
    // A change of case only is no clash with the fact itself.
    let reply = server.patch(&path, &json!({"content": "USES VIM"})).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["content"], "USES VIM");

    let reply = server.patch(&path, &json!({"content": "Uses Neovim", "category": "behavior"})).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!((&reply.body["content"], &reply.body["category"]), (&json!("Uses Neovim"), &json!("behavior")));
    assert_eq!(reply.body["confidence"], 0.95, "kept");
    assert_eq!(reply.body["createdAt"], original["createdAt"]);
    assert_eq!(list(&server).await?, std::slice::from_ref(&reply.body), "persisted");

    let reply = server.patch(&path, &json!({})).await?;
    reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    for bad in [json!({"category": "mood"}), json!({"confidence": 2.0}), json!({"createdAt": "2020-01-01T00:00:00Z"})] {
        server.patch(&path, &bad).await?.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    }
    server
        .patch("/v1/facts/fact_0badc0de", &json!({"confidence": 0.9}))
        .await?
        .expect_error(StatusCode::NOT_FOUND, "not_found")?;
    // New content that casefolds to another fact's is a conflict.
    add(&server, "Lives in Berlin", "context", 0.8).await?;
    server
        .patch(&path, &json!({"content": "LIVES IN BERLIN"}))
        .await?
        .expect_error(StatusCode::CONFLICT, "conflict")?;
    Ok(())
}

/// Exact duplicate detected: skipped, the existing fact unchanged.
#[tokio::test]
async fn scenario_exact_duplicate_detected() -> anyhow::Result<()> {
    let server = server().await?;
    let existing = add(&server, "Prefers dark mode", "preference", 0.8).await?;
    let reply = server.post("/v1/facts", &fact("Prefers dark mode", "knowledge", 0.99)).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["outcome"], "duplicate");
    assert_eq!(reply.body["fact"], existing, "the existing fact, unchanged");
    assert!(reply.body["message"].as_str().unwrap().contains(existing["id"].as_str().unwrap()));
    assert_eq!(list(&server).await?, [existing]);
    Ok(())
}

on_both_backends! {
    /// Near-duplicate with different casing (and surrounding whitespace; full case folding).
    async fn scenario_near_duplicate_with_different_casing(backend) {
        let server = server_on(backend).await?;
        let existing = add(&server, "Prefers dark mode", "preference", 0.8).await?;
        let street = add(&server, "Lives on Hauptstraße", "context", 0.8).await?;
        let variants = [
            ("PREFERS DARK MODE", &existing),
            ("  prefers Dark Mode \n", &existing),
            ("LIVES ON HAUPTSTRASSE", &street),
        ];
        for (variant, of) in variants {
            let reply = server.post("/v1/facts", &fact(variant, "preference", 0.9)).await?;
            reply.expect(StatusCode::OK)?;
            assert_eq!(reply.body["outcome"], "duplicate", "{variant:?}");
            assert_eq!(reply.body["fact"]["id"], of["id"]);
        }
        assert_eq!(list(&server).await?.len(), 2);
        // Other namespaces have facts of their own.
        let mut elsewhere = fact("PREFERS DARK MODE", "preference", 0.9);
        elsewhere["namespace"] = json!("work");
        server.post("/v1/facts", &elsewhere).await?.expect(StatusCode::CREATED)?;
        Ok(())
    }

    /// Fact count exceeds limit: the lowest-confidence fact goes, the new one is added.
    async fn scenario_fact_count_exceeds_limit(backend) {
        let server = server_on(backend).await?;
        add(&server, "High", "knowledge", 0.9).await?;
        let low = add(&server, "Low", "knowledge", 0.6).await?;
        add(&server, "Middle", "knowledge", 0.8).await?;

        let reply = server.post("/v1/facts", &fact("Newcomer", "goal", 0.7)).await?;
        reply.expect(StatusCode::CREATED)?;
        assert_eq!(reply.body["outcome"], "added");
        assert_eq!(reply.body["evicted"], json!([low]));
        assert_eq!(contents(&list(&server).await?), ["High", "Middle", "Newcomer"], "sorted by confidence");

        // A newcomer less sure than every stored fact would evict a better one: it is the
        // one left out, and the reply says why.
        let reply = server.post("/v1/facts", &fact("Unsure", "goal", 0.55)).await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body["outcome"], "outranked");
        assert!(reply.body["message"].as_str().is_some_and(|m| m.contains("0.7")), "{}", reply.body);
        assert_eq!(contents(&list(&server).await?), ["High", "Middle", "Newcomer"]);
        // Duplicates and skipped facts evict nothing.
        server.post("/v1/facts", &fact("high", "goal", 0.99)).await?.expect(StatusCode::OK)?;
        server.post("/v1/facts", &fact("Noise", "goal", 0.1)).await?.expect(StatusCode::OK)?;
        assert_eq!(list(&server).await?.len(), 3);
        Ok(())
    }
}

fn profile() -> Value {
    let section = |summary: &str| json!({"summary": summary, "updatedAt": "2024-05-01T10:00:00Z"});
    json!({
        "user": {
            "workContext": section("Backend engineer on the payments team"),
            "personalContext": section("Lives in Lisbon, cycles to work"),
            "topOfMind": section("Migrating the ledger to Postgres"),
        },
        "history": {
            "recentMonths": section("Shipped the reconciliation service"),
            "earlierContext": section("Worked on fraud detection"),
            "longTermBackground": section("Ten years of Python, learning Rust"),
        }
    })
}

const PROFILE_TEXT: &str = "User Context:\n\
- Work: Backend engineer on the payments team\n\
- Personal: Lives in Lisbon, cycles to work\n\
- Current Focus: Migrating the ledger to Postgres\n\
\n\
History:\n\
- Recent: Shipped the reconciliation service\n\
- Earlier: Worked on fraud detection\n\
- Background: Ten years of Python, learning Rust";

/// Format with all sections: user context, history, then facts by confidence.
#[tokio::test]
async fn scenario_format_with_all_sections() -> anyhow::Result<()> {
    let server = server().await?;
    let reply = server.put("/v1/memory/profile", &profile()).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body, profile());
    assert_eq!(server.get("/v1/memory/profile").await?.body, profile());

    add(&server, "Prefers concise answers", "preference", 0.7).await?;
    add(&server, "Uses Rust daily", "knowledge", 0.95).await?;
    add(&server, "Wants to learn Go", "goal", 0.825).await?;

    let reply = server.get("/v1/memory/context").await?;
    reply.expect(StatusCode::OK)?;
    let expected = format!(
        "{PROFILE_TEXT}\n\nFacts:\n\
         - [knowledge | 0.95] Uses Rust daily\n\
         - [goal | 0.82] Wants to learn Go\n\
         - [preference | 0.70] Prefers concise answers"
    );
    assert_eq!(reply.body["context"], expected.as_str());
    assert_eq!(reply.body["max_tokens"], 2000);
    let tokens = reply.body["tokens"].as_u64().unwrap() as usize;
    assert_eq!(tokens, dedup_core::default_token_counter().count(&expected));

    // Another namespace has an empty memory.
    let empty = server.get("/v1/memory/context?namespace=elsewhere").await?;
    assert_eq!((&empty.body["context"], &empty.body["tokens"]), (&json!(""), &json!(0)));
    let reply = server.put("/v1/memory/profile", &json!({"user": "not an object"})).await?;
    reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    Ok(())
}

/// Defect "malformed profile input erases the profile": wrong shapes and unknown fields
/// are a 400 naming the problem, and the stored profile is unchanged.
#[tokio::test]
async fn malformed_profile_input_erases_the_profile_no_more() -> anyhow::Result<()> {
    let server = server().await?;
    server.put("/v1/memory/profile", &profile()).await?.expect(StatusCode::OK)?;
    for (body, expected) in [
        (json!([]), "the profile must be an object, not an array"),
        (json!({"unknown": 1}), "unknown field `unknown`"),
        (json!({"user": {"topOfMind": []}}), "`user.topOfMind` must be an object, not an array"),
        (json!({"user": {"topOfMind": {"summary": 3}}}), "`user.topOfMind.summary` must be a string, not a number"),
        (json!(null), "the profile must be an object, not null"),
    ] {
        let message =
            server.put("/v1/memory/profile", &body).await?.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
        assert!(message.contains(expected), "{body}: {message}");
        assert_eq!(server.get("/v1/memory/profile").await?.body, profile(), "{body} changed the profile");
    }
    Ok(())
}

/// Token budget enforcement: facts go lowest confidence first; then the text is cut and
/// "\n..." appended.
#[tokio::test]
async fn scenario_token_budget_enforcement() -> anyhow::Result<()> {
    let server = server().await?;
    server.put("/v1/memory/profile", &profile()).await?.expect(StatusCode::OK)?;
    add(&server, "Uses Rust daily", "knowledge", 0.9).await?;
    add(&server, "Prefers concise answers", "preference", 0.6).await?;
    add(&server, "Wants to learn Go", "goal", 0.8).await?;
    let lines = ["- [knowledge | 0.90] Uses Rust daily", "- [goal | 0.80] Wants to learn Go"];
    let with = |k: usize| format!("{PROFILE_TEXT}\n\nFacts:\n{}", lines[..k].join("\n"));
    let count = |text: &str| dedup_core::default_token_counter().count(text);

    let context = |max: usize| {
        let server = &server;
        async move {
            let reply = server.get(&format!("/v1/memory/context?max_tokens={max}")).await?;
            reply.expect(StatusCode::OK)?;
            let tokens = reply.body["tokens"].as_u64().unwrap() as usize;
            assert!(tokens <= max, "{tokens} tokens over the budget {max}");
            assert_eq!(reply.body["max_tokens"], max);
            anyhow::Ok(reply.body["context"].as_str().unwrap().to_owned())
        }
    };
    // The lowest-confidence fact goes first, then the next.
    assert_eq!(context(count(&with(2))).await?, with(2));
    assert_eq!(context(count(&with(2)) - 1).await?, with(1));
    assert_eq!(context(count(&with(1))).await?, with(1));
    assert_eq!(context(count(PROFILE_TEXT)).await?, PROFILE_TEXT, "no fact fits: the profile alone");

    // Over budget without any fact: cut at the character level, marked with "\n...".
    let cut = context(20).await?;
    let kept = cut.strip_suffix("\n...").unwrap_or_else(|| panic!("no truncation marker: {cut:?}"));
    assert!(!kept.is_empty() && PROFILE_TEXT.starts_with(kept), "{cut:?}");
    assert!(!cut.contains("Facts:"));

    for bad in ["max_tokens=0", "max_tokens=-5", "max_tokens=lots", "max_tokens=1000001", "budget=5"] {
        server
            .get(&format!("/v1/memory/context?{bad}"))
            .await?
            .expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    }
    Ok(())
}

#[tokio::test]
async fn facts_reject_invalid_content_and_write_nothing() -> anyhow::Result<()> {
    let server = server().await?;
    let too_long = "x".repeat(64 * 1024 + 1);
    for content in ["", "   ", "nul\0inside", too_long.as_str()] {
        let reply = server.post("/v1/facts", &fact(content, "goal", 0.9)).await?;
        reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    }
    let mut unknown = fact("Valid", "goal", 0.9);
    unknown["createdAt"] = json!("2020-01-01T00:00:00Z");
    server.post("/v1/facts", &unknown).await?.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    let missing = json!({"content": "Valid", "category": "goal"});
    server.post("/v1/facts", &missing).await?.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    assert!(list(&server).await?.is_empty());
    Ok(())
}

/// Like every other body, the profile refuses members it does not have, naming them; the
/// stored profile is unchanged.
#[tokio::test]
async fn defect_11_put_profile_rejects_unknown_fields() -> anyhow::Result<()> {
    let server = server().await?;
    server.put("/v1/memory/profile", &profile()).await?.expect(StatusCode::OK)?;
    for (body, field) in [
        (json!({"user": {"workContext": {"summary": "x"}}, "facts": []}), "`facts`"),
        (json!({"user": {"workContxt": {"summary": "x"}}}), "`user.workContxt`"),
        (json!({"history": {"recentMonths": {"summary": "x", "when": "now"}}}), "`history.recentMonths.when`"),
    ] {
        let reply = server.put("/v1/memory/profile", &body).await?;
        let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
        assert!(message.contains(&format!("unknown field {field}")), "{message}");
    }
    assert_eq!(server.get("/v1/memory/profile").await?.body, profile(), "nothing was written");
    // Known members may still be left out.
    let partial = json!({"user": {"topOfMind": {"summary": "Only this"}}});
    server.put("/v1/memory/profile", &partial).await?.expect(StatusCode::OK)?;
    Ok(())
}
