//! End-to-end tests of the `memdedup` binary: each test runs the built executable.

mod bad_input;
mod calibrate;
mod dedup;
mod dedup_local;
mod eval;
mod facts;
mod facts_extract;
mod help;
mod hook;
mod judge;
mod judge_check;
mod mcp;
mod mcp_bad_input;
mod mcp_docs;
mod mcp_extract;
mod mcp_http;
mod mcp_python;
mod mcp_support;
mod memory;
mod model_unavailable;
mod output_files;
mod playbook;
mod scan;
mod serve;
mod similarity;
mod support;
