//! Seed 001 §11's edge cases, one test each, with the real model where wording matters.

use std::sync::Arc;

use dedup_embed::Embedder;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Reply, TableEmbedder, TestServer, axis, local_model, model_cosine, round4, tier, toward};

const LESSON: &str = "custom:lesson";
const TITLE: &str = "Weekend trading";
const ORIGINAL: &str = "Never trade during low-volume weekends";
const REPHRASED: &str = "Avoid trading on weekends when volume is low";
const REFINED: &str = "Never trade during low-volume weekends UNLESS funding is extremely negative";

/// Checks that check-similar and create agree with the tier of `cosine`, the similarity
/// the model gives the new node and the stored node `stored`.
async fn assert_verdict(server: &TestServer, stored: &str, new: (&str, &str), cosine: f32) -> anyhow::Result<Reply> {
    let expected = tier(cosine);
    let check = server.check(new.0, new.1).await?;
    check.expect(StatusCode::OK)?;
    let recommendation = match expected {
        "duplicate" => "duplicate_found",
        "connect" => "similar_found",
        _ => "unique",
    };
    assert_eq!(check.body["recommendation"], recommendation, "cosine {cosine}: {}", check.body);
    let matches = check.body["matches"].as_array().unwrap();
    if expected == "unique" {
        assert!(matches.is_empty(), "{}", check.body);
    } else {
        assert_eq!(matches.len(), 1, "{}", check.body);
        assert_eq!(matches[0]["node_id"], stored);
        assert_eq!(matches[0]["action"], expected);
        let reported = matches[0]["similarity"].as_f64().unwrap();
        assert!((reported - round4(cosine)).abs() <= 0.0002, "reported {reported}, measured {cosine}");
    }

    let created = server.create_node(LESSON, new.0, new.1).await?;
    if expected == "duplicate" {
        created.expect(StatusCode::OK)?;
        assert_eq!(created.body["id"], stored);
    } else {
        created.expect(StatusCode::CREATED)?;
        assert_eq!(created.body["dedup"]["recommendation"], recommendation);
        let linked = if expected == "connect" { json!([stored]) } else { json!([]) };
        assert_eq!(created.body["dedup"]["linked"], linked, "{}", created.body);
        let edges = server.get(&format!("/v1/nodes/{}/edges", created.id())).await?;
        let targets: Vec<&Value> = edges.body["data"].as_array().unwrap().iter().map(|e| &e["target_id"]).collect();
        assert_eq!(json!(targets), linked);
    }
    Ok(created)
}

/// §11.1: with no lesson at all, the check is `unique` and the lesson is created.
#[tokio::test]
async fn edge_11_1_first_ever_lesson_is_unique() -> anyhow::Result<()> {
    let model = local_model();
    let server = TestServer::start(model.clone()).await?;
    let (title, body) = ("Never trade weekends", "Low volume weekends increase slippage risk");
    for subtype in [LESSON, "custom:curiosity"] {
        let body = json!({"title": title, "content": body, "subtype": subtype});
        let reply = server.post("/v1/nodes/check-similar", &body).await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body, json!({"matches": [], "recommendation": "unique"}));
    }
    let reply = server.create_node(LESSON, title, body).await?;
    reply.expect(StatusCode::CREATED)?;
    let first = reply.id();
    assert_eq!(
        reply.body["dedup"],
        json!({"status": "checked", "recommendation": "unique", "matches": [], "linked": []})
    );
    // The first curiosity is unique too: the lesson is another subtype.
    let reply =
        server.create_node("custom:curiosity", "Why are weekends thin?", "Who provides liquidity on Sundays").await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body["dedup"]["recommendation"], "unique");

    // The seed's quick verification (§12): its verdict follows the model's similarity.
    let paraphrase = ("Avoid weekend trading", "Weekend trading is risky due to low volume and slippage");
    let cosine = model_cosine(&model, (title, body), paraphrase).await?;
    assert_verdict(&server, &first, paraphrase, cosine).await?;
    Ok(())
}

on_both_backends! {
    /// §11.2: the seed's race (the first node's embedding not yet written) cannot happen:
    /// the vector is stored with the node, and the gate checks again under the
    /// namespace's write lock. Two identical POSTs at once, two paraphrases at once, and
    /// two POSTs one right after the other: one node each time.
    async fn edge_11_2_same_lesson_twice_in_one_burst_second_is_caught(backend) {
        // Every embedding call waits until both requests are embedding: both searches
        // run before either insert.
        let embedder = Arc::new(
            TableEmbedder::new()
                .with("Never trade weekends", "Low volume weekends increase slippage risk", axis(0))
                .with("Avoid weekend trading", "Weekend trading is risky due to low volume", toward(0, 0.97, 1))
                .with_barrier(2),
        );
        let server = TestServer::builder().backend(backend).embedder(embedder.clone()).start().await?;
        let same = crate::support::node(LESSON, "Skip weekends", "Weekend books are thin");
        let (a, b) = tokio::join!(server.post("/v1/nodes", &same), server.post("/v1/nodes", &same));
        assert_one_created(&[a?, b?])?;

        let first = crate::support::node(LESSON, "Never trade weekends", "Low volume weekends increase slippage risk");
        let second =
            crate::support::node(LESSON, "Avoid weekend trading", "Weekend trading is risky due to low volume");
        let (a, b) = tokio::join!(server.post("/v1/nodes", &first), server.post("/v1/nodes", &second));
        let replies = [a?, b?];
        assert_one_created(&replies)?;
        let duplicate = replies.iter().find(|r| r.status == StatusCode::OK).unwrap();
        assert_eq!(duplicate.body["duplicate_of"]["similarity"], 0.97, "{}", duplicate.body);
        assert_eq!(server.all_nodes().await?.len(), 2);
        assert_eq!(embedder.calls(), 4);
        drop(server);

        // One right after the other, no barrier.
        let embedder = Arc::new(TableEmbedder::new());
        let server = TestServer::builder().backend(backend).embedder(embedder).start().await?;
        let first = server.post("/v1/nodes", &same).await?;
        let second = server.post("/v1/nodes", &same).await?;
        assert_one_created(&[first, second])?;
        assert_eq!(server.all_nodes().await?.len(), 1);
        Ok(())
    }

    /// §11.2 across processes: two servers on one database (two store handles, as two
    /// processes would have) get the same lesson at once; one node is stored.
    async fn edge_11_2_two_servers_on_one_database_store_one_node(backend) {
        let embedder = Arc::new(
            TableEmbedder::new()
                .with("Never trade weekends", "Low volume weekends increase slippage risk", axis(0))
                .with("Avoid weekend trading", "Weekend trading is risky due to low volume", toward(0, 0.97, 1))
                .with_barrier(2),
        );
        let one = TestServer::builder().backend(backend).embedder(embedder.clone()).start().await?;
        let two = TestServer::builder().shared(one.db()).embedder(embedder.clone()).start().await?;
        let first = crate::support::node(LESSON, "Never trade weekends", "Low volume weekends increase slippage risk");
        let second =
            crate::support::node(LESSON, "Avoid weekend trading", "Weekend trading is risky due to low volume");
        let (a, b) = tokio::join!(one.post("/v1/nodes", &first), two.post("/v1/nodes", &second));
        assert_one_created(&[a?, b?])?;
        let (a, b) = tokio::join!(one.post("/v1/nodes", &first), two.post("/v1/nodes", &first));
        let replies = [a?, b?];
        assert!(replies.iter().all(|r| r.status == StatusCode::OK), "both are duplicates now");
        assert_eq!(one.all_nodes().await?.len(), 1);
        assert_eq!(two.all_nodes().await?.len(), 1);
        Ok(())
    }
}

/// Exactly one reply is 201 and the other a 200 duplicate of it.
fn assert_one_created(replies: &[Reply; 2]) -> anyhow::Result<()> {
    let created: Vec<&Reply> = replies.iter().filter(|r| r.status == StatusCode::CREATED).collect();
    let duplicates: Vec<&Reply> = replies.iter().filter(|r| r.status == StatusCode::OK).collect();
    anyhow::ensure!(
        created.len() == 1 && duplicates.len() == 1,
        "expected one 201 and one 200: {:?}",
        replies.iter().map(|r| (r.status, &r.body)).collect::<Vec<_>>()
    );
    assert_eq!(duplicates[0].body["created"], false);
    assert_eq!(duplicates[0].body["id"], created[0].body["id"]);
    assert_eq!(duplicates[0].body["duplicate_of"]["node_id"], created[0].body["id"]);
    assert_eq!(duplicates[0].body["occurrence_count"], 2);
    Ok(())
}

/// §11.3: a rephrasing scores below 0.95 with the real model, so it is kept (and linked
/// when at or above 0.90); the verdict follows the measured similarity.
#[tokio::test]
async fn edge_11_3_slight_rephrasing() -> anyhow::Result<()> {
    let model = local_model();
    let server = TestServer::start(model.clone()).await?;
    let stored = server.created(LESSON, TITLE, ORIGINAL).await?;
    let cosine = model_cosine(&model, (TITLE, ORIGINAL), (TITLE, REPHRASED)).await?;
    assert!(cosine < 0.95, "the rephrasing scores {cosine}: the seed expects it below the duplicate tier");
    assert!(cosine > 0.80, "the rephrasing scores {cosine}: far below the seed's expected 0.90-0.96");
    let created = assert_verdict(&server, &stored, (TITLE, REPHRASED), cosine).await?;
    assert_eq!(created.body["created"], true, "not a duplicate");
    assert_eq!(server.all_nodes().await?.len(), 2);

    // The bare sentences, as the seed words them, score lower still.
    let bare = model_cosine(&model, (ORIGINAL, ORIGINAL), (REPHRASED, REPHRASED)).await?;
    assert!(bare < 0.95, "{bare}");
    Ok(())
}

/// §11.4: a refinement adds information: below 0.95, so created (connect or unique).
#[tokio::test]
async fn edge_11_4_refinement_lands_in_connect_or_unique() -> anyhow::Result<()> {
    let model = local_model();
    let server = TestServer::start(model.clone()).await?;
    let stored = server.created(LESSON, TITLE, ORIGINAL).await?;
    let cosine = model_cosine(&model, (TITLE, ORIGINAL), (TITLE, REFINED)).await?;
    assert!(matches!(tier(cosine), "connect" | "unique"), "the refinement scores {cosine}");
    let created = assert_verdict(&server, &stored, (TITLE, REFINED), cosine).await?;
    assert_eq!(created.body["created"], true);
    // The same lesson again is a duplicate of whichever node it repeats.
    let again = server.create_node(LESSON, TITLE, REFINED).await?;
    again.expect(StatusCode::OK)?;
    assert_eq!(again.body["id"], created.body["id"]);
    assert_eq!(model.model_id(), dedup_embed::LOCAL_MODEL_ID);
    Ok(())
}

/// §11.5: lessons that duplicate each other predate the gate (stored by a server whose
/// gate only caught exact repeats). A check returns all of them, most similar first, and
/// the create reports `matches[0]`.
#[tokio::test]
async fn edge_11_5_several_duplicates_highest_first() -> anyhow::Result<()> {
    let embedder = Arc::new(
        TableEmbedder::new()
            .with("Old 96", "weekend lesson, first wording", toward(0, 0.96, 1))
            .with("Old 99", "weekend lesson, second wording", toward(0, 0.99, 2))
            .with("Old 97", "weekend lesson, third wording", toward(0, 0.97, 3))
            .with("Old 92", "weekend lesson, loosely", toward(0, 0.92, 4))
            .with("New", "weekend lesson, once more", axis(0)),
    );
    let before = TestServer::builder()
        .embedder(embedder.clone())
        .config(|c| {
            c.nodes.duplicate_threshold = 0.999;
            c.nodes.connect_threshold = 0.999;
        })
        .start()
        .await?;
    let mut ids = Vec::new();
    for (title, body) in [
        ("Old 96", "weekend lesson, first wording"),
        ("Old 99", "weekend lesson, second wording"),
        ("Old 97", "weekend lesson, third wording"),
        ("Old 92", "weekend lesson, loosely"),
    ] {
        ids.push(before.created(LESSON, title, body).await?);
    }
    let db = before.stop().await?;
    let server = TestServer::builder().db(db).embedder(embedder).start().await?;

    let check = server.check("New", "weekend lesson, once more").await?;
    check.expect(StatusCode::OK)?;
    assert_eq!(check.body["recommendation"], "duplicate_found");
    let found: Vec<(&str, f64, &str)> = check.body["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["node_id"].as_str().unwrap(), m["similarity"].as_f64().unwrap(), m["action"].as_str().unwrap()))
        .collect();
    assert_eq!(
        found,
        [
            (ids[1].as_str(), 0.99, "duplicate"),
            (ids[2].as_str(), 0.97, "duplicate"),
            (ids[0].as_str(), 0.96, "duplicate"),
            (ids[3].as_str(), 0.92, "connect"),
        ]
    );

    let reply = server.create_node(LESSON, "New", "weekend lesson, once more").await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["created"], false);
    assert_eq!(reply.body["id"], ids[1].as_str());
    assert_eq!(reply.body["duplicate_of"], check.body["matches"][0]);
    assert_eq!(reply.body["dedup"]["matches"], check.body["matches"]);
    assert_eq!(
        reply.body["message"],
        format!("Duplicate: already stored as \"Old 99\" ({}). Not created. (99% similar)", ids[1])
    );
    assert_eq!(server.all_nodes().await?.len(), 4, "one feedback, nothing stored");
    Ok(())
}
