//! `POST /v1/memory/check` and `POST /v1/memory/add`: the checker chain over HTTP, its
//! verdicts and explanations, refused input that writes nothing, and the namespace limits
//! of bearer tokens.

use std::sync::Arc;

use dedup_server::TokenConfig;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Backend, TableEmbedder, TestServer, axis, send, toward};

const RULE: &str = "Rotate the API keys every month, and revoke the old ones at once.";
const PARAPHRASE: &str = "API keys get replaced on a monthly schedule; the previous keys are revoked.";
const OTHER: &str = "Run the integration tests against a disposable database before every release.";

/// A server with the memory routes whose embedder puts `PARAPHRASE` at cosine 0.97 from
/// `RULE` and `OTHER` at 0.30.
async fn server(backend: Backend) -> anyhow::Result<TestServer> {
    let embedder = TableEmbedder::new()
        .with_text(RULE, axis(0))
        .with_text(PARAPHRASE, toward(0, 0.97, 1))
        .with_text(OTHER, toward(0, 0.30, 2));
    TestServer::builder().backend(backend).embedder(Arc::new(embedder)).memory_routes().start().await
}

on_both_backends! {
    /// Defect "secrets stored verbatim" over HTTP: redacted and said so by default; a 400
    /// that stores nothing with `secrets = "refuse"`.
    async fn secrets_stored_verbatim_over_http_are_redacted_or_refused(backend) {
        let secret = "Deploy key for CI: AKIAIOSFODNN7EXAMPLE, rotate it monthly.";
        let server = server(backend).await?;
        let reply = server.post("/v1/memory/add", &json!({"content": secret, "namespace": "rules"})).await?;
        reply.expect(StatusCode::CREATED)?;
        assert_eq!(reply.body["check"]["redacted"], json!(["aws_access_key_id"]), "{}", reply.text);
        let explanation = reply.body["explanation"].as_str().unwrap_or_default();
        assert!(explanation.ends_with("; credentials redacted: aws_access_key_id"), "{explanation}");
        assert!(!reply.text.contains("AKIAIOSFODNN7EXAMPLE"), "the reply echoes the secret: {}", reply.text);
        let stored = server.db().open().await?.list(&dedup_store::ListFilter::default()).await?;
        assert!(stored.iter().all(|m| !m.content.contains("AKIA")), "{stored:?}");

        let refusing = dedup_precompact::DeduplicationConfig {
            secrets: dedup_core::SecretAction::Refuse,
            ..dedup_precompact::DeduplicationConfig::default()
        };
        let server = TestServer::builder()
            .backend(backend)
            .embedder(Arc::new(TableEmbedder::new()))
            .memory_routes()
            .dedup_config(refusing)
            .start()
            .await?;
        let reply = server.post("/v1/memory/add", &json!({"content": secret, "namespace": "rules"})).await?;
        let message = reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
        assert!(message.contains("aws_access_key_id") && !message.contains("AKIAIOSFODNN7EXAMPLE"), "{message}");
        let stored = server.db().open().await?.list(&dedup_store::ListFilter::default()).await?;
        assert!(stored.is_empty(), "a refused memory was stored: {stored:?}");
        Ok(())
    }

    async fn memory_add_stores_once_and_check_names_the_duplicate(backend) {
        let server = server(backend).await?;
        let reply = server.post("/v1/memory/add", &json!({"content": RULE, "namespace": "rules", "kind": "decision"})).await?;
        reply.expect(StatusCode::CREATED)?;
        let urn = "memdedup://global/rules/1";
        assert_eq!(reply.body["urn"], urn, "{}", reply.text);
        assert_eq!(reply.body["embedded"], true);
        assert_eq!(reply.body["scope"], json!({"domain": "global", "namespace": "rules"}));
        assert_eq!(reply.body["explanation"], format!("stored {urn}"));

        // The same text again: not stored, the exact checker decided.
        let reply = server.post("/v1/memory/add", &json!({"content": RULE, "namespace": "rules"})).await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body["stored"], Value::Null, "{}", reply.text);
        assert_eq!(reply.body["check"]["reason"], "ExactMatch");
        assert_eq!(reply.body["explanation"], format!("not stored: duplicate of {urn}: exact match (same normalised text)"));

        // A paraphrase: a semantic duplicate, with its score and threshold.
        let reply = server.post("/v1/memory/check", &json!({"content": PARAPHRASE, "namespace": "rules"})).await?;
        reply.expect(StatusCode::OK)?;
        assert_eq!(reply.body["is_duplicate"], true, "{}", reply.text);
        assert_eq!(reply.body["reason"], "SemanticSimilar");
        assert_eq!(reply.body["matched_urn"], urn);
        let explanation = reply.body["explanation"].as_str().unwrap_or_default();
        assert!(explanation.starts_with(&format!("duplicate of {urn}: semantically similar, cosine 0.97")), "{explanation}");

        // Something else, and the same text in another namespace: unique.
        for (content, namespace) in [(OTHER, "rules"), (PARAPHRASE, "other")] {
            let reply = server.post("/v1/memory/check", &json!({"content": content, "namespace": namespace})).await?;
            reply.expect(StatusCode::OK)?;
            assert_eq!(reply.body["is_duplicate"], false, "{content} in {namespace}: {}", reply.text);
            assert_eq!(reply.body["verdict"], "unique");
        }
        // Checking stored nothing; adding the duplicate stored nothing either.
        let reply = server.post("/v1/memory/add", &json!({"content": OTHER, "namespace": "rules"})).await?;
        reply.expect(StatusCode::CREATED)?;
        assert_eq!(reply.body["urn"], "memdedup://global/rules/2", "{}", reply.text);
        Ok(())
    }
}

#[tokio::test]
async fn memory_routes_refuse_bad_input_with_400_and_store_nothing() -> anyhow::Result<()> {
    let server = server(Backend::Sqlite).await?;
    let cases = [
        ("/v1/memory/check", json!({}), "content"),
        ("/v1/memory/check", json!({"content": "   "}), "content is empty"),
        ("/v1/memory/check", json!({"content": 7}), "content"),
        ("/v1/memory/check", json!({"content": RULE, "limit": 3}), "limit"),
        ("/v1/memory/check", json!({"content": "a\u{0}b"}), "NUL"),
        ("/v1/memory/check", json!({"content": RULE, "namespace": "no spaces"}), "namespace"),
        ("/v1/memory/add", json!({"content": RULE, "kind": "not a kind!"}), "kind"),
        ("/v1/memory/add", json!({"content": RULE, "title": "t".repeat(5000)}), "title"),
        ("/v1/memory/add", json!({"content": "x".repeat(2 << 20)}), "limit"),
    ];
    for (path, body, says) in cases {
        let reply = server.post(path, &body).await?;
        let status = reply.status;
        assert!(
            status == StatusCode::BAD_REQUEST || status == StatusCode::PAYLOAD_TOO_LARGE,
            "{path} {status}: {}",
            reply.text
        );
        let message = reply.body["error"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{path}: {message:?} does not say {says:?}");
    }
    // Not JSON at all.
    let reply =
        send(server.request(Method::POST, "/v1/memory/add").header("content-type", "application/json").body("{"))
            .await?;
    reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request")?;
    // None of it was stored.
    let reply = server.post("/v1/memory/add", &json!({"content": RULE})).await?;
    reply.expect(StatusCode::CREATED)?;
    assert_eq!(reply.body["urn"], "memdedup://global/default/1", "{}", reply.text);
    Ok(())
}

#[tokio::test]
async fn memory_routes_without_the_checker_chain_are_503_not_configured() -> anyhow::Result<()> {
    let server = TestServer::start(Arc::new(TableEmbedder::new())).await?;
    for path in ["/v1/memory/check", "/v1/memory/add"] {
        let reply = server.post(path, &json!({"content": RULE})).await?;
        let message = reply.expect_error(StatusCode::SERVICE_UNAVAILABLE, "not_configured")?;
        assert!(message.contains("checker chain"), "{message}");
    }
    Ok(())
}

#[tokio::test]
async fn memory_routes_keep_a_token_to_its_namespaces() -> anyhow::Result<()> {
    let token: TokenConfig =
        serde_json::from_value(json!({"token": "agent-token-9876543210", "namespaces": ["agents"]}))?;
    let server = TestServer::builder()
        .embedder(Arc::new(TableEmbedder::new()))
        .memory_routes()
        .config(|c| c.tokens = vec![token])
        .start()
        .await?;
    let call = |path: &'static str, body: Value| {
        send(server.request(Method::POST, path).bearer_auth("agent-token-9876543210").json(&body))
    };
    for path in ["/v1/memory/check", "/v1/memory/add"] {
        for body in [json!({"content": RULE}), json!({"content": RULE, "namespace": "other"})] {
            let message = call(path, body).await?.expect_error(StatusCode::FORBIDDEN, "forbidden")?;
            assert!(message.contains("agents"), "{message}");
        }
    }
    call("/v1/memory/add", json!({"content": RULE, "namespace": "agents"})).await?.expect(StatusCode::CREATED)?;
    let reply = call("/v1/memory/check", json!({"content": RULE, "namespace": "agents"})).await?;
    reply.expect(StatusCode::OK)?;
    assert_eq!(reply.body["matched_urn"], "memdedup://global/agents/1", "{}", reply.text);
    Ok(())
}
