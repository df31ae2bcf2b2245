//! `memdedup capture`: check and store candidate memories, print PreCompact hook output.

use anyhow::Result;
use memdedup::crates::store::Store;
use memdedup::{NewMemory, Scope};
use serde::Deserialize;

use crate::UsageError;
use crate::checker::Checker;
use crate::cli::{CaptureArgs, GlobalArgs};
use crate::input::{display_name, read_text, without_bom};
use crate::output::emit;
use crate::precompact::{additional_context, hook_output, summary};
use crate::verdict::{add_json, warn_degraded};

/// One candidate line. Unknown fields are ignored, so extractors may add their own.
#[derive(Debug, Deserialize)]
struct Candidate {
    content: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    domain: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    title: Option<String>,
}

pub(crate) async fn run(global: &GlobalArgs, args: &CaptureArgs) -> Result<()> {
    let name = display_name(&args.file);
    let candidates = parse_candidates(&read_text(&args.file)?, &name)?;
    let mut checker = Checker::open(global, &args.judge).await?;
    let mut outcomes = Vec::with_capacity(candidates.len());
    for memory in candidates {
        let content = memory.content.clone();
        let scope = memory.scope.clone();
        let outcome = match checker.add(memory).await {
            Ok(outcome) => outcome,
            Err(e) => {
                checker.close().await;
                return Err(e);
            }
        };
        warn_degraded(&outcome.check);
        outcomes.push((content, scope, outcome));
    }
    checker.close().await;
    if args.json {
        let results: Vec<String> = outcomes.iter().map(|(_, scope, outcome)| add_json(outcome, scope)).collect();
        emit(&format!("{{\"results\":[{}]}}\n", results.join(",")))?;
    } else {
        emit(&format!("{}\n", hook_output(&additional_context(&outcomes), &summary(&outcomes))))?;
    }
    Ok(())
}

/// Parses and validates every candidate before anything is stored, so a bad line
/// stores nothing.
fn parse_candidates(text: &str, name: &str) -> Result<Vec<NewMemory>> {
    let mut memories = Vec::new();
    for (index, line) in without_bom(text).lines().enumerate() {
        let line_no = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let candidate: Candidate = serde_json::from_str(line)
            .map_err(|e| UsageError(format!("{name}: line {line_no}: invalid candidate: {e}")))?;
        let at = |message: String| UsageError(format!("{name}: line {line_no}: {message}"));
        let scope = Scope::new(
            candidate.domain.as_deref().unwrap_or(memdedup::DEFAULT_DOMAIN),
            candidate.namespace.as_deref().unwrap_or(memdedup::DEFAULT_NAMESPACE),
        )
        .map_err(|e| at(e.to_string()))?;
        if candidate.content.trim().is_empty() {
            return Err(at("`content` is empty".into()).into());
        }
        if candidate.content.len() > memdedup::crates::store::MAX_CONTENT_BYTES {
            return Err(at(format!("`content` is {} bytes, over the 1 MiB limit", candidate.content.len())).into());
        }
        let mut memory = NewMemory::new(scope, candidate.content);
        if let Some(kind) = candidate.kind {
            memory = memory.with_kind(kind);
        }
        if let Some(title) = candidate.title {
            memory = memory.with_title(title);
        }
        // Everything the store would refuse at insert time (kind, title, NUL, …) is
        // refused here, so no candidate is stored before a later one fails.
        Store::validate_memory(&memory).map_err(|e| at(e.to_string()))?;
        memories.push(memory);
    }
    if memories.len() > MAX_CANDIDATES {
        return Err(UsageError(format!(
            "{name}: {} candidates, more than the {MAX_CANDIDATES} one capture takes",
            memories.len()
        ))
        .into());
    }
    Ok(memories)
}

/// Most candidates one `capture` takes (a pre-compact pass has a handful).
const MAX_CANDIDATES: usize = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_validated_before_anything_is_stored() {
        let ok = parse_candidates(
            "{\"content\":\"a\",\"namespace\":\"decisions\",\"extra\":1}\n\n{\"content\":\"b\"}\n",
            "in",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].scope.namespace_name(), "decisions");
        assert_eq!(ok[1].scope, Scope::default());
        let err = parse_candidates("{\"content\":\"a\"}\n{\"text\":\"b\"}\n", "in").unwrap_err().to_string();
        assert!(err.starts_with("in: line 2: invalid candidate: missing field `content`"), "{err}");
        let err = parse_candidates("{\"content\":\"a\",\"namespace\":\"bad ns\"}\n", "in").unwrap_err().to_string();
        assert!(err.contains("line 1: invalid namespace \"bad ns\""), "{err}");
        let err = parse_candidates("{\"content\":\"  \"}\n", "in").unwrap_err().to_string();
        assert!(err.contains("line 1: `content` is empty"), "{err}");
    }

    #[test]
    fn defect_3_capture_validates_every_line_first() {
        let err = |line2: &str| {
            let text = format!("{{\"content\":\"fine\"}}\n{line2}\n");
            let e = parse_candidates(&text, "in").unwrap_err();
            assert!(e.downcast_ref::<UsageError>().is_some(), "{e} is a usage error");
            e.to_string()
        };
        let bad_kind = err("{\"content\":\"b\",\"kind\":\"no kind\"}");
        assert!(bad_kind.starts_with("in: line 2: invalid kind"), "{bad_kind}");
        let long_title = err(&format!("{{\"content\":\"b\",\"title\":\"{}\"}}", "t".repeat(70_000)));
        assert!(long_title.starts_with("in: line 2: ") && long_title.contains("title"), "{long_title}");
        let nul_title = err("{\"content\":\"b\",\"title\":\"a\\u0000b\"}");
        assert!(nul_title.starts_with("in: line 2: ") && nul_title.contains("NUL"), "{nul_title}");
        let nul_content = err("{\"content\":\"a\\u0000b\"}");
        assert!(nul_content.starts_with("in: line 2: ") && nul_content.contains("NUL"), "{nul_content}");
    }
}
