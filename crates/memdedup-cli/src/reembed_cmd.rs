//! `memdedup reembed`: embeds memories stored while the embedder was down.

use anyhow::{Context, Result};
use memdedup::Scope;

use crate::UsageError;
use crate::cli::{GlobalArgs, ReembedArgs};
use crate::open::open_service;
use crate::output::{emit, plural};

pub(crate) async fn run(global: &GlobalArgs, args: &ReembedArgs) -> Result<()> {
    let scope = match &args.namespace {
        Some(namespace) => Some(Scope::new(&args.domain, namespace).map_err(|e| UsageError(e.to_string()))?),
        None => None,
    };
    let service = open_service(global, &crate::cli::PairJudgeArgs::default()).await?;
    if service.embedder().is_none() {
        service.store().close().await;
        // open_service has logged why; say what to do.
        anyhow::bail!("no embedder: install the model with `cargo xtask fetch-model` (or pass --model-dir)");
    }
    let batch = usize::try_from(args.batch).unwrap_or(64);
    let report = service.backfill(scope.as_ref(), args.all_missing, batch, 0).await;
    service.store().close().await;
    let report = report.context("reembed stopped; what was embedded before the failure stays embedded")?;
    if args.json {
        emit(&format!("{}\n", serde_json::to_string(&report)?))
    } else {
        let mut line = format!("embedded {} of {} examined", plural(report.embedded, "memory"), report.examined);
        if report.changed > 0 {
            line.push_str(&format!(", {} changed meanwhile (left alone)", report.changed));
        }
        if report.refused > 0 {
            line.push_str(&format!(", {} refused (vector dimensions differ from the namespace's)", report.refused));
        }
        emit(&format!("{line}\n"))
    }
}
