//! Nodes stored through `POST /v1/nodes` and `memdedup dedup` (seed 001 meets seed 003).

use serde_json::{Value, json};

use crate::serve::Server;
use crate::support::{memdedup, require_model, sqlite_db, text};

async fn create(http: &reqwest::Client, server: &Server, subtype: &str, title: &str, body: &str) -> Value {
    let node = json!({"type": "concept", "subtype": subtype, "content_title": title, "content_body": body,
                      "namespace": "agents"});
    let response = http.post(server.url("/v1/nodes")).json(&node).send().await.expect("the server answers");
    assert_eq!(response.status().as_u16(), 201, "{subtype} {title}");
    response.json().await.expect("a JSON body")
}

/// Defect 9: nodes of a dedup subtype are decided by `dedup` (they were skipped and
/// reported retryable forever); nodes of other subtypes are distinct by definition and
/// never queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defect_9_dedup_processes_nodes_created_over_http() {
    require_model();
    let (_dir, db) = sqlite_db();
    let server = Server::start(&["--db", &db, "serve", "--addr", "127.0.0.1:0"], &[]);
    let http = reqwest::Client::new();
    create(&http, &server, "custom:lesson", "Backups", "Back up the database before every schema migration.").await;
    create(&http, &server, "custom:lesson", "Release notes", "Write release notes for every public release.").await;
    let thesis = create(&http, &server, "custom:thesis", "BTC", "ETF flows keep rising this quarter.").await;
    assert_eq!(thesis["dedup"]["status"], "not_eligible", "{thesis}");
    drop(server);

    let assert =
        memdedup().args(["--db", &db, "dedup", "-n", "agents", "--judge", "learned", "--json"]).assert().success();
    let report: Value = serde_json::from_slice(&assert.get_output().stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&assert.get_output().stdout)));
    assert_eq!(report["processed"], 2, "both lessons are decided: {report}");
    assert_eq!((report["skipped"].as_u64(), report["retryable"].as_u64()), (Some(0), Some(0)), "{report}");
}
