-- Two indexes of jobs that no query reads, dropped: every submit wrote an entry in each,
-- and every change of a job's state moved its entry in jobs_state.
-- - jobs_state: the job pages filter on state || '', which no index serves, on purpose:
--   most jobs in the store have ended, and an index of four values would only be scanned
--   in full and then sorted by ID. Loading the server reads by end time and ID.
-- - jobs_team: nothing reads the store's jobs by team; memory holds each job's team.
DROP INDEX jobs_state;
DROP INDEX jobs_team;
