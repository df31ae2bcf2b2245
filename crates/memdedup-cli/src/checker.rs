//! Where `check`, `add`, `capture` and `hook pre-compact` check and store memories: the
//! configured `memdedup serve` in client mode (`[client]`, `MEMDEDUP_SERVER_URL`), else
//! the local store and model. A server that cannot answer (no connection, no answer
//! within the timeout, a 5xx, an unexpected answer, a failed tool) is left for the rest
//! of the command, which works locally; one that refuses the token or the namespace is
//! the command's error.

use anyhow::{Result, anyhow};
use memdedup::{AddOutcome, ConfigFile, DeduplicationService, DuplicateCheckResult, NewMemory, Scope};

use crate::cli::{GlobalArgs, PairJudgeArgs};
use crate::open::{config_file, open_service_with};
use crate::server_client::{ServerClient, ServerError};

/// The checker chain of one command: the server's while it answers, then the local one
/// (opened when first needed).
pub(crate) struct Checker<'a> {
    global: &'a GlobalArgs,
    judge: &'a PairJudgeArgs,
    config: ConfigFile,
    server: Option<ServerClient>,
    local: Option<DeduplicationService>,
    /// Waits, when the checker is dropped, for a pair model still loading (a check that
    /// needed no judge): the process must not exit under it.
    loading: Option<memdedup::LoadGuard>,
}

impl<'a> Checker<'a> {
    /// The server of client mode when it is on and no flag asks for local work; else the
    /// local checker chain, opened now.
    pub(crate) async fn open(global: &'a GlobalArgs, judge: &'a PairJudgeArgs) -> Result<Checker<'a>> {
        let config = config_file(global)?;
        let server = match server(global, judge, &config)? {
            Some(settings) => match ServerClient::new(settings) {
                Ok(client) => Some(client),
                Err(ServerError::Unavailable(reason) | ServerError::Refused(reason)) => {
                    tracing::info!("the server {reason}; working locally");
                    None
                }
            },
            None => None,
        };
        let mut checker = Checker { global, judge, config, server, local: None, loading: None };
        if checker.server.is_none() {
            checker.local().await?;
        }
        Ok(checker)
    }

    /// [`DeduplicationService::check_duplicate`] of `text` in `scope`.
    pub(crate) async fn check(&mut self, text: &str, scope: &Scope) -> Result<DuplicateCheckResult> {
        if let Some(server) = &self.server {
            match server.check(text, scope).await {
                Ok(result) => {
                    tracing::info!("server {} checked it", server.url());
                    return Ok(result);
                }
                Err(error) => self.leave_server(error, "checking")?,
            }
        }
        Ok(self.local().await?.check_duplicate(text, scope).await?)
    }

    /// [`DeduplicationService::add`] of `memory`.
    pub(crate) async fn add(&mut self, memory: NewMemory) -> Result<AddOutcome> {
        if let Some(server) = &self.server {
            match server.add(&memory).await {
                Ok(outcome) => {
                    tracing::info!("server {} checked and stored it", server.url());
                    return Ok(outcome);
                }
                Err(error) => self.leave_server(error, "adding")?,
            }
        }
        Ok(self.local().await?.add(memory).await?)
    }

    /// The local checker chain, once the command works locally.
    pub(crate) fn local_service(&self) -> Option<&DeduplicationService> {
        self.local.as_ref()
    }

    /// Closes the local store.
    pub(crate) async fn close(mut self) {
        self.loading = None;
        if let Some(local) = self.local.take() {
            local.store().close().await;
        }
    }

    /// Logs why the server is left and leaves it for the rest of the command. A refusal
    /// is the command's error, and the server is kept, so later calls are refused too
    /// rather than done in a store the server may not serve.
    fn leave_server(&mut self, error: ServerError, doing: &str) -> Result<()> {
        let url = self.server.as_ref().map(|server| server.url().to_owned()).unwrap_or_default();
        match error {
            ServerError::Unavailable(reason) => {
                tracing::info!("server {url} {reason}; {doing} locally");
                self.server = None;
                Ok(())
            }
            ServerError::Refused(reason) => Err(anyhow!(
                "server {url} {reason} (client mode: set the token in the variable `[client] token_env` names, \
                 or MEMDEDUP_SERVER_URL= to work locally)"
            )),
        }
    }

    async fn local(&mut self) -> Result<&DeduplicationService> {
        if self.local.is_none() {
            let service = open_service_with(self.global, self.judge, &self.config, true).await?;
            // The pair model loads while the embedder loads and embeds the text: a check
            // that reaches a neighbour finds it ready sooner.
            self.loading = service.config().pair_judge.learned().map(|judge| judge.load_in_background(false));
            self.local = Some(service);
        }
        self.local.as_ref().ok_or_else(|| anyhow!("the local checker chain did not open"))
    }
}

/// The server to ask: `[client]` or `MEMDEDUP_SERVER_URL`, unless a flag names the
/// store, the model or the pair judge, which only local work can honour.
fn server(global: &GlobalArgs, judge: &PairJudgeArgs, config: &ConfigFile) -> Result<Option<memdedup::ClientSettings>> {
    let Some(settings) = config.client()? else { return Ok(None) };
    let flag = [
        global.db.as_ref().map(|_| "--db"),
        global.model_dir.as_ref().map(|_| "--model-dir"),
        judge.judge.as_ref().map(|_| "--judge"),
        judge.judge_params.as_ref().map(|_| "--judge-params"),
    ]
    .into_iter()
    .flatten()
    .next();
    if let Some(flag) = flag {
        tracing::info!("{flag} is given: working locally, not asking the server {}", settings.url);
        return Ok(None);
    }
    Ok(Some(settings))
}
