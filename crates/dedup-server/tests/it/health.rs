//! `/healthz` tells whether the embedder can embed, not merely whether one is configured,
//! without embedding on every call.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use dedup_core::Embedding;
use dedup_embed::{Embedder, LocalEmbedder, ModelDir};
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::{DIMS, FailingEmbedder, TableEmbedder, TestServer, random_vector};

async fn health(server: &TestServer) -> anyhow::Result<Value> {
    let reply = server.get("/healthz").await?;
    reply.expect(StatusCode::OK)?;
    Ok(reply.body.clone())
}

#[tokio::test]
async fn defect_8_healthz_reports_an_embedder_that_cannot_embed() -> anyhow::Result<()> {
    // A remote embedder that is down.
    let server = TestServer::start(Arc::new(FailingEmbedder)).await?;
    let body = health(&server).await?;
    assert_eq!(body["status"], "ok", "the database answers: {body}");
    assert_eq!(body["embedder"], false, "{body}");
    assert_eq!(body["embedder_model"], "failing-384");
    assert!(body["embedder_error"].as_str().is_some_and(|e| e.contains("connection refused")), "{body}");

    // The local model, not installed: the error names the fetch command.
    let empty = tempfile::tempdir()?;
    let local = Arc::new(LocalEmbedder::new(ModelDir::new(empty.path())));
    let server = TestServer::start(local).await?;
    let body = health(&server).await?;
    assert_eq!(body["embedder"], false, "{body}");
    let error = body["embedder_error"].as_str().unwrap_or_default();
    assert!(error.contains("cargo xtask fetch-model"), "{body}");

    // No embedder at all.
    let server = TestServer::builder().no_embedder().start().await?;
    let body = health(&server).await?;
    assert_eq!(
        (&body["embedder"], &body["embedder_error"]),
        (&Value::Bool(false), &"no embedder is configured".into())
    );
    Ok(())
}

#[tokio::test]
async fn defect_8_healthz_probes_at_most_once_while_the_embedder_works() -> anyhow::Result<()> {
    let embedder = Arc::new(TableEmbedder::new());
    let server = TestServer::start(embedder.clone()).await?;
    let checks: Vec<_> =
        (0..20).map(|_| tokio::spawn(crate::support::send(server.request(reqwest::Method::GET, "/healthz")))).collect();
    for check in checks {
        let reply = check.await??;
        let body = &reply.expect(StatusCode::OK)?.body;
        assert_eq!(body["embedder"], true, "{body}");
        assert_eq!(body["embedder_model"], "table-384");
        assert!(body.get("embedder_error").is_none(), "{body}");
    }
    assert_eq!(embedder.calls(), 1, "20 concurrent health checks share one probe");
    server.created("custom:lesson", "Title", "Body").await?;
    health(&server).await?;
    assert_eq!(embedder.calls(), 2, "a request's embedding vouches for the embedder: no probe");
    Ok(())
}

/// Works until switched off.
struct SwitchEmbedder {
    up: AtomicBool,
}

#[async_trait]
impl Embedder for SwitchEmbedder {
    fn model_id(&self) -> &str {
        "switch-384"
    }

    fn dims(&self) -> usize {
        DIMS
    }

    async fn embed(&self, texts: &[String]) -> dedup_embed::Result<Vec<Embedding>> {
        if self.up.load(Ordering::SeqCst) {
            Ok(texts.iter().map(|t| random_vector(t)).collect())
        } else {
            Err(dedup_embed::Error::Unavailable { attempts: 1, last_error: "connection reset".to_owned() })
        }
    }
}

#[tokio::test]
async fn defect_8_healthz_sees_a_failed_embedding_at_once() -> anyhow::Result<()> {
    let embedder = Arc::new(SwitchEmbedder { up: AtomicBool::new(true) });
    let server = TestServer::start(embedder.clone()).await?;
    assert_eq!(health(&server).await?["embedder"], true);
    embedder.up.store(false, Ordering::SeqCst);
    // The node is stored unchecked (fail-open), and the failure is what /healthz now says.
    let reply = server.create_node("custom:lesson", "Title", "Body").await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body["dedup"]["status"], "skipped");
    let body = health(&server).await?;
    assert_eq!(body["embedder"], false, "{body}");
    assert!(body["embedder_error"].as_str().is_some_and(|e| e.contains("connection reset")), "{body}");
    // Back up: the next request that embeds says so.
    embedder.up.store(true, Ordering::SeqCst);
    server.check("Title", "Body").await?.expect(StatusCode::OK)?;
    assert_eq!(health(&server).await?["embedder"], true);
    Ok(())
}

#[tokio::test]
async fn defect_8_nodes_stored_while_the_embedder_was_down_are_counted_and_backfilled() -> anyhow::Result<()> {
    let embedder = Arc::new(SwitchEmbedder { up: AtomicBool::new(false) });
    let server = TestServer::start(embedder.clone()).await?;
    // A namespace of its own: the metrics recorder is shared by every server of this process.
    let namespace = "backfill-test";
    let create = |title: &str, body: &str| {
        let mut node = crate::support::node("custom:lesson", title, body);
        node["namespace"] = namespace.into();
        node
    };
    let reply = server.post("/v1/nodes", &create("Never trade weekends", "Low volume raises slippage")).await?;
    reply.expect(StatusCode::CREATED)?;
    let first = reply.id();
    assert_eq!(health(&server).await?["unembedded"], 1);
    let metrics = server.metrics().await?;
    let gauge = format!("memdedup_memories_unembedded{{domain=\"global\",namespace=\"{namespace}\"}} 1");
    assert!(metrics.lines().any(|l| l == gauge), "no `{gauge}` in\n{metrics}");

    // The embedder is back: the next create backfills the first node in the background.
    embedder.up.store(true, Ordering::SeqCst);
    server.post("/v1/nodes", &create("Size positions by volatility", "Risk one percent per trade")).await?;
    let mut unembedded = Value::Null;
    for _ in 0..200 {
        unembedded = health(&server).await?["unembedded"].clone();
        if unembedded == 0 {
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(unembedded, 0, "the backfill did not run");
    // The node was embedded as "title. body", as a create would have: an exact repeat scores 1.
    let check = serde_json::json!({"title": "Never trade weekends", "content": "Low volume raises slippage",
                                   "subtype": "custom:lesson", "namespace": namespace});
    let seen = server.post("/v1/nodes/check-similar", &check).await?;
    assert_eq!(seen.body["matches"][0]["node_id"], serde_json::json!(first), "{}", seen.body);
    assert_eq!(seen.body["matches"][0]["similarity"], 1.0);
    Ok(())
}
