//! The fact memory on the `Store` handle (seed 002), and its queries both backends share
//! (stamped out per backend by `fact_queries!`, like `shared.rs`).
//!
//! Every write that can change which facts a scope holds (add, update) runs in one write
//! transaction under the scope's lock, so the casefold-uniqueness and `max_facts` rules
//! hold under concurrent writers of any process.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use dedup_core::{ContentHash, FactCategory, FactError, FactPolicy, MemoryProfile, fact_key};

use super::{Backend, Store, has_nul, now, validate_text};
use crate::facts::MAX_SOURCE_BYTES;
use crate::{Error, Fact, FactOutcome, FactUpdate, MAX_CONTENT_BYTES, NewFact, Result, Scope};

/// Random ids tried before an insert gives up (each collides with probability
/// facts / 2³²).
pub(super) const ID_ATTEMPTS: usize = 8;

impl Store {
    /// Adds a fact to its scope unless the policy or a duplicate says otherwise (seed 002).
    ///
    /// The input is validated first (content not blank, at most
    /// [`MAX_CONTENT_BYTES`](crate::MAX_CONTENT_BYTES), no NUL; confidence a finite number
    /// in `[0, 1]`; source at most [`MAX_SOURCE_BYTES`](crate::MAX_SOURCE_BYTES), no NUL;
    /// a valid policy), failing with [`Error::InvalidContent`](crate::Error::InvalidContent)
    /// and writing nothing. Then:
    ///
    /// - a confidence below `policy.confidence_threshold` gives
    ///   [`FactOutcome::LowConfidence`] and writes nothing;
    /// - under the scope's write lock, a fact of the scope with the same
    ///   [`fact_key`](dedup_core::fact_key) gives [`FactOutcome::Duplicate`] and changes
    ///   nothing;
    /// - else, when the scope holds `max_facts` facts (or more), the lowest-confidence ones
    ///   (oldest first among equals) would be deleted until one place is free. If any of
    ///   them has a higher confidence than the new fact, the new fact is the one left out:
    ///   [`FactOutcome::Outranked`], nothing written. Otherwise they are deleted (the new
    ///   fact, being the newest, wins a tie);
    /// - the fact is stored with a new id `fact_` + 8 random hex digits:
    ///   [`FactOutcome::Added`].
    ///
    /// Skips are logged at `info` with the content's fingerprint, never its text.
    pub async fn add_fact(&self, fact: NewFact, policy: &FactPolicy) -> Result<FactOutcome> {
        policy.validate().map_err(policy_error)?;
        let prepared = PreparedFact::new(fact)?;
        let fingerprint = prepared.hash.fingerprint();
        let scope = &prepared.fact.scope;
        if !policy.accepts(prepared.fact.confidence) {
            tracing::info!(
                fingerprint,
                %scope,
                confidence = prepared.fact.confidence,
                threshold = policy.confidence_threshold,
                "low-confidence fact skipped"
            );
            return Ok(FactOutcome::LowConfidence {
                confidence: prepared.fact.confidence,
                threshold: policy.confidence_threshold,
            });
        }
        let result = dispatch!(self, b => b.add_fact(&prepared, policy).await);
        let outcome = self.classify(result)?;
        match &outcome {
            FactOutcome::Added { fact, evicted } => {
                for old in evicted {
                    tracing::info!(id = %old.id, confidence = old.confidence, %scope, "fact evicted to stay within max facts");
                }
                tracing::debug!(fingerprint, id = %fact.id, %scope, "fact added");
            }
            FactOutcome::Duplicate { existing } => {
                tracing::info!(fingerprint, existing = %existing.id, %scope, "duplicate fact skipped");
            }
            FactOutcome::Outranked { confidence, lowest_kept, max_facts } => {
                tracing::info!(
                    fingerprint,
                    %scope,
                    confidence,
                    lowest_kept,
                    max_facts,
                    "fact skipped: the scope is full of facts with a higher confidence"
                );
            }
            FactOutcome::LowConfidence { .. } => {}
        }
        Ok(outcome)
    }

    /// The facts of `scope`, highest confidence first (then oldest first, then by id).
    pub async fn list_facts(&self, scope: &Scope) -> Result<Vec<Fact>> {
        let result = dispatch!(self, b => b.list_facts(scope).await);
        self.classify(result)
    }

    /// The fact with this id, if any.
    pub async fn get_fact(&self, id: &str) -> Result<Option<Fact>> {
        if !is_fact_id(id) {
            return Ok(None);
        }
        let result = dispatch!(self, b => b.get_fact(id).await);
        self.classify(result)
    }

    /// Changes the fields `update` provides and returns the fact as stored.
    ///
    /// `created_at` and the source never change; `updated_at` becomes now unless the update
    /// is empty (then the fact is returned as it is). New content is validated like
    /// [`Store::add_fact`]'s and must keep the scope's facts distinct by
    /// [`fact_key`](dedup_core::fact_key): a clash fails with
    /// [`Error::Conflict`](crate::Error::Conflict). An unknown id fails with
    /// [`Error::FactNotFound`](crate::Error::FactNotFound) (seed 002's `KeyError`).
    pub async fn update_fact(&self, id: &str, update: FactUpdate) -> Result<Fact> {
        let prepared = PreparedFactUpdate::new(update)?;
        if !is_fact_id(id) {
            return Err(Error::FactNotFound(id.to_owned()));
        }
        if prepared.is_empty() {
            return self.get_fact(id).await?.ok_or_else(|| Error::FactNotFound(id.to_owned()));
        }
        let result = dispatch!(self, b => b.update_fact(id, &prepared).await);
        let fact = self.classify(result)?;
        tracing::debug!(%id, scope = %fact.scope, "fact updated");
        Ok(fact)
    }

    /// Deletes a fact. An unknown id fails with
    /// [`Error::FactNotFound`](crate::Error::FactNotFound) (seed 002's `KeyError`).
    pub async fn delete_fact(&self, id: &str) -> Result<()> {
        if !is_fact_id(id) {
            return Err(Error::FactNotFound(id.to_owned()));
        }
        let result = dispatch!(self, b => b.delete_fact(id).await);
        self.classify(result)?;
        tracing::debug!(%id, "fact deleted");
        Ok(())
    }

    /// The profile summaries of `scope`; empty ones when none were stored.
    pub async fn profile(&self, scope: &Scope) -> Result<MemoryProfile> {
        let result = dispatch!(self, b => b.profile(scope).await);
        let Some(json) = self.classify(result)? else { return Ok(MemoryProfile::default()) };
        serde_json::from_str(&json).map_err(|e| Error::Corrupt {
            table: "memory_profiles",
            reason: format!("profile of {scope} is not a valid profile: {e}"),
        })
    }

    /// Stores the profile summaries of `scope`, replacing any stored before.
    ///
    /// Fails with [`Error::InvalidContent`](crate::Error::InvalidContent) when a string
    /// holds a NUL or the profile is over
    /// [`MAX_CONTENT_BYTES`](crate::MAX_CONTENT_BYTES) as JSON.
    pub async fn put_profile(&self, scope: &Scope, profile: &MemoryProfile) -> Result<()> {
        let mut value = serde_json::to_value(profile)
            .map_err(|e| Error::InvalidContent { what: "profile", reason: format!("cannot be serialised: {e}") })?;
        redact_json(&mut value);
        if has_nul(&value) {
            return Err(Error::InvalidContent {
                what: "profile",
                reason: "must not contain NUL characters".to_owned(),
            });
        }
        let json = value.to_string();
        if json.len() > MAX_CONTENT_BYTES {
            return Err(Error::InvalidContent {
                what: "profile",
                reason: format!("is {} bytes as JSON, over the limit of {MAX_CONTENT_BYTES} bytes", json.len()),
            });
        }
        let result = dispatch!(self, b => b.put_profile(scope, &json).await);
        self.classify(result)?;
        tracing::debug!(%scope, "profile stored");
        Ok(())
    }
}

/// An invalid policy is the caller's input error.
fn policy_error(error: FactError) -> Error {
    let reason = match error {
        FactError::InvalidPolicy { reason } => reason,
        other => other.to_string(),
    };
    Error::InvalidContent { what: "fact policy", reason }
}

/// Whether `id` has the shape of a fact id: `fact_` and 8 lowercase hex digits.
fn is_fact_id(id: &str) -> bool {
    id.strip_prefix("fact_")
        .is_some_and(|hex| hex.len() == 8 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// A new random fact id: `fact_` and 8 lowercase hex digits.
pub(super) fn new_fact_id() -> String {
    let mut id = String::with_capacity(13);
    id.push_str("fact_");
    // Writing to a String cannot fail.
    let _ = write!(id, "{:08x}", rand::random::<u32>());
    id
}

/// Checks a confidence: a finite number in `[0, 1]`.
fn validate_confidence(confidence: f64) -> Result<()> {
    if confidence.is_finite() && (0.0..=1.0).contains(&confidence) {
        Ok(())
    } else {
        Err(Error::InvalidContent {
            what: "confidence",
            reason: format!("must be a number in [0, 1], got {confidence}"),
        })
    }
}

/// Checks fact content and returns its key: valid like memory content, and not blank by
/// Python's idea of whitespace either.
fn content_key(content: &str) -> Result<String> {
    validate_text("content", content, MAX_CONTENT_BYTES)?;
    let key = fact_key(content);
    if key.is_empty() {
        return Err(Error::InvalidContent { what: "content", reason: "must not be empty or blank".to_owned() });
    }
    Ok(key)
}

/// Every string of `value` with credentials redacted.
fn redact_json(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text) => *text = redact(std::mem::take(text)),
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact_json),
        serde_json::Value::Object(map) => map.values_mut().for_each(redact_json),
        _ => {}
    }
}

/// `text` with credentials replaced by `[REDACTED:<kind>]`.
pub(super) fn redact(text: String) -> String {
    let (redacted, kinds) = dedup_core::redact_secrets(&text);
    if kinds.is_empty() {
        return text;
    }
    tracing::info!(redacted = kinds.len(), "credentials redacted from a fact");
    redacted
}

/// A validated [`NewFact`] with its key and fingerprint.
pub(super) struct PreparedFact {
    pub(super) fact: NewFact,
    pub(super) key: String,
    pub(super) hash: ContentHash,
}

impl PreparedFact {
    /// Credentials in the content and source are redacted first (facts come from
    /// conversations, where keys get pasted; see docs/SECRETS.md).
    fn new(mut fact: NewFact) -> Result<PreparedFact> {
        fact.scope.check_writable()?;
        fact.content = redact(fact.content);
        fact.source = fact.source.map(redact);
        let key = content_key(&fact.content)?;
        validate_confidence(fact.confidence)?;
        if let Some(source) = &fact.source {
            validate_text("source", source, MAX_SOURCE_BYTES)?;
        }
        let hash = ContentHash::of_raw(&fact.content);
        Ok(PreparedFact { fact, key, hash })
    }
}

/// A validated [`FactUpdate`]: new content comes with its key.
pub(super) struct PreparedFactUpdate {
    pub(super) content: Option<(String, String)>,
    pub(super) category: Option<FactCategory>,
    pub(super) confidence: Option<f64>,
    pub(super) now: DateTime<Utc>,
}

impl PreparedFactUpdate {
    fn new(update: FactUpdate) -> Result<PreparedFactUpdate> {
        let content = match update.content.map(redact) {
            Some(content) => {
                let key = content_key(&content)?;
                Some((content, key))
            }
            None => None,
        };
        if let Some(confidence) = update.confidence {
            validate_confidence(confidence)?;
        }
        Ok(PreparedFactUpdate { content, category: update.category, confidence: update.confidence, now: now() })
    }

    fn is_empty(&self) -> bool {
        self.content.is_none() && self.category.is_none() && self.confidence.is_none()
    }
}

/// A `facts` row as selected by the backends (all but `content_key`).
#[derive(sqlx::FromRow)]
pub(super) struct FactRecord {
    pub(super) id: String,
    domain: String,
    namespace: String,
    content: String,
    category: String,
    pub(super) confidence: f64,
    source: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<FactRecord> for Fact {
    type Error = Error;

    fn try_from(row: FactRecord) -> Result<Fact> {
        let id = row.id;
        let corrupt = |reason: String| Error::Corrupt { table: "facts", reason: format!("id {id}: {reason}") };
        let scope = Scope::new(&row.domain, &row.namespace).map_err(|e| corrupt(e.to_string()))?;
        let category: FactCategory = row.category.parse().map_err(|e: FactError| corrupt(e.to_string()))?;
        if !(0.0..=1.0).contains(&row.confidence) {
            return Err(corrupt(format!("confidence {} is not in [0, 1]", row.confidence)));
        }
        Ok(Fact {
            id,
            scope,
            content: row.content,
            category,
            confidence: row.confidence,
            source: row.source,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

/// The `facts` columns, in the shape of `FactRecord`.
macro_rules! fact_columns {
    () => {
        "id, domain, namespace, content, category, confidence, source, created_at, updated_at"
    };
}

/// Stamps out the fact queries for `$backend` in a child module `fact_queries`. `$json` is
/// what follows a bound parameter to make it a JSON column value (`""` or `"::jsonb"`).
macro_rules! fact_queries {
    ($backend:ident, json_param = $json:literal) => {
        mod fact_queries {
            use dedup_core::FactPolicy;

            use super::*;
            use crate::store::facts::{FactRecord, ID_ATTEMPTS, PreparedFact, PreparedFactUpdate, new_fact_id};
            use crate::store::now;
            use crate::{Error, Fact, FactOutcome, Result, Scope};

            impl $backend {
                pub(in crate::store) async fn add_fact(
                    &self,
                    prepared: &PreparedFact,
                    policy: &FactPolicy,
                ) -> Result<FactOutcome> {
                    let new = &prepared.fact;
                    let scope = &new.scope;
                    let mut write = self.begin_write().await?;
                    lock_scope(write.conn(), scope).await?;
                    let existing: Option<FactRecord> = sqlx::query_as(concat!(
                        "SELECT ",
                        fact_columns!(),
                        " FROM facts WHERE domain = $1 AND namespace = $2 AND content_key = $3"
                    ))
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .bind(&prepared.key)
                    .fetch_optional(write.conn())
                    .await?;
                    if let Some(existing) = existing {
                        return Ok(FactOutcome::Duplicate { existing: Fact::try_from(existing)? });
                    }

                    let count: i64 =
                        sqlx::query_scalar("SELECT COUNT(*) FROM facts WHERE domain = $1 AND namespace = $2")
                            .bind(scope.domain())
                            .bind(scope.namespace_name())
                            .fetch_one(write.conn())
                            .await?;
                    let max = i64::try_from(policy.max_facts).unwrap_or(i64::MAX);
                    let excess = count.saturating_sub(max).saturating_add(1);
                    let mut evicted = Vec::new();
                    if excess > 0 {
                        let victims: Vec<FactRecord> = sqlx::query_as(concat!(
                            "SELECT ",
                            fact_columns!(),
                            " FROM facts WHERE domain = $1 AND namespace = $2 \
                             ORDER BY confidence ASC, created_at ASC, id ASC LIMIT $3"
                        ))
                        .bind(scope.domain())
                        .bind(scope.namespace_name())
                        .bind(excess)
                        .fetch_all(write.conn())
                        .await?;
                        // The newcomer must rank above every fact it would push out (it
                        // wins a tie, being the newest); else it is the one left out.
                        let highest_victim = victims.iter().map(|v| v.confidence).fold(f64::NEG_INFINITY, f64::max);
                        if new.confidence < highest_victim {
                            return Ok(FactOutcome::Outranked {
                                confidence: new.confidence,
                                lowest_kept: highest_victim,
                                max_facts: policy.max_facts,
                            });
                        }
                        for victim in victims {
                            sqlx::query("DELETE FROM facts WHERE id = $1")
                                .bind(&victim.id)
                                .execute(write.conn())
                                .await?;
                            evicted.push(Fact::try_from(victim)?);
                        }
                    }

                    let created_at = now();
                    for _ in 0..ID_ATTEMPTS {
                        let id = new_fact_id();
                        let inserted: Option<String> = sqlx::query_scalar(
                            "INSERT INTO facts (id, domain, namespace, content, content_key, category, confidence, \
                             source, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9) \
                             ON CONFLICT (id) DO NOTHING RETURNING id",
                        )
                        .bind(&id)
                        .bind(scope.domain())
                        .bind(scope.namespace_name())
                        .bind(&new.content)
                        .bind(&prepared.key)
                        .bind(new.category.as_str())
                        .bind(new.confidence)
                        .bind(new.source.as_deref())
                        .bind(created_at)
                        .fetch_optional(write.conn())
                        .await?;
                        if inserted.is_none() {
                            continue;
                        }
                        write.commit().await?;
                        let fact = Fact {
                            id,
                            scope: scope.clone(),
                            content: new.content.clone(),
                            category: new.category,
                            confidence: new.confidence,
                            source: new.source.clone(),
                            created_at,
                            updated_at: created_at,
                        };
                        return Ok(FactOutcome::Added { fact, evicted });
                    }
                    Err(Error::Conflict { reason: format!("no free fact id found in {ID_ATTEMPTS} random tries") })
                }

                pub(in crate::store) async fn list_facts(&self, scope: &Scope) -> Result<Vec<Fact>> {
                    let records: Vec<FactRecord> = sqlx::query_as(concat!(
                        "SELECT ",
                        fact_columns!(),
                        " FROM facts WHERE domain = $1 AND namespace = $2 \
                         ORDER BY confidence DESC, created_at ASC, id ASC"
                    ))
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .fetch_all(&self.pool)
                    .await?;
                    records.into_iter().map(Fact::try_from).collect()
                }

                pub(in crate::store) async fn get_fact(&self, id: &str) -> Result<Option<Fact>> {
                    let mut conn = self.pool.acquire().await?;
                    fact_on(&mut conn, id).await
                }

                pub(in crate::store) async fn update_fact(
                    &self,
                    id: &str,
                    update: &PreparedFactUpdate,
                ) -> Result<Fact> {
                    let not_found = || Error::FactNotFound(id.to_owned());
                    let mut write = self.begin_write().await?;
                    let scope = fact_on(write.conn(), id).await?.ok_or_else(not_found)?.scope;
                    lock_scope(write.conn(), &scope).await?;
                    // Read again under the lock: another writer may have changed or deleted it.
                    let mut fact = fact_on(write.conn(), id).await?.ok_or_else(not_found)?;
                    if let Some((content, key)) = &update.content {
                        let other: Option<String> = sqlx::query_scalar(
                            "SELECT id FROM facts WHERE domain = $1 AND namespace = $2 AND content_key = $3 \
                             AND id <> $4",
                        )
                        .bind(scope.domain())
                        .bind(scope.namespace_name())
                        .bind(key)
                        .bind(id)
                        .fetch_optional(write.conn())
                        .await?;
                        if let Some(other) = other {
                            return Err(Error::Conflict {
                                reason: format!(
                                    "the new content of fact {id} equals the content of fact {other} in {scope} \
                                     (ignoring case)"
                                ),
                            });
                        }
                        fact.content = content.clone();
                    }
                    if let Some(category) = update.category {
                        fact.category = category;
                    }
                    if let Some(confidence) = update.confidence {
                        fact.confidence = confidence;
                    }
                    fact.updated_at = update.now;
                    sqlx::query(
                        "UPDATE facts SET content = $2, content_key = COALESCE($3, content_key), category = $4, \
                         confidence = $5, updated_at = $6 WHERE id = $1",
                    )
                    .bind(id)
                    .bind(&fact.content)
                    .bind(update.content.as_ref().map(|(_, key)| key.as_str()))
                    .bind(fact.category.as_str())
                    .bind(fact.confidence)
                    .bind(fact.updated_at)
                    .execute(write.conn())
                    .await?;
                    write.commit().await?;
                    Ok(fact)
                }

                pub(in crate::store) async fn delete_fact(&self, id: &str) -> Result<()> {
                    let mut write = self.begin_write().await?;
                    let deleted = sqlx::query("DELETE FROM facts WHERE id = $1").bind(id).execute(write.conn()).await?;
                    if deleted.rows_affected() == 0 {
                        return Err(Error::FactNotFound(id.to_owned()));
                    }
                    write.commit().await
                }

                /// The stored profile of `scope` as JSON text, if any.
                pub(in crate::store) async fn profile(&self, scope: &Scope) -> Result<Option<String>> {
                    let json: Option<String> = sqlx::query_scalar(
                        "SELECT CAST(profile AS TEXT) FROM memory_profiles WHERE domain = $1 AND namespace = $2",
                    )
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(json)
                }

                pub(in crate::store) async fn put_profile(&self, scope: &Scope, json: &str) -> Result<()> {
                    let mut write = self.begin_write().await?;
                    sqlx::query(concat!(
                        "INSERT INTO memory_profiles (domain, namespace, profile, updated_at) VALUES ($1, $2, $3",
                        $json,
                        ", $4) ON CONFLICT (domain, namespace) DO UPDATE SET profile = excluded.profile, \
                         updated_at = excluded.updated_at"
                    ))
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .bind(json)
                    .bind(now())
                    .execute(write.conn())
                    .await?;
                    write.commit().await
                }
            }

            async fn fact_on(conn: &mut Conn, id: &str) -> Result<Option<Fact>> {
                let record: Option<FactRecord> =
                    sqlx::query_as(concat!("SELECT ", fact_columns!(), " FROM facts WHERE id = $1"))
                        .bind(id)
                        .fetch_optional(&mut *conn)
                        .await?;
                record.map(Fact::try_from).transpose()
            }
        }
    };
}
