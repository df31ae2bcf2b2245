//! Integration tests of the store, run against SQLite and Postgres.
//!
//! Tests written inside `backend_tests!` run once per backend: `…::sqlite::name` on a
//! fresh temporary file, `…::postgres::name` on a fresh database created on the server
//! named by `DATABASE_URL` (and dropped afterwards). Without `DATABASE_URL` the Postgres
//! tests fail: run them with `cargo xtask ci`, which starts a disposable server.

// A build with one backend compiles helpers only the other one uses.
#![cfg_attr(not(all(feature = "sqlite", feature = "postgres")), allow(dead_code, unused_imports))]

/// Generates `mod sqlite` and `mod postgres`, each with one `#[tokio::test]` per body.
/// A body sees `$db: &TestDb` and returns `anyhow::Result<()>`.
macro_rules! backend_tests {
    ($( $(#[$attr:meta])* async fn $name:ident($db:ident) $body:block )*) => {
        $(
            $(#[$attr])*
            async fn $name($db: &crate::support::TestDb) -> anyhow::Result<()> $body
        )*

        #[cfg(feature = "sqlite")]
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> anyhow::Result<()> {
                    let db = crate::support::TestDb::new(crate::support::Backend::Sqlite).await?;
                    super::$name(&db).await
                }
            )*
        }

        #[cfg(feature = "postgres")]
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> anyhow::Result<()> {
                    let db = crate::support::TestDb::new(crate::support::Backend::Postgres).await?;
                    super::$name(&db).await
                }
            )*
        }
    };
}

mod basics;
mod changes;
mod concurrency;
mod facts;
mod index_budget;
mod isolation;
mod merges;
mod nodes;
mod open_errors;
mod review;
mod search;
mod support;
mod upkeep;
