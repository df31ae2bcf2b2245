//! Tool results: structured JSON plus one line of text; errors as MCP tool errors.

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;
use serde_json::{Value, json};

/// Why a tool call failed. Its message is what the CLI would say, and reaches the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToolError {
    /// An argument is wrong (empty, too long, out of range, a bad name or id).
    InvalidArgument(String),
    /// The bearer token may not use the namespace.
    Forbidden(String),
    /// No such memory or merge.
    NotFound(String),
    /// The tool needs something this server was started without (the model, a chat model).
    NotConfigured(String),
    /// The store, the embedder or the judge failed.
    Failed(String),
}

impl ToolError {
    fn kind(&self) -> &'static str {
        match self {
            ToolError::InvalidArgument(_) => "invalid_argument",
            ToolError::Forbidden(_) => "forbidden",
            ToolError::NotFound(_) => "not_found",
            ToolError::NotConfigured(_) => "not_configured",
            ToolError::Failed(_) => "failed",
        }
    }

    pub(crate) fn message(&self) -> &str {
        match self {
            ToolError::InvalidArgument(m)
            | ToolError::Forbidden(m)
            | ToolError::NotFound(m)
            | ToolError::NotConfigured(m)
            | ToolError::Failed(m) => m,
        }
    }

    /// A failure of the layers below, with what was being done.
    pub(crate) fn failed(doing: &str, error: impl std::fmt::Display) -> ToolError {
        ToolError::Failed(format!("{doing}: {error}"))
    }
}

/// The result of one tool: success or a tool error.
pub(crate) type ToolResult = Result<CallToolResult, ToolError>;

/// A successful result: `value` as the structured content, `text` as the one text block.
///
/// `value` is serialised to text and read back, so `f32` scores show as their shortest
/// decimal (0.92, not 0.9200000166893005), as the CLI prints them.
pub(crate) fn success<T: Serialize>(value: &T, text: impl Into<String>) -> ToolResult {
    let text_json = serde_json::to_string(value).map_err(|e| ToolError::failed("cannot encode the result", e))?;
    let structured: Value =
        serde_json::from_str(&text_json).map_err(|e| ToolError::failed("cannot encode the result", e))?;
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    Ok(result)
}

/// The MCP form of a failed call: `isError: true`, the message as text, and
/// `{"error": {"kind": …, "message": …}}` as structured content.
pub(crate) fn into_call_result(result: ToolResult) -> CallToolResult {
    match result {
        Ok(result) => result,
        Err(error) => {
            let mut result = CallToolResult::error(vec![ContentBlock::text(format!("error: {}", error.message()))]);
            result.structured_content = Some(json!({"error": {"kind": error.kind(), "message": error.message()}}));
            result
        }
    }
}

/// `1 memory`, `2 memories`, `2 groups`.
pub(crate) fn plural(n: usize, noun: &str) -> String {
    match (n, noun.strip_suffix('y')) {
        (1, _) => format!("1 {noun}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        _ => format!("{n} {noun}s"),
    }
}
