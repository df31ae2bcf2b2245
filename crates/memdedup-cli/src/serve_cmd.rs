//! `memdedup serve`: the HTTP service (see docs/HTTP.md).

use std::net::SocketAddr;

use anyhow::{Context, Result};
use dedup_server::{AppState, ServerConfig};

use crate::UsageError;
use crate::cli::{GlobalArgs, ServeArgs};
use crate::memory_cmd::{config_file, open_store};

pub(crate) async fn run(global: &GlobalArgs, args: &ServeArgs) -> Result<()> {
    let config = config_file(global)?;
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

    let store = open_store(global, &config).await?;
    let model_dir = match &global.model_dir {
        Some(dir) => Some(dir.clone()),
        None => config.model_dir()?,
    };
    let embedder = match memdedup::default_embedder(model_dir.as_deref()) {
        // Concurrent requests are embedded together: one inference per batch, not per request.
        Ok(embedder) => Some(std::sync::Arc::new(memdedup::BatchingEmbedder::new(embedder, 32)) as _),
        Err(error) => {
            tracing::warn!("no embedder ({error}); nodes are stored without the dedup check");
            if !global.quiet {
                eprintln!("warning: no embedder ({error}); nodes are stored without the dedup check");
            }
            None
        }
    };
    let metrics = dedup_server::install_prometheus();
    let state = AppState::new(store, embedder, server, metrics);
    let listener = dedup_server::bind(&state).await?;
    let local: SocketAddr = listener.local_addr().context("the listening socket has no address")?;
    // Tests and scripts read this line to learn the port of `--addr 127.0.0.1:0`.
    eprintln!("memdedup: listening on http://{local} (backend {})", state.store().backend());
    dedup_server::serve(listener, state, dedup_server::shutdown_signal()).await?;
    eprintln!("memdedup: stopped");
    Ok(())
}
