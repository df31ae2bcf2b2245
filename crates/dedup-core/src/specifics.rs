//! The concrete details of a text (code spans, numbers, paths, flags) and its sentences:
//! what seed 003 §5's specificity guard checks a canonical text against.

use std::collections::BTreeSet;

/// One concrete detail of a text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Specific {
    /// The inside of a backtick code span, e.g. `cargo test --all`.
    Code(String),
    /// A run of digits with inner `.`, `,` or `:`, e.g. `0.85`, `30`, `12:00`.
    Number(String),
    /// A file system path or file name, e.g. `src/db.py`, `~/.cache`, `Cargo.toml`.
    Path(String),
    /// A command-line flag, e.g. `--force`, `-rf`.
    Flag(String),
}

impl Specific {
    /// The detail as written.
    pub fn text(&self) -> &str {
        match self {
            Specific::Code(s) | Specific::Number(s) | Specific::Path(s) | Specific::Flag(s) => s,
        }
    }
}

/// The specifics of `text`. Numbers, paths and flags inside code spans belong to the span
/// and are not listed separately.
pub fn specifics(text: &str) -> BTreeSet<Specific> {
    let mut found = BTreeSet::new();
    let prose = split_code_spans(text, |code| {
        let code = code.trim();
        if !code.is_empty() {
            found.insert(Specific::Code(code.to_owned()));
        }
    });
    for token in prose.split_whitespace() {
        let token =
            token.trim_matches(|c: char| matches!(c, '"' | '\'' | '(' | ')' | '[' | ']' | ',' | ';' | '!' | '?'));
        let token = token.trim_end_matches([':', '.']);
        if token.is_empty() {
            continue;
        }
        if is_flag(token) {
            found.insert(Specific::Flag(token.to_owned()));
        } else if is_path(token) {
            found.insert(Specific::Path(token.to_owned()));
        } else {
            for number in numbers(token) {
                found.insert(Specific::Number(number.to_owned()));
            }
        }
    }
    found
}

/// The specifics of `originals` that `candidate` lacks, in order.
pub fn missing_specifics<'a>(candidate: &str, originals: impl IntoIterator<Item = &'a str>) -> Vec<Specific> {
    let kept = specifics(candidate);
    let mut missing = BTreeSet::new();
    for original in originals {
        missing.extend(specifics(original).into_iter().filter(|s| !kept.contains(s)));
    }
    missing.into_iter().collect()
}

/// How many sentences `text` has: ends of sentence (`.`, `!`, `?`, followed by space or
/// the end) outside code spans, not counting common abbreviations ("e.g.", "i.e.",
/// "etc.", "vs.") or dots inside numbers and paths. A non-blank text without one is one
/// sentence; a blank text has none.
pub fn sentence_count(text: &str) -> usize {
    if text.trim().is_empty() {
        return 0;
    }
    let prose = split_code_spans(text, |_| {});
    let words: Vec<&str> = prose.split_whitespace().collect();
    let mut count = 0;
    let mut open = false;
    for (i, word) in words.iter().enumerate() {
        open = true;
        let bare = word.trim_end_matches(['"', '\'', ')', ']']);
        if !bare.ends_with(['.', '!', '?']) || is_abbreviation(bare) {
            continue;
        }
        // "3." ending a list item is still an end; a dot inside "v1.2." ends too.
        let last = i + 1 == words.len();
        let next_starts_sentence =
            words.get(i + 1).is_some_and(|next| next.chars().next().is_some_and(|c| !c.is_lowercase()));
        if last || next_starts_sentence {
            count += 1;
            open = false;
        }
    }
    if open { count + 1 } else { count.max(1) }
}

/// `text` with each backtick code span replaced by a space, calling `on_code` with the
/// inside of each. An unclosed backtick is kept as prose.
fn split_code_spans(text: &str, mut on_code: impl FnMut(&str)) -> String {
    let mut prose = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let fence = &rest[start..start + ticks];
        let body_start = start + ticks;
        match rest[body_start..].find(fence) {
            Some(len) => {
                prose.push_str(&rest[..start]);
                prose.push(' ');
                on_code(&rest[body_start..body_start + len]);
                rest = &rest[body_start + len + ticks..];
            }
            None => {
                prose.push_str(&rest[..body_start]);
                rest = &rest[body_start..];
            }
        }
    }
    prose.push_str(rest);
    prose
}

fn is_abbreviation(word: &str) -> bool {
    const ABBREVIATIONS: [&str; 8] = ["e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "a.k.a.", "no."];
    let lower = word.trim_start_matches(['(', '"', '\'']).to_lowercase();
    ABBREVIATIONS.contains(&lower.as_str())
}

fn is_flag(token: &str) -> bool {
    let body = token.strip_prefix("--").or_else(|| token.strip_prefix('-'));
    body.is_some_and(|b| b.chars().next().is_some_and(|c| c.is_ascii_alphabetic()))
}

fn is_path(token: &str) -> bool {
    if token.starts_with('/') && token.len() > 1
        || token.starts_with("~/")
        || token.starts_with("./")
        || token.starts_with("../")
    {
        return true;
    }
    if token.contains("://") {
        return true;
    }
    let has_extension = token.rsplit_once('.').is_some_and(|(name, ext)| {
        name.chars().filter(char::is_ascii_alphanumeric).count() >= 2
            && !ext.is_empty()
            && ext.len() <= 6
            && ext.chars().all(|c| c.is_ascii_alphanumeric())
            && ext.chars().any(|c| c.is_ascii_alphabetic())
            && !name.ends_with('.')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
    });
    has_extension || (token.contains('/') && token.chars().any(|c| c == '.' || c == '_'))
}

/// The numbers in `token`: maximal runs of digits joined by single `.`, `,` or `:`.
fn numbers(token: &str) -> Vec<&str> {
    let bytes = token.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() {
            if bytes[i].is_ascii_digit() {
                i += 1;
            } else if matches!(bytes[i], b'.' | b',' | b':') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
                i += 2;
            } else {
                break;
            }
        }
        found.push(&token[start..i]);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(set: &BTreeSet<Specific>) -> Vec<&str> {
        set.iter().map(Specific::text).collect()
    }

    #[test]
    fn code_spans_numbers_paths_and_flags_are_found() {
        let found = specifics("Run `cargo test --all` before pushing; retry 3 times with --force in src/db.py.");
        assert!(found.contains(&Specific::Code("cargo test --all".into())), "{found:?}");
        assert!(found.contains(&Specific::Number("3".into())));
        assert!(found.contains(&Specific::Flag("--force".into())));
        assert!(found.contains(&Specific::Path("src/db.py".into())));
        assert_eq!(found.len(), 4, "{:?}", texts(&found));
    }

    #[test]
    fn details_inside_a_code_span_belong_to_it() {
        let found = specifics("Use `pytest -x tests/unit.py` here.");
        assert_eq!(texts(&found), ["pytest -x tests/unit.py"]);
    }

    #[test]
    fn prose_words_are_not_specifics() {
        for text in [
            "Do not add migration or compatibility code for dev-only/internal projects.",
            "Prefer composition over inheritance, e.g. in services.",
            "Rotate the API keys every month.",
        ] {
            assert!(specifics(text).is_empty(), "{text}: {:?}", specifics(text));
        }
    }

    #[test]
    fn file_names_urls_and_home_paths_are_paths() {
        let found = specifics("Edit Cargo.toml and ~/.cache/memdedup, see https://example.com/x.");
        let texts = texts(&found);
        assert!(texts.contains(&"Cargo.toml"), "{texts:?}");
        assert!(texts.contains(&"~/.cache/memdedup"), "{texts:?}");
        assert!(texts.contains(&"https://example.com/x"), "{texts:?}");
    }

    #[test]
    fn numbers_keep_their_inner_separators() {
        assert_eq!(numbers("0.85"), ["0.85"]);
        assert_eq!(numbers("12:00-13:30"), ["12:00", "13:30"]);
        assert_eq!(numbers("v1.2.3"), ["1.2.3"]);
        assert_eq!(numbers("1,000"), ["1,000"]);
        assert!(numbers("none").is_empty());
    }

    #[test]
    fn missing_specifics_names_what_a_rewrite_dropped() {
        let missing = missing_specifics("Run the tests first.", ["Run `cargo test` first.", "Tests first, 2 times."]);
        assert_eq!(missing, [Specific::Code("cargo test".into()), Specific::Number("2".into())]);
        assert!(missing_specifics("Run `cargo test` twice (2 runs).", ["Run `cargo test` 2 times."]).is_empty());
    }

    #[test]
    fn sentences_are_counted_outside_code_and_abbreviations() {
        assert_eq!(sentence_count(""), 0);
        assert_eq!(sentence_count("No period here"), 1);
        assert_eq!(sentence_count("One sentence."), 1);
        assert_eq!(sentence_count("One. Two."), 2);
        assert_eq!(sentence_count("One! Two? Three."), 3);
        assert_eq!(sentence_count("Use a tool, e.g. ripgrep, for search."), 1);
        assert_eq!(sentence_count("Run `a. B. C.` once."), 1);
        assert_eq!(sentence_count("Set the threshold to 0.85 in memdedup.toml."), 1);
        assert_eq!(sentence_count("Ends without a dot. Then more"), 2);
    }
}
