-- The same text runs on SQLite and PostgreSQL, so it uses only types and syntax both accept.
-- Times are TEXT in UTC, "2006-01-02T15:04:05.000000000Z": fixed width, so they sort and
-- compare as strings, and the zero time (year 1) fits, which unix nanoseconds cannot hold.
-- A column is nullable only where the Go field is a pointer.

-- The indexed columns copy fields of data, the whole job as JSON, so queries can filter
-- without decoding; data is what LoadJobs returns, so no field is lost.
CREATE TABLE jobs (
	id          BIGINT PRIMARY KEY,
	state       TEXT NOT NULL,
	queue       TEXT NOT NULL,
	team        TEXT NOT NULL,
	user_name   TEXT NOT NULL,
	name        TEXT NOT NULL,
	submit_time TEXT NOT NULL,
	data        TEXT NOT NULL
);
CREATE INDEX jobs_state ON jobs (state);
CREATE INDEX jobs_queue ON jobs (queue);
CREATE INDEX jobs_team ON jobs (team);
CREATE INDEX jobs_user_name ON jobs (user_name);
CREATE INDEX jobs_submit_time ON jobs (submit_time);

CREATE TABLE attempts (
	job_id      BIGINT NOT NULL REFERENCES jobs (id),
	attempt     INTEGER NOT NULL,
	state       TEXT NOT NULL,
	assign_time TEXT NOT NULL,
	start_time  TEXT,
	end_time    TEXT,
	exit_code   INTEGER,
	reason      TEXT NOT NULL,
	placements  TEXT NOT NULL,
	PRIMARY KEY (job_id, attempt)
);

CREATE TABLE nodes (
	name           TEXT PRIMARY KEY,
	state          TEXT NOT NULL,
	last_heartbeat TEXT NOT NULL,
	inventory      TEXT NOT NULL
);

CREATE TABLE queues (
	name TEXT PRIMARY KEY,
	data TEXT NOT NULL
);

-- Event IDs are assigned by the store as MAX(id)+1 under the write lock rather than by an
-- autoincrement column, whose syntax differs between the backends and whose values, in
-- PostgreSQL, follow insert order rather than commit order.
CREATE TABLE events (
	id         BIGINT PRIMARY KEY,
	time       TEXT NOT NULL,
	actor      TEXT NOT NULL,
	kind       TEXT NOT NULL,
	job_id     BIGINT NOT NULL,
	attempt    INTEGER NOT NULL,
	node       TEXT NOT NULL,
	from_state TEXT NOT NULL,
	to_state   TEXT NOT NULL,
	reason     TEXT NOT NULL,
	message    TEXT NOT NULL
);
CREATE INDEX events_job_id ON events (job_id, id);
