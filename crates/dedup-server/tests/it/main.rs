//! Integration tests of the HTTP service over real loopback HTTP.
//!
//! Every test starts its own server in-process on `127.0.0.1:0` over a fresh database.
//! Tests written inside `on_both_backends!` run once per backend: `…::sqlite::name` on a
//! temporary SQLite file, `…::postgres::name` on a database created for the test on the
//! server named by `DATABASE_URL` (and dropped afterwards); without `DATABASE_URL` the
//! Postgres tests fail. Tests using the real model fail when it is not installed
//! (`cargo xtask fetch-model`).

/// Generates `mod sqlite` and `mod postgres`, each with one `#[tokio::test]` per body.
/// A body sees `$backend: Backend` and returns `anyhow::Result<()>`.
macro_rules! on_both_backends {
    ($( $(#[$attr:meta])* async fn $name:ident($backend:ident) $body:block )*) => {
        $(
            $(#[$attr])*
            async fn $name($backend: crate::support::Backend) -> anyhow::Result<()> $body
        )*

        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> anyhow::Result<()> {
                    super::$name(crate::support::Backend::Sqlite).await
                }
            )*
        }

        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> anyhow::Result<()> {
                    super::$name(crate::support::Backend::Postgres).await
                }
            )*
        }
    };
}

mod auth;
mod check_similar;
mod create;
mod crud;
mod edits;
mod fact_extraction;
mod facts;
mod health;
mod lifecycle;
mod memory;
mod merged_nodes;
mod review;
mod seed_001_edge_cases;
mod service;
mod slow_clients;
mod support;
mod ui;
