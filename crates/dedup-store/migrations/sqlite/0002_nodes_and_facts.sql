-- Nodes that may repeat a text, typed search, and the fact memory.

-- Memories whose kind is not deduplicated (episodes, signals, trades, …) may repeat an
-- equal text in their scope; only memories with unique_content are kept unique.
ALTER TABLE memories ADD COLUMN unique_content BOOLEAN NOT NULL DEFAULT TRUE;
DROP INDEX memories_live_content_hash;
CREATE UNIQUE INDEX memories_live_content_hash ON memories (domain, namespace, content_hash)
    WHERE NOT deprecated AND unique_content;
-- Listings and typed searches filter a scope by kind.
CREATE INDEX memories_scope_kind ON memories (domain, namespace, kind, id);

-- Deleting a memory removes its row, which a refresh by change_seq cannot see: a delete
-- sets reset_version to the version it wrote, and an index older than that reloads fully.
ALTER TABLE scope_state ADD COLUMN reset_version BIGINT NOT NULL DEFAULT 0;

-- Facts about the user, injected into prompts; unique per scope by casefolded content.
CREATE TABLE facts (
    id TEXT PRIMARY KEY CHECK (length(id) = 13 AND substr(id, 1, 5) = 'fact_'),
    domain TEXT NOT NULL,
    namespace TEXT NOT NULL,
    content TEXT NOT NULL,
    content_key TEXT NOT NULL,
    category TEXT NOT NULL
        CHECK (category IN ('preference', 'knowledge', 'context', 'behavior', 'goal', 'correction')),
    confidence DOUBLE PRECISION NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
    source TEXT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX facts_scope_content ON facts (domain, namespace, content_key);
CREATE INDEX facts_scope_confidence ON facts (domain, namespace, confidence);

-- The user context and history summaries of a scope, as one JSON object.
CREATE TABLE memory_profiles (
    domain TEXT NOT NULL,
    namespace TEXT NOT NULL,
    profile TEXT NOT NULL CHECK (json_valid(profile) AND json_type(profile) = 'object'),
    updated_at TEXT NOT NULL,
    PRIMARY KEY (domain, namespace)
);
