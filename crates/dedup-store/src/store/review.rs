//! The review queue on the `Store` handle: pairs a judge was unsure of, listed and decided
//! by a person or an agent. Queries both backends share are stamped out per backend by
//! `review_queries!`, like `shared.rs`.
//!
//! An entry records both memories' `change_seq` when queued: it is **expired** (listed, not
//! decidable) once either memory changed its text or vector, was merged or deleted. A pair
//! decided `apart` is never queued again and is not proposed to assisted dedup
//! ([`Store::never_merge_pairs`] includes it); a `skipped` or pending pair is queued again,
//! with the newer scores, when a judge is unsure of it again.

use super::{Backend, Store};
use crate::scope::validate_name;
use crate::{
    Error, MAX_REVIEW_REASON_CHARS, MAX_REVIEW_REASONS, MemoryId, MergePlan, MergeRecord, NewReview, Result, Review,
    ReviewDecision, ReviewFilter, ReviewId, ReviewStatus,
};

/// Longest judge or source name an entry accepts, in bytes.
const MAX_LABEL_BYTES: usize = 64;

impl Store {
    /// Queues a pair a judge was unsure of; its id, or `None` when the pair is not
    /// queued: a memory is not live or not in the scope, or the pair was decided `apart`.
    /// A pair already pending or skipped is queued again with these scores.
    pub async fn enqueue_review(&self, review: &NewReview) -> Result<Option<ReviewId>> {
        let (low, high) = if review.a < review.b { (review.a, review.b) } else { (review.b, review.a) };
        if low == high {
            return Err(Error::InvalidContent { what: "review", reason: "a pair needs two memories".to_owned() });
        }
        for (what, label) in [("judge", &review.judge), ("source", &review.source)] {
            if label.is_empty() || label.len() > MAX_LABEL_BYTES || label.chars().any(char::is_control) {
                return Err(Error::InvalidContent {
                    what,
                    reason: format!("must be 1 to {MAX_LABEL_BYTES} bytes without control characters"),
                });
            }
        }
        if !review.cosine.is_finite() || review.probability.is_some_and(|p| !p.is_finite()) {
            return Err(Error::InvalidContent { what: "review", reason: "scores must be finite".to_owned() });
        }
        let reasons: Vec<String> = review
            .reasons
            .iter()
            .take(MAX_REVIEW_REASONS)
            .map(|r| r.chars().filter(|c| *c != '\0').take(MAX_REVIEW_REASON_CHARS).collect())
            .collect();
        let reasons = serde_json::to_string(&reasons)
            .map_err(|e| Error::InvalidContent { what: "review", reason: format!("reasons cannot be stored: {e}") })?;
        let result = dispatch!(self, b => b.enqueue_review(review, low, high, &reasons, super::now()).await);
        self.classify(result)
    }

    /// The entries `filter` selects, lowest id first.
    pub async fn reviews(&self, filter: &ReviewFilter) -> Result<Vec<Review>> {
        if let Some(domain) = &filter.domain {
            validate_name("domain", domain)?;
        }
        if let Some(namespace) = &filter.namespace {
            validate_name("namespace", namespace)?;
        }
        let limit = if filter.limit == 0 { i64::MAX } else { i64::try_from(filter.limit).unwrap_or(i64::MAX) };
        let result = dispatch!(self, b => b.reviews(filter, limit).await);
        self.classify(result)
    }

    /// The entry with this id, if the queue has it.
    pub async fn review(&self, id: ReviewId) -> Result<Option<Review>> {
        let result = dispatch!(self, b => b.review(id).await);
        self.classify(result)
    }

    /// Decides a pending entry without changing a memory: `apart` or `skip`. Fails with
    /// [`Error::ReviewNotFound`] for an unknown id and [`Error::ReviewClosed`] for an
    /// entry decided already or expired; nothing changes then.
    pub async fn decide_review(&self, id: ReviewId, decision: ReviewDecision) -> Result<Review> {
        let status = match decision {
            ReviewDecision::Apart => ReviewStatus::Apart,
            ReviewDecision::Skip => ReviewStatus::Skipped,
        };
        let result = dispatch!(self, b => b.close_review(id, status, None, super::now()).await);
        self.classify(result)
    }

    /// Takes back the decision on an entry (an undo in an interactive review): it is
    /// pending again, with its memories' current state, and an `apart` decision no longer
    /// keeps the pair out of assisted dedup. A merged entry can be reopened once its merge
    /// was undone. Fails with [`Error::ReviewNotFound`] for an unknown id and
    /// [`Error::ReviewClosed`] for an entry pending already or one whose memories are not
    /// both live; nothing changes then.
    pub async fn reopen_review(&self, id: ReviewId) -> Result<Review> {
        let result = dispatch!(self, b => b.reopen_review(id).await);
        self.classify(result)
    }

    /// Decides a pending entry `merge` keeping `survivor` (default: the older memory, of
    /// lower id) and its text, as [`MergePlan::keeping_survivor`] plans it, through
    /// [`Store::merge_review`]; the run id is `review-{id}`. What a person's or an agent's
    /// merge decision applies, whatever surface it came through. Fails with
    /// [`Error::InvalidMerge`] for a survivor outside the pair, [`Error::NotLive`] when a
    /// memory is no longer live, and as [`Store::merge_review`] does.
    pub async fn merge_review_keeping(
        &self,
        id: ReviewId,
        survivor: Option<MemoryId>,
        confidence: f64,
        reason: &str,
        judge: &str,
    ) -> Result<(Review, MergeRecord)> {
        let review = self.review(id).await?.ok_or(Error::ReviewNotFound(id))?;
        let survivor = survivor.unwrap_or(review.low);
        if survivor != review.low && survivor != review.high {
            return Err(Error::InvalidMerge {
                id: survivor,
                into: survivor,
                reason: "the survivor is not one of the pair's memories",
            });
        }
        let absorbed = if survivor == review.low { review.high } else { review.low };
        let mut members = Vec::with_capacity(2);
        for member in [survivor, absorbed] {
            match self.get(member).await? {
                Some(memory) if !memory.deprecated => members.push(memory),
                Some(memory) => {
                    let reason = match memory.merged_into {
                        Some(into) => format!("it was merged into memory {into}"),
                        None => "it was forgotten or retired".to_owned(),
                    };
                    return Err(Error::NotLive { id: member, reason });
                }
                None => return Err(Error::NotFound(member)),
            }
        }
        let plan = MergePlan::keeping_survivor(
            format!("review-{id}"),
            &members[0],
            std::slice::from_ref(&members[1]),
            confidence,
            reason,
            judge,
        );
        self.merge_review(id, &plan).await
    }

    /// Decides a pending entry `merge`: applies `plan` (which must merge exactly the
    /// entry's two memories) through [`Store::apply_merge`], so the merge is in the ledger
    /// and `undo` restores it, then records the decision with the merge's id. Fails as
    /// [`Store::decide_review`] does, with [`Error::InvalidMerge`] for a plan of another
    /// memories, and as [`Store::apply_merge`] does; nothing changes then. A process that
    /// dies between the merge and the record leaves the merge applied and the entry
    /// expired (its memories changed), never half a merge.
    pub async fn merge_review(&self, id: ReviewId, plan: &MergePlan) -> Result<(Review, MergeRecord)> {
        let review = self.review(id).await?.ok_or(Error::ReviewNotFound(id))?;
        if review.status != ReviewStatus::Pending {
            return Err(Error::ReviewClosed { id, status: review.status });
        }
        let mut members: Vec<_> = std::iter::once(plan.survivor).chain(plan.absorbed.iter().copied()).collect();
        members.sort();
        if members != [review.low, review.high] || plan.scope != review.scope {
            let into = plan.survivor;
            let id = plan.absorbed.first().copied().unwrap_or(into);
            return Err(Error::InvalidMerge { id, into, reason: "the review entry is about another pair of memories" });
        }
        let record = self.apply_merge(plan).await?;
        let result =
            dispatch!(self, b => b.close_review(id, ReviewStatus::Merged, Some(record.id), super::now()).await);
        Ok((self.classify(result)?, record))
    }
}

/// Stamps out the review-queue queries for `$backend` in a child module `review_queries`.
/// `$json` is what follows a bound parameter to make it a JSON column value.
macro_rules! review_queries {
    ($backend:ident, json_param = $json:literal) => {
        mod review_queries {
            use chrono::{DateTime, Utc};

            use super::*;
            use crate::{
                Error, MemoryId, MergeId, NewReview, Result, Review, ReviewFilter, ReviewId, ReviewStatus, Scope,
            };

            /// The columns of a listed entry, with whether it is expired.
            const COLUMNS: &str = "r.id, r.domain, r.namespace, r.low, r.high, r.cosine, r.probability, r.judge, \
                 CAST(r.reasons AS TEXT) AS reasons, r.source, r.status, r.merge_id, r.created_at, r.decided_at, \
                 CASE WHEN ml.id IS NULL OR mh.id IS NULL OR ml.deprecated OR mh.deprecated \
                 OR ml.change_seq <> r.low_seq OR mh.change_seq <> r.high_seq THEN TRUE ELSE FALSE END AS expired \
                 FROM review_queue r LEFT JOIN memories ml ON ml.id = r.low LEFT JOIN memories mh ON mh.id = r.high";

            #[derive(sqlx::FromRow)]
            struct ReviewRow {
                id: i64,
                domain: String,
                namespace: String,
                low: i64,
                high: i64,
                cosine: f32,
                probability: Option<f32>,
                judge: String,
                reasons: String,
                source: String,
                status: String,
                merge_id: Option<i64>,
                created_at: DateTime<Utc>,
                decided_at: Option<DateTime<Utc>>,
                expired: bool,
            }

            impl TryFrom<ReviewRow> for Review {
                type Error = Error;

                fn try_from(row: ReviewRow) -> Result<Review> {
                    let id = row.id;
                    let corrupt =
                        |reason: String| Error::Corrupt { table: "review_queue", reason: format!("id {id}: {reason}") };
                    let scope = Scope::new(&row.domain, &row.namespace).map_err(|e| corrupt(e.to_string()))?;
                    let reasons: Vec<String> =
                        serde_json::from_str(&row.reasons).map_err(|e| corrupt(format!("reasons: {e}")))?;
                    let status = match (row.status.as_str(), row.expired) {
                        ("pending", false) => ReviewStatus::Pending,
                        ("pending", true) => ReviewStatus::Expired,
                        ("merged", _) => ReviewStatus::Merged,
                        ("apart", _) => ReviewStatus::Apart,
                        ("skipped", _) => ReviewStatus::Skipped,
                        (other, _) => return Err(corrupt(format!("unknown status {other:?}"))),
                    };
                    Ok(Review {
                        id: ReviewId::new(id),
                        scope,
                        low: MemoryId::new(row.low),
                        high: MemoryId::new(row.high),
                        cosine: row.cosine,
                        probability: row.probability,
                        judge: row.judge,
                        reasons,
                        source: row.source,
                        status,
                        merge_id: row.merge_id.map(MergeId::new),
                        created_at: row.created_at,
                        decided_at: row.decided_at,
                    })
                }
            }

            async fn select_review(conn: &mut Conn, id: ReviewId) -> Result<Option<Review>> {
                let row: Option<ReviewRow> = sqlx::query_as(&format!("SELECT {COLUMNS} WHERE r.id = $1"))
                    .bind(id.get())
                    .fetch_optional(conn)
                    .await?;
                row.map(Review::try_from).transpose()
            }

            impl $backend {
                pub(in crate::store) async fn enqueue_review(
                    &self,
                    review: &NewReview,
                    low: MemoryId,
                    high: MemoryId,
                    reasons: &str,
                    now: DateTime<Utc>,
                ) -> Result<Option<ReviewId>> {
                    let mut write = self.begin_write().await?;
                    let id: Option<i64> = sqlx::query_scalar(concat!(
                        "INSERT INTO review_queue (domain, namespace, low, high, low_seq, high_seq, cosine, \
                         probability, judge, reasons, source, status, created_at) \
                         SELECT $1, $2, ml.id, mh.id, ml.change_seq, mh.change_seq, $5, $6, $7, $8",
                        $json,
                        ", $9, 'pending', $10 FROM memories ml, memories mh \
                         WHERE ml.id = $3 AND mh.id = $4 AND NOT ml.deprecated AND NOT mh.deprecated \
                         AND ml.domain = $1 AND ml.namespace = $2 AND mh.domain = $1 AND mh.namespace = $2 \
                         ON CONFLICT (domain, namespace, low, high) DO UPDATE SET \
                         low_seq = excluded.low_seq, high_seq = excluded.high_seq, cosine = excluded.cosine, \
                         probability = excluded.probability, judge = excluded.judge, reasons = excluded.reasons, \
                         source = excluded.source, status = 'pending', created_at = excluded.created_at, \
                         decided_at = NULL, merge_id = NULL \
                         WHERE review_queue.status IN ('pending', 'skipped') RETURNING id"
                    ))
                    .bind(review.scope.domain())
                    .bind(review.scope.namespace_name())
                    .bind(low.get())
                    .bind(high.get())
                    .bind(review.cosine)
                    .bind(review.probability)
                    .bind(&review.judge)
                    .bind(reasons)
                    .bind(&review.source)
                    .bind(now)
                    .fetch_optional(write.conn())
                    .await?;
                    write.commit().await?;
                    Ok(id.map(ReviewId::new))
                }

                pub(in crate::store) async fn reviews(&self, filter: &ReviewFilter, limit: i64) -> Result<Vec<Review>> {
                    let rows: Vec<ReviewRow> = sqlx::query_as(&format!(
                        "SELECT {COLUMNS} WHERE ($1 IS NULL OR r.domain = $1) AND ($2 IS NULL OR r.namespace = $2) \
                         AND ($3 OR r.status = 'pending') ORDER BY r.id LIMIT $4"
                    ))
                    .bind(filter.domain.as_deref())
                    .bind(filter.namespace.as_deref())
                    .bind(filter.all)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                    let reviews: Vec<Review> = rows.into_iter().map(Review::try_from).collect::<Result<_>>()?;
                    Ok(if filter.all {
                        reviews
                    } else {
                        reviews.into_iter().filter(|r| r.status == ReviewStatus::Pending).collect()
                    })
                }

                pub(in crate::store) async fn review(&self, id: ReviewId) -> Result<Option<Review>> {
                    let mut conn = self.pool.acquire().await?;
                    select_review(&mut conn, id).await
                }

                pub(in crate::store) async fn reopen_review(&self, id: ReviewId) -> Result<Review> {
                    let mut write = self.begin_write().await?;
                    let review = select_review(write.conn(), id).await?.ok_or(Error::ReviewNotFound(id))?;
                    let reopened = sqlx::query(
                        "UPDATE review_queue SET status = 'pending', merge_id = NULL, decided_at = NULL, \
                         low_seq = ml.change_seq, high_seq = mh.change_seq \
                         FROM memories ml, memories mh WHERE review_queue.id = $1 \
                         AND ml.id = review_queue.low AND mh.id = review_queue.high \
                         AND NOT ml.deprecated AND NOT mh.deprecated AND review_queue.status <> 'pending'",
                    )
                    .bind(id.get())
                    .execute(write.conn())
                    .await?;
                    if reopened.rows_affected() != 1 {
                        return Err(Error::ReviewClosed { id, status: review.status });
                    }
                    let review = select_review(write.conn(), id).await?.ok_or(Error::ReviewNotFound(id))?;
                    write.commit().await?;
                    Ok(review)
                }

                /// Records a decision on a pending entry: unexpired, or, for a merge
                /// (`merge_id`), expired by that merge, which changed both memories.
                pub(in crate::store) async fn close_review(
                    &self,
                    id: ReviewId,
                    status: ReviewStatus,
                    merge_id: Option<MergeId>,
                    now: DateTime<Utc>,
                ) -> Result<Review> {
                    let mut write = self.begin_write().await?;
                    let review = select_review(write.conn(), id).await?.ok_or(Error::ReviewNotFound(id))?;
                    let open = review.status == ReviewStatus::Pending
                        || (merge_id.is_some() && review.status == ReviewStatus::Expired);
                    if !open {
                        return Err(Error::ReviewClosed { id, status: review.status });
                    }
                    sqlx::query("UPDATE review_queue SET status = $2, merge_id = $3, decided_at = $4 WHERE id = $1")
                        .bind(id.get())
                        .bind(status.as_str())
                        .bind(merge_id.map(MergeId::get))
                        .bind(now)
                        .execute(write.conn())
                        .await?;
                    let review = select_review(write.conn(), id).await?.ok_or(Error::ReviewNotFound(id))?;
                    write.commit().await?;
                    Ok(review)
                }
            }
        }
    };
}
