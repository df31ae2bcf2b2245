//! Credentials in memory text: find them ([`find_secrets`]) and redact them
//! ([`redact_secrets`]) before anything is stored.
//!
//! The pattern set is documented in docs/SECRETS.md. Each pattern is anchored on what
//! makes a credential recognisable: a vendor prefix (`AKIA`, `ghp_`, `xoxb-`, `sk_live_`,
//! `AIza`, `sk-ant-`...), a PEM private-key header, a JSON Web Token's three parts, the
//! password of a `scheme://user:password@host` URL, or a value assigned to a key named
//! like a secret (`password = ...`, `api_key: ...`, `aws_secret_access_key=...`). An
//! assigned value must look like a credential (a digit or a symbol, or twelve characters
//! of mixed case) and must not be a reference (`$VAR`, `${VAR}`, `<password>`,
//! `os.environ[...]`, `***`), so "the password must be rotated" and "password = $DB_PASS"
//! pass untouched.
//!
//! **Invariants:** the redacted text contains none of the found spans; redaction is
//! idempotent (a redacted text has no findings); the kinds are reported, never the values.

use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

/// The marker a redacted secret leaves behind: `[REDACTED:<kind>]`.
pub const REDACTION_PREFIX: &str = "[REDACTED:";

/// What a write path does with a text that holds credentials (`[dedup] secrets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretAction {
    /// Store the text with each credential replaced by `[REDACTED:<kind>]`, and say so
    /// (the default).
    #[default]
    Redact,
    /// Refuse the text, naming the kinds found (never the values).
    Refuse,
    /// Store the text as given (for stores that are secret stores themselves).
    Allow,
}

impl SecretAction {
    /// `redact`, `refuse` or `allow`.
    pub fn as_str(self) -> &'static str {
        match self {
            SecretAction::Redact => "redact",
            SecretAction::Refuse => "refuse",
            SecretAction::Allow => "allow",
        }
    }

    /// The action named `name` (any case, trimmed).
    pub fn from_name(name: &str) -> Option<SecretAction> {
        match name.trim().to_ascii_lowercase().as_str() {
            "redact" => Some(SecretAction::Redact),
            "refuse" => Some(SecretAction::Refuse),
            "allow" => Some(SecretAction::Allow),
            _ => None,
        }
    }
}

/// One credential found in a text: its kind and where it is (byte offsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFinding {
    /// What it looks like: `aws_access_key_id`, `private_key`, `password`...
    pub kind: &'static str,
    /// The credential's bytes in the text (the value only, for an assignment or a URL).
    pub span: Range<usize>,
}

/// A pattern: its kind, the regex, and which capture group holds the secret (0: all).
struct Pattern {
    kind: &'static str,
    regex: Regex,
    group: usize,
    /// What the captured value must look like.
    check: Check,
}

/// The check a captured value passes before it counts.
#[derive(Clone, Copy)]
enum Check {
    /// None: the pattern alone is specific enough.
    None,
    /// Not a reference or placeholder (a URL's password).
    NotReference,
    /// Not a reference, and like a credential rather than a word (an assignment's value).
    Credential,
}

static PATTERNS: LazyLock<Vec<Pattern>> = LazyLock::new(|| {
    let p = |kind, re: &str, group, check| Pattern {
        kind,
        regex: Regex::new(re).unwrap_or_else(|e| panic!("secret pattern {kind}: {e}")),
        group,
        check,
    };
    vec![
        p(
            "private_key",
            r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\z)",
            0,
            Check::None,
        ),
        p("aws_access_key_id", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b", 0, Check::None),
        p(
            "aws_secret_access_key",
            r#"(?i)\b(?:aws)?_?secret_?(?:access)?_?key\b["']?\s*[:=]\s*["']?([A-Za-z0-9/+=]{40})(?:[^A-Za-z0-9/+=]|\z)"#,
            1,
            Check::None,
        ),
        p("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b", 0, Check::None),
        p("gitlab_token", r"\bglpat-[A-Za-z0-9_\-]{20,}", 0, Check::None),
        p("slack_token", r"\bxox[abeprs]-[A-Za-z0-9-]{10,}", 0, Check::None),
        p("slack_webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9_/]{20,}", 0, Check::None),
        p("stripe_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b", 0, Check::None),
        p("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}", 0, Check::None),
        p("anthropic_key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}", 0, Check::None),
        p("openai_key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}", 0, Check::None),
        p("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", 0, Check::None),
        p(
            "connection_string_password",
            r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:([^\s@/]+)@[^\s/]",
            1,
            Check::NotReference,
        ),
        p(
            "password",
            r#"(?i)\b(?:[a-z0-9]+[_\-.])*(?:password|passwd|passphrase|pwd|secret|api_?key|apikey|access_?token|auth_?token|client_?secret|private_?key|token)\b["']?\s*(?::=|=>|=|:)\s*["']?([^\s"',;]{6,})"#,
            1,
            Check::Credential,
        ),
    ]
});

/// Whether a value names a secret kept elsewhere (`$VAR`, `${VAR}`, `<password>`,
/// `os.environ[...]`) or is a placeholder (`***`, `xxxx`) or an earlier redaction.
fn is_reference(value: &str) -> bool {
    value.starts_with(['$', '<', '{', '%', '*', '['])
        || value.contains("${")
        || value.contains('(')
        || value.contains('[')
        || value.chars().all(|c| c == '*' || c == 'x' || c == 'X' || c == '.')
}

/// Whether an assigned value looks like a credential rather than a word, a reference or a
/// placeholder.
fn looks_like_credential(value: &str) -> bool {
    if is_reference(value) {
        return false;
    }
    let digit_or_symbol =
        value.chars().any(|c| c.is_ascii_digit() || (c.is_ascii_punctuation() && c != '.' && c != '-'));
    let mixed_case = value.chars().any(|c| c.is_uppercase()) && value.chars().any(|c| c.is_lowercase());
    digit_or_symbol || (mixed_case && value.chars().count() >= 12)
}

/// Every credential in `text`, in order of position, overlapping findings merged into the
/// first (the widest wins on a tie).
pub fn find_secrets(text: &str) -> Vec<SecretFinding> {
    let mut found: Vec<SecretFinding> = Vec::new();
    for pattern in PATTERNS.iter() {
        for caps in pattern.regex.captures_iter(text) {
            let Some(m) = caps.get(pattern.group) else { continue };
            let counts = match pattern.check {
                Check::None => true,
                Check::NotReference => !is_reference(m.as_str()),
                Check::Credential => looks_like_credential(m.as_str()),
            };
            if !counts {
                continue;
            }
            found.push(SecretFinding { kind: pattern.kind, span: m.range() });
        }
    }
    found.sort_by_key(|f| (f.span.start, std::cmp::Reverse(f.span.end)));
    let mut merged: Vec<SecretFinding> = Vec::new();
    for finding in found {
        match merged.last_mut() {
            Some(last) if finding.span.start < last.span.end => last.span.end = last.span.end.max(finding.span.end),
            _ => merged.push(finding),
        }
    }
    merged
}

/// `text` with every credential replaced by `[REDACTED:<kind>]`, and the kinds replaced
/// (in order, repeats kept). A text without credentials comes back unchanged.
pub fn redact_secrets(text: &str) -> (String, Vec<&'static str>) {
    let findings = find_secrets(text);
    if findings.is_empty() {
        return (text.to_owned(), Vec::new());
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut kinds = Vec::with_capacity(findings.len());
    for finding in findings {
        out.push_str(&text[at..finding.span.start]);
        out.push_str(REDACTION_PREFIX);
        out.push_str(finding.kind);
        out.push(']');
        at = finding.span.end;
        kinds.push(finding.kind);
    }
    out.push_str(&text[at..]);
    (out, kinds)
}

#[cfg(test)]
mod tests;
