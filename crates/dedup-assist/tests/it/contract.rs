//! The judge contract through the real wire formats: each scripted reply from the fake
//! LLM server is either merged as the contract allows or rejected with nothing written
//! and the attempt recorded for a retry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dedup_assist::{DedupOptions, Judge, LlmJudge, RunReport};
use dedup_llm::fake::{FakeLlm, FakeReply};
use dedup_llm::{OpenAiChat, OpenAiChatConfig};
use dedup_store::{MemoryId, TextSource};
use serde_json::json;

use crate::backend_tests;
use crate::support::{ScopeState, TableEmbedder, TestStore, anthropic_judge, batch_of, openai_judge, run};

const V1: &str = "Run `cargo fmt --check` in CI.";
const V2: &str = "Run clippy with warnings denied in CI.";
const U1: &str = "CI must run `cargo fmt --check`.";
const SECRET: &str = "sk-test-secret-key";

struct Fixture {
    embedder: Arc<TableEmbedder>,
    v1: MemoryId,
    v2: MemoryId,
    u1: MemoryId,
    before: ScopeState,
}

/// V1 and V2 verified; U1 unverified with both as candidates: one batch of three.
async fn fixture(db: &TestStore) -> Fixture {
    let embedder = Arc::new(TableEmbedder::new().blend(U1, &[(V1, 1.0), (V2, 0.7)]));
    let v1 = db.add(embedder.as_ref(), V1).await;
    let v2 = db.add(embedder.as_ref(), V2).await;
    db.verify(&[v1, v2]).await;
    let u1 = db.add(embedder.as_ref(), U1).await;
    let before = db.state("table-64").await;
    Fixture { embedder, v1, v2, u1, before }
}

fn single_pass() -> DedupOptions {
    DedupOptions { max_passes: 1, ..DedupOptions::default() }
}

fn reply(value: serde_json::Value) -> FakeReply {
    FakeReply::text(value.to_string())
}

fn group(ids: &[MemoryId], canonical: &str, confidence: f64, reason: &str) -> serde_json::Value {
    json!({"ids": ids.iter().map(|id| id.get()).collect::<Vec<_>>(), "canonical_text": canonical, "confidence": confidence, "reason": reason})
}

/// Runs one pass with `judge` and checks that the reply was rejected: nothing changed
/// except U1's attempt count and last error, which names `expected`.
async fn assert_rejected(db: &TestStore, f: &Fixture, judge: Arc<dyn Judge>, expected: &str) -> RunReport {
    let report = run(db, f.embedder.clone(), judge, single_pass()).await;
    assert_eq!(report.merged, 0, "{report:#?}");
    assert_eq!((report.failed, report.retryable), (1, 1), "{report:#?}");
    let mut after = db.state("table-64").await;
    let u1 = after.memories.get_mut(&f.u1).unwrap();
    assert_eq!(u1.dedup_attempts, 1);
    assert!(!u1.dedup_verified);
    let error = u1.dedup_last_error.take().expect("the failure is recorded");
    assert!(error.contains(expected), "expected {expected:?} in {error:?}");
    assert!(!error.contains(SECRET), "the API key leaked into {error}");
    u1.dedup_attempts = 0;
    assert_eq!(after, f.before, "a rejected reply wrote something");
    assert!(report.errors.iter().all(|e| !e.contains(SECRET)));
    report
}

/// Runs one pass and checks that U1 was merged into V1.
async fn assert_merged(db: &TestStore, f: &Fixture, judge: Arc<dyn Judge>) -> RunReport {
    let report = run(db, f.embedder.clone(), judge, single_pass()).await;
    assert_eq!(report.merged, 1, "{report:#?}");
    assert_eq!(db.get(f.u1).await.merged_into, Some(f.v1));
    assert!(!db.get(f.v2).await.deprecated);
    report
}

fn valid_answer(f: &Fixture) -> serde_json::Value {
    json!({"groups": [group(&[f.u1, f.v1], "CI must run `cargo fmt --check` on every push.", 0.93, "Same rule.")], "no_match_ids": [], "notes": []})
}

backend_tests! {
    async fn a_valid_openai_reply_is_merged(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::scripted(vec![reply(valid_answer(&f))]);
        let report = assert_merged(&db, &f, openai_judge(&server)).await;
        let survivor = db.get(f.v1).await;
        assert_eq!(survivor.content, "CI must run `cargo fmt --check` on every push.");
        assert_eq!(survivor.occurrence_count, 2);
        let request = &server.requests()[0];
        let batch = batch_of(request);
        assert_eq!(batch.memories.len(), 3);
        assert_eq!(batch.candidate_edges.len(), 2);
        assert!(request.system.contains("INCREMENTAL mode"));
        assert_eq!(request.body["temperature"], 0.0);
        assert_eq!(report.judge_calls, 1);
        let merges = db.merges().await;
        assert_eq!(merges.len(), 1);
        assert_eq!(merges[0].run_id, report.run_id);
        assert_eq!((merges[0].judge.as_str(), merges[0].model.as_str()), ("openai", "fake-model"));
        assert_eq!(merges[0].text_source, TextSource::Canonical);
    }

    async fn a_valid_anthropic_reply_is_merged(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::scripted(vec![reply(valid_answer(&f))]);
        assert_merged(&db, &f, anthropic_judge(&server)).await;
        let request = &server.requests()[0];
        assert_eq!(request.headers.get("anthropic-version").map(String::as_str), Some("2023-06-01"));
        assert!(request.system.contains("INCREMENTAL mode"));
    }

    async fn fenced_json_is_read(db) {
        let f = fixture(&db).await;
        let text = format!("Here are the groups:\n```json\n{}\n```\nDone.", valid_answer(&f));
        let server = FakeLlm::scripted(vec![FakeReply::text(text)]);
        assert_merged(&db, &f, openai_judge(&server)).await;
    }

    async fn malformed_json_is_rejected(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::scripted(vec![FakeReply::text("{\"groups\": [{\"ids\": [1,")]);
        assert_rejected(&db, &f, openai_judge(&server), "no JSON object").await;
    }

    async fn a_reply_of_the_wrong_shape_is_rejected(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::scripted(vec![reply(json!({"groups": "none"}))]);
        assert_rejected(&db, &f, openai_judge(&server), "not in the response shape").await;
    }

    async fn unknown_ids_are_rejected(db) {
        let f = fixture(&db).await;
        let answer = json!({"groups": [group(&[f.u1, MemoryId::new(999_999)], "x y.", 0.9, "r")], "no_match_ids": []});
        let server = FakeLlm::scripted(vec![reply(answer)]);
        assert_rejected(&db, &f, openai_judge(&server), "names id 999999, which is not in the batch").await;
    }

    async fn an_id_in_two_groups_is_rejected(db) {
        let f = fixture(&db).await;
        let answer = json!({"groups": [group(&[f.u1, f.v1], "a.", 0.9, "r"), group(&[f.u1, f.v2], "b.", 0.9, "r")]});
        let server = FakeLlm::scripted(vec![reply(answer)]);
        assert_rejected(&db, &f, openai_judge(&server), &format!("id {} appears in group 0 and group 1", f.u1)).await;
    }

    async fn a_missing_unverified_id_is_rejected(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::scripted(vec![reply(json!({"groups": [], "no_match_ids": []}))]);
        assert_rejected(&db, &f, openai_judge(&server), &format!("id {} is in neither a group nor no_match_ids", f.u1)).await;
    }

    async fn a_group_without_an_unverified_id_is_rejected(db) {
        let f = fixture(&db).await;
        let answer = json!({"groups": [group(&[f.v1, f.v2], "Run checks in CI.", 0.9, "r")], "no_match_ids": [f.u1.get()]});
        let server = FakeLlm::scripted(vec![reply(answer)]);
        assert_rejected(&db, &f, openai_judge(&server), "has no unverified id").await;
    }

    async fn confidence_out_of_range_is_rejected(db) {
        let f = fixture(&db).await;
        let answer = json!({"groups": [group(&[f.u1, f.v1], "CI runs `cargo fmt --check`.", 1.7, "r")]});
        let server = FakeLlm::scripted(vec![reply(answer)]);
        assert_rejected(&db, &f, openai_judge(&server), "confidence 1.7, outside [0, 1]").await;
    }

    async fn a_300_character_reason_is_rejected(db) {
        let f = fixture(&db).await;
        let answer = json!({"groups": [group(&[f.u1, f.v1], "CI runs `cargo fmt --check`.", 0.9, &"r".repeat(300))]});
        let server = FakeLlm::scripted(vec![reply(answer)]);
        assert_rejected(&db, &f, openai_judge(&server), "reason is 300 characters, over the limit of 160").await;
    }

    async fn a_truncated_reply_is_rejected(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::scripted(vec![FakeReply::text(valid_answer(&f).to_string()).finish_length()]);
        assert_rejected(&db, &f, openai_judge(&server), "cut off at max_tokens").await;
    }

    async fn a_canonical_text_that_drops_a_code_span_keeps_the_best_existing_text(db) {
        let f = fixture(&db).await;
        let answer = json!({"groups": [group(&[f.u1, f.v1], "Check formatting in CI.", 0.9, "Same rule.")], "no_match_ids": []});
        let server = FakeLlm::scripted(vec![reply(answer)]);
        assert_merged(&db, &f, openai_judge(&server)).await;
        let survivor = db.get(f.v1).await;
        assert_eq!(survivor.content, U1, "the longest text with the code span");
        let merge = &db.merges().await[0];
        assert_eq!(merge.text_source, TextSource::Existing { from: f.u1 });
        assert_eq!(merge.canonical_text.as_deref(), Some("Check formatting in CI."));
        assert_eq!(merge.final_text, U1);
    }

    async fn defect_9_a_canonical_text_of_three_sentences_keeps_a_members_text(db) {
        let f = fixture(&db).await;
        let wordy = "Run `cargo fmt --check` in CI. It keeps diffs small. Reviewers thank you.";
        let answer = json!({"groups": [group(&[f.u1, f.v1], wordy, 0.9, "Same rule.")], "no_match_ids": []});
        let server = FakeLlm::scripted(vec![reply(answer)]);
        assert_merged(&db, &f, openai_judge(&server)).await;
        let merge = &db.merges().await[0];
        assert!(matches!(merge.text_source, TextSource::Existing { .. }), "{:?}", merge.text_source);
        assert_eq!(merge.canonical_text.as_deref(), Some(wordy));
        assert!([V1, U1].contains(&merge.final_text.as_str()), "{}", merge.final_text);
    }

    async fn a_429_with_retry_after_is_retried_after_the_wait(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::scripted(vec![
            FakeReply::status(429, "slow down").retry_after(1),
            reply(valid_answer(&f)),
        ]);
        let mut config = OpenAiChatConfig::new(server.base_url(), "fake-model");
        config.retry.initial_backoff = Duration::from_millis(5);
        config.retry.max_backoff = Duration::from_secs(5);
        let judge: Arc<dyn Judge> = Arc::new(LlmJudge::new(Arc::new(OpenAiChat::new(config).unwrap())));
        let started = Instant::now();
        assert_merged(&db, &f, judge).await;
        assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After was not honoured");
        assert_eq!(server.request_count(), 2);
    }

    async fn a_500_is_retried(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::scripted(vec![FakeReply::status(500, "boom"), reply(valid_answer(&f))]);
        assert_merged(&db, &f, openai_judge(&server)).await;
        assert_eq!(server.request_count(), 2);
    }

    async fn a_server_that_keeps_failing_is_recorded_for_retry(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::scripted(vec![]);
        assert_rejected(&db, &f, openai_judge(&server), "500").await;
        assert_eq!(server.request_count(), 3, "one call and two retries");
    }

    async fn a_timeout_is_recorded_for_retry(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::scripted(vec![
            reply(valid_answer(&f)).delay(Duration::from_secs(3)),
            reply(valid_answer(&f)).delay(Duration::from_secs(3)),
        ]);
        let mut config = OpenAiChatConfig::new(server.base_url(), "fake-model");
        config.timeout = Duration::from_millis(300);
        config.retry.max_retries = 1;
        config.retry.initial_backoff = Duration::from_millis(5);
        let judge: Arc<dyn Judge> = Arc::new(LlmJudge::new(Arc::new(OpenAiChat::new(config).unwrap())));
        let started = Instant::now();
        assert_rejected(&db, &f, judge, "after 2 attempts").await;
        assert!(started.elapsed() < Duration::from_secs(3), "the timeout did not cut the wait");
    }

    async fn a_400_surfaces_the_servers_message_without_retrying(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::scripted(vec![FakeReply::status(400, "model `fake-model` does not exist")]);
        assert_rejected(&db, &f, openai_judge(&server), "model `fake-model` does not exist").await;
        assert_eq!(server.request_count(), 1);
    }

    async fn a_memory_is_given_up_after_max_attempts(db) {
        let f = fixture(&db).await;
        let server = FakeLlm::start(Arc::new(|_: &dedup_llm::fake::FakeRequest| FakeReply::text("no")));
        let options = DedupOptions { max_attempts: 2, ..DedupOptions::default() };
        let report = run(&db, f.embedder.clone(), openai_judge(&server), options.clone()).await;
        assert_eq!(report.passes.len(), 1, "a pass without progress ends the run: {report:#?}");
        let report = run(&db, f.embedder.clone(), openai_judge(&server), options.clone()).await;
        assert_eq!(report.exhausted.len(), 1, "{report:#?}");
        assert_eq!(report.exhausted[0].id, f.u1);
        assert_eq!(report.exhausted[0].attempts, 2);
        assert_eq!(report.retryable, 0);
        let calls = server.request_count();
        let report = run(&db, f.embedder.clone(), openai_judge(&server), options).await;
        assert_eq!(server.request_count(), calls, "an exhausted memory is not retried");
        assert_eq!(report.exhausted.len(), 1);
    }
}
