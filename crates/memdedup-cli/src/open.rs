//! The one place that opens stores, embedders and the checker chain for the commands.

use std::sync::Arc;

use anyhow::Result;
use memdedup::{ConfigFile, DeduplicationService, Scope, Store};

use crate::UsageError;
use crate::cli::{GlobalArgs, PairJudgeArgs, ScopeArgs};

/// The config file named by `--config` or found in the usual places.
pub(crate) fn config_file(global: &GlobalArgs) -> Result<ConfigFile> {
    Ok(ConfigFile::load(global.config.as_deref())?)
}

/// [`config_file`] for the long-running servers (`mcp`, `serve`), with the checker
/// chain's configuration checked too: a bad file is a usage error (exit 2), before any
/// session starts.
pub(crate) fn server_config_file(global: &GlobalArgs) -> Result<ConfigFile> {
    let config = ConfigFile::load(global.config.as_deref()).map_err(|e| UsageError(e.to_string()))?;
    config.dedup_config().map_err(|e| UsageError(e.to_string()))?;
    Ok(config)
}

/// Opens the store named by `--db` (or the configured default) and migrates it, with the
/// configured index memory budget.
pub(crate) async fn open_store(global: &GlobalArgs, config: &ConfigFile) -> Result<Arc<Store>> {
    let location = config.db_location(global.db.as_deref())?;
    let store = Store::open(&location, &config.store_options()?).await?;
    tracing::debug!(db = %location, "store open");
    Ok(Arc::new(store))
}

/// The store plus the checker chain with the local embedder (or without embeddings when no
/// embedder can be made), the configured recent-capture cache and the pair judge of
/// `judge` (flags) over the configured one. The embedder is tuned for a command that
/// checks a few texts and exits ([`memdedup::short_lived_embedder`]).
pub(crate) async fn open_service(global: &GlobalArgs, judge: &PairJudgeArgs) -> Result<DeduplicationService> {
    open_service_with(global, judge, &config_file(global)?, true).await
}

/// [`open_service`] for a process that serves many checks (`memdedup mcp`).
pub(crate) async fn open_long_lived_service(
    global: &GlobalArgs,
    judge: &PairJudgeArgs,
) -> Result<DeduplicationService> {
    open_service_with(global, judge, &config_file(global)?, false).await
}

/// [`open_service`] with `config` already read; `short_lived` picks
/// [`memdedup::short_lived_embedder`] over the default one.
pub(crate) async fn open_service_with(
    global: &GlobalArgs,
    judge: &PairJudgeArgs,
    config: &ConfigFile,
    short_lived: bool,
) -> Result<DeduplicationService> {
    let mut dedup = config.dedup_config()?;
    dedup.apply_judge(judge.judge.as_deref(), "--judge", judge.judge_params.as_deref(), "--judge-params")?;
    let store = open_store(global, config).await?;
    let model_dir = model_dir(global, config)?;
    memdedup::attach_learned_judge(&mut dedup, model_dir.as_deref(), short_lived);
    let embedder = local_embedder(config, model_dir.as_deref(), short_lived)?;
    let service = match embedder {
        Ok(embedder) => DeduplicationService::new(store, embedder, dedup),
        Err(error) => {
            tracing::warn!("no embedder ({error}); semantic checks are off");
            DeduplicationService::without_embeddings(store, dedup)
        }
    };
    Ok(service.connect_recent_cache().await)
}

/// The learned pair judge from `--model-dir`, else `[embedder] model_dir`, else the
/// default model directory.
pub(crate) fn pair_judge(global: &GlobalArgs) -> Result<Arc<memdedup::PairJudgeModel>> {
    let config = config_file(global)?;
    Ok(memdedup::pair_judge(model_dir(global, &config)?.as_deref())?)
}

/// The local embedder with `[embedder] max_windows`. The outer error is a bad setting;
/// the inner one an embedder that cannot be made.
pub(crate) fn local_embedder(
    config: &ConfigFile,
    model_dir: Option<&std::path::Path>,
    short_lived: bool,
) -> Result<memdedup::Result<Arc<dyn memdedup::Embedder>>> {
    let options = memdedup::EmbedderOptions { short_lived, max_windows: config.max_windows()? };
    Ok(memdedup::local_embedder_with(model_dir, options))
}

/// `--model-dir`, else `[embedder] model_dir`.
pub(crate) fn model_dir(global: &GlobalArgs, config: &ConfigFile) -> Result<Option<std::path::PathBuf>> {
    Ok(match &global.model_dir {
        Some(dir) => Some(dir.clone()),
        None => config.model_dir()?,
    })
}

pub(crate) fn scope(args: &ScopeArgs) -> Result<Scope> {
    Scope::new(&args.domain, &args.namespace).map_err(|e| UsageError(e.to_string()).into())
}

/// The embedder for `scan` and `playbook dedup`: the default one, behind the store's
/// embedding cache when `--db` is given. The outer error is a store that cannot be
/// opened; the inner one an embedder that cannot be made (which `--fail-open` tolerates).
pub(crate) async fn collection_embedder(global: &GlobalArgs) -> Result<memdedup::Result<Arc<dyn memdedup::Embedder>>> {
    let config = config_file(global)?;
    let model_dir = match &global.model_dir {
        Some(dir) => Some(dir.clone()),
        None => config.model_dir()?,
    };
    let store = match &global.db {
        Some(_) => Some(open_store(global, &config).await?),
        None => None,
    };
    Ok(local_embedder(&config, model_dir.as_deref(), false)?.map(|embedder| match store {
        Some(store) => Arc::new(memdedup::CachedEmbedder::new(embedder, store)) as Arc<dyn memdedup::Embedder>,
        None => embedder,
    }))
}
