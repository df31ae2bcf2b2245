//! The cue phrases of the offline analyser: the words that make a sentence a decision, a
//! lesson, a convention or a preference, and the words that undo them.

use super::{CaptureKind, Speaker};

/// A phrase that marks a sentence, or two that must occur in order ("chose" … "over").
/// Phrases are lowercase and match whole words.
#[derive(Debug, Clone, Copy)]
struct Cue {
    first: &'static str,
    then: Option<&'static str>,
    /// What [`CaptureCandidate::cue`](super::CaptureCandidate::cue) says.
    label: &'static str,
    /// Only the user states it (a preference, "I decided").
    user_only: bool,
}

const fn phrase(text: &'static str) -> Cue {
    Cue { first: text, then: None, label: text, user_only: false }
}

const fn user(text: &'static str) -> Cue {
    Cue { first: text, then: None, label: text, user_only: true }
}

const fn pair(first: &'static str, then: &'static str, label: &'static str) -> Cue {
    Cue { first, then: Some(then), label, user_only: false }
}

const PREFERENCE: &[Cue] = &[
    user("i prefer"),
    user("i'd prefer"),
    user("i would prefer"),
    user("i'd rather"),
    user("i would rather"),
    user("my preference is"),
    user("please always"),
    user("please never"),
    user("please don't ever"),
    user("please do not ever"),
    user("don't ever"),
    user("do not ever"),
    user("never ever"),
    user("from now on"),
    user("i want you to always"),
    user("i want you to never"),
    user("i like it when"),
    user("i don't like it when"),
];

const DECISION: &[Cue] = &[
    phrase("we decided"),
    phrase("we've decided"),
    phrase("we have decided"),
    phrase("it was decided"),
    phrase("the decision is"),
    phrase("the decision was"),
    phrase("decision:"),
    user("i decided"),
    user("i've decided"),
    user("i have decided"),
    phrase("let's go with"),
    phrase("let us go with"),
    phrase("we'll go with"),
    phrase("we will go with"),
    phrase("we're going with"),
    phrase("we are going with"),
    phrase("we settled on"),
    phrase("we opted for"),
    phrase("we chose"),
    phrase("we agreed to"),
    phrase("we agreed on"),
    pair("chose", "over", "chose … over"),
    pair("choose", "over", "choose … over"),
    pair("picked", "over", "picked … over"),
    pair("we'll use", "instead of", "we'll use … instead of"),
    pair("we will use", "instead of", "we will use … instead of"),
    pair("let's use", "instead of", "let's use … instead of"),
    pair("we use", "instead of", "we use … instead of"),
    pair("we're using", "instead of", "we're using … instead of"),
    pair("we switched to", "from", "we switched to … from"),
];

const LEARNING: &[Cue] = &[
    phrase("lesson learned"),
    phrase("lessons learned"),
    phrase("the lesson is"),
    phrase("the lesson here is"),
    phrase("we learned that"),
    phrase("i learned that"),
    phrase("today i learned"),
    phrase("til:"),
    phrase("note to self"),
    phrase("turns out"),
    phrase("it turned out"),
    phrase("the root cause"),
    phrase("root cause:"),
    phrase("the fix was"),
    phrase("the fix is"),
    phrase("the solution was"),
    phrase("the problem was"),
    phrase("the issue was"),
    phrase("the bug was"),
    phrase("gotcha:"),
    phrase("keep in mind that"),
];

const PATTERN: &[Cue] = &[
    phrase("the convention is"),
    phrase("our convention is"),
    phrase("by convention"),
    phrase("the pattern is"),
    phrase("the pattern here is"),
    phrase("our pattern is"),
    phrase("the rule is"),
    phrase("as a rule"),
    phrase("house style"),
    user("we always"),
    user("we never"),
    pair("always", "in this repo", "always … in this repo"),
    pair("never", "in this repo", "never … in this repo"),
    pair("always", "in this codebase", "always … in this codebase"),
    pair("never", "in this codebase", "never … in this codebase"),
    pair("always", "in this project", "always … in this project"),
    pair("never", "in this project", "never … in this project"),
    pair("in this repo", "always", "in this repo … always"),
    pair("in this repo", "never", "in this repo … never"),
    pair("in this repo", "we use", "in this repo … we use"),
    pair("in this codebase", "we use", "in this codebase … we use"),
];

/// Phrases that undo a kind's cues: "we haven't decided", "that was not the root cause".
const NEGATIONS: [(CaptureKind, &[&str]); 2] = [
    (
        CaptureKind::Decision,
        &[
            "haven't decided",
            "have not decided",
            "hasn't decided",
            "has not decided",
            "not decided",
            "didn't decide",
            "did not decide",
            "yet to decide",
            "undecided",
            "not yet decided",
        ],
    ),
    (
        CaptureKind::Learning,
        &["not the root cause", "wasn't the root cause", "isn't the root cause", "not the fix", "wasn't the fix"],
    ),
];

/// The cue tables in the order of [`CaptureKind::ALL`].
const TABLES: [(CaptureKind, &[Cue]); 4] = [
    (CaptureKind::Preference, PREFERENCE),
    (CaptureKind::Decision, DECISION),
    (CaptureKind::Learning, LEARNING),
    (CaptureKind::Pattern, PATTERN),
];

/// The first kind (in [`CaptureKind::ALL`] order) with a cue in `lower` (the sentence in
/// lowercase, with typographic apostrophes made straight) that `speaker` may state and no
/// negation undoes, and the cue's label.
pub(super) fn classify(lower: &str, speaker: Speaker) -> Option<(CaptureKind, &'static str)> {
    for (kind, cues) in TABLES {
        let negated = || {
            NEGATIONS.iter().filter(|(k, _)| *k == kind).flat_map(|(_, words)| words.iter()).any(|w| lower.contains(w))
        };
        for cue in cues {
            if cue.user_only && speaker != Speaker::User {
                continue;
            }
            if matches(lower, cue) && !negated() {
                return Some((kind, cue.label));
            }
        }
    }
    None
}

fn matches(lower: &str, cue: &Cue) -> bool {
    let Some(end) = find_words(lower, cue.first, 0) else {
        return false;
    };
    match cue.then {
        None => true,
        Some(then) => find_words(lower, then, end).is_some(),
    }
}

/// The end of the first occurrence of `phrase` at or after byte `from` that starts and
/// ends at word boundaries (not next to a letter or digit).
fn find_words(text: &str, phrase: &str, from: usize) -> Option<usize> {
    let tail = text.get(from..)?;
    for (at, _) in tail.match_indices(phrase) {
        let start = from + at;
        let end = start + phrase.len();
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
        let starts_word = !phrase.starts_with(char::is_alphanumeric) || !word(before);
        let ends_word = !phrase.ends_with(char::is_alphanumeric) || !word(after);
        if starts_word && ends_word {
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phrases_match_whole_words_only() {
        assert_eq!(find_words("we decided to", "we decided", 0), Some(10));
        assert_eq!(find_words("owe decided", "we decided", 0), None);
        assert_eq!(find_words("we decidedly not", "we decided", 0), None);
        assert_eq!(find_words("sum: til: x", "til:", 0), Some(9));
        assert_eq!(find_words("until: x", "til:", 0), None);
        assert_eq!(find_words("a over b over", "over", 3), Some(13));
    }

    #[test]
    fn every_cue_is_lowercase_and_labelled() {
        for (_, cues) in TABLES {
            for cue in cues {
                assert_eq!(cue.first, cue.first.to_lowercase(), "{}", cue.label);
                assert!(cue.then.is_none_or(|t| t == t.to_lowercase()), "{}", cue.label);
                assert!(cue.label.starts_with(cue.first), "{}", cue.label);
            }
        }
    }
}
