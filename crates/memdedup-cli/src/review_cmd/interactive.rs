//! `memdedup review` in a terminal: one pending pair at a time, the two texts side by side
//! with their differences highlighted, the scores and reasons, and one key per decision
//! (merge, apart, skip, undo the last, quit), with a progress line.

use std::io::{IsTerminal, Write};

use anyhow::Result;
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::terminal;
use memdedup::crates::store::{Memory, Review, ReviewDecision, ReviewFilter, ReviewId, Store};

use super::{merge_entry, one_line};
use crate::cli::GlobalArgs;
use crate::cli::review::ReviewArgs;
use crate::output::plural;

/// Whether `memdedup review` decides interactively: no subcommand, no `--json` or
/// `--list`, and a terminal on both stdin and stdout.
pub(super) fn wanted(args: &ReviewArgs) -> bool {
    !args.json && !args.list && std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// One decision taken, so that `u` can take it back.
enum Taken {
    Merged { review: ReviewId, merge: memdedup::MergeId },
    Decided { review: ReviewId, apart: bool },
}

/// What was decided, for the closing line.
#[derive(Default)]
struct Tally {
    merged: usize,
    apart: usize,
    skipped: usize,
    undone: usize,
}

/// A key the review understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Merge,
    Apart,
    Skip,
    Undo,
    Quit,
}

pub(super) async fn run(global: &GlobalArgs, store: &Store, args: &ReviewArgs) -> Result<()> {
    let filter =
        ReviewFilter { domain: args.domain.clone(), namespace: args.namespace.clone(), all: false, limit: args.limit };
    let queue: Vec<Review> = store.reviews(&filter).await?;
    let mut out = std::io::stdout();
    if queue.is_empty() {
        writeln!(out, "no pair waits for review")?;
        return Ok(());
    }
    let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let mut taken: Vec<(usize, Taken)> = Vec::new();
    let mut tally = Tally::default();
    let mut at = 0;
    loop {
        if at >= queue.len() {
            // Everything decided: a last chance to take the last decision back.
            if taken.is_empty() {
                break;
            }
            write!(out, "\nall {} decided; [u] undo last  [q] quit > ", plural(queue.len(), "pair"))?;
            out.flush()?;
            let key = read_key()?;
            writeln!(out)?;
            if key != Key::Undo {
                break;
            }
            match undo_last(store, &mut taken, &mut tally).await {
                Ok(Some((index, line))) => {
                    at = index;
                    writeln!(out, "{line}")?;
                }
                Ok(None) => {}
                Err(error) => writeln!(out, "not undone: {error:#}")?,
            }
            continue;
        }
        // The entry as it now is: a memory may have changed since the list was read.
        let Some(review) = store.review(queue[at].id).await? else {
            at += 1;
            continue;
        };
        if review.status != memdedup::crates::store::ReviewStatus::Pending {
            writeln!(out, "review {} is {} now; next", review.id, review.status)?;
            at += 1;
            continue;
        }
        let low = store.get(review.low).await?;
        let high = store.get(review.high).await?;
        let width = terminal::size().map_or(100, |(w, _)| usize::from(w)).clamp(40, 240);
        write!(out, "{}", screen(&review, low.as_ref(), high.as_ref(), at, queue.len(), width, color))?;
        out.flush()?;
        let key = read_key()?;
        writeln!(out)?;
        let outcome = match key {
            Key::Quit => break,
            Key::Merge => merge_entry(store, review.id, None).await.map(|(_, record)| {
                tally.merged += 1;
                taken.push((at, Taken::Merged { review: review.id, merge: record.id }));
                format!(
                    "merged memory {} into {} (merge {}; undo with `memdedup{} undo {}`)",
                    record.absorbed.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
                    record.survivor,
                    record.id,
                    crate::dedup_cmd::undo_flags(global).0,
                    record.id
                )
            }),
            Key::Apart => store.decide_review(review.id, ReviewDecision::Apart).await.map_err(Into::into).map(|_| {
                tally.apart += 1;
                taken.push((at, Taken::Decided { review: review.id, apart: true }));
                "kept apart: the pair will not be proposed again".to_owned()
            }),
            Key::Skip => store.decide_review(review.id, ReviewDecision::Skip).await.map_err(Into::into).map(|_| {
                tally.skipped += 1;
                taken.push((at, Taken::Decided { review: review.id, apart: false }));
                "skipped".to_owned()
            }),
            Key::Undo => match undo_last(store, &mut taken, &mut tally).await {
                Ok(Some((index, line))) => {
                    at = index;
                    writeln!(out, "{line}")?;
                    continue;
                }
                Ok(None) => Ok("nothing to undo yet".to_owned()),
                Err(error) => Err(error),
            },
        };
        match outcome {
            Ok(line) => {
                writeln!(out, "review {}: {line}", review.id)?;
                if key != Key::Undo {
                    at += 1;
                }
            }
            // A refusal (a memory changed meanwhile) is shown; the pair stays.
            Err(error) => writeln!(out, "review {}: not decided: {error:#}", review.id)?,
        }
    }
    let left = queue.len().saturating_sub(at);
    writeln!(
        out,
        "reviewed: {} merged, {} kept apart, {} skipped, {} undone; {left} left for later",
        tally.merged, tally.apart, tally.skipped, tally.undone
    )?;
    Ok(())
}

/// Takes back the last decision of `taken` (it stays there when that fails): the index
/// of its pair in the queue and a line saying what was undone; `None` with nothing to undo.
async fn undo_last(
    store: &Store,
    taken: &mut Vec<(usize, Taken)>,
    tally: &mut Tally,
) -> Result<Option<(usize, String)>> {
    let Some((index, last)) = taken.pop() else { return Ok(None) };
    match undo(store, &last, tally).await {
        Ok(line) => {
            tally.undone += 1;
            Ok(Some((index, line)))
        }
        Err(error) => {
            taken.push((index, last));
            Err(error)
        }
    }
}

/// Takes back `last`: the merge is undone (its pair may be merged again later) and the
/// entry is pending again.
async fn undo(store: &Store, last: &Taken, tally: &mut Tally) -> Result<String> {
    match last {
        Taken::Merged { review, merge } => {
            store.undo_merge(*merge, false).await?;
            store.reopen_review(*review).await?;
            tally.merged -= 1;
            Ok(format!("undid merge {merge}: review {review} is pending again"))
        }
        Taken::Decided { review, apart } => {
            store.reopen_review(*review).await?;
            if *apart {
                tally.apart -= 1;
            } else {
                tally.skipped -= 1;
            }
            Ok(format!("review {review} is pending again"))
        }
    }
}

/// Reads one decision key in raw mode (no echo, no Enter needed). Ctrl-C and Esc quit.
fn read_key() -> Result<Key> {
    terminal::enable_raw_mode()?;
    let key = loop {
        match event::read() {
            Ok(Event::Key(KeyEvent { code, modifiers, kind: KeyEventKind::Press, .. })) => {
                let key = match code {
                    KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Some(Key::Quit),
                    KeyCode::Char('m' | 'M') => Some(Key::Merge),
                    KeyCode::Char('a' | 'A') => Some(Key::Apart),
                    KeyCode::Char('s' | 'S') => Some(Key::Skip),
                    KeyCode::Char('u' | 'U') => Some(Key::Undo),
                    KeyCode::Char('q' | 'Q') | KeyCode::Esc => Some(Key::Quit),
                    _ => None,
                };
                if let Some(key) = key {
                    break Ok(key);
                }
            }
            Ok(_) => {}
            Err(error) => break Err(error),
        }
    };
    terminal::disable_raw_mode()?;
    Ok(key?)
}

/// A word of a text, with whether it differs from the other text.
type Word<'a> = memdedup::DiffWord<'a>;

/// `words` wrapped into lines of at most `width` visible characters, differing words
/// highlighted (bold, red on the left, green on the right; `[-w-]` / `{+w+}` without
/// colour). Each line is paired with its visible width.
fn wrap(words: &[Word<'_>], width: usize, right: bool, color: bool) -> Vec<(String, usize)> {
    let mut lines = Vec::new();
    let (mut line, mut visible) = (String::new(), 0);
    for (word, differs) in words {
        let shown = match (differs, color) {
            (false, _) => (*word).to_owned(),
            (true, true) => format!("\x1b[1;{}m{word}\x1b[0m", if right { 32 } else { 31 }),
            (true, false) if right => format!("{{+{word}+}}"),
            (true, false) => format!("[-{word}-]"),
        };
        let len = word.chars().count() + if *differs && !color { 4 } else { 0 };
        if visible > 0 && visible + 1 + len > width {
            lines.push((std::mem::take(&mut line), visible));
            visible = 0;
        }
        if visible > 0 {
            line.push(' ');
            visible += 1;
        }
        line.push_str(&shown);
        visible += len;
    }
    if visible > 0 || lines.is_empty() {
        lines.push((line, visible));
    }
    lines
}

/// The screen of one pair: a progress line, the two texts side by side (one above the
/// other in a narrow terminal), the scores, the reasons and the keys.
fn screen(
    review: &Review,
    low: Option<&Memory>,
    high: Option<&Memory>,
    at: usize,
    total: usize,
    width: usize,
    color: bool,
) -> String {
    let text = |m: Option<&Memory>| m.map_or_else(|| "(deleted)".to_owned(), |m| one_line(&m.content));
    let (left_text, right_text) = (text(low), text(high));
    let (left, right) = memdedup::word_diff(&left_text, &right_text);
    let mut out = String::new();
    let probability = review.probability.map(|p| format!(" · P(duplicate) {p:.3}")).unwrap_or_default();
    out.push_str(&format!(
        "\n[{}/{}] review {} · {} · cosine {:.3}{probability} · {} judge ({})\n",
        at + 1,
        total,
        review.id,
        review.scope,
        review.cosine,
        review.judge,
        review.source
    ));
    let column = (width.saturating_sub(3) / 2).max(20);
    let header = |id| format!("memory {id}");
    if width >= 80 {
        let (a, b) = (wrap(&left, column, false, color), wrap(&right, column, true, color));
        out.push_str(&format!("{:<column$} │ {}\n", header(review.low), header(review.high)));
        for i in 0..a.len().max(b.len()) {
            let (line, visible) = a.get(i).cloned().unwrap_or_default();
            let pad = " ".repeat(column.saturating_sub(visible));
            let other = b.get(i).map_or("", |(l, _)| l.as_str());
            out.push_str(&format!("{line}{pad} │ {other}\n"));
        }
    } else {
        for (id, words, right) in [(review.low, &left, false), (review.high, &right, true)] {
            out.push_str(&format!("{}:\n", header(id)));
            for (line, _) in wrap(words, width.saturating_sub(2), right, color) {
                out.push_str(&format!("  {line}\n"));
            }
        }
    }
    for reason in &review.reasons {
        out.push_str(&format!("why: {reason}\n"));
    }
    out.push_str("[m] merge  [a] apart  [s] skip  [u] undo last  [q] quit > ");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_lines_keep_to_the_width_without_colour() {
        let words: Vec<Word<'_>> = "one two three four five six seven".split(' ').map(|w| (w, w == "four")).collect();
        let lines = wrap(&words, 12, true, false);
        assert!(lines.iter().all(|(_, visible)| *visible <= 12), "{lines:?}");
        let joined: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(joined.join(" | "), "one two | three | {+four+} | five six | seven");
    }
}
