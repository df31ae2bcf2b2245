//! A memory's history of edits and deletions ([`Change`]): who changed what, and how to
//! undo it. Merges are recorded in the merge ledger instead ([`MergeRecord`](crate::MergeRecord)).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{MemoryId, Scope};

/// Longest `source` (who made a change: `cli`, `mcp`, `http`...) the history keeps, in bytes.
pub const MAX_CHANGE_SOURCE_BYTES: usize = 64;

/// A change's id: unique within one database, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChangeId(i64);

impl ChangeId {
    /// Wraps a raw id.
    pub const fn new(id: i64) -> ChangeId {
        ChangeId(id)
    }

    /// The raw id.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for ChangeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for ChangeId {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<ChangeId, Self::Err> {
        s.parse().map(ChangeId)
    }
}

/// What a change did to its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeAction {
    /// The text was replaced (`before` → `after`).
    Edited,
    /// The memory was retired: no longer live, searched or listed, but kept so that the
    /// change can be undone (`before` is its text).
    Forgotten,
    /// A forgotten memory was made live again (`after` is its text).
    Restored,
}

impl ChangeAction {
    /// The lowercase name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeAction::Edited => "edited",
            ChangeAction::Forgotten => "forgotten",
            ChangeAction::Restored => "restored",
        }
    }
}

impl fmt::Display for ChangeAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ChangeAction {
    type Err = String;

    fn from_str(s: &str) -> Result<ChangeAction, String> {
        match s {
            "edited" => Ok(ChangeAction::Edited),
            "forgotten" => Ok(ChangeAction::Forgotten),
            "restored" => Ok(ChangeAction::Restored),
            other => Err(format!("unknown change {other:?}: expected edited, forgotten or restored")),
        }
    }
}

/// One entry of a memory's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// The change's id (what `undo` takes).
    pub id: ChangeId,
    /// The memory changed.
    pub memory: MemoryId,
    /// Its scope.
    pub scope: Scope,
    /// What was done.
    pub action: ChangeAction,
    /// The text before: the old text of an edit, the text of a forgotten memory.
    pub before: Option<String>,
    /// The text after: the new text of an edit, the text of a restored memory.
    pub after: Option<String>,
    /// Who made it: `cli`, `mcp`, `http`, `ui`...
    pub source: String,
    /// The change this one undid, if it is an undo.
    pub undoes: Option<ChangeId>,
    /// The change that undid this one, if any.
    pub undone_by: Option<ChangeId>,
    /// When.
    pub at: DateTime<Utc>,
}

impl Change {
    /// Whether [`Store::undo_change`](crate::Store::undo_change) can take it: an edit or a
    /// deletion not undone yet (whether the memory still is as the change left it is
    /// checked when undoing).
    pub fn undoable(&self) -> bool {
        self.undone_by.is_none() && matches!(self.action, ChangeAction::Edited | ChangeAction::Forgotten)
    }
}
