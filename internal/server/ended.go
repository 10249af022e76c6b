package server

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

// Jobs that ended more than KeepEnded ago live only in the store (cluster/evict.go); the
// state remembers that they existed and how they ended. What reads one job reads such a
// job from the store, so no answer depends on whether a job is still in memory.

// lookupJob returns job id and its attempts, oldest first, from memory or, when it has left
// memory, from the store; found is false when there is no such job. Callers do not hold
// s.mu: the store is read without it, which is safe because an evicted job never changes.
func (s *Server) lookupJob(ctx context.Context, id int64) (job api.Job, attempts []api.Attempt, found bool, err error) {
	s.mu.Lock()
	job, found = s.state.Job(id)
	attempts = s.state.Attempts(id)
	_, evicted := s.state.Evicted(id)
	s.mu.Unlock()
	if found || !evicted {
		return job, attempts, found, nil
	}
	return s.store.Job(ctx, id)
}

// jobLocked is lookupJob for callers that hold s.mu, which it keeps across the store read
// (one job by its key) so that the caller's check and change see one state.
func (s *Server) jobLocked(ctx context.Context, id int64) (api.Job, []api.Attempt, bool, error) {
	if j, ok := s.state.Job(id); ok {
		return j, s.state.Attempts(id), true, nil
	}
	if _, ok := s.state.Evicted(id); !ok {
		return api.Job{}, nil, false, nil
	}
	return s.store.Job(ctx, id)
}

// storeError answers a failed read of the store.
func storeError(w http.ResponseWriter, what string, err error) {
	writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: what + ": " + err.Error()})
}

// evictedView is what a read of the store needs to know of the jobs that left memory,
// taken under s.mu so that the read itself can run without it: how many there are, the
// cutoff they all ended before, and the state they left (load replaces it). Two views are
// equal only if no job left memory between them.
type evictedView struct {
	state  *cluster.State
	count  int
	before time.Time
}

// evictedView returns the current view. Callers hold s.mu.
func (s *Server) evictedView() evictedView {
	return evictedView{state: s.state, count: s.state.EvictedCount(), before: s.state.EvictedBefore()}
}

// The reads below run without s.mu, after the caller read memory under it and took an
// evictedView. That is safe because a job that left memory has ended and never changes,
// and every job that had left memory when the view was taken ended before its cutoff: so
// the ended jobs of the store before the cutoff hold every job the memory read missed.
// Some of them may be in memory still (one whose end was reported late), or have left it
// since the view; memory's copy answered for those, and mergeByID keeps it.

// arrayElems returns the elements of array id in ID order, from memory and, for those
// that left it, from the store. Callers do not hold s.mu.
func (s *Server) arrayElems(ctx context.Context, id int64) ([]api.Job, error) {
	s.mu.Lock()
	mem := s.memArray(id)
	ev := s.evictedView()
	s.mu.Unlock()
	s.hookBetweenReads()
	stored, err := s.storedArray(ctx, ev, id)
	if err != nil {
		return nil, err
	}
	return mergeByID(mem, stored), nil
}

// hookBetweenReads runs the test hook betweenReads, if set.
func (s *Server) hookBetweenReads() {
	if s.betweenReads != nil {
		s.betweenReads()
	}
}

// memArray returns the elements of array id that memory holds, in ID order. Callers hold
// s.mu.
func (s *Server) memArray(id int64) []api.Job {
	return s.state.Jobs(func(j *api.Job) bool { return j.ArrayID == id })
}

// storedArray reads from the store the elements of array id that had ended before the
// view's cutoff. An array's elements have the consecutive IDs from its own on, so they
// are read a page at a time from there until a job of another array, or none, follows.
// Callers do not hold s.mu.
func (s *Server) storedArray(ctx context.Context, ev evictedView, id int64) ([]api.Job, error) {
	if ev.count == 0 {
		return nil, nil
	}
	const page = 500
	f := store.JobFilter{After: id - 1, States: endedOf(nil), EndedBefore: ev.before, Limit: page}
	var stored []api.Job
	for {
		jobs, err := s.store.JobsPage(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if j.ArrayID != id {
				return stored, nil
			}
			stored = append(stored, j)
		}
		if len(jobs) < page {
			return stored, nil
		}
		f.After = jobs[len(jobs)-1].ID
	}
}

// mergeByID merges two lists of jobs, each ascending by ID with no ID twice, into one; a
// job in both is taken from a, memory's side, which is never older than the store's.
func mergeByID(a, b []api.Job) []api.Job {
	if len(b) == 0 {
		return a
	}
	out := make([]api.Job, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0].ID < b[0].ID:
			out, a = append(out, a[0]), a[1:]
		case a[0].ID > b[0].ID:
			out, b = append(out, b[0]), b[1:]
		default:
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// endedOf returns the ended states among want, all of them for nil (any state).
func endedOf(want []api.JobState) []api.JobState {
	var out []api.JobState
	for _, st := range []api.JobState{api.StateSucceeded, api.StateFailed, api.StateCancelled, api.StateTimeout} {
		if want == nil || slices.Contains(want, st) {
			out = append(out, st)
		}
	}
	return out
}

// withEvicted merges into a page of the job list, read from memory (mem, and more if a
// job in memory follows it), the evicted jobs of the states ended that belong on it, read
// from the store, and returns the page and whether another job follows. The order and
// the cursor are the list's: ascending ID, from after on. Each side holds at most limit
// jobs past the cursor and knows whether more follow, so the first limit of the two
// merged are the page. keep must not read the state: callers do not hold s.mu.
func (s *Server) withEvicted(ctx context.Context, ev evictedView, mem []api.Job, more bool, ended []api.JobState,
	after int64, limit int, queue, user string, keep func(*api.Job) bool) ([]api.Job, bool, error) {
	if len(ended) == 0 || ev.count == 0 {
		return mem, more, nil
	}
	s.hookBetweenReads()
	stored, err := s.storedPage(ctx, store.JobFilter{After: after, States: ended, EndedBefore: ev.before, Queue: queue, User: user}, limit, keep)
	if err != nil {
		return nil, false, err
	}
	if len(stored) == 0 {
		return mem, more, nil
	}
	if err := s.storedUsage(ctx, stored); err != nil {
		return nil, false, err
	}
	return pageOf(mergeByID(mem, stored), more, limit)
}

// pageOf cuts merged, the two sides of a page merged, to limit: more says whether memory
// has more past its side. A store side of limit+1 jobs makes merged longer than limit.
func pageOf(merged []api.Job, more bool, limit int) ([]api.Job, bool, error) {
	if len(merged) > limit {
		return merged[:limit], true, nil
	}
	return merged, more, nil
}

// storedPage reads from the store up to limit+1 jobs that f selects and keep admits, in ID
// order from f.After on. Callers do not hold s.mu.
func (s *Server) storedPage(ctx context.Context, f store.JobFilter, limit int, keep func(*api.Job) bool) ([]api.Job, error) {
	f.Limit = limit + 1
	var stored []api.Job
	for len(stored) <= limit {
		page, err := s.store.JobsPage(ctx, f)
		if err != nil {
			return nil, err
		}
		for i := range page {
			if keep(&page[i]) {
				stored = append(stored, page[i])
			}
		}
		if len(page) < f.Limit {
			break
		}
		f.After = page[len(page)-1].ID
	}
	if len(stored) > limit+1 {
		stored = stored[:limit+1]
	}
	return stored, nil
}

// storedUsage fills in the usage of evicted jobs from their last attempts, as the list
// does for the jobs in memory.
func (s *Server) storedUsage(ctx context.Context, jobs []api.Job) error {
	atts, err := s.store.AttemptsBetween(ctx, jobs[0].ID, jobs[len(jobs)-1].ID)
	if err != nil {
		return err
	}
	last := map[int64]api.Attempt{}
	for _, a := range atts {
		last[a.JobID] = a // attempts come oldest first
	}
	for i := range jobs {
		if a, ok := last[jobs[i].ID]; ok {
			jobs[i].Usage = s.attemptUsage(&a)
		}
	}
	return nil
}
