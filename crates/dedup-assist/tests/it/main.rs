//! Integration tests of assisted dedup: the orchestrator over real stores (SQLite and
//! Postgres), judges speaking the real OpenAI and Anthropic wire formats to a fake LLM
//! server on loopback, and the local model where the seed's texts need it.

mod contract;
mod passes;
mod seed_003;
mod support;
mod undo;
