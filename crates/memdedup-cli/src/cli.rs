//! Command-line definitions (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub(crate) mod dedup;
pub(crate) mod facts;
pub(crate) mod hook;
pub(crate) mod lifecycle;
pub(crate) mod review;

/// Keep an AI agent's long-term memory free of duplicates.
///
/// memdedup embeds memory texts with a local model (all-MiniLM-L6-v2, offline) and groups
/// those whose cosine similarity reaches a threshold. Install the model once with
/// `cargo xtask fetch-model`.
#[derive(Debug, Parser)]
#[command(name = "memdedup", version, propagate_version = true, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command accepts.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// Directory of the local model (default: $MEMDEDUP_MODEL_DIR, then
    /// $MEMDEDUP_HOME/models/all-minilm-l6-v2-int8, then
    /// ${XDG_CACHE_HOME:-~/.cache}/memdedup/models/all-minilm-l6-v2-int8).
    #[arg(long, global = true, value_name = "DIR")]
    pub model_dir: Option<PathBuf>,
    /// No progress bar and no warnings, only errors.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// More log output on stderr (-v info, -vv debug). MEMDEDUP_LOG overrides.
    #[arg(long, short, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// The memory database: a SQLite file path or a postgres:// URL (default:
    /// $DATABASE_URL, then `[store] db` of memdedup.toml, then $MEMDEDUP_HOME/memdedup.db,
    /// then ~/.local/share/memdedup/memdedup.db). For `scan` and `playbook dedup` it
    /// turns on the embedding cache and is never defaulted.
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub db: Option<String>,
    /// The config file (default: $MEMDEDUP_CONFIG, ./memdedup.toml,
    /// $MEMDEDUP_HOME/memdedup.toml, ~/.config/memdedup/memdedup.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the HTTP API (nodes with tiers, facts, metrics) until SIGINT or SIGTERM.
    ///
    /// Binds 127.0.0.1:3100 by default. A non-loopback address needs a bearer token
    /// ([[server.tokens]] in memdedup.toml, or MEMDEDUP_API_TOKEN). See docs/HTTP.md.
    Serve(ServeArgs),
    /// Serve the MCP tools (memory_check, memory_add, memory_search, …) over stdio.
    ///
    /// What an agent's MCP configuration launches: one session on stdin and stdout until
    /// the client closes it; logs go to stderr. `memdedup serve` offers the same tools over
    /// streamable HTTP at /mcp. See docs/AGENTS.md.
    Mcp,
    /// Work on an agent playbook (JSON with sections of key points).
    Playbook {
        #[command(subcommand)]
        command: PlaybookCommand,
    },
    /// Find groups of duplicates in a JSONL file (or JSON array) of memories.
    Scan(ScanArgs),
    /// Measure how well grouping matches a labelled JSONL file: pair precision, recall
    /// and F1 per threshold, false pairs (and those touching a hard negative), and the
    /// worst mistakes.
    ///
    /// Each line is `{"id": …, "cluster": …, "text": …}` with optional `namespace` and
    /// `near` (the cluster a hard negative is close to). Memories of one cluster say the
    /// same thing. Grouping is per namespace, as `scan` does.
    Eval(EvalArgs),
    /// Recommend cosine thresholds from a labelled JSONL file, overall and per namespace,
    /// and with --write put them into memdedup.toml.
    ///
    /// Same file format as `eval`. Thresholds 0.50 to 0.99 (by 0.01) are scored by pair
    /// precision, recall and F1, grouping per namespace as `scan` does. The recommendation
    /// is the lowest threshold whose precision reaches --target-precision (the highest
    /// recall at that precision); when none does, the threshold of best F1, marked as
    /// missing the target. A namespace with fewer than 2 labelled duplicate pairs uses the
    /// overall recommendation.
    Calibrate(CalibrateArgs),
    /// Print the cosine similarity of two texts, to tune thresholds.
    Similarity(SimilarityArgs),
    /// Check whether a text duplicates a stored memory (exact, then semantic, then recent).
    Check(CheckArgs),
    /// Store a memory unless it duplicates one; say which one and why.
    Add(AddArgs),
    /// Check and store candidate memories (JSONL) and print PreCompact hook output.
    ///
    /// Each line is `{"content": …, "namespace": …}` (namespace optional; `domain`, `kind`
    /// and `title` too). Duplicates are skipped, the rest stored. The output is the JSON a
    /// Claude Code PreCompact hook prints (docs/CLI.md shows the hook configuration).
    Capture(CaptureArgs),
    /// List stored memories, oldest first.
    List(ListArgs),
    /// Recall: the stored memories most similar to a query, best first, from one namespace
    /// or (by default) from every namespace that holds memories.
    Search(SearchArgs),
    /// Show one memory with all its fields.
    Show(ShowArgs),
    /// Replace a memory's text, unless the new text duplicates another memory (named in
    /// the refusal). Recorded in its history; undo with `memdedup undo --change ID`.
    Edit(lifecycle::EditArgs),
    /// Forget a memory: no longer live, searched or listed. Recorded in its history; undo
    /// with `memdedup undo --change ID`.
    Forget(lifecycle::ForgetArgs),
    /// A memory's history: its edits, deletions, restores and merges, oldest first.
    History(lifecycle::HistoryArgs),
    /// Per-namespace counts and the duplicates skipped, by reason.
    Stats(JsonArgs),
    /// Embed memories stored while the embedder was down, so semantic checks see them.
    ///
    /// `add` and `capture` catch up on a namespace by themselves once the model works
    /// again (up to 16 memories per stored memory); this does all of them at once.
    Reembed(ReembedArgs),
    /// Merge conceptual duplicates that a judge (an LLM) confirms, transactionally and
    /// undoably.
    ///
    /// Unverified memories are paired with similar verified ones and sent to the judge in
    /// batches; confirmed groups are merged into one survivor, the rest marked verified,
    /// and passes repeat until nothing changes. A store without verified memories starts
    /// in bootstrap mode. Every merge is logged: see `memdedup merges` and `memdedup undo`.
    Dedup(dedup::DedupArgs),
    /// List the merges of assisted dedup runs, oldest first.
    Merges(dedup::MergesArgs),
    /// Undo a merge (or all merges of a run): restore every row it changed exactly, and
    /// mark the pairs so the next run does not merge them again. With `--change ID`, undo
    /// an edit or a forget of a memory's history instead.
    Undo(dedup::UndoArgs),
    /// The pairs a judge was unsure of (the learned judge's uncertain band), queued by
    /// `add`, `capture`, the hook and `dedup`: list them, and decide each one merge, apart
    /// or skip.
    Review(review::ReviewArgs),
    /// Facts about the user, kept free of duplicates, and the prompt text made of them.
    Facts {
        #[command(subcommand)]
        command: facts::FactsCommand,
    },
    /// Commands for agent hooks: `hook pre-compact` captures memories from a Claude Code
    /// transcript before compaction.
    Hook {
        #[command(subcommand)]
        command: hook::HookCommand,
    },
}

/// Where a memory lives.
#[derive(Debug, Args)]
pub(crate) struct ScopeArgs {
    /// The namespace (letters, digits, `_`, `-`, `.`; at most 64).
    #[arg(long, short, default_value = "default")]
    pub namespace: String,
    /// The domain.
    #[arg(long, default_value = "global")]
    pub domain: String,
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The text (`-` reads stdin).
    pub text: String,
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub judge: PairJudgeArgs,
    /// Print the DuplicateCheckResult as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct AddArgs {
    /// The text (`-` reads stdin).
    pub text: String,
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub judge: PairJudgeArgs,
    /// The memory's kind (lesson, decision, fact, …).
    #[arg(long, short, default_value = "memory")]
    pub kind: String,
    /// A short title.
    #[arg(long, short)]
    pub title: Option<String>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CaptureArgs {
    /// JSONL candidates; `-` (the default) reads stdin.
    #[arg(default_value = "-")]
    pub file: PathBuf,
    #[command(flatten)]
    pub judge: PairJudgeArgs,
    /// Print every candidate's outcome as JSON instead of the hook output.
    #[arg(long)]
    pub json: bool,
}

/// What decides a semantic duplicate in `check`, `add` and `capture`.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct PairJudgeArgs {
    /// What decides a semantic duplicate: `cosine` (the namespace's threshold alone),
    /// `learned` (the learned pair judge, docs/MODEL.md: a calibrated P(duplicate); pairs
    /// it is unsure of are stored and named as likely duplicates, never refused) or
    /// `local` (the rules judge: vetoes close pairs that other numbers, a negation, an
    /// added condition or another entity keep apart, and confirms paraphrases somewhat
    /// below the threshold). Default: `[dedup] judge`, $MEMDEDUP_DEDUP_JUDGE, else learned
    /// (cosine, said so, when its model is missing).
    #[arg(long, value_name = "JUDGE", value_parser = ["cosine", "local", "learned"])]
    pub judge: Option<String>,
    /// The local judge's parameter file (JSON: duplicate_floor, related_floor, vetoes).
    /// Default: `[dedup] judge_params`, else the built-in parameters.
    #[arg(long, value_name = "FILE")]
    pub judge_params: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct SearchArgs {
    /// What to recall, in words (`-` reads stdin).
    pub query: String,
    /// Only this namespace (default: every namespace that holds memories).
    #[arg(long, short)]
    pub namespace: Option<String>,
    /// Only this domain.
    #[arg(long)]
    pub domain: Option<String>,
    /// At most this many memories (1 to 50).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=50))]
    pub limit: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only this namespace.
    #[arg(long, short)]
    pub namespace: Option<String>,
    /// Only this domain.
    #[arg(long)]
    pub domain: Option<String>,
    /// Include deprecated (merged or retired) memories.
    #[arg(long)]
    pub all: bool,
    /// At most this many.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Only ids greater than this (paging).
    #[arg(long, value_name = "ID")]
    pub after: Option<i64>,
    /// Print a JSON array.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The memory id (or its memdedup:// URN).
    pub id: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ReembedArgs {
    /// Only this namespace (default: every namespace of the store).
    #[arg(long, short)]
    pub namespace: Option<String>,
    /// The domain of `--namespace`.
    #[arg(long, default_value = "global", requires = "namespace")]
    pub domain: String,
    /// Every live memory without a vector, not only those stored while the embedder was
    /// down: also memories too short for the semantic check and memories stored before
    /// this was tracked.
    #[arg(long)]
    pub all_missing: bool,
    /// Memories per embedding batch.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub batch: u32,
    /// Print the counts as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct JsonArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum PlaybookCommand {
    /// Merge semantically duplicate entries across all sections.
    ///
    /// The first entry (canonical section order, then list order) of each group survives
    /// with its text and place; helpful and harmful counters are summed; the others are
    /// removed. Without -o or --in-place the result goes to stdout and the report to
    /// stderr.
    Dedup(PlaybookDedupArgs),
}

#[derive(Debug, Args)]
pub(crate) struct PlaybookDedupArgs {
    /// The playbook JSON file.
    pub file: PathBuf,
    /// Cosine threshold in [0, 1] (default: $AGENTIC_CONTEXT_DEDUP_THRESHOLD, else 0.85).
    #[arg(long, value_parser = parse_unit)]
    pub threshold: Option<f64>,
    /// Write the deduplicated playbook here (a regular file atomically, through a
    /// symlink to its target; a pipe or device directly).
    #[arg(short, long, value_name = "OUT", conflicts_with = "in_place")]
    pub output: Option<PathBuf>,
    /// Replace FILE (atomically; a symlink's target is replaced, the link kept).
    #[arg(long)]
    pub in_place: bool,
    /// Report what would merge; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// If the model is unavailable, write the playbook unchanged and exit 0.
    #[arg(long)]
    pub fail_open: bool,
    #[command(flatten)]
    pub judging: JudgingArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ScanArgs {
    /// JSONL (one object per line) or a JSON array; `-` reads stdin. Objects need `id`
    /// (string or number) and `text`; `namespace` is optional; other fields are ignored.
    pub file: PathBuf,
    /// Cosine threshold in [0, 1] (default 0.85). Given without `--judge`, it chooses the
    /// cosine judge unless `[dedup] judge` or $MEMDEDUP_DEDUP_JUDGE names another; with the
    /// learned or local judge, pairs they keep apart from this cosine up are reported.
    #[arg(long, value_parser = parse_unit)]
    pub threshold: Option<f64>,
    /// Print one JSON object on stdout (shape documented in docs/CLI.md).
    #[arg(long)]
    pub json: bool,
    /// Group across namespaces too (default: only within a namespace).
    #[arg(long)]
    pub cross_namespace: bool,
    #[command(flatten)]
    pub judging: JudgingArgs,
}

/// How pairs are judged and groups joined (`scan`, `playbook dedup`).
#[derive(Debug, Args)]
pub(crate) struct JudgingArgs {
    #[command(flatten)]
    pub pair: PairJudgeArgs,
    /// How groups are joined: `single` (chains of links), `survivor` (every member a
    /// confirmed duplicate of the survivor) or `complete` (every pair confirmed).
    /// Default: `single` for the cosine judge, `complete` for the local and learned judges.
    #[arg(long, value_enum)]
    pub linkage: Option<LinkageArg>,
}

#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    /// The labelled JSONL file (`-` reads stdin).
    pub file: PathBuf,
    /// A cosine threshold in [0, 1] to evaluate; repeat for several (default 0.65, 0.70,
    /// 0.75, 0.80, 0.85, 0.90).
    #[arg(long, value_parser = parse_unit)]
    pub threshold: Vec<f64>,
    /// How many of the worst false and missed pairs to list.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub worst: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Which judge decides a pair: `cosine` (a pair is a duplicate when its cosine reaches
    /// each `--threshold`), `local` (the local judge: cosine bands and vetoing contrasts)
    /// or `learned` (the learned pair judge); `--threshold` is ignored but for cosine.
    #[arg(long, value_enum, default_value_t = PairJudgeArg::Cosine)]
    pub judge: PairJudgeArg,
    /// A parameter file for the local judge (default: the built-in one).
    #[arg(long, value_name = "FILE")]
    pub judge_params: Option<PathBuf>,
    /// How groups are joined: `single` (chains of links), `survivor` (every member a
    /// confirmed duplicate of the survivor) or `complete` (every pair confirmed).
    /// Default: `single` for the cosine judge, `complete` for the local judge.
    #[arg(long, value_enum)]
    pub linkage: Option<LinkageArg>,
    /// Evaluate the local judge over a grid of parameters (duplicate floors 0.30–0.80 and
    /// every set of vetoes) instead; what `cargo xtask fit-judge` reads.
    #[arg(long)]
    pub sweep: bool,
}

/// A pair judge on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PairJudgeArg {
    /// Cosine similarity against a threshold (the seed's behaviour).
    Cosine,
    /// The local judge (cosine bands and vetoing contrasts, with reasons).
    Local,
    /// The learned pair judge (a cross-encoder reading both texts, with a calibrated
    /// probability and an uncertain band).
    Learned,
}

/// A grouping linkage on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LinkageArg {
    /// Connected components: a chain of links makes one group.
    Single,
    /// Every member must be a confirmed duplicate of the group's survivor.
    Survivor,
    /// Every pair of members must be confirmed duplicates.
    Complete,
}

#[derive(Debug, Args)]
pub(crate) struct CalibrateArgs {
    /// The labelled JSONL file (`-` reads stdin).
    pub file: PathBuf,
    /// The pair precision a recommended threshold must reach, in (0, 1].
    #[arg(long, value_parser = parse_precision, default_value = "0.95", value_name = "P")]
    pub target_precision: f64,
    /// Only this namespace of the file; --write then sets only its
    /// `[dedup.thresholds]` entry.
    #[arg(long, short, value_name = "NS")]
    pub namespace: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Write the recommendation into the config file memdedup loads (--config, or the
    /// first one found; ./memdedup.toml when there is none), keeping its comments and
    /// other keys.
    #[arg(long)]
    pub write: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SimilarityArgs {
    /// First text.
    pub first: String,
    /// Second text.
    pub second: String,
    /// Print `{"model": ..., "cosine": ...}` (with a judge, also `"judgement"`: its
    /// verdict, probability, relation and reasons).
    #[arg(long)]
    pub json: bool,
    /// Also judge the pair: `local` (the local judge) or `learned` (the learned pair judge,
    /// with its calibrated P(duplicate)). Default: the cosine alone.
    #[arg(long, value_enum, default_value_t = PairJudgeArg::Cosine)]
    pub judge: PairJudgeArg,
}

/// A finite number in [0, 1] (thresholds, confidences).
pub(crate) fn parse_unit(raw: &str) -> Result<f64, String> {
    parse_between(raw, 0.0, 1.0)
}

/// A target precision: a number in (0, 1].
pub(crate) fn parse_precision(raw: &str) -> Result<f64, String> {
    let value: f64 = raw.trim().parse().map_err(|_| format!("`{raw}` is not a number"))?;
    if !(value > 0.0 && value <= 1.0) {
        return Err(format!("{raw} is outside (0, 1]: a precision must be above 0 and at most 1"));
    }
    Ok(value)
}

/// A finite number in [`low`, `high`].
pub(crate) fn parse_between(raw: &str, low: f64, high: f64) -> Result<f64, String> {
    let value: f64 = raw.trim().parse().map_err(|_| format!("`{raw}` is not a number"))?;
    if !(low..=high).contains(&value) {
        return Err(format!("{raw} is outside [{low}, {high}]"));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn thresholds_are_validated() {
        assert_eq!(parse_unit("0.9"), Ok(0.9));
        assert!(parse_unit("1.5").unwrap_err().contains("outside [0, 1]"));
        assert!(parse_unit("NaN").is_err());
        assert!(parse_unit("high").unwrap_err().contains("not a number"));
    }

    #[test]
    fn target_precisions_are_above_zero_and_at_most_one() {
        assert_eq!(parse_precision("0.95"), Ok(0.95));
        assert_eq!(parse_precision("1"), Ok(1.0));
        for raw in ["0", "-0.1", "1.01", "NaN", "inf"] {
            assert!(parse_precision(raw).unwrap_err().contains("outside (0, 1]"), "{raw}");
        }
        assert!(parse_precision("most").unwrap_err().contains("not a number"));
    }
}

/// `memdedup serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (default: `[server] addr`, then 127.0.0.1:3100; port 0 picks a
    /// free port, printed on stderr).
    #[arg(long, value_name = "IP:PORT")]
    pub addr: Option<std::net::SocketAddr>,
}
