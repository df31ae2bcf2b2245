//! The arguments of `memdedup hook …`: commands that agent hooks run.

use clap::{Args, Subcommand};

use super::dedup::JudgeArgs;

/// The `hook` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum HookCommand {
    /// Capture the decisions, lessons, conventions and preferences of a Claude Code
    /// conversation before it is compacted (a PreCompact hook).
    ///
    /// Reads the hook's JSON on stdin, reads the JSONL transcript it names (the last
    /// 16 MiB of a longer one), finds at most 20 candidate memories in the user's and the
    /// assistant's text (not in tool calls, tool results, thinking or summaries), stores
    /// those that duplicate no stored memory (exact, then semantic, then recent) and
    /// prints the hook output: what was captured, with URNs, and what was skipped and why.
    ///
    /// Candidates come from the offline analyser (cue phrases: "we decided", "turns out",
    /// "the convention is", "I prefer", …), or from the judge's LLM when one is chosen
    /// (--judge openai|anthropic, MEMDEDUP_JUDGE or `[judge] kind`), falling back to the
    /// offline analyser when it fails. Whatever fails, the command prints valid hook
    /// output saying what failed and exits 0, so it never blocks the agent; failures are
    /// counted in `memdedup stats`. Add it to .claude/settings.json as
    /// `"command": "memdedup hook pre-compact"` (docs/CLI.md shows the whole entry).
    PreCompact(PreCompactArgs),
}

#[derive(Debug, Args)]
pub(crate) struct PreCompactArgs {
    /// Stop after this many seconds and print what was captured so far (1 to 600; a value
    /// outside is brought into range with a warning, since the hook must exit 0).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub timeout: u64,
    /// Never ask an LLM: use the offline analyser even when a judge is configured.
    #[arg(long)]
    pub offline: bool,
    #[command(flatten)]
    pub judge: JudgeArgs,
    /// Print a JSON report (transcript counts, candidates, each one's outcome, failures)
    /// instead of the hook output.
    #[arg(long)]
    pub json: bool,
}
