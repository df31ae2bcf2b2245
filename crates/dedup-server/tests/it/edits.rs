//! `PATCH /v1/nodes/{id}` judged like `POST /v1/nodes`: an edit that would make a node a
//! duplicate of another live node of its subtype and namespace is refused with 409,
//! naming that node, and changes nothing.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{TableEmbedder, TestServer, axis, node, toward};

const TITLE: &str = "Never trade weekends";
const BODY: &str = "Low volume weekends increase slippage risk";

/// The node as `GET /v1/nodes/{id}` shows it.
async fn read(server: &TestServer, id: &str) -> anyhow::Result<Value> {
    let reply = server.get(&format!("/v1/nodes/{id}")).await?;
    reply.expect(StatusCode::OK)?;
    Ok(reply.body.clone())
}

/// Asserts a 409 naming `existing`, and that `id` kept `before`.
async fn assert_refused(
    server: &TestServer,
    id: &str,
    patch: &Value,
    existing: &str,
    before: &Value,
) -> anyhow::Result<String> {
    let reply = server.patch(&format!("/v1/nodes/{id}"), patch).await?;
    let message = reply.expect_error(StatusCode::CONFLICT, "conflict")?;
    assert!(message.contains(&format!("({existing},")), "the error names {existing}: {message}");
    assert_eq!(&read(server, id).await?, before, "a refused edit writes nothing");
    Ok(message)
}

on_both_backends! {
    async fn defect_7_patch_cannot_create_exact_duplicate_node(backend) {
        // Without an embedder, as with one: equal text is found by reading, not embedding.
        for embedder in [None, Some(Arc::new(TableEmbedder::new()))] {
            let mut builder = TestServer::builder().backend(backend);
            if let Some(embedder) = embedder {
                builder = builder.embedder(embedder);
            }
            let server = builder.start().await?;
            let first = server.created("custom:lesson", TITLE, BODY).await?;
            let second = server.created("custom:lesson", "Size positions small", "Small positions survive gaps").await?;
            let before = read(&server, &second).await?;

            let both = json!({"content_title": TITLE, "content_body": BODY});
            let message = assert_refused(&server, &second, &both, &first, &before).await?;
            assert!(message.contains(TITLE) && message.contains("100% similar"), "{message}");
            // Case and spacing do not make it new, as for the content hash.
            let shouted = json!({"content_title": "NEVER trade  weekends", "content_body": format!(" {BODY}\n")});
            assert_refused(&server, &second, &shouted, &first, &before).await?;
            // One field at a time: the other is the node's own.
            server.patch(&format!("/v1/nodes/{second}"), &json!({"content_body": BODY})).await?.expect(StatusCode::OK)?;
            let before = read(&server, &second).await?;
            assert_refused(&server, &second, &json!({"content_title": TITLE}), &first, &before).await?;

            let nodes = server.all_nodes().await?;
            let equal = nodes.iter().filter(|n| n["content_title"] == TITLE && n["content_body"] == BODY).count();
            assert_eq!(equal, 1, "one live node with that text: {nodes:?}");
        }
        Ok(())
    }

    async fn defect_7_patch_to_the_duplicate_tier_is_refused(backend) {
        let embedder = TableEmbedder::new()
            .with(TITLE, BODY, axis(0))
            .with("Skip weekend trades", "Thin weekend books slip", toward(0, 0.97, 1))
            .with("Weekend liquidity", "Weekend books are thinner", toward(0, 0.92, 2));
        let server = TestServer::builder().backend(backend).embedder(Arc::new(embedder)).start().await?;
        let first = server.created("custom:lesson", TITLE, BODY).await?;
        let second = server.created("custom:lesson", "Size positions small", "Small positions survive gaps").await?;
        let before = read(&server, &second).await?;
        let near = json!({"content_title": "Skip weekend trades", "content_body": "Thin weekend books slip"});
        let message = assert_refused(&server, &second, &near, &first, &before).await?;
        assert!(message.contains("97% similar"), "{message}");
        // The connect tier is no duplicate, as for POST.
        let related = json!({"content_title": "Weekend liquidity", "content_body": "Weekend books are thinner"});
        let reply = server.patch(&format!("/v1/nodes/{second}"), &related).await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body["content_title"], "Weekend liquidity");
        Ok(())
    }

    async fn defect_7_patch_gate_spares_own_text_other_namespaces_and_ungated_subtypes(backend) {
        let server = TestServer::builder().backend(backend).embedder(Arc::new(TableEmbedder::new())).start().await?;
        let first = server.created("custom:lesson", TITLE, BODY).await?;
        // Its own text again, and a lifecycle change with it.
        let again = json!({"content_title": TITLE, "content_body": BODY, "state_lifecycle": "WEAK"});
        server.patch(&format!("/v1/nodes/{first}"), &again).await?.expect(StatusCode::OK)?;
        // The same text in another namespace or another gated subtype is no duplicate.
        let mut elsewhere = node("custom:lesson", "Other", "Other body");
        elsewhere["namespace"] = json!("trading");
        let reply = server.post("/v1/nodes", &elsewhere).await?;
        reply.expect(StatusCode::CREATED)?;
        let both = json!({"content_title": TITLE, "content_body": BODY});
        server.patch(&format!("/v1/nodes/{}", reply.id()), &both).await?.expect(StatusCode::OK)?;
        let curiosity = server.created("custom:curiosity", "A question", "Why?").await?;
        server.patch(&format!("/v1/nodes/{curiosity}"), &both).await?.expect(StatusCode::OK)?;
        // Subtypes outside the gate may repeat, as POST lets them.
        let thesis = server.created("custom:thesis", TITLE, BODY).await?;
        let other = server.created("custom:thesis", "BTC range", "60k to 70k").await?;
        server.patch(&format!("/v1/nodes/{other}"), &both).await?.expect(StatusCode::OK)?;
        assert_ne!(thesis, other);
        Ok(())
    }
}

/// Two edits racing to give two nodes the same new text: one wins, the other gets 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_7_racing_patches_leave_no_duplicate() -> anyhow::Result<()> {
    // Every embedding takes a while, so both edits embed at once, then check and write.
    let embedder = Arc::new(TableEmbedder::new().with_delay(Duration::from_millis(200)));
    let server = TestServer::start(embedder).await?;
    let ids = [
        server.created("custom:lesson", "One", "First body").await?,
        server.created("custom:lesson", "Two", "Second body").await?,
    ];
    let both = json!({"content_title": TITLE, "content_body": BODY});
    let paths = ids.map(|id| format!("/v1/nodes/{id}"));
    let (a, b) = tokio::join!(server.patch(&paths[0], &both), server.patch(&paths[1], &both));
    let mut statuses = [a?.status, b?.status];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
    let nodes = server.all_nodes().await?;
    assert_eq!(nodes.iter().filter(|n| n["content_title"] == TITLE).count(), 1, "{nodes:?}");
    Ok(())
}
