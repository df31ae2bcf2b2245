//! Seed 004's [`DeduplicationConfig`]: defaults, the `[dedup]` table of a config file and
//! the `SUBCOG_DEDUP_*` environment variables (and `MEMDEDUP_DEDUP_JUDGE`), in that order
//! of precedence.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dedup_core::SecretAction;

use crate::{Error, PairJudgeChoice, Result};

/// The [`SecretAction`] named `name`, or an error naming `origin`.
fn secret_action(origin: &str, name: &str) -> Result<SecretAction> {
    SecretAction::from_name(name)
        .ok_or_else(|| Error::config(origin, format!("expected \"redact\", \"refuse\" or \"allow\", got {name:?}")))
}

/// The prefix of the environment variables of seed 004's configuration table.
pub const ENV_PREFIX: &str = "SUBCOG_DEDUP_";
/// The environment variable choosing the pair judge (`cosine` or `local`), over
/// `[dedup] judge`.
pub const PAIR_JUDGE_ENV_VAR: &str = "MEMDEDUP_DEDUP_JUDGE";
/// The environment variable choosing what happens to credentials in a memory (`redact`,
/// `refuse` or `allow`), over `[dedup] secrets`.
pub const SECRETS_ENV_VAR: &str = "MEMDEDUP_SECRETS";

const ENV_ENABLED: &str = "SUBCOG_DEDUP_ENABLED";
const ENV_THRESHOLD_DEFAULT: &str = "SUBCOG_DEDUP_THRESHOLD_DEFAULT";
const ENV_TIME_WINDOW_SECS: &str = "SUBCOG_DEDUP_TIME_WINDOW_SECS";
const ENV_CACHE_CAPACITY: &str = "SUBCOG_DEDUP_CACHE_CAPACITY";
const ENV_MIN_SEMANTIC_LENGTH: &str = "SUBCOG_DEDUP_MIN_SEMANTIC_LENGTH";
const ENV_REDIS_URL: &str = "SUBCOG_DEDUP_REDIS_URL";

/// Seed 004's per-namespace thresholds: (namespace, variable, default).
const NAMED_THRESHOLDS: [(&str, &str, f32); 3] = [
    ("decisions", "SUBCOG_DEDUP_THRESHOLD_DECISIONS", 0.92),
    ("patterns", "SUBCOG_DEDUP_THRESHOLD_PATTERNS", 0.90),
    ("learnings", "SUBCOG_DEDUP_THRESHOLD_LEARNINGS", 0.88),
];

/// Every `SUBCOG_DEDUP_*` variable [`DeduplicationConfig::apply_env`] reads; any other `SUBCOG_DEDUP_*`
/// variable is ignored.
const ENV_VARS: [&str; 9] = [
    ENV_ENABLED,
    NAMED_THRESHOLDS[0].1,
    NAMED_THRESHOLDS[1].1,
    NAMED_THRESHOLDS[2].1,
    ENV_THRESHOLD_DEFAULT,
    ENV_TIME_WINDOW_SECS,
    ENV_CACHE_CAPACITY,
    ENV_MIN_SEMANTIC_LENGTH,
    ENV_REDIS_URL,
];

/// The keys of the `[dedup]` table of a config file.
const TOML_KEYS: [&str; 11] = [
    "enabled",
    "default_threshold",
    "time_window_secs",
    "cache_capacity",
    "min_semantic_length",
    "min_semantic_words",
    "redis_url",
    "thresholds",
    "judge",
    "judge_params",
    "secrets",
];

/// How the check-before-store chain behaves (seed 004's configuration table).
///
/// Values come from, lowest precedence first: [`Default`], the `[dedup]` table of a config
/// file ([`DeduplicationConfig::apply_toml`]), the `SUBCOG_DEDUP_*` environment variables
/// ([`DeduplicationConfig::apply_env`]); [`DeduplicationConfig::load`] applies all three.
/// A config built that way always passes [`DeduplicationConfig::validate`]: every threshold
/// is finite and in `[0, 1]`, the capacity is at least 1 and the window at least 1 s.
///
/// `Debug` masks the password of [`DeduplicationConfig::redis_url`].
#[derive(Clone, PartialEq)]
pub struct DeduplicationConfig {
    /// Whether deduplication runs at all (`SUBCOG_DEDUP_ENABLED`, default `true`).
    pub enabled: bool,
    /// Cosine similarity thresholds per namespace name. Defaults: `decisions` 0.92
    /// (`SUBCOG_DEDUP_THRESHOLD_DECISIONS`), `patterns` 0.90
    /// (`SUBCOG_DEDUP_THRESHOLD_PATTERNS`), `learnings` 0.88
    /// (`SUBCOG_DEDUP_THRESHOLD_LEARNINGS`).
    pub similarity_thresholds: BTreeMap<String, f32>,
    /// The threshold of namespaces not in `similarity_thresholds`
    /// (`SUBCOG_DEDUP_THRESHOLD_DEFAULT`, default 0.90).
    pub default_threshold: f32,
    /// How long a capture counts as recent (`SUBCOG_DEDUP_TIME_WINDOW_SECS`, default 300 s).
    pub recent_window: Duration,
    /// How many recent captures are remembered (`SUBCOG_DEDUP_CACHE_CAPACITY`, default
    /// 1000); beyond it the least recently recorded is forgotten.
    pub cache_capacity: usize,
    /// Content shorter than this many characters (of the trimmed content) skips the
    /// semantic check (`SUBCOG_DEDUP_MIN_SEMANTIC_LENGTH`; default 0, no minimum: seed
    /// 004's 50 is an override, since a 40-character rule is worth comparing).
    pub min_semantic_length: usize,
    /// Content of fewer words (runs of non-space) skips the semantic check
    /// (`[dedup] min_semantic_words`, default 3).
    pub min_semantic_words: usize,
    /// A Redis URL for a recent-capture cache shared by several processes or hosts
    /// (`SUBCOG_DEDUP_REDIS_URL`); `None`, the default, keeps the cache in process.
    pub redis_url: Option<String>,
    /// What decides whether a semantic neighbour is a duplicate (`[dedup] judge`,
    /// `MEMDEDUP_DEDUP_JUDGE`; default [`PairJudgeChoice::Cosine`]).
    pub pair_judge: PairJudgeChoice,
    /// The local judge's parameter file (`[dedup] judge_params`), kept so that choosing
    /// the local judge later (environment, flag) uses it; `None`: the built-in parameters.
    pub judge_params: Option<PathBuf>,
    /// What a memory holding credentials (keys, tokens, passwords) gets before it is
    /// checked and stored (`[dedup] secrets`, `MEMDEDUP_SECRETS`; default
    /// [`SecretAction::Redact`]).
    pub secrets: SecretAction,
}

impl Default for DeduplicationConfig {
    fn default() -> DeduplicationConfig {
        DeduplicationConfig {
            enabled: true,
            similarity_thresholds: NAMED_THRESHOLDS
                .iter()
                .map(|&(namespace, _, threshold)| (namespace.to_owned(), threshold))
                .collect(),
            default_threshold: 0.90,
            recent_window: Duration::from_secs(300),
            cache_capacity: 1000,
            min_semantic_length: 0,
            min_semantic_words: 3,
            redis_url: None,
            pair_judge: PairJudgeChoice::Cosine,
            judge_params: None,
            secrets: SecretAction::Redact,
        }
    }
}

impl fmt::Debug for DeduplicationConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeduplicationConfig")
            .field("enabled", &self.enabled)
            .field("similarity_thresholds", &self.similarity_thresholds)
            .field("default_threshold", &self.default_threshold)
            .field("recent_window", &self.recent_window)
            .field("cache_capacity", &self.cache_capacity)
            .field("min_semantic_length", &self.min_semantic_length)
            .field("min_semantic_words", &self.min_semantic_words)
            .field("redis_url", &self.redis_url.as_deref().map(redact_url))
            .field("pair_judge", &self.pair_judge)
            .field("judge_params", &self.judge_params)
            .field("secrets", &self.secrets)
            .finish()
    }
}

impl DeduplicationConfig {
    /// The similarity threshold of `namespace`: its own if configured, else
    /// [`DeduplicationConfig::default_threshold`].
    pub fn threshold_for(&self, namespace: &str) -> f32 {
        self.similarity_thresholds.get(namespace).copied().unwrap_or(self.default_threshold)
    }

    /// Overlays the `[dedup]` table of a parsed config file; `origin` names the file in
    /// errors (`memdedup.toml: dedup.cache_capacity: …`).
    ///
    /// `file` is the whole file; a file without a `[dedup]` table changes nothing, and
    /// other top-level tables are left to their owners. Keys: `enabled` (boolean),
    /// `default_threshold` (number), `time_window_secs`, `cache_capacity`,
    /// `min_semantic_length` (integers), `redis_url` (string), a `thresholds` table of
    /// `namespace = number`, `judge` (`"cosine"` or `"local"`) and `judge_params` (the path
    /// of the local judge's JSON parameter file, relative to the config file's directory;
    /// read and checked even while the judge is `cosine`). Integers are accepted where
    /// numbers are expected. An unknown key, a value of the wrong type or out of range, an
    /// unreadable or invalid parameter file is an [`Error::Config`] naming the key; on
    /// error `self` is unchanged.
    pub fn apply_toml(&mut self, file: &toml::Table, origin: &str) -> Result<()> {
        let Some(dedup) = file.get("dedup") else {
            return Ok(());
        };
        let Some(dedup) = dedup.as_table() else {
            return Err(wrong_type(&format!("{origin}: dedup"), "a table", dedup));
        };
        let mut next = self.clone();
        let mut judge = None;
        for (key, value) in dedup {
            let at = format!("{origin}: dedup.{key}");
            match key.as_str() {
                "enabled" => next.enabled = value.as_bool().ok_or_else(|| wrong_type(&at, "a boolean", value))?,
                "default_threshold" => next.default_threshold = toml_threshold(&at, value)?,
                "time_window_secs" => next.recent_window = Duration::from_secs(toml_integer(&at, value, 1)?),
                "cache_capacity" => next.cache_capacity = toml_usize(&at, value, 1)?,
                "min_semantic_length" => next.min_semantic_length = toml_usize(&at, value, 0)?,
                "min_semantic_words" => next.min_semantic_words = toml_usize(&at, value, 0)?,
                "redis_url" => {
                    let url = value.as_str().ok_or_else(|| wrong_type(&at, "a string", value))?;
                    if url.trim().is_empty() {
                        return Err(Error::config(at, "must not be empty (leave the key out for an in-process cache)"));
                    }
                    next.redis_url = Some(url.trim().to_owned());
                }
                "thresholds" => {
                    let table = value.as_table().ok_or_else(|| wrong_type(&at, "a table", value))?;
                    for (namespace, value) in table {
                        let at = format!("{at}.{namespace}");
                        check_namespace(&at, namespace)?;
                        next.similarity_thresholds.insert(namespace.clone(), toml_threshold(&at, value)?);
                    }
                }
                "judge" => judge = Some(value.as_str().ok_or_else(|| wrong_type(&at, "a string", value))?),
                "secrets" => {
                    let name = value.as_str().ok_or_else(|| wrong_type(&at, "a string", value))?;
                    next.secrets = secret_action(&at, name)?;
                }
                "judge_params" => {
                    let path = value.as_str().ok_or_else(|| wrong_type(&at, "a string", value))?;
                    if path.trim().is_empty() {
                        return Err(Error::config(
                            at,
                            "must not be empty (leave the key out for the built-in parameters)",
                        ));
                    }
                    let path = Path::new(path);
                    let path = match Path::new(origin).parent() {
                        Some(dir) if path.is_relative() => dir.join(path),
                        _ => path.to_path_buf(),
                    };
                    // Checked now, so a mistake shows before the judge is chosen.
                    PairJudgeChoice::local(Some(&path), &at)?;
                    next.judge_params = Some(path);
                }
                _ => {
                    return Err(Error::config(at, format!("unknown key (expected one of {})", TOML_KEYS.join(", "))));
                }
            }
        }
        if let Some(name) = judge {
            let params_origin = format!("{origin}: dedup.judge_params");
            next.pair_judge = PairJudgeChoice::from_name(
                name,
                &format!("{origin}: dedup.judge"),
                next.judge_params.as_deref(),
                &params_origin,
            )?;
        } else if dedup.contains_key("judge_params") && next.pair_judge.local_judge().is_some() {
            next.pair_judge =
                PairJudgeChoice::local(next.judge_params.as_deref(), &format!("{origin}: dedup.judge_params"))?;
        }
        next.validate()?;
        *self = next;
        Ok(())
    }

    /// Overlays the `SUBCOG_DEDUP_*` environment variables, read through `lookup` (production
    /// passes `|name| std::env::var(name).ok()`; tests pass a closure over a map).
    ///
    /// Variables: `SUBCOG_DEDUP_ENABLED` (true/false, 1/0, yes/no, on/off, any case),
    /// `SUBCOG_DEDUP_THRESHOLD_DECISIONS`, `_PATTERNS`, `_LEARNINGS` and `_DEFAULT` (numbers
    /// from 0 to 1), `SUBCOG_DEDUP_TIME_WINDOW_SECS` (at least 1),
    /// `SUBCOG_DEDUP_CACHE_CAPACITY` (at least 1), `SUBCOG_DEDUP_MIN_SEMANTIC_LENGTH` and
    /// `SUBCOG_DEDUP_REDIS_URL`, and `MEMDEDUP_DEDUP_JUDGE` (`cosine` or `local`, any case;
    /// the local judge takes [`DeduplicationConfig::judge_params`]). Values are trimmed; an empty value counts as unset; other
    /// `SUBCOG_DEDUP_*` variables are ignored. An invalid value is an [`Error::Config`]
    /// naming the variable and the value; on error `self` is unchanged.
    pub fn apply_env(&mut self, lookup: impl Fn(&str) -> Option<String>) -> Result<()> {
        let get = |name: &str| lookup(name).map(|value| value.trim().to_owned()).filter(|value| !value.is_empty());
        let mut next = self.clone();
        if let Some(value) = get(ENV_ENABLED) {
            next.enabled = parse_bool(&value).ok_or_else(|| {
                Error::config(ENV_ENABLED, format!("expected true/false, 1/0, yes/no or on/off, got {value:?}"))
            })?;
        }
        for (namespace, name, _) in NAMED_THRESHOLDS {
            if let Some(value) = get(name) {
                next.similarity_thresholds.insert(namespace.to_owned(), env_threshold(name, &value)?);
            }
        }
        if let Some(value) = get(ENV_THRESHOLD_DEFAULT) {
            next.default_threshold = env_threshold(ENV_THRESHOLD_DEFAULT, &value)?;
        }
        if let Some(value) = get(ENV_TIME_WINDOW_SECS) {
            next.recent_window = Duration::from_secs(env_integer(ENV_TIME_WINDOW_SECS, &value, 1)?);
        }
        if let Some(value) = get(ENV_CACHE_CAPACITY) {
            next.cache_capacity = env_usize(ENV_CACHE_CAPACITY, &value, 1)?;
        }
        if let Some(value) = get(ENV_MIN_SEMANTIC_LENGTH) {
            next.min_semantic_length = env_usize(ENV_MIN_SEMANTIC_LENGTH, &value, 0)?;
        }
        if let Some(value) = get(ENV_REDIS_URL) {
            next.redis_url = Some(value);
        }
        if let Some(value) = get(SECRETS_ENV_VAR) {
            next.secrets = secret_action(SECRETS_ENV_VAR, &value)?;
        }
        if let Some(value) = get(PAIR_JUDGE_ENV_VAR) {
            next.pair_judge = PairJudgeChoice::from_name(
                &value,
                PAIR_JUDGE_ENV_VAR,
                next.judge_params.as_deref(),
                "dedup.judge_params",
            )?;
        }
        next.validate()?;
        *self = next;
        Ok(())
    }

    /// Overlays the judge chosen by the command line: `name` (`cosine` or `local`) and
    /// `params` (the local judge's parameter file), which `name_origin` and
    /// `params_origin` name in errors (`--judge`, `--judge-params`).
    ///
    /// Without `name` the configured judge stays; `params` replaces
    /// [`DeduplicationConfig::judge_params`]. Parameters for a judge that ends up `cosine`
    /// are an [`Error::Config`], as are an unknown name and an unreadable or invalid
    /// parameter file; on error `self` is unchanged.
    pub fn apply_judge(
        &mut self,
        name: Option<&str>,
        name_origin: &str,
        params: Option<&Path>,
        params_origin: &str,
    ) -> Result<()> {
        if name.is_none() && params.is_none() {
            return Ok(());
        }
        let params_given = params.is_some();
        let (params, params_origin) = match params {
            Some(path) => (Some(path), params_origin),
            None => (self.judge_params.as_deref(), "dedup.judge_params"),
        };
        let choice = match name {
            Some(name) => PairJudgeChoice::from_name(name, name_origin, params, params_origin)?,
            None if self.pair_judge.local_judge().is_some() => PairJudgeChoice::local(params, params_origin)?,
            None => self.pair_judge.clone(),
        };
        if choice.local_judge().is_none() && params_given {
            return Err(Error::config(
                params_origin,
                format!(
                    "is for the local judge, but the judge is \"{}\" (choose it with `judge = \"local\"` or --judge local)",
                    choice.name()
                ),
            ));
        }
        self.judge_params = params.map(Path::to_path_buf);
        self.pair_judge = choice;
        Ok(())
    }

    /// The configuration in force: defaults, overlaid by the `[dedup]` table of `file` (the
    /// parsed file and its name, if there is one), overlaid by the process environment.
    ///
    /// A `SUBCOG_DEDUP_*` variable or `MEMDEDUP_DEDUP_JUDGE` that is not valid UTF-8 is an
    /// [`Error::Config`].
    pub fn load(file: Option<(&toml::Table, &str)>) -> Result<DeduplicationConfig> {
        for name in ENV_VARS.into_iter().chain([PAIR_JUDGE_ENV_VAR]) {
            if let Err(std::env::VarError::NotUnicode(_)) = std::env::var(name) {
                return Err(Error::config(name, "not valid UTF-8"));
            }
        }
        DeduplicationConfig::load_with(file, |name| std::env::var(name).ok())
    }

    /// [`DeduplicationConfig::load`] with the environment read through `lookup`.
    pub(crate) fn load_with(
        file: Option<(&toml::Table, &str)>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<DeduplicationConfig> {
        let mut config = DeduplicationConfig::default();
        if let Some((table, origin)) = file {
            config.apply_toml(table, origin)?;
        }
        config.apply_env(lookup)?;
        Ok(config)
    }

    /// Checks the invariants: every threshold finite and in `[0, 1]`, every thresholds key
    /// a valid namespace name, `cache_capacity` at least 1, `recent_window` at least 1 s and
    /// `redis_url`, if set, not blank. The error's origin is the field's name.
    pub fn validate(&self) -> Result<()> {
        check_threshold("default_threshold", self.default_threshold)?;
        for (namespace, &threshold) in &self.similarity_thresholds {
            let at = format!("similarity_thresholds.{namespace}");
            check_namespace(&at, namespace)?;
            check_threshold(&at, threshold)?;
        }
        if self.cache_capacity == 0 {
            return Err(Error::config("cache_capacity", "must be at least 1"));
        }
        if self.recent_window < Duration::from_secs(1) {
            return Err(Error::config("recent_window", format!("must be at least 1 s, got {:?}", self.recent_window)));
        }
        if self.redis_url.as_deref().is_some_and(|url| url.trim().is_empty()) {
            return Err(Error::config("redis_url", "must not be empty"));
        }
        Ok(())
    }
}

/// `url` with the password of its user info replaced by `***`, for logs and `Debug`.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let user = match authority[..at].split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        // `redis://secret@host`: a lone user info may be a password.
        None => "***".to_owned(),
    };
    format!("{scheme}://{user}{}", &rest[at..])
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

fn check_threshold(at: &str, threshold: f32) -> Result<()> {
    if threshold.is_finite() && (0.0..=1.0).contains(&threshold) {
        Ok(())
    } else {
        Err(Error::config(at, format!("must be a number from 0 to 1, got {threshold}")))
    }
}

fn check_namespace(at: &str, namespace: &str) -> Result<()> {
    match dedup_store::Scope::namespace(namespace) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::config(at, e.to_string())),
    }
}

fn env_threshold(name: &str, value: &str) -> Result<f32> {
    match value.parse::<f32>() {
        Ok(threshold) if threshold.is_finite() && (0.0..=1.0).contains(&threshold) => Ok(threshold),
        _ => Err(Error::config(name, format!("expected a number from 0 to 1, got {value:?}"))),
    }
}

fn env_integer(name: &str, value: &str, min: u64) -> Result<u64> {
    match value.parse::<u64>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(Error::config(name, format!("expected an integer of at least {min}, got {value:?}"))),
    }
}

fn env_usize(name: &str, value: &str, min: u64) -> Result<usize> {
    let n = env_integer(name, value, min)?;
    usize::try_from(n).map_err(|_| Error::config(name, format!("too large: {value:?}")))
}

fn wrong_type(at: &str, expected: &str, found: &toml::Value) -> Error {
    Error::config(at, format!("expected {expected}, found {}", found.type_str()))
}

fn toml_threshold(at: &str, value: &toml::Value) -> Result<f32> {
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let threshold = match value {
        toml::Value::Float(x) => *x as f32,
        toml::Value::Integer(n) => *n as f32,
        _ => return Err(wrong_type(at, "a number", value)),
    };
    check_threshold(at, threshold)?;
    Ok(threshold)
}

fn toml_integer(at: &str, value: &toml::Value, min: u64) -> Result<u64> {
    let Some(n) = value.as_integer() else {
        return Err(wrong_type(at, "an integer", value));
    };
    match u64::try_from(n) {
        Ok(n) if n >= min => Ok(n),
        _ => Err(Error::config(at, format!("must be at least {min}, got {n}"))),
    }
}

fn toml_usize(at: &str, value: &toml::Value, min: u64) -> Result<usize> {
    let n = toml_integer(at, value, min)?;
    usize::try_from(n).map_err(|_| Error::config(at, format!("too large: {n}")))
}

#[cfg(test)]
mod tests;
