//! The fact memory's pure rules (seed 002): categories, the casefolded duplicate key, the
//! policy, the profile summaries, and formatting it all for a prompt within a token budget.
//!
//! Nothing here stores anything: `dedup-store` keeps facts and profiles and applies
//! [`FactPolicy`] atomically; this module only decides and formats. Reading the facts a
//! model extracted from a conversation ([`parse_extracted_facts`]) lives in `extraction`.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::str::FromStr;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

mod extraction;

pub use extraction::{
    ExtractedFact, ExtractedFacts, InvalidFact, MAX_FACT_CONTENT_CHARS, parse_extracted_facts, read_extracted_facts,
};

/// The confidence below which a fact is not stored (seed 002's default).
pub const DEFAULT_CONFIDENCE_THRESHOLD: f64 = 0.5;
/// The most facts one scope keeps (seed 002's default).
pub const DEFAULT_MAX_FACTS: usize = 500;
/// The token budget of [`format_context`] when the caller has none (seed 002's default).
pub const DEFAULT_MAX_TOKENS: usize = 2000;
/// What [`format_context`] appends to text it had to cut.
pub const TRUNCATION_MARKER: &str = "\n...";

/// What can be wrong with fact input: always a problem with the input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FactError {
    /// A category name outside the six of [`FactCategory`].
    #[error(
        "unknown fact category {given:?} (expected one of: preference, knowledge, context, behavior, goal, correction)"
    )]
    UnknownCategory {
        /// The rejected name.
        given: String,
    },
    /// A [`FactPolicy`] with a threshold outside `[0, 1]` or a limit of zero facts.
    #[error("invalid fact policy: {reason}")]
    InvalidPolicy {
        /// What is wrong.
        reason: String,
    },
    /// The cl100k_base tokenizer could not be built from the ranks shipped in its crate.
    #[error("cannot build the cl100k_base tokenizer: {reason}")]
    Tokenizer {
        /// The tokenizer crate's error.
        reason: String,
    },
    /// A model's fact-extraction reply does not hold the expected JSON object.
    #[error("malformed fact extraction reply: {reason}")]
    MalformedReply {
        /// What is wrong with the reply as a whole.
        reason: String,
    },
    /// One fact of a model's fact-extraction reply is invalid, which rejects the reply.
    #[error("invalid extracted fact {index}: {reason}")]
    InvalidExtractedFact {
        /// The fact's 0-based position in the reply's `facts` list.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// What a fact is about. Serialised, parsed and stored as the lowercase name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FactCategory {
    /// Something the user likes or wants done a certain way.
    Preference,
    /// Something the user knows or that is known about their world.
    Knowledge,
    /// The user's situation: role, project, environment.
    Context,
    /// How the user tends to act.
    Behavior,
    /// What the user is trying to achieve.
    Goal,
    /// A correction of something the agent got wrong.
    Correction,
}

impl FactCategory {
    /// The six categories, in the seed's order.
    pub const ALL: [FactCategory; 6] = [
        FactCategory::Preference,
        FactCategory::Knowledge,
        FactCategory::Context,
        FactCategory::Behavior,
        FactCategory::Goal,
        FactCategory::Correction,
    ];

    /// The lowercase name: `preference`, `knowledge`, `context`, `behavior`, `goal` or
    /// `correction`.
    pub fn as_str(self) -> &'static str {
        match self {
            FactCategory::Preference => "preference",
            FactCategory::Knowledge => "knowledge",
            FactCategory::Context => "context",
            FactCategory::Behavior => "behavior",
            FactCategory::Goal => "goal",
            FactCategory::Correction => "correction",
        }
    }
}

impl fmt::Display for FactCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FactCategory {
    type Err = FactError;

    /// Parses a category name, ignoring ASCII case and surrounding whitespace.
    fn from_str(s: &str) -> Result<FactCategory, FactError> {
        let name = s.trim();
        FactCategory::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(name))
            .ok_or_else(|| FactError::UnknownCategory { given: s.to_owned() })
    }
}

/// The duplicate key of a fact's content: surrounding whitespace removed, then full
/// Unicode case folding, as Python's `content.strip().casefold()` computes it.
///
/// "Straße", "STRASSE" and " strasse " have the same key. Whitespace is what Python's
/// `str.strip` removes (Unicode `White_Space` plus the separators U+001C to U+001F); the
/// folding is Unicode's full default case folding (`CaseFolding.txt` statuses C and F),
/// from the `caseless` crate's tables. Inner whitespace and normalisation form are kept, so
/// the key stays as strict as the seed's: only letter case and the ends differ.
pub fn fact_key(content: &str) -> String {
    caseless::default_case_fold_str(content.trim_matches(is_python_whitespace))
}

/// Whether Python's `str.isspace` holds for `c`.
fn is_python_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Which facts a scope keeps: the confidence a fact needs, and how many are kept.
///
/// **Invariant** (checked by [`FactPolicy::new`] and [`FactPolicy::validate`], which the
/// store calls before using one): `confidence_threshold` is in `[0, 1]` and `max_facts`
/// is at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FactPolicy {
    /// Facts with a lower confidence are not stored. Default 0.5.
    pub confidence_threshold: f64,
    /// A scope never holds more facts than this: adding one to a full scope first evicts
    /// the fact of lowest confidence (the oldest among equals). Default 500.
    pub max_facts: usize,
}

impl Default for FactPolicy {
    fn default() -> FactPolicy {
        FactPolicy { confidence_threshold: DEFAULT_CONFIDENCE_THRESHOLD, max_facts: DEFAULT_MAX_FACTS }
    }
}

impl FactPolicy {
    /// A validated policy.
    pub fn new(confidence_threshold: f64, max_facts: usize) -> Result<FactPolicy, FactError> {
        let policy = FactPolicy { confidence_threshold, max_facts };
        policy.validate()?;
        Ok(policy)
    }

    /// Checks the invariant: threshold a number in `[0, 1]`, at least one fact kept.
    pub fn validate(&self) -> Result<(), FactError> {
        if !(0.0..=1.0).contains(&self.confidence_threshold) {
            return Err(FactError::InvalidPolicy {
                reason: format!("confidence threshold {} is not in [0, 1]", self.confidence_threshold),
            });
        }
        if self.max_facts == 0 {
            return Err(FactError::InvalidPolicy { reason: "max facts must be at least 1".to_owned() });
        }
        Ok(())
    }

    /// Whether a fact of this confidence is stored: `confidence >= confidence_threshold`.
    pub fn accepts(&self, confidence: f64) -> bool {
        confidence >= self.confidence_threshold
    }
}

/// The summaries about the user that a scope keeps beside its facts, shaped like the
/// `user` and `history` members of DeerFlow's `memory.json`:
///
/// ```json
/// {"user": {"workContext": {"summary": "…", "updatedAt": "…"}, "personalContext": {…}, "topOfMind": {…}},
///  "history": {"recentMonths": {…}, "earlierContext": {…}, "longTermBackground": {…}}}
/// ```
///
/// Every member is optional when read and defaults to an empty section; members it does not
/// know (`version`, `facts`, …) are ignored, not kept.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MemoryProfile {
    /// What the user is doing now.
    pub user: UserContext,
    /// What happened before.
    pub history: HistoryContext,
}

/// The `user` member of a [`MemoryProfile`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UserContext {
    /// Work: role, projects, tools ("Work:" in the prompt).
    pub work_context: ProfileSection,
    /// Personal life and preferences ("Personal:").
    pub personal_context: ProfileSection,
    /// What the user is focused on right now ("Current Focus:").
    pub top_of_mind: ProfileSection,
}

/// The `history` member of a [`MemoryProfile`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HistoryContext {
    /// The last few months ("Recent:").
    pub recent_months: ProfileSection,
    /// Before that ("Earlier:").
    pub earlier_context: ProfileSection,
    /// Long-standing background ("Background:").
    pub long_term_background: ProfileSection,
}

/// Checks that `value` (at `path`) has the shape of `known`: an object with only known
/// members, each of the right shape, or a string where `known` has one.
fn check_shape(value: &serde_json::Value, known: &serde_json::Value, path: &str) -> Result<(), String> {
    use serde_json::Value;
    let at = if path.is_empty() { "the profile".to_owned() } else { format!("`{path}`") };
    match (value, known) {
        (Value::Object(members), Value::Object(known_members)) => {
            for (name, member) in members {
                let child = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
                let Some(known_member) = known_members.get(name) else {
                    let expected = known_members.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
                    return Err(format!("unknown field `{child}`, expected one of {expected}"));
                };
                check_shape(member, known_member, &child)?;
            }
            Ok(())
        }
        (Value::String(_), Value::String(_)) => Ok(()),
        (other, Value::Object(_)) => {
            Err(format!("{at} must be an object, not {}", crate::json_reply::json_type(other)))
        }
        (other, _) => Err(format!("{at} must be a string, not {}", crate::json_reply::json_type(other))),
    }
}

/// One summary of a [`MemoryProfile`]; empty when nothing is known.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProfileSection {
    /// The text; a blank summary is left out of the prompt.
    pub summary: String,
    /// When it was last written, as the writer recorded it (DeerFlow writes ISO-8601 UTC);
    /// empty when unknown. Not interpreted here.
    pub updated_at: String,
}

impl ProfileSection {
    /// A section with this summary and no update time.
    pub fn new(summary: impl Into<String>) -> ProfileSection {
        ProfileSection { summary: summary.into(), updated_at: String::new() }
    }
}

impl MemoryProfile {
    /// A profile given to replace the stored one (`PUT /v1/memory/profile`, `memdedup facts
    /// profile --set`), read strictly: unlike the file format, which ignores what it does
    /// not know, every member must be one the profile has and of its shape (an object for
    /// `user`, `history` and each section, a string for `summary` and `updatedAt`), so a
    /// misspelt section or a wrong shape (`[]`) is refused instead of blanking the profile.
    /// Members left out are empty. The error names the member (`user.topOfMind`) and the
    /// problem.
    pub fn from_replacement(value: &serde_json::Value) -> Result<MemoryProfile, String> {
        let known = serde_json::to_value(MemoryProfile::default()).map_err(|e| e.to_string())?;
        check_shape(value, &known, "")?;
        serde_json::from_value(value.clone()).map_err(|e| e.to_string())
    }

    /// Whether every summary is blank.
    pub fn is_empty(&self) -> bool {
        self.sections().iter().all(|(_, _, section)| section.summary.trim().is_empty())
    }

    /// Every section with its prompt heading and label, in prompt order.
    fn sections(&self) -> [(&'static str, &'static str, &ProfileSection); 6] {
        [
            (USER_HEADING, "Work", &self.user.work_context),
            (USER_HEADING, "Personal", &self.user.personal_context),
            (USER_HEADING, "Current Focus", &self.user.top_of_mind),
            (HISTORY_HEADING, "Recent", &self.history.recent_months),
            (HISTORY_HEADING, "Earlier", &self.history.earlier_context),
            (HISTORY_HEADING, "Background", &self.history.long_term_background),
        ]
    }
}

const USER_HEADING: &str = "User Context:";
const HISTORY_HEADING: &str = "History:";
const FACTS_HEADING: &str = "Facts:";
/// Between sections.
const SECTION_SEPARATOR: &str = "\n\n";

/// What [`format_context`] needs of a fact.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FactView<'a> {
    /// The text; shown trimmed, left out when blank.
    pub content: &'a str,
    /// Its category.
    pub category: FactCategory,
    /// Its confidence, shown with two decimals.
    pub confidence: f64,
}

/// Counts the tokens a text costs in a prompt.
pub trait TokenCounter: Send + Sync {
    /// The number of tokens of `text`.
    fn count(&self, text: &str) -> usize;
}

/// Exact token counts with OpenAI's `cl100k_base` BPE (what seed 002's source measures
/// with `tiktoken`). The ranks are compiled into the `tiktoken-rs` crate: building one
/// reads no file and no network. Special tokens such as `<|endoftext|>` count as the
/// ordinary text they are.
#[derive(Clone, Copy)]
pub struct Cl100kTokens {
    bpe: &'static tiktoken_rs::CoreBPE,
}

impl fmt::Debug for Cl100kTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Cl100kTokens")
    }
}

impl Cl100kTokens {
    /// The tokenizer, built once per process (about 100k ranks; tens of milliseconds) and
    /// shared by every handle.
    pub fn new() -> Result<Cl100kTokens, FactError> {
        static BPE: OnceLock<Result<tiktoken_rs::CoreBPE, String>> = OnceLock::new();
        match BPE.get_or_init(|| {
            catch_unwind(tiktoken_rs::cl100k_base)
                .map_err(|_| "the tokenizer panicked while loading its ranks".to_owned())
                .and_then(|built| built.map_err(|e| e.to_string()))
        }) {
            Ok(bpe) => Ok(Cl100kTokens { bpe }),
            Err(reason) => Err(FactError::Tokenizer { reason: reason.clone() }),
        }
    }
}

impl TokenCounter for Cl100kTokens {
    fn count(&self, text: &str) -> usize {
        // The tokenizer unwraps its regex matches; should one ever fail (a backtracking
        // limit), estimate rather than take the caller down.
        catch_unwind(AssertUnwindSafe(|| self.bpe.encode_ordinary(text).len()))
            .unwrap_or_else(|_| CharEstimate.count(text))
    }
}

/// The fallback estimate: a quarter of the character count, rounded down (what seed 002's
/// source uses when `tiktoken` is missing). Used only when [`Cl100kTokens`] cannot be
/// built; see [`default_token_counter`].
#[derive(Debug, Clone, Copy, Default)]
pub struct CharEstimate;

impl TokenCounter for CharEstimate {
    fn count(&self, text: &str) -> usize {
        text.chars().count() / 4
    }
}

/// [`Cl100kTokens`], or [`CharEstimate`] with a warning if the BPE cannot be built.
pub fn default_token_counter() -> &'static dyn TokenCounter {
    static COUNTER: OnceLock<Box<dyn TokenCounter>> = OnceLock::new();
    COUNTER
        .get_or_init(|| match Cl100kTokens::new() {
            Ok(bpe) => Box::new(bpe),
            Err(error) => {
                tracing::warn!(%error, "token budgets use the estimate of 4 characters per token");
                Box::new(CharEstimate)
            }
        })
        .as_ref()
}

/// Formats the profile and facts for injection into a system prompt (seed 002), within
/// `max_tokens` as `counter` measures them.
///
/// The text has up to three sections, joined by a blank line, each left out when it would
/// be empty:
///
/// ```text
/// User Context:
/// - Work: {user.workContext.summary}
/// - Personal: {user.personalContext.summary}
/// - Current Focus: {user.topOfMind.summary}
///
/// History:
/// - Recent: {history.recentMonths.summary}
/// - Earlier: {history.earlierContext.summary}
/// - Background: {history.longTermBackground.summary}
///
/// Facts:
/// - [{category} | {confidence:.2}] {content}
/// ```
///
/// Blank summaries and facts are left out; the others are shown trimmed. Facts are sorted
/// by confidence, highest first (equal ones keep their order in `facts`).
///
/// **Budget.** When the text costs more than `max_tokens`, facts are dropped from the
/// lowest confidence up until it fits. If it still does not fit with no facts, the text is
/// cut at a character boundary to the longest prefix that fits together with the
/// [`TRUNCATION_MARKER`] `"\n..."`, which is appended. The result never costs more than
/// `max_tokens`, with one exception: when `max_tokens` is smaller than the marker itself
/// (0 or 1 tokens for [`Cl100kTokens`], under 4 characters' worth for [`CharEstimate`]),
/// the result is the marker alone, since the seed requires cut text to say so. The search
/// costs O(log n) counts and assumes, as holds for both counters here, that a longer
/// prefix never costs fewer tokens; whatever it returns has been measured to fit.
pub fn format_context(
    profile: &MemoryProfile,
    facts: &[FactView<'_>],
    max_tokens: usize,
    counter: &dyn TokenCounter,
) -> String {
    let base = profile_sections(profile);

    let mut ranked: Vec<&FactView<'_>> = facts.iter().filter(|f| !f.content.trim().is_empty()).collect();
    ranked.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    // The full text and, for k >= 1, where the text with the first k facts ends: the facts
    // section comes last, so each shorter text is a prefix of the full one.
    let mut full = base.clone();
    let mut ends = Vec::with_capacity(ranked.len());
    for (i, fact) in ranked.iter().enumerate() {
        if i == 0 {
            if !full.is_empty() {
                full.push_str(SECTION_SEPARATOR);
            }
            full.push_str(FACTS_HEADING);
        }
        full.push('\n');
        full.push_str(&fact_line(fact));
        ends.push(full.len());
    }

    let fits = |text: &str| counter.count(text) <= max_tokens;
    if fits(&full) {
        return full;
    }
    if !fits(&base) {
        return truncate(&base, max_tokens, counter);
    }
    // The text with `lo` facts fits, the one with `hi` does not.
    let (mut lo, mut hi) = (0, ranked.len());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(&full[..ends[mid - 1]]) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    match lo {
        0 => base,
        k => {
            full.truncate(ends[k - 1]);
            full
        }
    }
}

/// The "User Context:" and "History:" sections, joined by a blank line.
fn profile_sections(profile: &MemoryProfile) -> String {
    let mut out = String::new();
    let mut heading = None;
    for (section_heading, label, section) in profile.sections() {
        let summary = section.summary.trim();
        if summary.is_empty() {
            continue;
        }
        if heading != Some(section_heading) {
            if !out.is_empty() {
                out.push_str(SECTION_SEPARATOR);
            }
            out.push_str(section_heading);
            heading = Some(section_heading);
        }
        out.push_str("\n- ");
        out.push_str(label);
        out.push_str(": ");
        out.push_str(summary);
    }
    out
}

/// `- [{category} | {confidence:.2}] {content}`.
fn fact_line(fact: &FactView<'_>) -> String {
    format!("- [{} | {:.2}] {}", fact.category, fact.confidence, fact.content.trim())
}

/// The longest char-boundary prefix of `text` that fits in `max_tokens` with the marker
/// appended, plus the marker; the marker alone when even that does not fit.
fn truncate(text: &str, max_tokens: usize, counter: &dyn TokenCounter) -> String {
    let with_marker = |end: usize| {
        let mut out = String::with_capacity(end + TRUNCATION_MARKER.len());
        out.push_str(&text[..end]);
        out.push_str(TRUNCATION_MARKER);
        out
    };
    let fits = |end: usize| counter.count(&with_marker(end)) <= max_tokens;
    if !fits(0) {
        return TRUNCATION_MARKER.to_owned();
    }
    // Gallop from a guess of 4 bytes per token, so the cost follows the budget rather than
    // the text: `lo` fits, `hi` is known not to (the whole text does not fit even alone).
    let mut lo = 0usize;
    let mut step = max_tokens.saturating_mul(4).max(16);
    let mut hi = text.len();
    loop {
        let probe = floor_char_boundary(text, lo.saturating_add(step).min(text.len()));
        if probe <= lo || probe >= hi {
            break;
        }
        if fits(probe) {
            lo = probe;
            step = step.saturating_mul(2);
        } else {
            hi = probe;
            break;
        }
    }
    // Bisect the char boundaries strictly between `lo` and `hi`.
    loop {
        let mut mid = floor_char_boundary(text, lo + (hi - lo) / 2);
        if mid <= lo {
            mid = ceil_char_boundary(text, lo + 1);
        }
        if mid >= hi {
            break;
        }
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    with_marker(lo)
}

/// The greatest char boundary of `text` at or before `index` (which is at most its length).
fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// The least char boundary of `text` at or after `index`, or its length.
fn ceil_char_boundary(text: &str, mut index: usize) -> usize {
    while index < text.len() && !text.is_char_boundary(index) {
        index += 1;
    }
    index.min(text.len())
}

#[cfg(test)]
mod tests;
