//! `memdedup undo`: restore the rows a merge (or a run's merges) changed.

use anyhow::{Context, Result};
use memdedup::MergeId;

use crate::UsageError;
use crate::cli::GlobalArgs;
use crate::cli::dedup::UndoArgs;
use crate::open::{config_file, open_store};
use crate::output::{emit, plural};

pub(crate) async fn run(global: &GlobalArgs, args: &UndoArgs) -> Result<()> {
    let merge: Option<MergeId> = args
        .merge_id
        .as_deref()
        .map(|raw| raw.trim().parse().map_err(|_| UsageError(format!("`{raw}` is not a merge id"))))
        .transpose()?;
    let config = config_file(global)?;
    let store = open_store(global, &config).await?;
    let block = !args.allow_remerge;
    let result = match (&merge, &args.run) {
        (Some(id), _) => {
            store.undo_merge(*id, block).await.map(|r| vec![r]).with_context(|| format!("cannot undo merge {id}"))
        }
        (None, Some(run)) => store.undo_run(run, block).await.with_context(|| format!("cannot undo run {run}")),
        (None, None) => Err(UsageError("give a merge id or --run RUN_ID".into()).into()),
    };
    store.close().await;
    let reports = result?;
    if args.json {
        emit(&format!("{}\n", serde_json::to_value(&reports)?))?;
        return Ok(());
    }
    let mut out = String::new();
    for r in &reports {
        let restored: Vec<String> = r.restored.iter().map(ToString::to_string).collect();
        out.push_str(&format!(
            "undid merge {}: restored memories {}{}\n",
            r.merge,
            restored.join(", "),
            if r.blocked_pairs.is_empty() {
                String::new()
            } else {
                format!("; {} will not be merged again", plural(r.blocked_pairs.len(), "pair"))
            }
        ));
    }
    if reports.is_empty() {
        out.push_str("nothing to undo\n");
    }
    emit(&out)
}
