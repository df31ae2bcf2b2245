//! Labelled memory files (`eval`, `calibrate`): one JSON object per line with `id`,
//! `cluster`, `text` and optionally `namespace` and `near`.

use std::collections::BTreeSet;

use anyhow::{Result, bail};
use memdedup::crates::core::Labelled;
use serde::Deserialize;
use serde_json::Value;

use crate::input::without_bom;

/// One line of a labelled file.
#[derive(Debug, Deserialize)]
pub(crate) struct LabelledLine {
    pub id: Value,
    pub cluster: String,
    pub text: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub near: Option<String>,
}

/// A labelled memory, checked.
pub(crate) struct Item {
    pub id: String,
    pub text: String,
    /// The `namespace` field, else the default namespace.
    pub namespace: String,
    pub label: Labelled,
}

/// Parses a labelled JSONL file: every line an object with `id`, `cluster` and `text`, and
/// optionally `namespace` and `near` (which must name a cluster of the file). Errors name
/// the line.
pub(crate) fn parse_labelled(text: &str, name: &str) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut ids = BTreeSet::new();
    for (n, line) in without_bom(text).lines().enumerate() {
        let at = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: LabelledLine =
            serde_json::from_str(line).map_err(|e| anyhow::anyhow!("{name}: line {at}: not a labelled memory: {e}"))?;
        let id = match &parsed.id {
            Value::String(s) if !s.is_empty() => s.clone(),
            Value::Number(n) => n.to_string(),
            other => bail!("{name}: line {at}: `id` must be a non-empty string or a number, not {other}"),
        };
        if parsed.cluster.trim().is_empty() {
            bail!("{name}: line {at}: `cluster` is empty");
        }
        if parsed.text.trim().is_empty() {
            bail!("{name}: line {at}: `text` is empty");
        }
        if !ids.insert(id.clone()) {
            bail!("{name}: line {at}: id {id:?} appears twice");
        }
        items.push((
            at,
            Item {
                id,
                text: parsed.text,
                namespace: parsed.namespace.unwrap_or_else(|| memdedup::DEFAULT_NAMESPACE.to_owned()),
                label: Labelled { cluster: parsed.cluster, near: parsed.near },
            },
        ));
    }
    if items.is_empty() {
        bail!("{name} has no labelled memories");
    }
    let clusters: BTreeSet<&str> = items.iter().map(|(_, i)| i.label.cluster.as_str()).collect();
    for (at, item) in &items {
        if let Some(near) = &item.label.near
            && !clusters.contains(near.as_str())
        {
            bail!("{name}: line {at}: `near` names cluster {near:?}, which no memory of the file has");
        }
    }
    Ok(items.into_iter().map(|(_, item)| item).collect())
}

/// Embeds the items' texts with the collection embedder, showing a progress bar; the
/// model id and the vectors, in item order. `name` names the file in errors.
pub(crate) async fn embed_items(
    global: &crate::cli::GlobalArgs,
    items: &[Item],
    name: &str,
) -> anyhow::Result<(String, Vec<memdedup::Embedding>)> {
    use anyhow::Context;
    let embedder = crate::open::collection_embedder(global).await??;
    let texts: Vec<&str> = items.iter().map(|i| i.text.as_str()).collect();
    let bar = crate::progress::embedding_bar(texts.len(), global.quiet);
    let progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let embeddings = memdedup::embed_texts(embedder.as_ref(), &texts, &progress).await;
    bar.finish_and_clear();
    let embeddings = embeddings.with_context(|| format!("cannot embed {name}"))?;
    Ok((embedder.model_id().to_owned(), embeddings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labelled_lines_are_checked_with_their_line_number() {
        let ok = "{\"id\": 1, \"cluster\": \"a\", \"text\": \"x\"}\n\n{\"id\": \"b\", \"cluster\": \"b\", \"text\": \"y\", \"near\": \"a\", \"error\": \"opposite\"}\n";
        let items = parse_labelled(ok, "f.jsonl").unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].id, "1");
        assert_eq!(items[1].label.near.as_deref(), Some("a"));
        for (text, expected) in [
            ("", "f.jsonl has no labelled memories"),
            ("{\"id\": 1, \"text\": \"x\"}", "f.jsonl: line 1: not a labelled memory: missing field `cluster`"),
            ("{\"id\": 1, \"cluster\": \"a\", \"text\": \" \"}", "line 1: `text` is empty"),
            ("{\"id\": null, \"cluster\": \"a\", \"text\": \"x\"}", "line 1: `id` must be"),
            (
                "{\"id\": 1, \"cluster\": \"a\", \"text\": \"x\"}\n{\"id\": 1, \"cluster\": \"a\", \"text\": \"y\"}",
                "line 2: id \"1\" appears twice",
            ),
            (
                "{\"id\": 1, \"cluster\": \"a\", \"text\": \"x\", \"near\": \"zz\"}",
                "line 1: `near` names cluster \"zz\"",
            ),
            ("not json", "line 1: not a labelled memory"),
        ] {
            let error = parse_labelled(text, "f.jsonl").err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
