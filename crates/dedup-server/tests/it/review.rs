//! The review queue over HTTP on both backends: `GET /v1/review` and
//! `POST /v1/review/{id}/decide` (merge through the ledger, apart, skip), refused decisions
//! that change nothing, and a token kept to its namespaces.

use std::sync::Arc;

use dedup_server::TokenConfig;
use dedup_store::{MemoryId, NewReview, Scope};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Backend, TableEmbedder, TestServer, axis, send, toward};

const RULE: &str = "Rotate the API keys every month, and revoke the old ones at once.";
const PARAPHRASE: &str = "Rotate the API keys monthly, and revoke the old ones at once.";

/// A server whose store holds the two texts in `namespace`, their pair queued for review.
async fn queued(backend: Backend, namespaces: &[&str], tokens: Vec<TokenConfig>) -> anyhow::Result<TestServer> {
    let embedder = TableEmbedder::new().with_text(RULE, axis(0)).with_text(PARAPHRASE, toward(0, 0.5, 1));
    let server = TestServer::builder()
        .backend(backend)
        .embedder(Arc::new(embedder))
        .memory_routes()
        .config(|c| c.tokens = tokens)
        .start()
        .await?;
    let store = server.db().open().await?;
    for (n, namespace) in namespaces.iter().enumerate() {
        let scope = Scope::new("global", namespace)?;
        for text in [RULE, PARAPHRASE] {
            store.insert_checked(dedup_store::NewMemory::new(scope.clone(), text), None, None).await?;
        }
        let (a, b) = (MemoryId::new(2 * n as i64 + 1), MemoryId::new(2 * n as i64 + 2));
        let review = NewReview {
            scope,
            a,
            b,
            cosine: 0.98,
            probability: Some(0.5),
            judge: "learned".into(),
            reasons: vec!["in the uncertain band".into()],
            source: "add".into(),
        };
        store.enqueue_review(&review).await?;
    }
    Ok(server)
}

on_both_backends! {
    async fn review_queue_is_listed_and_decided_over_http(backend) {
        let server = queued(backend, &["rules", "ops"], Vec::new()).await?;
        let listed = server.get("/v1/review").await?;
        listed.expect(StatusCode::OK)?;
        let entries = listed.body.as_array().expect("an array");
        assert_eq!(entries.len(), 2, "{}", listed.text);
        assert_eq!((entries[0]["low_memory"]["text"].as_str(), entries[0]["status"].as_str()), (Some(RULE), Some("pending")));
        let only_ops = server.get("/v1/review?namespace=ops").await?;
        assert_eq!(only_ops.body.as_array().map(Vec::len), Some(1), "{}", only_ops.text);

        // Merge the first: through the ledger.
        let merged = server.post("/v1/review/1/decide", &json!({"decision": "merge"})).await?;
        merged.expect(StatusCode::OK)?;
        assert_eq!((merged.body["review"]["status"].as_str(), merged.body["merge"]["survivor"].as_i64()), (Some("merged"), Some(1)));
        // Again: 409, nothing changes.
        let again = server.post("/v1/review/1/decide", &json!({"decision": "apart"})).await?;
        assert!(again.expect_error(StatusCode::CONFLICT, "conflict")?.contains("cannot be decided: it is merged"));
        // The second: apart. Bad input: 400/404.
        for (path, body, status, code) in [
            ("/v1/review/2/decide", json!({"decision": "later"}), StatusCode::BAD_REQUEST, "invalid_request"),
            ("/v1/review/2/decide", json!({"decision": "merge", "survivor": 1}), StatusCode::BAD_REQUEST, "invalid_request"),
            ("/v1/review/2/decide", json!({"verdict": "apart"}), StatusCode::BAD_REQUEST, "invalid_request"),
            ("/v1/review/x/decide", json!({"decision": "apart"}), StatusCode::BAD_REQUEST, "invalid_request"),
            ("/v1/review/99/decide", json!({"decision": "apart"}), StatusCode::NOT_FOUND, "not_found"),
        ] {
            server.post(path, &body).await?.expect_error(status, code).map_err(|e| e.context(format!("{path} {body}")))?;
        }
        let apart = server.post("/v1/review/2/decide", &json!({"decision": "apart"})).await?;
        assert_eq!(apart.expect(StatusCode::OK)?.body["review"]["status"], "apart");
        assert_eq!(server.get("/v1/review").await?.body, json!([]));
        let all = server.get("/v1/review?all=true").await?;
        let statuses: Vec<&str> = all.body.as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap()).collect();
        assert_eq!(statuses, ["merged", "apart"]);
        for bad in ["/v1/review?limit=0", "/v1/review?namespace=bad%20ns", "/v1/review?bogus=1"] {
            server.get(bad).await?.expect_error(StatusCode::BAD_REQUEST, "invalid_request").map_err(|e| e.context(bad))?;
        }
        Ok(())
    }

    async fn review_routes_keep_a_token_to_its_namespaces(backend) {
        let agent: TokenConfig = serde_json::from_value(json!({"token": "agent-token-9876543210", "namespaces": ["agents"]}))?;
        let server = queued(backend, &["agents", "other"], vec![agent]).await?;
        let call = |method: Method, path: &str, body: Value| {
            send(server.request(method, path).bearer_auth("agent-token-9876543210").json(&body))
        };
        let listed = call(Method::GET, "/v1/review", Value::Null).await?;
        let namespaces: Vec<&str> = listed.body.as_array().unwrap().iter().map(|r| r["scope"]["namespace"].as_str().unwrap()).collect();
        assert_eq!(namespaces, ["agents"], "{}", listed.text);
        call(Method::GET, "/v1/review?namespace=other", Value::Null).await?.expect_error(StatusCode::FORBIDDEN, "forbidden")?;
        let hidden = call(Method::POST, "/v1/review/2/decide", json!({"decision": "merge"})).await?;
        assert_eq!(hidden.expect_error(StatusCode::NOT_FOUND, "not_found")?, "no review entry with id 2");
        let store = server.db().open().await?;
        assert_eq!(store.review(dedup_store::ReviewId::new(2)).await?.map(|r| r.status), Some(dedup_store::ReviewStatus::Pending));
        Ok(())
    }
}
