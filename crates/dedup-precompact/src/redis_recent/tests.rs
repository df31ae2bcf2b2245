//! Tests of the Redis recent-capture cache against a real `redis-server` named by
//! `REDIS_URL` (`cargo xtask ci` starts a disposable one). Without `REDIS_URL` they fail:
//! they never pass by skipping.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, IntoConnectionInfo};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use super::*;
use crate::recent::tests::{hash, hit_id, record, scope, shared};

/// The Redis under test; panics with the way to provide one.
fn redis_url() -> String {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "REDIS_URL is not set: the Redis recent-capture tests need a redis-server. Run them via \
             `cargo xtask ci` (which starts a disposable redis-server), or start one and set \
             REDIS_URL, e.g. `REDIS_URL=redis://127.0.0.1:6379/ cargo test -p dedup-precompact --all-features`"
        ),
    }
}

/// A key prefix no other test (or earlier run) uses.
fn unique_prefix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("memdedup-test-{:016x}", hasher.finish())
}

async fn connect_with(prefix: &str, ttl: Duration, capacity: usize) -> RedisRecentCaptures {
    RedisRecentCaptures::connect(&redis_url(), prefix, ttl, capacity).await.unwrap()
}

async fn connect(ttl: Duration, capacity: usize) -> RedisRecentCaptures {
    connect_with(&unique_prefix(), ttl, capacity).await
}

/// A plain connection to the Redis under test, to look at what the cache stored.
async fn raw_connection() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}

async fn delete_keys(cache: &RedisRecentCaptures) {
    let mut connection = raw_connection().await;
    let _: () = redis::cmd("DEL").arg(&cache.zset_key).arg(&cache.hash_key).query_async(&mut connection).await.unwrap();
}

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn record_then_check_hits() {
    let cache = connect(MINUTE, 10).await;
    assert_eq!(cache.backend(), "redis");
    shared::record_then_check_hits(&cache).await;
    delete_keys(&cache).await;
}

#[tokio::test]
async fn scopes_are_isolated() {
    let cache = connect(MINUTE, 10).await;
    shared::scopes_are_isolated(&cache).await;
    delete_keys(&cache).await;
}

#[tokio::test]
async fn capacity_evicts_the_least_recently_recorded() {
    let cache = connect(MINUTE, 3).await;
    shared::capacity_evicts_the_least_recently_recorded(&cache).await;
    delete_keys(&cache).await;
}

#[tokio::test]
async fn record_again_replaces_and_refreshes() {
    let cache = connect(MINUTE, 3).await;
    shared::record_again_replaces_and_refreshes(&cache).await;
    delete_keys(&cache).await;
}

#[tokio::test]
async fn capacity_zero_is_taken_as_one() {
    let cache = connect(MINUTE, 0).await;
    assert_eq!(cache.capacity(), 1);
    let s = scope("decisions");
    record(&cache, &s, "a", 1).await;
    record(&cache, &s, "b", 2).await;
    assert_eq!(hit_id(&cache, &s, "a").await, None);
    assert_eq!(hit_id(&cache, &s, "b").await, Some(2));
    delete_keys(&cache).await;
}

#[tokio::test]
async fn entries_expire_after_the_window_and_len_excludes_them() {
    let cache = connect(Duration::from_secs(1), 10).await;
    let s = scope("decisions");
    record(&cache, &s, "a", 1).await;
    record(&cache, &s, "b", 2).await;
    let hit = cache.check(&s, &hash("a")).await.unwrap().unwrap();
    assert!(hit.age < Duration::from_millis(500), "{:?}", hit.age);

    tokio::time::sleep(Duration::from_millis(600)).await;
    record(&cache, &s, "b", 2).await; // restarts b's window
    record(&cache, &s, "c", 3).await;
    let hit = cache.check(&s, &hash("a")).await.unwrap().unwrap();
    assert!(hit.age >= Duration::from_millis(600) && hit.age < Duration::from_secs(1), "{:?}", hit.age);
    assert_eq!(cache.len().await.unwrap(), 3);

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(hit_id(&cache, &s, "a").await, None, "a is 1.1 s old");
    assert_eq!(cache.len().await.unwrap(), 2, "b and c are 0.5 s old");
    assert_eq!(hit_id(&cache, &s, "b").await, Some(2), "recording b again restarted its window");

    let mut connection = raw_connection().await;
    let stored: u64 = redis::cmd("HLEN").arg(&cache.hash_key).query_async(&mut connection).await.unwrap();
    assert_eq!(stored, 2, "expired entries are evicted from the hash too");

    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(cache.len().await.unwrap(), 0);
    assert!(cache.is_empty().await.unwrap());
    assert_eq!(hit_id(&cache, &s, "c").await, None);
    delete_keys(&cache).await;
}

#[tokio::test]
async fn two_processes_share_captures() {
    let prefix = unique_prefix();
    let first = connect_with(&prefix, MINUTE, 10).await;
    let second = connect_with(&prefix, MINUTE, 10).await;
    let s = scope("decisions");

    record(&first, &s, "Use PostgreSQL", 1).await;
    let hit = second.check(&s, &hash("use postgresql")).await.unwrap().unwrap();
    assert_eq!((hit.memory_id, hit.urn.as_str()), (MemoryId::new(1), "memdedup://global/decisions/1"));

    record(&second, &s, "Use PostgreSQL", 2).await;
    assert_eq!(hit_id(&first, &s, "Use PostgreSQL").await, Some(2));
    assert_eq!(first.len().await.unwrap(), 1);
    assert_eq!(second.len().await.unwrap(), 1);

    let other = connect(MINUTE, 10).await;
    assert_eq!(hit_id(&other, &s, "Use PostgreSQL").await, None, "another prefix is another cache");
    delete_keys(&first).await;
}

#[tokio::test]
async fn redis_holds_hashes_ids_and_urns_but_no_content() {
    let cache = connect(MINUTE, 10).await;
    let s = scope("decisions");
    let text = "the secret plan is to use PostgreSQL";
    record(&cache, &s, text, 42).await;

    let mut connection = raw_connection().await;
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{{{}}}*", cache.prefix())).query_async(&mut connection).await.unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    let entries: Vec<(String, String)> =
        redis::cmd("HGETALL").arg(&cache.hash_key).query_async(&mut connection).await.unwrap();
    assert_eq!(
        entries,
        vec![(format!("global/decisions/{}", hash(text).as_str()), "42 memdedup://global/decisions/42".to_owned())]
    );
    let members: Vec<String> =
        redis::cmd("ZRANGE").arg(&cache.zset_key).arg(0).arg(-1).query_async(&mut connection).await.unwrap();
    assert_eq!(members, vec![entries[0].0.clone()]);
    let ttl_ms: i64 = redis::cmd("PTTL").arg(&cache.zset_key).query_async(&mut connection).await.unwrap();
    assert!(ttl_ms > 0 && ttl_ms <= 61_000, "keys expire once every entry has: {ttl_ms}");
    assert!(!format!("{cache:?}").contains("secret"));
    delete_keys(&cache).await;
}

#[tokio::test]
async fn scores_come_from_the_redis_clock() {
    let cache = connect(MINUTE, 10).await;
    record(&cache, &scope("decisions"), "a", 1).await;
    let mut connection = raw_connection().await;
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut connection).await.unwrap();
    let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(&cache.zset_key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut connection)
        .await
        .unwrap();
    #[allow(clippy::cast_precision_loss)]
    let now_us = (seconds * 1_000_000 + micros) as f64;
    assert_eq!(members.len(), 1);
    let age_us = now_us - members[0].1;
    assert!((0.0..5_000_000.0).contains(&age_us), "score {} vs Redis TIME {now_us}", members[0].1);
    delete_keys(&cache).await;
}

#[tokio::test]
async fn connect_to_a_closed_port_fails_quickly() {
    let start = Instant::now();
    let err =
        RedisRecentCaptures::connect("redis://user:hunter2@127.0.0.1:1/", "memdedup", MINUTE, 10).await.unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(3), "took {:?}", start.elapsed());
    assert!(matches!(err, Error::RecentCache(_)), "{err:?}");
    assert!(err.is_unavailable());
    let message = err.to_string();
    assert!(
        message.starts_with("recent-capture cache unavailable: cannot connect to redis://user:***@127.0.0.1:1/"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");
}

#[tokio::test]
async fn connect_to_a_server_that_never_answers_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let start = Instant::now();
    let err = RedisRecentCaptures::connect(&format!("redis://{addr}/"), "memdedup", MINUTE, 10).await.unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(3), "took {:?}", start.elapsed());
    assert!(matches!(err, Error::RecentCache(_)), "{err:?}");
    silent.abort();
}

#[tokio::test]
async fn invalid_url_and_prefix_are_errors() {
    let err = RedisRecentCaptures::connect("http://127.0.0.1/", "memdedup", MINUTE, 10).await.unwrap_err();
    assert!(matches!(err, Error::RecentCache(_)), "{err:?}");
    for prefix in ["", "a b", "{x}", "tab\there"] {
        let err = RedisRecentCaptures::connect(&redis_url(), prefix, MINUTE, 10).await.unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{prefix:?}: {err:?}");
    }
}

/// A TCP proxy to the Redis under test, to take "Redis" down under a connected cache.
struct Proxy {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            // Dropping the set (when the task is aborted) aborts every connection.
            let mut connections = JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                connections.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Proxy { addr, task }
    }

    /// Closes the listener and every proxied connection.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

#[tokio::test]
async fn redis_going_down_makes_every_call_fail_quickly() {
    let info = redis_url().into_connection_info().unwrap();
    let ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
        panic!("this test needs REDIS_URL to name a TCP address, not {}", info.addr());
    };
    let target = tokio::net::lookup_host((host.as_str(), port)).await.unwrap().next().unwrap();
    let proxy = Proxy::start(target).await;
    let proxied = info.set_addr(ConnectionAddr::Tcp(proxy.addr.ip().to_string(), proxy.addr.port()));
    let client = redis::Client::open(proxied).unwrap();
    let location = format!("redis://{}/", proxy.addr);
    let cache = RedisRecentCaptures::connect_client(client, location, &unique_prefix(), MINUTE, 10).await.unwrap();
    let s = scope("decisions");
    record(&cache, &s, "a", 1).await;
    assert_eq!(hit_id(&cache, &s, "a").await, Some(1));

    proxy.stop().await;
    for _ in 0..3 {
        let start = Instant::now();
        let err = cache.check(&s, &hash("a")).await.unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(3), "check took {:?}", start.elapsed());
        assert!(matches!(err, Error::RecentCache(_)) && err.is_unavailable(), "{err:?}");

        let start = Instant::now();
        let err = cache.record(&s, &hash("b"), MemoryId::new(2), "memdedup://global/decisions/2").await.unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(3), "record took {:?}", start.elapsed());
        assert!(matches!(err, Error::RecentCache(_)), "{err:?}");

        let start = Instant::now();
        let err = cache.len().await.unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(3), "len took {:?}", start.elapsed());
        assert!(matches!(err, Error::RecentCache(_)), "{err:?}");
    }
    delete_keys(&cache).await;
}
