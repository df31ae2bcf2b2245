//! A deterministic generator of realistic playbooks with planted paraphrase near duplicates, for benchmarks.
//!
//! Sentences are 8 to 20 words, `head verb object context[reason].`, from per-section
//! phrase banks. Each base entry has its own (subject, verb, object) so that distinct
//! entries say distinct things; the context is a free qualifier. About 15% of entries
//! paraphrase an earlier one: context moved to the front, sometimes another head word and
//! a few synonyms, placed in a random section, the way an agent re-learns a lesson in
//! other words. Randomness comes from a 64-bit LCG: the same seed gives the same file.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

/// The canonical sections with their entry name prefixes, in canonical order.
const SECTIONS: [(&str, &str); 5] = [
    ("PATTERNS & APPROACHES", "pat"),
    ("MISTAKES TO AVOID", "mis"),
    ("USER PREFERENCES", "pref"),
    ("PROJECT CONTEXT", "ctx"),
    ("OTHERS", "oth"),
];

/// Percentage of entries that paraphrase an earlier one.
const NEAR_DUPLICATE_PERCENT: usize = 15;

/// Phrase banks for one section.
struct Bank {
    /// Sentence openers. When `subject_heads`, each is a different subject (a different
    /// fact); otherwise they are interchangeable wordings.
    heads: &'static [&'static str],
    subject_heads: bool,
    verbs: &'static [&'static str],
    /// Objects that fit every verb; `[""]` when the verbs are whole predicates.
    objects: &'static [&'static str],
    contexts: &'static [&'static str],
    reasons: &'static [&'static str],
}

/// Software components: objects of the pattern and mistake verbs.
const COMPONENTS: &[&str] = &[
    "the payment API",
    "the CSV importer",
    "the auth middleware",
    "the search indexer",
    "the email worker",
    "the billing reports",
    "the mobile sync endpoint",
    "the feature flag service",
    "the image resizer",
    "the webhook dispatcher",
    "the audit log writer",
    "the pricing engine",
    "the GraphQL gateway",
    "the data export job",
    "the rate limiter",
    "the login service",
    "the notification queue",
    "the PDF renderer",
    "the geocoding client",
    "the cache warmer",
];

const ENGINEERING_CONTEXTS: &[&str] = &[
    "before merging a feature branch",
    "after changing the database schema",
    "when the CI build fails",
    "before deploying to production",
    "while refactoring legacy modules",
    "after upgrading the compiler",
    "when a customer reports a bug",
    "during the weekly release",
    "after a production incident",
    "before cutting a release branch",
    "while reviewing a teammate's code",
    "on a Friday afternoon",
    "during an active incident",
    "in the last hour before a release",
];

const BANKS: [Bank; 5] = [
    Bank {
        heads: &["Always", "Make sure to", "Remember to", "Prefer to"],
        subject_heads: false,
        verbs: &[
            "write integration tests for",
            "profile",
            "document",
            "add structured logging to",
            "set explicit timeouts in",
            "pin the dependencies of",
            "add metrics to",
            "review every change to",
            "load-test",
            "add retries with backoff to",
            "keep a changelog for",
            "validate the inputs of",
        ],
        objects: COMPONENTS,
        contexts: ENGINEERING_CONTEXTS,
        reasons: &[
            " so regressions are caught early",
            " because rollbacks are expensive",
            " to keep reviews fast",
            " so failures are easy to trace",
            " because it saved hours last time",
        ],
    },
    Bank {
        heads: &["Never", "Do not", "Don't"],
        subject_heads: false,
        verbs: &[
            "hard-code credentials in",
            "disable the tests of",
            "deploy untested changes to",
            "skip code review for",
            "bypass the rate limits of",
            "edit production data behind",
            "ignore the error logs of",
            "delete old migrations of",
            "restart without draining",
            "mock the database in tests of",
            "change the public schema of",
            "share admin tokens for",
        ],
        objects: COMPONENTS,
        contexts: ENGINEERING_CONTEXTS,
        reasons: &[
            " because it broke the build for everyone",
            " since it caused an outage before",
            " as it hides real failures",
            " because it can lose customer data",
        ],
    },
    Bank {
        heads: &["The user prefers", "The user likes", "The user wants"],
        subject_heads: false,
        verbs: &[
            "short",
            "detailed",
            "plain-English",
            "example-first",
            "bullet-point",
            "British-English",
            "lowercase",
            "emoji-free",
            "numbered",
            "table-based",
            "link-rich",
            "jargon-free",
            "consistent",
            "timestamped",
            "versioned",
            "annotated",
        ],
        objects: &[
            "commit messages",
            "release notes",
            "code comments",
            "error messages",
            "status reports",
            "pull request descriptions",
            "API docs",
            "log lines",
            "test names",
            "design documents",
            "meeting notes",
            "changelog entries",
            "shell script output",
            "dashboards",
            "onboarding guides",
            "incident summaries",
        ],
        contexts: &[
            "when the deadline is close",
            "in code reviews",
            "for the mobile team",
            "on client projects",
            "during pair programming",
            "for data analysis work",
            "when planning new features",
            "for quick questions",
        ],
        reasons: &[
            " and has asked for it repeatedly",
            " as stated in the kickoff call",
            " because it is easier to skim",
        ],
    },
    Bank {
        heads: &[
            "The billing service",
            "The web frontend",
            "The ingestion pipeline",
            "The mobile app",
            "The search index",
            "The nightly export job",
            "The admin dashboard",
            "The recommendation model",
            "The auth gateway",
            "The reporting warehouse",
            "The support chat bot",
            "The payments ledger",
            "The image CDN",
            "The partner API",
        ],
        subject_heads: true,
        verbs: &[
            "runs on Postgres 15",
            "is deployed with Kubernetes",
            "depends on the legacy auth library",
            "uses Redis as a cache",
            "is owned by the platform team",
            "reads events from Kafka",
            "stores uploaded files in S3",
            "is written in TypeScript",
            "targets Python 3.11",
            "has no automated tests yet",
            "is rate limited to 100 requests per second",
            "exports metrics to Prometheus",
            "is built with Gradle",
            "sends alerts to the ops channel",
            "is hosted in the Frankfurt region",
            "has a 99.9% uptime target",
            "is scheduled for a rewrite next quarter",
            "shares a database with the CRM",
            "is configured through environment variables",
            "logs to Elasticsearch",
        ],
        objects: &[""],
        contexts: &[
            "in the staging environment",
            "since the March migration",
            "for the European customers",
            "in production",
            "as of the last release",
            "according to the architecture notes",
            "for the enterprise plan",
        ],
        reasons: &[
            " so plan changes around it",
            " which surprises new contributors",
            " and that is unlikely to change soon",
        ],
    },
    Bank {
        heads: &[
            "The team",
            "The on-call engineer",
            "The product manager",
            "The release captain",
            "The security lead",
            "The data team",
            "The support desk",
            "The CTO",
            "The QA lead",
            "The design team",
        ],
        subject_heads: true,
        verbs: &[
            "meets every Tuesday at ten",
            "expects a summary in the channel",
            "reviews the dashboards every morning",
            "approves schema changes",
            "keeps a runbook in the wiki",
            "announces deploys in the chat",
            "tracks tech debt in a spreadsheet",
            "prefers async updates over meetings",
            "writes a short incident report",
            "reviews open bugs with support",
            "owns the quarterly roadmap",
            "signs off on every vendor contract",
            "runs the monthly security drill",
            "maintains the staging credentials",
            "hosts a demo every other Friday",
            "triages new tickets before lunch",
            "publishes the sprint goals on Monday",
            "rotates the on-call schedule weekly",
            "keeps the style guide up to date",
            "answers customer escalations within a day",
            "reviews cloud costs every month",
            "collects feedback after each release",
            "approves production access requests",
            "books the room for the retro",
        ],
        objects: &[""],
        contexts: &[
            "during the holiday freeze",
            "after each incident",
            "in the first week of each month",
            "when the budget is reviewed",
            "for cross-team projects",
            "before every quarterly planning",
        ],
        reasons: &[" so keep them in the loop", " and expects the same from others", " to keep everyone aligned"],
    },
];

/// Word swaps a paraphrase may apply (whole words, first match each).
const SYNONYMS: [(&str, &str); 12] = [
    ("write", "add"),
    ("changes", "edits"),
    ("short", "brief"),
    ("detailed", "thorough"),
    ("prefers", "favours"),
    ("likes", "prefers"),
    ("every", "each"),
    ("reviews", "checks"),
    ("approves", "green-lights"),
    ("uses", "relies on"),
    ("runs", "operates"),
    ("hard-code", "embed"),
];

/// A generated playbook and how it was made.
pub struct SyntheticPlaybook {
    /// The playbook document.
    pub doc: Value,
    /// How many entries paraphrase an earlier one.
    pub near_duplicates: usize,
}

/// A 64-bit linear congruential generator (Knuth's MMIX constants); the high bits are used.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }

    /// Uniform enough in `0..n` for `n` far below 2^31.
    fn below(&mut self, n: usize) -> usize {
        self.next() as usize % n.max(1)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// The parts of a base sentence, kept so it can be paraphrased later.
struct Parts {
    section: usize,
    head: &'static str,
    body: String,
    context: &'static str,
    reason: &'static str,
}

fn word_count(s: &str) -> usize {
    s.split_whitespace().count()
}

fn fits(s: &str) -> bool {
    (8..=20).contains(&word_count(s))
}

fn capitalise(s: &str) -> String {
    let mut chars = s.chars();
    chars.next().map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

/// Lowercases the first letter, except in acronyms ("CTO", "QA lead").
fn lower_first(s: &str) -> String {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(c), Some(d)) if c.is_uppercase() && !d.is_uppercase() => {
            c.to_lowercase().chain(std::iter::once(d)).chain(chars).collect()
        }
        _ => s.to_owned(),
    }
}

fn base_sentence(p: &Parts) -> String {
    format!("{} {} {}{}.", p.head, p.body, p.context, p.reason)
}

/// The sentence with its context moved to the front: same words, same count.
fn reordered(p: &Parts) -> String {
    format!("{}, {} {}{}.", capitalise(p.context), lower_first(p.head), p.body, p.reason)
}

/// Context first, maybe another head, a few synonyms: same meaning, other words.
fn paraphrase(p: &Parts, rng: &mut Lcg) -> String {
    let bank = &BANKS[p.section];
    let head = if !bank.subject_heads && rng.below(2) == 0 { rng.pick(bank.heads) } else { p.head };
    let mut body = p.body.clone();
    for (from, to) in SYNONYMS {
        if rng.below(2) == 0 {
            body = swap_word(&body, from, to);
        }
    }
    format!("{}, {} {}{}.", capitalise(p.context), lower_first(head), body, p.reason)
}

fn swap_word(text: &str, from: &str, to: &str) -> String {
    let mut done = false;
    text.split(' ')
        .map(|w| {
            if !done && w == from {
                done = true;
                to
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Identity of a base entry: section, subject (0 unless heads are subjects), verb, object.
type Key = (usize, usize, usize, usize);

/// Draws a new base entry of 8 to 18 words whose [`Key`] was not used yet. After many
/// misses (a playbook larger than the phrase banks) repeats are allowed rather than
/// looping forever.
fn new_parts(rng: &mut Lcg, used: &mut HashSet<Key>) -> Parts {
    let mut misses = 0;
    loop {
        let section = rng.below(SECTIONS.len());
        let bank = &BANKS[section];
        let head = rng.below(bank.heads.len());
        let verb = rng.below(bank.verbs.len());
        let object = rng.below(bank.objects.len());
        let reason = if rng.below(3) == 0 { "" } else { rng.pick(bank.reasons) };
        let body = match bank.objects[object] {
            "" => bank.verbs[verb].to_owned(),
            o => format!("{} {o}", bank.verbs[verb]),
        };
        let parts = Parts { section, head: bank.heads[head], body, context: rng.pick(bank.contexts), reason };
        // A paraphrase changes the length by -2..=+2 words; `generate` falls back to
        // `reordered` (same length) when that leaves 8..=20.
        if !(8..=18).contains(&word_count(&base_sentence(&parts))) {
            continue;
        }
        let subject = if bank.subject_heads { head } else { 0 };
        if used.insert((section, subject, verb, object)) || misses > 200 {
            return parts;
        }
        misses += 1;
    }
}

/// Generates a playbook of `entries` entries over the five canonical sections.
pub fn generate(entries: usize, seed: u64) -> SyntheticPlaybook {
    let mut rng = Lcg(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut used = HashSet::new();
    let mut bases: Vec<Parts> = Vec::new();
    let mut sections: Vec<Vec<Value>> = vec![Vec::new(); SECTIONS.len()];
    let mut near_duplicates = 0;
    for i in 0..entries {
        let planted = i >= 10 && rng.below(100) < NEAR_DUPLICATE_PERCENT;
        let (section, text) = if planted {
            let original = &bases[rng.below(bases.len())];
            let mut text = paraphrase(original, &mut rng);
            if !fits(&text) {
                text = reordered(original);
            }
            near_duplicates += 1;
            (rng.below(SECTIONS.len()), text)
        } else {
            let parts = new_parts(&mut rng, &mut used);
            let out = (parts.section, base_sentence(&parts));
            bases.push(parts);
            out
        };
        let list = &mut sections[section];
        list.push(json!({
            "name": format!("{}-{:03}", SECTIONS[section].1, list.len() + 1),
            "text": text,
            "helpful": rng.below(13),
            "harmful": rng.below(4),
        }));
    }
    let mut map = Map::new();
    for ((name, _), list) in SECTIONS.iter().zip(sections) {
        map.insert((*name).to_owned(), Value::Array(list));
    }
    SyntheticPlaybook {
        doc: json!({
            "version": "1.0",
            "last_updated": "2026-11-01T00:00:00Z",
            "sections": map,
        }),
        near_duplicates,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(doc: &Value) -> Vec<String> {
        doc["sections"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|v| v.as_array().unwrap())
            .map(|e| e["text"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn same_seed_same_playbook() {
        assert_eq!(generate(200, 7).doc, generate(200, 7).doc);
        assert_ne!(generate(200, 7).doc, generate(200, 8).doc);
    }

    #[test]
    fn thousand_entries_shape() {
        let pb = generate(1000, 42);
        let texts = texts(&pb.doc);
        assert_eq!(texts.len(), 1000);
        for t in &texts {
            assert!(fits(t), "{} words: {t}", word_count(t));
        }
        let sections = pb.doc["sections"].as_object().unwrap();
        assert_eq!(sections.len(), 5);
        for (name, list) in sections {
            let n = list.as_array().unwrap().len();
            assert!(n > 150, "{name} is too small: {n}");
        }
        assert!((100..=200).contains(&pb.near_duplicates), "{} near duplicates", pb.near_duplicates);
        let distinct: HashSet<&String> = texts.iter().collect();
        assert!(distinct.len() > 950, "{} distinct texts", distinct.len());
        let names: HashSet<&str> =
            sections.values().flat_map(|v| v.as_array().unwrap()).map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names.len(), 1000, "names are unique");
    }

    #[test]
    fn larger_than_the_banks_still_terminates() {
        assert_eq!(texts(&generate(2000, 1).doc).len(), 2000);
    }

    #[test]
    fn paraphrase_moves_the_context_first() {
        let parts = Parts {
            section: 0,
            head: "Always",
            body: "profile the payment API".into(),
            context: "before merging a feature branch",
            reason: " so regressions are caught early",
        };
        assert_eq!(
            base_sentence(&parts),
            "Always profile the payment API before merging a feature branch so regressions are caught early."
        );
        let p = paraphrase(&parts, &mut Lcg(1));
        assert!(p.starts_with("Before merging a feature branch, "), "{p}");
        assert!(p.ends_with(" the payment API so regressions are caught early."), "{p}");
        assert_eq!(lower_first("The user"), "the user");
        assert_eq!(lower_first("CTO"), "CTO");
        assert_eq!(lower_first("QA lead"), "QA lead");
    }
}
