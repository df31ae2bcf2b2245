//! Reading a Claude Code transcript (JSONL, one event per line) into the human-readable
//! messages of the conversation.
//!
//! A line counts when its `type` is `user` or `assistant` and it carries a `message`
//! whose `content` is a string or a list of blocks; of the blocks only `text` ones are
//! read (not `tool_use`, `tool_result`, `thinking`, images). Lines marked `isMeta`,
//! `isSidechain` (a subagent's conversation), `isCompactSummary` or `isApiErrorMessage`
//! are not statements of the conversation and are ignored, as are `summary`, `system` and
//! other line types, and the text Claude Code itself puts into user messages (slash
//! command echoes, local command output, interruption notices). A line that is not a
//! JSON object, is not UTF-8, or is a user or assistant line without a readable message
//! is malformed: it is skipped and counted.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use memdedup::crates::core::{ConversationMessage, Speaker};
use serde::Deserialize;
use serde_json::Value;

/// The most of a transcript that is read: its last 16 MiB. A longer transcript is read
/// from the first whole line of its tail (the earlier part was compacted before, and
/// analysis keeps the latest candidates anyway).
pub(crate) const MAX_TRANSCRIPT_BYTES: u64 = 16 << 20;

/// The messages of a transcript and what reading it found.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Transcript {
    /// The human-readable messages, in file order.
    pub messages: Vec<ConversationMessage>,
    /// Non-blank lines read.
    pub lines: usize,
    /// Lines skipped as malformed.
    pub malformed: usize,
    /// Bytes at the start of a long transcript that were not read.
    pub skipped_bytes: u64,
}

/// One line of the transcript; other fields are ignored.
#[derive(Debug, Deserialize)]
struct Line {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    message: Option<Value>,
    #[serde(rename = "isMeta", default)]
    is_meta: Option<bool>,
    #[serde(rename = "isSidechain", default)]
    is_sidechain: Option<bool>,
    #[serde(rename = "isCompactSummary", default)]
    is_compact_summary: Option<bool>,
    #[serde(rename = "isApiErrorMessage", default)]
    is_api_error: Option<bool>,
}

/// Reads the transcript at `path`: the whole file, or its last [`MAX_TRANSCRIPT_BYTES`].
/// Fails only when the file cannot be opened or read.
pub(crate) fn read_transcript(path: &Path) -> std::io::Result<Transcript> {
    let mut file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(std::io::Error::other("it is a directory"));
    }
    let mut skipped = 0;
    if meta.is_file() && meta.len() > MAX_TRANSCRIPT_BYTES {
        skipped = meta.len() - MAX_TRANSCRIPT_BYTES;
        file.seek(SeekFrom::Start(skipped))?;
    }
    let mut bytes = Vec::new();
    file.take(MAX_TRANSCRIPT_BYTES).read_to_end(&mut bytes)?;
    let mut start = 0;
    if skipped > 0 {
        // The tail starts inside a line: begin after its end.
        start = bytes.iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| i + 1);
        skipped += start as u64;
    }
    let mut transcript = parse_transcript(&bytes[start..]);
    transcript.skipped_bytes = skipped;
    Ok(transcript)
}

/// The messages of transcript bytes; see the module docs.
pub(crate) fn parse_transcript(bytes: &[u8]) -> Transcript {
    let mut transcript = Transcript::default();
    for raw in bytes.split(|&b| b == b'\n') {
        let raw = raw.strip_prefix(b"\xef\xbb\xbf").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        transcript.lines += 1;
        match parse_line(raw) {
            Ok(messages) => transcript.messages.extend(messages),
            Err(()) => transcript.malformed += 1,
        }
    }
    transcript
}

/// The messages of one line (none for lines that are not conversation); `Err` when the
/// line is malformed.
fn parse_line(raw: &[u8]) -> Result<Vec<ConversationMessage>, ()> {
    let text = std::str::from_utf8(raw).map_err(|_| ())?;
    if !text.trim_start().starts_with('{') {
        return Err(());
    }
    let line: Line = serde_json::from_str(text).map_err(|_| ())?;
    let speaker = match line.kind.as_deref() {
        Some("user") => Speaker::User,
        Some("assistant") => Speaker::Assistant,
        _ => return Ok(Vec::new()),
    };
    let ignored = [line.is_meta, line.is_sidechain, line.is_compact_summary, line.is_api_error];
    if ignored.contains(&Some(true)) {
        return Ok(Vec::new());
    }
    let content = line.message.as_ref().and_then(|m| m.get("content")).ok_or(())?;
    let texts: Vec<&str> = match content {
        Value::String(text) => vec![text.as_str()],
        Value::Array(blocks) => blocks
            .iter()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect(),
        _ => return Err(()),
    };
    Ok(texts
        .into_iter()
        .filter(|text| !text.trim().is_empty())
        .filter(|text| speaker != Speaker::User || !is_harness_text(text))
        .map(|text| ConversationMessage { speaker, text: text.to_owned() })
        .collect())
}

/// Text Claude Code writes into user messages itself: command echoes and output, hook
/// and reminder blocks, interruption notices.
fn is_harness_text(text: &str) -> bool {
    const TAGS: [&str; 10] = [
        "<command-name>",
        "<command-message>",
        "<command-args>",
        "<local-command-stdout>",
        "<local-command-stderr>",
        "<bash-input>",
        "<bash-stdout>",
        "<bash-stderr>",
        "<system-reminder>",
        "<user-prompt-submit-hook>",
    ];
    let text = text.trim_start();
    TAGS.iter().any(|tag| text.starts_with(tag))
        || text.starts_with("Caveat: The messages below were generated by the user while running local commands")
        || text.starts_with("[Request interrupted by user")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn line(value: Value) -> String {
        format!("{value}\n")
    }

    #[test]
    fn user_and_assistant_text_is_read_and_the_rest_ignored() {
        let mut text = String::new();
        text.push_str(&line(json!({"type": "summary", "summary": "We decided everything", "leafUuid": "x"})));
        text.push_str(&line(
            json!({"type": "user", "message": {"role": "user", "content": "We decided to use tabs."}}),
        ));
        text.push_str(&line(json!({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "we decided nothing", "signature": "s"},
            {"type": "text", "text": "Noted: tabs."},
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "echo we decided"}},
        ]}})));
        text.push_str(&line(json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "we decided (tool output)"},
            {"type": "text", "text": "And spaces in YAML."},
        ]}})));
        text.push_str(&line(
            json!({"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted"}),
        ));
        text.push_str(&line(json!({"type": "user", "isMeta": true, "message": {"role": "user", "content": "meta"}})));
        text.push_str(&line(json!({"type": "assistant", "isSidechain": true, "message": {"content": [{"type": "text", "text": "side"}]}})));
        text.push_str(&line(json!({"type": "user", "isCompactSummary": true, "message": {"content": "summary text"}})));
        text.push_str(&line(json!({"type": "user", "message": {"content": "<command-name>/compact</command-name>"}})));
        text.push_str(&line(json!({"type": "user", "message": {"content": [{"type": "text", "text": "[Request interrupted by user]"}]}})));
        let transcript = parse_transcript(text.as_bytes());
        assert_eq!(
            transcript.messages,
            [
                ConversationMessage::user("We decided to use tabs."),
                ConversationMessage::assistant("Noted: tabs."),
                ConversationMessage::user("And spaces in YAML."),
            ]
        );
        assert_eq!((transcript.lines, transcript.malformed), (10, 0));
    }

    #[test]
    fn malformed_lines_are_counted_and_skipped() {
        let mut bytes = b"{not json\n\n[]\n".to_vec();
        bytes.extend_from_slice(b"{\"type\":\"user\",\"message\":{\"content\":\"caf\xff\"}}\n");
        bytes.extend_from_slice(line(json!({"type": "user"})).as_bytes());
        bytes.extend_from_slice(line(json!({"type": "assistant", "message": {"content": 42}})).as_bytes());
        bytes.extend_from_slice(line(json!({"type": "user", "isMeta": "yes", "message": {"content": "x"}})).as_bytes());
        bytes.extend_from_slice(line(json!({"type": "user", "message": {"content": "kept"}})).as_bytes());
        let transcript = parse_transcript(&bytes);
        assert_eq!(transcript.messages, [ConversationMessage::user("kept")]);
        assert_eq!((transcript.lines, transcript.malformed), (7, 6));
    }

    #[test]
    fn a_long_transcript_is_read_from_a_whole_line_of_its_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let first = line(json!({"type": "user", "message": {"content": "the first message"}}));
        let filler = line(json!({"type": "progress", "data": "x".repeat(1 << 20)}));
        let last = line(json!({"type": "user", "message": {"content": "the last message"}}));
        let mut text = first.clone();
        while text.len() < (MAX_TRANSCRIPT_BYTES as usize) + (1 << 20) {
            text.push_str(&filler);
        }
        text.push_str(&last);
        std::fs::write(&path, &text).unwrap();
        let transcript = read_transcript(&path).unwrap();
        assert_eq!(transcript.messages, [ConversationMessage::user("the last message")]);
        assert_eq!(transcript.malformed, 0, "the cut line is not parsed");
        let read: usize = text.len() - usize::try_from(transcript.skipped_bytes).unwrap();
        assert!(read as u64 <= MAX_TRANSCRIPT_BYTES && read > 0, "{read}");
        assert!(text[text.len() - read..].starts_with('{'));
    }

    #[test]
    fn a_missing_file_or_a_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_transcript(&dir.path().join("missing.jsonl")).is_err());
        assert!(read_transcript(dir.path()).is_err());
    }
}
