-- The store's identity, recent captures that outlive a process, and what a vector embeds.

-- A random id made once per database. Caches shared between stores (a Redis
-- recent-capture cache) key their entries by it, so one store never sees another's.
CREATE TABLE store_identity (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    store_id TEXT NOT NULL CHECK (length(store_id) = 32)
);
INSERT INTO store_identity (singleton, store_id) VALUES (1, md5(random()::text || clock_timestamp()::text));

-- Seed 004's recent captures, kept in the store so that processes started minutes apart
-- (one per hook run) see each other's. The checker applies its window and capacity on
-- every record. Like seed 004's in-process cache, a capture outlives its memory: it
-- catches a repeat even of what the store no longer has.
CREATE TABLE recent_captures (
    domain TEXT NOT NULL,
    namespace TEXT NOT NULL,
    content_hash TEXT NOT NULL CHECK (length(content_hash) = 64),
    memory_id BIGINT NOT NULL,
    captured_at_us BIGINT NOT NULL,
    PRIMARY KEY (domain, namespace, content_hash)
);
CREATE INDEX recent_captures_age ON recent_captures (captured_at_us);

-- Whether a memory's vector embeds "{title}. {content}" (the HTTP service's nodes) rather
-- than the content alone, so that a backfill embeds what its writer would have.
ALTER TABLE memories ADD COLUMN embeds_title BOOLEAN NOT NULL DEFAULT FALSE;

-- Whether the memory was stored without the vector its writer wanted (the embedder was
-- down): a backfill embeds it once an embedder is back, found through a small index.
ALTER TABLE memories ADD COLUMN vector_pending BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX memories_vector_pending ON memories (domain, namespace, id) WHERE vector_pending AND NOT deprecated;
