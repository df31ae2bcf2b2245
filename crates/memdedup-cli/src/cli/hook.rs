//! The arguments of `memdedup hook …`: commands that agent hooks run.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::PairJudgeArgs;

/// The `hook` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum HookCommand {
    /// Capture the decisions, lessons, conventions and preferences of a Claude Code
    /// conversation before it is compacted (a PreCompact hook).
    ///
    /// Reads the hook's JSON on stdin, reads the JSONL transcript it names (the last
    /// 16 MiB of a longer one), finds candidate memories in the user's and the
    /// assistant's text (not in tool calls, tool results, thinking or summaries; at most
    /// --max-candidates, the most memorable), stores those that duplicate no stored memory
    /// (exact, then semantic, then recent) and prints the hook output: what was captured,
    /// with URNs, what was skipped and why, and how many candidates were over the cap.
    ///
    /// Candidates come from the offline analyser (cue phrases: "we decided", "turns out",
    /// "the convention is", "I prefer", …), or from an LLM when one is chosen
    /// (--extractor openai|anthropic, MEMDEDUP_JUDGE or `[judge] kind`), falling back to
    /// the offline analyser when it fails. Whatever fails, the command prints valid hook
    /// output saying what failed and exits 0, so it never blocks the agent; failures are
    /// counted in `memdedup stats`. Add it to .claude/settings.json as
    /// `"command": "memdedup hook pre-compact"` (docs/CLI.md shows the whole entry).
    PreCompact(PreCompactArgs),
    /// Put the project's most useful memories into a Claude Code session as it starts (a
    /// SessionStart hook).
    ///
    /// Prints the hook output Claude Code adds to the model's context
    /// (`hookSpecificOutput.additionalContext`): the user's profile and facts, then the
    /// decisions, preferences and lessons (learnings and patterns) stored by the
    /// PreCompact hook or the tools, most used first, within --max-tokens; and a one-line
    /// `systemMessage` for the user saying what was recalled. Reads the hook's JSON on
    /// stdin when there is one. Whatever fails, it prints valid hook output saying so
    /// and exits 0, so it never blocks the session.
    SessionStart(SessionStartArgs),
}

#[derive(Debug, Args)]
pub(crate) struct SessionStartArgs {
    /// The token budget of the recalled text (cl100k_base tokens; 1 to 100000).
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub max_tokens: usize,
    /// The domain recalled.
    #[arg(long, default_value = memdedup::DEFAULT_DOMAIN)]
    pub domain: String,
    /// Print what was recalled as JSON (`context`, `tokens`, `shown`, `left_out`, `facts`,
    /// `error`) instead of the hook output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PreCompactArgs {
    /// Stop after this many seconds and print what was captured so far (1 to 600; a value
    /// outside is brought into range with a warning, since the hook must exit 0).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub timeout: u64,
    /// What finds the candidates: `offline` (cue phrases), or an LLM's API, `openai` (any
    /// OpenAI-compatible /v1/chat/completions server) or `anthropic`. Default: the LLM of
    /// $MEMDEDUP_JUDGE or `[judge] kind` when it names one, else offline.
    #[arg(
        long,
        value_name = "offline|openai|anthropic",
        value_parser = ["offline", "openai", "anthropic"],
        ignore_case = true
    )]
    pub extractor: Option<String>,
    /// The extractor API's base URL, e.g. http://127.0.0.1:11434/v1 (default:
    /// $MEMDEDUP_JUDGE_URL, else `[judge] base_url`).
    #[arg(long, value_name = "URL")]
    pub extractor_url: Option<String>,
    /// The extractor's model name (default: $MEMDEDUP_JUDGE_MODEL, else `[judge] model`).
    #[arg(long, value_name = "NAME")]
    pub extractor_model: Option<String>,
    /// Never ask an LLM: the same as `--extractor offline`.
    #[arg(long, conflicts_with = "extractor")]
    pub offline: bool,
    /// What decides a semantic duplicate, as on `add` and `capture`: `cosine`, `learned`
    /// or `local`. Default: `[dedup] judge`, $MEMDEDUP_DEDUP_JUDGE, else learned.
    /// (`openai` and `anthropic` are the former spelling of `--extractor`: still taken,
    /// with a warning.)
    #[arg(
        long,
        value_name = "JUDGE",
        value_parser = ["cosine", "local", "learned", "openai", "anthropic"],
        ignore_case = true
    )]
    pub judge: Option<String>,
    /// The local judge's parameter file (JSON: duplicate_floor, related_floor, vetoes).
    #[arg(long, value_name = "FILE")]
    pub judge_params: Option<PathBuf>,
    /// The former spelling of `--extractor-url`.
    #[arg(long, value_name = "URL", hide = true)]
    pub judge_url: Option<String>,
    /// The former spelling of `--extractor-model`.
    #[arg(long, value_name = "NAME", hide = true)]
    pub judge_model: Option<String>,
    /// The most memories captured from one conversation (1 to 200, a value outside is
    /// brought into range with a warning; default `[hook] max_candidates`, else 20). Over
    /// it, the most memorable are kept and the output says how many were left out.
    #[arg(long, value_name = "N")]
    pub max_candidates: Option<u64>,
    /// Print a JSON report (transcript counts, candidates, each one's outcome, failures)
    /// instead of the hook output.
    #[arg(long)]
    pub json: bool,
}

impl PreCompactArgs {
    /// The pair judge of the checks, as `add` reads it (a former `--judge openai` is not one).
    pub(crate) fn pair_judge(&self) -> PairJudgeArgs {
        let judge = self.judge.clone().filter(|j| !is_llm(j));
        PairJudgeArgs { judge, judge_params: self.judge_params.clone() }
    }

    /// The extractor chosen on the command line: `--extractor`, `--offline`, else a former
    /// `--judge openai|anthropic`; its URL and model likewise.
    pub(crate) fn extractor_choice(&self) -> (Option<String>, Option<String>, Option<String>) {
        let kind = if self.offline {
            Some("offline".to_owned())
        } else {
            self.extractor.clone().or_else(|| self.judge.clone().filter(|j| is_llm(j)))
        };
        let url = self.extractor_url.clone().or_else(|| self.judge_url.clone());
        let model = self.extractor_model.clone().or_else(|| self.judge_model.clone());
        (kind.map(|k| k.to_ascii_lowercase()), url, model)
    }

    /// Warnings for the former spellings used.
    pub(crate) fn deprecated_spellings(&self) -> Vec<&'static str> {
        let mut found = Vec::new();
        if self.judge.as_deref().is_some_and(is_llm) {
            found.push("--judge openai|anthropic is now --extractor openai|anthropic");
        }
        if self.judge_url.is_some() {
            found.push("--judge-url is now --extractor-url");
        }
        if self.judge_model.is_some() {
            found.push("--judge-model is now --extractor-model");
        }
        found
    }
}

fn is_llm(kind: &str) -> bool {
    kind.eq_ignore_ascii_case("openai") || kind.eq_ignore_ascii_case("anthropic")
}
