//! `memdedup mcp` refuses every bad argument of every tool as a tool error naming the
//! problem, and writes nothing: the memories (merged ones too), the merge ledger and the
//! facts are the same after each refused call.

use serde_json::{Value, json};

use crate::mcp_support::{
    DECISION, DOCS, McpClient, add_stored, assert_mentions, call, call_ok, close, db_state, stdio_client, try_call,
};
use crate::support::{require_model, sqlite_db};

/// How a call must be refused.
#[derive(Clone, Copy)]
enum Refusal {
    /// When the arguments are read, before the tool runs: a wrong type, a missing or an
    /// unknown member. An `invalid_argument` tool error like the tool's own (defect 15:
    /// it used to carry no structured content).
    Sdk,
    /// By the tool, as a memdedup tool error of this kind.
    Tool(&'static str),
}

/// A server over a seeded database, and what every refused call must leave unchanged.
struct Fixture {
    client: McpClient,
    db: String,
    _dir: tempfile::TempDir,
    fact_namespaces: &'static [&'static str],
}

impl Fixture {
    async fn start(fact_namespaces: &'static [&'static str]) -> Fixture {
        let (dir, db) = sqlite_db();
        let client = stdio_client(&db).await;
        Fixture { client, db, _dir: dir, fact_namespaces }
    }

    /// Calls `tool` with `args`, expecting `refusal` with a message that mentions every one
    /// of `needles`, and nothing written.
    async fn refuse(&self, tool: &str, args: Value, refusal: Refusal, needles: &[&str]) {
        let before = db_state(&self.db, self.fact_namespaces);
        let reply = call(&self.client, tool, args.clone()).await;
        assert!(reply.is_error, "{tool} {args} should be refused: {reply:?}");
        match refusal {
            Refusal::Sdk => {
                assert_eq!(reply.kind(), Some("invalid_argument"), "{tool} {args}: {reply:?}");
                let message = reply.structured["error"]["message"].as_str().expect("a message");
                assert_eq!(reply.text, format!("error: {message}"), "{tool} {args}");
            }
            Refusal::Tool(kind) => {
                assert_eq!(reply.kind(), Some(kind), "{tool} {args}: {reply:?}");
                let message = reply.structured["error"]["message"].as_str().expect("a message");
                assert_eq!(reply.text, format!("error: {message}"), "{tool} {args}");
            }
        }
        assert_mentions(&reply.text, needles);
        assert_eq!(db_state(&self.db, self.fact_namespaces), before, "{tool} {args} wrote something");
    }
}

/// Text just over the 1 MiB limit of a memory.
fn oversized() -> String {
    "a".repeat(1024 * 1024 + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_memory_tools_refuse_bad_arguments_and_write_nothing() {
    require_model();
    let f = Fixture::start(&[]).await;
    let (id, urn) = add_stored(&f.client, "decisions", DECISION).await;
    let big = oversized();
    use Refusal::{Sdk, Tool};
    let invalid = Tool("invalid_argument");

    for tool in ["memory_check", "memory_add"] {
        f.refuse(tool, json!({"content": 5}), Sdk, &["`content`: invalid type: integer `5`, expected a string"]).await;
        f.refuse(tool, json!({"content": null}), Sdk, &["`content`: invalid type: null"]).await;
        f.refuse(tool, json!({"text": DECISION}), Sdk, &["unknown field `text`", "`content`"]).await;
        f.refuse(tool, json!({"content": DECISION, "namespace": "decisions", "treshold": 0.5}), Sdk, &["`treshold`"])
            .await;
        f.refuse(tool, json!({}), Sdk, &["missing field `content`"]).await;
        f.refuse(tool, json!({"content": DECISION, "namespace": "bad ns"}), invalid, &["bad ns", "namespace"]).await;
        f.refuse(tool, json!({"content": DECISION, "namespace": ""}), invalid, &["namespace"]).await;
        f.refuse(tool, json!({"content": DECISION, "namespace": "n".repeat(65)}), invalid, &["namespace"]).await;
        f.refuse(tool, json!({"content": DECISION, "domain": "bad/domain"}), invalid, &["domain"]).await;
        f.refuse(tool, json!({"content": ""}), invalid, &["`content` is empty"]).await;
        f.refuse(tool, json!({"content": " \n\t "}), invalid, &["`content` is empty"]).await;
        f.refuse(tool, json!({"content": big}), invalid, &["`content` is 1048577 bytes", "limit of 1048576 bytes"])
            .await;
        f.refuse(tool, json!({"content": "a\u{0}b that is long enough"}), invalid, &["NUL"]).await;
    }
    let long_title = "t".repeat(100_000);
    for (args, needles) in [
        (json!({"content": "A new memory about kinds", "kind": "bad kind!"}), &["kind"][..]),
        (json!({"content": "A new memory about kinds", "kind": 3}), &["`kind`: invalid type: integer `3`"][..]),
        (json!({"content": "A new memory with a title", "title": long_title}), &["title"][..]),
    ] {
        let refusal = if args["kind"].is_number() { Sdk } else { invalid };
        f.refuse("memory_add", args, refusal, needles).await;
    }

    let query = "which database";
    f.refuse("memory_search", json!({"query": query, "limit": 0}), invalid, &["`limit` is 0", "1 to 50"]).await;
    f.refuse("memory_search", json!({"query": query, "limit": 51}), invalid, &["`limit` is 51", "1 to 50"]).await;
    f.refuse(
        "memory_search",
        json!({"query": query, "limit": "x"}),
        Sdk,
        &["`limit`: invalid type: string \"x\", expected u32"],
    )
    .await;
    f.refuse("memory_search", json!({"query": query, "limit": -1}), Sdk, &["`limit`: invalid value: integer `-1`"])
        .await;
    f.refuse("memory_search", json!({"content": query}), Sdk, &["unknown field `content`"]).await;
    f.refuse("memory_search", json!({"query": ""}), invalid, &["`query` is empty"]).await;
    f.refuse("memory_search", json!({"query": big}), invalid, &["`query` is 1048577 bytes"]).await;
    f.refuse("memory_search", json!({"query": query, "namespace": "bad ns"}), invalid, &["bad ns"]).await;

    f.refuse("memory_get", json!({"id": "abc"}), invalid, &["`abc` is not a memory id or memdedup:// URN"]).await;
    f.refuse("memory_get", json!({"id": "memdedup://x"}), invalid, &["`memdedup://x`", "URN"]).await;
    f.refuse("memory_get", json!({"id": "memdedup://global/bad ns/1"}), invalid, &["not a valid URN"]).await;
    f.refuse("memory_get", json!({"id": "-3"}), invalid, &["`-3`"]).await;
    f.refuse("memory_get", json!({"id": -3}), Sdk, &["`id`: invalid value: integer `-3`"]).await;
    f.refuse("memory_get", json!({"id": 1.5}), Sdk, &["`id`: invalid type: floating point"]).await;
    f.refuse("memory_get", json!({"urn": urn}), Sdk, &["unknown field `urn`"]).await;
    f.refuse("memory_get", json!({"id": "999"}), Tool("not_found"), &["no memory with id 999"]).await;
    let elsewhere = format!("memdedup://global/learnings/{id}");
    f.refuse("memory_get", json!({"id": elsewhere}), Tool("not_found"), &[&elsewhere, &urn]).await;

    // The valid calls still work on the same session.
    let got = call_ok(&f.client, "memory_get", json!({"id": urn})).await;
    assert_eq!(got["memory"]["occurrence_count"], 1, "no refused call counted as an occurrence: {got}");
    // Defect 15: the number `memory_add` returns as `stored` is an id `memory_get` takes.
    let by_number = call_ok(&f.client, "memory_get", json!({"id": id})).await;
    assert_eq!(by_number["memory"], got["memory"], "{by_number}");
    close(f.client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_dedup_and_merge_tools_refuse_bad_arguments_and_write_nothing() {
    require_model();
    let f = Fixture::start(&[]).await;
    // A merge in the ledger, and a pair that a dedup run that should not have run merges.
    for ns in ["merged", "pending"] {
        for text in DOCS {
            add_stored(&f.client, ns, text).await;
        }
    }
    let run = call_ok(&f.client, "dedup_run", json!({"namespace": "merged"})).await;
    assert_eq!(run["merged"], 1, "{run}");
    let merge_id = run["merges"][0]["merge_id"].as_i64().expect("a merge id");
    let run_id = run["run_id"].as_str().expect("a run id").to_owned();
    use Refusal::{Sdk, Tool};
    let invalid = Tool("invalid_argument");

    for tool in ["dedup_scan", "dedup_run"] {
        let both = json!({"namespace": "pending", "all_namespaces": true});
        f.refuse(tool, both, invalid, &["give `namespace` or `all_namespaces`, not both"]).await;
        f.refuse(tool, json!({"namespace": "pending", "limit": 0}), invalid, &["`limit` is 0", "1 to 100000"]).await;
        f.refuse(tool, json!({"namespace": "pending", "limit": 100_001}), invalid, &["`limit` is 100001"]).await;
        f.refuse(
            tool,
            json!({"namespace": "pending", "limit": "all"}),
            Sdk,
            &["`limit`: invalid type: string \"all\""],
        )
        .await;
        f.refuse(tool, json!({"namespace": "bad ns"}), invalid, &["bad ns"]).await;
        f.refuse(tool, json!({"namespace": "pending", "dry_run": false}), Sdk, &["unknown field `dry_run`"]).await;
        f.refuse(tool, json!({"all_namespaces": "yes"}), Sdk, &["`all_namespaces`: invalid type: string \"yes\""])
            .await;
    }

    for limit in [0, 501] {
        f.refuse("merges_list", json!({"limit": limit}), invalid, &[&format!("`limit` is {limit}"), "1 to 500"]).await;
    }
    f.refuse("merges_list", json!({"limit": "x"}), Sdk, &["`limit`: invalid type: string \"x\""]).await;
    f.refuse("merges_list", json!({"namespace": "bad ns"}), invalid, &["bad ns"]).await;
    f.refuse("merges_list", json!({"domain": "bad domain"}), invalid, &["bad domain"]).await;
    f.refuse("merges_list", json!({"run": run_id}), Sdk, &["unknown field `run`"]).await;

    let exactly_one = "give exactly one of `merge_id` and `run_id`";
    f.refuse("merge_undo", json!({}), invalid, &[exactly_one]).await;
    f.refuse("merge_undo", json!({"allow_remerge": true}), invalid, &[exactly_one]).await;
    f.refuse("merge_undo", json!({"merge_id": merge_id, "run_id": run_id}), invalid, &[exactly_one]).await;
    f.refuse("merge_undo", json!({"merge_id": 999}), Tool("not_found"), &["no merge with id 999"]).await;
    f.refuse("merge_undo", json!({"run_id": "no-such-run"}), Tool("not_found"), &["\"no-such-run\""]).await;
    f.refuse("merge_undo", json!({"merge_id": merge_id.to_string()}), Sdk, &["`merge_id`: invalid type: string"]).await;
    f.refuse("merge_undo", json!({"merge_id": 1.5}), Sdk, &["`merge_id`: invalid type: floating point `1.5`"]).await;
    f.refuse("merge_undo", json!({"id": merge_id}), Sdk, &["unknown field `id`"]).await;

    // The merge is still in force and can be undone.
    let undone = call_ok(&f.client, "merge_undo", json!({"run_id": run_id})).await;
    assert_eq!(undone["undone"].as_array().map(Vec::len), Some(1), "{undone}");
    close(f.client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_fact_tools_refuse_bad_arguments_and_write_nothing() {
    let f = Fixture::start(&["default", "other"]).await;
    let fact = "Prefers concise answers without preamble";
    let added =
        call_ok(&f.client, "facts_add", json!({"content": fact, "category": "preference", "confidence": 0.9})).await;
    assert_eq!(added["outcome"], "added", "{added}");
    use Refusal::{Sdk, Tool};
    let invalid = Tool("invalid_argument");
    let new = "Writes Rust at work every day";
    let good = |changes: Value| {
        let mut args = json!({"content": new, "category": "knowledge", "confidence": 0.9});
        for (key, value) in changes.as_object().expect("an object") {
            if value.is_null() {
                args.as_object_mut().unwrap().remove(key);
            } else {
                args[key] = value.clone();
            }
        }
        args
    };

    for confidence in [1.5, -0.1] {
        let needles = [&format!("`confidence` is {confidence}")[..], "not a number from 0 to 1"];
        f.refuse("facts_add", good(json!({"confidence": confidence})), invalid, &needles).await;
    }
    f.refuse("facts_add", good(json!({"confidence": "high"})), Sdk, &["`confidence`: invalid type: string \"high\""])
        .await;
    f.refuse("facts_add", good(json!({"confidence": null})), Sdk, &["missing field `confidence`"]).await;
    f.refuse(
        "facts_add",
        good(json!({"category": "mood"})),
        Sdk,
        &["`category`: unknown variant `mood`", "preference"],
    )
    .await;
    f.refuse("facts_add", good(json!({"category": null})), Sdk, &["missing field `category`"]).await;
    f.refuse("facts_add", good(json!({"content": 5})), Sdk, &["`content`: invalid type: integer `5`"]).await;
    f.refuse("facts_add", good(json!({"content": null, "text": new})), Sdk, &["unknown field `text`"]).await;
    f.refuse("facts_add", good(json!({"content": ""})), invalid, &["`content` is empty"]).await;
    f.refuse("facts_add", good(json!({"content": oversized()})), invalid, &["`content` is 1048577 bytes"]).await;
    f.refuse("facts_add", good(json!({"namespace": "bad ns"})), invalid, &["bad ns"]).await;
    f.refuse("facts_add", good(json!({"namespace": "other", "domain": ""})), invalid, &["domain"]).await;

    f.refuse("facts_context", json!({"max_tokens": 0}), invalid, &["`max_tokens` is 0", "1 to 1000000"]).await;
    f.refuse("facts_context", json!({"max_tokens": 1_000_001}), invalid, &["`max_tokens` is 1000001"]).await;
    f.refuse("facts_context", json!({"max_tokens": -5}), Sdk, &["`max_tokens`: invalid value: integer `-5`"]).await;
    f.refuse("facts_context", json!({"namespace": "bad ns"}), invalid, &["bad ns"]).await;
    f.refuse("facts_context", json!({"budget": 100}), Sdk, &["unknown field `budget`"]).await;

    // Without a language model facts_extract is not a tool at all.
    let turn = json!({"user": "I like tea", "assistant": "Noted."});
    let error = try_call(&f.client, "facts_extract", turn).await.expect_err("facts_extract is not listed");
    assert_mentions(&error, &["tool not found"]);
    assert_eq!(db_state(&f.db, f.fact_namespaces)["facts"][0].as_array().map(Vec::len), Some(1));
    close(f.client).await;
}
