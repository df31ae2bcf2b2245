//! The crate's error type: what can stop a transport (a tool's own failures are tool
//! errors, reported to the client, not errors here).

/// Why an MCP transport could not start or stopped with a failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session could not be set up (the client did not initialise, the pipe closed).
    #[error("cannot start the MCP session: {0}")]
    Start(String),
    /// The running session ended with a failure.
    #[error("the MCP session failed: {0}")]
    Session(String),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
