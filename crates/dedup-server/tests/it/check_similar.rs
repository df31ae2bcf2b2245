//! `POST /v1/nodes/check-similar` (seed 001 §3): required fields, limit, tiers, order,
//! rounding, recommendation, scope of the search, malformed input, no embedder.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{FailingEmbedder, TableEmbedder, TestServer, axis, node, random_vector, toward};

const LESSON: &str = "custom:lesson";
const REQUIRED: &str = "content, title, and subtype are required";

/// The matches of a check-similar reply as (node id, similarity, action, lifecycle).
fn matches(body: &Value) -> Vec<(String, f64, String, String)> {
    body["matches"]
        .as_array()
        .expect("matches is an array")
        .iter()
        .map(|m| {
            let keys: Vec<&str> = m.as_object().expect("a match is an object").keys().map(String::as_str).collect();
            assert_eq!(keys, ["node_id", "title", "similarity", "action", "lifecycle"], "match shape: {m}");
            (
                m["node_id"].as_str().expect("node_id").to_owned(),
                m["similarity"].as_f64().expect("similarity"),
                m["action"].as_str().expect("action").to_owned(),
                m["lifecycle"].as_str().expect("lifecycle").to_owned(),
            )
        })
        .collect()
}

fn check_body(title: &str, content: &str) -> Value {
    json!({"title": title, "content": content, "subtype": LESSON})
}

on_both_backends! {
    /// Matches at or above 0.90 only, most similar first, rounded to 4 decimals, with the
    /// tier of each; the recommendation follows the best tier.
    async fn check_similar_tiers_order_and_rounding(backend) {
        // Stored lessons at chosen cosines to the query (axis 0); pairwise they stay
        // below 0.95, so the gate lets each in.
        let stored = [(0.9712f32, 1), (0.9501, 2), (0.9499, 3), (0.9234, 4), (0.9001, 5), (0.8999, 6), (0.5, 7)];
        let mut embedder = TableEmbedder::new().with("Query", "weekend trading", axis(0));
        for (cos, other) in stored {
            embedder = embedder.with(&format!("Lesson {other}"), &format!("body {other}"), toward(0, cos, other));
        }
        // A second group on other axes: only a connect-tier match.
        embedder = embedder.with("Near", "one", toward(100, 0.9234, 101)).with("Query two", "q", axis(100));
        let server = TestServer::builder().backend(backend).embedder(Arc::new(embedder)).start().await?;
        let mut ids = Vec::new();
        for (_, other) in stored {
            ids.push(server.created(LESSON, &format!("Lesson {other}"), &format!("body {other}")).await?);
        }
        server.created(LESSON, "Near", "one").await?;

        let reply = server.check("Query", "weekend trading").await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body.as_object().unwrap().len(), 2, "{}", reply.body);
        assert_eq!(reply.body["recommendation"], "duplicate_found");
        let expected = [
            (ids[0].clone(), 0.9712, "duplicate"),
            (ids[1].clone(), 0.9501, "duplicate"),
            (ids[2].clone(), 0.9499, "connect"),
            (ids[3].clone(), 0.9234, "connect"),
            (ids[4].clone(), 0.9001, "connect"),
        ];
        let got = matches(&reply.body);
        assert_eq!(got.len(), expected.len(), "{}", reply.body);
        for ((id, similarity, action, lifecycle), (want_id, want_similarity, want_action)) in
            got.iter().zip(&expected)
        {
            assert_eq!((id, *similarity, action.as_str()), (want_id, *want_similarity, *want_action));
            assert_eq!(lifecycle, "ACTIVE");
        }
        assert_eq!(reply.body["matches"][0]["title"], "Lesson 1");

        let reply = server.check("Query two", "q").await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body["recommendation"], "similar_found", "{}", reply.body);
        assert_eq!(matches(&reply.body).iter().map(|m| (m.1, m.2.as_str())).collect::<Vec<_>>(), [(0.9234, "connect")]);

        let reply = server.check("Something else", "entirely").await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body, json!({"matches": [], "recommendation": "unique"}));
        Ok(())
    }
}

#[tokio::test]
async fn check_similar_requires_content_title_and_subtype() -> anyhow::Result<()> {
    let embedder = Arc::new(TableEmbedder::new());
    let server = TestServer::start(embedder.clone()).await?;
    let full = check_body("Avoid weekend trading", "Weekend trading is risky due to low volume and slippage");
    for field in ["content", "title", "subtype"] {
        for value in [None, Some(json!("")), Some(json!("   ")), Some(Value::Null)] {
            let mut body = full.clone();
            match &value {
                None => {
                    body.as_object_mut().unwrap().remove(field);
                }
                Some(value) => body[field] = value.clone(),
            }
            let reply = server.post("/v1/nodes/check-similar", &body).await?;
            let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
            assert_eq!(message, REQUIRED, "{field} = {value:?}");
        }
    }
    let reply = server.post("/v1/nodes/check-similar", &json!({})).await?;
    assert_eq!(reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?, REQUIRED);
    assert_eq!(embedder.calls(), 0, "nothing is embedded for an invalid request");
    Ok(())
}

#[tokio::test]
async fn check_similar_limit_defaults_to_5_and_is_bounded() -> anyhow::Result<()> {
    // Seven lessons between 0.905 and 0.965 of the query, pairwise below 0.95.
    let cosines: Vec<f32> = (0..7).map(|i| 0.905 + 0.01 * i as f32).collect();
    let embedder = TableEmbedder::new().with("Query", "q", axis(0));
    for (i, cos) in cosines.iter().enumerate() {
        embedder.set(&format!("Lesson {i}"), &format!("body {i}"), toward(0, *cos, i + 1));
    }
    let server = TestServer::start(Arc::new(embedder)).await?;
    for i in 0..cosines.len() {
        server.created(LESSON, &format!("Lesson {i}"), &format!("body {i}")).await?;
    }
    let reply = server.check("Query", "q").await?;
    reply.expect(StatusCode::OK)?;
    let similarities: Vec<f64> = matches(&reply.body).iter().map(|m| m.1).collect();
    assert_eq!(similarities, [0.965, 0.955, 0.945, 0.935, 0.925], "default limit 5, most similar first");

    for (limit, count) in [(1, 1), (3, 3), (7, 7), (100, 7)] {
        let mut body = check_body("Query", "q");
        body["limit"] = json!(limit);
        let reply = server.post("/v1/nodes/check-similar", &body).await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(matches(&reply.body).len(), count, "limit {limit}");
    }
    for limit in [json!(0), json!(-1), json!(101), json!(1_000_000)] {
        let mut body = check_body("Query", "q");
        body["limit"] = limit.clone();
        let reply = server.post("/v1/nodes/check-similar", &body).await?;
        let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
        assert!(message.contains("limit"), "limit {limit}: {message}");
    }
    Ok(())
}

#[tokio::test]
async fn check_similar_searches_only_its_subtype_and_namespace() -> anyhow::Result<()> {
    let same = toward(0, 0.99, 1);
    let embedder = TableEmbedder::new()
        .with("Query", "q", axis(0))
        .with("Curiosity", "c", same.clone())
        .with("Thesis", "t", same.clone())
        .with("Elsewhere", "e", same.clone());
    let server = TestServer::start(Arc::new(embedder)).await?;
    let curiosity = server.created("custom:curiosity", "Curiosity", "c").await?;
    let thesis = server.created("custom:thesis", "Thesis", "t").await?;
    let mut elsewhere = node(LESSON, "Elsewhere", "e");
    elsewhere["namespace"] = json!("other");
    let reply = server.post("/v1/nodes", &elsewhere).await?;
    reply.expect(StatusCode::CREATED)?;
    let other = reply.id();

    let reply = server.check("Query", "q").await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body, json!({"matches": [], "recommendation": "unique"}), "no lesson in the default namespace");

    for (subtype, namespace, expected) in
        [("custom:curiosity", None, &curiosity), ("custom:thesis", None, &thesis), (LESSON, Some("other"), &other)]
    {
        let mut body = json!({"title": "Query", "content": "q", "subtype": subtype});
        if let Some(namespace) = namespace {
            body["namespace"] = json!(namespace);
        }
        let reply = server.post("/v1/nodes/check-similar", &body).await?;
        reply.expect(StatusCode::OK)?;
        let found = matches(&reply.body);
        assert_eq!(found.len(), 1, "{subtype} in {namespace:?}: {}", reply.body);
        assert_eq!((&found[0].0, found[0].1, found[0].2.as_str()), (expected, 0.99, "duplicate"));
    }
    let mut body = check_body("Query", "q");
    body["namespace"] = json!("empty-namespace");
    let reply = server.post("/v1/nodes/check-similar", &body).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["recommendation"], "unique");
    Ok(())
}

/// The seed's query took the 15 most recent nodes (`limit * 3`); every node counts here.
#[tokio::test]
async fn check_similar_searches_all_nodes_so_the_oldest_is_found() -> anyhow::Result<()> {
    let embedder =
        Arc::new(TableEmbedder::new().with("Oldest", "first", toward(0, 0.97, 1)).with("Query", "q", axis(0)));
    let server = TestServer::start(embedder).await?;
    let oldest = server.created(LESSON, "Oldest", "first").await?;
    for i in 1..60 {
        server.created(LESSON, &format!("Lesson {i}"), &format!("unrelated lesson number {i}")).await?;
    }
    assert_eq!(server.all_nodes().await?.len(), 60);
    let reply = server.check("Query", "q").await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["recommendation"], "duplicate_found");
    let found = matches(&reply.body);
    assert_eq!(found.len(), 1, "{}", reply.body);
    assert_eq!((&found[0].0, found[0].1), (&oldest, 0.97));
    Ok(())
}

#[tokio::test]
async fn check_similar_shows_the_lifecycle_of_each_match() -> anyhow::Result<()> {
    let embedder = TableEmbedder::new().with("Query", "q", axis(0)).with("Old", "o", toward(0, 0.96, 1));
    let server = TestServer::start(Arc::new(embedder)).await?;
    let id = server.created(LESSON, "Old", "o").await?;
    for lifecycle in ["DORMANT", "WEAK", "ACTIVE"] {
        server
            .patch(&format!("/v1/nodes/{id}"), &json!({"state_lifecycle": lifecycle}))
            .await?
            .expect(StatusCode::OK)?;
        let reply = server.check("Query", "q").await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(matches(&reply.body)[0].3, lifecycle);
        assert_eq!(reply.body["recommendation"], "duplicate_found", "a dormant duplicate is still a duplicate");
    }
    Ok(())
}

#[tokio::test]
async fn check_similar_rejects_wrong_json_types_and_unknown_fields() -> anyhow::Result<()> {
    let embedder = Arc::new(TableEmbedder::new());
    let server = TestServer::start(embedder.clone()).await?;
    let wrong = [
        ("content", json!(5)),
        ("title", json!(["a"])),
        ("subtype", json!({"kind": "lesson"})),
        ("limit", json!("5")),
        ("limit", json!(2.5)),
        ("limit", json!(true)),
        ("namespace", json!(7)),
    ];
    for (field, value) in wrong {
        let mut body = check_body("Title", "Content");
        body[field] = value.clone();
        let reply = server.post("/v1/nodes/check-similar", &body).await?;
        let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
        assert!(message.starts_with("invalid JSON body"), "{field} = {value}: {message}");
    }
    let mut body = check_body("Title", "Content");
    body["threshold"] = json!(0.5);
    let reply = server.post("/v1/nodes/check-similar", &body).await?;
    let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    assert!(message.contains("unknown field `threshold`"), "{message}");

    for raw in ["{not json", "[1, 2]", "\"text\"", ""] {
        let request = server
            .request(reqwest::Method::POST, "/v1/nodes/check-similar")
            .header("content-type", "application/json")
            .body(raw);
        let reply = crate::support::send(request).await?;
        reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    }
    let request =
        server.request(reqwest::Method::POST, "/v1/nodes/check-similar").body(check_body("T", "C").to_string());
    let reply = crate::support::send(request).await?;
    reply.expect_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")?;

    for (field, value) in
        [("subtype", "bad subtype!"), ("namespace", "no spaces allowed"), ("content", "nul\0byte"), ("title", "t\0")]
    {
        let mut body = check_body("Title", "Content");
        body[field] = json!(value);
        let reply = server.post("/v1/nodes/check-similar", &body).await?;
        reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    }
    let reply = server.post("/v1/nodes/check-similar", &check_body("Title", &"x".repeat(64 * 1024 + 1))).await?;
    let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    assert!(message.contains("over the limit"), "{message}");
    assert_eq!(embedder.calls(), 0, "nothing is embedded for an invalid request");
    assert!(server.all_nodes().await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn check_similar_without_an_embedder_is_503() -> anyhow::Result<()> {
    let server = TestServer::builder().no_embedder().start().await?;
    let reply = server.check("Avoid weekend trading", "Weekend trading is risky").await?;
    let message = reply.expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable")?;
    assert!(message.starts_with("embedding generation failed"), "{message}");

    let server = TestServer::start(Arc::new(FailingEmbedder)).await?;
    let reply = server.check("Avoid weekend trading", "Weekend trading is risky").await?;
    let message = reply.expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable")?;
    assert!(
        message.starts_with("embedding generation failed: ") && message.contains("connection refused"),
        "{message}"
    );
    Ok(())
}

#[tokio::test]
async fn check_similar_writes_nothing() -> anyhow::Result<()> {
    let embedder = Arc::new(TableEmbedder::new().with("Query", "q", random_vector("x")));
    let server = TestServer::start(embedder).await?;
    for _ in 0..3 {
        server.check("Query", "q").await?.expect(StatusCode::OK)?;
    }
    assert!(server.all_nodes().await?.is_empty());
    // A later create of the same text is unique: the checks stored nothing.
    let reply = server.create_node(LESSON, "Query", "q").await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body["dedup"]["recommendation"], "unique");
    Ok(())
}

#[tokio::test]
async fn check_similar_ignores_nodes_without_a_vector() -> anyhow::Result<()> {
    // A node stored while the embedder was down has no vector: it cannot match.
    let first = TestServer::start(Arc::new(FailingEmbedder)).await?;
    let reply = first.create_node(LESSON, "Query", "q").await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body["dedup"]["status"], "skipped");
    let db = first.stop().await?;
    let embedder = Arc::new(TableEmbedder::new().with("Query", "q", axis(0)));
    let server = TestServer::builder().db(db).embedder(embedder).start().await?;
    let reply = server.check("Query", "q").await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body, json!({"matches": [], "recommendation": "unique"}));
    // Nor does it block a repeat: nodes are judged by their vectors, and it has none.
    let reply = server.create_node(LESSON, "Query", "q").await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body["dedup"]["recommendation"], "unique");
    // The repeat has a vector, so the next one is caught.
    let reply = server.create_node(LESSON, "Query", "q").await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["created"], false);
    Ok(())
}
