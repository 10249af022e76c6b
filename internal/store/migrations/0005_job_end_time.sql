-- When a job ended, copied from data like the other indexed columns, so a server can load
-- only the jobs that have not ended or ended recently, and read the rest on demand.
-- Rows written before this version keep NULL: they are loaded as if they ended recently
-- and are next written, if ever, with the column set.
ALTER TABLE jobs ADD COLUMN end_time TEXT;
CREATE INDEX jobs_end_time ON jobs (end_time);
