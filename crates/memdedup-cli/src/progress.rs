//! A progress bar on stderr for long embedding runs.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Runs with more texts than this get a progress bar.
const MIN_ITEMS: usize = 200;

/// A progress bar for embedding `total` texts, or a hidden one when the run is short,
/// stderr is not a terminal, or `--quiet` is set.
pub(crate) fn embedding_bar(total: usize, quiet: bool) -> ProgressBar {
    if quiet || total <= MIN_ITEMS || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    let style = ProgressStyle::with_template("{spinner} embedding {pos}/{len} texts [{bar:30}] eta {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar
}
