-- The merge ledger: what each assisted-dedup merge changed, so that it can be listed and
-- undone exactly, and the pairs an undo keeps from merging again.

-- A merge's scope, the survivor's text after it, who decided, and two states of every
-- member (the survivor and the absorbed): `before_state` as it was just before the merge
-- (every memory column but change_seq, its vector row with the exact bytes in hex, every
-- edge touching it), `after_state` in the same shape right after it, which an undo
-- compares with the current rows to refuse when something changed since. Rows written
-- before the ledger have none of these and are not listed.
ALTER TABLE merge_log ADD COLUMN domain TEXT NULL;
ALTER TABLE merge_log ADD COLUMN namespace TEXT NULL;
ALTER TABLE merge_log ADD COLUMN final_text TEXT NULL;
ALTER TABLE merge_log ADD COLUMN text_source TEXT NULL
    CHECK (text_source IN ('canonical', 'existing', 'unchanged'));
-- The member whose text was taken, when text_source is 'existing'.
ALTER TABLE merge_log ADD COLUMN text_from BIGINT NULL;
ALTER TABLE merge_log ADD COLUMN judge TEXT NULL;
ALTER TABLE merge_log ADD COLUMN model TEXT NULL;
ALTER TABLE merge_log ADD COLUMN before_state JSONB NULL
    CHECK (before_state IS NULL OR jsonb_typeof(before_state) = 'object');
ALTER TABLE merge_log ADD COLUMN after_state JSONB NULL
    CHECK (after_state IS NULL OR jsonb_typeof(after_state) = 'object');
ALTER TABLE merge_log ADD COLUMN undone_at TIMESTAMPTZ NULL;
-- Listings by scope, and an undo's search for later merges of the same members.
CREATE INDEX merge_log_scope ON merge_log (domain, namespace, id);

-- Pairs of memories an undone merge keeps apart: an assisted dedup pass does not propose
-- them again, and a merge of them is refused, until the scope's pairs are cleared.
CREATE TABLE never_merge (
    domain TEXT NOT NULL,
    namespace TEXT NOT NULL,
    low BIGINT NOT NULL,
    high BIGINT NOT NULL,
    -- The undone merge that recorded the pair.
    merge_id BIGINT NOT NULL REFERENCES merge_log (id),
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (domain, namespace, low, high),
    CHECK (low < high)
);
