//! Candidates from the judge's LLM: seed 002's fact extraction on the last turns of the
//! conversation, each fact category mapped to a namespace.

use std::collections::HashSet;
use std::sync::Arc;

use memdedup::crates::core::{
    ConversationMessage, DEFAULT_CONFIDENCE_THRESHOLD, ExtractedFact, FactCategory, Speaker, normalize_content,
};
use memdedup::crates::llm::{self, ChatModel, ConversationTurn, TokenUsage, extract_facts};

use super::Candidate;
use crate::output::plural;

/// The most turns sent to the LLM: the last ones of the conversation, one request each,
/// all in flight at once.
pub(crate) const LLM_MAX_TURNS: usize = 6;
/// The most characters of each side of a turn sent (the start of it).
pub(crate) const LLM_MAX_TURN_CHARS: usize = 8_000;

/// What the LLM found.
#[derive(Debug, Default)]
pub(crate) struct LlmCandidates {
    /// At most the cap, the most confident (of equals the latest), in conversation order,
    /// no two the same after normalisation.
    pub candidates: Vec<Candidate>,
    /// Facts over the cap (the least confident), in conversation order.
    pub dropped: Vec<Candidate>,
    /// Requests sent.
    pub calls: usize,
    /// Facts of the replies that were invalid (an unknown category…), skipped.
    pub skipped_invalid: usize,
    /// What they cost.
    pub usage: TokenUsage,
}

/// The namespace of a fact category: preferences and behaviour are the user's
/// preferences and patterns; corrections and knowledge are learnings; goals are
/// decisions about the work; the user's situation is context.
pub(crate) fn namespace(category: FactCategory) -> &'static str {
    match category {
        FactCategory::Preference => "preferences",
        FactCategory::Behavior => "patterns",
        FactCategory::Correction | FactCategory::Knowledge => "learnings",
        FactCategory::Goal => "decisions",
        FactCategory::Context => "context",
    }
}

/// The last [`LLM_MAX_TURNS`] turns of the messages: a turn is the user's messages up to
/// the assistant's first reply, then the assistant's up to the next user message, each
/// side joined with blank lines and cut to [`LLM_MAX_TURN_CHARS`].
pub(crate) fn last_turns(messages: &[ConversationMessage]) -> Vec<ConversationTurn> {
    let mut turns: Vec<(Vec<&str>, Vec<&str>)> = Vec::new();
    for message in messages {
        let starts_turn = match turns.last() {
            None => true,
            Some((_, assistant)) => message.speaker == Speaker::User && !assistant.is_empty(),
        };
        if starts_turn {
            turns.push((Vec::new(), Vec::new()));
        }
        if let Some((user, assistant)) = turns.last_mut() {
            match message.speaker {
                Speaker::User => user.push(&message.text),
                Speaker::Assistant => assistant.push(&message.text),
            }
        }
    }
    let skip = turns.len().saturating_sub(LLM_MAX_TURNS);
    turns
        .into_iter()
        .skip(skip)
        .map(|(user, assistant)| ConversationTurn { user: bounded(&user), assistant: bounded(&assistant) })
        .collect()
}

fn bounded(parts: &[&str]) -> String {
    let joined = parts.join("\n\n");
    match joined.char_indices().nth(LLM_MAX_TURN_CHARS) {
        Some((cut, _)) => joined[..cut].to_owned(),
        None => joined,
    }
}

/// Asks `model` for the facts of every turn at once. Any failed request fails the whole
/// extraction (the caller falls back to the offline analyser).
pub(crate) async fn extract(
    model: Arc<dyn ChatModel>,
    turns: Vec<ConversationTurn>,
    max_candidates: usize,
) -> llm::Result<LlmCandidates> {
    let mut tasks = tokio::task::JoinSet::new();
    let calls = turns.iter().filter(|t| !t.user.trim().is_empty() || !t.assistant.trim().is_empty()).count();
    for (index, turn) in turns.into_iter().enumerate() {
        let model = model.clone();
        tasks.spawn(async move { (index, extract_facts(model.as_ref(), &turn, DEFAULT_CONFIDENCE_THRESHOLD).await) });
    }
    let mut per_turn = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (index, extraction) =
            joined.map_err(|e| llm::Error::InvalidRequest(format!("the extraction task failed: {e}")))?;
        per_turn.push((index, extraction?));
    }
    per_turn.sort_by_key(|(index, _)| *index);
    let mut usage = TokenUsage::default();
    let mut all = Vec::new();
    let mut skipped_invalid = 0;
    for (_, extraction) in per_turn {
        skipped_invalid += extraction.skipped_invalid.len();
        usage.input_tokens = usage.input_tokens.saturating_add(extraction.usage.input_tokens);
        usage.output_tokens = usage.output_tokens.saturating_add(extraction.usage.output_tokens);
        all.extend(extraction.kept);
    }
    // The latest statement of each fact, in conversation order.
    let mut seen = HashSet::new();
    let mut facts: Vec<(usize, ExtractedFact)> =
        all.into_iter().rev().filter(|fact| seen.insert(normalize_content(&fact.content))).enumerate().collect();
    let mut dropped = Vec::new();
    if facts.len() > max_candidates {
        // The most confident first; of equals the later (the lower index, read backwards).
        facts.sort_by(|(i, a), (j, b)| b.confidence.total_cmp(&a.confidence).then(i.cmp(j)));
        dropped = facts.split_off(max_candidates);
    }
    let candidates = |mut facts: Vec<(usize, ExtractedFact)>| -> Vec<Candidate> {
        facts.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        facts
            .into_iter()
            .map(|(_, fact)| Candidate {
                namespace: namespace(fact.category),
                kind: fact.category.as_str(),
                why: format!("llm: {} {:.2}", fact.category, fact.confidence),
                content: fact.content,
            })
            .collect()
    };
    Ok(LlmCandidates { candidates: candidates(facts), dropped: candidates(dropped), calls, skipped_invalid, usage })
}

/// What failed, in a few words, without the model's reply or the conversation.
pub(crate) fn failure_summary(error: &llm::Error) -> String {
    match error {
        llm::Error::Unavailable { attempts, .. } => {
            format!("the LLM was unavailable after {}", plural(*attempts as usize, "attempt"))
        }
        llm::Error::Rejected { status, .. } => format!("the LLM API rejected the request (HTTP {status})"),
        llm::Error::Truncated { .. } => "the LLM's reply was cut off at its token limit".to_owned(),
        llm::Error::Malformed { .. } | llm::Error::Facts(_) => "the LLM's reply was not the expected JSON".to_owned(),
        llm::Error::Config(_) => "the LLM client is misconfigured".to_owned(),
        _ => "the LLM request failed".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_pair_user_messages_with_the_replies_after_them() {
        let messages = [
            ConversationMessage::assistant("Hello."),
            ConversationMessage::user("a"),
            ConversationMessage::user("b"),
            ConversationMessage::assistant("c"),
            ConversationMessage::assistant("d"),
            ConversationMessage::user("e"),
        ];
        let turns = last_turns(&messages);
        let pairs: Vec<(&str, &str)> = turns.iter().map(|t| (t.user.as_str(), t.assistant.as_str())).collect();
        assert_eq!(pairs, [("", "Hello."), ("a\n\nb", "c\n\nd"), ("e", "")]);
    }

    #[test]
    fn only_the_last_turns_are_sent_each_side_bounded() {
        let mut messages = Vec::new();
        for i in 0..10 {
            messages.push(ConversationMessage::user(format!("u{i} {}", "é".repeat(LLM_MAX_TURN_CHARS))));
            messages.push(ConversationMessage::assistant(format!("a{i}")));
        }
        let turns = last_turns(&messages);
        assert_eq!(turns.len(), LLM_MAX_TURNS);
        assert!(turns[0].user.starts_with("u4 "));
        assert_eq!(turns[0].user.chars().count(), LLM_MAX_TURN_CHARS);
        assert_eq!(turns[5].assistant, "a9");
    }

    #[test]
    fn every_category_has_a_namespace() {
        let namespaces: Vec<&str> = FactCategory::ALL.iter().map(|c| namespace(*c)).collect();
        assert_eq!(namespaces, ["preferences", "learnings", "context", "patterns", "decisions", "learnings"]);
    }
}
