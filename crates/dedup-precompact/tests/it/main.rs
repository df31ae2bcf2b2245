//! Integration tests of the checker chain over real SQLite and Postgres stores.

mod concurrency;
mod fail_open;
mod lifecycle;
mod recent_across;
mod secrets;
mod seed_004;
mod support;
