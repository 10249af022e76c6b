package server

import (
	"context"
	"net/http"
	"slices"

	"github.com/rotahq/rota/internal/api"
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

// arrayElems returns the elements of array id in ID order, from memory and, for those
// that left it, from the store. Callers do not hold s.mu.
func (s *Server) arrayElems(ctx context.Context, id int64) ([]api.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.arrayElemsLocked(ctx, id)
}

// arrayElemsLocked is arrayElems for callers that hold s.mu. An array's elements have
// the consecutive IDs from its own on, so its evicted ones are read a page at a time from
// there until a job of another array, or none, follows.
func (s *Server) arrayElemsLocked(ctx context.Context, id int64) ([]api.Job, error) {
	elems := s.state.Jobs(func(j *api.Job) bool { return j.ArrayID == id })
	if s.state.EvictedCount() == 0 {
		return elems, nil
	}
	if _, evicted := s.state.Evicted(id); !evicted && (len(elems) == 0 || elems[0].ID != id) {
		return elems, nil // no such array
	}
	const page = 500
	after := id - 1
	var stored []api.Job
	for {
		jobs, err := s.store.JobsPage(ctx, store.JobFilter{After: after, Limit: page})
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if j.ArrayID != id {
				return mergeByID(elems, stored), nil
			}
			if _, ok := s.state.Evicted(j.ID); ok {
				stored = append(stored, j)
			}
		}
		if len(jobs) < page {
			return mergeByID(elems, stored), nil
		}
		after = jobs[len(jobs)-1].ID
	}
}

// mergeByID merges two lists of distinct jobs, each ascending by ID, into one.
func mergeByID(a, b []api.Job) []api.Job {
	if len(b) == 0 {
		return a
	}
	out := make([]api.Job, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].ID < b[0].ID {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
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
// merged are the page. Callers hold s.mu.
func (s *Server) withEvicted(ctx context.Context, mem []api.Job, more bool, ended []api.JobState,
	after int64, limit int, queue, user string, keep func(*api.Job) bool) ([]api.Job, bool, error) {
	if len(ended) == 0 || s.state.EvictedCount() == 0 {
		return mem, more, nil
	}
	f := store.JobFilter{After: after, States: ended, EndedBefore: s.state.EvictedBefore(),
		Queue: queue, User: user, Limit: limit + 1}
	var stored []api.Job
	for len(stored) <= limit {
		page, err := s.store.JobsPage(ctx, f)
		if err != nil {
			return nil, false, err
		}
		for i := range page {
			j := &page[i]
			if _, ok := s.state.Evicted(j.ID); ok && keep(j) {
				stored = append(stored, *j)
			}
		}
		if len(page) < f.Limit {
			break
		}
		f.After = page[len(page)-1].ID
	}
	if len(stored) == 0 {
		return mem, more, nil
	}
	if err := s.storedUsage(ctx, stored); err != nil {
		return nil, false, err
	}
	out := mergeByID(mem, stored)
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, more, nil
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
