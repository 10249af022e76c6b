-- Identity and security: users, API tokens, join tokens and the node certificates they
-- bought; settings; idempotent submits; who changed what, from where, in the event log;
-- and the agent that serves each node, for fencing. Values live as JSON in data, with the
-- columns a lookup needs copied out of it, as for queues and teams.

CREATE TABLE settings (
	name TEXT PRIMARY KEY,
	data TEXT NOT NULL
);

CREATE TABLE users (
	name TEXT PRIMARY KEY,
	data TEXT NOT NULL
);

-- hash is the hex SHA-256 of the token; the token itself is never stored.
CREATE TABLE tokens (
	id        TEXT PRIMARY KEY,
	hash      TEXT NOT NULL UNIQUE,
	user_name TEXT NOT NULL,
	data      TEXT NOT NULL
);
CREATE INDEX tokens_user_name ON tokens (user_name);

CREATE TABLE join_tokens (
	id   TEXT PRIMARY KEY,
	hash TEXT NOT NULL,
	data TEXT NOT NULL
);

-- The one certificate each node may use: a join or a renewal replaces it, and a
-- heartbeat with any other is refused.
CREATE TABLE node_certs (
	node   TEXT PRIMARY KEY,
	serial TEXT NOT NULL,
	data   TEXT NOT NULL
);

-- A submit's Idempotency-Key, per user: a retry with the same key gets the job the first
-- attempt created. hash is the hex SHA-256 of the request body.
CREATE TABLE idempotency (
	user_name TEXT NOT NULL,
	key       TEXT NOT NULL,
	hash      TEXT NOT NULL,
	job_id    BIGINT NOT NULL,
	created   TEXT NOT NULL,
	PRIMARY KEY (user_name, key)
);
CREATE INDEX idempotency_created ON idempotency (created);

-- The agent serving the node (instance, pid, address, certificate) and whether the node
-- is syncing, as JSON.
ALTER TABLE nodes ADD COLUMN data TEXT NOT NULL DEFAULT '{}';

-- How an attempt ended, in one sentence naming the rank at fault for a multi-node one.
ALTER TABLE attempts ADD COLUMN message TEXT NOT NULL DEFAULT '';

-- No index on kind, actor or time: every submit and transition appends an event, and each
-- index is more pages written per commit (three cost a third of durable submits/s), while
-- the audit trail, read rarely, filters well enough walking the events in ID order.
ALTER TABLE events ADD COLUMN role TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN source TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN before_value TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN after_value TEXT NOT NULL DEFAULT '';
