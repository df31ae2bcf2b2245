//! The SQLite backend: one file in WAL mode. A write transaction begins with
//! `BEGIN IMMEDIATE`, which takes the database's write lock (and so every scope's lock);
//! writers of one handle queue on an in-process gate first, so they do not spin on the
//! busy handler against each other.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dedup_core::{ContentHash, Embedding};
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, QueryBuilder, Sqlite, SqliteConnection, SqlitePool, Transaction};
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::{CachedRecord, StoreOptions, decode_cached, lock_error, migrate_error, open_error};
use crate::{DbLocation, Error, Result, Scope};

type Db = Sqlite;
type Conn = SqliteConnection;

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

/// Hashes per `IN (…)` list, well under SQLite's limit on bound variables.
const IN_CHUNK: usize = 500;

/// An open SQLite database.
pub(super) struct SqliteBackend {
    pub(super) pool: SqlitePool,
    /// Held by this handle's writer for the length of its write transaction.
    write_gate: Arc<Mutex<()>>,
}

/// A write transaction holding the database write lock.
struct WriteTx {
    tx: Transaction<'static, Db>,
    _gate: OwnedMutexGuard<()>,
}

impl WriteTx {
    fn conn(&mut self) -> &mut Conn {
        &mut self.tx
    }

    async fn commit(self) -> Result<()> {
        self.tx.commit().await?;
        Ok(())
    }
}

impl SqliteBackend {
    pub(super) async fn open(path: &Path, location: &DbLocation, options: &StoreOptions) -> Result<SqliteBackend> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(parent).await.map_err(|e| Error::Open {
                location: location.redacted(),
                source: sqlx::Error::Configuration(format!("cannot create directory {}: {e}", parent.display()).into()),
            })?;
        }
        let connect = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(options.busy_timeout);
        use_wal(&connect, location, options).await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.connect_timeout)
            .connect_with(connect)
            .await
            .map_err(|e| open_error(location, options.busy_timeout, e))?;
        migrate(&pool, location, options).await?;
        Ok(SqliteBackend { pool, write_gate: Arc::new(Mutex::new(())) })
    }

    /// Begins a write transaction with `BEGIN IMMEDIATE`, waiting up to the busy timeout
    /// for another process's write lock. Dropping it rolls back.
    async fn begin_write(&self) -> Result<WriteTx> {
        let gate = Arc::clone(&self.write_gate).lock_owned().await;
        let tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        Ok(WriteTx { tx, _gate: gate })
    }

    pub(super) async fn cached_embeddings(
        &self,
        model: &str,
        hashes: &[ContentHash],
    ) -> Result<HashMap<ContentHash, Embedding>> {
        let mut found = HashMap::new();
        let mut conn = self.pool.acquire().await?;
        for chunk in hashes.chunks(IN_CHUNK) {
            let mut query = QueryBuilder::<Db>::new(
                "SELECT text_hash, CAST(dims AS BIGINT) AS dims, vector FROM embedding_cache WHERE model = ",
            );
            query.push_bind(model).push(" AND text_hash IN (");
            let mut list = query.separated(", ");
            for hash in chunk {
                list.push_bind(hash.as_str());
            }
            query.push(")");
            let rows: Vec<CachedRecord> = query.build_query_as().fetch_all(&mut *conn).await?;
            decode_cached(rows, &mut found)?;
        }
        Ok(found)
    }
}

/// Puts the file in WAL mode (a setting kept in the file), safely when several processes
/// open a new file at once.
///
/// Switching to WAL takes an exclusive lock that SQLite does not wait for with the busy
/// handler: the second of two processes creating the same file would fail at once with
/// "database is locked". So the switch is tried on one connection of its own and retried
/// on a busy answer until the busy timeout; a file already in WAL mode needs no lock.
async fn use_wal(connect: &SqliteConnectOptions, location: &DbLocation, options: &StoreOptions) -> Result<()> {
    let deadline = Instant::now() + options.busy_timeout;
    let mut conn =
        SqliteConnection::connect_with(connect).await.map_err(|e| open_error(location, options.busy_timeout, e))?;
    let mut pause = Duration::from_millis(2);
    let outcome = loop {
        let mode = match sqlx::query_scalar::<_, String>("PRAGMA journal_mode").fetch_one(&mut conn).await {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => break Ok(()),
            Ok(_) => sqlx::query_scalar::<_, String>("PRAGMA journal_mode = WAL").fetch_one(&mut conn).await,
            Err(e) => Err(e),
        };
        match mode {
            Ok(_) => break Ok(()),
            Err(e) if lock_error(location, options.busy_timeout, &e).is_some() && Instant::now() + pause < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => break Err(open_error(location, options.busy_timeout, e)),
        }
    };
    // Closing a connection of a file in WAL mode may checkpoint; a failure there changes
    // nothing the pool depends on.
    let _ = conn.close().await;
    outcome
}

/// Brings the schema up to date, safely when several processes open a new file at once.
///
/// sqlx's SQLite migrator takes no lock: two processes can both see a migration as
/// pending and both apply it, and the second fails ("table memories already exists").
/// So the migrations run inside one `BEGIN IMMEDIATE` transaction, which holds the
/// database's write lock (waiting up to the busy timeout for it): the first process
/// applies them, every later one finds them applied. Each migration becomes a savepoint
/// of that transaction, so a failing migration still leaves nothing behind. A database
/// that is already up to date is recognised by a plain read first, without the write lock.
async fn migrate(pool: &SqlitePool, location: &DbLocation, options: &StoreOptions) -> Result<()> {
    if up_to_date(pool).await {
        return Ok(());
    }
    let mut conn = pool.acquire().await.map_err(|e| open_error(location, options.busy_timeout, e))?;
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(|e| open_error(location, options.busy_timeout, e))?;
    // `run_direct` on the connection: `run` over `&mut` of a transaction makes the future
    // not `Send` (its `Acquire` bound is higher-ranked).
    MIGRATOR.run_direct(&mut *tx).await.map_err(|e| migrate_error(location, options.busy_timeout, e))?;
    tx.commit().await.map_err(|e| open_error(location, options.busy_timeout, e))?;
    Ok(())
}

/// Whether every migration of [`MIGRATOR`] is recorded as applied, with its checksum. Any
/// error (no history table yet, say) means "not known to be", and the locked run decides.
async fn up_to_date(pool: &SqlitePool) -> bool {
    let applied: Vec<(i64, Vec<u8>)> =
        match sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(pool)
            .await
        {
            Ok(rows) => rows,
            Err(_) => return false,
        };
    let expected: Vec<(i64, &[u8])> =
        MIGRATOR.iter().filter(|m| m.migration_type.is_up_migration()).map(|m| (m.version, &*m.checksum)).collect();
    applied.len() == expected.len()
        && applied
            .iter()
            .zip(&expected)
            .all(|((version, sum), (want_version, want_sum))| version == want_version && sum.as_slice() == *want_sum)
}

/// The scope lock: `BEGIN IMMEDIATE` already holds the whole database's write lock.
async fn lock_scope(_conn: &mut Conn, _scope: &Scope) -> Result<()> {
    Ok(())
}

shared_queries!(SqliteBackend, json_param = "");
fact_queries!(SqliteBackend, json_param = "");
upkeep_queries!(SqliteBackend);
dedup_queue_queries!(SqliteBackend);
merge_queries!(SqliteBackend, json_param = "");
review_queries!(SqliteBackend, json_param = "");
change_queries!(SqliteBackend);
