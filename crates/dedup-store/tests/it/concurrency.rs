//! Many writers at once resolve duplicates as a serial run would.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dedup_core::{Embedding, normalize_content};
use dedup_store::{InsertOutcome, ListFilter, MemoryId, NewMemory, Scope, Store};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use crate::support::{at_cosine, random_unit, scope, stored};

const DIMS: usize = 384;
const THRESHOLD: f32 = 0.9;
const TASKS: usize = 16;

/// One memory to insert and what it is.
#[derive(Debug, Clone)]
struct Item {
    text: String,
    vector: Embedding,
    kind: ItemKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    /// A text seen once or repeated (maybe re-cased, re-spaced) as exact duplicates.
    Plain,
    /// One of a paraphrase pair: different text, cosine 0.97 with its partner.
    Paraphrase { pair: usize },
}

/// 400 memories: 240 distinct texts, 120 exact repeats of them, 20 paraphrase pairs, in
/// random order. A serial run stores 240 + 20 of them.
fn workload(seed: u64) -> (Vec<Item>, usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut items = Vec::new();
    let bases: Vec<Item> = (0..240)
        .map(|i| Item {
            text: format!("Lesson {i}: keep {} retries for job class {}", rng.random_range(1..9), rng.random::<u32>()),
            vector: random_unit(&mut rng, DIMS),
            kind: ItemKind::Plain,
        })
        .collect();
    for _ in 0..120 {
        let base = &bases[rng.random_range(0..bases.len())];
        let text = match rng.random_range(0..3) {
            0 => base.text.to_uppercase(),
            1 => format!("  {}\n", base.text.replace(' ', " \t ")),
            _ => base.text.clone(),
        };
        items.push(Item { text, ..base.clone() });
    }
    items.extend(bases);
    for pair in 0..20 {
        let a = random_unit(&mut rng, DIMS);
        let b = at_cosine(&a, &random_unit(&mut rng, DIMS), 0.97);
        items.push(Item {
            text: format!("Paraphrase {pair}: cache the config"),
            vector: a,
            kind: ItemKind::Paraphrase { pair },
        });
        items.push(Item {
            text: format!("Paraphrase {pair}, reworded: config is cached"),
            vector: b,
            kind: ItemKind::Paraphrase { pair },
        });
    }
    items.shuffle(&mut rng);
    // Partners side by side, so that the tasks race on them.
    for pair in 0..20 {
        let is_pair = |item: &Item| item.kind == ItemKind::Paraphrase { pair };
        let (Some(first), Some(second)) = (items.iter().position(is_pair), items.iter().rposition(is_pair)) else {
            panic!("pair {pair} missing")
        };
        let partner = items.remove(second);
        items.insert(first + 1, partner);
    }
    assert_eq!(items.len(), 400);
    (items, 240 + 20)
}

/// Inserts every item from `TASKS` tasks spread over `stores`; the outcome of each item.
async fn insert_concurrently(
    stores: &[Arc<Store>],
    scope: &Scope,
    items: &Arc<Vec<Item>>,
) -> anyhow::Result<Vec<InsertOutcome>> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for task in 0..TASKS {
        let (store, scope, items, next) =
            (Arc::clone(&stores[task % stores.len()]), scope.clone(), Arc::clone(items), Arc::clone(&next));
        tasks.spawn(async move {
            let mut outcomes = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let memory = NewMemory::new(scope.clone(), item.text.clone());
                outcomes.push((i, store.insert_checked(memory, stored(&item.vector), Some(THRESHOLD)).await?));
            }
            anyhow::Ok(outcomes)
        });
    }
    let mut outcomes = vec![None; items.len()];
    while let Some(done) = tasks.join_next().await {
        for (i, outcome) in done?? {
            outcomes[i] = Some(outcome);
        }
    }
    outcomes.into_iter().enumerate().map(|(i, o)| o.ok_or_else(|| anyhow::anyhow!("item {i} never ran"))).collect()
}

/// Checks the stored rows and the outcomes against what a serial run gives.
async fn check(
    store: &Store,
    scope: &Scope,
    items: &[Item],
    outcomes: &[InsertOutcome],
    expected_live: usize,
) -> anyhow::Result<()> {
    let live = store.list(&ListFilter::default()).await?;
    assert!(live.iter().all(|m| m.scope == *scope));
    let by_id: HashMap<MemoryId, &str> = live.iter().map(|m| (m.id, m.content.as_str())).collect();

    // Exactly one live row per normalised text.
    let mut per_text: HashMap<String, usize> = HashMap::new();
    for memory in &live {
        *per_text.entry(normalize_content(&memory.content)).or_default() += 1;
    }
    assert!(per_text.values().all(|&n| n == 1), "a normalised text is stored twice");
    for item in items.iter().filter(|i| i.kind == ItemKind::Plain) {
        assert!(per_text.contains_key(&normalize_content(&item.text)), "{:?} was never stored", item.text);
    }
    // Exactly one of each paraphrase pair.
    for pair in 0..20 {
        let stored = items
            .iter()
            .filter(|i| i.kind == ItemKind::Paraphrase { pair })
            .filter(|i| per_text.contains_key(&normalize_content(&i.text)))
            .count();
        assert_eq!(stored, 1, "paraphrase pair {pair}");
    }
    assert_eq!(live.len(), expected_live);
    assert_eq!(outcomes.iter().filter(|o| matches!(o, InsertOutcome::Inserted(_))).count(), expected_live);

    // Every duplicate points at a live row of the same text, or the stored paraphrase.
    for (item, outcome) in items.iter().zip(outcomes) {
        let target = by_id.get(&outcome.id()).copied();
        let target = target.ok_or_else(|| anyhow::anyhow!("{outcome:?} names no live row"))?;
        match (outcome, item.kind) {
            (InsertOutcome::Inserted(_) | InsertOutcome::ExactDuplicate(_), _) => {
                assert_eq!(normalize_content(target), normalize_content(&item.text));
            }
            (InsertOutcome::SemanticDuplicate { score, .. }, ItemKind::Paraphrase { pair }) => {
                assert!(*score >= THRESHOLD);
                assert!(target.starts_with(&format!("Paraphrase {pair}")), "{target:?}");
            }
            (InsertOutcome::SemanticDuplicate { .. }, ItemKind::Plain) => {
                anyhow::bail!("{:?} was a semantic duplicate of {target:?}", item.text)
            }
        }
    }
    Ok(())
}

backend_tests! {
    async fn defect_1_concurrent_first_open_migrates_once(db) {
        open_fresh_at_once(db, 5).await
    }

    async fn concurrent_inserts_match_a_serial_run(db) {
        let store = Arc::new(db.open().await?);
        let s = scope("global", "busy");
        let (items, expected_live) = workload(1);
        let items = Arc::new(items);
        let outcomes = insert_concurrently(&[Arc::clone(&store)], &s, &items).await?;
        check(&store, &s, &items, &outcomes, expected_live).await
    }

    async fn two_handles_racing_match_a_serial_run(db) {
        let first = Arc::new(db.open().await?);
        let second = Arc::new(db.open().await?);
        let s = scope("global", "busy");
        let (items, expected_live) = workload(2);
        let items = Arc::new(items);
        let outcomes = insert_concurrently(&[Arc::clone(&first), Arc::clone(&second)], &s, &items).await?;
        check(&first, &s, &items, &outcomes, expected_live).await?;
        // Both handles' indexes agree with the database.
        for store in [&first, &second] {
            let all = store.search(&s, crate::support::MODEL, &items[0].vector, 1000).await?;
            assert_eq!(all.len(), expected_live);
        }
        Ok(())
    }
}

/// Handles opened at once on a database nobody has opened before, as hooks start several
/// processes at once: each opens, migrates and writes without error.
async fn open_fresh_at_once(db: &crate::support::TestDb, rounds: usize) -> anyhow::Result<()> {
    const OPENERS: usize = 16;
    for round in 0..rounds {
        let fresh = crate::support::TestDb::new(db.backend()).await?;
        let location = Arc::new(fresh.location.clone());
        let barrier = Arc::new(tokio::sync::Barrier::new(OPENERS));
        let mut tasks = JoinSet::new();
        for i in 0..OPENERS {
            let (location, barrier) = (Arc::clone(&location), Arc::clone(&barrier));
            tasks.spawn(async move {
                barrier.wait().await;
                // What this checks is that the migrations run once and every opener then
                // works ("table memories already exists" was the defect), not how long 16
                // writers queue for the lock on a loaded 2-core machine: wait up to 30 s.
                let options = dedup_store::StoreOptions { busy_timeout: Duration::from_secs(30), ..Default::default() };
                let store = Store::open(&location, &options).await?;
                let id = crate::support::insert_text(&store, &scope("global", "hooks"), &format!("memory {i}")).await?;
                store.close().await;
                anyhow::Ok(id)
            });
        }
        let mut failures = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            if let Err(error) = joined? {
                failures.push(format!("{error:#}"));
            }
        }
        assert!(failures.is_empty(), "round {round}: {} of {OPENERS} openers failed: {failures:?}", failures.len());
        let store = fresh.open().await?;
        let listed = store.list(&ListFilter { namespace: Some("hooks".into()), ..ListFilter::default() }).await?;
        assert_eq!(listed.len(), OPENERS, "round {round}");
        store.close().await;
    }
    Ok(())
}
