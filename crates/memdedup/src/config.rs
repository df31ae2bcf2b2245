//! `memdedup.toml`: finding the config file and reading its tables.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dedup_precompact::{DeduplicationConfig, LearnedPairJudge, PAIR_JUDGE_ENV_VAR, PairJudgeChoice};
use dedup_store::{DEFAULT_INDEX_MEMORY_BYTES, DbLocation, MEMDEDUP_HOME_ENV_VAR, StoreOptions};

use crate::{Error, Result};

/// The environment variable naming a config file.
pub const CONFIG_ENV_VAR: &str = "MEMDEDUP_CONFIG";
/// The config file's name.
pub const CONFIG_FILE_NAME: &str = "memdedup.toml";
/// The environment variable setting the index memory budget in MiB, over
/// `[store] index_memory_mb`.
pub const INDEX_MEMORY_ENV_VAR: &str = "MEMDEDUP_INDEX_MEMORY_MB";
/// The largest index memory budget accepted, in MiB (1 TiB): anything above is a typo.
pub const MAX_INDEX_MEMORY_MB: u64 = 1 << 20;

const KNOWN_TABLES: [&str; 7] = ["store", "dedup", "embedder", "server", "judge", "client", "hook"];
/// The keys of `[hook]`.
const HOOK_KEYS: [&str; 1] = ["max_candidates"];
/// The most candidates `[hook] max_candidates` may ask for.
pub const MAX_HOOK_CANDIDATES: u64 = 200;
/// The keys of `[store]`.
const STORE_KEYS: [&str; 2] = ["db", "index_memory_mb"];
/// The keys of `[embedder]`.
const EMBEDDER_KEYS: [&str; 7] = ["kind", "model_dir", "max_windows", "base_url", "model", "dimensions", "api_key_env"];
/// The most windows `[embedder] max_windows` may ask for.
pub const MAX_EMBED_WINDOWS: i64 = 1024;
/// The keys of `[client]`.
const CLIENT_KEYS: [&str; 4] = ["url", "timeout_ms", "token_env", "max_reply_bytes"];

/// The environment variable naming the `memdedup serve` that `check`, `add`, `capture`
/// and `hook pre-compact` ask; it overrides `[client] url`, and empty turns client mode off.
pub const SERVER_URL_ENV_VAR: &str = "MEMDEDUP_SERVER_URL";
/// The variable holding the bearer token sent to the server, unless `[client] token_env`
/// names another: the one `memdedup serve` reads its unrestricted token from.
pub const CLIENT_TOKEN_ENV_VAR: &str = "MEMDEDUP_API_TOKEN";
/// How long a command waits for the server (connecting and answering) before it works
/// locally: a loopback server answers a check in a few milliseconds, and loading the
/// model locally costs about 250 ms, so waiting longer than this only adds to the worst case.
pub const DEFAULT_CLIENT_TIMEOUT_MS: u64 = 500;
/// The longest `[client] timeout_ms` accepted.
const MAX_CLIENT_TIMEOUT_MS: u64 = 60_000;
/// The most bytes of one server reply client mode reads unless `[client] max_reply_bytes`
/// says otherwise: a check or add result is a few KiB.
pub const DEFAULT_CLIENT_MAX_REPLY_BYTES: usize = 1 << 20;
/// The range `[client] max_reply_bytes` accepts (1 KiB to 64 MiB).
const CLIENT_MAX_REPLY_RANGE: std::ops::RangeInclusive<i64> = 1024..=(64 << 20);

/// Where `check`, `add`, `capture` and `hook pre-compact` send their work (`[client]`
/// and [`SERVER_URL_ENV_VAR`]). Invariant: `url` starts with `http://` or `https://` and
/// has no trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings {
    /// The server's root URL, e.g. `http://127.0.0.1:3100`.
    pub url: String,
    /// The most a command waits for the server to connect and answer.
    pub timeout: Duration,
    /// The environment variable holding the bearer token ([`CLIENT_TOKEN_ENV_VAR`] unless set).
    pub token_env: String,
    /// The most bytes of one reply read; a longer reply makes the server unavailable for
    /// the call ([`DEFAULT_CLIENT_MAX_REPLY_BYTES`] unless set).
    pub max_reply_bytes: usize,
}

/// The embedder `[embedder]` selects.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EmbedderSettings {
    /// `kind = "local"` (the default): the local model, from `model_dir` when set.
    Local {
        /// `[embedder] model_dir`.
        model_dir: Option<PathBuf>,
        /// `[embedder] max_windows`: the most 256-token windows one long text is embedded
        /// from (default 32), which bounds the work one request can ask of the model.
        max_windows: Option<usize>,
    },
    /// `kind = "openai"`: an OpenAI-compatible `POST {base_url}/embeddings` API
    /// (`OpenAiEmbedder`, behind the facade's `openai` feature).
    OpenAi {
        /// The API root, e.g. `https://api.openai.com/v1`.
        base_url: String,
        /// The model name sent with every request; also the model id vectors are kept under.
        model: String,
        /// Dimensions to ask for, for models that can shorten their vectors.
        dimensions: Option<usize>,
        /// The environment variable holding the API key, if the API needs one.
        api_key_env: Option<String>,
    },
}

/// The configuration file, if one was found, parsed but not yet interpreted.
///
/// It is looked for at: an explicit path (`--config`), `$MEMDEDUP_CONFIG`,
/// `./memdedup.toml`, `$MEMDEDUP_HOME/memdedup.toml`, then the platform config directory
/// (`~/.config/memdedup/memdedup.toml` on Linux). An explicit path or `$MEMDEDUP_CONFIG`
/// must exist; the other places are optional. Values in it lose to environment variables
/// and command-line flags.
///
/// ```toml
/// [store]
/// db = "postgres://memdedup@db.internal/memdedup"   # or a SQLite file path
/// index_memory_mb = 1024        # in-process vector indexes, least recently used dropped past it
///
/// [embedder]
/// model_dir = "/opt/memdedup/models/all-minilm-l6-v2-int8"
/// # or an OpenAI-compatible API (for `memdedup serve`):
/// # kind = "openai"
/// # base_url = "https://api.openai.com/v1"
/// # model = "text-embedding-3-small"
/// # api_key_env = "OPENAI_API_KEY"
///
/// [dedup]
/// default_threshold = 0.90
/// time_window_secs = 300
/// judge = "local"               # or "cosine" (the default): what decides a semantic duplicate
/// # judge_params = "judge.json" # the local judge's parameters (default: built in)
/// [dedup.thresholds]
/// decisions = 0.92
///
/// [client]                      # check, add, capture, hook pre-compact ask this server
/// url = "http://127.0.0.1:3100"
/// timeout_ms = 500
/// token_env = "MEMDEDUP_API_TOKEN"
/// max_reply_bytes = 1048576     # a longer reply: the server is unavailable for the call
///
/// [hook]                        # hook pre-compact
/// max_candidates = 20           # the most memories captured from one conversation
///
/// [server]                      # memdedup serve; see docs/HTTP.md
/// addr = "127.0.0.1:3100"
/// [[server.tokens]]
/// token = "a-long-random-secret"
/// namespaces = ["trading-agent"]
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigFile {
    path: Option<PathBuf>,
    table: toml::Table,
}

impl ConfigFile {
    /// Finds and parses the config file; an empty configuration when there is none.
    pub fn load(explicit: Option<&Path>) -> Result<ConfigFile> {
        let from_env = std::env::var_os(CONFIG_ENV_VAR).filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(path) = explicit.map(Path::to_path_buf).or(from_env) {
            return ConfigFile::read(&path);
        }
        let mut candidates = vec![PathBuf::from(CONFIG_FILE_NAME)];
        if let Some(home) = std::env::var_os(MEMDEDUP_HOME_ENV_VAR).filter(|v| !v.is_empty()) {
            candidates.push(Path::new(&home).join(CONFIG_FILE_NAME));
        }
        if let Some(dir) = dirs::config_dir() {
            candidates.push(dir.join("memdedup").join(CONFIG_FILE_NAME));
        }
        match candidates.into_iter().find(|p| p.is_file()) {
            Some(path) => ConfigFile::read(&path),
            None => Ok(ConfigFile::default()),
        }
    }

    /// Parses a config file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<ConfigFile> {
        let config_error = |message: String| Error::Config { origin: origin.display().to_string(), message };
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| config_error(e.to_string()))?;
        if let Some(unknown) = table.keys().find(|k| !KNOWN_TABLES.contains(&k.as_str())) {
            return Err(config_error(format!(
                "unknown table `{unknown}` (known: store, dedup, embedder, server, judge, client, hook)"
            )));
        }
        let config = ConfigFile { path: Some(origin.to_path_buf()), table };
        config.string("store", "db")?;
        config.index_memory_mb_in_file()?;
        config.embedder()?;
        config.dedup_config_without_env()?;
        config.check_judge_table()?;
        config.client_without_env(None)?;
        config.hook_max_candidates()?;
        Ok(config)
    }

    fn read(path: &Path) -> Result<ConfigFile> {
        let origin = || path.display().to_string();
        let bytes = std::fs::read(path)
            .map_err(|e| Error::Config { origin: origin(), message: format!("cannot read: {e}") })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            Error::Config {
                origin: origin(),
                message: format!("not valid UTF-8: invalid byte at offset {at} (line {line})"),
            }
        })?;
        ConfigFile::parse(&text, path)
    }

    /// The file this configuration came from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// `[store] db`, if set.
    pub fn store_db(&self) -> Result<Option<String>> {
        self.string("store", "db")
    }

    /// The store options this configuration asks for: the index memory budget
    /// ([`ConfigFile::index_memory_bytes`]) over [`StoreOptions::default`].
    pub fn store_options(&self) -> Result<StoreOptions> {
        let index_memory_bytes = self.index_memory_bytes(std::env::var(INDEX_MEMORY_ENV_VAR).ok().as_deref())?;
        Ok(StoreOptions { index_memory_bytes, ..StoreOptions::default() })
    }

    /// The index memory budget in bytes: `env` (the value of `$MEMDEDUP_INDEX_MEMORY_MB`,
    /// ignored when empty) > `[store] index_memory_mb` > 1024 MiB. Either must be a whole
    /// number of MiB from 1 to [`MAX_INDEX_MEMORY_MB`].
    pub fn index_memory_bytes(&self, env: Option<&str>) -> Result<usize> {
        let mib = match env.map(str::trim).filter(|v| !v.is_empty()) {
            Some(value) => {
                let env_error = |message: String| Error::Config { origin: INDEX_MEMORY_ENV_VAR.to_owned(), message };
                let mib: i128 = value.parse().map_err(|_| {
                    env_error(format!("`{INDEX_MEMORY_ENV_VAR}` must be a whole number of MiB, not {value:?}"))
                })?;
                check_index_memory_mb(INDEX_MEMORY_ENV_VAR, mib).map_err(env_error)?
            }
            None => match self.index_memory_mb_in_file()? {
                Some(mib) => mib,
                None => return Ok(DEFAULT_INDEX_MEMORY_BYTES),
            },
        };
        usize::try_from(mib << 20).map_err(|_| self.error(format!("an index memory budget of {mib} MiB is too large")))
    }

    /// `[store] index_memory_mb`, checked, if set.
    fn index_memory_mb_in_file(&self) -> Result<Option<u64>> {
        const KEY: &str = "store.index_memory_mb";
        self.string("store", "db")?;
        match self.table.get("store").and_then(|t| t.get("index_memory_mb")) {
            None => Ok(None),
            Some(toml::Value::Integer(n)) => {
                check_index_memory_mb(KEY, i128::from(*n)).map(Some).map_err(|m| self.error(m))
            }
            Some(other) => {
                Err(self.error(format!("`{KEY}` must be a whole number of MiB (like 1024), not {}", other.type_str())))
            }
        }
    }

    /// `[embedder] model_dir`, if set.
    pub fn model_dir(&self) -> Result<Option<PathBuf>> {
        Ok(self.string("embedder", "model_dir")?.map(PathBuf::from))
    }

    /// `[embedder] max_windows` (1 to [`MAX_EMBED_WINDOWS`]), if set.
    pub fn max_windows(&self) -> Result<Option<usize>> {
        match self.table.get("embedder").and_then(|t| t.get("max_windows")) {
            None => Ok(None),
            Some(toml::Value::Integer(n)) if (1..=MAX_EMBED_WINDOWS).contains(n) => Ok(usize::try_from(*n).ok()),
            Some(other) => Err(self.error(format!(
                "`embedder.max_windows` must be an integer from 1 to {MAX_EMBED_WINDOWS}, not {other}"
            ))),
        }
    }

    /// The embedder `[embedder]` selects: `kind = "local"` (default; `model_dir`) or
    /// `kind = "openai"` (`base_url` and `model` required; `dimensions` and `api_key_env`
    /// optional). Keys of the other kind are an error, naming the key.
    pub fn embedder(&self) -> Result<EmbedderSettings> {
        let kind = self.string("embedder", "kind")?;
        let given = |key: &str| self.table.get("embedder").and_then(|t| t.get(key)).is_some();
        match kind.as_deref().unwrap_or("local") {
            "local" => {
                if let Some(key) = ["base_url", "model", "dimensions", "api_key_env"].into_iter().find(|k| given(k)) {
                    return Err(self.error(format!("`embedder.{key}` needs `embedder.kind = \"openai\"`")));
                }
                Ok(EmbedderSettings::Local { model_dir: self.model_dir()?, max_windows: self.max_windows()? })
            }
            "openai" => {
                if let Some(key) = ["model_dir", "max_windows"].into_iter().find(|k| given(k)) {
                    return Err(self.error(format!("`embedder.{key}` is for `kind = \"local\"`, not \"openai\"")));
                }
                let required = |key: &str| {
                    self.string("embedder", key)?
                        .filter(|v| !v.trim().is_empty())
                        .ok_or_else(|| self.error(format!("`embedder.{key}` is required with `kind = \"openai\"`")))
                };
                let dimensions = match self.table.get("embedder").and_then(|t| t.get("dimensions")) {
                    None => None,
                    Some(toml::Value::Integer(n)) if *n >= 1 => Some(
                        usize::try_from(*n)
                            .map_err(|_| self.error(format!("`embedder.dimensions` {n} is too large")))?,
                    ),
                    Some(other) => {
                        return Err(
                            self.error(format!("`embedder.dimensions` must be a positive integer, not {other}"))
                        );
                    }
                };
                Ok(EmbedderSettings::OpenAi {
                    base_url: required("base_url")?,
                    model: required("model")?,
                    dimensions,
                    api_key_env: self.string("embedder", "api_key_env")?,
                })
            }
            other => Err(self.error(format!("`embedder.kind` {other:?} is not \"local\" or \"openai\""))),
        }
    }

    /// The `[server]` table, if present (interpreted by `memdedup serve`).
    pub fn server_table(&self) -> Result<Option<toml::Table>> {
        match self.table.get("server") {
            None => Ok(None),
            Some(toml::Value::Table(table)) => Ok(Some(table.clone())),
            Some(_) => Err(self.error("`server` must be a table")),
        }
    }

    /// The server to ask, when client mode is on: [`SERVER_URL_ENV_VAR`] when set (empty
    /// turns client mode off), else `[client] url`; `timeout_ms` and `token_env` from
    /// `[client]`.
    pub fn client(&self) -> Result<Option<ClientSettings>> {
        self.client_without_env(std::env::var(SERVER_URL_ENV_VAR).ok())
    }

    fn client_without_env(&self, env_url: Option<String>) -> Result<Option<ClientSettings>> {
        let timeout_ms = match self.table.get("client").and_then(|t| t.get("timeout_ms")) {
            None => DEFAULT_CLIENT_TIMEOUT_MS,
            Some(toml::Value::Integer(n)) if (1..=MAX_CLIENT_TIMEOUT_MS as i64).contains(n) => *n as u64,
            Some(other) => {
                return Err(self.error(format!(
                    "`client.timeout_ms` must be an integer from 1 to {MAX_CLIENT_TIMEOUT_MS}, not {other}"
                )));
            }
        };
        let max_reply_bytes = match self.table.get("client").and_then(|t| t.get("max_reply_bytes")) {
            None => DEFAULT_CLIENT_MAX_REPLY_BYTES,
            Some(toml::Value::Integer(n)) if CLIENT_MAX_REPLY_RANGE.contains(n) => *n as usize,
            Some(other) => {
                return Err(self.error(format!(
                    "`client.max_reply_bytes` must be an integer from {} to {}, not {other}",
                    CLIENT_MAX_REPLY_RANGE.start(),
                    CLIENT_MAX_REPLY_RANGE.end()
                )));
            }
        };
        let token_env = match self.string("client", "token_env")? {
            Some(name) if name.trim().is_empty() || name.contains('=') => {
                return Err(self.error(format!("`client.token_env` {name:?} is not an environment variable name")));
            }
            Some(name) => name,
            None => CLIENT_TOKEN_ENV_VAR.to_owned(),
        };
        let configured = self.string("client", "url")?;
        if let Some(url) = &configured {
            server_url(url).map_err(|message| self.error(format!("`client.url` {message}")))?;
        }
        let url = match env_url {
            Some(url) if url.trim().is_empty() => return Ok(None),
            Some(url) => server_url(&url).map_err(|message| Error::Config {
                origin: SERVER_URL_ENV_VAR.to_owned(),
                message: format!("the server URL {message}"),
            })?,
            None => match configured {
                Some(url) => server_url(&url).map_err(|message| self.error(format!("`client.url` {message}")))?,
                None => return Ok(None),
            },
        };
        Ok(Some(ClientSettings { url, timeout: Duration::from_millis(timeout_ms), token_env, max_reply_bytes }))
    }

    /// `[hook] max_candidates`: the most memories `hook pre-compact` captures from one
    /// conversation (1 to [`MAX_HOOK_CANDIDATES`]), if set.
    pub fn hook_max_candidates(&self) -> Result<Option<u64>> {
        let Some(section) = self.table.get("hook") else { return Ok(None) };
        let Some(section) = section.as_table() else { return Err(self.error("`hook` must be a table".to_owned())) };
        if let Some(unknown) = section.keys().find(|k| !HOOK_KEYS.contains(&k.as_str())) {
            return Err(self.error(format!("unknown key `hook.{unknown}` (known: hook.max_candidates)")));
        }
        match section.get("max_candidates") {
            None => Ok(None),
            Some(toml::Value::Integer(n)) if (1..=MAX_HOOK_CANDIDATES as i64).contains(n) => Ok(Some(*n as u64)),
            Some(other) => Err(self.error(format!(
                "`hook.max_candidates` must be an integer from 1 to {MAX_HOOK_CANDIDATES}, not {other}"
            ))),
        }
    }

    /// Where this configuration came from, for error messages.
    pub fn origin_name(&self) -> String {
        self.origin()
    }

    /// The database location: `explicit` (a `--db` flag) > `DATABASE_URL` > `[store] db`
    /// > `$MEMDEDUP_HOME/memdedup.db` > the platform data directory.
    pub fn db_location(&self, explicit: Option<&str>) -> Result<DbLocation> {
        Ok(DbLocation::resolve(explicit, self.store_db()?.as_deref())?)
    }

    /// The checker chain's configuration: defaults < `[dedup]` < `SUBCOG_DEDUP_*`.
    ///
    /// The pair judge defaults to the learned one (attach its model with
    /// [`crate::attach_learned_judge`]; without one, cosine decides and results say so);
    /// `[dedup] judge = "cosine"` or `MEMDEDUP_DEDUP_JUDGE=cosine` restores seed 004's
    /// cosine threshold, which [`DeduplicationConfig::default`] keeps for the library.
    pub fn dedup_config(&self) -> Result<DeduplicationConfig> {
        let mut config = self.dedup_config_without_env()?;
        config.apply_env(|name| std::env::var(name).ok())?;
        Ok(config)
    }

    /// Whether `[dedup] judge` or `MEMDEDUP_DEDUP_JUDGE` chooses the pair judge (rather
    /// than the default): the node gate and `playbook dedup` follow only such a choice.
    pub fn pair_judge_chosen(&self) -> bool {
        let in_file = self.table.get("dedup").and_then(|d| d.as_table()).is_some_and(|d| d.contains_key("judge"));
        in_file || std::env::var(PAIR_JUDGE_ENV_VAR).is_ok_and(|v| !v.trim().is_empty())
    }

    fn dedup_config_without_env(&self) -> Result<DeduplicationConfig> {
        let mut config = DeduplicationConfig { pair_judge: default_pair_judge(), ..DeduplicationConfig::default() };
        config.apply_toml(&self.table, &self.origin())?;
        Ok(config)
    }

    fn string(&self, table: &str, key: &str) -> Result<Option<String>> {
        let Some(section) = self.table.get(table) else { return Ok(None) };
        let Some(section) = section.as_table() else { return Err(self.error(format!("`{table}` must be a table"))) };
        let known: &[&str] = match table {
            "embedder" => &EMBEDDER_KEYS,
            "store" => &STORE_KEYS,
            "client" => &CLIENT_KEYS,
            _ => &[key],
        };
        if table != "dedup"
            && let Some(unknown) = section.keys().find(|k| !known.contains(&k.as_str()))
        {
            let known = known.iter().map(|k| format!("{table}.{k}")).collect::<Vec<_>>().join(", ");
            return Err(self.error(format!("unknown key `{table}.{unknown}` (known: {known})")));
        }
        match section.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.error(format!("`{table}.{key}` must be a string, not {}", other.type_str()))),
        }
    }

    /// The parsed file, for the modules that read their own tables.
    pub(crate) fn raw_table(&self) -> &toml::Table {
        &self.table
    }

    /// `path` as written in the file: relative paths are relative to the file's directory.
    pub(crate) fn relative_to_file(&self, path: &Path) -> PathBuf {
        match self.path.as_deref().and_then(Path::parent) {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_path_buf(),
        }
    }

    fn origin(&self) -> String {
        self.path.as_ref().map_or_else(|| CONFIG_FILE_NAME.to_owned(), |p| p.display().to_string())
    }

    pub(crate) fn error(&self, message: impl Into<String>) -> Error {
        Error::Config { origin: self.origin(), message: message.into() }
    }
}

/// memdedup's default pair judge: the learned one, its model attached when a service is
/// opened ([`crate::attach_learned_judge`]).
fn default_pair_judge() -> PairJudgeChoice {
    PairJudgeChoice::Learned(LearnedPairJudge::default())
}

/// Checks an index memory budget of `mib` MiB given as `key`.
fn check_index_memory_mb(key: &str, mib: i128) -> std::result::Result<u64, String> {
    match u64::try_from(mib) {
        Ok(0) | Err(_) => Err(format!("`{key}` must be a positive number of MiB, not {mib}")),
        Ok(mib) if mib > MAX_INDEX_MEMORY_MB => Err(format!(
            "`{key}` {mib} is over the limit of {MAX_INDEX_MEMORY_MB} MiB (1 TiB); it is in MiB, not bytes"
        )),
        Ok(mib) => Ok(mib),
    }
}

/// `url` without a trailing `/`, when it is an `http://` or `https://` URL with a host;
/// else what is wrong with it.
fn server_url(url: &str) -> std::result::Result<String, String> {
    let trimmed = url.trim().trim_end_matches('/');
    let host = trimmed.strip_prefix("http://").or_else(|| trimmed.strip_prefix("https://"));
    match host {
        Some(rest) if !rest.is_empty() && !rest.contains(char::is_whitespace) => Ok(trimmed.to_owned()),
        _ => Err(format!("{url:?} is not an http:// or https:// URL")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfigFile> {
        ConfigFile::parse(text, Path::new("memdedup.toml"))
    }

    #[test]
    fn reads_store_embedder_and_dedup_tables() {
        let config = parse(
            "[store]\ndb = \"/var/lib/memdedup.db\"\n[embedder]\nmodel_dir = \"/m\"\n[dedup]\ndefault_threshold = 0.8\n[dedup.thresholds]\ndecisions = 0.95\n",
        )
        .unwrap();
        assert_eq!(config.store_db().unwrap().as_deref(), Some("/var/lib/memdedup.db"));
        assert_eq!(config.model_dir().unwrap(), Some(PathBuf::from("/m")));
        let dedup = config.dedup_config_without_env().unwrap();
        assert_eq!(dedup.default_threshold, 0.8);
        assert_eq!(dedup.threshold_for("decisions"), 0.95);
        assert_eq!(dedup.threshold_for("patterns"), 0.90);
    }

    #[test]
    fn embedder_table_selects_local_or_openai() {
        assert_eq!(
            parse("").unwrap().embedder().unwrap(),
            EmbedderSettings::Local { model_dir: None, max_windows: None }
        );
        assert_eq!(
            parse("[embedder]\nmax_windows = 8\n").unwrap().embedder().unwrap(),
            EmbedderSettings::Local { model_dir: None, max_windows: Some(8) }
        );
        let config = parse(
            "[embedder]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\ndimensions = 512\napi_key_env = \"KEY\"\n",
        )
        .unwrap();
        assert_eq!(
            config.embedder().unwrap(),
            EmbedderSettings::OpenAi {
                base_url: "http://127.0.0.1:9/v1".to_owned(),
                model: "m".to_owned(),
                dimensions: Some(512),
                api_key_env: Some("KEY".to_owned()),
            }
        );
        for (text, expected) in [
            ("[embedder]\nkind = \"openai\"\nmodel = \"m\"\n", "`embedder.base_url` is required"),
            ("[embedder]\nmodel = \"m\"\n", "`embedder.model` needs `embedder.kind = \"openai\"`"),
            ("[embedder]\nkind = \"onnx\"\n", "`embedder.kind` \"onnx\" is not"),
            ("[embedder]\nkind = \"openai\"\nbase_url = \"u\"\nmodel = \"m\"\ndimensions = 0\n", "positive integer"),
            ("[embedder]\nurl = \"u\"\n", "unknown key `embedder.url`"),
            ("[embedder]\nmax_windows = 0\n", "`embedder.max_windows` must be an integer from 1 to 1024, not 0"),
            ("[embedder]\nmax_windows = 2000\n", "from 1 to 1024, not 2000"),
            (
                "[embedder]\nkind = \"openai\"\nbase_url = \"u\"\nmodel = \"m\"\nmax_windows = 4\n",
                "`embedder.max_windows` is for `kind = \"local\"`",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn client_table_and_env_choose_the_server() {
        let none = parse("").unwrap();
        assert_eq!(none.client_without_env(None).unwrap(), None);
        let from_env = none.client_without_env(Some("http://127.0.0.1:9/".to_owned())).unwrap().unwrap();
        assert_eq!(
            from_env,
            ClientSettings {
                url: "http://127.0.0.1:9".to_owned(),
                timeout: Duration::from_millis(DEFAULT_CLIENT_TIMEOUT_MS),
                token_env: CLIENT_TOKEN_ENV_VAR.to_owned(),
                max_reply_bytes: DEFAULT_CLIENT_MAX_REPLY_BYTES,
            }
        );
        let config =
            parse("[client]\nurl = \"http://127.0.0.1:3100\"\ntimeout_ms = 200\ntoken_env = \"HOOK_TOKEN\"\n").unwrap();
        let client = config.client_without_env(None).unwrap().unwrap();
        assert_eq!(
            (client.url.as_str(), client.timeout, client.token_env.as_str()),
            ("http://127.0.0.1:3100", Duration::from_millis(200), "HOOK_TOKEN")
        );
        assert_eq!(config.client_without_env(Some(String::new())).unwrap(), None, "empty turns it off");
        let other = config.client_without_env(Some("https://memory.internal".to_owned())).unwrap().unwrap();
        assert_eq!((other.url.as_str(), other.timeout), ("https://memory.internal", Duration::from_millis(200)));
        let err = config.client_without_env(Some("127.0.0.1:3100".to_owned())).unwrap_err().to_string();
        assert!(err.contains(SERVER_URL_ENV_VAR) && err.contains("not an http:// or https:// URL"), "{err}");
        for (text, expected) in [
            ("[client]\nurl = \"localhost:3100\"\n", "`client.url` \"localhost:3100\" is not an http"),
            ("[client]\ntimeout_ms = 0\n", "`client.timeout_ms` must be an integer from 1 to 60000"),
            ("[client]\ntimeout_ms = \"1s\"\n", "`client.timeout_ms` must be an integer"),
            ("[client]\nmax_reply_bytes = 10\n", "`client.max_reply_bytes` must be an integer from 1024 to 67108864"),
            ("[client]\ntoken_env = \"\"\n", "`client.token_env` \"\" is not"),
            ("[client]\ntoken = \"secret\"\n", "unknown key `client.token`"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains("memdedup.toml") && err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn defect_14_hook_max_candidates_is_read_and_bounded() {
        assert_eq!(parse("").unwrap().hook_max_candidates().unwrap(), None);
        assert_eq!(parse("[hook]\nmax_candidates = 50\n").unwrap().hook_max_candidates().unwrap(), Some(50));
        for (text, expected) in [
            ("[hook]\nmax_candidates = 0\n", "`hook.max_candidates` must be an integer from 1 to 200, not 0"),
            ("[hook]\nmax_candidates = 201\n", "from 1 to 200, not 201"),
            ("[hook]\nmax_candidates = \"20\"\n", "must be an integer"),
            ("[hook]\nmax = 3\n", "unknown key `hook.max`"),
            ("hook = 3\n", "`hook` must be a table"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains("memdedup.toml") && err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn mistakes_name_the_file_and_the_key() {
        let err = parse("[stor]\ndb = \"x\"\n").unwrap_err().to_string();
        assert!(err.contains("memdedup.toml") && err.contains("unknown table `stor`"), "{err}");
        let err = parse("[store]\ndb = 3\n").unwrap_err().to_string();
        assert!(err.contains("`store.db` must be a string, not integer"), "{err}");
        let err = parse("[store]\nurl = \"x\"\n").unwrap_err().to_string();
        assert!(err.contains("unknown key `store.url`"), "{err}");
        let err = parse("[dedup]\ndefault_threshold = 2.0\n").unwrap_err().to_string();
        assert!(err.contains("memdedup.toml"), "{err}");
        let err = parse("not toml at all [").unwrap_err().to_string();
        assert!(err.starts_with("invalid configuration in memdedup.toml"), "{err}");
    }

    #[test]
    fn a_file_that_is_not_utf8_is_an_error_naming_the_offset_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memdedup.toml");
        std::fs::write(&path, b"[dedup]\nmin_se\xedantic_length = 50\n").unwrap();
        let err = ConfigFile::read(&path).unwrap_err().to_string();
        assert!(err.contains("invalid byte at offset 14 (line 2)") && err.contains("memdedup.toml"), "{err}");
    }

    #[test]
    fn index_memory_budget_comes_from_the_env_then_the_file_then_the_default() {
        let none = parse("[store]\ndb = \"/x.db\"\n").unwrap();
        assert_eq!(none.index_memory_bytes(None).unwrap(), 1 << 30);
        let file = parse("[store]\nindex_memory_mb = 256\n").unwrap();
        assert_eq!(file.index_memory_bytes(None).unwrap(), 256 << 20);
        assert_eq!(file.index_memory_bytes(Some(" ")).unwrap(), 256 << 20, "empty counts as unset");
        assert_eq!(file.index_memory_bytes(Some("64")).unwrap(), 64 << 20);
        assert_eq!(file.store_options().map(|o| o.busy_timeout).unwrap(), StoreOptions::default().busy_timeout);
    }

    #[test]
    fn a_bad_index_memory_budget_names_the_file_and_key() {
        for (value, wanted) in [
            ("\"1024\"", "must be a whole number of MiB (like 1024), not string"),
            ("1.5", "must be a whole number of MiB (like 1024), not float"),
            ("0", "must be a positive number of MiB, not 0"),
            ("-8", "must be a positive number of MiB, not -8"),
            ("1073741824", "1073741824 is over the limit of 1048576 MiB (1 TiB)"),
        ] {
            let err = parse(&format!("[store]\nindex_memory_mb = {value}\n")).unwrap_err().to_string();
            assert!(err.starts_with("invalid configuration in memdedup.toml: `store.index_memory_mb`"), "{err}");
            assert!(err.contains(wanted), "{value}: {err}");
        }
        let file = parse("").unwrap();
        for (value, wanted) in
            [("lots", "not \"lots\""), ("0", "not 0"), ("-1", "not -1"), ("99999999", "over the limit")]
        {
            let err = file.index_memory_bytes(Some(value)).unwrap_err().to_string();
            assert!(
                err.starts_with("invalid configuration in MEMDEDUP_INDEX_MEMORY_MB: `MEMDEDUP_INDEX_MEMORY_MB`"),
                "{err}"
            );
            assert!(err.contains(wanted), "{value}: {err}");
        }
    }
}
