//! Check before store: a SQLite memory store, the local model and seed 004's checker
//! chain. Run with `cargo run -p memdedup --example check_before_store`.

use std::sync::Arc;

use memdedup::{DbLocation, DeduplicationConfig, DeduplicationService, NewMemory, Scope, Store, StoreOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("memdedup-example-{}", std::process::id()));
    let store = Arc::new(Store::open(&DbLocation::Sqlite(dir.join("memory.db")), &StoreOptions::default()).await?);
    let embedder = memdedup::default_embedder(None)?;
    let dedup = DeduplicationService::new(store.clone(), embedder, DeduplicationConfig::default());

    let decisions = Scope::namespace("decisions")?;
    for text in [
        "We decided to use PostgreSQL as the primary database for the billing service.",
        "We decided to use PostgreSQL as the main database for the billing service.",
    ] {
        let outcome = dedup.add(NewMemory::new(decisions.clone(), text).with_kind("decision")).await?;
        match (&outcome.urn, outcome.check.reason) {
            (Some(urn), _) => println!("stored {urn}"),
            (None, Some(reason)) => println!(
                "skipped: {reason} of {} (score {:.4})",
                outcome.check.matched_urn.as_deref().unwrap_or("?"),
                outcome.check.similarity_score.unwrap_or(0.0)
            ),
            (None, None) => unreachable!("a memory that is not stored is a duplicate"),
        }
    }
    store.close().await;
    std::fs::remove_dir_all(dir)?;
    Ok(())
}
