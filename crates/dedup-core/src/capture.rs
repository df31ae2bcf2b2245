//! Seed 004's `analyze_content` without a model: the decisions, lessons, conventions and
//! preferences a conversation states, each as one self-contained sentence with the
//! namespace it belongs in.
//!
//! [`analyze_messages`] reads the human-readable text of a conversation's messages (the
//! caller has already dropped tool calls, tool results, thinking and summaries), cuts it
//! into sentences outside code, and keeps the sentences in which a cue phrase of one
//! [`CaptureKind`] occurs ("we decided …", "turns out …", "the convention is …", "I
//! prefer …"; the tables are in `cues`). Questions, hypotheticals ("if we decided …"),
//! lead-ins ending in a colon, and sentences that are too short or too long to stand on
//! their own are not candidates. Everything here is deterministic: the same messages
//! always give the same candidates, which is what makes capturing a transcript twice
//! store nothing new the second time.

mod cues;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::normalize_content;

/// The most candidates [`analyze_messages`] returns by default: a pre-compact pass of a
/// long session holds a handful, and seed 004 expects at most 10–20.
pub const MAX_CAPTURE_CANDIDATES: usize = 20;
/// The fewest characters a candidate sentence has by default.
pub const MIN_CANDIDATE_CHARS: usize = 24;
/// The most characters a candidate sentence has by default: longer sentences are rarely
/// one statement, and are skipped rather than cut.
pub const MAX_CANDIDATE_CHARS: usize = 300;
/// The fewest words a candidate sentence has.
const MIN_CANDIDATE_WORDS: usize = 4;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speaker {
    /// The human.
    User,
    /// The agent.
    Assistant,
}

/// The human-readable text of one message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationMessage {
    /// Who wrote it.
    pub speaker: Speaker,
    /// Its text (Markdown as the agent writes it; code blocks are skipped).
    pub text: String,
}

impl ConversationMessage {
    /// A message of the user.
    pub fn user(text: impl Into<String>) -> ConversationMessage {
        ConversationMessage { speaker: Speaker::User, text: text.into() }
    }

    /// A message of the assistant.
    pub fn assistant(text: impl Into<String>) -> ConversationMessage {
        ConversationMessage { speaker: Speaker::Assistant, text: text.into() }
    }
}

/// What a candidate states, which decides its namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaptureKind {
    /// A choice made ("we decided to …", "let's go with …", "chose X over Y").
    Decision,
    /// Something found out ("turns out …", "the root cause was …", "lesson learned …").
    Learning,
    /// A convention of the project ("the convention is …", "never … in this repo").
    Pattern,
    /// How the user wants things done ("I prefer …", "please always …"); only the user
    /// states these.
    Preference,
}

impl CaptureKind {
    /// Every kind, in the order cues are tried: a sentence matching several is the first.
    pub const ALL: [CaptureKind; 4] =
        [CaptureKind::Preference, CaptureKind::Decision, CaptureKind::Learning, CaptureKind::Pattern];

    /// The namespace memories of this kind are stored in: `decisions`, `learnings`,
    /// `patterns` or `preferences`.
    pub fn namespace(self) -> &'static str {
        match self {
            CaptureKind::Decision => "decisions",
            CaptureKind::Learning => "learnings",
            CaptureKind::Pattern => "patterns",
            CaptureKind::Preference => "preferences",
        }
    }

    /// The memory kind stored with it: `decision`, `lesson`, `pattern` or `preference`.
    pub fn memory_kind(self) -> &'static str {
        match self {
            CaptureKind::Decision => "decision",
            CaptureKind::Learning => "lesson",
            CaptureKind::Pattern => "pattern",
            CaptureKind::Preference => "preference",
        }
    }
}

impl fmt::Display for CaptureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.memory_kind())
    }
}

/// One sentence worth capturing.
///
/// **Invariant:** `content` is one trimmed sentence with single spaces, without Markdown
/// list, quote, heading or emphasis markers, starting with a capital letter when it starts
/// with an ASCII letter and ending in `.` or `!`; its length (before the final `.` was
/// added, if one was) is within the [`CaptureLimits`] it was found with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureCandidate {
    /// The sentence.
    pub content: String,
    /// What it states.
    pub kind: CaptureKind,
    /// The cue phrase that made it a candidate (why it was captured).
    pub cue: &'static str,
    /// The 0-based index of the message it came from.
    pub message: usize,
}

impl CaptureCandidate {
    /// The namespace of its kind.
    pub fn namespace(&self) -> &'static str {
        self.kind.namespace()
    }
}

/// The bounds [`analyze_messages_with`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureLimits {
    /// The most candidates returned: the most memorable of the conversation.
    pub max_candidates: usize,
    /// The fewest characters of a candidate sentence.
    pub min_chars: usize,
    /// The most characters of a candidate sentence.
    pub max_chars: usize,
}

impl Default for CaptureLimits {
    fn default() -> CaptureLimits {
        CaptureLimits {
            max_candidates: MAX_CAPTURE_CANDIDATES,
            min_chars: MIN_CANDIDATE_CHARS,
            max_chars: MAX_CANDIDATE_CHARS,
        }
    }
}

/// The capture candidates of a conversation with the default [`CaptureLimits`].
pub fn analyze_messages(messages: &[ConversationMessage]) -> Vec<CaptureCandidate> {
    analyze_messages_with(messages, &CaptureLimits::default())
}

/// The capture candidates of a conversation ([`analyze_conversation`] without the count
/// of what was left out).
pub fn analyze_messages_with(messages: &[ConversationMessage], limits: &CaptureLimits) -> Vec<CaptureCandidate> {
    analyze_conversation(messages, limits).candidates
}

/// What the analysis of a conversation found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CaptureAnalysis {
    /// The candidates kept, in conversation order.
    pub candidates: Vec<CaptureCandidate>,
    /// The candidates over `max_candidates`: the least memorable, in conversation order.
    pub dropped: Vec<CaptureCandidate>,
}

/// The capture candidates of a conversation, and how many were left out.
///
/// **Invariant:** the candidates are in conversation order (by message, then by position
/// in it); no two have the same [`normalize_content`] form (of repeated statements the
/// latest is kept); there are at most `limits.max_candidates`. When the conversation
/// holds more, the most memorable are kept ([`memorability`]: decisions and preferences
/// before conventions and lessons, the user's statements, concrete details and statements
/// made more than once first; the later of equals), and `dropped` holds the rest. Every
/// message is read, so an early decision is weighed like a late one.
pub fn analyze_conversation(messages: &[ConversationMessage], limits: &CaptureLimits) -> CaptureAnalysis {
    if limits.max_candidates == 0 {
        return CaptureAnalysis::default();
    }
    // The latest occurrence of each statement: its place in the conversation, who said
    // it, how often it was said.
    let mut found: Vec<(usize, CaptureCandidate, Speaker, u32)> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut place = 0;
    for (index, message) in messages.iter().enumerate() {
        for candidate in message_candidates(message, index, limits) {
            place += 1;
            let key = normalize_content(&candidate.content);
            match at.get(&key) {
                Some(&slot) => {
                    let times = found[slot].3.saturating_add(1);
                    found[slot] = (place, candidate, message.speaker, times);
                }
                None => {
                    at.insert(key, found.len());
                    found.push((place, candidate, message.speaker, 1));
                }
            }
        }
    }
    let mut dropped = Vec::new();
    if found.len() > limits.max_candidates {
        // Most memorable first; of equals the later (it is the current word).
        found.sort_by_key(|(place, candidate, speaker, times)| {
            (std::cmp::Reverse(memorability(candidate, *speaker, *times)), std::cmp::Reverse(*place))
        });
        dropped = found.split_off(limits.max_candidates);
        dropped.sort_by_key(|(place, ..)| *place);
    }
    found.sort_by_key(|(place, ..)| *place);
    let candidates = |found: Vec<(usize, CaptureCandidate, Speaker, u32)>| found.into_iter().map(|f| f.1).collect();
    CaptureAnalysis { candidates: candidates(found), dropped: candidates(dropped) }
}

/// How memorable a candidate is, for choosing among more than fit: 3 for a decision or
/// preference, 2 for a convention or lesson; +1 when the user said it; +1 when it holds a
/// concrete detail (a code span, number, path or flag); +1 when it was said more than once.
pub fn memorability(candidate: &CaptureCandidate, speaker: Speaker, times_stated: u32) -> u32 {
    let kind = match candidate.kind {
        CaptureKind::Decision | CaptureKind::Preference => 3,
        CaptureKind::Pattern | CaptureKind::Learning => 2,
    };
    let user = u32::from(speaker == Speaker::User);
    let concrete = u32::from(!crate::specifics(&candidate.content).is_empty());
    let repeated = u32::from(times_stated > 1);
    kind + user + concrete + repeated
}

/// The candidates of one message, in order.
fn message_candidates(message: &ConversationMessage, index: usize, limits: &CaptureLimits) -> Vec<CaptureCandidate> {
    let mut out = Vec::new();
    for block in blocks(&message.text) {
        for sentence in sentences(&block) {
            if let Some(candidate) = candidate(sentence, message.speaker, index, limits) {
                out.push(candidate);
            }
        }
    }
    out
}

/// The prose blocks of Markdown text: paragraphs (soft-wrapped lines joined by spaces),
/// quotes, and single list items and headings, with their markers removed. Fenced code
/// blocks, indented code, tables and lines of markup (`<tag>`) are left out.
fn blocks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut fence: Option<&str> = None;
    let mut in_quote = false;
    let flush = |current: &mut String, out: &mut Vec<String>| {
        if !current.trim().is_empty() {
            out.push(std::mem::take(current));
        }
        current.clear();
    };
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(marker) = fence {
            if trimmed.starts_with(marker) {
                fence = None;
            }
            continue;
        }
        if let Some(marker) = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m)) {
            flush(&mut current, &mut out);
            fence = Some(marker);
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('|') || trimmed.starts_with('<') || is_rule(trimmed) {
            flush(&mut current, &mut out);
            in_quote = false;
            continue;
        }
        let line_marks = strip_markers(trimmed);
        let indented = line.starts_with('\t') || line.starts_with("    ");
        if indented && !line_marks.item && !line_marks.quote {
            // Indented code (a nested list item, which has a marker, is prose).
            flush(&mut current, &mut out);
            in_quote = false;
            continue;
        }
        if line_marks.item || line_marks.quote != in_quote {
            flush(&mut current, &mut out);
        } else if !current.is_empty() {
            current.push(' ');
        }
        in_quote = line_marks.quote;
        current.push_str(line_marks.body);
    }
    flush(&mut current, &mut out);
    out
}

/// `---`, `***`, `___` and longer (spaces allowed between).
fn is_rule(line: &str) -> bool {
    let Some(mark) = line.chars().next().filter(|c| matches!(c, '-' | '*' | '_')) else {
        return false;
    };
    line.chars().all(|c| c == mark || c == ' ') && line.chars().filter(|&c| c == mark).count() >= 3
}

/// A line of Markdown without its leading markers.
struct Marked<'a> {
    body: &'a str,
    /// It had a quote marker (`>`): consecutive quoted lines make one block.
    quote: bool,
    /// It had a heading, bullet, number or checkbox marker: it starts a block.
    item: bool,
}

/// The line without leading quote, heading, bullet, number and checkbox markers.
fn strip_markers(line: &str) -> Marked<'_> {
    let mut rest = line;
    let (mut quote, mut item) = (false, false);
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix('>') {
            rest = r;
            quote = true;
        } else if let Some(r) = heading(rest)
            .or_else(|| {
                ["- ", "* ", "+ ", "\u{2022} ", "[ ] ", "[x] ", "[X] "].iter().find_map(|m| rest.strip_prefix(m))
            })
            .or_else(|| numbered(rest))
        {
            rest = r;
            item = true;
        } else {
            break;
        }
    }
    Marked { body: rest.trim(), quote, item }
}

/// The rest of `## text` (hashes, then a space or nothing).
fn heading(line: &str) -> Option<&str> {
    let rest = line.trim_start_matches('#');
    (rest.len() < line.len() && (rest.is_empty() || rest.starts_with(' '))).then_some(rest)
}

/// The rest of `1. text` or `12) text`.
fn numbered(line: &str) -> Option<&str> {
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 3 {
        return None;
    }
    let rest = &line[digits..];
    rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") "))
}

/// Words whose final period does not end a sentence.
const ABBREVIATIONS: [&str; 9] = ["e.g", "i.e", "etc", "vs", "cf", "approx", "mr", "dr", "no"];

/// The sentences of a prose block: cut after `.`, `!` or `?` followed by a space (or the
/// end), outside inline code, and not after an abbreviation such as "e.g.".
fn sentences(block: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_code = false;
    let bytes = block.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'`' => in_code = !in_code,
            b'.' | b'!' | b'?' if !in_code => {
                let next = bytes.get(i + 1).copied();
                let at_end = next.is_none_or(|n| n == b' ');
                if !at_end || (b == b'.' && after_abbreviation(&block[start..i])) {
                    continue;
                }
                out.push(block[start..=i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let tail = block[start..].trim();
    if !tail.is_empty() {
        out.push(tail);
    }
    out
}

/// Whether `text` ends with an abbreviation (its final word, case aside).
fn after_abbreviation(text: &str) -> bool {
    let word = text.rsplit([' ', '(']).next().unwrap_or_default();
    ABBREVIATIONS.iter().any(|a| word.eq_ignore_ascii_case(a))
}

/// Sentence openers that make what follows hypothetical or a question.
const HYPOTHETICAL_OPENERS: [&str; 13] = [
    "if ",
    "should we",
    "shall we",
    "do we",
    "did we",
    "can we",
    "could we",
    "maybe",
    "perhaps",
    "what if",
    "whether",
    "unless",
    "in case",
];

/// Filler a sentence may open with, followed by `,`, `!`, `.` or `:`, removed from the
/// candidate ("OK, let's go with …", "Actually, the root cause …"); several in a row are
/// all removed.
const FILLERS: [&str; 33] = [
    "ok",
    "okay",
    "so",
    "also",
    "alright",
    "all right",
    "great",
    "right",
    "yes",
    "yeah",
    "sure",
    "perfect",
    "got it",
    "actually",
    "anyway",
    "anyways",
    "basically",
    "honestly",
    "well",
    "oh",
    "btw",
    "by the way",
    "for the record",
    "to be clear",
    "just to be clear",
    "to recap",
    "in short",
    "again",
    "as i said",
    "as mentioned",
    "as discussed",
    "one more thing",
    "fyi",
];

/// Words that open a conversational lead-in ending in a colon ("Just to restate for the
/// record: …", "Actually one more thing on the DB: …"); the lead-in is dropped when what
/// follows the colon is a candidate by itself.
const LEAD_IN_OPENERS: [&str; 16] = [
    "just ",
    "actually",
    "one more thing",
    "to restate",
    "restating",
    "for the record",
    "to recap",
    "recap",
    "to be clear",
    "to summari",
    "to sum up",
    "in summary",
    "quick note",
    "reminder",
    "again",
    "as i said",
];

/// The most words of a lead-in dropped before a colon.
const MAX_LEAD_IN_WORDS: usize = 10;

/// The candidate a sentence makes, if any.
fn candidate(sentence: &str, speaker: Speaker, message: usize, limits: &CaptureLimits) -> Option<CaptureCandidate> {
    let sentence = sentence.trim();
    if sentence.ends_with('?') || sentence.ends_with(':') {
        return None;
    }
    let cleaned = clean(sentence);
    if let Some(rest) = after_lead_in(&cleaned)
        && let Some(found) = classified(&rest, speaker, message, limits)
    {
        return Some(found);
    }
    classified(&cleaned, speaker, message, limits)
}

/// The candidate a cleaned sentence makes: the bounds, no hypothetical opener, a cue.
fn classified(cleaned: &str, speaker: Speaker, message: usize, limits: &CaptureLimits) -> Option<CaptureCandidate> {
    let chars = cleaned.chars().count();
    if chars < limits.min_chars || chars > limits.max_chars || cleaned.split(' ').count() < MIN_CANDIDATE_WORDS {
        return None;
    }
    let lower = cleaned.to_lowercase().replace('\u{2019}', "'");
    if HYPOTHETICAL_OPENERS.iter().any(|o| lower.starts_with(o)) {
        return None;
    }
    let (kind, cue) = cues::classify(&lower, speaker)?;
    Some(CaptureCandidate { content: finish(cleaned), kind, cue, message })
}

/// What follows a conversational lead-in and its colon, cleaned, if the sentence opens
/// with one.
fn after_lead_in(cleaned: &str) -> Option<String> {
    let (lead, rest) = cleaned.split_once(": ")?;
    let lower = lead.to_lowercase();
    let is_lead_in = LEAD_IN_OPENERS.iter().any(|o| lower.starts_with(o))
        && lead.split_whitespace().count() <= MAX_LEAD_IN_WORDS
        && !lead.contains('`');
    is_lead_in.then(|| clean(rest))
}

/// The sentence with emphasis markers removed, whitespace collapsed and leading filler
/// words dropped.
fn clean(sentence: &str) -> String {
    let without = sentence.replace("**", "").replace("__", "");
    let mut text = without.split_whitespace().collect::<Vec<_>>().join(" ");
    while let Some(rest) = without_filler(&text) {
        text = rest;
    }
    text
}

/// `text` without its opening filler word and the punctuation after it, if it has one.
fn without_filler(text: &str) -> Option<String> {
    FILLERS.iter().find_map(|filler| {
        let len = filler.len();
        (text.len() > len
            && text.is_char_boundary(len)
            && text[..len].eq_ignore_ascii_case(filler)
            && matches!(text.as_bytes()[len], b',' | b'!' | b'.' | b':'))
        .then(|| text[len + 1..].trim_start().to_owned())
    })
}

/// The sentence with a capital first letter and closing punctuation.
fn finish(sentence: &str) -> String {
    let mut out = String::with_capacity(sentence.len() + 1);
    let mut chars = sentence.chars();
    if let Some(first) = chars.next() {
        out.push(first.to_ascii_uppercase());
        out.push_str(chars.as_str());
    }
    if !out.ends_with(['.', '!']) {
        out.push('.');
    }
    out
}
