//! Integration tests for `dedup-embed`: one binary, one module per embedder.

mod openai;
