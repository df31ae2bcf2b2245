//! The arguments of `memdedup edit`, `forget` and `history`: a memory's lifecycle.

use clap::Args;

use super::PairJudgeArgs;

/// `memdedup edit`.
#[derive(Debug, Args)]
pub(crate) struct EditArgs {
    /// The memory id (or its memdedup:// URN).
    pub id: String,
    /// The new text, or `-` to read it from stdin.
    pub text: String,
    #[command(flatten)]
    pub judge: PairJudgeArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `memdedup forget`.
#[derive(Debug, Args)]
pub(crate) struct ForgetArgs {
    /// The memory id (or its memdedup:// URN).
    pub id: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `memdedup history`.
#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// The memory id (or its memdedup:// URN).
    pub id: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}
