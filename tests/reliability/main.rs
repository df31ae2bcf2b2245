//! Fault injection and bad input against the built `memdedup` binary: SIGKILL during
//! writes, concurrent first use of a store, and generated malformed input for every parser.

mod bad_input;
mod concurrency;
mod kill_trials;
mod long_texts;
mod review_kills;
mod secrets;
mod serve_bodies;
mod support;
