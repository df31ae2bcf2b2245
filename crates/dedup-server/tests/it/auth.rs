//! Bearer tokens: 401 without a known one, 403 outside a token's namespaces, open
//! health and API document, and no unauthenticated listening beyond loopback.

use std::sync::Arc;

use dedup_server::{AppState, ServerConfig, TokenConfig};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Reply, TableEmbedder, TestServer, node, send};

const ADMIN: &str = "admin-token-0123456789";
const AGENT: &str = "agent-token-9876543210";

/// A token as the `[[server.tokens]]` table configures it.
fn token(table: Value) -> TokenConfig {
    serde_json::from_value(table).expect("a valid token table")
}

async fn server() -> anyhow::Result<TestServer> {
    TestServer::builder()
        .embedder(Arc::new(TableEmbedder::new()))
        .config(|c| {
            c.tokens = vec![token(json!({"token": ADMIN})), token(json!({"token": AGENT, "namespaces": ["agents"]}))];
        })
        .start()
        .await
}

async fn call(
    server: &TestServer,
    token: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Reply> {
    let mut request = server.request(method, path);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    send(request).await
}

fn protected() -> Vec<(Method, &'static str, Option<Value>)> {
    let check = json!({"title": "T", "content": "C", "subtype": "custom:lesson"});
    vec![
        (Method::POST, "/v1/nodes/check-similar", Some(check)),
        (Method::POST, "/v1/nodes", Some(node("custom:lesson", "T", "C"))),
        (Method::GET, "/v1/nodes", None),
        (Method::GET, "/v1/nodes/n_1", None),
        (Method::PATCH, "/v1/nodes/n_1", Some(json!({"state_lifecycle": "WEAK"}))),
        (Method::DELETE, "/v1/nodes/n_1", None),
        (Method::GET, "/v1/nodes/n_1/edges", None),
        (Method::POST, "/v1/edges", Some(json!({"source_id": "n_1", "target_id": "n_2"}))),
        (Method::POST, "/v1/facts", Some(json!({"content": "x", "category": "goal", "confidence": 0.9}))),
        (Method::GET, "/v1/facts", None),
        (Method::POST, "/v1/facts/extract", Some(json!({"user": "I use tabs", "assistant": "Noted"}))),
        (Method::DELETE, "/v1/facts/fact_00000000", None),
        (Method::GET, "/v1/memory/profile", None),
        (Method::GET, "/v1/memory/context", None),
        (Method::POST, "/v1/memory/check", Some(json!({"content": "C"}))),
        (Method::POST, "/v1/memory/add", Some(json!({"content": "C"}))),
        (Method::GET, "/metrics", None),
    ]
}

#[tokio::test]
async fn auth_missing_or_unknown_token_is_401() -> anyhow::Result<()> {
    let server = server().await?;
    for (method, path, body) in protected() {
        let reply = call(&server, None, method.clone(), path, body.clone()).await?;
        let message = reply.expect_error(StatusCode::UNAUTHORIZED, "unauthorized")?;
        assert_eq!(message, "missing `Authorization: Bearer <token>` header", "{method} {path}");
        let reply = call(&server, Some("wrong-token-000000"), method.clone(), path, body.clone()).await?;
        assert_eq!(reply.expect_error(StatusCode::UNAUTHORIZED, "unauthorized")?, "unknown bearer token", "{path}");
        let basic = server.request(method.clone(), path).header("authorization", format!("Basic {ADMIN}"));
        send(basic).await?.expect_error(StatusCode::UNAUTHORIZED, "unauthorized")?;
        let prefix = server.request(method.clone(), path).header("authorization", format!("Bearer {}", &ADMIN[..10]));
        send(prefix).await?.expect_error(StatusCode::UNAUTHORIZED, "unauthorized")?;
    }
    // Nothing was written by the refused requests.
    let nodes = call(&server, Some(ADMIN), Method::GET, "/v1/nodes", None).await?;
    assert_eq!(nodes.body["data"], json!([]));
    let facts = call(&server, Some(ADMIN), Method::GET, "/v1/facts", None).await?;
    assert_eq!(facts.body["facts"], json!([]));
    Ok(())
}

#[tokio::test]
async fn auth_namespace_limited_token_is_403_outside_its_namespaces() -> anyhow::Result<()> {
    let server = server().await?;
    let check = |namespace: Option<&str>| {
        let mut body = json!({"title": "T", "content": "C", "subtype": "custom:lesson"});
        if let Some(namespace) = namespace {
            body["namespace"] = json!(namespace);
        }
        body
    };
    let create = |namespace: Option<&str>, title: &str| {
        let mut body = node("custom:lesson", title, &format!("{title} body"));
        if let Some(namespace) = namespace {
            body["namespace"] = json!(namespace);
        }
        body
    };
    for namespace in [None, Some("default"), Some("other")] {
        let reply = call(&server, Some(AGENT), Method::POST, "/v1/nodes/check-similar", Some(check(namespace))).await?;
        let message = reply.expect_error(StatusCode::FORBIDDEN, "forbidden")?;
        assert!(message.contains("agents"), "{message}");
        let reply = call(&server, Some(AGENT), Method::POST, "/v1/nodes", Some(create(namespace, "Nope"))).await?;
        reply.expect_error(StatusCode::FORBIDDEN, "forbidden")?;
        let fact = json!({"content": "x", "category": "goal", "confidence": 0.9, "namespace": namespace});
        call(&server, Some(AGENT), Method::POST, "/v1/facts", Some(fact))
            .await?
            .expect_error(StatusCode::FORBIDDEN, "forbidden")?;
    }
    let reply = call(&server, Some(AGENT), Method::GET, "/v1/nodes", None).await?;
    let message = reply.expect_error(StatusCode::FORBIDDEN, "forbidden")?;
    assert!(message.contains("?namespace="), "{message}");
    for path in ["/v1/nodes?namespace=other", "/v1/facts", "/v1/memory/context?namespace=default", "/v1/memory/profile"]
    {
        call(&server, Some(AGENT), Method::GET, path, None).await?.expect_error(StatusCode::FORBIDDEN, "forbidden")?;
    }

    // Inside its namespace, everything works.
    let reply =
        call(&server, Some(AGENT), Method::POST, "/v1/nodes/check-similar", Some(check(Some("agents")))).await?;
    reply.expect(StatusCode::OK)?;
    let reply = call(&server, Some(AGENT), Method::POST, "/v1/nodes", Some(create(Some("agents"), "Mine"))).await?;
    reply.expect(StatusCode::CREATED)?;
    let mine = reply.id();
    let list = call(&server, Some(AGENT), Method::GET, "/v1/nodes?namespace=agents", None).await?;
    list.expect(StatusCode::OK)?;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
    call(&server, Some(AGENT), Method::GET, &format!("/v1/nodes/{mine}"), None).await?.expect(StatusCode::OK)?;
    let fact = json!({"content": "Agent fact", "category": "goal", "confidence": 0.9, "namespace": "agents"});
    call(&server, Some(AGENT), Method::POST, "/v1/facts", Some(fact)).await?.expect(StatusCode::CREATED)?;
    call(&server, Some(AGENT), Method::GET, "/v1/facts?namespace=agents", None).await?.expect(StatusCode::OK)?;

    // Nodes of other namespaces look missing to it; the unrestricted token sees all.
    let reply = call(&server, Some(ADMIN), Method::POST, "/v1/nodes", Some(create(None, "Admin's"))).await?;
    reply.expect(StatusCode::CREATED)?;
    let theirs = reply.id();
    for (method, path, body) in [
        (Method::GET, format!("/v1/nodes/{theirs}"), None),
        (Method::PATCH, format!("/v1/nodes/{theirs}"), Some(json!({"state_lifecycle": "DORMANT"}))),
        (Method::DELETE, format!("/v1/nodes/{theirs}"), None),
        (Method::GET, format!("/v1/nodes/{theirs}/edges"), None),
        (Method::POST, "/v1/edges".to_owned(), Some(json!({"source_id": mine, "target_id": theirs}))),
    ] {
        call(&server, Some(AGENT), method, &path, body).await?.expect_error(StatusCode::NOT_FOUND, "not_found")?;
    }
    let all = call(&server, Some(ADMIN), Method::GET, "/v1/nodes", None).await?;
    assert_eq!(all.body["data"].as_array().unwrap().len(), 2);
    assert_eq!(all.body["data"][0]["state_lifecycle"], "ACTIVE", "the refused PATCH changed nothing");
    Ok(())
}

#[tokio::test]
async fn auth_healthz_and_openapi_are_open() -> anyhow::Result<()> {
    let server = server().await?;
    let health = call(&server, None, Method::GET, "/healthz", None).await?;
    health.expect(StatusCode::OK)?;
    assert_eq!(health.body["status"], "ok");
    call(&server, None, Method::GET, "/v1/openapi.json", None).await?.expect(StatusCode::OK)?;
    call(&server, Some(ADMIN), Method::GET, "/metrics", None).await?.expect(StatusCode::OK)?;
    Ok(())
}

#[tokio::test]
async fn auth_non_loopback_address_without_token_is_refused() -> anyhow::Result<()> {
    let db = crate::support::TestDb::new(crate::support::Backend::Sqlite).await?;
    let store = db.open().await?;
    let open = ServerConfig { addr: ([0, 0, 0, 0], 0).into(), ..ServerConfig::default() };
    let state = AppState::new(store.clone(), None, open.clone(), None);
    let error = dedup_server::bind(&state).await.expect_err("a non-loopback address without a token is refused");
    assert!(matches!(error, dedup_server::Error::Config(_)), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("non-loopback") && message.contains("without a token"), "{message}");

    // With a token it listens.
    let tokens = vec![token(json!({"token": ADMIN}))];
    let state = AppState::new(store, None, ServerConfig { tokens, ..open }, None);
    let listener = dedup_server::bind(&state).await?;
    assert!(listener.local_addr()?.ip().is_unspecified());
    Ok(())
}

/// `/metrics` labels name every namespace: a token limited to some namespaces may not
/// read them.
#[tokio::test]
async fn defect_11_metrics_are_refused_to_a_namespace_limited_token() -> anyhow::Result<()> {
    let server = server().await?;
    let mut secret = node("custom:lesson", "Secret", "Secret body");
    secret["namespace"] = json!("secret-project");
    call(&server, Some(ADMIN), Method::POST, "/v1/nodes", Some(secret)).await?.expect(StatusCode::CREATED)?;
    let metrics = call(&server, Some(ADMIN), Method::GET, "/metrics", None).await?;
    metrics.expect(StatusCode::OK)?;
    assert!(metrics.text.contains("secret-project"), "the namespace is a label:\n{}", metrics.text);
    let reply = call(&server, Some(AGENT), Method::GET, "/metrics", None).await?;
    let message = reply.expect_error(StatusCode::FORBIDDEN, "forbidden")?;
    assert!(!reply.text.contains("secret-project"), "{message}");
    assert!(message.contains("every namespace"), "{message}");
    Ok(())
}
