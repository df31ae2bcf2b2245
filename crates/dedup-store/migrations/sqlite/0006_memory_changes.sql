-- The history of a memory's edits and deletions by a person or an agent: what the text
-- was before and after, who changed it (cli, mcp, http...) and when. A `forgotten`
-- memory is deprecated, not deleted, so undoing the change restores it; an `edited`
-- change is undone by editing the text back. `undone_by` is the change that undid this
-- one. Merges are in the merge ledger, not here. No foreign key to memories: the history
-- of a memory deleted for good stays readable.
CREATE TABLE memory_changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_id BIGINT NOT NULL,
    domain TEXT NOT NULL,
    namespace TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('edited', 'forgotten', 'restored')),
    before_text TEXT NULL,
    after_text TEXT NULL,
    source TEXT NOT NULL,
    undoes BIGINT NULL REFERENCES memory_changes (id),
    undone_by BIGINT NULL REFERENCES memory_changes (id),
    created_at TEXT NOT NULL
);
CREATE INDEX memory_changes_memory ON memory_changes (memory_id, id);
