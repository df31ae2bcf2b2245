//! The server's configuration: the `[server]` table of memdedup.toml, with defaults.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use serde::Deserialize;

use crate::Error;

/// The default listen address.
pub const DEFAULT_ADDR: &str = "127.0.0.1:3100";
/// The environment variable holding one unrestricted bearer token, added to the
/// configured ones.
pub const TOKEN_ENV_VAR: &str = "MEMDEDUP_API_TOKEN";

/// Everything `memdedup serve` is configured with.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Where to listen; a non-loopback address needs at least one token.
    pub addr: SocketAddr,
    /// The domain every node and fact of this server lives in.
    pub domain: String,
    /// Bearer tokens. With none, requests need no token (loopback only).
    pub tokens: Vec<TokenConfig>,
    /// Largest request body in bytes; bigger ones get 413.
    pub max_body_bytes: usize,
    /// Largest text field (a node's title or body, a fact's content) in bytes; longer
    /// ones get 400.
    pub max_text_bytes: usize,
    /// Seconds a client has to send a request's headers once it starts one (default 10,
    /// 1 to 3,600); a slower one is disconnected.
    pub header_timeout_secs: u64,
    /// Seconds a client has to send a whole request body once the handler reads it
    /// (default 30, 1 to 3,600); a slower one gets 408.
    pub body_timeout_secs: u64,
    /// Seed 001's nodes API.
    pub nodes: NodesConfig,
    /// Seed 002's fact memory.
    pub facts: FactsConfig,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            addr: DEFAULT_ADDR.parse().unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 3100))),
            domain: dedup_store::DEFAULT_DOMAIN.to_owned(),
            tokens: Vec::new(),
            max_body_bytes: 1 << 20,
            max_text_bytes: 64 << 10,
            header_timeout_secs: 10,
            body_timeout_secs: 30,
            nodes: NodesConfig::default(),
            facts: FactsConfig::default(),
        }
    }
}

/// One bearer token and the namespaces it may use.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The secret, sent as `Authorization: Bearer <token>`.
    pub token: String,
    /// The namespaces it may read and write; all when absent.
    #[serde(default)]
    pub namespaces: Option<BTreeSet<String>>,
    /// Whether it came from [`TOKEN_ENV_VAR`] (for error messages).
    #[serde(skip)]
    pub from_env: bool,
}

impl std::fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenConfig").field("token", &"<redacted>").field("namespaces", &self.namespaces).finish()
    }
}

/// The check-similar tiers and the dedup gate of `POST /v1/nodes` (seed 001).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodesConfig {
    /// Cosine at or above which a node is a duplicate (seed: 0.95).
    pub duplicate_threshold: f32,
    /// Cosine at or above which a node is linked with `relates_to` (seed: 0.90).
    pub connect_threshold: f32,
    /// Leading dimensions compared, renormalised (seed: 512); all when the model has
    /// fewer.
    pub comparison_dims: usize,
    /// Subtypes gated by dedup, with or without the `custom:` prefix (seed: lesson and
    /// curiosity).
    pub dedup_subtypes: Vec<String>,
}

impl Default for NodesConfig {
    fn default() -> NodesConfig {
        NodesConfig {
            duplicate_threshold: 0.95,
            connect_threshold: 0.90,
            comparison_dims: 512,
            dedup_subtypes: vec!["lesson".to_owned(), "curiosity".to_owned()],
        }
    }
}

impl NodesConfig {
    /// Whether nodes of `subtype` go through the dedup gate.
    pub fn is_dedup_eligible(&self, subtype: &str) -> bool {
        let bare = subtype.strip_prefix("custom:").unwrap_or(subtype);
        self.dedup_subtypes.iter().any(|s| s.strip_prefix("custom:").unwrap_or(s) == bare)
    }
}

/// The fact memory's policy (seed 002).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FactsConfig {
    /// Facts below this confidence are skipped (seed: 0.5).
    pub min_confidence: f64,
    /// Most facts kept per namespace; the lowest-confidence one is evicted (seed: 500).
    pub max_facts: usize,
}

impl Default for FactsConfig {
    fn default() -> FactsConfig {
        FactsConfig { min_confidence: 0.5, max_facts: 500 }
    }
}

impl ServerConfig {
    /// Adds the token of [`TOKEN_ENV_VAR`], when set and not empty, as an unrestricted
    /// token.
    pub fn with_env_token(mut self, lookup: impl Fn(&str) -> Option<String>) -> ServerConfig {
        if let Some(token) = lookup(TOKEN_ENV_VAR).filter(|t| !t.trim().is_empty()) {
            self.tokens.push(TokenConfig { token, namespaces: None, from_env: true });
        }
        self
    }

    /// Checks every value, naming the first bad one; also refuses a non-loopback address
    /// without a token.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |what: &str, why: String| Err(Error::Config(format!("{what}: {why}")));
        let unit = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
        let nodes = &self.nodes;
        if !unit(f64::from(nodes.duplicate_threshold)) {
            return bad("nodes.duplicate_threshold", format!("{} is not in [0, 1]", nodes.duplicate_threshold));
        }
        if !unit(f64::from(nodes.connect_threshold)) {
            return bad("nodes.connect_threshold", format!("{} is not in [0, 1]", nodes.connect_threshold));
        }
        if nodes.connect_threshold > nodes.duplicate_threshold {
            return bad(
                "nodes.connect_threshold",
                format!("{} is above duplicate_threshold {}", nodes.connect_threshold, nodes.duplicate_threshold),
            );
        }
        if nodes.comparison_dims == 0 {
            return bad("nodes.comparison_dims", "must be at least 1".to_owned());
        }
        if !unit(self.facts.min_confidence) {
            return bad("facts.min_confidence", format!("{} is not in [0, 1]", self.facts.min_confidence));
        }
        if self.facts.max_facts == 0 {
            return bad("facts.max_facts", "must be at least 1".to_owned());
        }
        for (what, secs) in
            [("header_timeout_secs", self.header_timeout_secs), ("body_timeout_secs", self.body_timeout_secs)]
        {
            if !(1..=3_600).contains(&secs) {
                return bad(what, format!("{secs} is not in 1..=3600"));
            }
        }
        if self.max_body_bytes < 1024 {
            return bad("max_body_bytes", format!("{} is below 1024", self.max_body_bytes));
        }
        if self.max_text_bytes == 0 || self.max_text_bytes > dedup_store::MAX_CONTENT_BYTES {
            return bad(
                "max_text_bytes",
                format!("{} is not in 1..={}", self.max_text_bytes, dedup_store::MAX_CONTENT_BYTES),
            );
        }
        dedup_store::Scope::new(&self.domain, dedup_store::DEFAULT_NAMESPACE)
            .map_err(|e| Error::Config(format!("domain: {e}")))?;
        let mut seen = BTreeSet::new();
        for (i, token) in self.tokens.iter().enumerate() {
            let name = if token.from_env { TOKEN_ENV_VAR.to_owned() } else { format!("tokens[{i}]") };
            if token.token.trim().len() < 8 {
                return bad(&name, "a token must have at least 8 characters".to_owned());
            }
            if !seen.insert(token.token.as_str()) {
                return bad(&name, "the same token is configured twice".to_owned());
            }
            for namespace in token.namespaces.iter().flatten() {
                dedup_store::Scope::new(&self.domain, namespace)
                    .map_err(|e| Error::Config(format!("tokens[{i}].namespaces: {e}")))?;
            }
        }
        if self.tokens.is_empty() && !self.addr.ip().is_loopback() {
            return bad(
                "addr",
                format!(
                    "refusing to listen on non-loopback {} without a token: configure [[server.tokens]] or \
                     set {TOKEN_ENV_VAR}",
                    self.addr
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_seeds_and_valid() {
        let config = ServerConfig::default();
        assert_eq!(config.addr.to_string(), DEFAULT_ADDR);
        assert_eq!((config.nodes.duplicate_threshold, config.nodes.connect_threshold), (0.95, 0.90));
        assert_eq!(config.nodes.comparison_dims, 512);
        assert_eq!((config.facts.min_confidence, config.facts.max_facts), (0.5, 500));
        config.validate().unwrap();
    }

    #[test]
    fn non_loopback_without_token_is_refused() {
        let config = ServerConfig { addr: "0.0.0.0:3100".parse().unwrap(), ..ServerConfig::default() };
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("non-loopback 0.0.0.0:3100 without a token"), "{error}");
        let config = config.with_env_token(|_| Some("a-long-secret".to_owned()));
        config.validate().unwrap();
        let short = ServerConfig::default().with_env_token(|_| Some("short".to_owned()));
        assert!(short.validate().unwrap_err().to_string().contains(TOKEN_ENV_VAR));
    }

    #[test]
    fn bad_values_are_named() {
        let mut config = ServerConfig::default();
        config.nodes.connect_threshold = 0.97;
        assert!(config.validate().unwrap_err().to_string().contains("nodes.connect_threshold"));
        let mut config = ServerConfig::default();
        config.tokens.push(TokenConfig { token: "short".to_owned(), namespaces: None, from_env: false });
        assert!(config.validate().unwrap_err().to_string().contains("tokens[0]"));
        let mut config = ServerConfig::default();
        config.tokens.push(TokenConfig {
            token: "long-enough-token".to_owned(),
            namespaces: Some(["bad name".to_owned()].into()),
            from_env: false,
        });
        assert!(config.validate().unwrap_err().to_string().contains("tokens[0].namespaces"));
    }

    #[test]
    fn dedup_subtypes_match_with_or_without_custom_prefix() {
        let nodes = NodesConfig::default();
        assert!(nodes.is_dedup_eligible("custom:lesson"));
        assert!(nodes.is_dedup_eligible("curiosity"));
        assert!(!nodes.is_dedup_eligible("custom:thesis"));
    }

    #[test]
    fn toml_table_parses_and_rejects_unknown_keys() {
        let config: ServerConfig = toml_like(
            r#"{"addr": "127.0.0.1:4000", "tokens": [{"token": "0123456789", "namespaces": ["agents"]}],
                "nodes": {"duplicate_threshold": 0.97}}"#,
        );
        assert_eq!(config.addr.port(), 4000);
        assert_eq!(config.nodes.duplicate_threshold, 0.97);
        assert_eq!(config.nodes.connect_threshold, 0.90);
        assert!(serde_json::from_str::<ServerConfig>(r#"{"adr": "127.0.0.1:1"}"#).is_err());
    }

    fn toml_like(json: &str) -> ServerConfig {
        serde_json::from_str(json).unwrap()
    }
}
