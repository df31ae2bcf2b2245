//! The arguments of `memdedup review`: the pairs a judge was unsure of.

use clap::{Args, Subcommand};

/// `memdedup review`.
#[derive(Debug, Args)]
pub(crate) struct ReviewArgs {
    #[command(subcommand)]
    pub command: Option<ReviewCommand>,
    /// Only this namespace.
    #[arg(long, short)]
    pub namespace: Option<String>,
    /// Only this domain.
    #[arg(long)]
    pub domain: Option<String>,
    /// Decided and expired entries too (by default only the pending ones).
    #[arg(long)]
    pub all: bool,
    /// At most N entries, lowest id first (0: all).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub limit: usize,
    /// Print a JSON array.
    #[arg(long)]
    pub json: bool,
    /// Print the list even in a terminal (where `memdedup review` otherwise decides one
    /// pair at a time, with keys).
    #[arg(long, conflicts_with = "json")]
    pub list: bool,
}

/// The `review` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ReviewCommand {
    /// Decide one pending entry: `merge` (through the merge ledger, so `memdedup undo`
    /// restores both memories), `apart` (the pair is never queued or proposed again) or
    /// `skip` (queued again when a judge is unsure of it again).
    Decide(DecideArgs),
}

/// `memdedup review decide`.
#[derive(Debug, Args)]
pub(crate) struct DecideArgs {
    /// The entry (an id from `memdedup review`).
    pub id: String,
    /// What to do with the pair.
    #[arg(value_parser = ["merge", "apart", "skip"])]
    pub decision: String,
    /// With `merge`: the memory that stays (default: the older one, of lower id).
    #[arg(long, value_name = "ID")]
    pub survivor: Option<i64>,
    /// Print the decided entry (and the merge) as JSON.
    #[arg(long)]
    pub json: bool,
}
