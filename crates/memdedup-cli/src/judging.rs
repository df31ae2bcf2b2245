//! The judge and linkage flags shared by `scan`, `playbook dedup` and `eval`.

use std::sync::Arc;

use anyhow::{Result, bail};
use memdedup::{Linkage, LocalJudge, LocalJudgeParams, PairScorer};

use crate::cli::{GlobalArgs, JudgingArgs, LinkageArg, PairJudgeArg};

/// The learned pair judge when the flags, else `[dedup] judge` or $MEMDEDUP_DEDUP_JUDGE,
/// choose it, or none of them chooses a judge and `default_learned`, with the linkage
/// (default complete); `None` for any other judge. A model that cannot be loaded is an
/// error when `--judge learned` asked for it; otherwise cosine decides and a warning says
/// why.
pub(crate) fn learned_from_args(
    global: &GlobalArgs,
    args: &JudgingArgs,
    default_learned: bool,
) -> Result<Option<(Arc<dyn PairScorer>, Linkage)>> {
    let flagged = args.pair.judge.as_deref().is_some_and(|j| j.trim().eq_ignore_ascii_case("learned"));
    if flagged && args.pair.judge_params.is_some() {
        bail!("--judge-params needs --judge local");
    }
    let config = crate::open::config_file(global)?;
    let mut dedup = config.dedup_config()?;
    dedup.apply_judge(args.pair.judge.as_deref(), "--judge", args.pair.judge_params.as_deref(), "--judge-params")?;
    if dedup.pair_judge.learned().is_none() || !(flagged || default_learned || config.pair_judge_chosen()) {
        return Ok(None);
    }
    let linkage = linkage(args.linkage.unwrap_or(LinkageArg::Complete));
    match crate::open::pair_judge(global) {
        Ok(scorer) => Ok(Some((scorer as Arc<dyn PairScorer>, linkage))),
        Err(error) if flagged => Err(error),
        Err(error) => {
            tracing::warn!("the learned judge is unavailable ({error:#}); cosine decides");
            if !global.quiet {
                eprintln!("warning: the learned judge is unavailable ({error:#}); cosine decides");
            }
            Ok(None)
        }
    }
}

/// The local judge that the flags, else `[dedup] judge` (and `judge_params`) or
/// $MEMDEDUP_DEDUP_JUDGE, ask for (`None`: cosine alone), and the linkage (default:
/// single for cosine, complete for the local judge).
pub(crate) fn from_args(global: &GlobalArgs, args: &JudgingArgs) -> Result<(Option<Arc<LocalJudge>>, Linkage)> {
    let mut dedup = crate::open::config_file(global)?.dedup_config()?;
    dedup.apply_judge(args.pair.judge.as_deref(), "--judge", args.pair.judge_params.as_deref(), "--judge-params")?;
    let judge = dedup.pair_judge.local_judge().cloned().map(Arc::new);
    let default = if judge.is_some() { LinkageArg::Complete } else { LinkageArg::Single };
    Ok((judge, linkage(args.linkage.unwrap_or(default))))
}

/// The local judge for `--judge` and `--judge-params` (`None` for `--judge cosine`).
pub(crate) fn local_judge(judge: PairJudgeArg, params: Option<&std::path::Path>) -> Result<Option<LocalJudge>> {
    match (judge, params) {
        (PairJudgeArg::Cosine | PairJudgeArg::Learned, Some(_)) => bail!("--judge-params needs --judge local"),
        (PairJudgeArg::Cosine | PairJudgeArg::Learned, None) => Ok(None),
        (PairJudgeArg::Local, Some(path)) => Ok(Some(LocalJudge::new(crate::input::read_judge_params(path)?))),
        (PairJudgeArg::Local, None) => Ok(Some(LocalJudge::new(LocalJudgeParams::builtin()))),
    }
}

/// The core linkage for a flag value.
pub(crate) fn linkage(arg: LinkageArg) -> Linkage {
    match arg {
        LinkageArg::Single => Linkage::Single,
        LinkageArg::Survivor => Linkage::Survivor,
        LinkageArg::Complete => Linkage::Complete,
    }
}

/// `single`, `survivor` or `complete`.
pub(crate) fn linkage_name(linkage: Linkage) -> &'static str {
    match linkage {
        Linkage::Single => "single",
        Linkage::Survivor => "survivor",
        Linkage::Complete => "complete",
    }
}

/// Which judge and linkage formed the groups.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Judging {
    pub(crate) local: bool,
    pub(crate) learned: bool,
    pub(crate) linkage: Linkage,
}

impl Judging {
    /// Whether this is the seed's scan (cosine, chains of links): its output keeps the
    /// seed's shape.
    pub(crate) fn is_plain(self) -> bool {
        !self.local && !self.learned && self.linkage == Linkage::Single
    }

    pub(crate) fn judge(self) -> &'static str {
        if self.learned {
            "learned"
        } else if self.local {
            "local"
        } else {
            "cosine"
        }
    }
}
