//! Contrast signals between two texts: the differences a reader sees at once and cosine
//! similarity does not — other numbers, the opposite action, a negation, an added
//! condition, another named entity. Each is symmetric: `contrast(a, b)` and
//! `contrast(b, a)` find the same signals with the sides swapped.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

use crate::specifics::{Specific, specifics};

/// One difference between two texts that makes them say different things.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "signal", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Contrast {
    /// Numbers, versions, ids, code spans, paths or flags that one text has and the
    /// other replaces by others.
    SpecificsDiffer {
        /// Those only the first text has.
        first: Vec<String>,
        /// Those only the second text has.
        second: Vec<String>,
    },
    /// Words of opposite meaning: one text says `first`, the other `second`.
    OppositeWords {
        /// The first text's word.
        first: String,
        /// The second text's word.
        second: String,
    },
    /// One text negates and the other does not.
    NegationFlip {
        /// The negating word, and whether it is in the first text.
        word: String,
        /// True when the negation is in the first text.
        in_first: bool,
    },
    /// One text adds a condition or exception the other lacks.
    AddedCondition {
        /// The marker (`unless`, `except`, `only if`, …).
        marker: String,
        /// True when the condition is in the first text.
        in_first: bool,
    },
    /// One text restricts the claim to a narrower case (`only`, `just`, `solely`) and the
    /// other does not.
    ScopeNarrowed {
        /// The restricting word.
        word: String,
        /// True when the restriction is in the first text.
        in_first: bool,
    },
    /// The texts are the same sentence but for a few words replaced (`two` → `one`,
    /// `half` → `full`, `prefers` → `dislikes`): a near copy that changes its claim.
    WordsReplaced {
        /// The first text's words that the second replaces.
        first: Vec<String>,
        /// The second text's replacements.
        second: Vec<String>,
    },
    /// One text is the other plus a phrase of two or more words (`to the ledger tables`):
    /// the same claim narrowed or extended.
    WordsAdded {
        /// The added words.
        words: Vec<String>,
        /// True when the first text has them.
        in_first: bool,
    },
    /// Named entities that differ: each text names one the other does not.
    EntitiesDiffer {
        /// Those only the first text names.
        first: Vec<String>,
        /// Those only the second text names.
        second: Vec<String>,
    },
}

/// The names of the contrast signals, as [`Contrast::kind`] gives them.
pub const CONTRAST_KINDS: [&str; 8] = [
    "specifics_differ",
    "opposite_words",
    "negation_flip",
    "added_condition",
    "scope_narrowed",
    "words_replaced",
    "words_added",
    "entities_differ",
];

impl Contrast {
    /// The signal's name (one of [`CONTRAST_KINDS`]), as serialised in `signal`.
    pub fn kind(&self) -> &'static str {
        match self {
            Contrast::SpecificsDiffer { .. } => CONTRAST_KINDS[0],
            Contrast::OppositeWords { .. } => CONTRAST_KINDS[1],
            Contrast::NegationFlip { .. } => CONTRAST_KINDS[2],
            Contrast::AddedCondition { .. } => CONTRAST_KINDS[3],
            Contrast::ScopeNarrowed { .. } => CONTRAST_KINDS[4],
            Contrast::WordsReplaced { .. } => CONTRAST_KINDS[5],
            Contrast::WordsAdded { .. } => CONTRAST_KINDS[6],
            Contrast::EntitiesDiffer { .. } => CONTRAST_KINDS[7],
        }
    }

    /// The contrast in words with the two sides named (`"the new text"`, `"the stored
    /// text"`), where [`Display`](fmt::Display) names them by position (`only the first
    /// text …`, `x vs y` with the first text's `x`): for readers who see the texts in
    /// another order than they were compared in.
    pub fn describe(&self, first: &str, second: &str) -> String {
        Described { contrast: self, sides: Some((first, second)) }.to_string()
    }
}

impl fmt::Display for Contrast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Described { contrast: self, sides: None }.fmt(f)
    }
}

/// A contrast in words, its sides named by position (`None`) or by the names given.
struct Described<'a> {
    contrast: &'a Contrast,
    sides: Option<(&'a str, &'a str)>,
}

impl Described<'_> {
    /// `only the first text` / `only the new text`.
    fn only(&self, in_first: bool) -> String {
        match (self.sides, in_first) {
            (None, true) => "only the first text".to_owned(),
            (None, false) => "only the second text".to_owned(),
            (Some((first, _)), true) => format!("only {first}"),
            (Some((_, second)), false) => format!("only {second}"),
        }
    }

    /// `a vs b`, or `a in the new text, b in the stored text`.
    fn versus(&self, first: &str, second: &str) -> String {
        match self.sides {
            None => format!("{first} vs {second}"),
            Some((first_side, second_side)) => format!("{first} in {first_side}, {second} in {second_side}"),
        }
    }
}

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.contrast {
            Contrast::SpecificsDiffer { first, second } => {
                write!(f, "specifics differ: {}", self.versus(&first.join(", "), &second.join(", ")))
            }
            Contrast::OppositeWords { first, second } => write!(f, "opposite words: {}", self.versus(first, second)),
            Contrast::NegationFlip { word, in_first } => write!(f, "{} negates ({word:?})", self.only(*in_first)),
            Contrast::AddedCondition { marker, in_first } => {
                write!(f, "{} adds a condition ({marker:?})", self.only(*in_first))
            }
            Contrast::ScopeNarrowed { word, in_first } => {
                write!(f, "{} narrows the claim ({word:?})", self.only(*in_first))
            }
            Contrast::WordsReplaced { first, second } => {
                // The same words in another place ("every month" moved to the front, two
                // names swapped) say so rather than "x vs x".
                let (mut moved_first, mut moved_second) = (first.clone(), second.clone());
                moved_first.sort_unstable();
                moved_second.sort_unstable();
                if moved_first == moved_second {
                    write!(f, "words moved: {}", first.join(" "))
                } else {
                    write!(f, "words replaced: {}", self.versus(&first.join(" "), &second.join(" ")))
                }
            }
            Contrast::WordsAdded { words, in_first } => {
                write!(f, "{} adds {:?}", self.only(*in_first), words.join(" "))
            }
            Contrast::EntitiesDiffer { first, second } => {
                write!(f, "entities differ: {}", self.versus(&first.join(", "), &second.join(", ")))
            }
        }
    }
}

/// Pairs of words of opposite meaning, compared on lowercase stems.
const OPPOSITES: [(&str, &str); 47] = [
    ("prefer", "dislike"),
    ("like", "dislike"),
    ("metric", "imperial"),
    ("allow", "forbid"),
    ("required", "optional"),
    ("mandatory", "optional"),
    ("single", "split"),
    ("keep", "drop"),
    ("long", "short"),
    ("buy", "sell"),
    ("always", "never"),
    ("enable", "disable"),
    ("increase", "decrease"),
    ("raise", "lower"),
    ("open", "close"),
    ("start", "stop"),
    ("add", "remove"),
    ("allow", "deny"),
    ("allow", "block"),
    ("accept", "reject"),
    ("above", "below"),
    ("over", "under"),
    ("higher", "lower"),
    ("more", "less"),
    ("min", "max"),
    ("minimum", "maximum"),
    ("first", "last"),
    ("spike", "drop"),
    ("rise", "fall"),
    ("up", "down"),
    ("include", "exclude"),
    ("inside", "outside"),
    ("local", "remote"),
    ("public", "private"),
    ("encrypt", "decrypt"),
    ("success", "failure"),
    ("bullish", "bearish"),
    ("bull", "bear"),
    ("fast", "slow"),
    ("early", "late"),
    ("tab", "space"),
    ("morning", "evening"),
    ("weekday", "weekend"),
    ("synchronous", "asynchronous"),
    ("lock", "unlock"),
    ("usually", "rarely"),
    ("often", "rarely"),
];

/// Words that negate what follows.
const NEGATIONS: [&str; 14] = [
    "not",
    "never",
    "no",
    "don't",
    "doesn't",
    "isn't",
    "aren't",
    "can't",
    "cannot",
    "won't",
    "shouldn't",
    "mustn't",
    "without",
    "avoid",
];

/// Phrases that add a condition or an exception.
const CONDITIONS: [&str; 10] = [
    "unless",
    "except",
    "excluding",
    "only if",
    "only when",
    "but only",
    "but not",
    "as long as",
    "provided",
    "otherwise",
];

/// Words that restrict a claim to a narrower case.
const NARROWING: [&str; 3] = ["only", "just", "solely"];

/// What [`contrast`] needs to know about one text, computed once: comparing a text with
/// many others (a scan judges every close pair) then costs only the comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextFeatures {
    /// The text after [`normalize_content`](crate::normalize_content).
    pub normalized: String,
    words: Vec<String>,
    stems: Vec<String>,
    word_set: BTreeSet<String>,
    specifics: BTreeSet<Specific>,
    entities: BTreeSet<String>,
    /// `entities` in lowercase, in the same order.
    entities_lower: Vec<String>,
    /// For each term of [`OPPOSITES`] (first, second, in order), whether the text has it.
    opposite_terms: Vec<bool>,
    /// The first negating word, and the stems of the words each negation negates.
    negation: Option<String>,
    negated: Vec<(String, String)>,
    condition: Option<String>,
    narrowing: Option<String>,
}

impl TextFeatures {
    /// The features of `text`.
    pub fn new(text: &str) -> TextFeatures {
        let words = words(text);
        let stems: Vec<String> = words.iter().map(|w| stem(w)).collect();
        let has = |term: &str| {
            let term = stem(term);
            stems.iter().any(|w| same_stem(w, &term))
        };
        let opposite_terms = OPPOSITES.iter().flat_map(|(x, y)| [has(x), has(y)]).collect();
        let is_negation = |w: &str| NEGATIONS.contains(&w) || w.ends_with("n't");
        let negation = words.iter().find(|w| is_negation(w)).cloned();
        let negated = words
            .iter()
            .enumerate()
            .filter(|(_, w)| is_negation(w))
            .filter_map(|(i, w)| {
                let next =
                    words[i + 1..].iter().find(|n| !matches!(n.as_str(), "to" | "be" | "ever" | "a" | "an" | "the"))?;
                Some((w.clone(), stem(next)))
            })
            .collect();
        let joined = format!(" {} ", words.join(" "));
        let condition = CONDITIONS.iter().find(|c| joined.contains(&format!(" {c} "))).map(|c| (*c).to_owned());
        // `only if` and `only when` are conditions, and `only after`, `only once`, `only be`
        // stress an order or a rule: none is a narrower scope.
        let narrowing = words
            .iter()
            .enumerate()
            .find(|(i, w)| {
                NARROWING.contains(&w.as_str())
                    && !words.get(i + 1).is_some_and(|next| {
                        matches!(next.as_str(), "if" | "when" | "after" | "before" | "once" | "then" | "be")
                    })
            })
            .map(|(_, w)| w.clone());
        let entities = entities(text);
        TextFeatures {
            normalized: crate::normalize_content(text),
            word_set: words.iter().cloned().collect(),
            specifics: specifics(text),
            entities_lower: entities.iter().map(|e| e.to_lowercase()).collect(),
            entities,
            words,
            stems,
            opposite_terms,
            negation,
            negated,
            condition,
            narrowing,
        }
    }

    /// Whether a word of this text is `stem` up to inflection.
    fn says(&self, stem: &str) -> bool {
        self.stems.iter().any(|w| same_stem(w, stem))
    }
}

/// Every contrast between `first` and `second`, in a fixed order.
pub fn contrast(first: &str, second: &str) -> Vec<Contrast> {
    contrast_features(&TextFeatures::new(first), &TextFeatures::new(second))
}

/// [`contrast`] from features computed once per text.
pub fn contrast_features(a: &TextFeatures, b: &TextFeatures) -> Vec<Contrast> {
    let mut found = Vec::new();
    // A specific that is part of one of the other side's (`-D warnings` in `cargo clippy
    // -- -D warnings`), or holds one, is the same detail written more or less fully.
    // Numbers are compared whole (`1` is not part of `413`).
    let only = |x: &BTreeSet<Specific>, y: &BTreeSet<Specific>| -> Vec<String> {
        let written_out = |s: &Specific| {
            !matches!(s, Specific::Number(_))
                && y.iter()
                    .filter(|o| !matches!(o, Specific::Number(_)))
                    .any(|o| o.text().contains(s.text()) || s.text().contains(o.text()))
        };
        x.difference(y).filter(|s| !written_out(s)).map(|s| s.text().to_owned()).collect()
    };
    let (only_a, only_b) = (only(&a.specifics, &b.specifics), only(&b.specifics, &a.specifics));
    if !only_a.is_empty() && !only_b.is_empty() {
        found.push(Contrast::SpecificsDiffer { first: only_a, second: only_b });
    }

    for (k, (x, y)) in OPPOSITES.iter().enumerate() {
        let (ax, ay, bx, by) = (
            a.opposite_terms[2 * k],
            a.opposite_terms[2 * k + 1],
            b.opposite_terms[2 * k],
            b.opposite_terms[2 * k + 1],
        );
        if ax && !ay && by && !bx {
            found.push(Contrast::OppositeWords { first: (*x).to_owned(), second: (*y).to_owned() });
        }
        if ay && !ax && bx && !by {
            found.push(Contrast::OppositeWords { first: (*y).to_owned(), second: (*x).to_owned() });
        }
    }

    // A negation counts when the word it negates is one the other text says plainly
    // ("never retry 429s" / "retry 429s with backoff"); a paraphrase that turns "never use
    // X" into "prefer Y" negates nothing the other says.
    let negates = |x: &TextFeatures, other: &TextFeatures| {
        x.negated.iter().find(|(_, negated)| other.says(negated)).map(|(word, _)| word.clone())
    };
    match (&a.negation, &b.negation) {
        (Some(_), None) => {
            if let Some(word) = negates(a, b) {
                found.push(Contrast::NegationFlip { word, in_first: true });
            }
        }
        (None, Some(_)) => {
            if let Some(word) = negates(b, a) {
                found.push(Contrast::NegationFlip { word, in_first: false });
            }
        }
        _ => {}
    }

    match (&a.condition, &b.condition) {
        (Some(marker), None) => found.push(Contrast::AddedCondition { marker: marker.clone(), in_first: true }),
        (None, Some(marker)) => found.push(Contrast::AddedCondition { marker: marker.clone(), in_first: false }),
        _ => {}
    }

    match (&a.narrowing, &b.narrowing) {
        (Some(word), None) => found.push(Contrast::ScopeNarrowed { word: word.clone(), in_first: true }),
        (None, Some(word)) => found.push(Contrast::ScopeNarrowed { word: word.clone(), in_first: false }),
        _ => {}
    }

    // A near copy leaves at most three words of each side out, or none of one side: words
    // missing from the other side's vocabulary already rule it out (most pairs).
    let missing = |x: &TextFeatures, y: &TextFeatures| x.words.iter().filter(|w| !y.word_set.contains(*w)).count();
    let (missing_a, missing_b) = (missing(a, b), missing(b, a));
    if !(missing_a > 0 && missing_b > 0 && (missing_a > 3 || missing_b > 3)) {
        found.extend(word_edits(&a.words, &b.words));
    }

    // An entity whose name starts another's (`ETH` / `Ethereum`) is taken for the same.
    let named = |e: &str, words: &BTreeSet<String>| {
        words
            .iter()
            .any(|w| w == e || (e.len() >= 3 && w.len() >= 3 && (w.starts_with(e) || e.starts_with(w.as_str()))))
    };
    let only = |x: &TextFeatures, y: &TextFeatures| -> Vec<String> {
        x.entities
            .iter()
            .zip(&x.entities_lower)
            .filter(|(_, l)| !named(l, &y.word_set))
            .map(|(e, _)| e.clone())
            .collect()
    };
    let (only_a, only_b) = (only(a, b), only(b, a));
    if !only_a.is_empty() && !only_b.is_empty() {
        found.push(Contrast::EntitiesDiffer { first: only_a, second: only_b });
    }
    found
}

/// Lowercase words, with apostrophes kept (`don't`).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
        .filter(|w| !w.is_empty())
        .map(|w| w.replace('’', "'").to_lowercase())
        .collect()
}

/// Words outside the longest common subsequence, per side, and the length of that
/// subsequence. Ties keep the earliest match of the first text, so that swapping the
/// sides finds the same words.
fn word_diff<'a>(a: &'a [String], b: &'a [String]) -> (Vec<&'a str>, Vec<&'a str>, usize) {
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut only_a, mut only_b) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if a[i] == b[j] {
            i += 1;
            j += 1;
        } else if lcs[i + 1][j] >= lcs[i][j + 1] {
            only_a.push(a[i].as_str());
            i += 1;
        } else {
            only_b.push(b[j].as_str());
            j += 1;
        }
    }
    only_a.extend(a[i..].iter().map(String::as_str));
    only_b.extend(b[j..].iter().map(String::as_str));
    (only_a, only_b, lcs[0][0])
}

/// Words that carry no claim of their own: articles, pronouns, quantifiers, auxiliaries,
/// prepositions and fillers. Opposites among them (`always`/`never`) are
/// [`Contrast::OppositeWords`].
const FUNCTION_WORDS: [&str; 58] = [
    "a", "an", "the", "this", "that", "these", "those", "you", "we", "i", "it", "they", "he", "she", "your", "our",
    "their", "its", "my", "every", "each", "all", "any", "some", "always", "to", "of", "in", "on", "at", "for", "with",
    "by", "from", "and", "or", "so", "then", "is", "are", "be", "been", "was", "were", "do", "does", "did", "will",
    "should", "must", "can", "may", "please", "also", "too", "very", "really", "there",
];

/// Near copies: the same words in the same order but for a few replaced
/// ([`Contrast::WordsReplaced`]: at most three per side, and the shared words at least
/// four and 60 % of the longer text) or a phrase of two or more words added
/// ([`Contrast::WordsAdded`]: the shorter text entirely shared).
fn word_edits(wa: &[String], wb: &[String]) -> Option<Contrast> {
    let (only_a, only_b, common) = word_diff(wa, wb);
    // Replacing or adding only function words ("before every commit" / "always ... before
    // you commit") restates the claim; a content word must change.
    let content = |ws: &[&str]| ws.iter().filter(|w| !FUNCTION_WORDS.contains(w)).count();
    if content(&only_a) == 0 && content(&only_b) == 0 {
        return None;
    }
    let owned = |ws: &[&str]| ws.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    let longer = wa.len().max(wb.len());
    match (only_a.len(), only_b.len()) {
        (1..=3, 1..=3) if common >= 4 && common * 10 >= longer * 6 => {
            Some(Contrast::WordsReplaced { first: owned(&only_a), second: owned(&only_b) })
        }
        (0, 2..) if common >= 4 => Some(Contrast::WordsAdded { words: owned(&only_b), in_first: false }),
        (2.., 0) if common >= 4 => Some(Contrast::WordsAdded { words: owned(&only_a), in_first: true }),
        _ => None,
    }
}

/// Whether two stems are one word up to inflection: equal, or sharing a prefix of five
/// letters or more that leaves at most two of the shorter one (`enabl` / `enable`,
/// `rewritten` / `rewrite`), or the shorter one (of four letters or more) starting the
/// other (`prefer` / `preferr`).
fn same_stem(w: &str, t: &str) -> bool {
    if w == t {
        return true;
    }
    let shared = w.chars().zip(t.chars()).take_while(|(x, y)| x == y).count();
    let shorter = w.chars().count().min(t.chars().count());
    (shorter >= 4 && shared == shorter) || (shared >= 5 && shared + 2 >= shorter)
}

/// A crude stem: common inflections removed, so `shorting` meets `short`.
fn stem(word: &str) -> String {
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(base) = word.strip_suffix(suffix)
            && base.len() >= 3
        {
            return base.to_owned();
        }
    }
    word.to_owned()
}

/// Named entities: capitalised words not at the start of a sentence, and words written
/// in capitals or with inner capitals (`ETH`, `RabbitMQ`), outside code spans.
fn entities(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut sentence_start = true;
    for raw in text.split_whitespace() {
        let word: String = raw.chars().filter(|c| c.is_alphanumeric()).collect();
        let starts_sentence = sentence_start;
        sentence_start = raw.ends_with(['.', '!', '?', ':', ';']);
        if word.len() < 2 || raw.starts_with('`') {
            continue;
        }
        let upper = word.chars().filter(|c| c.is_uppercase()).count();
        let capitalised = word.chars().next().is_some_and(char::is_uppercase);
        if upper >= 2 || (capitalised && !starts_sentence) {
            found.insert(word);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(a: &str, b: &str) -> Vec<String> {
        contrast(a, b).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn different_numbers_are_a_contrast() {
        let found = contrast(
            "Stablecoin depegs below 0.98 usually recover within a week.",
            "Stablecoin depegs below 0.90 rarely recover.",
        );
        assert!(
            found.contains(&Contrast::SpecificsDiffer { first: vec!["0.98".into()], second: vec!["0.90".into()] }),
            "{found:?}"
        );
        let found = contrast("Fixed in PR #12.", "Fixed in PR #13.");
        assert!(matches!(found[0], Contrast::SpecificsDiffer { .. }), "{found:?}");
    }

    #[test]
    fn the_opposite_action_is_a_contrast() {
        let found = kinds(
            "Short the funding spike only after open interest starts falling.",
            "Go long after a funding spike once open interest starts falling.",
        );
        assert!(found.contains(&"opposite words: short vs long".to_owned()), "{found:?}");
        let found =
            kinds("Why do ETH gas fees spike on Sunday evenings?", "Why do ETH gas fees drop on Saturday mornings?");
        assert!(found.contains(&"opposite words: spike vs drop".to_owned()), "{found:?}");
        assert!(found.contains(&"opposite words: evening vs morning".to_owned()), "{found:?}");
    }

    #[test]
    fn a_negation_on_one_side_is_a_contrast() {
        let found = contrast(
            "Run the migrations from inside the API server process.",
            "Never run the migrations from inside the API server process.",
        );
        assert!(found.contains(&Contrast::NegationFlip { word: "never".into(), in_first: false }), "{found:?}");
    }

    #[test]
    fn an_added_condition_is_a_contrast() {
        let found = contrast(
            "Rotate the API keys every month.",
            "Rotate the API keys every month unless the vendor forbids it.",
        );
        assert!(found.contains(&Contrast::AddedCondition { marker: "unless".into(), in_first: false }), "{found:?}");
        let found = contrast(
            "Never use SELECT * in production queries except in ad-hoc admin scripts.",
            "Never use SELECT * in production queries.",
        );
        assert!(found.contains(&Contrast::AddedCondition { marker: "except".into(), in_first: true }), "{found:?}");
    }

    #[test]
    fn a_contrast_described_with_named_sides_names_each_side() {
        let named = |a: &str, b: &str| -> Vec<String> {
            contrast(a, b).iter().map(|c| c.describe("the new text", "the stored text")).collect()
        };
        let found = named("Keep request bodies under 5 MB.", "Keep request bodies under 1 MB.");
        assert!(found.contains(&"specifics differ: 5 in the new text, 1 in the stored text".to_owned()), "{found:?}");
        let found = named(
            "Never use SELECT * in production queries except in ad-hoc admin scripts.",
            "Never use SELECT * in production queries.",
        );
        assert!(found.contains(&"only the new text adds a condition (\"except\")".to_owned()), "{found:?}");
        let found = named(
            "Run the migrations from inside the API server process.",
            "Never run the migrations from inside the API server process.",
        );
        assert!(found.contains(&"only the stored text negates (\"never\")".to_owned()), "{found:?}");
        // A move has no sides to name.
        let found = named(
            "Rotate the API keys every month, and revoke the old keys at once.",
            "Every month rotate the API keys and revoke the old keys at once.",
        );
        assert_eq!(found, ["words moved: every month"]);
    }

    #[test]
    fn a_phrase_moved_elsewhere_is_explained_as_moved() {
        let found = contrast(
            "Rotate the API keys every month, and revoke the old keys at once.",
            "Every month rotate the API keys and revoke the old keys at once.",
        );
        let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["words moved: every month"], "{found:?}");
        // Swapped names stay a contrast (the local judge's veto), explained as moved.
        let found = contrast(
            "Maria hired Tom for the night shift in Lisbon.",
            "Tom hired Maria for the night shift in Lisbon.",
        );
        assert!(found.iter().any(|c| c.to_string().starts_with("words moved: ")), "{found:?}");
        // Moved words beside a replaced one are a replacement.
        let found = contrast(
            "Rotate the API keys every month, and revoke the old keys at once.",
            "Every month rotate the API keys and revoke the new keys at once.",
        );
        assert!(found.iter().any(|c| c.to_string().starts_with("words replaced: ")), "{found:?}");
    }

    #[test]
    fn a_near_copy_with_words_replaced_or_added_is_a_contrast() {
        let found = contrast(
            "Every schema change needs an ADR reviewed by two senior engineers.",
            "Every schema change needs an ADR reviewed by one senior engineer.",
        );
        let replaced = Contrast::WordsReplaced {
            first: vec!["two".into(), "engineers".into()],
            second: vec!["one".into(), "engineer".into()],
        };
        assert_eq!(found, [replaced]);
        assert_eq!(found[0].to_string(), "words replaced: two engineers vs one engineer");
        let found = contrast(
            "Every schema change needs an ADR reviewed by two senior engineers.",
            "Every schema change to the ledger tables needs an ADR reviewed by two senior engineers.",
        );
        let added = Contrast::WordsAdded {
            words: ["to", "the", "ledger", "tables"].map(String::from).to_vec(),
            in_first: false,
        };
        assert_eq!(found, [added]);
        // A paraphrase in other words is no near copy, and neither is one that changes only
        // function words.
        assert_eq!(contrast("Rotate the API keys every month.", "API keys get replaced on a monthly schedule."), []);
        assert_eq!(
            contrast("Run the formatter before every commit.", "Always run the formatter before you commit."),
            []
        );
    }

    #[test]
    fn a_different_entity_is_a_contrast() {
        let found = contrast(
            "We chose Kafka as the event bus for order events.",
            "We chose RabbitMQ as the event bus for order events.",
        );
        let entities = Contrast::EntitiesDiffer { first: vec!["Kafka".into()], second: vec!["RabbitMQ".into()] };
        assert!(found.contains(&entities), "{found:?}");
        let found = contrast("Buy BTC when funding turns negative.", "Buy ETH when funding turns negative.");
        let entities = Contrast::EntitiesDiffer { first: vec!["BTC".into()], second: vec!["ETH".into()] };
        assert!(found.contains(&entities), "{found:?}");
    }

    #[test]
    fn paraphrases_with_little_overlap_show_no_contrast() {
        for (a, b) in [
            ("Rotate the API keys every month.", "API keys get replaced on a monthly schedule."),
            (
                "Always run the database migrations before starting the API server.",
                "Apply pending DB migrations first, then boot the API server.",
            ),
            (
                "Quote shell variables to avoid word splitting.",
                "Always wrap shell variables in double quotes so they are not split on spaces.",
            ),
            (
                "Reply in Spanish unless the user writes in English.",
                "Answer in Spanish by default; switch to English only when the user does.",
            ),
            (
                "Use parameterized queries; never build SQL with string concatenation.",
                "Never concatenate strings to make SQL; always bind parameters.",
            ),
        ] {
            assert_eq!(contrast(a, b), [], "{a} / {b}");
        }
    }

    #[test]
    fn a_text_shows_no_contrast_with_itself_and_contrasts_are_symmetric() {
        let texts = [
            "Short the funding spike only after open interest starts falling.",
            "Go long after a funding spike once open interest starts falling.",
            "Stablecoin depegs below 0.98 usually recover within a week.",
            "Never run migrations from the API server unless it is a dev box.",
            "We chose Kafka as the event bus.",
        ];
        for a in texts {
            assert_eq!(contrast(a, a), [], "{a}");
            for b in texts {
                assert_eq!(contrast(a, b).len(), contrast(b, a).len(), "{a} / {b}");
            }
        }
    }
}
