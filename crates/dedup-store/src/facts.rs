//! The fact memory (seed 002): facts about the user and the profile summaries.
//!
//! The values [`Store::add_fact`](crate::Store::add_fact) and its siblings take and
//! return. The rules they apply (categories, the casefolded duplicate key, the policy,
//! prompt formatting) live in `dedup-core`; the queries in the store's backends.

use chrono::{DateTime, Utc};
use dedup_core::{FactCategory, FactView};
use serde::Serialize;

use crate::Scope;

/// Longest fact source the store accepts, in bytes (a thread or message id, a URL).
pub const MAX_SOURCE_BYTES: usize = 1024;

/// A stored fact about the user.
///
/// Serialises with camelCase member names (`createdAt`, `updatedAt`), as the seed's HTTP
/// clients read them, and `scope` as `{"domain": …, "namespace": …}`.
///
/// **Invariants:** `id` is `fact_` and 8 lowercase hex digits, unique in the database;
/// no other fact of the scope has the same [`fact_key`](dedup_core::fact_key) of its
/// content; `confidence` is in `[0, 1]`; `created_at` never changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fact {
    /// Its id, `fact_` and 8 lowercase hex digits.
    pub id: String,
    /// Its (domain, namespace): facts are kept and deduplicated per scope.
    pub scope: Scope,
    /// The text, exactly as given.
    pub content: String,
    /// What it is about.
    pub category: FactCategory,
    /// How sure the extractor was, in `[0, 1]`.
    pub confidence: f64,
    /// Where it came from (a thread id, say), if recorded.
    pub source: Option<String>,
    /// When it was stored (UTC, microseconds).
    pub created_at: DateTime<Utc>,
    /// When it last changed (UTC, microseconds).
    pub updated_at: DateTime<Utc>,
}

impl Fact {
    /// What [`dedup_core::format_context`] needs of it.
    pub fn view(&self) -> FactView<'_> {
        FactView { content: &self.content, category: self.category, confidence: self.confidence }
    }
}

/// A fact to add with [`Store::add_fact`](crate::Store::add_fact).
#[derive(Debug, Clone, PartialEq)]
pub struct NewFact {
    /// Its (domain, namespace).
    pub scope: Scope,
    /// The text: not blank, at most [`MAX_CONTENT_BYTES`](crate::MAX_CONTENT_BYTES), no NUL.
    pub content: String,
    /// What it is about.
    pub category: FactCategory,
    /// A finite number in `[0, 1]`.
    pub confidence: f64,
    /// Where it came from: at most [`MAX_SOURCE_BYTES`], no NUL.
    pub source: Option<String>,
}

impl NewFact {
    /// A fact with no source.
    pub fn new(scope: Scope, content: impl Into<String>, category: FactCategory, confidence: f64) -> NewFact {
        NewFact { scope, content: content.into(), category, confidence, source: None }
    }

    /// Records where it came from.
    pub fn with_source(mut self, source: impl Into<String>) -> NewFact {
        self.source = Some(source.into());
        self
    }
}

/// The fields [`Store::update_fact`](crate::Store::update_fact) changes; `None` leaves a
/// field as it is. The source and the creation time never change.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FactUpdate {
    /// New text (validated like [`NewFact::content`]).
    pub content: Option<String>,
    /// New category.
    pub category: Option<FactCategory>,
    /// New confidence, a finite number in `[0, 1]`.
    pub confidence: Option<f64>,
}

impl FactUpdate {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.content.is_none() && self.category.is_none() && self.confidence.is_none()
    }
}

/// What [`Store::add_fact`](crate::Store::add_fact) did. Serialises as an object tagged
/// by `outcome`: `added`, `duplicate`, `outranked` or `low_confidence`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum FactOutcome {
    /// The fact was stored.
    Added {
        /// The fact as stored.
        fact: Fact,
        /// Facts removed to stay within the policy's `max_facts`, lowest confidence first
        /// (oldest first among equals): empty unless the scope was full; more than one only
        /// when the scope held more facts than a lowered limit allows.
        evicted: Vec<Fact>,
    },
    /// A fact of the scope has the same casefolded content; nothing changed.
    Duplicate {
        /// That fact, unchanged.
        existing: Fact,
    },
    /// The scope holds `max_facts` facts and every one this fact would displace has a
    /// higher confidence: keeping it would drop a better fact, so nothing was written.
    Outranked {
        /// The fact's confidence.
        confidence: f64,
        /// The lowest confidence a fact of the scope would need to beat (the highest
        /// among those it would have displaced).
        lowest_kept: f64,
        /// The policy's limit.
        max_facts: usize,
    },
    /// The confidence is below the policy's threshold; nothing was written.
    LowConfidence {
        /// The fact's confidence.
        confidence: f64,
        /// The threshold it missed.
        threshold: f64,
    },
}

impl FactOutcome {
    /// The fact stored, if one was.
    pub fn added(&self) -> Option<&Fact> {
        match self {
            FactOutcome::Added { fact, .. } => Some(fact),
            _ => None,
        }
    }
}
