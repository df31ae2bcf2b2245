//! `[judge]` of memdedup.toml and the flags that override it: which judge assisted dedup
//! asks, how, and the run's tuning.
//!
//! `kind = "learned"` is the learned pair judge run offline ([`LocalBatchJudge::learned`],
//! the model installed beside the embedder); it takes none of the keys below that
//! describe an API.
//!
//! `kind = "local"` is the offline rules judge ([`LocalBatchJudge`]): it asks no model, so the
//! keys that describe one (`base_url`, `model`, `api_key_env`, `structured_output`,
//! `timeout_secs`, `max_retries`, `max_tokens` and the prompt files) are refused next to
//! it; its only key is `params`, a parameter file. When `local` is chosen by a flag or
//! `MEMDEDUP_JUDGE` over a file describing an LLM judge, the file's LLM keys are ignored.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dedup_assist::{DedupOptions, Judge, JudgePrompts, LlmJudge, LocalBatchJudge};
use dedup_llm::{AnthropicChat, AnthropicChatConfig, ChatModel, OpenAiChat, OpenAiChatConfig};

use crate::{ConfigFile, Error, Result};

/// The keys of `[judge]`.
pub(crate) const JUDGE_KEYS: [&str; 21] = [
    "kind",
    "params",
    "base_url",
    "model",
    "api_key_env",
    "structured_output",
    "timeout_secs",
    "max_retries",
    "max_tokens",
    "max_reply_bytes",
    "system_prompt",
    "incremental_prompt",
    "bootstrap_prompt",
    "in_flight",
    "max_attempts",
    "min_confidence",
    "min_sim",
    "max_candidates",
    "batch_size",
    "batch_chars",
    "max_passes",
];

/// The keys of `[judge]` that describe a model, refused next to `kind = "local"`.
const LLM_ONLY_KEYS: [&str; 11] = [
    "base_url",
    "model",
    "api_key_env",
    "structured_output",
    "timeout_secs",
    "max_retries",
    "max_tokens",
    "max_reply_bytes",
    "system_prompt",
    "incremental_prompt",
    "bootstrap_prompt",
];

/// The environment variable choosing the judge (`local`, `openai` or `anthropic`).
pub const JUDGE_ENV_VAR: &str = "MEMDEDUP_JUDGE";
/// The environment variable with the judge's API base URL.
pub const JUDGE_URL_ENV_VAR: &str = "MEMDEDUP_JUDGE_URL";
/// The environment variable with the judge's model name.
pub const JUDGE_MODEL_ENV_VAR: &str = "MEMDEDUP_JUDGE_MODEL";

/// Which judge assisted dedup asks: the offline one or the API an LLM judge speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JudgeKind {
    /// The learned pair judge ([`LocalBatchJudge::learned`]): a local model, no network.
    Learned,
    /// The offline rules judge ([`LocalBatchJudge`]): no model, no network.
    Local,
    /// OpenAI-compatible `/v1/chat/completions` (OpenAI, Ollama, vLLM, llama.cpp, LM Studio).
    OpenAi,
    /// Anthropic `/v1/messages`.
    Anthropic,
    /// The MCP client's own model, asked through MCP sampling (`sampling/createMessage`):
    /// only `memdedup mcp` and the `/mcp` endpoint of `memdedup serve` can ask it, and only
    /// clients that declare the `sampling` capability answer.
    Agent,
}

impl JudgeKind {
    fn parse(raw: &str) -> Option<JudgeKind> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "learned" => Some(JudgeKind::Learned),
            "local" => Some(JudgeKind::Local),
            "openai" => Some(JudgeKind::OpenAi),
            "anthropic" => Some(JudgeKind::Anthropic),
            "agent" => Some(JudgeKind::Agent),
            _ => None,
        }
    }

    /// `learned`, `local`, `openai` or `anthropic`.
    pub fn as_str(self) -> &'static str {
        match self {
            JudgeKind::Learned => "learned",
            JudgeKind::Local => "local",
            JudgeKind::OpenAi => "openai",
            JudgeKind::Anthropic => "anthropic",
            JudgeKind::Agent => "agent",
        }
    }

    /// Whether the judge asks no API of memdedup's own (no URL, no key): the offline
    /// judges, and the agent judge, whose model the MCP client runs.
    pub fn is_offline(self) -> bool {
        matches!(self, JudgeKind::Learned | JudgeKind::Local | JudgeKind::Agent)
    }

    /// Empty for the offline judges, which have no API.
    fn default_base_url(self) -> &'static str {
        match self {
            JudgeKind::Learned | JudgeKind::Local | JudgeKind::Agent => "",
            JudgeKind::OpenAi => "https://api.openai.com/v1",
            JudgeKind::Anthropic => "https://api.anthropic.com/v1",
        }
    }

    /// Empty for the offline judges, which ask no API model.
    fn default_model(self) -> &'static str {
        match self {
            JudgeKind::Learned | JudgeKind::Local | JudgeKind::Agent => "",
            JudgeKind::OpenAi => "gpt-4o-mini",
            JudgeKind::Anthropic => "claude-3-5-haiku-latest",
        }
    }
}

/// Judge choices given on the command line; they win over the environment and the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JudgeOverrides {
    /// `--judge`.
    pub kind: Option<String>,
    /// `--judge-url`.
    pub base_url: Option<String>,
    /// `--judge-model`.
    pub model: Option<String>,
    /// `--judge-params`: the local judge's parameter file.
    pub params: Option<PathBuf>,
}

/// A judge, resolved from flags > environment > `[judge]` > defaults.
#[derive(Clone, PartialEq)]
pub struct JudgeSettings {
    /// The judge: local, or the API it speaks.
    pub kind: JudgeKind,
    /// The API base, e.g. `http://127.0.0.1:11434/v1` (empty for the local judge).
    pub base_url: String,
    /// The model name (empty for the local judge).
    pub model: String,
    /// The API key: `$MEMDEDUP_JUDGE_API_KEY`, else the variable `api_key_env` names,
    /// else `$OPENAI_API_KEY` / `$ANTHROPIC_API_KEY`. Never printed.
    pub api_key: Option<String>,
    /// Whether to send the reply's JSON schema as `response_format` (OpenAI-compatible
    /// servers that support it). Default false.
    pub structured_output: bool,
    /// Per-request timeout. Default 120 s.
    pub timeout: Duration,
    /// Retries on 429, 5xx and connection errors. Default 3.
    pub max_retries: u32,
    /// Most tokens of one reply. Default 4096.
    pub max_tokens: u32,
    /// Most bytes of one reply read from the API; a longer reply fails the call. Default
    /// [`dedup_llm::DEFAULT_MAX_REPLY_BYTES`] (4 MiB).
    pub max_reply_bytes: usize,
    /// The prompts (seed 003's unless files are named).
    pub prompts: JudgePrompts,
    /// The local judge's parameter file: `--judge-params`, else `[judge] params`
    /// (relative to memdedup.toml); the built-in parameters when `None`. Always `None`
    /// for an LLM judge.
    pub params: Option<PathBuf>,
    /// Where the learned judge's model is installed (`[embedder] model_dir`; `None`: the
    /// default model directory). Only the learned judge reads it.
    pub model_dir: Option<PathBuf>,
}

impl fmt::Debug for JudgeSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JudgeSettings")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("structured_output", &self.structured_output)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("max_tokens", &self.max_tokens)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .field("params", &self.params)
            .field("model_dir", &self.model_dir)
            .finish_non_exhaustive()
    }
}

impl JudgeSettings {
    /// The chat model these settings describe: the client a judge (and fact extraction)
    /// talks to. The local judge has none: an error saying so.
    pub fn chat_model(&self) -> Result<Arc<dyn ChatModel>> {
        let config_error = |message: String| Error::Config { origin: "judge settings".to_owned(), message };
        Ok(match self.kind {
            JudgeKind::Learned | JudgeKind::Local | JudgeKind::Agent => {
                return Err(config_error(format!(
                    "the {} judge asks no chat model, and this needs one: choose --judge openai|anthropic",
                    self.kind.as_str()
                )));
            }
            JudgeKind::OpenAi => {
                let mut config = OpenAiChatConfig::new(&self.base_url, &self.model);
                config.api_key = self.api_key.clone();
                config.timeout = self.timeout;
                config.retry.max_retries = self.max_retries;
                config.structured_output = self.structured_output;
                config.max_reply_bytes = self.max_reply_bytes;
                Arc::new(OpenAiChat::new(config).map_err(|e| config_error(e.to_string()))?)
            }
            JudgeKind::Anthropic => {
                let key = self.api_key.clone().ok_or_else(|| {
                    config_error(
                        "the anthropic judge needs an API key: set MEMDEDUP_JUDGE_API_KEY or ANTHROPIC_API_KEY"
                            .to_owned(),
                    )
                })?;
                let mut config = AnthropicChatConfig::new(&self.model, key);
                config.base_url = self.base_url.clone();
                config.timeout = self.timeout;
                config.retry.max_retries = self.max_retries;
                config.max_reply_bytes = self.max_reply_bytes;
                Arc::new(AnthropicChat::new(config).map_err(|e| config_error(e.to_string()))?)
            }
        })
    }

    /// The judge these settings describe: a [`LocalBatchJudge`] with the parameter file
    /// (or the built-in parameters), or an [`LlmJudge`] on [`JudgeSettings::chat_model`]
    /// with the configured prompts and reply limit. Fails naming the parameter file when
    /// it cannot be read or is invalid.
    pub fn build(&self) -> Result<Arc<dyn Judge>> {
        if self.kind == JudgeKind::Agent {
            return Err(Error::Config {
                origin: "judge settings".to_owned(),
                message: "the agent judge is the MCP client's own model, asked through MCP sampling: only \
                          `memdedup mcp` and the /mcp endpoint of `memdedup serve` can ask it (choose learned, \
                          local, openai or anthropic here)"
                    .to_owned(),
            });
        }
        if self.kind == JudgeKind::Learned {
            return Ok(Arc::new(self.learned_judge()?));
        }
        if self.kind == JudgeKind::Local {
            let judge = match &self.params {
                Some(path) => LocalBatchJudge::from_params_file(path)
                    .map_err(|e| Error::Config { origin: "judge settings".to_owned(), message: e.to_string() })?,
                None => LocalBatchJudge::builtin(),
            };
            return Ok(Arc::new(judge));
        }
        let chat = self.chat_model()?;
        Ok(Arc::new(LlmJudge::new(chat).with_prompts(self.prompts.clone()).with_max_tokens(self.max_tokens)))
    }
}

impl JudgeSettings {
    /// The learned judge of [`JudgeSettings::model_dir`], loaded now.
    #[cfg(feature = "local")]
    fn learned_judge(&self) -> Result<LocalBatchJudge> {
        let scorer = crate::pair_judge(self.model_dir.as_deref())?;
        Ok(LocalBatchJudge::learned(scorer))
    }

    #[cfg(not(feature = "local"))]
    fn learned_judge(&self) -> Result<LocalBatchJudge> {
        Err(Error::Config {
            origin: "judge settings".to_owned(),
            message: "the learned judge needs memdedup built with the `local` feature".to_owned(),
        })
    }
}

impl ConfigFile {
    /// The judge: `overrides` (flags) > `MEMDEDUP_JUDGE`, `MEMDEDUP_JUDGE_URL`,
    /// `MEMDEDUP_JUDGE_MODEL` > `[judge]` > defaults; the learned judge when no judge is
    /// chosen anywhere.
    pub fn judge_settings(&self, overrides: &JudgeOverrides) -> Result<JudgeSettings> {
        self.judge_settings_with_env(overrides, |name| std::env::var(name).ok())
    }

    /// The judge when one is chosen anywhere (flags, `MEMDEDUP_JUDGE`, `judge.kind`),
    /// `None` when none is: for services that work without one (`memdedup serve`, whose
    /// fact extraction needs it). A judge that is chosen but misconfigured is an error.
    pub fn judge_settings_if_chosen(&self, overrides: &JudgeOverrides) -> Result<Option<JudgeSettings>> {
        self.judge_settings_if_chosen_with_env(overrides, |name| std::env::var(name).ok())
    }

    pub(crate) fn judge_settings_if_chosen_with_env(
        &self,
        overrides: &JudgeOverrides,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<JudgeSettings>> {
        let chosen = overrides.kind.is_some()
            || env(JUDGE_ENV_VAR).is_some_and(|v| !v.trim().is_empty())
            || self.judge_string("kind")?.is_some();
        if chosen { self.judge_settings_with_env(overrides, env).map(Some) } else { Ok(None) }
    }

    pub(crate) fn judge_settings_with_env(
        &self,
        overrides: &JudgeOverrides,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<JudgeSettings> {
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let pick = |flag: &Option<String>, var: &str, key: &str| -> Result<Option<String>> {
            Ok(match flag.clone().or_else(|| env(var)) {
                Some(value) => Some(value),
                None => self.judge_string(key)?,
            })
        };
        // No judge chosen anywhere: the learned one, offline.
        let kind_text =
            pick(&overrides.kind, JUDGE_ENV_VAR, "kind")?.unwrap_or_else(|| JudgeKind::Learned.as_str().to_owned());
        let kind = JudgeKind::parse(&kind_text).ok_or_else(|| {
            self.error(format!(
                "judge {kind_text:?} is not \"learned\", \"local\", \"openai\", \"anthropic\" or \"agent\""
            ))
        })?;
        if kind.is_offline() {
            return self.offline_judge_settings(kind, overrides);
        }
        if overrides.params.is_some() {
            return Err(self.error(format!(
                "--judge-params is for the local judge (--judge local), not the {} judge",
                kind.as_str()
            )));
        }
        let base_url = pick(&overrides.base_url, JUDGE_URL_ENV_VAR, "base_url")?
            .unwrap_or_else(|| kind.default_base_url().to_owned());
        let model =
            pick(&overrides.model, JUDGE_MODEL_ENV_VAR, "model")?.unwrap_or_else(|| kind.default_model().to_owned());
        let api_key = env("MEMDEDUP_JUDGE_API_KEY")
            .or_else(|| self.judge_string("api_key_env").ok().flatten().and_then(|var| env(&var)))
            .or_else(|| {
                env(match kind {
                    JudgeKind::Anthropic => "ANTHROPIC_API_KEY",
                    // The offline judges returned above.
                    JudgeKind::OpenAi | JudgeKind::Learned | JudgeKind::Local | JudgeKind::Agent => "OPENAI_API_KEY",
                })
            });
        let prompt = |key: &str| -> Result<Option<PathBuf>> {
            Ok(self.judge_string(key)?.map(|p| self.relative_to_file(Path::new(&p))))
        };
        let prompts = JudgePrompts::with_files(
            prompt("system_prompt")?.as_deref(),
            prompt("incremental_prompt")?.as_deref(),
            prompt("bootstrap_prompt")?.as_deref(),
        )
        .map_err(|e| self.error(e.to_string()))?;
        Ok(JudgeSettings {
            kind,
            base_url,
            model,
            api_key,
            structured_output: self.judge_bool("structured_output")?.unwrap_or(false),
            timeout: Duration::from_secs(self.judge_int("timeout_secs", 1, 3600)?.unwrap_or(120)),
            max_retries: self.judge_int("max_retries", 0, 20)?.map_or(3, |n| n as u32),
            max_tokens: self.judge_int("max_tokens", 16, 1 << 20)?.map_or(LlmJudge::DEFAULT_MAX_TOKENS, |n| n as u32),
            max_reply_bytes: self
                .judge_int("max_reply_bytes", 1024, 256 << 20)?
                .map_or(dedup_llm::DEFAULT_MAX_REPLY_BYTES, |n| n as usize),
            prompts,
            params: None,
            model_dir: None,
        })
    }

    /// An offline judge's settings: no API, no key; for the rules judge the parameter
    /// file of `--judge-params`, else `[judge] params`; for the learned one the model
    /// directory of `[embedder] model_dir`.
    fn offline_judge_settings(&self, kind: JudgeKind, overrides: &JudgeOverrides) -> Result<JudgeSettings> {
        if overrides.base_url.is_some() || overrides.model.is_some() {
            return Err(self.error(format!(
                "--judge-url and --judge-model do not apply to the {} judge, which asks no API",
                kind.as_str()
            )));
        }
        let params = match &overrides.params {
            Some(_) if kind != JudgeKind::Local => {
                return Err(self.error(format!(
                    "--judge-params is for the rules judge (--judge local), not the {} one",
                    kind.as_str()
                )));
            }
            Some(path) => Some(path.clone()),
            None if kind != JudgeKind::Local => None,
            None => self.judge_string("params")?.map(|p| self.relative_to_file(Path::new(&p))),
        };
        Ok(JudgeSettings {
            kind,
            base_url: String::new(),
            model: String::new(),
            api_key: None,
            structured_output: false,
            timeout: Duration::from_secs(120),
            max_retries: 0,
            max_tokens: LlmJudge::DEFAULT_MAX_TOKENS,
            max_reply_bytes: dedup_llm::DEFAULT_MAX_REPLY_BYTES,
            prompts: JudgePrompts::default(),
            params,
            model_dir: self.model_dir()?,
        })
    }

    /// Applies the run tuning of `[judge]` (`in_flight`, `max_attempts`, `min_confidence`,
    /// `min_sim`, `max_candidates`, `batch_size`, `batch_chars`, `max_passes`) to
    /// `options`; flags applied afterwards win.
    pub fn apply_assist_options(&self, options: &mut DedupOptions) -> Result<()> {
        if let Some(n) = self.judge_int("in_flight", 1, 256)? {
            options.in_flight = n as usize;
        }
        if let Some(n) = self.judge_int("max_attempts", 1, 100)? {
            options.max_attempts = n as u32;
        }
        if let Some(x) = self.judge_float("min_confidence", 0.0, 1.0)? {
            options.rules.min_confidence_hint = x;
        }
        if let Some(x) = self.judge_float("min_sim", -1.0, 1.0)? {
            options.min_sim = x as f32;
        }
        if let Some(n) = self.judge_int("max_candidates", 1, 256)? {
            options.max_candidates = n as usize;
        }
        if let Some(n) = self.judge_int("batch_size", 1, 1000)? {
            options.batch_size = n as usize;
        }
        if let Some(n) = self.judge_int("batch_chars", 500, 10_000_000)? {
            options.batch_chars = n as usize;
        }
        if let Some(n) = self.judge_int("max_passes", 1, 1000)? {
            options.max_passes = n as usize;
        }
        Ok(())
    }

    /// Checks `[judge]` when the file is read: known keys of the right types.
    pub(crate) fn check_judge_table(&self) -> Result<()> {
        let Some(table) = self.judge_table()? else { return Ok(()) };
        if let Some(unknown) = table.keys().find(|k| !JUDGE_KEYS.contains(&k.as_str())) {
            return Err(self.error(format!("unknown key `judge.{unknown}` (known: {})", JUDGE_KEYS.join(", "))));
        }
        let kind = self.judge_string("kind")?;
        if let Some(kind) = &kind {
            match JudgeKind::parse(kind) {
                None => {
                    return Err(self.error(format!(
                        "`judge.kind` {kind:?} is not \"learned\", \"local\", \"openai\", \"anthropic\" or \"agent\""
                    )));
                }
                Some(offline @ (JudgeKind::Learned | JudgeKind::Local | JudgeKind::Agent)) => {
                    if let Some(key) = LLM_ONLY_KEYS.iter().find(|k| table.contains_key(**k)) {
                        return Err(self.error(format!(
                            "`judge.{key}` does not apply to `judge.kind = \"{}\"`, which asks no API; remove it",
                            offline.as_str()
                        )));
                    }
                    if offline == JudgeKind::Learned && table.contains_key("params") {
                        return Err(self.error(
                            "`judge.params` is for `judge.kind = \"local\"` (the rules judge), not the learned one",
                        ));
                    }
                }
                Some(_) => {}
            }
        }
        for key in
            ["base_url", "model", "api_key_env", "system_prompt", "incremental_prompt", "bootstrap_prompt", "params"]
        {
            self.judge_string(key)?;
        }
        self.judge_bool("structured_output")?;
        self.apply_assist_options(&mut DedupOptions::default())?;
        self.judge_int("timeout_secs", 1, 3600)?;
        self.judge_int("max_retries", 0, 20)?;
        self.judge_int("max_tokens", 16, 1 << 20)?;
        self.judge_int("max_reply_bytes", 1024, 256 << 20)?;
        Ok(())
    }

    fn judge_table(&self) -> Result<Option<&toml::Table>> {
        match self.raw_table().get("judge") {
            None => Ok(None),
            Some(toml::Value::Table(table)) => Ok(Some(table)),
            Some(_) => Err(self.error("`judge` must be a table")),
        }
    }

    fn judge_value(&self, key: &str) -> Result<Option<&toml::Value>> {
        Ok(self.judge_table()?.and_then(|t| t.get(key)))
    }

    fn judge_string(&self, key: &str) -> Result<Option<String>> {
        match self.judge_value(key)? {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.error(format!("`judge.{key}` must be a string, not {}", other.type_str()))),
        }
    }

    fn judge_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.judge_value(key)? {
            None => Ok(None),
            Some(toml::Value::Boolean(b)) => Ok(Some(*b)),
            Some(other) => Err(self.error(format!("`judge.{key}` must be true or false, not {}", other.type_str()))),
        }
    }

    fn judge_int(&self, key: &str, min: u64, max: u64) -> Result<Option<u64>> {
        match self.judge_value(key)? {
            None => Ok(None),
            Some(toml::Value::Integer(n)) if (min as i128..=max as i128).contains(&i128::from(*n)) => {
                Ok(Some(*n as u64))
            }
            Some(other) => Err(self.error(format!("`judge.{key}` must be an integer in [{min}, {max}], not {other}"))),
        }
    }

    fn judge_float(&self, key: &str, min: f64, max: f64) -> Result<Option<f64>> {
        let value = match self.judge_value(key)? {
            None => return Ok(None),
            Some(toml::Value::Float(x)) => *x,
            Some(toml::Value::Integer(n)) => *n as f64,
            Some(other) => {
                return Err(self.error(format!("`judge.{key}` must be a number in [{min}, {max}], not {other}")));
            }
        };
        if !(min..=max).contains(&value) {
            return Err(self.error(format!("`judge.{key}` must be a number in [{min}, {max}], not {value}")));
        }
        Ok(Some(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfigFile> {
        ConfigFile::parse(text, Path::new("/etc/memdedup/memdedup.toml"))
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn flags_win_over_the_environment_and_the_file() {
        let config = parse("[judge]\nkind = \"anthropic\"\nmodel = \"file-model\"\n").unwrap();
        let env = |name: &str| match name {
            JUDGE_MODEL_ENV_VAR => Some("env-model".to_owned()),
            "ANTHROPIC_API_KEY" => Some("sk-ant-secret".to_owned()),
            _ => None,
        };
        let settings = config.judge_settings_with_env(&JudgeOverrides::default(), env).unwrap();
        assert_eq!(settings.kind, JudgeKind::Anthropic);
        assert_eq!(settings.model, "env-model");
        assert_eq!(settings.base_url, "https://api.anthropic.com/v1");
        assert_eq!(settings.api_key.as_deref(), Some("sk-ant-secret"));
        assert!(!format!("{settings:?}").contains("sk-ant-secret"));
        let flags = JudgeOverrides {
            kind: Some("openai".into()),
            base_url: Some("http://127.0.0.1:11434/v1".into()),
            model: Some("flag-model".into()),
            params: None,
        };
        let settings = config.judge_settings_with_env(&flags, env).unwrap();
        assert_eq!((settings.kind, settings.model.as_str()), (JudgeKind::OpenAi, "flag-model"));
        assert_eq!(settings.base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(settings.api_key, None, "the anthropic key is not sent to an openai judge");
    }

    #[test]
    fn defect_4_judge_max_reply_bytes_is_read_and_bounded() {
        let config = parse("[judge]\nkind = \"openai\"\nmodel = \"m\"\nmax_reply_bytes = 65536\n").unwrap();
        let settings = config.judge_settings_with_env(&JudgeOverrides::default(), no_env).unwrap();
        assert_eq!(settings.max_reply_bytes, 65536);
        let default = parse("[judge]\nkind = \"openai\"\nmodel = \"m\"\n").unwrap();
        let settings = default.judge_settings_with_env(&JudgeOverrides::default(), no_env).unwrap();
        assert_eq!(settings.max_reply_bytes, dedup_llm::DEFAULT_MAX_REPLY_BYTES);
        let error = parse("[judge]\nkind = \"openai\"\nmax_reply_bytes = 10\n").err().map(|e| e.to_string());
        let error = error.unwrap_or_else(|| {
            let config = parse("[judge]\nkind = \"openai\"\nmax_reply_bytes = 10\n").unwrap();
            config.judge_settings_with_env(&JudgeOverrides::default(), no_env).unwrap_err().to_string()
        });
        assert!(error.contains("max_reply_bytes"), "{error}");
    }

    #[test]
    fn the_memdedup_key_wins_over_the_provider_key() {
        let config = parse("[judge]\nkind = \"openai\"\n").unwrap();
        let env = |name: &str| match name {
            "MEMDEDUP_JUDGE_API_KEY" => Some("k1".to_owned()),
            "OPENAI_API_KEY" => Some("k2".to_owned()),
            _ => None,
        };
        let settings = config.judge_settings_with_env(&JudgeOverrides::default(), env).unwrap();
        assert_eq!(settings.api_key.as_deref(), Some("k1"));
    }

    #[test]
    fn no_judge_anywhere_is_the_learned_one() {
        let settings = parse("").unwrap().judge_settings_with_env(&JudgeOverrides::default(), no_env).unwrap();
        assert_eq!(settings.kind, JudgeKind::Learned);
        assert!(settings.base_url.is_empty() && settings.model.is_empty() && settings.api_key.is_none());
    }

    #[test]
    fn a_judge_chosen_nowhere_is_none_not_an_error() {
        let none = parse("").unwrap().judge_settings_if_chosen_with_env(&JudgeOverrides::default(), no_env).unwrap();
        assert!(none.is_none());
        let env = |name: &str| (name == JUDGE_ENV_VAR).then(|| "anthropic".to_owned());
        let chosen = parse("").unwrap().judge_settings_if_chosen_with_env(&JudgeOverrides::default(), env).unwrap();
        assert_eq!(chosen.map(|s| s.kind), Some(JudgeKind::Anthropic));
        let file = parse("[judge]\nkind = \"openai\"\n").unwrap();
        let chosen = file.judge_settings_if_chosen_with_env(&JudgeOverrides::default(), no_env).unwrap();
        assert_eq!(chosen.map(|s| s.kind), Some(JudgeKind::OpenAi));
        let bad = parse("").unwrap().judge_settings_if_chosen_with_env(
            &JudgeOverrides { kind: Some("gemini".into()), ..JudgeOverrides::default() },
            no_env,
        );
        assert!(bad.unwrap_err().to_string().contains("\"gemini\""));
    }

    #[test]
    fn judge_table_mistakes_are_reported_when_the_file_is_read() {
        for (text, expected) in [
            ("[judge]\nkind = \"gemini\"\n", "`judge.kind` \"gemini\" is not"),
            ("[judge]\nmodle = \"x\"\n", "unknown key `judge.modle`"),
            ("[judge]\nin_flight = 0\n", "`judge.in_flight` must be an integer in [1, 256]"),
            ("[judge]\nmin_confidence = 1.5\n", "`judge.min_confidence` must be a number in [0, 1]"),
            ("[judge]\nstructured_output = \"yes\"\n", "`judge.structured_output` must be true or false"),
            ("[judge]\nmodel = 3\n", "`judge.model` must be a string, not integer"),
            ("judge = 3\n", "`judge` must be a table"),
            ("[judge]\nkind = \"local\"\nmodel = \"x\"\n", "`judge.model` does not apply to `judge.kind = \"local\"`"),
            ("[judge]\nkind = \"local\"\nparams = 3\n", "`judge.params` must be a string"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
            assert!(err.contains("/etc/memdedup/memdedup.toml"), "{err}");
        }
    }

    #[test]
    fn run_tuning_applies_to_dedup_options() {
        let config = parse("[judge]\nin_flight = 16\nmax_attempts = 5\nmin_confidence = 0.9\nmin_sim = 0.6\nmax_candidates = 4\nbatch_size = 3\nbatch_chars = 9000\nmax_passes = 2\n").unwrap();
        let mut options = DedupOptions::default();
        config.apply_assist_options(&mut options).unwrap();
        assert_eq!((options.in_flight, options.max_attempts, options.max_candidates), (16, 5, 4));
        assert_eq!((options.batch_size, options.batch_chars, options.max_passes), (3, 9000, 2));
        assert_eq!(options.rules.min_confidence_hint, 0.9);
        assert!((options.min_sim - 0.6).abs() < 1e-6);
    }

    #[test]
    fn the_local_judge_needs_no_model_and_reads_its_parameter_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memdedup.toml");
        std::fs::write(
            dir.path().join("judge.json"),
            r#"{"duplicate_floor": 0.7, "related_floor": 0.4, "vetoes": ["specifics_differ"]}"#,
        )
        .unwrap();
        let config = ConfigFile::parse("[judge]\nkind = \"local\"\nparams = \"judge.json\"\n", &path).unwrap();
        let settings = config.judge_settings_with_env(&JudgeOverrides::default(), no_env).unwrap();
        assert_eq!(settings.kind, JudgeKind::Local);
        assert_eq!(settings.params.as_deref(), Some(dir.path().join("judge.json").as_path()));
        assert_eq!((settings.base_url.as_str(), settings.model.as_str(), settings.api_key.as_deref()), ("", "", None));
        let judge = settings.build().unwrap();
        assert_eq!(judge.name(), "local");
        assert!(judge.model().starts_with("local-judge/") && judge.model() != "local-judge/builtin");
        assert_eq!(judge.default_min_confidence(), Some(f64::from(0.7f32)));
        let err = settings.chat_model().unwrap_err().to_string();
        assert!(err.contains("the local judge asks no chat model"), "{err}");

        // The environment chooses it too; without a file it uses the built-in parameters.
        let env = |name: &str| (name == JUDGE_ENV_VAR).then(|| "local".to_owned());
        let settings = parse("").unwrap().judge_settings_with_env(&JudgeOverrides::default(), env).unwrap();
        assert_eq!((settings.kind, settings.params.clone()), (JudgeKind::Local, None));
        assert_eq!(settings.build().unwrap().model(), "local-judge/builtin");
    }

    #[test]
    fn the_learned_judge_is_offline_and_refuses_api_keys_and_params() {
        let settings = parse("[judge]\nkind = \"learned\"\n")
            .unwrap()
            .judge_settings_with_env(&JudgeOverrides::default(), no_env)
            .unwrap();
        assert_eq!(settings.kind, JudgeKind::Learned);
        assert!(settings.kind.is_offline() && settings.api_key.is_none() && settings.params.is_none());
        let err = settings.chat_model().unwrap_err().to_string();
        assert!(err.contains("the learned judge asks no chat model"), "{err}");
        for (text, expected) in [
            ("[judge]\nkind = \"learned\"\nparams = \"p.json\"\n", "`judge.params` is for `judge.kind = \"local\"`"),
            (
                "[judge]\nkind = \"learned\"\nmodel = \"m\"\n",
                "`judge.model` does not apply to `judge.kind = \"learned\"`",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
        let overrides =
            JudgeOverrides { kind: Some("learned".into()), params: Some("p.json".into()), ..Default::default() };
        let err = parse("").unwrap().judge_settings_with_env(&overrides, no_env).unwrap_err().to_string();
        assert!(err.contains("--judge-params is for the rules judge"), "{err}");
    }

    #[test]
    fn local_judge_mistakes_are_clear() {
        let local = |params: Option<&str>| JudgeOverrides {
            kind: Some("local".into()),
            params: params.map(PathBuf::from),
            ..JudgeOverrides::default()
        };
        // A file describing an LLM judge: its keys are ignored when the flag picks local.
        let file = parse("[judge]\nkind = \"openai\"\nmodel = \"m\"\nmax_tokens = 100\n").unwrap();
        assert_eq!(file.judge_settings_with_env(&local(None), no_env).unwrap().kind, JudgeKind::Local);
        let with_url = JudgeOverrides { base_url: Some("http://x".into()), ..local(None) };
        let err = file.judge_settings_with_env(&with_url, no_env).unwrap_err().to_string();
        assert!(err.contains("--judge-url and --judge-model do not apply to the local judge"), "{err}");
        let openai_params = JudgeOverrides { kind: Some("openai".into()), ..local(Some("p.json")) };
        let err = file.judge_settings_with_env(&openai_params, no_env).unwrap_err().to_string();
        assert!(err.contains("--judge-params is for the local judge"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        let settings = file.judge_settings_with_env(&local(missing.to_str()), no_env).unwrap();
        let err = settings.build().unwrap_err().to_string();
        assert!(err.contains("cannot read judge parameters") && err.contains("missing.json"), "{err}");
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{\"duplicate_floor\": 0.7}").unwrap();
        let settings = file.judge_settings_with_env(&local(bad.to_str()), no_env).unwrap();
        let err = settings.build().unwrap_err().to_string();
        assert!(err.contains("bad.json") && err.contains("invalid"), "{err}");
    }

    #[test]
    fn prompt_files_are_read_relative_to_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("system.txt"), "Be strict.").unwrap();
        let path = dir.path().join("memdedup.toml");
        let config = ConfigFile::parse("[judge]\nkind = \"openai\"\nsystem_prompt = \"system.txt\"\n", &path).unwrap();
        let settings = config.judge_settings_with_env(&JudgeOverrides::default(), no_env).unwrap();
        assert_eq!(settings.prompts.system, "Be strict.");
        assert_eq!(settings.prompts.incremental, JudgePrompts::default().incremental);
        let config = ConfigFile::parse("[judge]\nkind = \"openai\"\nsystem_prompt = \"missing.txt\"\n", &path).unwrap();
        let err = config.judge_settings_with_env(&JudgeOverrides::default(), no_env).unwrap_err().to_string();
        assert!(err.contains("missing.txt"), "{err}");
    }
}
