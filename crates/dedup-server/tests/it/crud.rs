//! Reading, listing, changing and deleting nodes, and edges.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{TableEmbedder, TestServer, axis, node, toward};

const LESSON: &str = "custom:lesson";

fn ids(page: &Value) -> Vec<String> {
    page["data"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn get_node_by_id_404_for_unknown_400_for_malformed() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let id = server.created(LESSON, "Never trade weekends", "Low volume weekends increase slippage risk").await?;
    let reply = server.get(&format!("/v1/nodes/{id}")).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["id"], id.as_str());
    assert_eq!(reply.body["content_title"], "Never trade weekends");
    let bare = server.get(&format!("/v1/nodes/{}", id.trim_start_matches("n_"))).await?;
    assert_eq!(bare.body, reply.body, "a bare number names the node too");

    let reply = server.get("/v1/nodes/n_999999").await?;
    assert_eq!(reply.expect_error(StatusCode::NOT_FOUND, "not_found")?, "no node n_999999");
    for bad in ["n_abc123", "n_", "0", "-4", "n_1.5", "xyz"] {
        let reply = server.get(&format!("/v1/nodes/{bad}")).await?;
        let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
        assert!(message.contains("invalid node id"), "{bad}: {message}");
    }
    Ok(())
}

#[tokio::test]
async fn list_nodes_filters_by_namespace_subtype_lifecycle_and_pages() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let mut lessons = Vec::new();
    for i in 0..3 {
        lessons.push(server.created(LESSON, &format!("Lesson {i}"), &format!("lesson body {i}")).await?);
    }
    let mut theses = Vec::new();
    for i in 0..2 {
        theses.push(server.created("custom:thesis", &format!("Thesis {i}"), &format!("thesis body {i}")).await?);
    }
    let mut elsewhere = node(LESSON, "Elsewhere", "in another namespace");
    elsewhere["namespace"] = json!("other");
    let other = server.post("/v1/nodes", &elsewhere).await?.id();
    server.patch(&format!("/v1/nodes/{}", lessons[1]), &json!({"state_lifecycle": "DORMANT"})).await?;

    let all = server.get("/v1/nodes").await?;
    all.expect(StatusCode::OK)?;
    assert_eq!(all.body.as_object().unwrap().keys().collect::<Vec<_>>(), ["data"], "one page: no next_after");
    let mut everything = lessons.clone();
    everything.extend(theses.clone());
    everything.push(other.clone());
    assert_eq!(ids(&all.body), everything, "id order");

    let cases: [(&str, Vec<String>); 7] = [
        ("namespace=other", vec![other.clone()]),
        ("namespace=default", everything[..5].to_vec()),
        ("subtype=custom:thesis", theses.clone()),
        ("subtype=custom:lesson&namespace=default", lessons.clone()),
        ("lifecycle=DORMANT", vec![lessons[1].clone()]),
        ("lifecycle=active&subtype=custom:lesson", vec![lessons[0].clone(), lessons[2].clone(), other.clone()]),
        ("namespace=nobody", vec![]),
    ];
    for (query, expected) in cases {
        let reply = server.get(&format!("/v1/nodes?{query}")).await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(ids(&reply.body), expected, "{query}");
    }

    let mut pages = Vec::new();
    let mut path = "/v1/nodes?limit=2".to_owned();
    loop {
        let page = server.get(&path).await?;
        page.expect(StatusCode::OK)?;
        pages.push(ids(&page.body));
        match page.body.get("next_after") {
            Some(after) => {
                assert_eq!(after, pages.last().unwrap().last().unwrap().as_str(), "next_after is the last id");
                path = format!("/v1/nodes?limit=2&after={}", after.as_str().unwrap());
            }
            None => break,
        }
    }
    assert_eq!(pages, [everything[0..2].to_vec(), everything[2..4].to_vec(), everything[4..6].to_vec()]);
    let reply = server.get(&format!("/v1/nodes?subtype=custom:lesson&limit=1&after={}", lessons[0])).await?;
    assert_eq!(ids(&reply.body), [lessons[1].clone()]);
    assert_eq!(reply.body["next_after"], lessons[1].as_str());

    for bad in [
        "limit=0",
        "limit=501",
        "limit=-1",
        "limit=x",
        "lifecycle=ZOMBIE",
        "after=n_x",
        "namespace=bad%20ns",
        "colour=red",
    ] {
        let reply = server.get(&format!("/v1/nodes?{bad}")).await?;
        reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    }
    Ok(())
}

#[tokio::test]
async fn patch_content_re_embeds_so_check_similar_finds_the_new_text() -> anyhow::Result<()> {
    let embedder = Arc::new(
        TableEmbedder::new()
            .with("Old title", "old body", axis(0))
            .with("Old title", "new body", axis(50))
            .with("New title", "new body", axis(80))
            .with("Query old", "q", toward(0, 0.97, 1))
            .with("Query new", "q", toward(50, 0.97, 51))
            .with("Query title", "q", toward(80, 0.97, 81)),
    );
    let server = TestServer::start(embedder).await?;
    let id = server.created(LESSON, "Old title", "old body").await?;
    let before = server.get(&format!("/v1/nodes/{id}")).await?;
    assert_eq!(server.check("Query old", "q").await?.body["matches"][0]["node_id"], id.as_str());

    let reply = server.patch(&format!("/v1/nodes/{id}"), &json!({"content_body": "new body"})).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["content_body"], "new body");
    assert_eq!(reply.body["content_title"], "Old title");
    assert_eq!(reply.body["created_at"], before.body["created_at"]);
    assert_ne!(reply.body["updated_at"], before.body["updated_at"]);
    assert_eq!(server.check("Query old", "q").await?.body["recommendation"], "unique", "the old vector is gone");
    let found = server.check("Query new", "q").await?;
    assert_eq!(found.body["matches"][0]["node_id"], id.as_str());
    assert_eq!(found.body["matches"][0]["similarity"], 0.97);

    // A new title changes the embedded text too.
    let reply = server.patch(&format!("/v1/nodes/{id}"), &json!({"content_title": "New title"})).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(server.check("Query new", "q").await?.body["recommendation"], "unique");
    let found = server.check("Query title", "q").await?;
    assert_eq!(found.body["matches"][0]["node_id"], id.as_str());
    assert_eq!(found.body["matches"][0]["title"], "New title");
    Ok(())
}

#[tokio::test]
async fn patch_lifecycle_and_metadata() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let mut body = node(LESSON, "Title", "Body");
    body["source"] = json!("chat");
    let id = server.post("/v1/nodes", &body).await?.id();
    for lifecycle in ["WEAK", "dormant", "ACTIVE"] {
        let reply = server.patch(&format!("/v1/nodes/{id}"), &json!({"state_lifecycle": lifecycle})).await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body["state_lifecycle"], lifecycle.to_uppercase());
        assert_eq!(reply.body["content_body"], "Body");
    }
    let change = json!({"metadata": {"source": null, "confidence": 0.8, "type": "overwritten?"}});
    let reply = server.patch(&format!("/v1/nodes/{id}"), &change).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["metadata"], json!({"confidence": 0.8}));
    assert_eq!(reply.body["type"], "concept", "the node type is not metadata");
    Ok(())
}

#[tokio::test]
async fn patch_rejects_bad_requests() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let id = server.created(LESSON, "Title", "Body").await?;
    server.created(LESSON, "Other", "Other body").await?;
    let path = format!("/v1/nodes/{id}");

    let reply = server.patch(&path, &json!({})).await?;
    let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    assert!(message.starts_with("nothing to update"), "{message}");
    let reply = server.patch(&path, &json!({"content": "x"})).await?;
    let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    assert!(message.contains("unknown field `content`"), "{message}");
    for bad in [
        json!({"state_lifecycle": "ZOMBIE"}),
        json!({"content_body": ""}),
        json!({"content_title": "   "}),
        json!({"content_body": "a\0b"}),
        json!({"content_body": 5}),
        json!({"metadata": [1]}),
    ] {
        let reply = server.patch(&path, &bad).await?;
        reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    }
    let reply = server.patch("/v1/nodes/n_424242", &json!({"state_lifecycle": "WEAK"})).await?;
    reply.expect_error(StatusCode::NOT_FOUND, "not_found")?;
    let reply = server.patch("/v1/nodes/n_x", &json!({"state_lifecycle": "WEAK"})).await?;
    reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;

    // Nodes are unique by similarity of title and body, not by body alone: the body of
    // another lesson under this title is an edit like any other (see check-similar).
    let unchanged = server.get(&path).await?;
    assert_eq!(
        (&unchanged.body["content_body"], &unchanged.body["state_lifecycle"]),
        (&json!("Body"), &json!("ACTIVE"))
    );
    Ok(())
}

#[tokio::test]
async fn delete_node_then_404_and_no_longer_matched() -> anyhow::Result<()> {
    let embedder = Arc::new(
        TableEmbedder::new()
            .with("Doomed", "to be deleted", toward(0, 0.97, 1))
            .with("Neighbour", "linked", toward(0, 0.94, 2))
            .with("Query", "q", axis(0)),
    );
    let server = TestServer::start(embedder).await?;
    let neighbour = server.created(LESSON, "Neighbour", "linked").await?;
    let doomed = server.created(LESSON, "Doomed", "to be deleted").await?;
    assert_eq!(server.get(&format!("/v1/nodes/{neighbour}/edges")).await?.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(server.check("Query", "q").await?.body["matches"][0]["node_id"], doomed.as_str());

    let reply = server.delete(&format!("/v1/nodes/{doomed}")).await?;
    reply.expect(StatusCode::NO_CONTENT)?;
    assert!(reply.text.is_empty());
    server.get(&format!("/v1/nodes/{doomed}")).await?.expect_error(StatusCode::NOT_FOUND, "not_found")?;
    server.delete(&format!("/v1/nodes/{doomed}")).await?.expect_error(StatusCode::NOT_FOUND, "not_found")?;
    server.get(&format!("/v1/nodes/{doomed}/edges")).await?.expect_error(StatusCode::NOT_FOUND, "not_found")?;
    server.delete("/v1/nodes/n_zz").await?.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;

    let check = server.check("Query", "q").await?;
    let found: Vec<&Value> = check.body["matches"].as_array().unwrap().iter().map(|m| &m["node_id"]).collect();
    assert_eq!(found, [&json!(neighbour)], "the deleted node is no longer a match");
    assert_eq!(
        server.get(&format!("/v1/nodes/{neighbour}/edges")).await?.body["data"],
        json!([]),
        "its edges went too"
    );
    assert_eq!(server.all_nodes().await?.len(), 1);
    // Its text is free again.
    server.created(LESSON, "Doomed", "to be deleted").await?;
    Ok(())
}

#[tokio::test]
async fn edges_are_created_once_and_listed_at_both_ends() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let a = server.created("custom:thesis", "A", "first thesis").await?;
    let b = server.created("custom:thesis", "B", "second thesis").await?;

    let edge = json!({"source_id": a, "target_id": b});
    let reply = server.post("/v1/edges", &edge).await?;
    reply.expect(StatusCode::CREATED)?;
    let keys: Vec<&str> = reply.body.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["created", "source_id", "target_id", "type", "created_at"]);
    assert_eq!((&reply.body["created"], &reply.body["type"]), (&json!(true), &json!("relates_to")));
    assert_eq!((&reply.body["source_id"], &reply.body["target_id"]), (&json!(a), &json!(b)));
    let again = server.post("/v1/edges", &edge).await?;
    again.expect(StatusCode::OK)?;
    assert_eq!(again.body["created"], false);
    assert_eq!(again.body["created_at"], reply.body["created_at"]);

    let supports = server.post("/v1/edges", &json!({"source_id": b, "target_id": a, "type": "supports"})).await?;
    supports.expect(StatusCode::CREATED)?;

    for id in [&a, &b] {
        let edges = server.get(&format!("/v1/nodes/{id}/edges")).await?;
        edges.expect(StatusCode::OK)?;
        let listed: Vec<(&str, &str, &str)> = edges.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["source_id"].as_str().unwrap(), e["target_id"].as_str().unwrap(), e["type"].as_str().unwrap()))
            .collect();
        assert_eq!(listed, [(a.as_str(), b.as_str(), "relates_to"), (b.as_str(), a.as_str(), "supports")], "{id}");
    }

    let reply = server.post("/v1/edges", &json!({"source_id": a, "target_id": "n_99999"})).await?;
    reply.expect_error(StatusCode::NOT_FOUND, "not_found")?;
    for bad in [
        json!({"source_id": a}),
        json!({"source_id": a, "target_id": a}),
        json!({"source_id": a, "target_id": b, "weight": 1}),
        json!({"source_id": a, "target_id": "n_bad"}),
        json!({"source_id": a, "target_id": b, "type": "not a name!"}),
    ] {
        let reply = server.post("/v1/edges", &bad).await?;
        reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    }
    assert_eq!(server.get(&format!("/v1/nodes/{a}/edges")).await?.body["data"].as_array().unwrap().len(), 2);
    Ok(())
}
