-- The fenced leader of several servers on one PostgreSQL database (see lease.go). One row
-- holds the current leader term, which every write transaction of a fenced server checks;
-- a server that takes the lease increments it, so a deposed leader's late commit fails.
-- replicas lists the servers that have announced themselves, for `rota admin status`.
-- SQLite, whose file one server holds alone, carries the tables but never uses them.

CREATE TABLE leader (
	id     INTEGER PRIMARY KEY CHECK (id = 1),
	term   BIGINT NOT NULL,
	holder TEXT NOT NULL,
	url    TEXT NOT NULL,
	since  TEXT NOT NULL
);
INSERT INTO leader (id, term, holder, url, since) VALUES (1, 0, '', '', '');

CREATE TABLE replicas (
	id      TEXT PRIMARY KEY,
	host    TEXT NOT NULL,
	url     TEXT NOT NULL,
	started TEXT NOT NULL,
	seen    TEXT NOT NULL
);
