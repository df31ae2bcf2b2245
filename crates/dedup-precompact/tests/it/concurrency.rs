//! Concurrent adds give the serial outcome: one live row per exact text, one per
//! paraphrase group.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use dedup_core::normalize_content;
use dedup_precompact::DeduplicationService;
use dedup_store::{ListFilter, NewMemory};

use crate::backend_tests;
use crate::support::{TableEmbedder, TestStore, long, service};

/// 400 texts: 240 unique, 120 exact repeats of them (30%), 40 forming 20 paraphrase
/// pairs (10%), in a fixed shuffled order. Returns the texts, the embedder that makes the
/// pairs paraphrases, and each text's group key (its paraphrase group, else its
/// normalised text).
fn workload() -> (Vec<String>, TableEmbedder, HashMap<String, String>) {
    let mut embedder = TableEmbedder::new();
    let mut texts = Vec::new();
    let mut group = HashMap::new();
    for i in 0..240 {
        let text = long(&format!("Lesson {i}: measure before optimising code path {}", i * 7919 % 1000));
        group.insert(normalize_content(&text), format!("u{i}"));
        texts.push(text);
    }
    for i in 0..120 {
        let original = &texts[i * 2];
        let repeat = if i % 2 == 0 { original.to_uppercase() } else { format!("  {original}  ") };
        texts.push(repeat);
    }
    for i in 0..20 {
        let a = long(&format!("Pair {i}: prefer small pull requests for review speed"));
        let b = long(&format!("Pair {i}: small pull requests get reviewed faster"));
        embedder = embedder.with_paraphrase(&a, &b, 0.96);
        group.insert(normalize_content(&a), format!("p{i}"));
        group.insert(normalize_content(&b), format!("p{i}"));
        texts.push(a);
        texts.push(b);
    }
    // A fixed shuffle (multiplicative stride) so repeats and pairs interleave.
    let n = texts.len();
    let shuffled: Vec<String> = (0..n).map(|k| texts[(k * 163) % n].clone()).collect();
    (shuffled, embedder, group)
}

/// The group keys of the live memories in `namespace`, with multiplicity.
async fn live_groups(db: &TestStore, namespace: &str, group: &HashMap<String, String>) -> Vec<String> {
    let filter =
        ListFilter { domain: Some(db.domain.clone()), namespace: Some(namespace.into()), ..Default::default() };
    let mut keys: Vec<String> = db
        .store
        .list(&filter)
        .await
        .unwrap()
        .iter()
        .map(|m| group.get(&normalize_content(&m.content)).cloned().unwrap_or_else(|| format!("?{}", m.content)))
        .collect();
    keys.sort();
    keys
}

async fn run_concurrently(services: &[DeduplicationService], db: &TestStore, namespace: &str, texts: &[String]) {
    let texts = Arc::new(texts.to_vec());
    let mut tasks = Vec::new();
    for task in 0..16 {
        let service = services[task % services.len()].clone();
        let texts = texts.clone();
        let scope = db.scope(namespace);
        tasks.push(tokio::spawn(async move {
            for text in texts.iter().skip(task).step_by(16) {
                service.add(NewMemory::new(scope.clone(), text.clone())).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

backend_tests! {
    async fn sixteen_tasks_store_each_text_and_each_paraphrase_group_once(db) {
        let (texts, embedder, group) = workload();
        let embedder = Arc::new(embedder);
        let dedup = service(&db, embedder.clone());
        for text in &texts {
            dedup.add(NewMemory::new(db.scope("serial"), text.clone())).await.unwrap();
        }
        let serial = live_groups(&db, "serial", &group).await;
        assert_eq!(serial.len(), 260, "240 unique texts and 20 paraphrase groups");
        assert_eq!(serial.iter().collect::<BTreeSet<_>>().len(), 260, "no group twice");

        run_concurrently(std::slice::from_ref(&dedup), &db, "concurrent", &texts).await;
        assert_eq!(live_groups(&db, "concurrent", &group).await, serial);

        // Two handles (two pools, two in-process indexes): what two processes do.
        let other = DeduplicationService::new(db.reopen().await, embedder, dedup.config().clone());
        run_concurrently(&[dedup, other], &db, "two-handles", &texts).await;
        assert_eq!(live_groups(&db, "two-handles", &group).await, serial);
    }
}
