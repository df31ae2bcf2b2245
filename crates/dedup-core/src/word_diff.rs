//! The words two texts do not share: what a person reviewing a pair should look at.

use similar::{ChangeTag, TextDiff};

/// A word of a text, and whether the other text lacks it.
pub type DiffWord<'a> = (&'a str, bool);

/// The words of both texts (whitespace dropped), each marked when only its text has it:
/// a word diff, as the terminal review and the review page highlight it.
pub fn word_diff<'a>(left: &'a str, right: &'a str) -> (Vec<DiffWord<'a>>, Vec<DiffWord<'a>>) {
    let diff = TextDiff::from_words(left, right);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for change in diff.iter_all_changes() {
        let word = change.value();
        if word.trim().is_empty() {
            continue;
        }
        match change.tag() {
            ChangeTag::Equal => {
                a.push((word, false));
                b.push((word, false));
            }
            ChangeTag::Delete => a.push((word, true)),
            ChangeTag::Insert => b.push((word, true)),
        }
    }
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked<'a>(words: &[DiffWord<'a>]) -> Vec<&'a str> {
        words.iter().filter(|(_, differs)| *differs).map(|(w, _)| *w).collect()
    }

    #[test]
    fn the_words_only_one_text_has_are_marked() {
        let (a, b) =
            word_diff("always use type hints for function parameters", "use type hints on all function parameters");
        assert_eq!(marked(&a), ["always", "for"]);
        assert_eq!(marked(&b), ["on", "all"]);
        assert_eq!(a.len(), 7);
        assert_eq!(b.len(), 7);
    }

    #[test]
    fn equal_texts_mark_nothing() {
        let (a, b) = word_diff("same words here", "same words here");
        assert!(marked(&a).is_empty() && marked(&b).is_empty());
        assert_eq!(a.iter().map(|(w, _)| *w).collect::<Vec<_>>(), ["same", "words", "here"]);
    }
}
