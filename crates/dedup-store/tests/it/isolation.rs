//! INV: no check, search or list in one scope ever returns a memory of another.

use std::collections::{BTreeMap, HashMap};

use dedup_core::{ContentHash, normalize_content};
use dedup_store::{InsertOutcome, ListFilter, MemoryId, NewMemory, Scope};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::support::{Backend, MODEL, TestDb, basis, scope, stored};

const DIMS: usize = 8;
const TEXTS: [&str; 6] = [
    "Use PostgreSQL for storage",
    "Retry with exponential backoff",
    "Keep secrets out of logs",
    "Prefer small pull requests",
    "Pin dependency versions",
    "Write the test first",
];

/// One insert: scope (domain, namespace) indexes, text index, whether to re-case it,
/// and the axis of its vector. Equal axes mean cosine 1, so semantic duplicates abound.
type Op = (usize, usize, usize, bool, usize);

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec((0..3usize, 0..3usize, 0..TEXTS.len(), any::<bool>(), 0..4usize), 1..40)
}

fn scope_of(domain: usize, namespace: usize) -> Scope {
    scope(&format!("d{domain}"), &format!("n{namespace}"))
}

/// What one scope holds in a serial reference model: (normalised text, axis, id).
type Reference = BTreeMap<Scope, Vec<(String, usize, MemoryId)>>;

async fn run(backend: Backend, ops: Vec<Op>) -> anyhow::Result<()> {
    let db = TestDb::new(backend).await?;
    let store = db.open().await?;
    let mut reference: Reference = BTreeMap::new();
    let mut home: HashMap<MemoryId, Scope> = HashMap::new();

    for (domain, namespace, text, recase, axis) in ops {
        let scope = scope_of(domain, namespace);
        let text = if recase { TEXTS[text].to_uppercase() } else { TEXTS[text].to_owned() };
        let outcome = store
            .insert_checked(NewMemory::new(scope.clone(), text.clone()), stored(&basis(DIMS, axis)), Some(0.9))
            .await?;
        let rows = reference.entry(scope.clone()).or_default();
        let normalised = normalize_content(&text);
        let expected = if let Some((_, _, id)) = rows.iter().find(|(t, _, _)| *t == normalised) {
            InsertOutcome::ExactDuplicate(*id)
        } else if let Some((_, _, id)) = rows.iter().find(|(_, a, _)| *a == axis) {
            InsertOutcome::SemanticDuplicate { id: *id, score: 1.0 }
        } else {
            let InsertOutcome::Inserted(id) = outcome else {
                anyhow::bail!("{text:?} in {scope}: expected an insert, got {outcome:?}")
            };
            rows.push((normalised, axis, id));
            home.insert(id, scope.clone());
            outcome
        };
        match (outcome, expected) {
            (InsertOutcome::SemanticDuplicate { id, score }, InsertOutcome::SemanticDuplicate { id: want, .. }) => {
                anyhow::ensure!(
                    id == want && (score - 1.0).abs() < 1e-6,
                    "{text:?} in {scope}: {outcome:?}, want {expected:?}"
                );
            }
            _ => anyhow::ensure!(outcome == expected, "{text:?} in {scope}: {outcome:?}, want {expected:?}"),
        }
        let stored_scope = store.get(outcome.id()).await?.map(|m| m.scope);
        anyhow::ensure!(stored_scope.as_ref() == Some(&scope), "{outcome:?} for {scope} is in {stored_scope:?}");
    }

    for domain in 0..3 {
        for namespace in 0..3 {
            let scope = scope_of(domain, namespace);
            let rows = reference.get(&scope).cloned().unwrap_or_default();
            let mut want: Vec<MemoryId> = rows.iter().map(|(_, _, id)| *id).collect();
            want.sort();
            let filter = ListFilter {
                domain: Some(scope.domain().to_owned()),
                namespace: Some(scope.namespace_name().to_owned()),
                ..ListFilter::default()
            };
            let listed: Vec<MemoryId> = store.list(&filter).await?.into_iter().map(|m| m.id).collect();
            anyhow::ensure!(listed == want, "list of {scope}: {listed:?}, want {want:?}");
            for axis in 0..4 {
                let hits = store.search(&scope, MODEL, &basis(DIMS, axis), 10).await?;
                let mut ids: Vec<MemoryId> = hits.iter().map(|h| h.id).collect();
                ids.sort();
                anyhow::ensure!(ids == want, "search of {scope}: {ids:?}, want {want:?}");
                anyhow::ensure!(ids.iter().all(|id| home.get(id) == Some(&scope)));
            }
            for text in TEXTS {
                let found = store.find_exact(&scope, &ContentHash::of(text)).await?;
                let want = rows.iter().find(|(t, _, _)| *t == normalize_content(text)).map(|(_, _, id)| *id);
                anyhow::ensure!(found == want, "find_exact {text:?} in {scope}: {found:?}, want {want:?}");
            }
        }
    }
    store.close().await;
    Ok(())
}

fn run_blocking(backend: Backend, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    runtime.block_on(run(backend, ops)).map_err(|e| TestCaseError::fail(format!("{e:#}")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[cfg(feature = "sqlite")]
    #[test]
    fn inv_namespace_isolation_sqlite(ops in ops()) {
        run_blocking(Backend::Sqlite, ops)?;
    }

    /// Called by the test below once the server is known to be there, so that a missing
    /// `DATABASE_URL` fails with its own message rather than as a recorded case.
    #[cfg(feature = "postgres")]
    fn namespace_isolation_postgres_cases(ops in ops()) {
        run_blocking(Backend::Postgres, ops)?;
    }
}

#[cfg(feature = "postgres")]
#[test]
fn inv_namespace_isolation_postgres() -> anyhow::Result<()> {
    crate::support::admin_url()?;
    namespace_isolation_postgres_cases();
    Ok(())
}
