//! Databases that cannot be opened or are locked by another process.

use std::time::{Duration, Instant};

use dedup_store::{DbLocation, Error, InsertOutcome, ListFilter, NewMemory, Store, StoreOptions};
use sqlx::Connection;

use crate::support::{insert_text, scope};

#[cfg(feature = "postgres")]
#[tokio::test]
async fn unreachable_postgres_fails_fast_with_open_error() {
    let location = DbLocation::Postgres("postgres://memdedup:s3cret@127.0.0.1:1/x".to_owned());
    let options = StoreOptions { connect_timeout: Duration::from_secs(1), ..StoreOptions::default() };
    let started = Instant::now();
    let error = Store::open(&location, &options).await.err();
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(matches!(error, Some(Error::Open { .. })), "{error:?}");
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("postgres://memdedup:***@127.0.0.1:1/x"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
    assert!(message.to_lowercase().contains("refused"), "the cause is named: {message}");
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_path_under_a_file_fails_with_open_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, "plain file")?;
    let location = DbLocation::Sqlite(file.join("sub").join("memdedup.db"));
    let error = Store::open(&location, &StoreOptions::default()).await.err();
    assert!(matches!(&error, Some(Error::Open { .. })), "{error:?}");
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains(&location.redacted()) && message.contains("cannot create directory"), "{message}");
    Ok(())
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_creates_missing_parent_directories() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let location = DbLocation::Sqlite(dir.path().join("a").join("b").join("memdedup.db"));
    let store = Store::open(&location, &StoreOptions::default()).await?;
    insert_text(&store, &scope("global", "default"), "stored").await?;
    assert!(dir.path().join("a/b/memdedup.db").is_file());
    Ok(())
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn garbage_file_is_not_a_database() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("garbage.db");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&path, garbage)?;
    let location = DbLocation::Sqlite(path);
    let error = Store::open(&location, &StoreOptions::default()).await.err();
    assert!(matches!(&error, Some(Error::Open { .. })), "{error:?}");
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("not a database") && message.contains(&location.redacted()), "{message}");
    Ok(())
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn locked_sqlite_file_gives_locked_until_released() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("memdedup.db");
    let location = DbLocation::Sqlite(path.clone());
    let options = StoreOptions { busy_timeout: Duration::from_millis(200), ..StoreOptions::default() };
    let store = Store::open(&location, &options).await?;
    let s = scope("global", "default");
    let existing = insert_text(&store, &s, "before the lock").await?;

    // Another "process" holds the write lock.
    let mut other =
        sqlx::SqliteConnection::connect_with(&sqlx::sqlite::SqliteConnectOptions::new().filename(&path)).await?;
    sqlx::query("BEGIN EXCLUSIVE").execute(&mut other).await?;

    let started = Instant::now();
    let error = store.insert_checked(NewMemory::new(s.clone(), "during the lock"), None, None).await;
    assert!(started.elapsed() >= Duration::from_millis(150), "gave up after {:?}", started.elapsed());
    assert!(matches!(&error, Err(Error::Locked { waited_ms: 200, .. })), "{error:?}");
    assert!(error.as_ref().is_err_and(|e| e.is_unavailable() && e.to_string().contains(&location.redacted())));
    assert!(matches!(store.note_occurrence(existing).await, Err(Error::Locked { .. })));
    assert!(matches!(store.record_skip(&s, "exact").await, Err(Error::Locked { .. })));
    // Readers are not blocked (WAL).
    assert_eq!(store.list(&ListFilter::default()).await?.len(), 1);

    sqlx::query("ROLLBACK").execute(&mut other).await?;
    let outcome = store.insert_checked(NewMemory::new(s.clone(), "during the lock"), None, None).await?;
    assert!(matches!(outcome, InsertOutcome::Inserted(_)), "{outcome:?}");
    assert_eq!(store.list(&ListFilter::default()).await?.len(), 2);
    other.close().await?;
    Ok(())
}

/// A database shared with an application (the usual meaning of DATABASE_URL): its own
/// `public.memories` table and its own sqlx migration history must not matter to us, and
/// we must not touch them.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_tables_live_in_their_own_schema() -> anyhow::Result<()> {
    let db = crate::support::TestDb::new(crate::support::Backend::Postgres).await?;
    let DbLocation::Postgres(url) = &db.location else { anyhow::bail!("a Postgres test database") };
    let mut app = sqlx::PgConnection::connect(url).await?;
    for statement in [
        "CREATE TABLE public.memories (id TEXT PRIMARY KEY, body TEXT)",
        "INSERT INTO public.memories VALUES ('app-1', 'the application''s own row')",
        "CREATE TABLE public._sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
         installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, checksum BYTEA NOT NULL, \
         execution_time BIGINT NOT NULL)",
        "INSERT INTO public._sqlx_migrations VALUES (20200101000000, 'app migration', now(), true, '\\x00', 1)",
    ] {
        sqlx::query(statement).execute(&mut app).await?;
    }
    let store = db.open().await?;
    let id = insert_text(&store, &scope("global", "decisions"), "stored beside an application").await?;
    assert!(store.get(id).await?.is_some());
    store.close().await;
    // A second open (the migration history is read again) works too.
    db.open().await?.close().await;

    let app_rows: Vec<(String, String)> =
        sqlx::query_as("SELECT id, body FROM public.memories").fetch_all(&mut app).await?;
    assert_eq!(app_rows, vec![("app-1".to_owned(), "the application's own row".to_owned())]);
    let app_migrations: i64 =
        sqlx::query_scalar("SELECT count(*) FROM public._sqlx_migrations").fetch_one(&mut app).await?;
    assert_eq!(app_migrations, 1, "our migrations are recorded in our schema only");
    let ours: i64 = sqlx::query_scalar("SELECT count(*) FROM memdedup.memories").fetch_one(&mut app).await?;
    assert_eq!(ours, 1);
    app.close().await?;
    Ok(())
}

/// Switching a new file to WAL needs an exclusive lock that SQLite's busy handler does not
/// wait for: a process opening the file while another writes to it in the old journal
/// mode waits for the writer, up to the busy timeout, instead of failing at once with
/// "locked" (which broke hooks starting several processes on a new database at once).
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn switching_to_wal_waits_for_a_writer_of_the_new_file() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("memdedup.db");
    let mut writer = sqlx::SqliteConnection::connect_with(
        &sqlx::sqlite::SqliteConnectOptions::new().filename(&path).create_if_missing(true),
    )
    .await?;
    sqlx::query("CREATE TABLE early (x INTEGER)").execute(&mut writer).await?;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut writer).await?;
    assert_eq!(mode, "delete");
    sqlx::query("BEGIN IMMEDIATE").execute(&mut writer).await?;
    sqlx::query("INSERT INTO early VALUES (1)").execute(&mut writer).await?;

    let location = DbLocation::Sqlite(path.clone());
    let options = StoreOptions { busy_timeout: Duration::from_secs(10), ..StoreOptions::default() };
    let opening = tokio::spawn(async move { Store::open(&location, &options).await });
    // The opener cannot switch the journal mode while the write transaction holds its lock.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!opening.is_finished(), "the open did not wait for the writer: {:?}", opening.await?.err());
    sqlx::query("COMMIT").execute(&mut writer).await?;
    writer.close().await?;

    let store = opening.await??;
    insert_text(&store, &scope("global", "default"), "after the writer").await?;
    let mut check =
        sqlx::SqliteConnection::connect_with(&sqlx::sqlite::SqliteConnectOptions::new().filename(&path)).await?;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut check).await?;
    assert_eq!(mode, "wal");
    Ok(())
}
