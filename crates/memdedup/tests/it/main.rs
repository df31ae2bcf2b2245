//! Integration tests of the `memdedup` facade: seed 000's scenarios and invariants, property
//! tests of the playbook dedup rules, collection scans, and the real local model.

mod errors;
mod examples;
mod local_model;
mod pair_judge;
mod properties;
mod scan;
mod seed_000;
mod support;
