-- The initial memdedup schema for Postgres.
--
-- Vectors are little-endian f32 bytes.

CREATE TABLE memories (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    domain TEXT NOT NULL,
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL,
    title TEXT NULL,
    content TEXT NOT NULL,
    content_hash TEXT NOT NULL CHECK (length(content_hash) = 64),
    lifecycle TEXT NOT NULL DEFAULT 'ACTIVE' CHECK (lifecycle IN ('ACTIVE', 'WEAK', 'DORMANT')),
    helpful BIGINT NOT NULL DEFAULT 0 CHECK (helpful >= 0),
    harmful BIGINT NOT NULL DEFAULT 0 CHECK (harmful >= 0),
    occurrence_count BIGINT NOT NULL DEFAULT 1,
    dedup_verified BOOLEAN NOT NULL DEFAULT FALSE,
    dedup_attempts INTEGER NOT NULL DEFAULT 0,
    dedup_last_error TEXT NULL,
    deprecated BOOLEAN NOT NULL DEFAULT FALSE,
    merged_into BIGINT NULL REFERENCES memories (id),
    metadata JSONB NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- The scope_state.version of the last write that changed this row's liveness or vector.
    change_seq BIGINT NOT NULL
);

-- At most one live row per normalised text in a scope: exact duplicates are impossible.
CREATE UNIQUE INDEX memories_live_content_hash ON memories (domain, namespace, content_hash) WHERE NOT deprecated;
-- The queue of live memories an assisted dedup pass has not verified yet.
CREATE INDEX memories_dedup_queue ON memories (deprecated, dedup_verified, id);
-- Index refreshes read a scope's rows changed since a watermark.
CREATE INDEX memories_scope_change ON memories (domain, namespace, change_seq);

CREATE TABLE embeddings (
    memory_id BIGINT PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL CHECK (dims > 0),
    vector BYTEA NOT NULL
);

CREATE TABLE embedding_cache (
    model TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    dims INTEGER NOT NULL CHECK (dims > 0),
    vector BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (model, text_hash)
);

CREATE TABLE edges (
    source BIGINT NOT NULL REFERENCES memories (id),
    target BIGINT NOT NULL REFERENCES memories (id),
    kind TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (source, target, kind)
);
CREATE INDEX edges_target ON edges (target);

CREATE TABLE merge_log (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id TEXT NOT NULL,
    survivor BIGINT NOT NULL REFERENCES memories (id),
    absorbed_ids JSONB NOT NULL CHECK (jsonb_typeof(absorbed_ids) = 'array'),
    canonical_text TEXT NULL,
    confidence DOUBLE PRECISION NULL,
    reason TEXT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX merge_log_run ON merge_log (run_id);

-- The change watermark: bumped, under the scope's write lock, by every write that changes
-- which live rows or vectors a scope has.
CREATE TABLE scope_state (
    domain TEXT NOT NULL,
    namespace TEXT NOT NULL,
    version BIGINT NOT NULL,
    PRIMARY KEY (domain, namespace)
);

CREATE TABLE dedup_skips (
    domain TEXT NOT NULL,
    namespace TEXT NOT NULL,
    reason TEXT NOT NULL,
    count BIGINT NOT NULL DEFAULT 0 CHECK (count >= 0),
    PRIMARY KEY (domain, namespace, reason)
);
