package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// The reads here serve a server that keeps only unfinished and recently ended jobs in
// memory (server.Config.KeepEnded): it loads those at start, remembers no more than the
// final state and team of the others, and reads them one job or one page at a time.
// A page is read in ID order along the primary key: the state and end time filters are
// written as expressions ("state || ''", COALESCE) that no index serves, so that SQLite
// does not pick the state or end_time index and sort every ended job to return a page.
// Loading at start does use the end_time index (migration 0005).

// EndedJob is what a server keeps of a job it does not hold in memory: enough to answer
// a dependency on it and to charge its team's fair share.
type EndedJob struct {
	ID    int64
	State api.JobState
	Team  string
}

// JobFilter selects jobs for JobsPage. Zero fields select everything.
type JobFilter struct {
	// After is the cursor: only jobs with a higher ID.
	After int64
	// States selects jobs in any of these states; nil means any state.
	States []api.JobState
	// EndedBefore, when set, selects only jobs that ended before it, or whose end time is
	// not stored (rows written before the column existed).
	EndedBefore time.Time
	// EndedSince, when set, selects only jobs that ended at or after it, or whose end time
	// is not stored.
	EndedSince time.Time
	// SubmitSince and SubmitUntil, when set, bound the submit time: since <= time < until.
	SubmitSince, SubmitUntil time.Time
	// Queue and User select by queue and owner.
	Queue, User string
	// Limit caps the jobs returned; 0 means no cap.
	Limit int
}

// terminalStates are the states no transition leaves, as SQL literals.
var terminalStates = func() string {
	var out []string
	for _, st := range []api.JobState{api.StateSucceeded, api.StateFailed, api.StateCancelled, api.StateTimeout} {
		out = append(out, "'"+string(st)+"'")
	}
	return strings.Join(out, ", ")
}()

// LoadRecentJobs returns the jobs that have not ended, ended at or after since, or whose
// end is not stored, ordered by ID.
func (s *sqlStore) LoadRecentJobs(ctx context.Context, since time.Time) ([]api.Job, error) {
	q := `SELECT data FROM jobs WHERE state NOT IN (` + terminalStates + `)
		OR end_time IS NULL OR end_time >= $1 ORDER BY id`
	jobs, err := query(ctx, s.read, q, []any{formatTime(since)}, scanJob)
	if err != nil {
		return nil, fmt.Errorf("store: load recent jobs: %w", err)
	}
	return jobs, nil
}

// LoadEndedBefore returns the ID, state and team of every job that ended before since,
// ordered by ID: the jobs LoadRecentJobs leaves out.
func (s *sqlStore) LoadEndedBefore(ctx context.Context, since time.Time) ([]EndedJob, error) {
	q := `SELECT id, state, team FROM jobs WHERE state IN (` + terminalStates + `)
		AND end_time < $1 ORDER BY id`
	out, err := query(ctx, s.read, q, []any{formatTime(since)}, func(rows *sql.Rows) (EndedJob, error) {
		var (
			e     EndedJob
			state string
		)
		err := rows.Scan(&e.ID, &state, &e.Team)
		e.State = api.JobState(state)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: load ended jobs: %w", err)
	}
	return out, nil
}

// Job returns the job with the given ID and its attempts, oldest first; found is false
// when there is no such job.
func (s *sqlStore) Job(ctx context.Context, id int64) (job api.Job, attempts []api.Attempt, found bool, err error) {
	jobs, err := query(ctx, s.read, "SELECT data FROM jobs WHERE id = $1", []any{id}, scanJob)
	if err != nil {
		return job, nil, false, fmt.Errorf("store: read job %d: %w", id, err)
	}
	if len(jobs) == 0 {
		return job, nil, false, nil
	}
	attempts, err = s.AttemptsBetween(ctx, id, id)
	if err != nil {
		return job, nil, false, err
	}
	return jobs[0], attempts, true, nil
}

// AttemptsBetween returns the attempts of the jobs with IDs from first to last, both
// included, ordered by job ID then attempt number.
func (s *sqlStore) AttemptsBetween(ctx context.Context, first, last int64) ([]api.Attempt, error) {
	const q = `SELECT job_id, attempt, state, assign_time, start_time, end_time, exit_code, reason, placements, message
		FROM attempts WHERE job_id >= $1 AND job_id <= $2 ORDER BY job_id, attempt`
	attempts, err := query(ctx, s.read, q, []any{first, last}, scanAttempt)
	if err != nil {
		return nil, fmt.Errorf("store: read attempts of jobs %d to %d: %w", first, last, err)
	}
	return attempts, nil
}

// JobsPage returns the jobs f selects, ordered by ID.
func (s *sqlStore) JobsPage(ctx context.Context, f JobFilter) ([]api.Job, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("store: jobs page: negative limit %d", f.Limit)
	}
	q := filtered{args: []any{f.After}}
	q.WriteString("SELECT data FROM jobs WHERE id > $1")
	if f.States != nil {
		if len(f.States) == 0 {
			return nil, nil
		}
		q.WriteString(" AND state || '' IN (")
		for i, st := range f.States {
			if i > 0 {
				q.WriteString(", ")
			}
			q.args = append(q.args, string(st))
			fmt.Fprintf(&q, "$%d", len(q.args))
		}
		q.WriteString(")")
	}
	q.andIf(!f.EndedBefore.IsZero(), "COALESCE(end_time, '') < $%d", formatTime(f.EndedBefore))
	q.andIf(!f.EndedSince.IsZero(), "COALESCE(end_time, '~') >= $%d", formatTime(f.EndedSince))
	q.andIf(!f.SubmitSince.IsZero(), "submit_time >= $%d", formatTime(f.SubmitSince))
	q.andIf(!f.SubmitUntil.IsZero(), "submit_time < $%d", formatTime(f.SubmitUntil))
	q.andIf(f.Queue != "", "queue = $%d", f.Queue)
	q.andIf(f.User != "", "user_name = $%d", f.User)
	q.orderByID(f.Limit)
	jobs, err := query(ctx, s.read, q.String(), q.args, scanJob)
	if err != nil {
		return nil, fmt.Errorf("store: jobs page: %w", err)
	}
	return jobs, nil
}

func scanJob(rows *sql.Rows) (api.Job, error) {
	var data []byte
	if err := rows.Scan(&data); err != nil {
		return api.Job{}, err
	}
	return decodeJob(data)
}
