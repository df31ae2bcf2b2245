//! The arguments of `memdedup dedup`, `memdedup merges` and `memdedup undo`.

use clap::Args;

use super::{parse_between, parse_unit};

/// Which judge to ask; each flag wins over `MEMDEDUP_JUDGE*` and `[judge]` in
/// memdedup.toml.
#[derive(Debug, Args)]
pub(crate) struct JudgeArgs {
    /// The judge: `learned` (offline: the learned pair judge reads each candidate pair;
    /// pairs it is unsure of are reported, never merged; `memdedup dedup` only), `local`
    /// (offline: the rules judge), or an LLM's API: `openai` (any OpenAI-compatible
    /// /v1/chat/completions server: OpenAI, Ollama, vLLM, llama.cpp, LM Studio) or
    /// `anthropic` (/v1/messages). The key comes from $MEMDEDUP_JUDGE_API_KEY, else
    /// $OPENAI_API_KEY / $ANTHROPIC_API_KEY.
    #[arg(
        long,
        value_name = "learned|local|openai|anthropic",
        value_parser = ["learned", "local", "openai", "anthropic"],
        ignore_case = true
    )]
    pub judge: Option<String>,
    /// The API base URL, e.g. http://127.0.0.1:11434/v1.
    #[arg(long, value_name = "URL")]
    pub judge_url: Option<String>,
    /// The model name.
    #[arg(long, value_name = "NAME")]
    pub judge_model: Option<String>,
}

/// `memdedup dedup`.
#[derive(Debug, Args)]
pub(crate) struct DedupArgs {
    /// Show the groups the judge confirms, with survivor, text, confidence and reason;
    /// change no memory (one pass; memories without a vector still get one).
    #[arg(long)]
    pub scan: bool,
    /// Decide at most N unverified memories.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
    /// Print the run summary as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Most memories decided per judge call (default 10, or `[judge] batch_size`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub batch_size: Option<u64>,
    /// Candidates per unverified memory (default 8).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
    pub max_candidates: Option<u64>,
    /// Candidate floor: cosine similarity at least F (default 0.50).
    #[arg(long, value_name = "F", value_parser = parse_similarity)]
    pub min_sim: Option<f32>,
    /// Decide only this memory (id or memdedup:// URN).
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Stop after N passes (default 10).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1000), conflicts_with = "single_pass")]
    pub max_passes: Option<u64>,
    /// Run one pass only (for debugging; the default repeats until nothing changes).
    #[arg(long)]
    pub single_pass: bool,
    /// The namespace.
    #[arg(long, short, default_value = "default", conflicts_with = "all_namespaces")]
    pub namespace: String,
    /// The domain.
    #[arg(long, default_value = "global")]
    pub domain: String,
    /// Every namespace of the store, one after the other (never mixing them).
    #[arg(long)]
    pub all_namespaces: bool,
    /// Judge calls in flight at once (default 4).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
    pub in_flight: Option<u64>,
    /// Failed attempts after which a memory is reported and not retried (default 3).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100))]
    pub max_attempts: Option<u64>,
    /// Groups below this confidence are not merged (default 0.8; with --judge local the
    /// confidence is the lowest cosine of a group, and the default is the judge's
    /// duplicate floor).
    #[arg(long, value_name = "F", value_parser = parse_unit)]
    pub min_confidence: Option<f64>,
    #[command(flatten)]
    pub judge: JudgeArgs,
    /// The local judge's parameter file (JSON: duplicate_floor, related_floor, vetoes);
    /// default `[judge] params`, else the built-in parameters.
    #[arg(long, value_name = "FILE")]
    pub judge_params: Option<std::path::PathBuf>,
}

/// `memdedup merges`.
#[derive(Debug, Args)]
pub(crate) struct MergesArgs {
    /// Only the merges of this run.
    #[arg(long, value_name = "RUN_ID")]
    pub run: Option<String>,
    /// Only this namespace.
    #[arg(long, short)]
    pub namespace: Option<String>,
    /// Only this domain.
    #[arg(long)]
    pub domain: Option<String>,
    /// Include merges that were undone.
    #[arg(long)]
    pub all: bool,
    /// Remove the "never merge again" marks that undo left in --namespace (default
    /// namespace `default`), so the next run may ask the judge about those pairs again.
    #[arg(long, conflicts_with_all = ["run", "all"])]
    pub clear_blocks: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `memdedup undo`.
#[derive(Debug, Args)]
pub(crate) struct UndoArgs {
    /// The merge to undo (an id from `memdedup merges`).
    #[arg(required_unless_present_any = ["run", "change"], conflicts_with_all = ["run", "change"])]
    pub merge_id: Option<String>,
    /// Undo every merge of this run, newest first, all or nothing.
    #[arg(long, value_name = "RUN_ID", conflicts_with = "change")]
    pub run: Option<String>,
    /// Undo an edit or a forget instead: a change id from `memdedup history`. A forgotten
    /// memory is made live again; an edited one gets its text from before.
    #[arg(long, value_name = "CHANGE_ID")]
    pub change: Option<String>,
    /// Do not mark the pairs as "never merge again": the next run may merge them again.
    #[arg(long)]
    pub allow_remerge: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// A similarity floor: a finite number in [-1, 1].
fn parse_similarity(raw: &str) -> Result<f32, String> {
    parse_between(raw, -1.0, 1.0).map(|value| value as f32)
}
