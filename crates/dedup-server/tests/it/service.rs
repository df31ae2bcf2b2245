//! Operations: health, metrics, the OpenAPI document, request ids, JSON errors for
//! unknown routes, and graceful shutdown.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TableEmbedder, TestServer, axis, metric_value, node, send, toward};

on_both_backends! {
    async fn healthz_reports_backend_and_embedder(backend) {
        let server = TestServer::builder().backend(backend).embedder(Arc::new(TableEmbedder::new())).start().await?;
        let reply = server.get("/healthz").await?;
        reply.expect(StatusCode::OK)?;
        let name = match backend {
            crate::support::Backend::Sqlite => "sqlite",
            crate::support::Backend::Postgres => "postgres",
        };
        assert_eq!(
            reply.body,
            json!({"status": "ok", "backend": name, "embedder": true, "version": env!("CARGO_PKG_VERSION")})
        );
        let bare = TestServer::builder().backend(backend).no_embedder().start().await?;
        assert_eq!(bare.get("/healthz").await?.body["embedder"], false);
        Ok(())
    }
}

#[tokio::test]
async fn metrics_count_requests_by_route_and_dedup_checks() -> anyhow::Result<()> {
    let embedder = TableEmbedder::new().with("Stored", "s", toward(0, 0.97, 1)).with("Query", "q", axis(0));
    let server = TestServer::start(Arc::new(embedder)).await?;
    let id = server.created("custom:lesson", "Stored", "s").await?;
    let before = server.metrics().await?;
    let checks_before = metric_value(&before, "dedup_checks_total", None);
    server.check("Query", "q").await?.expect(StatusCode::OK)?;
    server.get(&format!("/v1/nodes/{id}")).await?.expect(StatusCode::OK)?;

    let reply = server.get("/metrics").await?;
    reply.expect(StatusCode::OK)?;
    assert!(reply.content_type.starts_with("text/plain"), "{}", reply.content_type);
    let metrics = &reply.text;
    for name in ["http_requests_total", "http_request_duration_seconds", "dedup_checks_total"] {
        assert!(metrics.contains(&format!("# TYPE {name}")), "no {name} in:\n{metrics}");
    }
    let line = |prefix: &str, parts: &[&str]| {
        metrics.lines().any(|l| l.starts_with(prefix) && parts.iter().all(|p| l.contains(p)))
    };
    assert!(line("http_requests_total{", &["method=\"POST\"", "route=\"/v1/nodes/check-similar\"", "status=\"200\""]));
    assert!(line("http_requests_total{", &["route=\"/v1/nodes\"", "status=\"201\""]));
    assert!(line("http_request_duration_seconds_bucket{", &["route=\"/v1/nodes/check-similar\"", "le=\"0.005\""]));
    assert!(line("http_requests_total{", &["route=\"/v1/nodes/{id}\""]), "routes are labelled by template");
    assert!(!metrics.contains(&format!("route=\"/v1/nodes/{id}\"")), "raw paths never become labels");
    assert!(metric_value(metrics, "dedup_checks_total", None) >= checks_before + 1.0);
    assert!(metrics.contains("dedup_similarity_score"), "the best similarity of a check is recorded");
    Ok(())
}

/// Every route the router serves, by path template, with its methods.
fn routes() -> BTreeMap<&'static str, Vec<&'static str>> {
    BTreeMap::from([
        ("/healthz", vec!["get"]),
        ("/metrics", vec!["get"]),
        ("/v1/edges", vec!["post"]),
        ("/v1/facts", vec!["get", "post"]),
        ("/v1/facts/{id}", vec!["delete", "patch"]),
        ("/v1/memory/context", vec!["get"]),
        ("/v1/memory/profile", vec!["get", "put"]),
        ("/v1/nodes", vec!["get", "post"]),
        ("/v1/nodes/check-similar", vec!["post"]),
        ("/v1/nodes/{id}", vec!["delete", "get", "patch"]),
        ("/v1/nodes/{id}/edges", vec!["get"]),
        ("/v1/openapi.json", vec!["get"]),
    ])
}

#[tokio::test]
async fn openapi_document_lists_every_route() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let reply = server.get("/v1/openapi.json").await?;
    reply.expect(StatusCode::OK)?;
    assert!(reply.content_type.starts_with("application/json"));
    let document: Value = serde_json::from_str(&reply.text)?;
    assert!(document["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "{}", document["openapi"]);
    let paths = document["paths"].as_object().expect("paths");
    let documented: BTreeMap<&str, Vec<&str>> = paths
        .iter()
        .map(|(path, item)| {
            let methods = ["get", "put", "post", "delete", "patch"].into_iter().filter(|m| item.get(*m).is_some());
            (path.as_str(), methods.collect::<BTreeSet<_>>().into_iter().collect())
        })
        .collect();
    assert_eq!(documented, routes());
    assert!(document["components"]["securitySchemes"]["bearer"].is_object());

    // Each documented operation is served (neither the unknown-route 404 nor a 405).
    for (path, methods) in routes() {
        let concrete = path.replace("/nodes/{id}", "/nodes/n_1").replace("{id}", "fact_00000000");
        for method in methods {
            let method = Method::from_bytes(method.to_uppercase().as_bytes())?;
            let mut request = server.request(method.clone(), &concrete);
            if [Method::POST, Method::PUT, Method::PATCH].contains(&method) {
                request = request.json(&json!({}));
            }
            let reply = send(request).await?;
            assert_ne!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {concrete}");
            assert_ne!(reply.body["error"], "no such route", "{method} {concrete}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn every_response_has_a_request_id() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    // `send` fails on any response without one; these cover success and error paths.
    let mut ids = BTreeSet::new();
    for reply in [
        server.get("/healthz").await?,
        server.get("/v1/nodes").await?,
        server.get("/v1/nodes/n_404").await?,
        server.post("/v1/nodes/check-similar", &json!({})).await?,
        server.post("/v1/nodes", &node("custom:lesson", "T", &"x".repeat(1 << 20))).await?,
        server.get("/no/such/route").await?,
        server.delete("/v1/facts/fact_00000000").await?,
    ] {
        assert!(ids.insert(reply.request_id.clone()), "request ids are unique: {}", reply.request_id);
    }
    // A caller's id is kept.
    let reply = send(server.request(Method::GET, "/healthz").header("x-request-id", "trace-abc-123")).await?;
    assert_eq!(reply.request_id, "trace-abc-123");
    Ok(())
}

#[tokio::test]
async fn unknown_route_is_a_json_404() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    for path in ["/", "/v1", "/v2/nodes", "/v1/nodes/n_1/children", "/v1/fact"] {
        let reply = server.get(path).await?;
        assert_eq!(reply.expect_error(StatusCode::NOT_FOUND, "not_found")?, "no such route", "{path}");
    }
    Ok(())
}

/// `ErrorBody` is documented as "the body of every error response".
#[tokio::test]
async fn wrong_method_is_a_json_405() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let reply = server.post("/v1/nodes/n_1/edges", &json!({})).await?;
    reply.expect(StatusCode::METHOD_NOT_ALLOWED)?;
    assert!(
        reply.content_type.starts_with("application/json") && reply.body["error"].is_string(),
        "a 405 should carry the JSON error body every other error has; got content-type {:?}, body {:?}",
        reply.content_type,
        reply.text
    );
    Ok(())
}

/// A request in flight when shutdown starts completes, and what it stored is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_completes_requests_in_flight() -> anyhow::Result<()> {
    let embedder = Arc::new(TableEmbedder::new().with_delay(Duration::from_millis(500)));
    let mut server = TestServer::start(embedder.clone()).await?;
    let entered = embedder.entered.notified();
    tokio::pin!(entered);
    entered.as_mut().enable();

    let request = server.client.post(format!("{}/v1/nodes", server.url)).json(&node(
        "custom:lesson",
        "Slow lesson",
        "Embedding takes a while",
    ));
    let in_flight = tokio::spawn(send(request));
    tokio::time::timeout(Duration::from_secs(5), entered).await?;
    let serving = server.begin_shutdown().expect("the server was running");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!serving.is_finished(), "the server waits for the request in flight");

    let reply = in_flight.await??;
    reply.expect(StatusCode::CREATED)?;
    let id = reply.id();
    tokio::time::timeout(Duration::from_secs(5), serving).await???;
    assert!(reqwest::get(format!("{}/healthz", server.url)).await.is_err(), "no longer accepting");

    let store = server.db().open().await?;
    let number: i64 = id.trim_start_matches("n_").parse()?;
    let stored = store.get(dedup_store::MemoryId::new(number)).await?.expect("the node was stored");
    assert_eq!(stored.title.as_deref(), Some("Slow lesson"));
    assert_eq!(stored.content, "Embedding takes a while");
    Ok(())
}
