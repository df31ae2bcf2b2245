//! `memdedup similarity`.

use anyhow::Result;
use serde_json::json;

use crate::cli::{GlobalArgs, PairJudgeArg, SimilarityArgs};
use crate::output::{emit, score};

pub(crate) async fn run(global: &GlobalArgs, args: &SimilarityArgs) -> Result<()> {
    let config = crate::open::config_file(global)?;
    let model_dir = crate::open::model_dir(global, &config)?;
    let embedder = crate::open::local_embedder(&config, model_dir.as_deref(), true)??;
    let vectors = embedder.embed(&[args.first.clone(), args.second.clone()]).await?;
    let [a, b] = vectors.as_slice() else {
        anyhow::bail!("the embedder returned {} vectors for 2 texts", vectors.len());
    };
    let cosine = a.cosine(b)?;
    let (first, second) = (args.first.as_str(), args.second.as_str());
    let shown = shown_cosine(cosine, first == second);
    let judgement = match args.judge {
        PairJudgeArg::Cosine => None,
        PairJudgeArg::Local => Some(memdedup::LocalJudge::default().judge(first, second, cosine)),
        PairJudgeArg::Learned => {
            let model = crate::open::pair_judge(global)?;
            let settings = model.settings();
            Some(if cosine < settings.candidate_floor {
                settings.below_floor(first, second, cosine)
            } else {
                let (a, b, judge) = (args.first.clone(), args.second.clone(), model.clone());
                let scores = tokio::task::spawn_blocking(move || judge.scores(&[(a.as_str(), b.as_str())])).await??;
                settings.judge(first, second, &scores[0], cosine)
            })
        }
    };
    if args.json {
        let mut out = json!({"model": embedder.model_id(), "cosine": shown});
        if let Some(j) = &judgement {
            out["judgement"] = json!({
                "judge": if args.judge == PairJudgeArg::Learned { "learned" } else { "local" },
                "verdict": j.verdict.as_str(),
                "probability": j.probability.map(score),
                "relation": j.relation.map(|r| r.as_str()),
                "reasons": j.reasons,
            });
        }
        emit(&format!("{out}\n"))?;
    } else {
        let mut out = format!("{shown:.4}\n");
        if let Some(j) = &judgement {
            out.push_str(&format!("{}\n", j.verdict.as_str()));
            for reason in &j.reasons {
                out.push_str(&format!("  {reason}\n"));
            }
        }
        emit(&out)?;
    }
    Ok(())
}

/// The cosine as printed, to four decimals: texts that differ never print 1.0000 (a
/// cosine that rounds up to one is shown as 0.9999), so two long texts that differ only
/// in a sentence do not read as identical.
fn shown_cosine(cosine: f32, identical: bool) -> f64 {
    let rounded = score(cosine);
    if !identical && rounded >= 1.0 { 0.9999 } else { rounded }
}

#[cfg(test)]
mod tests {
    use super::shown_cosine;

    #[test]
    fn differing_texts_never_show_one() {
        assert_eq!(shown_cosine(0.999_96, false), 0.9999);
        assert_eq!(shown_cosine(1.0, false), 0.9999);
        assert_eq!(shown_cosine(0.999_96, true), 1.0);
        assert_eq!(shown_cosine(0.912_34, false), 0.9123);
    }
}
