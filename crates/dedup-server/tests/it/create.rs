//! `POST /v1/nodes` with the dedup gate (seed 001 §2, §5, §7, §10): created, duplicate,
//! connect-tier edges, type gating, fail-open, and input that writes nothing.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{FailingEmbedder, TableEmbedder, TestServer, axis, metric_value, node, toward};

const LESSON: &str = "custom:lesson";
const TITLE: &str = "Never trade weekends";
const BODY: &str = "Low volume weekends increase slippage risk";

/// The members of a create response, in order.
const CREATE_KEYS: [&str; 13] = [
    "created",
    "id",
    "type",
    "subtype",
    "content_title",
    "content_body",
    "namespace",
    "state_lifecycle",
    "occurrence_count",
    "metadata",
    "created_at",
    "updated_at",
    "dedup",
];

fn keys(value: &Value) -> Vec<&str> {
    value.as_object().expect("an object").keys().map(String::as_str).collect()
}

/// A lesson and a paraphrase of it at cosine 0.97, and one at 0.92 (connect tier).
fn weekend_embedder() -> TableEmbedder {
    TableEmbedder::new()
        .with(TITLE, BODY, axis(0))
        .with("Avoid weekend trading", "Weekend trading is risky due to low volume and slippage", toward(0, 0.97, 1))
        .with("Weekends are thin", "Liquidity dries up on weekends", toward(0, 0.92, 2))
}

on_both_backends! {
    /// Defect "secrets stored verbatim": a node's title and body never carry credentials.
    async fn secrets_stored_verbatim_in_nodes_are_redacted(backend) {
        let server = TestServer::builder().backend(backend).embedder(Arc::new(TableEmbedder::new())).start().await?;
        let body = "Deploy with AKIAIOSFODNN7EXAMPLE and password = hunter2!x on the staging box";
        let reply = server.post("/v1/nodes", &node(LESSON, "token ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ", body)).await?;
        reply.expect(StatusCode::CREATED)?;
        assert_eq!(reply.body["content_title"], "token [REDACTED:github_token]", "{}", reply.body);
        assert_eq!(
            reply.body["content_body"],
            "Deploy with [REDACTED:aws_access_key_id] and password = [REDACTED:password] on the staging box"
        );
        let id = reply.body["id"].as_str().unwrap().to_owned();
        let edited = server.patch(&format!("/v1/nodes/{id}"), &json!({"content_body": "new key sk_live_51HqLyjWDarjtT1zdp7dcXyZ0123"})).await?;
        edited.expect(StatusCode::OK)?;
        assert_eq!(edited.body["content_body"], "new key [REDACTED:stripe_key]", "{}", edited.body);
        Ok(())
    }

    /// The seed's curl example: 201, the node as stored, and what the gate did.
    async fn create_node_seed_curl_shape_is_checked_and_created(backend) {
        let server = TestServer::builder().backend(backend).embedder(Arc::new(weekend_embedder())).start().await?;
        let reply = server.post("/v1/nodes", &node(LESSON, TITLE, BODY)).await?;
        reply.expect(StatusCode::CREATED)?;
        let body = &reply.body;
        assert_eq!(keys(body), CREATE_KEYS, "{body}");
        assert_eq!(body["created"], true);
        let id = body["id"].as_str().unwrap();
        assert!(id.strip_prefix("n_").is_some_and(|n| n.parse::<u64>().is_ok()), "{id}");
        assert_eq!(body["type"], "concept");
        assert_eq!(body["subtype"], LESSON);
        assert_eq!(body["content_title"], TITLE);
        assert_eq!(body["content_body"], BODY);
        assert_eq!(body["namespace"], "default");
        assert_eq!(body["state_lifecycle"], "ACTIVE");
        assert_eq!(body["occurrence_count"], 1);
        assert_eq!(body["metadata"], json!({}));
        for time in ["created_at", "updated_at"] {
            let text = body[time].as_str().unwrap();
            chrono::DateTime::parse_from_rfc3339(text).map_err(|e| anyhow::anyhow!("{time} {text}: {e}"))?;
        }
        assert_eq!(
            body["dedup"],
            json!({"status": "checked", "recommendation": "unique", "matches": [], "linked": []})
        );
        let stored = server.get(&format!("/v1/nodes/{id}")).await?;
        stored.expect(StatusCode::OK)?;
        let mut expected = body.clone();
        for member in ["created", "dedup"] {
            expected.as_object_mut().unwrap().remove(member);
        }
        assert_eq!(stored.body, expected);
        Ok(())
    }

    /// A paraphrase at 0.97 and an exact repeat are not created: 200 with the existing
    /// node, its occurrence count raised, and the seed's feedback line.
    async fn create_duplicate_returns_the_existing_node(backend) {
        let server = TestServer::builder().backend(backend).embedder(Arc::new(weekend_embedder())).start().await?;
        let id = server.created(LESSON, TITLE, BODY).await?;

        let reply = server
            .create_node(LESSON, "Avoid weekend trading", "Weekend trading is risky due to low volume and slippage")
            .await?;
        reply.expect(StatusCode::OK)?;
        let body = &reply.body;
        assert_eq!(keys(body), [&CREATE_KEYS[..12], &["duplicate_of", "message", "dedup"]].concat(), "{body}");
        assert_eq!(body["created"], false);
        assert_eq!(body["id"], id.as_str());
        assert_eq!(body["content_title"], TITLE, "the existing node is shown");
        assert_eq!(body["occurrence_count"], 2);
        let duplicate = json!({
            "node_id": id, "title": TITLE, "similarity": 0.97, "action": "duplicate", "lifecycle": "ACTIVE"
        });
        assert_eq!(body["duplicate_of"], duplicate);
        let message = body["message"].as_str().unwrap();
        assert!(message.starts_with("Duplicate: already stored as"), "{message}");
        assert_eq!(message, format!("Duplicate: already stored as \"{TITLE}\" ({id}). Not created. (97% similar)"));
        assert_eq!(body["dedup"]["status"], "checked");
        assert_eq!(body["dedup"]["recommendation"], "duplicate_found");
        assert_eq!(body["dedup"]["matches"], json!([duplicate]));
        assert_eq!(body["dedup"]["linked"], json!([]));

        let reply = server.create_node(LESSON, TITLE, BODY).await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body["id"], id.as_str());
        assert_eq!(reply.body["duplicate_of"]["similarity"], 1.0);
        assert_eq!(reply.body["occurrence_count"], 3);
        assert!(reply.body["message"].as_str().unwrap().ends_with("Not created. (100% similar)"), "{}", reply.body);

        let nodes = server.all_nodes().await?;
        assert_eq!(nodes.len(), 1, "nothing new was stored");
        assert_eq!(nodes[0]["occurrence_count"], 3);
        Ok(())
    }

    /// Between 0.90 and 0.95 the node is created and linked with `relates_to` to every
    /// connect-tier match.
    async fn create_in_the_connect_tier_links_each_match(backend) {
        let embedder = TableEmbedder::new()
            .with("A", "first", toward(0, 0.93, 1))
            .with("B", "second", toward(0, 0.92, 2))
            .with("Far", "third", toward(0, 0.85, 3))
            .with("New", "lesson", axis(0));
        let server = TestServer::builder().backend(backend).embedder(Arc::new(embedder)).start().await?;
        let a = server.created(LESSON, "A", "first").await?;
        let b = server.created(LESSON, "B", "second").await?;
        let far = server.created(LESSON, "Far", "third").await?;
        let reply = server.create_node(LESSON, "New", "lesson").await?;
        reply.expect(StatusCode::CREATED)?;
        let new = reply.id();
        let dedup = &reply.body["dedup"];
        assert_eq!(dedup["status"], "checked");
        assert_eq!(dedup["recommendation"], "similar_found");
        let found: Vec<(&str, f64, &str)> = dedup["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["node_id"].as_str().unwrap(), m["similarity"].as_f64().unwrap(), m["action"].as_str().unwrap()))
            .collect();
        assert_eq!(found, [(a.as_str(), 0.93, "connect"), (b.as_str(), 0.92, "connect")]);
        assert_eq!(dedup["linked"], json!([a, b]));

        let edges = server.get(&format!("/v1/nodes/{new}/edges")).await?;
        edges.expect(StatusCode::OK)?;
        let edges = edges.body["data"].as_array().unwrap().clone();
        assert_eq!(edges.len(), 2, "{edges:?}");
        for (edge, target) in edges.iter().zip([&a, &b]) {
            assert_eq!(keys(edge), ["source_id", "target_id", "type", "created_at"]);
            assert_eq!(edge["source_id"].as_str(), Some(new.as_str()));
            assert_eq!(edge["target_id"].as_str(), Some(target.as_str()));
            assert_eq!(edge["type"], "relates_to");
        }
        let far_edges = server.get(&format!("/v1/nodes/{far}/edges")).await?;
        assert_eq!(far_edges.body["data"], json!([]), "below 0.90: no edge");
        let a_edges = server.get(&format!("/v1/nodes/{a}/edges")).await?;
        assert_eq!(a_edges.body["data"].as_array().unwrap().len(), 1, "the edge shows at its target too");
        Ok(())
    }
}

#[tokio::test]
async fn create_duplicate_of_a_dormant_node_names_its_lifecycle() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(weekend_embedder())).await?;
    let id = server.created(LESSON, TITLE, BODY).await?;
    let patched = server.patch(&format!("/v1/nodes/{id}"), &json!({"state_lifecycle": "DORMANT"})).await?;
    patched.expect(StatusCode::OK)?;
    assert_eq!(patched.body["state_lifecycle"], "DORMANT");

    let reply = server
        .create_node(LESSON, "Avoid weekend trading", "Weekend trading is risky due to low volume and slippage")
        .await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["created"], false);
    assert_eq!(reply.body["duplicate_of"]["lifecycle"], "DORMANT");
    assert_eq!(reply.body["state_lifecycle"], "DORMANT", "still dormant: the agent decides to reactivate");
    let message = reply.body["message"].as_str().unwrap();
    assert!(message.starts_with(&format!("Duplicate: already stored as \"{TITLE}\" ({id}) [DORMANT]")), "{message}");
    assert!(message.contains("reactivate") && message.ends_with("Not created. (97% similar)"), "{message}");

    // Reactivated, it is reported as ACTIVE without the hint.
    server.patch(&format!("/v1/nodes/{id}"), &json!({"state_lifecycle": "ACTIVE"})).await?.expect(StatusCode::OK)?;
    let reply = server
        .create_node(LESSON, "Avoid weekend trading", "Weekend trading is risky due to low volume and slippage")
        .await?;
    assert!(!reply.body["message"].as_str().unwrap().contains('['), "{}", reply.body);
    Ok(())
}

/// Defect 11: `lesson` and `custom:lesson` are one subtype (stored as seed 001 writes
/// it), so a repeat under the other spelling is a duplicate, not a second node.
#[tokio::test]
async fn defect_11_lesson_and_custom_lesson_are_one_subtype() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let first = server.create_node("custom:lesson", "Spelling", "A lesson written with the prefix").await?;
    first.expect(StatusCode::CREATED)?;
    let repeat = server.create_node("lesson", "Spelling", "A lesson written with the prefix").await?;
    repeat.expect(StatusCode::OK)?;
    assert_eq!(repeat.body["created"], false, "{}", repeat.body);

    let bare = server.create_node("curiosity", "Weekends", "Why do weekends thin out?").await?;
    bare.expect(StatusCode::CREATED)?;
    assert_eq!(bare.body["subtype"], "custom:curiosity", "{}", bare.body);
    let repeat = server.create_node("custom:curiosity", "Weekends", "Why do weekends thin out?").await?;
    repeat.expect(StatusCode::OK)?;

    for spelling in ["lesson", "custom:lesson"] {
        let listed = server.get(&format!("/v1/nodes?subtype={spelling}")).await?;
        listed.expect(StatusCode::OK)?;
        assert_eq!(listed.body["data"].as_array().map(Vec::len), Some(1), "{spelling}: {}", listed.body);
    }
    assert_eq!(server.all_nodes().await?.len(), 2);
    Ok(())
}

#[tokio::test]
async fn create_curiosity_is_deduplicated_and_thesis_is_not() -> anyhow::Result<()> {
    let embedder = Arc::new(TableEmbedder::new());
    let server = TestServer::start(embedder.clone()).await?;
    let first = server.created("custom:curiosity", "Why do weekends thin out?", "Who trades on Sundays").await?;
    let reply = server.create_node("custom:curiosity", "Why do weekends thin out?", "Who trades on Sundays").await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["id"], first.as_str());

    // The bare name is eligible too, as in the configuration.
    server.created("lesson", "Bare subtype", "A lesson without the custom: prefix").await?;
    let reply = server.create_node("lesson", "Bare subtype", "A lesson without the custom: prefix").await?;
    reply.expect(StatusCode::OK)?;

    let mut ids = Vec::new();
    for _ in 0..2 {
        let reply = server.create_node("custom:thesis", "BTC to 100k", "ETF flows keep rising").await?;
        reply.expect(StatusCode::CREATED)?;
        assert_eq!(reply.body["created"], true);
        assert_eq!(reply.body["dedup"], json!({"status": "not_eligible", "matches": [], "linked": []}));
        ids.push(reply.id());
    }
    assert_ne!(ids[0], ids[1], "two thesis nodes: the evolution trail is kept");
    for subtype in ["custom:signal", "custom:episode", "custom:trade_entry", "custom:watchpoint"] {
        for _ in 0..2 {
            server.create_node(subtype, "Same", "Same text").await?.expect(StatusCode::CREATED)?;
        }
    }
    assert_eq!(server.all_nodes().await?.len(), 2 + 2 + 8);
    Ok(())
}

/// Seed 001 §2.6: a failed check never loses the memory; the failure is counted.
#[tokio::test]
async fn create_fails_open_when_the_embedder_fails() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(FailingEmbedder)).await?;
    let before = metric_value(&server.metrics().await?, "dedup_check_failures_total", None);
    let reply = server.create_node(LESSON, TITLE, BODY).await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body["created"], true);
    let dedup = &reply.body["dedup"];
    assert_eq!(keys(dedup), ["status", "reason", "matches", "linked"], "{dedup}");
    assert_eq!(dedup["status"], "skipped");
    let reason = dedup["reason"].as_str().unwrap();
    assert!(reason.starts_with("embedding generation failed") && reason.contains("connection refused"), "{reason}");
    let metrics = server.metrics().await?;
    assert!(metrics.contains("dedup_check_failures_total"), "{metrics}");
    let after = metric_value(&metrics, "dedup_check_failures_total", None);
    assert!(after >= before + 1.0, "failures {before} -> {after}");

    // The node is stored. With the embedder down, a repeat is stored too: a duplicate is
    // better than a lost memory (seed 001 §2.6).
    assert_eq!(server.all_nodes().await?.len(), 1);
    let reply = server.create_node(LESSON, TITLE, BODY).await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body["dedup"]["status"], "skipped");
    assert_eq!(server.all_nodes().await?.len(), 2);

    // Subtypes without dedup are not "skipped": they were never going to be checked.
    let reply = server.create_node("custom:thesis", TITLE, BODY).await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body["dedup"]["status"], "not_eligible");
    Ok(())
}

#[tokio::test]
async fn create_without_an_embedder_fails_open() -> anyhow::Result<()> {
    let server = TestServer::builder().no_embedder().start().await?;
    let reply = server.create_node(LESSON, TITLE, BODY).await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body["dedup"]["status"], "skipped");
    assert_eq!(reply.body["dedup"]["reason"], "no embedder is configured");
    Ok(())
}

#[tokio::test]
async fn create_rejects_invalid_input_and_writes_nothing() -> anyhow::Result<()> {
    let embedder = Arc::new(TableEmbedder::new());
    let server = TestServer::start(embedder.clone()).await?;
    let required = "type, subtype, content_title and content_body are required";
    let full = node(LESSON, TITLE, BODY);
    for field in ["type", "subtype", "content_title", "content_body"] {
        for value in [None, Some(json!("")), Some(json!("  ")), Some(Value::Null)] {
            let mut body = full.clone();
            match &value {
                None => {
                    body.as_object_mut().unwrap().remove(field);
                }
                Some(value) => body[field] = value.clone(),
            }
            let reply = server.post("/v1/nodes", &body).await?;
            assert_eq!(reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?, required, "{field}={value:?}");
        }
    }
    let mut invalid: Vec<(Value, &str)> = Vec::new();
    for (field, value) in [
        ("content_body", json!("nul\0inside")),
        ("content_title", json!("nul\0inside")),
        ("content_body", json!("x".repeat(64 * 1024 + 1))),
        ("content_title", json!("t".repeat(64 * 1024 + 1))),
        ("subtype", json!("custom lesson")),
        ("namespace", json!("bad namespace")),
        ("content_body", json!(42)),
        ("type", json!(["concept"])),
    ] {
        let mut body = full.clone();
        body[field] = value;
        invalid.push((body, field));
    }
    for (body, field) in &invalid {
        let reply = server.post("/v1/nodes", body).await?;
        let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
        assert!(!message.is_empty(), "{field}");
    }
    let reply = server.post("/v1/nodes", &node(LESSON, TITLE, &"x".repeat(64 * 1024 + 1))).await?;
    let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    assert_eq!(message, "content_body is 65537 bytes, over the limit of 65536 bytes");
    let reply = server.post("/v1/nodes", &node(LESSON, TITLE, "a\0b")).await?;
    assert_eq!(
        reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?,
        "content_body must not contain NUL characters"
    );

    // Over the 1 MiB body limit: 413 with a JSON error.
    let reply = server.post("/v1/nodes", &node(LESSON, TITLE, &"x".repeat(1 << 20))).await?;
    let message = reply.expect_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")?;
    assert_eq!(message, "request body is larger than the limit");

    let raw = server.request(reqwest::Method::POST, "/v1/nodes").body(full.to_string());
    crate::support::send(raw).await?.expect_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")?;
    let raw = server.request(reqwest::Method::POST, "/v1/nodes").header("content-type", "application/json").body("{");
    crate::support::send(raw).await?.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;

    assert!(server.all_nodes().await?.is_empty(), "no error case wrote a node");
    assert_eq!(embedder.calls(), 0, "no error case reached the embedder");

    // The store's own limits (a title of at most 1 KiB) are input errors too.
    let reply = server.post("/v1/nodes", &node(LESSON, &"t".repeat(2000), BODY)).await?;
    reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    assert!(server.all_nodes().await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn create_keeps_other_fields_as_metadata() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let mut body = node("custom:signal", "Funding flipped", "BTC funding negative at 08:00");
    body["event_time"] = json!("2024-01-06T08:00:00Z");
    body["signals"] = json!({"funding": -0.01});
    let reply = server.post("/v1/nodes", &body).await?;
    reply.expect(StatusCode::CREATED)?;
    let expected = json!({"event_time": "2024-01-06T08:00:00Z", "signals": {"funding": -0.01}});
    assert_eq!(reply.body["metadata"], expected);
    assert_eq!(reply.body["type"], "concept");
    let stored = server.get(&format!("/v1/nodes/{}", reply.id())).await?;
    assert_eq!(stored.body["metadata"], expected);
    Ok(())
}

#[tokio::test]
async fn create_in_another_namespace_is_not_a_duplicate() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(weekend_embedder())).await?;
    let first = server.created(LESSON, TITLE, BODY).await?;
    let mut elsewhere = node(LESSON, TITLE, BODY);
    elsewhere["namespace"] = json!("agent-2");
    let reply = server.post("/v1/nodes", &elsewhere).await?;
    reply.expect(StatusCode::CREATED)?;
    assert_ne!(reply.id(), first);
    assert_eq!(reply.body["namespace"], "agent-2");
    assert_eq!(reply.body["dedup"]["recommendation"], "unique");
    Ok(())
}

/// Seed 001 compares subtypes separately (§3 step 3): a curiosity is no duplicate of a
/// lesson, even with the same body.
#[tokio::test]
async fn create_same_body_in_another_subtype_is_created() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let lesson = server.created(LESSON, "Weekends", BODY).await?;
    let reply = server.create_node("custom:curiosity", "Weekends?", BODY).await?;
    assert_eq!(
        reply.status,
        StatusCode::CREATED,
        "a curiosity with the body of lesson {lesson} was reported as its duplicate: {}",
        reply.body
    );
    Ok(())
}

/// Seed 001 judges a node by its title and body together (§3: `buildNodeText(title,
/// null, content)`): the same body under an unrelated title is another lesson.
#[tokio::test]
async fn create_same_body_under_another_title_is_judged_by_its_embedding() -> anyhow::Result<()> {
    let embedder = TableEmbedder::new().with("BTC: stop was too tight", "Widen the stop next time", axis(0)).with(
        "ETH: stop was too tight",
        "Widen the stop next time",
        toward(0, 0.5, 1),
    );
    let server = TestServer::start(Arc::new(embedder)).await?;
    server.created(LESSON, "BTC: stop was too tight", "Widen the stop next time").await?;
    let check = server.check("ETH: stop was too tight", "Widen the stop next time").await?;
    assert_eq!(check.body["recommendation"], "unique", "{}", check.body);
    let reply = server.create_node(LESSON, "ETH: stop was too tight", "Widen the stop next time").await?;
    assert_eq!(
        reply.status,
        StatusCode::CREATED,
        "check-similar says unique (cosine 0.5), yet create reports a 100% duplicate: {}",
        reply.body
    );
    Ok(())
}

/// Titles are limited to what the store keeps (1 KiB): a longer one is a 400 naming the
/// limit on create, edit and check-similar, before anything is embedded or written.
#[tokio::test]
async fn defect_11_title_over_the_store_limit_is_a_clear_400() -> anyhow::Result<()> {
    let embedder = Arc::new(TableEmbedder::new());
    let server = TestServer::start(embedder.clone()).await?;
    let limit = dedup_server::MAX_TITLE_BYTES;
    assert_eq!(limit, 1024);
    let fits = "t".repeat(limit);
    let id = server.created("custom:lesson", &fits, "A body").await?;
    let calls = embedder.calls();
    let over = "t".repeat(limit + 1);
    let expected = format!("is {} bytes, over the limit of {limit} bytes for a title", limit + 1);
    for reply in [
        server.create_node("custom:lesson", &over, "Another body").await?,
        server.patch(&format!("/v1/nodes/{id}"), &json!({"content_title": over})).await?,
        server
            .post("/v1/nodes/check-similar", &json!({"title": over, "content": "c", "subtype": "custom:lesson"}))
            .await?,
    ] {
        let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
        assert!(message.ends_with(&expected), "{message}");
    }
    assert_eq!(embedder.calls(), calls, "nothing was embedded");
    assert_eq!(server.all_nodes().await?.len(), 1, "nothing was written");
    // A body may be far longer than a title.
    server.created("custom:lesson", "Long body", &"b".repeat(60 << 10)).await?;
    Ok(())
}
