//! `memdedup merges`: the merge ledger.

use anyhow::{Context, Result};
use memdedup::{MergeFilter, Scope};

use crate::UsageError;
use crate::cli::GlobalArgs;
use crate::cli::dedup::MergesArgs;
use crate::open::{config_file, open_store};
use crate::output::{emit, plural, snippet};

pub(crate) async fn run(global: &GlobalArgs, args: &MergesArgs) -> Result<()> {
    let config = config_file(global)?;
    if args.clear_blocks {
        let scope =
            Scope::new(args.domain.as_deref().unwrap_or("global"), args.namespace.as_deref().unwrap_or("default"))
                .map_err(|e| UsageError(e.to_string()))?;
        let store = open_store(global, &config).await?;
        let cleared = store.clear_never_merge(&scope).await.context("cannot clear the blocks")?;
        store.close().await;
        if args.json {
            emit(&format!("{}\n", serde_json::json!({"scope": scope.to_string(), "cleared": cleared})))?;
        } else {
            emit(&format!(
                "cleared {} in {scope}\n",
                plural(usize::try_from(cleared).unwrap_or(usize::MAX), "blocked pair")
            ))?;
        }
        return Ok(());
    }
    let filter = MergeFilter {
        domain: args.domain.clone(),
        namespace: args.namespace.clone(),
        run_id: args.run.clone(),
        include_undone: args.all,
    };
    let store = open_store(global, &config).await?;
    let merges = store.merges(&filter).await.context("cannot read the merge ledger")?;
    store.close().await;
    if args.json {
        emit(&format!("{}\n", serde_json::to_value(&merges)?))?;
        return Ok(());
    }
    let mut out = String::new();
    for m in &merges {
        let absorbed: Vec<String> = m.absorbed.iter().map(ToString::to_string).collect();
        out.push_str(&format!(
            "merge {} {} {}: memory {} absorbed {} (judge {} {}, confidence {:.2}){}\n  {}\n",
            m.id,
            m.created_at.format("%Y-%m-%d %H:%M:%S"),
            m.run_id,
            m.survivor,
            absorbed.join(", "),
            m.judge,
            m.model,
            m.confidence,
            m.undone_at.map(|at| format!(" UNDONE {}", at.format("%Y-%m-%d %H:%M:%S"))).unwrap_or_default(),
            snippet(&m.final_text, 160)
        ));
    }
    if merges.is_empty() {
        out.push_str("no merges\n");
    }
    emit(&out)
}
