//! Scopes: the (domain, namespace) pair every memory belongs to and every search stays in.

use std::fmt;

use crate::{Error, MemoryId, Result};

/// The domain memories go to when none is given (seed 004's URNs use `global`).
pub const DEFAULT_DOMAIN: &str = "global";
/// The namespace memories go to when none is given.
pub const DEFAULT_NAMESPACE: &str = "default";

const MAX_NAME_LEN: usize = 64;

/// The namespace (in [`DEFAULT_DOMAIN`]) whose skip counters count the failures of
/// `memdedup hook pre-compact`. It holds no memories, facts or nodes: writing one there
/// is refused ([`Scope::check_writable`]); its counters are written as usual.
pub const HOOK_FAILURE_NAMESPACE: &str = "hook.pre-compact";

/// A validated (domain, namespace) pair.
///
/// Both names are 1 to 64 characters from `[A-Za-z0-9_.-]`, starting with a letter or
/// digit. No check, search or list in one scope ever returns a memory of another.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Scope {
    domain: String,
    namespace: String,
}

impl Scope {
    /// A scope from a domain and a namespace, both validated.
    pub fn new(domain: &str, namespace: &str) -> Result<Scope> {
        validate_name("domain", domain)?;
        validate_name("namespace", namespace)?;
        Ok(Scope { domain: domain.to_owned(), namespace: namespace.to_owned() })
    }

    /// A namespace in the default domain.
    pub fn namespace(namespace: &str) -> Result<Scope> {
        Scope::new(DEFAULT_DOMAIN, namespace)
    }

    /// The domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The namespace.
    pub fn namespace_name(&self) -> &str {
        &self.namespace
    }

    /// Whether this is the scope reserved for the hook's failure counters.
    pub fn is_reserved(&self) -> bool {
        self.domain == DEFAULT_DOMAIN && self.namespace == HOOK_FAILURE_NAMESPACE
    }

    /// Refuses the reserved scope ([`HOOK_FAILURE_NAMESPACE`]) for a memory, fact or node.
    pub fn check_writable(&self) -> Result<()> {
        if self.is_reserved() {
            return Err(Error::InvalidName {
                what: "namespace",
                name: self.namespace.clone(),
                reason: "is reserved for the pre-compact hook's failure counters",
            });
        }
        Ok(())
    }

    /// The URN of a memory in this scope: `memdedup://{domain}/{namespace}/{id}`.
    pub fn urn(&self, id: MemoryId) -> String {
        format!("memdedup://{}/{}/{}", self.domain, self.namespace, id)
    }
}

/// Parses a memory reference: a bare id (`42`) or a URN (`memdedup://global/decisions/42`),
/// giving the id and, for a URN, its scope. The error names the reference and what is
/// wrong with it.
pub fn parse_memory_ref(raw: &str) -> std::result::Result<(MemoryId, Option<Scope>), String> {
    let bad = || format!("`{raw}` is not a memory id or memdedup:// URN");
    let digits_only = |s: &str| -> std::result::Result<MemoryId, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    let Some(rest) = raw.strip_prefix("memdedup://") else { return Ok((digits_only(raw)?, None)) };
    let parts: Vec<&str> = rest.split('/').collect();
    let [domain, namespace, id] = parts[..] else {
        return Err(format!("`{raw}` is not a memdedup://DOMAIN/NAMESPACE/ID URN"));
    };
    let scope = Scope::new(domain, namespace).map_err(|e| format!("`{raw}` is not a valid URN: {e}"))?;
    Ok((digits_only(id)?, Some(scope)))
}

impl Default for Scope {
    fn default() -> Scope {
        Scope { domain: DEFAULT_DOMAIN.to_owned(), namespace: DEFAULT_NAMESPACE.to_owned() }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.domain, self.namespace)
    }
}

/// Validates a domain, namespace or kind name.
pub(crate) fn validate_name(what: &'static str, name: &str) -> Result<()> {
    validate_name_with(what, name, b"_-.")
}

/// Validates a memory kind: like a name, and ':' is allowed too (seed 001's subtypes are
/// spelled `custom:lesson`).
pub(crate) fn validate_kind(kind: &str) -> Result<()> {
    validate_name_with("kind", kind, b"_-.:")
}

fn validate_name_with(what: &'static str, name: &str, punctuation: &[u8]) -> Result<()> {
    let reason = if name.is_empty() {
        Some("must not be empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("must be at most 64 characters")
    } else if !name.bytes().all(|b| b.is_ascii_alphanumeric() || punctuation.contains(&b)) {
        Some(if punctuation.contains(&b':') {
            "may only contain ASCII letters, digits, '_', '-', '.' and ':'"
        } else {
            "may only contain ASCII letters, digits, '_', '-' and '.'"
        })
    } else if !name.as_bytes()[0].is_ascii_alphanumeric() {
        Some("must start with a letter or digit")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidName { what, name: name.to_owned(), reason }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defect_17_the_hook_failure_namespace_is_not_writable() {
        let reserved = Scope::namespace(HOOK_FAILURE_NAMESPACE).unwrap();
        assert!(reserved.is_reserved());
        let err = reserved.check_writable().unwrap_err().to_string();
        assert!(err.contains("hook.pre-compact") && err.contains("reserved"), "{err}");
        assert!(Scope::new("team", HOOK_FAILURE_NAMESPACE).unwrap().check_writable().is_ok(), "another domain");
        assert!(Scope::default().check_writable().is_ok());
    }

    #[test]
    fn valid_names_and_urn() {
        let scope = Scope::new("global", "decisions").unwrap();
        assert_eq!(scope.urn(MemoryId::new(42)), "memdedup://global/decisions/42");
        assert_eq!(scope.to_string(), "global/decisions");
        assert!(Scope::namespace("team-a.v2_x").is_ok());
    }

    #[test]
    fn invalid_names_are_rejected_with_the_reason() {
        for bad in ["", "a b", "../etc", "-lead", "ns/x", "ümlaut", &"x".repeat(65)] {
            let err = Scope::namespace(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidName { what: "namespace", .. }), "{bad:?}: {err}");
        }
        let err = Scope::new("bad domain", "ok").unwrap_err();
        assert!(err.to_string().starts_with("invalid domain \"bad domain\": may only contain"), "{err}");
    }
}
