//! Integration tests of the store, run against SQLite and Postgres.
