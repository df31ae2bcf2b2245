//! `memdedup mcp`: the MCP server over stdio, and the context `serve` mounts at `/mcp`.

use std::sync::Arc;

use anyhow::{Context, Result};
use dedup_mcp::McpContext;
use memdedup::{ConfigFile, DedupOptions, DeduplicationService, Judge, JudgeOverrides, LocalBatchJudge};

use crate::UsageError;
use crate::cli::{GlobalArgs, PairJudgeArgs};
use crate::open::open_long_lived_service;

/// Serves one MCP session on stdin/stdout until the client closes it.
pub(crate) async fn run(global: &GlobalArgs) -> Result<()> {
    let config = crate::open::server_config_file(global)?;
    let service = open_long_lived_service(global, &PairJudgeArgs::default()).await?;
    // The pair model loads now, off the first tool call's path.
    // The guard waits for that load on every way out, an error too.
    let _loading = service.config().pair_judge.learned().map(|judge| judge.load_in_background(true));
    let context = Arc::new(context(global, &config, Arc::new(service))?);
    tracing::info!(
        backend = context.service().store().backend(),
        facts_extract = context.has_chat_model(),
        "MCP server on stdio"
    );
    let served = dedup_mcp::serve_stdio(context.clone()).await.context("the MCP server on stdio stopped");
    context.service().store().close().await;
    served
}

/// The tools' context over `service`: assisted dedup asks the configured judge (`[judge]`,
/// `MEMDEDUP_JUDGE*`), or the offline learned judge when none is chosen (the local one when
/// its model cannot load); `facts_extract` is
/// offered when that judge is a language model that can be reached. A language model that
/// cannot be made (an anthropic judge without a key) is warned about, and the server
/// serves without it: `dedup_scan` and `dedup_run` answer `not_configured`, the other
/// tools work (as `memdedup serve` serves without it).
pub(crate) fn context(
    global: &GlobalArgs,
    config: &ConfigFile,
    service: Arc<DeduplicationService>,
) -> Result<McpContext> {
    let mut context = McpContext::new(service);
    let chosen = config.judge_settings_if_chosen(&JudgeOverrides::default()).map_err(|e| UsageError(e.to_string()))?;
    if chosen.as_ref().is_some_and(|s| s.kind == memdedup::JudgeKind::Agent) {
        // The client's own model judges, through MCP sampling, with seed 003's default hint.
        let mut options = DedupOptions::default();
        config.apply_assist_options(&mut options).map_err(|e| UsageError(e.to_string()))?;
        options.validate().map_err(|e| UsageError(format!("{}: {e}", config.origin_name())))?;
        return Ok(context.with_agent_judge(options));
    }
    let mut unavailable = None;
    let model_dir = crate::open::model_dir(global, config)?;
    let judge: Arc<dyn Judge> = match &chosen {
        Some(settings) if !settings.kind.is_offline() => settings.build().unwrap_or_else(|error| {
            unavailable = Some(error.to_string());
            // Never asked: the dedup tools refuse to run without the configured judge.
            Arc::new(LocalBatchJudge::builtin())
        }),
        Some(settings) => {
            let mut settings = settings.clone();
            if global.model_dir.is_some() {
                settings.model_dir = model_dir;
            }
            settings.build().map_err(|e| UsageError(e.to_string()))?
        }
        // None chosen: the learned judge, offline; the rules judge when its model cannot load.
        None => {
            let mut settings =
                config.judge_settings(&JudgeOverrides::default()).map_err(|e| UsageError(e.to_string()))?;
            settings.model_dir = model_dir;
            settings.build().unwrap_or_else(|error| {
                tracing::warn!(
                    "the learned judge is unavailable ({error}); dedup_scan and dedup_run use the local judge"
                );
                Arc::new(LocalBatchJudge::builtin())
            })
        }
    };
    let mut options = DedupOptions::default();
    if let Some(hint) = judge.default_min_confidence() {
        options.rules.min_confidence_hint = hint;
    }
    config.apply_assist_options(&mut options).map_err(|e| UsageError(e.to_string()))?;
    options.validate().map_err(|e| UsageError(format!("{}: {e}", config.origin_name())))?;
    context = context.with_judge(judge, options);
    if let Some(error) = unavailable {
        tracing::warn!("dedup_scan and dedup_run are off: {error}");
        if !global.quiet {
            eprintln!("warning: dedup_scan and dedup_run are off: {error}");
        }
        context = context.without_judge(error);
    }
    if let Some(settings) = chosen.filter(|s| !s.kind.is_offline()) {
        match settings.chat_model() {
            Ok(chat) => context = context.with_chat_model(chat),
            Err(error) => {
                tracing::warn!("facts_extract is off: {error}");
                if !global.quiet {
                    eprintln!("warning: facts_extract is off: {error}");
                }
            }
        }
    }
    Ok(context)
}
