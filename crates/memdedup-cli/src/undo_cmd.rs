//! `memdedup undo`: restore the rows a merge (or a run's merges) changed.

use anyhow::{Context, Result, anyhow};
use memdedup::{ChangeId, MergeFilter, MergeId, Store};

use crate::UsageError;
use crate::cli::dedup::UndoArgs;
use crate::cli::{GlobalArgs, PairJudgeArgs};
use crate::open::{config_file, open_service, open_store};
use crate::output::{emit, plural};

pub(crate) async fn run(global: &GlobalArgs, args: &UndoArgs) -> Result<()> {
    if let Some(raw) = &args.change {
        return undo_change(global, raw, args.json).await;
    }
    let merge: Option<MergeId> = args
        .merge_id
        .as_deref()
        .map(|raw| raw.trim().parse().map_err(|_| UsageError(format!("`{raw}` is not a merge id"))))
        .transpose()?;
    let config = config_file(global)?;
    let store = open_store(global, &config).await?;
    let block = !args.allow_remerge;
    let result = match (&merge, &args.run) {
        (Some(id), _) => store.undo_merge(*id, block).await.map(|r| vec![r]).map_err(|error| {
            // The store's refusals already read "cannot undo merge N: …" or "no merge with
            // id N"; the same words again in front would only repeat them.
            let named = error.to_string();
            if named.contains(&format!("merge {id}")) || named.contains(&format!("merge with id {id}")) {
                anyhow::Error::new(error)
            } else {
                anyhow::Error::new(error).context(format!("cannot undo merge {id}"))
            }
        }),
        (None, Some(run)) => match store.undo_run(run, block).await.with_context(|| format!("cannot undo run {run}")) {
            // A run with nothing left to undo is an error, as undoing an undone merge is: a
            // script must not take a mistyped or repeated run id for success.
            Ok(reports) if reports.is_empty() => Err(nothing_to_undo(&store, run).await),
            other => other,
        },
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
    emit(&out)
}

/// Why `undo --run RUN` found nothing to undo: the run's merges were all undone already,
/// or the ledger has no merge of that run.
async fn nothing_to_undo(store: &Store, run: &str) -> anyhow::Error {
    let filter = MergeFilter { run_id: Some(run.to_owned()), include_undone: true, ..MergeFilter::default() };
    match store.merges(&filter).await {
        Ok(merges) if !merges.is_empty() => anyhow!(
            "cannot undo run {run}: its {} undone already",
            if merges.len() == 1 { "merge was".to_owned() } else { format!("{} merges were", merges.len()) }
        ),
        Ok(_) => {
            anyhow!("cannot undo run {run}: the merge ledger has no merge of that run (see `memdedup merges --all`)")
        }
        Err(error) => anyhow::Error::new(error).context(format!("cannot undo run {run}: cannot read the merge ledger")),
    }
}

/// `memdedup undo --change ID`: an edit or a forget of a memory's history.
async fn undo_change(global: &GlobalArgs, raw: &str, json: bool) -> Result<()> {
    let id: ChangeId = raw.trim().parse().map_err(|_| UsageError(format!("`{raw}` is not a change id")))?;
    let dedup = open_service(global, &PairJudgeArgs::default()).await?;
    let result = dedup.undo_change(id, "cli").await;
    dedup.store().close().await;
    let (memory, undo) = result?;
    if json {
        let value =
            serde_json::json!({"undone": id, "change": undo, "memory": crate::memory_cmd::memory_json(&memory)});
        return emit(&format!("{value}\n"));
    }
    emit(&format!(
        "undid change {id}: memory {} ({}) is live with the text {:?} (recorded as change {undo})\n",
        memory.id,
        memory.urn(),
        crate::output::snippet(&memory.content, 70)
    ))
}
