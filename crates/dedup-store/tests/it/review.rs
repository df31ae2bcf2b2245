//! The review queue: pairs a judge was unsure of, queued once, listed, decided apart, skip
//! or merge (through the merge ledger), and expired when a memory changes.

use anyhow::Context;
use dedup_store::{
    Error, MemoryId, MemoryUpdate, MergePlan, NewReview, ReviewDecision, ReviewFilter, ReviewStatus, Scope, Store,
};

use crate::support::{basis, insert_vector, scope};

const DIMS: usize = 8;

fn unsure(scope: &Scope, a: MemoryId, b: MemoryId, cosine: f32) -> NewReview {
    NewReview {
        scope: scope.clone(),
        a,
        b,
        cosine,
        probability: Some(0.45),
        judge: "learned".to_owned(),
        reasons: vec!["learned judge: P(duplicate) 0.450 is in the uncertain band".to_owned()],
        source: "add".to_owned(),
    }
}

async fn pair(store: &Store, scope: &Scope) -> anyhow::Result<(MemoryId, MemoryId)> {
    let a = insert_vector(store, scope, "Use type hints on all function parameters", &basis(DIMS, 0)).await?;
    let b = insert_vector(store, scope, "Always use type hints for function parameters", &basis(DIMS, 1)).await?;
    Ok((a, b))
}

fn pending(scope: &Scope) -> ReviewFilter {
    ReviewFilter {
        domain: Some(scope.domain().to_owned()),
        namespace: Some(scope.namespace_name().to_owned()),
        ..ReviewFilter::default()
    }
}

backend_tests! {
    async fn a_pair_is_queued_once_and_listed_with_its_scores(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let (a, b) = pair(&store, &s).await?;
        let id = store.enqueue_review(&unsure(&s, b, a, 0.94)).await?.context("queued")?;
        // Again, from another producer with newer scores: the same entry, updated.
        let mut again = unsure(&s, a, b, 0.95);
        again.source = "dedup".to_owned();
        assert_eq!(store.enqueue_review(&again).await?, Some(id));
        let listed = store.reviews(&pending(&s)).await?;
        assert_eq!(listed.len(), 1);
        let r = &listed[0];
        assert_eq!((r.id, r.low, r.high, r.status), (id, a, b, ReviewStatus::Pending));
        assert_eq!((r.cosine, r.probability, r.source.as_str()), (0.95, Some(0.45), "dedup"));
        assert_eq!(r.reasons, ["learned judge: P(duplicate) 0.450 is in the uncertain band"]);
        // Another scope sees nothing; a pair across scopes or of a missing memory is not queued.
        let other = scope("global", "decisions");
        assert!(store.reviews(&pending(&other)).await?.is_empty());
        let c = insert_vector(&store, &other, "Elsewhere entirely", &basis(DIMS, 2)).await?;
        assert_eq!(store.enqueue_review(&unsure(&s, a, c, 0.5)).await?, None);
        assert_eq!(store.enqueue_review(&unsure(&s, a, MemoryId::new(9_999), 0.5)).await?, None);
        assert!(store.enqueue_review(&unsure(&s, a, a, 0.5)).await.is_err());
        Ok(())
    }

    async fn apart_is_final_and_the_pair_is_never_queued_or_proposed_again(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let (a, b) = pair(&store, &s).await?;
        let id = store.enqueue_review(&unsure(&s, a, b, 0.94)).await?.context("queued")?;
        let decided = store.decide_review(id, ReviewDecision::Apart).await?;
        assert_eq!(decided.status, ReviewStatus::Apart);
        assert!(decided.decided_at.is_some());
        assert_eq!(store.enqueue_review(&unsure(&s, a, b, 0.99)).await?, None);
        assert!(store.reviews(&pending(&s)).await?.is_empty());
        assert!(store.never_merge_pairs(&s).await?.contains(&(a, b)));
        match store.decide_review(id, ReviewDecision::Skip).await {
            Err(Error::ReviewClosed { status: ReviewStatus::Apart, .. }) => {}
            other => anyhow::bail!("deciding twice: {other:?}"),
        }
        Ok(())
    }

    async fn skip_keeps_the_pair_queueable_and_unknown_ids_are_named(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let (a, b) = pair(&store, &s).await?;
        let id = store.enqueue_review(&unsure(&s, a, b, 0.94)).await?.context("queued")?;
        assert_eq!(store.decide_review(id, ReviewDecision::Skip).await?.status, ReviewStatus::Skipped);
        assert!(store.reviews(&pending(&s)).await?.is_empty());
        assert_eq!(store.reviews(&ReviewFilter { all: true, ..pending(&s) }).await?.len(), 1);
        assert_eq!(store.enqueue_review(&unsure(&s, a, b, 0.94)).await?, Some(id));
        assert_eq!(store.reviews(&pending(&s)).await?.len(), 1);
        match store.decide_review(dedup_store::ReviewId::new(424_242), ReviewDecision::Apart).await {
            Err(Error::ReviewNotFound(_)) => {}
            other => anyhow::bail!("an unknown id: {other:?}"),
        }
        Ok(())
    }

    async fn an_entry_whose_memory_changed_is_expired_and_cannot_be_decided(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let (a, b) = pair(&store, &s).await?;
        let id = store.enqueue_review(&unsure(&s, a, b, 0.94)).await?.context("queued")?;
        let update = MemoryUpdate { content: Some("Use type hints on public functions only".to_owned()), ..MemoryUpdate::default() };
        store.update(b, update, crate::support::stored(&basis(DIMS, 3))).await?;
        assert!(store.reviews(&pending(&s)).await?.is_empty(), "an expired entry is not pending");
        let all = store.reviews(&ReviewFilter { all: true, ..pending(&s) }).await?;
        assert_eq!(all[0].status, ReviewStatus::Expired);
        match store.decide_review(id, ReviewDecision::Apart).await {
            Err(Error::ReviewClosed { status: ReviewStatus::Expired, .. }) => {}
            other => anyhow::bail!("deciding an expired entry: {other:?}"),
        }
        // A judge unsure of the changed pair queues it again: pending once more.
        assert_eq!(store.enqueue_review(&unsure(&s, a, b, 0.80)).await?, Some(id));
        assert_eq!(store.review(id).await?.context("entry")?.status, ReviewStatus::Pending);
        Ok(())
    }

    async fn merge_goes_through_the_ledger_and_undo_restores_both(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let (a, b) = pair(&store, &s).await?;
        let id = store.enqueue_review(&unsure(&s, a, b, 0.94)).await?.context("queued")?;
        let survivor = store.get(a).await?.context("a")?;
        let absorbed = store.get(b).await?.context("b")?;
        // A plan of other memories is refused and changes nothing.
        let c = insert_vector(&store, &s, "Prefer composition over inheritance", &basis(DIMS, 2)).await?;
        let other = store.get(c).await?.context("c")?;
        let wrong = MergePlan::keeping_survivor("review-1", &survivor, std::slice::from_ref(&other), 1.0, "person", "review");
        assert!(matches!(store.merge_review(id, &wrong).await, Err(Error::InvalidMerge { .. })));
        assert_eq!(store.review(id).await?.context("entry")?.status, ReviewStatus::Pending);
        let plan = MergePlan::keeping_survivor("review-1", &survivor, std::slice::from_ref(&absorbed), 1.0, "person", "review");
        let (review, record) = store.merge_review(id, &plan).await?;
        assert_eq!((review.status, review.merge_id), (ReviewStatus::Merged, Some(record.id)));
        assert_eq!((record.survivor, record.absorbed.clone()), (a, vec![b]));
        assert!(store.get(b).await?.context("b")?.deprecated);
        assert_eq!(store.get(a).await?.context("a")?.occurrence_count, 2);
        match store.merge_review(id, &plan).await {
            Err(Error::ReviewClosed { status: ReviewStatus::Merged, .. }) => {}
            other => anyhow::bail!("merging twice: {other:?}"),
        }
        store.undo_merge(record.id, false).await?;
        assert!(!store.get(b).await?.context("b")?.deprecated);
        assert_eq!(store.get(a).await?.context("a")?.occurrence_count, 1);
        Ok(())
    }

    async fn deleting_a_memory_drops_its_entries(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let (a, b) = pair(&store, &s).await?;
        let id = store.enqueue_review(&unsure(&s, a, b, 0.94)).await?.context("queued")?;
        assert!(store.delete(b).await?);
        assert_eq!(store.review(id).await?, None);
        Ok(())
    }

    async fn a_decision_is_taken_back_by_reopening_and_an_undone_merge_too(db) {
        let store = db.open().await?;
        let s = scope("global", "lessons");
        let (a, b) = pair(&store, &s).await?;
        let id = store.enqueue_review(&unsure(&s, a, b, 0.94)).await?.context("queued")?;
        store.decide_review(id, ReviewDecision::Apart).await?;
        assert!(store.never_merge_pairs(&s).await?.contains(&(a, b)));
        let reopened = store.reopen_review(id).await?;
        assert_eq!(reopened.status, ReviewStatus::Pending);
        assert!(!store.never_merge_pairs(&s).await?.contains(&(a, b)), "apart is taken back");
        // Pending already: refused.
        assert!(matches!(store.reopen_review(id).await, Err(Error::ReviewClosed { .. })));
        // A merge: not reopened while merged, reopened once the merge is undone.
        let survivor = store.get(a).await?.context("a")?;
        let absorbed = store.get(b).await?.context("b")?;
        let plan = MergePlan::keeping_survivor("review-1", &survivor, std::slice::from_ref(&absorbed), 1.0, "person", "review");
        let (_, record) = store.merge_review(id, &plan).await?;
        assert!(matches!(store.reopen_review(id).await, Err(Error::ReviewClosed { status: ReviewStatus::Merged, .. })));
        store.undo_merge(record.id, false).await?;
        let reopened = store.reopen_review(id).await?;
        assert_eq!((reopened.status, reopened.merge_id), (ReviewStatus::Pending, None));
        // Decidable again: it is not expired.
        store.decide_review(id, ReviewDecision::Skip).await?;
        Ok(())
    }
}
