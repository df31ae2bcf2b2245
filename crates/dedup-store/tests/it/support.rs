//! Test databases (a temporary SQLite file or a throwaway Postgres database) and
//! synthetic vectors.

use anyhow::{Context, bail};
use dedup_core::Embedding;
use dedup_store::{DbLocation, InsertOutcome, NewMemory, Scope, Store, StoreOptions, StoredVector};
use rand::Rng;
use sqlx::Connection;

/// The model id the tests store vectors under.
pub const MODEL: &str = "test/model-v1";

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh, empty database for one test; removed when dropped.
pub struct TestDb {
    pub location: DbLocation,
    _dir: Option<tempfile::TempDir>,
    postgres: Option<PgTestDatabase>,
}

/// A database created on the `DATABASE_URL` server for one test.
struct PgTestDatabase {
    admin_url: String,
    name: String,
}

impl TestDb {
    pub async fn new(backend: Backend) -> anyhow::Result<TestDb> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir()?;
                let location = DbLocation::Sqlite(dir.path().join("memdedup.db"));
                Ok(TestDb { location, _dir: Some(dir), postgres: None })
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                let admin_url = admin_url()?;
                let name = format!("memdedup_test_{:016x}", rand::random::<u64>());
                let mut admin = sqlx::PgConnection::connect(&admin_url).await.with_context(|| {
                    format!("cannot connect to DATABASE_URL {}", DbLocation::Postgres(admin_url.clone()))
                })?;
                sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await?;
                admin.close().await?;
                let location = DbLocation::Postgres(with_database(&admin_url, &name)?);
                Ok(TestDb { location, _dir: None, postgres: Some(PgTestDatabase { admin_url, name }) })
            }
            #[allow(unreachable_patterns)]
            other => bail!("this build has no {other:?} backend"),
        }
    }

    pub fn backend(&self) -> Backend {
        match self.location {
            DbLocation::Sqlite(_) => Backend::Sqlite,
            DbLocation::Postgres(_) => Backend::Postgres,
        }
    }

    /// Opens a store handle with default options.
    pub async fn open(&self) -> anyhow::Result<Store> {
        self.open_with(&StoreOptions::default()).await
    }

    pub async fn open_with(&self, options: &StoreOptions) -> anyhow::Result<Store> {
        Ok(Store::open(&self.location, options).await?)
    }

    /// Runs one statement on a raw connection of the test database, beside any store.
    pub async fn execute_raw(&self, sql: &str) -> anyhow::Result<u64> {
        match &self.location {
            #[cfg(feature = "sqlite")]
            DbLocation::Sqlite(path) => {
                let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
                let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
                let done = sqlx::query(sql).execute(&mut conn).await?;
                conn.close().await?;
                Ok(done.rows_affected())
            }
            #[cfg(feature = "postgres")]
            DbLocation::Postgres(url) => {
                let mut conn = sqlx::PgConnection::connect(url).await?;
                sqlx::query("SET search_path TO memdedup").execute(&mut conn).await?;
                let done = sqlx::query(sql).execute(&mut conn).await?;
                conn.close().await?;
                Ok(done.rows_affected())
            }
            #[allow(unreachable_patterns)]
            other => bail!("this build cannot open {other}"),
        }
    }
}

impl Drop for TestDb {
    #[cfg(feature = "postgres")]
    fn drop(&mut self) {
        let Some(PgTestDatabase { admin_url, name }) = self.postgres.take() else { return };
        // Best effort, on a thread of its own: Drop cannot await, and the test's runtime
        // may be shutting down.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await?;
                admin.close().await?;
                anyhow::Ok(())
            })
        })
        .join();
        if let Ok(Err(error)) = dropped {
            eprintln!("warning: could not drop test database: {error:#}");
        }
    }

    #[cfg(not(feature = "postgres"))]
    fn drop(&mut self) {}
}

/// The admin URL of the disposable Postgres server, or an error saying how to get one.
pub fn admin_url() -> anyhow::Result<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => Ok(url),
        _ => bail!(
            "DATABASE_URL is not set, so the Postgres store tests cannot run. Run them with `cargo xtask ci`, \
             which starts a disposable Postgres server, or set DATABASE_URL to the admin URL of a throwaway \
             server (each test creates and drops its own database on it)"
        ),
    }
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> anyhow::Result<String> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").context("DATABASE_URL is not a URL")? + 3;
    let authority_end = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..authority_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    Ok(out)
}

/// A scope from literal names.
pub fn scope(domain: &str, namespace: &str) -> Scope {
    match Scope::new(domain, namespace) {
        Ok(scope) => scope,
        Err(error) => panic!("bad test scope {domain}/{namespace}: {error}"),
    }
}

/// The unit vector along axis `axis`.
pub fn basis(dims: usize, axis: usize) -> Embedding {
    let mut values = vec![0.0; dims];
    values[axis] = 1.0;
    embedding(values)
}

/// A unit vector of random direction (components uniform in [-1, 1]); two of them in
/// high dimensions are nearly orthogonal.
pub fn random_unit(rng: &mut impl Rng, dims: usize) -> Embedding {
    embedding((0..dims).map(|_| rng.random_range(-1.0f32..1.0)).collect())
}

/// A unit vector whose cosine with `a` is `cos`, turned towards `towards`.
pub fn at_cosine(a: &Embedding, towards: &Embedding, cos: f32) -> Embedding {
    let along = a.cosine(towards).unwrap_or(0.0);
    let orthogonal: Vec<f32> = towards.as_slice().iter().zip(a.as_slice()).map(|(t, a)| t - along * a).collect();
    let orthogonal = embedding(orthogonal);
    let sin = (1.0 - cos * cos).sqrt();
    embedding(a.as_slice().iter().zip(orthogonal.as_slice()).map(|(a, o)| cos * a + sin * o).collect())
}

pub fn embedding(values: Vec<f32>) -> Embedding {
    match Embedding::new(values) {
        Ok(embedding) => embedding,
        Err(error) => panic!("bad test vector: {error}"),
    }
}

pub fn stored(embedding: &Embedding) -> Option<StoredVector> {
    Some(StoredVector { model: MODEL.to_owned(), embedding: embedding.clone() })
}

/// Inserts plain text without a vector and returns the new id, failing on a duplicate.
pub async fn insert_text(store: &Store, scope: &Scope, text: &str) -> anyhow::Result<dedup_store::MemoryId> {
    match store.insert_checked(NewMemory::new(scope.clone(), text), None, None).await? {
        InsertOutcome::Inserted(id) => Ok(id),
        other => bail!("expected {text:?} to be inserted, got {other:?}"),
    }
}

/// Inserts text with a vector (no threshold) and returns the new id.
pub async fn insert_vector(
    store: &Store,
    scope: &Scope,
    text: &str,
    vector: &Embedding,
) -> anyhow::Result<dedup_store::MemoryId> {
    match store.insert_checked(NewMemory::new(scope.clone(), text), stored(vector), None).await? {
        InsertOutcome::Inserted(id) => Ok(id),
        other => bail!("expected {text:?} to be inserted, got {other:?}"),
    }
}

#[test]
fn database_urls_are_rewritten() -> anyhow::Result<()> {
    assert_eq!(with_database("postgres://u@h:1/admin", "t")?, "postgres://u@h:1/t");
    assert_eq!(with_database("postgres://u:p@h/admin?sslmode=disable", "t")?, "postgres://u:p@h/t?sslmode=disable");
    assert_eq!(with_database("postgres://h", "t")?, "postgres://h/t");
    Ok(())
}
