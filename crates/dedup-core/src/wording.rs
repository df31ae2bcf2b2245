//! The wording of a text: its words, numbers and signs in order, without what only formats
//! them. Two texts with the same wording say the same thing in the same words; they differ
//! only in case, in punctuation around words, or in markup (code spans, quotes, brackets,
//! emphasis, bullets). The learned judge takes such a pair as a duplicate without asking
//! the model, which reads "`pnpm`" and "pnpm" as different more often than it should.
//!
//! The key is conservative: whatever could carry meaning is kept, so a pair differing in it
//! is left to the model. Kept are signs inside a word (`config/settings.py`, `e.g`,
//! `red-green`, `3,000`, `10:00`), a sign or currency before a number (`-5`, `+2`, `$5`),
//! `%`, `+` and `#` (`C++`, `C#`, `#123`), operators (`=`, `!=`, `->`), and a question mark,
//! which turns a statement into a question. Dropped are whitespace, the zero-width
//! characters [`normalize_content`](crate::normalize_content) drops, and, at either end of
//! a word, backticks, quotes, brackets, asterisks and the sentence punctuation `.`, `,`,
//! `;`, `:`, `!`, as well as words made only of dashes, bullets or ellipses.

use crate::content_hash::ZERO_WIDTH;

/// Signs stripped from the start of a word: opening markup.
const START_MARKS: &[char] = &['`', '"', '\'', '“', '”', '«', '»', '(', '[', '{', '*'];

/// Signs stripped from the end of a word: closing markup and sentence punctuation.
const END_MARKS: &[char] = &['`', '"', '\'', '“', '”', '«', '»', ')', ']', '}', '*', '.', ',', ';', ':', '!', '…'];

/// Words dropped when made only of these: dashes, bullets and ellipses.
const FILLER_MARKS: &[char] = &['-', '–', '—', '*', '•', '·', '.', '…'];

/// The wording of `text`: its words in lowercase, in order, one space apart, each without
/// the markup and sentence punctuation at its ends (a leading `.` is kept: `.env`, `.5`);
/// a final `?` of a word becomes a word of its own. Empty for a text of no words.
pub fn wording(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut push = |word: &str| {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    };
    for raw in text.split_whitespace() {
        let word: String = raw
            .chars()
            .filter(|c| !ZERO_WIDTH.contains(c))
            .map(|c| if c == '’' || c == '‘' { '\'' } else { c })
            .flat_map(char::to_lowercase)
            .collect();
        if word.is_empty() || word.chars().all(|c| FILLER_MARKS.contains(&c)) {
            continue;
        }
        let mut core = word.as_str();
        let mut question = false;
        loop {
            let before = core;
            core = core.trim_start_matches(START_MARKS);
            if let Some(rest) = core.strip_suffix('?') {
                question = true;
                core = rest;
            }
            core = core.trim_end_matches(END_MARKS);
            if core == before {
                break;
            }
        }
        if !core.is_empty() {
            push(core);
        }
        if question {
            push("?");
        }
    }
    out
}

/// Whether two texts have the same, non-empty [`wording`].
pub fn same_wording(first: &str, second: &str) -> bool {
    let a = wording(first);
    !a.is_empty() && a == wording(second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_case_and_sentence_punctuation_do_not_change_the_wording() {
        for (a, b) in [
            (
                "The user's monorepo uses pnpm workspaces, so install packages with pnpm, not npm.",
                "The user's monorepo uses pnpm workspaces, so install packages with `pnpm`, not `npm`",
            ),
            (
                "Never call unwrap() on user input; return a ParseError.",
                "never call `unwrap()` on user input: return a `ParseError`",
            ),
            ("Pin serde to 1.0.197 in Cargo.toml.", "Pin `serde` to 1.0.197 in `Cargo.toml`"),
            ("- **Note:** rotate the key", "Note rotate the key!"),
            ("Use \u{201c}main\u{201d} \u{2014} not master", "Use \"main\", not master"),
            ("Don\u{2019}t push to main", "don't push to main."),
            ("Pass -count=1 to go test", "Pass `-count=1` to `go test`."),
        ] {
            assert_eq!(wording(a), wording(b), "{a:?} / {b:?}");
            assert!(same_wording(a, b));
        }
    }

    #[test]
    fn signs_that_carry_meaning_are_kept() {
        for (a, b) in [
            ("Set the offset to -5", "Set the offset to 5"),
            ("Use C++ for the engine", "Use C for the engine"),
            ("Write it in C#", "Write it in C"),
            ("Use != here, not ==", "Use == here, not !="),
            ("Check a != b", "Check a = b"),
            ("Alert when x > 5", "Alert when x 5"),
            ("The timeout is 1.5s", "The timeout is 15s"),
            ("Cap risk at 5%", "Cap risk at 5"),
            ("Squash commits before merging?", "Squash commits before merging."),
            ("Should we squash? Yes", "Should we squash yes"),
            ("Keep secrets in .env", "Keep secrets in env"),
            ("Fix #123 first", "Fix 123 first"),
            ("Charge $5 per seat", "Charge 5 per seat"),
            ("Use red-green labels", "Use red green labels"),
        ] {
            assert!(!same_wording(a, b), "{a:?} / {b:?} read as the same wording: {:?}", wording(a));
        }
    }

    #[test]
    fn order_and_words_matter() {
        assert!(!same_wording("Merge main into the branch", "Merge the branch into main"));
        assert!(!same_wording("Always run the tests", "Run the tests"));
        assert!(!same_wording("", " `` ** "));
        assert_eq!(wording(" `` ** - "), "");
    }

    #[test]
    fn wording_is_idempotent() {
        for text in ["Pin `serde` to 1.0.197.", "Really?! Yes.", "(see `docs/` for more)", "\u{200b}Use\u{feff} it"] {
            let once = wording(text);
            assert_eq!(wording(&once), once, "{text:?}");
        }
    }
}
