//! A memory's lifecycle over HTTP on both backends: `PATCH /v1/memory/{id}` (409 naming
//! the duplicate), `DELETE /v1/memory/{id}`, `GET /v1/memory/{id}/history`,
//! `POST /v1/memory/changes/{id}/undo`; and the namespace limits of a token.

use std::sync::Arc;

use dedup_server::TokenConfig;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Backend, TableEmbedder, TestServer, axis, send, toward};

const RULE: &str = "Rotate the API keys every month, and revoke the old ones at once.";
const PARAPHRASE: &str = "API keys get replaced on a monthly schedule; the previous keys are revoked.";
const OTHER: &str = "Run the integration tests against a disposable database before every release.";
const EDITED: &str = "Run the integration tests against a throwaway database before each release.";

async fn server(backend: Backend, tokens: Vec<TokenConfig>) -> anyhow::Result<TestServer> {
    let embedder = TableEmbedder::new()
        .with_text(RULE, axis(0))
        .with_text(PARAPHRASE, toward(0, 0.97, 1))
        .with_text(OTHER, axis(2))
        .with_text(EDITED, toward(2, 0.95, 3));
    TestServer::builder()
        .backend(backend)
        .embedder(Arc::new(embedder))
        .memory_routes()
        .config(|c| c.tokens = tokens)
        .start()
        .await
}

on_both_backends! {
    async fn edit_forget_history_and_undo_over_http(backend) {
        let server = server(backend, Vec::new()).await?;
        server.post("/v1/memory/add", &json!({"content": RULE, "namespace": "rules"})).await?.expect(StatusCode::CREATED)?;
        server.post("/v1/memory/add", &json!({"content": OTHER, "namespace": "rules"})).await?.expect(StatusCode::CREATED)?;

        // Into a paraphrase of memory 1: 409 naming it, nothing written.
        let reply = server.patch("/v1/memory/2", &json!({"content": PARAPHRASE})).await?;
        let message = reply.expect_error(StatusCode::CONFLICT, "conflict")?;
        assert!(message.contains("duplicates memory 1 (memdedup://global/rules/1, cosine 0.97)"), "{message}");
        let history = server.get("/v1/memory/2/history").await?;
        assert_eq!(history.expect(StatusCode::OK)?.body["events"], json!([]), "{}", history.text);

        // A real edit, by URN: recorded and undone.
        let reply = server.patch("/v1/memory/memdedup:%2F%2Fglobal%2Frules%2F2", &json!({"content": EDITED})).await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!((reply.body["status"].as_str(), reply.body["memory"]["content"].as_str()), (Some("edited"), Some(EDITED)));
        let change = reply.body["change"].as_i64().expect("a change");
        let history = server.get("/v1/memory/2/history").await?;
        let event = &history.body["events"][0];
        assert_eq!((event["action"].as_str(), event["source"].as_str(), event["before"].as_str()), (Some("edited"), Some("http"), Some(OTHER)));
        let reply = server.post(&format!("/v1/memory/changes/{change}/undo"), &json!({})).await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body["memory"]["content"], OTHER);
        let again = server.post(&format!("/v1/memory/changes/{change}/undo"), &json!({})).await?;
        let message = again.expect_error(StatusCode::CONFLICT, "conflict")?;
        assert!(message.contains(&format!("cannot undo change {change}")), "{message}");

        // Forget, then bring it back.
        let reply = server.delete("/v1/memory/1").await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body["urn"], "memdedup://global/rules/1");
        let change = reply.body["change"].as_i64().expect("a change");
        let check = server.post("/v1/memory/check", &json!({"content": PARAPHRASE, "namespace": "rules"})).await?;
        assert_eq!(check.body["is_duplicate"], false, "a forgotten memory is no duplicate: {}", check.text);
        let twice = server.delete("/v1/memory/1").await?;
        assert!(twice.expect_error(StatusCode::CONFLICT, "conflict")?.contains("is not live"));
        server.post(&format!("/v1/memory/changes/{change}/undo"), &json!({})).await?.expect(StatusCode::OK)?;
        let check = server.post("/v1/memory/check", &json!({"content": PARAPHRASE, "namespace": "rules"})).await?;
        assert_eq!(check.body["matched_urn"], "memdedup://global/rules/1", "{}", check.text);

        // Bad input: 4xx, nothing written.
        for (method, path, body, status, code) in [
            (Method::PATCH, "/v1/memory/1", json!({"content": "  "}), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::PATCH, "/v1/memory/1", json!({"text": RULE}), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::PATCH, "/v1/memory/99", json!({"content": RULE}), StatusCode::NOT_FOUND, "not_found"),
            (Method::PATCH, "/v1/memory/abc", json!({"content": RULE}), StatusCode::BAD_REQUEST, "invalid_request"),
            (Method::DELETE, "/v1/memory/99", Value::Null, StatusCode::NOT_FOUND, "not_found"),
            (Method::GET, "/v1/memory/99/history", Value::Null, StatusCode::NOT_FOUND, "not_found"),
            (Method::POST, "/v1/memory/changes/999/undo", json!({}), StatusCode::NOT_FOUND, "not_found"),
            (Method::POST, "/v1/memory/changes/x/undo", json!({}), StatusCode::BAD_REQUEST, "invalid_request"),
        ] {
            let body = (!body.is_null()).then_some(&body);
            let reply = server.call(method.clone(), path, body).await?;
            reply.expect_error(status, code).map_err(|e| e.context(format!("{method} {path}")))?;
        }
        let memories = server.db().open().await?.list(&dedup_store::ListFilter::default()).await?;
        let texts: Vec<&str> = memories.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts, [RULE, OTHER]);
        Ok(())
    }

    async fn a_limited_token_cannot_see_or_change_another_namespace(backend) {
        let agent: TokenConfig = serde_json::from_value(json!({"token": "agent-token-9876543210", "namespaces": ["agents"]}))?;
        let admin: TokenConfig = serde_json::from_value(json!({"token": "admin-token-0123456789"}))?;
        let server = server(backend, vec![agent, admin]).await?;
        let as_admin = |method: Method, path: String, body: Value| {
            send(server.request(method, &path).bearer_auth("admin-token-0123456789").json(&body))
        };
        let as_agent = |method: Method, path: String, body: Value| {
            send(server.request(method, &path).bearer_auth("agent-token-9876543210").json(&body))
        };
        as_admin(Method::POST, "/v1/memory/add".into(), json!({"content": RULE, "namespace": "other"})).await?.expect(StatusCode::CREATED)?;
        let edited = as_admin(Method::PATCH, "/v1/memory/1".into(), json!({"content": PARAPHRASE})).await?;
        let change = edited.expect(StatusCode::OK)?.body["change"].as_i64().expect("a change");
        for (method, path, body) in [
            (Method::PATCH, "/v1/memory/1".to_owned(), json!({"content": OTHER})),
            (Method::DELETE, "/v1/memory/1".to_owned(), json!({})),
            (Method::GET, "/v1/memory/1/history".to_owned(), json!({})),
            (Method::POST, format!("/v1/memory/changes/{change}/undo"), json!({})),
        ] {
            let reply = as_agent(method.clone(), path.clone(), body).await?;
            let message = reply.expect_error(StatusCode::NOT_FOUND, "not_found")?;
            assert!(!message.contains("other"), "{method} {path}: {message}");
        }
        let memories = server.db().open().await?.list(&dedup_store::ListFilter::default()).await?;
        assert_eq!(memories[0].content, PARAPHRASE, "the agent changed nothing");
        assert!(!memories[0].deprecated);
        Ok(())
    }
}
