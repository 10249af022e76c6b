-- Teams and reservations, kept like queues: the whole value as JSON in data, with the
-- columns a query may filter on copied out of it.

CREATE TABLE teams (
	name TEXT PRIMARY KEY,
	data TEXT NOT NULL
);

CREATE TABLE reservations (
	id         BIGINT PRIMARY KEY,
	team       TEXT NOT NULL,
	start_time TEXT NOT NULL,
	end_time   TEXT NOT NULL,
	data       TEXT NOT NULL
);
