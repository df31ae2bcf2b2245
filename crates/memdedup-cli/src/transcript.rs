//! Conversation input of `facts extract`: a JSON turn, or a plain-text transcript cut
//! into turns.

use anyhow::{Result, bail};
use memdedup::crates::llm::ConversationTurn;
use serde::Deserialize;

use crate::input::without_bom;

/// The JSON form of one turn; both members are required, no others are allowed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnJson {
    user: String,
    assistant: String,
}

/// Parses `{"user": "…", "assistant": "…"}` read from `name`.
pub(crate) fn parse_turn_json(text: &str, name: &str) -> Result<ConversationTurn> {
    match serde_json::from_str::<TurnJson>(without_bom(text)) {
        Ok(TurnJson { user, assistant }) => Ok(ConversationTurn { user, assistant }),
        Err(e) => bail!("{name} is not a conversation turn {{\"user\": \"…\", \"assistant\": \"…\"}}: {e}"),
    }
}

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Speaker {
    User,
    Assistant,
}

/// The speaker a line names and the rest of the line, if it starts with `user:` or
/// `assistant:` (any case, leading spaces allowed).
fn speaker_line(line: &str) -> Option<(Speaker, &str)> {
    let trimmed = line.trim_start();
    let (label, rest) = trimmed.split_once(':')?;
    let speaker = if label.eq_ignore_ascii_case("user") {
        Speaker::User
    } else if label.eq_ignore_ascii_case("assistant") {
        Speaker::Assistant
    } else {
        return None;
    };
    Some((speaker, rest))
}

/// Cuts a plain-text transcript read from `name` into turns.
///
/// A line starting with `user:` or `assistant:` (any case, after optional spaces) starts a
/// message of that speaker with the rest of the line; every other line continues the
/// message before it (blank lines before the first message are skipped; other text
/// there is an error). A turn is the user's messages up to the assistant's first reply,
/// then the assistant's messages up to the next user message: consecutive messages of
/// one speaker are joined with a blank line. A transcript that opens with the assistant
/// gives a first turn without user text. Messages are trimmed.
pub(crate) fn parse_transcript(text: &str, name: &str) -> Result<Vec<ConversationTurn>> {
    let mut messages: Vec<(Speaker, String)> = Vec::new();
    for (index, line) in without_bom(text).lines().enumerate() {
        if let Some((speaker, rest)) = speaker_line(line) {
            messages.push((speaker, rest.to_owned()));
        } else if let Some((_, message)) = messages.last_mut() {
            message.push('\n');
            message.push_str(line);
        } else if !line.trim().is_empty() {
            bail!(
                "{name}: line {} comes before the first `user:` or `assistant:` line; every message must start \
                 with one of them",
                index + 1
            );
        }
    }
    if messages.is_empty() {
        bail!("{name} has no `user:` or `assistant:` line");
    }
    let mut turns = Vec::new();
    let (mut user, mut assistant) = (Vec::<String>::new(), Vec::<String>::new());
    for (speaker, message) in messages {
        let message = message.trim().to_owned();
        match speaker {
            Speaker::User => {
                if !assistant.is_empty() {
                    turns.push(turn(&mut user, &mut assistant));
                }
                user.push(message);
            }
            Speaker::Assistant => assistant.push(message),
        }
    }
    turns.push(turn(&mut user, &mut assistant));
    Ok(turns)
}

/// The turn of the messages gathered so far, which are taken.
fn turn(user: &mut Vec<String>, assistant: &mut Vec<String>) -> ConversationTurn {
    let join = |parts: &mut Vec<String>| {
        let joined = parts.iter().filter(|p| !p.is_empty()).cloned().collect::<Vec<_>>().join("\n\n");
        parts.clear();
        joined
    };
    ConversationTurn { user: join(user), assistant: join(assistant) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(user: &str, assistant: &str) -> ConversationTurn {
        ConversationTurn { user: user.to_owned(), assistant: assistant.to_owned() }
    }

    #[test]
    fn each_user_message_and_the_reply_after_it_is_a_turn() {
        let text = "\u{feff}\nUser: I use Neovim.\n  it has to be fast\nassistant: Noted.\n\nuser: Tabs, please.\nUSER: Always.\nAssistant: Tabs it is.\nassistant:   Anything else?  \n";
        let turns = parse_transcript(text, "t.txt").unwrap();
        assert_eq!(
            turns,
            [
                turn("I use Neovim.\n  it has to be fast", "Noted."),
                turn("Tabs, please.\n\nAlways.", "Tabs it is.\n\nAnything else?"),
            ]
        );
    }

    #[test]
    fn an_opening_assistant_message_is_a_turn_without_user_text() {
        let turns = parse_transcript("assistant: Hello!\nuser: hi\n", "t").unwrap();
        assert_eq!(turns, [turn("", "Hello!"), turn("hi", "")]);
    }

    #[test]
    fn only_user_and_assistant_labels_start_messages() {
        let turns = parse_transcript("user: note: this is one line\nsystem: not a label\n", "t").unwrap();
        assert_eq!(turns, [turn("note: this is one line\nsystem: not a label", "")]);
    }

    #[test]
    fn text_before_the_first_label_and_unlabelled_transcripts_are_errors() {
        let error = parse_transcript("\nhello\nuser: hi\n", "t.txt").unwrap_err().to_string();
        assert!(error.contains("t.txt: line 2 comes before the first `user:`"), "{error}");
        let error = parse_transcript("  \n\n", "t.txt").unwrap_err().to_string();
        assert_eq!(error, "t.txt has no `user:` or `assistant:` line");
    }

    #[test]
    fn json_turns_need_both_members_and_no_others() {
        assert_eq!(parse_turn_json(r#"{"user": "a", "assistant": "b"}"#, "x").unwrap(), turn("a", "b"));
        for bad in [r#"{"user": "a"}"#, r#"{"user": "a", "assistant": "b", "system": "c"}"#, "[]", "user: a"] {
            let error = parse_turn_json(bad, "turn.json").unwrap_err().to_string();
            assert!(error.starts_with("turn.json is not a conversation turn"), "{bad}: {error}");
        }
    }
}
