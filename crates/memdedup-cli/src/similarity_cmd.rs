//! `memdedup similarity`.

use anyhow::Result;
use serde_json::json;

use crate::cli::{GlobalArgs, SimilarityArgs};
use crate::output::{emit, score};

pub(crate) async fn run(global: &GlobalArgs, args: &SimilarityArgs) -> Result<()> {
    let embedder = memdedup::short_lived_embedder(global.model_dir.as_deref())?;
    let vectors = embedder.embed(&[args.first.clone(), args.second.clone()]).await?;
    let [a, b] = vectors.as_slice() else {
        anyhow::bail!("the embedder returned {} vectors for 2 texts", vectors.len());
    };
    let cosine = a.cosine(b)?;
    if args.json {
        emit(&format!("{}\n", json!({"model": embedder.model_id(), "cosine": score(cosine)})))?;
    } else {
        emit(&format!("{cosine:.4}\n"))?;
    }
    Ok(())
}
