//! `memdedup serve`: the HTTP service (see docs/HTTP.md).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use dedup_mcp::CancellationToken;
use dedup_server::{AppState, ServerConfig};
use memdedup::crates::core::FactPolicy;
use memdedup::crates::llm::ChatModel;
use memdedup::{ConfigFile, DeduplicationService, Embedder, EmbedderSettings, JudgeOverrides};

use crate::UsageError;
use crate::cli::{GlobalArgs, ServeArgs};
use crate::open::{open_store, server_config_file};

/// Texts embedded together when concurrent requests arrive at once.
const BATCH: usize = 32;

pub(crate) async fn run(global: &GlobalArgs, args: &ServeArgs) -> Result<()> {
    let config = server_config_file(global)?;
    let mut server = match config.server_table()? {
        Some(table) => serde_path_to_error::deserialize::<_, ServerConfig>(toml::Value::Table(table)).map_err(|e| {
            let path = e.path().to_string();
            let key = if path == "." { "server".to_owned() } else { format!("server.{path}") };
            UsageError(format!("{}: {key}: {}", config.origin_name(), e.into_inner().message()))
        })?,
        None => ServerConfig::default(),
    };
    server = server.with_env_token(|name| std::env::var(name).ok());
    if let Some(addr) = args.addr {
        server.addr = addr;
    }
    server.validate().map_err(|e| UsageError(e.to_string()))?;
    let settings = config.embedder().map_err(|e| UsageError(e.to_string()))?;
    // `[dedup] judge` (and MEMDEDUP_DEDUP_JUDGE) decide which similar nodes are duplicates.
    let model_dir = crate::open::model_dir(global, &config)?;
    let mut dedup = config.dedup_config().map_err(|e| UsageError(e.to_string()))?;
    memdedup::attach_learned_judge(&mut dedup, model_dir.as_deref(), false);
    // The pair model loads now, with the sessions many pairs are spread over (from then on
    // a check's pairs are too), off the request path.
    // The guard waits for that load on every way out, an error too.
    let _loading = dedup.pair_judge.learned().map(|judge| judge.load_in_background(true));
    // The node gate keeps seed 001's cosine semantics unless `[dedup] judge` (or
    // MEMDEDUP_DEDUP_JUDGE) chooses a judge.
    let pair_judge =
        if config.pair_judge_chosen() { dedup.pair_judge.clone() } else { memdedup::PairJudgeChoice::Cosine };

    // Concurrent requests are embedded together: one call per batch, not per request.
    let embedder = embedder(global, &config, settings)?
        .map(|embedder| Arc::new(memdedup::BatchingEmbedder::new(embedder, BATCH)) as Arc<dyn Embedder>);
    let chat = chat_model(global, &config)?;
    let store = open_store(global, &config).await?;
    let metrics = dedup_server::install_prometheus();
    let any_host = !server.tokens.is_empty();
    // The MCP tools and the memory routes share the store and the (batching) embedder with
    // the node routes.
    let service = match &embedder {
        Some(embedder) => DeduplicationService::new(store.clone(), embedder.clone(), dedup),
        None => DeduplicationService::without_embeddings(store.clone(), dedup),
    };
    // The fact tools of /mcp keep the policy of the REST routes (`[server.facts]`).
    let fact_policy = FactPolicy::new(server.facts.min_confidence, server.facts.max_facts)
        .map_err(|e| UsageError(format!("{}: server.facts: {e}", config.origin_name())))?;
    // `/v1/memory/check` and `/v1/memory/add` run the same chain as the MCP tools.
    let service = Arc::new(service.connect_recent_cache().await);
    let mcp = crate::mcp_cmd::context(global, &config, service.clone())?.with_fact_policy(fact_policy);
    let mut state =
        AppState::new(store, embedder, server, metrics).with_pair_judge(pair_judge).with_memory_service(service);
    if let Some(chat) = chat {
        state = state.with_chat_model(chat);
    }
    let listener = dedup_server::bind(&state).await?;
    let local: SocketAddr = listener.local_addr().context("the listening socket has no address")?;
    if state.embedder().is_some() {
        // One embedding now: loads the local model before the first request, and warns
        // at once when the embedder cannot embed (a remote API down, a bad key).
        let probed = state.clone();
        let quiet = global.quiet;
        tokio::spawn(async move {
            let status = probed.embedder_status().await;
            match status.error {
                Some(error) if !status.available => {
                    tracing::warn!(%error, "the embedder cannot embed; nodes are stored without the dedup check");
                    if !quiet {
                        eprintln!(
                            "warning: the embedder cannot embed ({error}); nodes are stored without the dedup check \
                             until it can (GET /healthz shows it)"
                        );
                    }
                }
                _ => tracing::info!(model = status.model.as_deref().unwrap_or_default(), "the embedder is ready"),
            }
        });
    }
    // Tests and scripts read this line to learn the port of `--addr 127.0.0.1:0`.
    eprintln!("memdedup: listening on http://{local} (backend {})", state.store().backend());
    // Stopping ends the MCP sessions too, so a graceful shutdown does not wait for their
    // event streams.
    let sessions = CancellationToken::new();
    // `/mcp` bounds request bodies as the REST routes do (`max_body_bytes`).
    let mcp = dedup_mcp::http_router(Arc::new(mcp), sessions.clone(), any_host, state.config().max_body_bytes);
    let app = dedup_server::router_with(state.clone(), mcp);
    let shutdown = async move {
        dedup_server::shutdown_signal().await;
        sessions.cancel();
    };
    dedup_server::serve_app(listener, app, state, shutdown).await?;
    eprintln!("memdedup: stopped");
    Ok(())
}

/// The embedder `[embedder]` selects (`--model-dir` overrides `model_dir`); a bad
/// configuration is a usage error. A local model that is not installed still gives an
/// embedder (it may be installed while the server runs), after a warning naming the fetch
/// command; none at all (fail-open) when no local embedder can be made.
fn embedder(global: &GlobalArgs, config: &ConfigFile, settings: EmbedderSettings) -> Result<Option<Arc<dyn Embedder>>> {
    match settings {
        EmbedderSettings::OpenAi { base_url, model, dimensions, api_key_env } => {
            let mut openai = memdedup::OpenAiConfig::new(base_url, model);
            openai.dimensions = dimensions;
            if let Some(var) = api_key_env {
                openai = openai.api_key_from_env(&var);
                if openai.api_key.is_none() {
                    warn(global, &format!("{var} is not set: the embeddings API is called without a key"));
                }
            }
            let embedder = memdedup::OpenAiEmbedder::new(openai)
                .map_err(|e| UsageError(format!("{}: embedder: {e}", config.origin_name())))?;
            tracing::info!(model = embedder.model_id(), "embedder: OpenAI-compatible API");
            Ok(Some(Arc::new(embedder)))
        }
        EmbedderSettings::Local { model_dir, max_windows } => {
            let model_dir = global.model_dir.clone().or(model_dir);
            let options = memdedup::EmbedderOptions { short_lived: false, max_windows };
            let embedder = match memdedup::local_embedder_with(model_dir.as_deref(), options) {
                Ok(embedder) => embedder,
                Err(error) => {
                    warn(global, &format!("no embedder ({error}); nodes are stored without the dedup check"));
                    return Ok(None);
                }
            };
            if let Err(error) = memdedup::ModelDir::locate(model_dir.as_deref()).and_then(|dir| dir.check()) {
                warn(global, &format!("{error}; until then nodes are stored without the dedup check"));
            }
            Ok(Some(embedder))
        }
        other => {
            Err(UsageError(format!("{}: embedder {other:?} is not supported by this build", config.origin_name()))
                .into())
        }
    }
}

/// The chat model of `POST /v1/facts/extract`: the judge of `[judge]` and
/// `MEMDEDUP_JUDGE*`, when one is chosen; without one the route answers 503. A judge
/// that is chosen but misconfigured (an unknown kind, a prompt file that is missing) is
/// a usage error; one that cannot be made (an anthropic judge without a key) is warned
/// about, and the server serves without it.
fn chat_model(global: &GlobalArgs, config: &ConfigFile) -> Result<Option<Arc<dyn ChatModel>>> {
    let chosen = config.judge_settings_if_chosen(&JudgeOverrides::default()).map_err(|e| UsageError(e.to_string()))?;
    let Some(settings) = chosen else {
        tracing::info!("no judge is configured: POST /v1/facts/extract answers 503");
        return Ok(None);
    };
    match settings.chat_model() {
        Ok(chat) => {
            tracing::info!(provider = chat.provider(), model = chat.model(), "fact extraction is on");
            Ok(Some(chat))
        }
        Err(error) => {
            warn(global, &format!("fact extraction is off: {error}"));
            Ok(None)
        }
    }
}

/// A warning in the log and, unless `--quiet`, on stderr.
fn warn(global: &GlobalArgs, message: &str) {
    tracing::warn!("{message}");
    if !global.quiet {
        eprintln!("warning: {message}");
    }
}
