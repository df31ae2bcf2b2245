-- The review queue: pairs of live memories a judge was unsure of, waiting for a person or
-- an agent to decide. One entry per pair of a scope; it records both memories' change_seq
-- when queued, so an entry whose memories changed (or were merged or deleted) since is
-- expired and cannot be decided. A decision is final: `merged` (through the merge ledger,
-- `merge_id`), `apart` (the pair is never queued again) or `skipped` (queued again when a
-- judge is unsure of it again). Deleting a memory deletes its entries.
CREATE TABLE review_queue (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    domain TEXT NOT NULL,
    namespace TEXT NOT NULL,
    low BIGINT NOT NULL REFERENCES memories (id),
    high BIGINT NOT NULL REFERENCES memories (id),
    low_seq BIGINT NOT NULL,
    high_seq BIGINT NOT NULL,
    cosine REAL NOT NULL,
    probability REAL NULL,
    judge TEXT NOT NULL,
    reasons JSONB NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(reasons) = 'array'),
    source TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'merged', 'apart', 'skipped')),
    merge_id BIGINT NULL REFERENCES merge_log (id),
    created_at TIMESTAMPTZ NOT NULL,
    decided_at TIMESTAMPTZ NULL,
    UNIQUE (domain, namespace, low, high),
    CHECK (low < high)
);
CREATE INDEX review_queue_status ON review_queue (status, domain, namespace, id);
