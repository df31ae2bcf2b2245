//! The Postgres backend: many processes or hosts share one database. A write transaction
//! takes its scope's lock with `pg_advisory_xact_lock`, released when it ends.

use std::collections::HashMap;
use std::str::FromStr;

use dedup_core::{ContentHash, Embedding};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};

use super::{CachedRecord, StoreOptions, decode_cached, migrate_error, open_error, scope_lock_key};
use crate::{DbLocation, Result, Scope};

type Db = Postgres;
type Conn = PgConnection;

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

/// A connection pool to one Postgres database.
pub(super) struct PgBackend {
    pub(super) pool: PgPool,
}

/// A write transaction (READ COMMITTED: each statement after the scope lock sees every
/// write committed before the lock was granted).
struct WriteTx {
    tx: Transaction<'static, Db>,
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

/// The Postgres schema holding memdedup's tables.
pub(crate) const SCHEMA: &str = "memdedup";

/// Creates [`SCHEMA`] unless it exists. Two processes may race: the loser's unique
/// violation is fine when the schema is there afterwards.
async fn create_schema(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let exists = "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)";
    if sqlx::query_scalar::<_, bool>(exists).bind(SCHEMA).fetch_one(&mut *conn).await? {
        return Ok(());
    }
    match sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {SCHEMA}")).execute(&mut *conn).await {
        Ok(_) => Ok(()),
        Err(error) => {
            if sqlx::query_scalar::<_, bool>(exists).bind(SCHEMA).fetch_one(&mut *conn).await? {
                Ok(())
            } else {
                Err(error)
            }
        }
    }
}

impl PgBackend {
    pub(super) async fn open(url: &str, location: &DbLocation, options: &StoreOptions) -> Result<PgBackend> {
        let connect = PgConnectOptions::from_str(url).map_err(|e| open_error(location, options.busy_timeout, e))?;
        // One direct connection first: the pool would report any failure as a timeout, this
        // says why (refused, unknown host, bad password, no such database).
        match tokio::time::timeout(options.connect_timeout, PgConnection::connect_with(&connect)).await {
            Ok(Ok(mut probe)) => {
                let created = create_schema(&mut probe).await;
                let _ = probe.close().await;
                created.map_err(|e| open_error(location, options.busy_timeout, e))?;
            }
            Ok(Err(e)) => return Err(open_error(location, options.busy_timeout, e)),
            Err(_) => {
                let waited = format!("no answer within {} ms", options.connect_timeout.as_millis());
                let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, waited);
                return Err(open_error(location, options.busy_timeout, sqlx::Error::Io(timeout)));
            }
        }
        // Every table, the migration history included, lives in its own schema, so a
        // database shared with an application (DATABASE_URL) keeps its `public` tables and
        // its own `_sqlx_migrations` apart from ours.
        let connect = connect.options([("search_path", SCHEMA)]);
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.connect_timeout)
            .connect_with(connect)
            .await
            .map_err(|e| open_error(location, options.busy_timeout, e))?;
        // The migrator takes an advisory lock, so processes opening at once migrate in turn.
        MIGRATOR.run(&pool).await.map_err(|e| migrate_error(location, options.busy_timeout, e))?;
        Ok(PgBackend { pool })
    }

    async fn begin_write(&self) -> Result<WriteTx> {
        Ok(WriteTx { tx: self.pool.begin().await? })
    }

    pub(super) async fn cached_embeddings(
        &self,
        model: &str,
        hashes: &[ContentHash],
    ) -> Result<HashMap<ContentHash, Embedding>> {
        let hashes: Vec<&str> = hashes.iter().map(ContentHash::as_str).collect();
        let rows: Vec<CachedRecord> = sqlx::query_as(
            "SELECT text_hash, CAST(dims AS BIGINT) AS dims, vector FROM embedding_cache \
             WHERE model = $1 AND text_hash = ANY($2)",
        )
        .bind(model)
        .bind(&hashes)
        .fetch_all(&self.pool)
        .await?;
        let mut found = HashMap::with_capacity(rows.len());
        decode_cached(rows, &mut found)?;
        Ok(found)
    }
}

/// Takes the scope's lock until the transaction ends.
async fn lock_scope(conn: &mut Conn, scope: &Scope) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(scope_lock_key(scope)).execute(conn).await?;
    Ok(())
}

shared_queries!(PgBackend, json_param = "::jsonb");
fact_queries!(PgBackend, json_param = "::jsonb");
upkeep_queries!(PgBackend);
dedup_queue_queries!(PgBackend);
merge_queries!(PgBackend, json_param = "::jsonb");
review_queries!(PgBackend, json_param = "::jsonb");
change_queries!(PgBackend);
