//! Every checker fails open: the memory is still stored and the failure is counted.

use std::sync::Arc;

use async_trait::async_trait;
use dedup_core::Embedding;
use dedup_embed::Embedder;
use dedup_precompact::{CheckType, DeduplicationConfig, DeduplicationService, DuplicateReason};
use dedup_store::{MemoryId, NewMemory};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

use crate::support::{Backend, TableEmbedder, TestStore, long, service};

/// An embedder whose service is down.
struct DownEmbedder;

#[async_trait]
impl Embedder for DownEmbedder {
    fn model_id(&self) -> &str {
        "table-384"
    }

    fn dims(&self) -> usize {
        384
    }

    async fn embed(&self, _texts: &[String]) -> dedup_embed::Result<Vec<Embedding>> {
        Err(dedup_embed::Error::Unavailable { attempts: 1, last_error: "connection refused (test)".into() })
    }
}

/// An embedder that claims the stored model's id but returns 8-dim vectors, so the
/// scope's index cannot take its queries.
struct WrongDimsEmbedder;

#[async_trait]
impl Embedder for WrongDimsEmbedder {
    fn model_id(&self) -> &str {
        "table-384"
    }

    fn dims(&self) -> usize {
        8
    }

    async fn embed(&self, texts: &[String]) -> dedup_embed::Result<Vec<Embedding>> {
        Ok(texts.iter().map(|_| Embedding::new(vec![1.0; 8]).unwrap()).collect())
    }
}

/// Every counter recorded so far: (name, labels, value). A snapshot drains the
/// recorder, so tests take one and query it.
type Counters = Vec<(String, Vec<(String, String)>, u64)>;

fn counters(snapshotter: &Snapshotter) -> Counters {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(n) => Some((
                key.key().name().to_owned(),
                key.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect(),
                n,
            )),
            _ => None,
        })
        .collect()
}

/// The value of counter `name` with exactly these labels (0 when never incremented).
fn counter(counters: &Counters, name: &str, labels: &[(&str, &str)]) -> u64 {
    counters
        .iter()
        .filter(|(n, got, _)| {
            n == name
                && got.len() == labels.len()
                && labels.iter().all(|(k, v)| got.iter().any(|(gk, gv)| gk == k && gv == v))
        })
        .map(|(_, _, value)| value)
        .sum()
}

#[tokio::test]
async fn embedder_down_still_stores_and_counts_it() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let db = TestStore::open(Backend::Sqlite).await;
    let dedup = DeduplicationService::new(db.store.clone(), Arc::new(DownEmbedder), DeduplicationConfig::default());
    let scope = db.scope("decisions");
    let added = dedup.add(NewMemory::new(scope.clone(), long("Keep the payment ledger append-only"))).await.unwrap();
    assert!(added.stored.is_some(), "stored despite the embedder: {added:?}");
    assert!(!added.embedded);
    assert_eq!(added.check.degraded.len(), 1);
    assert_eq!(added.check.degraded[0].check, CheckType::Semantic);
    assert!(added.check.degraded[0].error.contains("connection refused (test)"));
    let seen = counters(&snapshotter);
    assert_eq!(counter(&seen, "dedup_check_failures_total", &[("check_type", "semantic")]), 1);
    assert_eq!(counter(&seen, "dedup_checks_total", &[("namespace", "decisions"), ("result", "unique")]), 1);
    // Exact duplicates are still caught.
    let again = dedup.add(NewMemory::new(scope, long("Keep the payment ledger append-only"))).await.unwrap();
    assert_eq!(again.check.reason, Some(DuplicateReason::ExactMatch));
    let seen = counters(&snapshotter);
    assert_eq!(counter(&seen, "dedup_skipped_total", &[("namespace", "decisions"), ("reason", "exact")]), 1);
}

#[tokio::test]
async fn index_error_still_stores_and_counts_it() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let db = TestStore::open(Backend::Sqlite).await;
    let scope = db.scope("patterns");
    let good = service(&db, Arc::new(TableEmbedder::new()));
    good.add(NewMemory::new(scope.clone(), long("Use structured logging everywhere"))).await.unwrap();
    let broken =
        DeduplicationService::new(db.store.clone(), Arc::new(WrongDimsEmbedder), DeduplicationConfig::default());
    let added = broken.add(NewMemory::new(scope.clone(), long("Log in JSON with request ids"))).await.unwrap();
    assert!(added.stored.is_some(), "{added:?}");
    assert!(!added.embedded, "a vector the index rejects is not stored");
    assert_eq!(added.check.degraded[0].check, CheckType::Semantic);
    assert!(added.check.degraded[0].error.starts_with("vector search:"), "{:?}", added.check.degraded);
    let seen = counters(&snapshotter);
    assert_eq!(counter(&seen, "dedup_check_failures_total", &[("check_type", "semantic")]), 1);
    // The scope's index is intact for the right model.
    let check = good.check_duplicate(&long("Use structured logging everywhere!"), &scope).await.unwrap();
    assert!(check.nearest.is_some() && check.degraded.is_empty(), "{check:?}");
}

#[tokio::test]
async fn store_down_fails_the_exact_and_semantic_checks_open() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let db = TestStore::open(Backend::Sqlite).await;
    let dedup = service(&db, Arc::new(TableEmbedder::new()));
    let scope = db.scope("default");
    let text = long("Pin every dependency in the lock file");
    dedup.record_capture(&text, &scope, MemoryId::new(5)).await;
    db.store.close().await;
    let result = dedup.check_duplicate(&text, &scope).await.expect("a check never fails because a backend is down");
    let failed: Vec<CheckType> = result.degraded.iter().map(|f| f.check).collect();
    assert_eq!(failed, vec![CheckType::Exact, CheckType::Semantic]);
    assert_eq!(result.reason, Some(DuplicateReason::RecentCapture), "the recent check still decides");
    let seen = counters(&snapshotter);
    assert_eq!(counter(&seen, "dedup_check_failures_total", &[("check_type", "exact")]), 1);
    assert_eq!(counter(&seen, "dedup_check_failures_total", &[("check_type", "semantic")]), 1);
    let err = dedup.add(NewMemory::new(scope, long("Something new entirely"))).await.unwrap_err();
    assert!(err.is_unavailable(), "storing needs the store: {err}");
}

#[cfg(feature = "redis")]
mod redis_down {
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    use dedup_precompact::RedisRecentCaptures;

    use super::*;

    /// A redis-server of our own, so the test can take it down; killed when dropped.
    struct OwnRedis {
        child: Child,
        port: u16,
    }

    impl OwnRedis {
        fn start() -> OwnRedis {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .spawn()
                .expect("redis-server is installed (the Debian package redis-server; .ci/run installs it)");
            let mut redis = OwnRedis { child, port };
            for _ in 0..100 {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return redis;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            redis.stop();
            panic!("redis-server did not start on port {port}");
        }

        fn stop(&mut self) {
            self.child.kill().ok();
            self.child.wait().ok();
        }
    }

    impl Drop for OwnRedis {
        fn drop(&mut self) {
            self.stop();
        }
    }

    #[tokio::test]
    async fn redis_down_still_stores_and_counts_it() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _guard = metrics::set_default_local_recorder(&recorder);
        let mut redis = OwnRedis::start();
        let url = format!("redis://127.0.0.1:{}/", redis.port);
        let recent = RedisRecentCaptures::connect(&url, "memdedup-test", Duration::from_secs(300), 1000).await.unwrap();
        let db = TestStore::open(Backend::Sqlite).await;
        let dedup = service(&db, Arc::new(TableEmbedder::new())).with_recent_captures(Arc::new(recent));
        let scope = db.scope("learnings");
        let first = dedup.add(NewMemory::new(scope.clone(), long("Retry idempotent calls with jitter"))).await.unwrap();
        assert!(first.stored.is_some() && first.check.degraded.is_empty(), "{first:?}");
        redis.stop();
        let started = std::time::Instant::now();
        let second = dedup.add(NewMemory::new(scope.clone(), long("Cap retries at five attempts"))).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(10), "a down Redis does not hang the check");
        assert!(second.stored.is_some(), "stored despite Redis: {second:?}");
        assert!(second.check.degraded.iter().any(|f| f.check == CheckType::Recent), "{second:?}");
        let seen = counters(&snapshotter);
        assert!(counter(&seen, "dedup_check_failures_total", &[("check_type", "recent")]) >= 1);
    }
}

/// Defect 13: a service without a model says so in every check and add it answers, so a
/// tool result never passes an unproven "unique" off as the whole answer.
#[tokio::test]
async fn defect_13_without_a_model_checks_and_adds_say_so_loudly() {
    let db = TestStore::open(Backend::Sqlite).await;
    let dedup = DeduplicationService::without_embeddings(db.store.clone(), DeduplicationConfig::default());
    let scope = db.scope("decisions");
    let text = long("Keep the payment ledger append-only");
    let checked = dedup.check_duplicate(&text, &scope).await.unwrap();
    assert_eq!(checked.not_run, [CheckType::Semantic]);
    assert_eq!(checked.notes, [dedup_precompact::NO_EMBEDDER_NOTE]);
    let explained = checked.explanation_noting_failures(&scope);
    assert!(explained.starts_with("unique in "), "{explained}");
    assert!(
        explained.contains("(warning: no embedding model is loaded, so the semantic check did not run"),
        "{explained}"
    );
    let added = dedup.add(NewMemory::new(scope.clone(), text)).await.unwrap();
    assert!(added.stored.is_some() && !added.embedded);
    assert!(added.explanation(&scope).contains("(warning: no embedding model is loaded"), "{added:?}");
    // A text too short for the semantic check is not a missing model.
    let short = dedup.check_duplicate("Ledger.", &scope).await.unwrap();
    assert!(short.notes.is_empty(), "{short:?}");
}
