//! Nodes absorbed by a merge (seed 003's ledger): reading one says which node absorbed
//! it, when that node is visible.

use anyhow::Context;
use dedup_store::{Memory, MemoryId, MergePlan, Store, TextSource};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::support::{TestServer, node, send};

/// The memory id of `n_<number>`.
fn memory_id(node_id: &str) -> anyhow::Result<MemoryId> {
    Ok(MemoryId::new(node_id.strip_prefix("n_").context("a node id")?.parse()?))
}

/// Merges `absorbed` into `survivor` through the store, as assisted dedup does.
async fn merge(store: &Store, survivor: MemoryId, absorbed: MemoryId) -> anyhow::Result<()> {
    let mut expected: Vec<Memory> = Vec::new();
    for id in [survivor, absorbed] {
        expected.push(store.get(id).await?.with_context(|| format!("memory {id} exists"))?);
    }
    let plan = MergePlan {
        run_id: "run-test".to_owned(),
        scope: expected[0].scope.clone(),
        survivor,
        absorbed: vec![absorbed],
        helpful: expected.iter().map(|m| m.helpful).sum(),
        harmful: expected.iter().map(|m| m.harmful).sum(),
        occurrence_count: expected.iter().map(|m| m.occurrence_count).sum(),
        metadata: expected[0].metadata.clone(),
        expected,
        content: None,
        vector: None,
        canonical_text: None,
        text_source: TextSource::Unchanged,
        confidence: 0.9,
        reason: "the same thesis".to_owned(),
        judge: "test".to_owned(),
        model: String::new(),
    };
    store.apply_merge(&plan).await?;
    Ok(())
}

#[tokio::test]
async fn reading_an_absorbed_node_names_the_node_that_absorbed_it() -> anyhow::Result<()> {
    let server = TestServer::builder().no_embedder().start().await?;
    let survivor = server.created("custom:thesis", "Weekend risk", "Never hold positions over the weekend").await?;
    let absorbed = server.created("custom:thesis", "No weekend positions", "Close everything on Friday").await?;
    let store = server.db().open().await?;
    merge(&store, memory_id(&survivor)?, memory_id(&absorbed)?).await?;

    let reply = server.get(&format!("/v1/nodes/{absorbed}")).await?;
    reply.expect(StatusCode::NOT_FOUND)?;
    assert_eq!(
        reply.body,
        json!({"error": format!("node {absorbed} was merged into {survivor}"), "code": "not_found", "merged_into": survivor})
    );
    // The bare number names the same node.
    let bare = server.get(&format!("/v1/nodes/{}", memory_id(&absorbed)?)).await?;
    assert_eq!(bare.body["merged_into"], json!(survivor));
    // The survivor reads as usual, and a node that never existed is the plain 404.
    server.get(&format!("/v1/nodes/{survivor}")).await?.expect(StatusCode::OK)?;
    let missing = server.get("/v1/nodes/n_999").await?;
    assert_eq!(missing.expect_error(StatusCode::NOT_FOUND, "not_found")?, "no node n_999");

    // A survivor cannot be deleted while the merge log names it, so the pointer stays good.
    let refused = server.delete(&format!("/v1/nodes/{survivor}")).await?;
    refused.expect_error(StatusCode::CONFLICT, "conflict")?;
    let again = server.get(&format!("/v1/nodes/{absorbed}")).await?;
    assert_eq!(again.body["merged_into"], json!(survivor));
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn an_absorbed_node_outside_the_tokens_namespaces_is_the_plain_404() -> anyhow::Result<()> {
    const ADMIN: &str = "admin-token-0123456789";
    const AGENT: &str = "agent-token-9876543210";
    let tokens = json!([{"token": ADMIN}, {"token": AGENT, "namespaces": ["agents"]}]);
    let server = TestServer::builder()
        .no_embedder()
        .config(|c| c.tokens = serde_json::from_value(tokens).expect("valid tokens"))
        .start()
        .await?;
    let create = |title: &str| {
        let mut body = node("custom:thesis", title, &format!("{title} body"));
        body["namespace"] = json!("private");
        send(server.request(Method::POST, "/v1/nodes").bearer_auth(ADMIN).json(&body))
    };
    let survivor = create("Weekend risk").await?.body["id"].as_str().context("an id")?.to_owned();
    let absorbed = create("No weekend positions").await?.body["id"].as_str().context("an id")?.to_owned();
    let store = server.db().open().await?;
    merge(&store, memory_id(&survivor)?, memory_id(&absorbed)?).await?;

    let get =
        |token: &'static str| send(server.request(Method::GET, &format!("/v1/nodes/{absorbed}")).bearer_auth(token));
    let admin = get(ADMIN).await?;
    assert_eq!(admin.body["merged_into"], json!(survivor), "{}", admin.text);
    let agent = get(AGENT).await?;
    assert_eq!(agent.expect_error(StatusCode::NOT_FOUND, "not_found")?, format!("no node {absorbed}"));
    store.close().await;
    Ok(())
}
