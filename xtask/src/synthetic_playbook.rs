//! A deterministic generator of realistic playbooks with planted paraphrase near duplicates, for benchmarks.
//!
//! Sentences are 8 to 20 words, built from per-section phrase banks (`head body context
//! [reason].`). About 15% of entries are paraphrases of an earlier entry: the context
//! moved to the front, sometimes another head word and a few synonyms, placed in a random
//! section, the way an agent re-learns a lesson in other words. Randomness comes from a
//! 64-bit LCG, so the same seed always gives the same file.

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
const NEAR_DUPLICATE_PERCENT: u32 = 15;

/// Phrase banks for one section: `head body context[reason].`
struct Bank {
    heads: &'static [&'static str],
    bodies: &'static [&'static str],
    contexts: &'static [&'static str],
    reasons: &'static [&'static str],
}

const BANKS: [Bank; 5] = [
    Bank {
        heads: &["Always", "Make sure to", "Remember to", "Prefer to"],
        bodies: &[
            "run the full test suite",
            "pin exact dependency versions",
            "write a failing test first",
            "check the service logs",
            "review the whole diff",
            "back up the production database",
            "rotate the API credentials",
            "update the changelog entry",
            "profile the slow code path",
            "validate every user input",
            "add type hints to function parameters",
            "split large functions into small ones",
            "put risky changes behind feature flags",
            "document the public API",
            "squash fixup commits",
            "tag the release commit",
            "measure peak memory usage",
            "run the linter locally",
            "read the existing tests",
            "ask for the acceptance criteria",
            "keep pull requests small",
            "cache expensive HTTP responses",
            "log the request identifier",
            "set explicit timeouts on network calls",
            "restart the worker processes",
        ],
        contexts: &[
            "before merging a feature branch",
            "after changing the database schema",
            "when the CI build fails",
            "before deploying to production",
            "while refactoring legacy modules",
            "when onboarding a new service",
            "after upgrading the compiler",
            "before starting a large refactor",
            "when a customer reports a bug",
            "during the weekly release",
            "after a production incident",
            "when adding a new endpoint",
            "before cutting a release branch",
            "while reviewing a teammate's code",
            "when the test suite is flaky",
            "after editing configuration files",
        ],
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
        bodies: &[
            "force-push to the main branch",
            "hard-code API keys in source files",
            "skip the database migrations",
            "ignore failing integration tests",
            "commit generated build artifacts",
            "disable TLS certificate checks",
            "swallow errors without logging them",
            "edit the lock file by hand",
            "trade during low-volume weekends",
            "reuse a stale access token",
            "change two services in one commit",
            "merge without a code review",
            "delete log files on the server",
            "run untested scripts as root",
            "mock the database in end-to-end tests",
            "use the any type in TypeScript",
            "leave debug prints in committed code",
            "store passwords in plain text",
            "restart the database during peak hours",
            "copy secrets into chat messages",
        ],
        contexts: &[
            "before deploying to production",
            "when the release is already late",
            "during an active incident",
            "when working on the payment code",
            "on shared staging machines",
            "in customer-facing repositories",
            "when the on-call engineer is away",
            "while a migration is running",
            "in the last hour before a release",
            "when tests are slow",
            "on a Friday afternoon",
            "in a hurry to close a ticket",
            "when a reviewer is not available",
            "during a database failover",
        ],
        reasons: &[
            " because it broke the build for everyone",
            " since it caused an outage before",
            " as it hides real failures",
            " because it can lose customer data",
        ],
    },
    Bank {
        heads: &["The user prefers", "The user likes", "The user wants"],
        bodies: &[
            "short answers with code first",
            "British spelling in documentation",
            "spaces instead of tabs",
            "small focused commits",
            "explanations before large diffs",
            "Python examples over pseudo-code",
            "bullet lists instead of long paragraphs",
            "pytest over unittest",
            "explicit error messages",
            "metric units in reports",
            "ISO dates in file names",
            "one question at a time",
            "commit messages in the imperative mood",
            "links to the official documentation",
            "minimal external dependencies",
            "tables for comparing options",
        ],
        contexts: &[
            "when debugging production issues",
            "in code reviews",
            "for weekly status updates",
            "when writing shell scripts",
            "in pull request descriptions",
            "during pair programming",
            "for data analysis notebooks",
            "when planning new features",
            "in release notes",
            "for quick questions",
            "when reading error logs",
            "for architecture discussions",
            "in design documents",
            "when estimating work",
            "for onboarding material",
            "in chat replies",
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
        ],
        bodies: &[
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
        ],
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
        ],
        bodies: &[
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
        ],
        contexts: &[
            "during the holiday freeze",
            "after each incident",
            "in the first week of each month",
            "when the budget is reviewed",
            "for cross-team projects",
            "before every quarterly planning",
        ],
        reasons: &[
            " so keep them in the loop",
            " and expects the same from others",
            " to keep everyone aligned",
        ],
    },
];

/// Word swaps a paraphrase may apply (whole words, first match each).
const SYNONYMS: [(&str, &str); 12] = [
    ("run", "execute"),
    ("database", "DB"),
    ("before", "prior to"),
    ("production", "prod"),
    ("small", "compact"),
    ("check", "inspect"),
    ("failing", "broken"),
    ("prefers", "favours"),
    ("likes", "prefers"),
    ("every", "each"),
    ("large", "big"),
    ("fast", "quick"),
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
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }

    /// Uniform-enough in `0..n` for `n` far below 2^31.
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
    body: &'static str,
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
    chars
        .next()
        .map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

fn lower_first(s: &str) -> String {
    // Keep acronyms as they are ("API keys").
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(c), Some(d)) if c.is_uppercase() && d.is_lowercase() => c
            .to_lowercase()
            .chain(std::iter::once(d))
            .chain(chars)
            .collect(),
        _ => s.to_owned(),
    }
}

fn base_sentence(p: &Parts) -> String {
    format!("{} {} {}{}.", p.head, p.body, p.context, p.reason)
}

/// The sentence with its context moved to the front: same words, same count.
fn reordered(p: &Parts) -> String {
    format!(
        "{}, {} {}{}.",
        capitalise(p.context),
        lower_first(p.head),
        p.body,
        p.reason
    )
}

/// Context first, maybe another head, a few synonyms: same meaning, other words.
fn paraphrase(p: &Parts, rng: &mut Lcg) -> String {
    let bank = &BANKS[p.section];
    let head = if p.section <= 2 && rng.below(2) == 0 {
        rng.pick(bank.heads)
    } else {
        p.head
    };
    let mut body = p.body.to_owned();
    for (from, to) in SYNONYMS {
        if rng.below(2) == 0 {
            body = swap_word(&body, from, to);
        }
    }
    format!(
        "{}, {} {}{}.",
        capitalise(p.context),
        lower_first(head),
        body,
        p.reason
    )
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

/// Sections whose head is the sentence's subject (a different head is a different fact);
/// in the others the heads are interchangeable wordings.
const SUBJECT_HEADS: [bool; 5] = [false, false, false, true, true];

/// Draws a new base entry of at most 18 words whose (section, subject, body, context) was
/// not used yet. After many misses (a playbook larger than the phrase banks) repeats are
/// allowed rather than looping forever.
fn new_parts(rng: &mut Lcg, used: &mut HashSet<(usize, usize, usize, usize)>) -> Parts {
    for attempt in 0.. {
        let section = rng.below(SECTIONS.len());
        let bank = &BANKS[section];
        let head = rng.below(bank.heads.len());
        let body = rng.below(bank.bodies.len());
        let context = rng.below(bank.contexts.len());
        let reason = if rng.below(3) == 0 {
            ""
        } else {
            rng.pick(bank.reasons)
        };
        let parts = Parts {
            section,
            head: bank.heads[head],
            body: bank.bodies[body],
            context: bank.contexts[context],
            reason,
        };
        // A paraphrase's head swap and synonyms change the length by -2..=+3 words;
        // `generate` falls back to `reordered` (same length) if that leaves 8..=20.
        let len = word_count(&base_sentence(&parts));
        let subject = if SUBJECT_HEADS[section] { head } else { 0 };
        if (8..=18).contains(&len)
            && (used.insert((section, subject, body, context)) || attempt > 10_000)
        {
            return parts;
        }
    }
    unreachable!("the loop above only ends by returning")
}

/// Generates a playbook of `entries` entries over the five canonical sections.
pub fn generate(entries: usize, seed: u64) -> SyntheticPlaybook {
    let mut rng = Lcg(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut used = HashSet::new();
    let mut bases: Vec<Parts> = Vec::new();
    let mut sections: Vec<Vec<Value>> = vec![Vec::new(); SECTIONS.len()];
    let mut near_duplicates = 0;
    for i in 0..entries {
        let planted = i >= 10 && (rng.below(100) as u32) < NEAR_DUPLICATE_PERCENT;
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
            assert!(n > 100, "{name} is too small: {n}");
        }
        assert!(
            (100..=200).contains(&pb.near_duplicates),
            "{} near duplicates",
            pb.near_duplicates
        );
        let distinct: HashSet<&String> = texts.iter().collect();
        assert!(distinct.len() > 950, "{} distinct texts", distinct.len());
        let names: HashSet<&str> = sections
            .values()
            .flat_map(|v| v.as_array().unwrap())
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 1000, "names are unique");
    }

    #[test]
    fn paraphrase_keeps_the_meaning_words() {
        let parts = Parts {
            section: 0,
            head: "Always",
            body: "run the full test suite",
            context: "before merging a feature branch",
            reason: " so regressions are caught early",
        };
        assert_eq!(
            base_sentence(&parts),
            "Always run the full test suite before merging a feature branch so regressions are caught early."
        );
        let p = paraphrase(&parts, &mut Lcg(1));
        assert!(p.starts_with("Before merging a feature branch, "), "{p}");
        assert!(p.ends_with(" so regressions are caught early."), "{p}");
        assert_eq!(lower_first("API keys"), "API keys");
        assert_eq!(lower_first("The user"), "the user");
    }
}
