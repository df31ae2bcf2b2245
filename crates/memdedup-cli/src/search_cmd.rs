//! `memdedup search`: recall the stored memories most similar to a query, from one
//! namespace or from every namespace that holds memories.

use std::path::Path;

use anyhow::{Context, Result};
use memdedup::Scope;
use serde_json::json;

use crate::UsageError;
use crate::cli::{GlobalArgs, SearchArgs};
use crate::input::read_text;
use crate::open::{config_file, local_embedder, model_dir, open_store};
use crate::output::{emit, plural};

pub(crate) async fn run(global: &GlobalArgs, args: &SearchArgs) -> Result<()> {
    let query = if args.query == "-" { read_text(Path::new("-"))? } else { args.query.clone() };
    if query.trim().is_empty() {
        return Err(UsageError("the query is empty".to_owned()).into());
    }
    let domain = args.domain.clone().unwrap_or_else(|| memdedup::DEFAULT_DOMAIN.to_owned());
    let named = match &args.namespace {
        Some(ns) => Some(Scope::new(&domain, ns).map_err(|e| UsageError(e.to_string()))?),
        None => {
            Scope::new(&domain, memdedup::DEFAULT_NAMESPACE).map_err(|e| UsageError(e.to_string()))?;
            None
        }
    };
    let config = config_file(global)?;
    let embedder = local_embedder(&config, model_dir(global, &config)?.as_deref(), true)?
        .context("search needs the embedding model")?;
    let store = open_store(global, &config).await?;
    let result = search(&store, embedder.as_ref(), &query, named.clone(), args).await;
    store.close().await;
    let (scopes, hits) = result?;
    if args.json {
        let results: Vec<_> = hits
            .iter()
            .map(|(memory, score)| {
                json!({"urn": memory.urn(), "id": memory.id, "scope": memory.scope, "score": score,
                       "kind": memory.kind, "title": memory.title, "content": memory.content})
            })
            .collect();
        let mut out = json!({"searched": scopes, "model": embedder.model_id(), "results": results});
        if let Some(scope) = &named {
            out["scope"] = json!(scope);
        }
        return emit(&format!("{out}\n"));
    }
    let place = match &named {
        Some(scope) => format!("in {scope}"),
        None => format!("in {}", plural(scopes.len(), "namespace")),
    };
    let mut out = format!("{} {place}\n", plural(hits.len(), "memory"));
    for (memory, score) in &hits {
        let text: String = memory.content.split_whitespace().collect::<Vec<_>>().join(" ");
        out.push_str(&format!("  {score:.4}  {}  {text}\n", memory.urn()));
    }
    emit(&out)
}

type Hits = (Vec<Scope>, Vec<(memdedup::Memory, f32)>);

async fn search(
    store: &memdedup::Store,
    embedder: &dyn memdedup::Embedder,
    query: &str,
    named: Option<Scope>,
    args: &SearchArgs,
) -> Result<Hits> {
    let scopes = match named {
        Some(scope) => vec![scope],
        None => store.scopes_with_memories(args.domain.as_deref()).await?,
    };
    let vector = embedder.embed_one(query).await.context("cannot embed the query")?;
    let limit = usize::try_from(args.limit).unwrap_or(5);
    let hits = store.search_scopes(&scopes, embedder.model_id(), &vector, limit).await?;
    Ok((scopes, hits))
}
