//! [`RedisRecentCaptures`]: the recent-capture cache shared through Redis, so several
//! processes or hosts see each other's captures (seed 004's "distributed deduplication").

use std::fmt;
use std::future::Future;
use std::time::Duration;

use dedup_core::ContentHash;
use dedup_store::{MemoryId, Scope};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisResult, Script};

use crate::config::redact_url;
use crate::recent::{RecentCaptures, RecentHit};
use crate::{Error, Result};

/// How long connecting, and every command, may take before the cache counts as down.
const TIMEOUT: Duration = Duration::from_secs(2);

/// The longest window kept exact: scores are microseconds in Lua doubles, exact below 2^53.
const MAX_TTL_MICROS: u64 = 1 << 50;

/// Lua shared by the scripts: the server's clock, and dropping expired entries.
const LUA_PRELUDE: &str = r"
if redis.replicate_commands then redis.replicate_commands() end

-- Microseconds since the epoch by the Redis server's clock, so hosts with skewed clocks agree.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Drops entries recorded at or before `cutoff` (their age is at least the window).
local function purge(z, h, cutoff)
  local expired = redis.call('ZRANGEBYSCORE', z, '-inf', cutoff)
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', z, '-inf', cutoff)
    for i = 1, #expired, 1000 do
      redis.call('HDEL', h, unpack(expired, i, math.min(i + 999, #expired)))
    end
  end
end
";

/// KEYS: sorted set, hash. ARGV: member, value, window in µs, capacity.
const LUA_RECORD: &str = r"
local z, h = KEYS[1], KEYS[2]
local member, value = ARGV[1], ARGV[2]
local ttl, capacity = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_us()
purge(z, h, now - ttl)
-- Scores strictly increase, so eviction follows the order of recording even within one
-- microsecond or if the server's clock steps back.
local score = now
local newest = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
if newest[2] and tonumber(newest[2]) >= score then score = tonumber(newest[2]) + 1 end
redis.call('ZADD', z, score, member)
redis.call('HSET', h, member, value)
local excess = redis.call('ZCARD', z) - capacity
if excess > 0 then
  local oldest = redis.call('ZRANGE', z, 0, excess - 1)
  redis.call('ZREMRANGEBYRANK', z, 0, excess - 1)
  for i = 1, #oldest, 1000 do
    redis.call('HDEL', h, unpack(oldest, i, math.min(i + 999, #oldest)))
  end
end
-- Once every entry has expired the keys go too.
local keep_ms = math.ceil(ttl / 1000) + 1000
redis.call('PEXPIRE', z, keep_ms)
redis.call('PEXPIRE', h, keep_ms)
return 1
";

/// KEYS: sorted set, hash. ARGV: member, window in µs. Returns nil or {value, age in µs}.
const LUA_CHECK: &str = r"
local z, h = KEYS[1], KEYS[2]
local member, ttl = ARGV[1], tonumber(ARGV[2])
local score = redis.call('ZSCORE', z, member)
if not score then return false end
local now = now_us()
local age = now - tonumber(score)
if age < 0 then age = 0 end
if age >= ttl then
  purge(z, h, now - ttl)
  return false
end
local value = redis.call('HGET', h, member)
if not value then
  redis.call('ZREM', z, member)
  return false
end
return {value, age}
";

/// KEYS: sorted set, hash. ARGV: window in µs. Returns the number of live entries.
const LUA_LEN: &str = r"
purge(KEYS[1], KEYS[2], now_us() - tonumber(ARGV[1]))
return redis.call('ZCARD', KEYS[1])
";

/// A [`RecentCaptures`] kept in Redis, with the semantics of
/// [`RecentCaptureCache`](crate::RecentCaptureCache) across processes and hosts: an entry
/// lives for the window after its latest record, and beyond the capacity the least
/// recently recorded entry is evicted.
///
/// Layout, under keys sharing the hash tag `{prefix}` (so one Redis Cluster slot holds
/// them): the sorted set `{prefix}:recent:z` with members `{domain}/{namespace}/{hash}`
/// scored by capture time in microseconds by the Redis server's clock (not the local one,
/// so hosts with skewed clocks agree), and the hash `{prefix}:recent:h` mapping each member
/// to `"{memory_id} {urn}"`. Record, check and len are Lua scripts, each atomic. Content is
/// never sent to Redis, only hashes, ids and URNs.
///
/// Every instance sharing a prefix should use the same window and capacity; each applies
/// its own on every call. Connecting and every command time out after 2 s; every failure
/// is an [`Error::RecentCache`], so the service can fail open.
pub struct RedisRecentCaptures {
    connection: ConnectionManager,
    location: String,
    prefix: String,
    zset_key: String,
    hash_key: String,
    ttl: Duration,
    ttl_micros: u64,
    capacity: usize,
    record_script: Script,
    check_script: Script,
    len_script: Script,
}

impl RedisRecentCaptures {
    /// The key prefix when none is configured.
    pub const DEFAULT_PREFIX: &'static str = "memdedup";

    /// Connects to the Redis at `url` (`redis://[user:password@]host[:port][/db]` or
    /// `redis+unix:///path`) and keeps entries under `prefix` for `ttl`, at most `capacity`
    /// of them (0 is taken as 1).
    ///
    /// Entries name memory ids of one store, so stores sharing a Redis must not share a
    /// prefix: [`DeduplicationService::connect_recent_cache`] uses
    /// `memdedup:{`[`Store::store_id`]`}`.
    ///
    /// [`DeduplicationService::connect_recent_cache`]: crate::DeduplicationService::connect_recent_cache
    /// [`Store::store_id`]: dedup_store::Store::store_id
    ///
    /// Fails with [`Error::RecentCache`] within about 2 s when Redis cannot be reached, and
    /// with [`Error::Config`] when `prefix` is empty or holds whitespace or braces.
    pub async fn connect(url: &str, prefix: &str, ttl: Duration, capacity: usize) -> Result<RedisRecentCaptures> {
        if prefix.is_empty() || prefix.chars().any(|c| c.is_whitespace() || c.is_control() || matches!(c, '{' | '}')) {
            return Err(Error::config(
                "redis key prefix",
                format!("must be non-empty without whitespace or braces, got {prefix:?}"),
            ));
        }
        let location = redact_url(url);
        let client =
            redis::Client::open(url).map_err(|e| Error::RecentCache(format!("invalid redis url {location}: {e}")))?;
        RedisRecentCaptures::connect_client(client, location, prefix, ttl, capacity).await
    }

    /// [`RedisRecentCaptures::connect`] with the client already built; `location` names
    /// the server in errors and must hold no password.
    async fn connect_client(
        client: redis::Client,
        location: String,
        prefix: &str,
        ttl: Duration,
        capacity: usize,
    ) -> Result<RedisRecentCaptures> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let connection = match tokio::time::timeout(TIMEOUT, ConnectionManager::new_with_config(client, config)).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(e)) => return Err(Error::RecentCache(format!("cannot connect to {location}: {e}"))),
            Err(_) => {
                return Err(Error::RecentCache(format!(
                    "cannot connect to {location}: no answer within {} s",
                    TIMEOUT.as_secs()
                )));
            }
        };
        let ttl_micros = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX).clamp(1, MAX_TTL_MICROS);
        let script = |body: &str| Script::new(&format!("{LUA_PRELUDE}\n{body}"));
        Ok(RedisRecentCaptures {
            connection,
            location,
            prefix: prefix.to_owned(),
            zset_key: format!("{{{prefix}}}:recent:z"),
            hash_key: format!("{{{prefix}}}:recent:h"),
            ttl,
            ttl_micros,
            capacity: capacity.max(1),
            record_script: script(LUA_RECORD),
            check_script: script(LUA_CHECK),
            len_script: script(LUA_LEN),
        })
    }

    /// How long an entry lives after it was recorded.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The most entries kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Runs one command against Redis, bounded by [`TIMEOUT`]; `what` names it in errors.
    async fn run<T>(&self, what: &str, command: impl Future<Output = RedisResult<T>>) -> Result<T> {
        match tokio::time::timeout(TIMEOUT, command).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(Error::RecentCache(format!("redis {what} at {} failed: {e}", self.location))),
            Err(_) => Err(Error::RecentCache(format!(
                "redis {what} at {} got no answer within {} s",
                self.location,
                TIMEOUT.as_secs()
            ))),
        }
    }
}

/// The sorted-set member of a capture: `{domain}/{namespace}/{hash}` (names cannot hold `/`).
fn member(scope: &Scope, hash: &ContentHash) -> String {
    format!("{}/{}/{}", scope.domain(), scope.namespace_name(), hash.as_str())
}

impl fmt::Debug for RedisRecentCaptures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisRecentCaptures")
            .field("location", &self.location)
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl RecentCaptures for RedisRecentCaptures {
    async fn check(&self, scope: &Scope, hash: &ContentHash) -> Result<Option<RecentHit>> {
        let mut connection = self.connection.clone();
        let mut invocation = self.check_script.prepare_invoke();
        invocation.key(&self.zset_key).key(&self.hash_key).arg(member(scope, hash)).arg(self.ttl_micros);
        let reply: Option<(String, i64)> = self.run("check", invocation.invoke_async(&mut connection)).await?;
        let Some((value, age_micros)) = reply else {
            return Ok(None);
        };
        let parsed = value.split_once(' ').and_then(|(id, urn)| Some((id.parse::<MemoryId>().ok()?, urn)));
        let Some((memory_id, urn)) = parsed else {
            return Err(Error::RecentCache(format!(
                "malformed entry for {} in {}: expected \"<memory id> <urn>\"",
                hash.fingerprint(),
                self.hash_key
            )));
        };
        let age = Duration::from_micros(u64::try_from(age_micros).unwrap_or(0));
        Ok(Some(RecentHit { memory_id, urn: urn.to_owned(), age }))
    }

    async fn record(&self, scope: &Scope, hash: &ContentHash, memory_id: MemoryId, urn: &str) -> Result<()> {
        let mut connection = self.connection.clone();
        let mut invocation = self.record_script.prepare_invoke();
        invocation
            .key(&self.zset_key)
            .key(&self.hash_key)
            .arg(member(scope, hash))
            .arg(format!("{memory_id} {urn}"))
            .arg(self.ttl_micros)
            .arg(self.capacity);
        self.run("record", invocation.invoke_async::<i64>(&mut connection)).await.map(drop)
    }

    async fn len(&self) -> Result<usize> {
        let mut connection = self.connection.clone();
        let mut invocation = self.len_script.prepare_invoke();
        invocation.key(&self.zset_key).key(&self.hash_key).arg(self.ttl_micros);
        let n: u64 = self.run("len", invocation.invoke_async(&mut connection)).await?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn backend(&self) -> &'static str {
        "redis"
    }
}

#[cfg(test)]
mod tests;
