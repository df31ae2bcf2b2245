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
            json!({"status": "ok", "backend": name, "unembedded": 0, "embedder": true, "embedder_model": "table-384",
                   "version": env!("CARGO_PKG_VERSION")})
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
    // Defect 10: seed 004's check metrics are histograms, not summaries whose quantiles
    // read 0 after idle.
    for name in ["dedup_check_duration_ms", "dedup_similarity_score"] {
        assert!(metrics.contains(&format!("# TYPE {name} histogram")), "{name} is not a histogram in:\n{metrics}");
        assert!(line(&format!("{name}_bucket{{"), &["le=\"+Inf\""]), "{name} has no buckets");
    }
    assert!(line("dedup_check_duration_ms_bucket{", &["check_type=\"total\"", "le=\"5000\""]));
    // The store's vector indexes, read at the scrape: the check loaded one.
    for name in [
        "memdedup_index_bytes",
        "memdedup_index_budget_bytes",
        "memdedup_indexes_resident",
        "memdedup_index_evictions_total",
        "memdedup_index_loads_total",
        "memdedup_index_load_ms_total",
    ] {
        assert!(metrics.contains(&format!("# TYPE {name}")), "no {name} in:\n{metrics}");
    }
    assert_eq!(metric_value(metrics, "memdedup_index_budget_bytes", None), 1024.0 * 1024.0 * 1024.0);
    assert!(metric_value(metrics, "memdedup_index_loads_total", None) >= 1.0);
    assert!(metric_value(metrics, "memdedup_indexes_resident", None) >= 1.0);
    assert!(metric_value(metrics, "memdedup_index_bytes", None) > 0.0);
    Ok(())
}

/// Every route the router serves, by path template, with its methods.
fn routes() -> BTreeMap<&'static str, Vec<&'static str>> {
    BTreeMap::from([
        ("/healthz", vec!["get"]),
        ("/metrics", vec!["get"]),
        ("/v1/edges", vec!["post"]),
        ("/v1/facts", vec!["get", "post"]),
        ("/v1/facts/extract", vec!["post"]),
        ("/v1/facts/{id}", vec!["delete", "patch"]),
        ("/v1/memory/add", vec!["post"]),
        ("/v1/memory/check", vec!["post"]),
        ("/v1/memory/context", vec!["get"]),
        ("/v1/memory/profile", vec!["get", "put"]),
        ("/v1/nodes", vec!["get", "post"]),
        ("/v1/nodes/check-similar", vec!["post"]),
        ("/v1/memory/{id}", vec!["delete", "patch"]),
        ("/v1/memory/{id}/history", vec!["get"]),
        ("/v1/memory/changes/{change}/undo", vec!["post"]),
        ("/v1/review", vec!["get"]),
        ("/v1/review/{id}/decide", vec!["post"]),
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

/// A client's request id is kept only when it is short and plain; anything else is
/// replaced by a fresh id, so logs never carry what a client chose to put there.
#[tokio::test]
async fn defect_11_client_request_id_is_bounded_and_sanitised() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let longest = "r".repeat(dedup_server::MAX_REQUEST_ID_BYTES);
    for kept in ["trace-abc-123", "00-4bf92f3577b34da6-01", longest.as_str()] {
        let reply = send(server.request(Method::GET, "/healthz").header("x-request-id", kept)).await?;
        assert_eq!(reply.request_id, kept);
    }
    let too_long = "r".repeat(dedup_server::MAX_REQUEST_ID_BYTES + 1);
    let forged = "abc\" level=ERROR msg=forged";
    for replaced in [too_long.as_str(), forged, "with space", "a{b}", "semi;colon"] {
        let reply = send(server.request(Method::GET, "/healthz").header("x-request-id", replaced)).await?;
        assert_ne!(reply.request_id, replaced);
        assert!(
            reply.request_id.len() <= dedup_server::MAX_REQUEST_ID_BYTES
                && reply.request_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'),
            "a fresh id replaces {replaced:?}: {}",
            reply.request_id
        );
    }
    // Bytes outside ASCII, and two ids in one request.
    let latin1 = reqwest::header::HeaderValue::from_bytes(b"caf\xe9")?;
    let reply = send(server.request(Method::GET, "/healthz").header("x-request-id", latin1)).await?;
    assert!(reply.request_id.is_ascii() && reply.request_id != "caf\u{e9}", "{}", reply.request_id);
    let reply =
        send(server.request(Method::GET, "/healthz").header("x-request-id", "one").header("x-request-id", "two"))
            .await?;
    assert!(reply.request_id != "one" && reply.request_id != "two", "{}", reply.request_id);
    Ok(())
}

/// Every parameter of the OpenAPI document is declared where the router takes it: `in:
/// path` exactly for the `{name}` segments of its route, `in: query` for the others.
#[tokio::test]
async fn defect_11_openapi_parameters_are_in_path_or_query_as_routed() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let document: Value = serde_json::from_str(&server.get("/v1/openapi.json").await?.text)?;
    let mut seen = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                let name = parameter["name"].as_str().expect("a parameter name");
                let expected = if path.contains(&format!("{{{name}}}")) { "path" } else { "query" };
                assert_eq!(parameter["in"], expected, "{method} {path}: parameter {name}");
                seen.insert(format!("{method} {path} {name} {expected}"));
            }
        }
    }
    for query in [
        "get /v1/nodes namespace query",
        "get /v1/nodes after query",
        "get /v1/facts namespace query",
        "get /v1/memory/context max_tokens query",
        "put /v1/memory/profile namespace query",
        "patch /v1/nodes/{id} id path",
    ] {
        assert!(seen.contains(query), "{query} is documented: {seen:?}");
    }
    Ok(())
}

/// A URI over the limit gets the JSON error every other error has.
#[tokio::test]
async fn defect_11_uri_too_long_is_a_json_414() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let long = format!("/v1/nodes?namespace={}", "a".repeat(dedup_server::MAX_URI_BYTES));
    let reply = server.get(&long).await?;
    let message = reply.expect_error(StatusCode::URI_TOO_LONG, "uri_too_long")?;
    assert!(message.contains(&dedup_server::MAX_URI_BYTES.to_string()), "{message}");
    for path in ["/no/such/route", "/healthz"] {
        let long = format!("{path}?pad={}", "a".repeat(dedup_server::MAX_URI_BYTES));
        send(server.request(Method::GET, &long)).await?.expect_error(StatusCode::URI_TOO_LONG, "uri_too_long")?;
    }
    // At the limit it is served.
    let fits = format!("/v1/nodes?namespace=x&after=n_1&limit=5&subtype={}", "a".repeat(40));
    server.get(&fits).await?.expect(StatusCode::OK)?;
    Ok(())
}

/// What hyper answers itself, before any route sees the request: a request line it cannot
/// parse gets 400 and a URI over 65,534 bytes gets 414, both without a body, and the
/// connection is closed. docs/HTTP.md says so; this test keeps it true.
#[tokio::test]
async fn defect_11_requests_hyper_refuses_get_a_bare_status() -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    let addr = server.url.trim_start_matches("http://").to_owned();
    let huge = format!("GET /healthz?pad={} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000));
    for (request, status) in [
        ("NOT A REQUEST LINE\r\n\r\n".to_owned(), "400"),
        ("GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n".to_owned(), "400"),
        (huge, "414"),
    ] {
        let mut stream = tokio::net::TcpStream::connect(&addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await??;
        let answer = String::from_utf8_lossy(&answer);
        let status_line = answer.lines().next().unwrap_or_default();
        assert!(status_line.starts_with(&format!("HTTP/1.1 {status}")), "{status_line:?}");
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        assert_eq!(body, "", "hyper answers without a body: {answer:?}");
    }
    Ok(())
}
